"""Semantic recall over real HTTP (mastra-behaviour.md §3): one server per Chroma mode (embedded under the
data dir, in the server process or in a child process of it, or a `chroma run` server) and database
engine, with the deterministic hash-64 embeddings server, so every score is known in advance:
score = 1 - cosine distance = the dot product of embed() vectors."""

from __future__ import annotations

import http.server
import itertools
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from models.vector_index import ChromaIndex
from resolvers.recall import RESOURCE_SCOPE_ERROR
from tests.support import (
    EMBED_SERVER,
    IN_CI,
    MODEL_DIR,
    Api,
    ServerProcess,
    at,
    chroma_child,
    database,
    embed_reference,
    embed_server_process,
    engines,
    free_port,
    running_server,
    text_message,
    uid,
)

MODEL = "hash-64"
DIMENSION = 64

if not EMBED_SERVER.is_file():  # pragma: no cover - depends on the checkout
    if IN_CI:
        raise RuntimeError(f"required in CI: the embeddings server {EMBED_SERVER}")
    pytest.skip(f"the conformance embeddings server is not at {EMBED_SERVER}", allow_module_level=True)


REF = embed_reference()


def score(query: str, text: str) -> float:
    """What the index reports for `text` against `query`: 1 - cosine distance of unit vectors."""
    return sum(a * b for a, b in zip(REF.embed(query), REF.embed(text), strict=True))


def distinct_words(count: int, *, avoid: Sequence[str] = ()) -> list[str]:
    """Words whose hash buckets differ from each other (and from `avoid`'s): one-hot, orthogonal vectors."""
    taken = {REF.bucket(word) for word in avoid}
    out: list[str] = []
    for word in (f"{a}{b}" for a, b in itertools.product("bcdfgklmnprstvz", "aeiou")):
        if REF.bucket(word) not in taken:
            taken.add(REF.bucket(word))
            out.append(word)
            if len(out) == count:
                return out
    raise AssertionError("not enough distinct buckets")


def http_embedder_env(url: str) -> dict[str, str]:
    return {"RECALLQL_EMBEDDINGS_URL": url, "RECALLQL_EMBEDDINGS_MODEL": MODEL}


RECALL = """
query Recall($threadId: ID!, $resourceId: String, $perPage: PerPage, $page: Int, $include: [IncludeInput!],
             $filter: RecallFilter, $threadConfig: MemoryConfigInput, $vectorSearchString: String) {
  recall(threadId: $threadId, resourceId: $resourceId, perPage: $perPage, page: $page, include: $include,
         filter: $filter, threadConfig: $threadConfig, vectorSearchString: $vectorSearchString) {
    total page perPage hasMore usage { tokens }
    messages { id threadId resourceId createdAt }
  }
}
"""
CREATE = "mutation($input: CreateThreadInput!) { createThread(input: $input) { id } }"
SAVE = "mutation($m: [MessageInput!]!) { saveMessages(messages: $m) { messages { id } } }"


def semantic(
    *,
    top_k: int | None = None,
    size: int | None = None,
    window: dict[str, int] | None = None,
    scope: str | None = "THREAD",
    threshold: float | None = None,
) -> dict[str, Any]:
    """A threadConfig turning semantic recall on with these options (None: the default)."""
    options: dict[str, Any] = {}
    if top_k is not None:
        options["topK"] = top_k
    if size is not None:
        options["messageRange"] = {"size": size}
    if window is not None:
        options["messageRange"] = {"window": window}
    if scope is not None:
        options["scope"] = scope
    if threshold is not None:
        options["threshold"] = threshold
    return {"semanticRecall": {"options": options}}


async def recall(api: Api, thread_id: str, **args: Any) -> dict[str, Any]:
    return (await api.execute(RECALL, threadId=thread_id, **args))["recall"]


async def search(
    api: Api,
    thread_id: str,
    text: str,
    *,
    resource_id: str | None = None,
    per_page: int | bool = 0,
    **options: Any,
) -> dict[str, Any]:
    """A recall with a vector search; by default hits only (perPage 0) in thread scope, no context."""
    options.setdefault("size", 0)
    args: dict[str, Any] = {"perPage": per_page, "threadConfig": semantic(**options)}
    if resource_id is not None:
        args["resourceId"] = resource_id
    return await recall(api, thread_id, vectorSearchString=text, **args)


def ids(result: dict[str, Any]) -> list[str]:
    return [m["id"] for m in result["messages"]]


def short(result: dict[str, Any]) -> list[str]:
    """Message ids without their thread prefix: "m3"."""
    return [m["id"].rsplit("-", 1)[1] for m in result["messages"]]


async def new_thread(api: Api, resource_id: str | None = None) -> tuple[str, str]:
    thread_id, resource_id = uid("t"), resource_id or uid("r")
    await api.execute(CREATE, input={"id": thread_id, "resourceId": resource_id})
    return thread_id, resource_id


async def save_texts(api: Api, thread_id: str, texts: Sequence[str], *, start: float = 0) -> list[str]:
    """Saves texts as m0, m1, ... one second apart; returns their ids."""
    messages = [
        text_message(
            thread_id=thread_id,
            id=f"{thread_id}-m{i}",
            created_at=at(start + i),
            text=text,
            role="user" if i % 2 == 0 else "assistant",
        )
        for i, text in enumerate(texts)
    ]
    await api.execute(SAVE, m=messages)
    return [m["id"] for m in messages]


def best(query: str, texts: Sequence[str], k: int) -> set[int]:
    """Indexes of the k best texts for the query; fails when the k-th and (k+1)-th tie."""
    ranked = sorted(range(len(texts)), key=lambda i: -score(query, texts[i]))
    if k < len(texts):
        assert score(query, texts[ranked[k - 1]]) > score(query, texts[ranked[k]]) + 1e-6, "tie at k"
    return set(ranked[:k])


# ---------------------------------------------------------------------------------------------- servers
# embedded: Chroma in the server process; process: the same directory served by a child process
# (RECALLQL_CHROMA_PROCESS); server: a Chroma server.
SCENARIOS = [(mode, engine) for engine in engines() for mode in ("embedded", "process", "server")]


@dataclass
class SemanticServer:
    url: str
    mode: str
    chroma_url: str | None
    log_path: Path

    def index(self) -> ChromaIndex | None:
        """A direct view of the Chroma server the RecallQL server writes to (server mode only)."""
        if self.chroma_url is None:
            return None
        return ChromaIndex(url=self.chroma_url, model_name=MODEL, dimension=DIMENSION)


@pytest.fixture(scope="module")
def embed_url() -> Iterator[str]:
    with embed_server_process() as url:
        yield url


@pytest.fixture(scope="module", params=SCENARIOS, ids=[f"{mode}-{engine}" for mode, engine in SCENARIOS])
async def semantic_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, embed_url: str
) -> AsyncIterator[SemanticServer]:
    mode, engine = request.param
    tmp = tmp_path_factory.mktemp(f"semantic-{mode}-{engine}")
    env = http_embedder_env(embed_url)
    chroma_url = None
    if mode == "server":
        chroma_url = request.getfixturevalue("chroma_server")
        env["RECALLQL_CHROMA_URL"] = chroma_url
    else:  # said either way: the default is the child process
        env["RECALLQL_CHROMA_PROCESS"] = "true" if mode == "process" else "false"
    async with database(engine, tmp) as url:
        env["RECALLQL_DATABASE_URL"] = url
        with running_server(tmp / "data", env) as server:
            yield SemanticServer(server.url, mode, chroma_url, server.log_path)
            if mode == "process":  # the tests ran against Chroma in the server's child process
                # Each thread lists the children it started (the index starts its child from a worker).
                tasks = Path(f"/proc/{server.proc.pid}/task").glob("*/children")
                children = [c for task in tasks for c in task.read_text().split()]
                commands = [Path(f"/proc/{c}/cmdline").read_bytes() for c in children]
                assert any(b"multiprocessing.spawn" in c for c in commands), commands
        # Each mode really used its own store: the data dir holds a Chroma directory unless on a server.
        assert (tmp / "data" / "chroma" / "chroma.sqlite3").is_file() == (mode != "server")


@pytest.fixture
def api(semantic_server: SemanticServer) -> Api:
    return Api(semantic_server.url)


# ---------------------------------------------------------------------------------------------- tests
FILLER = [
    "the quarterly budget review is on monday",
    "zebra crossings near the school were repainted",
    "please send the invoice to accounting",
    "a zebra and a giraffe at the city zoo",
    "my flight to lisbon leaves at noon",
    "the zoo opens at nine on weekends",
    "remember to water the tomato plants",
    "zebra stripes confuse biting flies at the zoo",
]


async def test_top_k_keeps_the_best_hits(api: Api) -> None:
    thread_id, resource_id = await new_thread(api)
    saved = await save_texts(api, thread_id, FILLER)
    query = "zebra at the zoo"
    for k in (1, 2, 3, 5):
        result = await search(api, thread_id, query, top_k=k)
        assert set(ids(result)) == {saved[i] for i in best(query, FILLER, k)}, k
        # Hits come back in chronological order, and never count as page rows.
        assert ids(result) == [i for i in saved if i in ids(result)]
        assert (result["total"], result["perPage"], result["hasMore"]) == (0, 0, False)
    # A topK larger than the thread returns every message that has a vector.
    assert ids(await search(api, thread_id, query, top_k=50)) == saved
    errors = await api.errors(
        RECALL, threadId=thread_id, vectorSearchString=query, threadConfig=semantic(top_k=0)
    )
    assert errors[0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert errors[0]["message"] == "semanticRecall.topK must be a positive integer."
    # resourceId is optional in thread scope, and checked when given.
    assert ids(await search(api, thread_id, query, top_k=1, resource_id=resource_id)) == ids(
        await search(api, thread_id, query, top_k=1)
    )


async def test_message_range_number_and_window(api: Api) -> None:
    thread_id, _ = await new_thread(api)
    texts = [f"ordinary message number {n} about nothing much" for n in range(9)]
    texts[4] = "the zebra escaped from the zoo"
    await save_texts(api, thread_id, texts)
    assert best("zebra zoo", texts, 1) == {4}

    async def around(**options: Any) -> list[str]:
        options.setdefault("top_k", 1)
        return short(await search(api, thread_id, "zebra zoo", **options))

    assert await around(size=0) == ["m4"]
    assert await around(size=1) == ["m3", "m4", "m5"]
    assert await around(size=2) == ["m2", "m3", "m4", "m5", "m6"]
    assert await around(size=10) == [f"m{n}" for n in range(9)]
    assert await around(window={"before": 2, "after": 0}) == ["m2", "m3", "m4"]
    assert await around(window={"before": 0, "after": 3}) == ["m4", "m5", "m6", "m7"]
    assert await around(window={"before": 1, "after": 2}) == ["m3", "m4", "m5", "m6"]
    # A window side left out is 0 (Mastra passes undefined, the storage default).
    assert await around(window={"before": 2}) == ["m2", "m3", "m4"]
    assert await around(window={"after": 1}) == ["m4", "m5"]
    # messageRange omitted: 1 on each side.
    assert await around(size=None) == ["m3", "m4", "m5"]
    errors = await api.errors(
        RECALL, threadId=thread_id, vectorSearchString="zebra", threadConfig=semantic(size=-1)
    )
    assert errors[0]["message"] == "semanticRecall.messageRange must be >= 0."


async def test_scope_thread_and_resource(api: Api) -> None:
    thread_a, alice = await new_thread(api)
    thread_b, _ = await new_thread(api, alice)
    thread_c, bob = await new_thread(api)
    needle = "the zebra migration crosses the river"
    a = await save_texts(api, thread_a, ["hello there", needle, "see you tomorrow"], start=0)
    b = await save_texts(api, thread_b, ["good morning", needle, "thanks a lot"], start=10)
    c = await save_texts(api, thread_c, ["hi", needle, "bye"], start=20)
    query = "zebra migration river"

    # Thread scope: that thread's vectors only.
    assert ids(await search(api, thread_a, query, top_k=10, threshold=0.5)) == [a[1]]
    assert ids(await search(api, thread_b, query, top_k=10, threshold=0.5, resource_id=alice)) == [b[1]]
    # Resource scope: every thread of the resource, interleaved by createdAt, and no other resource's.
    wide = await search(api, thread_a, query, top_k=10, threshold=0.5, scope="RESOURCE", resource_id=alice)
    assert ids(wide) == [a[1], b[1]]
    assert [m["threadId"] for m in wide["messages"]] == [thread_a, thread_b]
    assert {m["resourceId"] for m in wide["messages"]} == {alice}
    assert ids(await search(api, thread_c, query, top_k=10, scope="RESOURCE", resource_id=bob)) == c
    # Even with a topK covering everything, only alice's six messages can match.
    every = await search(api, thread_b, query, top_k=100, scope="RESOURCE", resource_id=alice, threshold=-1)
    assert ids(every) == a + b
    # Context windows of a hit stay in the hit's own thread.
    windows = await search(
        api, thread_a, query, top_k=2, size=1, scope="RESOURCE", resource_id=alice, per_page=False
    )
    assert ids(windows) == a + b
    # An unknown thread with a resourceId, in resource scope: no error, hits only, total 0.
    unknown = await search(
        api, uid("t-missing"), query, top_k=1, scope="RESOURCE", resource_id=bob, per_page=5
    )
    assert (ids(unknown), unknown["total"]) == ([c[1]], 0)

    # Resource scope needs a resourceId, whether it is explicit or the default of `enabled: true`.
    for config in (semantic(scope="RESOURCE", top_k=2), {"semanticRecall": {"enabled": True}}):
        errors = await api.errors(RECALL, threadId=thread_a, vectorSearchString=query, threadConfig=config)
        assert errors[0]["message"] == RESOURCE_SCOPE_ERROR
        assert errors[0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert RESOURCE_SCOPE_ERROR.startswith("Memory error: Resource-scoped semantic recall is enabled but no")
    # Without a search string there is no search, so no error.
    assert ids(await recall(api, thread_a, threadConfig=semantic(scope="RESOURCE"))) == a


TRANSFER = "mutation($t: ID!, $r: String!) { updateThreadResourceId(threadId: $t, resourceId: $r) { id } }"


async def test_a_thread_given_to_another_resource_takes_its_vectors_along(
    api: Api, semantic_server: SemanticServer
) -> None:
    """After updateThreadResourceId, the thread's messages are found in the new resource's scope (and
    in its own thread scope), no longer in the old one's: their vectors moved collections, copied from
    the old one (the server never had to embed them again)."""
    thread_a, alice = await new_thread(api)
    stays, _ = await new_thread(api, alice)
    bobs, bob = await new_thread(api)
    needle = "the zebra migration crosses the river"
    moving = await save_texts(api, thread_a, ["hello there", needle], start=0)
    kept = await save_texts(api, stays, ["a zebra at the river", "good morning"], start=10)
    own = await save_texts(api, bobs, ["zebras cross rivers in the migration"], start=20)
    query = "zebra migration river"

    def wide(thread_id: str, resource_id: str) -> Any:
        return search(
            api, thread_id, query, top_k=10, scope="RESOURCE", resource_id=resource_id, threshold=-1
        )

    assert ids(await wide(stays, alice)) == moving + kept
    await api.execute(TRANSFER, t=thread_a, r=bob)
    assert ids(await wide(stays, alice)) == kept
    assert ids(await wide(bobs, bob)) == moving + own
    assert ids(await search(api, thread_a, query, top_k=10, threshold=-1)) == moving
    index = semantic_server.index()
    if index is not None:  # server mode: count the vectors in Chroma itself
        try:
            assert (await index.count(alice), await index.count(bob)) == (2, 3)
        finally:
            await index.aclose()
    assert "not copied, embedded instead" not in semantic_server.log_path.read_text()


CLONE = """mutation($t: ID!, $r: String) { cloneThread(input: {sourceThreadId: $t, resourceId: $r}) {
  thread { id } messageIdMap { sourceId cloneId } } }"""


async def test_a_clones_copies_are_found_with_their_sources_vectors(
    api: Api, semantic_server: SemanticServer
) -> None:
    """A clone's copies take their sources' vectors (read from the index, not embedded again: see
    tests/test_vector_pipeline.py), in every index mode (the server says when it could not copy them):
    the clone's own thread scope and the target resource's scope find them, and on a Chroma server each
    copy's vector is its source's."""
    source, alice = await new_thread(api)
    bobs, bob = await new_thread(api)
    saved = await save_texts(api, source, ["hello there", "the zebra migration crosses the river"], start=0)
    query = "zebra migration river"
    for target, owner, scope_thread in ((None, alice, source), (bob, bob, bobs)):
        got = (await api.execute(CLONE, t=source, r=target))["cloneThread"]
        clone_id = got["thread"]["id"]
        copies = {m["sourceId"]: m["cloneId"] for m in got["messageIdMap"]}
        assert ids(await search(api, clone_id, query, top_k=1, threshold=-1)) == [copies[saved[1]]]
        wide = await search(
            api, scope_thread, query, top_k=10, scope="RESOURCE", resource_id=owner, threshold=-1
        )
        assert set(ids(wide)) >= {copies[saved[0]], copies[saved[1]]}
        index = semantic_server.index()
        if index is not None:  # server mode: the vectors in Chroma itself
            try:
                stored = await index.vectors(owner, [*saved, *copies.values()])
                theirs = await index.vectors(alice, saved)
                for source_id, copy_id in copies.items():
                    assert [list(v) for v in stored[copy_id].values()] == [
                        list(v) for v in theirs[source_id].values()
                    ]
            finally:
                await index.aclose()
    assert "not copied, embedded instead" not in semantic_server.log_path.read_text()


# Mastra tests `if (semanticRecall)`: an options object with every field left out is on (topK 4, range 1,
# resource scope), as in JavaScript, where {} is truthy.
async def test_empty_options_turn_semantic_recall_on(api: Api) -> None:
    thread_id, resource_id = await new_thread(api)
    await save_texts(api, thread_id, ["one", "two", "the zebra", "four", "five"])
    errors = await api.errors(
        RECALL, threadId=thread_id, vectorSearchString="zebra", threadConfig=semantic(scope=None)
    )
    assert errors[0]["message"] == RESOURCE_SCOPE_ERROR
    result = await recall(
        api,
        thread_id,
        perPage=0,
        resourceId=resource_id,
        vectorSearchString="zebra",
        threadConfig=semantic(scope=None),
    )
    # The defaults are topK 4 and messageRange 1: the zebra and three others (score 0 ties), each with
    # its neighbours, which covers all five messages. With the search off, perPage 0 would return none.
    assert short(result) == ["m0", "m1", "m2", "m3", "m4"]


async def test_threshold_is_inclusive_on_one_minus_cosine_distance(api: Api) -> None:
    thread_id, _ = await new_thread(api)
    w = distinct_words(4)
    texts = [w[0], f"{w[0]} {w[1]} {w[2]} {w[3]}", f"{w[0]} {w[1]}", w[1], f"{w[1]} {w[2]} {w[3]}"]
    saved = await save_texts(api, thread_id, texts)
    scores = [score(w[0], text) for text in texts]
    # One-hot against a uniform 4-word vector: the scores are exact in float32 as well.
    assert scores[:2] == [1.0, 0.5] and scores[3:] == [0.0, 0.0]
    assert abs(scores[2] - 0.5**0.5) < 1e-12
    for threshold in (1.0, 0.9999, 0.71, 0.70, 0.5000001, 0.5, 0.4999999, 1e-9, 0.0, -1.0):
        expected = [saved[i] for i, s in enumerate(scores) if s >= threshold]
        got = ids(await search(api, thread_id, w[0], top_k=10, threshold=threshold))
        assert got == expected, f"threshold {threshold}"
    # The threshold filters what topK kept; it does not widen the search.
    assert ids(await search(api, thread_id, w[0], top_k=2, threshold=0.0)) == [saved[0], saved[2]]
    # Above 1 nothing can pass.
    assert ids(await search(api, thread_id, w[0], top_k=10, threshold=1.0000001)) == []


async def test_hits_bypass_filters_and_never_change_total(api: Api) -> None:
    thread_id, _ = await new_thread(api)
    texts = ["good morning", "the zebra escaped", "where to?", "to the zoo", "dinner at noon", "see you"]
    messages = [
        text_message(
            thread_id=thread_id, id=f"{thread_id}-m{i}", created_at=at(i), text=t, metadata={"n": i % 2}
        )
        for i, t in enumerate(texts)
    ]
    await api.execute(SAVE, m=messages)
    assert best("zebra", texts, 1) == {1}
    zebra = semantic(top_k=1, size=1)
    metadata = {"metadata": {"n": 7}}
    plain = await recall(api, thread_id, perPage=2, filter=metadata)
    assert (plain["messages"], plain["total"], plain["hasMore"]) == ([], 0, False)
    hit = await recall(
        api, thread_id, perPage=2, filter=metadata, threadConfig=zebra, vectorSearchString="zebra"
    )
    assert (short(hit), hit["total"], hit["hasMore"]) == (["m0", "m1", "m2"], 0, False)

    dates = {"dateRange": {"start": at(4), "end": at(5)}}
    plain = await recall(api, thread_id, perPage=5, filter=dates)
    assert (short(plain), plain["total"]) == (["m4", "m5"], 2)
    hit = await recall(
        api, thread_id, perPage=5, filter=dates, threadConfig=zebra, vectorSearchString="zebra"
    )
    assert (short(hit), hit["total"]) == (["m0", "m1", "m2", "m4", "m5"], 2)

    plain = await recall(api, thread_id, perPage=2, page=1)
    hit = await recall(api, thread_id, perPage=2, page=1, threadConfig=zebra, vectorSearchString="zebra")
    assert (short(plain), plain["total"]) == (["m2", "m3"], 6)
    # Hits do not depend on the page, and the total is the page query's alone.
    assert (short(hit), hit["total"], hit["page"], hit["perPage"]) == (["m0", "m1", "m2", "m3"], 6, 1, 2)


async def test_has_more_flips_when_hits_and_page_cover_the_thread(api: Api) -> None:
    thread_id, _ = await new_thread(api)
    texts = ["talk about zebra", "sure", "what else", "nothing"]
    assert best("zebra", texts, 1) == {0}
    await save_texts(api, thread_id, texts)
    plain = await recall(api, thread_id, perPage=2)
    assert (short(plain), plain["total"], plain["hasMore"]) == (["m2", "m3"], 4, True)
    covered = await search(api, thread_id, "zebra", top_k=1, size=1, per_page=2)
    assert (short(covered), covered["total"], covered["hasMore"]) == (["m0", "m1", "m2", "m3"], 4, False)
    partial = await search(api, thread_id, "zebra", top_k=1, size=0, per_page=2)
    assert (short(partial), partial["total"], partial["hasMore"]) == (["m0", "m2", "m3"], 4, True)


async def test_no_history_with_a_search_returns_hits_only(api: Api) -> None:
    thread_id, resource_id = await new_thread(api)
    other, _ = await new_thread(api, resource_id)
    mine = await save_texts(api, thread_id, ["alpha", "the zebra", "beta", "gamma", "delta"])
    theirs = await save_texts(api, other, ["a zebra here too"], start=10)
    expected = [mine[1], theirs[0]]
    assert best("zebra", ["alpha", "the zebra", "beta", "gamma", "delta", "a zebra here too"], 2) == {1, 5}
    options = {"top_k": 2, "scope": "RESOURCE", "threshold": 0.3}
    zero = await search(api, thread_id, "zebra", per_page=0, resource_id=resource_id, **options)
    assert (ids(zero), zero["total"], zero["perPage"], zero["hasMore"]) == (expected, 0, 0, False)
    config = {"lastMessages": False, **semantic(size=0, **options)}
    off = await recall(
        api, thread_id, resourceId=resource_id, threadConfig=config, vectorSearchString="zebra"
    )
    assert (ids(off), off["total"], off["perPage"], off["hasMore"]) == (expected, 0, 0, False)
    # History off and no search: nothing at all.
    assert ids(await recall(api, thread_id, threadConfig={"lastMessages": False})) == []
    # perPage false: every row of the thread plus the hits.
    every = await search(api, thread_id, "zebra", per_page=False, resource_id=resource_id, **options)
    assert (ids(every), every["total"], every["perPage"]) == ([*mine, *theirs], 5, False)


async def test_resaved_message_replaces_its_vectors(api: Api, semantic_server: SemanticServer) -> None:
    thread_id, resource_id = await new_thread(api)
    w = distinct_words(6)  # apple, cherry, kiwi, grape, banana, split: all orthogonal
    apple, cherry, kiwi, grape, banana, split = w
    texts = [f"{apple} {cherry}", f"{apple} {kiwi} {grape}", f"{banana} {split} {kiwi}", f"{split} {grape}"]
    m, o, o2, tool = await save_texts(api, thread_id, texts)
    assert ids(await search(api, thread_id, apple, top_k=1)) == [m]

    resave = text_message(thread_id=thread_id, id=m, text=banana, created_at=at(0))
    for _ in range(3):  # the same message saved again and again keeps one vector
        await api.execute(SAVE, m=[resave])
    # Its new text finds it, once: a duplicate "banana" vector would take the second topK slot from o2.
    assert ids(await search(api, thread_id, banana, top_k=2)) == [m, o2]
    assert ids(await search(api, thread_id, banana, top_k=1, threshold=0.99)) == [m]
    # Its old text no longer matches it (the old vector would score 1.0; the best left is o, 0.41).
    assert score(f"{apple} {cherry}", texts[1]) < 0.5
    assert ids(await search(api, thread_id, f"{apple} {cherry}", top_k=4, threshold=0.5)) == []
    assert ids(await search(api, thread_id, apple, top_k=1)) == [o]

    # Re-saved without text, a message loses its vectors.
    tool_only = text_message(
        thread_id=thread_id,
        id=tool,
        created_at=at(3),
        role="assistant",
        parts=[
            {
                "type": "tool-invocation",
                "toolInvocation": {"state": "call", "toolCallId": "c1", "toolName": split, "args": {}},
            }
        ],
    )
    await api.execute(SAVE, m=[tool_only])
    assert ids(await search(api, thread_id, f"{split} {grape}", top_k=10, threshold=-1)) == [m, o, o2]

    index = semantic_server.index()
    if index is not None:  # server mode: count the vectors in Chroma itself
        try:
            assert await index.count(resource_id) == 3
        finally:
            await index.aclose()


async def test_usage_tokens_are_reported(api: Api) -> None:
    thread_id, _ = await new_thread(api)
    await save_texts(api, thread_id, ["the zebra"])
    query = "Where did the zebra, 2 lions and the giraffe go?"
    assert len(REF.tokens(query)) == 10
    first = await search(api, thread_id, query)
    assert first["usage"] == {"tokens": 10}
    # The query cache answers the same text again with the same usage.
    assert (await search(api, thread_id, query))["usage"] == {"tokens": 10}
    # No search, no usage: no vectorSearchString, or semantic recall off.
    assert (await recall(api, thread_id, threadConfig=semantic()))["usage"] is None
    off = await recall(
        api,
        thread_id,
        perPage=0,
        vectorSearchString=query,
        threadConfig={"semanticRecall": {"enabled": False}},
    )
    assert (off["usage"], off["messages"]) == (None, [])


async def test_text_less_and_system_messages_get_no_vector(api: Api) -> None:
    thread_id, _ = await new_thread(api)
    zebra = "zebra"
    tool_part = {
        "type": "tool-invocation",
        "toolInvocation": {
            "state": "result",
            "toolCallId": "c1",
            "toolName": zebra,
            "args": {"q": zebra},
            "result": zebra,
        },
    }

    def message(n: int, role: str, parts: list[dict[str, Any]], text: str | None = None) -> dict[str, Any]:
        out = text_message(
            thread_id=thread_id, id=f"{thread_id}-m{n}", created_at=at(n), role=role, parts=parts
        )
        if text is not None:
            out["content"]["content"] = text
        return out

    await api.execute(
        SAVE,
        m=[
            message(0, "user", [{"type": "text", "text": "apple kiwi"}]),
            message(1, "assistant", [tool_part]),  # tool-only
            message(2, "assistant", [{"type": "step-start"}]),  # step-start only
            message(3, "system", [{"type": "text", "text": zebra}]),  # system rows are never embedded
            message(4, "user", [{"type": "text", "text": "   "}]),  # blank text
            message(5, "assistant", [{"type": "step-start"}, {"type": "text", "text": "mango"}]),
            message(6, "assistant", [tool_part], text="a zebra in content.content"),  # content wins
            message(7, "user", [{"type": "text", "text": "lemon"}, {"type": "text", "text": "grape"}]),
        ],
    )
    assert score(zebra, "a zebra in content.content") > 0.3
    assert all(score(zebra, t) < 0.3 for t in ("apple kiwi", "mango", "lemon grape"))
    # threshold -1 keeps every vector: exactly the messages with text.
    assert short(await search(api, thread_id, zebra, top_k=20, threshold=-1)) == ["m0", "m5", "m6", "m7"]
    # A vector for the system row (or a tool part) would bring its neighbours along.
    assert short(await search(api, thread_id, zebra, top_k=20, threshold=0.3, size=1)) == ["m5", "m6", "m7"]
    # An empty text would have been embedded as hash-64's no-token vector, which "?!" matches fully.
    assert short(await search(api, thread_id, "?!", top_k=20, threshold=0.99)) == []


async def test_include_defaults_to_two_when_a_search_runs(api: Api) -> None:
    thread_id, _ = await new_thread(api)
    await save_texts(api, thread_id, [f"message {n}" for n in range(9)])
    include = [{"id": f"{thread_id}-m4"}]
    nothing = semantic(threshold=1.5)  # the search runs, no hit can pass
    assert short(await recall(api, thread_id, perPage=0, include=include)) == ["m4"]
    with_search = await recall(
        api, thread_id, perPage=0, include=include, threadConfig=nothing, vectorSearchString="zebra"
    )
    assert short(with_search) == ["m2", "m3", "m4", "m5", "m6"]
    assert with_search["usage"] == {"tokens": 1}
    explicit = [{"id": f"{thread_id}-m4", "withPreviousMessages": 0}]
    assert short(
        await recall(
            api, thread_id, perPage=0, include=explicit, threadConfig=nothing, vectorSearchString="x"
        )
    ) == ["m4", "m5", "m6"]
    # Semantic recall configured but no search string: no search, default 0.
    assert short(await recall(api, thread_id, perPage=0, include=include, threadConfig=nothing)) == ["m4"]


# ------------------------------------------------------------------------------------------ warm-up
def test_the_model_and_the_index_are_ready_before_the_first_request(tmp_path: Path) -> None:
    """The first semantic recall after a start loaded the model and started the embedded Chroma
    (1.4 s, the next ones 25 ms). The server warms both up at start, and /readyz waits for that."""
    env = {"RECALLQL_EMBEDDING_MODEL_DIR": str(MODEL_DIR)}
    with running_server(tmp_path / "data", env) as srv:
        # No GraphQL request yet: the Chroma child runs, the model loaded (the log says so).
        ready = httpx.get(f"{srv.url}/readyz", timeout=10)
        assert (ready.status_code, ready.json()["semantic"]) == (200, "ok")
        assert chroma_child(srv.proc.pid)
        assert "semantic recall warmed up in" in srv.log_path.read_text()


def test_readiness_waits_for_the_warm_up_however_it_ends(tmp_path: Path) -> None:
    """An embeddings endpoint that never answers: the warm-up (which asks it the model's dimension)
    keeps the process unready, then gives up within its bound; the process is ready, says so, logs it."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        env = {
            **http_embedder_env(f"http://127.0.0.1:{silent.getsockname()[1]}/v1"),
            "RECALLQL_EMBEDDINGS_TIMEOUT": "30",
        }
        server = ServerProcess(tmp_path / "data", env)
        try:
            server.wait_ready(probe="/healthz")
            ready = httpx.get(f"{server.url}/readyz", timeout=10)
            assert (ready.status_code, ready.json()["ready"], ready.json()["semantic"]) == (
                503,
                False,
                "warming",
            )
            server.wait_ready(timeout=30)
            ready = httpx.get(f"{server.url}/readyz", timeout=10)
            assert (ready.status_code, ready.json()["semantic"]) == (200, "failed")
            assert "semantic recall not warmed up at start" in server.log_path.read_text()
        finally:
            server.stop()


async def test_readiness_follows_the_embedder_after_the_warm_up(tmp_path: Path) -> None:
    """A "failed" said how the warm-up ended and never changed: an embedder that came back later, or
    went away after a good start, left /readyz wrong for the life of the process. Now a search that
    the embedder does not answer says "failed", one it answers says "ok", and the probe asks again in
    the background, so a process no search reaches also sees the embedder come back."""
    port = free_port()
    env = {**http_embedder_env(f"http://127.0.0.1:{port}/v1"), "RECALLQL_EMBEDDINGS_TIMEOUT": "2"}
    server = ServerProcess(tmp_path / "data", env)

    def semantic_state() -> str:
        ready = httpx.get(f"{server.url}/readyz", timeout=10)
        assert ready.status_code == 200, ready.text  # the embedder never decides readiness
        return str(ready.json()["semantic"])

    def eventually(state: str) -> None:
        deadline = time.monotonic() + 20
        while (seen := semantic_state()) != state:
            assert time.monotonic() < deadline, f"/readyz said {seen!r}, not {state!r}"
            time.sleep(0.2)

    try:
        server.wait_ready(timeout=60)  # the warm-up ended: nothing listens on the embedder's port
        assert "semantic recall not warmed up at start" in server.log_path.read_text()
        api = Api(server.url)
        thread_id, _ = await new_thread(api)
        with embed_server_process(port):
            eventually("ok")  # no search ran: the probe's recheck found the embedder
            await save_texts(api, thread_id, FILLER)
            found = await recall(
                api, thread_id, perPage=0, threadConfig=semantic(), vectorSearchString="zebra"
            )
            assert found["messages"]
        errors = await api.errors(
            RECALL, threadId=thread_id, threadConfig=semantic(), vectorSearchString="lisbon"
        )
        assert errors[0]["extensions"]["code"] == "SERVICE_UNAVAILABLE"
        assert semantic_state() == "failed"  # the search found it gone; rechecks are 30 s apart
        with embed_server_process(port):
            found = await recall(
                api, thread_id, perPage=0, threadConfig=semantic(), vectorSearchString="lisbon"
            )
            assert found["messages"]
            assert semantic_state() == "ok"
    finally:
        server.stop()


class _SwitchableEmbedder(http.server.BaseHTTPRequestHandler):
    """An OpenAI-style endpoint whose answer the test chooses: the reference's 64-dimensional vectors,
    an HTTP status, or vectors of another size."""

    answer: int | str = "ok"

    def do_POST(self) -> None:
        texts = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["input"]
        if isinstance(self.answer, int):
            self.send_response(self.answer)
            self.end_headers()
            return
        size = DIMENSION if self.answer == "ok" else 32
        data = [{"index": i, "embedding": REF.embed(text)[:size]} for i, text in enumerate(texts)]
        body = json.dumps({"data": data}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


async def test_a_failed_search_says_how_the_embedder_failed(tmp_path: Path) -> None:
    """Every embedder failure read "the embedder cannot be reached", sending an operator to the network
    when the endpoint had answered: refusing the key, or with vectors of another model."""
    _SwitchableEmbedder.answer = "ok"  # the server's warm-up asks it the model's dimension
    endpoint = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SwitchableEmbedder)
    threading.Thread(target=endpoint.serve_forever, daemon=True).start()
    env = http_embedder_env(f"http://127.0.0.1:{endpoint.server_port}/v1")
    try:
        with running_server(tmp_path / "data", env) as server:
            api = Api(server.url)
            thread_id, _ = await new_thread(api)
            await save_texts(api, thread_id, FILLER[:2])

            async def failure(query: str) -> str:
                errors = await api.errors(
                    RECALL, threadId=thread_id, threadConfig=semantic(), vectorSearchString=query
                )
                assert [e["extensions"]["code"] for e in errors] == ["SERVICE_UNAVAILABLE"], errors
                assert errors[0]["extensions"]["service"] == "embedder"
                return str(errors[0]["message"])

            _SwitchableEmbedder.answer = 401
            assert (
                await failure("budget") == "Semantic search is unavailable: the embedder answered HTTP 401."
            )
            _SwitchableEmbedder.answer = "short"
            assert await failure("zebra") == (
                "Semantic search is unavailable: the embedder's answer could not be used."
            )
            assert "returned a 32-dimensional vector, expected 64" in server.log_path.read_text()
            endpoint.shutdown()
            endpoint.server_close()
            assert (
                await failure("lisbon") == "Semantic search is unavailable: the embedder cannot be reached."
            )
    finally:
        endpoint.shutdown()
        endpoint.server_close()
