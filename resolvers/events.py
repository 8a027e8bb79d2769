"""Live updates: change events fanned out to subscribers, in-process or through Redis pub/sub.

Services publish after their transaction has committed, so a subscriber never sees a change that was
rolled back. Delivery is best effort (pub/sub semantics): a subscriber that is not connected when an
event is published never sees it, and one that falls more than `queue_size` events behind loses the
oldest of them (the server logs a warning). Clients that need every change re-read after reconnecting.

Channels: `messages:<threadId>` carries MessageEvent payloads and `threads:<resourceId>` ThreadEvent
payloads. A payload is a JSON-ready dict, read-only (it shares the values of the records it carries);
records travel with it (the state right after the change, or the last stored state for deletions), so
a subscriber needs no database read.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol, TypeVar

import orjson

from models.records import MessageRecord, ThreadRecord
from models.repository import Repository
from resolvers.clock import MAX_MS, MIN_MS, now_ms, to_iso
from resolvers.errors import BadUserInput, ServiceUnavailable

log = logging.getLogger("recallql.events")

MESSAGE_SAVED = "SAVED"
MESSAGE_UPDATED = "UPDATED"
MESSAGE_DELETED = "DELETED"
THREAD_CREATED = "CREATED"
THREAD_UPDATED = "UPDATED"
THREAD_DELETED = "DELETED"
THREAD_TITLE_GENERATED = "TITLE_GENERATED"
# Not a change: a subscriber that resumes from a cursor publishes it on its own channel and waits until
# it comes back, which proves the broker delivers the channel's events to it from then on (Redis starts
# to a moment after SUBSCRIBE is sent). Every subscriber passes over it.
SUBSCRIBED = "SUBSCRIBED"

Publication = tuple[str, dict[str, Any]]


def message_channel(thread_id: str) -> str:
    return f"messages:{thread_id}"


def thread_channel(resource_id: str) -> str:
    return f"threads:{resource_id}"


@functools.cache
def _field_names(kind: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(kind))


def _fields(record: MessageRecord | ThreadRecord) -> dict[str, Any]:
    # Not dataclasses.asdict: its deep copy of every message's content was the costliest step of a
    # save's own work. Payloads share the record's values, so nothing may change them in place.
    # Widened to plain `type`: mypy checks type[SomeClass] against Hashable with the instances' __hash__
    # and rejects it, though every class object is hashable.
    kind: type = type(record)
    return {name: getattr(record, name) for name in _field_names(kind)}


def message_event(kind: str, thread_id: str, message: MessageRecord, at: int | None = None) -> Publication:
    """An event on `thread_id`'s channel (a moved message is announced on its old and new threads)."""
    return (
        message_channel(thread_id),
        {
            "kind": kind,
            "threadId": thread_id,
            "messageId": message.id,
            "message": _fields(message),
            "at": at if at is not None else now_ms(),
        },
    )


def subscribed_event(channel: str, token: str) -> Publication:
    return channel, {"kind": SUBSCRIBED, "token": token}


def thread_event(kind: str, thread: ThreadRecord, at: int | None = None) -> Publication:
    return (
        thread_channel(thread.resource_id),
        {
            "kind": kind,
            "threadId": thread.id,
            "resourceId": thread.resource_id,
            "thread": _fields(thread),
            "at": at if at is not None else now_ms(),
        },
    )


# What a received event must hold. Events come from Redis, that is from any replica (an older or newer
# version, in a rolling upgrade) or from anyone who can publish there: one that does not fit is dropped
# with a warning, never handed to subscribers (a bad one ended every subscription on its channel).
_STR, _OPT_STR, _INT, _BOOL = (str,), (str, type(None)), (int,), (bool,)
_MESSAGE_TYPES: dict[str, tuple[type, ...]] = {
    "id": _STR,
    "thread_id": _STR,
    "resource_id": _OPT_STR,
    "role": _STR,
    "type": _STR,
    "created_at": _INT,
    "content": (dict,),
    "seq": _INT,
    "signal_type": _OPT_STR,
    "legacy_reminder": _BOOL,
}
_THREAD_TYPES: dict[str, tuple[type, ...]] = {
    "id": _STR,
    "resource_id": _STR,
    "title": _STR,
    "metadata": (dict, type(None)),
    "created_at": _INT,
    "updated_at": _INT,
}


@dataclass(frozen=True, slots=True)
class _Shape:
    kinds: frozenset[str]
    envelope: tuple[str, ...]  # the payload's strings besides kind
    key: str  # the record's key
    types: dict[str, tuple[type, ...]]


_MESSAGE_EVENT = _Shape(
    frozenset({MESSAGE_SAVED, MESSAGE_UPDATED, MESSAGE_DELETED}),
    ("threadId", "messageId"),
    "message",
    _MESSAGE_TYPES,
)
_THREAD_EVENT = _Shape(
    frozenset({THREAD_CREATED, THREAD_UPDATED, THREAD_DELETED, THREAD_TITLE_GENERATED}),
    ("threadId", "resourceId"),
    "thread",
    _THREAD_TYPES,
)


def _received(payload: Any, shape: _Shape) -> dict[str, Any] | None:
    """The record's fields of a received event, or None (logged) when the event does not fit: the
    envelope's strings and time, a known kind, every field of the record with its type. Fields this
    version does not know (a newer replica's) are left out."""
    if isinstance(payload, dict) and payload.get("kind") == SUBSCRIBED:
        return None
    problem = _problem(payload, shape)
    if problem is not None:
        log.warning("ignoring a malformed %s event: %s", shape.key, problem)
        return None
    return {name: payload[shape.key][name] for name in shape.types}


def _problem(payload: Any, shape: _Shape) -> str | None:
    if not isinstance(payload, dict):
        return "not an object"
    if payload.get("kind") not in shape.kinds:
        return f"unknown kind {payload.get('kind')!r}"
    if not all(isinstance(payload.get(name), str) for name in shape.envelope):
        return f"{'/'.join(shape.envelope)} must be strings"
    if not _is(payload.get("at"), _INT) or not MIN_MS <= payload["at"] <= MAX_MS:
        return "at must be an integer time"
    record = payload.get(shape.key)
    if not isinstance(record, dict):
        return f"no {shape.key}"
    wrong = [name for name, allowed in shape.types.items() if not _is(record.get(name, _MISSING), allowed)]
    return f"fields missing or of the wrong type: {', '.join(wrong)}" if wrong else None


_MISSING = object()


def _is(value: Any, allowed: tuple[type, ...]) -> bool:
    # bool is an int: a time or a sequence number given as true is not one.
    return isinstance(value, allowed) and (bool in allowed or not isinstance(value, bool))


def received_message_event(payload: Any) -> MessageRecord | None:
    """The message of a `messages:<threadId>` event as received, or None when it does not fit."""
    found = _received(payload, _MESSAGE_EVENT)
    return MessageRecord(**found) if found is not None else None


def received_thread_event(payload: Any) -> ThreadRecord | None:
    """The thread of a `threads:<resourceId>` event as received, or None when it does not fit."""
    found = _received(payload, _THREAD_EVENT)
    return ThreadRecord(**found) if found is not None else None


class EventBroker(Protocol):
    async def publish(self, events: Sequence[Publication]) -> None:
        """Sends the events; never raises (the change they describe has already committed)."""
        ...

    def subscribe(self, channel: str) -> AsyncGenerator[dict[str, Any], None]:
        """The channel's events from now on, until the consumer stops iterating."""
        ...

    async def aclose(self) -> None: ...


class _Subscriber:
    __slots__ = ("dropped", "queue")

    def __init__(self, size: int) -> None:
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=size)
        self.dropped = 0

    def offer(self, payload: dict[str, Any]) -> None:
        if self.queue.full():  # a slow consumer loses its oldest events, never blocks the publisher
            with contextlib.suppress(asyncio.QueueEmpty):
                self.queue.get_nowait()
            self.dropped += 1
            if self.dropped in (1, 100) or self.dropped % 1000 == 0:
                log.warning("a subscriber is too slow: %d event(s) dropped so far", self.dropped)
        self.queue.put_nowait(payload)


class _LocalHub:
    """Channel -> this process's subscribers."""

    def __init__(self, queue_size: int) -> None:
        self.queue_size = queue_size
        self.channels: dict[str, set[_Subscriber]] = {}

    def add(self, channel: str) -> tuple[_Subscriber, bool]:
        subscriber = _Subscriber(self.queue_size)
        subscribers = self.channels.setdefault(channel, set())
        subscribers.add(subscriber)
        return subscriber, len(subscribers) == 1

    def remove(self, channel: str, subscriber: _Subscriber) -> bool:
        """Removes the subscriber; True when the channel has none left."""
        subscribers = self.channels.get(channel)
        if subscribers is None:
            return False
        subscribers.discard(subscriber)
        if subscribers:
            return False
        del self.channels[channel]
        return True

    def deliver(self, channel: str, payload: dict[str, Any]) -> None:
        for subscriber in list(self.channels.get(channel, ())):
            subscriber.offer(payload)

    def count(self, channel: str) -> int:
        return len(self.channels.get(channel, ()))


class InProcessBroker:
    """Fan-out inside one process: enough for a single server process (and for tests)."""

    def __init__(self, *, queue_size: int = 1000) -> None:
        self._hub = _LocalHub(queue_size)

    async def publish(self, events: Sequence[Publication]) -> None:
        for channel, payload in events:
            self._hub.deliver(channel, payload)

    async def subscribe(self, channel: str) -> AsyncGenerator[dict[str, Any], None]:
        subscriber, _ = self._hub.add(channel)
        try:
            while True:
                yield await subscriber.queue.get()
        finally:
            self._hub.remove(channel, subscriber)

    def subscriber_count(self, channel: str) -> int:
        return self._hub.count(channel)

    async def aclose(self) -> None:
        return None


class RedisBroker:
    """Fan-out across processes through Redis pub/sub.

    Every process publishes to Redis and holds one pub/sub connection, subscribed to the channels its
    own subscribers listen on; a reader task delivers what arrives to them. Channel names carry
    `prefix`, so several deployments (or test runs) can share one Redis.

    The connection is also subscribed to a wake-up channel of this process alone (`wake_channel`):
    (un)subscribing needs the connection, which the reader holds while it waits for a message, so it
    first publishes an empty message there, which ends the reader's wait at once.
    """

    # A write answers after publishing its events: while Redis hangs (a paused or partitioned server),
    # each write would wait for the socket. It waits at most this long, and after a failure the events
    # of the next HOLD_OFF seconds are dropped without trying (one warning), so an outage costs writes
    # one timeout every HOLD_OFF seconds, not one each.
    PUBLISH_TIMEOUT = 1.0
    HOLD_OFF = 5.0

    def __init__(self, url: str, *, prefix: str = "recallql:", queue_size: int = 1000) -> None:
        import redis.asyncio as redis

        self.prefix = prefix
        self._redis = redis.from_url(url)
        # Its own connections: the timeouts bound publishing without touching the pub/sub reader.
        self._publisher = redis.from_url(
            url, socket_timeout=self.PUBLISH_TIMEOUT, socket_connect_timeout=self.PUBLISH_TIMEOUT
        )
        self._held_until = 0.0
        self._dropped = 0
        self._pubsub: Any = None
        self._hub = _LocalHub(queue_size)
        self._lock = asyncio.Lock()
        self._reader: asyncio.Task[None] | None = None
        self._reading = False  # the reader holds the lock, waiting for a message
        self.wake_channel = f"{prefix}wake:{uuid.uuid4().hex}"
        self._closed = False

    def _key(self, channel: str) -> str:
        return f"{self.prefix}{channel}"

    async def publish(self, events: Sequence[Publication]) -> None:
        if not events:
            return
        encoded = []
        for channel, payload in events:
            try:
                encoded.append((self._key(channel), orjson.dumps(payload)))
            except (orjson.JSONEncodeError, TypeError) as exc:  # one event lost, not its whole write's
                log.warning("could not encode an event for %s: %s", channel, exc)
        if not encoded:
            return
        now = time.monotonic()
        if now < self._held_until:
            self._dropped += len(encoded)
            return
        try:
            async with asyncio.timeout(self.PUBLISH_TIMEOUT):  # connecting and sending together
                async with self._publisher.pipeline(transaction=False) as pipe:
                    for key, data in encoded:
                        pipe.publish(key, data)
                    await pipe.execute()
        except Exception as exc:  # the change is committed; losing its notification must not fail it
            self._held_until = time.monotonic() + self.HOLD_OFF
            log.warning(
                "could not publish %d event(s) to Redis (%r); events of the next %.0f s are dropped "
                "without trying",
                len(encoded),
                exc,
                self.HOLD_OFF,
            )
            return
        if self._dropped:
            log.warning("Redis takes events again; %d event(s) were dropped meanwhile", self._dropped)
            self._dropped = 0

    async def subscribe(self, channel: str) -> AsyncGenerator[dict[str, Any], None]:
        async with self._connection():
            subscriber, first = self._hub.add(channel)
            try:
                if first:
                    keys = [self._key(channel)]
                    if self.wake_channel not in self._held():
                        keys.append(self.wake_channel)
                    await self._ensure_pubsub().subscribe(*keys)
                self._ensure_reader()
            except BaseException as exc:
                self._hub.remove(channel, subscriber)
                if isinstance(exc, Exception) and _redis_failure(exc):
                    log.warning("could not subscribe to %s on Redis: %s", channel, exc)
                    raise ServiceUnavailable(
                        "Live updates are unavailable (the event broker cannot be reached); try again "
                        "shortly.",
                        service="events",
                    ) from None
                raise
        try:
            while True:
                yield await subscriber.queue.get()
        finally:
            # The unsubscribe must run even when the consumer was cancelled.
            await asyncio.shield(self._unsubscribe(channel, subscriber))

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncGenerator[None, None]:
        """The pub/sub connection, for a command: the reader is woken rather than waited for (up to
        POLL seconds: 200 ms at p99 for a new subscription before)."""
        if not self._reading:
            await self._lock.acquire()
        else:
            # Queued for the lock before the wake-up can arrive, so that the woken reader hands it
            # over instead of taking it again for its next wait.
            acquiring = asyncio.ensure_future(self._lock.acquire())
            try:
                await asyncio.sleep(0)
                await self._wake()
                await acquiring
            except BaseException:
                if acquiring.done() and not acquiring.cancelled() and acquiring.exception() is None:
                    self._lock.release()
                else:
                    acquiring.cancel()
                raise
        try:
            yield
        finally:
            self._lock.release()

    async def _wake(self) -> None:
        if time.monotonic() < self._held_until:
            return  # Redis is away: the reader's poll bounds the wait
        try:
            async with asyncio.timeout(self.PUBLISH_TIMEOUT):
                await self._publisher.publish(self.wake_channel, b"")
        except Exception as exc:
            log.debug("could not wake the Redis reader: %r", exc)

    async def _unsubscribe(self, channel: str, subscriber: _Subscriber) -> None:
        async with self._connection():
            if self._hub.remove(channel, subscriber) and self._pubsub is not None and not self._closed:
                try:
                    await self._pubsub.unsubscribe(self._key(channel))
                except Exception as exc:
                    log.warning("could not unsubscribe from %s: %s", channel, exc)

    def _ensure_pubsub(self) -> Any:
        if self._pubsub is None:
            self._pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        return self._pubsub

    def _ensure_reader(self) -> None:
        if self._reader is None or self._reader.done():
            # It reads for every subscriber from now on, not in the context of the first one.
            self._reader = asyncio.create_task(
                self._read(), name="recallql-redis-events", context=contextvars.Context()
            )

    # While Redis is away the reader retries this often: a longer back-off (it grew to 30 s) left
    # subscribers deaf for as long after Redis was back.
    RETRY_MAX = 1.0
    READ_TIMEOUT = 5.0
    POLL = 0.2  # how long a read waits for a message (a command wakes it sooner)

    async def _read(self) -> None:
        delay, failed = 0.25, False
        while not self._closed:
            try:
                # Under the lock, as subscribe and unsubscribe use the connection: a reconnect by two of
                # them at once broke its reads. They wake it (_connection) rather than wait.
                # Bounded too: a Redis that accepts connections and never answers held the lock.
                async with self._lock, asyncio.timeout(self.READ_TIMEOUT):
                    self._reading = True
                    try:
                        message = await self._pubsub.get_message(
                            ignore_subscribe_messages=True, timeout=self.POLL
                        )
                    finally:
                        self._reading = False
                    if failed:
                        await self._reconcile()
                delay, failed = 0.25, False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis restarts: redis-py reconnects and re-subscribes on next read
                if not failed:
                    log.warning("Redis pub/sub read failed, retrying every %.0fs: %s", self.RETRY_MAX, exc)
                failed = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.RETRY_MAX)
                continue
            if message is None or message.get("type") != "message":
                continue
            key = message["channel"].decode() if isinstance(message["channel"], bytes) else message["channel"]
            if not key.startswith(self.prefix) or key == self.wake_channel:
                continue
            try:
                payload = orjson.loads(message["data"])
            except orjson.JSONDecodeError:
                log.warning("ignoring a malformed event on %s", key)
                continue
            self._hub.deliver(key[len(self.prefix) :], payload)

    async def _reconcile(self) -> None:
        """After an outage (under the lock): redis-py subscribed again to every channel it had, those
        whose UNSUBSCRIBE failed meanwhile included; Redis is made to match the subscribers here."""
        held = self._held()
        wanted = {self._key(channel) for channel in self._hub.channels} | {self.wake_channel}
        if stale := sorted(held - wanted):
            await self._pubsub.unsubscribe(*stale)
        if missing := sorted(wanted - held):
            await self._pubsub.subscribe(*missing)
        log.info("Redis pub/sub is back (%d channel(s) dropped, %d added)", len(stale), len(missing))

    def _held(self) -> set[str]:
        """The channels redis-py keeps the connection subscribed to (again after a reconnect)."""
        channels = self._pubsub.channels if self._pubsub is not None else {}
        return {k.decode() if isinstance(k, bytes) else k for k in channels}

    def subscriber_count(self, channel: str) -> int:
        return self._hub.count(channel)

    async def aclose(self) -> None:
        self._closed = True
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        if self._pubsub is not None:
            with contextlib.suppress(Exception):
                await self._pubsub.aclose()
        for client in (self._redis, self._publisher):
            with contextlib.suppress(Exception):
                await client.aclose()


def _redis_failure(exc: Exception) -> bool:
    import redis.exceptions

    return isinstance(exc, redis.exceptions.RedisError | OSError | TimeoutError)


async def publish_quietly(broker: EventBroker | None, events: Iterable[Publication]) -> None:
    """Publishes after a commit; a broker failure is logged, never raised."""
    batch = list(events)
    if broker is None or not batch:
        return
    try:
        await broker.publish(batch)
    except Exception as exc:
        log.warning("could not publish %d event(s): %s", len(batch), exc)


# ------------------------------------------------------------------------------------ resuming
Record = TypeVar("Record", MessageRecord, ThreadRecord)
# A change is stamped when it is written and published once its transaction commits, so changes do not
# arrive in the order of their stamps: a replay of changes since a time starts this much earlier.
CHANGE_GRACE_MS = 30_000


class UnrecordedWrites:
    """Before a process keeping no changes first writes a message or deletes a thread, it closes the
    change journal (and forgets what was kept): its writes go unrecorded, so a replay must no longer
    trust the journal (check_changed_since refuses it until a keeping process opens it again). Closed
    on the first write, not at start: a process that only reads (a one-off server pointed at the same
    database) leaves the journal of the processes that keep changes alone. Once closed, writes cost
    nothing more; a failed close fails the write, and the next write tries again."""

    def __init__(self, repository: Repository, retention: float) -> None:
        self.repository = repository
        self.pending = retention <= 0

    async def __call__(self) -> None:
        if self.pending:
            await self.repository.close_change_journal()
            self.pending = False


async def check_changed_since(
    repository: Repository, retention: float, changed_since: int, *, resumed: bool, reread: str
) -> None:
    """Refuses (BAD_USER_INPUT) a changedSince whose replay could not be complete: one without a cursor
    to resume from (not `resumed`), on a server keeping no changes (a `retention` of 0), older than the
    retention (the replay reads from CHANGE_GRACE_MS before it: those changes must not be pruned yet),
    or older than the change journal (changes made while no server kept them are in no replay).
    `reread` says what the client reads instead."""
    if not resumed:
        raise BadUserInput(
            "changedSince needs after: the cursor the client resumes from, before which it asks for "
            "the changes made since then.",
            argument="changedSince",
        )
    if retention <= 0:
        raise BadUserInput(
            "changedSince needs a server that keeps changes: this one keeps none "
            "(RECALLQL_CHANGE_RETENTION is 0).",
            argument="changedSince",
            limit="changeRetention",
            max=0,
        )
    if changed_since - CHANGE_GRACE_MS < now_ms() - retention * 1000:
        raise BadUserInput(
            f"Changes are kept for {retention:g} seconds, and changedSince is older: {reread}",
            argument="changedSince",
            limit="changeRetention",
            max=retention,
        )
    begun = await repository.change_journal_since()
    if begun is None or changed_since < begun:
        kept = "none yet" if begun is None else f"those since {to_iso(begun)}"
        raise BadUserInput(
            f"This server keeps changes, but {kept}, and changedSince is older: {reread}",
            argument="changedSince",
            limit="changeRetention",
        )


def too_long_a_replay(most: int, what: str, reader: str, limit: str) -> BadUserInput:
    return BadUserInput(
        f"More than {most} {what} came after this cursor: read them with {reader} page by page, then "
        "subscribe after the newest one.",
        argument="after",
        limit=limit,
        max=most,
    )


async def resumed(
    events: EventBroker,
    channel: str,
    *,
    read: Callable[[int], Awaitable[Sequence[tuple[str, Record]]]],
    event_of: Callable[[str, Record], dict[str, Any]],
    received: Callable[[dict[str, Any]], Record | None],
    visible: Callable[[Record], bool],
    repeats: Collection[str],
    most: int,
    too_long: BadUserInput,
    subscribe_timeout: float = 5.0,
) -> AsyncGenerator[tuple[dict[str, Any], Record], None]:
    """A channel's stream resumed from a place: the records changed after the place, as stored now
    (`read(n)`: at most n of them, oldest change first, each with its event's kind), each as the event
    `event_of` makes, then the live events `received` reads. Only `visible` records are given.

    It subscribes before it reads and waits until the broker delivers the channel to it (see
    SUBSCRIBED), so nothing that changes meanwhile is missed; a live event of a kind in `repeats`
    whose record the replay already gave as it is, is left out. More than `most` records to replay is
    `too_long`. Events are read ahead into a queue of `most`, which loses the oldest for a slow
    consumer, as the broker's own does."""
    live = events.subscribe(channel)
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=most)

    async def pump() -> None:
        async for payload in live:
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(payload)

    pumping = asyncio.create_task(pump(), name="recallql-resumed-subscription")
    try:
        held = await _subscribed(events, channel, queue, pumping, subscribe_timeout)
        rows = await read(most + 1)
        if len(rows) > most:
            raise too_long
        replayed: dict[str, Record] = {}
        for kind, row in rows:
            if not visible(row):
                continue
            if kind in repeats:  # (a deletion is no state a later event repeats)
                replayed[row.id] = row
            yield event_of(kind, row), row
        while True:
            payload = held.pop(0) if held else await _next_event(queue, pumping)
            assert payload is not None  # (None only after a timeout)
            record = received(payload)
            if record is None or not visible(record):
                continue
            if payload.get("kind") in repeats and replayed.get(record.id) == record:
                continue  # published before the replay read it: given already, as it is
            yield payload, record
    finally:
        pumping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pumping
        await live.aclose()


async def _subscribed(
    events: EventBroker,
    channel: str,
    queue: asyncio.Queue[dict[str, Any]],
    pumping: asyncio.Task[None],
    timeout: float,
) -> list[dict[str, Any]]:
    """Waits until the broker delivers the channel to this subscriber: publishes a SUBSCRIBED marker of
    its own until one comes back. Returns the events received before it (in order)."""
    token, held = uuid.uuid4().hex, list[dict[str, Any]]()
    await asyncio.sleep(0)  # the pump's first step: the in-process broker subscribes there and then
    clock = asyncio.get_running_loop().time
    deadline, wait = clock() + timeout, 0.001
    while clock() < deadline:
        await events.publish([subscribed_event(channel, token)])
        # Redis subscribes within milliseconds, mostly: ask again soon, then less often.
        retry, wait = clock() + wait, min(wait * 2, 0.1)
        while (left := retry - clock()) > 0:
            payload = await _next_event(queue, pumping, left)
            if payload is None:
                break
            if payload.get("kind") == SUBSCRIBED and payload.get("token") == token:
                return held
            held.append(payload)
    raise ServiceUnavailable(
        "Live updates are unavailable (the event broker does not deliver); try again shortly.",
        service="events",
    )


async def _next_event(
    queue: asyncio.Queue[dict[str, Any]], pumping: asyncio.Task[None], timeout: float | None = None
) -> dict[str, Any] | None:
    """The next event the pump received, or None after `timeout` seconds; the pump's error (a broker
    that could not subscribe) if it stopped instead. No event is lost to the timeout: a get that has
    not completed holds none (asyncio.wait, unlike wait_for, leaves a completed get's result here)."""
    if not queue.empty():
        return queue.get_nowait()
    getting = asyncio.ensure_future(queue.get())
    try:
        await asyncio.wait({getting, pumping}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not getting.done():
            getting.cancel()
    if getting.done() and not getting.cancelled():
        return getting.result()
    if not pumping.done():
        return None
    pumping.result()  # raises the pump's error
    raise RuntimeError("the event stream ended")
