"""Searches across many resources with embedded Chroma, at the usual open-file limit, before and after
RecallQL raises it.

    python benchmarks/chroma_cache.py [--resources 400] [--vectors 2000] [--queries 300] [--nofile 1024]
        [--out FILE]

Embedded Chroma keeps at most (soft open-file limit) // 5 collections' HNSW indexes loaded; a search of any
other resource first reloads that resource's index from disk. The script fills one embedded directory
with ``--resources`` collections of ``--vectors`` unit vectors each (through ``ChromaIndex``), then, for
each variant, starts a fresh process whose soft limit is ``--nofile`` (1,024 is the usual default) and
times ``ChromaIndex.query`` on random resources, after one query of every resource in turn (what fits stays
loaded). Resources of fewer than 1,000 vectors have no index on disk (Chroma saves one every 1,000
records), so a dropped one is rebuilt from Chroma's log (and before RecallQL did that, the query failed).
Variant "as started" keeps the limit it was given (what RecallQL did before it raised the limit); "raised" is
RecallQL as shipped (``raise_open_file_limit`` when the client opens).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import models.vector_index as vector_index  # noqa: E402
from models.vector_index import ChromaIndex, VectorItem  # noqa: E402

MODEL = "all-MiniLM-L6-v2"
DIM = 384


def unit_vectors(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


async def fill(path: Path, resources: int, vectors: int) -> float:
    rng = np.random.default_rng(7)
    index = ChromaIndex(path=path, model_name=MODEL, dimension=DIM)
    start = time.perf_counter()
    try:
        for r in range(resources):
            block = unit_vectors(rng, vectors)
            await index.upsert(
                VectorItem(f"r{r}-m{i}", f"r{r}-t{i % 10}", f"r{r}", 0, block[i]) for i in range(vectors)
            )
    finally:
        await index.aclose()
    return time.perf_counter() - start


async def measure(path: Path, resources: int, queries: int, raise_limit: bool) -> dict[str, object]:
    if not raise_limit:
        vector_index.raise_open_file_limit = lambda: None
    rng = np.random.default_rng(11)
    picks = random.Random(3)
    index = ChromaIndex(path=path, model_name=MODEL, dimension=DIM)
    try:
        await index.count("r0")  # opens the client: the limit is read (and raised) now
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        loaded = index._get_client()._server.hnsw_cache_size  # type: ignore[attr-defined]
        # Every resource once, in order (what fits stays loaded), then random ones, timed.
        for r in range(resources):
            await index.query(unit_vectors(rng, 1)[0], resource_ids=[f"r{r}"], thread_id=None, top_k=4)
        timed = []
        for _ in range(queries):
            resource_id = f"r{picks.randrange(resources)}"
            vector = unit_vectors(rng, 1)[0]
            start = time.perf_counter()
            await index.query(vector, resource_ids=[resource_id], thread_id=None, top_k=4)
            timed.append((time.perf_counter() - start) * 1000)
        timed.sort()
    finally:
        await index.aclose()

    def pct(q: float) -> float:
        return timed[min(len(timed) - 1, int(q * len(timed)))]

    return {
        "limit": limit,
        "loaded": loaded,
        "reloads": vector_index._reloads,
        "p50": pct(0.5),
        "p95": pct(0.95),
        "p99": pct(0.99),
    }


def run_variant(path: Path, args: argparse.Namespace, raise_limit: bool) -> dict[str, object]:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    soft = args.nofile if hard == resource.RLIM_INFINITY else min(args.nofile, hard)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--measure",
            str(path),
            "--resources",
            str(args.resources),
            "--queries",
            str(args.queries),
            *(["--raise"] if raise_limit else []),
        ],
        preexec_fn=limit,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise SystemExit(f"the measuring process failed:\n{done.stderr[-3000:]}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--resources", type=int, default=400)
    parser.add_argument("--vectors", type=int, default=2000, help="vectors per resource")
    parser.add_argument("--queries", type=int, default=300, help="timed queries")
    parser.add_argument("--nofile", type=int, default=1024, help="soft open-file limit each run starts with")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--measure", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--raise", dest="raise_limit", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure is not None:
        print(json.dumps(asyncio.run(measure(args.measure, args.resources, args.queries, args.raise_limit))))
        return

    with tempfile.TemporaryDirectory(prefix="chroma-cache-") as work:
        path = Path(work) / "chroma"
        print(f"filling {args.resources} resources x {args.vectors} vectors", file=sys.stderr)
        seconds = asyncio.run(fill(path, args.resources, args.vectors))
        rows = [("as started", run_variant(path, args, False)), ("raised", run_variant(path, args, True))]

    lines = [
        f"# Embedded Chroma: searches across many resources, {dt.date.today().isoformat()}",
        "",
        f"`python benchmarks/chroma_cache.py --resources {args.resources} --vectors {args.vectors} "
        f"--queries {args.queries} --nofile {args.nofile}`",
        "",
        f"- Machine: {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}",
        f"- {args.resources} resources x {args.vectors} vectors of {DIM} dimensions in one embedded "
        f"directory (written in {seconds:.0f} s); each row is a fresh process started with a soft "
        f"open-file limit of {args.nofile}, timing `ChromaIndex.query` (top 4, resource scope) on "
        f"{args.queries} random resources after one query of every resource in turn.",
        "",
        "| open-file limit | limit in effect | indexes Chroma keeps loaded | unsaved indexes rebuilt "
        "| p50 ms | p95 ms | p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, row in rows:
        lines.append(
            f"| {label} | {row['limit']:,} | {row['loaded']:,} | {row['reloads']:,} | {row['p50']:.1f} "
            f"| {row['p95']:.1f} "
            f"| {row['p99']:.1f} |"
        )
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out is not None:
        args.out.write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()
