"""Listing every resource's threads (`threads` without resourceId, Mastra's listThreads without
filter.resourceId) beside one resource's listing, on SQLite and PostgreSQL.

    python benchmarks/all_threads.py [--size 100000] [--engines sqlite,postgres] [--calls 20]

Loads N threads over 1,000 resources (one in a hundred with metadata {"flag": true}) through the
repository, then times in process, through the threads service, the newest 20 threads:

- of one resource (its index: the listing a sidebar reads);
- of all resources, without `total` (the page and one thread more) and with it;
- of all resources with the metadata filter {"flag": true}, with `total`.

A listing of all threads has no index of its own: it reads and sorts every thread (the threads table
keeps its indexes for the per-resource listings every save updates). Writes a Markdown table to --out
(benchmarks/results/all-threads-<date>.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import AsyncIterator, Awaitable, Callable

from scale_bench import Scenario, depth_main, depth_rows, machine, migrated, settle  # this folder

from models.records import ThreadRecord
from models.repository import Repository
from resolvers.auth import OPEN
from resolvers.context import Services

PAGE = 20
RESOURCES = 1_000
WAYS = ("one resource", "all, no total", "all, total", "all, metadata filter")


async def load(repo: Repository, size: int) -> None:
    batch: list[ThreadRecord] = []
    for n in range(size):
        metadata = {"flag": True} if n % 100 == 0 else {"flag": False}
        batch.append(ThreadRecord(f"t{n:08}", f"r{n % RESOURCES}", f"Thread {n}", metadata, n, n))
        if len(batch) == 10_000:
            await repo.import_threads(batch)
            batch = []
    if batch:
        await repo.import_threads(batch)


def _reader(services: Services, resource: str | None, counted: bool, metadata: dict | None) -> Scenario:
    async def read() -> object:
        return await services.threads.list(
            resource, per_page=PAGE, metadata=metadata, counted=counted, principal=OPEN
        )

    return read


@contextlib.asynccontextmanager
async def loaded(kind: str, size: int, _calls: int) -> AsyncIterator[dict[tuple[int, str], Scenario]]:
    async with migrated(kind) as (repo, services):
        await load(repo, size)
        await settle(repo, kind, "threads")
        reads: dict[str, Callable[[], Awaitable[object]]] = {
            "one resource": _reader(services, "r7", True, None),
            "all, no total": _reader(services, None, False, None),
            "all, total": _reader(services, None, True, None),
            "all, metadata filter": _reader(services, None, True, {"flag": True}),
        }
        # Every way reads what it should: the newest threads of all, of r7, of the flagged ones.
        newest = (await services.threads.list(None, per_page=PAGE, principal=OPEN)).threads
        assert [t.id for t in newest] == [f"t{n:08}" for n in range(size - 1, size - 1 - PAGE, -1)]
        flagged = await services.threads.list(None, per_page=PAGE, metadata={"flag": True}, principal=OPEN)
        assert flagged.total == (size + 99) // 100
        assert all(t.metadata == {"flag": True} for t in flagged.threads)
        yield {(size, way): read for way, read in reads.items()}


def report(size: int, results: dict[str, dict[tuple[int, str], tuple[float, float]]]) -> str:
    lines = [
        f"# Listing all threads — {dt.date.today()}",
        "",
        machine(),
        "",
        f"In-process threads service, {size:,} threads over {RESOURCES:,} resources, the newest {PAGE} "
        "(createdAt DESC); p50 / p99 ms, then one resource's p50 over each other way's.",
        "",
        "| engine | threads | "
        + " | ".join(WAYS)
        + " | "
        + " | ".join(f"one ÷ {w}" for w in WAYS[1:])
        + " |",
        "|---|---|" + "---|" * (2 * len(WAYS) - 1),
        *depth_rows(results, WAYS),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    asyncio.run(depth_main(__doc__, "all-threads", 100_000, loaded, report))
