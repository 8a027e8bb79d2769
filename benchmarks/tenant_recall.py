"""Recall in a database shared by many tenants: an established tenant and one newer than the statistics.

    python benchmarks/tenant_recall.py [--resources 500] [--threads 4] [--messages 100]
                                       [--fresh-threads 20] [--fresh-messages 500]
                                       [--engines sqlite,postgres] [--calls 200] [--out FILE]

Each engine gets a fresh database holding --resources resources of --threads threads of --messages
messages, written through the repository in the order they would arrive: the first thread before the
others, which then take turns (so a thread's rows are spread over the table). PostgreSQL then runs
ANALYZE, as autovacuum would; SQLite is left as RecallQL leaves it, never analyzed. Then a fresh tenant
arrives: --fresh-threads threads of --fresh-messages messages, not yet in the statistics (autovacuum
analyzes a big table only after a tenth of it changed). Timed in process through the recall engine,
with resourceId as Memory.recall passes it, in interleaved rounds (p50 / p99 ms):

- newest 20: a thread's newest page;
- old thread: the newest page of the tenant's first thread, whose messages all precede the others';
- since: a page of the messages after a date, oldest first;
- include: a page of 1 with one message of the thread and 3 on either side.

Each for a thread of an established tenant and of the fresh one. Prints a Markdown table (and writes it
to --out).
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
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scale_bench import database, summary, timed  # this folder: a fresh SQLite file or PostgreSQL database

from models.db import create_engine
from models.migrate import upgrade
from models.records import DateRange, MessageRecord
from models.repository import Repository
from resolvers.auth import OPEN
from resolvers.config import BUILTIN_DEFAULTS
from resolvers.context import Services
from resolvers.recall import IncludeItem, OrderBy, RecallArgs

BASE_MS = 1767225600000
SCENARIOS = ["newest 20", "old thread", "since", "include"]
Scenario = Callable[[], Awaitable[object]]


async def tenant(
    services: Services, resource_id: str, threads: int, messages: int, start_ms: int
) -> dict[str, int]:
    """`threads` threads of `messages` messages: the first (t0) an old conversation, over before the
    others began, the others arriving round robin. Returns each message's createdAt by id."""
    ids = [f"{resource_id}-t{n}" for n in range(threads)]
    for thread_id in ids:
        await services.threads.create(resource_id=resource_id, thread_id=thread_id, principal=OPEN)
    order = [(ids[0], i) for i in range(messages)]
    order += [(thread_id, i) for i in range(messages) for thread_id in ids[1:]]
    rows = [
        MessageRecord(
            id=f"{thread_id}-m{i}",
            thread_id=thread_id,
            resource_id=resource_id,
            role="user" if i % 2 == 0 else "assistant",
            type="v2",
            created_at=start_ms + position * 1000,
            content={"format": 2, "parts": [{"type": "text", "text": f"message {i} of {thread_id}"}]},
        )
        for position, (thread_id, i) in enumerate(order)
    ]
    for start in range(0, len(rows), 5000):
        await services.repository.save_messages(rows[start : start + 5000], now=0)
    return {row.id: row.created_at for row in rows}


@contextlib.asynccontextmanager
async def loaded(kind: str, args: argparse.Namespace) -> AsyncIterator[dict[str, Scenario]]:
    async with database(kind) as url:
        engine = create_engine(url)
        try:
            await upgrade(engine)
            services = Services.build(Repository(engine), memory_defaults=dict(BUILTIN_DEFAULTS))
            created: dict[str, int] = {}
            for r in range(args.resources):
                created.update(await tenant(services, f"r{r}", args.threads, args.messages, BASE_MS + r))
            if kind == "postgres":
                async with engine.begin() as conn:
                    # Off, so that the fresh tenant stays out of the statistics while it is timed.
                    await conn.exec_driver_sql("ALTER TABLE messages SET (autovacuum_enabled = false)")
                    await conn.exec_driver_sql("ANALYZE")
            created |= await tenant(services, "fresh", args.fresh_threads, args.fresh_messages, BASE_MS)
            recall = partial(services.recall.recall, principal=OPEN)
            scenarios: dict[str, Scenario] = {}
            tenants = (
                ("established", f"r{args.resources // 2}", args.messages),
                ("fresh", "fresh", args.fresh_messages),
            )
            for who, resource_id, messages in tenants:
                thread_id, idle = f"{resource_id}-t1", f"{resource_id}-t0"
                middle = messages // 2
                base = RecallArgs(thread_id=thread_id, resource_id=resource_id)
                cases = {
                    "newest 20": (replace(base, per_page=20), range(messages - 20, messages)),
                    "old thread": (
                        replace(base, thread_id=idle, per_page=20),
                        range(messages - 20, messages),
                    ),
                    "since": (
                        replace(
                            base,
                            per_page=20,
                            date_range=DateRange(start=created[f"{thread_id}-m{middle}"]),
                            order_by=OrderBy("createdAt", "ASC"),
                        ),
                        range(middle, min(messages, middle + 20)),
                    ),
                    "include": (
                        replace(
                            base,
                            per_page=1,
                            include=[
                                IncludeItem(
                                    f"{thread_id}-m{middle}", with_previous_messages=3, with_next_messages=3
                                )
                            ],
                        ),
                        [*range(middle - 3, middle + 4), messages - 1],
                    ),
                }
                for name, (recall_args, expected) in cases.items():
                    # The timed calls must read what they claim to: check each answer once.
                    got = sorted(m.id for m in (await recall(recall_args)).messages)
                    want = sorted(f"{recall_args.thread_id}-m{i}" for i in expected)
                    assert got == want, (who, name, got)
                    scenarios[f"{who}|{name}"] = partial(recall, recall_args)
            yield scenarios
        finally:
            await engine.dispose()


async def run(kind: str, args: argparse.Namespace, rounds: int = 10) -> dict[str, str]:
    async with loaded(kind, args) as scenarios:
        for fn in scenarios.values():  # warm-up, untimed
            await timed(fn, max(5, args.calls // 10), [])
        samples: dict[str, list[float]] = {name: [] for name in scenarios}
        for _ in range(rounds):
            for name, fn in scenarios.items():
                await timed(fn, max(1, args.calls // rounds), samples[name])
        return {name: "{:.3f} / {:.3f}".format(*summary(s)) for name, s in samples.items()}


def report(results: dict[str, dict[str, str]], args: argparse.Namespace) -> str:
    lines = [
        f"# Recall among many tenants — {dt.date.today()}",
        "",
        f"{platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}.",
        f"{args.resources} established resources x {args.threads} threads x {args.messages} messages; "
        f"a fresh resource of {args.fresh_threads} x {args.fresh_messages}, newer than the statistics. "
        "In-process recall engine, p50 / p99 ms.",
        "",
        "| engine | tenant | " + " | ".join(SCENARIOS) + " |",
        "|---|---|" + "---|" * len(SCENARIOS),
    ]
    for kind, row in results.items():
        for who in ("established", "fresh"):
            cells = [row[f"{who}|{name}"] for name in SCENARIOS]
            lines.append(f"| {kind} | {who} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resources", type=int, default=500)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--fresh-threads", type=int, default=20)
    parser.add_argument("--fresh-messages", type=int, default=500)
    parser.add_argument("--engines", default="sqlite,postgres")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results = {kind: asyncio.run(run(kind, args)) for kind in args.engines.split(",")}
    text = report(results, args)
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
