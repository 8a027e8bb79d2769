"""What PostgreSQL's plan_cache_mode = force_custom_plan costs RecallQL's reads and writes, against the
default (auto), on one database in one run.

    python benchmarks/plan_cache.py [--size 20000] [--calls 400] [--rounds 8]

Why: asyncpg prepares every statement, and after five runs PostgreSQL may keep a generic plan for it,
made with the statistics of that moment. Planned while the tables were small, such a plan can outlive
them: saves took 33-38 ms instead of 4 on a server started before 100,000 messages were loaded, until the
tables were analyzed (`recallql import` analyzes them; other bulk writes wait for autovacuum).
force_custom_plan plans every run with its own parameters and the current statistics, which rules that
out, at the cost of planning each time. This measures that cost.

Loads 10 resources of 100 threads and --size messages each (metadata {"topic": ...} on every message)
through the repository, analyzes the tables, then times in process, through the services, each call
with both settings interleaved in the same rounds (two engines on the same database; the setting
passed as the URL's `options`, as a deployment would):

- a thread's newest page of 20 (recall: its count and its page);
- the same with a metadata filter (every message of the thread has that topic: the filter is checked
  on each row of the page and of its count);
- the same with two include windows of 3 messages a side;
- a resource's messages, oldest page of 40 (with its count);
- a resource's threads, newest 20 by updatedAt (with their count);
- a save of 2 messages into a thread (the write path: lookups, upsert, counts, outbox).

Writes a Markdown table (p50 / p99 ms of each, and the ratio of the p50s) to --out
(benchmarks/results/plan-cache-<date>.md).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
from pathlib import Path
from typing import Any

from resource_messages import load  # this folder
from scale_bench import database, machine, settle, timed_rounds  # this folder
from sqlalchemy import text

from models.db import create_engine
from models.migrate import upgrade
from models.repository import Repository
from resolvers.auth import OPEN
from resolvers.config import BUILTIN_DEFAULTS
from resolvers.context import Services
from resolvers.messages import MessageInput
from resolvers.recall import IncludeItem, RecallArgs

CUSTOM = "options=-c%20plan_cache_mode%3Dforce_custom_plan"
MODES = ("auto (default)", "force_custom_plan")
WAYS = (
    "thread page",
    "thread page, metadata filter",
    "thread page, 2 include windows",
    "resource messages page",
    "resource threads page",
    "save of 2 messages",
)


def targets(size: int) -> tuple[str, str]:
    """Two messages of thread r0-t7 (message i is in thread i % 100), a fifth and a half way in."""
    return f"r0-m{7 + 100 * (size // 500)}", f"r0-m{7 + 100 * (size // 200)}"


def scenarios(services: Services, size: int) -> dict[str, object]:
    counter = itertools.count()

    async def thread_page() -> object:
        return await services.recall.recall(RecallArgs("r0-t7", "r0", per_page=20), principal=OPEN)

    async def filtered() -> object:
        args = RecallArgs("r0-t7", "r0", per_page=20, metadata={"topic": "login"})
        return await services.recall.recall(args, principal=OPEN)

    async def included() -> object:
        windows = [IncludeItem(target, "r0-t7", 3, 3) for target in targets(size)]
        return await services.recall.recall(
            RecallArgs("r0-t7", "r0", per_page=20, include=windows), principal=OPEN
        )

    async def resource_messages() -> object:
        return await services.recall.resource_messages("r0", per_page=40, principal=OPEN)

    async def threads() -> object:
        return await services.threads.list("r0", per_page=20, order_field="updatedAt", principal=OPEN)

    async def save() -> object:
        n = next(counter)
        content = {"format": 2, "parts": [{"type": "text", "text": f"saved {n}"}]}
        batch = [MessageInput(thread_id="r1-t3", role="user", content=content) for _ in range(2)]
        return await services.messages.save(batch, principal=OPEN)

    return dict(zip(WAYS, (thread_page, filtered, included, resource_messages, threads, save), strict=True))


async def check(calls: dict[str, Any], size: int) -> None:
    """Each call answers what it is timed for, under either setting."""
    page = await calls["thread page"]()
    assert page.total == size // 100 and len(page.messages) == min(20, page.total), page.total
    filtered = await calls["thread page, metadata filter"]()
    assert filtered.messages and all(m.content["metadata"]["topic"] == "login" for m in filtered.messages)
    ids = {m.id for m in (await calls["thread page, 2 include windows"]()).messages}
    assert set(targets(size)) <= ids, sorted(ids)
    assert len((await calls["resource messages page"]()).messages) == 40
    assert len((await calls["resource threads page"]()).threads) == 20
    assert len((await calls["save of 2 messages"]()).messages) == 2


async def run(size: int, calls: int, rounds: int) -> dict[tuple[str, str], tuple[float, float]]:
    async with database("postgres") as url:
        engines = [create_engine(url), create_engine(f"{url}?{CUSTOM}")]
        try:
            await upgrade(engines[0])
            repo = Repository(engines[0])
            await load(repo, size)
            for table in ("messages", "threads", "vector_outbox"):
                await settle(repo, "postgres", table)
            for mode, engine in zip(("auto", "force_custom_plan"), engines, strict=True):
                async with engine.connect() as conn:
                    setting = (await conn.execute(text("SHOW plan_cache_mode"))).scalar()
                assert setting == mode, f"plan_cache_mode is {setting}, expected {mode}"
            reads = {}
            for mode, engine in zip(MODES, engines, strict=True):
                services = Services.build(Repository(engine), memory_defaults=dict(BUILTIN_DEFAULTS))
                for way, fn in scenarios(services, size).items():
                    reads[(mode, way)] = fn
            results = await timed_rounds(reads, calls, rounds)  # type: ignore[arg-type]
            for mode in MODES:
                await check({way: reads[(mode, way)] for way in WAYS}, size)
            return results
        finally:
            for engine in engines:
                await engine.dispose()


def report(size: int, calls: int, rounds: int, results: dict[tuple[str, str], tuple[float, float]]) -> str:
    lines = [
        f"# plan_cache_mode on PostgreSQL ({dt.date.today()})",
        "",
        machine(),
        "",
        f"10 resources of 100 threads and {size:,} messages each; {calls} calls of each, in {rounds} "
        "interleaved rounds, both settings on the same database. p50 / p99 ms.",
        "",
        f"| call | {' | '.join(MODES)} | force_custom_plan / auto (p50) |",
        "|---|---:|---:|---:|",
    ]
    for way in WAYS:
        auto, custom = results[(MODES[0], way)], results[(MODES[1], way)]
        lines.append(
            f"| {way} | {auto[0]:.2f} / {auto[1]:.2f} | {custom[0]:.2f} / {custom[1]:.2f} | "
            f"{custom[0] / auto[0]:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=20_000)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results = asyncio.run(run(args.size, args.calls, args.rounds))
    text = report(args.size, args.calls, args.rounds, results)
    out = args.out or Path(__file__).parent / "results" / f"plan-cache-{dt.date.today()}.md"
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
