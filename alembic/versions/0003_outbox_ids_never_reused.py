"""vector_outbox ids are never handed out again on SQLite (AUTOINCREMENT)

Without it SQLite gives a new row the largest id in the table plus one, so once the outbox has emptied a
new entry can get the id of one a writer read and is about to settle, and that writer's settle deletes
the new entry unread. PostgreSQL's sequence never reuses ids; there this changes nothing.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-04
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        # SQLite cannot add AUTOINCREMENT to a table: batch mode copies it into a new one.
        with op.batch_alter_table(
            "vector_outbox", recreate="always", table_kwargs={"sqlite_autoincrement": True}
        ):
            pass


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        with op.batch_alter_table("vector_outbox", recreate="always"):
            pass
