"""What HNSW's search breadth (``ef_search``) buys and costs: exactness against latency, per collection size.

    python benchmarks/hnsw_ef.py [--sizes 150,1000,20000] [--efs 100,1000] [--queries 150] [--out FILE]

Mastra's vector search is exact; HNSW's is exact only when its search may hold as many candidates as the
collection has vectors. For each size, one embedded collection per ``ef_search`` (through ``ChromaIndex``)
holds 384-d unit vectors of two kinds, each searched with its own queries, topK 4:

- *scattered*: independent Gaussian directions, HNSW's hard case (the conformance data's hash-64 vectors are
  of this kind): a query's neighbours are all about as far as each other;
- *clustered*: 300 centres plus noise, as chat embeddings cluster.

A query counts as exact when its 4 hits are the true top 4 (a near-tie of 1e-5 at the edge aside), checked
against numpy. Resource scope and, for the largest size, thread scope (10 threads holding three quarters of
the vectors, 100 holding the rest) are timed.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from models.vector_index import ChromaIndex, VectorItem  # noqa: E402

DIM = 384


def unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def vectors(kind: str, n: int, rng: np.random.Generator, centres: np.ndarray) -> np.ndarray:
    if kind == "scattered":
        return unit(rng.standard_normal((n, DIM)))
    return unit(centres[rng.integers(0, len(centres), n)] + 0.9 * rng.standard_normal((n, DIM)))


def thread_of(k: int, n: int) -> str:
    return f"big{k % 10}" if k < n * 3 // 4 else f"small{k % 100}"


async def measure(
    folder: Path, kind: str, n: int, ef: int, queries: int, scopes: list[str]
) -> list[tuple[str, float, float, int]]:
    """(scope, p50 ms, p95 ms, exact queries) for one collection."""
    rng = np.random.default_rng(n)
    centres = rng.standard_normal((300, DIM))
    data = vectors(kind, n, rng, centres)
    index = ChromaIndex(path=folder / f"{kind}-{n}-{ef}", model_name="bench", dimension=DIM, ef_search=ef)
    rows = []
    try:
        for start in range(0, n, 2000):
            await index.upsert(
                VectorItem(f"m{k}", thread_of(k, n), "r", 0, data[k])
                for k in range(start, min(n, start + 2000))
            )
        threads = np.array([thread_of(k, n) for k in range(n)])
        for scope in scopes:
            latencies, exact = [], 0
            for j, q in enumerate(vectors(kind, queries, rng, centres)):
                thread = (
                    None
                    if scope == "resource"
                    else (f"big{j % 10}" if scope == "big thread" else f"small{j % 100}")
                )
                started = time.perf_counter()
                hits = await index.query(q, resource_ids=["r"], thread_id=thread, top_k=4)
                latencies.append((time.perf_counter() - started) * 1000)
                allowed = threads == thread if thread else np.ones(n, dtype=bool)
                scores = np.where(allowed, data @ q, -9.0)
                want = min(4, int(allowed.sum()))
                edge = np.sort(scores)[-want]
                exact += len(hits) == want and all(scores[int(h.message_id[1:])] >= edge - 1e-5 for h in hits)
            rows.append(
                (scope, float(np.percentile(latencies, 50)), float(np.percentile(latencies, 95)), exact)
            )
    finally:
        await index.aclose()
    return rows


async def run(args: argparse.Namespace) -> str:
    lines = [
        f"# HNSW search breadth (ef_search), {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"`python benchmarks/hnsw_ef.py {' '.join(sys.argv[1:])}`",
        "",
        f"- Machine: {platform.machine()}, Python {platform.python_version()}; {args.queries} queries per "
        "row, topK 4, embedded Chroma through ChromaIndex",
        "",
        "| vectors | kind | scope | ef_search | search p50 ms | search p95 ms | exact queries |",
        "|---:|---|---|---:|---:|---:|---:|",
    ]
    largest = max(args.sizes)
    with tempfile.TemporaryDirectory(prefix="recallql-hnsw-ef-") as tmp:
        for n in args.sizes:
            for kind in ("scattered", "clustered"):
                scopes = ["resource"]
                if n == largest and kind == "clustered":
                    scopes += ["big thread", "small thread"]
                for ef in args.efs:
                    for scope, p50, p95, exact in await measure(Path(tmp), kind, n, ef, args.queries, scopes):
                        timing = f"{p50:.1f} | {p95:.1f} | {exact}/{args.queries}"
                        line = f"| {n:,} | {kind} | {scope} | {ef} | {timing} |"
                        lines.append(line)
                        print(line, flush=True)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[150, 1000, 20000])
    parser.add_argument("--efs", type=lambda s: [int(x) for x in s.split(",")], default=[100, 1000])
    parser.add_argument("--queries", type=int, default=150)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    report = asyncio.run(run(args))
    if args.out is not None:
        args.out.write_text(report, encoding="utf-8")
    print(report)


if __name__ == "__main__":
    main()
