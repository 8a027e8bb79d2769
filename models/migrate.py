"""Applies Alembic migrations programmatically (server start and `recallql migrate`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from models.tables import PG_ONLY_INDEXES

SCRIPT_LOCATION = Path(__file__).resolve().parent.parent / "alembic"
# Any constant works; it serialises migrations of replicas starting together on PostgreSQL.
_PG_LOCK_KEY = 0x5245_4341_4C4C


def include_object_for(dialect: str) -> Callable[..., bool]:
    """Autogenerate filter: objects that exist on one dialect only are not drift on the other."""

    def include_object(_obj: Any, name: str | None, type_: str, *_rest: Any) -> bool:
        return not (type_ == "index" and name in PG_ONLY_INDEXES and dialect != "postgresql")

    return include_object


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(SCRIPT_LOCATION))
    return cfg


def _upgrade(connection: Connection, revision: str) -> None:
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
    cfg = alembic_config()
    cfg.attributes["connection"] = connection
    command.upgrade(cfg, revision)


def _pending(connection: Connection) -> list[str]:
    current = set(MigrationContext.configure(connection).get_current_heads())
    script = ScriptDirectory.from_config(alembic_config())
    return (
        [rev.revision for rev in script.walk_revisions() if rev.revision not in current][::-1]
        if not (current >= set(script.get_heads()))
        else []
    )


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    async with engine.begin() as conn:
        await conn.run_sync(_upgrade, revision)


async def pending_revisions(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        return await conn.run_sync(_pending)
