"""Latency of deleteThread (or of updateThreadResourceId, --operation transfer) in the repository,
keeping changes or not, on SQLite or PostgreSQL.

    python benchmarks/thread_delete.py [--sizes 100,1000] [--rounds 5] [--operation delete|transfer]
        [--database-url postgresql+asyncpg://...]

A server that keeps changes (RECALLQL_CHANGE_RETENTION) records the deletion of each message of a
deleted thread, as deleteMessages does, so that a client of the thread resuming with changedSince hears
what a live one heard; one that keeps none deletes the thread and its messages alone. Each round
deletes a thread of each size both ways (threads of this run's own ids, saved before the timing); prints
the median of the rounds in ms. A transfer gives the thread and its messages to another resource and
queues their vectors in the outbox (as a server with semantic recall does); keeping changes, it also
records each message's change and the thread's leaving its resource. SQLite: a fresh file; PostgreSQL:
the database given (migrated).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.db import create_engine
from models.migrate import upgrade
from models.records import MessageRecord, ThreadRecord
from models.repository import Repository

CONTENT = {"format": 2, "parts": [{"type": "text", "text": "a message of an ordinary length, say"}]}


async def _thread_of(repository: Repository, thread_id: str, size: int) -> None:
    await repository.insert_thread(ThreadRecord(thread_id, "r", "", None, 0, 0))
    for start in range(0, size, 500):
        batch = [
            MessageRecord(f"{thread_id}-{i}", thread_id, "r", "user", "v2", i, CONTENT)
            for i in range(start, min(size, start + 500))
        ]
        await repository.save_messages(batch, now=1)


async def measure(
    url: str, sizes: list[int], rounds: int, operation: str = "delete"
) -> dict[tuple[int, bool], list[float]]:
    engine = create_engine(url)
    repository = Repository(engine)
    run = uuid.uuid4().hex[:8]
    out: dict[tuple[int, bool], list[float]] = {(size, kept): [] for size in sizes for kept in (False, True)}
    try:
        await upgrade(engine)
        for r in range(rounds):
            for size, kept in out:
                thread_id = f"{run}-{r}-{size}-{int(kept)}"
                await _thread_of(repository, thread_id, size)
                started = time.perf_counter()
                if operation == "transfer":
                    await repository.transfer_thread(
                        thread_id, "r2", now=2, track_vectors=True, record_changes=kept
                    )
                else:
                    await repository.delete_thread(thread_id, now=2, record_changes=kept)
                out[size, kept].append((time.perf_counter() - started) * 1000)
                if operation == "transfer":
                    await repository.delete_thread(thread_id, now=2)
        await repository.prune_changes(3)  # this run's recorded changes (stamped 2)
        return out
    finally:
        repository.close()
        await engine.dispose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--operation", choices=("delete", "transfer"), default="delete")
    parser.add_argument(
        "--database-url", help="a PostgreSQL database (SQLAlchemy URL) instead of a fresh SQLite file"
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as folder:
        url = args.database_url or f"sqlite+aiosqlite:///{Path(folder) / 'deletes.db'}"
        results = await measure(url, sizes, args.rounds, args.operation)
    engine = "PostgreSQL" if args.database_url else "SQLite"
    name = "updateThreadResourceId" if args.operation == "transfer" else "deleteThread"
    print(f"| {name} on {engine} ({args.rounds} rounds) | changes not kept, ms | kept, ms | kept / not |")
    print("|---|---:|---:|---:|")
    for size in sizes:
        plain, kept = statistics.median(results[size, False]), statistics.median(results[size, True])
        print(f"| thread of {size:,} messages | {plain:.1f} | {kept:.1f} | {kept / plain:.2f}x |")


if __name__ == "__main__":
    asyncio.run(main())
