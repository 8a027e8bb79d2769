"""The repository: every SQL statement RecallQL runs lives here.

It speaks in domain records (models.records) and plain values; callers never see SQLAlchemy.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import inspect
import random
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Literal, NamedTuple, TypeAlias, TypeVar

import orjson
from sqlalchemy import (
    BindParameter,
    ColumnElement,
    CompoundSelect,
    Executable,
    Select,
    Table,
    Text,
    and_,
    bindparam,
    delete,
    false,
    func,
    literal,
    literal_column,
    or_,
    select,
    text,
    true,
    tuple_,
    union_all,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from models.db import DatabaseUnavailable, create_read_engine, transaction_lock_timeout, unavailability
from models.records import (
    ChangeRecord,
    DateRange,
    IncludeWindow,
    MessageQuery,
    MessageRecord,
    OutboxEntry,
    PageRead,
    ResourceRecord,
    ThreadRecord,
)
from models.tables import HIDDEN_ROWS_PREDICATE
from models.tables import change_journal_table as J
from models.tables import changes_table as C
from models.tables import messages_table as M
from models.tables import outbox_table as O
from models.tables import resources_table as R
from models.tables import thread_deletions_table as TD
from models.tables import thread_resources_table as TR
from models.tables import threads_table as T

_T = TypeVar("_T")
# A change to record (tables.MessageChange): thread id, message id, and the message as last stored when
# the change deleted it.
_Change: TypeAlias = tuple[str, str, MessageRecord | None]
# Any SELECT, whatever its columns (SQLAlchemy 2.1 types a Select by the types of its columns).
_AnySelect: TypeAlias = "Select[*tuple[Any, ...]]"
# thread_resources' key for messages stored without a resource.
_NO_RESOURCE = ""
_COUNT_CACHE_SIZE = 10_000
_SQL_INT_MAX = 2**63 - 1
# SQLite reads that touch at most about this many index entries run on the event loop: a few tens of
# microseconds of SQLite work, less than the hop to a worker thread and back (about 90 us of CPU).
_INLINE_ROWS = 5_000
# Ids per IN list: each is a bound parameter, and PostgreSQL's protocol (asyncpg) takes at most 32,767 a
# statement, while the callers' counts are bounded only by settings, if at all.
_IN_SLICE = 5_000
_PLAIN_STRING = re.compile(r"[\x20\x21\x23-\x2e\x30-\x5b\x5d-\x7e]*")
_INLINE_BUDGET = 0.002  # seconds an inline read may run before it is handed to a worker thread
_WRITE_ATTEMPTS = 5
# PostgreSQL writes that lock more threads than this take turns, across every process on the database:
# each first takes one more advisory lock, the same for all of them. The lock table is shared by every
# session (max_locks_per_transaction x max_connections: 6,400 locks by default); two saves of 10,000
# threads at once filled it, and when both were refused, their retries (_retried) could meet again every
# time. Smaller writes never take it; a thread whose id hashes to the same lock only has its writes wait
# for large ones.
_LARGE_WRITE_LOCKS = 1_000
_LARGE_WRITE_TURN = "recallql:large-write"
_SQLITE_BUSY_AT_ONCE = frozenset({"SQLITE_BUSY_SNAPSHOT", "SQLITE_BUSY_RECOVERY"})
_MESSAGE_COLUMNS = (
    M.c.seq,
    M.c.id,
    M.c.thread_id,
    M.c.resource_id,
    M.c.role,
    M.c.type,
    M.c.created_at,
    M.c.content,
    M.c.signal_type,
    M.c.legacy_reminder,
)
# The key is a literal, not a bind parameter, so that the planner can match the expression index
# ix_messages_metadata (migration 0001) under generic prepared-statement plans too.
_PG_METADATA = M.c.content.op("->", return_type=postgresql.JSONB)(literal_column("'metadata'"))
# SQLite caps compound SELECTs at 500 terms; stay well below it.
_MAX_UNION_TERMS = 200
WINDOW_OVERLAP = 4  # rows read per distinct message a window budget allows (overlaps)
_IN_LIST_MAX = 1_000  # ids bound in one IN (...); a longer list is matched in Python


def _row(m: MessageRecord) -> dict[str, Any]:
    """A message as the values of one messages row (seq is the database's)."""
    return {
        "id": m.id,
        "thread_id": m.thread_id,
        "resource_id": m.resource_id,
        "role": m.role,
        "type": m.type,
        "created_at": m.created_at,
        "content": m.content,
        "signal_type": m.signal_type,
        "legacy_reminder": m.legacy_reminder,
    }


def _write_outbox(conn: Connection, items: Sequence[tuple[str, MessageRecord | None]], now: int) -> None:
    """Queues vector work for (message id, its row before this change, None for a new message)."""
    if items:
        conn.execute(
            O.insert(),
            [
                {
                    "message_id": m,
                    "previous_resource_id": None if before is None else before.resource_id,
                    "was_stored": before is not None,
                    "created_at": now,
                }
                for m, before in items
            ],
        )


def _one_statement(stmt: Executable) -> Callable[[Connection], None]:
    """A write transaction's body that runs one statement."""

    def body(conn: Connection) -> None:
        conn.execute(stmt)

    return body


@contextlib.contextmanager
def _sqlite_transaction(conn: Connection, begin: str) -> Iterator[None]:
    """An explicit transaction on a plain SQLite connection (pysqlite opens one only before a write,
    so reads would each see their own moment), committed unless the body raises."""
    raw = conn.connection.driver_connection
    assert raw is not None
    conn.exec_driver_sql(begin)
    try:
        yield
    except BaseException:
        if raw.in_transaction:
            raw.rollback()
        raise
    raw.commit()


def _changes(previous: Mapping[str, MessageRecord], written: Iterable[MessageRecord]) -> list[_Change]:
    """The changes a write of messages that existed before makes: one on the thread each is in now, and
    one on the thread it left."""
    changes: list[_Change] = []
    for m in written:
        if (before := previous.get(m.id)) is not None:
            changes.append((m.thread_id, m.id, None))
            if before.thread_id != m.thread_id:
                changes.append((before.thread_id, m.id, None))
    return changes


# A thread transfer: the thread before and after, its messages before and after.
_Transfer = tuple[ThreadRecord, ThreadRecord, list[MessageRecord], list[MessageRecord]]

_MESSAGE_FIELDS = tuple(f.name for f in dataclasses.fields(MessageRecord))


def _as_dict(record: MessageRecord) -> dict[str, Any]:
    """The record's fields, to be stored as JSON at once: dataclasses.asdict deep-copies the content
    first, which cost a thread of 1,000 messages 35 ms to record its deletions."""
    return {name: getattr(record, name) for name in _MESSAGE_FIELDS}


def _backdated(
    conn: Connection, previous: Mapping[str, MessageRecord], written: Iterable[MessageRecord]
) -> list[_Change]:
    """The first saves that land before their thread's newest message (read before the write): a
    client's own createdAt, a replica's clock behind another's, an import filling in history. A client
    resuming after a cursor of that newest message would never read them as messages after it, so
    they are changes of the messages before it."""
    new = [m for m in written if m.id not in previous]
    newest: dict[str, int | None] = {}
    for thread_id in sorted({m.thread_id for m in new}):
        # One thread at a time: max() over the thread's index is one step back from its end.
        stmt = select(func.max(M.c.created_at)).where(M.c.thread_id == thread_id)
        newest[thread_id] = conn.execute(stmt).scalar()
    return [
        (m.thread_id, m.id, None)
        for m in new
        if (top := newest[m.thread_id]) is not None and m.created_at < top
    ]


def _select_messages(conn: Connection, ids: Sequence[str]) -> dict[str, MessageRecord]:
    """The stored rows of these message ids (those that exist), by id."""
    found: dict[str, MessageRecord] = {}
    for start in range(0, len(ids), 500):
        for row in conn.execute(select(*_MESSAGE_COLUMNS).where(M.c.id.in_(ids[start : start + 500]))):
            rec = _message(row)
            found[rec.id] = rec
    return found


def _message(row: Any) -> MessageRecord:
    return MessageRecord(
        seq=row[0],
        id=row[1],
        thread_id=row[2],
        resource_id=row[3],
        role=row[4],
        type=row[5],
        created_at=row[6],
        content=row[7],
        signal_type=row[8],
        legacy_reminder=bool(row[9]),
    )


class _NeedsWorker(Exception):
    """An inline read met unbounded work (an uncached count); the read is run again in a worker."""


# Per window: whether it reads neighbours after its target, whether its target is bound to a thread.
class _FilterShape(NamedTuple):
    """Which conditions a page query has, beside their values (the params): statements are built and
    cached per shape, and counts cached per shape and values."""

    resource: bool
    has_start: bool
    start_exclusive: bool
    has_end: bool
    end_exclusive: bool
    kinds: tuple[str, ...]  # the metadata keys' JSON kinds (("jsonb",) on PostgreSQL)
    hidden: tuple[str, str] | None  # ("visible" | "hidden", kind): see _hidden_condition
    bounds: tuple[tuple[str, str], ...]  # (op, name) places: see _place_condition


_WindowShape: TypeAlias = tuple[tuple[tuple[bool, bool], ...], bool]
_WINDOW_SHAPES = 256  # statements kept; building one again costs up to tens of ms, once


@dataclass(slots=True)
class _WindowTemplate:
    """The statement of one shape of include windows; `compiled` once it has run (SQLAlchemy compiles
    a statement on its first run, tens of ms for 200 SELECTs: no work for the event loop's thread)."""

    statement: CompoundSelect[*tuple[Any, ...]]
    compiled: bool = False


def _window_shape(windows: Sequence[IncludeWindow], resource_id: str | None) -> _WindowShape:
    """What the windows' statement depends on: which windows read neighbours after their target (the
    others have no second SELECT) and which targets are bound to a thread, and whether it is bound to
    a resource."""
    return tuple((w.after > 0, w.thread_id is not None) for w in windows), bool(resource_id)


def _window_chunks(windows: Sequence[IncludeWindow]) -> Iterable[Sequence[IncludeWindow]]:
    """The windows in statements SQLite takes: each window is up to two SELECTs, and SQLite caps a
    compound SELECT at 500 terms."""
    step = _MAX_UNION_TERMS // 2
    for start in range(0, len(windows), step):
        yield windows[start : start + step]


def _window_rows(windows: Sequence[IncludeWindow]) -> int:
    """At most how many rows include windows read (each is its target plus neighbours)."""
    return sum(1 + w.before + w.after for w in windows)


def _thread(row: Any) -> ThreadRecord:
    """A `select(T)` row (columns in table order; by position, which is several times faster than by
    name on a Row)."""
    return ThreadRecord(
        id=row[0],
        resource_id=row[1],
        title=row[2],
        metadata=row[3],
        created_at=row[4],
        updated_at=row[5],
    )


class Repository:
    def __init__(self, engine: AsyncEngine, *, read_engine: Engine | None = None) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self._transaction_lock_timeout = transaction_lock_timeout(engine)
        self._statements: dict[tuple[Any, ...], _AnySelect] = {}
        self._thread_statements: dict[tuple[Any, ...], tuple[_AnySelect, _AnySelect]] = {}  # (page, count)
        # Include windows' statements by shape (which windows read neighbours after the target, bound
        # to a resource), the most recently used kept.
        self._window_templates: OrderedDict[_WindowShape, _WindowTemplate] = OrderedDict()
        self._window_lock = threading.Lock()
        # Filtered counts by (filter, thread version); reads run in several threads.
        # Values: (thread version, matching rows, the thread's rows then).
        self._count_cache: OrderedDict[tuple[Any, ...], tuple[int, int, int]] = OrderedDict()
        self._count_lock = threading.Lock()
        # SQLite: hot reads and every write transaction run on plain sqlite3 connections in a worker
        # thread, one hop each, instead of one aiosqlite thread hop per statement and cursor operation.
        self.read_engine = read_engine or create_read_engine(engine.url.render_as_string(hide_password=False))
        # SQLite has one writer at a time: one thread runs this process's write transactions in turn,
        # rather than several parking on the database lock in the executor the reads need.
        self._writer = (
            ThreadPoolExecutor(1, thread_name_prefix="recallql-sqlite-writer")
            if self.read_engine is not None
            else None
        )

    def close(self) -> None:
        """Releases the SQLite connections and writer thread (the async engine is its owner's to dispose)."""
        if self._writer is not None:
            self._writer.shutdown(wait=False)
        if self.read_engine is not None:
            self.read_engine.dispose()

    async def _read(self, fn: Callable[[Connection], _T], *, bounded: bool = False) -> _T:
        """Runs a read-only function of a connection: on SQLite in a worker thread, or right here when
        the caller knows its work is `bounded` (index lookups of at most _INLINE_ROWS entries, which WAL
        never makes wait for a writer); on PostgreSQL on the event loop's connection (asyncpg is
        asynchronous already)."""
        if self.read_engine is not None:
            if bounded:
                try:
                    return self._read_inline(fn)
                except _NeedsWorker:  # it found more work than it could tell beforehand
                    pass
            return await asyncio.to_thread(self._read_sync, fn)
        async with self.engine.connect() as conn:
            return await conn.run_sync(fn)

    def _read_inline(self, fn: Callable[[Connection], _T]) -> _T:
        """`fn` on the event loop's thread, interrupted (_NeedsWorker) once it has run for
        _INLINE_BUDGET seconds: an estimate that was wrong (matches clustered far from the page, say)
        costs the loop at most that much before the read moves to a worker thread."""
        assert self.read_engine is not None
        with self.read_engine.connect() as conn:
            raw = conn.connection.driver_connection
            assert raw is not None
            deadline = time.perf_counter() + _INLINE_BUDGET
            raw.set_progress_handler(lambda: time.perf_counter() > deadline, 2000)
            try:
                return fn(conn)
            except OperationalError as exc:
                if "interrupted" in str(exc.orig):
                    raise _NeedsWorker from exc
                raise
            finally:
                raw.set_progress_handler(None, 0)

    def _read_sync(self, fn: Callable[[Connection], _T]) -> _T:
        assert self.read_engine is not None
        with self.read_engine.connect() as conn:
            return fn(conn)

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgresql"

    def _code_points(self, column: ColumnElement[str]) -> ColumnElement[str]:
        """`column` ordered by code point, as SQLite's BINARY collation and Python order strings. A
        PostgreSQL database's default collation is often a locale's (en_US on most managed services),
        which orders "B", "_a" and "b" differently: the same ids would come back in another order."""
        return column.collate("C") if self.is_postgres else column

    def thread_statements(
        self,
        order_field: str,
        descending: bool,
        *,
        every_row: bool,
        metadata: dict[str, Any] | None = None,
        after: bool = False,
        before: bool = False,
        counted: bool = True,
        scope: Literal["one", "some", "all"] = "one",
    ) -> tuple[_AnySelect, _AnySelect]:
        """A threads listing's page statement and its count, with the values as bind parameters
        (:resource_id, :offset, :limit, :after_at, :after_id, ...; metadata's are bound in). A page of a
        `limit` carries the total in every row, unless not `counted`. `scope`: the threads of one
        resource (:resource_id), of some (:resource_ids, a list) or of all."""
        key = ("threads", order_field, descending, every_row, after, before, counted, scope)
        cached = self._thread_statements.get(key) if not metadata else None
        if cached is not None:
            return cached
        where: list[ColumnElement[bool]] = []
        if scope == "one":
            where.append(T.c.resource_id == bindparam("resource_id"))
        elif scope == "some":
            where.append(T.c.resource_id.in_(bindparam("resource_ids", expanding=True)))
        for name, value in (metadata or {}).items():
            where.append(self._json_equals(T.c.metadata, name, value))
        column = T.c.updated_at if order_field == "updatedAt" else T.c.created_at
        tie = self._code_points(T.c.id)
        ordered: ColumnElement[int] = column
        if scope == "some" or (scope == "all" and metadata):
            # Not along the time index of all threads (migration 0011): a walk finds a rare value one
            # table lookup per thread, up to 3x the cost of reading every thread and sorting the few
            # that match, and neither engine can tell how rare a JSON filter's value is, nor (from the
            # statistics alone) whether some resources' threads are near the top. So such a page costs
            # what it did before 0011: some resources' threads from their own index, then sorted.
            ordered = column + 0
        order = (ordered.desc(), tie.desc()) if descending else (ordered.asc(), tie.asc())
        # In a listing newest first, the threads after a place are the older ones.
        if after:
            where.append(self._thread_place_condition(column, "lt" if descending else "gt", "after"))
        if before:
            where.append(self._thread_place_condition(column, "gt" if descending else "lt", "before"))
        count = select(func.count()).select_from(T).where(*where)
        if every_row:  # counted first: an every-row read over max_rows reads nothing
            page = select(T).where(*where).order_by(*order).offset(bindparam("offset"))
        elif not counted:  # the page and the thread after it, if any
            page = select(T).where(*where).order_by(*order).offset(bindparam("offset"))
            page = page.limit(bindparam("limit"))
        else:  # one statement: every row of the page carries the total
            page = (
                select(*T.c, count.scalar_subquery())
                .where(*where)
                .order_by(*order)
                .offset(bindparam("offset"))
                .limit(bindparam("limit"))
            )
        if not metadata:  # the common shape is built once; metadata filters vary too much to keep
            self._thread_statements[key] = (page, count)
        return page, count

    def _thread_place_condition(self, column: ColumnElement[int], op: str, name: str) -> ColumnElement[bool]:
        """A thread's place (`column`, id in code point order) strictly after (gt) or before (lt) the
        place :<name>_at, :<name>_id. The time bound comes first and alone, so that both engines read it
        as a range of the resource's index; the id only settles threads of the same instant."""
        at: BindParameter[int] = bindparam(f"{name}_at")
        tie = self._code_points(T.c.id)
        thread_id: BindParameter[str] = bindparam(f"{name}_id")
        if op == "gt":
            return and_(column >= at, or_(column > at, tie > thread_id))
        assert op == "lt"
        return and_(column <= at, or_(column < at, tie < thread_id))

    def _upsert_messages(self, *, where: ColumnElement[bool] | None = None) -> Any:
        """INSERT ... ON CONFLICT (id) DO UPDATE of everything but createdAt: a re-saved message keeps
        its createdAt and its insertion sequence. `where` limits which existing rows may be replaced."""
        stmt = self._insert(M)
        replaced = ("thread_id", "resource_id", "role", "type", "content", "signal_type", "legacy_reminder")
        return stmt.on_conflict_do_update(
            index_elements=["id"], set_={c: getattr(stmt.excluded, c) for c in replaced}, where=where
        )

    def _insert(self, table: Any) -> Any:
        return (postgresql.insert if self.is_postgres else sqlite.insert)(table)

    async def ping(self) -> None:
        async with self.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))

    # ------------------------------------------------------------------ threads
    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        def read(conn: Connection) -> ThreadRecord | None:
            row = conn.execute(select(T).where(T.c.id == thread_id)).first()
            return _thread(row) if row else None

        return await self._read(read, bounded=True)

    async def get_threads(self, ids: Sequence[str]) -> dict[str, ThreadRecord]:
        if not ids:
            return {}
        rows = await self._read(functools.partial(_rows_by_id, T, ids), bounded=len(ids) <= _INLINE_ROWS)
        return {row.id: _thread(row) for row in rows}

    def _insert_new_thread(self, thread: ThreadRecord) -> Any:
        """INSERT of a thread that does nothing when the id is taken (rowcount 0)."""
        return (
            self._insert(T)
            .values(
                id=thread.id,
                resource_id=thread.resource_id,
                title=thread.title,
                metadata=thread.metadata,
                created_at=thread.created_at,
                updated_at=thread.updated_at,
            )
            .on_conflict_do_nothing(index_elements=["id"])
        )

    async def insert_thread(
        self, thread: ThreadRecord, *, resource_working_memory: str | None = None, now: int | None = None
    ) -> bool:
        """Inserts a new thread (and its resource row); False when the id is taken (nothing written).
        With resource_working_memory, the same transaction makes it its resource's working memory."""

        def body(conn: Connection) -> bool:
            inserted = conn.execute(self._insert_new_thread(thread)).rowcount == 1
            if inserted:
                self._ensure_resource(conn, thread.resource_id, thread.created_at)
                if resource_working_memory is not None:
                    stamp = now if now is not None else thread.created_at
                    self._set_resource_working_memory(
                        conn, thread.resource_id, lambda _: resource_working_memory, stamp
                    )
            return inserted

        return await self._write_transaction(body)

    def _ensure_resource(self, conn: Connection, resource_id: str, now: int) -> None:
        conn.execute(
            self._insert(R)
            .values(id=resource_id, working_memory=None, metadata={}, created_at=now, updated_at=now)
            .on_conflict_do_nothing(index_elements=["id"])
        )

    async def update_thread(
        self,
        thread_id: str,
        *,
        title: str | None,
        metadata: dict[str, Any] | None,
        now: int,
        guard: Callable[[ThreadRecord], None] | None = None,
        resource_working_memory: str | None = None,
    ) -> ThreadRecord | None:
        """Sets the title (when given) and shallow-merges metadata, atomically. `guard` sees the
        thread as locked for the write; if it raises, nothing is written. With resource_working_memory,
        the same transaction makes it the working memory of the thread's resource."""

        def body(conn: Connection) -> ThreadRecord | None:
            row = conn.execute(self._lock(select(T).where(T.c.id == thread_id))).first()
            if row is None:
                return None
            if guard is not None:
                guard(_thread(row))
            # Always an object afterwards, as in Mastra's updateThread ({...stored, ...given}): a thread
            # saved without metadata has {} once updated, even by a title alone.
            merged = {**(row.metadata or {}), **(metadata or {})}
            values: dict[str, Any] = {"metadata": merged, "updated_at": now}
            if title is not None:
                values["title"] = title
            conn.execute(update(T).where(T.c.id == thread_id).values(**values))
            if resource_working_memory is not None:
                self._ensure_resource(conn, row.resource_id, now)
                self._set_resource_working_memory(
                    conn, row.resource_id, lambda _: resource_working_memory, now
                )
            return _thread(conn.execute(select(T).where(T.c.id == thread_id)).one())

        return await self._write_transaction(body)

    async def threads_naming_source(self, pairs: Sequence[tuple[str, str]]) -> list[ThreadRecord]:
        """The threads of each (resource, source thread id) pair whose metadata.clone.sourceThreadId is
        that id as text, newest first (createdAt DESC, then id, as a listing). The caller keeps exactly
        the pairs it asked for (the statement crosses the resources and sources it was given) and
        decides what a clone is: this only narrows the rows it reads."""
        if not pairs:
            return []
        resources = sorted({r for r, _ in pairs})
        sources = sorted({s for _, s in pairs})
        named = T.c.metadata[("clone", "sourceThreadId")].as_string()

        def read(conn: Connection) -> list[ThreadRecord]:
            found: list[ThreadRecord] = []
            for some in _slices(sources):
                stmt = select(T).where(T.c.resource_id.in_(resources), named.in_(some))
                found.extend(map(_thread, conn.execute(stmt)))
            # Sorted here: the slices are read apart. Ties by id in code point order, as in every listing.
            return sorted(found, key=lambda t: (t.created_at, t.id), reverse=True)

        return await self._read(read)

    async def transfer_thread(
        self,
        thread_id: str,
        resource_id: str,
        *,
        now: int,
        track_vectors: bool = False,
        record_changes: bool = False,
        guard: Callable[[ThreadRecord, list[MessageRecord]], None] | None = None,
    ) -> _Transfer | None:
        """Gives the thread and every message filed under it to `resource_id`, in one transaction
        (Mastra's updateThreadResourceId): createdAt is kept, updatedAt is `now`. Returns (the thread
        before, after, its messages before, after), None for an unknown thread. A thread that already
        belongs to the resource is left as it is (its messages too, as in Mastra): before is after and
        no messages are returned. `guard` sees the locked thread and messages; if it raises, nothing
        is written. With changes kept, the old resource records the thread as gone from its threads
        (a resumed threadUpdated of it hears DELETED) and each message records its change."""

        def body(conn: Connection) -> _Transfer | None:
            row = conn.execute(self._lock(select(T).where(T.c.id == thread_id))).first()
            if row is None:
                return None
            thread = _thread(row)
            if thread.resource_id == resource_id:
                if guard is not None:
                    guard(thread, [])
                return thread, thread, [], []
            stmt = self._lock(select(*_MESSAGE_COLUMNS).where(M.c.thread_id == thread_id))
            before = sorted(map(_message, conn.execute(stmt)), key=lambda m: (m.created_at, m.seq))
            if guard is not None:
                guard(thread, before)  # raising rolls the transaction back
            stamp = max(now, thread.updated_at)
            moving = update(T).where(T.c.id == thread_id)
            conn.execute(moving.values(resource_id=resource_id, updated_at=stamp))
            self._ensure_resource(conn, resource_id, now)
            moving_messages = update(M).where(M.c.thread_id == thread_id)
            if self.is_postgres:
                # Only the rows locked and checked above: an import (which takes no thread lock) may
                # have committed a message into the thread since, and its UPDATE would see that row
                # too, moving it unchecked and uncounted (its resource's total one too high for good).
                # It stays filed under its own resource. SQLite's single writer lets nothing in.
                locked = bindparam(
                    "locked", value=[m.id for m in before], type_=postgresql.ARRAY(M.c.id.type)
                )
                moving_messages = moving_messages.where(M.c.id == func.any(locked))
            conn.execute(moving_messages.values(resource_id=resource_id))
            after = [replace(m, resource_id=resource_id) for m in before]
            self._write_stats(
                conn,
                removed=[(thread_id, m.resource_id) for m in before],
                added=[(thread_id, resource_id) for m in before],
            )
            if track_vectors:
                # Each message's vectors leave the collection of the resource it was filed under.
                _write_outbox(conn, [(m.id, m) for m in before], now)
            if record_changes:
                self._write_changes(conn, [(thread_id, m.id, None) for m in before], now)
                self._write_thread_gone(conn, thread, now)
            moved = _thread(conn.execute(select(T).where(T.c.id == thread_id)).one())
            return thread, moved, before, after

        return await self._write_transaction(body, lock_keys=[thread_id])

    def _lock(self, stmt: _AnySelect) -> _AnySelect:
        # SQLite serialises writers per database; PostgreSQL needs the row lock for read-modify-write.
        return stmt.with_for_update() if self.is_postgres else stmt

    async def list_threads(
        self,
        resource_id: str | Collection[str] | None,
        *,
        offset: int,
        limit: int | None,
        order_field: str,
        descending: bool,
        metadata: dict[str, Any] | None = None,
        max_rows: int | None = None,
        after: tuple[int, str] | None = None,
        before: tuple[int, str] | None = None,
        counted: bool = True,
    ) -> tuple[list[ThreadRecord], int | None]:
        """A page of a resource's threads (of these resources', of all threads for None) and their
        total. With `max_rows`, an every-row read (limit
        None) that counts more threads than that reads none (the caller refuses it on the total).
        `after` and `before` are places in the listing's order, (the order field's value, thread id):
        only threads strictly after or before them are read and counted (keyset paging).
        Not `counted` (a page of `limit` rows only), the total is None and one row more than the page
        is read, if there is one: whether a further page exists, without counting every thread."""
        counted = counted or limit is None
        params: dict[str, Any] = {"offset": min(offset, _SQL_INT_MAX)}
        scope: Literal["one", "some", "all"] = "all"
        if isinstance(resource_id, str):
            scope, params["resource_id"] = "one", resource_id
        elif resource_id is not None:
            scope, params["resource_ids"] = "some", sorted(resource_id)
        if limit is not None:
            params["limit"] = min(limit if counted else limit + 1, _SQL_INT_MAX)
        for name, place in (("after", after), ("before", before)):
            if place is not None:
                params[f"{name}_at"], params[f"{name}_id"] = place
        stmt, count = self.thread_statements(
            order_field,
            descending,
            every_row=limit is None,
            metadata=metadata,
            after=after is not None,
            before=before is not None,
            counted=counted,
            scope=scope,
        )

        def read(conn: Connection) -> tuple[int | None, Sequence[Any]]:
            if not counted:
                return None, conn.execute(stmt, params).all()
            if limit is not None:
                rows = conn.execute(stmt, params).all()
                if rows:
                    return rows[0][len(T.c)], rows
                # Past the last page (or perPage 0) no row carries the total.
                return conn.execute(count, params).scalar_one(), []
            total = conn.execute(count, params).scalar_one()
            if max_rows is not None and total > max_rows:
                return total, []
            return total, conn.execute(stmt, params).all()

        # Unfiltered pages walk the resource's index, or all threads' (counting all of them is not
        # bounded); a metadata filter may scan all the threads, and a listing of several resources'
        # threads sorts them.
        walked = scope == "one" or (scope == "all" and not counted)
        bounded = walked and not metadata and limit is not None and offset + limit <= _INLINE_ROWS
        total, rows = await self._read(read, bounded=bounded)
        return [_thread(r) for r in rows], total

    # ------------------------------------------------------------------ messages: write
    async def save_messages(
        self,
        records: Sequence[MessageRecord],
        *,
        now: int,
        track_vectors: bool = False,
        record_changes: bool = False,
        owned_by: Collection[str] | None = None,
        thread_owners: Mapping[str, str] | None = None,
    ) -> tuple[dict[str, MessageRecord], list[MessageRecord]]:
        """Upserts the batch in one transaction, in the given order.

        A re-saved id keeps its createdAt and insertion sequence; everything else is replaced.
        With track_vectors, the same transaction queues every message in the vector outbox; with
        record_changes, it records each re-saved message's change (tables.MessageChange), and each new
        one's that lands before its thread's newest message (_backdated).
        With owned_by, only stored rows of those resources may be overwritten: a row of another
        resource (or of none), even one another writer inserted a moment ago, is left alone by the
        upsert and raises RowForbidden(id), and nothing is written; and every thread of the batch must
        exist as one of those resources' (ThreadForbidden(thread id) otherwise).
        With thread_owners (thread id -> resource the caller read as its owner, and gave messages
        without a resource), each of those threads must still exist with that owner, as the write locks
        it: ThreadChanged(thread id) otherwise (a deleteThread that committed in between would leave
        the messages in a thread that no longer exists), and nothing is written.
        Returns the rows these ids had before (by id: the ones that existed) and the stored rows, in the
        order given.
        """
        if not records:
            return {}, []
        # One row per id (the last version wins, at its first position, with the first one's
        # createdAt, as a re-save keeps a stored row's): a statement may not touch the same row twice.
        last: dict[str, MessageRecord] = {}
        for rec in records:
            first = last.get(rec.id)
            last[rec.id] = rec if first is None else replace(rec, created_at=first.created_at)
        rows = [_row(rec) for rec in last.values()]
        stmt = self._upsert_messages(
            # Plain comparisons: an expanding IN cannot be used in an executemany.
            where=or_(false(), *(M.c.resource_id == literal(r) for r in sorted(owned_by)))
            if owned_by is not None
            else None,
        )
        ids = list(last)
        thread_ids = {rec.thread_id for rec in last.values()}

        def write(conn: Connection) -> tuple[dict[str, MessageRecord], dict[str, MessageRecord]]:
            # Locked: a writer through another thread (an update moving one of these messages) holds no
            # lock this save takes, and the outbox and the per-thread counts must start from the row
            # this save replaces, not from one read before that writer committed.
            previous = self._locked_messages(conn, ids)
            backdated = _backdated(conn, previous, last.values()) if record_changes else []
            replaced = self._claim_new(conn, rows, previous)
            for start in range(0, len(replaced), 500):
                conn.execute(stmt, replaced[start : start + 500])
            # A re-save that moves a message changes the thread it leaves too (as updateMessages does),
            # and every thread the batch names is changed, even one only an earlier copy of an id named:
            # Mastra's saveMessages changes its first message's thread, whatever a later copy says.
            touched = {rec.thread_id for rec in records} | {m.thread_id for m in previous.values()}
            conn.execute(update(T).where(T.c.id.in_(touched)).values(updated_at=now))
            self._write_stats(
                conn,
                removed=[(m.thread_id, m.resource_id) for m in previous.values()],
                added=[(m.thread_id, m.resource_id) for m in last.values()],
            )
            if track_vectors:
                _write_outbox(conn, [(i, previous.get(i)) for i in ids], now)
            written = _select_messages(conn, ids)
            if record_changes:
                self._write_changes(conn, backdated + _changes(previous, written.values()), now)
            if owned_by is not None:
                for rec in written.values():
                    if rec.resource_id not in owned_by:
                        raise RowForbidden(rec.id)  # rolls the transaction back
            return previous, written

        def checked_write(conn: Connection) -> tuple[dict[str, MessageRecord], dict[str, MessageRecord]]:
            if owned_by is not None or thread_owners:
                # The threads as this transaction locks them: one deleted (and perhaps created again by
                # another resource) since the caller read it is refused here.
                stmt = self._lock(select(T.c.id, T.c.resource_id).where(T.c.id.in_(sorted(thread_ids))))
                found = {row[0]: row[1] for row in conn.execute(stmt)}
                if owned_by is not None:
                    for thread_id in sorted(thread_ids):
                        if found.get(thread_id) not in owned_by:
                            raise ThreadForbidden(thread_id)
                for thread_id, resource_id in sorted((thread_owners or {}).items()):
                    # A thread only an earlier copy of a repeated id named gets nothing, and is not locked.
                    if thread_id in thread_ids and found.get(thread_id) != resource_id:
                        raise ThreadChanged(thread_id)
            return write(conn)

        previous, stored = await self._write_transaction(checked_write, lock_keys=thread_ids)
        return previous, [stored[i] for i in ids if i in stored]

    def _claim_new(
        self, conn: Connection, rows: Sequence[dict[str, Any]], stored: dict[str, MessageRecord]
    ) -> Sequence[dict[str, Any]]:
        """PostgreSQL: inserts the rows whose ids `stored` (read and locked before) does not hold, and
        returns the rows left for the caller to write. An id another writer inserted after that read (its
        save or import through another thread: no lock of this transaction keeps it out) is not inserted
        but locked and read into `stored`: this write replaces that row, and the outbox and the
        per-thread counts must start from it. SQLite has one writer at a time: every row is left."""
        if not self.is_postgres:
            return rows
        new = [r for r in rows if r["id"] not in stored]
        if not new:
            return rows
        stmt = self._insert(M).on_conflict_do_nothing(index_elements=["id"]).returning(M.c.id)
        inserted: set[str] = set()
        for start in range(0, len(new), 500):
            # ON CONFLICT waits for a transaction inserting the same id, then skips the row if it commits.
            inserted.update(conn.execute(stmt, new[start : start + 500]).scalars())
        if raced := [r["id"] for r in new if r["id"] not in inserted]:
            stored.update(self._locked_messages(conn, raced))
        return [r for r in rows if r["id"] not in inserted] if inserted else rows

    async def _write_transaction(
        self, body: Callable[[Connection], _T], *, lock_keys: Iterable[str] = ()
    ) -> _T:
        """Runs the synchronous `body` in a write transaction, retried when the database reports a
        deadlock or a serialization failure (replicas writing the same rows at once), or a lock table
        that concurrent writes filled.

        SQLite: the whole transaction runs on a plain connection in one worker-thread hop, where
        aiosqlite would hop to its thread and back for every statement and fetch (a save of 2
        messages: several ms of hops for well under one of SQLite work). BEGIN IMMEDIATE makes it the
        single writer from its first statement: SQLite reads without a lock until the first write, so
        two read-modify-write transactions could otherwise read the same state and one update would
        be lost. PostgreSQL: on the event loop's connection; transaction-scoped advisory locks on
        `lock_keys` (thread ids), taken in sorted order, serialise writers of the same threads without
        deadlocks, and read-modify-write bodies lock the rows they read (`_lock`)."""
        if self._writer is not None:
            writer = self._writer

            def attempt_on_sqlite() -> asyncio.Future[_T]:
                run = functools.partial(contextvars.copy_context().run, self._write_sync, body)
                return asyncio.get_running_loop().run_in_executor(writer, run)

            return await _retried(attempt_on_sqlite)

        keys = sorted(set(lock_keys))
        if len(keys) > _LARGE_WRITE_LOCKS:
            keys.insert(0, _LARGE_WRITE_TURN)  # taken first: large writes queue before locking any thread
        lock_timeout = self._transaction_lock_timeout

        async def attempt() -> _T:
            async with self.engine.begin() as conn:
                if keys and lock_timeout:
                    await conn.execute(_TIMED_ADVISORY_LOCKS, {"keys": keys, "timeout": lock_timeout})
                elif keys:
                    # One round trip for all of them, taken in the array's (sorted) order.
                    await conn.execute(_ADVISORY_LOCKS, {"keys": keys})
                elif lock_timeout:
                    await conn.execute(_LOCAL_LOCK_TIMEOUT, {"timeout": lock_timeout})
                return await conn.run_sync(body)

        return await _retried(attempt)

    def _write_sync(self, body: Callable[[Connection], _T]) -> _T:
        assert self.read_engine is not None
        with self.read_engine.connect() as conn, _sqlite_transaction(conn, "BEGIN IMMEDIATE"):
            return body(conn)

    def _write_changes(self, conn: Connection, changes: Sequence[_Change], now: int) -> None:
        """Records each change as its message's latest on its thread (the batch's last one wins)."""
        latest = {(thread_id, message_id): gone for thread_id, message_id, gone in changes}
        if not latest:
            return
        insert = self._insert(C)
        stmt = insert.on_conflict_do_update(
            index_elements=["thread_id", "message_id"],
            set_={"changed_at": insert.excluded.changed_at, "deleted": insert.excluded.deleted},
        )
        rows = [
            {
                "thread_id": thread_id,
                "message_id": message_id,
                "changed_at": now,
                "deleted": None if gone is None else _as_dict(gone),
            }
            for (thread_id, message_id), gone in sorted(latest.items(), key=lambda item: item[0])
        ]
        for start in range(0, len(rows), 500):
            conn.execute(stmt, rows[start : start + 500])

    def _write_thread_gone(self, conn: Connection, thread: ThreadRecord, now: int) -> None:
        """Records that the thread, as last stored, left its resource's threads (deleted, or given to
        another resource): a resumed threadUpdated of that resource hears DELETED."""
        values = {"deleted_at": now, "thread": dataclasses.asdict(thread)}
        conn.execute(
            self._insert(TD)
            .values(resource_id=thread.resource_id, thread_id=thread.id, **values)
            .on_conflict_do_update(index_elements=["resource_id", "thread_id"], set_=values)
        )

    def _deletions(self, conn: Connection, deleted: Sequence[MessageRecord]) -> list[_Change]:
        """The changes deleting these messages makes: each one's deletion on its thread, and on the
        threads it had moved away from (their kept change, "moved", becomes its deletion): a client of
        such a thread, away for the move and the delete, learns the message is gone (reading it as it
        is now finds nothing to send)."""
        by_id = {m.id: m for m in deleted}
        changes: list[_Change] = [(m.thread_id, m.id, m) for m in deleted]
        for ids in _slices(sorted(by_id)):
            stmt = select(C.c.thread_id, C.c.message_id).where(C.c.message_id.in_(ids))
            for thread_id, message_id in conn.execute(stmt):
                if thread_id != by_id[message_id].thread_id:
                    changes.append((thread_id, message_id, by_id[message_id]))
        return changes

    async def changes_since(self, thread_id: str, since: int, limit: int) -> list[ChangeRecord]:
        """The latest changes to messages of the thread made at `since` or later, oldest first (at most
        `limit`)."""

        def read(conn: Connection) -> list[ChangeRecord]:
            stmt = (
                select(C.c.message_id, C.c.changed_at, C.c.deleted)
                .where(C.c.thread_id == thread_id, C.c.changed_at >= since)
                .order_by(C.c.changed_at, self._code_points(C.c.message_id))
                .limit(limit)
            )
            return [
                ChangeRecord(message_id, changed_at, None if gone is None else MessageRecord(**gone))
                for message_id, changed_at, gone in conn.execute(stmt)
            ]

        return await self._read(read)

    async def thread_deletions_since(self, resource_id: str, since: int, limit: int) -> list[ThreadRecord]:
        """The resource's threads deleted (or given to another resource) at `since` or later, as last
        stored there, oldest first (at most `limit`)."""

        def read(conn: Connection) -> list[ThreadRecord]:
            stmt = (
                select(TD.c.thread)
                .where(TD.c.resource_id == resource_id, TD.c.deleted_at >= since)
                .order_by(TD.c.deleted_at, self._code_points(TD.c.thread_id))
                .limit(limit)
            )
            return [ThreadRecord(**thread) for (thread,) in conn.execute(stmt)]

        return await self._read(read)

    async def prune_changes(self, before: int) -> int:
        """Forgets the message changes and thread deletions made before `before`; returns how many."""

        def body(conn: Connection) -> int:
            changes = conn.execute(delete(C).where(C.c.changed_at < before)).rowcount or 0
            return int(changes + (conn.execute(delete(TD).where(TD.c.deleted_at < before)).rowcount or 0))

        return await self._write_transaction(body)

    async def open_change_journal(self, now: int) -> int:
        """Opens the change journal at `now`, unless it is open; returns since when it is."""

        def body(conn: Connection) -> int:
            conn.execute(
                self._insert(J).values(id=1, since=now).on_conflict_do_nothing(index_elements=["id"])
            )
            return int(conn.execute(select(J.c.since).where(J.c.id == 1)).scalar_one())

        return await self._write_transaction(body)

    async def close_change_journal(self) -> None:
        """Closes the change journal and forgets every change and deletion it held: a server keeping
        none is writing."""

        def body(conn: Connection) -> None:
            for table in (J, C, TD):
                conn.execute(delete(table))

        await self._write_transaction(body)

    async def change_journal_since(self) -> int | None:
        """Since when the kept changes are complete (None: the journal is closed)."""

        def read(conn: Connection) -> int | None:
            since = conn.execute(select(J.c.since).where(J.c.id == 1)).scalar()
            return None if since is None else int(since)

        return await self._read(read)

    async def get_messages(self, ids: Sequence[str]) -> dict[str, MessageRecord]:
        if not ids:
            return {}
        unique = list(dict.fromkeys(ids))

        return await self._read(
            functools.partial(_select_messages, ids=unique), bounded=len(unique) <= _INLINE_ROWS
        )

    async def delete_messages(
        self,
        ids: Sequence[str],
        *,
        now: int,
        track_vectors: bool = False,
        record_changes: bool = False,
        guard: Callable[[dict[str, MessageRecord]], None] | None = None,
    ) -> list[MessageRecord]:
        """Deletes the messages that exist (with record_changes, recording each deletion). `guard` sees
        them, locked, before anything is deleted; if it raises, nothing is."""
        if not ids:
            return []

        def body(conn: Connection) -> list[MessageRecord]:
            existing = self._locked_messages(conn, list(dict.fromkeys(ids)))
            if guard is not None:
                guard(existing)
            if existing:
                for ids_slice in _slices(list(existing)):
                    conn.execute(delete(M).where(M.c.id.in_(ids_slice)))
                self._write_stats(conn, removed=[(m.thread_id, m.resource_id) for m in existing.values()])
                for threads in _slices(sorted({m.thread_id for m in existing.values()})):
                    conn.execute(update(T).where(T.c.id.in_(threads)).values(updated_at=now))
                if track_vectors:
                    _write_outbox(conn, [(m.id, m) for m in existing.values()], now)
                if record_changes:
                    self._write_changes(conn, self._deletions(conn, list(existing.values())), now)
            return list(existing.values())

        return await self._write_transaction(body)

    # ------------------------------------------------------------------ thread statistics
    def _write_stats(
        self,
        conn: Connection,
        removed: Iterable[tuple[str, str | None]] = (),
        added: Iterable[tuple[str, str | None]] = (),
    ) -> None:
        """Applies a write's effect on the per-(thread, resource) message counts and bumps their
        versions: `removed` are the (thread, resource) of rows as they were, `added` as they are now."""
        delta: dict[tuple[str, str], int] = {}
        for thread_id, resource_id in removed:
            key = (thread_id, resource_id or _NO_RESOURCE)
            delta[key] = delta.get(key, 0) - 1
        for thread_id, resource_id in added:
            key = (thread_id, resource_id or _NO_RESOURCE)
            delta[key] = delta.get(key, 0) + 1
        if not delta:
            return
        stmt = self._insert(TR)
        stmt = stmt.on_conflict_do_update(
            index_elements=["thread_id", "resource_id"],
            set_={
                "message_count": TR.c.message_count + stmt.excluded.message_count,
                "version": TR.c.version + 1,
            },
        )
        # Sorted: concurrent writers touch the rows in one order (no deadlocks).
        rows = [
            {"thread_id": t, "resource_id": r, "message_count": n, "version": 1}
            for (t, r), n in sorted(delta.items())
        ]
        conn.execute(stmt, rows)

    # ------------------------------------------------------------------ vector outbox
    async def outbox_snapshot(
        self,
        *,
        message_ids: Sequence[str] | None = None,
        limit: int = 256,
        queued_before: int | None = None,
        skip_resources: Collection[str | None] = (),
        skip_entries: Collection[int] = (),
        after: int | None = None,
    ) -> tuple[list[OutboxEntry], dict[str, MessageRecord]]:
        """Queued changes (the oldest, or those of the given messages) and the current rows of their
        messages, read in one snapshot: an entry seen here describes a change these rows already show.
        `skip_resources`: leave out the entries of messages these resources hold now (a rebuild of
        theirs is under way); a deleted message's entry is never left out. `skip_entries`: leave out
        these entries (held back after the embedder refused their messages). `after`: only entries
        queued after this one (a drain's pass through the queue)."""
        stmt = self.outbox_statement(
            message_ids=message_ids,
            limit=limit,
            queued_before=queued_before,
            skip_resources=skip_resources,
            skip_entries=skip_entries,
            after=after,
        )

        def snapshot(conn: Connection) -> tuple[list[OutboxEntry], dict[str, MessageRecord]]:
            entries = [OutboxEntry(r[0], r[1], r[2], r[3]) for r in conn.execute(stmt)]
            ids = [e.message_id for e in entries]
            if message_ids is not None and len(entries) >= limit:
                # The limit may have left some of these messages' entries unread (one message queued
                # hundreds of times). The request waiting for them still gets their vectors, where
                # their changes put them: their rows are read, and the places those entries say the
                # messages were filed before; the entries themselves stay for the drain.
                asked = list(message_ids)
                places = (
                    select(O.c.message_id, O.c.previous_resource_id, O.c.was_stored)
                    .where(O.c.message_id.in_(asked), O.c.id > entries[-1].id)
                    .distinct()
                )
                entries += [OutboxEntry(None, r[0], r[1], r[2]) for r in conn.execute(places)]
                ids += asked
            return entries, _select_messages(conn, list(dict.fromkeys(ids)))

        if self.read_engine is not None:

            def read(conn: Connection) -> tuple[list[OutboxEntry], dict[str, MessageRecord]]:
                # One read transaction (WAL: a snapshot that never waits for the writer), on a plain
                # connection: one thread hop at most instead of one per statement through aiosqlite.
                with _sqlite_transaction(conn, "BEGIN"):
                    return snapshot(conn)

            # Bounded: at most `limit` entries, looked up by message id, and as many message rows.
            return await self._read(read, bounded=message_ids is not None and 2 * limit <= _INLINE_ROWS)
        async with self.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="REPEATABLE READ")
            async with conn.begin():
                return await conn.run_sync(snapshot)

    def outbox_statement(
        self,
        *,
        message_ids: Sequence[str] | None = None,
        limit: int = 256,
        queued_before: int | None = None,
        skip_resources: Collection[str | None] = (),
        skip_entries: Collection[int] = (),
        after: int | None = None,
    ) -> _AnySelect:
        """outbox_snapshot's read of the entries (see there)."""
        stmt = (
            select(O.c.id, O.c.message_id, O.c.previous_resource_id, O.c.was_stored)
            .order_by(O.c.id)
            .limit(limit)
        )
        if message_ids is not None:
            stmt = stmt.where(O.c.message_id.in_(list(message_ids)))
        if queued_before is not None:
            stmt = stmt.where(O.c.created_at <= queued_before)
        if skip_entries:
            stmt = stmt.where(O.c.id.not_in(list(skip_entries)))
        if after is not None:
            stmt = stmt.where(O.c.id > after)
        if skip_resources:
            named = [r for r in skip_resources if r is not None]
            held = or_(
                M.c.resource_id.in_(named) if named else false(),
                M.c.resource_id.is_(None) if None in skip_resources else false(),
            )
            owner = select(M.c.id).where(M.c.id == O.c.message_id, held)
            stmt = stmt.where(~owner.exists())
        return stmt

    async def outbox_release(self, message_ids: Sequence[str]) -> None:
        """Marks these messages' queued changes as due now (their request could not write them)."""
        if message_ids:
            stmt = update(O).where(O.c.message_id.in_(list(message_ids))).values(created_at=0)
            await self._write_transaction(_one_statement(stmt))

    async def outbox_queue_resource(self, resource_id: str | None) -> int:
        """Queues every message of one resource (None: those stored without one) for vector work, due at
        once; returns how many. A damaged collection is rebuilt from these entries, so the work
        survives a crash part-way through the rebuild."""
        owner = M.c.resource_id.is_(None) if resource_id is None else M.c.resource_id == resource_id
        # Each message as stored under its resource now: where its vectors are, if anywhere.
        rows = select(M.c.id, M.c.resource_id, true(), literal_column("0")).where(owner)
        columns = ["message_id", "previous_resource_id", "was_stored", "created_at"]
        stmt = O.insert().from_select(columns, rows)

        def body(conn: Connection) -> int:
            return int(conn.execute(stmt).rowcount or 0)

        return await self._write_transaction(body)

    async def outbox_done(
        self, entry_ids: Sequence[int], written: Mapping[str, MessageRecord | None] | None = None
    ) -> list[str]:
        """Settles these entries once their vectors are written. `written`: the rows (None: no row) the
        vectors were made from; a message whose row differs now is queued again, due at once, and its id
        returned.

        Another writer (a replica, the drain, a rebuild) may have written a newer version's vectors
        between this writer's read and its write, and settled that version's entry: the index would
        keep the older vectors with nothing queued to fix them. Any change committed after the read
        below is written by its own writer after this one's write, so checking here is enough."""
        written = written or {}
        if not entry_ids and not written:
            return []

        def body(conn: Connection) -> list[str]:
            current = _select_messages(conn, list(written))
            changed = [i for i, row in written.items() if current.get(i) != row]
            # Vectors of `row` are what the index may hold now: where a move or delete must clean up.
            _write_outbox(conn, [(i, written[i]) for i in changed], 0)
            # A write of merged pipeline batches settles thousands.
            for ids in _slices(sorted(set(entry_ids))):
                conn.execute(delete(O).where(O.c.id.in_(ids)))
            return changed

        return await self._write_transaction(body)

    async def outbox_queued(self, message_ids: Sequence[str]) -> dict[str, int]:
        """How many vector work entries each of these messages has queued (none: left out); while it has
        any, its index entries may not match SQL."""

        def read(conn: Connection) -> dict[str, int]:
            found: dict[str, int] = {}
            for some in _slices(list(dict.fromkeys(message_ids))):
                found.update((row[0], int(row[1])) for row in conn.execute(self.outbox_count_statement(some)))
            return found

        if not message_ids:
            return {}
        return await self._read(read)

    @staticmethod
    def outbox_count_statement(message_ids: Sequence[str]) -> _AnySelect:
        """outbox_queued's count for one slice of its messages."""
        return (
            select(O.c.message_id, func.count())
            .where(O.c.message_id.in_(list(message_ids)))
            .group_by(O.c.message_id)
        )

    async def refresh_statistics(self) -> None:
        """After a bulk write (an import): PostgreSQL's planner statistics of the tables it filled, made
        fresh at once. A server's connections keep generic plans made while the tables were small: a
        save's lookup of its own rows by id stayed a sequential scan, 15 ms at 100,000 messages instead
        of well under 1, until autovacuum next analyzed the table (up to a minute or more later); an
        ANALYZE replaces those plans in every session. SQLite keeps no statistics unless asked and
        plans each statement as it prepares it: nothing to do."""
        if not self.is_postgres:
            return
        names = ", ".join(t.name for t in (T, M, TR, R, O))
        async with self.engine.begin() as conn:
            await conn.execute(text(f"ANALYZE {names}"))

    async def outbox_backlog(self) -> int:
        async with self.engine.connect() as conn:
            return (await conn.execute(select(func.count()).select_from(O))).scalar_one()

    async def thread_resource_ids(self, thread_id: str) -> list[str | None]:
        """The resources whose messages a thread holds (None: messages without one)."""
        stmt = select(TR.c.resource_id).where(TR.c.thread_id == thread_id, TR.c.message_count > 0)
        # A range of the primary key, one row per resource: on SQLite's event loop, not a worker thread,
        # where a search's lookup waited behind the Chroma queries of other searches.
        rows = await self._read(lambda conn: conn.execute(stmt).all(), bounded=True)
        return [r[0] or None for r in rows]

    async def message_resource_ids(self) -> list[str | None]:
        """Every resource that holds messages (None: messages without one)."""
        stmt = select(TR.c.resource_id).where(TR.c.message_count > 0).distinct()
        rows = await self._read(lambda conn: conn.execute(stmt).all())
        return sorted({r[0] or None for r in rows}, key=lambda r: (r is not None, r or ""))

    def _in_order_statement(
        self, *, after: MessageRecord | None, limit: int, resource_id: str | None, without_resource: bool
    ) -> _AnySelect:
        stmt = select(*_MESSAGE_COLUMNS)
        if not without_resource and resource_id is None:
            # All messages: by insertion sequence, the primary key.
            if after is not None:
                stmt = stmt.where(M.c.seq > after.seq)
            return stmt.order_by(M.c.seq).limit(limit)
        # One resource's (or those without one): in the order of ix_messages_resource_order, so that a
        # page reads on where the last one ended instead of sorting all the resource's rows again.
        stmt = stmt.where(M.c.resource_id.is_(None) if without_resource else M.c.resource_id == resource_id)
        if after is not None:
            stmt = stmt.where(tuple_(M.c.created_at, M.c.seq) > tuple_(after.created_at, after.seq))
        return stmt.order_by(M.c.created_at, M.c.seq).limit(limit)

    async def messages_in_order(
        self,
        *,
        after: MessageRecord | None,
        limit: int,
        resource_id: str | None = None,
        without_resource: bool = False,
    ) -> list[MessageRecord]:
        """A page of messages for a full re-index, the one after `after` (the last message of the
        page before, None for the first): all messages by insertion sequence, or one resource's (with
        `without_resource`, those stored without one) by createdAt and sequence."""
        stmt = self._in_order_statement(
            after=after, limit=limit, resource_id=resource_id, without_resource=without_resource
        )
        async with self.engine.connect() as conn:
            result = await conn.execute(stmt)
            return [_message(row) for row in result]

    async def count_all_messages(self, resource_id: str | None = None) -> int:
        stmt = select(func.count()).select_from(M)
        if resource_id is not None:
            stmt = stmt.where(M.c.resource_id == resource_id)
        async with self.engine.connect() as conn:
            return (await conn.execute(stmt)).scalar_one()

    # ------------------------------------------------------------------ messages: read
    def _json_equals(self, column: Any, key: str, value: Any) -> ColumnElement[bool]:
        """`column.key == value` with JSON's types: true is not 1, null is not a missing key."""
        if self.is_postgres:
            # jsonb containment is exactly that equality (numbers compare numerically) and is indexable.
            return column.op("@>")(func.cast(literal(_json_text({key: value})), postgresql.JSONB))
        path = f"$.{key}"
        kind = func.json_type(column, path)
        if value is None:
            return kind == "null"
        if value is True:
            return kind == "true"
        if value is False:
            return kind == "false"
        extracted = func.json_extract(column, path)
        if isinstance(value, str):
            return and_(kind == "text", extracted == value)
        return and_(kind.in_(("integer", "real")), extracted == value)

    def _filter_params(self, q: MessageQuery) -> tuple[_FilterShape, dict[str, Any]]:
        """The filter's shape (which conditions, of which JSON types) and its parameter values.
        Statements are built once per shape and cached: building SQLAlchemy statements per request
        cost more than running them."""
        params: dict[str, Any] = {"thread_id": q.thread_id}
        if q.resource_id:
            params["resource_id"] = q.resource_id
        dr = q.date_range
        if dr is not None:
            if dr.start is not None:
                params["start"] = dr.start
            if dr.end is not None:
                params["end"] = dr.end
        kinds: tuple[str, ...] = ()
        if q.metadata:
            if self.is_postgres:
                params["metadata"] = _json_text(q.metadata)
                kinds = ("jsonb",)
            else:
                kinds = tuple(_json_kind(v) for v in q.metadata.values())
                for n, (key, value) in enumerate(q.metadata.items()):
                    params[f"path{n}"] = f"$.metadata.{key}"
                    if _json_kind(value) in ("text", "number", "plain"):
                        params[f"value{n}"] = value
                    if _json_kind(value) == "plain":
                        params[f"needle{n}"] = _json_text(value)
        hidden: tuple[str, str] | None = None
        if q.hidden is not None:
            kind = q.hidden if isinstance(q.hidden, str) else "types"
            hidden = ("visible", kind)
            if kind == "types":
                params["hidden_types"] = tuple(q.hidden)
        bounds: tuple[tuple[str, str], ...] = ()
        if q.after is not None:
            bounds += (("gt", "after"),)
            params["after_at"], params["after_seq"] = q.after
        if q.before is not None:
            bounds += (("lt", "before"),)
            params["before_at"], params["before_seq"] = q.before
        shape = _FilterShape(
            bool(q.resource_id),
            dr is not None and dr.start is not None,
            dr is not None and dr.start_exclusive,
            dr is not None and dr.end is not None,
            dr is not None and dr.end_exclusive,
            kinds,
            hidden,
            bounds,
        )
        return shape, params

    def _filter_conditions(
        self, shape: _FilterShape, thread: ColumnElement[bool] | None = None
    ) -> list[ColumnElement[bool]]:
        """The page query's WHERE: `thread` (default: thread_id = :thread_id), then the filter's."""
        has_resource, has_start, start_exclusive, has_end, end_exclusive, kinds, hidden, bounds = shape
        where: list[ColumnElement[bool]] = [
            thread if thread is not None else M.c.thread_id == bindparam("thread_id")
        ]
        if has_resource:
            where.append(_resource_filter(M.c.resource_id == bindparam("resource_id")))
        if has_start:
            start: BindParameter[int] = bindparam("start")
            where.append(M.c.created_at > start if start_exclusive else M.c.created_at >= start)
        if has_end:
            end: BindParameter[int] = bindparam("end")
            where.append(M.c.created_at < end if end_exclusive else M.c.created_at <= end)
        if kinds == ("jsonb",):
            where.append(_PG_METADATA.op("@>")(func.cast(bindparam("metadata"), postgresql.JSONB)))
        else:
            for n, kind in enumerate(kinds):
                path: BindParameter[str] = bindparam(f"path{n}")
                json_type = func.json_type(M.c.content, path)
                if kind in ("null", "true", "false"):
                    where.append(json_type == kind)
                    continue
                extracted = func.json_extract(M.c.content, path) == bindparam(f"value{n}")
                # Literal type names, not parameters: the statement is cached per shape anyway.
                types = ("text",) if kind in ("text", "plain") else ("integer", "real")
                typed = json_type.in_([literal_column(f"'{t}'") for t in types])
                if kind == "plain":
                    # Without the string's JSON literal anywhere in the row's text, the row cannot match:
                    # a substring search spares the two JSON parses of most non-matching rows.
                    where.append(and_(func.instr(M.c.content, bindparam(f"needle{n}")) > 0, typed, extracted))
                else:
                    where.append(and_(typed, extracted))
        if hidden is not None:
            where.append(_hidden_condition(*hidden))
        where.extend(_place_condition(op, name) for op, name in bounds)
        return where

    def _page_template(self, shape: _FilterShape, descending: bool) -> _AnySelect:
        key = ("page", shape, descending)
        stmt = self._statements.get(key)
        if stmt is None:
            stmt = (
                select(*_MESSAGE_COLUMNS)
                .where(*self._filter_conditions(shape))
                .order_by(*_page_order(descending))
                .limit(bindparam("limit"))
                .offset(bindparam("offset"))
            )
            self._statements[key] = stmt
        return stmt

    def _count_template(self, shape: _FilterShape) -> _AnySelect:
        key = ("count", shape)
        stmt = self._statements.get(key)
        if stmt is None:
            stmt = select(func.count()).select_from(M).where(*self._filter_conditions(shape))
            self._statements[key] = stmt
        return stmt

    def _stats(self, conn: Connection, q: MessageQuery) -> tuple[int, int]:
        """The thread's maintained row count (of q's resource, when it names one) and change counter."""
        stats_key = ("stats", bool(q.resource_id))
        stats = self._statements.get(stats_key)
        if stats is None:
            stats = select(
                func.coalesce(func.sum(TR.c.message_count), 0), func.coalesce(func.sum(TR.c.version), 0)
            ).where(TR.c.thread_id == bindparam("thread_id"))
            if q.resource_id:
                stats = stats.where(TR.c.resource_id == bindparam("resource_id"))
            self._statements[stats_key] = stats
        values = {"thread_id": q.thread_id}
        if q.resource_id:
            values["resource_id"] = q.resource_id
        maintained, version = conn.execute(stats, values).one()
        return int(maintained), int(version)

    def _count(
        self,
        conn: Connection,
        q: MessageQuery,
        shape: _FilterShape,
        params: dict[str, Any],
        *,
        scan: bool = True,
    ) -> int:
        """The page query's COUNT without scanning the thread: unfiltered counts are maintained in
        thread_resources; filtered ones are cached under the thread's change counter, so a count is
        recomputed only after the thread changed. (Queries between places: _place_counts.)"""
        assert q.after is None and q.before is None
        maintained, version = self._stats(conn, q)
        return self._rows(conn, shape, params, version, maintained, scan=scan)

    def _place_counts(
        self,
        conn: Connection,
        q: MessageQuery,
        shape: _FilterShape,
        params: dict[str, Any],
        maintained: int,
        version: int,
        *,
        scan: bool,
    ) -> tuple[int, int]:
        """For a query between places: the matching rows after `after` (all of them without it) and
        those at or after `before` (none without it); the rows between are the difference. Both count
        from the newest end of the thread, so paging back from the newest messages counts what lies
        between them and the place, not the history before it; and a page read from a place leaves the
        count at the next page's place in the cache (_seed_place_count), so paging on counts nothing."""
        whole, unplaced = _unplaced(shape, params)
        if q.after is not None:
            upper = self._rows(
                conn, *_from_place(whole, unplaced, _next_place(q.after)), version, maintained, scan=scan
            )
        else:
            upper = self._rows(conn, whole, unplaced, version, maintained, scan=scan)
        lower = 0
        if q.before is not None:
            lower = self._rows(conn, *_from_place(whole, unplaced, q.before), version, maintained, scan=scan)
        return upper, lower

    def _seed_place_count(
        self,
        shape: _FilterShape,
        params: dict[str, Any],
        counts: tuple[int, int, int, int],
        rows: list[MessageRecord],
        *,
        descending: bool,
    ) -> None:
        """After the first page from a place (offset 0), the count the page from its far end will need:
        newest first, the page is every matching row from its oldest up to `before`, so the rows at or
        after its oldest are those at or after `before` and the page's; oldest first, the rows after its
        newest are those after `after` less the page's."""
        upper, lower, version, maintained = counts
        if descending:
            place, count = rows[-1].order_key, lower + len(rows)
        else:
            place, count = _next_place(rows[-1].order_key), upper - len(rows)
        key_shape, key_params = _from_place(*_unplaced(shape, params), place)
        self._cache_counts([(("count", key_shape, tuple(key_params.items())), (version, count, maintained))])

    def _rows(
        self,
        conn: Connection,
        shape: _FilterShape,
        params: dict[str, Any],
        version: int,
        maintained: int,
        *,
        scan: bool,
    ) -> int:
        """How many rows a filter shape matches: without conditions beyond the thread (and resource),
        the maintained count; else a COUNT, cached under the thread's change counter."""
        if not _conditioned(shape):
            return maintained
        key = ("count", shape, tuple(params.items()))
        if (cached := self._cached_count(key, version)) is not None:
            return cached
        if not scan:
            raise _NeedsWorker
        every = _every_part(shape)
        if every is not None:
            total = self._rows(conn, every, _every_values(params), version, maintained, scan=scan)
            total -= self._rows(conn, _hidden_part(shape), params, version, maintained, scan=scan)
        else:
            total = int(conn.execute(self._count_template(shape), params).scalar_one())
        self._cache_counts([(key, (version, total, maintained))])
        return total

    def _cached_count(self, key: tuple[Any, ...], version: int) -> int | None:
        """A filtered count remembered under this change counter, if it still is the current one."""
        with self._count_lock:
            cached = self._count_cache.get(key)
        return cached[1] if cached is not None and cached[0] == version else None

    def _cache_counts(self, counts: Iterable[tuple[tuple[Any, ...], tuple[int, int, int]]]) -> None:
        """Remembers filtered counts: (key, (thread version, matching rows, the thread's rows))."""
        with self._count_lock:
            for key, value in counts:
                self._count_cache[key] = value
                self._count_cache.move_to_end(key)
            while len(self._count_cache) > _COUNT_CACHE_SIZE:
                self._count_cache.popitem(last=False)

    async def list_resource_messages(
        self,
        resource_id: str,
        *,
        offset: int,
        limit: int | None,
        descending: bool,
        date_range: DateRange | None = None,
        metadata: dict[str, Any] | None = None,
        max_rows: int | None = None,
        counted: bool = True,
    ) -> tuple[list[MessageRecord], int | None]:
        """A page of the messages filed under a resource, across its threads (Mastra's
        listMessagesByResourceId), by createdAt then insertion, and how many match. The filters are
        recall's (date range, metadata), on ix_messages_resource_order. With `max_rows`, an every-row
        read (limit None) that counts more than that reads none (the caller refuses it on the total).
        Not `counted` (a page of `limit` rows only): no count (None), and one row more than the page,
        which tells whether another page follows."""
        counted = counted or limit is None
        # Recall's filter, anchored on the resource instead of a thread (no :thread_id to bind).
        shape, params = self._filter_params(MessageQuery("", date_range=date_range, metadata=metadata or {}))
        del params["thread_id"]
        params |= {"owner": resource_id, "offset": min(offset, _SQL_INT_MAX)}
        if limit is not None:
            params["limit"] = min(limit if counted else limit + 1, _SQL_INT_MAX)
        page, count = self._resource_statements(shape, descending, every_row=limit is None)
        plain = not _conditioned(shape)

        def read(conn: Connection) -> tuple[list[MessageRecord], int | None]:
            if not counted:
                return [_message(row) for row in conn.execute(page, params)], None
            if plain:
                total = int(conn.execute(count, params).scalar_one())  # PostgreSQL sums bigints as numeric
            else:
                total = self._resource_rows(conn, resource_id, shape, params, count)
            if (limit is None and max_rows is not None and total > max_rows) or limit == 0:
                return [], total
            return [_message(row) for row in conn.execute(page, params)], total

        # Unfiltered, a page walks the resource's index and its count reads a row per thread.
        return await self._read(read, bounded=plain and limit is not None and offset + limit <= _INLINE_ROWS)

    def _resource_rows(
        self,
        conn: Connection,
        resource_id: str,
        shape: _FilterShape,
        params: dict[str, Any],
        count: _AnySelect,
    ) -> int:
        """A filtered count of a resource's messages, cached as a thread's are: under the sum of the
        resource's per-thread change counters, which every write of one of its messages raises (rows
        are never deleted, counters only grow), so a page after the first counts nothing until the
        resource's messages change."""
        versions = self._statements.get(("resource-version",))
        if versions is None:
            versions = select(func.coalesce(func.sum(TR.c.version), 0)).where(
                TR.c.resource_id == bindparam("owner")
            )
            self._statements[("resource-version",)] = versions
        version = int(conn.execute(versions, {"owner": resource_id}).scalar_one())
        key = (
            "resource-count",
            shape,
            tuple((k, v) for k, v in params.items() if k not in ("offset", "limit")),
        )
        if (cached := self._cached_count(key, version)) is not None:
            return cached
        total = int(conn.execute(count, params).scalar_one())
        self._cache_counts([(key, (version, total, 0))])
        return total

    def _resource_statements(
        self, shape: _FilterShape, descending: bool, *, every_row: bool
    ) -> tuple[_AnySelect, _AnySelect]:
        """A resource's messages: the page statement and the count, of a filter shape (:owner)."""
        page_key, count_key = ("resource-page", shape, descending, every_row), ("resource-count", shape)
        if page_key not in self._statements or count_key not in self._statements:
            where = self._filter_conditions(shape, thread=M.c.resource_id == bindparam("owner"))
            stmt = select(*_MESSAGE_COLUMNS).where(*where).order_by(*_page_order(descending))
            stmt = stmt.offset(bindparam("offset"))
            self._statements[page_key] = stmt if every_row else stmt.limit(bindparam("limit"))
            if not _conditioned(shape):
                # Unfiltered: the per-thread counts every write keeps (a row per thread the resource
                # has messages in, on ix_thread_resources_resource), not a walk of every message.
                total = func.coalesce(func.sum(TR.c.message_count), 0)
                self._statements[count_key] = select(total).where(TR.c.resource_id == bindparam("owner"))
            else:
                self._statements[count_key] = select(func.count()).select_from(M).where(*where)
        return self._statements[page_key], self._statements[count_key]

    def resource_count_statement(
        self, resource_id: str, *, date_range: DateRange | None = None, metadata: dict[str, Any] | None = None
    ) -> _AnySelect:
        """The count of a resource's messages, its values bound (for EXPLAIN in tests)."""
        shape, params = self._filter_params(MessageQuery("", date_range=date_range, metadata=metadata or {}))
        del params["thread_id"]
        return self._resource_statements(shape, False, every_row=False)[1].params(**params, owner=resource_id)

    def page_statement(self, q: MessageQuery, *, descending: bool, limit: int, offset: int) -> _AnySelect:
        """The page query with its values bound (for EXPLAIN in tests)."""
        shape, params = self._filter_params(q)
        return self._page_template(shape, descending).params(**params, limit=limit, offset=offset)

    def count_statement(self, q: MessageQuery) -> _AnySelect:
        shape, params = self._filter_params(q)
        return self._count_template(shape).params(**params)

    def hidden_count_statement(self, q: MessageQuery) -> _AnySelect:
        """The count of the rows a query with `hidden` leaves out (for EXPLAIN in tests)."""
        shape, params = self._filter_params(q)
        return self._count_template(_hidden_part(shape)).params(**params)

    async def read_page(
        self,
        q: MessageQuery,
        *,
        descending: bool,
        limit: int | None,
        offset: int,
        windows: Sequence[IncludeWindow] = (),
        window_resource_id: str | None = None,
        with_thread: bool = False,
        max_rows: int | None = None,
        max_window_rows: int | None = None,
    ) -> PageRead:
        """Everything one recall reads, in one round trip to the reading thread: the thread (for the
        ownership check), the count and the page (limit None: every row; 0: neither) and the include
        windows. With `max_rows`, a page that would hold more rows than that (counted first) reads none
        (the caller refuses it on the total). With `max_window_rows`, windows that would read more rows
        than that stop there and raise WindowRowsExceeded."""

        shape, params = self._filter_params(q)
        inline = self._inline_page(
            q,
            shape,
            params,
            limit=limit,
            offset=offset,
            windows=windows,
            window_resource_id=window_resource_id,
        )
        loop_thread = threading.get_ident()

        def read(conn: Connection) -> PageRead:
            thread = None
            if with_thread:
                row = conn.execute(select(T).where(T.c.id == q.thread_id)).first()
                thread = _thread(row) if row else None
            total, rows = 0, []
            if limit is None or limit > 0:
                # On SQLite's event loop thread, a count that is not cached is left to a worker thread.
                scan = self.read_engine is None or threading.get_ident() != loop_thread
                counts: tuple[int, int, int, int] | None = None
                if q.after is not None or q.before is not None:
                    maintained, version = self._stats(conn, q)
                    upper, lower = self._place_counts(conn, q, shape, params, maintained, version, scan=scan)
                    # `before` at or before `after`: nothing between them.
                    total, counts = max(0, upper - lower), (upper, lower, version, maintained)
                else:
                    total = self._count(conn, q, shape, params, scan=scan)
                # SQL integers are 64-bit; a larger page size or offset means "everything" / "past the end".
                page = {
                    **params,
                    "limit": min(limit if limit is not None else total, _SQL_INT_MAX),
                    "offset": min(offset, _SQL_INT_MAX),
                }
                if max_rows is None or page_rows(total, limit, offset) <= max_rows:
                    rows = [
                        _message(row) for row in conn.execute(self._page_template(shape, descending), page)
                    ]
                if counts is not None and rows and offset == 0:
                    self._seed_place_count(shape, params, counts, rows, descending=descending)
            return PageRead(
                thread, rows, total, self._windows(conn, windows, window_resource_id, budget=max_window_rows)
            )

        return await self._read(read, bounded=inline)

    async def read_pages(
        self,
        queries: Sequence[MessageQuery],
        *,
        descending: bool,
        limit: int,
        offset: int,
        max_rows: int | None = None,
    ) -> list[tuple[int, list[MessageRecord] | None]]:
        """What read_page reads for each query (a page of `limit` > 0 rows, without windows or the
        thread), for queries that differ only in their thread, in one read: one statement counts every
        thread (the maintained counts; a filter's uncached counts in one more), one reads every page
        (PostgreSQL: a LATERAL join of the thread ids; SQLite, in process, runs the page statement per
        thread on one connection). Each query's (total, page). With `max_rows`, the queries take their
        pages in order while the rows fit, as read_page calls drawing on one budget one after another
        would: a page that would go past what is left is not read (None) and takes nothing."""
        if not queries:
            return []
        if queries[0].after is not None or queries[0].before is not None:
            raise ValueError("read_pages reads no pages between places (read_page does)")
        shape, params = self._filter_params(queries[0])
        if any(replace(q, thread_id=queries[0].thread_id) != queries[0] for q in queries):
            raise ValueError("read_pages reads queries that differ only in their thread")
        ids = list(dict.fromkeys(q.thread_id for q in queries))
        per_thread = [{**params, "thread_id": i} for i in ids]
        inline = len(ids) * (offset + limit) <= _INLINE_ROWS and all(
            self._inline_page(
                queries[0], shape, p, limit=limit, offset=offset, windows=(), window_resource_id=None
            )
            for p in per_thread
        )
        loop_thread = threading.get_ident()

        def read(conn: Connection) -> list[tuple[int, list[MessageRecord] | None]]:
            scan = self.read_engine is None or threading.get_ident() != loop_thread
            totals = self._counts(conn, queries[0], shape, per_thread, scan=scan)
            left = max_rows
            taken: list[bool] = []
            for q in queries:
                rows = page_rows(totals[q.thread_id], limit, offset)
                fits = left is None or rows <= left
                if fits and left is not None:
                    left -= rows
                taken.append(fits)
            pages = self._pages(
                conn,
                shape,
                params,
                list(dict.fromkeys(q.thread_id for q, t in zip(queries, taken, strict=True) if t)),
                descending=descending,
                limit=min(limit, _SQL_INT_MAX),
                offset=min(offset, _SQL_INT_MAX),
            )
            return [
                (totals[q.thread_id], pages.get(q.thread_id, []) if t else None)
                for q, t in zip(queries, taken, strict=True)
            ]

        return await self._read(read, bounded=inline)

    def _counts(
        self,
        conn: Connection,
        q: MessageQuery,
        shape: _FilterShape,
        per_thread: list[dict[str, Any]],
        *,
        scan: bool,
    ) -> dict[str, int]:
        """_count for several threads under one filter, in one statement (two when a filter's counts
        are not all cached): each thread's count by id."""
        key = ("stats-many", bool(q.resource_id))
        stats = self._statements.get(key)
        if stats is None:
            stats = (
                select(
                    TR.c.thread_id,
                    func.coalesce(func.sum(TR.c.message_count), 0),
                    func.coalesce(func.sum(TR.c.version), 0),
                )
                .where(TR.c.thread_id.in_(bindparam("thread_ids", expanding=True)))
                .group_by(TR.c.thread_id)
            )
            if q.resource_id:
                stats = stats.where(TR.c.resource_id == bindparam("resource_id"))
            self._statements[key] = stats
        resource = {"resource_id": q.resource_id} if q.resource_id else {}
        maintained: dict[str, tuple[int, int]] = {}
        for chunk in _slices([p["thread_id"] for p in per_thread]):
            for thread_id, count, version in conn.execute(stats, {"thread_ids": chunk, **resource}):
                maintained[thread_id] = (int(count), int(version))
        return self._many_rows(conn, shape, per_thread, maintained, scan=scan)

    def _many_rows(
        self,
        conn: Connection,
        shape: _FilterShape,
        per_thread: list[dict[str, Any]],
        maintained: dict[str, tuple[int, int]],
        *,
        scan: bool,
    ) -> dict[str, int]:
        """_rows for several threads under one filter shape (without places), by thread id: the
        counts not cached are counted in one statement (two, less one from the other, when hidden rows
        are left out)."""
        if not _conditioned(shape):
            return {p["thread_id"]: maintained.get(p["thread_id"], (0, 0))[0] for p in per_thread}
        totals: dict[str, int] = {}
        missing: list[dict[str, Any]] = []
        with self._count_lock:
            for p in per_thread:
                cached = self._count_cache.get(("count", shape, tuple(p.items())))
                version = maintained.get(p["thread_id"], (0, 0))[1]
                if cached is not None and cached[0] == version:
                    totals[p["thread_id"]] = cached[1]
                else:
                    missing.append(p)
        if not missing:
            return totals
        if not scan:
            raise _NeedsWorker
        every = _every_part(shape)
        if every is not None:
            counted = self._many_rows(conn, every, [_every_values(p) for p in missing], maintained, scan=scan)
            gone = self._many_rows(conn, _hidden_part(shape), missing, maintained, scan=scan)
            counted = {thread_id: n - gone[thread_id] for thread_id, n in counted.items()}
        else:
            count_key = ("count-many", shape)
            count = self._statements.get(count_key)
            if count is None:
                thread_in = M.c.thread_id.in_(bindparam("thread_ids", expanding=True))
                count = (
                    select(M.c.thread_id, func.count())
                    .where(*self._filter_conditions(shape, thread_in))
                    .group_by(M.c.thread_id)
                )
                self._statements[count_key] = count
            values = {k: v for k, v in missing[0].items() if k != "thread_id"}
            counted = {}
            for chunk in _slices([p["thread_id"] for p in missing]):
                counted.update((t, int(n)) for t, n in conn.execute(count, {**values, "thread_ids": chunk}))
        fresh = []
        for p in missing:
            thread_id = p["thread_id"]
            totals[thread_id] = counted.get(thread_id, 0)
            thread_rows, version = maintained.get(thread_id, (0, 0))
            fresh.append((("count", shape, tuple(p.items())), (version, totals[thread_id], thread_rows)))
        self._cache_counts(fresh)
        return totals

    def _pages(
        self,
        conn: Connection,
        shape: _FilterShape,
        params: dict[str, Any],
        thread_ids: list[str],
        *,
        descending: bool,
        limit: int,
        offset: int,
    ) -> dict[str, list[MessageRecord]]:
        """The page of each thread (one statement on PostgreSQL), by thread id."""
        pages: dict[str, list[MessageRecord]] = {i: [] for i in thread_ids}
        if not thread_ids:
            return pages
        values = {**params, "limit": limit, "offset": offset}
        if not self.is_postgres:
            # In process, a statement costs microseconds: the page statement per thread, on one connection.
            page = self._page_template(shape, descending)
            for thread_id in thread_ids:
                pages[thread_id] = [
                    _message(row) for row in conn.execute(page, {**values, "thread_id": thread_id})
                ]
            return pages
        key = ("pages", shape, descending)
        stmt = self._statements.get(key)
        if stmt is None:
            ids = (
                func.unnest(bindparam("thread_ids", type_=postgresql.ARRAY(Text)))
                .table_valued("id")
                .render_derived(name="ids")
            )
            each = (
                select(*_MESSAGE_COLUMNS)
                .where(*self._filter_conditions(shape, M.c.thread_id == ids.c.id))
                .order_by(*_page_order(descending))
                .limit(bindparam("limit"))
                .offset(bindparam("offset"))
                .lateral("page")
            )
            stmt = select(*each.c).select_from(ids.join(each, true()))
            self._statements[key] = stmt
        values.pop("thread_id")
        for row in conn.execute(stmt, {**values, "thread_ids": thread_ids}):
            record = _message(row)
            pages[record.thread_id].append(record)
        return pages

    def _inline_page(
        self,
        q: MessageQuery,
        shape: _FilterShape,
        params: dict[str, Any],
        *,
        limit: int | None,
        offset: int,
        windows: Sequence[IncludeWindow],
        window_resource_id: str | None,
    ) -> bool:
        """Whether a page read is bounded enough for the event loop. Without filters it walks offset +
        limit entries of the thread's index, with a maintained count. With filters, the last count of
        the same filter tells how many rows the page walks to find its matches (a date range walks only
        matching rows); a filter never counted, or counted before the thread changed, is counted by
        the worker thread (the inline read gives up, see _count)."""
        if limit is None or _window_rows(windows) > _INLINE_ROWS:
            return False
        if windows and not self._windows_compiled(windows, window_resource_id):
            return False
        walked = offset + limit
        if q.metadata:
            with self._count_lock:
                cached = self._count_cache.get(("count", shape, tuple(params.items())))
            if cached is None:
                return False
            _version, matching, rows = cached
            walked = rows if matching == 0 else walked * rows // matching
        return walked <= _INLINE_ROWS

    def window_statement(self, windows: Sequence[IncludeWindow], resource_id: str | None) -> Any:
        """All include windows of a request as one statement (callers chunk very long lists)."""
        template, params = self._window_template(windows, resource_id)
        return template.statement.params(**params)

    def _window_template(
        self, windows: Sequence[IncludeWindow], resource_id: str | None
    ) -> tuple[_WindowTemplate, dict[str, Any]]:
        """The windows' statement, built once per shape and cached, and its parameters. Building it
        per request cost more than the rest of a recall: the 4 windows of a semantic topK of 4 took
        about 10 ms of SQLAlchemy construction, and a whole recall went from 16.7 to 3.5 ms once it
        was cached. Every window reads its target and those before it; only windows with neighbours
        after the target have a second term (an empty one would still cost SQLite its subqueries)."""
        shape = _window_shape(windows, resource_id)
        with self._window_lock:
            template = self._window_templates.get(shape)
            if template is not None:
                self._window_templates.move_to_end(shape)
        if template is None:
            terms = []
            for n, (after, in_thread) in enumerate(shape[0]):
                side = functools.partial(self._window_select, n, resource_id=shape[1], thread_id=in_thread)
                terms.append(side(previous=True))
                if after:
                    terms.append(side(previous=False))
            template = _WindowTemplate(union_all(*terms))
            with self._window_lock:
                self._window_templates[shape] = template
                while len(self._window_templates) > _WINDOW_SHAPES:
                    self._window_templates.popitem(last=False)
        params: dict[str, Any] = {}
        for n, w in enumerate(windows):
            params[f"window_id_{n}"] = w.message_id
            params[f"window_before_{n}"] = w.before + 1  # the target itself is on this side
            if w.after > 0:
                params[f"window_after_{n}"] = w.after
            if w.thread_id is not None:
                params[f"window_thread_{n}"] = w.thread_id
        if resource_id:
            params["window_resource"] = resource_id
        return template, params

    def _windows_compiled(self, windows: Sequence[IncludeWindow], resource_id: str | None) -> bool:
        """Whether these windows' statements are cached and have run before (see _WindowTemplate)."""
        with self._window_lock:
            templates = [
                self._window_templates.get(_window_shape(chunk, resource_id))
                for chunk in _window_chunks(windows)
            ]
        return all(t is not None and t.compiled for t in templates)

    async def explain(self, stmt: Any) -> str:
        """The engine's query plan for a statement built here (tests check that indexes are used)."""
        # The expanded state: an IN of a list is written out as one parameter per item.
        expanded = stmt.compile(dialect=self.engine.dialect).construct_expanded_state()
        params = tuple(expanded.parameters[name] for name in expanded.positiontup or ())
        prefix = "EXPLAIN" if self.is_postgres else "EXPLAIN QUERY PLAN"
        async with self.engine.connect() as conn:
            rows = (await conn.exec_driver_sql(f"{prefix} {expanded.statement}", params)).all()
        return "\n".join(" ".join(str(c) for c in row) for row in rows)

    async def include_windows(
        self, windows: Sequence[IncludeWindow], resource_id: str | None, *, max_rows: int | None = None
    ) -> list[MessageRecord]:
        """The windows' messages (see _windows); past `max_rows` distinct ones, WindowRowsExceeded."""
        if not windows:
            return []
        return await self._read(
            lambda conn: self._windows(conn, windows, resource_id, budget=max_rows),
            bounded=_window_rows(windows) <= _INLINE_ROWS and self._windows_compiled(windows, resource_id),
        )

    def _windows(
        self,
        conn: Connection,
        windows: Sequence[IncludeWindow],
        resource_id: str | None,
        *,
        budget: int | None = None,
    ) -> list[MessageRecord]:
        """Every include window (target plus neighbours in its own thread) in one statement. With a
        `budget`, at most that many distinct messages, else WindowRowsExceeded. A window's neighbour
        counts are only an upper bound (a window of a million neighbours reads its whole thread), so
        when their sum exceeds the budget the statement is read under a LIMIT of WINDOW_OVERLAP times
        the budget: overlapping windows (a message counted by several) still fit, and the database
        stops there whatever the counts ask for."""
        out: list[MessageRecord] = []
        bounded = budget is not None and _window_rows(windows) > budget
        for chunk in _window_chunks(windows):
            template, params = self._window_template(chunk, resource_id)
            if budget is not None and bounded:
                left = budget * WINDOW_OVERLAP + 1 - len(out)
                statement: Any = select(*template.statement.subquery().c).limit(left)
                out.extend(_message(row) for row in conn.execute(statement, params))
                if len(out) > budget * WINDOW_OVERLAP:
                    raise WindowRowsExceeded(budget)
            else:
                out.extend(_message(row) for row in conn.execute(template.statement, params))
                template.compiled = True
        if bounded and budget is not None and len({m.id for m in out}) > budget:
            raise WindowRowsExceeded(budget)
        return out

    def _window_select(self, n: int, *, previous: bool, resource_id: bool, thread_id: bool) -> Any:
        """One side of window `n`. The target's thread and position are scalar subqueries, so the
        engine evaluates them once and then walks ix_messages_thread_order from that position. A target
        outside the bound resource or thread has no thread: the window is empty."""
        t = M.alias("target")
        message_id: BindParameter[str] = bindparam(f"window_id_{n}")

        def target(column: Any) -> Any:
            stmt = select(column).where(t.c.id == message_id)
            if resource_id:
                stmt = stmt.where(_resource_filter(t.c.resource_id == bindparam("window_resource")))
            if thread_id:
                stmt = stmt.where(t.c.thread_id == bindparam(f"window_thread_{n}"))
            return stmt.scalar_subquery()

        key = tuple_(M.c.created_at, M.c.seq)
        target_key = tuple_(target(t.c.created_at), target(t.c.seq))
        cond = [M.c.thread_id == target(t.c.thread_id), key <= target_key if previous else key > target_key]
        if resource_id:
            cond.append(_resource_filter(M.c.resource_id == bindparam("window_resource")))
        order = (M.c.created_at.desc(), M.c.seq.desc()) if previous else (M.c.created_at.asc(), M.c.seq.asc())
        limit: BindParameter[int] = bindparam(f"window_before_{n}" if previous else f"window_after_{n}")
        inner = select(*_MESSAGE_COLUMNS).where(*cond).order_by(*order).limit(limit).subquery()
        return select(*inner.c)

    # ------------------------------------------------------------------ resources
    async def get_resource(self, resource_id: str) -> ResourceRecord | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(R).where(R.c.id == resource_id))).first()
        if row is None:
            return None
        return ResourceRecord(
            id=row.id,
            working_memory=row.working_memory,
            metadata=row.metadata,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )

    # ------------------------------------------------------------------ import / export (resolvers.transfer)
    # Imports compare what is stored with what comes in, then write: in a write transaction, whose
    # BEGIN IMMEDIATE on SQLite keeps another writer from slipping in between (PostgreSQL's upserts
    # are atomic as they are).
    def _stored_for_import(self, conn: Connection, ids: list[str]) -> dict[str, MessageRecord]:
        if not self.is_postgres:
            return _select_messages(conn, ids)
        # One array parameter instead of an expanded IN list: much cheaper to build for a large batch.
        # Locked (in id order, as _locked_messages does), for the reason save_messages locks them.
        ids_param = bindparam("import_ids", value=ids, type_=postgresql.ARRAY(M.c.id.type))
        result = conn.execute(
            select(*_MESSAGE_COLUMNS).where(M.c.id == func.any(ids_param)).order_by(M.c.id).with_for_update()
        )
        return {rec.id: rec for rec in map(_message, result)}

    async def import_resources(self, records: Sequence[ResourceRecord]) -> tuple[int, int]:
        """Upserts resources as given (working memory, metadata, both times), in one transaction;
        rows already stored exactly so are not written. Returns (inserted, updated)."""
        last = {r.id: r for r in records}
        if not last:
            return 0, 0

        def body(conn: Connection) -> tuple[int, int]:
            stored: dict[str, tuple[Any, ...]] = {}
            ids = list(last)
            for start in range(0, len(ids), 500):
                stmt = select(R.c.id, R.c.working_memory, R.c.metadata, R.c.created_at, R.c.updated_at)
                for row in conn.execute(stmt.where(R.c.id.in_(ids[start : start + 500]))):
                    stored[row[0]] = tuple(row[1:])
            write = [
                r
                for r in last.values()
                if stored.get(r.id) != (r.working_memory, r.metadata, r.created_at, r.updated_at)
            ]
            if write:
                stmt = self._insert(R)
                stmt = stmt.on_conflict_do_update(
                    index_elements=["id"],
                    set_={
                        c: getattr(stmt.excluded, c)
                        for c in ("working_memory", "metadata", "created_at", "updated_at")
                    },
                )
                conn.execute(
                    stmt,
                    [
                        {
                            "id": r.id,
                            "working_memory": r.working_memory,
                            "metadata": r.metadata,
                            "created_at": r.created_at,
                            "updated_at": r.updated_at,
                        }
                        for r in write
                    ],
                )
            inserted = sum(1 for r in write if r.id not in stored)
            return inserted, len(write) - inserted

        return await self._write_transaction(body)

    async def import_threads(self, records: Sequence[ThreadRecord]) -> tuple[int, int]:
        """Upserts threads as given (resource, title, metadata, both times), in one transaction, and
        creates a missing owner resource (no working memory, metadata {}, created with the thread).
        Rows already stored exactly so are not written. Returns (inserted, updated)."""
        last = {t.id: t for t in records}
        if not last:
            return 0, 0

        def body(conn: Connection) -> tuple[int, int]:
            stored: dict[str, tuple[Any, ...]] = {}
            ids = list(last)
            for start in range(0, len(ids), 500):
                stmt = select(
                    T.c.id, T.c.resource_id, T.c.title, T.c.metadata, T.c.created_at, T.c.updated_at
                )
                for row in conn.execute(stmt.where(T.c.id.in_(ids[start : start + 500]))):
                    stored[row[0]] = tuple(row[1:])
            write = [
                t
                for t in last.values()
                if stored.get(t.id) != (t.resource_id, t.title, t.metadata, t.created_at, t.updated_at)
            ]
            if write:
                stmt = self._insert(T)
                stmt = stmt.on_conflict_do_update(
                    index_elements=["id"],
                    set_={
                        c: getattr(stmt.excluded, c)
                        for c in ("resource_id", "title", "metadata", "created_at", "updated_at")
                    },
                )
                conn.execute(
                    stmt,
                    [
                        {
                            "id": t.id,
                            "resource_id": t.resource_id,
                            "title": t.title,
                            "metadata": t.metadata,
                            "created_at": t.created_at,
                            "updated_at": t.updated_at,
                        }
                        for t in write
                    ],
                )
                owners: dict[str, int] = {}
                for t in write:
                    owners[t.resource_id] = min(owners.get(t.resource_id, t.created_at), t.created_at)
                conn.execute(
                    self._insert(R).on_conflict_do_nothing(index_elements=["id"]),
                    [
                        {"id": r, "working_memory": None, "metadata": {}, "created_at": at, "updated_at": at}
                        for r, at in sorted(owners.items())
                    ],
                )
            inserted = sum(1 for t in write if t.id not in stored)
            return inserted, len(write) - inserted

        return await self._write_transaction(body)

    async def import_messages(
        self,
        records: Sequence[MessageRecord],
        *,
        now: int,
        track_vectors: bool = False,
        record_changes: bool = False,
    ) -> tuple[int, int]:
        """Upserts messages in one transaction, new ones in the given order (their insertion sequence).

        Like save_messages, an id already stored keeps its createdAt and sequence; unlike it, thread
        updatedAt is left alone (an import carries its own), and rows already stored exactly so are not
        written (nor re-queued for embedding). With track_vectors, written messages are queued in the
        vector outbox; with record_changes, the changes are recorded as save_messages records them.
        Returns (inserted, updated)."""
        last: dict[str, MessageRecord] = {}
        for rec in records:
            last[rec.id] = rec
        if not last:
            return 0, 0

        def body(conn: Connection) -> tuple[int, int]:
            stored = self._stored_for_import(conn, list(last))
            write = [
                m
                for m in last.values()
                if (old := stored.get(m.id)) is None
                or (old.thread_id, old.resource_id, old.role, old.type, old.content, old.signal_type)
                != (m.thread_id, m.resource_id, m.role, m.type, m.content, m.signal_type)
                or old.legacy_reminder != m.legacy_reminder
            ]
            if write:
                backdated = _backdated(conn, stored, write) if record_changes else []
                stmt = self._upsert_messages()
                rows = self._claim_new(conn, [_row(m) for m in write], stored)
                for start in range(0, len(rows), 500):
                    conn.execute(stmt, rows[start : start + 500])
                self._write_stats(
                    conn,
                    removed=[
                        (stored[m.id].thread_id, stored[m.id].resource_id) for m in write if m.id in stored
                    ],
                    added=[(m.thread_id, m.resource_id) for m in write],
                )
                if track_vectors:
                    _write_outbox(conn, [(m.id, stored.get(m.id)) for m in write], now)
                if record_changes:
                    self._write_changes(conn, backdated + _changes(stored, write), now)
            inserted = sum(1 for m in write if m.id not in stored)
            return inserted, len(write) - inserted

        # No thread locks (a batch may span hundreds of threads): a thread deleted meanwhile takes what
        # it deletes from its DELETE's result, rows of this batch included.
        return await self._write_transaction(body)

    async def export_rows(
        self,
        emit: Callable[[str, list[Any]], Awaitable[None]],
        *,
        resource_id: str | None = None,
        batch: int = 1000,
    ) -> dict[str, int]:
        """Reads everything (or one resource: its row, its threads and every message in them) from one
        snapshot, in re-import order: emit("counts", [totals]) first, then emit(kind, records) per batch
        for "resource" (by id), "thread" (by createdAt, id) and "message" (by insertion sequence).
        Returns how many rows of each kind were emitted."""
        r_where: list[ColumnElement[bool]] = [] if resource_id is None else [R.c.id == resource_id]
        t_where: list[ColumnElement[bool]] = [] if resource_id is None else [T.c.resource_id == resource_id]
        m_where: list[ColumnElement[bool]] = (
            [] if resource_id is None else [M.c.thread_id.in_(select(T.c.id).where(*t_where))]
        )
        done = {"resource": 0, "thread": 0, "message": 0}
        async with self.engine.connect() as conn:
            if self.is_postgres:
                conn = await conn.execution_options(isolation_level="REPEATABLE READ")
            async with conn.begin():
                if not self.is_postgres:
                    # A read transaction: every statement below sees the same WAL snapshot.
                    await conn.execute(text("BEGIN"))
                counts = {}
                for kind, table, where in (
                    ("resource", R, r_where),
                    ("thread", T, t_where),
                    ("message", M, m_where),
                ):
                    stmt = select(func.count()).select_from(table).where(*where)
                    counts[kind] = (await conn.execute(stmt)).scalar_one()
                await emit("counts", [counts])
                statements = (
                    ("resource", select(R).where(*r_where).order_by(self._code_points(R.c.id))),
                    (
                        "thread",
                        select(T).where(*t_where).order_by(T.c.created_at, self._code_points(T.c.id)),
                    ),
                    ("message", select(*_MESSAGE_COLUMNS).where(*m_where).order_by(M.c.seq)),
                )
                for kind, stmt in statements:
                    result = await conn.stream(stmt)
                    async for rows in result.partitions(batch):
                        if kind == "resource":
                            records: list[Any] = [
                                ResourceRecord(
                                    id=r.id,
                                    working_memory=r.working_memory,
                                    metadata=r.metadata,
                                    created_at=r.created_at,
                                    updated_at=r.updated_at,
                                )
                                for r in rows
                            ]
                        elif kind == "thread":
                            records = [_thread(r) for r in rows]
                        else:
                            records = [_message(r) for r in rows]
                        done[kind] += len(records)
                        await emit(kind, records)
        return done

    # ------------------------------------------------------------------ memory API (issue 4)
    def _locked_messages(self, conn: Connection, ids: Sequence[str]) -> dict[str, MessageRecord]:
        found: dict[str, MessageRecord] = {}
        ids = sorted(ids)
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            stmt = self._lock(select(*_MESSAGE_COLUMNS).where(M.c.id.in_(chunk)).order_by(M.c.id))
            for row in conn.execute(stmt):
                rec = _message(row)
                found[rec.id] = rec
        return found

    async def delete_thread(
        self,
        thread_id: str,
        *,
        now: int,
        track_vectors: bool = False,
        record_changes: bool = False,
        guard: Callable[[ThreadRecord | None, list[MessageRecord]], None] | None = None,
    ) -> tuple[ThreadRecord | None, list[MessageRecord]]:
        """Deletes the thread and every message filed under its id, in one transaction; returns what
        was deleted (the thread row may be missing while messages exist, and vice versa). `guard` sees
        the thread and the messages the delete removed; if it raises, nothing is deleted."""

        def body(conn: Connection) -> tuple[ThreadRecord | None, list[MessageRecord]]:
            row = conn.execute(self._lock(select(T).where(T.c.id == thread_id))).first()
            thread = _thread(row) if row is not None else None
            # The rows the DELETE returns, not rows read before it: on PostgreSQL the statement also
            # removes rows committed since (imported or cloned into this id), and the guard, the outbox
            # and the counts must see each of them.
            deleted = delete(M).where(M.c.thread_id == thread_id).returning(*_MESSAGE_COLUMNS)
            messages = sorted(map(_message, conn.execute(deleted)), key=lambda m: (m.created_at, m.seq))
            if guard is not None:
                guard(thread, messages)  # raising rolls the transaction back
            if messages and track_vectors:
                _write_outbox(conn, [(m.id, m) for m in messages], now)
            # Rows stay (counts 0, versions bumped): a thread recreated under this id must not meet
            # count-cache entries of its predecessor.
            self._write_stats(conn, removed=[(m.thread_id, m.resource_id) for m in messages])
            if row is not None:
                conn.execute(delete(T).where(T.c.id == thread_id))
            if record_changes:
                # Each message's deletion, as deleteMessages records it: a client of the thread resuming
                # with changedSince hears what a live one heard.
                self._write_changes(conn, self._deletions(conn, messages), now)
            else:
                conn.execute(delete(C).where(C.c.thread_id == thread_id))
            if thread is not None and record_changes:
                self._write_thread_gone(conn, thread, now)
            return thread, messages

        return await self._write_transaction(body, lock_keys=[thread_id])

    async def clone_thread(
        self,
        source_id: str,
        build: Callable[[ThreadRecord, list[MessageRecord]], tuple[ThreadRecord, list[MessageRecord]]],
        *,
        start: int | None = None,
        end: int | None = None,
        message_ids: Sequence[str] | None = None,
        limit: int | None = None,
        copy_resource_working_memory: bool = False,
        now: int,
        track_vectors: bool = False,
        resources: Collection[str] | None = None,
        max_rows: int | None = None,
    ) -> tuple[ThreadRecord, list[MessageRecord]] | None:
        """Copies a thread and a selection of its messages in one transaction.

        The messages are those of the source thread within [start, end], restricted to `message_ids`
        and to messages of `resources` when given, and the newest `limit` of those; `build` turns the
        source thread and that selection (chronological) into the new thread and the copies (it may
        run again if the transaction is retried). Returns None when the source is missing; raises
        RowConflict when the new id is taken. With `copy_resource_working_memory`, the source
        resource's working memory (when set) is copied to the new thread's resource. With `max_rows`,
        a selection of more messages than that (counted first) is read not at all: CloneTooLarge."""

        def body(conn: Connection) -> tuple[ThreadRecord, list[MessageRecord]] | None:
            row = conn.execute(select(T).where(T.c.id == source_id)).first()
            if row is None:
                return None
            source = _thread(row)
            where: list[ColumnElement[bool]] = [M.c.thread_id == source_id]
            if start is not None:
                where.append(M.c.created_at >= start)
            if end is not None:
                where.append(M.c.created_at <= end)
            if resources is not None:
                # Before the limit: the newest `limit` messages a caller may see, not those of the newest
                # `limit` it may see (which told it when others' messages were written).
                where.append(_resource_filter(M.c.resource_id.in_(sorted(resources))))
            wanted = list(dict.fromkeys(message_ids or ()))
            # A long id list is matched here, not bound: the engines cap a statement's parameters
            # (SQLite 32,766, asyncpg 32,767), and the thread's rows are read for the copy anyway.
            in_python = len(wanted) > _IN_LIST_MAX
            if wanted and not in_python:
                where.append(M.c.id.in_(wanted))
            if max_rows is not None:
                # A long id list is matched in Python, after the thread's rows are read: those count.
                count = conn.execute(select(func.count()).select_from(M).where(*where)).scalar_one()
                copied = min(count, limit) if limit and not in_python else count
                if copied > max_rows:
                    raise CloneTooLarge(copied)
            stmt = select(*_MESSAGE_COLUMNS).where(*where)
            if limit and not in_python:
                stmt = stmt.order_by(M.c.created_at.desc(), M.c.seq.desc()).limit(limit)
                selected = [_message(r) for r in conn.execute(stmt)][::-1]
            else:
                stmt = stmt.order_by(M.c.created_at.asc(), M.c.seq.asc())
                selected = [_message(r) for r in conn.execute(stmt)]
                if in_python:
                    keep = set(wanted)
                    selected = [m for m in selected if m.id in keep]
                    if limit:
                        selected = selected[-limit:]
            thread, copies = build(source, selected)
            inserted = conn.execute(self._insert_new_thread(thread))
            if inserted.rowcount != 1:
                raise RowConflict(thread.id)
            self._ensure_resource(conn, thread.resource_id, now)
            if copies:
                rows = [_row(m) for m in copies]
                # In chronological order, so the new insertion sequences keep the source's tie order.
                for chunk in range(0, len(rows), 500):
                    conn.execute(M.insert(), rows[chunk : chunk + 500])
                self._write_stats(conn, added=[(m.thread_id, m.resource_id) for m in copies])
                if track_vectors:
                    _write_outbox(conn, [(m.id, None) for m in copies], now)
            if copy_resource_working_memory and thread.resource_id != source.resource_id:
                value = conn.execute(select(R.c.working_memory).where(R.c.id == source.resource_id)).scalar()
                if value:
                    conn.execute(
                        update(R)
                        .where(R.c.id == thread.resource_id)
                        .values(working_memory=value, updated_at=now)
                    )
            stored = _select_messages(conn, [m.id for m in copies])
            return thread, [stored[m.id] for m in copies if m.id in stored]

        return await self._write_transaction(body)

    async def update_messages(
        self,
        ids: Sequence[str],
        apply: Callable[[dict[str, MessageRecord], dict[str, ThreadRecord]], list[MessageRecord]],
        *,
        now: int,
        track_vectors: bool = False,
        record_changes: bool = False,
        lock_keys: Iterable[str] = (),
        threads: Collection[str] = (),
    ) -> tuple[dict[str, MessageRecord], list[MessageRecord]]:
        """Reads the messages under a write lock, lets `apply` compute their new versions (it may raise:
        then nothing is written; it may run again if the transaction is retried) and writes them in the
        same transaction. `apply` also gets `threads` (the ones messages move to) as locked there, by
        id (those that exist). createdAt and the insertion sequence never change. Bumps updatedAt of
        every old and new thread. `lock_keys`: the threads involved (serialised with saves to them).
        Returns (before, after)."""
        unique = list(dict.fromkeys(ids))
        if not unique:
            return {}, []
        wanted = sorted(set(threads))

        def body(conn: Connection) -> tuple[dict[str, MessageRecord], list[MessageRecord]]:
            before = self._locked_messages(conn, unique)
            if not before:
                return {}, []
            rows = conn.execute(self._lock(select(T).where(T.c.id.in_(wanted)))) if wanted else ()
            targets = {t.id: t for t in map(_thread, rows)}
            after = apply(dict(before), targets)
            if after:
                stmt = (
                    update(M)
                    .where(M.c.id == bindparam("b_id"))
                    .values(
                        thread_id=bindparam("b_thread_id"),
                        resource_id=bindparam("b_resource_id"),
                        role=bindparam("b_role"),
                        type=bindparam("b_type"),
                        content=bindparam("b_content", type_=M.c.content.type),
                        signal_type=bindparam("b_signal_type"),
                        legacy_reminder=bindparam("b_legacy_reminder"),
                    )
                )
                conn.execute(
                    stmt,
                    [
                        {
                            "b_id": m.id,
                            "b_thread_id": m.thread_id,
                            "b_resource_id": m.resource_id,
                            "b_role": m.role,
                            "b_type": m.type,
                            "b_content": m.content,
                            "b_signal_type": m.signal_type,
                            "b_legacy_reminder": m.legacy_reminder,
                        }
                        for m in after
                    ],
                )
                threads = {m.thread_id for m in after} | {before[m.id].thread_id for m in after}
                conn.execute(update(T).where(T.c.id.in_(threads)).values(updated_at=now))
                self._write_stats(
                    conn,
                    removed=[(before[m.id].thread_id, before[m.id].resource_id) for m in after],
                    added=[(m.thread_id, m.resource_id) for m in after],
                )
                if track_vectors:
                    _write_outbox(conn, [(m.id, before[m.id]) for m in after], now)
            stored = _select_messages(conn, [m.id for m in after])
            if record_changes:
                self._write_changes(conn, _changes(before, stored.values()), now)
            return before, [stored[m.id] for m in after if m.id in stored]

        return await self._write_transaction(body, lock_keys=lock_keys)

    async def modify_resource_working_memory(
        self, resource_id: str, change: Callable[[str | None], str], *, now: int
    ) -> ResourceRecord:
        """Creates the resource row if needed (metadata {}), then replaces its working memory with
        `change(current)` under a row lock: concurrent updates of one resource are serialised."""

        def body(conn: Connection) -> ResourceRecord:
            self._ensure_resource(conn, resource_id, now)
            return self._set_resource_working_memory(conn, resource_id, change, now)

        return await self._write_transaction(body)

    def _set_resource_working_memory(
        self, conn: Connection, resource_id: str, change: Callable[[str | None], str], now: int
    ) -> ResourceRecord:
        """The resource's (existing) row locked, its working memory replaced by `change(current)`."""
        row = conn.execute(self._lock(select(R).where(R.c.id == resource_id))).one()
        value = change(row.working_memory)
        # Never backwards: the last committed update has the latest updatedAt.
        stamp = max(now, row.updated_at)
        conn.execute(update(R).where(R.c.id == resource_id).values(working_memory=value, updated_at=stamp))
        return _resource((conn.execute(select(R).where(R.c.id == resource_id))).one())

    async def modify_thread_working_memory(
        self,
        thread_id: str,
        change: Callable[[str | None], str],
        *,
        now: int,
        guard: Callable[[ThreadRecord], None] | None = None,
    ) -> ThreadRecord | None:
        """Sets metadata.workingMemory to `change(current)` under a row lock; None when the thread is
        missing. Bumps updatedAt (the thread changed). `guard` sees the locked thread first."""

        def body(conn: Connection) -> ThreadRecord | None:
            row = conn.execute(self._lock(select(T).where(T.c.id == thread_id))).first()
            if row is None:
                return None
            if guard is not None:
                guard(_thread(row))
            metadata = dict(row.metadata or {})
            current = metadata.get("workingMemory")
            metadata["workingMemory"] = change(current if isinstance(current, str) else None)
            stamp = max(now, row.updated_at)
            conn.execute(update(T).where(T.c.id == thread_id).values(metadata=metadata, updated_at=stamp))
            return _thread((conn.execute(select(T).where(T.c.id == thread_id))).one())

        return await self._write_transaction(body, lock_keys=[thread_id])

    async def set_title_if_untitled(
        self, thread_id: str, resource_id: str, title: str, *, now: int
    ) -> ThreadRecord | None:
        """Sets a generated title unless the thread has one by now (a user's title always wins) or
        is no longer `resource_id`'s (deleted and created again by another resource); createdAt is
        untouched. Returns the updated thread, or None when nothing changed."""

        def body(conn: Connection) -> ThreadRecord | None:
            result = conn.execute(
                update(T)
                .where(T.c.id == thread_id, T.c.resource_id == resource_id, T.c.title == "")
                .values(title=title, updated_at=now)
            )
            if result.rowcount != 1:
                return None
            return _thread(conn.execute(select(T).where(T.c.id == thread_id)).one())

        return await self._write_transaction(body)

    async def get_resources(self, ids: Sequence[str]) -> dict[str, ResourceRecord]:
        """The resources with these ids: their rows (made by a thread or working memory), else, for a
        resource only messages are filed under (in other resources' threads), one made up of its first
        message's createdAt, no working memory and no metadata: Mastra lists and searches such a
        resource's messages as any other's."""
        if not ids:
            return {}

        def read(conn: Connection) -> dict[str, ResourceRecord]:
            found = {row.id: _resource(row) for row in _rows_by_id(R, ids, conn)}
            missing = [i for i in dict.fromkeys(ids) if i not in found]
            for some in _slices(missing):
                # One probe of ix_messages_resource_order per id.
                firsts = (
                    select(M.c.resource_id, func.min(M.c.created_at))
                    .where(M.c.resource_id.in_(some))
                    .group_by(M.c.resource_id)
                )
                for resource_id, first in conn.execute(firsts):
                    found[resource_id] = ResourceRecord(resource_id, None, {}, first, first)
            return found

        return await self._read(read, bounded=len(ids) <= _INLINE_ROWS)

    async def first_messages(self, thread_id: str, resource_id: str, limit: int) -> list[MessageRecord]:
        """A thread's oldest messages of one resource (its owner), chronologically."""
        stmt = (
            select(*_MESSAGE_COLUMNS)
            .where(M.c.thread_id == thread_id, _resource_filter(M.c.resource_id == resource_id))
            .order_by(M.c.created_at.asc(), M.c.seq.asc())
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            return [_message(r) for r in await conn.execute(stmt)]


def _resource_filter(condition: ColumnElement[bool]) -> ColumnElement[bool]:
    """A condition on a message's resource as a filter on rows found otherwise, never an index
    condition.

    Every read that names a resource names the thread or the message too, and a thread's rows in order
    are a range of ix_messages_thread_order. Given a plain equality, PostgreSQL estimates a thread's
    rows of its resource as the product of two selectivities, far below the truth (nearly all of them
    are), and on statistics older than a new resource it thinks the resource nearly empty: it then reads
    the resource's index, ANDed with the thread's and sorted, or alone (walking the resource's rows for
    the thread's). Measured (benchmarks/tenant_recall.py): 1.7-3.3 ms a recall instead of 1.1-1.3 ms.
    COALESCE keeps NULLs out as `=` does, and PostgreSQL estimates it at one half, near the truth.
    """
    return func.coalesce(condition, false())


def _place_condition(op: str, name: str) -> ColumnElement[bool]:
    """A row's place (createdAt, seq) against the place :<name>_at, :<name>_seq: gt, ge or lt. The
    createdAt bound comes first and alone, so that both engines read it as a range of the thread's
    index; seq only settles rows of the same instant."""
    at: BindParameter[int] = bindparam(f"{name}_at")
    seq: BindParameter[int] = bindparam(f"{name}_seq")
    created, inserted = M.c.created_at, M.c.seq
    if op == "gt":
        return and_(created >= at, or_(created > at, inserted > seq))
    if op == "ge":
        return and_(created >= at, or_(created > at, inserted >= seq))
    assert op == "lt"
    return and_(created <= at, or_(created < at, inserted < seq))


def _conditioned(shape: _FilterShape) -> bool:
    """Whether a filter shape has conditions beyond the thread and its resource, whose rows are
    counted in thread_resources."""
    return bool(shape.has_start or shape.has_end or shape.kinds or shape.hidden or shape.bounds)


def _unplaced(shape: _FilterShape, params: dict[str, Any]) -> tuple[_FilterShape, dict[str, Any]]:
    """A filter shape and its values without their places."""
    unplaced = {k: v for k, v in params.items() if not k.startswith(("after_", "before_"))}
    return shape._replace(bounds=()), unplaced


def _every_part(shape: _FilterShape) -> _FilterShape | None:
    """For a shape that leaves hidden rows out, the shape that leaves nothing out (None for any other):
    its rows are counted as those (the maintained count, when nothing else filters) less the hidden
    rows (_hidden_part, counted along ix_messages_thread_hidden without walking the rows shown)."""
    if shape.hidden is None or shape.hidden[0] != "visible":
        return None
    return shape._replace(hidden=None)


def _every_values(params: dict[str, Any]) -> dict[str, Any]:
    """A shape's values for its _every_part."""
    return {k: v for k, v in params.items() if k != "hidden_types"}


def _hidden_part(shape: _FilterShape) -> _FilterShape:
    """The shape of the rows a shape that leaves hidden rows out leaves out (same values)."""
    assert shape.hidden is not None
    return shape._replace(hidden=("hidden", shape.hidden[1]))


# ix_messages_thread_hidden's predicate as its index spells it, in parentheses (it is an OR).
_MAY_BE_HIDDEN = text(f"({HIDDEN_ROWS_PREDICATE})")


def _hidden_condition(side: str, kind: str) -> ColumnElement[bool]:
    """The rows a recall shows ("visible") or hides ("hidden"): system rows always, and legacy reminders
    ("reminders"), every typed signal ("signals"), signals of :hidden_types ("types") or nothing more
    ("system"), as resolvers.recall.filter_signals hides them from a page."""
    system = M.c.role == literal_column("'system'")
    types: BindParameter[Any] = bindparam("hidden_types", expanding=True)
    if side == "visible":
        shown: list[ColumnElement[bool]] = [M.c.role != literal_column("'system'")]
        if kind == "reminders":
            shown.append(M.c.legacy_reminder.is_(false()))
        elif kind == "signals":
            shown.append(M.c.signal_type.is_(None))
        elif kind == "types":
            # NOT IN is unknown for a NULL type: such rows are shown.
            shown.append(or_(M.c.signal_type.is_(None), M.c.signal_type.not_in(types)))
        return and_(*shown)
    assert side == "hidden"
    hidden: ColumnElement[bool] = system
    if kind == "reminders":
        hidden = or_(system, M.c.legacy_reminder.is_(true()))
    elif kind == "signals":
        hidden = or_(system, M.c.signal_type.is_not(None))
    elif kind == "types":
        hidden = or_(system, M.c.signal_type.in_(types))
    # Both: the first lets the planner take the partial index, the second says which of its rows count.
    return and_(_MAY_BE_HIDDEN, hidden)


def _from_place(
    shape: _FilterShape, params: dict[str, Any], place: tuple[int, int]
) -> tuple[_FilterShape, dict[str, Any]]:
    """A filter shape without places, and its values, narrowed to the rows at or after `place`."""
    return shape._replace(bounds=(("ge", "place"),)), {**params, "place_at": place[0], "place_seq": place[1]}


def _next_place(place: tuple[int, int]) -> tuple[int, int]:
    """The first place after `place`: rows after it are the rows at or after this one (one count form
    for `after` and `before`, so each finds the other's counts in the cache)."""
    created_at, seq = place
    return (created_at, seq + 1) if seq < _SQL_INT_MAX else (created_at + 1, 0)


def _page_order(descending: bool) -> tuple[ColumnElement[Any], ...]:
    """A page's order: createdAt, ties by insertion (seq)."""
    if descending:
        return (M.c.created_at.desc(), M.c.seq.desc())
    return (M.c.created_at.asc(), M.c.seq.asc())


def page_rows(total: int, limit: int | None, offset: int) -> int:
    """The rows a page holds, of `total` matching (limit None: every row)."""
    return total if limit is None else max(0, min(limit, total - offset))


class WindowRowsExceeded(Exception):
    """Include windows would read more rows than the budget allowed (args[0]); none are returned."""


class RowConflict(Exception):
    """An insert met an existing primary key (the id is in args[0])."""


class RowForbidden(Exception):
    """A write met a row its caller may not change (the id is in args[0]); nothing was written."""


class CloneTooLarge(Exception):
    """A clone would copy more messages (args[0]) than its caller allowed; nothing was read."""


class ThreadChanged(Exception):
    """A save's thread (args[0]) no longer exists with the owner its caller read; nothing was written."""


class ThreadForbidden(RowForbidden):
    """A save's thread (args[0]) is missing or not of the resources the caller holds, as locked by the
    write; nothing was written."""


def _resource(row: Any) -> ResourceRecord:
    return ResourceRecord(
        id=row.id,
        working_memory=row.working_memory,
        metadata=row.metadata,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


async def _retried(attempt: Callable[[], Awaitable[_T]]) -> _T:
    """`attempt()`, again after a random pause when the database reports a deadlock, a serialization
    failure or its lock table full, up to _WRITE_ATTEMPTS times."""
    for n in range(_WRITE_ATTEMPTS):
        try:
            return await attempt()
        except DBAPIError as exc:
            pause = _retry_pause(exc)
            if n + 1 == _WRITE_ATTEMPTS or pause is None:
                raise
            await asyncio.sleep(pause * 2**n * (1 + random.random()))
    raise AssertionError("unreachable")


def _retry_pause(exc: DBAPIError) -> float | None:
    """The first pause before trying a failed write again (doubled each time), or None: not retried."""
    code = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
    # 40P01 deadlock detected, 40001 serialization failure; SQLite: busy without waiting (a snapshot
    # gone stale, the WAL being recovered). Plain SQLITE_BUSY has already waited busy_timeout for the
    # write lock: trying again waited it out five times (2.5 minutes at 30 s) before answering.
    if code in ("40P01", "40001") or getattr(exc.orig, "sqlite_errorname", None) in _SQLITE_BUSY_AT_ONCE:
        return 0.005
    # Out of shared memory: the lock table is full. Writes lock each thread they touch, and saves of
    # thousands of threads each at once filled it; each one alone fits (RECALLQL_MAX_SAVE_BATCH), so
    # it is tried again once the others have had time to commit and free their locks.
    if code == "53200":
        return 0.5
    return None


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        # "plain": printable ASCII without quote, backslash or slash, which JSON encoders write verbatim,
        # so the stored text holds its JSON literal wherever the value occurs as a string.
        return "plain" if _PLAIN_STRING.fullmatch(value) else "text"
    return "number"


_ADVISORY_LOCKS = text(
    "SELECT pg_advisory_xact_lock(hashtextextended(k, 0)) "
    "FROM unnest(CAST(:keys AS text[])) WITH ORDINALITY AS l(k, n) ORDER BY n"
)
# Behind a transaction pooler: the write transaction's own lock_timeout (set_config's third argument:
# the transaction's alone, like SET LOCAL), where the role and database set none. A session setting would
# stay on a server connection the pooler hands to other clients. Folded into the statement that takes
# the thread locks, at no extra round trip; the CTE yields its row before any lock is asked for, and
# always one row (the setting as it was where one is set), so that every lock is taken.
_TIMED_ADVISORY_LOCKS = text(
    "WITH s AS MATERIALIZED (SELECT set_config('lock_timeout', CASE current_setting('lock_timeout') "
    "WHEN '0' THEN CAST(:timeout AS text) ELSE current_setting('lock_timeout') END, true)) "
    "SELECT pg_advisory_xact_lock(hashtextextended(k, 0)) "
    "FROM s, unnest(CAST(:keys AS text[])) WITH ORDINALITY AS l(k, n) ORDER BY n"
)
_LOCAL_LOCK_TIMEOUT = text(
    "SELECT set_config('lock_timeout', CAST(:timeout AS text), true) "
    "WHERE current_setting('lock_timeout') = '0'"
)


def _slices(ids: list[_T]) -> Iterator[list[_T]]:
    """`ids` in lists of at most _IN_SLICE."""
    for start in range(0, len(ids), _IN_SLICE):
        yield ids[start : start + _IN_SLICE]


def _rows_by_id(table: Table, ids: Sequence[str], conn: Connection) -> list[Any]:
    """The rows of `table` with these ids (federation representations, the threads of a request's
    messages)."""
    rows: list[Any] = []
    for some in _slices(list(dict.fromkeys(ids))):
        rows.extend(conn.execute(select(table).where(table.c.id.in_(some))))
    return rows


def _json_text(value: Any) -> str:
    return orjson.dumps(value).decode()


def _reporting_outages(method: Callable[..., Awaitable[_T]]) -> Callable[..., Awaitable[_T]]:
    @functools.wraps(method)
    async def call(*args: Any, **kwargs: Any) -> _T:
        try:
            return await method(*args, **kwargs)
        except DatabaseUnavailable:
            raise
        except Exception as exc:
            refusal = unavailability(exc)
            if refusal is not None:
                raise DatabaseUnavailable(f"the database cannot do this now: {exc!r}", refusal) from exc
            raise

    return call


# Every public coroutine of the repository reports an unreachable database (refused, timed out, connection
# lost), or one refusing work for now (out of resources, a statement cancelled), as
# models.db.DatabaseUnavailable, which the API reports as SERVICE_UNAVAILABLE, not as a bug.
for _name, _method in list(vars(Repository).items()):
    if not _name.startswith("_") and inspect.iscoroutinefunction(_method):
        setattr(Repository, _name, _reporting_outages(_method))
