"""What resuming a subscription from a cursor costs: messageSaved(threadId, after:) against a plain
messageSaved, with the in-process broker and with Redis, on SQLite.

    python benchmarks/resumed_subscription.py [--gap 0,20,1000] [--calls 50] [--redis redis://...]

A thread of 2,000 messages (scale_bench's loader); each call starts the message service's stream and
reads its first event:

- live: a plain subscription, which waits for a save (made once the broker delivers; not timed beyond
  the event's arrival) — the baseline a client reconnecting without `after` pays;
- resumed, a gap of N: `after` the cursor N messages before the newest, until the N-th replayed event
  (N = 0: until the first live event, as for `live`);
- resumed, a gap of 20 and 20 changed: the same with `changedSince` on a server that keeps changes,
  20 older messages having been edited since, until the 40th replayed event.

Writes a Markdown table to --out (benchmarks/results/resumed-subscription-<date>.md).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import sys
import time
import uuid
from pathlib import Path

from scale_bench import big_thread, machine, summary  # this folder

from models.records import MessageQuery
from resolvers import cursors
from resolvers.auth import OPEN
from resolvers.clock import now_ms
from resolvers.context import Services
from resolvers.events import EventBroker, InProcessBroker, RedisBroker
from resolvers.messages import MessageInput, MessagePatch

SIZE = 2000


def heard(thread_id: str) -> MessageInput:
    return MessageInput(
        thread_id, "user", {"format": 2, "parts": [{"type": "text", "text": "hi"}]}, resource_id="r1"
    )


async def first_events(
    services: Services, thread_id: str, gap: int, since: int | None = None, changed: int = 0
) -> float:
    """ms until the stream has given `gap` replayed events (resumed `after` the message `gap` before the
    newest), or for 0 its first live event (a plain subscription, with saves until it hears one); with
    `since`, `changed` more events (the changes replayed from `changedSince`)."""
    after = None
    if gap:
        row = (
            await services.repository.read_page(
                MessageQuery(thread_id=thread_id), descending=True, limit=1, offset=gap
            )
        ).rows[0]
        after = cursors.encode(*row.order_key)
    messages = services.messages
    started = time.perf_counter()
    stream = await messages.watch(thread_id, principal=OPEN, after=after, changed_since=since)
    try:
        if gap == 0:
            waiting = asyncio.ensure_future(anext(stream))
            while not waiting.done():  # a plain subscription says nothing when it is live: save until heard
                await messages.save([heard(thread_id)], principal=OPEN)
                await asyncio.wait({waiting}, timeout=0.005)
            await waiting
        else:
            for _ in range(gap + changed):
                await anext(stream)
        return (time.perf_counter() - started) * 1000
    finally:
        await stream.aclose()


async def run(
    broker_name: str, broker: EventBroker, gaps: list[int], calls: int
) -> dict[str, tuple[float, float]]:
    async with big_thread("sqlite", SIZE) as (repo, base, thread_id, _rate):
        services = Services.build(
            repo, memory_defaults=base.recall.defaults, events=broker, change_retention=86_400
        )
        await services.messages.start_journal()  # as a server keeping changes does when it starts
        since = now_ms()
        older = (
            await repo.read_page(MessageQuery(thread_id=thread_id), descending=False, limit=20, offset=100)
        ).rows
        await services.messages.update(
            [MessagePatch(m.id, content={"metadata": {"edited": True}}) for m in older], principal=OPEN
        )
        ways: dict[str, tuple[int, int | None, int]] = {"live": (0, None, 0)}
        ways |= {f"resumed, gap {gap}": (gap, None, 0) for gap in gaps if gap}
        ways["resumed, gap 20, 20 changed"] = (20, since, len(older))
        samples: dict[str, list[float]] = {way: [] for way in ways}
        for way in ways.values():  # warm-up
            await first_events(services, thread_id, *way)
        for _ in range(calls):
            for name, way in ways.items():
                samples[name].append(await first_events(services, thread_id, *way))
        await services.aclose()
        return {f"{broker_name}: {way}": summary(values) for way, values in samples.items()}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gap", default="20,1000")
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument(
        "--redis", default=os.environ.get("RECALLQL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    results_dir = Path(__file__).resolve().parent / "results"
    parser.add_argument(
        "--out", type=Path, default=results_dir / f"resumed-subscription-{dt.date.today()}.md"
    )
    args = parser.parse_args()
    gaps = [int(g) for g in args.gap.split(",")]
    results: dict[str, tuple[float, float]] = {}
    for name in ("in-process", "Redis"):
        print(f"{name}...", file=sys.stderr, flush=True)
        broker: EventBroker = (
            InProcessBroker()
            if name == "in-process"
            else RedisBroker(args.redis, prefix=f"bench-{uuid.uuid4().hex}:")
        )
        try:
            results |= await run(name, broker, gaps, args.calls)
        finally:
            await broker.aclose()
    lines = [
        f"# Resumed subscriptions — {dt.date.today()}",
        "",
        machine(),
        "",
        f"MessageService streams in process on SQLite, a thread of {SIZE:,} messages; ms from the "
        "subscription to its first live event (live) or its last replayed one (resumed); p50 / p99.",
        "",
        "| broker: way | p50 | p99 |",
        "|---|---|---|",
        *(f"| {way} | {p50:.2f} | {p99:.2f} |" for way, (p50, p99) in results.items()),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.write_text(text)


if __name__ == "__main__":
    asyncio.run(main())
