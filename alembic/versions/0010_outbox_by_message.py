"""ix_vector_outbox_message: a message's queued vector work, found without reading the whole outbox

A save waits for its own messages' entries, a clone and a move count their sources' entries, and each
page of a rebuild reads its messages' entries: all by message id. Without this index each of them read
every queued entry, so while a rebuild or a large import had the outbox full, every save with semantic
recall paid for the whole backlog, and a rebuild's pages together paid for it once per page.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_vector_outbox_message", "vector_outbox", ["message_id"])


def downgrade() -> None:
    op.drop_index("ix_vector_outbox_message", table_name="vector_outbox")
