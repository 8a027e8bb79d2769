"""Abuse limits (issue 7, part 2): each is a RECALLQL_* setting, refuses with a clear error and its code,
and is checked here over real HTTP (and WebSocket) against a `recallql serve` process with small limits.

    depth / tokens / aliases      QUERY_TOO_COMPLEX, limit maxQueryDepth | maxQueryTokens | maxAliases
    document length               QUERY_TOO_COMPLEX, limit maxQueryChars (before anything lexes it)
    perPage (recall, threads)     BAD_USER_INPUT, limit maxPerPage
    perPage: false over many rows BAD_USER_INPUT, limit maxAllRows (counted, never read; recall, threads)
    rows of all a request's fields BAD_USER_INPUT, limit maxRequestRows (aliases repeat a field)
    _entities representations     BAD_USER_INPUT, limit maxEntities
    request body                  413 PAYLOAD_TOO_LARGE; 408 REQUEST_TIMEOUT when it arrives too slowly
    include items                 BAD_USER_INPUT, limit maxIncludeItems
    vectorSearchString length     BAD_USER_INPUT, limit maxSearchChars
    operations per WebSocket      TOO_MANY_SUBSCRIPTIONS, limit maxSubscriptionsPerConnection
    introspection off             GRAPHQL_VALIDATION_FAILED (also through the compiled read path)
    internal errors               INTERNAL_SERVER_ERROR, masked, logged under the requestId the client sees
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import orjson
import pytest
import websockets
from hypothesis import given, settings
from hypothesis import strategies as st

from models.records import MessageQuery, MessageRecord
from models.repository import Repository
from resolvers.auth import OPEN
from resolvers.config import BUILTIN_DEFAULTS
from resolvers.context import Services
from resolvers.errors import NUL_MESSAGE, scalar_fault, value_fault
from schema import build as schema_build
from tests.support import (
    Api,
    ServerProcess,
    app_client,
    at,
    database,
    embed_server_process,
    running_server,
    text_message,
    uid,
)
from web import compiled
from web.compiled import MAX_JSON_DEPTH, _body_fault, _fault, decode_json

LIMITS = {
    "RECALLQL_MAX_QUERY_DEPTH": "3",
    "RECALLQL_MAX_QUERY_TOKENS": "300",
    "RECALLQL_MAX_QUERY_CHARS": "10000",
    "RECALLQL_MAX_ALIASES": "3",
    "RECALLQL_MAX_PER_PAGE": "50",
    "RECALLQL_MAX_ALL_ROWS": "30",
    "RECALLQL_MAX_REQUEST_ROWS": "60",
    "RECALLQL_MAX_INCLUDE_ITEMS": "3",
    "RECALLQL_MAX_SEARCH_CHARS": "100",
    "RECALLQL_MAX_BODY_BYTES": "20000",
    "RECALLQL_BODY_TIMEOUT": "1",
    "RECALLQL_HEADER_TIMEOUT": "1",
    "RECALLQL_MAX_SUBSCRIPTIONS_PER_CONNECTION": "2",
    "RECALLQL_INTROSPECTION": "false",
    "RECALLQL_MAX_ENTITIES": "5",
    "RECALLQL_MAX_THREAD_RECALLS": "3",
}
CREATE = "mutation($i: CreateThreadInput!) { createThread(input: $i) { id } }"
SAVE = "mutation($m: [MessageInput!]!) { saveMessages(messages: $m) { messages { id } } }"
RECALL = """query($t: ID!, $r: String, $p: PerPage, $i: [IncludeInput!], $f: RecallFilter,
                  $c: MemoryConfigInput, $s: String) {
  recall(threadId: $t, resourceId: $r, perPage: $p, include: $i, filter: $f, threadConfig: $c,
         vectorSearchString: $s) { total perPage messages { id } } }"""
THREADS = "query($r: String!, $p: PerPage) { threads(resourceId: $r, perPage: $p) { total threads { id } } }"
MESSAGE_EVENTS = "subscription($t: ID!) { messageSaved(threadId: $t) { kind messageId } }"


@pytest.fixture(scope="module")
async def limited(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("limits")
    # An embedder (embed_server.py's hash-64), so that a vector search runs where a recall asks for one.
    with embed_server_process() as embeddings:
        env = {"RECALLQL_EMBEDDINGS_URL": embeddings, "RECALLQL_EMBEDDINGS_MODEL": "hash-64"}
        async with database("sqlite", tmp) as url:
            with running_server(tmp / "data", {"RECALLQL_DATABASE_URL": url, **LIMITS, **env}) as server:
                yield server


@pytest.fixture
def api(limited: ServerProcess) -> Api:
    return Api(limited.url)


async def post(url: str, query: str, **variables: Any) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(f"{url}/graphql", json={"query": query, "variables": variables})
    assert response.status_code == 200, response.text
    return response.json()


async def only_error(url: str, query: str, **variables: Any) -> dict[str, Any]:
    body = await post(url, query, **variables)
    assert body.get("errors") and len(body["errors"]) == 1, body
    return body["errors"][0]


async def thread_with(api: Api, count: int, *, resource: str | None = None) -> tuple[str, str]:
    thread, resource = uid("t"), resource or uid("r")
    await api.execute(CREATE, i={"id": thread, "resourceId": resource})
    messages = [
        text_message(thread_id=thread, id=f"{thread}-m{n}", created_at=at(n), metadata={"even": n % 2 == 0})
        for n in range(count)
    ]
    for start in range(0, count, 50):
        await api.execute(SAVE, m=messages[start : start + 50])
    return thread, resource


# ---------------------------------------------------------------------------------------------- query shape
async def test_depth_limit(limited: ServerProcess) -> None:
    # Depth counts from 0 at the root field: id is at depth 3, the limit.
    ok = await post(limited.url, '{ recall(threadId: "t") { messages { thread { id } } } }')
    assert "errors" not in ok, ok
    deep = '{ recall(threadId: "t") { messages { content { parts { ... on TextPart { text } } } } } }'
    error = await only_error(limited.url, deep)
    assert error["extensions"]["code"] == "QUERY_TOO_COMPLEX"
    assert error["extensions"]["limit"] == "maxQueryDepth"
    assert "exceeds maximum operation depth of 3" in error["message"]
    assert error["extensions"]["requestId"]


async def test_length_limit(limited: ServerProcess) -> None:
    """A document over RECALLQL_MAX_QUERY_CHARS is refused before anything lexes it: the token limit
    stops the parser, but one comment is one token however long (8 MB of it took over a second)."""
    long_comment = "# " + "x" * 10_000 + "\n"
    for query in (
        long_comment + "{ __typename }",
        long_comment + '{ thread(id: "t") { id } }',  # a query the compiled read path would answer
        long_comment + 'subscription { threadUpdated(resourceId: "r") { kind } }',
    ):
        error = await only_error(limited.url, query)
        assert error["extensions"]["code"] == "QUERY_TOO_COMPLEX", error
        assert (error["extensions"]["limit"], error["extensions"]["max"]) == ("maxQueryChars", 10000)
        assert error["extensions"]["requestId"], error
    for protocol, subscribe in (("graphql-transport-ws", "subscribe"), ("graphql-ws", "start")):
        async with ws_session(limited.url, protocol) as ws:
            payload = {"query": long_comment + 'subscription { threadUpdated(resourceId: "r") { kind } }'}
            await ws.send(json.dumps({"id": "1", "type": subscribe, "payload": payload}))
            refused = await next_message(ws)
        error = refused["payload"][0] if isinstance(refused["payload"], list) else refused["payload"]
        assert error["extensions"]["limit"] == "maxQueryChars", refused
    ok = await post(limited.url, "# " + "x" * 9_000 + "\n{ __typename }")
    assert ok == {"data": {"__typename": "Query"}}


async def test_token_limit(limited: ServerProcess) -> None:
    error = await only_error(limited.url, "{ " + " ".join("__typename" for _ in range(301)) + " }")
    assert error["extensions"]["code"] == "QUERY_TOO_COMPLEX"
    assert error["extensions"]["limit"] == "maxQueryTokens"
    assert "more than 300 tokens" in error["message"]


async def test_alias_limit(limited: ServerProcess) -> None:
    ok = await post(limited.url, "{ a: __typename b: __typename c: __typename }")
    assert ok == {"data": {"a": "Query", "b": "Query", "c": "Query"}}
    error = await only_error(limited.url, "{ a: __typename b: __typename c: __typename d: __typename }")
    assert error["extensions"]["code"] == "QUERY_TOO_COMPLEX"
    assert error["extensions"]["limit"] == "maxAliases"
    assert error["message"] == "4 aliases found. Allowed: 3"


def doubling_fragments(on: str, last: str, count: int = 25) -> str:
    """F0 spreads F1 twice, F1 spreads F2 twice, ...: 2^count spreads of the last fragment, `last`."""
    chain = [f"fragment F{n} on {on} {{ ...F{n + 1} ...F{n + 1} }}" for n in range(count)]
    return " ".join([*chain, f"fragment F{count} on {on} {{ {last} }}"])


async def test_fragments_count_as_expanded_but_are_walked_once(api: Api, limited: ServerProcess) -> None:
    """The limits apply to the document as its spreads expand, and each fragment is walked once: the
    depth and alias rules used to walk a fragment again at every spread, and twenty fragments like these
    (826 characters) held the event loop for 8.5 s; these 25 would take minutes."""
    thread, _ = await thread_with(api, 1)
    # A thread field, so the compiled read path collects the fields (the spec's CollectFields: a
    # fragment spread twice in one selection set adds its fields once).
    query = "query($t: ID!) { thread(id: $t) { ...F0 } } " + doubling_fragments("Thread", "id")
    assert await post(limited.url, query, t=thread) == {"data": {"thread": {"id": thread}}}
    aliases = await only_error(limited.url, "{ ...F0 } " + doubling_fragments("Query", "a: __typename"))
    assert aliases["message"] == f"{2**25} aliases found. Allowed: 3"
    assert (aliases["extensions"]["code"], aliases["extensions"]["limit"]) == (
        "QUERY_TOO_COMPLEX",
        "maxAliases",
    )
    # Depth 4 at the bottom of every expansion: one error for the operation, not one per spread.
    deep = 'recall(threadId: "t") { messages { content { parts { ... on TextPart { text } } } } }'
    depth = await only_error(limited.url, "query Deep { ...F0 } " + doubling_fragments("Query", deep))
    assert depth["message"] == "'Deep' exceeds maximum operation depth of 3"
    assert (depth["extensions"]["code"], depth["extensions"]["limit"]) == (
        "QUERY_TOO_COMPLEX",
        "maxQueryDepth",
    )


# ---------------------------------------------------------------------------------------------- page sizes
async def test_per_page_limit(api: Api, limited: ServerProcess) -> None:
    thread, resource = await thread_with(api, 3)
    assert (await api.execute(RECALL, t=thread, p=50))["recall"]["perPage"] == 50
    for query, variables in ((RECALL, {"t": thread, "p": 51}), (THREADS, {"r": resource, "p": 51})):
        error = await only_error(limited.url, query, **variables)
        assert error["message"] == "perPage may be at most 50, got 51."
        assert error["extensions"]["code"] == "BAD_USER_INPUT"
        assert (error["extensions"]["limit"], error["extensions"]["max"]) == ("maxPerPage", 50)
    assert (await api.execute(THREADS, r=resource, p=50))["threads"]["total"] == 1
    # Without perPage the page size is lastMessages: the same limit, named after what set it.
    error = await only_error(limited.url, RECALL, t=thread, c={"lastMessages": 51})
    assert error["message"] == "lastMessages may be at most 50, got 51."
    assert error["extensions"]["limit"] == "maxPerPage"


async def test_all_rows_limit(api: Api, limited: ServerProcess) -> None:
    small, _ = await thread_with(api, 30)
    assert (await api.execute(RECALL, t=small, p=False))["recall"]["total"] == 30
    big, resource = await thread_with(api, 31)
    error = await only_error(limited.url, RECALL, t=big, p=False)
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert error["extensions"]["limit"] == "maxAllRows"
    assert (error["extensions"]["max"], error["extensions"]["total"]) == (30, 31)
    assert "at most 30 messages; this read matches 31" in error["message"]
    # The rows that match count, not the thread's: a filter bringing them under the limit is fine.
    half = await api.execute(RECALL, t=big, p=False, f={"metadata": {"even": True}})
    assert half["recall"]["total"] == 16 and len(half["recall"]["messages"]) == 16
    # Ownership is checked first: another resource learns nothing about the thread's size.
    forbidden = await only_error(limited.url, RECALL, t=big, r="someone-else", p=False)
    assert forbidden["extensions"]["code"] == "FORBIDDEN"
    assert (await api.execute(RECALL, t=big, r=resource, p=50))["recall"]["total"] == 31


async def test_include_and_semantic_windows_are_bounded_by_all_rows(api: Api, limited: ServerProcess) -> None:
    """A window's neighbour counts are an upper bound: a huge one on a small thread is fine, but the
    windows of one recall read at most maxAllRows rows (a window of 2^31 neighbours read its whole
    thread, once per include item and per semantic hit, past every other limit)."""
    everything = 2**31 - 1
    small, _ = await thread_with(api, 25)
    whole = [{"id": f"{small}-m12", "withPreviousMessages": everything, "withNextMessages": everything}]
    assert (await api.execute(RECALL, t=small, p=0, i=whole))["recall"]["messages"] == [
        {"id": f"{small}-m{n}"} for n in range(25)
    ]
    big, _ = await thread_with(api, 40)
    whole = [{"id": f"{big}-m20", "withPreviousMessages": everything, "withNextMessages": everything}]
    for query, variables in (
        (RECALL, {"t": big, "p": 0, "i": whole}),
        (
            RECALL,
            {
                "t": big,
                "p": 0,
                "i": [{**whole[0], "withNextMessages": 0}, {"id": f"{big}-m39", "withPreviousMessages": 10}],
            },
        ),
    ):
        error = await only_error(limited.url, query, **variables)
        assert error["extensions"]["code"] == "BAD_USER_INPUT"
        assert (error["extensions"]["limit"], error["extensions"]["max"]) == ("maxAllRows", 30)
        assert "windows may return at most 30 messages" in error["message"]
    # Overlapping windows count each message once: 3 x 11 rows read, 13 messages returned.
    overlapping = [{"id": f"{big}-m{n}", "withPreviousMessages": 10} for n in (10, 11, 12)]
    found = (await api.execute(RECALL, t=big, p=0, i=overlapping))["recall"]["messages"]
    assert found == [{"id": f"{big}-m{n}"} for n in range(0, 13)]
    # The same target asked for several times is read once: 3 x 21 rows would be over the limit, the
    # 21 distinct ones are not.
    repeated = [{"id": f"{big}-m20", "withPreviousMessages": 10, "withNextMessages": 10}] * 3
    found = (await api.execute(RECALL, t=big, p=0, i=repeated))["recall"]["messages"]
    assert found == [{"id": f"{big}-m{n}"} for n in range(10, 31)]

    # Semantic hits are windows too, and more hits than the limit could never be returned.
    def search(top_k: int, size: int) -> dict[str, Any]:
        return {
            "semanticRecall": {"options": {"scope": "THREAD", "topK": top_k, "messageRange": {"size": size}}}
        }

    for top_k, size, message in (
        (31, 0, "topK may be at most 30, got 31"),
        (2, everything, "windows may return"),
    ):
        error = await only_error(limited.url, RECALL, t=big, p=0, s="hello", c=search(top_k, size))
        assert error["extensions"]["limit"] == "maxAllRows" and message in error["message"], error
    assert (
        len((await api.execute(RECALL, t=big, p=0, s="hello", c=search(30, 0)))["recall"]["messages"]) == 30
    )


async def test_a_request_reads_at_most_max_request_rows(api: Api, limited: ServerProcess) -> None:
    """Aliases repeat a field: thirty aliases of one perPage: false recall of 10,000 large messages
    answered 1.2 GB. A request's fields share one budget of rows (here 60), counted before anything
    is read where they can be, and each field's read sees what the fields before it took."""
    thread, resource = await thread_with(api, 30)
    everything = (
        "query($t: ID!) { "
        + " ".join(
            f"{alias}: recall(threadId: $t, perPage: false) {{ total messages {{ id }} }}" for alias in "abc"
        )
        + " }"
    )
    body = await post(limited.url, everything, t=thread)
    assert body["data"] is None and len(body["errors"]) == 1, body  # recall is non-null: c nulls data
    error = body["errors"][0]
    assert error["path"] == ["c"], error
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert (error["extensions"]["limit"], error["extensions"]["max"]) == ("maxRequestRows", 60)
    assert "this recall would read 30 with 0 left" in error["message"], error
    # Rows that exist count, not page sizes: a page of 50 on a thread of 30 takes 30, so these fit.
    two = """query($t: ID!) { a: recall(threadId: $t, perPage: false) { messages { id } }
                            b: recall(threadId: $t, perPage: 50) { messages { id } } }"""
    data = (await post(limited.url, two, t=thread))["data"]
    assert len(data["a"]["messages"]) == len(data["b"]["messages"]) == 30
    # Every field that reads messages or threads draws on the same budget (30 + 1 + 29 ids).
    mixed = """query($t: ID!, $r: String!, $i: [ID!]!) {
      a: recall(threadId: $t, perPage: false) { total }
      threads(resourceId: $r, perPage: false) { total }
      messages(ids: $i) { id }
      b: recall(threadId: $t, perPage: 29) { total } }"""
    ids = [f"{thread}-m{n}" for n in range(29)]
    body = await post(limited.url, mixed, t=thread, r=resource, i=ids)
    assert body["data"] is None and [e.get("path") for e in body["errors"]] == [["b"]], body
    assert "would read 29 with 0 left" in body["errors"][0]["message"], body
    # Federation's _entities too (a gateway's batch of references).
    entities = """query($t: ID!, $reps: [_Any!]!) {
      a: recall(threadId: $t, perPage: false) { total }
      b: recall(threadId: $t, perPage: false) { total }
      _entities(representations: $reps) { ... on Thread { id } } }"""
    body = await post(limited.url, entities, t=thread, reps=[{"__typename": "Thread", "id": thread}])
    # (_entities resolves at once, before the recalls' turns: it is b that finds too little left.)
    assert [e["extensions"]["limit"] for e in body["errors"]] == ["maxRequestRows"], body
    # The next request has its own budget.
    assert (await post(limited.url, two, t=thread))["data"]["a"]["messages"][0] == {"id": f"{thread}-m0"}


async def test_thread_recalls_are_bounded_per_request(limited: ServerProcess, api: Api) -> None:
    """Thread.recall is a recall of its own for each thread listed: a page of a thousand threads could
    ask for a thousand, each one at least a statement, with no rows to count (perPage: 0 reads none).
    One request resolves at most RECALLQL_MAX_THREAD_RECALLS (here 3); the others are null with the
    error, and the listing answers. Their rows draw on the request's row budget as any recall's do."""
    resource = uid("r")
    for _ in range(5):
        await thread_with(api, 1, resource=resource)
    listing = """query($r: String!, $p: PerPage) { threads(resourceId: $r, perPage: $p) {
      total threads { id recall(perPage: 0) { total } } } }"""
    body = await post(limited.url, listing, r=resource, p=10)
    assert body["data"] is not None, body
    threads = body["data"]["threads"]["threads"]
    answered = [t for t in threads if t["recall"] is not None]
    assert len(threads) == 5 and [t["recall"] for t in answered] == [{"total": 0}] * 3, body
    refused = {tuple(e["path"]) for e in body["errors"]}
    assert refused == {
        ("threads", "threads", n, "recall") for n, t in enumerate(threads) if t["recall"] is None
    }
    for error in body["errors"]:
        assert error["extensions"]["code"] == "BAD_USER_INPUT", error
        assert (error["extensions"]["limit"], error["extensions"]["max"]) == ("maxThreadRecalls", 3), error
    # Aliases count too; the next request has its own count.
    three = """query($r: String!) { threads(resourceId: $r, perPage: 1) { threads {
      a: recall(perPage: 0) { total } b: recall(perPage: 0) { total } c: recall(perPage: 0) { total } } } }"""
    assert "errors" not in await post(limited.url, three, r=resource)

    # Rows: the listing takes 2 (threads), the first thread's recall 30, and the second finds 28 left.
    big = uid("r")
    for _ in range(2):
        await thread_with(api, 30, resource=big)
    body = await post(limited.url, listing.replace("perPage: 0", "perPage: false"), r=big, p=10)
    totals = [t["recall"] and t["recall"]["total"] for t in body["data"]["threads"]["threads"]]
    assert sorted(totals, key=str) == [30, None], body
    [error] = body["errors"]
    assert (error["extensions"]["limit"], error["extensions"]["max"]) == ("maxRequestRows", 60), error
    assert "this recall would read 30 with 28 left" in error["message"], error

    # Numbered pages are read in one batch (PageBatch), and take their rows in the listing's order: the
    # listing 3, the first two pages 25 each, and the third finds 7 left. Nothing is read for it.
    three = uid("r")
    for _ in range(3):
        await thread_with(api, 30, resource=three)
    body = await post(limited.url, listing.replace("perPage: 0", "perPage: 25"), r=three, p=10)
    totals = [t["recall"] and t["recall"]["total"] for t in body["data"]["threads"]["threads"]]
    assert totals == [30, 30, None], body
    [error] = body["errors"]
    assert error["path"] == ["threads", "threads", 2, "recall"], error
    assert (error["extensions"]["limit"], error["extensions"]["max"]) == ("maxRequestRows", 60), error
    assert "this recall would read 25 with 7 left" in error["message"], error


async def test_a_clone_copies_at_most_max_all_rows(api: Api, limited: ServerProcess) -> None:
    """A clone copies its messages in one transaction: without messageLimit a thread of any size was
    read and copied whole. Over the limit nothing is read or written."""
    clone = "mutation($i: CloneThreadInput!) { cloneThread(input: $i) { clonedMessages { id } } }"
    small, _ = await thread_with(api, 30)
    assert len((await api.execute(clone, i={"sourceThreadId": small}))["cloneThread"]["clonedMessages"]) == 30
    big, resource = await thread_with(api, 31)
    before = (await api.execute(THREADS, r=resource, p=50))["threads"]["total"]
    error = await only_error(limited.url, clone, i={"sourceThreadId": big, "newThreadId": uid("c")})
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert (error["extensions"]["limit"], error["extensions"]["max"], error["extensions"]["total"]) == (
        "maxAllRows",
        30,
        31,
    )
    assert (await api.execute(THREADS, r=resource, p=50))["threads"]["total"] == before
    limited_clone = {"sourceThreadId": big, "options": {"messageLimit": 30}}
    assert len((await api.execute(clone, i=limited_clone))["cloneThread"]["clonedMessages"]) == 30


async def test_all_threads_limit(api: Api, limited: ServerProcess) -> None:
    resource = uid("r")
    for _ in range(30):
        await api.execute(CREATE, i={"id": uid("t"), "resourceId": resource})
    assert (await api.execute(THREADS, r=resource, p=False))["threads"]["total"] == 30
    await api.execute(CREATE, i={"id": uid("t"), "resourceId": resource})
    error = await only_error(limited.url, THREADS, r=resource, p=False)
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert error["extensions"]["limit"] == "maxAllRows"
    assert (error["extensions"]["max"], error["extensions"]["total"]) == (30, 31)
    assert "at most 30 threads; this resource has 31" in error["message"]
    page = (await api.execute(THREADS, r=resource, p=50))["threads"]
    assert page["total"] == 31 and len(page["threads"]) == 31


async def test_list_threads_counts_but_does_not_read_over_max_rows(repository: Repository) -> None:
    services = Services.build(repository, memory_defaults=dict(BUILTIN_DEFAULTS))
    resource = uid("r")
    for _ in range(4):
        await services.threads.create(resource_id=resource, thread_id=uid("t"), principal=OPEN)
    args = {"offset": 0, "order_field": "createdAt", "descending": True}
    assert await repository.list_threads(resource, limit=None, max_rows=3, **args) == ([], 4)
    rows, total = await repository.list_threads(resource, limit=None, max_rows=4, **args)
    assert (len(rows), total) == (4, 4)
    rows, total = await repository.list_threads(resource, limit=2, max_rows=1, **args)
    assert (len(rows), total) == (2, 4)


ENTITIES = """query($reps: [_Any!]!) { _entities(representations: $reps) { ... on Thread { id } } }"""


async def test_entities_limit(api: Api, limited: ServerProcess) -> None:
    thread, _ = await thread_with(api, 0)
    five = [{"__typename": "Thread", "id": thread}] * 5
    body = await post(limited.url, ENTITIES, reps=five)
    assert body["data"]["_entities"] == [{"id": thread}] * 5, body
    error = await only_error(limited.url, ENTITIES, reps=[*five, {"__typename": "Thread", "id": "x"}])
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert (error["extensions"]["limit"], error["extensions"]["max"]) == ("maxEntities", 5)
    assert error["message"] == "_entities may resolve at most 5 representations per call, got 6."


async def test_read_page_counts_but_does_not_read_over_max_rows(repository: Repository) -> None:
    """The guard sits in the one round trip that counts and reads (both engines)."""
    services = Services.build(repository, memory_defaults=dict(BUILTIN_DEFAULTS))
    thread = uid("t")
    await services.threads.create(resource_id="r", thread_id=thread, principal=OPEN)
    from resolvers.messages import MessageInput

    await services.messages.save(
        [MessageInput(thread_id=thread, role="user", content={"format": 2, "parts": []}) for _ in range(12)],
        principal=OPEN,
    )
    query = MessageQuery(thread_id=thread)
    over = await repository.read_page(query, descending=False, limit=None, offset=0, max_rows=11)
    assert (over.total, over.rows) == (12, [])
    within = await repository.read_page(query, descending=False, limit=None, offset=0, max_rows=12)
    assert within.total == 12 and len(within.rows) == 12
    # A numeric page is bounded by the rows it holds, not by its size (what a request's budget needs).
    page = await repository.read_page(query, descending=False, limit=5, offset=0, max_rows=4)
    assert (page.total, page.rows) == (12, [])
    page = await repository.read_page(query, descending=False, limit=5, offset=0, max_rows=5)
    assert page.total == 12 and len(page.rows) == 5
    last = await repository.read_page(query, descending=False, limit=5, offset=10, max_rows=2)
    assert last.total == 12 and len(last.rows) == 2


# ---------------------------------------------------------------------------------------------- inputs
async def test_body_limit(limited: ServerProcess) -> None:
    query = '{ recall(threadId: "' + "x" * 21000 + '") { total } }'
    async with httpx.AsyncClient(timeout=30) as client:
        declared = await client.post(f"{limited.url}/graphql", json={"query": query})

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted while it streams
            body = json.dumps({"query": query}).encode()
            for start in range(0, len(body), 4096):
                yield body[start : start + 4096]

        streamed = await client.post(
            f"{limited.url}/graphql", content=chunks(), headers={"content-type": "application/json"}
        )
        fits = await client.post(f"{limited.url}/graphql", json={"query": "{ __typename }"})
    for response in (declared, streamed):
        assert response.status_code == 413
        error = response.json()["errors"][0]
        assert error["extensions"]["code"] == "PAYLOAD_TOO_LARGE"
        assert error["message"] == "Request body exceeds 20000 bytes."
    assert fits.status_code == 200 and fits.json() == {"data": {"__typename": "Query"}}


async def test_a_body_that_arrives_too_slowly_is_refused(limited: ServerProcess) -> None:
    """A client that sent its headers and then a byte now and then held its connection (and a buffer of
    up to the body limit) for as long as it liked. Here the body must arrive within 1 s."""
    host, port = limited.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    body = json.dumps({"query": "{ __typename }"}).encode()
    head = (
        "POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    writer.write(head.encode() + body[:5])
    await writer.drain()
    # A trickle would never get an answer. The head and the body may arrive in separate reads.
    status = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
    assert status.startswith(b"HTTP/1.1 408"), status
    length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", status)
    assert length, status
    payload = await asyncio.wait_for(reader.readexactly(int(length[1])), 30)
    writer.close()
    error = json.loads(payload)["errors"][0]
    assert error["extensions"]["code"] == "REQUEST_TIMEOUT"
    assert error["message"] == "The request body did not arrive within 1 seconds."
    # A whole body is answered, however long the request then takes.
    assert (await post(limited.url, "{ __typename }")) == {"data": {"__typename": "Query"}}


async def _connected(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = url.removeprefix("http://").split(":")
    return await asyncio.open_connection(host, int(port))


async def _response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """The status line and headers, and the body, of the next response on a connection."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
    length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
    assert length, head
    return head, await asyncio.wait_for(reader.readexactly(int(length[1])), 30)


async def _timed_out(reader: asyncio.StreamReader) -> None:
    head, body = await _response(reader)
    assert head.startswith(b"HTTP/1.1 408"), head
    assert re.search(rb"(?i)\r\nconnection: *close", head), head
    assert json.loads(body) == {
        "errors": [
            {
                "message": "The request headers did not arrive within 1 seconds.",
                "extensions": {"code": "REQUEST_TIMEOUT"},
            }
        ]
    }
    assert await asyncio.wait_for(reader.read(), 30) == b""  # and the connection closes


async def test_headers_that_arrive_too_slowly_are_refused(limited: ServerProcess) -> None:
    """A client that sent a request line and then a header now and then (slowloris) held its
    connection for good: uvicorn bounds a body (RECALLQL_BODY_TIMEOUT) and the idle time between
    requests, not headers. Here they must arrive within 1 s of the connection."""
    reader, writer = await _connected(limited.url)
    writer.write(b"POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    for _ in range(3):  # a header every half second keeps nothing open
        await asyncio.sleep(0.5)
        if writer.is_closing() or reader.at_eof():
            break
        writer.write(b"X-Slow: 1\r\n")
        with contextlib.suppress(ConnectionError):
            await writer.drain()
    await _timed_out(reader)
    writer.close()


async def test_a_connection_that_sends_nothing_is_closed(limited: ServerProcess) -> None:
    reader, writer = await _connected(limited.url)
    assert await asyncio.wait_for(reader.read(), 30) == b""  # closed without an answer
    writer.close()


async def test_the_header_deadline_holds_for_each_request_of_a_kept_alive_connection(
    limited: ServerProcess,
) -> None:
    """The deadline counts from a request's first byte: a connection kept alive answers requests
    sent whole at any time, and refuses a later request whose headers stall."""
    reader, writer = await _connected(limited.url)
    body = json.dumps({"query": "{ __typename }"}).encode()
    request = (
        "POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    for pause in (0.0, 0.7, 0.7):  # 1.4 s in all: past a deadline counted from the connection
        await asyncio.sleep(pause)
        writer.write(request)
        head, answer = await _response(reader)
        assert head.startswith(b"HTTP/1.1 200"), head
        assert json.loads(answer) == {"data": {"__typename": "Query"}}
    writer.write(b"POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    await _timed_out(reader)
    writer.close()


async def test_the_header_deadline_ends_with_the_headers(limited: ServerProcess) -> None:
    """A WebSocket lives on after its upgrade's headers, past the deadline."""
    async with ws_session(limited.url, "graphql-transport-ws") as ws:
        await asyncio.sleep(1.5)
        await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": "{ __typename }"}}))
        assert await next_message(ws) == {
            "id": "1",
            "type": "next",
            "payload": {"data": {"__typename": "Query"}},
        }


async def test_include_items_limit(api: Api, limited: ServerProcess) -> None:
    thread, _ = await thread_with(api, 4)
    three = [{"id": f"{thread}-m{n}"} for n in range(3)]
    assert len((await api.execute(RECALL, t=thread, p=0, i=three))["recall"]["messages"]) == 3
    error = await only_error(limited.url, RECALL, t=thread, p=0, i=[*three, {"id": f"{thread}-m3"}])
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert error["extensions"]["limit"] == "maxIncludeItems"
    assert error["message"] == "include accepts at most 3 items, got 4."


async def test_message_lookup_limit(api: Api, limited: ServerProcess) -> None:
    # Unbounded, a lookup of repeated ids of large messages answered a gigabyte from a small request.
    # (ids of one byte each: the test server takes bodies of 20 kB at most)
    lookup = "query($ids: [ID!]!) { messages(ids: $ids) { id } }"
    found = await api.execute(lookup, ids=["x"] * 60)
    assert found["messages"] == [None] * 60
    # Ids count against the request's rows (60 here) as they are asked for, found or not, repeated or not.
    error = await only_error(limited.url, lookup, ids=["x"] * 61)
    assert (error["extensions"]["limit"], error["extensions"]["max"]) == ("maxRequestRows", 60)
    error = await only_error(limited.url, lookup, ids=["x"] * 1001)
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert error["extensions"]["limit"] == "maxSaveBatch"
    assert error["message"] == "messages accepts at most 1000 messages per call, got 1001."


async def test_search_text_limit(api: Api, limited: ServerProcess) -> None:
    thread, _ = await thread_with(api, 3)
    search = {"semanticRecall": {"options": {"scope": "THREAD", "topK": 1, "messageRange": {"size": 0}}}}
    ok = await post(limited.url, RECALL, t=thread, p=0, c=search, s="x" * 100)
    assert "errors" not in ok and len(ok["data"]["recall"]["messages"]) == 1, ok
    # Checked before the search reads anything (an unknown thread, which would be NOT_FOUND, says so).
    for thread_id in (thread, uid("t")):
        error = await only_error(limited.url, RECALL, t=thread_id, p=0, c=search, s="x" * 101)
        assert error["extensions"]["code"] == "BAD_USER_INPUT"
        assert (error["extensions"]["limit"], error["extensions"]["max"]) == ("maxSearchChars", 100)
        assert error["message"] == "vectorSearchString may be at most 100 characters, got 101."


async def test_search_text_that_no_search_embeds_is_not_limited(api: Api, limited: ServerProcess) -> None:
    """Without a vector search the text has no effect (Mastra ignores it), so its length is not checked:
    semantic recall off (the server's default), and the lastMessages: false early return."""
    thread, _ = await thread_with(api, 3)
    long = "x" * 101
    plain = await post(limited.url, RECALL, t=thread, p=5, s=long)
    assert "errors" not in plain and len(plain["data"]["recall"]["messages"]) == 3, plain
    empty = await post(limited.url, RECALL, t=uid("t"), c={"lastMessages": False}, s=long)
    assert "errors" not in empty, empty
    assert empty["data"]["recall"] == {"total": 0, "perPage": 0, "messages": []}


# ---------------------------------------------------------------------------------------------- websocket
@contextlib.asynccontextmanager
async def ws_session(url: str, protocol: str) -> AsyncIterator[Any]:
    ws_url = url.replace("http://", "ws://", 1) + "/graphql"
    async with websockets.connect(ws_url, subprotocols=[protocol]) as ws:  # type: ignore[list-item]
        await ws.send(json.dumps({"type": "connection_init", "payload": {}}))
        while (ack := json.loads(await asyncio.wait_for(ws.recv(), 10)))["type"] == "ka":
            pass
        assert ack["type"] == "connection_ack", ack
        yield ws


async def next_message(ws: Any, timeout: float = 5.0) -> dict[str, Any]:
    while True:
        message = json.loads(await asyncio.wait_for(ws.recv(), timeout))
        if message["type"] not in ("ka", "ping", "pong"):
            return message


async def nothing_for(ws: Any, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        message = await next_message(ws, seconds)
        raise AssertionError(f"unexpected message {message}")


@pytest.mark.parametrize(
    ("protocol", "subscribe", "stop"),
    [("graphql-transport-ws", "subscribe", "complete"), ("graphql-ws", "start", "stop")],
)
async def test_subscriptions_per_connection(
    limited: ServerProcess, protocol: str, subscribe: str, stop: str
) -> None:
    def start(n: int) -> str:
        payload = {"query": MESSAGE_EVENTS, "variables": {"t": uid("t")}}
        return json.dumps({"id": str(n), "type": subscribe, "payload": payload})

    async with ws_session(limited.url, protocol) as ws:
        await ws.send(start(1))
        await ws.send(start(2))
        await nothing_for(ws, 0.5)  # both accepted: they wait for events
        await ws.send(start(3))
        refused = await next_message(ws)
        assert (refused["type"], refused["id"]) == ("error", "3"), refused
        error = refused["payload"][0] if isinstance(refused["payload"], list) else refused["payload"]
        assert error["extensions"] == {
            "code": "TOO_MANY_SUBSCRIPTIONS",
            "limit": "maxSubscriptionsPerConnection",
            "max": 2,
        }
        assert error["message"] == "At most 2 subscriptions may run at once on one connection."
        # Ending one frees its slot; the connection itself stays usable.
        await ws.send(json.dumps({"id": "1", "type": stop}))
        if protocol == "graphql-ws":  # the legacy protocol confirms a stop
            assert await next_message(ws) == {"type": "complete", "id": "1"}
        await asyncio.sleep(0.3)
        await ws.send(start(4))
        await nothing_for(ws, 0.5)


@pytest.mark.parametrize(
    "frame",
    [
        "[1, 2]",
        '"x"',
        json.dumps({"id": "1", "type": "subscribe", "payload": None}),
        json.dumps({"id": "1", "type": "subscribe", "payload": "s"}),
        json.dumps({"id": 1, "type": "subscribe", "payload": {"query": MESSAGE_EVENTS}}),
        json.dumps({"id": "1", "type": "subscribe", "payload": {"query": MESSAGE_EVENTS, "variables": [1]}}),
        # Falsy values of the wrong type: an INTERNAL_SERVER_ERROR with a traceback in the log.
        *(
            json.dumps({"id": "1", "type": "subscribe", "payload": {"query": MESSAGE_EVENTS, name: value}})
            for name, value in (("operationName", 0), ("operationName", False), ("operationName", []))
        ),
        *(
            json.dumps(
                {"id": "1", "type": "subscribe", "payload": {"query": MESSAGE_EVENTS, "variables": value}}
            )
            for value in ("", 0, [])
        ),
    ],
)
async def test_a_malformed_frame_closes_the_connection_with_4400(limited: ServerProcess, frame: str) -> None:
    # These crashed Strawberry's handler: the connection dropped without a close frame (1006).
    async with ws_session(limited.url, "graphql-transport-ws") as ws:
        await ws.send(frame)
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await next_message(ws)
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (4400, "Failed to parse message")


@pytest.mark.parametrize(
    ("protocol", "subscribe"), [("graphql-transport-ws", "subscribe"), ("graphql-ws", "start")]
)
async def test_a_query_that_does_not_parse_is_an_error_over_websocket(
    limited: ServerProcess, protocol: str, subscribe: str
) -> None:
    # It used to end in a bare `complete`, the syntax error only in the server's log.
    async with ws_session(limited.url, protocol) as ws:
        await ws.send(json.dumps({"id": "1", "type": subscribe, "payload": {"query": "subscription {"}}))
        refused = await next_message(ws)
        assert (refused["type"], refused["id"]) == ("error", "1"), refused
        error = refused["payload"][0] if isinstance(refused["payload"], list) else refused["payload"]
        assert error["extensions"] == {"code": "GRAPHQL_PARSE_FAILED"}
        assert error["message"].startswith("Syntax Error")
        if protocol == "graphql-ws":  # no close code there: a bad frame is its operation's error
            await ws.send("[1]")
            bad = await next_message(ws)
            assert bad["type"] == "error" and bad["payload"]["extensions"] == {"code": "BAD_REQUEST"}
        # The connection still serves a good subscription.
        payload = {"query": MESSAGE_EVENTS, "variables": {"t": uid("t")}}
        await ws.send(json.dumps({"id": "2", "type": subscribe, "payload": payload}))
        await nothing_for(ws, 0.5)


@pytest.mark.parametrize(
    ("protocol", "subscribe"), [("graphql-transport-ws", "subscribe"), ("graphql-ws", "start")]
)
async def test_an_unknown_operation_name_is_resolution_failure_over_websocket(
    limited: ServerProcess, protocol: str, subscribe: str
) -> None:
    # It was an internal error (Strawberry's CannotGetOperationTypeError, masked, with a traceback).
    document = 'subscription A { messageSaved(threadId: "x") { kind } }'
    async with ws_session(limited.url, protocol) as ws:
        payload = {"query": document, "operationName": "B"}
        await ws.send(json.dumps({"id": "1", "type": subscribe, "payload": payload}))
        refused = await next_message(ws)
        assert (refused["type"], refused["id"]) == ("error", "1"), refused
        error = refused["payload"][0] if isinstance(refused["payload"], list) else refused["payload"]
        assert error["extensions"]["code"] == "OPERATION_RESOLUTION_FAILURE", error
        assert error["message"] == 'Unknown operation named "B".'
        # The name it holds is served.
        payload = {"query": document, "operationName": "A"}
        await ws.send(json.dumps({"id": "2", "type": subscribe, "payload": payload}))
        await nothing_for(ws, 0.5)


THREAD_EVENTS = "subscription($r: String!) { threadUpdated(resourceId: $r) { kind threadId } }"


@pytest.mark.parametrize(
    ("query", "variables", "message"),
    [
        (MESSAGE_EVENTS, {"t": "a\ud800"}, "a lone surrogate cannot be stored"),
        (MESSAGE_EVENTS, {"t": "a\x00"}, "U+0000"),
        (MESSAGE_EVENTS, {"t": ""}, "threadId must be a non-empty string."),
        (THREAD_EVENTS, {"r": ""}, "resourceId must be a non-empty string."),
        (THREAD_EVENTS, {"r": "\udc00"}, "a lone surrogate cannot be stored"),
        ('subscription { messageSaved(threadId: "a\\u0000") { kind } }', {}, "U+0000"),
    ],
)
async def test_a_subscription_refuses_what_http_refuses(
    limited: ServerProcess, query: str, variables: dict[str, Any], message: str
) -> None:
    # These subscribed and waited for events that could never come: WebSocket frames are read with the
    # json module, which takes U+0000 and lone surrogates (the HTTP front refuses both).
    async with ws_session(limited.url, "graphql-transport-ws") as ws:
        payload = {"query": query, "variables": variables}
        await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": payload}))
        refused = await next_message(ws)
        assert refused["id"] == "1" and refused["type"] in ("error", "next"), refused
        errors = refused["payload"] if refused["type"] == "error" else refused["payload"]["errors"]
        assert [e["extensions"]["code"] for e in errors] == ["BAD_USER_INPUT"], errors
        assert message in errors[0]["message"], errors
        if refused["type"] == "next":  # a field's error, located as over HTTP (it had no path)
            field = "messageSaved" if "messageSaved" in query else "threadUpdated"
            assert errors[0]["path"] == [field] and errors[0]["locations"], errors


NAN_THREAD = "mutation($i: CreateThreadInput!) { createThread(input: $i) { id metadata } }"


def raw_request(query: str, raw_variables: str) -> str:
    """A request object with variables written as given: JSON has no NaN, so json.dumps cannot."""
    return '{"query": ' + json.dumps(query) + ', "variables": ' + raw_variables + "}"


async def post_raw(url: str, body: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(
            f"{url}/graphql", content=body, headers={"content-type": "application/json"}
        )
    (error,) = response.json()["errors"]
    return dict(error)


async def test_every_transport_refuses_numbers_json_cannot_carry(limited: ServerProcess, api: Api) -> None:
    """NaN and Infinity, which the json module reads (WebSocket frames; request bodies that only it
    takes), were stored as null, and the answer echoing them was not JSON."""
    resource = uid("r")
    for n, number in enumerate(("NaN", "Infinity", "-Infinity")):
        thread_input = '{"id": "' + f"{resource}-{n}" + '", "resourceId": "' + resource + '"'
        request = raw_request(NAN_THREAD, '{"i": ' + thread_input + ', "metadata": {"x": ' + number + "}}}")
        async with ws_session(limited.url, "graphql-transport-ws") as ws:
            await ws.send('{"id": "1", "type": "subscribe", "payload": ' + request + "}")
            refused = await next_message(ws)
        errors = refused["payload"] if refused["type"] == "error" else refused["payload"]["errors"]
        assert [e["extensions"]["code"] for e in errors] == ["BAD_USER_INPUT"], errors
        assert "finite" in errors[0]["message"]
        error = await post_raw(limited.url, request)
        assert error["extensions"]["code"] == "BAD_USER_INPUT" and "finite" in error["message"], error
    assert (await api.execute(THREADS, r=resource, p=10))["threads"]["total"] == 0
    # A lone surrogate in a request body is the same BAD_USER_INPUT as over WebSocket (it was a 400).
    error = await post_raw(limited.url, raw_request(RECALL, '{"t": "a\\ud800"}'))
    assert error["extensions"]["code"] == "BAD_USER_INPUT" and "lone surrogate" in error["message"], error


async def test_bad_text_anywhere_in_a_request_is_bad_input(limited: ServerProcess) -> None:
    """Not only in variables: a lone surrogate in operationName was echoed in an error that could not
    be encoded (a bare 500 over HTTP)."""
    for fields in ('"operationName": "\\ud800"', '"extensions": {"x": NaN}', '"operationName": "a\\ud800b"'):
        body = '{"query": "{ __typename }", ' + fields + "}"
        error = await post_raw(limited.url, body)
        assert error["extensions"]["code"] == "BAD_USER_INPUT", error
        for protocol, subscribe in (("graphql-transport-ws", "subscribe"), ("graphql-ws", "start")):
            async with ws_session(limited.url, protocol) as ws:
                await ws.send('{"id": "1", "type": "' + subscribe + '", "payload": ' + body + "}")
                refused = await next_message(ws)
            assert refused["type"] == "error", refused
            error = refused["payload"][0] if isinstance(refused["payload"], list) else refused["payload"]
            assert error["extensions"]["code"] == "BAD_USER_INPUT", refused


@pytest.mark.parametrize("protocol", ["graphql-transport-ws", "graphql-ws"])
async def test_a_websocket_query_over_the_token_limit_is_an_error(
    limited: ServerProcess, protocol: str
) -> None:
    """Refused under the token limit while parsing (a frame of a million tokens held the event loop),
    with the error HTTP gives; it was a bare `complete`, the whole query in the log."""
    subscribe = "subscribe" if protocol == "graphql-transport-ws" else "start"
    async with ws_session(limited.url, protocol) as ws:
        query = "subscription { " + "a " * 400 + "}"
        await ws.send(json.dumps({"id": "1", "type": subscribe, "payload": {"query": query}}))
        refused = await next_message(ws)
        assert (refused["type"], refused["id"]) == ("error", "1"), refused
        error = refused["payload"][0] if isinstance(refused["payload"], list) else refused["payload"]
        assert error["extensions"] == {"code": "QUERY_TOO_COMPLEX", "limit": "maxQueryTokens"}
        assert "more than 300 tokens" in error["message"]


async def test_a_websocket_frame_nested_too_deep_closes_with_4400(limited: ServerProcess) -> None:
    # The json module ran out of stack: the connection dropped without a close frame.
    async with ws_session(limited.url, "graphql-transport-ws") as ws:
        deep = "[" * 5_000 + "]" * 5_000  # within the frame limit, past orjson's 1,024 levels
        await ws.send(
            '{"id": "1", "type": "subscribe", "payload": ' + raw_request("{ __typename }", deep) + "}"
        )
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await next_message(ws)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4400


async def test_queries_and_mutations_over_legacy_graphql_ws_are_bad_requests(
    api: Api, limited: ServerProcess
) -> None:
    """Strawberry's graphql-ws (legacy) handler runs subscriptions only; anything else was an
    INTERNAL_SERVER_ERROR. The mutation is refused before it runs."""
    resource = uid("r")
    async with ws_session(limited.url, "graphql-ws") as ws:
        for n, (query, kind) in enumerate(
            (
                ("{ __typename }", "queries"),
                (f'mutation {{ createThread(input: {{resourceId: "{resource}"}}) {{ id }} }}', "mutations"),
            )
        ):
            await ws.send(json.dumps({"id": str(n), "type": "start", "payload": {"query": query}}))
            error = await next_message(ws)
            assert (error["type"], error["payload"]["extensions"]["code"]) == ("error", "BAD_REQUEST"), error
            assert f"send {kind} over HTTP or graphql-transport-ws" in error["payload"]["message"], error
    assert (await api.execute(THREADS, r=resource, p=10))["threads"]["total"] == 0


async def test_a_websocket_frame_is_bounded_like_a_body(limited: ServerProcess) -> None:
    # uvicorn's default took frames of up to 16 MiB, whatever RECALLQL_MAX_BODY_BYTES said (20,000 here).
    async with ws_session(limited.url, "graphql-transport-ws") as ws:
        padding = "#" + "x" * 20_000 + "\n"
        await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": padding + "{ a }"}}))
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await next_message(ws)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009, closed.value


async def test_a_float_literal_beyond_a_double_is_bad_input(limited: ServerProcess, api: Api) -> None:
    thread, _ = await thread_with(api, 1)
    config = "{semanticRecall: {options: {topK: 1, messageRange: {size: 0}, scope: THREAD, threshold: %s}}}"
    query = 'query { recall(threadId: "%s", vectorSearchString: "x", threadConfig: %s) { total } }'
    # The literal read as infinity and was taken as a threshold; as a variable it cannot be sent at all.
    error = await only_error(limited.url, query % (thread, config % "1e999"))
    assert error["extensions"]["code"] == "BAD_USER_INPUT" and "1e999" in error["message"], error
    ok = await post(limited.url, query % (thread, config % "1e300"))
    assert "errors" not in ok and ok["data"]["recall"]["total"] == 1, ok


# -------------------------------------------------------------------------------------------- introspection
INTROSPECTION_QUERIES = [
    "{ __schema { queryType { name } } }",
    '{ __type(name: "Query") { name } }',
    # Beside a root field the compiled read path serves: it must not answer this document either.
    '{ recall(threadId: "t") { total } __schema { queryType { name } } }',
    'query { thread(id: "t") { id } __type(name: "Thread") { fields { name } } }',
]


@pytest.mark.parametrize("query", INTROSPECTION_QUERIES)
async def test_introspection_can_be_disabled(limited: ServerProcess, query: str) -> None:
    body = await post(limited.url, query)
    assert body.get("data") is None, body
    error = body["errors"][0]
    assert error["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
    assert "introspection has been disabled" in error["message"]


async def test_typename_stays_and_reads_still_work_without_introspection(limited: ServerProcess) -> None:
    body = await post(limited.url, '{ __typename recall(threadId: "t") { __typename total } }')
    assert body == {"data": {"__typename": "Query", "recall": {"__typename": "RecallResult", "total": 0}}}


async def test_introspection_is_on_by_default(server: ServerProcess) -> None:
    body = await post(server.url, "{ __schema { queryType { name } } }")
    assert body == {"data": {"__schema": {"queryType": {"name": "Query"}}}}


# ------------------------------------------------------------------------------------------ request bodies
_JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet=st.sampled_from(["a", "\\", "u", "0", "\x00", '"', "[", "{", "é"]), max_size=12),
)


def _json_values(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(leaves.filter(_is_str), inner, max_size=3)
        ),
        max_leaves=40,
    )


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _nested(value: Any, depth: int) -> Any:
    for _ in range(depth):
        value = [value]
    return value


@settings(max_examples=400, deadline=None)
@given(value=_json_values(_JSON_LEAVES), depth=st.integers(min_value=0, max_value=70))
def test_a_body_is_screened_as_a_walk_of_its_values_would(value: Any, depth: int) -> None:
    """The front tells from a body's bytes what a walk of its decoded values would find (U+0000 in a
    string or key, nesting over 64 levels): the walk, in Python, took seconds for 8 MB of tiny
    values. Strings here mix backslashes, "u0000" and brackets, which the bytes must not be fooled by."""
    value = _nested(value, depth)
    walked = _fault(value, MAX_JSON_DEPTH)
    assert _body_fault(orjson.dumps(value), value) in _faults_of(value), walked
    assert (_body_fault(orjson.dumps(value), value) is None) == (walked is None)
    # What only the json module reads (lone surrogates, NaN, infinities) is screened through its encoder.
    assert (_body_fault(None, value) is None) == (walked is None)


@settings(max_examples=200, deadline=None)
@given(
    value=_json_values(
        st.one_of(_JSON_LEAVES, st.sampled_from(["\ud800", "x\udfff", math.nan, math.inf, -math.inf]))
    )
)
def test_what_only_the_json_module_reads_is_screened_too(value: Any) -> None:
    assert (_body_fault(None, value) is None) == (_fault(value, MAX_JSON_DEPTH) is None)
    assert _body_fault(None, value) in _faults_of(value)


def _faults_of(value: Any) -> set[str | None]:
    """Every fault a value holds (the walk reports whichever it meets first), or {None}."""
    found: set[str | None] = set()
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > MAX_JSON_DEPTH:
                found.add(_fault([[item]], 1))  # the walk's _DEEP marker
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
        elif (fault := scalar_fault(item)) is not None:
            found.add(fault)
    return found or {None}


async def test_variables_may_spell_u0000_and_http_bodies_are_not_walked(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a query text's \\u0000 is GraphQL's escape for U+0000: a message text quoting those six
    characters (source code, say) was refused as holding U+0000. And an HTTP body checked by the front
    is not walked again by the schema (StorableVariables), nor by the front itself, nor parsed twice."""
    walks: list[str] = []
    monkeypatch.setattr(
        schema_build, "value_fault", lambda value: walks.append("schema") or value_fault(value)
    )
    monkeypatch.setattr(compiled, "_fault", lambda *args: walks.append("front") or _fault(*args))
    # Nor is it parsed again by the view (most of a large body's time).
    monkeypatch.setattr(compiled, "decode_json", lambda data: walks.append("parse") or decode_json(data))
    quoted = 'printf("\\u0000");'
    async with app_client(services) as client:
        create = "mutation($i: CreateThreadInput!) { createThread(input: $i) { id title } }"
        body = (
            await client.post(
                "/graphql", json={"query": create, "variables": {"i": {"resourceId": "r", "title": quoted}}}
            )
        ).json()
        assert body["data"]["createThread"]["title"] == quoted, body
        assert walks == []
        nul = (
            await client.post(
                "/graphql", json={"query": create, "variables": {"i": {"resourceId": "r", "title": "a\x00"}}}
            )
        ).json()
        assert nul["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT", nul
        escaped = (await client.post("/graphql", json={"query": '{ thread(id: "\\u0000") { id } }'})).json()
        assert escaped["errors"][0]["message"] == NUL_MESSAGE, escaped
        # A GET's variables are one URL parameter the front does not decode: the schema walks them.
        got = await client.get(
            "/graphql",
            params={"query": "query($t: ID!) { thread(id: $t) { id } }", "variables": '{"t": "a\\u0000"}'},
        )
        assert got.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT", got.text
        assert "schema" in walks


# ------------------------------------------------------------------------------------------ internal errors
class _Broken:
    async def read_page(self, *_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("database password is hunter2")


@pytest.fixture
def error_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.WARNING, logger="recallql.errors"):
        yield caplog


async def test_internal_errors_are_masked_with_the_request_id(
    services: Services, error_log: pytest.LogCaptureFixture
) -> None:
    services.recall.repository = _Broken()  # type: ignore[assignment]
    async with app_client(services) as client:
        response = await client.post(
            "/graphql",
            json={"query": '{ recall(threadId: "t", resourceId: "r") { total } }'},
            headers={"X-Request-ID": "req-internal-1"},
        )
    assert response.status_code == 200
    error = response.json()["errors"][0]
    assert error["message"] == "Internal server error."
    assert error["extensions"] == {"code": "INTERNAL_SERVER_ERROR", "requestId": "req-internal-1"}
    assert "hunter2" not in response.text
    assert "hunter2" in error_log.text and "req-internal-1" in error_log.text


async def test_json_nested_too_deep_is_refused_on_every_transport(api: Api, limited: ServerProcess) -> None:
    """Content and metadata over MAX_JSON_DEPTH levels were refused in an HTTP body (and by the
    imports) but stored from a GraphQL literal or a WebSocket frame: 250 levels made every compiled
    read of them an HTTP 500 (the answer nests them deeper than orjson writes)."""
    thread, resource = uid("t"), uid("r")
    await api.execute(CREATE, i={"id": thread, "resourceId": resource})
    literal = "[" * MAX_JSON_DEPTH + "1" + "]" * MAX_JSON_DEPTH  # the content around it adds 4 levels
    save = (
        f'mutation {{ saveMessages(messages: [{{id: "{uid("m")}", threadId: "{thread}", role: "user", '
        f'content: {{format: 2, parts: [{{type: "data-x", data: {literal}}}]}}}}]) {{ messages {{ id }} }} }}'
    )
    [error] = await api.errors(save)
    assert error["extensions"]["code"] == "BAD_USER_INPUT", error
    assert (error["extensions"]["limit"], error["extensions"]["max"]) == ("maxJsonDepth", MAX_JSON_DEPTH)
    assert error["message"] == f"messages[0].content nests JSON deeper than {MAX_JSON_DEPTH} levels."
    metadata = (
        f'mutation {{ updateThread(input: {{id: "{thread}", metadata: {{deep: {literal}}}}}) {{ id }} }}'
    )
    [error] = await api.errors(metadata)
    assert error["message"] == f"metadata nests JSON deeper than {MAX_JSON_DEPTH} levels.", error
    shallow = "[" * (MAX_JSON_DEPTH - 4) + "1" + "]" * (MAX_JSON_DEPTH - 4)  # 64 levels with the content
    assert await api.execute(save.replace(literal, shallow))
    assert (await api.execute(RECALL, t=thread))["recall"]["total"] == 1  # only the shallow one stored
    # A WebSocket frame is held to a body's limit.
    for protocol, subscribe in (("graphql-transport-ws", "subscribe"), ("graphql-ws", "start")):
        async with ws_session(limited.url, protocol) as ws:
            variables = {"t": thread, "deep": _nested(1, MAX_JSON_DEPTH)}
            payload = {"query": MESSAGE_EVENTS, "variables": variables}
            await ws.send(json.dumps({"id": "1", "type": subscribe, "payload": payload}))
            refused = await next_message(ws)
            assert (refused["type"], refused["id"]) == ("error", "1"), refused
            error = refused["payload"][0] if isinstance(refused["payload"], list) else refused["payload"]
            assert error == {
                "message": f"The request nests JSON deeper than {MAX_JSON_DEPTH} levels.",
                "extensions": {"code": "BAD_REQUEST"},
            }


async def test_a_compiled_answer_orjson_cannot_write_is_answered_by_the_normal_path(
    services: Services,
) -> None:
    """A value stored deep before the write limit (254 levels): the compiled path's orjson.dumps
    raised on the answer, an HTTP 500; the normal path writes it."""
    await services.threads.create(resource_id="r1", thread_id="t1", principal=OPEN)
    content = {"format": 2, "parts": [{"type": "data-x", "data": _nested(1, 248)}]}
    record = MessageRecord("deep", "t1", "r1", "user", "v2", 1_000, content)
    await services.repository.import_messages([record], now=1_000)
    query = '{ recall(threadId: "t1") { messages { id content { parts { ... on DataPart { data } } } } } }'
    async with app_client(services) as client:
        compiled_answer = await client.post("/graphql", json={"query": query})
        normal = await client.post(
            "/graphql", json={"query": query.replace(") {", ") @include(if: true) {", 1)}
        )
    assert compiled_answer.status_code == normal.status_code == 200, compiled_answer.text
    assert compiled_answer.json() == normal.json()
    assert normal.json()["data"]["recall"]["messages"][0]["content"]["parts"][0]["data"] == _nested(1, 248)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Forbidden: Invalid token.", "Forbidden: Invalid token."),
        ("x" * 123, "x" * 123),
        ("x" * 124, "x" * 120 + "..."),
        ("é" * 70, "é" * 60 + "..."),  # 140 bytes: cut at a character's edge, not inside one
    ],
)
def test_a_close_reason_fits_its_frame(text: str, expected: str) -> None:
    from web.limits import close_reason

    assert close_reason(text) == expected
    assert len(close_reason(text).encode()) <= 123
