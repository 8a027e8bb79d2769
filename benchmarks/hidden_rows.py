"""Hiding signals in the page query (recall's hideInPageQuery) as a thread grows: 1,000 vs 1,000,000
messages, one in 20 of them a typed signal and one in 100 a system row, on SQLite and PostgreSQL.

    python benchmarks/hidden_rows.py [--sizes 1000,1000000] [--engines sqlite,postgres] [--calls 100]

Loads one thread per size (scale_bench's loader, the real write path; the sizes of an engine side by
side), then times in process, through the recall engine, in interleaved rounds, the newest page of 20
with hideSignals all:

- hidden after the page (Mastra's way, the default): the count is maintained, the page comes back short;
- hideInPageQuery: a full page; its count is the maintained one less the thread's hidden rows, counted
  along ix_messages_thread_hidden and cached until the thread changes;
- hideInPageQuery, first read after a write: a message is saved before each read (not timed), so the
  hidden rows are counted again.

PostgreSQL's table is vacuumed after the load, as autovacuum would, so that an index can be read alone.

Writes a Markdown table to --out (benchmarks/results/hidden-rows-<date>.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import platform
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path

from scale_bench import big_thread, message, summary, timed  # this folder

from models.records import MessageRecord
from resolvers.auth import OPEN
from resolvers.messages import MessageInput
from resolvers.recall import RecallArgs

WAYS = ("after the page", "in the page query", "in the page query, after a write")


def with_hidden_rows(thread_id: str, i: int) -> MessageRecord:
    """scale_bench's message, but one in 20 a typed signal and one in 100 a system row."""
    record = message(thread_id, i)
    if i % 20 == 7:
        return replace(record, role="signal", signal_type="state")
    if i % 100 == 3:
        return replace(record, role="system")
    return record


@contextlib.asynccontextmanager
async def loaded(kind: str, size: int) -> AsyncIterator[dict[str, Callable[[], Awaitable[object]]]]:
    async with big_thread(kind, size, with_hidden_rows) as (repo, services, thread_id, _rate):
        if kind == "postgres":
            # The steady state autovacuum keeps after a bulk load: a visibility map, so that counts can
            # read the index alone.
            async with repo.engine.connect() as conn:
                await (await conn.execution_options(isolation_level="AUTOCOMMIT")).exec_driver_sql(
                    "VACUUM ANALYZE messages"
                )
        recall = services.recall.recall
        mastra = RecallArgs(thread_id, per_page=20, hide_signals=True)
        pushed = replace(mastra, hide_in_page_query=True)
        got = await recall(pushed, principal=OPEN)
        assert len(got.messages) == 20 and len((await recall(mastra, principal=OPEN)).messages) < 20
        written = 0

        async def after_a_write() -> object:
            nonlocal written
            written += 1
            return await recall(pushed, principal=OPEN)

        async def write() -> None:
            # Older than everything: the newest page stays the same, the thread's count changes.
            content = {"format": 2, "parts": [{"type": "text", "text": "late"}]}
            await services.messages.save(
                [
                    MessageInput(
                        thread_id=thread_id,
                        role="user",
                        content=content,
                        id=f"late-{written}",
                        created_at=written,
                    )
                ],
                principal=OPEN,
            )

        yield {
            WAYS[0]: lambda: recall(mastra, principal=OPEN),
            WAYS[1]: lambda: recall(pushed, principal=OPEN),
            WAYS[2]: after_a_write,
            "write": write,
        }


async def run(
    kind: str, sizes: list[int], calls: int, rounds: int
) -> dict[int, dict[str, tuple[float, float]]]:
    async with contextlib.AsyncExitStack() as stack:
        dbs = [await stack.enter_async_context(loaded(kind, size)) for size in sizes]
        samples: dict[tuple[int, str], list[float]] = {}
        for _ in range(rounds):
            for size, ways in zip(sizes, dbs, strict=True):
                for way in WAYS:
                    times = samples.setdefault((size, way), [])
                    for _ in range(max(1, calls // rounds)):
                        if way == WAYS[2]:
                            await ways["write"]()
                        await timed(ways[way], 1, times)
        return {size: {way: summary(samples[(size, way)]) for way in WAYS} for size in sizes}


def report(results: dict[str, dict[int, dict[str, tuple[float, float]]]]) -> str:
    lines = [
        f"# Hidden rows in the page query — {dt.date.today()}",
        "",
        f"{platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average before: {os.getloadavg()[0]:.2f}",
        "",
        "In-process recall engine, the newest page of 20 with hideSignals all, one thread of N messages "
        "(one in 20 a signal, one in 100 a system row); p50 / p99 ms.",
        "",
        "| engine | N | " + " | ".join(f"hidden {way}" for way in WAYS) + " |",
        "|---|---|" + "---|" * len(WAYS),
    ]
    for kind, by_size in results.items():
        for size, row in by_size.items():
            cells = [f"{row[way][0]:.2f} / {row[way][1]:.2f}" for way in WAYS]
            lines.append(f"| {kind} | {size:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,1000000")
    parser.add_argument("--engines", default="sqlite,postgres")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "results" / f"hidden-rows-{dt.date.today()}.md",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results = {}
    for kind in args.engines.split(","):
        print(f"{kind} {', '.join(f'{n:,}' for n in sizes)}...", file=sys.stderr, flush=True)
        results[kind] = await run(kind, sizes, args.calls, args.rounds)
    text = report(results)
    print(text)
    args.out.write_text(text)


if __name__ == "__main__":
    asyncio.run(main())
