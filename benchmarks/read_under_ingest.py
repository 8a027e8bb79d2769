"""Read latency while the server ingests with embedding: embedded Chroma in the server process against
Chroma in a child process (RECALLQL_CHROMA_PROCESS).

Embedded Chroma holds the GIL for the whole of each write, which freezes the server's event loop; this
measures what that does to reads. One `recallql serve` per round (one worker, SQLite, the real MiniLM
embedder, background vector writes): `--writers` clients save batches of 50 chat messages into one
resource as fast as they are answered, while one reader asks for the newest 20 messages of another
thread (no semantic search) every 10 ms. Rounds alternate between the two modes.

    python benchmarks/read_under_ingest.py --model-dir ../shared/models/all-MiniLM-L6-v2 \
        --out benchmarks/results/read-under-ingest-2026-11-30.md
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from child_server import recallql_server  # this folder, as semantic_bench (which puts the repo on the path)
from semantic_bench import chat_texts, pct

SAVE = "mutation($m: [MessageInput!]!) { saveMessages(messages: $m) { messages { id } } }"
CREATE = "mutation($input: CreateThreadInput!) { createThread(input: $input) { id } }"
RECALL = "query($t: ID!) { recall(threadId: $t, perPage: 20) { messages { id } } }"


def _message(mid: str, thread_id: str, text: str) -> dict[str, Any]:
    return {
        "id": mid,
        "threadId": thread_id,
        "role": "user",
        "content": {"format": 2, "parts": [{"type": "text", "text": text}]},
    }


async def _post(client: httpx.AsyncClient, query: str, variables: dict[str, Any]) -> None:
    response = await client.post("/graphql", json={"query": query, "variables": variables})
    body = response.json()
    if response.status_code != 200 or body.get("errors"):
        raise RuntimeError(f"HTTP {response.status_code}: {body}")


async def one_round(model_dir: Path, *, child: bool, seconds: float, writers: int) -> tuple[list[float], int]:
    """Read latencies (ms) and messages acknowledged during one round."""
    work = Path(tempfile.mkdtemp(prefix="read-under-ingest-"))
    env = {
        "RECALLQL_EMBEDDING_MODEL_DIR": str(model_dir),
        "RECALLQL_LOG_LEVEL": "warning",
        "RECALLQL_AUTO_MIGRATE": "true",
        "RECALLQL_VECTOR_WRITES": "background",
        "RECALLQL_CHROMA_PROCESS": "true" if child else "false",
    }
    server = recallql_server(work / "data", env)
    server.wait_ready()
    texts = chat_texts(20000, 5)
    latencies: list[float] = []
    saved = 0
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
            await _post(client, CREATE, {"input": {"id": "read", "resourceId": "reader"}})
            await _post(client, SAVE, {"m": [_message(f"r{k}", "read", "hello") for k in range(30)]})
            # Warm-up: the first save loads the model and opens Chroma (and starts the child).
            await _post(client, CREATE, {"input": {"id": "warm", "resourceId": "bulk"}})
            await _post(
                client, SAVE, {"m": [_message(f"warm-{k}", "warm", t) for k, t in enumerate(texts[:50])]}
            )
            stop = time.monotonic() + seconds

            async def writer(w: int) -> None:
                nonlocal saved
                batch = 0
                while time.monotonic() < stop:
                    thread_id = f"w{w}-{batch}"
                    await _post(client, CREATE, {"input": {"id": thread_id, "resourceId": "bulk"}})
                    start = (w * 5000 + batch * 50) % (len(texts) - 50)
                    chunk = texts[start : start + 50]
                    await _post(
                        client,
                        SAVE,
                        {"m": [_message(f"{thread_id}-{k}", thread_id, t) for k, t in enumerate(chunk)]},
                    )
                    saved += len(chunk)
                    batch += 1

            async def reader() -> None:
                while time.monotonic() < stop:
                    began = time.perf_counter()
                    await _post(client, RECALL, {"t": "read"})
                    latencies.append((time.perf_counter() - began) * 1000)
                    await asyncio.sleep(0.01)

            await asyncio.gather(reader(), *(writer(w) for w in range(writers)))
    finally:
        server.stop()
    return latencies, saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="rounds per mode, alternating")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results: dict[bool, list[tuple[list[float], int]]] = {False: [], True: []}
    for _ in range(args.rounds):
        for child in (False, True):
            latencies, saved = asyncio.run(
                one_round(args.model_dir, child=child, seconds=args.seconds, writers=args.writers)
            )
            results[child].append((latencies, saved))
            print(
                f"{'child process' if child else 'in process'}: {len(latencies)} reads, "
                f"p50 {pct(latencies, 0.5):.1f} ms, p99 {pct(latencies, 0.99):.1f} ms, "
                f"max {max(latencies):.0f} ms; {saved} messages acknowledged",
                flush=True,
            )
    lines = [
        f"# Reads during ingest, embedded Chroma in process vs in a child process — {dt.date.today()}",
        "",
        f"`python benchmarks/read_under_ingest.py --seconds {args.seconds:g} --writers {args.writers} "
        f"--rounds {args.rounds}`",
        "",
        f"- Machine: {platform.machine()}, Python {platform.python_version()}; one `recallql serve` per "
        "round (one worker, SQLite, MiniLM embedder, RECALLQL_VECTOR_WRITES=background)",
        f"- {args.writers} writers save batches of 50 chat messages into one resource for "
        f"{args.seconds:g} s; one reader asks for the newest 20 messages of another thread every 10 ms",
        "",
        "| Chroma | round | reads | p50 ms | p99 ms | max ms | messages acknowledged |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for child in (False, True):
        for n, (latencies, saved) in enumerate(results[child], 1):
            lines.append(
                f"| {'child process' if child else 'in process'} | {n} | {len(latencies)} | "
                f"{pct(latencies, 0.5):.1f} | {pct(latencies, 0.99):.1f} | {max(latencies):.0f} | {saved} |"
            )
    p99 = {c: statistics.median(pct(lat, 0.99) for lat, _ in results[c]) for c in (False, True)}
    lines += ["", f"- Median p99: {p99[False]:.1f} ms in process, {p99[True]:.1f} ms with the child.", ""]
    report = "\n".join(lines)
    print(report)
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
