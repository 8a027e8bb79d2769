"""Async engine construction for SQLite (aiosqlite, WAL) and PostgreSQL (asyncpg)."""

from __future__ import annotations

import json
from typing import Any

import orjson
from sqlalchemy import Engine, event
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def _dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # integers beyond 64 bits: valid JSON that orjson refuses
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def create_engine(
    url: str, *, pool_size: int = 10, max_overflow: int = 10, echo: bool = False
) -> AsyncEngine:
    json_options: dict[str, Any] = {"json_serializer": _dumps, "json_deserializer": orjson.loads}
    if is_sqlite(url):
        engine = create_async_engine(url, echo=echo, connect_args={"timeout": 30}, **json_options)
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    return create_async_engine(
        url, echo=echo, pool_size=pool_size, max_overflow=max_overflow, pool_pre_ping=True, **json_options
    )


def create_read_engine(url: str) -> Engine | None:
    """SQLite only: a synchronous engine for reads, used from worker threads (WAL lets them run beside
    the writer). None for PostgreSQL, whose async driver needs no threads."""
    if not is_sqlite(url):
        return None
    sync_url = make_url(url).set(drivername="sqlite+pysqlite")
    engine = create_sync_engine(
        sync_url,
        connect_args={"timeout": 30, "check_same_thread": False},
        pool_size=8,
        max_overflow=8,
        json_serializer=_dumps,
        json_deserializer=orjson.loads,
    )
    event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    # WAL lets readers run beside the single writer; NORMAL is durable for committed WAL frames
    # across a process crash (only an OS crash can lose the newest commits).
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()
