"""Load test: many concurrent clients reading and writing through the GraphQL API, then a loss check.

    python benchmarks/load_test.py [--duration 60] [--clients 64] [--database-url URL] [--workers N]

Starts `recallql serve` (what `python -m web.cli serve` runs) in a child process on a free 127.0.0.1 port
with a fresh data folder (SQLite by default; --database-url for PostgreSQL, which should be an empty
database), creates --threads threads over --resources resources with --seed-messages messages each, then
runs --clients concurrent clients (one httpx.AsyncClient each, keep-alive) for --duration seconds or
--max-requests requests, whichever comes first. Each client loops over a weighted mix of operations:

* reads: recall (newest page; an older page oldest-first; a metadata filter; include windows around a
  known message; hideSignals), threads (a resource's listing), thread (by id);
* writes: saveMessages of 1-5 messages with new ids into a random thread.

Every request must answer HTTP 200 without GraphQL errors; anything else counts as an error. Afterwards
every message id a saveMessages acknowledged must be readable (recall perPage: false on its thread).
The figures (throughput, p50/p95/p99/max latency per operation, errors, the loss check, and the server's
own request count from /metrics) go to stdout and to benchmarks/results/load-<date>.md. Exit status 1
when there was an error or a lost message.

Everything runs on this machine: the clients share its cores with the server, so the figures are a
floor for what the server does with the machine to itself.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import math
import os
import platform
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "benchmarks" / "results"
BASE_MS = 1767225600000  # 2026-01-01T00:00:00Z
TOPICS = ("billing", "shipping", "account", "technical", "general")

CREATE = "mutation Create($i: CreateThreadInput!) { createThread(input: $i) { id } }"
SAVE = "mutation Save($m: [MessageInput!]!) { saveMessages(messages: $m) { messages { id } } }"
RECALL_NEWEST = """query RecallNewest($t: ID!, $r: String) {
  recall(threadId: $t, resourceId: $r, perPage: 20) {
    total hasMore messages { id role createdAt content { parts { ... on TextPart { text } } } } } }"""
RECALL_PAGE = """query RecallPage($t: ID!, $p: Int!) {
  recall(threadId: $t, perPage: 10, page: $p, orderBy: {field: CREATED_AT, direction: ASC}) {
    total page hasMore messages { id createdAt } } }"""
RECALL_FILTER = """query RecallFilter($t: ID!, $topic: JSON) {
  recall(threadId: $t, perPage: 50, filter: {metadata: $topic}) {
    total messages { id content { metadata } } } }"""
RECALL_INCLUDE = """query RecallInclude($t: ID!, $id: ID!) {
  recall(threadId: $t, perPage: 5, include: [{id: $id, withPreviousMessages: 2, withNextMessages: 2}]) {
    total messages { id threadId } } }"""
RECALL_SIGNALS = """query RecallSignals($t: ID!) {
  recall(threadId: $t, perPage: 20, hideSignals: {all: true}) { total messages { id signalType } } }"""
THREADS = """query Threads($r: String!) {
  threads(resourceId: $r, perPage: 20) { total threads { id title updatedAt } } }"""
THREAD = "query Thread($id: ID!) { thread(id: $id) { id resourceId title metadata updatedAt } }"
RECALL_ALL = "query RecallAll($t: ID!) { recall(threadId: $t, perPage: false) { total messages { id } } }"

# (operation, weight)
MIX = (
    ("recall_newest", 25),
    ("recall_page", 10),
    ("recall_filter", 10),
    ("recall_include", 8),
    ("recall_signals", 5),
    ("threads", 8),
    ("thread", 4),
    ("save_messages", 30),
)


@dataclass
class Stats:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    error_samples: list[str] = field(default_factory=list)
    acknowledged: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    requests: int = 0

    def error(self, operation: str, detail: str) -> None:
        self.errors[operation] += 1
        if len(self.error_samples) < 10:
            self.error_samples.append(f"{operation}: {detail[:500]}")


@dataclass
class World:
    threads: list[tuple[str, str]]  # (thread id, resource id)
    known: dict[str, list[str]]  # thread -> message ids known to exist (for include)
    next_id: int = 0

    def new_id(self, client: int) -> str:
        self.next_id += 1
        return f"load-c{client}-{self.next_id}"


# ---------------------------------------------------------------------------------------------- server
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def server(data_dir: Path, database_url: str | None, workers: int, log_level: str) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "RECALLQL_LOG_LEVEL": log_level, "RECALLQL_ACCESS_LOG": "false"}
    command = [sys.executable, "-m", "web.cli", "serve", "--port", str(port), "--data-dir", str(data_dir)]
    command += ["--workers", str(workers)]
    if database_url:
        command += ["--database-url", database_url]
    log_path = data_dir / "server.log"
    data_dir.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise SystemExit(f"server exited:\n{log_path.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit(f"server not ready in 60 s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# ---------------------------------------------------------------------------------------------- traffic
async def call(client: httpx.AsyncClient, query: str, variables: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/graphql", json={"query": query, "variables": variables})
    if response.status_code != 200:
        raise RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")
    body = response.json()
    if body.get("errors"):
        raise RuntimeError(f"errors: {body['errors']}")
    return body["data"]


def message(thread_id: str, message_id: str, rng: random.Random, n: int) -> dict[str, Any]:
    role = "user" if n % 2 == 0 else "assistant"
    topic = rng.choice(TOPICS)
    content: dict[str, Any] = {
        "format": 2,
        "parts": [{"type": "text", "text": f"{role} message {n} about {topic}: " + "lorem ipsum " * 4}],
        "metadata": {"topic": topic, "turn": n},
    }
    if n % 17 == 5:  # a few signals, so hideSignals has something to hide
        role = "signal"
        content["metadata"]["signal"] = {"type": "state"}
    return {"id": message_id, "threadId": thread_id, "role": role, "content": content}


async def seed(base_url: str, world: World, per_thread: int, rng: random.Random) -> None:
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
        for thread_id, resource_id in world.threads:
            await call(
                client, CREATE, {"i": {"id": thread_id, "resourceId": resource_id, "title": thread_id}}
            )
            batch = []
            for n in range(per_thread):
                message_id = f"{thread_id}-seed-{n}"
                item = message(thread_id, message_id, rng, n)
                item["createdAt"] = _iso(BASE_MS + n * 1000)
                batch.append(item)
            for start in range(0, len(batch), 500):
                await call(client, SAVE, {"m": batch[start : start + 500]})
            world.known[thread_id] = [m["id"] for m in batch]


def _load() -> str:
    try:
        return " ".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:
        return "n/a"


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


async def client_loop(
    number: int,
    base_url: str,
    world: World,
    stats: Stats,
    stop_at: float,
    max_requests: int,
    seed_value: int,
) -> None:
    rng = random.Random(seed_value * 1000 + number)
    operations = [name for name, _ in MIX]
    weights = [weight for _, weight in MIX]
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:
        while time.monotonic() < stop_at and stats.requests < max_requests:
            stats.requests += 1
            operation = rng.choices(operations, weights)[0]
            thread_id, resource_id = rng.choice(world.threads)
            started = time.perf_counter()
            try:
                if operation == "save_messages":
                    items = [
                        message(thread_id, world.new_id(number), rng, rng.randint(0, 1000))
                        for _ in range(rng.randint(1, 5))
                    ]
                    data = await call(client, SAVE, {"m": items})
                    saved = [m["id"] for m in data["saveMessages"]["messages"]]
                    if sorted(saved) != sorted(m["id"] for m in items):
                        raise RuntimeError(f"saved {saved}, sent {[m['id'] for m in items]}")
                    stats.acknowledged[thread_id].update(saved)
                    world.known[thread_id].extend(saved)
                elif operation == "recall_newest":
                    data = await call(client, RECALL_NEWEST, {"t": thread_id, "r": resource_id})
                    if not data["recall"]["messages"]:
                        raise RuntimeError("the newest page of a seeded thread is empty")
                elif operation == "recall_page":
                    await call(client, RECALL_PAGE, {"t": thread_id, "p": rng.randint(0, 3)})
                elif operation == "recall_filter":
                    await call(
                        client, RECALL_FILTER, {"t": thread_id, "topic": {"topic": rng.choice(TOPICS)}}
                    )
                elif operation == "recall_include":
                    target = rng.choice(world.known[thread_id])
                    data = await call(client, RECALL_INCLUDE, {"t": thread_id, "id": target})
                    if target not in {m["id"] for m in data["recall"]["messages"]}:
                        raise RuntimeError(f"include target {target} missing")
                elif operation == "recall_signals":
                    data = await call(client, RECALL_SIGNALS, {"t": thread_id})
                    if any(m["signalType"] for m in data["recall"]["messages"]):
                        raise RuntimeError("hideSignals returned a signal")
                elif operation == "threads":
                    await call(client, THREADS, {"r": resource_id})
                elif operation == "thread":
                    data = await call(client, THREAD, {"id": thread_id})
                    if data["thread"]["id"] != thread_id:
                        raise RuntimeError("wrong thread")
            except Exception as exc:
                stats.error(operation, f"{type(exc).__name__}: {exc}")
                continue
            stats.latencies[operation].append(time.perf_counter() - started)


async def verify(base_url: str, stats: Stats) -> tuple[int, int, list[str]]:
    """(acknowledged, readable, samples of lost ids)."""
    acknowledged = readable = 0
    lost: list[str] = []
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
        for thread_id, ids in stats.acknowledged.items():
            data = await call(client, RECALL_ALL, {"t": thread_id})
            present = {m["id"] for m in data["recall"]["messages"]}
            acknowledged += len(ids)
            readable += len(ids & present)
            lost += sorted(ids - present)[:5]
    return acknowledged, readable, lost[:20]


async def server_request_count(base_url: str) -> float | None:
    """POSTs to /graphql the server counted (its Prometheus metrics), when /metrics is on."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        return None
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        response = await client.get("/metrics")
    if response.status_code != 200:
        return None
    total = 0.0
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if (
                sample.name == "recallql_http_requests_total"
                and sample.labels.get("route") == "/graphql"
                and sample.labels.get("method") == "POST"
            ):
                total += sample.value
    return total


# ---------------------------------------------------------------------------------------------- report
def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    rank = max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[rank]


def report(args: argparse.Namespace, stats: Stats, elapsed: float, check: dict[str, Any]) -> str:
    database = (
        f"PostgreSQL ({args.database_url.split('@')[-1]})" if args.database_url else "SQLite (fresh file)"
    )
    lost = check["acknowledged"] - check["readable"]
    lines = [
        f"# Load test, {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        "",
        f"`python benchmarks/load_test.py {' '.join(sys.argv[1:])}`",
        "",
        f"- machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"clients and server share it (load average before / after: {check['load_before']} / "
        f"{check['load_after']})",
        f"- server: `recallql serve`, {args.workers} worker(s), database {database}",
        f"- traffic: {args.clients} concurrent clients (one httpx.AsyncClient each, keep-alive), "
        f"{elapsed:.1f} s; {len(args.thread_ids)} threads over {args.resources} resources, "
        f"{args.seed_messages} seeded messages each; mix "
        + ", ".join(f"{name} {weight}%" for name, weight in MIX),
        "",
        "| operation | requests | errors | req/s | p50 ms | p95 ms | p99 ms | max ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    all_latencies: list[float] = []
    for name, _ in MIX:
        values = sorted(stats.latencies.get(name, []))
        all_latencies += values
        lines.append(_row(name, values, stats.errors.get(name, 0), elapsed))
    reads = sorted(v for name, vs in stats.latencies.items() if name != "save_messages" for v in vs)
    lines.append(
        _row("**all reads**", reads, sum(e for n, e in stats.errors.items() if n != "save_messages"), elapsed)
    )
    lines.append(_row("**all**", sorted(all_latencies), sum(stats.errors.values()), elapsed))
    lines += [
        "",
        f"- errors: **{sum(stats.errors.values())}**",
        f"- acknowledged messages written during the run: {check['acknowledged']}; readable afterwards "
        f"(recall perPage: false): {check['readable']}; lost: **{lost}**",
    ]
    if check.get("server_count") is not None:
        lines.append(
            f"- the server's own count of POST /graphql during the run (`recallql_http_requests_total`): "
            f"{check['server_count']:.0f} (clients sent {check['client_count']})"
        )
    if stats.error_samples:
        lines += ["", "Errors (first ones):", "", *[f"- `{s}`" for s in stats.error_samples]]
    if check["lost"]:
        lines += ["", "Lost ids (first ones): " + ", ".join(check["lost"])]
    return "\n".join(lines) + "\n"


def _row(name: str, values: list[float], errors: int, elapsed: float) -> str:
    if not values:
        return f"| {name} | 0 | {errors} | 0 | - | - | - | - |"
    ms = [v * 1000 for v in values]
    return (
        f"| {name} | {len(values)} | {errors} | {len(values) / elapsed:.1f} | {percentile(ms, 0.50):.1f} | "
        f"{percentile(ms, 0.95):.1f} | {percentile(ms, 0.99):.1f} | {ms[-1]:.1f} |"
    )


# ---------------------------------------------------------------------------------------------- main
async def run(args: argparse.Namespace, base_url: str) -> int:
    rng = random.Random(args.seed)
    resources = [f"load-r{n}" for n in range(args.resources)]
    world = World(
        threads=[(f"load-t{n}", resources[n % len(resources)]) for n in range(args.threads)], known={}
    )
    args.thread_ids = [t for t, _ in world.threads]
    print(f"seeding {args.threads} threads x {args.seed_messages} messages ...", flush=True)
    await seed(base_url, world, args.seed_messages, rng)
    before = await server_request_count(base_url)
    load_before = _load()
    stats = Stats()
    print(
        f"running {args.clients} clients for {args.duration:.0f} s (at most {args.max_requests} requests)",
        flush=True,
    )
    started = time.monotonic()
    stop_at = started + args.duration
    await asyncio.gather(
        *(
            client_loop(n, base_url, world, stats, stop_at, args.max_requests, args.seed)
            for n in range(args.clients)
        )
    )
    elapsed = time.monotonic() - started
    after = await server_request_count(base_url)
    acknowledged, readable, lost = await verify(base_url, stats)
    client_count = sum(len(v) for v in stats.latencies.values()) + sum(stats.errors.values())
    check = {
        "acknowledged": acknowledged,
        "readable": readable,
        "lost": lost,
        "server_count": (after - before) if before is not None and after is not None else None,
        "client_count": client_count,
        "load_before": load_before,
        "load_after": _load(),
    }
    text = report(args, stats, elapsed, check)
    print()
    print(text)
    if not args.no_write:
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        path = args.output or RESULTS_DIR / f"load-{dt.date.today().isoformat()}.md"
        Path(path).write_text(text)
        print(f"written to {path}")
    failed = sum(stats.errors.values()) > 0 or acknowledged != readable
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of traffic (default 60)")
    parser.add_argument("--max-requests", type=int, default=2_000_000, help="stop after this many requests")
    parser.add_argument("--clients", type=int, default=64, help="concurrent clients (default 64)")
    parser.add_argument("--threads", type=int, default=32, help="threads written and read (default 32)")
    parser.add_argument("--resources", type=int, default=8, help="resources owning them (default 8)")
    parser.add_argument("--seed-messages", type=int, default=200, help="messages per thread before the run")
    parser.add_argument(
        "--database-url", help="PostgreSQL URL (an empty database); default a fresh SQLite file"
    )
    parser.add_argument("--workers", type=int, default=1, help="server worker processes (default 1)")
    parser.add_argument("--server-log-level", default="warning")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--output", type=Path, help="report path (default benchmarks/results/load-<date>.md)")
    parser.add_argument("--no-write", action="store_true", help="print the report only")
    parser.add_argument("--keep", action="store_true", help="keep the data folder")
    args = parser.parse_args()
    if args.duration <= 0 or args.duration > 3600:
        parser.error("--duration must be in (0, 3600]")
    data_dir = Path(tempfile.mkdtemp(prefix="recallql-load-"))
    try:
        with server(data_dir, args.database_url, args.workers, args.server_log_level) as base_url:
            return asyncio.run(run(args, base_url))
    finally:
        if args.keep:
            print(f"data kept in {data_dir}")
        else:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
