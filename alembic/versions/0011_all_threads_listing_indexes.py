"""ix_threads_created and ix_threads_updated: listings of every resource's threads walk an index

`threads` without a resource (Mastra's listThreads without filter.resourceId, an operator's view)
orders all threads by (time, id). With only the
per-resource indexes, each page read and sorted every thread: 33-46 ms at 100,000 threads, growing
with them. These two indexes give that order directly, so a page reads its rows (and, with `total`,
the count reads an index). The cost is one more index entry to move when a save bumps a thread's
updatedAt (benchmarks/all_threads.py measures both).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXES = {"ix_threads_created": "created_at", "ix_threads_updated": "updated_at"}


def upgrade() -> None:
    for name, column in INDEXES.items():
        op.create_index(name, "threads", [column, "id"])


def downgrade() -> None:
    for name in INDEXES:
        op.drop_index(name, table_name="threads")
