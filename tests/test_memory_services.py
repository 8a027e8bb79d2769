"""The memory-API services in process: vectors follow SQL through the outbox, events follow commits,
titles are written once, working-memory configuration rules."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sqlite3
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from models import repository as repository_module
from models.db import create_engine
from models.migrate import upgrade
from models.records import MessageRecord, ResourceRecord, ThreadRecord
from models.repository import Repository
from models.vector_index import VectorItem
from resolvers.auth import OPEN, Principal
from resolvers.budget import RowBudget
from resolvers.config import BUILTIN_DEFAULTS
from resolvers.context import RequestContext, Services
from resolvers.errors import BadUserInput, Forbidden, NotFound
from resolvers.events import InProcessBroker, message_channel, thread_channel
from resolvers.messages import MessagePatch
from resolvers.recall import IncludeItem, RecallEngine
from resolvers.threads import CloneOptions
from resolvers.titles import TitleGenerator, TitleOptions
from resolvers.working_memory import (
    USE_REMOVED_ERROR,
    deep_merge_working_memory,
    working_memory_config,
)
from schema import build_schema
from tests.factories import BASE_MS, msg, seed, t
from tests.support import loop_ticks, statements, uid


class RecordingVectors:
    """A VectorSync that settles the outbox like SemanticMemory and records what it saw."""

    def __init__(self, repository: Repository) -> None:
        self.repository = repository
        self.seen: list[tuple[str, str | None, bool]] = []  # (message, previous resource, still in SQL)
        self.stored: list[str] = []  # messages handed over as their request wrote them

    async def sync(self, message_ids: Sequence[str] | None = None) -> int:
        entries, rows = await self.repository.outbox_snapshot(message_ids=message_ids)
        self.seen.extend((e.message_id, e.previous_resource_id, e.message_id in rows) for e in entries)
        await self.repository.outbox_done([e.id for e in entries if e.id is not None])
        return len(entries)

    async def release(self, message_ids: Sequence[str]) -> None:
        await self.repository.outbox_release(message_ids)

    background = False

    async def room(self, timeout: float) -> bool:
        return True

    def submit(
        self,
        message_ids: Sequence[str],
        resource_ids: Iterable[str | None],
        stored: Sequence[MessageRecord] = (),
        known: Mapping[str, Sequence[VectorItem]] | None = None,
    ) -> asyncio.Future[None]:
        self.stored.extend(m.id for m in stored)
        return asyncio.ensure_future(self.sync(message_ids))

    async def copied_vectors(
        self, pairs: Sequence[tuple[MessageRecord, MessageRecord]], *, moved: bool = False
    ) -> dict[str, list[VectorItem]]:
        return {}


@pytest.fixture
def vectors(repository: Repository) -> RecordingVectors:
    return RecordingVectors(repository)


@pytest.fixture
def memory(repository: Repository, vectors: RecordingVectors) -> Services:
    return Services.build(repository, memory_defaults=dict(BUILTIN_DEFAULTS), semantic=vectors)  # type: ignore[arg-type]


async def test_every_message_change_reaches_the_vectors(memory: Services, vectors: RecordingVectors) -> None:
    await seed(memory, msg("m1"), msg("m2"), threads={"t1": "r1", "t2": "r2"})
    assert vectors.seen == [("m1", None, True), ("m2", None, True)]
    # Saves, updates and clones hand over the rows they wrote (a head start for the embedder).
    assert vectors.stored == ["m1", "m2"]
    vectors.seen.clear()
    vectors.stored.clear()

    await memory.messages.update(
        [MessagePatch("m1", content={"parts": [{"type": "text", "text": "new"}]})], principal=OPEN
    )
    assert vectors.seen == [("m1", "r1", True)]
    vectors.seen.clear()
    # A move to another resource's thread: the old collection is named for the clean-up.
    await memory.messages.update([MessagePatch("m1", thread_id="t2")], principal=OPEN)
    assert vectors.seen == [("m1", "r1", True)]
    assert (await memory.repository.get_messages(["m1"]))["m1"].resource_id == "r2"
    assert vectors.stored == ["m1", "m1"]  # one update each; never the old version of a moved one
    vectors.seen.clear()
    vectors.stored.clear()

    clone = await memory.threads.clone("t1", new_thread_id="t1-copy", principal=OPEN)
    assert [(m, prev, alive) for m, prev, alive in vectors.seen] == [(clone.messages[0].id, None, True)]
    assert vectors.stored == [clone.messages[0].id]
    vectors.seen.clear()
    vectors.stored.clear()

    await memory.messages.delete(["m1", "ghost"], principal=OPEN)
    assert vectors.seen == [("m1", "r2", False)]
    vectors.seen.clear()
    assert await memory.threads.delete("t1", principal=OPEN) is True
    assert vectors.seen == [("m2", "r1", False)]
    assert vectors.stored == []  # deletions have nothing to embed
    assert await memory.repository.outbox_backlog() == 0


async def test_a_failed_update_queues_nothing(memory: Services, vectors: RecordingVectors) -> None:
    await seed(memory, msg("m1"), msg("m2"))
    vectors.seen.clear()
    with pytest.raises(BadUserInput, match=r"messages\[1\]\.content\.format must be 2\."):
        await memory.messages.update(
            [MessagePatch("m1", role="assistant"), MessagePatch("m2", content={"format": 1})], principal=OPEN
        )
    assert vectors.seen == [] and await memory.repository.outbox_backlog() == 0
    assert (await memory.repository.get_messages(["m1"]))["m1"].role == "user"


async def test_events_follow_commits(memory: Services) -> None:
    broker = memory.events
    assert isinstance(broker, InProcessBroker)
    messages, threads = broker.subscribe(message_channel("t1")), broker.subscribe(thread_channel("r1"))
    first = [asyncio.ensure_future(anext(messages)), asyncio.ensure_future(anext(threads))]
    await asyncio.sleep(0)
    await memory.threads.create(resource_id="r1", thread_id="t1", principal=OPEN)
    assert (await first[1])["kind"] == "CREATED"
    await memory.messages.save([msg("m1")], principal=OPEN)
    assert (await first[0])["kind"] == "SAVED"
    assert (await anext(threads))["kind"] == "UPDATED"
    # A failed call publishes nothing.
    with pytest.raises(BadUserInput):
        await memory.messages.update([MessagePatch("m1", content={"format": 3})], principal=OPEN)
    with pytest.raises(NotFound):
        await memory.threads.clone("ghost", principal=OPEN)
    pending = asyncio.ensure_future(anext(messages))
    await asyncio.sleep(0.05)
    assert not pending.done()
    await memory.messages.delete(["m1"], principal=OPEN)
    assert (await pending)["kind"] == "DELETED"
    await messages.aclose()
    await threads.aclose()


async def test_a_re_save_into_another_thread_changes_the_thread_it_leaves(memory: Services) -> None:
    """As updateMessages does for a move: the old thread's updatedAt is bumped and its subscribers hear
    of the message leaving (a re-save left the old thread looking unchanged)."""
    broker = memory.events
    assert isinstance(broker, InProcessBroker)
    old, new = uid("t-old"), uid("t-new")
    for thread_id in (old, new):
        await memory.threads.create(resource_id="r1", thread_id=thread_id, principal=OPEN)
    await memory.messages.save([msg("m-moving", thread=old)], principal=OPEN)
    before = (await memory.repository.get_threads([old]))[old].updated_at
    messages, threads = broker.subscribe(message_channel(old)), broker.subscribe(thread_channel("r1"))
    pending = [asyncio.ensure_future(anext(messages)), asyncio.ensure_future(anext(threads))]
    await asyncio.sleep(0)
    await asyncio.sleep(0.002)  # updatedAt has millisecond resolution
    await memory.messages.save([msg("m-moving", thread=new)], principal=OPEN)
    left = await asyncio.wait_for(pending[0], 5)
    assert (left["kind"], left["threadId"], left["message"]["thread_id"]) == ("SAVED", old, new), left
    updated = {
        (await asyncio.wait_for(pending[1], 5))["thread"]["id"],
        (await anext(threads))["thread"]["id"],
    }
    assert updated == {old, new}
    stored = await memory.repository.get_threads([old, new])
    assert stored[old].updated_at > before and stored[old].updated_at == stored[new].updated_at
    await messages.aclose()
    await threads.aclose()


async def test_a_save_meets_a_thread_deleted_after_it_read_the_owner(
    memory: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message without a resourceId takes its thread's owner, read before the write. A deleteThread
    that commits in between used to leave the new messages in the deleted thread (36 of 40 tries on
    PostgreSQL); now the write finds the thread gone, and the save starts again from what is stored:
    as if it came after the delete."""
    repo = memory.repository
    thread = await memory.threads.create(resource_id="r-race", thread_id=uid("t"), principal=OPEN)
    read_owners = repo.get_threads
    deleted: list[bool] = []

    async def owners_then_delete(ids: Sequence[str]) -> dict[str, ThreadRecord]:
        found = await read_owners(ids)
        if not deleted:
            deleted.append(await memory.threads.delete(thread.id, principal=OPEN))
        return found

    monkeypatch.setattr(repo, "get_threads", owners_then_delete)
    with pytest.raises(BadUserInput, match=f"resourceId is required when thread {thread.id} does not exist"):
        await memory.messages.save([msg("m1", thread=thread.id, resource=None)], principal=OPEN)
    assert deleted == [True]
    assert await repo.get_messages(["m1"]) == {}
    # A thread given to another resource in between: the messages take the new owner.
    await memory.threads.create(resource_id="r-first", thread_id=thread.id, principal=OPEN)
    deleted.clear()

    async def owners_then_recreate(ids: Sequence[str]) -> dict[str, ThreadRecord]:
        found = await read_owners(ids)
        if not deleted:
            deleted.append(await memory.threads.delete(thread.id, principal=OPEN))
            await memory.threads.create(resource_id="r-second", thread_id=thread.id, principal=OPEN)
        return found

    monkeypatch.setattr(repo, "get_threads", owners_then_recreate)
    saved = await memory.messages.save([msg("m2", thread=thread.id, resource=None)], principal=OPEN)
    assert [m.resource_id for m in saved.messages] == ["r-second"]


async def test_clone_selection_keeps_the_tie_order(memory: Services) -> None:
    # Three messages at the same instant: the clone keeps their insertion order.
    await seed(memory, msg("a", at=1), msg("b", at=1), msg("c", at=1), msg("d", at=2))
    result = await memory.threads.clone("t1", options=CloneOptions(message_limit=3), principal=OPEN)
    assert [m.content["parts"][0]["text"] for m in result.messages] == ["text b", "text c", "text d"]
    assert [m.created_at for m in result.messages] == [t(1), t(1), t(2)]
    assert list(result.message_id_map) == ["b", "c", "d"]


async def test_clone_takes_more_message_ids_than_a_statement_binds(memory: Services) -> None:
    """40,000 ids were an INTERNAL_SERVER_ERROR: more parameters than asyncpg (32,767) or SQLite
    (32,766) bind. A long list selects exactly what a short one does, messageLimit included."""
    await seed(memory, msg("a", at=1), msg("b", at=1), msg("c", at=1), msg("d", at=2), msg("e", at=3))
    unknown = [f"x{n}" for n in range(40_000)]
    for limit in (None, 2):
        short = CloneOptions(message_ids=["a", "c", "d"], message_limit=limit)
        long = CloneOptions(
            message_ids=[*unknown[:20_000], "d", "a", "c", "a", *unknown[20_000:]], message_limit=limit
        )
        expected = await memory.threads.clone("t1", options=short, principal=OPEN)
        cloned = await memory.threads.clone("t1", options=long, principal=OPEN)
        assert (
            list(cloned.message_id_map) == list(expected.message_id_map) == ["a", "c", "d"][-(limit or 3) :]
        )
        assert [m.created_at for m in cloned.messages] == [m.created_at for m in expected.messages]


class SlowChat:
    def __init__(self) -> None:
        self.calls = 0
        self.release = asyncio.Event()

    async def complete(self, messages: list[dict[str, str]], *, model: str | None = None) -> str:
        self.calls += 1
        await self.release.wait()
        return "Model title"

    async def aclose(self) -> None:
        return None


async def test_titles_are_written_once_and_never_over_a_user_title(memory: Services) -> None:
    await seed(memory, msg("m1", text="hello there"))
    chat = SlowChat()
    titles = TitleGenerator(memory.repository, chat=chat, events=memory.events)
    titles.schedule(["t1"], TitleOptions())
    titles.schedule(["t1"], TitleOptions())  # already in progress: not twice
    await asyncio.sleep(0.05)
    assert chat.calls == 1
    await memory.threads.update("t1", title="User title", principal=OPEN)
    chat.release.set()
    await titles.wait_idle()
    assert (await memory.threads.get("t1", principal=OPEN)).title == "User title"  # type: ignore[union-attr]
    # Two generators racing on an untitled thread: one write wins, the other changes nothing.
    await memory.threads.create(resource_id="r1", thread_id="t2", principal=OPEN)
    await memory.messages.save([msg("m2", thread="t2", text="second")], principal=OPEN)
    first, second = await asyncio.gather(
        memory.titles.generate("t2", TitleOptions()), memory.titles.generate("t2", TitleOptions())
    )
    assert [r is not None for r in (first, second)].count(True) == 1
    thread = await memory.threads.get("t2", principal=OPEN)
    assert thread is not None and thread.title == "second"


def test_working_memory_config_rules() -> None:
    cfg = working_memory_config({"workingMemory": {"enabled": True}})
    assert (cfg.enabled, cfg.scope, cfg.schema) == (True, "resource", None)
    with pytest.raises(BadUserInput, match="^" + USE_REMOVED_ERROR + "$"):
        working_memory_config({"workingMemory": {"enabled": True, "use": "text-stream"}})
    for bad in ({"scope": "global"}, {"template": 3}, {"schema": [1]}, {"schema": {"type": "nope"}}):
        with pytest.raises(BadUserInput):
            working_memory_config({"workingMemory": bad})


def test_deep_merge_working_memory_is_mastras() -> None:
    existing: dict[str, Any] = {"a": {"x": 1, "y": 2}, "list": [1, 2], "gone": 1}
    merged = deep_merge_working_memory(existing, {"a": {"y": None, "z": 3}, "list": [3], "gone": None})
    assert merged == {"a": {"x": 1, "z": 3}, "list": [3]}
    assert existing == {"a": {"x": 1, "y": 2}, "list": [1, 2], "gone": 1}  # not mutated
    assert deep_merge_working_memory(None, {"n": {"m": None}}) == {"n": {}}
    assert deep_merge_working_memory({"k": 1}, {}) == {"k": 1}


async def test_messages_in_order_per_resource_and_the_resources_holding_messages(memory: Services) -> None:
    await seed(
        memory,
        msg("a", resource="r1"),
        msg("b", thread="t2", resource="r2"),
        threads={"t1": "r1", "t2": "r2"},
    )
    repository = memory.repository
    # Saves always file a message under a resource (the thread's by default); Mastra data may hold
    # messages without one, which an import keeps.
    content = {"format": 2, "parts": [{"type": "text", "text": "no resource"}]}
    await repository.import_messages([MessageRecord("c", "t1", None, "user", "v2", t(3), content)], now=t(3))
    await seed(memory, msg("d", resource="r1", at=4), threads={})

    async def ids(**where: Any) -> list[str]:
        return [m.id for m in await repository.messages_in_order(after=None, limit=10, **where)]

    assert await repository.message_resource_ids() == [None, "r1", "r2"]
    assert await ids() == ["a", "b", "c", "d"]
    assert await ids(resource_id="r1") == ["a", "d"]
    assert await ids(without_resource=True) == ["c"]
    await memory.messages.delete(["b"], principal=OPEN)
    assert await repository.message_resource_ids() == [None, "r1"]  # r2 holds no message any more


async def test_messages_in_order_pages_through_a_resource_by_its_index(memory: Services) -> None:
    # Saved out of createdAt order, with ties: a resource's pages follow (createdAt, seq), every
    # message once, whatever the page size.
    times = [5, 1, 3, 3, 9, 1, 7, 3, 2, 8, 1]
    await seed(
        memory,
        *(msg(f"m{n:02d}", resource="r1", at=at) for n, at in enumerate(times)),
        msg("other", thread="t2", resource="r2", at=4),
        threads={"t1": "r1", "t2": "r2"},
    )
    repository = memory.repository
    expected = [f"m{n:02d}" for n in sorted(range(len(times)), key=lambda n: (times[n], n))]
    for size in (1, 2, 3, 4, 100):
        seen: list[str] = []
        after: MessageRecord | None = None
        while page := await repository.messages_in_order(after=after, limit=size, resource_id="r1"):
            assert len(page) <= size
            seen.extend(m.id for m in page)
            after = page[-1]
        assert seen == expected, size
    everything: list[str] = []
    after = None
    while page := await repository.messages_in_order(after=after, limit=3):
        everything.extend(m.id for m in page)
        after = page[-1]
    assert sorted(everything) == sorted([*expected, "other"]) and len(everything) == len(set(everything))
    if not repository.is_postgres:
        # Each page is a range of the resource index, not a sort of the resource's rows.
        stmt = repository._in_order_statement(
            after=(await repository.get_messages([expected[3]]))[expected[3]],
            limit=2,
            resource_id="r1",
            without_resource=False,
        )
        sql = str(stmt.compile(repository.engine.sync_engine, compile_kwargs={"literal_binds": True}))
        async with repository.engine.connect() as conn:
            plan = " / ".join(row[-1] for row in (await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}")))
        assert "ix_messages_resource_order" in plan and "TEMP B-TREE" not in plan, plan


@pytest.fixture
async def sqlite_repository(tmp_path: Path) -> AsyncIterator[tuple[Repository, Path]]:
    """A repository on a SQLite file of its own, whatever engines the suite runs, and that file."""
    path = tmp_path / "own.db"
    engine = create_engine(f"sqlite+aiosqlite:///{path}")
    await upgrade(engine)
    repository = Repository(engine)
    try:
        yield repository, path
    finally:
        repository.close()
        await engine.dispose()


@contextlib.contextmanager
def held_write_lock(path: Path) -> Iterator[None]:
    """Another connection holds the SQLite database's write lock while inside."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        holder.execute("COMMIT")
        holder.close()


async def test_outbox_snapshot_on_sqlite_reads_entries_and_rows_at_one_moment(
    sqlite_repository: tuple[Repository, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The pipeline's read runs on a plain SQLite connection: entries and rows must still come from one
    # read transaction, so a change committed between its two statements is not seen by the second.
    repository, path = sqlite_repository
    services = Services.build(repository, memory_defaults=dict(BUILTIN_DEFAULTS))
    await seed(services, msg("m1", text="before"))
    records = await repository.get_messages(["m1"])
    await repository.save_messages(list(records.values()), now=t(1), track_vectors=True)
    select_messages = repository_module._select_messages

    def changed_in_between(conn: Any, ids: Sequence[str]) -> dict[str, MessageRecord]:
        with sqlite3.connect(path) as other:
            content = '{"format":2,"parts":[{"type":"text","text":"after"}]}'
            other.execute("UPDATE messages SET content = ? WHERE id = 'm1'", (content,))
        return select_messages(conn, ids)

    monkeypatch.setattr(repository_module, "_select_messages", changed_in_between)
    entries, rows = await repository.outbox_snapshot(message_ids=["m1"])
    assert [e.message_id for e in entries] == ["m1"]
    assert rows["m1"].content["parts"][0]["text"] == "before"
    monkeypatch.undo()
    assert (await repository.get_messages(["m1"]))["m1"].content["parts"][0]["text"] == "after"


async def test_sqlite_save_waits_for_the_write_lock_off_the_event_loop(
    sqlite_repository: tuple[Repository, Path],
) -> None:
    # A save's transaction runs in one step on a worker thread: while another connection holds the
    # write lock, the save waits there and the event loop keeps running.
    repository, path = sqlite_repository
    services = Services.build(repository, memory_defaults=dict(BUILTIN_DEFAULTS))
    await seed(services, msg("m1"))
    with held_write_lock(path):
        save = asyncio.create_task(services.messages.save([msg("m2", at=1)], principal=OPEN))
        async with loop_ticks(0.005) as ticks:
            await asyncio.sleep(0.3)
        assert not save.done() and ticks[0] >= 20  # blocked on the lock, not the loop
    assert [m.id for m in (await save).messages] == ["m2"]
    stored = await repository.get_messages(["m1", "m2"])
    assert sorted(stored) == ["m1", "m2"] and stored["m2"].seq > stored["m1"].seq


async def test_sqlite_writes_waiting_for_the_lock_leave_the_reads_their_threads(
    sqlite_repository: tuple[Repository, Path],
) -> None:
    # More writes wait for the database lock than the default executor has threads (min(32, cores + 4)):
    # they queue for the one writer thread, and a read that needs a worker thread still runs.
    repository, path = sqlite_repository
    await seed(Services.build(repository, memory_defaults=dict(BUILTIN_DEFAULTS)), msg("m1"))
    with held_write_lock(path):
        writes = [
            asyncio.create_task(repository.update_thread("t1", title=f"title {n}", metadata=None, now=t(n)))
            for n in range(40)
        ]
        await asyncio.sleep(0.2)
        assert await asyncio.wait_for(repository.thread_resource_ids("t1"), timeout=5) == ["r1"]
        assert not any(w.done() for w in writes)
    await asyncio.gather(*writes)
    assert (await repository.get_thread("t1")).title == "title 39"  # in the order they came


class _NoAsyncEngine:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a SQLite write went through the aiosqlite engine ({name})")


def _writes(now: int) -> dict[str, Any]:
    """Every write of the repository, as a function of it (over the data `seed` left: t1/r1, m1, m2)."""

    def clone(
        source: ThreadRecord, selected: list[MessageRecord]
    ) -> tuple[ThreadRecord, list[MessageRecord]]:
        copy = dataclasses.replace(source, id="t2", resource_id="r2", created_at=now, updated_at=now)
        return copy, [
            dataclasses.replace(m, id=f"c-{m.id}", thread_id="t2", resource_id="r2") for m in selected
        ]

    def retitle(before: dict[str, MessageRecord], _threads: dict[str, ThreadRecord]) -> list[MessageRecord]:
        return [dataclasses.replace(m, role="assistant") for m in before.values()]

    thread = ThreadRecord(id="t3", resource_id="r3", title="", metadata=None, created_at=now, updated_at=now)
    return {
        "insert_thread": lambda r: r.insert_thread(thread),
        "save_messages": lambda r: r.save_messages([_MESSAGE], now=now, track_vectors=True),
        "update_thread": lambda r: r.update_thread("t1", title="new", metadata={"k": 1}, now=now),
        "set_title_if_untitled": lambda r: r.set_title_if_untitled("t1", "r1", "generated", now=now),
        "delete_messages": lambda r: r.delete_messages(["m1"], now=now, track_vectors=True),
        "update_messages": lambda r: r.update_messages(["m1", "m2"], retitle, now=now, track_vectors=True),
        "delete_thread": lambda r: r.delete_thread("t1", now=now, track_vectors=True),
        "clone_thread": lambda r: r.clone_thread("t1", clone, now=now, track_vectors=True),
        "resource_working_memory": lambda r: r.modify_resource_working_memory("r1", lambda _: "wm", now=now),
        "thread_working_memory": lambda r: r.modify_thread_working_memory("t1", lambda _: "wm", now=now),
        "import_resources": lambda r: r.import_resources(
            [ResourceRecord(id="r9", working_memory=None, metadata={}, created_at=now, updated_at=now)]
        ),
        "import_threads": lambda r: r.import_threads([thread]),
        "import_messages": lambda r: r.import_messages([_MESSAGE], now=now),
        "outbox_release": lambda r: r.outbox_release(["m1"]),
        "outbox_done": lambda r: r.outbox_done([1]),
    }


_MESSAGE = MessageRecord(
    id="m0",
    thread_id="t1",
    resource_id="r1",
    role="user",
    type="text",
    created_at=BASE_MS,
    content={"format": 2, "parts": [{"type": "text", "text": "imported"}]},
)


@pytest.mark.parametrize("write", sorted(_writes(0)))
async def test_sqlite_writes_run_in_one_step_on_a_plain_connection(
    sqlite_repository: tuple[Repository, Path], monkeypatch: pytest.MonkeyPatch, write: str
) -> None:
    # Every write transaction on SQLite is one worker-thread hop on a plain connection (BEGIN
    # IMMEDIATE ... COMMIT), never a hop through aiosqlite per statement.
    repository, path = sqlite_repository
    services = Services.build(repository, memory_defaults=dict(BUILTIN_DEFAULTS))
    await seed(services, msg("m1", at=1), msg("m2", at=2))
    await repository.save_messages(
        list((await repository.get_messages(["m1"])).values()), now=t(3), track_vectors=True
    )
    before = _dump(path)
    hops = 0
    write_sync = repository._write_sync

    def counted(body: Any) -> Any:
        nonlocal hops
        hops += 1
        return write_sync(body)

    monkeypatch.setattr(repository, "_write_sync", counted)
    monkeypatch.setattr(repository, "engine", _NoAsyncEngine())
    await _writes(t(10))[write](repository)
    monkeypatch.undo()
    assert hops == 1
    assert _dump(path) != before  # it wrote


def _dump(path: Path) -> dict[str, list[Any]]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        tables = ("resources", "threads", "messages", "thread_resources", "vector_outbox")
        return {name: conn.execute(f"SELECT * FROM {name} ORDER BY 1").fetchall() for name in tables}


async def test_the_outbox_queues_a_whole_resource_and_a_drain_can_leave_resources_out(
    repository: Repository,
) -> None:
    # A damaged collection is rebuilt from entries queued for all of its resource's messages; while the
    # rebuild runs, the drain reads past that resource's entries (they are the rebuild's).
    services = Services.build(repository, memory_defaults=dict(BUILTIN_DEFAULTS))
    threads = {"t1": "r1", "t2": "r2", "t3": "r3"}
    await seed(
        services,
        msg("a1"),
        msg("a2", at=1),
        msg("b1", thread="t2", resource="r2", at=2),
        msg("n1", thread="t3", resource="r3", at=3),
        threads=threads,
    )
    # Stored without a resource, as imported rows can be.
    n1 = (await repository.get_messages(["n1"]))["n1"]
    await repository.save_messages([dataclasses.replace(n1, resource_id=None)], now=t(4))
    assert await repository.outbox_backlog() == 0  # no semantic recall here: nothing queued by the saves
    assert await repository.outbox_queue_resource("r1") == 2
    assert await repository.outbox_queue_resource(None) == 1
    assert await repository.outbox_queue_resource("r2") == 1
    assert await repository.outbox_queue_resource("nobody") == 0
    await repository.delete_messages(["a2"], now=t(9), track_vectors=True)  # gone: never left out

    async def snapshot(skip: list[str | None]) -> list[str]:
        entries, _ = await repository.outbox_snapshot(skip_resources=skip)
        return [e.message_id for e in entries]

    assert await snapshot([]) == ["a1", "a2", "n1", "b1", "a2"]
    assert await snapshot(["r1"]) == ["a2", "n1", "b1", "a2"]
    assert await snapshot([None]) == ["a1", "a2", "b1", "a2"]
    assert await snapshot(["r1", "r2", None]) == ["a2", "a2"]
    # Due at once, like entries a request has given up on.
    entries, _ = await repository.outbox_snapshot(queued_before=0)
    assert [e.message_id for e in entries] == ["a1", "a2", "n1", "b1"]


async def test_a_resources_messages_are_bounded_like_every_read(repository: Repository) -> None:
    """Resource.messages keeps the server's limits: the page size, the rows of perPage: false, and the
    request's row budget; a restricted credential reads only its own resources'."""
    services = Services.build(repository, memory_defaults=dict(BUILTIN_DEFAULTS))
    await seed(services, *(msg(f"m{n}", at=n) for n in range(6)))
    engine = RecallEngine(repository, defaults=dict(BUILTIN_DEFAULTS), max_per_page=5, max_all_rows=4)
    with pytest.raises(BadUserInput, match="perPage may be at most 5") as refused:
        await engine.resource_messages("r1", per_page=6, principal=OPEN)
    assert refused.value.extensions["limit"] == "maxPerPage"
    with pytest.raises(BadUserInput, match="perPage: false may return at most 4") as refused:
        await engine.resource_messages("r1", per_page=False, principal=OPEN)
    assert refused.value.extensions["limit"] == "maxAllRows"
    budget = RowBudget(7)
    assert (
        len((await engine.resource_messages("r1", per_page=5, principal=OPEN, budget=budget)).messages) == 5
    )
    with pytest.raises(BadUserInput) as refused:
        await engine.resource_messages("r1", per_page=5, principal=OPEN, budget=budget)
    assert refused.value.extensions["limit"] == "maxRequestRows"
    with pytest.raises(Forbidden):
        await engine.resource_messages("r1", principal=Principal("key:r2", frozenset({"r2"})))
    with pytest.raises(BadUserInput, match="resourceId is required"):
        await engine.resource_messages(" ", principal=OPEN)
    # Include windows are bounded as recall's are: by RECALLQL_MAX_ALL_ROWS, then by the request's rows.
    wide = [IncludeItem("m3", with_previous_messages=3, with_next_messages=2)]
    with pytest.raises(BadUserInput, match="windows may return at most 4") as refused:
        await engine.resource_messages("r1", per_page=0, include=wide, principal=OPEN)
    assert refused.value.extensions["limit"] == "maxAllRows"
    narrow = [IncludeItem("m3", with_previous_messages=1, with_next_messages=1)]
    got = await engine.resource_messages("r1", per_page=1, include=narrow, principal=OPEN)
    assert ([m.id for m in got.messages], got.total) == (["m0", "m2", "m3", "m4"], 6)
    budget = RowBudget(3)
    with pytest.raises(BadUserInput) as refused:
        await engine.resource_messages("r1", per_page=1, include=narrow, principal=OPEN, budget=budget)
    assert refused.value.extensions["limit"] == "maxRequestRows"


async def test_a_resources_messages_uncounted_page_is_the_counted_one(repository: Repository) -> None:
    """Without its total (a query that does not select it), a page reads one message more instead of
    counting: the same messages and Mastra's hasMore (offset + perPage < total) at every page and size,
    with filters, DESC and include windows alike."""
    services = Services.build(repository, memory_defaults=dict(BUILTIN_DEFAULTS))
    await seed(
        services,
        *(msg(f"m{n}", thread=f"t{n % 2}", at=n // 2, metadata={"odd": n % 2 == 1}) for n in range(7)),
        threads={"t0": "r1", "t1": "r1"},
    )
    engine = services.recall
    shapes: list[dict[str, Any]] = [
        {},
        {"descending": True},
        {"metadata": {"odd": True}},
        {
            "include": [IncludeItem("m2", with_previous_messages=1, with_next_messages=1)],
            "metadata": {"odd": True},
        },
    ]
    for shape in shapes:
        for per_page in range(0, 9):
            for page in range(0, 9):
                counted = await engine.resource_messages(
                    "r1", page=page, per_page=per_page, principal=OPEN, **shape
                )
                assert counted.total is not None
                bare = await engine.resource_messages(
                    "r1", page=page, per_page=per_page, principal=OPEN, counted=False, **shape
                )
                assert (bare.messages, bare.has_more) == (counted.messages, counted.has_more), (shape, page)
                assert bare.has_more == (page * per_page + per_page < counted.total)
                assert bare.total is None or per_page == 0
    # perPage false is always counted: the count bounds what it may read.
    every = await engine.resource_messages("r1", per_page=False, principal=OPEN, counted=False)
    assert (every.total, len(every.messages)) == (7, 7)


@pytest.mark.parametrize(
    ("query", "counts"),
    [
        ('{ resource(id: "r1") { messages(perPage: 2) { total hasMore messages { id } } } }', 1),
        ('{ resource(id: "r1") { messages(perPage: 2) { ...P } } } fragment P on MessagePage { total }', 1),
        ('{ resource(id: "r1") { messages(perPage: 2) { hasMore messages { id } } } }', 0),
        # A total of something else (a message's thread's recall) is not the page's.
        ('{ resource(id: "r1") { messages(perPage: 2) { hasMore messages { id thread { id } } } } }', 0),
    ],
)
async def test_a_resources_messages_are_counted_only_when_the_query_selects_total(
    repository: Repository, query: str, counts: int
) -> None:
    services = Services.build(repository, memory_defaults=dict(BUILTIN_DEFAULTS))
    await seed(services, *(msg(f"m{n}", at=n) for n in range(5)))
    with statements(services) as seen:
        got = await build_schema().execute(
            query, context_value=RequestContext(services=services, principal=OPEN)
        )
    assert not got.errors, got.errors
    assert got.data is not None
    page = got.data["resource"]["messages"]
    assert page.get("hasMore", True) is True and page.get("total", 5) == 5
    # Unfiltered, the resource's total is the sum of its per-thread counts (no walk of its messages).
    counted = [s for s in seen if "sum(thread_resources.message_count)" in s or "count(" in s.lower()]
    assert len(counted) == counts, seen
    assert not any("count(" in s.lower() and "FROM messages" in s for s in seen), seen
