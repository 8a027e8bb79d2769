"""The vector outbox's lookups by message while a backlog is queued, on SQLite and PostgreSQL.

    python benchmarks/outbox_backlog.py [--backlogs 0,10000,100000,1000000] [--engines sqlite,postgres]

A rebuild of a damaged collection, a `recallql reindex` of a resource or a large import queues one outbox
entry per message. Meanwhile every write with semantic recall looks up its own messages' entries, a clone
or a move counts its sources', and each page of the rebuild reads its own page's. This grows the backlog
in one database, resource by resource (each one's messages saved, then queued as a rebuild queues them),
and at each size times, in process, through the repository:

- a save of 2 new messages with their outbox entries, the save's lookup of its entries and rows (what a
  request does before it embeds), and the settle of those entries once written;
- a rebuild page's lookup: the entries and rows of 256 queued messages (a different page each call);
- a clone's check: the queued-entry counts of 100 messages.

Each is timed with the outbox's index on message id (ix_vector_outbox_message, migration 0010) and with
it dropped (the schema before), in the same database and run. p50 / p99 ms. Writes a Markdown table to
--out (benchmarks/results/outbox-backlog-<date>.md).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import sys
from pathlib import Path

from scale_bench import Results, Scenario, machine, migrated, settle, timed_rounds  # this folder

from models.records import MessageRecord, ThreadRecord
from models.repository import Repository
from models.tables import outbox_table

PAGE = 256
WAYS = ("save of 2, lookup, settle", "rebuild page of 256", "clone check of 100")
VARIANTS = ("index", "no index")


def _message(resource: str, i: int) -> MessageRecord:
    content = {"format": 2, "parts": [{"type": "text", "text": f"message {i} of {resource}"}]}
    return MessageRecord(f"{resource}-m{i}", f"{resource}-t{i % 20}", resource, "user", "v2", i, content)


async def grow(repo: Repository, resource: str, size: int) -> None:
    """One resource of `size` messages over 20 threads, saved, then every one queued for its vectors."""
    await repo.import_threads([ThreadRecord(f"{resource}-t{t}", resource, "", None, 0, 0) for t in range(20)])
    for start in range(0, size, 5_000):
        batch = [_message(resource, i) for i in range(start, min(size, start + 5_000))]
        await repo.save_messages(batch, now=1)
    queued = await repo.outbox_queue_resource(resource)
    assert queued == size, queued


def scenarios(repo: Repository, backlog: int, queued: str, size: int) -> dict[tuple[int, str], Scenario]:
    """`queued`: a resource of `size` messages whose entries are queued (its pages are the rebuild's)."""
    saves = itertools.count()
    pages = itertools.cycle(range(0, max(size - PAGE, 1), PAGE))
    clones = itertools.cycle(range(0, max(size - 100, 1), 100))
    content = {"format": 2, "parts": [{"type": "text", "text": "a new message"}]}

    async def save() -> None:
        n = next(saves)
        records = [
            MessageRecord(f"new-{backlog}-{n}-{k}", "small-t0", "small", "user", "v2", 10 * n + k, content)
            for k in range(2)
        ]
        await repo.save_messages(records, now=1, track_vectors=True)
        ids = [m.id for m in records]
        entries, rows = await repo.outbox_snapshot(message_ids=ids, limit=PAGE)
        assert len(entries) == 2 and len(rows) == 2
        await repo.outbox_done([e.id for e in entries if e.id is not None], rows)

    async def page() -> None:
        start = next(pages)
        ids = [f"{queued}-m{i}" for i in range(start, start + PAGE)] if size else ["absent"]
        entries, _rows = await repo.outbox_snapshot(message_ids=ids, limit=4 * PAGE)
        assert len(entries) == min(size, PAGE)

    async def clone() -> None:
        start = next(clones)
        ids = [f"{queued}-m{i}" for i in range(start, start + 100)] if size else ["absent"]
        counts = await repo.outbox_queued(ids)
        assert sum(counts.values()) == min(size, 100)

    return {(backlog, WAYS[0]): save, (backlog, WAYS[1]): page, (backlog, WAYS[2]): clone}


# The index migration 0010 made, as the models declare it: dropped and made again to time both schemas.
MESSAGE_INDEX = next(i for i in outbox_table.indexes if i.name == "ix_vector_outbox_message")


async def index(repo: Repository, kind: str, present: bool) -> None:
    async with repo.engine.begin() as conn:
        await conn.run_sync(MESSAGE_INDEX.create if present else MESSAGE_INDEX.drop)
    await settle(repo, kind, "vector_outbox")


async def run(kind: str, backlogs: list[int], calls: int, rounds: int) -> dict[str, Results]:
    results: dict[str, Results] = {v: {} for v in VARIANTS}
    async with migrated(kind) as (repo, _services):
        await repo.import_threads([ThreadRecord("small-t0", "small", "", None, 0, 0)])
        queued, size, have = "none", 0, 0
        for n, backlog in enumerate(sorted(backlogs)):
            if backlog > have:
                queued, size = f"big{n}", backlog - have
                print(f"{kind}: queueing {size:,} more...", file=sys.stderr, flush=True)
                await grow(repo, queued, size)
                have = backlog
                # Statistics as autovacuum would have them by now (plans made while the tables were
                # small, and cached, would otherwise stay).
                await settle(repo, kind, "messages")
            await settle(repo, kind, "vector_outbox")
            print(f"{kind}: {backlog:,} queued", file=sys.stderr, flush=True)
            reads = scenarios(repo, backlog, queued, size)
            results["index"].update(await timed_rounds(reads, calls, rounds))
            await index(repo, kind, present=False)
            results["no index"].update(await timed_rounds(reads, calls, rounds))
            await index(repo, kind, present=True)
    return results


def report(results: dict[str, dict[str, Results]]) -> str:
    lines = [
        f"# The vector outbox's lookups by message under a backlog — {dt.date.today()}",
        "",
        machine(),
        "",
        "In process, through the repository; the backlog is entries queued for other messages (a rebuild's "
        "or a reindex's). p50 / p99 ms with the index on message id, then without it (the schema before "
        "migration 0010), then the p50 without over the p50 with.",
        "",
        "| engine | backlog | "
        + " | ".join(f"{w}: {v}" for w in WAYS for v in VARIANTS)
        + " | "
        + " | ".join(f"{w}: speed-up" for w in WAYS)
        + " |",
        "|---|---|" + "---|" * (3 * len(WAYS)),
    ]
    for kind, variants in results.items():
        for backlog in sorted({b for b, _ in variants["index"]}):
            cells, ratios = [], []
            for way in WAYS:
                with_index, without = variants["index"][(backlog, way)], variants["no index"][(backlog, way)]
                cells += [f"{p50:.2f} / {p99:.2f}" for p50, p99 in (with_index, without)]
                ratios.append(f"{without[0] / with_index[0]:.1f}x")
            lines.append(f"| {kind} | {backlog:,} | {' | '.join(cells + ratios)} |")
    return "\n".join(lines) + "\n"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backlogs", default="0,10000,100000,1000000")
    parser.add_argument("--engines", default="sqlite,postgres")
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "results" / f"outbox-backlog-{dt.date.today()}.md",
    )
    args = parser.parse_args()
    backlogs = [int(b) for b in args.backlogs.split(",")]
    results = {kind: await run(kind, backlogs, args.calls, args.rounds) for kind in args.engines.split(",")}
    text_ = report(results)
    print(text_)
    args.out.write_text(text_)


if __name__ == "__main__":
    asyncio.run(main())
