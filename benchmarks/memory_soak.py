"""Resident memory of a RecallQL server across repeated load rounds (it should stay flat).

    python benchmarks/memory_soak.py [--rounds 5] [--requests 4000] [--concurrency 32]

Starts `recallql serve` on a fresh SQLite data folder, loads 2,000 messages into one thread, then runs
rounds of mixed reads (the peer-bench scenarios) and writes, reading the server's VmRSS from /proc
after each round. Writes benchmarks/results/memory-<date>.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
SELECT = (
    "id role type createdAt threadId resourceId "
    "content { format metadata parts { ... on TextPart { type text } } }"
)
READS = [
    f'{{ recall(threadId: "big", perPage: 20) {{ total messages {{ {SELECT} }} }} }}',
    '{ recall(threadId: "big", perPage: 20, page: 50, orderBy: {direction: ASC}) '
    f"{{ messages {{ {SELECT} }} }} }}",
    '{ recall(threadId: "big", perPage: 20, filter: {metadata: {topic: "billing"}}) '
    f"{{ total messages {{ {SELECT} }} }} }}",
    '{ threads(resourceId: "r1", perPage: 20) { total threads { id title } } }',
]
SAVE = "mutation($m: [MessageInput!]!) { saveMessages(messages: $m) { acknowledged } }"


def rss_kib(pid: int) -> int:
    total = 0
    pids = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        pids += [int(p) for p in children.read_text().split()]
    for p in pids:
        for line in Path(f"/proc/{p}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp(prefix="recallql-soak-"))
    port = 4190
    env = {**os.environ, "RECALLQL_DATA_DIR": str(data), "RECALLQL_LOG_LEVEL": "warning"}
    server = subprocess.Popen(
        [str(REPO / ".venv/bin/recallql"), "serve", "--port", str(port)],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    rows = []
    try:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            for _ in range(300):
                try:
                    if (await client.get("/readyz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
            await client.post(
                "/graphql",
                json={"query": 'mutation { createThread(input: {id: "big", resourceId: "r1"}) { id } }'},
            )
            base = 1767225600000
            for start in range(0, 2000, 500):
                batch = [
                    {
                        "id": f"m{i}",
                        "threadId": "big",
                        "role": "user" if i % 2 else "assistant",
                        "createdAt": dt.datetime.fromtimestamp((base + i * 1000) / 1000, dt.UTC).isoformat(),
                        "content": {
                            "format": 2,
                            "parts": [{"type": "text", "text": f"message {i}"}],
                            "metadata": {"topic": ["billing", "other"][i % 2]},
                        },
                    }
                    for i in range(start, start + 500)
                ]
                await client.post("/graphql", json={"query": SAVE, "variables": {"m": batch}})
            rows.append(("after load", 0, rss_kib(server.pid), 0.0))
            rng = random.Random(1)
            written = 0
            for round_no in range(1, args.rounds + 1):
                queue = list(range(args.requests))
                errors = 0
                started = time.perf_counter()

                async def worker(queue: list[int] = queue) -> None:
                    nonlocal errors, written
                    while queue:
                        queue.pop()
                        if rng.random() < 0.1:
                            written += 1
                            body = {
                                "query": SAVE,
                                "variables": {
                                    "m": [
                                        {
                                            "threadId": "big",
                                            "role": "user",
                                            "content": {
                                                "format": 2,
                                                "parts": [{"type": "text", "text": f"new {written}"}],
                                            },
                                        }
                                    ]
                                },
                            }
                        else:
                            body = {"query": rng.choice(READS)}
                        response = await client.post("/graphql", json=body)
                        if response.status_code != 200 or "errors" in response.json():
                            errors += 1

                await asyncio.gather(*(worker() for _ in range(args.concurrency)))
                elapsed = time.perf_counter() - started
                rows.append((f"round {round_no}", errors, rss_kib(server.pid), args.requests / elapsed))
                print(rows[-1], file=sys.stderr, flush=True)
    finally:
        server.terminate()
        server.wait(30)
    lines = [
        f"# Server memory across load rounds — {dt.date.today()}",
        "",
        f"{args.requests} requests per round at concurrency {args.concurrency} (90% reads, 10% writes).",
        "",
        "| stage | errors | RSS MiB | req/s |",
        "|---|---|---|---|",
    ]
    lines += [f"| {name} | {err} | {rss / 1024:.1f} | {rate:.0f} |" for name, err, rss, rate in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    (REPO / "benchmarks" / "results" / f"memory-{dt.date.today()}.md").write_text(text)


if __name__ == "__main__":
    asyncio.run(main())
