"""Alembic environment: runs on a connection handed in by models.migrate, or builds its own."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from models.migrate import include_object_for
from models.tables import metadata

config = context.config


def run_on(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_object=include_object_for(connection.dialect.name),
    )
    with context.begin_transaction():
        context.run_migrations()


async def run_own_engine() -> None:
    from models.db import create_engine
    from web.settings import get_settings

    url = config.get_main_option("sqlalchemy.url") or get_settings().resolved_database_url
    engine = create_engine(url)
    async with engine.connect() as conn:
        await conn.run_sync(run_on)
        await conn.commit()
    await engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run `recallql migrate`")

connection = config.attributes.get("connection")
if connection is not None:
    run_on(connection)
else:
    asyncio.run(run_own_engine())
