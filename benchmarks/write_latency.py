"""Latency of the repository's small write transactions on SQLite (the embedded default).

    python benchmarks/write_latency.py [--calls 150]

Each write (a thread update, a working-memory update, an update and a delete of 2 messages, an outbox
settle, plain and with a pipeline batch's rows checked) runs --calls times, one after another, on a fresh
SQLite file; prints the median and p90 of each in ms. On SQLite a write transaction is one hop to the
writer thread and back, its statements run there on a plain connection; before, each statement and fetch
hopped through aiosqlite's thread on its own.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.db import create_engine
from models.migrate import upgrade
from models.records import MessageRecord, ThreadRecord
from models.repository import Repository


def _writes(
    repository: Repository, batch: dict[str, MessageRecord]
) -> dict[str, Callable[[int], Awaitable[Any]]]:
    return {
        "thread update (title, metadata)": lambda n: repository.update_thread(
            "t", title=f"title {n}", metadata={"n": n}, now=10 + n
        ),
        "thread working memory": lambda n: repository.modify_thread_working_memory(
            "t", lambda _: f"memory {n}", now=10 + n
        ),
        "update of 2 messages": lambda n: repository.update_messages(
            [f"m{2 * n}", f"m{2 * n + 1}"],
            lambda before: list(before.values()),
            now=10 + n,
            track_vectors=True,
        ),
        "delete of 2 messages": lambda n: repository.delete_messages(
            [f"m{2 * n}", f"m{2 * n + 1}"], now=10 + n, track_vectors=True
        ),
        "outbox settle (1 entry)": lambda n: repository.outbox_done([n + 1]),
        # What the vector pipeline settles: its batch's rows are read again to see none changed.
        f"outbox settle (1 entry, {len(batch)} rows checked)": lambda n: repository.outbox_done(
            [4 * n + 1], batch
        ),
    }


async def measure(calls: int, work: Path) -> dict[str, list[float]]:
    engine = create_engine(f"sqlite+aiosqlite:///{work / 'writes.db'}")
    repository = Repository(engine)
    try:
        await upgrade(engine)
        await repository.insert_thread(
            ThreadRecord(id="t", resource_id="r", title="", metadata=None, created_at=0, updated_at=0)
        )
        content = {"format": 2, "parts": [{"type": "text", "text": "hello there"}]}
        await repository.save_messages(
            [MessageRecord(f"m{i}", "t", "r", "user", "v2", i, content) for i in range(2 * calls)],
            now=1,
            track_vectors=True,
        )
        batch = [MessageRecord(f"b{i}", "t", "r", "user", "v2", i, content) for i in range(64)]
        await repository.save_messages(batch, now=1)
        stored = await repository.get_messages([m.id for m in batch])
        out: dict[str, list[float]] = {}
        for name, write in _writes(repository, dict(stored)).items():
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        results = await measure(args.calls, Path(folder))
    print(f"| write ({args.calls} calls each) | median ms | p90 ms |")
    print("|---|---:|---:|")
    for name, times in results.items():
        p90 = statistics.quantiles(times, n=10)[-1] if len(times) > 1 else times[0]
        print(f"| {name} | {statistics.median(times):.2f} | {p90:.2f} |")


if __name__ == "__main__":
    asyncio.run(main())
