"""How reading a resource's messages for `recallql reindex` / `check-index` scales with the resource.

    python benchmarks/reindex_paging.py [--sizes 10000,100000,400000] [--page 1000]

For each size it imports one resource of that many messages into a fresh SQLite file (the embedded
default), saved out of createdAt order, then reads it all the way re-index and check-index do
(SemanticMemory._messages_in_order: pages of --page messages, each after the last one of the page
before) and prints the time per page. A page is a range of ix_messages_resource_order, so its cost does
not depend on how many messages the resource holds; paging by insertion sequence within one resource
made SQLite sort the resource's remaining rows for every page (quadratic in the resource's size).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.db import create_engine
from models.migrate import upgrade
from models.records import MessageRecord, ThreadRecord
from models.repository import Repository


async def measure(size: int, page: int, work: Path) -> tuple[float, int]:
    engine = create_engine(f"sqlite+aiosqlite:///{work / f'paging-{size}.db'}")
    try:
        await upgrade(engine)
        repository = Repository(engine)
        await repository.insert_thread(
            ThreadRecord(id="t", resource_id="big", title="", metadata=None, created_at=0, updated_at=0)
        )
        content = {"format": 2, "parts": [{"type": "text", "text": "hello there"}]}
        times = list(range(size))
        random.Random(size).shuffle(times)  # insertion order unlike createdAt order
        for start in range(0, size, 10_000):
            await repository.import_messages(
                [
                    MessageRecord(f"m{i}", "t", "big", "user", "v2", times[i], content)
                    for i in range(start, min(size, start + 10_000))
                ],
                now=size,
            )
        pages = 0
        after: MessageRecord | None = None
        started = time.perf_counter()
        while rows := await repository.messages_in_order(after=after, limit=page, resource_id="big"):
            pages += 1
            after = rows[-1]
        return time.perf_counter() - started, pages
    finally:
        await engine.dispose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,400000")
    parser.add_argument("--page", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        print(f"| messages in the resource | pages of {args.page} | total s | ms per page |")
        print("|---:|---:|---:|---:|")
        for size in (int(s) for s in args.sizes.split(",")):
            seconds, pages = await measure(size, args.page, Path(folder))
            print(f"| {size:,} | {pages:,} | {seconds:.2f} | {seconds / pages * 1000:.2f} |", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
