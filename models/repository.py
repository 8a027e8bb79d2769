"""The repository: every SQL statement RecallQL runs lives here.

It speaks in domain records (models.records) and plain values; callers never see SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import orjson
from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    delete,
    func,
    literal,
    select,
    text,
    tuple_,
    union_all,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from models.records import (
    DateRange,
    IncludeWindow,
    MessageQuery,
    MessageRecord,
    OutboxEntry,
    ResourceRecord,
    ThreadRecord,
)
from models.tables import messages_table as M
from models.tables import outbox_table as O
from models.tables import resources_table as R
from models.tables import thread_resources_table as TR
from models.tables import threads_table as T

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
# SQLite caps compound SELECTs at 500 terms; stay well below it.
_MAX_UNION_TERMS = 200


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


def _thread(row: Any) -> ThreadRecord:
    return ThreadRecord(
        id=row.id,
        resource_id=row.resource_id,
        title=row.title,
        metadata=row.metadata,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


class Repository:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgresql"

    def _insert(self, table: Any) -> Any:
        return (postgresql.insert if self.is_postgres else sqlite.insert)(table)

    async def ping(self) -> None:
        async with self.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))

    # ------------------------------------------------------------------ threads
    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(T).where(T.c.id == thread_id))).first()
        return _thread(row) if row else None

    async def get_threads(self, ids: Sequence[str]) -> dict[str, ThreadRecord]:
        if not ids:
            return {}
        async with self.engine.connect() as conn:
            rows = (await conn.execute(select(T).where(T.c.id.in_(set(ids))))).all()
        return {row.id: _thread(row) for row in rows}

    async def insert_thread(self, thread: ThreadRecord) -> bool:
        """Inserts a new thread (and its resource row); False when the id is taken."""
        async with self.engine.begin() as conn:
            stmt = (
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
            inserted = (await conn.execute(stmt)).rowcount == 1
            if inserted:
                await self._ensure_resource(conn, thread.resource_id, thread.created_at)
        return inserted

    async def _ensure_resource(self, conn: AsyncConnection, resource_id: str, now: int) -> None:
        await conn.execute(
            self._insert(R)
            .values(id=resource_id, working_memory=None, metadata={}, created_at=now, updated_at=now)
            .on_conflict_do_nothing(index_elements=["id"])
        )

    async def update_thread(
        self, thread_id: str, *, title: str | None, metadata: dict[str, Any] | None, now: int
    ) -> ThreadRecord | None:
        """Sets the title (when given) and shallow-merges metadata, atomically."""
        async with self.engine.begin() as conn:
            row = (await conn.execute(self._lock(select(T).where(T.c.id == thread_id)))).first()
            if row is None:
                return None
            merged = row.metadata
            if metadata is not None:
                merged = {**(row.metadata or {}), **metadata}
            values: dict[str, Any] = {"metadata": merged, "updated_at": now}
            if title is not None:
                values["title"] = title
            await conn.execute(update(T).where(T.c.id == thread_id).values(**values))
            row = (await conn.execute(select(T).where(T.c.id == thread_id))).one()
        return _thread(row)

    def _lock(self, stmt: Select[Any]) -> Select[Any]:
        # SQLite serialises writers per database; PostgreSQL needs the row lock for read-modify-write.
        return stmt.with_for_update() if self.is_postgres else stmt

    async def list_threads(
        self,
        resource_id: str,
        *,
        offset: int,
        limit: int | None,
        order_field: str,
        descending: bool,
        metadata: dict[str, Any] | None = None,
    ) -> tuple[list[ThreadRecord], int]:
        where: list[ColumnElement[bool]] = [T.c.resource_id == resource_id]
        for key, value in (metadata or {}).items():
            where.append(self._json_equals(T.c.metadata, key, value))
        column = T.c.updated_at if order_field == "updatedAt" else T.c.created_at
        order = (column.desc(), T.c.id.desc()) if descending else (column.asc(), T.c.id.asc())
        stmt = select(T).where(*where).order_by(*order).offset(offset)
        if limit is not None:
            stmt = stmt.limit(limit)
        async with self.engine.connect() as conn:
            total = (await conn.execute(select(func.count()).select_from(T).where(*where))).scalar_one()
            rows = (await conn.execute(stmt)).all()
        return [_thread(r) for r in rows], total

    # ------------------------------------------------------------------ messages: write
    async def save_messages(
        self, records: Sequence[MessageRecord], *, now: int, track_vectors: bool = False
    ) -> list[MessageRecord]:
        """Upserts the batch in one transaction, in the given order.

        A re-saved id keeps its createdAt and insertion sequence; everything else is replaced.
        With track_vectors, the same transaction queues every message in the vector outbox.
        Returns the stored rows, in the order given.
        """
        if not records:
            return []
        # One row per id (the last version wins, at its first position): a statement may not
        # touch the same row twice.
        last: dict[str, MessageRecord] = {}
        for rec in records:
            last[rec.id] = rec
        rows = [
            {
                "id": rec.id,
                "thread_id": rec.thread_id,
                "resource_id": rec.resource_id,
                "role": rec.role,
                "type": rec.type,
                "created_at": rec.created_at,
                "content": rec.content,
                "signal_type": rec.signal_type,
                "legacy_reminder": rec.legacy_reminder,
            }
            for rec in last.values()
        ]
        stmt = self._insert(M)
        stmt = stmt.on_conflict_do_update(
            index_elements=["id"],
            set_={
                c: getattr(stmt.excluded, c)
                for c in (
                    "thread_id",
                    "resource_id",
                    "role",
                    "type",
                    "content",
                    "signal_type",
                    "legacy_reminder",
                )
            },
        )
        ids = list(last)
        async with self.engine.begin() as conn:
            previous = await self._messages_by_id(conn, ids) if track_vectors else {}
            for start in range(0, len(rows), 500):
                await conn.execute(stmt, rows[start : start + 500])
            thread_ids = {rec.thread_id for rec in last.values()}
            await conn.execute(update(T).where(T.c.id.in_(thread_ids)).values(updated_at=now))
            pairs = {(rec.thread_id, rec.resource_id) for rec in last.values() if rec.resource_id is not None}
            if pairs:
                await conn.execute(
                    self._insert(TR).on_conflict_do_nothing(),
                    [{"thread_id": t, "resource_id": r} for t, r in sorted(pairs)],
                )
            if track_vectors:
                await self._enqueue(
                    conn, [(i, previous[i].resource_id if i in previous else None) for i in ids], now
                )
            stored = await self._messages_by_id(conn, ids)
        return [stored[i] for i in ids if i in stored]

    async def _messages_by_id(self, conn: AsyncConnection, ids: Sequence[str]) -> dict[str, MessageRecord]:
        found: dict[str, MessageRecord] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            result = await conn.execute(select(*_MESSAGE_COLUMNS).where(M.c.id.in_(chunk)))
            for row in result:
                rec = _message(row)
                found[rec.id] = rec
        return found

    async def get_messages(self, ids: Sequence[str]) -> dict[str, MessageRecord]:
        if not ids:
            return {}
        async with self.engine.connect() as conn:
            return await self._messages_by_id(conn, list(dict.fromkeys(ids)))

    async def delete_messages(
        self, ids: Sequence[str], *, now: int, track_vectors: bool = False
    ) -> list[MessageRecord]:
        if not ids:
            return []
        async with self.engine.begin() as conn:
            existing = await self._messages_by_id(conn, list(dict.fromkeys(ids)))
            if existing:
                await conn.execute(delete(M).where(M.c.id.in_(list(existing))))
                threads = {m.thread_id for m in existing.values()}
                await conn.execute(update(T).where(T.c.id.in_(threads)).values(updated_at=now))
                if track_vectors:
                    await self._enqueue(conn, [(m.id, m.resource_id) for m in existing.values()], now)
        return list(existing.values())

    # ------------------------------------------------------------------ vector outbox
    async def _enqueue(
        self, conn: AsyncConnection, items: Sequence[tuple[str, str | None]], now: int
    ) -> None:
        if items:
            await conn.execute(
                O.insert(),
                [{"message_id": m, "previous_resource_id": r, "created_at": now} for m, r in items],
            )

    async def outbox_snapshot(
        self, *, message_ids: Sequence[str] | None = None, limit: int = 256
    ) -> tuple[list[OutboxEntry], dict[str, MessageRecord]]:
        """Queued changes (the oldest, or those of the given messages) and the current rows of their
        messages, read in one snapshot: an entry seen here describes a change these rows already show."""
        stmt = select(O.c.id, O.c.message_id, O.c.previous_resource_id).order_by(O.c.id).limit(limit)
        if message_ids is not None:
            stmt = stmt.where(O.c.message_id.in_(list(message_ids)))
        async with self.engine.connect() as conn:
            if self.is_postgres:
                conn = await conn.execution_options(isolation_level="REPEATABLE READ")
            async with conn.begin():
                entries = [OutboxEntry(r[0], r[1], r[2]) for r in await conn.execute(stmt)]
                rows = await self._messages_by_id(conn, list(dict.fromkeys(e.message_id for e in entries)))
        return entries, rows

    async def outbox_done(self, entry_ids: Sequence[int]) -> None:
        if entry_ids:
            async with self.engine.begin() as conn:
                await conn.execute(delete(O).where(O.c.id.in_(list(entry_ids))))

    async def outbox_backlog(self) -> int:
        async with self.engine.connect() as conn:
            return (await conn.execute(select(func.count()).select_from(O))).scalar_one()

    async def thread_resource_ids(self, thread_id: str) -> list[str]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(TR.c.resource_id).where(TR.c.thread_id == thread_id))
            return [r[0] for r in rows]

    async def messages_in_order(
        self, *, after_seq: int, limit: int, resource_id: str | None = None
    ) -> list[MessageRecord]:
        """Messages by insertion sequence, for a full re-index."""
        stmt = select(*_MESSAGE_COLUMNS).where(M.c.seq > after_seq)
        if resource_id is not None:
            stmt = stmt.where(M.c.resource_id == resource_id)
        async with self.engine.connect() as conn:
            result = await conn.execute(stmt.order_by(M.c.seq).limit(limit))
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

    def _message_filter(self, q: MessageQuery) -> list[ColumnElement[bool]]:
        where: list[ColumnElement[bool]] = [M.c.thread_id == q.thread_id]
        if q.resource_id:
            where.append(M.c.resource_id == q.resource_id)
        where.extend(_date_range(q.date_range))
        if q.metadata:
            if self.is_postgres:
                where.append(
                    M.c.content["metadata"].op("@>")(
                        func.cast(literal(_json_text(q.metadata)), postgresql.JSONB)
                    )
                )
            else:
                meta = M.c.content
                for key, value in q.metadata.items():
                    where.append(self._json_equals(meta, f"metadata.{key}", value))
        return where

    async def page_and_count(
        self,
        q: MessageQuery,
        *,
        descending: bool,
        limit: int | None,
        offset: int,
        windows: Sequence[IncludeWindow] = (),
        window_resource_id: str | None = None,
    ) -> tuple[list[MessageRecord], int, list[MessageRecord]]:
        """The page, the count and the include windows on one connection (one snapshot)."""
        order = (
            (M.c.created_at.desc(), M.c.seq.desc()) if descending else (M.c.created_at.asc(), M.c.seq.asc())
        )
        where = self._message_filter(q)
        async with self.engine.connect() as conn:
            total = (await conn.execute(select(func.count()).select_from(M).where(*where))).scalar_one()
            rows: list[MessageRecord] = []
            if limit is None or limit > 0:
                stmt = select(*_MESSAGE_COLUMNS).where(*where).order_by(*order)
                stmt = stmt.limit(limit if limit is not None else total).offset(offset)
                rows = [_message(row) for row in await conn.execute(stmt)]
            included = await self._windows(conn, windows, window_resource_id)
        return rows, total, included

    async def include_windows(
        self, windows: Sequence[IncludeWindow], resource_id: str | None
    ) -> list[MessageRecord]:
        if not windows:
            return []
        async with self.engine.connect() as conn:
            return await self._windows(conn, windows, resource_id)

    async def _windows(
        self, conn: AsyncConnection, windows: Sequence[IncludeWindow], resource_id: str | None
    ) -> list[MessageRecord]:
        """Every include window (target plus neighbours in its own thread) in one statement."""
        if not windows:
            return []
        terms = []
        for w in windows:
            terms.append(
                self._window_select(w.message_id, w.before + 1, previous=True, resource_id=resource_id)
            )
            if w.after > 0:
                terms.append(
                    self._window_select(w.message_id, w.after, previous=False, resource_id=resource_id)
                )
        out: list[MessageRecord] = []
        for start in range(0, len(terms), _MAX_UNION_TERMS):
            chunk = terms[start : start + _MAX_UNION_TERMS]
            stmt = chunk[0] if len(chunk) == 1 else union_all(*chunk)
            out.extend(_message(row) for row in await conn.execute(stmt))
        return out

    def _window_select(self, message_id: str, limit: int, *, previous: bool, resource_id: str | None) -> Any:
        t = M.alias("target")
        target_cond = [t.c.id == message_id]
        if resource_id:
            target_cond.append(t.c.resource_id == resource_id)
        key = tuple_(M.c.created_at, M.c.seq)
        target_key = tuple_(t.c.created_at, t.c.seq)
        cond = [M.c.thread_id == t.c.thread_id, key <= target_key if previous else key > target_key]
        if resource_id:
            cond.append(M.c.resource_id == resource_id)
        order = (M.c.created_at.desc(), M.c.seq.desc()) if previous else (M.c.created_at.asc(), M.c.seq.asc())
        inner = (
            select(*_MESSAGE_COLUMNS)
            .select_from(M.join(t, and_(*target_cond, *cond)))
            .order_by(*order)
            .limit(limit)
            .subquery()
        )
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

    async def list_resources(self, *, offset: int, limit: int) -> list[str]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(R.c.id).order_by(R.c.id).offset(offset).limit(limit))
            return [r[0] for r in rows]


def _date_range(dr: DateRange | None) -> Iterable[ColumnElement[bool]]:
    if dr is None:
        return []
    cond: list[ColumnElement[bool]] = []
    if dr.start is not None:
        cond.append(M.c.created_at > dr.start if dr.start_exclusive else M.c.created_at >= dr.start)
    if dr.end is not None:
        cond.append(M.c.created_at < dr.end if dr.end_exclusive else M.c.created_at <= dr.end)
    return cond


def _json_text(value: Any) -> str:
    return orjson.dumps(value).decode()
