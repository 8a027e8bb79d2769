"""PostgreSQL through PgBouncer in transaction mode (RECALLQL_DB_TRANSACTION_POOLER).

Larger deployments run many replicas, each with its own connection pool, and put a pooler in front of
PostgreSQL so that the database sees a few connections. In transaction mode the pooler gives each
transaction to whichever server connection is free, which breaks prepared statements kept across
transactions. A real PgBouncer (Debian's package; CI installs it) with two server connections serves
many more client connections here, so that consecutive transactions of one client land on different
server connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from tests.support import database, pgbouncer, running_server, text_message, uid


@contextlib.asynccontextmanager
async def database_behind_pgbouncer(tmp_path: Path) -> AsyncIterator[str]:
    """A new database, and its URL through PgBouncer."""
    async with database("postgres", tmp_path) as direct:
        with pgbouncer() as port:
            parts = urlsplit(direct)
            yield parts._replace(netloc=f"127.0.0.1:{port}").geturl()


CREATE_THREAD = "mutation($r: String!, $t: ID!) { createThread(input: {resourceId: $r, id: $t}) { id } }"
SAVE = "mutation($m: [MessageInput!]!) { saveMessages(messages: $m) { messages { id } } }"


async def execute(client: httpx.AsyncClient, query: str, **variables: Any) -> dict[str, Any]:
    response = await client.post("/graphql", json={"query": query, "variables": variables})
    body = response.json()
    assert (response.status_code, body.get("errors")) == (200, None), body
    return body["data"]


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "web.cli", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_every_operation_through_pgbouncer_in_transaction_mode(tmp_path: Path) -> None:
    async with database_behind_pgbouncer(tmp_path) as url:
        env = {
            "RECALLQL_DATABASE_URL": url,
            "RECALLQL_DB_TRANSACTION_POOLER": "true",
            "RECALLQL_EMBEDDER": "off",
        }
        # The migrations run through the pooler too (their advisory lock is transaction-scoped).
        migrated = cli("migrate", env=env)
        assert migrated.returncode == 0, migrated.stderr
        with running_server(tmp_path / "data", {**env, "RECALLQL_DB_POOL_SIZE": "8"}) as server:
            async with httpx.AsyncClient(base_url=server.url, timeout=60) as api:
                resource, threads = uid("pgb"), [uid("t") for _ in range(3)]
                for thread in threads:
                    await execute(
                        api,
                        CREATE_THREAD,
                        r=resource,
                        t=thread,
                    )

                async def client(n: int) -> None:
                    for k in range(8):
                        thread = threads[(n + k) % 3]
                        await execute(
                            api,
                            SAVE,
                            m=[text_message(thread_id=thread, id=f"{thread}-{n}-{k}", text=f"note {n} {k}")],
                        )
                        page = await execute(
                            api,
                            "query($t: ID!) { recall(threadId: $t, perPage: 3) { total messages { id } } }",
                            t=thread,
                        )
                        assert len(page["recall"]["messages"]) == min(3, page["recall"]["total"])
                        await execute(
                            api,
                            "query($r: String!) { threads(resourceId: $r) { total } }",
                            r=resource,
                        )

                # More clients than the server pool, and more than the pooler's two server connections.
                await asyncio.gather(*(client(n) for n in range(12)))

                totals = await execute(
                    api,
                    "query($r: String!) { threads(resourceId: $r, perPage: false) { total threads { id } } }",
                    r=resource,
                )
                assert totals["threads"]["total"] == 3
                counted = 0
                for thread in threads:
                    every = await execute(
                        api,
                        "query($t: ID!) { recall(threadId: $t, perPage: false) { total messages { id } } }",
                        t=thread,
                    )
                    assert every["recall"]["total"] == len(every["recall"]["messages"])
                    counted += every["recall"]["total"]
                assert counted == 12 * 8

                moved = await execute(
                    api,
                    "mutation($m: [UpdateMessageInput!]!) { updateMessages(messages: $m) { id threadId } }",
                    m=[{"id": f"{threads[0]}-0-0", "threadId": threads[1]}],
                )
                assert moved["updateMessages"] == [{"id": f"{threads[0]}-0-0", "threadId": threads[1]}]
                clone = await execute(
                    api,
                    "mutation($t: ID!) { cloneThread(input: {sourceThreadId: $t}) "
                    "{ thread { id } clonedMessages { id } } }",
                    t=threads[1],
                )
                assert len(clone["cloneThread"]["clonedMessages"]) == 33
                deleted = await execute(
                    api,
                    "mutation($ids: [ID!]!) { deleteMessages(ids: $ids) { deleted } }",
                    ids=[f"{threads[2]}-1-1"],
                )
                assert deleted["deleteMessages"] == {"deleted": 1}
                memory = await execute(
                    api,
                    "mutation($t: ID!, $r: String!) { updateWorkingMemory(threadId: $t, resourceId: $r, "
                    'workingMemory: "# Notes", memoryConfig: {workingMemory: {enabled: true}}) '
                    "{ workingMemory } }",
                    t=threads[0],
                    r=resource,
                )
                assert memory["updateWorkingMemory"]["workingMemory"] == "# Notes"
                assert await execute(
                    api, "mutation($t: ID!) { deleteThread(id: $t) }", t=clone["cloneThread"]["thread"]["id"]
                ) == {"deleteThread": True}

        # The CLI's streamed export reads one snapshot (REPEATABLE READ) through the pooler.
        exported = cli("export", "--resource", resource, "--out", "-", env=env)
        assert exported.returncode == 0, exported.stderr
        kinds = [json.loads(line)["kind"] for line in exported.stdout.splitlines()]
        assert (kinds.count("resource"), kinds.count("thread"), kinds.count("message")) == (1, 3, 12 * 8 - 1)


async def test_a_mastra_postgres_store_imports_through_pgbouncer(tmp_path: Path) -> None:
    """`recallql import mastra --from` a Mastra database reached through a transaction-mode pooler
    (Supabase and others hand out such URLs first). The source is read in one REPEATABLE READ
    transaction, which keeps one server connection throughout, so asyncpg's prepared statements hold."""
    import asyncpg

    from tests.test_import_export import write_pg_mastra

    async with database("postgres", tmp_path / "target") as target:
        async with database_behind_pgbouncer(tmp_path / "source") as source:
            dsn = source.replace("postgresql+asyncpg://", "postgresql://")
            conn = await asyncpg.connect(dsn, statement_cache_size=0)
            try:
                await write_pg_mastra(conn, "mastra")
            finally:
                await conn.close()
            env = {"RECALLQL_DATABASE_URL": target, "RECALLQL_DATA_DIR": str(tmp_path / "data")}
            done = cli("import", "mastra", "--from", dsn, "--schema", "mastra", "--no-embed", env=env)
            assert done.returncode == 0, done.stderr
        stored = await asyncpg.connect(target.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            counts = [await stored.fetchval(f"SELECT count(*) FROM {t}") for t in ("threads", "messages")]
        finally:
            await stored.close()
        assert counts == [2, 5], (counts, done.stdout)
