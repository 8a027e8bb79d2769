"""PostgreSQL URLs as providers hand them out: libpq's query parameters (sslmode above all).

SQLAlchemy passes a URL's query to asyncpg.connect as keyword arguments, and asyncpg.connect has none of
libpq's names: `?sslmode=require`, in most managed databases' URLs, was a traceback from every command
("connect() got an unexpected keyword argument 'sslmode'").
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import asyncpg

from models.db import create_engine
from models.repository import Repository
from resolvers.auth import OPEN
from resolvers.config import BUILTIN_DEFAULTS
from resolvers.context import Services
from resolvers.recall import RecallArgs
from tests.factories import msg
from tests.support import database, running_server


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "web.cli", *args],
        env={**os.environ, "RECALLQL_EMBEDDER": "off"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def asyncpg_dsn(url: str) -> str:
    return url.split("?", 1)[0].replace("postgresql+asyncpg://", "postgresql://")


async def test_libpq_parameters_reach_the_server(tmp_path: Path) -> None:
    """sslmode, application_name and options (here a search_path: RecallQL in a schema of its own in a
    shared database) are taken as libpq takes them, by the commands and by the server's engine."""
    async with database("postgres", tmp_path) as plain:
        admin = await asyncpg.connect(asyncpg_dsn(plain))
        try:
            await admin.execute("CREATE SCHEMA memory")
        finally:
            await admin.close()
        url = f"{plain}?sslmode=prefer&application_name=recallql-url-test&options=-c%20search_path%3Dmemory"
        migrated = cli("migrate", "--database-url", url)
        assert migrated.returncode == 0, migrated.stderr

        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                setting = await conn.exec_driver_sql("SELECT current_setting('application_name')")
                assert setting.scalar_one() == "recallql-url-test"
            services = Services.build(Repository(engine), memory_defaults=dict(BUILTIN_DEFAULTS))
            await services.threads.create(resource_id="r", thread_id="t", principal=OPEN)
            await services.messages.save(
                [msg("m1", thread="t", at=1), msg("m2", thread="t", at=2)], principal=OPEN
            )
            page = await services.recall.recall(RecallArgs(thread_id="t"), principal=OPEN)
            assert [m.id for m in page.messages] == ["m1", "m2"]
        finally:
            await engine.dispose()
        # Without one in the URL, the connections are named for what they are.
        engine = create_engine(plain)
        try:
            async with engine.connect() as conn:
                setting = await conn.exec_driver_sql("SELECT current_setting('application_name')")
                assert setting.scalar_one() == "recallql"
        finally:
            await engine.dispose()

        admin = await asyncpg.connect(asyncpg_dsn(plain))
        try:
            schemas = await admin.fetch(
                "SELECT DISTINCT table_schema FROM information_schema.tables "
                "WHERE table_name IN ('messages', 'threads', 'alembic_version')"
            )
            assert [r["table_schema"] for r in schemas] == ["memory"]
            assert await admin.fetchval("SELECT count(*) FROM memory.messages") == 2
        finally:
            await admin.close()


async def test_sslmode_require_is_honoured(tmp_path: Path) -> None:
    """Not dropped on the way: this machine's PostgreSQL has no TLS, so requiring it is refused, in one
    line (exit 1), like any database that cannot be reached."""
    async with database("postgres", tmp_path) as plain:
        done = cli("migrate", "--database-url", f"{plain}?sslmode=require")
        assert done.returncode == 1, done.stderr
        assert done.stderr.startswith("recallql: the database cannot be reached: "), done.stderr
        assert "SSL" in done.stderr and "Traceback" not in done.stderr
        assert len(done.stderr.splitlines()) == 1


def test_parameters_asyncpg_cannot_take_are_a_setting_error() -> None:
    url = "postgresql+asyncpg://app:s3cret-pw@127.0.0.1:5432/x?sslmode=require&channel_binding=require&connect_timeout=10"
    done = cli("migrate", "--database-url", url)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == "recallql: 1 setting(s) not valid:"
    assert lines[1].startswith(
        "  RECALLQL_DATABASE_URL: Value error, the URL parameter(s) channel_binding, connect_timeout are not "
        "supported by asyncpg, which takes "
    )
    for name in ("sslmode", "sslrootcert", "target_session_attrs", "options", "application_name", "host"):
        assert f" {name}," in lines[1], lines[1]
    assert lines[1].endswith("; for connect_timeout set RECALLQL_DB_CONNECT_TIMEOUT")
    assert "s3cret-pw" not in done.stderr


async def test_the_logged_url_hides_passwords_in_the_query(tmp_path: Path) -> None:
    async with database("postgres", tmp_path) as plain:
        url = f"{plain}?sslmode=prefer&sslpassword=key-secret-1&password=query-secret-2"
        with running_server(
            tmp_path / "data", {"RECALLQL_DATABASE_URL": url, "RECALLQL_EMBEDDER": "off"}
        ) as server:
            log = server.log_path.read_text()
        assert "&sslpassword=hidden" in log and "?password=hidden" in log, log
        assert "key-secret-1" not in log and "query-secret-2" not in log


async def test_postgres_urls_without_a_driver_use_asyncpg(tmp_path: Path) -> None:
    """postgresql:// and postgres:// (as providers hand them out) were refused as another driver's."""
    async with database("postgres", tmp_path) as plain:
        for scheme in ("postgresql", "postgres"):
            url = plain.replace("postgresql+asyncpg://", f"{scheme}://") + "?sslmode=prefer"
            done = cli("migrate", "--database-url", url)
            assert done.returncode == 0, done.stderr
    refused = cli("migrate", "--database-url", "postgresql+psycopg://app@127.0.0.1/x")
    assert refused.returncode == 2
    assert "the driver 'postgresql+psycopg' is not supported" in refused.stderr
