"""Fault tolerance (issue 7, part 3), with real processes and bounded waits:

1. kill -9 of the server during a large concurrent ingest, several times, on SQLite and PostgreSQL: every
   acknowledged message is there after the restart, no batch is half-written, and the vector index
   converges to complete (semantic recall on, the hash-64 embeddings server, a Chroma server).
2. A database outage (PostgreSQL behind tests/tcp_proxy.py): /readyz answers 503, requests fail fast with
   SERVICE_UNAVAILABLE, and service resumes by itself when the database is back.
3. A Chroma outage (the `chroma run` process stopped, then started again on the same port and path):
   /readyz reports it, vector searches fail fast with SERVICE_UNAVAILABLE, saves and plain recalls go on,
   and the drainer completes the vectors once Chroma is back, without restarting RecallQL.
4. Graceful shutdown: SIGTERM lets an in-flight request finish, and the process exits with code 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from sqlalchemy import text

from models.db import (
    DatabaseUnavailable,
    create_engine,
    create_read_engine,
    is_unavailable,
    unavailability,
)
from models.migrate import upgrade
from models.repository import Repository
from models.vector_index import ChromaIndex
from tests.support import (
    PG_ADMIN_DSN,
    Api,
    ServerProcess,
    at,
    chroma_binary,
    chroma_child,
    database,
    engines,
    eventually,
    free_port,
    pgbouncer,
    require,
    running_server,
    text_message,
    uid,
)
from tests.tcp_proxy import TcpProxy
from tests.test_semantic import (
    CREATE,
    DIMENSION,
    MODEL,
    REF,
    SAVE,
    embed_server_process,
    http_embedder_env,
    ids,
    recall,
    search,
)


async def gql(
    client: httpx.AsyncClient, url: str, query: str, **variables: Any
) -> tuple[dict[str, Any], float]:
    """One GraphQL POST: (the response body, seconds it took)."""
    started = time.monotonic()
    response = await client.post(f"{url}/graphql", json={"query": query, "variables": variables})
    assert response.status_code == 200, response.text
    return response.json(), time.monotonic() - started


def codes(body: dict[str, Any]) -> list[str]:
    return [e["extensions"]["code"] for e in body.get("errors") or []]


# -------------------------------------------------------------------------------------- 2. database outage
RECALL_PAGE = "query($t: ID!) { recall(threadId: $t, perPage: 50) { total messages { id } } }"
THREAD = "query($t: ID!) { thread(id: $t) { id title } }"
DELETE_MESSAGES = "mutation($ids: [ID!]!) { deleteMessages(ids: $ids) { deleted } }"


def through_proxy(url: str, port: int) -> str:
    """The same database URL, pointing at 127.0.0.1:port."""
    parts = urlsplit(url)
    user = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return parts._replace(netloc=f"{user}127.0.0.1:{port}").geturl()


async def test_repository_reports_an_unreachable_database(tmp_path: Path) -> None:
    """Refused, timed out or lost connections leave the repository as DatabaseUnavailable (the API's
    SERVICE_UNAVAILABLE), never as a driver error."""
    async with database("postgres", tmp_path) as url:
        parts = urlsplit(url)
        with TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
            engine = create_engine(through_proxy(url, proxy.port), connect_timeout=1)
            repository = Repository(engine)
            try:
                await upgrade(engine)
                proxy.refuse()
                with pytest.raises(DatabaseUnavailable):
                    await repository.get_thread("t")
                proxy.blackhole()
                started = time.monotonic()
                with pytest.raises(DatabaseUnavailable):
                    await repository.get_thread("t")
                assert time.monotonic() - started < 3
                proxy.forward()
                assert await repository.get_thread("t") is None

                async def cut_mid_statement() -> None:
                    async with engine.connect() as conn:
                        await conn.execute(text("SELECT pg_sleep(5)"))

                # A connection lost under a running statement (through the repository's own calls too).
                sleeper = asyncio.create_task(cut_mid_statement())
                await asyncio.sleep(0.5)
                proxy.cut()
                with pytest.raises(Exception) as lost:
                    await sleeper
                assert is_unavailable(lost.value), repr(lost.value)
            finally:
                await engine.dispose()


def assert_refusal(exc: BaseException, reason: str, words: str) -> None:
    """`exc` is the database refusing work for now, for `reason`, saying `words`."""
    said = unavailability(exc)
    assert said is not None and said.reason == reason, (reason, said, repr(exc))
    assert words in said.message, (words, said)


async def test_what_the_database_refuses_for_now_is_told_apart_from_bugs(tmp_path: Path) -> None:
    """Errors PostgreSQL raises, through the driver and SQLAlchemy as the repository sees them: lack of
    resources (class 53: a full disk, memory or lock table slots, connection slots) and cancelled
    statements (57014: a statement_timeout, or a cancel request; 55P03: a lock_timeout) are the database
    refusing work for now, each with its reason and words; a constraint violation or a deadlock is a
    bug, which the API masks and logs."""
    expected = {
        "53100": "outOfResources",
        "53200": "outOfResources",
        "53300": "outOfResources",
        "53400": "outOfResources",
        "57014": "cancelled",  # raised here as a cancel request's would be, without the timeout's words
        "55P03": "lockTimeout",
        "23505": None,
        "40P01": None,
        "XX000": None,
    }
    words = {"outOfResources": "out of resources", "cancelled": "an operator", "lockTimeout": "lock_timeout"}
    async with database("postgres", tmp_path) as url:
        engine = create_engine(url)
        try:
            for state, reason in expected.items():
                with pytest.raises(Exception) as raised:
                    async with engine.connect() as conn:
                        await conn.exec_driver_sql(
                            f"DO $$ BEGIN RAISE EXCEPTION 'refused' USING ERRCODE = '{state}'; END $$"
                        )
                if reason is None:
                    assert unavailability(raised.value) is None and not is_unavailable(raised.value), state
                else:
                    assert_refusal(raised.value, reason, words[reason])
                    assert is_unavailable(raised.value), state
            # A real statement_timeout: the same SQLSTATE as a cancel, told apart by PostgreSQL's words.
            with pytest.raises(Exception) as raised:
                async with engine.connect() as conn:
                    await conn.exec_driver_sql("SET statement_timeout = 50")
                    await conn.exec_driver_sql("SELECT pg_sleep(2)")
            assert_refusal(raised.value, "statementTimeout", "statement_timeout")
        finally:
            await engine.dispose()


async def test_a_full_sqlite_database_is_out_of_resources(tmp_path: Path) -> None:
    """SQLite's "database or disk is full" (SQLITE_FULL; here the file's max_page_count) is the database
    refusing work for now, as PostgreSQL's disk_full is, not a bug."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'full.db'}")
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE t (x TEXT)"))
        with pytest.raises(Exception) as raised:
            async with engine.begin() as conn:
                await conn.execute(text("PRAGMA max_page_count = 4"))
                await conn.execute(text("INSERT INTO t VALUES (:x)"), {"x": "x" * 100_000})
        assert_refusal(raised.value, "outOfResources", "out of resources")
    finally:
        await engine.dispose()


async def test_concurrent_saves_past_the_lock_table_take_turns_not_refused(tmp_path: Path) -> None:
    """A PostgreSQL write takes an advisory lock per thread it touches, in its transaction. Two saves
    of 10,000 messages in as many threads (RECALLQL_MAX_SAVE_BATCH's bound) at once filled the lock
    table of a default server (max_locks_per_transaction 64): one failed with "out of shared memory".
    Retrying was not enough: when both were refused, their retries could meet again each time (a CI run
    failed so). Writes of more than 1,000 threads now take turns on the database: one waits while
    another session holds the turn (a small save does not), and four at once, three through one process
    and one through another (a replica), all succeed."""
    from models import repository as repository_module
    from resolvers.auth import OPEN
    from resolvers.config import BUILTIN_DEFAULTS
    from resolvers.context import Services
    from tests.factories import msg

    def batch(k: int) -> list[Any]:
        return [msg(f"m{k}-{n}", thread=f"t{k}-{n}", at=n) for n in range(10_000)]

    async with database("postgres", tmp_path) as url:
        engines = [create_engine(url), create_engine(url), create_engine(url)]
        try:
            await upgrade(engines[0])
            replicas = [
                Services.build(
                    Repository(engine), memory_defaults=dict(BUILTIN_DEFAULTS), max_save_batch=10_000
                )
                for engine in engines[:2]
            ]
            # Another session holds the turn: a large save waits for it, a small one goes ahead.
            async with engines[2].connect() as holder:
                turn = await holder.begin()
                await holder.execute(
                    text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"),
                    {"k": repository_module._LARGE_WRITE_TURN},
                )
                large = asyncio.create_task(replicas[0].messages.save(batch(0), principal=OPEN))
                small = replicas[1].messages.save([msg("small", thread="t-small", at=1)], principal=OPEN)
                assert len((await asyncio.wait_for(small, 60)).messages) == 1
                await asyncio.sleep(3)  # a save of 10,000 threads that did not wait is done by now
                assert not large.done(), "a large save went ahead while another session held the turn"
                await turn.rollback()
            assert len((await asyncio.wait_for(large, 120)).messages) == 10_000
            saved = await asyncio.gather(
                *(replicas[k // 4].messages.save(batch(k), principal=OPEN) for k in range(1, 5))
            )
            assert [len(result.messages) for result in saved] == [10_000] * 4
            async with engines[0].connect() as conn:
                stored = await conn.execute(text("SELECT count(*), count(DISTINCT thread_id) FROM messages"))
                assert tuple(stored.one()) == (50_001, 50_001)
        finally:
            for engine in engines:
                await engine.dispose()


async def test_database_outage_fails_fast_and_service_resumes(tmp_path: Path) -> None:
    async with database("postgres", tmp_path) as url:
        parts = urlsplit(url)
        with TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
            env = {
                "RECALLQL_DATABASE_URL": through_proxy(url, proxy.port),
                "RECALLQL_DB_CONNECT_TIMEOUT": "2",
            }
            with running_server(tmp_path / "data", env) as srv:
                api = Api(srv.url)
                thread, resource = uid("t"), uid("r")
                await api.execute(CREATE, input={"id": thread, "resourceId": resource})
                saved = [
                    text_message(thread_id=thread, id=f"{thread}-m{n}", created_at=at(n)) for n in range(5)
                ]
                await api.execute(SAVE, m=saved)
                async with httpx.AsyncClient(timeout=60) as client:

                    async def ready() -> tuple[int, dict[str, Any], float]:
                        started = time.monotonic()
                        response = await client.get(f"{srv.url}/readyz")
                        return response.status_code, response.json(), time.monotonic() - started

                    status, report, _ = await ready()
                    # (with RECALLQL_EMBEDDING_MODEL_DIR set, as scripts/test sets it, also "chroma")
                    assert (status, report["ready"], report["database"]) == (200, True, "ok"), report

                    # The database goes away: refused connections, open ones cut.
                    for outage in (proxy.refuse, proxy.blackhole):
                        outage()
                        status, report, took = await ready()
                        assert (status, report["ready"], report["database"]) == (503, False, "unreachable")
                        assert took < 4, f"readyz took {took:.1f}s"
                        # Every kind of request: a compiled read, a plain read, writes.
                        for query, variables in (
                            (RECALL_PAGE, {"t": thread}),
                            (THREAD, {"t": thread}),
                            (SAVE, {"m": [text_message(thread_id=thread, text="lost")]}),
                            (CREATE, {"input": {"id": uid("t"), "resourceId": resource}}),
                        ):
                            body, took = await gql(client, srv.url, query, **variables)
                            assert codes(body) == ["SERVICE_UNAVAILABLE"], (outage.__name__, body)
                            error = body["errors"][0]
                            assert error["message"] == "The database is unavailable; try again shortly."
                            assert error["extensions"]["service"] == "database"
                            assert error["extensions"]["reason"] == "unreachable"
                            assert error["extensions"]["requestId"]
                            # Refused: at once. Black hole: the connect timeout (2 s), once (the compiled
                            # path answers an outage itself), with room for a loaded machine.
                            limit = 1.5 if outage is proxy.refuse else 6.0
                            assert took < limit, f"{outage.__name__}: {query[:30]} took {took:.1f}s"
                        assert (await client.get(f"{srv.url}/healthz")).status_code == 200

                    # Back: readiness and service resume by themselves.
                    proxy.forward()

                    async def is_ready() -> bool:
                        return (await ready())[0] == 200

                    await eventually(is_ready, timeout=20, what="readyz to answer 200 again")
                    body, _ = await gql(client, srv.url, RECALL_PAGE, t=thread)
                    assert [m["id"] for m in body["data"]["recall"]["messages"]] == [m["id"] for m in saved]
                    await api.execute(SAVE, m=[text_message(thread_id=thread, id=f"{thread}-after")])
                    # Connections cut under a healthy database are replaced transparently (pre-ping).
                    proxy.cut()
                    body, _ = await gql(client, srv.url, RECALL_PAGE, t=thread)
                    assert body["data"]["recall"]["total"] == 6, body
            log = srv.log_path.read_text()
            assert "internal error" not in log, log[-3000:]
            assert "service unavailable" in log


async def test_a_silent_network_path_fails_requests_after_the_command_timeout(tmp_path: Path) -> None:
    """A pooled connection whose network path goes silent (a partition, a NAT or firewall dropping the
    flow: no reset reaches either end) held each request that used it for as long as TCP took to give
    up, hours; the readiness check hung with them. Now a statement gets RECALLQL_DB_COMMAND_TIMEOUT,
    then the request is SERVICE_UNAVAILABLE, the connection is dropped, and service resumes by itself."""
    async with database("postgres", tmp_path) as url:
        parts = urlsplit(url)
        with TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
            env = {
                "RECALLQL_DATABASE_URL": through_proxy(url, proxy.port),
                "RECALLQL_EMBEDDER": "off",
                "RECALLQL_DB_CONNECT_TIMEOUT": "2",
                "RECALLQL_DB_LOCK_TIMEOUT": "1",
                "RECALLQL_DB_COMMAND_TIMEOUT": "2",
            }
            with running_server(tmp_path / "data", env) as srv:
                async with httpx.AsyncClient(timeout=60) as client:
                    thread = uid("t")
                    body, _ = await gql(client, srv.url, CREATE, input={"id": thread, "resourceId": "r"})
                    assert codes(body) == [], body
                    saved = [
                        text_message(thread_id=thread, id=f"{thread}-m{n}", created_at=at(n))
                        for n in range(3)
                    ]
                    body, _ = await gql(client, srv.url, SAVE, m=saved)
                    assert codes(body) == [], body
                    assert proxy.open_connections() > 0  # pooled, idle: what the partition strands

                    proxy.freeze()
                    for query, variables in ((RECALL_PAGE, {"t": thread}), (THREAD, {"t": thread})):
                        body, took = await gql(client, srv.url, query, **variables)
                        assert codes(body) == ["SERVICE_UNAVAILABLE"], body
                        assert body["errors"][0]["extensions"]["reason"] == "unreachable", body
                        # The command timeout on the stranded connection, then the connect timeout on
                        # a new one: 2 s each, with room for a loaded machine.
                        assert took < 12, f"{query[:30]} took {took:.1f}s"
                    started = time.monotonic()
                    ready = await client.get(f"{srv.url}/readyz")
                    assert (ready.status_code, ready.json()["database"]) == (503, "unreachable")
                    assert time.monotonic() - started < 12

                    proxy.forward()

                    async def answers() -> bool:
                        body, _ = await gql(client, srv.url, RECALL_PAGE, t=thread)
                        return codes(body) == [] and body["data"]["recall"]["total"] == 3

                    await eventually(answers, timeout=20, what="recall to answer again")
            log = srv.log_path.read_text()
            assert "internal error" not in log, log[-3000:]


# ---------------------------------------------------------------------------------------- 3. Chroma outage
class ChromaProcess:
    """`chroma run` on a fixed port and path, which the test stops and starts again."""

    def __init__(self, path: Path, port: int) -> None:
        binary = chroma_binary()
        require(binary is not None, "the `chroma` executable (from chromadb) is not installed")
        assert binary is not None
        self.binary, self.path, self.port = binary, path, port
        self.url = f"http://127.0.0.1:{port}"
        self.process: subprocess.Popen[bytes] | None = None
        path.mkdir(parents=True, exist_ok=True)

    def start(self) -> None:
        env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
        with open(self.path / "chroma.log", "ab") as log:
            self.process = subprocess.Popen(
                [
                    self.binary,
                    "run",
                    "--path",
                    str(self.path / "db"),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.url}/api/v2/heartbeat", timeout=1).status_code == 200:
                    return
            if self.process.poll() is not None or time.monotonic() > deadline:
                output = (self.path / "chroma.log").read_text(errors="replace")[-3000:]
                pytest.fail(f"chroma run did not come up (exit code {self.process.poll()}):\n{output}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(15)
        self.process = None


@contextlib.contextmanager
def chroma_process(path: Path) -> Iterator[ChromaProcess]:
    chroma = ChromaProcess(path, free_port())
    chroma.start()
    try:
        yield chroma
    finally:
        chroma.stop()


def texts(count: int, prefix: str) -> list[str]:
    """Texts with tokens of their own, so that each is its own best hit under hash-64."""
    subjects = ["invoice", "flight", "garden", "guitar", "deploy", "recipe", "budget", "puppy", "marathon"]
    return [
        f"{prefix} note {prefix}{n}: the {subjects[n % len(subjects)]} item {prefix}x{n * 7 + 3}, "
        f"filed under {prefix}y{n * 13 + 5} and {prefix}z{n * 31 + 1}"
        for n in range(count)
    ]


SEARCH = """query($t: ID!, $r: String, $s: String, $c: MemoryConfigInput) {
  recall(threadId: $t, resourceId: $r, vectorSearchString: $s, threadConfig: $c, perPage: 0) { total } }"""


@dataclass
class ChromaFault:
    """A server beside a Chroma server (or with its embedded Chroma child: `chroma` None), with one
    thread's messages saved before a Chroma fault and more to save during it (searches of the resource
    must find all of them once Chroma is back)."""

    srv: ServerProcess
    chroma: ChromaProcess | None
    api: Api
    resource: str = field(default_factory=lambda: uid("r"))
    thread: str = field(default_factory=lambda: uid("t"))
    before: list[dict[str, Any]] = field(default_factory=list)
    during: list[dict[str, Any]] = field(default_factory=list)

    async def found(self) -> list[str]:
        hits = await search(
            self.api, self.thread, "note", top_k=50, threshold=-1, scope="RESOURCE", resource_id=self.resource
        )
        return sorted(ids(hits))

    async def search_fails(self, client: httpx.AsyncClient) -> tuple[dict[str, Any], float]:
        body, took = await gql(
            client,
            self.srv.url,
            SEARCH,
            t=self.thread,
            r=self.resource,
            s="note",
            c={"semanticRecall": {"options": {"topK": 3}}},
        )
        assert codes(body) == ["SERVICE_UNAVAILABLE"], body
        assert body["errors"][0]["extensions"]["service"] == "vectors"
        return body, took

    async def save_during(self, within: float) -> None:
        """Saves and reads without a search go on; the outbox keeps the vector work."""
        started = time.monotonic()
        await self.api.execute(SAVE, m=self.during)
        assert time.monotonic() - started < within
        everything = await recall(self.api, self.thread, perPage=False)
        assert ids(everything) == [m["id"] for m in self.before + self.during]

    async def recovered(self) -> None:
        expected = sorted(m["id"] for m in self.before + self.during)

        async def complete() -> bool:
            with contextlib.suppress(Exception):
                return await self.found() == expected
            return False

        await eventually(complete, timeout=60, what="the drainer to index what was saved meanwhile")


@contextlib.asynccontextmanager
async def chroma_fault(
    tmp_path: Path, count: int, *, embedded: bool = False, **env: str
) -> AsyncIterator[ChromaFault]:
    async with database("sqlite", tmp_path) as db_url:
        with embed_server_process() as embed_url, contextlib.ExitStack() as stack:
            chroma = None if embedded else stack.enter_context(chroma_process(tmp_path / "chroma"))
            env = {
                **http_embedder_env(embed_url),
                "RECALLQL_EMBEDDINGS_DIMENSION": str(DIMENSION),
                **({"RECALLQL_CHROMA_URL": chroma.url} if chroma is not None else {}),
                "RECALLQL_DATABASE_URL": db_url,
                "RECALLQL_VECTOR_DRAIN_INTERVAL": "0.2",
                **env,
            }
            with running_server(tmp_path / "data", env) as srv:
                fault = ChromaFault(srv, chroma, Api(srv.url))
                t = fault.thread
                fault.before = [
                    text_message(thread_id=t, id=f"{t}-a{n}", text=text, created_at=at(n))
                    for n, text in enumerate(texts(count, "before"))
                ]
                fault.during = [
                    text_message(thread_id=t, id=f"{t}-b{n}", text=text, created_at=at(100 + n))
                    for n, text in enumerate(texts(count, "during"))
                ]
                await fault.api.execute(CREATE, input={"id": t, "resourceId": fault.resource})
                await fault.api.execute(SAVE, m=fault.before)
                assert await fault.found() == sorted(m["id"] for m in fault.before)
                yield fault
            log = srv.log_path.read_text()
            assert "internal error" not in log, log[-3000:]


async def test_chroma_outage_degrades_search_only_and_recovers(tmp_path: Path) -> None:
    async with chroma_fault(tmp_path, 6) as fault, httpx.AsyncClient(timeout=60) as client:
        srv, chroma = fault.srv, fault.chroma
        assert chroma is not None
        ready = await client.get(f"{srv.url}/readyz")
        assert (ready.status_code, ready.json()) == (
            200,
            {"ready": True, "database": "ok", "schema": "ok", "chroma": "ok", "semantic": "ok"},
        )

        chroma.stop()
        started = time.monotonic()
        ready = await client.get(f"{srv.url}/readyz")
        assert time.monotonic() - started < 4
        # Still ready (the database answers), with Chroma reported unreachable.
        assert (ready.status_code, ready.json()) == (
            200,
            {"ready": True, "database": "ok", "schema": "ok", "chroma": "unreachable", "semantic": "ok"},
        )
        body, took = await fault.search_fails(client)
        error = body["errors"][0]
        assert error["extensions"]["requestId"] and "vector index" in error["message"]
        assert took < 3, f"the search took {took:.1f}s to fail"
        await fault.save_during(within=5)

        # Chroma comes back on the same port and path; RecallQL is not restarted.
        chroma.start()
        await fault.recovered()
        index = ChromaIndex(url=chroma.url, model_name=MODEL, dimension=DIMENSION)
        try:
            assert await index.count(fault.resource) == len(fault.before) + len(fault.during)
        finally:
            await index.aclose()
        ready = await client.get(f"{srv.url}/readyz")
        assert ready.json() == {
            "ready": True,
            "database": "ok",
            "schema": "ok",
            "chroma": "ok",
            "semantic": "ok",
        }
        # Each text is its own best hit again.
        probe = fault.during[3]["content"]["parts"][0]["text"]
        best = await search(
            fault.api, fault.thread, probe, top_k=1, scope="RESOURCE", resource_id=fault.resource
        )
        assert ids(best) == [fault.during[3]["id"]]


@pytest.mark.parametrize("embedded", [False, True], ids=["server", "embedded child"])
async def test_a_chroma_that_stops_answering_fails_calls_in_time_and_recovers(
    tmp_path: Path, embedded: bool
) -> None:
    # SIGSTOP: a Chroma server keeps its port and accepts connections but answers nothing, which
    # chromadb's HTTP client would wait on for ever (a hung search; a write pipeline stuck on one call).
    # The embedded child keeps its pipe and answers nothing, as a deadlock inside Chroma would.
    async with chroma_fault(tmp_path, 3, embedded=embedded, RECALLQL_CHROMA_TIMEOUT="2") as fault:
        if fault.chroma is None:
            pid = chroma_child(fault.srv.proc.pid)
        else:
            assert fault.chroma.process is not None
            pid = fault.chroma.process.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            async with httpx.AsyncClient(timeout=60) as client:
                _, took = await fault.search_fails(client)
            assert took < 10, f"the search took {took:.1f}s to fail"
            # The save's vector write fails in time too: the save answers well within its 10 s wait
            # for the vectors.
            await fault.save_during(within=8)
        finally:
            os.kill(pid, signal.SIGCONT)
        await fault.recovered()
        assert "timed out" in fault.srv.log_path.read_text().lower()


# ------------------------------------------------------------------------------------- 4. graceful shutdown
class SlowEmbedder:
    """embed_server.py's endpoint in this process; while `delay` is set, each embeddings request waits that
    long before answering (`arrived` is set when one comes in)."""

    def __init__(self) -> None:
        self.delay = 0.0
        self.arrived = threading.Event()
        owner = self

        class Handler(REF.Handler):  # type: ignore[misc, name-defined]
            def do_POST(self) -> None:
                delay = owner.delay
                owner.arrived.set()
                time.sleep(delay)
                super().do_POST()

            def log_message(self, *_args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


async def test_sigterm_finishes_in_flight_requests_and_exits_cleanly(tmp_path: Path) -> None:
    embedder = SlowEmbedder()
    try:
        async with database("sqlite", tmp_path) as db_url:
            env = {
                **http_embedder_env(embedder.url),
                "RECALLQL_EMBEDDINGS_DIMENSION": str(DIMENSION),
                "RECALLQL_DATABASE_URL": db_url,
                "RECALLQL_VECTOR_SYNC_TIMEOUT": "30",  # the save waits for its (slow) vector write
            }
            thread, resource = uid("t"), uid("r")
            messages = [
                text_message(thread_id=thread, id=f"{thread}-m{n}", text=t, created_at=at(n))
                for n, t in enumerate(texts(5, "shutdown"))
            ]
            server = ServerProcess(tmp_path / "data", env)
            try:
                server.wait_ready()
                api = Api(server.url)
                await api.execute(CREATE, input={"id": thread, "resourceId": resource})
                embedder.delay = 3.0
                embedder.arrived.clear()
                async with httpx.AsyncClient(timeout=60) as client:
                    saving = asyncio.create_task(
                        client.post(
                            f"{server.url}/graphql", json={"query": SAVE, "variables": {"m": messages}}
                        )
                    )
                    # In flight: committed, and waiting for the embedder.
                    assert await asyncio.to_thread(embedder.arrived.wait, 20), (
                        "the save never reached the embedder"
                    )
                    server.proc.send_signal(signal.SIGTERM)
                    await asyncio.sleep(0.5)
                    # Shutting down: no new connections, while the in-flight request goes on.
                    with pytest.raises(httpx.TransportError):
                        await client.get(f"{server.url}/healthz", timeout=2)
                    assert not saving.done()
                    response = await saving
                assert response.status_code == 200, response.text
                body = response.json()
                assert "errors" not in body, body
                assert [m["id"] for m in body["data"]["saveMessages"]["messages"]] == [
                    m["id"] for m in messages
                ]
                assert await asyncio.to_thread(server.proc.wait, 30) == 0
                log = server.log_path.read_text()
                assert "Waiting for connections to close" in log or "Shutting down" in log, log[-2000:]
            finally:
                server.stop()
            # What it answered is there after a restart, vectors included.
            embedder.delay = 0.0
            with running_server(tmp_path / "data", env) as srv:
                api = Api(srv.url)
                assert ids(await recall(api, thread, perPage=False)) == [m["id"] for m in messages]
                probe = messages[2]["content"]["parts"][0]["text"]
                best = await search(api, thread, probe, top_k=1)
                assert ids(best) == [messages[2]["id"]]
    finally:
        embedder.close()


# ---------------------------------------------------------------------------------- 1. kill -9 under ingest
CLIENTS = 16
BATCH = 50
THREADS_PER_CLIENT = 8
RESOURCES = 4
KILLS = 4
# Each round is killed at a random moment once this many messages (at random, between the two) were
# acknowledged in it, or at its deadline.
ROUND_TARGET = (2_500, 4_500)
ROUND_DEADLINE = 45.0


@dataclass
class Ingest:
    run: str
    acknowledged: dict[str, str] = field(default_factory=dict)  # message id -> thread id
    unanswered: list[list[str]] = field(default_factory=list)  # batches whose answer never came
    failures: list[str] = field(default_factory=list)
    sent: int = 0

    def resource(self, client: int) -> str:
        return f"{self.run}-r{client % RESOURCES}"

    def thread(self, client: int, n: int) -> str:
        return f"{self.run}-c{client}-t{n % THREADS_PER_CLIENT}"


async def ingest_client(url: str, state: Ingest, client: int, round_no: int) -> None:
    """Saves batches until the server dies; each batch goes to one of the client's threads."""
    rng = random.Random(f"{state.run}-{client}-{round_no}")
    async with httpx.AsyncClient(timeout=60) as http:
        for seq in range(1_000_000):
            thread = state.thread(client, rng.randrange(THREADS_PER_CLIENT))
            prefix = f"{state.run}-k{round_no}c{client}s{seq}"
            batch = [
                text_message(
                    thread_id=thread,
                    id=f"{prefix}m{n}",
                    role="user" if n % 2 == 0 else "assistant",
                    text=f"round {round_no} client {client} batch {seq} message {n}: {prefix}w{n}",
                )
                for n in range(BATCH)
            ]
            state.sent += BATCH
            try:
                response = await http.post(f"{url}/graphql", json={"query": SAVE, "variables": {"m": batch}})
            except httpx.TransportError:
                state.unanswered.append([m["id"] for m in batch])
                return
            body = response.json() if response.status_code == 200 else {"status": response.status_code}
            saved = (body.get("data") or {}).get("saveMessages")
            if not saved or body.get("errors"):
                state.failures.append(f"client {client}: {str(body)[:300]}")
                return
            assert [m["id"] for m in saved["messages"]] == [m["id"] for m in batch]
            state.acknowledged.update((m["id"], thread) for m in batch)


async def ingest_and_kill(data: Path, env: dict[str, str], state: Ingest, round_no: int) -> int:
    """One round: a server, CLIENTS clients saving at once, kill -9 at a random moment. Returns how many
    messages this round acknowledged."""
    rng = random.Random(f"{state.run}-kill-{round_no}")
    server = ServerProcess(data, env)
    try:
        await asyncio.to_thread(server.wait_ready)
        if round_no == 0:
            async with httpx.AsyncClient(timeout=60) as http:
                for c in range(CLIENTS):
                    created = await asyncio.gather(
                        *(
                            gql(
                                http,
                                server.url,
                                CREATE,
                                input={"id": state.thread(c, n), "resourceId": state.resource(c)},
                            )
                            for n in range(THREADS_PER_CLIENT)
                        )
                    )
                    assert all("errors" not in body for body, _ in created), created
        before = len(state.acknowledged)
        target = rng.randint(*ROUND_TARGET)
        clients = [asyncio.create_task(ingest_client(server.url, state, c, round_no)) for c in range(CLIENTS)]
        deadline = time.monotonic() + ROUND_DEADLINE
        while (
            len(state.acknowledged) - before < target and time.monotonic() < deadline and not state.failures
        ):
            await asyncio.sleep(0.02)
        await asyncio.sleep(rng.uniform(0, 0.3))  # somewhere in the middle of the next batches
        server.proc.send_signal(signal.SIGKILL)
        assert await asyncio.to_thread(server.proc.wait, 10) == -signal.SIGKILL
        await asyncio.wait_for(asyncio.gather(*clients), 60)
        assert not state.failures, state.failures[:3]
        return len(state.acknowledged) - before
    finally:
        server.stop()


ALL_IDS = "query($t: ID!) { recall(threadId: $t, perPage: false) { total messages { id } } }"


async def stored_ids(url: str, state: Ingest) -> dict[str, list[str]]:
    """Thread id -> the ids recall returns (perPage: false), for every thread of the run."""
    threads = sorted({state.thread(c, n) for c in range(CLIENTS) for n in range(THREADS_PER_CLIENT)})
    found: dict[str, list[str]] = {}
    async with httpx.AsyncClient(timeout=60) as http:
        for start in range(0, len(threads), 16):
            chunk = threads[start : start + 16]
            results = await asyncio.gather(*(gql(http, url, ALL_IDS, t=t) for t in chunk))
            for t, (body, _) in zip(chunk, results, strict=True):
                assert "errors" not in body, body
                found[t] = [m["id"] for m in body["data"]["recall"]["messages"]]
    return found


def chroma_ids(url: str, resources: list[str]) -> dict[str, set[str]]:
    """Resource -> the vector ids of its hash-64 collection on a Chroma server."""
    import chromadb
    from chromadb.config import Settings
    from chromadb.errors import NotFoundError

    from models.vector_index import collection_name

    parts = urlsplit(url)
    client = chromadb.HttpClient(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 80,
        settings=Settings(anonymized_telemetry=False),
    )
    found: dict[str, set[str]] = {}
    try:
        for resource in resources:
            found[resource] = set()
            try:
                collection = client.get_collection(collection_name(resource, MODEL, DIMENSION))
            except NotFoundError:
                continue
            offset = 0
            while batch := collection.get(include=[], limit=5000, offset=offset)["ids"]:
                found[resource].update(batch)
                offset += len(batch)
    finally:
        client.close()  # type: ignore[attr-defined]
        # As in ChromaIndex.aclose: chromadb's HTTP client leaves its httpx sessions open.
        for owner in (client, getattr(client, "_admin_client", None)):
            session = getattr(getattr(owner, "_server", None), "_session", None)
            if session is not None:
                session.close()
    return found


@pytest.mark.slow
@pytest.mark.parametrize("engine", engines())
async def test_kill_9_during_concurrent_ingest_loses_no_acknowledged_message(
    engine: str, tmp_path: Path, chroma_server: str
) -> None:
    state = Ingest(run=uid("ing"))
    data = tmp_path / "data"
    started = time.monotonic()
    async with database(engine, tmp_path) as db_url:
        with embed_server_process() as embed_url:
            env = {
                **http_embedder_env(embed_url),
                "RECALLQL_EMBEDDINGS_DIMENSION": str(DIMENSION),
                "RECALLQL_CHROMA_URL": chroma_server,
                "RECALLQL_DATABASE_URL": db_url,
                "RECALLQL_VECTOR_DRAIN_INTERVAL": "0.5",
                "RECALLQL_ACCESS_LOG": "false",
            }
            rounds = [await ingest_and_kill(data, env, state, n) for n in range(KILLS)]
            ingest_seconds = time.monotonic() - started

            with running_server(data, env) as srv:
                stored = await stored_ids(srv.url, state)
                present = {m for ms in stored.values() for m in ms}
                # Every acknowledged message, in its thread; nothing twice; nothing that was never sent.
                lost = [m for m, t in state.acknowledged.items() if m not in stored[t]]
                assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {lost[:5]}"
                assert sum(len(ms) for ms in stored.values()) == len(present)
                unanswered = {m for batch in state.unanswered for m in batch}
                assert present <= state.acknowledged.keys() | unanswered
                # A batch the server died under is all there or not there at all (one transaction).
                for batch in state.unanswered:
                    assert sum(m in present for m in batch) in (0, len(batch)), batch[:3]

                # The vector index converges to complete: the outbox drains and every message (all have
                # text) has its vector, what a crash interrupted included.
                engine_ = create_engine(db_url)
                repository = Repository(engine_)
                index = ChromaIndex(url=chroma_server, model_name=MODEL, dimension=DIMENSION)
                resources = [state.resource(c) for c in range(RESOURCES)]
                try:
                    deadline = time.monotonic() + 90
                    while True:
                        backlog = await repository.outbox_backlog()
                        counts = [
                            (await index.count(r), await repository.count_all_messages(r)) for r in resources
                        ]
                        if backlog == 0 and all(a == b for a, b in counts):
                            break
                        assert time.monotonic() < deadline, f"no convergence: backlog {backlog}, {counts}"
                        await asyncio.sleep(0.5)
                    converge_seconds = time.monotonic() - started - ingest_seconds
                    vectors = await asyncio.to_thread(chroma_ids, chroma_server, resources)
                    for resource in resources:
                        sql = {
                            m
                            for c in range(CLIENTS)
                            if state.resource(c) == resource
                            for n in range(THREADS_PER_CLIENT)
                            for m in stored[state.thread(c, n)]
                        }
                        assert vectors[resource] == {f"{m}:0" for m in sql}
                finally:
                    await index.aclose()
                    repository.close()
                    await engine_.dispose()
    total = time.monotonic() - started
    print(
        f"\n{engine}: {len(state.acknowledged)} acknowledged ({rounds} per round), {len(present)} stored, "
        f"{len(state.unanswered)} batches unanswered; ingest {ingest_seconds:.0f}s, "
        f"converged after {converge_seconds:.0f}s more, total {total:.0f}s"
    )
    assert len(state.acknowledged) >= KILLS * ROUND_TARGET[0] * 0.5, rounds


@pytest.mark.parametrize("engine", engines())
async def test_database_errors_never_carry_the_values_bound_to_them(engine: str, tmp_path: Path) -> None:
    # A failed statement's text named its bound values (message texts, metadata, working memory), and
    # every logged database error, the drain's and title generation's among them, wrote them to the log.
    secret = "the user's private message"
    async with database(engine, tmp_path) as db_url:
        engine_ = create_engine(db_url)
        try:
            with pytest.raises(Exception) as failed:
                async with engine_.connect() as conn:
                    await conn.execute(text("SELECT * FROM no_such_table WHERE x = :v"), {"v": secret})
            assert "no_such_table" in str(failed.value) and secret not in str(failed.value)
            read = create_read_engine(db_url)
            if read is not None:  # SQLite's reads and write transactions from worker threads
                with pytest.raises(Exception) as failed, read.connect() as sync_conn:
                    sync_conn.execute(text("SELECT * FROM no_such_table WHERE x = :v"), {"v": secret})
                assert "no_such_table" in str(failed.value) and secret not in str(failed.value)
                read.dispose()
        finally:
            await engine_.dispose()


async def test_a_database_out_of_connections_is_unavailable_not_an_internal_error(tmp_path: Path) -> None:
    """PostgreSQL refusing a new connection for want of slots ("too many connections", SQLSTATE 53300:
    max_connections, or a role's or database's limit) is an outage to retry, like an unreachable
    database: SERVICE_UNAVAILABLE, not INTERNAL_SERVER_ERROR."""
    import asyncpg

    role = f"recallql_limited_{uid('r').split('-')[1]}"
    admin = await asyncpg.connect(PG_ADMIN_DSN)
    try:
        await admin.execute(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 1")
        async with database("postgres", tmp_path) as url:
            name = url.rsplit("/", 1)[1]
            await admin.execute(f'ALTER DATABASE "{name}" OWNER TO {role}')
            limited = url.replace("postgresql+asyncpg://", f"postgresql+asyncpg://{role}@")
            env = {"RECALLQL_DATABASE_URL": limited, "RECALLQL_EMBEDDER": "off", "RECALLQL_DB_POOL_SIZE": "4"}
            with running_server(tmp_path / "data", env) as server:
                async with httpx.AsyncClient(timeout=30) as client:
                    bodies = await asyncio.gather(
                        *(gql(client, server.url, THREAD, t=f"t{n}") for n in range(8))
                    )
                    seen = [codes(body) for body, _ in bodies]
                    # One connection is allowed: some requests get it, the others are refused.
                    assert ["SERVICE_UNAVAILABLE"] in seen, seen
                    assert all(c in ([], ["SERVICE_UNAVAILABLE"]) for c in seen), seen
                    reasons = {
                        e["extensions"]["reason"] for body, _ in bodies for e in body.get("errors") or []
                    }
                    assert reasons == {"outOfResources"}, reasons
                    body, _ = await gql(client, server.url, THREAD, t="t0")
                    assert codes(body) == [], body  # one at a time goes through
    finally:
        await admin.execute(f"DROP ROLE IF EXISTS {role}")
        await admin.close()


async def test_a_primary_turned_read_only_is_unavailable_and_writes_resume_after_failover(
    tmp_path: Path,
) -> None:
    """A failover: the node the pooled connections lead to becomes a read-only standby, then writes are
    possible again (a new primary behind the same address). Writes in between fail with SQLSTATE 25006,
    which is an outage to retry (SERVICE_UNAVAILABLE, not an internal error), and the connections that
    saw it are dropped: a pooled session keeps the read-only default it started with, so writes went on
    failing, through those connections, after the failover had ended."""
    import asyncpg

    async with database("postgres", tmp_path) as url:
        name = url.rsplit("/", 1)[1]
        env = {"RECALLQL_DATABASE_URL": url, "RECALLQL_EMBEDDER": "off", "RECALLQL_DB_POOL_SIZE": "3"}
        with running_server(tmp_path / "data", env) as server:
            async with httpx.AsyncClient(timeout=30) as client:
                thread = uid("t")
                body, _ = await gql(client, server.url, CREATE, input={"id": thread, "resourceId": "r"})
                assert codes(body) == [], body

                async def save(n: int) -> list[str]:
                    message = text_message(thread_id=thread, id=f"{thread}-{n}")
                    body, _ = await gql(client, server.url, SAVE, m=[message])
                    return codes(body)

                # Fill the pool with sessions, then turn the database read-only for new sessions and
                # cut the old ones: every connection from now on is a read-only session.
                assert await asyncio.gather(*(save(n) for n in range(6))) == [[]] * 6
                admin = await asyncpg.connect(PG_ADMIN_DSN)
                try:
                    await admin.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
                    await admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name
                    )
                    during = [await save(100 + n) for n in range(6)]
                    assert all(c == ["SERVICE_UNAVAILABLE"] for c in during), during
                    body, _ = await gql(client, server.url, RECALL_PAGE, t=thread)
                    assert codes(body) == [] and body["data"]["recall"]["total"] == 6, body  # reads go on
                    # The failover ends: new sessions may write again.
                    await admin.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
                finally:
                    await admin.close()
                after = [await save(200 + n) for n in range(6)]
                assert after == [[]] * 6, after


@contextlib.asynccontextmanager
async def messages_held(url: str) -> AsyncIterator[None]:
    """A session of the database's own holding the messages table (ACCESS EXCLUSIVE, without the
    database's statement or lock timeouts) until the block ends: statements on it wait meanwhile."""
    import asyncpg

    holder = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        async with holder.transaction():
            await holder.execute("SET LOCAL statement_timeout = 0")
            await holder.execute("SET LOCAL lock_timeout = 0")
            await holder.execute("LOCK TABLE messages IN ACCESS EXCLUSIVE MODE")
            yield
    finally:
        await holder.close()


async def test_a_statement_the_database_cancels_is_unavailable_and_nothing_is_half_written(
    tmp_path: Path,
) -> None:
    """Managed databases and DBAs bound statements: a statement_timeout or lock_timeout on the role or
    the database, or an operator's pg_cancel_backend. A statement cancelled so (SQLSTATE 57014, or
    55P03 for a lock wait) was INTERNAL_SERVER_ERROR with a traceback in the log; it is the database
    refusing work for now, to retry (SERVICE_UNAVAILABLE, saying why), the write is rolled back whole,
    the connection serves the next request, and a read is not run a second time (the compiled read
    path handed failures to the normal path, which ran the query again: an operator's cancel was
    undone, and each timeout waited out twice)."""
    import asyncpg

    async with database("postgres", tmp_path) as url:
        name = url.rsplit("/", 1)[1]
        admin = await asyncpg.connect(PG_ADMIN_DSN)

        async def database_settings(statement: str) -> None:
            """Changes the database's defaults, and ends its sessions so that the next ones take them."""
            await admin.execute(f'ALTER DATABASE "{name}" {statement}')
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name
            )

        env = {"RECALLQL_DATABASE_URL": url, "RECALLQL_EMBEDDER": "off", "RECALLQL_DB_POOL_SIZE": "2"}
        try:
            await database_settings("SET statement_timeout = 400")
            with running_server(tmp_path / "data", env) as server:
                async with httpx.AsyncClient(timeout=30) as client:
                    thread = uid("t")
                    body, _ = await gql(client, server.url, CREATE, input={"id": thread, "resourceId": "r"})
                    assert codes(body) == [], body
                    first = text_message(thread_id=thread, id=f"{thread}-1")
                    body, _ = await gql(client, server.url, SAVE, m=[first])
                    assert codes(body) == [], body

                    async with messages_held(url):
                        second = text_message(thread_id=thread, id=f"{thread}-2")
                        saved, _ = await gql(client, server.url, SAVE, m=[second])
                        read, _ = await gql(client, server.url, RECALL_PAGE, t=thread)
                    for body in (saved, read):
                        assert codes(body) == ["SERVICE_UNAVAILABLE"], body
                        error = body["errors"][0]
                        assert "cancelled" in error["message"] and "timeout" in error["message"], error
                        assert error["extensions"]["service"] == "database", error
                        assert error["extensions"]["reason"] == "statementTimeout", error
                    # Nothing of the cancelled save was stored, and the pool's sessions go on serving.
                    body, _ = await gql(client, server.url, RECALL_PAGE, t=thread)
                    assert codes(body) == [], body
                    assert [m["id"] for m in body["data"]["recall"]["messages"]] == [first["id"]]

                    # An operator cancelling a statement: the same answer, and it is not run again
                    # (a second run would wait for the lock until the block ends, past the client's
                    # timeout).
                    await database_settings("RESET statement_timeout")
                    async with messages_held(url):
                        waiting = asyncio.create_task(gql(client, server.url, RECALL_PAGE, t=thread))

                        async def blocked() -> int:
                            return int(
                                await admin.fetchval(
                                    "SELECT pg_cancel_backend(pid)::int FROM pg_stat_activity "
                                    "WHERE datname = $1 AND wait_event_type = 'Lock'",
                                    name,
                                )
                                or 0
                            )

                        await eventually(blocked, timeout=20, what="a recall waiting for the lock")
                        body, _ = await waiting
                    assert codes(body) == ["SERVICE_UNAVAILABLE"], body
                    assert body["errors"][0]["extensions"]["reason"] == "cancelled", body

                    # A lock_timeout (55P03) in place of the statement_timeout.
                    await database_settings("SET lock_timeout = 300")
                    async with messages_held(url):
                        body, _ = await gql(client, server.url, RECALL_PAGE, t=thread)
                    assert codes(body) == ["SERVICE_UNAVAILABLE"], body
                    assert "lock_timeout" in body["errors"][0]["message"], body
                    assert body["errors"][0]["extensions"]["reason"] == "lockTimeout", body
            log = server.log_path.read_text()
            assert "Traceback" not in log and "internal error" not in log, log
        finally:
            await admin.close()


async def test_a_sqlite_write_lock_held_elsewhere_is_unavailable_after_the_wait(tmp_path: Path) -> None:
    """Another connection holding the SQLite file's write lock (a VACUUM, a bulk job, an open `sqlite3`
    shell): a save waits the URL's timeout for it (30 s unless given), then answers SERVICE_UNAVAILABLE.
    It was INTERNAL_SERVER_ERROR, after the wait and four more as long (2.5 minutes by default). Reads go
    on meanwhile (WAL), and nothing of the refused save is stored."""
    import sqlite3

    db = tmp_path / "held.db"
    env = {"RECALLQL_DATABASE_URL": f"sqlite+aiosqlite:///{db}?timeout=0.5", "RECALLQL_EMBEDDER": "off"}
    with running_server(tmp_path / "data", env) as server:
        async with httpx.AsyncClient(timeout=30) as client:
            thread = uid("t")
            body, _ = await gql(client, server.url, CREATE, input={"id": thread, "resourceId": "r"})
            assert codes(body) == [], body
            holder = sqlite3.connect(db, isolation_level=None)
            try:
                holder.execute("BEGIN IMMEDIATE")
                refused = text_message(thread_id=thread, id=f"{thread}-refused")
                saved, _ = await gql(client, server.url, SAVE, m=[refused])
                read, _ = await gql(client, server.url, RECALL_PAGE, t=thread)
                holder.execute("ROLLBACK")
            finally:
                holder.close()
            assert codes(saved) == ["SERVICE_UNAVAILABLE"], saved
            assert "busy" in saved["errors"][0]["message"], saved
            assert saved["errors"][0]["extensions"]["reason"] == "busy", saved
            assert codes(read) == [] and read["data"]["recall"]["total"] == 0, read
            kept = text_message(thread_id=thread, id=f"{thread}-kept")
            body, _ = await gql(client, server.url, SAVE, m=[kept])
            assert codes(body) == [], body
            body, _ = await gql(client, server.url, RECALL_PAGE, t=thread)
            assert [m["id"] for m in body["data"]["recall"]["messages"]] == [kept["id"]], body
    log = server.log_path.read_text()
    assert "Traceback" not in log and "internal error" not in log, log


def test_a_sqlite_timeout_that_is_not_a_number_is_a_setting_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "web.cli",
            "migrate",
            "--database-url",
            f"sqlite+aiosqlite:///{tmp_path}/x.db?timeout=soon",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "timeout (seconds a write waits for the lock) must be a number above 0" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


async def test_a_lock_held_elsewhere_fails_requests_after_the_lock_timeout(tmp_path: Path) -> None:
    """PostgreSQL waits for a lock for ever unless told otherwise: a session holding one that RecallQL
    needs (here the messages table; a DBA's long transaction, a table rewrite, a stuck client) held every
    request on it, each with a pooled connection, past any client's patience. Now a statement waits
    RECALLQL_DB_LOCK_TIMEOUT, then the request is SERVICE_UNAVAILABLE and its connection is free. A
    database's own lock_timeout is left as it is, and a migration waits as long as it must, past
    RECALLQL_DB_COMMAND_TIMEOUT too."""
    import asyncpg

    from models.migrate import _PG_LOCK_KEY

    async with database("postgres", tmp_path) as url:
        name = url.rsplit("/", 1)[1]
        env = {
            "RECALLQL_DATABASE_URL": url,
            "RECALLQL_EMBEDDER": "off",
            "RECALLQL_DB_POOL_SIZE": "1",
            "RECALLQL_DB_MAX_OVERFLOW": "0",
            "RECALLQL_DB_LOCK_TIMEOUT": "0.5",
            "RECALLQL_DB_COMMAND_TIMEOUT": "1",
        }
        with running_server(tmp_path / "data", env) as server:
            async with httpx.AsyncClient(timeout=10) as client:
                thread = uid("t")
                body, _ = await gql(client, server.url, CREATE, input={"id": thread, "resourceId": "r"})
                assert codes(body) == [], body
                async with messages_held(url):
                    saved, _ = await gql(client, server.url, SAVE, m=[text_message(thread_id=thread)])
                    read, _ = await gql(client, server.url, RECALL_PAGE, t=thread)
                    other, _ = await gql(client, server.url, THREAD, t=thread)  # no lock on messages
                for body in (saved, read):
                    assert codes(body) == ["SERVICE_UNAVAILABLE"], body
                    assert "lock_timeout" in body["errors"][0]["message"], body
                    assert body["errors"][0]["extensions"]["reason"] == "lockTimeout", body
                # The one pooled connection was freed each time, and is the same session still.
                assert codes(other) == [] and other["data"]["thread"]["id"] == thread, other
                body, _ = await gql(client, server.url, SAVE, m=[text_message(thread_id=thread)])
                assert codes(body) == [], body

        # The database's own setting wins over RecallQL's (here a longer one than the client waits).
        admin = await asyncpg.connect(PG_ADMIN_DSN)
        try:
            await admin.execute(f'ALTER DATABASE "{name}" SET lock_timeout = 250')
            longer = {"RECALLQL_DB_LOCK_TIMEOUT": "3600", "RECALLQL_DB_COMMAND_TIMEOUT": "0"}
            with running_server(tmp_path / "data", {**env, **longer}) as server:
                async with httpx.AsyncClient(timeout=10) as client, messages_held(url):
                    read, _ = await gql(client, server.url, RECALL_PAGE, t=thread)
                assert codes(read) == ["SERVICE_UNAVAILABLE"], read
        finally:
            await admin.execute(f'ALTER DATABASE "{name}" RESET lock_timeout')
            await admin.close()

    # A migration waits for another's (its advisory lock held here for longer than either timeout: the
    # command timeout bounds requests, not migrations).
    async with database("postgres", tmp_path / "new") as new:
        holder = await asyncpg.connect(new.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            await holder.execute("SELECT pg_advisory_lock($1)", _PG_LOCK_KEY)
            migrating = asyncio.create_task(
                asyncio.to_thread(
                    subprocess.run,
                    [sys.executable, "-m", "web.cli", "migrate"],
                    env={**os.environ, **env, "RECALLQL_DATABASE_URL": new},
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
            )
            await asyncio.sleep(2)
            assert not migrating.done()
            await holder.execute("SELECT pg_advisory_unlock($1)", _PG_LOCK_KEY)
            done = await migrating
        finally:
            await holder.close()
        assert done.returncode == 0 and done.stdout.startswith("applied "), (done.stdout, done.stderr)


async def test_behind_a_transaction_pooler_the_lock_timeout_bounds_each_write_alone(tmp_path: Path) -> None:
    """Behind a pooler in transaction mode, server connections are shared between clients, so
    RECALLQL_DB_LOCK_TIMEOUT was not set at all there: one stuck lock held every write on it for ever,
    and the pooler's few server connections with them. Now each write transaction sets it for itself
    (like SET LOCAL), in the statement that takes its thread locks or, for a write without them, in one
    of its own: the write answers SERVICE_UNAVAILABLE after the timeout, and no server connection keeps
    the setting for the next client. A database's own lock_timeout still wins."""
    import asyncpg

    async with database("postgres", tmp_path) as url:
        name = url.rsplit("/", 1)[1]
        direct = url.replace("postgresql+asyncpg://", "postgresql://")
        env = {
            "RECALLQL_DB_TRANSACTION_POOLER": "true",
            "RECALLQL_EMBEDDER": "off",
            "RECALLQL_DB_LOCK_TIMEOUT": "0.5",
        }
        thread = uid("t")
        with pgbouncer() as port:
            pooled = through_proxy(url, port)
            with running_server(tmp_path / "data", {**env, "RECALLQL_DATABASE_URL": pooled}) as server:
                async with httpx.AsyncClient(timeout=10) as client:
                    body, _ = await gql(client, server.url, CREATE, input={"id": thread, "resourceId": "r"})
                    assert codes(body) == [], body
                    kept = text_message(thread_id=thread, id=uid("m"))
                    body, _ = await gql(client, server.url, SAVE, m=[kept])
                    assert codes(body) == [], body

                    # Another writer of the thread (its advisory lock, as a save of it takes it), stuck.
                    holder = await asyncpg.connect(direct)
                    try:
                        async with holder.transaction():
                            await holder.execute(
                                "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", thread
                            )
                            saved, seconds = await gql(
                                client, server.url, SAVE, m=[text_message(thread_id=thread)]
                            )
                    finally:
                        await holder.close()
                    assert codes(saved) == ["SERVICE_UNAVAILABLE"], saved
                    assert saved["errors"][0]["extensions"]["reason"] == "lockTimeout", saved
                    assert seconds < 5, seconds

                    # A write that takes no thread lock (a deletion), on a table held elsewhere.
                    async with messages_held(direct):
                        deleted, _ = await gql(client, server.url, DELETE_MESSAGES, ids=[kept["id"]])
                    assert codes(deleted) == ["SERVICE_UNAVAILABLE"], deleted
                    assert deleted["errors"][0]["extensions"]["reason"] == "lockTimeout", deleted

                    # Both of the pooler's server connections (each held by a transaction here) still
                    # wait as the database says: the timeout was the write transactions' own.
                    first = await asyncpg.connect(pooled.replace("postgresql+asyncpg://", "postgresql://"))
                    second = await asyncpg.connect(pooled.replace("postgresql+asyncpg://", "postgresql://"))
                    try:
                        async with first.transaction(), second.transaction():
                            settings = [await c.fetchval("SHOW lock_timeout") for c in (first, second)]
                            backends = {await c.fetchval("SELECT pg_backend_pid()") for c in (first, second)}
                    finally:
                        await first.close()
                        await second.close()
                    assert settings == ["0", "0"] and len(backends) == 2, (settings, backends)

                    # Nothing was half-written, and the writes go on once the locks are gone.
                    page, _ = await gql(client, server.url, RECALL_PAGE, t=thread)
                    assert [m["id"] for m in page["data"]["recall"]["messages"]] == [kept["id"]], page
                    body, _ = await gql(client, server.url, SAVE, m=[text_message(thread_id=thread)])
                    assert codes(body) == [], body

        # The database's own setting wins over RECALLQL_DB_LOCK_TIMEOUT (here longer than the client waits).
        admin = await asyncpg.connect(PG_ADMIN_DSN)
        try:
            await admin.execute(f'ALTER DATABASE "{name}" SET lock_timeout = 250')
            with pgbouncer() as port:
                pooled = through_proxy(url, port)
                settings = {
                    **env,
                    "RECALLQL_DATABASE_URL": pooled,
                    "RECALLQL_DB_LOCK_TIMEOUT": "3600",
                    "RECALLQL_DB_COMMAND_TIMEOUT": "0",
                }
                with running_server(tmp_path / "data", settings) as server:
                    holder = await asyncpg.connect(direct)
                    try:
                        async with holder.transaction(), httpx.AsyncClient(timeout=10) as client:
                            await holder.execute(
                                "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", thread
                            )
                            saved, _ = await gql(client, server.url, SAVE, m=[text_message(thread_id=thread)])
                    finally:
                        await holder.close()
                    assert codes(saved) == ["SERVICE_UNAVAILABLE"], saved
                    assert saved["errors"][0]["extensions"]["reason"] == "lockTimeout", saved
        finally:
            await admin.execute(f'ALTER DATABASE "{name}" RESET lock_timeout')
            await admin.close()
