"""Applies Alembic migrations programmatically (server start and `recallql migrate`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import event, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from models.db import unbounded
from models.tables import PG_ONLY_INDEXES

log = logging.getLogger("recallql")
SCRIPT_LOCATION = Path(__file__).resolve().parent.parent / "alembic"
# Any constant works; it serialises migrations of replicas starting together on PostgreSQL.
_PG_LOCK_KEY = 0x5245_4341_4C4C
# How long a SQLite migration waits for another process's migration (or a long write) to finish.
_SQLITE_LOCK_WAIT_MS = 600_000


def include_object_for(dialect: str) -> Callable[..., bool]:
    """Autogenerate filter: objects that exist on one dialect only are not drift on the other."""

    def include_object(_obj: Any, name: str | None, type_: str, *_rest: Any) -> bool:
        return not (type_ == "index" and name in PG_ONLY_INDEXES and dialect != "postgresql")

    return include_object


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(SCRIPT_LOCATION))
    return cfg


@dataclass(frozen=True)
class SchemaState:
    """Where a database stands against this code's migrations."""

    current: tuple[str, ...]  # the revisions the database is at (empty: never migrated)
    pending: tuple[str, ...]  # the revisions this code would apply, oldest first
    unknown: tuple[str, ...]  # revisions of the database this code does not know: a newer RecallQL's

    @property
    def newer(self) -> bool:
        return bool(self.unknown)

    @property
    def at_head(self) -> bool:
        return not self.pending and not self.unknown

    def describe(self) -> str:
        if self.newer:
            return (
                f"the database is at revision {', '.join(self.unknown)}, which this RecallQL does not know "
                "(a newer version migrated it)"
            )
        if self.pending:
            return f"the database needs migration(s) {', '.join(self.pending)} (run `recallql migrate`)"
        return "the database schema is current"


def log_state(state: SchemaState, *, migrated: bool) -> None:
    """What a start found (`migrated`: it applied `pending`), for the server's log."""
    if state.newer:
        log.warning("serving against a newer schema: %s", state.describe())
    elif state.pending and migrated:
        log.info("applied migrations: %s", ", ".join(state.pending))
    elif state.pending:  # /readyz answers 503 until they are applied
        log.error("RECALLQL_AUTO_MIGRATE is off and %s", state.describe())


def _state(connection: Connection) -> SchemaState:
    current = tuple(sorted(MigrationContext.configure(connection).get_current_heads()))
    script = ScriptDirectory.from_config(alembic_config())
    applied: set[str] = set()
    unknown: list[str] = []
    for revision in current:
        try:
            applied.update(r.revision for r in script.walk_revisions("base", revision))
        except CommandError:
            unknown.append(revision)
    if unknown:
        return SchemaState(current, (), tuple(unknown))
    pending = [r.revision for r in script.walk_revisions()][::-1]
    return SchemaState(current, tuple(r for r in pending if r not in applied), ())


def _upgrade(connection: Connection) -> SchemaState:
    if connection.dialect.name == "postgresql":
        # A migration waits for what it must (another replica's migration, locks on the tables it alters)
        # however long that takes: RECALLQL_DB_LOCK_TIMEOUT bounds requests, not this.
        connection.execute(text("SET LOCAL lock_timeout = 0"))
        connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
    # Read under the lock, so a process that waited for another's migration sees it done.
    state = _state(connection)
    if state.pending:
        cfg = alembic_config()
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "head")
    return state


def _sqlite_migration_engine(engine: AsyncEngine) -> AsyncEngine:
    """A connection to the same SQLite file whose transactions cover DDL. pysqlite opens a transaction
    only before DML, so each CREATE, DROP or ALTER of a migration committed on its own: a migration cut
    off half-way left tables behind that every later start tripped over, and processes starting together
    ran the same DDL. In autocommit mode the driver leaves transactions to SQLAlchemy, and BEGIN
    IMMEDIATE takes the write lock before the version is read, as PostgreSQL's advisory lock does."""
    migration = create_async_engine(engine.url, poolclass=NullPool, connect_args={"isolation_level": None})

    @event.listens_for(migration.sync_engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout={_SQLITE_LOCK_WAIT_MS}")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.close()

    @event.listens_for(migration.sync_engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return migration


async def upgrade(engine: AsyncEngine) -> SchemaState:
    """Brings the database to this code's head, all or nothing, one process at a time. Returns the state
    it found: `pending` is what was applied. A database migrated by a newer RecallQL is left as it is
    (`unknown` says so): replicas of the older version keep running beside it in a rolling upgrade."""
    if engine.dialect.name != "sqlite":
        async with unbounded(engine) as migration, migration.begin() as conn:
            return await conn.run_sync(_upgrade)
    # Read first: the write lock is taken only when there is something to apply (it waited for any
    # writer, a long import say, on every start).
    state = await schema_state(engine)
    if not state.pending:
        return state
    migration = _sqlite_migration_engine(engine)
    try:
        async with migration.begin() as conn:
            return await conn.run_sync(_upgrade)
    finally:
        await migration.dispose()


async def schema_state(engine: AsyncEngine) -> SchemaState:
    async with engine.connect() as conn:
        return await conn.run_sync(_state)
