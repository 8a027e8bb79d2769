"""Many small resources: a collection each (RecallQL's layout) against resources pooled in shared ones.

    python benchmarks/pooled_layout.py [--resources 1000] [--per-resource 20] [--pools 1,4,20]
        [--saves 500] [--batch 50] [--queries 300] [--out FILE]

Every Chroma write call costs several ms of CPU whatever its size (its log, its segments, its SQLite
transactions), and RecallQL writes one call per resource per pipeline batch. A chat server whose saves come
from many end users (one exchange, 2 messages, per save) therefore pays that cost per message.
This measures the alternative before anyone builds it: resources spread over a few shared collections,
found by a metadata filter, written once per pool per batch. Two questions, with embedded Chroma
through ``ChromaIndex`` (cosine, ``ef_search`` 1,000, the log index, an index save after every write):

1. **Writes**: ``--resources`` resources of ``--per-resource`` vectors each are stored; then ``--saves``
   saves of 2 vectors each, to random resources, are written the way the pipeline writes them, in
   batches of ``--batch`` saves: one upsert per distinct collection in a batch. CPU per message.
2. **Searches**: resource-scoped topK 4 for random resources, with latency and exactness against numpy.

In the pooled layouts the pool is the collection and the resource is a metadata key (stored where
``ChromaIndex`` keeps the thread id, so the filter is the one thread-scoped searches use).
``--pools`` lists layouts by the number of pools; each pool holds resources/pools resources.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hnsw_ef import DIM, vectors  # noqa: E402  (this folder)

from models.vector_index import ChromaIndex, VectorItem  # noqa: E402

TOP_K = 4


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Layout:
    """Where resource r's vectors live: its own collection (pools=0) or pool r % pools."""

    def __init__(self, pools: int) -> None:
        self.pools = pools

    @property
    def name(self) -> str:
        return "one collection per resource" if self.pools == 0 else f"{self.pools} pool(s)"

    def item(self, r: int, message: str, vector: np.ndarray) -> VectorItem:
        if self.pools == 0:
            return VectorItem(message, "t", f"r{r}", 0, vector)
        return VectorItem(message, f"r{r}", f"pool{r % self.pools}", 0, vector)

    async def search(self, index: ChromaIndex, r: int, q: np.ndarray) -> list[str]:
        if self.pools == 0:
            hits = await index.query(q, resource_ids=[f"r{r}"], thread_id=None, top_k=TOP_K)
        else:
            hits = await index.query(
                q, resource_ids=[f"pool{r % self.pools}"], thread_id=f"r{r}", top_k=TOP_K
            )
        return [h.message_id for h in hits]


async def measure(
    folder: Path, layout: Layout, args: argparse.Namespace, data: np.ndarray, centres: np.ndarray
) -> dict[str, float]:
    rng = np.random.default_rng(7)
    index = ChromaIndex(path=folder / f"layout-{layout.pools}", model_name="bench", dimension=DIM)
    per = args.per_resource
    # resource -> ([message ids], [vectors]), for the exact answers
    stored: dict[int, tuple[list[str], list[np.ndarray]]] = {r: ([], []) for r in range(args.resources)}
    try:
        # Fill: one write per collection, as a bulk import would.
        groups: dict[str, list[VectorItem]] = {}
        for r in range(args.resources):
            for k in range(per):
                message = f"r{r}-m{k}"
                vector = data[r * per + k]
                item = layout.item(r, message, vector)
                groups.setdefault(str(item.resource_id), []).append(item)
                stored[r][0].append(message)
                stored[r][1].append(vector)
        for items in groups.values():
            for start in range(0, len(items), 2000):
                await index.upsert(items[start : start + 2000])

        # Writes: saves of 2 to random resources, a batch of saves at a time, one upsert per collection.
        targets = rng.integers(0, args.resources, args.saves)
        new = vectors("clustered", 2 * args.saves, rng, centres)
        calls = 0
        cpu, wall = cpu_seconds(), time.perf_counter()
        for start in range(0, args.saves, args.batch):
            items = []
            for s in range(start, min(args.saves, start + args.batch)):
                r = int(targets[s])
                for k in range(2):
                    message = f"r{r}-s{s}-{k}"
                    items.append(layout.item(r, message, new[2 * s + k]))
                    stored[r][0].append(message)
                    stored[r][1].append(new[2 * s + k])
            calls += len({item.resource_id for item in items})
            await index.upsert(items)
        write_cpu, write_wall = cpu_seconds() - cpu, time.perf_counter() - wall

        # Searches: resource scope, exact answers from numpy.
        latencies: list[float] = []
        exact = 0
        queries = vectors("clustered", args.queries, rng, centres)
        for q in queries:
            r = int(rng.integers(0, args.resources))
            started = time.perf_counter()
            found = await layout.search(index, r, q)
            latencies.append((time.perf_counter() - started) * 1000)
            ids, stored_vectors = stored[r]
            scores = np.asarray(stored_vectors) @ q
            edge = np.sort(scores)[-min(TOP_K, len(ids))]
            by_id = dict(zip(ids, scores, strict=True))
            exact += len(found) == min(TOP_K, len(ids)) and all(
                by_id.get(m, -9) >= edge - 1e-5 for m in found
            )
    finally:
        await index.aclose()
    messages = 2 * args.saves
    return {
        "calls": calls,
        "cpu_ms_per_message": write_cpu * 1000 / messages,
        "messages_per_s": messages / write_wall,
        "p50": float(np.percentile(latencies, 50)),
        "p95": float(np.percentile(latencies, 95)),
        "exact": exact,
    }


async def run(args: argparse.Namespace) -> str:
    rng = np.random.default_rng(3)
    centres = rng.standard_normal((300, DIM))
    data = vectors("clustered", args.resources * args.per_resource, rng, centres)
    layouts = [Layout(0), *(Layout(p) for p in args.pools)]
    results: dict[str, list[dict[str, float]]] = {layout.name: [] for layout in layouts}
    with tempfile.TemporaryDirectory(prefix="pooled-layout-") as tmp:
        for round_ in range(args.rounds):
            # Alternating order: this shared machine's speed drifts within minutes.
            for layout in layouts if round_ % 2 == 0 else layouts[::-1]:
                folder = Path(tmp) / f"round{round_}"
                folder.mkdir(exist_ok=True)
                results[layout.name].append(await measure(folder, layout, args, data, centres))
                print(f"round {round_ + 1}: {layout.name}: {results[layout.name][-1]}", flush=True)

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in results[name])

    per = args.per_resource
    now = dt.datetime.now(dt.UTC)
    lines = [
        f"# Many small resources: per-resource collections against pooled ones, {now:%Y-%m-%d %H:%M} UTC",
        "",
        f"`python benchmarks/pooled_layout.py {' '.join(sys.argv[1:])}`",
        "",
        f"- Machine: {platform.machine()}, Python {platform.python_version()}; embedded Chroma, ChromaIndex",
        f"- {args.resources} resources of {per} vectors (384-d, clustered); then {args.saves} saves of 2 "
        f"vectors to random resources, {args.batch} saves per batch (one upsert per collection in a batch); "
        f"{args.queries} resource-scoped searches (topK {TOP_K}) of random resources; medians of "
        f"{args.rounds} round(s)",
        "",
        "| layout | vectors per collection | write calls | CPU ms per message written "
        "| messages/s written | search p50 ms | search p95 ms | exact searches |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for layout in layouts:
        size = per if layout.pools == 0 else per * args.resources // layout.pools
        name = layout.name
        cells = [
            name,
            f"{size:,}",
            f"{med(name, 'calls'):.0f}",
            f"{med(name, 'cpu_ms_per_message'):.2f}",
            f"{med(name, 'messages_per_s'):.0f}",
            f"{med(name, 'p50'):.1f}",
            f"{med(name, 'p95'):.1f}",
            f"{med(name, 'exact'):.0f}/{args.queries}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resources", type=int, default=1000)
    parser.add_argument("--per-resource", type=int, default=20)
    parser.add_argument("--pools", type=lambda s: [int(x) for x in s.split(",") if x], default=[1, 4, 20])
    parser.add_argument("--saves", type=int, default=500)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    report = asyncio.run(run(args))
    print(report)
    if args.out:
        args.out.write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()
