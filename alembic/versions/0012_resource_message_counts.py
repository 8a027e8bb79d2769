"""ix_thread_resources_resource: a resource's messages are counted from the per-thread counts

Resource.messages (Mastra's listMessagesByResourceId) answers `total` for every page. Without a filter
that is the sum of the resource's rows of thread_resources, which every message write keeps in its own
transaction; without this index the sum would read the whole table, so the count walked every message
of the resource instead (8.5-15 ms at 100,000 messages, growing with them).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_thread_resources_resource", "thread_resources", ["resource_id"])


def downgrade() -> None:
    op.drop_index("ix_thread_resources_resource", table_name="thread_resources")
