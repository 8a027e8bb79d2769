"""Alembic owns the schema: clean upgrades on both engines, no drift from the models, indexes used."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection

from models.db import create_engine
from models.migrate import alembic_config, include_object_for, schema_state, upgrade
from models.records import DateRange, IncludeWindow, MessageQuery, MessageRecord, ThreadRecord
from models.repository import Repository
from models.tables import metadata
from resolvers.auth import OPEN
from resolvers.config import BUILTIN_DEFAULTS
from resolvers.context import Services
from tests.factories import msg, seed, t
from tests.support import (
    MODEL_DIR,
    PG_ADMIN_DSN,
    ServerProcess,
    database,
    engines,
    postgres_available,
    require,
)

ROOT = Path(__file__).resolve().parent.parent

# Every migration, oldest first.
REVISIONS = tuple(
    r.revision for r in reversed(list(ScriptDirectory.from_config(alembic_config()).walk_revisions()))
)


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
    # Keyset pages and their counts: a range of the thread's index from the place on.
    between = MessageQuery(thread_id="t3", after=(t(100), 0), before=(t(1500), 2**40))
    keyset = await repo.explain(repo.page_statement(between, descending=True, limit=20, offset=0))
    keyset_count = await repo.explain(repo.count_statement(MessageQuery(thread_id="t3", after=(t(1500), 0))))
    windows = await repo.explain(
        repo.window_statement(
            [IncludeWindow("m42", 2, 2), IncludeWindow("m7", 1, 0), IncludeWindow("m9", 1, 1, "t3")], None
        )
    )
    for plan in (page, count, windows, keyset, keyset_count):
        assert "ix_messages_thread_order" in plan or "messages_id_key" in plan, plan
    assert "SCAN messages" not in windows.replace("SCAN messages USING", "")  # SQLite: no full scan
    if repo.is_postgres:
        assert "Seq Scan" not in page + count + windows + keyset + keyset_count
        # A selective metadata filter is answered from the GIN index on content -> 'metadata'.
        metadata_plan = await repo.explain(
            repo.count_statement(MessageQuery(thread_id="t0", metadata={"topic": "rare"}))
        )
        assert "ix_messages_metadata" in metadata_plan, metadata_plan
    else:
        plan = await repo.explain(repo.page_statement(filtered, descending=True, limit=20, offset=0))
        assert "ix_messages_thread_order" in plan, plan


async def test_a_resources_messages_are_counted_from_the_per_thread_counts(services: Services) -> None:
    """Resource.messages' total: unfiltered, the resource's rows of thread_resources (one per thread it
    has messages in), never its messages; with a filter, a range of the resource's index."""
    repo = services.repository
    threads = [ThreadRecord(f"t{n}", f"r{n % 100}", "", None, n, n) for n in range(400)]
    await repo.import_threads(threads)
    for start in range(0, 400, 100):
        batch = [
            msg(f"m{n}-{k}", thread=f"t{n}", resource=f"r{n % 100}", at=10 * n + k)
            for n in range(start, start + 100)
            for k in range(5)
        ]
        await services.messages.save(batch, principal=OPEN)
    if repo.is_postgres:  # autovacuum's work, done now; SQLite databases are never analyzed
        async with repo.engine.begin() as conn:
            await conn.exec_driver_sql("ANALYZE")
    plain = await repo.explain(repo.resource_count_statement("r1"))
    assert "ix_thread_resources_resource" in plain and "messages" not in plain, plain
    dated = await repo.explain(repo.resource_count_statement("r1", date_range=DateRange(start=t(100))))
    assert "ix_messages_resource_order" in dated, dated
    async with repo.engine.connect() as conn:
        assert (await conn.execute(repo.resource_count_statement("r1"))).scalar_one() == 20
        assert (await conn.execute(repo.resource_count_statement("elsewhere"))).scalar_one() == 0


async def test_reads_of_a_resource_in_a_thread_walk_the_thread(services: Services) -> None:
    """Recall names the resource beside the thread. Neither PostgreSQL's estimates from fresh statistics
    of many resources (which multiply the two selectivities) nor those without statistics of the
    resource (a tenant newer than the last ANALYZE) may read the resource's index for a thread's page,
    count or window; nor may SQLite, which RecallQL never analyzes."""
    old = {f"t{n}": f"r{n // 2}" for n in range(100)}
    messages = [msg(f"m{n}", thread=f"t{n % 100}", resource=old[f"t{n % 100}"], at=n) for n in range(2000)]
    for thread_id, resource_id in old.items():
        await services.threads.create(resource_id=resource_id, thread_id=thread_id, principal=OPEN)
    for start in range(0, len(messages), 500):
        await services.messages.save(messages[start : start + 500], principal=OPEN)
    repo = services.repository
    if repo.is_postgres:  # autovacuum's work, done now; SQLite databases are never analyzed
        async with repo.engine.begin() as conn:
            await conn.exec_driver_sql("ANALYZE")
    await services.threads.create(resource_id="fresh", thread_id="new", principal=OPEN)
    await services.messages.save(
        [msg(f"n{n}", thread="new", resource="fresh", at=3000 + n) for n in range(200)], principal=OPEN
    )
    for thread_id, resource_id, target in (("t15", "r7", "m415"), ("new", "fresh", "n42")):
        plain = MessageQuery(thread_id=thread_id, resource_id=resource_id)
        dated = MessageQuery(thread_id=thread_id, resource_id=resource_id, date_range=DateRange(start=t(10)))
        plans = [
            await repo.explain(repo.page_statement(plain, descending=True, limit=20, offset=0)),
            await repo.explain(repo.page_statement(dated, descending=False, limit=20, offset=0)),
            await repo.explain(repo.count_statement(dated)),
            await repo.explain(repo.window_statement([IncludeWindow(target, 3, 3)], resource_id)),
        ]
        for plan in plans:
            assert "ix_messages_thread_order" in plan and "ix_messages_resource_order" not in plan, plan


async def test_outbox_lookups_by_message_read_only_those_messages_entries(services: Services) -> None:
    # A rebuild queues a whole resource; meanwhile a save looks up its own entries, a clone counts its
    # sources', a rebuild's page reads its page's: none of them may read the whole backlog.
    await _populate(services)
    repo = services.repository
    assert await repo.outbox_queue_resource("r1") == 2000
    async with repo.engine.connect() as conn:
        autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
        from sqlalchemy import text

        await autocommit.execute(text("ANALYZE vector_outbox" if repo.is_postgres else "ANALYZE"))
    ids = ["m5", "m7", "m1999"]
    plans = {
        "entries": await repo.explain(repo.outbox_statement(message_ids=ids)),
        "page of a rebuild": await repo.explain(repo.outbox_statement(message_ids=ids * 2, limit=1024)),
        "counts": await repo.explain(repo.outbox_count_statement(ids)),
    }
    for name, plan in plans.items():
        assert "ix_vector_outbox_message" in plan, (name, plan)
        assert "Seq Scan" not in plan and "SCAN vector_outbox" not in plan, (name, plan)
    entries, rows = await repo.outbox_snapshot(message_ids=ids)
    assert sorted(e.message_id for e in entries) == sorted(ids) and sorted(rows) == sorted(ids)
    assert await repo.outbox_queued(ids) == dict.fromkeys(ids, 1)


@pytest.mark.parametrize("resource_id", [None, "r1"])
async def test_include_window_plan_is_per_target(services: Services, resource_id: str | None) -> None:
    await _populate(services)
    repo = services.repository
    plan = await repo.explain(repo.window_statement([IncludeWindow("m42", 3, 3)], resource_id))
    # The target comes from the unique id index, its neighbours from the thread-order index.
    assert "ix_messages_thread_order" in plan, plan


async def _execute(url: str, *statements: str) -> None:
    from sqlalchemy import text

    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            for statement in statements:
                await conn.execute(text(statement))
    finally:
        await engine.dispose()


async def _tables(url: str) -> set[str]:
    from sqlalchemy import inspect

    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return set(await conn.run_sync(lambda c: inspect(c).get_table_names()))
    finally:
        await engine.dispose()


async def test_a_migration_that_fails_half_way_leaves_nothing_behind(database_url: str) -> None:
    # 0001 creates its tables, then this index name: taken, so the migration fails after its first DDL.
    # On SQLite each DDL statement used to commit on its own, and the next start then failed on
    # "table messages already exists" until someone repaired the file by hand.
    await _execute(
        database_url,
        "CREATE TABLE blocker (x INTEGER)",
        "CREATE INDEX ix_messages_thread_order ON blocker (x)",
    )
    engine = create_engine(database_url)
    try:
        with pytest.raises(Exception, match="ix_messages_thread_order"):
            await upgrade(engine)
        assert await _tables(database_url) == {"blocker"}
        await _execute(database_url, "DROP TABLE blocker")
        state = await upgrade(engine)
        assert state.pending == REVISIONS
        assert (await schema_state(engine)).at_head
    finally:
        await engine.dispose()


def test_processes_migrating_at_once_wait_for_each_other(tmp_path: Path) -> None:
    # SQLite only took no lock: of four processes starting together on a fresh file, three failed on
    # "table messages already exists" (PostgreSQL's advisory lock is covered by the replica tests).
    url = f"sqlite+aiosqlite:///{tmp_path / 'race.db'}"
    script = (
        "import asyncio, sys, time\n"
        "from models.db import create_engine\n"
        "from models.migrate import upgrade\n"
        "time.sleep(max(0.0, float(sys.argv[2]) - time.time()))\n"
        "async def main():\n"
        "    engine = create_engine(sys.argv[1])\n"
        "    print(','.join((await upgrade(engine)).pending))\n"
        "    await engine.dispose()\n"
        "asyncio.run(main())\n"
    )
    start = str(time.time() + 3)  # all four begin together, once their imports are done
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", script, url, start],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [run.communicate(timeout=120) for run in runs]
    assert [run.returncode for run in runs] == [0] * 4, [err for _out, err in outputs]
    # Exactly one of them applied the migrations; the others waited and found nothing to do.
    assert sorted(out.strip() for out, _err in outputs) == ["", "", "", ",".join(REVISIONS)]


async def test_a_current_schema_is_checked_without_waiting_for_writers(tmp_path: Path) -> None:
    # Every start (and `migrate`) took SQLite's write lock before reading the version: it waited for
    # any writer, a long import say, even with nothing to apply.
    url = f"sqlite+aiosqlite:///{tmp_path / 'busy.db'}"
    engine = create_engine(url)
    writer = create_engine(url)
    try:
        await upgrade(engine)
        async with writer.connect() as conn:
            await conn.exec_driver_sql("BEGIN IMMEDIATE")
            migrating = asyncio.ensure_future(upgrade(engine))
            done, _ = await asyncio.wait({migrating}, timeout=10)  # it waited for the writer, up to 600 s
            await conn.exec_driver_sql("ROLLBACK")  # releases a waiting migration either way
            assert (await migrating).at_head
            assert done, "upgrade waited for another connection's write transaction"
    finally:
        await writer.dispose()
        await engine.dispose()


async def test_the_state_names_only_what_is_missing_and_leaves_a_newer_schema_alone(
    database_url: str,
) -> None:
    engine = create_engine(database_url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_upgrade_to, "0002")
        # Every revision but the head used to be reported as pending, ancestors included.
        assert (await schema_state(engine)).pending == REVISIONS[2:]
        assert (await upgrade(engine)).pending == REVISIONS[2:]
        await _execute(database_url, "UPDATE alembic_version SET version_num = '0099'")
        state = await upgrade(engine)  # a newer RecallQL's schema: not an error, and not touched
        assert state.unknown == ("0099",) and state.pending == () and not state.at_head
        assert "0099" in state.describe() and "newer" in state.describe()
    finally:
        await engine.dispose()


async def test_0013_recounts_the_per_thread_counts_and_raises_only_the_wrong_ones(database_url: str) -> None:
    """Counts an older version left wrong (one too high, one too low, one row missing) are set right
    from the messages, their versions raised (a cached filtered count is not served again); right
    ones are left alone."""
    engine = create_engine(database_url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_upgrade_to, "0012")
        repo = Repository(engine)
        services = Services.build(repo, memory_defaults=dict(BUILTIN_DEFAULTS))
        for n in range(4):
            await services.threads.create(resource_id="r1", thread_id=f"t{n}", principal=OPEN)
        await services.messages.save(
            [
                msg(f"m{n}", thread=f"t{n % 4}", at=n, resource="r2" if n % 5 == 0 else "r1")
                for n in range(40)
            ],
            principal=OPEN,
        )
        loose = MessageRecord("loose", "t3", None, "user", "v2", t(99), {"format": 2, "parts": []})
        assert await repo.import_messages([loose], now=1) == (1, 0)
        await _execute(
            database_url,
            "UPDATE thread_resources SET message_count = message_count + 1"
            " WHERE thread_id = 't0' AND resource_id = 'r1'",
            "UPDATE thread_resources SET message_count = 0 WHERE thread_id = 't1' AND resource_id = 'r1'",
            "DELETE FROM thread_resources WHERE thread_id = 't2' AND resource_id = 'r2'",
        )
        before = await _thread_resources(engine)
        await upgrade(engine)
        after = await _thread_resources(engine)
        async with engine.connect() as conn:
            rows = await conn.execute(
                text("SELECT thread_id, COALESCE(resource_id, ''), COUNT(*) FROM messages GROUP BY 1, 2")
            )
            actual = {(t, r): n for t, r, n in rows}
        assert {key: n for key, (n, _) in after.items()} == actual
        assert ("t3", "") in actual  # the message without a resource, under ""
        wrong = {("t0", "r1"), ("t1", "r1")}
        for key, (_, version) in after.items():
            if key in wrong:
                assert version == before[key][1] + 1, key
            elif key == ("t2", "r2"):
                assert version == 1
            else:
                assert version == before[key][1], key  # right: untouched
        for resource, filed in (("r1", 32), ("r2", 8)):
            page = await services.recall.resource_messages(resource, per_page=1, principal=OPEN)
            assert page.total == filed
    finally:
        await engine.dispose()


async def _thread_resources(engine: Any) -> dict[tuple[str, str], tuple[int, int]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT thread_id, resource_id, message_count, version FROM thread_resources")
        )
        return {(t, r): (n, v) for t, r, n, v in rows}


def _upgrade_to(connection: Connection, revision: str) -> None:
    cfg = alembic_config()
    cfg.attributes["connection"] = connection
    command.upgrade(cfg, revision)


def _migrate_command(data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "web.cli", "migrate", "--data-dir", str(data_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_without_auto_migration_the_server_is_unready_until_migrated(tmp_path: Path) -> None:
    # It used to report ready over an empty database, and every request then failed on a missing table.
    data = tmp_path / "data"
    server = ServerProcess(data, {"RECALLQL_AUTO_MIGRATE": "false", "RECALLQL_EMBEDDER": "off"})
    try:
        server.wait_ready(probe="/healthz")
        ready = httpx.get(f"{server.url}/readyz", timeout=10)
        assert ready.status_code == 503, ready.text
        assert ready.json()["schema"] == f"pending {', '.join(REVISIONS)}"
        assert (
            "RECALLQL_AUTO_MIGRATE is off and the database needs migration(s)" in server.log_path.read_text()
        )
        done = _migrate_command(data)
        applied = f"applied {len(REVISIONS)} migration(s): {', '.join(REVISIONS)}"
        assert done.returncode == 0 and done.stdout.strip() == applied
        ready = httpx.get(f"{server.url}/readyz", timeout=10)
        assert (ready.status_code, ready.json()["schema"]) == (200, "ok")
    finally:
        server.stop()


@pytest.mark.parametrize("engine", engines())
async def test_requests_before_the_migrations_are_an_outage_not_a_bug(engine: str, tmp_path: Path) -> None:
    """A replica started without automatic migration answered every request on the empty database with a
    masked INTERNAL_SERVER_ERROR (a traceback in its log): it is SERVICE_UNAVAILABLE, saying why, and the
    same requests succeed once `recallql migrate` has run."""
    async with database(engine, tmp_path) as url:
        env = {"RECALLQL_AUTO_MIGRATE": "false", "RECALLQL_EMBEDDER": "off", "RECALLQL_DATABASE_URL": url}
        server = ServerProcess(tmp_path / "data", env)
        requests = [
            '{ threads(resourceId: "r") { total } }',
            'mutation { createThread(input: {id: "t1", resourceId: "r"}) { id } }',
            '{ recall(threadId: "t1") { total } }',
        ]
        try:
            server.wait_ready(probe="/healthz")
            for query in requests:
                body = httpx.post(f"{server.url}/graphql", json={"query": query}, timeout=30).json()
                [error] = body["errors"]
                assert error["extensions"]["code"] == "SERVICE_UNAVAILABLE", body
                assert error["extensions"]["reason"] == "schemaPending", body
                assert "migrations pending" in error["message"], body
            assert "Traceback" not in server.log_path.read_text()
            done = subprocess.run(
                [sys.executable, "-m", "web.cli", "migrate", "--database-url", url],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr
            answers = [
                httpx.post(f"{server.url}/graphql", json={"query": q}, timeout=30).json() for q in requests
            ]
            assert [a["data"] for a in answers] == [
                {"threads": {"total": 0}},
                {"createThread": {"id": "t1"}},
                {"recall": {"total": 0}},
            ], answers
        finally:
            server.stop()


def test_a_server_waiting_for_its_migrations_logs_one_line_per_event(tmp_path: Path) -> None:
    # Each /readyz logged Alembic's two dialect lines, every start its seven plugin lines, and each retry
    # of the vector drain the failed statement over four lines.
    settings = {"RECALLQL_AUTO_MIGRATE": "false", "RECALLQL_EMBEDDING_MODEL_DIR": str(MODEL_DIR)}
    server = ServerProcess(tmp_path / "data", settings)
    try:
        server.wait_ready(probe="/healthz")
        deadline = time.monotonic() + 30
        while "vector outbox drain failed" not in server.log_path.read_text():
            assert time.monotonic() < deadline, server.log_path.read_text()
            time.sleep(0.2)
        for _ in range(3):
            assert httpx.get(f"{server.url}/readyz", timeout=10).status_code == 503
    finally:
        server.stop()
    lines = server.log_path.read_text().splitlines()
    assert not [line for line in lines if "alembic" in line], lines
    drain = [line for line in lines if "vector outbox drain failed" in line]
    assert "no such table: vector_outbox" in drain[0], drain
    assert all(line[:4].isdigit() for line in lines), lines  # every line is a record: none continues one


def test_a_schema_migrated_by_a_newer_version_is_served_and_not_migrated(tmp_path: Path) -> None:
    # It was a 100-line traceback from `migrate` and from `serve`, which a rolling upgrade's older
    # replicas would hit on every restart.
    data = tmp_path / "data"
    assert _migrate_command(data).returncode == 0
    asyncio.run(
        _execute(
            f"sqlite+aiosqlite:///{data / 'recallql.db'}", "UPDATE alembic_version SET version_num = '0099'"
        )
    )
    done = _migrate_command(data)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == (
        "migrate: nothing applied: the database is at revision 0099, which this RecallQL does not know "
        "(a newer version migrated it)"
    )
    server = ServerProcess(data, {"RECALLQL_EMBEDDER": "off"})
    try:
        server.wait_ready()
        assert httpx.get(f"{server.url}/readyz", timeout=10).json()["schema"] == "newer"
        assert (
            "serving against a newer schema: the database is at revision 0099" in server.log_path.read_text()
        )
    finally:
        server.stop()


def _migrate_url(url: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "web.cli", "migrate", "--database-url", url],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=30,  # asyncpg's own connect timeout is 60 s
    )


def test_migrate_waits_for_an_unanswering_database_only_as_long_as_configured() -> None:
    # A socket that accepts connections (the kernel's backlog) but never answers, like a hung server.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        done = _migrate_url(
            f"postgresql+asyncpg://postgres@127.0.0.1:{port}/test", RECALLQL_DB_CONNECT_TIMEOUT="1"
        )
    assert done.returncode == 1 and done.stderr.startswith("recallql: the database cannot be reached"), (
        done.stderr
    )


async def test_a_database_that_refuses_us_is_one_line() -> None:
    require(await postgres_available(), f"PostgreSQL is not reachable at {PG_ADMIN_DSN}")
    base = PG_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
    done = _migrate_url(f"{base}/recallql_no_such_database")
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == (
        'recallql: the database refused the connection: database "recallql_no_such_database" does not exist'
    )


@pytest.mark.parametrize(
    "command",
    [["migrate"], ["export", "--out", "-"], ["reindex"], ["serve", "--no-migrate", "--port", "9"], ["serve"]],
)
def test_a_sqlite_file_that_cannot_be_opened_is_one_line(tmp_path: Path, command: list[str]) -> None:
    """A SQLite URL into a folder that does not exist, or at a file that is not a database, was a
    traceback (with --no-migrate, 150 lines in the server's log, exit 3); a data folder that is a file
    was reported as an unreachable database ("File exists")."""
    embedder = "auto" if command == ["reindex"] else "off"

    def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "web.cli", *command, *args],
            cwd=tmp_path,
            # reindex says first that it has no embedder, if it has none
            env={
                **os.environ,
                "RECALLQL_EMBEDDER": embedder,
                "RECALLQL_EMBEDDING_MODEL_DIR": str(MODEL_DIR),
                **env,
            },
            capture_output=True,
            text=True,
            timeout=60,
        )

    missing = tmp_path / "no-such-folder" / "memory.db"
    done = run("--database-url", f"sqlite+aiosqlite:///{missing}")
    assert (done.returncode, done.stderr) == (
        1,
        f"recallql: the SQLite database cannot be opened: {missing}: its folder {missing.parent} does not "
        "exist\n",
    )
    assert not missing.parent.exists()
    other = tmp_path / "notes.db"
    other.write_text("not a database\n")
    done = run("--database-url", f"sqlite+aiosqlite:///{other}")
    assert (done.returncode, done.stderr) == (
        1,
        f"recallql: the SQLite database cannot be opened: {other}: file is not a database (the file is not "
        "a SQLite database)\n",
    )
    assert other.read_text() == "not a database\n"
    done = run(RECALLQL_DATA_DIR=str(other))
    assert (done.returncode, done.stderr) == (
        2,
        "recallql: 1 setting(s) not valid:\n"
        f"  RECALLQL_DATA_DIR: Value error, {other} is a file, not a folder\n",
    )
    # Its chroma folder a file: serve's traceback, "the database cannot be reached" from the others.
    data = tmp_path / "data"
    data.mkdir()
    (data / "chroma").write_text("not a folder\n")
    done = run(RECALLQL_DATA_DIR=str(data), RECALLQL_EMBEDDER="auto")
    assert (done.returncode, done.stderr) == (
        2,
        "recallql: 1 setting(s) not valid:\n"
        f"  Value error, RECALLQL_DATA_DIR: {data / 'chroma'} is a file; the embedded Chroma index is that "
        "folder\n",
    )


@pytest.mark.parametrize("command", [["export"], ["check-index"], ["reindex"]])
def test_commands_that_read_the_store_refuse_to_make_one(tmp_path: Path, command: list[str]) -> None:
    """A mistyped --data-dir made a new, empty store (and its chroma folder): `export` then wrote a
    backup of nothing and exited 0."""
    env = {**os.environ, "RECALLQL_EMBEDDING_MODEL_DIR": str(MODEL_DIR)}
    env.pop("RECALLQL_DATABASE_URL", None)

    def run(data: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "web.cli", *command, "--data-dir", str(data)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    typo = tmp_path / "memroy"
    done = run(typo)
    assert (done.returncode, done.stderr) == (
        1,
        f"recallql: the SQLite database cannot be opened: {typo / 'recallql.db'}: its folder {typo} does not "
        "exist\n",
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    done = run(empty)
    assert (done.returncode, done.stderr) == (
        1,
        f"recallql: the SQLite database cannot be opened: {empty / 'recallql.db'} does not exist: nothing is "
        "stored there (check --data-dir, RECALLQL_DATA_DIR or the database URL)\n",
    )
    assert not typo.exists() and list(empty.iterdir()) == []
    migrated = subprocess.run(
        [sys.executable, "-m", "web.cli", "migrate", "--data-dir", str(empty)], env=env, capture_output=True
    )
    assert migrated.returncode == 0, migrated.stderr
    done = run(empty)
    assert done.returncode == 0, done.stderr
