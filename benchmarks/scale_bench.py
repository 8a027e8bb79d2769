"""Recall cost as a thread grows: 1,000 vs 1,000,000 messages, on SQLite and PostgreSQL.

    python benchmarks/scale_bench.py [--sizes 1000,1000000] [--engines sqlite,postgres] [--calls 200]

For each engine it loads one thread per size through the repository (the real write path, batched; the
databases side by side), then times in process, in interleaved rounds, through the recall engine: the
newest page of 20, a deep page (page 49 of 20, ascending: rows 980-999, the deepest full page a
1,000-message thread has, so both sizes return the same 20 rows), a metadata-filtered page of 20, and the
count alone. It also reports the load rate.
Writes a Markdown table to benchmarks/results/scale-<date>.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import text

from models.db import create_engine
from models.migrate import upgrade
from models.records import MessageQuery, MessageRecord
from models.repository import Repository
from resolvers.auth import OPEN
from resolvers.config import BUILTIN_DEFAULTS
from resolvers.context import Services
from resolvers.recall import OrderBy, RecallArgs

BASE_MS = 1767225600000
PG_ADMIN = os.environ.get("RECALLQL_TEST_PG_DSN", "postgresql://127.0.0.1:5432/test")
TOPICS = ["billing", "shipping", "login", "refund", "other"]


@contextlib.asynccontextmanager
async def database(kind: str) -> AsyncIterator[str]:
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite+aiosqlite:///{tmp}/scale.db"
        return
    import asyncpg

    name = f"recallql_scale_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(PG_ADMIN)
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    try:
        yield f"{PG_ADMIN.rsplit('/', 1)[0].replace('postgresql://', 'postgresql+asyncpg://')}/{name}"
    finally:
        admin = await asyncpg.connect(PG_ADMIN)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def message(thread_id: str, i: int) -> MessageRecord:
    return MessageRecord(
        id=f"{thread_id}-m{i}",
        thread_id=thread_id,
        resource_id="r1",
        role="user" if i % 2 == 0 else "assistant",
        type="v2",
        created_at=BASE_MS + i * 1000,
        content={
            "format": 2,
            "parts": [{"type": "text", "text": f"message number {i} about topic {i % 17}"}],
            "metadata": {"topic": TOPICS[i % 5], "priority": i % 5},
        },
    )


async def load(
    repo: Repository, thread_id: str, size: int, make: Callable[[str, int], MessageRecord] = message
) -> float:
    started = time.perf_counter()
    batch = 5000
    for start in range(0, size, batch):
        await repo.save_messages([make(thread_id, i) for i in range(start, min(size, start + batch))], now=0)
    return size / (time.perf_counter() - started)


async def timed(fn: Callable[[], Awaitable[object]], calls: int, samples: list[float]) -> None:
    for _ in range(calls):
        t0 = time.perf_counter()
        await fn()
        samples.append((time.perf_counter() - t0) * 1000)


def summary(samples: list[float]) -> tuple[float, float]:
    samples = sorted(samples)
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.99))]


Scenario = Callable[[], Awaitable[object]]
Key = TypeVar("Key", bound=Hashable)
Results = dict[Any, tuple[float, float]]  # (depth, way) -> (p50, p99) ms


async def timed_rounds(
    reads: Mapping[Key, Scenario], calls: int, rounds: int
) -> dict[Key, tuple[float, float]]:
    """p50 and p99 of each read: a warm-up, then `calls` calls each, interleaved in `rounds` rounds (the
    machine drifts less within a round than across a run)."""
    for fn in reads.values():  # warm-up, untimed
        await timed(fn, max(5, calls // 10), [])
    samples: dict[Key, list[float]] = {}
    for _ in range(rounds):
        for key, fn in reads.items():
            await timed(fn, max(1, calls // rounds), samples.setdefault(key, []))
    return {key: summary(values) for key, values in samples.items()}


def depth_rows(results: dict[str, Results], ways: Sequence[str]) -> list[str]:
    """A paging report's rows: per engine and depth, each way's p50 / p99, then the first way's p50 over
    each other's."""
    lines = []
    for kind, rows in results.items():
        for depth in sorted({d for d, _ in rows}):
            timed = [rows[(depth, way)] for way in ways]
            cells = [f"{p50:.2f} / {p99:.2f}" for p50, p99 in timed]
            ratios = [f"{timed[0][0] / other[0]:.2f}x" for other in timed[1:]]
            lines.append(f"| {kind} | {depth:,} | {' | '.join(cells + ratios)} |")
    return lines


def machine() -> str:
    """The line a report opens with: where it ran, and how busy the machine was."""
    return (
        f"{platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average before: {os.getloadavg()[0]:.2f}"
    )


def depth_arguments(doc: str, name: str, default_size: int) -> argparse.Namespace:
    """--size, --engines, --calls, --rounds and --out (results/<name>-<date>.md)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=default_size)
    parser.add_argument("--engines", default="sqlite,postgres")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "results" / f"{name}-{dt.date.today()}.md",
    )
    return parser.parse_args()


async def depth_main(
    doc: str,
    name: str,
    default_size: int,
    loaded: Callable[[str, int, int], contextlib.AbstractAsyncContextManager[Mapping[Any, Scenario]]],
    report: Callable[[int, dict[str, Results]], str],
) -> None:
    """The command line of a paging benchmark (keyset_paging.py, thread_paging.py): depth_arguments';
    runs each engine and writes the report."""
    args = depth_arguments(doc, name, default_size)
    results = {}
    for kind in args.engines.split(","):
        print(f"{kind} {args.size:,}...", file=sys.stderr, flush=True)
        async with loaded(kind, args.size, args.calls) as reads:
            results[kind] = await timed_rounds(reads, args.calls, args.rounds)
    text = report(args.size, results)
    print(text)
    args.out.write_text(text)


async def settle(repo: Repository, kind: str, table: str) -> None:
    """After a bulk load: PostgreSQL's statistics of `table` made fresh (VACUUM ANALYZE, outside a
    transaction), SQLite's write-ahead log checkpointed (a running server checkpoints as it goes)."""
    async with repo.engine.connect() as conn:
        autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
        if kind == "postgres":
            await autocommit.execute(text(f"VACUUM ANALYZE {table}"))
        else:
            await autocommit.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))


@contextlib.asynccontextmanager
async def migrated(kind: str) -> AsyncIterator[tuple[Repository, Services]]:
    """A fresh database of the engine, migrated, and the services on it; disposed of afterwards."""
    async with database(kind) as url:
        engine = create_engine(url)
        try:
            await upgrade(engine)
            repo = Repository(engine)
            yield repo, Services.build(repo, memory_defaults=dict(BUILTIN_DEFAULTS))
        finally:
            await engine.dispose()


@contextlib.asynccontextmanager
async def big_thread(
    kind: str, size: int, make: Callable[[str, int], MessageRecord] = message
) -> AsyncIterator[tuple[Repository, Services, str, float]]:
    """A database holding one thread of `size` messages (`make`'s), loaded through the repository;
    yields the repository, the services, the thread's id and the load rate (messages/s)."""
    async with migrated(kind) as (repo, services):
        thread_id = "big"
        await services.threads.create(resource_id="r1", thread_id=thread_id, principal=OPEN)
        rate = await load(repo, thread_id, size, make)
        async with repo.engine.begin() as conn:
            if kind == "postgres":
                await conn.execute(text("ANALYZE messages"))
            else:
                # A bulk load leaves a WAL of the whole load behind; a running server checkpoints as
                # it goes, so measure the steady state.
                await conn.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))
        yield repo, services, thread_id, rate


@contextlib.asynccontextmanager
async def loaded(kind: str, size: int) -> AsyncIterator[tuple[dict[str, Scenario], float]]:
    """A database holding one thread of `size` messages; yields the scenarios and the load rate."""
    async with big_thread(kind, size) as (repo, services, thread_id, rate):
        recall = partial(services.recall.recall, principal=OPEN)
        scenarios: dict[str, Scenario] = {
            "newest 20": lambda: recall(RecallArgs(thread_id=thread_id, per_page=20)),
            "page 49 of 20 ASC": lambda: recall(
                RecallArgs(thread_id=thread_id, per_page=20, page=49, order_by=OrderBy("createdAt", "ASC"))
            ),
            "metadata page": lambda: recall(
                RecallArgs(thread_id=thread_id, per_page=20, metadata={"topic": "billing", "priority": 0})
            ),
            # The count with one row: what a recall of the thread reads besides its page.
            "count": lambda: repo.read_page(
                MessageQuery(thread_id=thread_id), descending=True, limit=1, offset=0
            ),
        }
        yield scenarios, rate


async def run(kind: str, sizes: list[int], calls: int, rounds: int = 10) -> list[dict[str, object]]:
    """Every size of one engine loaded side by side, then timed in interleaved rounds (each round runs
    every scenario on every size), so that drift on a shared machine hits all sizes alike."""
    async with contextlib.AsyncExitStack() as stack:
        dbs = [await stack.enter_async_context(loaded(kind, size)) for size in sizes]
        samples: dict[tuple[int, str], list[float]] = {}
        for scenarios, _ in dbs:  # warm-up, untimed
            for fn in scenarios.values():
                await timed(fn, max(5, calls // 10), [])
        for _ in range(rounds):
            for size, (scenarios, _) in zip(sizes, dbs, strict=True):
                for name, fn in scenarios.items():
                    await timed(fn, max(1, calls // rounds), samples.setdefault((size, name), []))
        rows: list[dict[str, object]] = []
        for size, (scenarios, rate) in zip(sizes, dbs, strict=True):
            row: dict[str, object] = {"engine": kind, "size": size, "load_rate": rate}
            for name in scenarios:
                row[name] = summary(samples[(size, name)])
            rows.append(row)
        return rows


def report(rows: list[dict[str, object]]) -> str:
    names = ["newest 20", "page 49 of 20 ASC", "metadata page", "count"]
    lines = [
        f"# Recall at scale — {dt.date.today()}",
        "",
        f"{platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average before: {os.getloadavg()[0]:.2f}",
        "",
        "In-process recall engine (p50 / p99 ms), one thread of N messages; the sizes of an engine are "
        "loaded side by side and timed in 10 interleaved rounds; load rate through the repository.",
        "",
        "| engine | N | " + " | ".join(names) + " | load msgs/s |",
        "|---|---|" + "---|" * len(names) + "---|",
    ]
    for r in rows:
        cells = [f"{r[n][0]:.2f} / {r[n][1]:.2f}" for n in names]  # type: ignore[index]
        lines.append(
            f"| {r['engine']} | {r['size']:,} | " + " | ".join(cells) + f" | {r['load_rate']:,.0f} |"
        )
    by = {(r["engine"], r["size"]): r for r in rows}
    sizes = sorted({r["size"] for r in rows})  # type: ignore[type-var]
    if len(sizes) >= 2:
        small, large = sizes[0], sizes[-1]
        lines += ["", f"Ratio of p50 at {large:,} to p50 at {small:,} (flat = 1.0):", ""]
        lines.append("| engine | " + " | ".join(names) + " |")
        lines.append("|---|" + "---|" * len(names))
        for kind in sorted({r["engine"] for r in rows}):  # type: ignore[type-var]
            a, b = by.get((kind, small)), by.get((kind, large))
            if a and b:
                cells = [f"{b[n][0] / a[n][0]:.2f}x" for n in names]  # type: ignore[index]
                lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,1000000")
    parser.add_argument("--engines", default="sqlite,postgres")
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    rows = []
    sizes = [int(s) for s in args.sizes.split(",")]
    for kind in args.engines.split(","):
        print(f"{kind} {', '.join(f'{n:,}' for n in sizes)}...", file=sys.stderr, flush=True)
        rows.extend(await run(kind, sizes, args.calls))
    text = report(rows)
    print(text)
    out = Path(__file__).resolve().parent / "results" / f"scale-{dt.date.today()}.md"
    out.write_text(text)


if __name__ == "__main__":
    asyncio.run(main())
