"""The maintained per-thread counts always equal the rows, whatever writes happened."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from models import repository as repository_module
from models.db import create_engine
from models.migrate import upgrade
from models.records import MessageQuery, ThreadRecord
from models.repository import Repository
from models.tables import messages_table as M
from models.tables import thread_resources_table as TR
from resolvers.auth import OPEN
from resolvers.config import BUILTIN_DEFAULTS
from resolvers.context import Services
from resolvers.messages import MessagePatch
from tests.factories import msg
from tests.support import database, statements


async def counts(services: Services) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
    engine = services.repository.engine
    async with engine.connect() as conn:
        actual = {
            (t, r or ""): n
            for t, r, n in await conn.execute(
                select(M.c.thread_id, M.c.resource_id, func.count()).group_by(M.c.thread_id, M.c.resource_id)
            )
        }
        kept = {
            (t, r): n
            for t, r, n in await conn.execute(select(TR.c.thread_id, TR.c.resource_id, TR.c.message_count))
        }
    return actual, {k: n for k, n in kept.items() if n}


async def metadata_matches(services: Services, metadata: dict[str, Any]) -> dict[str, int]:
    """How many messages of each resource have this metadata, read from the rows."""
    async with services.repository.engine.connect() as conn:
        rows = (await conn.execute(select(M.c.resource_id, M.c.content))).all()
    found: dict[str, int] = {}
    for resource_id, content in rows:
        held = content.get("metadata") or {}
        if all(k in held and held[k] == v and type(held[k]) is type(v) for k, v in metadata.items()):
            found[resource_id] = found.get(resource_id, 0) + 1
    return found


async def test_counts_follow_every_kind_of_write(services: Services) -> None:
    rng = random.Random(7)
    threads = [f"t{n}" for n in range(4)]
    resources = ["r1", "r2"]
    for n, thread_id in enumerate(threads):
        await services.threads.create(resource_id=resources[n % 2], thread_id=thread_id, principal=OPEN)
    ids: list[str] = []
    for step in range(120):
        action = rng.choice(
            ["save", "save", "resave", "update", "delete", "delete_thread", "clone", "transfer"]
        )
        if action == "save" or not ids:
            batch = [
                msg(
                    f"m{step}-{k}",
                    thread=rng.choice(threads),
                    at=step + k / 10,
                    resource=rng.choice(resources),
                    metadata={"k": rng.randint(0, 2)},
                )
                for k in range(rng.randint(1, 4))
            ]
            await services.messages.save(batch, principal=OPEN)
            ids += [m.id for m in batch if m.id]
        elif action == "resave":
            target = rng.choice(ids)
            await services.messages.save(
                [
                    msg(
                        target,
                        thread=rng.choice(threads),
                        at=step,
                        resource=rng.choice(resources),
                        metadata={"k": rng.randint(0, 2)},
                    )
                ],
                principal=OPEN,
            )
        elif action == "update":
            patches = [
                MessagePatch(
                    id=i,
                    thread_id=rng.choice(threads),
                    resource_id=rng.choice(resources),
                    content={"metadata": {"k": rng.randint(0, 2)}} if rng.random() < 0.5 else None,
                )
                for i in rng.sample(ids, min(len(ids), 3))
            ]
            await services.messages.update(patches, principal=OPEN)
        elif action == "delete":
            gone = rng.sample(ids, min(len(ids), 2))
            await services.messages.delete([*gone, "never-existed"], principal=OPEN)
            ids = [i for i in ids if i not in gone]
        elif action == "transfer":
            await services.threads.transfer(rng.choice(threads), rng.choice(resources), principal=OPEN)
        elif action == "delete_thread":
            victim = rng.choice(threads)
            await services.threads.delete(victim, principal=OPEN)
            await services.threads.create(resource_id=rng.choice(resources), thread_id=victim, principal=OPEN)
            remaining = await services.repository.get_messages(ids)
            ids = [i for i in ids if i in remaining]
        else:
            new_id = f"c{step}"
            result = await services.threads.clone(rng.choice(threads), new_thread_id=new_id, principal=OPEN)
            threads.append(new_id)
            ids += [m.id for m in result.messages]
        actual, kept = await counts(services)
        assert kept == actual, f"after step {step} ({action})"
        # A resource's messages across its threads are counted from the same rows; a filtered count
        # is cached under the resource's change counters, so it must follow every write too.
        matching = await metadata_matches(services, {"k": 1})
        for resource_id in resources:
            page = await services.recall.resource_messages(resource_id, per_page=1, principal=OPEN)
            filed = sum(n for (_, r), n in actual.items() if r == resource_id)
            assert page.total == filed, f"after step {step} ({action}): {resource_id}"
            assert type(page.total) is int  # not PostgreSQL's numeric sum
            for _ in range(2):  # counted, then from the cache
                filtered = await services.recall.resource_messages(
                    resource_id, per_page=1, metadata={"k": 1}, principal=OPEN
                )
                assert filtered.total == matching.get(resource_id, 0), f"after step {step} ({action})"

    # Recall's total uses the maintained counts; it must equal a real COUNT, with and without filters.
    for thread_id in threads:
        for resource_id in (None, *resources):
            query = MessageQuery(thread_id=thread_id, resource_id=resource_id)
            read = await services.repository.read_page(query, descending=True, limit=1, offset=0)
            async with services.repository.engine.connect() as conn:
                real = (await conn.execute(services.repository.count_statement(query))).scalar_one()
            assert read.total == real


async def test_filtered_counts_are_recomputed_after_a_write(services: Services) -> None:
    await services.threads.create(resource_id="r1", thread_id="t1", principal=OPEN)
    await services.messages.save(
        [msg(f"m{n}", at=n, metadata={"k": n % 2}) for n in range(10)], principal=OPEN
    )
    query: dict[str, Any] = {"thread_id": "t1", "metadata": {"k": 1}}
    first = await services.repository.read_page(MessageQuery(**query), descending=True, limit=5, offset=0)
    again = await services.repository.read_page(MessageQuery(**query), descending=True, limit=5, offset=0)
    assert first.total == again.total == 5
    await services.messages.save([msg("m10", at=10, metadata={"k": 1})], principal=OPEN)
    after = await services.repository.read_page(MessageQuery(**query), descending=True, limit=5, offset=0)
    assert after.total == 6
    await services.messages.update([MessagePatch(id="m10", content={"metadata": {"k": 0}})], principal=OPEN)
    assert (
        await services.repository.read_page(MessageQuery(**query), descending=True, limit=5, offset=0)
    ).total == 5


# ---------------------------------------------------------------------------------------------- inline reads
class ReadPaths:
    """Which SQLite reads ran on the event loop and which went to a worker thread."""

    def __init__(self, repository: Repository, monkeypatch: pytest.MonkeyPatch) -> None:
        self.inline = self.worker = 0
        inline, worker = repository._read_inline, repository._read_sync

        def counted_inline(fn: Any) -> Any:
            self.inline += 1
            return inline(fn)

        def counted_worker(fn: Any) -> Any:
            self.worker += 1
            return worker(fn)

        monkeypatch.setattr(repository, "_read_inline", counted_inline)
        monkeypatch.setattr(repository, "_read_sync", counted_worker)

    def take(self) -> tuple[int, int]:
        taken, self.inline, self.worker = (self.inline, self.worker), 0, 0
        return taken


@pytest.fixture
async def sqlite_services(tmp_path: Path) -> AsyncIterator[Services]:
    """SQLite only: PostgreSQL reads always run on the event loop's asyncpg connection."""
    async with database("sqlite", tmp_path) as url:
        engine = create_engine(url)
        await upgrade(engine)
        repository = Repository(engine)
        try:
            yield Services.build(repository, memory_defaults=dict(BUILTIN_DEFAULTS))
        finally:
            repository.close()
            await engine.dispose()


async def test_sqlite_reads_run_inline_only_while_bounded(
    sqlite_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = sqlite_services
    repository = services.repository
    await services.threads.create(resource_id="r1", thread_id="t1", principal=OPEN)
    # 6,000 messages; the 300 that match {k: 1} are the oldest ones, far from the newest page.
    await services.messages.save(
        [msg(f"m{n}", at=n, metadata={"k": 1 if n < 300 else 0}) for n in range(6000)], principal=OPEN
    )
    paths = ReadPaths(repository, monkeypatch)
    page = await repository.read_page(MessageQuery(thread_id="t1"), descending=True, limit=20, offset=0)
    assert [m.id for m in page.rows][:2] == ["m5999", "m5998"] and page.total == 6000
    assert paths.take() == (1, 0)  # a page of the index with a maintained count
    deep = await repository.read_page(MessageQuery(thread_id="t1"), descending=False, limit=20, offset=5000)
    assert deep.rows[0].id == "m5000" and paths.take() == (0, 1)  # past _INLINE_ROWS entries
    query = MessageQuery(thread_id="t1", metadata={"k": 1})
    first = await repository.read_page(query, descending=True, limit=20, offset=0)
    assert first.total == 300 and [m.id for m in first.rows][:2] == ["m299", "m298"]
    assert paths.take() == (0, 1)  # never counted: the worker counts it
    # Counted now: 300 of 6,000 rows match, so 20 matches take about 400 rows. The estimate is wrong
    # (the matches are the oldest rows, the walk from the newest passes 5,700 others): an inline read
    # that outruns its time budget (none here) is interrupted, and the worker thread reads the page.
    monkeypatch.setattr(repository_module, "_INLINE_BUDGET", 0.0)
    again = await repository.read_page(query, descending=True, limit=20, offset=0)
    assert (again.total, [m.id for m in again.rows]) == (first.total, [m.id for m in first.rows])
    assert paths.take() == (1, 1)
    monkeypatch.undo()
    paths = ReadPaths(repository, monkeypatch)
    ascending = await repository.read_page(query, descending=False, limit=20, offset=0)
    assert [m.id for m in ascending.rows][:2] == ["m0", "m1"] and paths.take() == (1, 0)
    # A write changes the thread's version: the cached count is stale, so the count moves to a worker.
    await services.messages.save([msg("m6000", at=6000, metadata={"k": 1})], principal=OPEN)
    paths.take()
    fresh = await repository.read_page(query, descending=False, limit=20, offset=0)
    assert fresh.total == 301 and paths.take() == (1, 1)


async def test_sqlite_listings_of_all_threads_run_inline_when_they_walk_the_index(
    sqlite_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    repository = sqlite_services.repository
    await repository.import_threads(
        [ThreadRecord(f"t{n:04}", f"r{n % 7}", "", {"k": n % 2}, n, n) for n in range(3000)]
    )
    threads = sqlite_services.threads
    paths = ReadPaths(repository, monkeypatch)
    page = await threads.list(None, per_page=20, counted=False, principal=OPEN)
    assert [t.id for t in page.threads][:2] == ["t2999", "t2998"] and page.has_more
    assert paths.take() == (1, 0)  # the page along the time index, and one thread more
    after = await threads.list(None, per_page=20, after=page.end_cursor, counted=False, principal=OPEN)
    assert after.threads[0].id == "t2979" and paths.take() == (1, 0)
    # Counting every thread, reading them all or filtering them is not bounded: a worker reads those.
    assert (await threads.list(None, per_page=20, principal=OPEN)).total == 3000
    assert paths.take() == (0, 1)
    filtered = await threads.list(None, per_page=20, metadata={"k": 1}, counted=False, principal=OPEN)
    assert filtered.threads[0].id == "t2999" and paths.take() == (0, 1)
    deep = await threads.list(None, page=300, per_page=20, counted=False, principal=OPEN)
    assert deep.threads == []
    assert paths.take() == (0, 1)  # past _INLINE_ROWS entries


async def test_sqlite_pages_of_a_resources_messages_run_inline_unless_filtered(
    sqlite_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = sqlite_services
    for n in range(3):
        await services.threads.create(resource_id="r1", thread_id=f"t{n}", principal=OPEN)
    await services.messages.save(
        [msg(f"m{n}", thread=f"t{n % 3}", at=n, metadata={"k": n % 2}) for n in range(6000)], principal=OPEN
    )
    paths = ReadPaths(services.repository, monkeypatch)
    page = await services.recall.resource_messages("r1", per_page=40, principal=OPEN)
    assert page.total == 6000 and [m.id for m in page.messages][:2] == ["m0", "m1"]
    assert paths.take() == (1, 0)  # the resource's index and its per-thread counts
    filtered = await services.recall.resource_messages("r1", per_page=40, metadata={"k": 1}, principal=OPEN)
    assert filtered.total == 3000 and paths.take() == (0, 1)  # the count walks every match
    deep = await services.recall.resource_messages("r1", page=130, per_page=40, principal=OPEN)
    assert deep.messages[0].id == "m5200" and paths.take() == (0, 1)  # past _INLINE_ROWS entries


async def test_string_filters_match_the_key_not_the_text(services: Services) -> None:
    """SQLite looks for a plain string's JSON literal in the row's text before parsing it: the literal
    elsewhere in the row (text, another key, a nested value) must not make a row match."""
    await services.threads.create(resource_id="r1", thread_id="t1", principal=OPEN)
    await services.messages.save(
        [
            msg("hit", at=0, metadata={"topic": "billing"}),
            msg("in-text", at=1, text='"billing" is in the text', metadata={"topic": "refund"}),
            msg("other-key", at=2, metadata={"topic": "refund", "tag": "billing"}),
            msg("nested", at=3, metadata={"topic": {"name": "billing"}}),
            msg("array", at=4, metadata={"topic": ["billing"]}),
            msg("number", at=5, metadata={"topic": 7}),
            msg("string-7", at=6, metadata={"topic": "7"}),
            msg("slash", at=7, metadata={"topic": "a/b"}),
        ],
        principal=OPEN,
    )
    for value, expected in (("billing", ["hit"]), ("7", ["string-7"]), (7, ["number"]), ("a/b", ["slash"])):
        page = await services.repository.read_page(
            MessageQuery(thread_id="t1", metadata={"topic": value}), descending=False, limit=10, offset=0
        )
        assert ([m.id for m in page.rows], page.total) == (expected, len(expected)), value


async def test_a_resources_filtered_pages_after_the_first_count_nothing(services: Services) -> None:
    for n in range(3):
        await services.threads.create(resource_id="r1", thread_id=f"t{n}", principal=OPEN)
    await services.messages.save(
        [msg(f"m{n}", thread=f"t{n % 3}", at=n, metadata={"k": n % 4}) for n in range(400)], principal=OPEN
    )
    pages = []
    with statements(services) as seen:
        for page in range(3):
            pages.append(
                await services.recall.resource_messages(
                    "r1", page=page, per_page=10, metadata={"k": 1}, principal=OPEN
                )
            )
    counts = [s for s in seen if "count(" in s.lower()]
    assert len(counts) == 1, counts  # the first page's; the others read the cache
    assert [p.total for p in pages] == [100, 100, 100]
    assert [m.id for m in pages[2].messages][:2] == ["m81", "m85"]
    # A change to one of the resource's messages (in any of its threads) is counted again.
    await services.messages.update([MessagePatch(id="m2", content={"metadata": {"k": 1}})], principal=OPEN)
    with statements(services) as seen:
        again = await services.recall.resource_messages(
            "r1", page=1, per_page=10, metadata={"k": 1}, principal=OPEN
        )
    assert again.total == 101 and sum("count(" in s.lower() for s in seen) == 1
