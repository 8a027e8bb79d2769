"""Reading an existing Mastra memory store (read only): LibSQL/SQLite files and PostgreSQL.

Mastra keeps memory in three tables, the same names on every store:

* ``mastra_threads(id, resourceId, title, metadata, createdAt, updatedAt)``
* ``mastra_messages(id, thread_id, content, role, type, createdAt, resourceId)``
* ``mastra_resources(id, workingMemory, metadata, createdAt, updatedAt)``

How each store writes them (checked against @mastra/libsql 1.23.1 and @mastra/pg's sources):

* LibSQL: every column is TEXT. Times are ISO strings (``2026-01-01T00:00:01.001Z``). ``content`` is
  the JSON text of the content (or, for a legacy string content, that string as is). ``metadata`` is
  SQLite's binary JSONB (``jsonb(?)``; older versions wrote JSON text). Rows are read in rowid order,
  which is Mastra's insertion order and breaks ``createdAt`` ties as the rows were written.
* PostgreSQL (optionally in a schema): ``createdAt``/``updatedAt`` are TIMESTAMP (no time zone, in the
  writing process's local time) and a TIMESTAMPTZ twin ``createdAtZ``/``updatedAtZ`` that Mastra reads
  first; ``metadata`` is JSONB, ``content`` TEXT. PostgreSQL has no insertion order, so messages are
  read by (``createdAt``, ``id``).

This module returns rows with times in epoch milliseconds and JSON decoded; it does not interpret the
content (resolvers.transfer does). SQLite lets a TEXT column hold a BLOB: one of UTF-8 is read as its
text, any other stays bytes (the import skips its row). All reads run in one read-only transaction: one
consistent snapshot.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import orjson

from models.db import DSN_PARAMETERS
from models.records import MAX_MS, MIN_MS

THREADS = "mastra_threads"
MESSAGES = "mastra_messages"
RESOURCES = "mastra_resources"


class MastraSourceError(Exception):
    """The source cannot be read as a Mastra store (bad URL, missing tables, unsupported scheme)."""


@dataclass(slots=True)
class MastraThread:
    id: str
    resource_id: str
    title: str
    metadata: Any
    created_at: int | None
    updated_at: int | None
    # A time the row has but that cannot be read (Mastra's own reads fail on it): the other one stands in.
    unreadable_times: tuple[str, ...] = ()


@dataclass(slots=True)
class MastraMessage:
    id: str
    thread_id: str
    resource_id: str | None
    role: str
    type: str | None
    created_at: int | None
    # The decoded JSON when the column holds JSON text, else the text itself (a legacy string content).
    content: Any


@dataclass(slots=True)
class MastraResource:
    id: str
    working_memory: str | None
    metadata: Any
    created_at: int | None
    updated_at: int | None
    # A time the row has but that cannot be read (Mastra's own reads fail on it): the other one stands in.
    unreadable_times: tuple[str, ...] = ()


class MastraSource(Protocol):
    description: str

    async def counts(self) -> dict[str, int]: ...
    def resources(self, batch: int) -> AsyncIterator[list[MastraResource]]: ...
    def threads(self, batch: int) -> AsyncIterator[list[MastraThread]]: ...
    def messages(self, batch: int) -> AsyncIterator[list[MastraMessage]]: ...
    async def aclose(self) -> None: ...


async def open_mastra_source(url: str, *, schema: str | None = None) -> MastraSource:
    """Opens `file:/path/mastra.db`, a plain path, or `postgresql://…` (asyncpg; `schema`: Mastra's
    schemaName, default public)."""
    scheme = url.split(":", 1)[0].lower() if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", url) else ""
    if scheme in ("postgresql", "postgres", "postgresql+asyncpg"):
        source: MastraSource = await _PostgresSource.open(url, schema or "public")
        return source
    if schema is not None:
        raise MastraSourceError("--schema applies to PostgreSQL sources only")
    if scheme in ("libsql", "http", "https", "ws", "wss"):
        raise MastraSourceError(
            f"{scheme}: URLs (a remote LibSQL/Turso database) cannot be read directly; copy the "
            "database to a local file first (for example `turso db shell DB .dump | sqlite3 mastra.db`)"
        )
    if scheme in ("", "file"):
        return await _SqliteSource.open(_file_path(url))
    if len(scheme) == 1:  # a Windows drive letter, C:\…
        return await _SqliteSource.open(Path(url))
    raise MastraSourceError(f"unsupported source URL scheme {scheme!r} (use file:PATH or postgresql://…)")


# What asyncpg reads from a DSN itself: libpq's parameters, and the address (any other parameter it sends
# the server as a setting, which the server refuses: "unrecognized configuration parameter").
_ASYNCPG_PARAMETERS = DSN_PARAMETERS | {"host", "port", "user", "password", "dbname", "database"}
_CONNECT_TIMEOUT = 60.0  # asyncpg's own default


def _asyncpg_dsn(dsn: str) -> tuple[str, float]:
    """The DSN for asyncpg and its connect timeout: a Mastra app's DATABASE_URL, pasted as --from, often
    carries libpq's connect_timeout (seconds; 0 or none: asyncpg's default), which asyncpg would send
    to the server as a setting, failing the connection."""
    parts = urlsplit(dsn)
    query = parse_qsl(parts.query, keep_blank_values=True)
    timeout = _CONNECT_TIMEOUT
    kept = []
    for key, value in query:
        if key != "connect_timeout":
            kept.append((key, value))
            continue
        try:
            seconds = float(value)
        except ValueError:
            seconds = math.nan
        if not (math.isfinite(seconds) and seconds >= 0):
            raise MastraSourceError(f"connect_timeout {value!r} is not a number of seconds")
        timeout = seconds or _CONNECT_TIMEOUT
    unknown = sorted({key for key, _ in kept} - _ASYNCPG_PARAMETERS)
    if unknown:
        raise MastraSourceError(
            f"the URL parameter(s) {', '.join(unknown)} cannot be used (asyncpg reads the source); it takes "
            f"{', '.join(sorted(_ASYNCPG_PARAMETERS | {'connect_timeout'}))}"
        )
    return urlunsplit(parts._replace(query=urlencode(kept))), timeout


def _file_path(url: str) -> Path:
    if not url.startswith("file:"):
        return Path(url)
    rest = url[len("file:") :]
    if rest.startswith("//"):
        parsed = urllib.parse.urlparse(url)
        if parsed.netloc not in ("", "localhost"):
            raise MastraSourceError(f"file URL with a host is not supported: {url}")
        return Path(urllib.request.url2pathname(parsed.path))
    return Path(urllib.parse.unquote(rest.split("?", 1)[0]))


# ---------------------------------------------------------------------------------------------- values
def _times(created: Any, updated: Any) -> tuple[int | None, int | None, tuple[str, ...]]:
    """A row's createdAt and updatedAt read (see parse_time), and the names of those it has but that
    cannot be read."""
    read = parse_time(created), parse_time(updated)
    unreadable = tuple(
        name
        for name, raw, value in zip(("createdAt", "updatedAt"), (created, updated), read, strict=True)
        if raw is not None and value is None
    )
    return read[0], read[1], unreadable


def parse_time(value: Any) -> int | None:
    """A stored Mastra time as epoch milliseconds (UTC), or None when it cannot be read.

    ISO strings with a zone; a naive string or datetime is taken as UTC; a number is epoch milliseconds.
    A JSON-quoted ISO string (what Mastra's `updateMessages({createdAt: Date})` writes, §6.4) is unquoted.
    """
    return _within_range(_parse_time(value))


def _within_range(ms: int | None) -> int | None:
    # A time beyond the years 1 to 9999 cannot be written back as ISO-8601 (an export would write a
    # year of seven digits, which no reader takes): such a row has no readable time.
    return ms if ms is not None and MIN_MS <= ms <= MAX_MS else None


def _parse_time(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        dt = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return _ms(dt)
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return int(value) if math.isfinite(value) else None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    text = str(value).strip()
    try:  # the common case, first: an ISO string
        dt = datetime.fromisoformat(text)
        return _ms(dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC))
    except ValueError:
        pass
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    if re.fullmatch(r"-?\d{1,20}", text):  # more digits are out of range anyway
        return int(text)
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return _ms(dt)


def _ms(dt: datetime) -> int:
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json_text(text: str) -> Any:
    """JSON text to a value; raises ValueError when it is not JSON."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        # Integers beyond 64 bits are valid JSON that orjson refuses.
        try:
            return json.loads(text, parse_constant=_no_constants)
        except RecursionError:
            # orjson stops at 1,024 levels; json recursed until Python's limit and the import died with a
            # traceback instead of skipping the row.
            raise ValueError("JSON nested too deeply") from None


def decode_json_column(value: Any) -> Any:
    """A metadata column: SQLite JSONB blob, JSON text, or (asyncpg) JSONB text; None stays None, and a
    value that is not JSON comes back as it is.

    A JSON string that itself holds a JSON object (double-encoded metadata) is decoded once more, as
    Mastra's readers do."""
    if value is None:
        return None
    try:
        if isinstance(value, bytes | bytearray | memoryview):
            raw = bytes(value)
            try:
                decoded = decode_jsonb(raw)
            except ValueError:
                decoded = parse_json_text(raw.decode("utf-8"))
        elif isinstance(value, str):
            decoded = parse_json_text(value)
        else:
            decoded = value
    except ValueError:  # not JSON at all: the caller decides (an import warns and stores null)
        return value
    if isinstance(decoded, str) and decoded[:1] in ("{", "["):
        try:
            return parse_json_text(decoded)
        except ValueError:
            return decoded
    return decoded


def read_text(value: Any) -> Any:
    """A TEXT column's value, with a BLOB of UTF-8 as its text; any other BLOB as bytes (replacing its
    bytes would import text that was never stored)."""
    if isinstance(value, bytes | bytearray | memoryview):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return bytes(value)
    return value


def decode_content(value: Any) -> Any:
    """The message content column: decoded JSON, or the text as is when it is not JSON (Mastra's
    `try { JSON.parse(content) } catch { keep the string }`)."""
    value = read_text(value)
    if not isinstance(value, str):
        return value
    try:
        return parse_json_text(value)
    except ValueError:
        return value


# SQLite JSONB (https://sqlite.org/jsonb.html). SQLite >= 3.45 writes it for jsonb(); Python's sqlite3 may
# be older than that, so it is decoded here rather than with json().
_JSONB_NULL, _JSONB_TRUE, _JSONB_FALSE = 0, 1, 2
_JSONB_INT, _JSONB_INT5, _JSONB_FLOAT, _JSONB_FLOAT5 = 3, 4, 5, 6
_JSONB_TEXT, _JSONB_TEXTJ, _JSONB_TEXT5, _JSONB_TEXTRAW = 7, 8, 9, 10
_JSONB_ARRAY, _JSONB_OBJECT = 11, 12
_JSON5_ESCAPES = {"'": "'", "v": "\u000b", "0": "\u0000"}


def decode_jsonb(blob: bytes) -> Any:
    """Decodes one SQLite JSONB value; ValueError when the blob is not exactly one well-formed element."""
    value, end = _jsonb_element(blob, 0, len(blob))
    if end != len(blob):
        raise ValueError("trailing bytes after the JSONB element")
    return value


def _jsonb_header(blob: bytes, pos: int, limit: int) -> tuple[int, int, int]:
    if pos >= limit:
        raise ValueError("truncated JSONB header")
    first = blob[pos]
    kind, size_code = first & 0x0F, first >> 4
    pos += 1
    if size_code <= 11:
        size = size_code
    else:
        width = {12: 1, 13: 2, 14: 4, 15: 8}[size_code]
        if pos + width > limit:
            raise ValueError("truncated JSONB size")
        size = int.from_bytes(blob[pos : pos + width], "big")
        pos += width
    if pos + size > limit:
        raise ValueError("JSONB payload runs past its container")
    return kind, pos, size


def _jsonb_element(blob: bytes, pos: int, limit: int) -> tuple[Any, int]:
    kind, start, size = _jsonb_header(blob, pos, limit)
    end = start + size
    payload = blob[start:end]
    if kind in (_JSONB_NULL, _JSONB_TRUE, _JSONB_FALSE):
        if size:
            raise ValueError("JSONB literal with a payload")
        return (None, True, False)[kind], end
    if kind == _JSONB_INT:
        return int(payload.decode("ascii")), end
    if kind == _JSONB_INT5:
        text = payload.decode("ascii")
        sign = -1 if text.startswith("-") else 1
        digits = text.lstrip("+-")
        return sign * (int(digits, 16) if digits[:2].lower() == "0x" else int(digits)), end
    if kind in (_JSONB_FLOAT, _JSONB_FLOAT5):
        return float(payload.decode("ascii")), end
    if kind in (_JSONB_TEXT, _JSONB_TEXTRAW):
        return payload.decode("utf-8"), end
    if kind == _JSONB_TEXTJ:
        return json.loads(b'"' + payload + b'"'), end
    if kind == _JSONB_TEXT5:
        return _json5_text(payload.decode("utf-8")), end
    if kind == _JSONB_ARRAY:
        items: list[Any] = []
        cursor = start
        while cursor < end:
            item, cursor = _jsonb_element(blob, cursor, end)
            items.append(item)
        return items, end
    if kind == _JSONB_OBJECT:
        obj: dict[str, Any] = {}
        cursor = start
        while cursor < end:
            key, cursor = _jsonb_element(blob, cursor, end)
            if not isinstance(key, str):
                raise ValueError("JSONB object key is not text")
            obj[key], cursor = _jsonb_element(blob, cursor, end)
        return obj, end
    raise ValueError(f"reserved JSONB element type {kind}")


def _json5_text(text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        esc = match.group(1)
        if esc.startswith("x"):
            return chr(int(esc[1:], 16))
        if esc[0] in "\r\n\u2028\u2029":  # a line continuation
            return ""
        if esc in _JSON5_ESCAPES:
            return _JSON5_ESCAPES[esc]
        return json.loads(f'"\\{esc}"')

    return re.sub(r"\\(x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}|\r\n|.)", replace, text, flags=re.S)


# ---------------------------------------------------------------------------------------------- both stores
class _SqlSource:
    """The three readers, over a dialect's SELECTs (same column order in both) and batched cursor."""

    _columns: dict[str, set[str]]

    def _col(self, table: str, name: str, default: str = "NULL") -> str:
        return f'"{name}"' if name in self._columns[table] else default

    def _rows(self, sql: str, batch: int) -> AsyncIterator[list[Any]]:
        raise NotImplementedError

    def _select(self, table: str) -> str:
        """SELECT resources: id, workingMemory, metadata, createdAt, updatedAt; threads: id, resourceId,
        title, metadata, createdAt, updatedAt; messages: id, thread_id, resourceId, role, type,
        createdAt, content."""
        raise NotImplementedError

    async def resources(self, batch: int) -> AsyncIterator[list[MastraResource]]:
        if not self._columns[RESOURCES]:
            return
        async for rows in self._rows(self._select(RESOURCES), batch):
            yield [
                MastraResource(
                    read_text(r[0]),
                    read_text(r[1]),
                    decode_json_column(r[2]),
                    *_times(r[3], r[4]),
                )
                for r in rows
            ]

    async def threads(self, batch: int) -> AsyncIterator[list[MastraThread]]:
        async for rows in self._rows(self._select(THREADS), batch):
            yield [
                MastraThread(
                    read_text(r[0]),
                    read_text(r[1]),
                    read_text(r[2]) or "",
                    decode_json_column(r[3]),
                    *_times(r[4], r[5]),
                )
                for r in rows
            ]

    async def messages(self, batch: int) -> AsyncIterator[list[MastraMessage]]:
        async for rows in self._rows(self._select(MESSAGES), batch):
            yield [
                MastraMessage(
                    read_text(r[0]),
                    read_text(r[1]),
                    read_text(r[2]),
                    read_text(r[3]),
                    read_text(r[4]),
                    parse_time(r[5]),
                    decode_content(r[6]),
                )
                for r in rows
            ]


# ---------------------------------------------------------------------------------------------- SQLite
class _SqliteSource(_SqlSource):
    def __init__(self, path: Path, db: Any, columns: dict[str, set[str]]) -> None:
        self.path = path
        self.description = f"Mastra LibSQL file {path}"
        self._db = db
        self._columns = columns

    @classmethod
    async def open(cls, path: Path) -> _SqliteSource:
        import aiosqlite

        if not path.is_file():
            raise MastraSourceError(f"no such Mastra database file: {path}")
        uri = f"file:{urllib.request.pathname2url(str(path.resolve()))}?mode=ro"
        try:
            db = await aiosqlite.connect(uri, uri=True, isolation_level=None)
        except sqlite3.Error as exc:
            raise MastraSourceError(f"cannot open {path}: {exc}") from exc
        try:
            await db.execute("PRAGMA busy_timeout=30000")
            columns: dict[str, set[str]] = {}
            for table in (THREADS, MESSAGES, RESOURCES):
                async with db.execute(f'PRAGMA table_info("{table}")') as cur:
                    columns[table] = {row[1] for row in await cur.fetchall()}
            for table in (THREADS, MESSAGES):
                if not columns[table]:
                    raise MastraSourceError(f"{path} is not a Mastra memory store: no table {table}")
            # One read transaction: every table is read from the same snapshot.
            await db.execute("BEGIN")
        except sqlite3.Error as exc:
            await db.close()
            raise MastraSourceError(f"cannot read {path} as a SQLite database: {exc}") from exc
        except BaseException:
            await db.close()
            raise
        return cls(path, db, columns)

    async def counts(self) -> dict[str, int]:
        out = {}
        for table in (RESOURCES, THREADS, MESSAGES):
            if not self._columns[table]:
                out[table] = 0
                continue
            async with self._db.execute(f'SELECT COUNT(*) FROM "{table}"') as cur:
                out[table] = (await cur.fetchone())[0]
        return out

    async def _rows(self, sql: str, batch: int) -> AsyncIterator[list[Any]]:
        async with self._db.execute(sql) as cur:
            while rows := await cur.fetchmany(batch):
                yield rows

    def _select(self, table: str) -> str:
        if table == RESOURCES:
            memory, metadata = self._col(RESOURCES, "workingMemory"), self._col(RESOURCES, "metadata")
            created, updated = self._col(RESOURCES, "createdAt"), self._col(RESOURCES, "updatedAt")
            return f'SELECT id, {memory}, {metadata}, {created}, {updated} FROM "{RESOURCES}" ORDER BY rowid'
        if table == THREADS:
            title, metadata = self._col(THREADS, "title", "''"), self._col(THREADS, "metadata")
            created, updated = self._col(THREADS, "createdAt"), self._col(THREADS, "updatedAt")
            return (
                f'SELECT id, "resourceId", {title}, {metadata}, {created}, {updated} '
                f'FROM "{THREADS}" ORDER BY rowid'
            )
        resource, kind = self._col(MESSAGES, "resourceId"), self._col(MESSAGES, "type")
        return (
            f'SELECT id, thread_id, {resource}, role, {kind}, "createdAt", content '
            f'FROM "{MESSAGES}" ORDER BY rowid'
        )

    async def aclose(self) -> None:
        try:
            await self._db.execute("ROLLBACK")
        finally:
            await self._db.close()


# ---------------------------------------------------------------------------------------------- PostgreSQL
class _PostgresSource(_SqlSource):
    def __init__(self, conn: Any, transaction: Any, schema: str, columns: dict[str, set[str]]) -> None:
        self._conn = conn
        self._transaction = transaction
        self._schema = schema
        self._columns = columns
        self.description = f"Mastra PostgreSQL store (schema {schema})"

    @classmethod
    async def open(cls, url: str, schema: str) -> _PostgresSource:
        import asyncpg

        dsn, timeout = _asyncpg_dsn(re.sub(r"^postgres(ql)?\+asyncpg:", "postgresql:", url))
        try:
            conn = await asyncpg.connect(dsn, timeout=timeout)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, ValueError, OverflowError) as exc:
            # The last three: a URL asyncpg cannot use (a port out of range or not a number, an unknown
            # sslmode), which was a traceback.
            raise MastraSourceError(f"cannot connect to the Mastra PostgreSQL database: {exc}") from exc
        try:
            transaction = conn.transaction(isolation="repeatable_read", readonly=True)
            await transaction.start()
            rows = await conn.fetch(
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE table_schema = $1 AND table_name = ANY($2::text[])",
                schema,
                [THREADS, MESSAGES, RESOURCES],
            )
            columns: dict[str, set[str]] = {THREADS: set(), MESSAGES: set(), RESOURCES: set()}
            for row in rows:
                columns[row["table_name"]].add(row["column_name"])
            for table in (THREADS, MESSAGES):
                if not columns[table]:
                    raise MastraSourceError(
                        f"not a Mastra memory store: no table {schema}.{table} (is --schema right?)"
                    )
        except BaseException:
            await conn.close()
            raise
        return cls(conn, transaction, schema, columns)

    def _table(self, table: str) -> str:
        return f'"{self._schema}"."{table}"'

    def _time(self, table: str, name: str) -> str:
        """Mastra reads the TIMESTAMPTZ twin first, then the naive column (taken as UTC here).

        A time outside the years 1 to 9999 (UTC) is read as NULL, unreadable as on a LibSQL file:
        asyncpg cannot return it as a datetime (the import died with a traceback), and it returns
        infinity as 9999-12-31, a time that was never stored."""
        plain = f"(\"{name}\" AT TIME ZONE 'UTC')" if name in self._columns[table] else "NULL::timestamptz"
        time = f'COALESCE("{name}Z", {plain})' if f"{name}Z" in self._columns[table] else plain
        within = f"{time} >= '0001-01-01 00:00:00+00' AND {time} < '10000-01-01 00:00:00+00'"
        return f"CASE WHEN {within} THEN {time} END"

    async def counts(self) -> dict[str, int]:
        out = {}
        for table in (RESOURCES, THREADS, MESSAGES):
            out[table] = (
                await self._conn.fetchval(f"SELECT COUNT(*) FROM {self._table(table)}")
                if self._columns[table]
                else 0
            )
        return out

    async def _rows(self, sql: str, batch: int) -> AsyncIterator[list[Any]]:
        cursor = await self._conn.cursor(sql)
        while rows := await cursor.fetch(batch):
            yield rows

    def _select(self, table: str) -> str:
        if table == RESOURCES:
            memory, metadata = self._col(RESOURCES, "workingMemory"), self._col(RESOURCES, "metadata")
            created, updated = self._time(RESOURCES, "createdAt"), self._time(RESOURCES, "updatedAt")
            return (
                f"SELECT id, {memory}, {metadata}::text, {created}, {updated} "
                f"FROM {self._table(RESOURCES)} ORDER BY id"
            )
        if table == THREADS:
            title, metadata = self._col(THREADS, "title", "''"), self._col(THREADS, "metadata")
            created, updated = self._time(THREADS, "createdAt"), self._time(THREADS, "updatedAt")
            return (
                f'SELECT id, "resourceId", {title}, {metadata}::text, {created}, {updated} '
                f"FROM {self._table(THREADS)} ORDER BY {created}, id"
            )
        resource, kind = self._col(MESSAGES, "resourceId"), self._col(MESSAGES, "type")
        created = self._time(MESSAGES, "createdAt")
        return (
            f"SELECT id, thread_id, {resource}, role, {kind}, {created}, content::text "
            f"FROM {self._table(MESSAGES)} ORDER BY {created}, id"
        )

    async def aclose(self) -> None:
        try:
            await self._transaction.rollback()
        finally:
            await self._conn.close()
