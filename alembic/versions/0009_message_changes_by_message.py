"""ix_message_changes_message: a deleted message's kept changes on other threads

A message moved away from a thread and then deleted in another: its change kept on the thread it left
becomes its deletion there too, so a client of that thread resuming with changedSince hears DELETED.
A delete finds those changes by message id.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_message_changes_message", "message_changes", ["message_id"])


def downgrade() -> None:
    op.drop_index("ix_message_changes_message", table_name="message_changes")
