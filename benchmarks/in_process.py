"""What the in-process benchmarks share: a database with RecallQL's services on it, the whole app over
httpx's ASGI transport, and the best round's time per call.

Times taken through the ASGI transport include httpx's own work, about 0.2 ms a request here (its
transport tries `import sniffio` on every request, a module this environment does not install): compare
ways measured the same way, as ratios.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from models.db import create_engine
from models.migrate import upgrade
from models.repository import Repository
from resolvers.config import BUILTIN_DEFAULTS
from resolvers.context import Services
from web.app import create_app
from web.settings import Settings

T = TypeVar("T")


@asynccontextmanager
async def database(url: str | None, **build: Any) -> AsyncIterator[tuple[AsyncEngine, Services]]:
    """A migrated database (a fresh SQLite file unless `url`) and services built on it (`build`: more
    arguments of Services.build); closed on the way out, the semantic memory first, as the app does."""
    with tempfile.TemporaryDirectory() as folder:
        engine = create_engine(url or f"sqlite+aiosqlite:///{folder}/bench.db")
        await upgrade(engine)
        services = Services.build(Repository(engine), memory_defaults=dict(BUILTIN_DEFAULTS), **build)
        try:
            yield engine, services
        finally:
            if services.semantic is not None:
                await services.semantic.aclose()
            await services.aclose()
            await engine.dispose()


@asynccontextmanager
async def client(services: Services, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The whole app on `services` (middleware, request ids, error policy; no access log or metrics),
    started, with a client for it."""
    app = create_app(Settings(access_log=False, metrics=False, **settings), services=services)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            yield http


async def best_round(call: Callable[[], Awaitable[T]], requests: int, rounds: int) -> tuple[float, T]:
    """The best of `rounds` rounds of `requests` calls, in µs per call (after requests / 4 to warm plans
    and caches), and the last call's result."""
    result = await call()
    for _ in range(requests // 4):
        result = await call()
    fastest = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(requests):
            result = await call()
        fastest = min(fastest, (time.perf_counter() - started) / requests * 1e6)
    return fastest, result
