"""vector_outbox.was_stored: whether the message had a row before the change

A NULL previous_resource_id meant both "a new message" and "a message stored without a resource", so
moving a message out of the null resource left its vectors there. The column is NULL for the entries
queued before it (and by a replica older than it, during a rolling upgrade): read as they were then.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("vector_outbox") as batch:
        batch.add_column(sa.Column("was_stored", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("vector_outbox") as batch:
        batch.drop_column("was_stored")
