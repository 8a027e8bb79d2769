"""Many replicas over one PostgreSQL and one Chroma server behave as one service."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance.harness import embed_server
from tests.support import Api, ServerProcess, at, database, running_server, text_message, uid

RECALL = """query($t: ID!, $r: String, $q: String, $tc: MemoryConfigInput) {
  recall(threadId: $t, resourceId: $r, perPage: false, vectorSearchString: $q, threadConfig: $tc) {
    total messages { id content { parts { ... on TextPart { text } } } } } }"""
SAVE = "mutation($m: [MessageInput!]!) { saveMessages(messages: $m) { messages { id } } }"
CREATE = "mutation($i: CreateThreadInput!) { createThread(input: $i) { id } }"


@pytest.fixture(scope="module")
def embed_url() -> Iterator[str]:
    with embed_server() as server:
        yield server.url


@pytest.fixture(scope="module")
async def replicas(
    tmp_path_factory: pytest.TempPathFactory, chroma_server: str, embed_url: str
) -> list[ServerProcess]:
    tmp: Path = tmp_path_factory.mktemp("replicas")
    async with database("postgres", tmp) as url:
        env = {
            "RECALLQL_DATABASE_URL": url,
            "RECALLQL_CHROMA_URL": chroma_server,
            "RECALLQL_EMBEDDINGS_URL": embed_url,
            "RECALLQL_EMBEDDINGS_MODEL": "hash-64",
        }
        # Two independent processes, the second itself with two workers, as behind a load balancer.
        with running_server(tmp / "a", env) as a, running_server(tmp / "b", env, workers=2) as b:
            yield [a, b]


async def test_reads_and_writes_through_either_replica(replicas: list[ServerProcess]) -> None:
    a, b = (Api(s.url) for s in replicas)
    thread_id, resource_id = uid("t"), uid("r")
    await a.execute(CREATE, i={"id": thread_id, "resourceId": resource_id})
    await b.execute(SAVE, m=[text_message(thread_id=thread_id, id=f"{thread_id}-1", created_at=at(1))])
    await a.execute(SAVE, m=[text_message(thread_id=thread_id, id=f"{thread_id}-2", created_at=at(2))])
    for api in (a, b):
        got = (await api.execute(RECALL, t=thread_id))["recall"]
        assert [m["id"] for m in got["messages"]] == [f"{thread_id}-1", f"{thread_id}-2"]
    errors = await b.errors(CREATE, i={"id": thread_id, "resourceId": resource_id})
    assert errors[0]["extensions"]["code"] == "CONFLICT"
    # Two workers and no Redis: subscriptions see only their own worker's changes, and the log says so.
    assert "2 workers without RECALLQL_REDIS_URL" in replicas[1].log_path.read_text()
    assert "without RECALLQL_REDIS_URL" not in replicas[0].log_path.read_text()


async def test_concurrent_saves_of_the_same_ids_neither_duplicate_nor_lose(
    replicas: list[ServerProcess],
) -> None:
    apis = [Api(s.url) for s in replicas]
    thread_id, resource_id = uid("t"), uid("r")
    await apis[0].execute(CREATE, i={"id": thread_id, "resourceId": resource_id})
    ids = [f"{thread_id}-m{n:02d}" for n in range(40)]

    def batch(writer: int, order: list[str]) -> list[dict[str, object]]:
        return [
            text_message(
                thread_id=thread_id, id=i, created_at=at(int(i[-2:])), text=f"apple {i} from {writer}"
            )
            for i in order
        ]

    # 16 writers over both replicas, the same 40 ids in different orders and overlapping halves.
    jobs = []
    for writer in range(16):
        order = ids if writer % 2 == 0 else list(reversed(ids))
        part = order if writer % 4 < 2 else order[writer % 3 :: 2]
        # One client per writer: a gql client runs one request at a time.
        jobs.append(Api(replicas[writer % 2].url).execute(SAVE, m=batch(writer, part)))
    await asyncio.gather(*jobs)

    snapshots = [(await api.execute(RECALL, t=thread_id))["recall"] for api in apis]
    assert snapshots[0] == snapshots[1]
    got = [m["id"] for m in snapshots[0]["messages"]]
    assert got == ids and snapshots[0]["total"] == 40  # each id once, in createdAt order
    # One vector set per message: a search over the whole thread finds every message exactly once.
    config = {"semanticRecall": {"options": {"topK": 80, "messageRange": {"size": 0}, "scope": "THREAD"}}}
    found = await apis[1].execute(RECALL, t=thread_id, q="apple", tc=config | {"lastMessages": False})
    hits = [m["id"] for m in found["recall"]["messages"]]
    assert sorted(hits) == ids
