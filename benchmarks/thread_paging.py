"""Scrolling down a resource's threads listing (newest activity first): offset pages (`page`) against
keyset pages (`after: endCursor`), on SQLite and PostgreSQL.

    python benchmarks/thread_paging.py [--size 100000] [--engines sqlite,postgres] [--calls 20]

Loads one resource of N threads (with as many again in 100 other resources) through the repository,
with distinct updatedAt times, then times in process, through the threads service, listings of 20
ordered by updatedAt DESC that start at several depths from the top, every call a page not read before:

- by `page` (page = depth / 20, then the next one), with `total`;
- by `after`: the cursor is the previous page's endCursor, as when a sidebar scrolls down, with `total`;
- by `after` without `total` (a query that does not select it: the page and one thread more, no count).

Depths and ways are timed in interleaved rounds. Writes a Markdown table to --out
(benchmarks/results/thread-paging-<date>.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import AsyncIterator, Awaitable, Callable

from scale_bench import Scenario, depth_main, depth_rows, machine, migrated, settle  # this folder

from models.records import ThreadRecord
from models.repository import Repository
from resolvers import cursors
from resolvers.auth import OPEN
from resolvers.context import Services
from resolvers.threads import ThreadPage

PAGE = 20
RESOURCE = "big"


def depths(size: int) -> list[int]:
    """Multiples of the page size, so that `page` reaches each exactly."""
    half = size // 2 // PAGE * PAGE
    return [d for d in (0, 1_000, 10_000) if d < half] + [half]


async def load(repo: Repository, size: int) -> None:
    """`size` threads of the resource and as many of 100 others, interleaved in time, in batches."""
    batch: list[ThreadRecord] = []
    for n in range(2 * size):
        resource = RESOURCE if n % 2 == 0 else f"other-{n % 100}"
        # Created in one order, active in another: updatedAt is not createdAt's order.
        batch.append(ThreadRecord(f"t{n:08}", resource, f"Thread {n}", None, n, (n * 7919) % (2 * size)))
        if len(batch) == 10_000:
            await repo.import_threads(batch)
            batch = []
    if batch:
        await repo.import_threads(batch)


@contextlib.asynccontextmanager
async def loaded(kind: str, size: int, calls: int) -> AsyncIterator[dict[tuple[int, str], Scenario]]:
    """A database holding the resource's threads; yields a read for each (depth, way), each call of
    which reads the page after the one its previous call read."""
    async with migrated(kind) as (repo, services):
        await load(repo, size)
        await settle(repo, kind, "threads")
        reads: dict[tuple[int, str], Scenario] = {}
        pages = calls + max(5, calls // 10)  # warm-up and timed calls each read a page of their own
        for depth in depths(size):
            offsets = [depth + n * PAGE for n in range(pages)]
            # The thread just above each page, whose place starts it.
            rows, _ = await repo.list_threads(
                RESOURCE,
                offset=max(0, depth - 1),
                limit=pages * PAGE + 1,
                order_field="updatedAt",
                descending=True,
            )
            first = max(0, depth - 1)
            tops = [rows[o - 1 - first] if o else None for o in offsets]
            places = [cursors.encode_thread("updatedAt", t.updated_at, t.id) if t else None for t in tops]
            ways: dict[str, list[Call]] = {
                "page": [(o // PAGE, None, True) for o in offsets],
                "after": [(0, p, True) for p in places],
                "bare": [(0, p, False) for p in places],
            }
            # The same threads and hasMore every way.
            for same in zip(*(way[:2] for way in ways.values()), strict=True):
                got = [await _list(services, call) for call in same]
                assert len({(tuple(t.id for t in g.threads), g.has_more) for g in got}) == 1, depth
            for way, way_calls in ways.items():
                reads[(depth, way)] = _reader(services, way_calls)
        yield reads


Call = tuple[int, str | None, bool]  # (page, after, counted)


async def _list(services: Services, call: Call) -> ThreadPage:
    page, after, counted = call
    return await services.threads.list(
        RESOURCE,
        page=page,
        per_page=PAGE,
        order_field="updatedAt",
        after=after,
        counted=counted,
        principal=OPEN,
    )


def _reader(services: Services, calls: list[Call]) -> Callable[[], Awaitable[object]]:
    pending = iter(calls)

    async def read() -> object:
        return await _list(services, next(pending))

    return read


def report(size: int, results: dict[str, dict[tuple[int, str], tuple[float, float]]]) -> str:
    lines = [
        f"# Threads listing paging — {dt.date.today()}",
        "",
        machine(),
        "",
        f"In-process threads service, one resource of {size:,} threads (and {size:,} in 100 others), "
        f"pages of {PAGE} by updatedAt DESC starting at a depth from the top, each call a page not read "
        "before; p50 / p99 ms.",
        "",
        "| engine | depth | by page (offset), total | by after (cursor), total | by after, no total "
        "| offset / cursor (p50) | offset / cursor without total (p50) |",
        "|---|---|---|---|---|---|---|",
        *depth_rows(results, ("page", "after", "bare")),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    asyncio.run(depth_main(__doc__, "thread-paging", 100_000, loaded, report))
