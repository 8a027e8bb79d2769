"""thread_deletions: threads deleted, for thread subscriptions resumed from a cursor

threadUpdated(after:) replays the threads changed after its cursor from the listing, which no longer
holds a deleted thread; on a server that keeps changes (RECALLQL_CHANGE_RETENTION), each deletion is
recorded here in its own transaction and replayed as DELETED. Empty at first.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "thread_deletions",
        sa.Column("resource_id", sa.String(), nullable=False),
        sa.Column("thread_id", sa.String(), nullable=False),
        sa.Column("deleted_at", sa.BigInteger(), nullable=False),
        sa.Column("thread", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False),
        sa.PrimaryKeyConstraint("resource_id", "thread_id"),
    )
    op.create_index("ix_thread_deletions_resource_deleted", "thread_deletions", ["resource_id", "deleted_at"])
    op.create_index("ix_thread_deletions_deleted", "thread_deletions", ["deleted_at"])


def downgrade() -> None:
    op.drop_table("thread_deletions")
