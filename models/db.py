"""Async engine construction for SQLite (aiosqlite, WAL) and PostgreSQL (asyncpg)."""

from __future__ import annotations

import contextlib
import functools
import json
import sqlite3
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson
from sqlalchemy import Engine, event
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.engine import ExceptionContext, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

# libpq's connection parameters that asyncpg reads from a DSN's query, as providers write them in the
# URLs they hand out (`?sslmode=require` above all). SQLAlchemy passes a URL's query to asyncpg.connect as
# keyword arguments, which has none of these names ("unexpected keyword argument 'sslmode'"): they go
# to asyncpg as a DSN instead. application_name and options (`-c search_path=...`) are startup
# parameters for the server.
DSN_PARAMETERS = frozenset(
    {
        "sslmode",
        "sslcert",
        "sslkey",
        "sslrootcert",
        "sslcrl",
        "sslpassword",
        "sslnegotiation",
        "ssl_min_protocol_version",
        "ssl_max_protocol_version",
        "target_session_attrs",
        "krbsrvname",
        "gsslib",
        "service",
        "passfile",
        "application_name",
        "options",
    }
)
# What SQLAlchemy's asyncpg dialect takes from the query itself (asyncpg's `ssl` takes sslmode's words).
_KEYWORD_PARAMETERS = frozenset({"host", "port", "user", "password", "ssl", "prepared_statement_cache_size"})


def unsupported_parameters(url: str) -> list[str]:
    """The query parameters of a PostgreSQL URL that neither asyncpg nor SQLAlchemy would take."""
    return sorted(set(make_url(url).query) - DSN_PARAMETERS - _KEYWORD_PARAMETERS)


_SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")


def postgres_url_problem(url: str) -> str | None:
    """What asyncpg would refuse of a PostgreSQL URL on its first connection (as a traceback from each
    command), said once: a port outside 1-65535, an sslmode it does not know. None when neither."""
    parsed = make_url(url)
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        return f"the port {parsed.port} is not one from 1 to 65535"
    modes = parsed.query.get("sslmode")
    for mode in (modes,) if isinstance(modes, str) else modes or ():
        if mode not in _SSL_MODES:
            return f"sslmode {mode!r} is not one of {', '.join(_SSL_MODES)}"
    return None


def supported_parameters() -> list[str]:
    """The query parameters a PostgreSQL URL may carry (for the setting's error message)."""
    return sorted(DSN_PARAMETERS | _KEYWORD_PARAMETERS)


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL names; None for another database, an in-memory one or a `file:` URI."""
    if not is_sqlite(url):
        return None
    path = make_url(url).database
    return Path(path) if path and path != ":memory:" and not path.startswith("file:") else None


def probe_sqlite_file(path: Path) -> None:
    """Reads an existing SQLite file's schema version; raises sqlite3.DatabaseError when it is not a
    database SQLite can read. Read-only, through a URI: it creates, changes and locks nothing."""
    with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
        conn.execute("PRAGMA schema_version").fetchone()


def _dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # integers beyond 64 bits: valid JSON that orjson refuses
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def create_engine(
    url: str,
    *,
    pool_size: int = 10,
    max_overflow: int = 10,
    echo: bool = False,
    connect_timeout: float | None = None,
    transaction_pooler: bool = False,
    lock_timeout: float | None = None,
    command_timeout: float | None = None,
) -> AsyncEngine:
    """`connect_timeout` (PostgreSQL): seconds a new connection may take, so that requests fail fast
    while the database is unreachable (asyncpg's own default is 60).

    `lock_timeout` (PostgreSQL): seconds a statement may wait for a lock, on connections whose role and
    database set none (PostgreSQL's default is to wait for ever). A session holding a lock RecallQL needs
    (a DBA's long transaction, a table rewrite, a stuck client) otherwise held every write waiting on it,
    each with a pooled connection, until the pool was exhausted and reads failed too. Behind a
    transaction pooler, whose server connections are shared, a session setting would leak to other
    clients: there it bounds each write transaction alone (`transaction_lock_timeout`).

    `command_timeout` (PostgreSQL): seconds a statement may take, round trip. A connection whose network
    path went silent (a partition, a NAT or firewall dropping the flow, a failed-over host that never
    sends a reset) otherwise held its request, and its pooled connection, for as long as TCP took to give
    up: hours. Past it asyncpg raises TimeoutError and SQLAlchemy discards the connection. Migrations
    run on a twin without it (`unbounded`): a rewrite of a large table may take longer.

    `transaction_pooler` (PostgreSQL): the URL is a pooler in transaction mode (PgBouncer, Supavisor,
    RDS Proxy), which hands each transaction to whichever server connection is free. A statement
    prepared in one transaction is then missing in the next ("prepared statement __asyncpg_stmt_16__
    does not exist"), and two clients' numbered names collide on one server connection. So nothing is
    kept prepared across statements: both caches are off, and every statement is PostgreSQL's unnamed
    one, prepared and run in the same transaction, each replacing the last (named ones would pile up
    on the pooler's server connections, which are never reset in transaction mode)."""
    json_options: dict[str, Any] = {
        "json_serializer": _dumps,
        "json_deserializer": orjson.loads,
        # A failed statement's text names its bound values: message texts, metadata, working memory.
        # They would land in the server's log with every logged database error.
        "hide_parameters": True,
    }
    if is_sqlite(url):
        timeout = sqlite_busy_timeout(url)
        engine = create_async_engine(url, echo=echo, connect_args={"timeout": timeout}, **json_options)
        event.listen(engine.sync_engine, "connect", functools.partial(_sqlite_pragmas, timeout))
        return engine
    connect_args: dict[str, Any] = {"timeout": connect_timeout} if connect_timeout else {}
    parsed = make_url(url)
    libpq = {k: v for k, v in parsed.query.items() if k in DSN_PARAMETERS}
    if libpq:
        # Host, port, user and database stay keyword arguments, which win over the DSN's (empty) ones.
        connect_args["dsn"] = "postgresql://?" + urlencode(libpq, doseq=True)
        parsed = parsed.difference_update_query(libpq)
    if "application_name" not in libpq:
        # What pg_stat_activity and the server's log show for these connections (asyncpg sends none).
        connect_args["server_settings"] = {"application_name": "recallql"}
    if transaction_pooler:
        connect_args |= {
            "statement_cache_size": 0,  # asyncpg's own (type introspection)
            "prepared_statement_cache_size": 0,  # SQLAlchemy's
            "prepared_statement_name_func": _unnamed,
        }
    # PostgreSQL's own text for the setting (0: none of RecallQL's).
    lock_wait = f"{round(lock_timeout * 1000)}ms" if lock_timeout else None
    execution_options: dict[str, Any] = {}
    if lock_wait and transaction_pooler:
        execution_options[_TRANSACTION_LOCK_TIMEOUT] = lock_wait
    unbounded = functools.partial(
        create_async_engine,
        parsed,
        echo=echo,
        isolation_level="READ COMMITTED",
        poolclass=NullPool,
        connect_args=dict(connect_args),
        **json_options,
    )
    if command_timeout:
        connect_args["command_timeout"] = command_timeout
    engine = create_async_engine(
        parsed,
        echo=echo,
        # Every write is designed for READ COMMITTED (row and advisory locks, then the rows as they are
        # now). A database whose default_transaction_isolation is stricter failed concurrent writes
        # with serialization errors ("could not serialize access"), which nothing retried.
        isolation_level="READ COMMITTED",
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_pre_ping=True,
        connect_args=connect_args,
        execution_options=execution_options,
        **json_options,
    )
    event.listen(engine.sync_engine, "handle_error", _read_only_is_a_disconnect)
    if lock_wait and not transaction_pooler:
        event.listen(engine.sync_engine, "connect", functools.partial(_default_lock_timeout, lock_wait))
    if command_timeout:
        _UNBOUNDED[engine.sync_engine] = unbounded
    return engine


# Engines whose statements are time-bounded, and how to make a twin that is not.
_UNBOUNDED: weakref.WeakKeyDictionary[Engine, Callable[[], AsyncEngine]] = weakref.WeakKeyDictionary()


@contextlib.asynccontextmanager
async def unbounded(engine: AsyncEngine) -> AsyncIterator[AsyncEngine]:
    """The engine itself, or, where its statements are time-bounded (`command_timeout`), a twin of one
    connection at a time whose statements are not: for migrations, which may rightly take long."""
    make = _UNBOUNDED.get(engine.sync_engine)
    if make is None:
        yield engine
        return
    twin = make()
    try:
        yield twin
    finally:
        await twin.dispose()


_TRANSACTION_LOCK_TIMEOUT = "recallql_transaction_lock_timeout"


def transaction_lock_timeout(engine: AsyncEngine) -> str | None:
    """The lock_timeout each write transaction sets for itself (`set_config(…, true)`: the transaction's
    own, like SET LOCAL), where the session cannot hold one: behind a transaction pooler."""
    value = engine.get_execution_options().get(_TRANSACTION_LOCK_TIMEOUT)
    return value if isinstance(value, str) else None


def _default_lock_timeout(lock_wait: str, dbapi_conn: Any, _record: Any) -> None:
    # On the driver's connection, outside any transaction: the setting stays for the session (a
    # transaction's rollback, which returns every pooled connection, would undo it). Conditional, so that
    # a role's or a database's own lock_timeout, a DBA's choice, stays as it is.
    dbapi_conn.run_async(
        lambda conn: conn.execute(
            "SELECT set_config('lock_timeout', $1, false) WHERE current_setting('lock_timeout') = '0'",
            lock_wait,
        )
    )


def _read_only_is_a_disconnect(context: ExceptionContext) -> None:
    """A write refused because the session is read-only (SQLSTATE 25006: the node became a standby in
    a failover, or the database was set read-only) drops the pool's connections, as a lost connection
    does: a session keeps the read-only default it started with, so pooled ones would go on failing
    writes after the failover ended. The request is then SERVICE_UNAVAILABLE, to retry."""
    if any(getattr(e, "sqlstate", None) == "25006" for e in causes(context.original_exception)):
        context.is_disconnect = True


def _unnamed() -> str:
    return ""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why the database cannot do the work now: `reason`, for programs (the API's
    extensions.reason), and `message`, in words fit for a client."""

    reason: str
    message: str


UNREACHABLE = Refusal("unreachable", "The database is unavailable; try again shortly.")
# SQLSTATE class 08 (connection exception) and 57P01-57P03 (shut down, crashed, starting up), which
# pass.
_UNAVAILABLE_STATES = ("57P01", "57P02", "57P03")
# The database refusing work for now, not a bug in the statement: class 53 (insufficient resources:
# disk full, out of memory or of lock table slots, too many connections), and statements it cancelled:
# a statement_timeout or lock_timeout of the role or database (managed services set them), an
# operator's pg_cancel_backend. The transaction is rolled back whole and the session serves on.
_RESOURCES = Refusal(
    "outOfResources",
    "The database is out of resources (disk, memory, locks or connections); try again shortly.",
)
_STATEMENT_TIMEOUT = Refusal(
    "statementTimeout", "The database cancelled the statement: it ran past its statement_timeout."
)
_CANCELLED = Refusal("cancelled", "The database cancelled the statement (an operator's cancel); try again.")
_LOCK_TIMEOUT = Refusal(
    "lockTimeout",
    "The database cancelled the statement: a lock wait passed its lock_timeout; try again shortly.",
)
# SQLite: a write that waited out busy_timeout for another connection's write lock (another process
# holding a long write transaction: a VACUUM, a bulk job); a full disk is SQLITE_FULL.
_SQLITE_BUSY = Refusal(
    "busy",
    "The database is busy: another connection held its write lock past the wait allowed; try again shortly.",
)


# A table or column this code needs and the database lacks: its migrations have not run (a replica
# started with RECALLQL_AUTO_MIGRATE=false before `recallql migrate`, where /readyz says "pending").
# PostgreSQL's undefined_table and undefined_column; SQLite says so in words only.
_SCHEMA_PENDING = Refusal(
    "schemaPending",
    "The database does not have this version's tables yet (migrations pending); try again later.",
)
_UNDEFINED_STATES = ("42P01", "42703")
_SQLITE_UNDEFINED = ("no such table: ", "no such column: ")


class DatabaseUnavailable(Exception):
    """The database cannot do the work now: connection refused or timed out, or lost mid-operation; out
    of resources; the statement cancelled. The driver's error is the __cause__; `refusal` says which.
    Callers report it as a temporary outage, not as a bug."""

    def __init__(self, detail: str, refusal: Refusal = UNREACHABLE) -> None:
        super().__init__(detail)
        self.refusal = refusal


def causes(exc: BaseException) -> Iterator[BaseException]:
    """The exception and what lies under it: SQLAlchemy's `orig` (the driver's error), else `__cause__`,
    each once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = getattr(current, "orig", None) or current.__cause__


def summary(exc: BaseException) -> str:
    """One line for a log: a database error's first line names the driver's error; the statement
    (hundreds of bound markers for a batch) follows on the next lines."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def is_unavailable(exc: BaseException) -> bool:
    """Whether an exception raised by a database call means "the database cannot do this now" (see
    DatabaseUnavailable) rather than a bug."""
    return unavailability(exc) is not None


def unavailability(exc: BaseException) -> Refusal | None:
    """Why the database could not do what an exception raised by a database call was about, if that is
    an outage (see DatabaseUnavailable); None if it is not one."""
    for current in causes(exc):
        if isinstance(current, DatabaseUnavailable):
            return current.refusal
        if isinstance(current, OSError | TimeoutError | PoolTimeout):
            return UNREACHABLE  # refused, reset, unresolvable, connect timeout; no free pooled connection
        if isinstance(current, DBAPIError) and current.connection_invalidated:
            return UNREACHABLE
        state = getattr(current, "sqlstate", None) or getattr(current, "pgcode", None)
        if isinstance(state, str):
            if state.startswith("08") or state in _UNAVAILABLE_STATES:
                return UNREACHABLE
            if state.startswith("53"):
                return _RESOURCES
            if state == "57014":  # query_canceled: by statement_timeout, or by a cancel request
                return _STATEMENT_TIMEOUT if "statement timeout" in str(current) else _CANCELLED
            if state == "55P03":
                return _LOCK_TIMEOUT
            if state in _UNDEFINED_STATES:
                return _SCHEMA_PENDING
        sqlite_error = getattr(current, "sqlite_errorname", None)
        if isinstance(sqlite_error, str):
            if sqlite_error.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
                return _SQLITE_BUSY
            if sqlite_error == "SQLITE_FULL":
                return _RESOURCES
            if sqlite_error == "SQLITE_ERROR" and str(current).startswith(_SQLITE_UNDEFINED):
                return _SCHEMA_PENDING
        if type(current).__name__ == "ConnectionDoesNotExistError" or any(
            marker in str(current) for marker in _LOST_MARKERS
        ):
            return UNREACHABLE
    return None


# asyncpg's wording for a connection that went away under an operation.
_LOST_MARKERS = ("connection was closed in the middle of operation", "connection is closed")


def create_read_engine(url: str) -> Engine | None:
    """SQLite only: a synchronous engine used from worker threads, for reads (WAL lets them run beside
    the writer) and for write transactions, one thread hop each. None for PostgreSQL, whose async
    driver needs no threads."""
    if not is_sqlite(url):
        return None
    sync_url = make_url(url).set(drivername="sqlite+pysqlite")
    timeout = sqlite_busy_timeout(url)
    engine = create_sync_engine(
        sync_url,
        connect_args={"timeout": timeout, "check_same_thread": False},
        pool_size=8,
        max_overflow=8,
        hide_parameters=True,
        json_serializer=_dumps,
        json_deserializer=orjson.loads,
    )
    event.listen(engine, "connect", functools.partial(_sqlite_pragmas, timeout))
    return engine


SQLITE_BUSY_TIMEOUT = 30.0


def sqlite_busy_timeout(url: str) -> float:
    """Seconds a SQLite write waits for another connection's write lock before it fails
    (SERVICE_UNAVAILABLE): the URL's `timeout` parameter (pysqlite's name for it), else 30."""
    given = make_url(url).query.get("timeout")
    value = given[-1] if isinstance(given, tuple) else given
    return float(value) if value is not None else SQLITE_BUSY_TIMEOUT


def _sqlite_pragmas(busy_timeout: float, dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    # WAL lets readers run beside the single writer; NORMAL is durable for committed WAL frames
    # across a process crash (only an OS crash can lose the newest commits).
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
    cursor.close()
