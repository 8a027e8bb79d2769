"""Alembic owns the schema: clean upgrades on both engines, no drift from the models, indexes used."""

from __future__ import annotations

from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Connection

from models.db import create_engine
from models.migrate import alembic_config, include_object_for, upgrade
from models.records import IncludeWindow, MessageQuery
from models.repository import Repository
from models.tables import metadata
from resolvers.auth import OPEN
from resolvers.context import Services
from tests.factories import msg, seed


def _diff(connection: Connection) -> list[Any]:
    opts = {"compare_type": True, "include_object": include_object_for(connection.dialect.name)}
    context = MigrationContext.configure(connection, opts=opts)
    return list(compare_metadata(context, metadata))


async def test_models_and_migrations_never_drift(repository: Repository) -> None:
    async with repository.engine.connect() as conn:
        assert await conn.run_sync(_diff) == []


def _downgrade_and_upgrade(connection: Connection) -> None:
    cfg = alembic_config()
    cfg.attributes["connection"] = connection
    command.downgrade(cfg, "base")
    command.upgrade(cfg, "head")


async def test_downgrade_to_base_and_back(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        await upgrade(engine)
        async with engine.begin() as conn:
            await conn.run_sync(_downgrade_and_upgrade)
        await upgrade(engine)  # idempotent at head
        async with engine.connect() as conn:
            assert await conn.run_sync(_diff) == []
    finally:
        await engine.dispose()


async def _populate(services: Services) -> None:
    threads = {f"t{n}": "r1" for n in range(20)}
    messages = [
        msg(
            f"m{n}",
            thread=f"t{n % 20}",
            at=n,
            metadata={"topic": "rare" if n % 97 == 0 else "common", "n": n},
        )
        for n in range(2000)
    ]
    for thread_id, resource_id in threads.items():
        await services.threads.create(resource_id=resource_id, thread_id=thread_id, principal=OPEN)
    for start in range(0, len(messages), 500):
        await services.messages.save(messages[start : start + 500], principal=OPEN)
    await seed(services, threads={})
    repo = services.repository
    async with repo.engine.begin() as conn:
        from sqlalchemy import text

        await conn.execute(text("ANALYZE"))


async def test_hot_queries_use_indexes(services: Services) -> None:
    await _populate(services)
    repo = services.repository
    plain = MessageQuery(thread_id="t3")
    filtered = MessageQuery(thread_id="t3", metadata={"topic": "rare"})
    page = await repo.explain(repo.page_statement(plain, descending=True, limit=20, offset=0))
    count = await repo.explain(repo.count_statement(plain))
    windows = await repo.explain(
        repo.window_statement(
            [IncludeWindow("m42", 2, 2), IncludeWindow("m7", 1, 0), IncludeWindow("m9", 1, 1, "t3")], None
        )
    )
    for plan in (page, count, windows):
        assert "ix_messages_thread_order" in plan or "messages_id_key" in plan, plan
    assert "SCAN messages" not in windows.replace("SCAN messages USING", "")  # SQLite: no full scan
    if repo.is_postgres:
        assert "Seq Scan" not in page + count + windows
        # A selective metadata filter is answered from the GIN index on content -> 'metadata'.
        metadata_plan = await repo.explain(
            repo.count_statement(MessageQuery(thread_id="t0", metadata={"topic": "rare"}))
        )
        assert "ix_messages_metadata" in metadata_plan, metadata_plan
    else:
        plan = await repo.explain(repo.page_statement(filtered, descending=True, limit=20, offset=0))
        assert "ix_messages_thread_order" in plan, plan


@pytest.mark.parametrize("resource_id", [None, "r1"])
async def test_include_window_plan_is_per_target(services: Services, resource_id: str | None) -> None:
    await _populate(services)
    repo = services.repository
    plan = await repo.explain(repo.window_statement([IncludeWindow("m42", 3, 3)], resource_id))
    # The target comes from the unique id index, its neighbours from the thread-order index.
    assert "ix_messages_thread_order" in plan, plan
