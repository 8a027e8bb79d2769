"""initial schema: resources, threads, messages, thread_resources, vector_outbox

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "messages",
        sa.Column(
            "seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("thread_id", sa.String(), nullable=False),
        sa.Column("resource_id", sa.String(), nullable=True),
        sa.Column("role", sa.String(), nullable=False),
        sa.Column("type", sa.String(), server_default="v2", nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("content", JSON, nullable=False),
        sa.Column("signal_type", sa.String(), nullable=True),
        sa.Column("legacy_reminder", sa.Boolean(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("seq"),
        sa.UniqueConstraint("id"),
    )
    op.create_index("ix_messages_resource_order", "messages", ["resource_id", "created_at", "seq"])
    op.create_index("ix_messages_thread_order", "messages", ["thread_id", "created_at", "seq"])
    if op.get_bind().dialect.name == "postgresql":
        # Metadata filters are `content -> 'metadata' @> {...}` (exact JSON types); jsonb_path_ops serves @>.
        op.execute(
            "CREATE INDEX ix_messages_metadata ON messages USING gin ((content -> 'metadata') jsonb_path_ops)"
        )
    op.create_table(
        "resources",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("working_memory", sa.Text(), nullable=True),
        sa.Column("metadata", JSON, nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "threads",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("resource_id", sa.String(), nullable=False),
        sa.Column("title", sa.String(), server_default="", nullable=False),
        sa.Column("metadata", JSON, nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_threads_resource_created", "threads", ["resource_id", "created_at"])
    op.create_index("ix_threads_resource_updated", "threads", ["resource_id", "updated_at"])
    op.create_table(
        "thread_resources",
        sa.Column("thread_id", sa.String(), nullable=False),
        sa.Column("resource_id", sa.String(), nullable=False),
        sa.Column("message_count", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("version", sa.BigInteger(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("thread_id", "resource_id"),
    )
    op.create_table(
        "vector_outbox",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("message_id", sa.String(), nullable=False),
        sa.Column("previous_resource_id", sa.String(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("vector_outbox")
    op.drop_table("thread_resources")
    op.drop_table("threads")
    op.drop_table("resources")
    op.drop_table("messages")
