"""How often embedded Chroma stores a record that its query can no longer reach, on a busy machine.

Chroma 1.5's local executor (the embedded client, and a server's own) "backfills" a collection on the first
read of it in a process; coming after a write, that backfill resets the HNSW writer's high-water mark, and
the next write re-applies every record since the last persist as updates, in parallel with its inserts.
Such an update can overwrite the links that lead to a new record: get() returns it, no query finds it,
until the process restarts. ChromaIndex reads each collection before it writes to it, so the backfill has
nothing to replay.

Workload: the conformance datasets (gen_dataset.py, seeds 1-3: 200 messages, 5 threads, 4 resources) with
the conformance stub embedder, written 100 messages at a time, one upsert per resource, as the server
saves them. Then every stored vector is asked for with a thread-scoped top-3 query and compared with the
exact cosine ranking. Modes: `raw` calls Chroma as ChromaIndex did before (upsert, then a get for stale
chunks), `index` goes through ChromaIndex. `--processes` copies run side by side: the race needs
contended cores.

    python benchmarks/chroma_reach.py --rounds 10 --processes 3 \
        --out benchmarks/results/chroma-reach-2026-12-01.md
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import datetime as dt
import os
import platform
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
SHARED = Path(os.environ.get("RECALLQL_SHARED_DIR", REPO.parent / "shared"))
CONFORMANCE = SHARED / "conformance"
sys.path.insert(0, str(CONFORMANCE))  # the conformance stub embedder, embed_server.embed
TOP_K = 3


def _vectors(dataset: dict[str, Any]) -> list[list[Any]]:
    """Per save of 100 messages: (message id, thread id, resource id, vector) of every embeddable one."""
    from embed_server import embed  # type: ignore[import-not-found]

    from models.embedders import chunk_text, embedding_text

    messages = dataset["messages"]
    saves = []
    for start in range(0, len(messages), 100):
        save = []
        for m in messages[start : start + 100]:
            text = embedding_text(m["content"]) if m["role"] != "system" else None
            chunks = chunk_text(text or "")
            if chunks:  # the stub gives short texts one chunk
                save.append((m["id"], m["threadId"], m["resourceId"], embed(chunks[0])))
        saves.append(save)
    return saves


async def _load(mode: str, path: str, saves: list[list[Any]]) -> Any:
    """Writes the saves; returns a function (resource id) -> Chroma collection."""
    from models.vector_index import ChromaIndex, VectorItem, _message_in, collection_name

    index = ChromaIndex(path=path, model_name="stub", dimension=64)
    if mode == "index":
        for save in saves:
            await index.upsert([VectorItem(m, t, r, 0, v) for m, t, r, v in save])
    else:
        client = index._get_client()
        for save in saves:
            by_resource: dict[str, list[Any]] = collections.defaultdict(list)
            for row in save:
                by_resource[row[2]].append(row)
            for resource, rows in by_resource.items():
                col = client.get_or_create_collection(
                    collection_name(resource, "stub", 64),
                    configuration={"hnsw": {"space": "cosine", "ef_search": 100, "ef_construction": 100}},
                    embedding_function=None,
                )
                col.upsert(
                    ids=[f"{m}:0" for m, *_ in rows],
                    embeddings=[v for *_, v in rows],
                    metadatas=[{"message_id": m, "thread_id": t} for m, t, *_ in rows],
                )
                col.get(where=_message_in([m for m, *_ in rows]), include=[])
    client = index._get_client()
    return lambda resource: client.get_collection(
        collection_name(resource, "stub", 64), embedding_function=None
    )


def _round(mode: str, seed: int) -> tuple[int, int]:
    from tests.conformance.harness import generate_dataset

    with tempfile.TemporaryDirectory() as path:
        saves = _vectors(generate_dataset(seed, Path(path) / "dataset.json", messages=200))
        collection = asyncio.run(_load(mode, str(Path(path) / "chroma"), saves))
        rows = [row for save in saves for row in save]
        queries = misses = 0
        for _message, thread, resource, vector in rows:
            same = [r for r in rows if r[1] == thread and r[2] == resource]
            exact = sorted(((float(np.dot(vector, r[3])), r[0]) for r in same), reverse=True)
            kth = exact[min(TOP_K, len(exact)) - 1][0]
            must = {m for score, m in exact if score > kth + 1e-6}
            got = collection(resource).query(
                query_embeddings=[vector], n_results=TOP_K, where={"thread_id": thread}, include=["metadatas"]
            )
            found = {meta["message_id"] for meta in got["metadatas"][0]}
            queries += 1
            misses += not must <= found
    return queries, misses


def _worker(mode: str, rounds: int) -> tuple[int, int]:
    totals = [0, 0]
    for _ in range(rounds):
        for seed in (1, 2, 3):
            q, m = _round(mode, seed)
            totals[0] += q
            totals[1] += m
    return totals[0], totals[1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=10, help="rounds of the three datasets per process")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--modes", nargs="+", default=["raw", "index"], choices=["raw", "index"])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lines = [
        f"# Chroma reachability under load, {dt.date.today()}",
        "",
        f"{platform.node()}, {os.cpu_count()} cores; {args.processes} processes side by side, {args.rounds} "
        "rounds of seeds 1-3 each; a miss is a thread-scoped top-3 query that leaves out a vector the exact "
        "ranking puts above the third score.",
        "",
        "| mode | queries | misses |",
        "|---|---|---|",
    ]
    for mode in args.modes:
        with ProcessPoolExecutor(args.processes) as pool:
            results = list(pool.map(_worker, [mode] * args.processes, [args.rounds] * args.processes))
        queries, misses = sum(q for q, _ in results), sum(m for _, m in results)
        lines.append(f"| {mode} | {queries} | {misses} |")
        print(lines[-1], flush=True)
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
