"""ix_threads_resource_created and ix_threads_resource_updated end with the thread id

A threads listing orders by (time, id) and a keyset page (threads after:/before:) bounds both; with the
id in the index, such a page and its count read the index alone instead of looking up every thread
counted (on a resource of 100,000 threads, a count after a cursor near the top read 100,000 rows of
the table). The listing's ties are in code point order; on SQLite and on a PostgreSQL database of the
C collation the index holds them in that order too.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-06
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXES = {"ix_threads_resource_created": "created_at", "ix_threads_resource_updated": "updated_at"}


def upgrade() -> None:
    for name, column in INDEXES.items():
        op.drop_index(name, table_name="threads")
        op.create_index(name, "threads", ["resource_id", column, "id"])


def downgrade() -> None:
    for name, column in INDEXES.items():
        op.drop_index(name, table_name="threads")
        op.create_index(name, "threads", ["resource_id", column])
