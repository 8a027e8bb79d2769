from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from models.db import create_engine
from models.migrate import upgrade
from models.repository import Repository
from resolvers.config import BUILTIN_DEFAULTS
from resolvers.context import Services
from tests.support import Api, ServerProcess, chroma_server_process, database, engines, running_server


@pytest.fixture(params=engines())
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
async def repository(database_url: str) -> AsyncIterator[Repository]:
    engine = create_engine(database_url)
    await upgrade(engine)
    try:
        yield Repository(engine)
    finally:
        await engine.dispose()


@pytest.fixture
def services(repository: Repository) -> Services:
    return Services.build(repository, memory_defaults=dict(BUILTIN_DEFAULTS), max_include_items=100)


@pytest.fixture(scope="session", params=engines())
async def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp(f"server-{request.param}")
    async with database(request.param, tmp) as url:
        with running_server(tmp / "data", {"RECALLQL_DATABASE_URL": url}) as srv:
            yield srv


@pytest.fixture
def api(server: ServerProcess) -> Iterator[Api]:
    yield Api(server.url)


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Chroma server (`chroma run`) on a free loopback port, for the whole session."""
    with chroma_server_process(tmp_path_factory.mktemp("chroma-server")) as url:
        yield url
