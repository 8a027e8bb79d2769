"""Listing every resource's threads (`threads` without resourceId, Mastra's listThreads without
filter.resourceId) with and without the time indexes of migration 0011, beside one resource's listing
and a save, on SQLite and PostgreSQL.

    python benchmarks/all_threads.py [--size 100000] [--engines sqlite,postgres] [--calls 20]

Per engine, two databases side by side, both migrated to head and loaded alike with N threads over
1,000 resources (one in a hundred with metadata {"flag": true}) through the repository; from one of
them ix_threads_created and ix_threads_updated are dropped again (the schema before 0011). Then, in
process through the services and interleaved in rounds on both, it times the newest 20 threads:

- of one resource (its own index: the listing a sidebar reads);
- of all resources, without `total` (the page and one thread more) and with it;
- of all resources by updatedAt, after a cursor 100 pages down, without `total`;
- of all resources with the metadata filter {"flag": true}, with `total`;
- of all resources with a filter no thread matches ({"flag": null}), without `total` (an index walk
  that finds nothing reads every thread, one lookup at a time);

and, apart from the reads, a save of 2 messages into a thread (what the two indexes cost every write:
it moves the thread's updatedAt). Last, the time 0011 takes to build both indexes on the database
without them. Writes a Markdown table to --out (benchmarks/results/all-threads-<date>.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools
import sys
import time
from collections.abc import AsyncIterator

from scale_bench import (  # this folder
    Scenario,
    depth_arguments,
    machine,
    migrated,
    settle,
    summary,
    timed,
    timed_rounds,
)
from sqlalchemy import text

from models.records import ThreadRecord
from models.repository import Repository
from resolvers.auth import OPEN
from resolvers.context import Services
from resolvers.messages import MessageInput

PAGE = 20
RESOURCES = 1_000
WAYS = (
    "one resource",
    "all, no total",
    "all, total",
    "all by updatedAt, after a cursor",
    "all, metadata filter",
    "all, a filter no thread matches, no total",
    "save of 2 messages",
)
SAVE = "save of 2 messages"
SCHEMAS = ("with 0011", "without")
INDEXES = {"ix_threads_created": "created_at", "ix_threads_updated": "updated_at"}


async def load(repo: Repository, size: int) -> None:
    batch: list[ThreadRecord] = []
    for n in range(size):
        metadata = {"flag": True} if n % 100 == 0 else {"flag": False}
        # updatedAt in another order than createdAt: the two indexes are not the same walk.
        batch.append(
            ThreadRecord(f"t{n:08}", f"r{n % RESOURCES}", f"Thread {n}", metadata, n, (n * 7919) % size)
        )
        if len(batch) == 10_000:
            await repo.import_threads(batch)
            batch = []
    if batch:
        await repo.import_threads(batch)


async def drop_indexes(repo: Repository) -> None:
    async with repo.engine.begin() as conn:
        for name in INDEXES:
            await conn.execute(text(f"DROP INDEX {name}"))


async def build_indexes(repo: Repository) -> float:
    """What migration 0011 does, timed (ms)."""
    started = time.perf_counter()
    async with repo.engine.begin() as conn:
        for name, column in INDEXES.items():
            await conn.execute(text(f"CREATE INDEX {name} ON threads ({column}, id)"))
    return (time.perf_counter() - started) * 1000


def scenarios(services: Services, size: int, cursor: str) -> dict[str, Scenario]:
    threads = services.threads
    saves = itertools.count()

    async def one() -> object:
        return await threads.list("r7", per_page=PAGE, principal=OPEN)

    async def all_uncounted() -> object:
        return await threads.list(None, per_page=PAGE, counted=False, principal=OPEN)

    async def all_counted() -> object:
        return await threads.list(None, per_page=PAGE, principal=OPEN)

    async def after_cursor() -> object:
        return await threads.list(
            None, per_page=PAGE, order_field="updatedAt", after=cursor, counted=False, principal=OPEN
        )

    async def filtered() -> object:
        return await threads.list(None, per_page=PAGE, metadata={"flag": True}, principal=OPEN)

    async def unmatched() -> object:
        return await threads.list(None, per_page=PAGE, metadata={"flag": None}, counted=False, principal=OPEN)

    async def save() -> object:
        n = next(saves)
        thread = f"t{(n * 104_729) % size:08}"
        messages = [
            MessageInput(
                thread_id=thread,
                role="user",
                content={"format": 2, "parts": [{"type": "text", "text": f"message {n}.{k}"}]},
                id=f"save-{n}-{k}",
                resource_id=f"r{int(thread[1:]) % RESOURCES}",
                created_at=1_767_225_600_000 + n * 10 + k,
            )
            for k in range(2)
        ]
        return await services.messages.save(messages, principal=OPEN)

    return dict(
        zip(WAYS, (one, all_uncounted, all_counted, after_cursor, filtered, unmatched, save), strict=True)
    )


async def check(services: Services, size: int) -> str:
    """Every listing reads what it should; returns the cursor 100 pages down the updatedAt listing."""
    newest = (await services.threads.list(None, per_page=PAGE, principal=OPEN)).threads
    assert [t.id for t in newest] == [f"t{n:08}" for n in range(size - 1, size - 1 - PAGE, -1)]
    flagged = await services.threads.list(None, per_page=PAGE, metadata={"flag": True}, principal=OPEN)
    assert flagged.total == (size + 99) // 100
    assert all(t.metadata == {"flag": True} for t in flagged.threads)
    unmatched = await services.threads.list(None, per_page=PAGE, metadata={"flag": None}, principal=OPEN)
    assert unmatched.total == 0 and not unmatched.threads
    depth = min(100 * PAGE, size // 2)
    by_update = await services.threads.list(
        None, per_page=depth, order_field="updatedAt", counted=False, principal=OPEN
    )
    assert [t.updated_at for t in by_update.threads] == list(range(size - 1, size - 1 - depth, -1))
    assert by_update.end_cursor is not None
    after = await services.threads.list(
        None,
        per_page=PAGE,
        order_field="updatedAt",
        after=by_update.end_cursor,
        counted=False,
        principal=OPEN,
    )
    assert [t.updated_at for t in after.threads] == list(range(size - 1 - depth, size - 1 - depth - PAGE, -1))
    return by_update.end_cursor


@contextlib.asynccontextmanager
async def loaded(kind: str, size: int) -> AsyncIterator[tuple[dict[tuple[str, str], Scenario], Repository]]:
    """Both databases loaded and checked; yields every (schema, way) scenario and the repository
    without the indexes."""
    async with migrated(kind) as (indexed, indexed_services), migrated(kind) as (bare, bare_services):
        await drop_indexes(bare)
        reads: dict[tuple[str, str], Scenario] = {}
        for schema, repo, services in (
            ("with 0011", indexed, indexed_services),
            ("without", bare, bare_services),
        ):
            await load(repo, size)
            await settle(repo, kind, "threads")
            cursor = await check(services, size)
            for way, scenario in scenarios(services, size, cursor).items():
                reads[(schema, way)] = scenario
        yield reads, bare


async def timed_saves(
    saves: dict[tuple[str, str], Scenario], calls: int, rounds: int
) -> dict[tuple[str, str], tuple[float, float]]:
    """The saves apart from the reads (a scan just before a save changes what it finds in the caches;
    runs with the reads moved either schema's save by +-10% depending on the order), with 4x the calls,
    each schema's first in half the rounds."""
    samples: dict[tuple[str, str], list[float]] = {key: [] for key in saves}
    for fn in saves.values():  # warm-up, untimed
        await timed(fn, max(5, calls // 10), [])
    keys = list(saves)
    for n in range(2 * rounds):
        for key in keys if n % 2 else keys[::-1]:
            await timed(saves[key], max(1, 2 * calls // rounds), samples[key])
    return {key: summary(values) for key, values in samples.items()}


def report(
    size: int, results: dict[str, dict[tuple[str, str], tuple[float, float]]], builds: dict[str, float]
) -> str:
    lines = [
        f"# Listing all threads, with and without migration 0011's indexes — {dt.date.today()}",
        "",
        machine(),
        "",
        f"In-process services, {size:,} threads over {RESOURCES:,} resources, pages of {PAGE} (createdAt "
        "DESC unless said); both schemas interleaved in one run (the saves apart from the reads, with 4x "
        "the calls). p50 / p99 ms, and the p50 without the indexes over the p50 with them.",
        "",
        "| engine | threads | way | with 0011 | without | without ÷ with |",
        "|---|---|---|---|---|---|",
    ]
    for kind, rows in results.items():
        for way in WAYS:
            (p50, p99), (b50, b99) = rows[("with 0011", way)], rows[("without", way)]
            cells = f"{p50:.2f} / {p99:.2f} | {b50:.2f} / {b99:.2f} | {b50 / p50:.2f}x"
            lines.append(f"| {kind} | {size:,} | {way} | {cells} |")
    lines += ["", "Migration 0011 (building both indexes) on these threads:", ""]
    lines += [f"- {kind}: {ms:,.0f} ms" for kind, ms in builds.items()]
    return "\n".join(lines) + "\n"


async def main() -> None:
    args = depth_arguments(__doc__, "all-threads", 100_000)
    results, builds = {}, {}
    for kind in args.engines.split(","):
        print(f"{kind} {args.size:,}...", file=sys.stderr, flush=True)
        async with loaded(kind, args.size) as (reads, bare):
            saves = {key: reads.pop(key) for key in list(reads) if key[1] == SAVE}
            results[kind] = await timed_rounds(reads, args.calls, args.rounds)
            results[kind] |= await timed_saves(saves, args.calls, args.rounds)
            builds[kind] = await build_indexes(bare)
    text_ = report(args.size, results, builds)
    print(text_)
    args.out.write_text(text_)


if __name__ == "__main__":
    asyncio.run(main())
