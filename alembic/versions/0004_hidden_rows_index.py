"""ix_messages_thread_hidden: a thread's system rows, typed signals and legacy reminders, in order

A partial index over the rows a recall may hide, so that a page query that leaves them out (recall's
hideInPageQuery) counts them without walking the whole thread. Nothing else reads it; dropping it
loses nothing.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# As models.tables.HIDDEN_ROWS_PREDICATE spells it (a migration keeps its own copy: it must not change).
PREDICATE = "role = 'system' OR signal_type IS NOT NULL OR legacy_reminder"


def upgrade() -> None:
    op.create_index(
        "ix_messages_thread_hidden",
        "messages",
        # The last three tell which of them a recall hides: the count reads the index alone.
        ["thread_id", "created_at", "seq", "role", "signal_type", "legacy_reminder"],
        sqlite_where=sa.text(PREDICATE),
        postgresql_where=sa.text(PREDICATE),
    )


def downgrade() -> None:
    op.drop_index("ix_messages_thread_hidden", table_name="messages")
