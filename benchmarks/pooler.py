"""What RECALLQL_DB_TRANSACTION_POOLER and PgBouncer in transaction mode cost, over real HTTP.

    python benchmarks/pooler.py [--messages 2000] [--requests 300] [--concurrency 16] [--out FILE]

Three servers (one worker each, embedding off) on one new PostgreSQL database, measured one at a time
and in turns (--rounds), so that all three see the same machine:

* direct: PostgreSQL itself, prepared statements cached (the default);
* direct, no prepared statements: the same, with RECALLQL_DB_TRANSACTION_POOLER=true (what the setting
  alone costs);
* PgBouncer: through a PgBouncer in transaction mode (Debian's package, started here; two server
  connections), with the setting.

Per server: a recall page (perPage 20 of a thread of --messages) and a save of one message, each
--requests times one after another (p50 and p95 in ms), and recall pages from --concurrency clients for
--duration seconds (requests/s). Ratios are against "direct" in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support import database, pgbouncer, running_server, text_message, uid

RECALL = (
    "query($t: ID!) { recall(threadId: $t, perPage: 20) "
    "{ total messages { id role createdAt content { parts { ... on TextPart { text } } } } } }"
)
SAVE = "mutation($m: [MessageInput!]!) { saveMessages(messages: $m) { messages { id } } }"


async def post(client: httpx.AsyncClient, query: str, **variables: Any) -> None:
    response = await client.post("/graphql", json={"query": query, "variables": variables})
    body = response.json()
    if response.status_code != 200 or body.get("errors"):
        raise RuntimeError(f"{response.status_code}: {body}")


async def measure(url: str, thread: str, args: argparse.Namespace, round_: int) -> dict[str, float]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for _ in range(20):  # warm-up: connections, statement caches
            await post(client, RECALL, t=thread)
        recall_ms = []
        for _ in range(args.requests):
            started = time.perf_counter()
            await post(client, RECALL, t=thread)
            recall_ms.append((time.perf_counter() - started) * 1000)
        save_ms = []
        for n in range(args.requests):
            message = text_message(thread_id=thread, id=uid(f"s{round_}-{n}"), text=f"one more note {n}")
            started = time.perf_counter()
            await post(client, SAVE, m=[message])
            save_ms.append((time.perf_counter() - started) * 1000)
        done = 0
        stop = time.monotonic() + args.duration

        async def reader() -> None:
            nonlocal done
            while time.monotonic() < stop:
                await post(client, RECALL, t=thread)
                done += 1

        started = time.monotonic()
        await asyncio.gather(*(reader() for _ in range(args.concurrency)))
        rate = done / (time.monotonic() - started)

    def pct(values: list[float], q: float) -> float:
        return statistics.quantiles(values, n=100)[int(q) - 1]

    return {
        "recall p50": pct(recall_ms, 50),
        "recall p95": pct(recall_ms, 95),
        "save p50": pct(save_ms, 50),
        "save p95": pct(save_ms, 95),
        "recall req/s": rate,
    }


async def run(args: argparse.Namespace) -> str:
    with tempfile.TemporaryDirectory() as work:
        async with database("postgres", Path(work)) as direct_url:
            with pgbouncer() as port:
                pooled_url = urlsplit(direct_url)._replace(netloc=f"127.0.0.1:{port}").geturl()
                base = {"RECALLQL_EMBEDDER": "off", "RECALLQL_LOG_LEVEL": "warning"}
                setups = {
                    "direct": {"RECALLQL_DATABASE_URL": direct_url},
                    "direct, no prepared statements": {
                        "RECALLQL_DATABASE_URL": direct_url,
                        "RECALLQL_DB_TRANSACTION_POOLER": "true",
                    },
                    "PgBouncer (transaction mode)": {
                        "RECALLQL_DATABASE_URL": pooled_url,
                        "RECALLQL_DB_TRANSACTION_POOLER": "true",
                    },
                }
                with contextlib.ExitStack() as stack:
                    urls = {
                        name: stack.enter_context(
                            running_server(Path(work) / f"data-{n}", {**base, **env})
                        ).url
                        for n, (name, env) in enumerate(setups.items())
                    }
                    thread = uid("bench")
                    async with httpx.AsyncClient(base_url=urls["direct"], timeout=120) as client:
                        await post(
                            client,
                            'mutation($t: ID!) { createThread(input: {resourceId: "bench", id: $t}) { id } }',
                            t=thread,
                        )
                        for start in range(0, args.messages, 500):
                            batch = [
                                text_message(thread_id=thread, id=f"{thread}-{n}", text=f"message number {n}")
                                for n in range(start, min(start + 500, args.messages))
                            ]
                            await post(client, SAVE, m=batch)
                    results: dict[str, list[dict[str, float]]] = {name: [] for name in setups}
                    for round_ in range(args.rounds):
                        for name, url in urls.items():
                            results[name].append(await measure(url, thread, args, round_))
                            print(f"round {round_ + 1}: {name}: {results[name][-1]}", file=sys.stderr)
    return report(results, args)


def report(results: dict[str, list[dict[str, float]]], args: argparse.Namespace) -> str:
    """Medians over the rounds, and ratios against direct."""
    metrics = list(next(iter(results.values()))[0])
    median = {
        name: {m: statistics.median(r[m] for r in rounds) for m in metrics}
        for name, rounds in results.items()
    }
    lines = [
        f"# Connection pooler: {args.messages} messages in the thread, {args.requests} timed calls each, "
        f"c={args.concurrency} for {args.duration:g} s, median of {args.rounds} rounds",
        "",
        "| server | " + " | ".join(metrics) + " |",
        "|---|" + "---:|" * len(metrics),
    ]
    direct = median["direct"]
    for name, values in median.items():
        cells = []
        for m in metrics:
            unit = "" if m.endswith("req/s") else " ms"
            ratio = "" if name == "direct" else f" ({values[m] / direct[m]:.2f}x)"
            cells.append(f"{values[m]:.1f}{unit}{ratio}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=300, help="timed calls of each kind, per round")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    text = asyncio.run(run(args))
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
