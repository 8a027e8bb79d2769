"""SQL stays the source of truth for vectors: a crash between the SQL commit and the vector write, a lost
Chroma directory and an embedder outage all end with the index matching SQL again (semantic.py's outbox,
drainer and `recallql reindex`). Every server here is a real `recallql serve` process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from models.vector_index import ChromaIndex, VectorItem, collection_name
from tests.support import (
    REPO,
    Api,
    at,
    chroma_child,
    database,
    engines,
    eventually,
    free_port,
    running_server,
    text_message,
    uid,
    vector_backlog,
)
from tests.test_chroma_process import written_note
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


class SwitchableEmbedder:
    """embed_server.py's endpoint, in this process, with a switch: while `hang` is set, it accepts each
    embeddings request and never answers it (the state of an embedder stuck mid-request)."""

    def __init__(self) -> None:
        self.hang = threading.Event()
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._hung = 0
        owner = self

        class Handler(REF.Handler):  # type: ignore[misc, name-defined]
            def do_POST(self) -> None:
                if not owner.hang.is_set():
                    super().do_POST()
                    return
                with owner._lock:
                    owner._hung += 1
                owner._release.wait()  # until the test ends; the client is long gone by then
                self.close_connection = True

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def hung_requests(self) -> int:
        with self._lock:
            return self._hung

    def close(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


@contextlib.contextmanager
def switchable_embedder() -> Iterator[SwitchableEmbedder]:
    embedder = SwitchableEmbedder()
    try:
        yield embedder
    finally:
        embedder.close()


@contextlib.contextmanager
def chroma_client(path: Path) -> Iterator[Any]:
    """Embedded Chroma opened by the test itself, once no server uses the directory: under the lock the
    server's index takes (a killed server's Chroma child exits a moment after it)."""
    import chromadb
    from chromadb.config import Settings
    from filelock import FileLock

    path.mkdir(parents=True, exist_ok=True)
    with FileLock(path / ".recallql.lock", timeout=30, thread_local=False):
        client = chromadb.PersistentClient(path=str(path), settings=Settings(anonymized_telemetry=False))
        try:
            yield client
        finally:
            client.close()


def stored_vectors(path: Path, resource_id: str) -> dict[str, tuple[dict[str, Any], list[float]]]:
    """Vector id -> (metadata, embedding) of one resource's hash-64 collection in embedded Chroma."""
    from chromadb.errors import NotFoundError

    with chroma_client(path) as client:
        try:
            collection = client.get_collection(collection_name(resource_id, MODEL, DIMENSION))
        except NotFoundError:
            return {}
        got = collection.get(include=["metadatas", "embeddings"])
    return {
        vid: (dict(meta or {}), [float(x) for x in vector])
        for vid, meta, vector in zip(got["ids"], got["metadatas"] or [], got["embeddings"], strict=True)
    }


def assert_exact_vectors(
    stored: dict[str, tuple[dict[str, Any], list[float]]], texts: dict[str, str], thread_of: dict[str, str]
) -> None:
    """One vector per message (its only chunk), carrying its ids and the embedding of its current text."""
    assert sorted(stored) == sorted(f"{message_id}:0" for message_id in texts)
    for message_id, text in texts.items():
        meta, vector = stored[f"{message_id}:0"]
        assert meta == {"message_id": message_id, "thread_id": thread_of[message_id]}
        expected = REF.embed(text)
        assert max(abs(a - b) for a, b in zip(vector, expected, strict=True)) < 1e-6, message_id


async def save_in_background(url: str, messages: Sequence[dict[str, Any]]) -> httpx.Response:
    async with httpx.AsyncClient(timeout=120) as client:
        return await client.post(f"{url}/graphql", json={"query": SAVE, "variables": {"m": list(messages)}})


def hash_texts(count: int, prefix: str) -> list[str]:
    """Chat-like texts, each with tokens of its own (`b4`, `b4x31`...), so no two share a hash-64 vector."""
    subjects = ["invoice", "flight", "garden", "guitar", "deploy", "recipe", "budget", "puppy", "marathon"]
    return [
        f"{prefix} note {prefix}{n}: the {subjects[n % len(subjects)]} item {prefix}x{n * 7 + 3}, "
        f"filed under {prefix}y{n * 13 + 5} and {prefix}z{n * 31 + 1}"
        for n in range(count)
    ]


def assert_distinct(texts: Sequence[str]) -> None:
    """The test data itself: no two texts may (nearly) share a vector, or "found by its own text" is a tie."""
    vectors = [REF.embed(t) for t in texts]
    for i in range(len(texts)):
        for j in range(i):
            similarity = sum(a * b for a, b in zip(vectors[i], vectors[j], strict=True))
            assert similarity < 0.99, (texts[i], texts[j])


# ------------------------------------------------------------------------------------------------ (a)
@pytest.mark.slow
@pytest.mark.parametrize("engine", engines())
async def test_kill_between_commit_and_vector_write_loses_no_vector(engine: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    resource = uid("r")
    threads = [uid("t"), uid("t")]
    texts: dict[str, str] = {}  # what SQL holds: message id -> text (messages with text only)
    thread_of: dict[str, str] = {}
    all_ids: list[str] = []

    def batch(name: str, count: int, start: float) -> list[dict[str, Any]]:
        return [
            text_message(
                thread_id=threads[n % 2],
                id=f"{name}-{n}",
                text=text,
                created_at=at(start + n),
                role="user" if n % 2 == 0 else "assistant",
            )
            for n, text in enumerate(hash_texts(count, name))
        ]

    def remember(messages: Sequence[dict[str, Any]]) -> None:
        for m in messages:
            if m["id"] not in all_ids:
                all_ids.append(m["id"])
            parts = [p for p in m["content"]["parts"] if p["type"] == "text"]
            if parts:
                texts[m["id"]] = parts[0]["text"]
                thread_of[m["id"]] = m["threadId"]
            else:
                texts.pop(m["id"], None)

    async def indexed(api: Api) -> list[str]:
        """Every message that has a vector (threshold -1 keeps them all)."""
        found = await search(
            api, threads[0], "note", top_k=100, threshold=-1, scope="RESOURCE", resource_id=resource
        )
        return sorted(ids(found))

    first = batch("a", 6, 0)
    # The last crash re-saves a-0 with new text (its old vector goes stale) and a-1 without text.
    resaved = text_message(thread_id=threads[0], id="a-0", text="rewritten: the zebra ate my homework")
    tool_only = text_message(thread_id=threads[1], id="a-1", role="assistant", parts=[{"type": "step-start"}])
    batches = [batch("b", 5, 100), batch("c", 8, 200), [*batch("d", 3, 300), resaved, tool_only]]
    async with database(engine, tmp_path) as db_url:
        with switchable_embedder() as embedder:
            env = {
                "RECALLQL_DATABASE_URL": db_url,
                "RECALLQL_EMBEDDINGS_URL": embedder.url,
                "RECALLQL_EMBEDDINGS_MODEL": MODEL,
                "RECALLQL_EMBEDDINGS_DIMENSION": str(DIMENSION),  # no discovery call at start-up
                "RECALLQL_VECTOR_SYNC_TIMEOUT": "30",
                "RECALLQL_VECTOR_DRAIN_INTERVAL": "0.2",
            }
            # Three crashes, each while its batch's vector write hangs on an embedder that never answers.
            for n, messages in enumerate(batches):
                if n > 0:  # hanging from the start, or the drainer would index the earlier batches now
                    embedder.hang.set()
                with running_server(data, env) as srv:
                    api = Api(srv.url)
                    if n == 0:  # a first batch indexed normally, so later saves have vectors to make stale
                        for thread_id in threads:
                            await api.execute(CREATE, input={"id": thread_id, "resourceId": resource})
                        await api.execute(SAVE, m=first)
                        remember(first)
                        assert await indexed(api) == sorted(texts)
                    embedder.hang.set()
                    asked = embedder.hung_requests()
                    saving = asyncio.create_task(save_in_background(srv.url, messages))
                    wanted = {m["id"] for m in messages}

                    async def committed(api: Api = api, wanted: set[str] = wanted) -> bool:
                        rows = [
                            m
                            for thread_id in threads
                            for m in (await recall(api, thread_id, perPage=False))["messages"]
                        ]
                        return wanted <= {m["id"] for m in rows}

                    async def embedding(asked: int = asked) -> bool:
                        return embedder.hung_requests() > asked

                    await eventually(committed, timeout=20, what="the batch to be visible through recall")
                    await eventually(embedding, timeout=20, what="the vector write to reach the embedder")
                    assert not saving.done(), "the save returned although its vector write cannot finish"
                    srv.proc.send_signal(signal.SIGKILL)
                    assert srv.proc.wait(10) == -signal.SIGKILL
                    with pytest.raises(httpx.TransportError):
                        await saving
                    embedder.hang.clear()
                before = dict(texts)
                remember(messages)
                # The crash really lost the batch's vectors: the index still holds the first batch only,
                # a-0 with its old text. (a-1's vector may be gone: stale vectors are deleted before the
                # new ones are embedded.)
                present = stored_vectors(data / "chroma", resource)
                assert present.keys() <= {f"{m['id']}:0" for m in first}
                assert {f"{m['id']}:0" for m in first} - present.keys() <= {"a-1:0"}
                kept = {m: t for m, t in before.items() if f"{m}:0" in present and m.startswith("a-")}
                assert_exact_vectors(present, kept, thread_of)

            # Restarted with a working embedder, the outbox is drained without any save.
            with running_server(data, env) as srv:
                api = Api(srv.url)
                expected = sorted(m for m in all_ids if m in texts)

                async def drained() -> bool:
                    return await vector_backlog(srv.url) == 0

                # Generous: under a loaded CI machine the restarted server may need a while.
                await eventually(drained, timeout=90, what="the outbox to be drained")
                found = await indexed(api)
                old_text = first[0]["content"]["parts"][0]["text"]
                old = await search(
                    api,
                    threads[0],
                    old_text,
                    top_k=10,
                    threshold=0.999,
                    scope="RESOURCE",
                    resource_id=resource,
                )
                assert ids(old) == []  # a-0's old text no longer matches it
        # Server stopped: the index holds exactly the vectors of what SQL holds, each of its current text.
        assert "a-1" not in texts and texts["a-0"] == resaved["content"]["parts"][0]["text"]
        assert_exact_vectors(stored_vectors(data / "chroma", resource), texts, thread_of)
        # ... and the running server's search reached every one of them. (It once missed one in eight runs
        # on a loaded machine: Chroma replayed its log as updates after the drain's first read and cut a
        # record off its graph; ChromaIndex now reads each collection before writing to it.)
        assert sorted(found) == expected, f"search missed {sorted(set(expected) - set(found))}"


# ------------------------------------------------------------------------------------------------ (b)
def cli(data: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "web.cli", *args],
        cwd=REPO,
        env={**os.environ, "RECALLQL_DATA_DIR": str(data), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@contextlib.asynccontextmanager
async def one_thread_saved(
    tmp_path: Path, texts: dict[str, str]
) -> AsyncIterator[tuple[dict[str, str], str, str]]:
    """tmp_path/data after a server saved `texts` (by message id, one a second) in one thread and
    stopped. Yields the settings of the SQLite database and the embeddings server it used (both still
    up), the thread's id and its resource's."""
    thread_id, resource_id = uid("t"), uid("r")
    messages = [
        text_message(thread_id=thread_id, id=mid, text=text, created_at=at(n))
        for n, (mid, text) in enumerate(texts.items())
    ]
    async with database("sqlite", tmp_path) as db_url:
        with embed_server_process() as url:
            env = {"RECALLQL_DATABASE_URL": db_url, **http_embedder_env(url)}
            with running_server(tmp_path / "data", env) as srv:
                api = Api(srv.url)
                await api.execute(CREATE, input={"id": thread_id, "resourceId": resource_id})
                await api.execute(SAVE, m=messages)
            yield env, thread_id, resource_id


def test_maintenance_commands_say_when_the_embedder_is_down(tmp_path: Path) -> None:
    data = tmp_path / "data"
    # Nothing listens on port 9: the endpoint's dimension probe fails before any message is read.
    env = {"RECALLQL_EMBEDDINGS_URL": "http://127.0.0.1:9", "RECALLQL_EMBEDDINGS_MODEL": "hash-64"}
    assert cli(data, env, "migrate").returncode == 0  # a store to maintain (they refuse to make one)
    for command in ("reindex", "check-index"):
        done = cli(data, env, command)
        assert done.returncode == 1, done.stderr
        assert f"{command}: embedding request to http://127.0.0.1:9/v1/embeddings failed" in done.stderr
        assert "Traceback" not in done.stderr, done.stderr


async def test_a_damaged_chroma_file_is_named_with_the_way_out(tmp_path: Path) -> None:
    """An embedded store whose chroma.sqlite3 is not a database any more: the commands said only
    SQLite's "file is not a database", naming neither the file nor what to do. Following the advice
    they give now brings every vector back."""
    data = tmp_path / "data"
    texts = dict(zip([f"m{n}" for n in range(6)], hash_texts(6, "msg"), strict=True))
    async with one_thread_saved(tmp_path, texts) as (env, thread_id, resource_id):
        store = data / "chroma" / "chroma.sqlite3"
        store.write_bytes(b"\0" * 100 + store.read_bytes()[100:])  # the header gone
        for command in ("check-index", "reindex"):
            done = cli(data, env, command)
            assert done.returncode == 1, done.stderr
            assert f"({store} is damaged: stop RecallQL, move {data / 'chroma'} aside, and run " in (
                done.stderr
            ), done.stderr
            assert "Traceback" not in done.stderr, done.stderr
        (data / "chroma").rename(tmp_path / "chroma-aside")
        assert cli(data, env, "reindex").returncode == 0
        assert_exact_vectors(
            stored_vectors(data / "chroma", resource_id), texts, dict.fromkeys(texts, thread_id)
        )


@pytest.mark.slow
async def test_reindex_rebuilds_a_deleted_chroma_directory(tmp_path: Path) -> None:
    data = tmp_path / "data"
    resources = [uid("r"), uid("r")]
    threads = [uid("t"), uid("t")]
    texts: dict[str, dict[str, str]] = {r: {} for r in resources}
    messages: list[dict[str, Any]] = []
    for n, text in enumerate(hash_texts(150, "msg")):
        r = n % 2
        messages.append(text_message(thread_id=threads[r], id=f"m{n}", text=text, created_at=at(n)))
        texts[resources[r]][f"m{n}"] = text
    # Rows without a vector are read (and counted) but not embedded.
    messages.append(
        text_message(thread_id=threads[0], id="sys", role="system", text="be nice", created_at=at(500))
    )
    messages.append(
        text_message(thread_id=threads[1], id="tool", parts=[{"type": "step-start"}], created_at=at(501))
    )
    thread_of = {m["id"]: m["threadId"] for m in messages}

    async with database("sqlite", tmp_path) as db_url:
        with embed_server_process() as url:
            env = {"RECALLQL_DATABASE_URL": db_url, **http_embedder_env(url)}
            with running_server(data, env) as srv:
                api = Api(srv.url)
                for thread_id, resource_id in zip(threads, resources, strict=True):
                    await api.execute(CREATE, input={"id": thread_id, "resourceId": resource_id})
                await api.execute(SAVE, m=messages)
                # The running server has the embedded directory open: a maintenance command is refused.
                busy = cli(data, env, "reindex")
                assert busy.returncode == 1, busy.stderr
                assert "reindex: the embedded Chroma directory" in busy.stderr, busy.stderr
                assert "is open in another process" in busy.stderr and "Traceback" not in busy.stderr
            for resource_id in resources:
                stored = stored_vectors(data / "chroma", resource_id)
                assert_exact_vectors(stored, texts[resource_id], thread_of)

            shutil.rmtree(data / "chroma")
            done = cli(data, env, "reindex")

            assert done.returncode == 0, done.stderr
            assert "re-indexed 152 message(s)" in done.stdout
            # The progress bar (rich renders its final state once when the output is not a terminal).
            assert "embedding" in done.stdout and "━" in done.stdout and "152/152" in done.stdout
            for resource_id in resources:
                assert_exact_vectors(
                    stored_vectors(data / "chroma", resource_id), texts[resource_id], thread_of
                )

            # Vectors SQL knows nothing of (a message's in a resource, a whole resource's): a plain reindex
            # writes into the collections as they are and keeps them; --rebuild drops the collections first.
            gone = uid("r")
            ghosts = ChromaIndex(path=data / "chroma", model_name=MODEL, dimension=DIMENSION)
            vector = REF.embed("a ghost")
            await ghosts.upsert([VectorItem("ghost", threads[0], resources[0], 0, vector)])
            await ghosts.upsert([VectorItem("ghost", "t-gone", gone, 0, vector)])
            await ghosts.aclose()
            assert cli(data, env, "reindex", "--resource", resources[0]).returncode == 0
            assert "ghost:0" in stored_vectors(data / "chroma", resources[0])

            done = cli(data, env, "reindex", "--resource", resources[0], "--rebuild")
            assert done.returncode == 0, done.stderr
            assert "re-indexed 76 message(s)" in done.stdout
            assert_exact_vectors(
                stored_vectors(data / "chroma", resources[0]), texts[resources[0]], thread_of
            )
            assert "ghost:0" in stored_vectors(data / "chroma", gone)  # another resource: left alone

            done = cli(data, env, "reindex", "--rebuild")
            assert done.returncode == 0, done.stderr
            assert stored_vectors(data / "chroma", gone) == {}
            for resource_id in resources:
                assert_exact_vectors(
                    stored_vectors(data / "chroma", resource_id), texts[resource_id], thread_of
                )


def _unit(*xs: float) -> list[float]:
    padded = [*xs, *([0.0] * (DIMENSION - len(xs)))]
    norm = sum(x * x for x in padded) ** 0.5
    return [x / norm for x in padded]


@pytest.mark.slow
async def test_check_index_finds_what_the_index_lacks_holds_wrongly_or_cannot_reach(tmp_path: Path) -> None:
    data = tmp_path / "data"
    texts = dict(zip((f"m{n}" for n in range(30)), hash_texts(30, "check"), strict=True))
    async with one_thread_saved(tmp_path, texts) as (env, thread_id, resource_id):
        done = cli(data, env, "check-index")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "checked 1 resource(s): 0 not in line with the database" in done.stdout

        # One message's vector gone, one that SQL does not have, and a resource SQL never had whose
        # collection holds a record Chroma's query cannot reach (an outlier beside a tight cone of
        # others, as in test_vector_index).
        with chroma_client(data / "chroma") as client:
            client.get_collection(collection_name(resource_id, MODEL, DIMENSION)).delete(ids=["m3:0"])
        gone = uid("r")
        planted = ChromaIndex(path=data / "chroma", model_name=MODEL, dimension=DIMENSION)
        await planted.upsert([VectorItem("ghost", thread_id, resource_id, 0, REF.embed("a ghost"))])
        await planted.upsert(
            [
                VectorItem("far", "t-gone", gone, 0, _unit(1.0)),
                VectorItem("far", "t-gone", gone, 1, _unit(0, 1.0)),
            ]
        )
        await planted.upsert(
            VectorItem(f"cone{k}", "t-gone", gone, 0, _unit(1.0, k / 2500, (k % 7) / 7, 0.5))
            for k in range(2500)
        )
        await planted.aclose()

        done = cli(data, env, "check-index")
        assert done.returncode == 1, done.stdout + done.stderr
        assert f"resource {resource_id!r}: 30 vector(s); missing 1 (m3), stray 1 (ghost), unreachable 0" in (
            done.stdout
        )
        assert f"resource {gone!r}: 2502 vector(s); missing 0, stray 2501" in done.stdout
        assert "unreachable 1 (far)" in done.stdout
        assert "checked 2 resource(s): 2 not in line with the database" in done.stdout

        done = cli(data, env, "check-index", "--repair")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "repaired 2 resource(s); 0 still not in line with the database" in done.stdout
        thread_of = dict.fromkeys(texts, thread_id)
        assert_exact_vectors(stored_vectors(data / "chroma", resource_id), texts, thread_of)
        assert stored_vectors(data / "chroma", gone) == {}
        assert cli(data, env, "check-index").returncode == 0


# ------------------------------------------------------------------------------------------------ (c)
@pytest.fixture
async def chroma_index(chroma_server: str) -> AsyncIterator[ChromaIndex]:
    index = ChromaIndex(url=chroma_server, model_name=MODEL, dimension=DIMENSION)
    yield index
    await index.aclose()


@pytest.mark.slow
async def test_drainer_converges_when_the_embedder_comes_back(
    tmp_path: Path, chroma_server: str, chroma_index: ChromaIndex
) -> None:
    data = tmp_path / "data"
    port = free_port()  # nothing listens here until the embedder "comes back"
    resource = uid("r")
    threads = [uid("t"), uid("t")]
    messages = [
        text_message(thread_id=threads[n % 2], id=f"{resource}-m{n}", text=text, created_at=at(n))
        for n, text in enumerate(hash_texts(12, "outage"))
    ]
    assert_distinct([m["content"]["parts"][0]["text"] for m in messages])
    env = {
        **http_embedder_env(f"http://127.0.0.1:{port}"),
        "RECALLQL_EMBEDDINGS_DIMENSION": str(DIMENSION),
        "RECALLQL_CHROMA_URL": chroma_server,
        "RECALLQL_VECTOR_DRAIN_INTERVAL": "0.2",
    }
    async with database("sqlite", tmp_path) as db_url:
        env["RECALLQL_DATABASE_URL"] = db_url
        with running_server(data, env) as srv:
            api = Api(srv.url)
            for thread_id in threads:
                await api.execute(CREATE, input={"id": thread_id, "resourceId": resource})
            # The embedder is down: the save still succeeds, and plain recall works.
            saved = (await api.execute(SAVE, m=messages))["saveMessages"]["messages"]
            assert [m["id"] for m in saved] == [m["id"] for m in messages]
            for n, thread_id in enumerate(threads):
                got = await recall(api, thread_id, perPage=False)
                assert ids(got) == [m["id"] for m in messages[n::2]]
            assert await chroma_index.count(resource) == 0

            # The embedder comes back on the same address; from here on the test sends RecallQL nothing.
            with embed_server_process(port):

                async def indexed() -> bool:
                    return await chroma_index.count(resource) == len(messages)

                await eventually(indexed, timeout=45, what="the drainer to write every vector")
                hits = await chroma_index.query(
                    REF.embed(messages[5]["content"]["parts"][0]["text"]),
                    resource_ids=[resource],
                    thread_id=None,
                    top_k=1,
                )
                assert [h.message_id for h in hits] == [messages[5]["id"]]
                assert hits[0].score > 0.999
                # Semantic recall sees them too.
                found = await search(
                    api,
                    threads[0],
                    "outage note",
                    top_k=50,
                    threshold=-1,
                    scope="RESOURCE",
                    resource_id=resource,
                )
                assert sorted(ids(found)) == sorted(m["id"] for m in messages)


# ------------------------------------------------------------------------------------------------ (d)
async def found_by_own_text(api: Api, thread_id: str, resource_id: str, message: dict[str, Any]) -> bool:
    text = message["content"]["parts"][0]["text"]
    hits = await search(
        api, thread_id, text, top_k=1, threshold=0.999, scope="RESOURCE", resource_id=resource_id
    )
    return ids(hits) == [message["id"]]


@pytest.mark.slow
async def test_a_vector_write_killed_half_way_is_rebuilt_from_sql(tmp_path: Path) -> None:
    # Chroma rewrites a collection's index files in place after each write; killed meanwhile, it leaves
    # them in two states (then every call on the collection fails, or, depending on the files, searches
    # answer wrongly). The server must notice by itself and rebuild that resource from SQL.
    data = tmp_path / "data"
    resource, bystander = uid("r"), uid("r")
    thread, other_thread = uid("t"), uid("t")
    texts = hash_texts(3200, "k")
    messages = [
        text_message(thread_id=thread, id=f"k{n}", text=text, created_at=at(n))
        for n, text in enumerate(texts)
    ]
    others = [
        text_message(thread_id=other_thread, id=f"o{n}", text=text, created_at=at(n))
        for n, text in enumerate(hash_texts(20, "o"))
    ]
    async with database("sqlite", tmp_path) as db_url:
        with embed_server_process() as url:
            env = {
                "RECALLQL_DATABASE_URL": db_url,
                **http_embedder_env(url),
                "RECALLQL_VECTOR_DRAIN_INTERVAL": "0.2",
            }
            with running_server(data, env) as srv:
                api = Api(srv.url)
                await api.execute(CREATE, input={"id": thread, "resourceId": resource})
                await api.execute(CREATE, input={"id": other_thread, "resourceId": bystander})
                await api.execute(SAVE, m=others)
                await api.execute(SAVE, m=messages[:200])
                notes = data / "chroma" / ".recallql-writing"
                assert notes.is_dir() and not any(notes.iterdir())
                child = chroma_child(srv.proc.pid)
                # Three saves of 1,000 at once: seconds of vector writes, killed as soon as one is under way.
                saving = [
                    asyncio.create_task(save_in_background(srv.url, messages[start : start + 1000]))
                    for start in (200, 1200, 2200)
                ]
                deadline = time.monotonic() + 60
                while not written_note(notes):
                    assert time.monotonic() < deadline, "no vector write began"
                    await asyncio.sleep(0.002)
                os.kill(child, signal.SIGKILL)
                assert written_note(notes), "the write ended before the kill; nothing was cut off"
                # SQL committed every save; the vector work went to the outbox.
                for response in await asyncio.gather(*saving):
                    assert response.status_code == 200 and "errors" not in response.json(), response.text

                async def drained() -> bool:
                    return await vector_backlog(srv.url) == 0

                await eventually(drained, timeout=180, what="the outbox to be drained")
                for message in [*messages[::400], messages[-1]]:
                    assert await found_by_own_text(api, thread, resource, message), message["id"]
                assert await found_by_own_text(api, other_thread, bystander, others[7])
                log = srv.log_path.read_text()
        assert f"the vector index of resource {resource!r} is damaged: a write to it was cut off" in log
        # (How many it queued depends on how many saves had committed when the damage was met.)
        assert "rebuilding its vectors from the database" in log
        assert re.search(
            rf"vectors of resource {re.escape(repr(resource))} rebuilt from the database \(\d+ messages\)",
            log,
        )
        assert bystander not in log  # nobody was writing it: left as it was
        assert not any(notes.iterdir())
        thread_of = {m["id"]: thread for m in messages}
        expected = {m["id"]: m["content"]["parts"][0]["text"] for m in messages}
        assert_exact_vectors(stored_vectors(data / "chroma", resource), expected, thread_of)


def tear_the_index(chroma_dir: Path) -> None:
    """Leaves the index files of the directory's one collection unusable: a header of zeros, as a save
    cut off half-way can leave (Chroma rewrites them in place)."""
    (header,) = chroma_dir.glob("*/header.bin")
    header.write_bytes(bytes(len(header.read_bytes())))


@pytest.mark.slow
async def test_a_collection_chroma_cannot_load_is_reported_and_rebuilt(tmp_path: Path) -> None:
    data = tmp_path / "data"
    resource, thread = uid("r"), uid("t")
    messages = [
        text_message(thread_id=thread, id=f"m{n}", text=text, created_at=at(n))
        for n, text in enumerate(hash_texts(40, "torn"))
    ]
    async with database("sqlite", tmp_path) as db_url:
        with embed_server_process() as url:
            env = {"RECALLQL_DATABASE_URL": db_url, **http_embedder_env(url)}
            with running_server(data, env) as srv:
                api = Api(srv.url)
                await api.execute(CREATE, input={"id": thread, "resourceId": resource})
                await api.execute(SAVE, m=messages)
            tear_the_index(data / "chroma")

            done = cli(data, env, "check-index")
            assert done.returncode == 1, done.stdout + done.stderr
            assert f"resource {resource!r}: damaged, cannot be read; missing 40" in done.stdout, done.stdout

            # A server left alone with it: the first search meets the damage, rebuilds the resource from
            # SQL and answers in full.
            with running_server(data, env) as srv:
                api = Api(srv.url)
                found = await search(
                    api, thread, "torn note", top_k=100, threshold=-1, scope="RESOURCE", resource_id=resource
                )
                assert sorted(ids(found)) == sorted(m["id"] for m in messages)
                assert await found_by_own_text(api, thread, resource, messages[13])
                assert f"vectors of resource {resource!r} rebuilt from the database (40 messages)" in (
                    srv.log_path.read_text()
                )
            assert cli(data, env, "check-index").returncode == 0

            # A plain reindex that meets the damage rebuilds the resource too (nothing to --rebuild by hand).
            tear_the_index(data / "chroma")
            done = cli(data, env, "reindex")
            assert done.returncode == 0, done.stdout + done.stderr
            assert "re-indexed 40 message(s)" in done.stdout
            texts = {m["id"]: m["content"]["parts"][0]["text"] for m in messages}
            assert_exact_vectors(
                stored_vectors(data / "chroma", resource), texts, dict.fromkeys(texts, thread)
            )
