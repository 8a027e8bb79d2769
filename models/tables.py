"""SQLModel tables. Alembic owns the schema; these models are what autogenerate compares against.

Times are stored as integer milliseconds since the epoch (UTC): the contract's precision, one
comparison semantics on every engine, and (created_at, seq) is a cheap total order for keyset paging.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Column, Index, Integer, String, Text, literal_column, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import Field, SQLModel

# JSONB on PostgreSQL: containment (@>) gives the contract's exact-type metadata equality and is indexable.
JsonType = JSON().with_variant(JSONB(), "postgresql")
# SQLite only auto-increments an INTEGER PRIMARY KEY (the rowid alias).
SeqType = BigInteger().with_variant(Integer(), "sqlite")


class Resource(SQLModel, table=True):
    __tablename__ = "resources"

    id: str = Field(sa_column=Column(String, primary_key=True))
    working_memory: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    metadata_: dict[str, Any] | None = Field(
        default=None, sa_column=Column("metadata", JsonType, nullable=True)
    )
    created_at: int = Field(sa_column=Column(BigInteger, nullable=False))
    updated_at: int = Field(sa_column=Column(BigInteger, nullable=False))


class Thread(SQLModel, table=True):
    __tablename__ = "threads"
    __table_args__ = (
        # The id ends each: a listing's order and a keyset page's bound are (time, id), read from the
        # index alone (migration 0005).
        Index("ix_threads_resource_created", "resource_id", "created_at", "id"),
        Index("ix_threads_resource_updated", "resource_id", "updated_at", "id"),
        # Listings of every resource's threads (migration 0011): without them such a page read and
        # sorted all threads, whatever its size.
        Index("ix_threads_created", "created_at", "id"),
        Index("ix_threads_updated", "updated_at", "id"),
    )

    id: str = Field(sa_column=Column(String, primary_key=True))
    resource_id: str = Field(sa_column=Column(String, nullable=False))
    title: str = Field(default="", sa_column=Column(String, nullable=False, server_default=""))
    metadata_: dict[str, Any] | None = Field(
        default=None, sa_column=Column("metadata", JsonType, nullable=True)
    )
    created_at: int = Field(sa_column=Column(BigInteger, nullable=False))
    updated_at: int = Field(sa_column=Column(BigInteger, nullable=False))


class Message(SQLModel, table=True):
    __tablename__ = "messages"
    __table_args__ = (
        Index("ix_messages_thread_order", "thread_id", "created_at", "seq"),
        Index("ix_messages_resource_order", "resource_id", "created_at", "seq"),
    )

    # Insertion sequence: breaks createdAt ties; an upsert keeps it (and createdAt).
    seq: int | None = Field(default=None, sa_column=Column(SeqType, primary_key=True, autoincrement=True))
    id: str = Field(sa_column=Column(String, nullable=False, unique=True))
    thread_id: str = Field(sa_column=Column(String, nullable=False))
    resource_id: str | None = Field(default=None, sa_column=Column(String, nullable=True))
    role: str = Field(sa_column=Column(String, nullable=False))
    type: str = Field(default="v2", sa_column=Column(String, nullable=False, server_default="v2"))
    created_at: int = Field(sa_column=Column(BigInteger, nullable=False))
    content: dict[str, Any] = Field(sa_column=Column(JsonType, nullable=False))
    # Classified once on write (models.signals); recall filters on these columns only.
    signal_type: str | None = Field(default=None, sa_column=Column(String, nullable=True))
    legacy_reminder: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, server_default="0")
    )


# The rows a recall may hide (system rows, typed signals, legacy reminders). A page query that leaves
# them out (recall's hideInPageQuery) counts what it leaves out along this partial index: as many
# entries as the thread has such rows, not as it has rows. Queries must spell the predicate exactly as
# the index does (literals, not parameters), or SQLite does not see that the index applies.
HIDDEN_ROWS_PREDICATE = "role = 'system' OR signal_type IS NOT NULL OR legacy_reminder"
Index(
    "ix_messages_thread_hidden",
    Message.__table__.c.thread_id,  # type: ignore[attr-defined]
    Message.__table__.c.created_at,  # type: ignore[attr-defined]
    Message.__table__.c.seq,  # type: ignore[attr-defined]
    # What tells which of them a recall hides: the count reads the index alone.
    Message.__table__.c.role,  # type: ignore[attr-defined]
    Message.__table__.c.signal_type,  # type: ignore[attr-defined]
    Message.__table__.c.legacy_reminder,  # type: ignore[attr-defined]
    sqlite_where=text(HIDDEN_ROWS_PREDICATE),
    postgresql_where=text(HIDDEN_ROWS_PREDICATE),
)

# PostgreSQL only: metadata filters are `content -> 'metadata' @> {...}` (exact JSON types), served by GIN.
PG_ONLY_INDEXES = frozenset({"ix_messages_metadata"})
Index(
    "ix_messages_metadata",
    Message.__table__.c.content.op("->")(literal_column("'metadata'")).label("metadata_doc"),  # type: ignore[attr-defined]
    postgresql_using="gin",
    postgresql_ops={"metadata_doc": "jsonb_path_ops"},
).ddl_if(dialect="postgresql")

metadata = SQLModel.metadata
resources_table = Resource.__table__  # type: ignore[attr-defined]
threads_table = Thread.__table__  # type: ignore[attr-defined]
messages_table = Message.__table__  # type: ignore[attr-defined]


class ThreadResource(SQLModel, table=True):
    """Per thread and message resource: how many messages there are and a change counter.

    Maintained in the same transaction as every message write, so recall counts a thread without
    scanning it, and caches filtered counts keyed by the version. It also names the vector
    collections a thread-scoped search reads. Rows with no resource use the key "".
    """

    __tablename__ = "thread_resources"
    # A resource's messages across its threads are counted from its rows here (migration 0012). Only
    # the resource: the counts change with every write, and an index on them would move each time.
    __table_args__ = (Index("ix_thread_resources_resource", "resource_id"),)

    thread_id: str = Field(sa_column=Column(String, primary_key=True))
    resource_id: str = Field(sa_column=Column(String, primary_key=True))
    message_count: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default="0"))
    version: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default="0"))


class MessageChange(SQLModel, table=True):
    """The latest change to each message of a thread: an update, a re-save, a move (on the thread it
    left and the one it joined), a delete, or a first save that landed before the thread's newest
    message (a resumed replay after that one would not read it). Written in the same transaction
    as the change; a subscription resumed with `changedSince` replays them (resolvers/messages.py).
    Rows older than RECALLQL_CHANGE_RETENTION are pruned: a deleted message's last state, kept here to
    announce its deletion, is not kept longer."""

    __tablename__ = "message_changes"
    __table_args__ = (
        Index("ix_message_changes_thread_changed", "thread_id", "changed_at"),
        Index("ix_message_changes_changed", "changed_at"),
        Index("ix_message_changes_message", "message_id"),
    )

    thread_id: str = Field(sa_column=Column(String, primary_key=True))
    message_id: str = Field(sa_column=Column(String, primary_key=True))
    changed_at: int = Field(sa_column=Column(BigInteger, nullable=False))
    # The message as it was last stored, for a delete; NULL for a change (the message is read as it is).
    deleted: dict[str, Any] | None = Field(default=None, sa_column=Column(JsonType, nullable=True))


class ThreadDeletion(SQLModel, table=True):
    """A thread deleted, as it was last stored: what a thread subscription resumed from a cursor of the
    time after it announces as DELETED (the listing it replays no longer holds the thread). Kept and
    pruned as MessageChange is."""

    __tablename__ = "thread_deletions"
    __table_args__ = (
        Index("ix_thread_deletions_resource_deleted", "resource_id", "deleted_at"),
        Index("ix_thread_deletions_deleted", "deleted_at"),
    )

    resource_id: str = Field(sa_column=Column(String, primary_key=True))
    thread_id: str = Field(sa_column=Column(String, primary_key=True))
    deleted_at: int = Field(sa_column=Column(BigInteger, nullable=False))
    thread: dict[str, Any] = Field(sa_column=Column(JsonType, nullable=False))


class ChangeJournal(SQLModel, table=True):
    """Since when the change tables above are complete: opened (one row) by the first process that
    starts keeping changes, and closed (no row) by one keeping none before its first write, which goes
    unrecorded. A resumed replay asked for changes from before the row's time is refused, instead of
    leaving out changes made while none were kept."""

    __tablename__ = "change_journal"

    id: int = Field(default=1, sa_column=Column(Integer, primary_key=True, autoincrement=False))
    since: int = Field(sa_column=Column(BigInteger, nullable=False))


class VectorOutbox(SQLModel, table=True):
    """Messages whose vectors must be brought in line with SQL, written in the same transaction as the
    change. Draining re-reads the message: present means (re)embed, gone means delete."""

    __tablename__ = "vector_outbox"
    # Entries are settled by id, some time after they were read: an id SQLite handed out again once the
    # table had emptied would settle a newer entry nobody has read.
    __table_args__ = (
        # A save, a clone, a move and a rebuild's page look up their own messages' entries.
        Index("ix_vector_outbox_message", "message_id"),
        {"sqlite_autoincrement": True},
    )

    id: int | None = Field(default=None, sa_column=Column(SeqType, primary_key=True, autoincrement=True))
    message_id: str = Field(sa_column=Column(String, nullable=False))
    # Whether the message had a row before this change, and the resource it was filed under then (None:
    # none), so a move or a delete can clean up the old collection; a new message has vectors nowhere.
    previous_resource_id: str | None = Field(default=None, sa_column=Column(String, nullable=True))
    # NULL: queued by code older than the column, which did not say.
    was_stored: bool | None = Field(default=None, sa_column=Column(Boolean, nullable=True))
    created_at: int = Field(sa_column=Column(BigInteger, nullable=False))


thread_resources_table = ThreadResource.__table__  # type: ignore[attr-defined]
outbox_table = VectorOutbox.__table__  # type: ignore[attr-defined]
changes_table = MessageChange.__table__  # type: ignore[attr-defined]
thread_deletions_table = ThreadDeletion.__table__  # type: ignore[attr-defined]
change_journal_table = ChangeJournal.__table__  # type: ignore[attr-defined]
