"""What a vector write costs in embedded Chroma, as Chroma ships and as RecallQL sets it up.

    python benchmarks/chroma_writes.py [--resources 500] [--vectors 50] [--calls 500] [--large 50000]
        [--variants shipped,log-index,index+100,recallql] [--out FILE]

Every write to embedded Chroma 1.5 appends to one log table shared by all collections, re-reads this
collection's records logged since its HNSW index was last saved, and deletes older ones; both filter on
a column no index covers, and an index is saved only every `sync_threshold` records (Chroma's default
1,000), so a directory of many small per-resource collections keeps nearly every vector in that log
(models/chroma_sqlite.py). The variants, each in a fresh directory of its own, written through
``ChromaIndex.upsert`` (the server's path):

- ``shipped``: Chroma's file and collection settings as they come (``tune_sqlite=False``,
  ``sync_threshold=1000``);
- ``log-index``: the log index only (``sync_threshold=1000``);
- ``index+100``: the log index and ``sync_threshold=100``;
- ``recallql``: ChromaIndex's defaults (the log index, ``sync_threshold=1``: every write saves).

Three workloads, the variants interleaved step by step so that the machine's drift hits them alike:

1. many resources: ``--resources`` resources of ``--vectors`` vectors each, written 10 vectors per call;
   CPU per call for each fifth of the resources (does a write cost more as resources accumulate?);
2. chat saves: ``--calls`` writes of 2 vectors into one resource (CPU and wall time per call);
3. one large resource: writes of 100 vectors into one collection up to ``--large`` vectors, CPU per
   vector for stretches of its growth (what the smaller threshold costs a large collection).

Vectors are unit vectors of 384 dimensions around 256 random centres (cosine about 0.9 to theirs); CPU
is this process's (Chroma's threads included).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from models.vector_index import ChromaIndex, VectorItem  # noqa: E402

MODEL = "all-MiniLM-L6-v2"
DIM = 384
PER_CALL = 10  # vectors per write in the many-resources workload
LARGE_CALL = 100
VARIANTS: dict[str, dict[str, object]] = {
    "shipped": {"tune_sqlite": False, "sync_threshold": 1000},
    "log-index": {"tune_sqlite": True, "sync_threshold": 1000},
    "index+100": {"tune_sqlite": True, "sync_threshold": 100},
    "recallql": {},  # ChromaIndex's defaults: the log index, and an HNSW save after every write
}


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


@dataclass
class Meter:
    cpu: float = 0.0
    wall: float = 0.0
    calls: int = 0
    vectors: int = 0

    def per_call_ms(self) -> tuple[float, float]:
        return self.cpu * 1000 / max(1, self.calls), self.wall * 1000 / max(1, self.calls)

    def per_vector_ms(self) -> float:
        return self.cpu * 1000 / max(1, self.vectors)


# Text embeddings cluster by topic; uniformly random vectors would make every HNSW insert a worst case.
_CENTERS = np.random.default_rng(3).standard_normal((256, DIM)).astype(np.float32)
_CENTERS /= np.linalg.norm(_CENTERS, axis=1, keepdims=True)


@dataclass
class Variant:
    name: str
    index: ChromaIndex
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(5))

    async def write(self, meter: Meter, resource: str, prefix: str, n: int) -> None:
        noise = self.rng.standard_normal((n, DIM)).astype(np.float32) * (0.5 / DIM**0.5)
        block = _CENTERS[self.rng.integers(0, len(_CENTERS), n)] + noise  # cosine about 0.9 to a centre
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        items = [VectorItem(f"{prefix}-{i}", f"{resource}-t{i % 4}", resource, 0, block[i]) for i in range(n)]
        c, w = cpu_seconds(), time.perf_counter()
        await self.index.upsert(items)
        meter.cpu += cpu_seconds() - c
        meter.wall += time.perf_counter() - w
        meter.calls += 1
        meter.vectors += n


async def many_resources(variants: list[Variant], resources: int, vectors: int) -> dict[str, list[Meter]]:
    """Per variant, one meter per fifth of the resources."""
    out: dict[str, list[Meter]] = {v.name: [] for v in variants}
    fifth = max(1, resources // 5)
    for start in range(0, resources, fifth):
        meters = {v.name: Meter() for v in variants}
        for r in range(start, min(resources, start + fifth)):
            for v in variants:
                for k in range(0, vectors, PER_CALL):
                    await v.write(meters[v.name], f"r{r}", f"r{r}-m{k}", min(PER_CALL, vectors - k))
        for name, meter in meters.items():
            out[name].append(meter)
    return out


async def chat_saves(variants: list[Variant], calls: int) -> dict[str, Meter]:
    meters = {v.name: Meter() for v in variants}
    for k in range(calls):
        for v in variants:
            await v.write(meters[v.name], "chat", f"chat-m{k}", 2)
    return meters


async def large_resource(variants: list[Variant], large: int) -> tuple[list[int], dict[str, list[Meter]]]:
    marks = [m for m in (1000, 10000, 50000, 100000, 200000) if m < large] + [large]
    out: dict[str, list[Meter]] = {v.name: [] for v in variants}
    done = 0
    for mark in marks:
        meters = {v.name: Meter() for v in variants}
        while done < mark:
            for v in variants:
                await v.write(meters[v.name], "large", f"large-m{done}", LARGE_CALL)
            done += LARGE_CALL
        for name, meter in meters.items():
            out[name].append(meter)
    return marks, out


def table(headers: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(headers) - 1)) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


async def run(args: argparse.Namespace, work: Path) -> str:
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variants: {', '.join(unknown)} (known: {', '.join(VARIANTS)})")

    async def build(suffix: str) -> list[Variant]:
        variants = []
        for n in names:
            options = VARIANTS[n]
            index = ChromaIndex(path=work / f"{n}-{suffix}", model_name=MODEL, dimension=DIM, **options)  # type: ignore[arg-type]
            await index.count("warm-up")  # opens the client (and tunes the file) before anything is timed
            variants.append(Variant(n, index))
        return variants

    async def close(variants: list[Variant]) -> None:
        for v in variants:
            await v.index.aclose()

    lines = [
        f"# Embedded Chroma: the cost of a vector write, {dt.date.today().isoformat()}",
        "",
        f"`python benchmarks/chroma_writes.py --resources {args.resources} --vectors {args.vectors} "
        f"--calls {args.calls} --large {args.large} --variants {','.join(names)}`",
        "",
        f"- Machine: {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}",
        "- Variants (each in a fresh directory, written through `ChromaIndex.upsert`, interleaved step by "
        "step): " + "; ".join(f"`{n}` {VARIANTS[n]}" for n in names),
        "- CPU is this process's, Chroma's threads included; vectors are unit vectors of 384 dimensions "
        "around 256 random centres (cosine about 0.9 to theirs).",
        "",
    ]

    variants = await build("many")
    try:
        fifths = await many_resources(variants, args.resources, args.vectors)
    finally:
        await close(variants)
    step = max(1, args.resources // 5)
    ranges = [f"{s + 1}-{min(args.resources, s + step)}" for s in range(0, args.resources, step)]
    lines += [
        f"## 1. Many resources: {args.resources} resources x {args.vectors} vectors, {PER_CALL} per write",
        "",
        "CPU ms per write, by the resources being written (all earlier ones stay in the directory):",
        "",
        *table(
            ["variant", *(f"resources {r}" for r in ranges)],
            [[n, *(f"{m.per_call_ms()[0]:.1f}" for m in fifths[n])] for n in names],
        ),
        "",
    ]

    variants = await build("chat")
    try:
        chat = await chat_saves(variants, args.calls)
    finally:
        await close(variants)
    lines += [
        f"## 2. Chat saves: {args.calls} writes of 2 vectors into one resource",
        "",
        *table(
            ["variant", "CPU ms per write", "wall ms per write"],
            [[n, f"{chat[n].per_call_ms()[0]:.1f}", f"{chat[n].per_call_ms()[1]:.1f}"] for n in names],
        ),
        "",
    ]

    variants = await build("large")
    try:
        marks, large = await large_resource(variants, args.large)
    finally:
        await close(variants)
    spans = [f"{(a if a else 0):,}-{b:,}" for a, b in zip([0, *marks[:-1]], marks, strict=True)]
    lines += [
        f"## 3. One large resource: writes of {LARGE_CALL} vectors up to {args.large:,}",
        "",
        "CPU ms per vector written, by the collection's size while it was written:",
        "",
        *table(
            ["variant", *spans],
            [[n, *(f"{m.per_vector_ms():.2f}" for m in large[n])] for n in names],
        ),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--resources", type=int, default=500)
    parser.add_argument("--vectors", type=int, default=50, help="vectors per resource (workload 1)")
    parser.add_argument("--calls", type=int, default=500, help="2-vector writes (workload 2)")
    parser.add_argument("--large", type=int, default=50000, help="vectors of the large resource (workload 3)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="chroma-writes-") as work:
        report = asyncio.run(run(args, Path(work)))
    print(report)
    if args.out is not None:
        args.out.write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()
