"""change_journal: since when the kept changes are complete

message_changes and thread_deletions hold the changes made while a server kept them
(RECALLQL_CHANGE_RETENTION); this one row says since when that was so. A resumed subscription asking
for changes from before it is refused, instead of missing the ones made while none were kept. Empty at
first: a server that keeps changes opens it when it starts.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "change_journal",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("since", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("change_journal")
