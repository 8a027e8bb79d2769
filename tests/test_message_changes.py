"""Changes to older messages, for subscriptions resumed with changedSince: the message_changes journal
(written in each write's transaction) and messageSaved(after:, changedSince:)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from models.records import ChangeRecord, MessageRecord, ThreadRecord
from models.repository import Repository
from resolvers import cursors
from resolvers.auth import OPEN
from resolvers.clock import now_ms, to_iso
from resolvers.config import BUILTIN_DEFAULTS
from resolvers.context import Services
from resolvers.errors import BadUserInput
from resolvers.events import CHANGE_GRACE_MS, UnrecordedWrites
from resolvers.messages import MessageInput, MessagePatch, MessageService
from resolvers.recall import RecallArgs
from resolvers.threads import ThreadService
from resolvers.transfer import dumps_line, import_jsonl, message_line
from tests.subscriptions import subscribed
from tests.support import (
    Api,
    ServerProcess,
    at,
    database,
    engines,
    eventually,
    running_server,
    text_message,
    uid,
)

CHANGED_EVENTS = """subscription($t: ID!, $after: String, $since: DateTime) {
  messageSaved(threadId: $t, after: $after, changedSince: $since) {
    kind threadId messageId at message { id threadId cursor content { raw } } } }"""
SAVE = "mutation($m: [MessageInput!]!) { saveMessages(messages: $m) { messages { id cursor } } }"
UPDATE = "mutation($m: [UpdateMessageInput!]!) { updateMessages(messages: $m) { id } }"
DELETE = "mutation($ids: [ID!]!) { deleteMessages(ids: $ids) { deleted } }"
CREATE = "mutation($i: CreateThreadInput!) { createThread(input: $i) { id } }"
DELETE_THREAD = "mutation($id: ID!) { deleteThread(id: $id) }"
THREADS = """query($r: String!) {
  threads(resourceId: $r, perPage: 20, orderBy: {field: UPDATED_AT}) { startCursor } }"""
RESUMED_THREADS = """subscription($r: String!, $after: String, $since: DateTime) {
  threadUpdated(resourceId: $r, after: $after, changedSince: $since) { kind threadId } }"""


@pytest.fixture
async def services(repository: Repository) -> Services:
    """A server's services that keep changes for a day (RECALLQL_CHANGE_RETENTION=86400), started as
    a server starts them: with the change journal open from now."""
    built = Services.build(repository, memory_defaults=dict(BUILTIN_DEFAULTS), change_retention=86_400)
    await built.messages.start_journal()
    return built


@pytest.fixture(scope="module", params=engines())
async def keeping(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp(f"keeping-{request.param}")
    async with database(request.param, tmp) as url:
        env = {"RECALLQL_DATABASE_URL": url, "RECALLQL_CHANGE_RETENTION": "86400"}
        with running_server(tmp / "data", env) as srv:
            yield srv


def _text(record: MessageRecord) -> str:
    return str(record.content["parts"][0]["text"])


def _with(record: MessageRecord, **changes: Any) -> MessageRecord:
    return dataclasses.replace(record, **changes)


def _said(record: MessageRecord, text: str) -> MessageRecord:
    return _with(record, content={"format": 2, "parts": [{"type": "text", "text": text}]})


def _message(thread_id: str, n: int) -> MessageRecord:
    content = {"format": 2, "parts": [{"type": "text", "text": f"m{n}"}]}
    return MessageRecord(f"{thread_id}-m{n}", thread_id, "r", "user", "v2", 1_000 + n, content)


def _summary(changes: list[ChangeRecord]) -> list[tuple[str, int, str | None]]:
    return [(c.message_id, c.changed_at, None if c.deleted is None else _text(c.deleted)) for c in changes]


async def test_each_write_keeps_the_latest_change_of_a_message_on_each_thread_it_touched(
    repository: Repository,
) -> None:
    t, u = uid("t"), uid("u")
    for thread_id in (t, u):
        assert await repository.insert_thread(ThreadRecord(thread_id, "r", "", None, 1, 1))
    kept = {"record_changes": True}
    first = [_message(t, n) for n in range(6)]
    saved = {m.id: m for m in (await repository.save_messages(first, now=1, **kept))[1]}
    m = [saved[f"{t}-m{n}"] for n in range(6)]
    assert await repository.changes_since(t, 0, 100) == []  # a first save is no change

    def apply(patch: dict[str, MessageRecord]) -> Any:
        return lambda before, _threads: [patch[i] for i in before]

    async def edit(n: int, text: str, now: int, **options: Any) -> None:
        await repository.update_messages([m[n].id], apply({m[n].id: _said(m[n], text)}), now=now, **options)

    await edit(0, "edited", 2_000, **kept)
    await repository.save_messages([_said(m[1], "re-saved")], now=3_000, **kept)
    moved = apply({m[2].id: _with(m[2], thread_id=u)})
    await repository.update_messages([m[2].id], moved, now=4_000, threads=[u], **kept)
    await repository.delete_messages([m[3].id], now=5_000, **kept)
    await edit(0, "again", 6_000, **kept)
    await edit(4, "edited", 7_000, **kept)
    # Not recorded: the writes of a server that keeps no changes (imports without record_changes too).
    await edit(5, "unkept", 7_500)
    await repository.save_messages([_said(m[5], "unkept")], now=7_600)
    await repository.delete_messages([m[5].id], now=7_700)
    await repository.import_messages([_said(m[1], "imported")], now=7_800)

    changes = await repository.changes_since(t, 0, 100)
    assert _summary(changes) == [
        (m[1].id, 3_000, None),
        (m[2].id, 4_000, None),  # moved away
        (m[3].id, 5_000, "m3"),  # deleted, as it was last stored
        (m[0].id, 6_000, None),  # its latest change only
        (m[4].id, 7_000, None),
    ]
    assert changes[2].deleted == m[3]  # every field, seq included: its place stays known
    assert _summary(await repository.changes_since(u, 0, 100)) == [(m[2].id, 4_000, None)]  # moved in
    assert [c.message_id for c in await repository.changes_since(t, 5_000, 100)] == [
        m[3].id,
        m[0].id,
        m[4].id,
    ]
    assert [c.message_id for c in await repository.changes_since(t, 0, 2)] == [m[1].id, m[2].id]

    assert await repository.prune_changes(5_000) == 3  # m1 and m2 here, m2 on u
    assert [c.message_id for c in await repository.changes_since(t, 0, 100)] == [m[3].id, m[0].id, m[4].id]
    assert await repository.changes_since(u, 0, 100) == []
    await repository.delete_thread(t, now=8_000)
    assert await repository.changes_since(t, 0, 100) == []


async def _thread(services: Services, n: int) -> tuple[str, list[MessageRecord]]:
    thread_id = uid("t")
    await services.threads.create(resource_id="r", thread_id=thread_id, principal=OPEN)
    inputs = [
        MessageInput(
            thread_id,
            "user",
            {"format": 2, "parts": [{"type": "text", "text": f"m{i}"}]},
            id=f"{thread_id}-m{i}",
            resource_id="r",
            created_at=1_767_225_600_000 + i * 1000,
        )
        for i in range(n)
    ]
    return thread_id, (await services.messages.save(inputs, principal=OPEN)).messages


async def _thread_replay(
    threads: ThreadService, resource: str, cursor: str, n: int, changed_since: int | None = None
) -> list[tuple[str, str]]:
    """(kind, thread id) of the first n events of the resource's threads resumed from the cursor."""
    stream = await threads.watch(resource, principal=OPEN, after=cursor, changed_since=changed_since)
    try:
        return [
            (payload["kind"], record.id)
            for payload, record in [await asyncio.wait_for(anext(stream), 10) for _ in range(n)]
        ]
    finally:
        await stream.aclose()


def _edit(message_id: str, text: str) -> MessagePatch:
    return MessagePatch(message_id, content={"parts": [{"type": "text", "text": text}]})


async def _replayed(stream: Any, n: int) -> list[tuple[str, str, str, str]]:
    """(kind, message id, its thread, its text) of the next n events."""
    events = []
    for _ in range(n):
        payload, record = await asyncio.wait_for(anext(stream), 10)
        events.append((payload["kind"], record.id, record.thread_id, _text(record)))
    return events


async def test_a_message_saved_before_its_threads_newest_one_is_a_change_of_the_messages_before(
    services: Services, repository: Repository
) -> None:
    """A client resumed after a cursor of the thread's newest message never reads a message saved
    later but placed before it (its createdAt is older: the saving client's own clock, a replica's
    clock behind another's, an import filling in history); with changedSince, it is replayed."""
    thread_id, m = await _thread(services, 3)  # createdAt t, t+1s, t+2s
    cursor = cursors.encode(*m[2].order_key)
    since = now_ms()

    def new(n: int, created_at: int) -> MessageInput:
        content = {"format": 2, "parts": [{"type": "text", "text": f"late{n}"}]}
        return MessageInput(
            thread_id, "user", content, id=f"{thread_id}-late{n}", resource_id="r", created_at=created_at
        )

    top = m[2].created_at
    await services.messages.save(
        [new(0, top - 500), new(1, top), new(2, top + 1)],
        principal=OPEN,  # before, a tie, after
    )
    assert [c.message_id for c in await repository.changes_since(thread_id, 0, 10)] == [f"{thread_id}-late0"]
    # An import filling in history is such a save too.
    late = dataclasses.replace(m[0], id=f"{thread_id}-late3", created_at=m[0].created_at + 1)
    await import_jsonl(repository, [dumps_line(message_line(_said(late, "late3")))])
    assert len(await repository.changes_since(thread_id, 0, 10)) == 2

    stream = await services.messages.watch(thread_id, principal=OPEN, after=cursor, changed_since=since)
    try:
        assert await _replayed(stream, 4) == [
            ("UPDATED", f"{thread_id}-late0", thread_id, "late0"),
            ("UPDATED", f"{thread_id}-late3", thread_id, "late3"),
            ("SAVED", f"{thread_id}-late1", thread_id, "late1"),  # after the cursor: read as before
            ("SAVED", f"{thread_id}-late2", thread_id, "late2"),
        ]
    finally:
        await stream.aclose()


async def test_an_import_records_the_messages_it_overwrites_while_a_server_keeps_changes(
    services: Services, repository: Repository
) -> None:
    """`recallql import` runs in a process of its own: whether a server keeps changes is read from the
    change journal, not from that process's setting."""
    thread_id, m = await _thread(services, 3)
    cursor = cursors.encode(*m[2].order_key)
    since = now_ms()
    lines = [dumps_line(message_line(_said(m[0], "imported"))), dumps_line(message_line(m[1]))]
    report = await import_jsonl(repository, lines)
    assert (report.stats["message"].updated, report.stats["message"].unchanged) == (1, 1)
    assert [c.message_id for c in await repository.changes_since(thread_id, since, 10)] == [m[0].id]
    stream = await services.messages.watch(thread_id, principal=OPEN, after=cursor, changed_since=since)
    try:
        assert await _replayed(stream, 1) == [("UPDATED", m[0].id, thread_id, "imported")]
    finally:
        await stream.aclose()

    await repository.close_change_journal()  # no server keeps changes: an import records none either
    await import_jsonl(repository, [dumps_line(message_line(_said(m[1], "imported")))])
    assert await repository.changes_since(thread_id, 0, 10) == []


async def test_a_message_moved_away_then_deleted_elsewhere_is_announced_deleted_where_it_was(
    services: Services, repository: Repository
) -> None:
    """The thread it left kept its move; once it is deleted in the thread it joined (by deleteMessages
    or with that whole thread), that change becomes its deletion: a client of the thread it left, away
    for both, would otherwise hear nothing (the message no longer is, to be sent as it is now)."""
    thread_id, m = await _thread(services, 4)
    other, _ = await _thread(services, 0)
    third, _ = await _thread(services, 0)
    cursor = cursors.encode(*m[3].order_key)
    since = now_ms()
    messages = services.messages
    await messages.update([MessagePatch(m[0].id, thread_id=other)], principal=OPEN)
    await messages.update([MessagePatch(m[1].id, thread_id=third)], principal=OPEN)
    await messages.update([MessagePatch(m[2].id, thread_id=other)], principal=OPEN)  # and stays there
    await messages.delete([m[0].id], principal=OPEN)
    await services.threads.delete(third, principal=OPEN)

    stream = await messages.watch(thread_id, principal=OPEN, after=cursor, changed_since=since)
    try:
        assert await _replayed(stream, 3) == [
            ("UPDATED", m[2].id, other, "m2"),
            ("DELETED", m[0].id, other, "m0"),  # as last stored, in the thread it joined
            ("DELETED", m[1].id, third, "m1"),
        ]
    finally:
        await stream.aclose()
    # The thread it joined keeps its own record of it: the deletion, once.
    assert _summary(await repository.changes_since(other, 0, 10))[-1][::2] == (m[0].id, "m0")


async def test_a_thread_deleted_while_away_replays_its_messages_deleted(
    services: Services, repository: Repository
) -> None:
    """A live subscriber hears DELETED for each message of a deleted thread; one resuming with
    changedSince hears the same, the messages as last stored."""
    thread_id, m = await _thread(services, 3)
    cursor = cursors.encode(*m[2].order_key)
    since = now_ms()
    await services.messages.update([_edit(m[0].id, "edited")], principal=OPEN)
    await services.threads.delete(thread_id, principal=OPEN)
    stream = await services.messages.watch(thread_id, principal=OPEN, after=cursor, changed_since=since)
    try:
        assert sorted(await _replayed(stream, 3)) == [
            ("DELETED", m[0].id, thread_id, "edited"),
            ("DELETED", m[1].id, thread_id, "m1"),
            ("DELETED", m[2].id, thread_id, "m2"),
        ]
    finally:
        await stream.aclose()


async def test_a_resumed_subscription_replays_the_changes_since_a_time_before_what_came_after(
    services: Services,
) -> None:
    """The client has m0..m3 and heard its last event at `since`. Meanwhile m0 was edited, m1 deleted,
    m2 moved away; m4 (after the cursor) edited, m5 (after it too) deleted, m6 saved."""
    thread_id, m = await _thread(services, 6)
    other, _ = await _thread(services, 0)
    cursor = cursors.encode(*m[3].order_key)
    since = now_ms()
    messages = services.messages
    await messages.update([_edit(m[0].id, "edited")], principal=OPEN)
    await messages.delete([m[1].id], principal=OPEN)
    await messages.update([MessagePatch(m[2].id, thread_id=other)], principal=OPEN)
    await messages.update([_edit(m[4].id, "edited")], principal=OPEN)
    await messages.delete([m[5].id], principal=OPEN)
    m6 = MessageInput(thread_id, "user", {"format": 2, "parts": [{"type": "text", "text": "m6"}]}, id="m6")
    await messages.save([m6], principal=OPEN)

    stream = await messages.watch(thread_id, principal=OPEN, after=cursor, changed_since=since)
    try:
        assert await _replayed(stream, 5) == [
            ("UPDATED", m[0].id, thread_id, "edited"),
            ("DELETED", m[1].id, thread_id, "m1"),
            ("UPDATED", m[2].id, other, "m2"),  # as the live event on the thread it left
            ("SAVED", m[4].id, thread_id, "edited"),  # after the cursor: as stored now
            ("SAVED", "m6", thread_id, "m6"),
        ]
        # Then live; an update to the state the replay gave is no repeat of it.
        await messages.update([_edit(m[0].id, "live")], principal=OPEN)
        assert await _replayed(stream, 1) == [("UPDATED", m[0].id, thread_id, "live")]
    finally:
        await stream.aclose()

    # Changes are stamped when written and may be published up to a while later: a replay starts 30 s
    # before changedSince, and not more.
    grace = CHANGE_GRACE_MS
    for since_then, changes in ((now_ms() + grace - 5_000, 3), (now_ms() + grace + 5_000, 0)):
        stream = await messages.watch(thread_id, principal=OPEN, after=cursor, changed_since=since_then)
        try:
            events = await _replayed(stream, changes + 2)
            assert (
                sorted(kind for kind, *_ in events[:changes])
                == ["DELETED", "UPDATED", "UPDATED"][3 - changes :]
            )
            assert [(kind, message_id) for kind, message_id, *_ in events[changes:]] == [
                ("SAVED", m[4].id),
                ("SAVED", "m6"),
            ]
        finally:
            await stream.aclose()


async def test_changed_since_needs_a_cursor_a_kept_time_and_a_bounded_replay(
    services: Services, repository: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread_id, m = await _thread(services, 4)
    cursor = cursors.encode(*m[3].order_key)
    # By default a server keeps no changes: its writes record none, and changedSince is refused.
    default = Services.build(repository, memory_defaults=dict(BUILTIN_DEFAULTS)).messages
    await default.update([_edit(m[0].id, "unkept")], principal=OPEN)
    await default.delete([m[3].id], principal=OPEN)  # (the cursor stays a place)
    assert await repository.changes_since(thread_id, 0, 10) == []
    with pytest.raises(BadUserInput, match="this one keeps none") as refused:
        await default.watch(thread_id, principal=OPEN, after=cursor, changed_since=now_ms())
    assert refused.value.extensions["limit"] == "changeRetention"

    messages = services.messages
    with pytest.raises(BadUserInput, match="changedSince needs after") as refused:
        await messages.watch(thread_id, principal=OPEN, changed_since=now_ms())
    assert refused.value.extensions == {"code": "BAD_USER_INPUT", "argument": "changedSince"}
    day = 86_400_000
    # (As if this server had kept changes for two days.)
    await repository.close_change_journal()
    assert await repository.open_change_journal(now_ms() - 2 * day) < now_ms() - 2 * day + 1000
    with pytest.raises(BadUserInput, match="Changes are kept for 86400 seconds") as refused:
        await messages.watch(thread_id, principal=OPEN, after=cursor, changed_since=now_ms() - day - 60_000)
    assert refused.value.extensions["limit"] == "changeRetention"
    kept = await messages.watch(
        thread_id, principal=OPEN, after=cursor, changed_since=now_ms() - day + 60_000
    )
    await kept.aclose()

    since = now_ms()
    await messages.update([_edit(m[n].id, "edited") for n in range(3)], principal=OPEN)
    monkeypatch.setattr(MessageService, "MAX_RESUMED", 2)
    stream = await messages.watch(thread_id, principal=OPEN, after=cursor, changed_since=since)
    with pytest.raises(BadUserInput, match="More than 2 messages came after this cursor or changed since"):
        await anext(stream)
    await stream.aclose()


async def test_changed_since_from_before_changes_were_kept_is_refused(
    services: Services, repository: Repository
) -> None:
    """Changes made while no server kept them are in no replay: a changedSince from before the journal
    was opened is refused, not answered without them."""
    thread_id, m = await _thread(services, 3)
    cursor = cursors.encode(*m[2].order_key)
    # A server keeping none starts, and reads: the journal stays open. Its first write closes the
    # journal and forgets what was kept (its writes would be missing from it).
    reading = Services.build(repository, memory_defaults=dict(BUILTIN_DEFAULTS))
    default = reading.messages
    await services.messages.update([_edit(m[0].id, "kept")], principal=OPEN)
    await default.start_journal()
    await default.run_pruner()  # (returns at once: nothing to prune)
    assert len((await reading.recall.recall(RecallArgs(thread_id=thread_id), principal=OPEN)).messages) == 3
    assert await repository.change_journal_since() is not None
    unrecorded = now_ms()
    await default.update([_edit(m[1].id, "unrecorded")], principal=OPEN)
    assert await repository.change_journal_since() is None
    assert await repository.changes_since(thread_id, 0, 10) == []
    messages = services.messages
    with pytest.raises(BadUserInput, match="keeps changes, but none yet") as refused:
        await messages.watch(thread_id, principal=OPEN, after=cursor, changed_since=unrecorded)
    assert refused.value.extensions == {
        "code": "BAD_USER_INPUT",
        "argument": "changedSince",
        "limit": "changeRetention",
    }

    # A server keeping changes starts again: from then on, a replay can be complete.
    await messages.start_journal()
    begun = await repository.change_journal_since()
    assert begun is not None and unrecorded <= begun <= now_ms()
    await messages.start_journal()  # (a replica starting later leaves the journal's time alone)
    assert await repository.change_journal_since() == begun
    with pytest.raises(BadUserInput, match=f"but those since {to_iso(begun)}, and changedSince is older"):
        await messages.watch(thread_id, principal=OPEN, after=cursor, changed_since=unrecorded)
    await messages.update([_edit(m[2].id, "recorded")], principal=OPEN)
    stream = await messages.watch(thread_id, principal=OPEN, after=cursor, changed_since=begun)
    try:
        event, record = await asyncio.wait_for(anext(stream), 10)
        assert (event["kind"], record.id, _text(record)) == ("UPDATED", m[2].id, "recorded")
    finally:
        await stream.aclose()


async def test_changes_past_their_retention_are_pruned(services: Services) -> None:
    """A deleted message's last state is kept to announce its deletion, and no longer."""
    thread_id, m = await _thread(services, 2)
    pruning = MessageService(services.repository, events=services.events, change_retention=0.5)
    task = asyncio.create_task(pruning.run_pruner())
    try:
        await services.messages.delete([m[0].id], principal=OPEN)
        assert [c.message_id for c in await services.repository.changes_since(thread_id, 0, 10)] == [m[0].id]

        async def forgotten() -> bool:
            return await services.repository.changes_since(thread_id, 0, 10) == []

        await eventually(forgotten, timeout=10, what="the change pruned")

        # A replica keeping none closed the journal: a keeping one's pruner opens it again, from then.
        await services.repository.close_change_journal()
        closed = now_ms()

        async def reopened() -> bool:
            return (await services.repository.change_journal_since() or 0) >= closed

        await eventually(reopened, timeout=10, what="the journal opened again")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_server_keeping_no_changes_closes_the_journal_before_its_first_write_once() -> None:
    """Closed once (writes cost nothing more after it), and tried again by the next write when the
    close failed (the write failed with it: no write goes unrecorded while the journal is open)."""

    class Flaky:
        def __init__(self) -> None:
            self.tries = 0

        async def close_change_journal(self) -> None:
            self.tries += 1
            if self.tries < 3:
                raise ConnectionRefusedError("database not reachable yet")

    repository = Flaky()
    unrecorded = UnrecordedWrites(repository, 0)  # type: ignore[arg-type]
    for _ in range(2):
        with pytest.raises(ConnectionRefusedError):
            await unrecorded()
    await unrecorded()
    await unrecorded()
    assert repository.tries == 3
    keeping = UnrecordedWrites(repository, 86_400)  # type: ignore[arg-type]
    await keeping()
    assert repository.tries == 3


async def test_resuming_with_changed_since_over_graphql(keeping: ServerProcess) -> None:
    api, server = Api(keeping.url), keeping
    thread_id = uid("t")
    await api.execute(CREATE, i={"id": thread_id, "resourceId": uid("r")})
    first = [text_message(thread_id=thread_id, id=f"{thread_id}-{n}", created_at=at(n)) for n in range(3)]
    saved = (await api.execute(SAVE, m=first))["saveMessages"]["messages"]
    since = to_iso(now_ms())
    await api.execute(
        UPDATE, m=[{"id": f"{thread_id}-0", "content": {"parts": [{"type": "text", "text": "new"}]}}]
    )
    await api.execute(DELETE, ids=[f"{thread_id}-1"])
    variables = {"t": thread_id, "after": saved[2]["cursor"], "since": since}
    async with subscribed(server.url, CHANGED_EVENTS, **variables) as sub:
        events = [(await sub.next())["messageSaved"] for _ in range(2)]
        assert [(e["kind"], e["messageId"]) for e in events] == [
            ("UPDATED", f"{thread_id}-0"),
            ("DELETED", f"{thread_id}-1"),
        ]
        assert events[0]["message"]["content"]["raw"]["parts"] == [{"type": "text", "text": "new"}]
        assert events[1]["message"]["cursor"] == saved[1]["cursor"]
        await sub.expect_none()
    async with subscribed(server.url, CHANGED_EVENTS, t=thread_id, since=since) as sub:
        with pytest.raises(AssertionError, match="changedSince needs after") as refused:
            await sub.next()
        assert "BAD_USER_INPUT" in str(refused.value)


async def test_resuming_threads_with_changed_since_over_graphql(keeping: ServerProcess) -> None:
    api, resource = Api(keeping.url), uid("r")
    for n in range(3):
        await api.execute(CREATE, i={"id": f"{resource}-{n}", "resourceId": resource})
    page = (await api.execute(THREADS, r=resource))["threads"]
    since = to_iso(now_ms())
    await api.execute(DELETE_THREAD, id=f"{resource}-0")
    variables = {"r": resource, "after": page["startCursor"], "since": since}
    async with subscribed(keeping.url, RESUMED_THREADS, **variables) as sub:
        deleted = (await sub.next())["threadUpdated"]
        assert (deleted["kind"], deleted["threadId"]) == ("DELETED", f"{resource}-0")
    variables["since"] = to_iso(now_ms() - 2 * 86_400_000)
    async with subscribed(keeping.url, RESUMED_THREADS, **variables) as sub:
        with pytest.raises(AssertionError, match="Changes are kept for 86400 seconds") as refused:
            await sub.next()
        assert "BAD_USER_INPUT" in str(refused.value)


async def test_a_server_that_keeps_no_changes_refuses_changed_since(api: Api, server: ServerProcess) -> None:
    thread_id = uid("t")
    await api.execute(CREATE, i={"id": thread_id, "resourceId": uid("r")})
    saved = (await api.execute(SAVE, m=[text_message(thread_id=thread_id)]))["saveMessages"]["messages"]
    variables = {"t": thread_id, "after": saved[0]["cursor"], "since": to_iso(now_ms())}
    async with subscribed(server.url, CHANGED_EVENTS, **variables) as sub:
        with pytest.raises(AssertionError, match="this one keeps none") as refused:
            await sub.next()
        assert "BAD_USER_INPUT" in str(refused.value)


# ---------------------------------------------------------------------------------------------- threads
async def test_a_thread_deletion_is_kept_as_the_thread_was_last_stored(repository: Repository) -> None:
    resource = uid("r")
    threads = [ThreadRecord(uid("t"), resource, f"t{n}", {"n": n}, 1, 1) for n in range(3)]
    for thread in threads:
        assert await repository.insert_thread(thread)
    await repository.delete_thread(threads[0].id, now=1_000, record_changes=True)
    await repository.delete_thread(threads[1].id, now=2_000)  # a server that keeps no changes
    await repository.delete_thread(threads[2].id, now=3_000, record_changes=True)
    assert await repository.thread_deletions_since(resource, 0, 10) == [threads[0], threads[2]]
    assert await repository.thread_deletions_since(resource, 1_001, 10) == [threads[2]]
    assert await repository.thread_deletions_since(uid("r"), 0, 10) == []
    assert await repository.insert_thread(threads[2])  # created anew, deleted again: its latest deletion
    await repository.delete_thread(threads[2].id, now=4_000, record_changes=True)
    assert await repository.thread_deletions_since(resource, 3_500, 10) == [threads[2]]
    assert await repository.prune_changes(2_000) == 1
    assert await repository.thread_deletions_since(resource, 0, 10) == [threads[2]]


async def test_a_resumed_thread_subscription_announces_the_threads_deleted_since_its_cursor(
    services: Services, repository: Repository
) -> None:
    resource = uid("r")
    ids = [f"{resource}-{n}" for n in range(5)]
    for thread_id in ids:
        await services.threads.create(resource_id=resource, thread_id=thread_id, principal=OPEN)
        await asyncio.sleep(0.002)  # updatedAt apart
    listing, _ = await repository.list_threads(
        resource, offset=0, limit=1, order_field="updatedAt", descending=True, counted=False
    )
    top = listing[0]
    cursor = cursors.encode_thread("updatedAt", top.updated_at, top.id)
    await asyncio.sleep(0.002)
    for thread_id in ids[1:3]:
        await services.threads.delete(thread_id, principal=OPEN)
    await services.threads.delete(ids[3], principal=OPEN)
    await services.threads.create(resource_id=resource, thread_id=ids[3], principal=OPEN)  # anew

    assert await _thread_replay(services.threads, resource, cursor, 3) == [
        ("DELETED", ids[1]),
        ("DELETED", ids[2]),
        ("UPDATED", ids[3]),
    ]
    # A server that keeps no changes replays the listing alone.
    default = Services.build(repository, memory_defaults=dict(BUILTIN_DEFAULTS)).threads
    assert await _thread_replay(default, resource, cursor, 1) == [("UPDATED", ids[3])]


async def test_a_thread_subscription_resumed_with_changed_since_replays_the_deletions_since_then(
    services: Services, repository: Repository
) -> None:
    """A quiet sidebar's cursor (its top thread) can be much older than the last event it heard: with
    changedSince, the deletions replayed are those since that event, and a time the kept changes do
    not reach back to is refused instead of answered without the deletions no longer kept."""
    await repository.close_change_journal()  # (as if this server had kept changes for an hour)
    await repository.open_change_journal(now_ms() - 3_600_000)
    resource = uid("r")
    ids = [f"{resource}-{n}" for n in range(4)]
    quiet = now_ms() - 600_000  # nothing in the sidebar changed for ten minutes
    for n, thread_id in enumerate(ids):
        assert await repository.insert_thread(ThreadRecord(thread_id, resource, "", None, quiet, quiet + n))
    cursor = cursors.encode_thread("updatedAt", quiet + 3, ids[3])
    threads = services.threads
    # Heard live a minute ago, before the client's last event (ids[0] and ids[1] are older than the
    # cursor's top thread: the listing the client has held them).
    await repository.delete_thread(ids[0], now=now_ms() - 60_000, record_changes=True)
    since = now_ms() - 10_000
    await threads.delete(ids[1], principal=OPEN)

    assert await _thread_replay(threads, resource, cursor, 1, since) == [("DELETED", ids[1])]
    assert await _thread_replay(threads, resource, cursor, 2) == [  # deletions since the cursor's time
        ("DELETED", ids[0]),
        ("DELETED", ids[1]),
    ]

    with pytest.raises(BadUserInput, match="changedSince needs after"):
        await threads.watch(resource, principal=OPEN, changed_since=since)
    with pytest.raises(BadUserInput, match="Changes are kept for 86400 seconds") as refused:
        await threads.watch(resource, principal=OPEN, after=cursor, changed_since=now_ms() - 90_000_000)
    assert refused.value.extensions["limit"] == "changeRetention"
    begun = await repository.change_journal_since()
    assert begun is not None
    with pytest.raises(BadUserInput, match=r"keeps changes, but those since .*re-read the listing"):
        await threads.watch(resource, principal=OPEN, after=cursor, changed_since=begun - 1)
    default = Services.build(repository, memory_defaults=dict(BUILTIN_DEFAULTS)).threads
    with pytest.raises(BadUserInput, match="this one keeps none"):
        await default.watch(resource, principal=OPEN, after=cursor, changed_since=since)


async def test_a_thread_given_to_another_resource_leaves_the_old_ones_threads_live_and_resumed(
    services: Services, repository: Repository
) -> None:
    """updateThreadResourceId, heard live and resumed: the old resource's sidebar hears DELETED (the
    thread as it was there), the new one's CREATED live and UPDATED resumed, and the thread's clients
    UPDATED for each message, now of the new resource. Given back, it is no longer gone from the old."""
    old, new = uid("r"), uid("r")
    ids = [f"{old}-{n}" for n in range(3)]
    for thread_id in ids:
        await services.threads.create(resource_id=old, thread_id=thread_id, principal=OPEN)
        await asyncio.sleep(0.002)  # updatedAt apart
    await services.threads.create(resource_id=new, thread_id=uid("t"), principal=OPEN)
    moving = ids[1]
    m = [
        MessageInput(
            moving, "user", {"format": 2, "parts": [{"type": "text", "text": f"m{n}"}]}, id=f"{moving}-m{n}"
        )
        for n in range(2)
    ]
    saved = (await services.messages.save(m, principal=OPEN)).messages
    place: dict[str, str] = {}
    for resource in (old, new):
        (top, *_), _ = await repository.list_threads(
            resource, offset=0, limit=1, order_field="updatedAt", descending=True, counted=False
        )
        place[resource] = cursors.encode_thread("updatedAt", top.updated_at, top.id)
    last_message = cursors.encode(*saved[-1].order_key)
    since = now_ms()
    await asyncio.sleep(0.002)

    streams = [
        await services.threads.watch(old, principal=OPEN),
        await services.threads.watch(new, principal=OPEN),
        await services.messages.watch(moving, principal=OPEN),
    ]
    try:
        first = [
            asyncio.ensure_future(anext(stream)) for stream in streams
        ]  # (a stream subscribes when read)
        await asyncio.sleep(0.05)
        before = await services.threads.get(moving, principal=OPEN)
        moved = await services.threads.transfer(moving, new, principal=OPEN)
        assert before is not None and moved.resource_id == new and moved.created_at == before.created_at
        gone, _ = await asyncio.wait_for(first[0], 10)
        assert (gone["kind"], gone["thread"]) == ("DELETED", dataclasses.asdict(before))
        arrived, record = await asyncio.wait_for(first[1], 10)
        assert (arrived["kind"], record) == ("CREATED", moved)
        heard = [await asyncio.wait_for(first[2], 10)]
        heard += [await asyncio.wait_for(anext(streams[2]), 10) for _ in saved[1:]]
        assert [(p["kind"], r.id, r.resource_id) for p, r in heard] == [("UPDATED", x.id, new) for x in saved]
    finally:
        for stream in streams:
            await stream.aclose()

    assert await _thread_replay(services.threads, old, place[old], 1) == [("DELETED", moving)]
    assert await _thread_replay(services.threads, new, place[new], 1) == [("UPDATED", moving)]
    stream = await services.messages.watch(moving, principal=OPEN, after=last_message, changed_since=since)
    try:
        replayed = [await asyncio.wait_for(anext(stream), 10) for _ in saved]
        assert sorted((p["kind"], r.id, r.resource_id) for p, r in replayed) == [
            ("UPDATED", x.id, new) for x in saved
        ]
    finally:
        await stream.aclose()
    # Given back: the old resource's sidebar hears it changed, not gone; the new one's, gone.
    await services.threads.transfer(moving, old, principal=OPEN)
    assert await _thread_replay(services.threads, old, place[old], 1) == [("UPDATED", moving)]
    assert await _thread_replay(services.threads, new, place[new], 1) == [("DELETED", moving)]


async def test_a_replay_whose_changes_are_not_all_read_is_refused(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Changes after the cursor are read and left out: when they fill the read, a change before the
    cursor behind them would be missed, so the replay is refused as too long instead."""
    thread_id, m = await _thread(services, 6)
    cursor = cursors.encode(*m[2].order_key)
    since = now_ms()
    await services.messages.delete([m[n].id for n in (3, 4, 5)], principal=OPEN)  # after the cursor
    await services.messages.update([_edit(m[0].id, "edited")], principal=OPEN)  # the latest change
    monkeypatch.setattr(MessageService, "MAX_RESUMED", 2)
    stream = await services.messages.watch(thread_id, principal=OPEN, after=cursor, changed_since=since)
    with pytest.raises(BadUserInput, match="More than 2 messages came after this cursor or changed since"):
        await asyncio.wait_for(anext(stream), 10)  # (missing m0's change, it would wait for live events)
    await stream.aclose()
    monkeypatch.setattr(MessageService, "MAX_RESUMED", 4)
    stream = await services.messages.watch(thread_id, principal=OPEN, after=cursor, changed_since=since)
    try:
        assert await _replayed(stream, 1) == [("UPDATED", m[0].id, thread_id, "edited")]
    finally:
        await stream.aclose()
