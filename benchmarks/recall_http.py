"""Recall latency and throughput: RecallQL over HTTP and in process, next to Mastra in process.

    python benchmarks/recall_http.py [--messages 10000] [--duration 10] [--requests 300] [--concurrency 32]
                                     [--database-url URL] [--skip-mastra] [--profile] [--no-write]

One thread of chat messages is loaded into a fresh RecallQL server (`recallql serve` in a child process
on a free 127.0.0.1 port, fresh data folder and SQLite file unless --database-url) through the GraphQL
API; then three recall scenarios are measured over HTTP (httpx, keep-alive): latency at concurrency 1 and
throughput at concurrency N for a fixed time. With the server stopped, the same scenarios are timed in
process against the same database: the recall engine alone, and the whole GraphQL execution without
HTTP. Finally benchmarks/mastra_recall.mjs times Mastra's Memory.recall() on the same messages, using the
conformance oracle's installed node_modules. See benchmarks/README.md for what each number means.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import hashlib
import json
import math
import os
import platform
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from child_server import ChildServer, recallql_server, running  # noqa: E402  (benchmarks/, the script's folder)

from models.db import create_engine  # noqa: E402
from models.repository import Repository  # noqa: E402
from resolvers.auth import OPEN  # noqa: E402
from resolvers.config import BUILTIN_DEFAULTS  # noqa: E402
from resolvers.context import RequestContext, Services  # noqa: E402
from resolvers.recall import OrderBy, RecallArgs  # noqa: E402
from schema import build_schema  # noqa: E402

SHARED = Path(os.environ.get("RECALLQL_SHARED_DIR", REPO.parent / "shared"))
ORACLE_DIR = SHARED / "conformance"
RESULTS_DIR = REPO / "benchmarks" / "results"

THREAD_ID = "bench-thread"
RESOURCE_ID = "bench-user"
BASE_MS = 1767225600000  # 2026-01-01T00:00:00Z
TOPICS = ("billing", "shipping", "account", "technical", "general")
PAGE_SIZE = 20

# ---------------------------------------------------------------------------------------------- dataset
_USER = {
    "billing": [
        "I was charged twice for my {plan} plan this month, can you check invoice #{n}?",
        "Why did my bill go up to ${amount}? I didn't change anything.",
        "Can I switch to annual billing and get the discount on the {plan} plan?",
        "My card ending in {card} was declined, but the bank says it's fine.",
        "Please send me a copy of last month's invoice for our accountant.",
    ],
    "shipping": [
        "Where is my order #{n}? The tracking page hasn't updated since {day}.",
        "Can you ship to a P.O. box, or does it have to be a street address?",
        "The package arrived damaged, the box was crushed on one side.",
        "Is express delivery available to Lyon before {day}?",
        "I need to change the delivery address on order #{n}.",
    ],
    "account": [
        "I can't log in, the reset email never arrives.",
        "How do I add a second admin to our workspace?",
        "Please change the email on my account to the new one I sent yesterday.",
        "Can I merge my two accounts? One is personal, one is from work.",
        "How do I turn on two-factor authentication?",
    ],
    "technical": [
        "The export to CSV times out when I pick more than {n} rows.",
        "The app crashes on startup since the update to version 4.{n}.",
        "Webhooks stopped firing around {day}, did something change on your side?",
        "The API returns 429 even though we're well under {n} requests a minute.",
        "Sync between the phone and the desktop app is stuck at {pct}%.",
    ],
    "general": [
        "Thanks, that fixed it!",
        "Do you have a roadmap for the next quarter?",
        "What are your support hours on weekends?",
        "Can you recommend a plan for a team of {n} people?",
        "Is there a discount for non-profits?",
    ],
}
_ASSISTANT = {
    "billing": [
        "I see two charges of ${amount} on {day}. The second one is a pending authorization and will drop "
        "off within 3-5 business days.",
        "Your {plan} plan renewed with the new seat count, which is why the total changed. I've attached "
        "the breakdown.",
        "Done: you're on annual billing now, and the 15% discount applies from the next invoice.",
        "The decline came from the card network, not from us. Could you try again or use another card?",
        "I've emailed the invoice for {day} to the billing contact on file.",
    ],
    "shipping": [
        "Order #{n} is at the regional hub; the carrier expects to deliver it by {day}.",
        "We can ship to P.O. boxes with standard delivery; express needs a street address.",
        "Sorry about that. I've started a replacement shipment and you'll get a return label by email.",
        "Yes, express delivery to Lyon takes one business day if you order before noon.",
        "I've updated the address on order #{n}; the carrier has the change.",
    ],
    "account": [
        "I've re-sent the reset email from a different sender; please check the spam folder too.",
        "Go to Settings > Members, pick the person and choose Admin as their role.",
        "The email on your account is updated; you'll need to confirm it from the new inbox.",
        "We can merge them: tell me which one should keep the subscription and I'll move the data.",
        "Open Settings > Security > Two-factor and scan the QR code with your authenticator app.",
    ],
    "technical": [
        "Exports over {n} rows run in the background now; you'll get an email with the file when it's ready.",
        "Thanks for the report. Could you send the crash log from Help > Diagnostics? "
        "We're looking into 4.{n}.",
        "We rotated the signing secret on {day}; please update it under Integrations > Webhooks.",
        "Your key is on the older limit of {n} per minute; I've raised it, it applies within 10 minutes.",
        "Please sign out and back in on the phone; that forces a full resync from {pct}%.",
    ],
    "general": [
        "Glad to hear it! Anything else I can help with?",
        "We publish the roadmap on our blog at the start of each quarter.",
        "Weekend support runs from 9:00 to 17:00 CET by chat.",
        "For {n} people the Team plan is usually the best fit; it includes shared workspaces.",
        "Yes, non-profits get 50% off any plan; send us your registration and we'll apply it.",
    ],
}


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def build_messages(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """n messages of one thread: user/assistant pairs on one topic each, createdAt 1 s apart."""
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = []
    topic = TOPICS[0]
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        if role == "user":
            topic = rng.choice(TOPICS)
        template = rng.choice((_USER if role == "user" else _ASSISTANT)[topic])
        text = template.format(
            plan=rng.choice(("Starter", "Team", "Business")),
            n=rng.randint(2, 9999),
            amount=f"{rng.randint(9, 499)}.{rng.randint(0, 99):02d}",
            card=f"{rng.randint(0, 9999):04d}",
            day=rng.choice(("Monday", "Tuesday", "the 3rd", "the 14th", "last Friday")),
            pct=rng.randint(1, 99),
        )
        messages.append(
            {
                "id": f"msg-{i:06d}",
                "threadId": THREAD_ID,
                "resourceId": RESOURCE_ID,
                "role": role,
                "type": "v2",
                "createdAt": iso(BASE_MS + i * 1000),
                "content": {
                    "format": 2,
                    "parts": [{"type": "text", "text": text}],
                    "metadata": {"topic": topic, "turn": i // 2 + 1},
                },
            }
        )
    return messages


# ---------------------------------------------------------------------------------------------- scenarios
_SELECTION = (
    "total page perPage hasMore messages { id role type createdAt threadId resourceId "
    "content { format metadata parts { __typename ... on TextPart { text } } } }"
)


@dataclass(frozen=True)
class Scenario:
    key: str
    label: str
    arguments: str  # GraphQL arguments after threadId
    engine_args: dict[str, Any]  # RecallArgs keyword arguments besides thread_id
    mastra_args: dict[str, Any]  # memory.recall() args besides threadId

    @property
    def document(self) -> str:
        call = f"recall(threadId: $threadId, {self.arguments})"
        return f"query Recall($threadId: ID!) {{ {call} {{ {_SELECTION} }} }}"


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "newest",
        "newest 20",
        f"perPage: {PAGE_SIZE}",
        {"per_page": PAGE_SIZE},
        {"perPage": PAGE_SIZE},
    ),
    Scenario(
        "page50asc",
        "page 50 of 20, ASC",
        f"perPage: {PAGE_SIZE}, page: 50, orderBy: {{field: CREATED_AT, direction: ASC}}",
        {"per_page": PAGE_SIZE, "page": 50, "order_by": OrderBy("createdAt", "ASC")},
        {"perPage": PAGE_SIZE, "page": 50, "orderBy": {"field": "createdAt", "direction": "ASC"}},
    ),
    Scenario(
        "billing",
        'metadata topic "billing", newest 20',
        f'perPage: {PAGE_SIZE}, filter: {{metadata: {{topic: "billing"}}}}',
        {"per_page": PAGE_SIZE, "metadata": {"topic": "billing"}},
        {"perPage": PAGE_SIZE, "filter": {"metadata": {"topic": "billing"}}},
    ),
)


# ---------------------------------------------------------------------------------------------- stats
def pct(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (the p99 of 300 samples is the 297th smallest)."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def ms(seconds: Sequence[float]) -> list[float]:
    return [s * 1000 for s in seconds]


def fmt(value: float | None, digits: int = 2) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    return f"{value:.{digits}f}"


@dataclass
class HttpResult:
    c1_ms: list[float] = field(default_factory=list)
    c1_errors: int = 0
    c1_elapsed: float = 0.0
    cn_ok: int = 0
    cn_errors: int = 0
    cn_elapsed: float = 0.0
    cn_ms: list[float] = field(default_factory=list)
    server_cpu: float | None = None  # CPU seconds per second during the c=N run (1.0 = one core)
    client_cpu: float | None = None
    other_cpu: float | None = None  # every other process on the machine
    server_cpu_ms_c1: float | None = None  # server CPU ms per request at c=1
    server_cpu_ms_cn: float | None = None  # server CPU ms per request at c=N
    sample: dict[str, Any] | None = None
    error_examples: list[str] = field(default_factory=list)

    @property
    def rps(self) -> float:
        return self.cn_ok / self.cn_elapsed if self.cn_elapsed else math.nan


# ---------------------------------------------------------------------------------------------- server
def system_busy_seconds() -> float | None:
    """CPU time all processes spent busy since boot (Linux /proc/stat; idle and iowait excluded)."""
    try:
        values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (values + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def load_average() -> str:
    try:
        return " / ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


# ---------------------------------------------------------------------------------------------- HTTP
async def graphql(client: httpx.AsyncClient, query: str, variables: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/graphql", json={"query": query, "variables": variables})
    body = response.json()
    if response.status_code != 200 or body.get("errors"):
        raise RuntimeError(f"HTTP {response.status_code}: {json.dumps(body)[:500]}")
    return body["data"]


async def load_messages(client: httpx.AsyncClient, messages: list[dict[str, Any]], batch: int) -> float:
    create = "mutation($input: CreateThreadInput!) { createThread(input: $input) { id } }"
    await graphql(
        client,
        create,
        {
            "input": {
                "id": THREAD_ID,
                "resourceId": RESOURCE_ID,
                "title": "Support chat",
                "metadata": {"channel": "web"},
                "createdAt": iso(BASE_MS - 1000),
            }
        },
    )
    save = "mutation($m: [MessageInput!]!) { saveMessages(messages: $m) { messages { id } } }"
    start = time.perf_counter()
    for i in range(0, len(messages), batch):
        chunk = messages[i : i + batch]
        data = await graphql(client, save, {"m": chunk})
        if len(data["saveMessages"]["messages"]) != len(chunk):
            raise RuntimeError("saveMessages returned a different number of messages")
    return time.perf_counter() - start


def check_page(body: dict[str, Any], status: int) -> str | None:
    """None when the response is a full, error-free page; else what is wrong."""
    if status != 200:
        return f"HTTP {status}"
    if body.get("errors"):
        return f"errors: {json.dumps(body['errors'])[:300]}"
    recall = (body.get("data") or {}).get("recall")
    if not recall or len(recall.get("messages") or []) != PAGE_SIZE:
        return f"unexpected page: {json.dumps(body)[:300]}"
    return None


async def one_request(client: httpx.AsyncClient, payload: bytes) -> tuple[float, str | None, Any]:
    start = time.perf_counter()
    try:
        response = await client.post("/graphql", content=payload)
        body = response.json()
        elapsed = time.perf_counter() - start
        return elapsed, check_page(body, response.status_code), body
    except Exception as exc:  # every failure counts as an error; the run goes on
        return time.perf_counter() - start, f"{type(exc).__name__}: {exc}", None


async def measure_http(
    client: httpx.AsyncClient,
    scenario: Scenario,
    *,
    warmup: int,
    requests: int,
    concurrency: int,
    duration: float,
    max_seconds: float,
    server: ChildServer,
) -> HttpResult:
    result = HttpResult()
    payload = json.dumps({"query": scenario.document, "variables": {"threadId": THREAD_ID}}).encode()

    def error(what: str) -> None:
        if len(result.error_examples) < 3:
            result.error_examples.append(what)

    # Warm-up (untimed), then concurrency 1: bounded by count and by time.
    deadline = time.monotonic() + max_seconds
    for _ in range(warmup):
        if time.monotonic() > deadline:
            break
        _, problem, body = await one_request(client, payload)
        if problem is None and result.sample is None:
            result.sample = body["data"]["recall"]
    start = time.perf_counter()
    c1_cpu_before = server.cpu_seconds()
    deadline = time.monotonic() + max_seconds
    while len(result.c1_ms) + result.c1_errors < requests and time.monotonic() < deadline:
        elapsed, problem, body = await one_request(client, payload)
        if problem is None:
            result.c1_ms.append(elapsed * 1000)
            if result.sample is None:
                result.sample = body["data"]["recall"]
        else:
            result.c1_errors += 1
            error(problem)
    result.c1_elapsed = time.perf_counter() - start
    c1_cpu_after = server.cpu_seconds()
    if c1_cpu_before is not None and c1_cpu_after is not None and result.c1_ms:
        result.server_cpu_ms_c1 = (c1_cpu_after - c1_cpu_before) * 1000 / len(result.c1_ms)

    # Concurrency N for a fixed duration (each worker also stops after a generous request count).
    per_worker_cap = 1_000_000
    cpu_before, client_before, system_before = (
        server.cpu_seconds(),
        time.process_time(),
        system_busy_seconds(),
    )
    start = time.perf_counter()
    stop_at = start + duration
    last_done = start

    async def worker() -> None:
        nonlocal last_done
        for _ in range(per_worker_cap):
            if time.perf_counter() >= stop_at:
                return
            elapsed, problem, _ = await one_request(client, payload)
            last_done = time.perf_counter()
            if problem is None:
                result.cn_ok += 1
                result.cn_ms.append(elapsed * 1000)
            else:
                result.cn_errors += 1
                error(problem)

    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(concurrency))), duration + 120)
    result.cn_elapsed = last_done - start
    cpu_after, client_after, system_after = server.cpu_seconds(), time.process_time(), system_busy_seconds()
    wall = time.perf_counter() - start
    if cpu_before is not None and cpu_after is not None and wall > 0:
        result.server_cpu = (cpu_after - cpu_before) / wall
        if result.cn_ok + result.cn_errors:
            result.server_cpu_ms_cn = (cpu_after - cpu_before) * 1000 / (result.cn_ok + result.cn_errors)
        result.client_cpu = (client_after - client_before) / wall
        if system_before is not None and system_after is not None:
            others = (
                (system_after - system_before) - (cpu_after - cpu_before) - (client_after - client_before)
            )
            result.other_cpu = max(0.0, others / wall)
    return result


# ---------------------------------------------------------------------------------------------- in process
async def time_calls(
    call: Callable[[], Awaitable[Any]], *, warmup: int, calls: int, max_seconds: float
) -> tuple[list[float], float, Any]:
    """Wall ms of each timed call, the mean CPU ms per call (this process, all its threads: the
    aiosqlite thread running SQLite included), and the last result."""
    last = None
    for _ in range(warmup):
        last = await call()
    samples: list[float] = []
    deadline = time.monotonic() + max_seconds
    cpu_start = time.process_time()
    while len(samples) < calls and time.monotonic() < deadline:
        start = time.perf_counter()
        last = await call()
        samples.append((time.perf_counter() - start) * 1000)
    cpu_ms = (time.process_time() - cpu_start) * 1000 / max(1, len(samples))
    return samples, cpu_ms, last


async def measure_in_process(
    database_url: str, *, warmup: int, calls: int, max_seconds: float, profile: bool
) -> dict[str, dict[str, Any]]:
    """On the benchmark database, without HTTP: the recall engine alone; Strawberry's full execution
    (parse, validate, the limits, graphql-core field resolution); and, when the schema has one, the
    compiled read path the server answers supported queries with (plan, engine, serialisation)."""
    engine = create_engine(database_url)  # the server has migrated it
    repository = Repository(engine)
    services = Services.build(repository, memory_defaults=dict(BUILTIN_DEFAULTS), max_include_items=100)
    schema = build_schema()
    fast_path = getattr(schema, "fast_path", None)
    variables = {"threadId": THREAD_ID}
    out: dict[str, dict[str, Any]] = {}
    try:
        for scenario in SCENARIOS:

            async def recall(scenario: Scenario = scenario) -> Any:
                return await services.recall.recall(
                    RecallArgs(thread_id=THREAD_ID, **scenario.engine_args), principal=OPEN
                )

            async def execute(scenario: Scenario = scenario) -> Any:
                result = await schema.execute(
                    scenario.document,
                    variable_values=variables,
                    context_value=RequestContext(services=services, principal=OPEN),
                )
                if result.errors:
                    raise RuntimeError(f"GraphQL errors: {result.errors}")
                return result.data

            async def compiled(scenario: Scenario = scenario) -> Any:
                assert fast_path is not None
                plan = fast_path.plan(scenario.document, None)
                context = RequestContext(services=services, principal=OPEN)
                result = await fast_path.execute(plan, variables, context)
                if result is None:
                    raise RuntimeError("the compiled path declined the query")
                return orjson.dumps(result)

            engine_ms, engine_cpu, engine_last = await time_calls(
                recall, warmup=warmup, calls=calls, max_seconds=max_seconds
            )
            gql_ms, gql_cpu, _ = await time_calls(
                execute, warmup=warmup, calls=calls, max_seconds=max_seconds
            )
            entry: dict[str, Any] = {
                "engine_ms": engine_ms,
                "graphql_ms": gql_ms,
                "engine_cpu_ms": engine_cpu,
                "graphql_cpu_ms": gql_cpu,
                "compiled_ms": None,
                "compiled_cpu_ms": None,
                "ids": [m.id for m in engine_last.messages],
                "total": engine_last.total,
            }
            if fast_path is not None and fast_path.plan(scenario.document, None) is not None:
                entry["compiled_ms"], entry["compiled_cpu_ms"], _ = await time_calls(
                    compiled, warmup=warmup, calls=calls, max_seconds=max_seconds
                )
            out[scenario.key] = entry
            if profile:
                paths: dict[str, Callable[[], Awaitable[Any]]] = {
                    "engine": recall,
                    "graphql execute": execute,
                }
                if entry["compiled_ms"] is not None:
                    paths["compiled read path"] = compiled
                entry["profile"] = await profile_calls(paths)
    finally:
        with contextlib.suppress(Exception):
            await services.aclose()
        with contextlib.suppress(Exception):
            repository.close()
        await engine.dispose()
    return out


def _package(filename: str) -> str:
    """The package a profiled function belongs to: site-packages/<pkg>, this repository's top folder,
    the standard library, or C built-ins."""
    path = filename.replace("\\", "/")
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1].split("/", 1)[0]
    if path == __file__:
        return "event-loop wait (seen from the benchmark's frame)"
    if path.startswith(str(REPO)):
        return "recallql:" + Path(path).relative_to(REPO).parts[0]
    if path.startswith("<") or path == "~":
        return "built-ins (C)"
    return "stdlib:" + Path(path).stem


async def profile_calls(paths: dict[str, Callable[[], Awaitable[Any]]], calls: int = 300) -> dict[str, str]:
    """A pyinstrument call tree of the engine, and for every path the share of time (cProfile own
    time) per package plus the hottest functions. Both profilers see only the thread they run in, so
    asyncio.to_thread (the repository's SQLite reads) runs inline meanwhile, in the profiled thread."""
    from unittest import mock

    async def inline(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    with mock.patch.object(asyncio, "to_thread", inline):
        return await _profile(paths, calls)


async def _profile(paths: dict[str, Callable[[], Awaitable[Any]]], calls: int) -> dict[str, str]:
    import cProfile
    import pstats

    texts: dict[str, str] = {}
    try:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0002, async_mode="enabled")
        profiler.start()
        for _ in range(calls):
            await paths["engine"]()
        profiler.stop()
        texts["engine call tree (pyinstrument)"] = profiler.output_text(unicode=False, color=False)
    except ImportError:
        texts["engine call tree (pyinstrument)"] = "pyinstrument is not installed (pip install pyinstrument)"
    for name, call in paths.items():
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            await call()
        prof.disable()
        stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
        by_package: dict[str, float] = {}
        functions = []
        for (filename, line, func), (_cc, _nc, tottime, _ct, _callers) in stats.items():
            by_package[_package(filename)] = by_package.get(_package(filename), 0.0) + tottime
            functions.append((tottime, f"{func} ({_package(filename)}:{Path(filename).name}:{line})"))
        total = sum(by_package.values()) or 1.0
        lines = [
            f"{name}: {total / calls * 1000:.2f} ms wall per call under cProfile (inflated by its per-call "
            "overhead: read the shares). Own time by package (an awaiting frame's own time includes the "
            "wait, e.g. for the thread running SQLite):"
        ]
        for package, seconds in sorted(by_package.items(), key=lambda kv: -kv[1])[:12]:
            lines.append(f"  {seconds / total * 100:5.1f}%  {package}")
        lines.append("  hottest functions (own time):")
        for seconds, label in sorted(functions, reverse=True)[:12]:
            lines.append(f"  {seconds / total * 100:5.1f}%  {label}")
        texts[f"{name} (cProfile)"] = "\n".join(lines)
    return texts


# ---------------------------------------------------------------------------------------------- Mastra
def oracle_node_modules(explicit: Path | None) -> Path:
    """The conformance oracle's cache folder (installed by oracle.sh on first use)."""
    if explicit:
        return explicit
    lock = ORACLE_DIR / "package-lock.json"
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()[:16]
    root = Path(
        os.environ.get("RECALL_ORACLE_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "recall-oracle"
    )
    cache = root / digest
    if not (cache / ".complete").exists():
        print(f"installing the oracle's pinned Mastra packages into {cache} (one time) ...", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            tiny = Path(tmp) / "tiny.json"
            tiny.write_text(json.dumps({"threads": [], "messages": [], "queries": []}))
            subprocess.run(
                ["bash", str(ORACLE_DIR / "oracle.sh"), str(tiny), str(Path(tmp) / "out.json")],
                check=True,
                timeout=600,
            )
    if not (cache / ".complete").exists():
        raise RuntimeError(f"oracle packages not found in {cache}")
    return cache


def run_mastra(
    messages: list[dict[str, Any]],
    work_dir: Path,
    *,
    node_modules: Path,
    calls: int,
    warmup: int,
    max_seconds: float,
    storage: str,
) -> dict[str, Any]:
    dataset = {
        "memoryOptions": {"lastMessages": BUILTIN_DEFAULTS["lastMessages"], "semanticRecall": False},
        "thread": {
            "id": THREAD_ID,
            "resourceId": RESOURCE_ID,
            "title": "Support chat",
            "metadata": {"channel": "web"},
            "createdAt": iso(BASE_MS - 1000),
        },
        "messages": messages,
        "scenarios": [{"name": s.key, "args": {"threadId": THREAD_ID, **s.mastra_args}} for s in SCENARIOS],
    }
    dataset_path = work_dir / "mastra-dataset.json"
    out_path = work_dir / "mastra-out.json"
    dataset_path.write_text(json.dumps(dataset))
    command = [
        "node",
        str(REPO / "benchmarks" / "mastra_recall.mjs"),
        str(dataset_path),
        "--out",
        str(out_path),
        "--calls",
        str(calls),
        "--warmup",
        str(warmup),
        "--max-seconds",
        str(max_seconds),
        "--storage",
        storage,
    ]
    env = {**os.environ, "RECALL_ORACLE_NODE_MODULES": str(node_modules)}
    proc = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=max_seconds * len(SCENARIOS) + 300
    )
    if proc.returncode != 0:
        raise RuntimeError(f"mastra_recall.mjs failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(out_path.read_text())


# ---------------------------------------------------------------------------------------------- report
def machine_info(
    database_url: str, mastra: dict[str, Any] | None, load_at_start: str
) -> list[tuple[str, str]]:
    cpu = platform.processor() or "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    node = shutil.which("node")
    node_version = mastra["node"] if mastra else None
    if node and not node_version:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            node_version = subprocess.run(
                [node, "--version"], capture_output=True, text=True, timeout=10
            ).stdout.strip()
    backend = database_url.split(":", 1)[0]
    info = [
        ("date", dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")),
        ("load average (1, 5, 15 min)", f"{load_at_start} at the start, {load_average()} at the end"),
        ("nproc", f"{len(os.sched_getaffinity(0))} (os.cpu_count {os.cpu_count()})"),
        ("cpu", cpu),
        ("platform", platform.platform()),
        ("python", f"{platform.python_implementation()} {platform.python_version()}"),
        ("database", f"{backend} (SQLite {sqlite3.sqlite_version})" if "sqlite" in backend else backend),
        ("node", node_version or "not found"),
    ]
    if mastra:
        versions = mastra["mastra"]
        info.append(
            (
                "mastra",
                f"@mastra/core {versions['core']}, @mastra/memory {versions['memory']}, "
                f"@mastra/libsql {versions['libsql']} (LibSQLStore on a {mastra['storage']})",
            )
        )
    return info


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or math.isnan(a) or math.isnan(b) or b == 0:
        return "n/a"
    return f"{a / b:.2f}x"


def render(
    args: argparse.Namespace,
    info: list[tuple[str, str]],
    http: dict[str, HttpResult],
    local: dict[str, dict[str, Any]],
    mastra: dict[str, Any] | None,
    load_seconds: float,
    notes: list[str],
) -> str:
    mastra_by = {s["name"]: s for s in mastra["scenarios"]} if mastra else {}
    lines = [
        f"# Recall benchmark, {dt.date.today().isoformat()}",
        "",
        f"One thread of {args.messages:,} messages (user/assistant, one text part, metadata "
        f"{{topic, turn}}, createdAt 1 s apart); pages of {PAGE_SIZE}. HTTP: {args.requests} sequential "
        f"requests after {args.warmup} warm-up at c=1; {args.concurrency} concurrent keep-alive clients for "
        f"{args.duration:g} s at c={args.concurrency}. In process: {args.calls} timed calls after "
        f"{args.warmup} warm-up. Latencies in ms, nearest-rank percentiles.",
        "",
        f"| scenario | RecallQL HTTP p50 / p99 ms (c=1) | RecallQL req/s (c={args.concurrency}) "
        "| RecallQL engine in-process p50 / p99 ms | Mastra in-process p50 / p99 ms "
        "| ratio engine / Mastra (HTTP / Mastra), p50 |",
        "|---|---|---|---|---|---|",
    ]
    for s in SCENARIOS:
        h, loc, m = http[s.key], local.get(s.key), mastra_by.get(s.key)
        engine_p50 = pct(loc["engine_ms"], 0.5) if loc else None
        mastra_p50 = m["p50Ms"] if m else None
        http_p50 = pct(h.c1_ms, 0.5)
        errors = h.c1_errors + h.cn_errors
        rps = f"{h.rps:,.0f}" + (f" ({errors} errors)" if errors else "")
        lines.append(
            f"| {s.label} | {fmt(http_p50)} / {fmt(pct(h.c1_ms, 0.99))} | {rps} "
            f"| {fmt(engine_p50)} / {fmt(pct(loc['engine_ms'], 0.99) if loc else None)} "
            f"| {fmt(mastra_p50)} / {fmt(m['p99Ms'] if m else None)} "
            f"| {ratio(engine_p50, mastra_p50)} ({ratio(http_p50, mastra_p50)}) |"
        )
    lines += [
        "",
        "Where RecallQL's time goes (p50 ms at c=1, and the c=N run):",
        "",
        "| scenario | engine in-process | Strawberry execute in-process | compiled read path in-process "
        f"| HTTP c=1 | HTTP p50 / p99 at c={args.concurrency} | server CPU at c={args.concurrency} "
        "| client CPU | other processes' CPU | errors c=1 / c=N |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in SCENARIOS:
        h, loc = http[s.key], local.get(s.key)
        cpu = f"{h.server_cpu * 100:.0f}%" if h.server_cpu is not None else "n/a"
        client_cpu = f"{h.client_cpu * 100:.0f}%" if h.client_cpu is not None else "n/a"
        other_cpu = f"{h.other_cpu * 100:.0f}%" if h.other_cpu is not None else "n/a"
        lines.append(
            f"| {s.label} | {fmt(pct(loc['engine_ms'], 0.5) if loc else None)} "
            f"| {fmt(pct(loc['graphql_ms'], 0.5) if loc else None)} "
            f"| {fmt(pct(loc['compiled_ms'], 0.5) if loc and loc['compiled_ms'] else None)} "
            f"| {fmt(pct(h.c1_ms, 0.5))} "
            f"| {fmt(pct(h.cn_ms, 0.5))} / {fmt(pct(h.cn_ms, 0.99))} | {cpu} | {client_cpu} "
            f"| {other_cpu} | {h.c1_errors} / {h.cn_errors} |"
        )
    lines += [
        "",
        "CPU columns: CPU seconds per wall second during the c=N run (100% = one core busy); "
        "'other processes' is every process on the machine except the server and this client.",
        "",
        "CPU time per call, ms (hardly affected by other processes sharing the machine, unlike wall "
        "time; each process counted with all its threads):",
        "",
        "| scenario | RecallQL engine in-process | RecallQL Strawberry execute in-process "
        "| RecallQL compiled read path in-process "
        f"| RecallQL server per HTTP request, c=1 / c={args.concurrency} "
        "| server req/s per core it would sustain | Mastra recall in-process "
        "| ratio engine / Mastra (server c=1 / Mastra) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in SCENARIOS:
        h, loc, m = http[s.key], local.get(s.key), mastra_by.get(s.key)
        engine_cpu = loc["engine_cpu_ms"] if loc else None
        mastra_cpu = m.get("cpuMs") if m else None
        per_core = 1000 / h.server_cpu_ms_cn if h.server_cpu_ms_cn else None
        lines.append(
            f"| {s.label} | {fmt(engine_cpu)} | {fmt(loc['graphql_cpu_ms'] if loc else None)} "
            f"| {fmt(loc['compiled_cpu_ms'] if loc else None)} "
            f"| {fmt(h.server_cpu_ms_c1)} / {fmt(h.server_cpu_ms_cn)} | {fmt(per_core, 0)} "
            f"| {fmt(mastra_cpu)} | {ratio(engine_cpu, mastra_cpu)} "
            f"({ratio(h.server_cpu_ms_c1, mastra_cpu)}) |"
        )
    lines += ["", "Machine and run:", ""]
    lines += [f"- {k}: {v}" for k, v in info]
    lines.append(
        f"- load through the API: {args.messages:,} messages in {load_seconds:.1f} s "
        f"({args.messages / load_seconds:,.0f} msg/s, saveMessages batches of {args.batch})"
    )
    if mastra:
        lines.append(
            f"- Mastra load (storage saveMessages, batches of 500): {mastra['loadMs'] / 1000:.1f} s; "
            f"libsql's SQLite {mastra.get('sqlite') or 'n/a'}"
        )
    shown = {k: v for k, v in server_settings(args).items() if k != "RECALLQL_DATABASE_URL"}
    lines.append(
        "- server: 1 uvicorn worker, settings "
        + ", ".join(f"{k}={v}" for k, v in shown.items())
        + " (nothing else from the environment); client and server share the CPUs"
    )
    if notes:
        lines += ["", "Checks and anomalies:", ""]
        lines += [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def cross_check(
    messages: list[dict[str, Any]],
    http: dict[str, HttpResult],
    local: dict[str, dict[str, Any]],
    mastra: dict[str, Any] | None,
) -> list[str]:
    """Every implementation must return the same page; RecallQL's totals must match the dataset.
    Problems come first; a shared machine is noted after them."""
    problems: list[str] = []
    shared: list[str] = []
    billing = sum(1 for m in messages if m["content"]["metadata"]["topic"] == "billing")
    expected_total = {"newest": len(messages), "page50asc": len(messages), "billing": billing}
    mastra_by = {s["name"]: s for s in mastra["scenarios"]} if mastra else {}
    for s in SCENARIOS:
        h = http[s.key]
        sample = h.sample
        http_ids = [m["id"] for m in sample["messages"]] if sample else None
        if sample is None:
            problems.append(f"{s.label}: no successful HTTP response to check")
        elif sample["total"] != expected_total[s.key]:
            problems.append(f"{s.label}: HTTP total {sample['total']}, expected {expected_total[s.key]}")
        loc = local.get(s.key)
        if loc and http_ids is not None and loc["ids"] != http_ids:
            problems.append(f"{s.label}: the in-process engine returned other ids than HTTP")
        m = mastra_by.get(s.key)
        if m and sample is not None:
            if m["ids"] != http_ids:
                problems.append(f"{s.label}: Mastra returned other ids than RecallQL ({m['ids'][:3]}...)")
            if m["total"] != sample["total"]:
                problems.append(f"{s.label}: Mastra total {m['total']}, RecallQL {sample['total']}")
        if h.c1_errors or h.cn_errors:
            problems.append(f"{s.label}: {h.c1_errors} errors at c=1, {h.cn_errors} at c=N")
        problems.extend(f"{s.label}: error example: {example}" for example in h.error_examples)
        if h.other_cpu is not None and h.other_cpu > 0.25:
            shared.append(
                f"{s.label}: other processes used {h.other_cpu * 100:.0f}% CPU during the c=N run "
                "(machine shared): the HTTP numbers are pessimistic"
            )
    if not problems:
        compared = "over HTTP, in process and from Mastra" if mastra else "over HTTP and in process"
        totals = ", ".join(str(expected_total[s.key]) for s in SCENARIOS)
        problems.append(f"every scenario returns identical pages (ids; totals {totals}) {compared}; 0 errors")
    return problems + shared


# ---------------------------------------------------------------------------------------------- main
def server_settings(args: argparse.Namespace) -> dict[str, str]:
    settings = {"RECALLQL_LOG_LEVEL": args.server_log_level, "RECALLQL_AUTO_MIGRATE": "true"}
    if args.database_url:
        settings["RECALLQL_DATABASE_URL"] = args.database_url
    for item in args.server_env:
        key, sep, value = item.partition("=")
        if not sep or not key.startswith("RECALLQL_"):
            raise SystemExit(f"--server-env takes RECALLQL_NAME=VALUE, got {item!r}")
        settings[key] = value
    return settings


async def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    load_at_start = load_average()
    messages = build_messages(args.messages, args.seed)
    work_dir = Path(args.data_dir) if args.data_dir else Path(tempfile.mkdtemp(prefix="recallql-bench-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    data_dir = work_dir / "data"
    if args.database_url:
        database_url = args.database_url
    else:
        data_dir.mkdir(parents=True, exist_ok=True)
        db = data_dir / "recallql.db"
        if db.exists():
            raise SystemExit(f"{db} exists; use a fresh --data-dir")
        database_url = f"sqlite+aiosqlite:///{db.resolve()}"
    print(f"work folder {work_dir}; database {database_url}", flush=True)

    http: dict[str, HttpResult] = {}
    failed = False
    try:
        with running(recallql_server(data_dir, server_settings(args))) as server:
            limits = httpx.Limits(
                max_connections=args.concurrency, max_keepalive_connections=args.concurrency
            )
            async with httpx.AsyncClient(
                base_url=server.url,
                timeout=60,
                limits=limits,
                headers={"content-type": "application/json"},
            ) as client:
                print(f"server on {server.url}; loading {args.messages:,} messages ...", flush=True)
                load_seconds = await load_messages(client, messages, args.batch)
                print(f"  loaded in {load_seconds:.1f} s", flush=True)
                for s in SCENARIOS:
                    print(f"HTTP: {s.label} ...", flush=True)
                    http[s.key] = await measure_http(
                        client,
                        s,
                        warmup=args.warmup,
                        requests=args.requests,
                        concurrency=args.concurrency,
                        duration=args.duration,
                        max_seconds=args.max_seconds,
                        server=server,
                    )
                    h = http[s.key]
                    print(
                        f"  c=1 p50 {fmt(pct(h.c1_ms, 0.5))} ms p99 {fmt(pct(h.c1_ms, 0.99))} ms; "
                        f"c={args.concurrency} {h.rps:,.0f} req/s; errors {h.c1_errors}/{h.cn_errors}",
                        flush=True,
                    )

        print("in process: recall engine and GraphQL execution ...", flush=True)
        local = await measure_in_process(
            database_url,
            warmup=args.warmup,
            calls=args.calls,
            max_seconds=args.max_seconds,
            profile=args.profile,
        )

        mastra = None
        if not args.skip_mastra:
            print("Mastra in process ...", flush=True)
            node_modules = oracle_node_modules(args.oracle_node_modules)
            mastra = run_mastra(
                messages,
                work_dir,
                node_modules=node_modules,
                calls=args.calls,
                warmup=args.warmup,
                max_seconds=args.max_seconds,
                storage=args.mastra_storage,
            )

        notes = cross_check(messages, http, local, mastra)
        report = render(
            args, machine_info(database_url, mastra, load_at_start), http, local, mastra, load_seconds, notes
        )
        report += f"\nTotal run time {time.monotonic() - started:.0f} s.\n"
        print()
        print(report)
        if args.profile:
            for s in SCENARIOS:
                for name, text in local[s.key].get("profile", {}).items():
                    print(f"---- profile of {s.label}: {name} ----\n{text}")
        if not args.no_write:
            RESULTS_DIR.mkdir(parents=True, exist_ok=True)
            path = RESULTS_DIR / f"recall-{dt.date.today().isoformat()}.md"
            path.write_text(report)
            print(f"written to {path.relative_to(REPO)}")
        failed = any(h.c1_errors or h.cn_errors for h in http.values())
        if failed:
            log = data_dir / "server.log"
            tail = log.read_text(errors="replace").splitlines()[-40:] if log.exists() else []
            print(f"requests failed; the work folder {work_dir} is kept. Server log tail:")
            print("\n".join(tail))
        return 1 if failed else 0
    finally:
        if not args.keep and not args.data_dir and not failed:
            shutil.rmtree(work_dir, ignore_errors=True)


def main() -> None:
    global SCENARIOS  # --scenarios: the run covers the chosen subset, everywhere
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000, help="messages in the thread")
    parser.add_argument("--batch", type=int, default=500, help="messages per saveMessages call")
    parser.add_argument("--duration", type=float, default=10, help="seconds of the c=N run, per scenario")
    parser.add_argument("--requests", type=int, default=300, help="timed requests at c=1, per scenario")
    parser.add_argument("--calls", type=int, default=300, help="timed in-process calls, per scenario")
    parser.add_argument("--warmup", type=int, default=30, help="untimed calls before each measurement")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument(
        "--max-seconds", type=float, default=60, help="time bound of each c=1 / in-process loop"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--scenarios",
        default=",".join(s.key for s in SCENARIOS),
        help=f"comma-separated subset of {', '.join(s.key for s in SCENARIOS)}",
    )
    parser.add_argument("--database-url", help="SQLAlchemy async URL of an EMPTY database (default: SQLite)")
    parser.add_argument("--data-dir", help="work folder (default: a temp folder, removed afterwards)")
    parser.add_argument("--keep", action="store_true", help="keep the temp work folder")
    levels = ["debug", "info", "warning", "error"]
    parser.add_argument("--server-log-level", default="warning", choices=levels)
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="RECALLQL_NAME=VALUE",
        help="a server setting (repeatable), e.g. RECALLQL_COMPILED_READS=false",
    )
    parser.add_argument("--skip-mastra", action="store_true")
    parser.add_argument("--mastra-storage", default="file", choices=["file", "memory"])
    parser.add_argument("--oracle-node-modules", type=Path, help="folder whose node_modules/ has @mastra/*")
    parser.add_argument("--profile", action="store_true", help="pyinstrument the in-process calls")
    parser.add_argument("--no-write", action="store_true", help="do not write benchmarks/results/")
    args = parser.parse_args()
    chosen = [k.strip() for k in args.scenarios.split(",") if k.strip()]
    unknown = set(chosen) - {s.key for s in SCENARIOS}
    if unknown or not chosen:
        parser.error(f"unknown scenarios {sorted(unknown)}; choose from {[s.key for s in SCENARIOS]}")
    SCENARIOS = tuple(s for s in SCENARIOS if s.key in chosen)
    try:
        import uvloop  # the server's loop under uvicorn[standard]; cheaper for the client too
    except ImportError:
        sys.exit(asyncio.run(run(args)))
    sys.exit(uvloop.run(run(args)))


if __name__ == "__main__":
    main()
