"""What an upsert through the Chroma child process costs the server's event loop.

    python benchmarks/chroma_child_pipe.py [--vectors 1000] [--calls 12] [--dimension 384]

IsolatedChromaIndex sends each upsert down a pipe to the child that runs embedded Chroma. This times,
for upserts of ``--vectors`` float32 rows (as the local embedder hands them over), the longest stall
of an asyncio ticker running every millisecond beside the call, and the CPU of the calling thread,
twice in alternating calls: the vectors sent as one array beside plain lists (what ``upsert`` does),
and as a list of VectorItems, one array object each (what it did before). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from models.chroma_process import IsolatedChromaIndex  # noqa: E402
from models.vector_index import VectorItem  # noqa: E402

WAYS = {
    "one float32 array and plain lists (upsert)": "columns",
    "a list of VectorItems, an array object each (before)": "items",
}


async def timed(index: IsolatedChromaIndex, items: list[VectorItem], way: str) -> tuple[float, float, float]:
    """(worst event-loop stall, calling thread's CPU, wall), in ms."""
    worst = 0.0
    stop = False

    async def tick() -> None:
        nonlocal worst
        last = time.perf_counter()
        while not stop:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            worst = max(worst, now - last - 0.001)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.01)
    cpu, wall = time.thread_time(), time.perf_counter()
    if way == "columns":
        await index.upsert(items)
    else:  # the list as it is, as upsert sent it before
        await index._call("upsert", items)
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    stop = True
    await ticker
    return worst * 1000, cpu * 1000, wall * 1000


async def main(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory() as folder:
        index = IsolatedChromaIndex(
            path=Path(folder) / "chroma", model_name="bench", dimension=args.dimension
        )
        await index.ping()  # the child starts here, not inside the first timed call
        results: dict[str, list[tuple[float, float, float]]] = {label: [] for label in WAYS}
        try:
            for call in range(args.calls):
                for label, way in WAYS.items() if call % 2 == 0 else reversed(WAYS.items()):
                    vectors = rng.standard_normal((args.vectors, args.dimension)).astype(np.float32)
                    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                    items = [
                        VectorItem(f"{way}-{call}-{k}", f"t{k % 20}", "r1", 0, vectors[k])
                        for k in range(args.vectors)
                    ]
                    results[label].append(await timed(index, items, way))
        finally:
            await index.aclose()
    print(
        f"Upserts of {args.vectors} vectors of {args.dimension} dimensions, "
        f"{args.calls} calls each way, medians:"
    )
    print()
    print("| vectors sent as | worst event-loop stall (ms) | calling thread CPU (ms) | wall (ms) |")
    print("|---|---:|---:|---:|")
    for label, rows in results.items():
        stall, cpu, wall = (statistics.median(column) for column in zip(*rows, strict=True))
        print(f"| {label} | {stall:.1f} | {cpu:.1f} | {wall:.0f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vectors", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=12)
    parser.add_argument("--dimension", type=int, default=384)
    asyncio.run(main(parser.parse_args()))
