"""What a credential restricted to some resources could learn or keep beyond its grant: a legacy
connection given a second token, and the ranking of a thread-scoped semantic search."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import websockets

from tests.support import ServerProcess, embed_server_process, running_server, text_message, uid
from tests.test_auth import SECRET, bearer, gql, hs256
from web.auth import key_entry, new_key

ALICE, BOB, ORPHAN = uid("alice"), uid("bob"), uid("orphan")
KEYS = {"alice": new_key(), "bob": new_key(), "admin": new_key()}

CREATE = "mutation($i: CreateThreadInput!) { createThread(input: $i) { id } }"
SAVE = "mutation($m: [MessageInput!]!) { saveMessages(messages: $m) { messages { id } } }"
EVENTS = (
    "subscription($t: ID!) { messageSaved(threadId: $t) { kind messageId "
    "message { id resourceId content { parts { ... on TextPart { text } } } } } }"
)


@pytest.fixture(scope="module")
def embed_url() -> Iterator[str]:
    with embed_server_process() as url:
        yield url


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, embed_url: str) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("review-auth")
    env = {
        "RECALLQL_AUTH": "required",
        "RECALLQL_API_KEYS": json.dumps(
            [
                key_entry("alice", KEYS["alice"], resources=[ALICE]),
                key_entry("bob", KEYS["bob"], resources=[BOB]),
                key_entry("ops", KEYS["admin"], admin=True),
            ]
        ),
        "RECALLQL_JWT_SECRET": SECRET,
        "RECALLQL_JWT_RESOURCE_CLAIM": "resources",
        "RECALLQL_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'review.db'}",
        "RECALLQL_EMBEDDINGS_URL": embed_url,
        "RECALLQL_EMBEDDINGS_MODEL": "hash-64",
    }
    with running_server(tmp / "data", env) as srv:
        yield srv


# ------------------------------------------------------------------------------------------------ 1
async def test_a_legacy_reinit_does_not_keep_an_expired_tokens_subscriptions_alive(
    server: ServerProcess,
) -> None:
    """graphql-ws (legacy): connection_init with alice's JWT (exp in 3 s), messageSaved on alice's thread,
    then a second connection_init with bob's API key (no exp). The key cancelled the JWT's timer: after
    the JWT expired the connection stayed open and delivered alice's messages to a bob connection."""
    url = server.url
    thread = uid("t")
    assert "errors" not in (await gql(url, CREATE, KEYS["alice"], i={"id": thread, "resourceId": ALICE}))[1]
    expires = int(time.time()) + 3
    token = hs256({"sub": "u", "resources": ALICE, "exp": expires})
    ws_url = url.replace("http://", "ws://", 1) + "/graphql"
    async with websockets.connect(ws_url, subprotocols=["graphql-ws"]) as ws:
        await ws.send(json.dumps({"type": "connection_init", "payload": bearer(token)}))
        assert json.loads(await asyncio.wait_for(ws.recv(), 5))["type"] == "connection_ack"
        start = {"query": EVENTS, "variables": {"t": thread}}
        await ws.send(json.dumps({"id": "1", "type": "start", "payload": start}))
        await asyncio.sleep(0.5)
        await ws.send(json.dumps({"type": "connection_init", "payload": bearer(KEYS["bob"])}))
        assert json.loads(await asyncio.wait_for(ws.recv(), 5))["type"] == "connection_ack"
        await asyncio.sleep(max(0.0, expires - time.time()) + 1.5)  # alice's token is now expired
        secret = uid("alice-secret")
        await gql(url, SAVE, KEYS["alice"], m=[text_message(thread_id=thread, id=uid("m"), text=secret)])
        received: list[Any] = []
        closed = None
        try:
            while True:
                frame = json.loads(await asyncio.wait_for(ws.recv(), 3))
                if frame.get("type") == "data":
                    received.append(frame)
        except TimeoutError:
            pass
        except websockets.ConnectionClosed as exc:
            closed = exc.rcvd.code if exc.rcvd else None
        leaked = [f for f in received if secret in json.dumps(f)]
        assert not leaked, (
            f"expired token's subscription still delivers alice's data to a bob connection: {leaked}"
        )
        assert closed == 4403


# ------------------------------------------------------------------------------------------------ 2
async def test_a_thread_scoped_search_ranks_only_the_callers_own_messages(server: ServerProcess) -> None:
    """alice's thread also holds a message of another resource (saved by an admin). Alice's thread-scoped
    search asked for topK hits across every resource with messages in the thread, then dropped the other
    resource's hits: they still used up topK, so the answer told whether the foreign message was closer
    to the query than alice's own."""
    url, admin = server.url, KEYS["admin"]
    thread = uid("t")
    assert "errors" not in (await gql(url, CREATE, KEYS["alice"], i={"id": thread, "resourceId": ALICE}))[1]
    mine, foreign = uid("m"), uid("o")
    await gql(url, SAVE, KEYS["alice"], m=[text_message(thread_id=thread, id=mine, text="apple kiwi")])
    _, saved, _ = await gql(
        url, SAVE, admin, m=[text_message(thread_id=thread, id=foreign, text="zebra", resource_id=ORPHAN)]
    )
    assert "errors" not in saved, saved
    recall = """query($t: ID!, $q: String!, $k: Int!) {
      recall(threadId: $t, perPage: 0, vectorSearchString: $q,
      threadConfig: {semanticRecall: {options: {topK: $k, scope: THREAD, messageRange: {size: 0}}}})
      { messages { id } } }"""

    async def hits(q: str, k: int = 1) -> list[str]:
        _, body, _ = await gql(url, recall, KEYS["alice"], t=thread, q=q, k=k)
        assert "errors" not in body, body
        return [m["id"] for m in body["data"]["recall"]["messages"]]

    results = {q: await hits(q) for q in ("apple lemon", "apple zebra", "apple tiger")}
    # Expected: the foreign message is out of alice's search, so every query finds alice's message.
    assert results == {q: [mine] for q in results}, results


# ------------------------------------------------------------------------------------------------ 3
async def test_a_limited_clone_copies_the_newest_messages_the_caller_may_see(server: ServerProcess) -> None:
    """cloneThread's messageLimit took the newest messages of the thread, then dropped those of other
    resources: whether alice's clone of one message came back empty told whether a foreign message was
    newer than hers. The limit now applies to the messages she may see."""
    url, admin = server.url, KEYS["admin"]
    thread = uid("t")
    assert "errors" not in (await gql(url, CREATE, KEYS["alice"], i={"id": thread, "resourceId": ALICE}))[1]
    mine, foreign = uid("m"), uid("o")
    own = text_message(thread_id=thread, id=mine, text="mine", created_at="2026-01-01T00:00:00.000Z")
    await gql(url, SAVE, KEYS["alice"], m=[own])
    later = text_message(
        thread_id=thread,
        id=foreign,
        text="not hers",
        created_at="2026-01-02T00:00:00.000Z",
        resource_id=ORPHAN,
    )
    assert "errors" not in (await gql(url, SAVE, admin, m=[later]))[1]
    clone = """mutation($i: CloneThreadInput!) { cloneThread(input: $i) {
      thread { resourceId } messageIdMap { sourceId } } }"""
    _, body, _ = await gql(
        url, clone, KEYS["alice"], i={"sourceThreadId": thread, "options": {"messageLimit": 1}}
    )
    assert "errors" not in body, body
    assert body["data"]["cloneThread"]["messageIdMap"] == [{"sourceId": mine}], body
    # An unrestricted caller's limit still counts every message of the thread.
    _, body, _ = await gql(url, clone, admin, i={"sourceThreadId": thread, "options": {"messageLimit": 1}})
    assert body["data"]["cloneThread"]["messageIdMap"] == [{"sourceId": foreign}], body
