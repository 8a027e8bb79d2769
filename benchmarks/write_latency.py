"""Latency of the repository's small write transactions, on SQLite (the embedded default) or PostgreSQL.

    python benchmarks/write_latency.py [--calls 150] [--database-url postgresql+asyncpg://...]

Each write (a save of 2 new messages, a re-save of 2 stored ones, a thread update, a working-memory
update, an update and a delete of 2 messages, an outbox settle, plain and with a pipeline batch's rows
checked; the save, the re-save, the update and the delete also as a server that keeps changes for
changedSince does: it reads a new message's thread's newest time, as one placed before it is a change)
runs --calls times, one after another; prints the median and p90 of each in ms. SQLite: a fresh
file; a write transaction is one hop to the writer thread and back, its statements run there on a plain
connection (before, each statement and fetch hopped through aiosqlite's thread on its own). PostgreSQL:
the database given (migrated, rows of this run under ids of its own); a save takes its threads' advisory
locks and locks the rows it replaces, and inserts new ids apart from replacing stored ones.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.db import create_engine
from models.migrate import upgrade
from models.records import MessageRecord, ThreadRecord
from models.repository import Repository


def _writes(
    repository: Repository, run: str, batch: dict[str, MessageRecord], entries: list[int]
) -> dict[str, Callable[[int], Awaitable[Any]]]:
    """`entries`: outbox entries queued for this run, two per call (each settle row takes its own)."""
    calls = len(entries) // 2
    content = {"format": 2, "parts": [{"type": "text", "text": "hello again"}]}

    def pair(n: int, prefix: str) -> list[str]:
        """The ids call n writes: stored ones ("m", saved before the timing) or new ones ("s")."""
        return [f"{run}{prefix}{2 * n}", f"{run}{prefix}{2 * n + 1}"]

    def saved(n: int, prefix: str, created_at: int = 10) -> list[MessageRecord]:
        return [
            MessageRecord(i, f"{run}t", "r", "user", "v2", created_at + n, content) for i in pair(n, prefix)
        ]

    return {
        # The thread's newest messages, as a new message usually is (one placed before them is a change
        # when changes are kept, and costs what a re-save's does).
        "save of 2 new messages": lambda n: repository.save_messages(
            saved(n, "s", 10_000), now=10 + n, track_vectors=True
        ),
        "save of 2 new messages, changes kept": lambda n: repository.save_messages(
            saved(n, "n", 20_000), now=10 + n, track_vectors=True, record_changes=True
        ),
        "re-save of 2 stored messages": lambda n: repository.save_messages(
            saved(n, "m"), now=10 + n, track_vectors=True
        ),
        # The same writes of a server that keeps changes (RECALLQL_CHANGE_RETENTION), on rows of their own.
        "re-save of 2 stored messages, changes kept": lambda n: repository.save_messages(
            saved(n, "k"), now=10 + n, track_vectors=True, record_changes=True
        ),
        "thread update (title, metadata)": lambda n: repository.update_thread(
            f"{run}t", title=f"title {n}", metadata={"n": n}, now=10 + n
        ),
        "thread working memory": lambda n: repository.modify_thread_working_memory(
            f"{run}t", lambda _: f"memory {n}", now=10 + n
        ),
        "update of 2 messages": lambda n: repository.update_messages(
            pair(n, "m"),
            lambda before, _threads: list(before.values()),
            now=10 + n,
            track_vectors=True,
        ),
        "update of 2 messages, changes kept": lambda n: repository.update_messages(
            pair(n, "k"),
            lambda before, _threads: list(before.values()),
            now=10 + n,
            track_vectors=True,
            record_changes=True,
        ),
        "delete of 2 messages": lambda n: repository.delete_messages(
            pair(n, "m"), now=10 + n, track_vectors=True
        ),
        "delete of 2 messages, changes kept": lambda n: repository.delete_messages(
            pair(n, "k"), now=10 + n, track_vectors=True, record_changes=True
        ),
        "outbox settle (1 entry)": lambda n: repository.outbox_done([entries[n]]),
        # What the vector pipeline settles: its batch's rows are read again to see none changed.
        f"outbox settle (1 entry, {len(batch)} rows checked)": lambda n: repository.outbox_done(
            [entries[calls + n]], batch
        ),
    }


async def measure(calls: int, url: str) -> dict[str, list[float]]:
    engine = create_engine(url)
    repository = Repository(engine)
    run = uuid.uuid4().hex[:8]  # a database used before keeps its rows: this run's ids are its own
    try:
        await upgrade(engine)
        await repository.insert_thread(
            ThreadRecord(id=f"{run}t", resource_id="r", title="", metadata=None, created_at=0, updated_at=0)
        )
        content = {"format": 2, "parts": [{"type": "text", "text": "hello there"}]}
        for prefix in ("m", "k"):
            await repository.save_messages(
                [
                    MessageRecord(f"{run}{prefix}{i}", f"{run}t", "r", "user", "v2", i, content)
                    for i in range(2 * calls)
                ],
                now=1,
                track_vectors=True,
            )
        batch = [MessageRecord(f"{run}b{i}", f"{run}t", "r", "user", "v2", i, content) for i in range(64)]
        await repository.save_messages(batch, now=1)
        stored = await repository.get_messages([m.id for m in batch])
        queued, _ = await repository.outbox_snapshot(
            message_ids=[f"{run}m{i}" for i in range(2 * calls)], limit=2 * calls
        )
        entries = sorted(e.id for e in queued if e.id is not None)
        out: dict[str, list[float]] = {}
        for name, write in _writes(repository, run, dict(stored), entries).items():
            times = out.setdefault(name, [])
            for n in range(calls):
                started = time.perf_counter()
                await write(n)
                times.append((time.perf_counter() - started) * 1000)
        return out
    finally:
        repository.close()
        await engine.dispose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=150)
    parser.add_argument(
        "--database-url", help="a PostgreSQL database (SQLAlchemy URL) instead of a fresh SQLite file"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        url = args.database_url or f"sqlite+aiosqlite:///{Path(folder) / 'writes.db'}"
        results = await measure(args.calls, url)
    engine = "PostgreSQL" if args.database_url else "SQLite"
    print(f"| write on {engine} ({args.calls} calls each) | median ms | p90 ms |")
    print("|---|---:|---:|")
    for name, times in results.items():
        p90 = statistics.quantiles(times, n=10)[-1] if len(times) > 1 else times[0]
        print(f"| {name} | {statistics.median(times):.2f} | {p90:.2f} |")


if __name__ == "__main__":
    asyncio.run(main())
