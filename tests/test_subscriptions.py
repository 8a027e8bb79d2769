"""Live updates: GraphQL subscriptions over graphql-transport-ws, in-process and through Redis."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import orjson
import pytest

from models.records import MIN_MS, MessageRecord, ThreadRecord
from resolvers import cursors
from resolvers.auth import OPEN
from resolvers.context import Services
from resolvers.errors import BadUserInput, ServiceUnavailable
from resolvers.events import (
    InProcessBroker,
    RedisBroker,
    message_channel,
    message_event,
    received_message_event,
    subscribed_event,
    thread_channel,
    thread_event,
)
from resolvers.messages import MessageService
from resolvers.threads import ThreadService
from tests.factories import msg
from tests.subscriptions import MESSAGE_EVENTS, RESUMED_MESSAGE_EVENTS, THREAD_EVENTS, subscribed
from tests.support import (
    Api,
    ServerProcess,
    at,
    database,
    eventually,
    require,
    running_server,
    text_message,
    uid,
)
from tests.tcp_proxy import TcpProxy

REDIS_URL = os.environ.get("RECALLQL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
CREATE = "mutation($i: CreateThreadInput!) { createThread(input: $i) { id } }"
SAVE = "mutation($m: [MessageInput!]!) { saveMessages(messages: $m) { messages { id } } }"
UPDATE = "mutation($m: [UpdateMessageInput!]!) { updateMessages(messages: $m) { id } }"
DELETE = "mutation($ids: [ID!]!) { deleteMessages(ids: $ids) { deleted } }"
SAVE_CURSORS = "mutation($m: [MessageInput!]!) { saveMessages(messages: $m) { messages { id cursor } } }"
PAGE_ASC = """query($t: ID!) {
  recall(threadId: $t, perPage: 1, orderBy: {field: CREATED_AT, direction: ASC}) { startCursor } }"""
PLACED = """query($t: ID!, $after: String, $before: String) {
  recall(threadId: $t, perPage: false, after: $after, before: $before) { total messages { id } } }"""


async def redis_available() -> bool:
    try:
        import redis.asyncio as redis

        client = redis.from_url(REDIS_URL)
        try:
            await asyncio.wait_for(client.ping(), 3)
        finally:
            await client.aclose()
        return True
    except Exception:
        return False


def _record(id: str = "m1", thread: str = "t1") -> MessageRecord:
    return MessageRecord(
        id=id,
        thread_id=thread,
        resource_id="r1",
        role="user",
        type="v2",
        created_at=1,
        content={"format": 2, "parts": []},
    )


async def test_in_process_broker_fans_out_and_unsubscribes() -> None:
    broker = InProcessBroker()
    first, second = broker.subscribe(message_channel("t1")), broker.subscribe(message_channel("t1"))
    waits = [asyncio.ensure_future(anext(first)), asyncio.ensure_future(anext(second))]
    await asyncio.sleep(0)
    assert broker.subscriber_count(message_channel("t1")) == 2
    await broker.publish([message_event("SAVED", "t1", _record()), message_event("SAVED", "t2", _record())])
    got = await asyncio.gather(*waits)
    assert [g["messageId"] for g in got] == ["m1", "m1"] and got[0]["message"]["thread_id"] == "t1"
    await first.aclose()
    await second.aclose()
    assert broker.subscriber_count(message_channel("t1")) == 0


async def test_slow_subscribers_lose_the_oldest_events_not_the_publisher() -> None:
    broker = InProcessBroker(queue_size=3)
    stream = broker.subscribe(message_channel("t1"))
    waiting = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0)
    await broker.publish([message_event("SAVED", "t1", _record(f"m{n}")) for n in range(6)])
    assert (await waiting)["messageId"] == "m3"  # the three newest are kept
    assert [(await anext(stream))["messageId"] for _ in range(2)] == ["m4", "m5"]
    await stream.aclose()


async def test_redis_broker_crosses_processes() -> None:
    require(await redis_available(), f"Redis is not reachable at {REDIS_URL}")
    prefix = f"recallql-test-{uuid.uuid4().hex[:8]}:"
    publisher, listener = RedisBroker(REDIS_URL, prefix=prefix), RedisBroker(REDIS_URL, prefix=prefix)
    other = RedisBroker(REDIS_URL, prefix=f"other-{prefix}")
    try:
        stream = listener.subscribe(thread_channel("r1"))
        foreign = other.subscribe(thread_channel("r1"))
        waiting = asyncio.ensure_future(anext(stream))
        stray = asyncio.ensure_future(anext(foreign))
        thread = ThreadRecord("t1", "r1", "", None, 1, 2)
        for _ in range(50):  # SUBSCRIBE reaches Redis a moment after subscribe() starts
            await publisher.publish([thread_event("CREATED", thread)])
            await asyncio.sleep(0.05)
            if waiting.done():
                break
        event = await asyncio.wait_for(waiting, 5)
        assert event["kind"] == "CREATED" and event["thread"]["resource_id"] == "r1"
        # An event that cannot be encoded is lost alone, not with the other events of its write.
        unencodable = ThreadRecord("t1", "r1", "", {"n": 2**70}, 1, 2)
        await publisher.publish([thread_event("UPDATED", unencodable), thread_event("DELETED", thread)])
        assert (await asyncio.wait_for(anext(stream), 5))["kind"] == "DELETED"
        assert not stray.done()  # another prefix is another deployment
        stray.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stray  # cancelling the consumer ends the stream (and unsubscribes)
        await stream.aclose()
        assert other.subscriber_count(thread_channel("r1")) == 0
        assert listener.subscriber_count(thread_channel("r1")) == 0
    finally:
        for broker in (publisher, listener, other):
            await broker.aclose()


async def test_subscribing_wakes_the_redis_reader_instead_of_waiting_for_it() -> None:
    """The reader holds the pub/sub connection while it waits for a message; subscribing and
    unsubscribing need it. With a wait of a minute, a subscription still starts and ends at once, time
    after time: it wakes the reader, and the woken reader hands the connection over rather than taking
    it again for its next wait."""
    require(await redis_available(), f"Redis is not reachable at {REDIS_URL}")
    import redis.asyncio as redis

    prefix = f"recallql-test-{uuid.uuid4().hex[:8]}:"
    listener, raw = RedisBroker(REDIS_URL, prefix=prefix), redis.from_url(REDIS_URL)
    listener.POLL, listener.READ_TIMEOUT = 60.0, 120.0  # a wait the test would not outlast
    first = listener.subscribe(thread_channel("r0"))
    waiting = asyncio.ensure_future(anext(first))
    try:
        await eventually(lambda: _true(listener._reading), timeout=10, what="the reader waiting")

        async def heard(channel: str) -> dict[str, Any]:
            stream = listener.subscribe(channel)
            received = asyncio.ensure_future(anext(stream))
            while not received.done():  # SUBSCRIBE reaches Redis a moment after subscribe() starts
                await raw.publish(f"{prefix}{channel}", orjson.dumps({"on": channel}))
                await asyncio.wait({received}, timeout=0.01)
            await stream.aclose()
            return received.result()

        for n in range(1, 21):
            channel = thread_channel(f"r{n}")
            assert await asyncio.wait_for(heard(channel), 10) == {"on": channel}
            assert listener.subscriber_count(channel) == 0
        assert not waiting.done()  # the wake-ups reached no subscriber
    finally:
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        await first.aclose()
        await listener.aclose()
        await raw.aclose()


async def _true(value: bool) -> bool:
    return value


async def test_the_redis_reader_runs_outside_the_context_of_its_first_subscriber() -> None:
    """The reader serves every subscriber of the process: its log lines must not carry the request id
    (a ContextVar in web/observability.py) of whichever subscription happened to start it."""
    require(await redis_available(), f"Redis is not reachable at {REDIS_URL}")
    import redis.asyncio as redis

    request: contextvars.ContextVar[str | None] = contextvars.ContextVar("test_request", default=None)
    seen: list[str | None] = []  # `request` as each "malformed event" warning was logged

    class Probe(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            if "malformed event" in record.getMessage():
                seen.append(request.get())
            return True

    prefix = f"recallql-test-{uuid.uuid4().hex[:8]}:"
    listener, raw = RedisBroker(REDIS_URL, prefix=prefix), redis.from_url(REDIS_URL)
    probe = Probe()
    logging.getLogger("recallql.events").addFilter(probe)

    async def subscribe_as_a_request() -> dict[str, object]:
        request.set("the first subscriber")
        return await anext(aiter(listener.subscribe(thread_channel("r1"))))

    waiting = asyncio.create_task(subscribe_as_a_request())
    try:
        for _ in range(100):  # SUBSCRIBE reaches Redis a moment after subscribe() starts
            await raw.publish(f"{prefix}{thread_channel('r1')}", b"{not json")
            await asyncio.sleep(0.05)
            if seen:
                break
        assert seen and set(seen) == {None}, seen
    finally:
        logging.getLogger("recallql.events").removeFilter(probe)
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        await listener.aclose()
        await raw.aclose()


async def test_redis_outage_does_not_fail_publishing() -> None:
    broker = RedisBroker("redis://127.0.0.1:1", prefix="nowhere:")
    try:
        await broker.publish([thread_event("CREATED", ThreadRecord("t", "r", "", None, 1, 1))])
    finally:
        await broker.aclose()


async def test_a_hanging_redis_costs_writes_one_timeout_per_hold_off() -> None:
    """A Redis that accepts connections and never answers (paused, or cut off mid-path): publishing
    gives up after its timeout, and the events that follow within the hold-off are dropped without
    trying, so writes do not each wait for the socket; after the hold-off it tries again."""
    accepted: list[asyncio.StreamWriter] = []
    released = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        await released.wait()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    broker = RedisBroker(f"redis://127.0.0.1:{port}", prefix="hanging:")
    broker.HOLD_OFF = 1.0
    event = thread_event("CREATED", ThreadRecord("t", "r", "", None, 1, 1))
    try:
        await asyncio.wait_for(broker.publish([event]), 30)
        assert len(accepted) == 1
        for _ in range(5):  # within the hold-off: not even a connection attempt
            await asyncio.wait_for(broker.publish([event]), 30)
        assert len(accepted) == 1
        await asyncio.sleep(1.1)
        await asyncio.wait_for(broker.publish([event]), 30)
        assert len(accepted) == 2
    finally:
        released.set()
        await broker.aclose()
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_subscribing_during_a_redis_outage_is_service_unavailable() -> None:
    """Not a masked INTERNAL_SERVER_ERROR: the client is told to try again."""
    broker = RedisBroker("redis://127.0.0.1:1", prefix="nowhere:")
    try:
        with pytest.raises(ServiceUnavailable) as refused:
            await anext(aiter(broker.subscribe(message_channel("t"))))
        assert refused.value.extensions == {"code": "SERVICE_UNAVAILABLE", "service": "events"}
        assert broker.subscriber_count(message_channel("t")) == 0
    finally:
        await broker.aclose()


async def test_after_a_redis_outage_subscribers_hear_again_and_ended_ones_are_gone() -> None:
    """Redis behind a proxy, taken away for 8 s and brought back. The reader's back-off had grown to
    8 s by then (capped at 30 s), so subscribers stayed deaf for seconds after Redis returned; and a
    subscription that ended during the outage (its UNSUBSCRIBE failed) was subscribed again on Redis by
    the reconnect, for good."""
    require(await redis_available(), f"Redis is not reachable at {REDIS_URL}")
    import redis.asyncio as redis

    parts = REDIS_URL.removeprefix("redis://").split("/")[0].split(":")
    prefix = f"outage-{uuid.uuid4().hex}:"
    kept, ended = message_channel("kept"), message_channel("ended")
    raw = redis.from_url(REDIS_URL)

    async def listeners(channel: str) -> int:
        return int(dict(await raw.pubsub_numsub(f"{prefix}{channel}"))[f"{prefix}{channel}".encode()])

    with TcpProxy(parts[0], int(parts[1]) if len(parts) > 1 else 6379) as proxy:
        broker = RedisBroker(f"redis://127.0.0.1:{proxy.port}", prefix=prefix)
        kept_events, ended_events = broker.subscribe(kept), broker.subscribe(ended)
        kept_next = asyncio.ensure_future(anext(kept_events))
        ended_next = asyncio.ensure_future(anext(ended_events))
        try:
            await eventually(lambda: _both(listeners(kept), listeners(ended)), timeout=10, what="SUBSCRIBE")
            proxy.refuse()
            ended_next.cancel()  # the subscription ends: its UNSUBSCRIBE cannot reach Redis now
            await asyncio.gather(ended_next, return_exceptions=True)
            await ended_events.aclose()
            await asyncio.sleep(8)
            proxy.forward()

            async def heard() -> bool:
                await raw.publish(f"{prefix}{kept}", orjson.dumps({"n": 1}))
                await asyncio.sleep(0.1)
                return kept_next.done()

            # The reader retries at least every second: heard within a few, not after its back-off
            # (asleep from 7.5 s to 15.5 s of the outage before).
            await eventually(heard, timeout=4, what="an event within seconds of Redis returning")
            assert kept_next.result() == {"n": 1}
            await eventually(lambda: _zero(listeners(ended)), timeout=10, what="the ended subscription gone")
            assert await listeners(kept) == 1
            assert await listeners(broker.wake_channel.removeprefix(prefix)) == 1  # kept for wake-ups
        finally:
            kept_next.cancel()
            await asyncio.gather(kept_next, return_exceptions=True)
            await kept_events.aclose()
            await broker.aclose()
            await raw.aclose()


async def _both(*counts: Awaitable[int]) -> bool:
    return all([await c == 1 for c in counts])


async def _zero(count: Awaitable[int]) -> bool:
    return await count == 0


async def _thread(api: Api) -> tuple[str, str]:
    thread_id, resource_id = uid("t"), uid("r")
    await api.execute(CREATE, i={"id": thread_id, "resourceId": resource_id, "title": "live"})
    return thread_id, resource_id


async def test_message_events_for_saves_updates_and_deletions(api: Api, server: ServerProcess) -> None:
    thread_id, _ = await _thread(api)
    async with subscribed(server.url, MESSAGE_EVENTS, t=thread_id) as sub:

        async def probe(n: int) -> None:
            await api.execute(SAVE, m=[text_message(thread_id=thread_id, id=f"{thread_id}-probe{n}")])

        await sub.until_live(probe)
        mid = f"{thread_id}-m"
        await api.execute(SAVE, m=[text_message(thread_id=thread_id, id=mid, text="hi", created_at=at(1))])
        saved = (await sub.next())["messageSaved"]
        assert saved["kind"] == "SAVED" and saved["messageId"] == mid and saved["threadId"] == thread_id
        assert saved["message"]["createdAt"] == at(1)
        assert saved["message"]["content"]["raw"]["parts"] == [{"type": "text", "text": "hi"}]

        await api.execute(UPDATE, m=[{"id": mid, "content": {"parts": [{"type": "text", "text": "edited"}]}}])
        updated = (await sub.next())["messageSaved"]
        assert updated["kind"] == "UPDATED"
        assert updated["message"]["content"]["raw"]["parts"] == [{"type": "text", "text": "edited"}]

        await api.execute(DELETE, ids=[mid, "unknown"])
        deleted = (await sub.next())["messageSaved"]
        assert (deleted["kind"], deleted["messageId"]) == ("DELETED", mid)
        assert deleted["message"]["content"]["raw"]["parts"] == [{"type": "text", "text": "edited"}]
        # Each event's message has its cursor, to catch up from with recall's `after`; it stays valid
        # once its message is gone. The probes were saved later in time, the message in January.
        place = saved["message"]["cursor"]
        assert place == updated["message"]["cursor"] == deleted["message"]["cursor"]
        everything = (await api.execute(PLACED, t=thread_id))["recall"]
        assert (await api.execute(PLACED, t=thread_id, after=place))["recall"] == everything
        assert everything["total"] >= 1 and mid not in [m["id"] for m in everything["messages"]]
        assert (await api.execute(PLACED, t=thread_id, before=place))["recall"]["total"] == 0

        # Another thread's messages never show up here.
        other, _ = await _thread(api)
        await api.execute(SAVE, m=[text_message(thread_id=other)])
        await sub.expect_none()


async def resume_while_saving(writer: Api, url: str, thread_id: str) -> None:
    """Five messages, then a subscription resumed after the second while ten more are saved one by one
    (some before the server has subscribed, some while it reads what came after the cursor, some after):
    each message after the cursor arrives once, the ones before the subscription first and in order."""
    first = [text_message(thread_id=thread_id, id=f"{thread_id}-{n:02}", created_at=at(n)) for n in range(5)]
    saved = (await writer.execute(SAVE_CURSORS, m=first))["saveMessages"]["messages"]
    later = [f"{thread_id}-{n:02}" for n in range(5, 15)]

    async def save_later() -> None:
        for n, message_id in enumerate(later):
            await writer.execute(
                SAVE, m=[text_message(thread_id=thread_id, id=message_id, created_at=at(5 + n))]
            )
            await asyncio.sleep(0.02)

    async with subscribed(url, RESUMED_MESSAGE_EVENTS, t=thread_id, after=saved[1]["cursor"]) as sub:
        saving = asyncio.create_task(save_later())
        try:
            seen = [(await sub.next())["messageSaved"] for _ in range(13)]
        finally:
            await saving
        assert [e["kind"] for e in seen] == ["SAVED"] * 13
        ids = [e["messageId"] for e in seen]
        assert sorted(ids) == [f"{thread_id}-{n:02}" for n in range(2, 15)], ids
        assert ids[:3] == [f"{thread_id}-02", f"{thread_id}-03", f"{thread_id}-04"]
        await sub.expect_none()
        # Then live, changes of the replayed messages too.
        await writer.execute(UPDATE, m=[{"id": f"{thread_id}-02", "content": {"metadata": {"read": True}}}])
        updated = (await sub.next())["messageSaved"]
        assert (updated["kind"], updated["messageId"]) == ("UPDATED", f"{thread_id}-02")
        assert updated["message"]["cursor"] == seen[0]["message"]["cursor"]


async def test_a_subscription_resumes_after_a_cursor(api: Api, server: ServerProcess) -> None:
    thread_id, _ = await _thread(api)
    await resume_while_saving(api, server.url, thread_id)


async def test_a_resumed_subscription_refuses_what_is_not_a_place_and_too_long_a_replay(
    api: Api, server: ServerProcess
) -> None:
    thread_id, _ = await _thread(api)
    async with subscribed(server.url, RESUMED_MESSAGE_EVENTS, t=thread_id, after="m1") as sub:
        with pytest.raises(AssertionError, match="after is not a recall cursor") as refused:
            await sub.next()
        assert "BAD_USER_INPUT" in str(refused.value)
    # 1,001 messages after the oldest one: one more than a resumed subscription replays.
    for start, size in ((0, 1000), (1000, 2)):
        batch = [text_message(thread_id=thread_id, id=f"{thread_id}-{n}") for n in range(start, start + size)]
        await api.execute(SAVE, m=batch)
    oldest = (await api.execute(PAGE_ASC, t=thread_id))["recall"]["startCursor"]
    async with subscribed(server.url, RESUMED_MESSAGE_EVENTS, t=thread_id, after=oldest) as sub:
        with pytest.raises(AssertionError, match="More than 1000 messages came after this cursor") as refused:
            await sub.next()
        assert "maxResumedMessages" in str(refused.value)


async def test_a_slow_resumed_subscriber_loses_the_oldest_events_not_memory(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resumed stream reads its channel ahead into a queue of its own: as bounded as the broker's."""
    monkeypatch.setattr(MessageService, "MAX_RESUMED", 3)
    await services.threads.create(resource_id="r1", thread_id="t1", principal=OPEN)
    saved = await services.messages.save([msg("m0")], principal=OPEN)
    stream = await services.messages.watch("t1", principal=OPEN, after=cursors.encode(MIN_MS, 0))
    try:
        payload, first = await anext(stream)  # the replay: m0
        assert (payload["kind"], first) == ("SAVED", saved.messages[0])
        for n in range(1, 11):
            await services.messages.save([msg(f"m{n}")], principal=OPEN)
        await asyncio.sleep(0.1)  # the stream reads ahead meanwhile
        assert [(await anext(stream))[1].id for _ in range(3)] == ["m8", "m9", "m10"]
    finally:
        await stream.aclose()


RESUMED_THREAD_EVENTS = """subscription($r: String!, $after: String) {
  threadUpdated(resourceId: $r, after: $after) { kind threadId thread { id title updatedAt } } }"""
NTH_BY_ACTIVITY = """query($r: String!, $page: Int!) {
  threads(resourceId: $r, perPage: 1, page: $page, orderBy: {field: UPDATED_AT, direction: ASC})
  { startCursor threads { id } } }"""
RENAME = "mutation($i: UpdateThreadInput!) { updateThread(input: $i) { id } }"


async def test_a_thread_subscription_resumes_after_a_cursor(api: Api, server: ServerProcess) -> None:
    """Five threads; a subscription resumed after the second most stale one while another is renamed and
    a new one created around its start: the three changed after the cursor come first, in order, then
    every later change; no state comes twice and none is missed."""
    resource_id = uid("r")
    ids = [f"{resource_id}-{n}" for n in range(5)]
    for thread_id in ids:
        await api.execute(CREATE, i={"id": thread_id, "resourceId": resource_id})
        await asyncio.sleep(0.002)  # distinct updatedAt
    second = (await api.execute(NTH_BY_ACTIVITY, r=resource_id, page=1))["threads"]
    assert [t["id"] for t in second["threads"]] == [ids[1]]

    async def change() -> None:
        for n in range(3):
            await api.execute(RENAME, i={"id": ids[0], "title": f"renamed {n}"})
            await asyncio.sleep(0.01)
        await api.execute(CREATE, i={"id": f"{resource_id}-new", "resourceId": resource_id})

    async with subscribed(
        server.url, RESUMED_THREAD_EVENTS, r=resource_id, after=second["startCursor"]
    ) as sub:
        changing = asyncio.create_task(change())
        seen: list[dict[str, Any]] = []
        try:
            while not (
                any(e["thread"]["title"] == "renamed 2" for e in seen)
                and any(e["threadId"] == f"{resource_id}-new" for e in seen)
            ):
                seen.append((await sub.next())["threadUpdated"])
        finally:
            await changing
        await sub.expect_none()
        assert [e["threadId"] for e in seen[:3]] == ids[2:5]
        assert all(e["kind"] == "UPDATED" for e in seen[:3])
        states = [(e["threadId"], e["thread"]["title"], e["thread"]["updatedAt"]) for e in seen]
        assert len(states) == len(set(states)), states
        await api.execute("mutation($id: ID!) { deleteThread(id: $id) }", id=ids[2])
        deleted = (await sub.next())["threadUpdated"]
        assert (deleted["kind"], deleted["threadId"]) == ("DELETED", ids[2])

    # What is not a cursor of an updatedAt listing is refused.
    by_created = await api.execute(
        "query($r: String!) { threads(resourceId: $r, perPage: 1) { startCursor } }", r=resource_id
    )
    for cursor, said in (
        (by_created["threads"]["startCursor"], "ordered by createdAt"),
        ("t1", "not a threads"),
    ):
        async with subscribed(server.url, RESUMED_THREAD_EVENTS, r=resource_id, after=cursor) as sub:
            with pytest.raises(AssertionError, match=said) as refused:
                await sub.next()
            assert "BAD_USER_INPUT" in str(refused.value)


async def test_a_thread_replay_is_bounded(services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ThreadService, "MAX_RESUMED", 2)
    for n in range(4):
        await services.repository.insert_thread(ThreadRecord(f"t{n}", "r1", "", None, n, n))
    stream = await services.threads.watch(
        "r1", principal=OPEN, after=cursors.encode_thread("updatedAt", 0, "t0")
    )
    try:
        with pytest.raises(BadUserInput, match="More than 2 threads came after this cursor") as refused:
            await anext(stream)
        assert refused.value.extensions["limit"] == "maxResumedThreads"
    finally:
        await stream.aclose()
    stream = await services.threads.watch(
        "r1", principal=OPEN, after=cursors.encode_thread("updatedAt", 1, "t1")
    )
    try:
        assert [(await anext(stream))[1].id for _ in range(2)] == ["t2", "t3"]
    finally:
        await stream.aclose()


def test_subscribed_markers_pass_every_subscriber_by_quietly(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="recallql"):
        assert received_message_event(subscribed_event(message_channel("t1"), "token")[1]) is None
        assert received_message_event({"kind": "NONSENSE"}) is None
    assert [r.getMessage() for r in caplog.records] == [
        "ignoring a malformed message event: unknown kind 'NONSENSE'"
    ]


async def test_a_moved_message_is_announced_on_both_threads(api: Api, server: ServerProcess) -> None:
    source, resource_id = await _thread(api)
    target = uid("t")
    await api.execute(CREATE, i={"id": target, "resourceId": resource_id})
    mid = f"{source}-m"
    async with subscribed(server.url, MESSAGE_EVENTS, t=source) as sub:

        async def probe(n: int) -> None:
            await api.execute(SAVE, m=[text_message(thread_id=source, id=mid)])

        await sub.until_live(probe)
        await api.execute(UPDATE, m=[{"id": mid, "threadId": target}])
        event = (await sub.next())["messageSaved"]
        assert (event["kind"], event["threadId"]) == ("UPDATED", source)
        assert event["message"]["threadId"] == target


async def test_thread_events(api: Api, server: ServerProcess) -> None:
    resource_id = uid("r")
    async with subscribed(server.url, THREAD_EVENTS, r=resource_id) as sub:

        async def probe(n: int) -> None:
            await api.execute(CREATE, i={"id": f"{resource_id}-probe{n}", "resourceId": resource_id})

        await sub.until_live(probe)
        thread_id = f"{resource_id}-t"
        await api.execute(CREATE, i={"id": thread_id, "resourceId": resource_id})
        created = (await sub.next())["threadUpdated"]
        assert (created["kind"], created["threadId"], created["resourceId"]) == (
            "CREATED",
            thread_id,
            resource_id,
        )

        q = "mutation($i: UpdateThreadInput!) { updateThread(input: $i) { id } }"
        await api.execute(q, i={"id": thread_id, "title": "renamed"})
        updated = (await sub.next())["threadUpdated"]
        assert updated["kind"] == "UPDATED" and updated["thread"]["title"] == "renamed"

        # Saving a message changes the thread's updatedAt: a sidebar ordered by it wants to know.
        await api.execute(SAVE, m=[text_message(thread_id=thread_id)])
        bumped = (await sub.next())["threadUpdated"]
        assert bumped["kind"] == "UPDATED" and bumped["thread"]["updatedAt"] >= updated["thread"]["updatedAt"]

        # Title generation (heuristic: no chat endpoint on this server) announces itself.
        untitled = f"{resource_id}-u"
        await api.execute(CREATE, i={"id": untitled, "resourceId": resource_id})
        assert (await sub.next())["threadUpdated"]["kind"] == "CREATED"
        titled = "mutation($m: [MessageInput!]!, $c: MemoryConfigInput) { saveMessages(messages: $m, memoryConfig: $c) { acknowledged } }"  # noqa: E501
        await api.execute(
            titled,
            m=[text_message(thread_id=untitled, text="Plan a trip to Lyon")],
            c={"generateTitle": {"enabled": True}},
        )
        kinds = {}
        for _ in range(2):
            event = (await sub.next())["threadUpdated"]
            kinds[event["kind"]] = event
        assert set(kinds) == {"UPDATED", "TITLE_GENERATED"}
        assert kinds["TITLE_GENERATED"]["thread"]["title"] == "Plan a trip to Lyon"

        await api.execute("mutation($id: ID!) { deleteThread(id: $id) }", id=thread_id)
        deleted = (await sub.next())["threadUpdated"]
        assert deleted["kind"] == "DELETED" and deleted["thread"]["title"] == "renamed"


async def test_subscriptions_reach_across_processes_through_redis(tmp_path: Path) -> None:
    """Two server processes on one PostgreSQL database: a subscriber on one sees what the other saved."""
    require(await redis_available(), f"Redis is not reachable at {REDIS_URL}")
    env = {"RECALLQL_REDIS_URL": REDIS_URL, "RECALLQL_REDIS_PREFIX": f"recallql-test-{uuid.uuid4().hex}:"}
    async with database("postgres", tmp_path) as url:
        env["RECALLQL_DATABASE_URL"] = url
        with (
            running_server(tmp_path / "a", env) as first,
            running_server(tmp_path / "b", {**env, "RECALLQL_AUTO_MIGRATE": "false"}) as second,
        ):
            writer = Api(second.url)
            thread_id, resource_id = uid("t"), uid("r")
            await writer.execute(CREATE, i={"id": thread_id, "resourceId": resource_id})
            async with (
                subscribed(first.url, MESSAGE_EVENTS, t=thread_id) as messages,
                subscribed(first.url, THREAD_EVENTS, r=resource_id) as threads,
            ):

                async def probe(n: int) -> None:
                    await writer.execute(SAVE, m=[text_message(thread_id=thread_id, id=f"{thread_id}-p{n}")])

                await messages.until_live(probe)
                await threads.until_live(probe)
                await messages.drain()  # the second subscription's probes
                await writer.execute(SAVE, m=[text_message(thread_id=thread_id, id=f"{thread_id}-x")])
                event = (await messages.next())["messageSaved"]
                assert (event["kind"], event["messageId"]) == ("SAVED", f"{thread_id}-x")
                bumped = (await threads.next())["threadUpdated"]
                assert (bumped["kind"], bumped["threadId"]) == ("UPDATED", thread_id)
                await writer.execute(DELETE, ids=[f"{thread_id}-x"])
                assert (await messages.next())["messageSaved"]["kind"] == "DELETED"
                # Whatever else arrives on the channels (garbage, or a replica of another version) is
                # dropped, or read for the fields this version knows: it never ends the subscriptions.
                import redis.asyncio as redis

                ahead = message_event("SAVED", thread_id, _record(f"{thread_id}-ahead", thread_id))[1]
                ahead = {**ahead, "message": {**ahead["message"], "pinned_by": "a newer version"}}
                garbage: list[Any] = [
                    [1, 2],
                    "text",
                    {"kind": "SAVED"},
                    {**ahead, "at": True},
                    {**ahead, "kind": "X"},
                ]
                publisher = redis.from_url(REDIS_URL)
                try:
                    for payload in (*garbage, ahead):
                        await publisher.publish(
                            f"{env['RECALLQL_REDIS_PREFIX']}messages:{thread_id}", orjson.dumps(payload)
                        )
                    for payload in garbage:
                        await publisher.publish(
                            f"{env['RECALLQL_REDIS_PREFIX']}threads:{resource_id}", orjson.dumps(payload)
                        )
                finally:
                    await publisher.aclose()
                assert (await messages.next())["messageSaved"]["messageId"] == f"{thread_id}-ahead"
                await writer.execute(SAVE, m=[text_message(thread_id=thread_id, id=f"{thread_id}-y")])
                assert (await messages.next())["messageSaved"]["messageId"] == f"{thread_id}-y"
                await threads.drain()
                await writer.execute(SAVE, m=[text_message(thread_id=thread_id, id=f"{thread_id}-z")])
                assert (await threads.next())["threadUpdated"]["threadId"] == thread_id
            # A subscription resumed on one process while the other saves: each message once, through Redis.
            resumed = uid("t")
            await writer.execute(CREATE, i={"id": resumed, "resourceId": resource_id})
            await resume_while_saving(writer, first.url, resumed)
            # The message saved through the second process is readable through the first.
            reader = Api(first.url)
            got = await reader.execute(
                "query($ids: [ID!]!) { messages(ids: $ids) { id } }", ids=[f"{thread_id}-p0"]
            )
            assert got["messages"] == [{"id": f"{thread_id}-p0"}]
