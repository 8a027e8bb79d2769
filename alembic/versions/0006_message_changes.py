"""message_changes: the latest change to each message of a thread, for resumed subscriptions

messageSaved(after:, changedSince:) replays the messages at or before its cursor that were changed or
deleted since a time; a change leaves no trace in `messages` (no updatedAt, and a delete removes the
row), so each write records it here in its own transaction. Empty at first: changes before this
revision are not replayed.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "message_changes",
        sa.Column("thread_id", sa.String(), nullable=False),
        sa.Column("message_id", sa.String(), nullable=False),
        sa.Column("changed_at", sa.BigInteger(), nullable=False),
        sa.Column("deleted", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True),
        sa.PrimaryKeyConstraint("thread_id", "message_id"),
    )
    op.create_index("ix_message_changes_thread_changed", "message_changes", ["thread_id", "changed_at"])
    op.create_index("ix_message_changes_changed", "message_changes", ["changed_at"])


def downgrade() -> None:
    op.drop_table("message_changes")
