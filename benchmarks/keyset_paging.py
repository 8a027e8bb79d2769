"""Paging back through a long thread: offset pages (Mastra's `page`) against keyset pages (`before`), on
SQLite and PostgreSQL.

    python benchmarks/keyset_paging.py [--size 1000000] [--engines sqlite,postgres] [--calls 20]

Loads one thread of N messages (scale_bench's loader, the real write path), then times in process,
through the recall engine, pages of 20 that start at several depths behind the newest message, every
call a page not read before:

- by `page` (page = depth / 20, then the next one back);
- by `before`, paging on: the cursor is the page before's startCursor, as when a user scrolls back
  (the page before left its count in the cache);
- by `before`, jumping in: a cursor at that depth that no page read led to (a link to an old message,
  or a replica that did not serve the page before), so its count runs from the newest message to it.

Depths and ways are timed in interleaved rounds. Writes a Markdown table to --out
(benchmarks/results/keyset-paging-<date>.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import AsyncIterator, Awaitable, Callable

from scale_bench import big_thread, depth_main, depth_rows, machine  # this folder

from models.records import MessageQuery
from resolvers import cursors
from resolvers.auth import OPEN
from resolvers.context import Services
from resolvers.recall import RecallArgs

PAGE = 20


def depths(size: int) -> list[int]:
    """Multiples of the page size, so that `page` reaches each exactly."""
    half = size // 2 // PAGE * PAGE
    return [d for d in (0, 1_000, 10_000, 100_000) if d < half] + [half]


@contextlib.asynccontextmanager
async def loaded(
    kind: str, size: int, calls: int
) -> AsyncIterator[dict[tuple[int, str], Callable[[], Awaitable[object]]]]:
    """A database holding one thread of `size` messages; yields a read for each (depth, way), each call
    of which reads the page after the one its previous call read."""
    async with big_thread(kind, size) as (repo, services, thread_id, _rate):
        reads: dict[tuple[int, str], Callable[[], Awaitable[object]]] = {}
        pages = calls + max(5, calls // 10)  # warm-up and timed calls each read a page of their own
        for depth in depths(size):
            offsets = [depth + n * PAGE for n in range(pages)]
            # `before` the message just newer than a page reads the same rows as its offset.
            newer = await repo.read_page(
                MessageQuery(thread_id=thread_id),
                descending=True,
                limit=pages * PAGE + PAGE // 2,
                offset=max(0, depth - 1),
            )
            rows = newer.rows
            first = max(0, depth - 1)  # rows[i] is the message at depth first + i
            places = [cursors.encode(*rows[o - 1 - first].order_key) if o else None for o in offsets]
            by_page = [RecallArgs(thread_id, per_page=PAGE, page=o // PAGE) for o in offsets]
            by_place = [RecallArgs(thread_id, per_page=PAGE, before=p) for p in places]
            # Half a page off the pages read by cursor, oldest first: no read leaves their counts.
            jumps = [cursors.encode(*rows[o + PAGE // 2 - 1 - first].order_key) for o in offsets]
            by_jump = [RecallArgs(thread_id, per_page=PAGE, before=p) for p in reversed(jumps)]
            # The same rows either way (the first two pages, read again in the warm-up).
            for a, b in ((by_page[0], by_place[0]), (by_page[1], by_place[1])):
                got_a = await services.recall.recall(a, principal=OPEN)
                got_b = await services.recall.recall(b, principal=OPEN)
                assert [m.id for m in got_a.messages] == [m.id for m in got_b.messages], depth
            reads[(depth, "page")] = _reader(services, by_page)
            reads[(depth, "before")] = _reader(services, by_place)
            reads[(depth, "jump")] = _reader(services, by_jump)
        yield reads


def _reader(services: Services, calls: list[RecallArgs]) -> Callable[[], Awaitable[object]]:
    pending = iter(calls)

    async def read() -> object:
        return await services.recall.recall(next(pending), principal=OPEN)

    return read


def report(size: int, results: dict[str, dict[tuple[int, str], tuple[float, float]]]) -> str:
    lines = [
        f"# Keyset paging — {dt.date.today()}",
        "",
        machine(),
        "",
        f"In-process recall engine, one thread of {size:,} messages, pages of {PAGE} starting at a depth "
        "behind the newest message, each call a page not read before; p50 / p99 ms.",
        "",
        "| engine | depth | by page (offset) | by before, paging on | by before, jumping in "
        "| offset / paging on (p50) | offset / jumping in (p50) |",
        "|---|---|---|---|---|---|---|",
        *depth_rows(results, ("page", "before", "jump")),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    asyncio.run(depth_main(__doc__, "keyset-paging", 1_000_000, loaded, report))
