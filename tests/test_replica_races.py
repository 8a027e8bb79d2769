"""Two replicas writing the same messages on one PostgreSQL: each interleaving is forced by holding one
replica's transaction right after a chosen statement, and every one must end with the outbox, the
per-thread counts and the vector index agreeing with SQL.

SQLite needs none of this: it has one writer at a time, and the repository writes there in one
worker-thread hop per transaction. PostgreSQL runs READ COMMITTED, where each statement sees what other
transactions have committed since the last one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.util import await_only

from models.db import create_engine
from models.migrate import upgrade
from models.records import MessageRecord
from models.repository import Repository, RowForbidden
from models.vector_index import ChromaIndex
from resolvers.auth import OPEN
from resolvers.config import BUILTIN_DEFAULTS
from resolvers.context import Services
from resolvers.messages import MessageInput, MessagePatch
from resolvers.recall import RecallArgs
from resolvers.semantic import SemanticMemory
from tests.support import PG_ADMIN_DSN, database, uid
from tests.test_vector_pipeline import DIMENSION, GatedEmbedder, _text


class Hold:
    """Once armed, stops the next statement of `engine` that `match` accepts right after it ran, inside
    its transaction, until `release` is set (the event loop goes on meanwhile)."""

    def __init__(self, engine: Any, match: Callable[[str], bool]) -> None:
        self.match = match
        self.armed = False
        self.reached = asyncio.Event()
        self.release = asyncio.Event()
        event.listen(engine.sync_engine, "after_cursor_execute", self._after)

    def _after(self, conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if self.armed and self.match(statement):
            self.armed = False
            self.reached.set()
            await_only(self.release.wait())  # run_sync's greenlet: waits without blocking the loop

    async def stopped(self, work: asyncio.Task[Any]) -> None:
        """Waits until the held statement has run (failing if `work` ends first)."""
        reached = asyncio.create_task(self.reached.wait())
        done, _ = await asyncio.wait({reached, work}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        assert reached in done, f"the statement to hold did not run ({work})"


class Replica:
    """A process of its own, as far as SQL goes: its own engine, repository and write pipeline."""

    def __init__(self, url: str, index: ChromaIndex) -> None:
        self.engine = create_engine(url)
        self.repository = Repository(self.engine)
        self.semantic = SemanticMemory(self.repository, GatedEmbedder(), lambda _m, _d: index)
        self.services = Services.build(
            self.repository,
            memory_defaults=dict(BUILTIN_DEFAULTS),
            semantic=self.semantic,
            vector_sync_timeout=30,
        )

    async def save(self, thread_id: str, resource_id: str, message_id: str, text: str) -> None:
        message = MessageInput(
            thread_id=thread_id, resource_id=resource_id, role="user", content=_text(text), id=message_id
        )
        await self.services.messages.save([message], principal=OPEN)

    async def aclose(self) -> None:
        await self.semantic.aclose()
        await self.engine.dispose()


@pytest.fixture
async def replicas(tmp_path: Path) -> AsyncIterator[tuple[Replica, Replica]]:
    index = ChromaIndex(path=tmp_path / "chroma", model_name="hash-64", dimension=DIMENSION)
    async with database("postgres", tmp_path) as url:
        engine = create_engine(url)
        await upgrade(engine)
        await engine.dispose()
        a, b = Replica(url, index), Replica(url, index)
        try:
            yield a, b
        finally:
            await a.aclose()
            await b.aclose()
            await index.aclose()


async def settled(a: Replica, b: Replica, *resources: str) -> dict[str, set[str]]:
    """Drains both replicas' outboxes; the vectors each resource then holds (message ids), after checking
    that the index matches SQL there."""
    await a.semantic.drain()
    await b.semantic.drain()
    assert await a.repository.outbox_backlog() == 0
    for resource in resources:
        [check] = await a.semantic.check(resource_id=resource)
        assert check.ok, check
    return {r: await stored(a, r) for r in resources}


async def stored(replica: Replica, resource: str) -> set[str]:
    return {message for message, _ in await (await replica.semantic.index()).stored(resource)}


async def thread_totals(replica: Replica, *threads: str) -> list[int]:
    """Each thread's total as recall reports it (the per-thread counts the writes keep)."""
    recall = replica.services.recall
    return [(await recall.recall(RecallArgs(thread_id=t, per_page=1), principal=OPEN)).total for t in threads]


async def test_a_save_and_a_move_through_another_thread_start_from_the_same_row(
    replicas: tuple[Replica, Replica],
) -> None:
    # B re-saves m into t3 (its lock: t3's); A moves m to t2 of another resource (its locks: t1's and
    # t2's). Neither thread lock keeps the other out, so B's save must lock m's row itself: had it read m
    # unlocked, A's move could commit in between, and B's outbox entry and counts would start from m as
    # it was before the move, leaving m's vectors in r2 for good.
    a, b = replicas
    r1, r2, t1, t2, t3, m = uid("r"), uid("r"), uid("t"), uid("t"), uid("t"), uid("m")
    for resource, thread in ((r1, t1), (r2, t2), (r1, t3)):
        await a.services.threads.create(resource_id=resource, thread_id=thread, principal=OPEN)
    await a.save(t1, r1, m, "giraffe")
    hold = Hold(
        b.engine, lambda s: s.lstrip().startswith("SELECT") and "FROM messages" in s and "messages.id IN" in s
    )
    hold.armed = True
    resave = asyncio.create_task(b.save(t3, r1, m, "giraffe"))
    await hold.stopped(resave)
    move = asyncio.create_task(
        a.services.messages.update([MessagePatch(id=m, thread_id=t2, resource_id=r2)], principal=OPEN)
    )
    await asyncio.sleep(0.3)
    assert not move.done(), "the move did not wait for the save holding the message's row"
    hold.release.set()
    await asyncio.wait_for(resave, 10)
    await asyncio.wait_for(move, 10)

    row = (await a.repository.get_messages([m]))[m]
    assert (row.thread_id, row.resource_id) == (t2, r2)
    assert await settled(a, b, r1, r2) == {r1: set(), r2: {m}}
    assert await thread_totals(a, t1, t2, t3) == [0, 1, 0]


async def test_a_deleted_thread_takes_along_a_message_imported_into_it_meanwhile(
    replicas: tuple[Replica, Replica],
) -> None:
    # A deletes t (its transaction has begun: t's row is locked); B imports m2 into t and its vectors are
    # written; A's DELETE then removes m2 beside m1, and both must leave the outbox and the counts.
    a, b = replicas
    r, t, m1, m2 = uid("r"), uid("t"), uid("m"), uid("m")
    await a.services.threads.create(resource_id=r, thread_id=t, principal=OPEN)
    await a.save(t, r, m1, "giraffe one")
    hold = Hold(
        a.engine,
        lambda s: s.lstrip().startswith("SELECT") and "FROM threads" in s and "FOR UPDATE" in s,
    )
    hold.armed = True
    deleting = asyncio.create_task(a.services.threads.delete(t, principal=OPEN))
    await hold.stopped(deleting)
    imported = MessageRecord(m2, t, r, "user", "v2", 2_000_000_000_000, _text("giraffe two"))
    assert await b.repository.import_messages([imported], now=1, track_vectors=True) == (1, 0)
    await b.semantic.drain()
    assert await stored(b, r) == {m1, m2}
    hold.release.set()
    await asyncio.wait_for(deleting, 10)

    assert await a.repository.get_messages([m1, m2]) == {}
    assert await settled(a, b, r) == {r: set()}
    assert await thread_totals(a, t) == [0]


async def test_a_thread_given_to_another_resource_leaves_a_message_imported_meanwhile_where_it_was_filed(
    replicas: tuple[Replica, Replica],
) -> None:
    # A gives t to r2 and has read and locked t's messages (m1); B imports m2 into t, filed under r1,
    # and commits (imports take no thread lock). A's UPDATE must move what it locked and counted, m1
    # only: moving m2 too would leave r1's per-thread count (a resource's total) one too high for good.
    a, b = replicas
    r1, r2, t, m1, m2 = uid("r"), uid("r"), uid("t"), uid("m"), uid("m")
    await a.services.threads.create(resource_id=r1, thread_id=t, principal=OPEN)
    await a.save(t, r1, m1, "giraffe one")
    hold = holding_locked_read(a)
    moving = asyncio.create_task(a.services.threads.transfer(t, r2, principal=OPEN))
    await hold.stopped(moving)
    imported = MessageRecord(m2, t, r1, "user", "v2", 2_000_000_000_000, _text("giraffe two"))
    assert await b.repository.import_messages([imported], now=1, track_vectors=True) == (1, 0)
    hold.release.set()
    await asyncio.wait_for(moving, 10)

    rows = await a.repository.get_messages([m1, m2])
    assert (rows[m1].resource_id, rows[m2].resource_id) == (r2, r1)
    for resource, held in ((r1, [m2]), (r2, [m1])):
        page = await a.services.recall.resource_messages(resource, per_page=10, principal=OPEN)
        assert ([m.id for m in page.messages], page.total) == (held, 1), resource
    assert await settled(a, b, r1, r2) == {r1: {m2}, r2: {m1}}
    assert await thread_totals(a, t) == [2]


async def two_threads(replica: Replica) -> tuple[str, str, str, str, str]:
    """r1, r2 and a thread in each, t1 and t2, and an id m not stored yet."""
    r1, r2, t1, t2, m = uid("r"), uid("r"), uid("t"), uid("t"), uid("m")
    for resource, thread in ((r1, t1), (r2, t2)):
        await replica.services.threads.create(resource_id=resource, thread_id=thread, principal=OPEN)
    return r1, r2, t1, t2, m


def holding_locked_read(replica: Replica) -> Hold:
    """Armed to hold the replica's next write right after it read (and locked) the messages it replaces."""
    hold = Hold(
        replica.engine,
        lambda s: s.lstrip().startswith("SELECT") and "FROM messages" in s and "FOR UPDATE" in s,
    )
    hold.armed = True
    return hold


@pytest.mark.parametrize("through", ["save", "import"])
async def test_a_write_of_a_new_id_saved_meanwhile_elsewhere_replaces_that_row(
    replicas: tuple[Replica, Replica], through: str
) -> None:
    # A writes a new id m into t1 (a save, or an import, which takes no thread lock at all) and has read
    # that m is not stored; B then saves m into t2 of another resource, commits and writes its vectors.
    # A's write then takes over B's row: it must do so as the re-save it has become, taking m's vectors
    # out of r2 and its count out of t2.
    a, b = replicas
    r1, r2, t1, t2, m = await two_threads(a)
    hold = holding_locked_read(a)
    if through == "save":
        first = asyncio.create_task(a.save(t1, r1, m, "giraffe"))
    else:
        imported = MessageRecord(m, t1, r1, "user", "v2", 2_000_000_000_000, _text("giraffe"))
        first = asyncio.create_task(a.repository.import_messages([imported], now=1, track_vectors=True))
    await hold.stopped(first)
    await asyncio.wait_for(b.save(t2, r2, m, "okapi"), 10)
    assert await stored(b, r2) == {m}
    hold.release.set()
    done = await asyncio.wait_for(first, 10)
    if through == "import":
        assert done == (0, 1)  # inserted, updated: B's row was updated

    row = (await a.repository.get_messages([m]))[m]
    assert (row.thread_id, row.resource_id) == (t1, r1)
    assert await settled(a, b, r1, r2) == {r1: {m}, r2: set()}
    assert await thread_totals(a, t1, t2) == [1, 0]


async def test_a_restricted_save_of_a_new_id_saved_meanwhile_elsewhere_changes_nothing(
    replicas: tuple[Replica, Replica],
) -> None:
    # The same race for a caller limited to r1: the row B inserted meanwhile belongs to r2, so A's save
    # may not take it over; it fails and leaves B's row, its count and its vectors as they were.
    a, b = replicas
    r1, r2, t1, t2, m = await two_threads(a)
    hold = holding_locked_read(a)
    mine = MessageRecord(m, t1, r1, "user", "v2", 1_000, _text("giraffe"))
    first = asyncio.create_task(a.repository.save_messages([mine], now=1, track_vectors=True, owned_by={r1}))
    await hold.stopped(first)
    await asyncio.wait_for(b.save(t2, r2, m, "okapi"), 10)
    hold.release.set()
    with pytest.raises(RowForbidden):
        await asyncio.wait_for(first, 10)

    row = (await a.repository.get_messages([m]))[m]
    assert (row.thread_id, row.resource_id) == (t2, r2)
    assert await settled(a, b, r1, r2) == {r1: set(), r2: {m}}
    assert await thread_totals(a, t1, t2) == [0, 1]


@pytest.mark.parametrize("isolation", ["serializable", "repeatable read"])
async def test_writes_run_read_committed_whatever_the_databases_default(
    tmp_path: Path, isolation: str
) -> None:
    """A database whose default_transaction_isolation is stricter (some DBAs set it for everything): the
    writes are designed for READ COMMITTED, and there concurrent saves, updates, deletes and clones from
    two replicas failed with "could not serialize access", an internal error nothing retried."""
    import random

    import asyncpg

    from tests.test_counts import counts

    async with database("postgres", tmp_path) as url:
        admin = await asyncpg.connect(PG_ADMIN_DSN)
        try:
            name = url.rsplit("/", 1)[1]
            await admin.execute(
                f"ALTER DATABASE \"{name}\" SET default_transaction_isolation = '{isolation}'"
            )
        finally:
            await admin.close()
        engines = [create_engine(url) for _ in range(2)]
        try:
            await upgrade(engines[0])
            replicas = [
                Services.build(Repository(e), memory_defaults=dict(BUILTIN_DEFAULTS)) for e in engines
            ]
            threads = [f"t{n}" for n in range(3)]
            for n, thread in enumerate(threads):
                await replicas[0].threads.create(resource_id=f"r{n % 2}", thread_id=thread, principal=OPEN)
            ids: list[str] = []
            failures: list[str] = []

            async def writer(n: int) -> None:
                rng = random.Random(n)
                services = replicas[n % 2]
                for step in range(25):
                    action = rng.choice(["save", "save", "update", "delete", "clone"])
                    try:
                        if action == "save" or not ids:
                            batch = [
                                MessageInput(
                                    thread_id=rng.choice(threads),
                                    role="user",
                                    content=_text(f"{n} {step} {k}"),
                                    id=rng.choice([*ids[-5:], f"m{n}-{step}-{k}"]),
                                    resource_id=rng.choice(["r0", "r1"]),
                                )
                                for k in range(rng.randint(1, 3))
                            ]
                            await services.messages.save(batch, principal=OPEN)
                            ids.extend(m.id for m in batch if m.id)
                        elif action == "update":
                            patches = [
                                MessagePatch(id=i, thread_id=rng.choice(threads))
                                for i in rng.sample(ids, min(3, len(ids)))
                            ]
                            await services.messages.update(patches, principal=OPEN)
                        elif action == "delete":
                            await services.messages.delete(rng.sample(ids, min(2, len(ids))), principal=OPEN)
                        else:
                            await services.threads.clone(rng.choice(threads), principal=OPEN)
                    except Exception as error:
                        failures.append(f"{action}: {type(error).__name__}: {str(error).splitlines()[0]}")

            await asyncio.gather(*(writer(n) for n in range(6)))
            assert failures == []
            actual, kept = await counts(replicas[0])
            assert kept == actual
        finally:
            for engine in engines:
                await engine.dispose()
