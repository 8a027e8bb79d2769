"""Conformance harness: RecallQL's `recall` against the real Mastra oracle, case by case.

The pieces, in the order a run uses them (see /work/shared/conformance/README.md for the oracle side):

* `generate_dataset`: `gen_dataset.py --seed S` (deterministic) into a file;
* `EmbedServer`: the shared hash-64 embeddings server both sides call;
* `run_oracle`: `oracle.sh DATASET OUT` with `ORACLE_MODE=contract` (Mastra patched to the RecallQL contract);
* `server_env`: the RecallQL server settings a dataset asks for (memoryOptions);
* `load_dataset`: threads and messages through the GraphQL API only (createThread, saveMessages in order);
* `to_variables`: a query's Mastra-shaped `args` as variables of the single `RECALL` document;
* `run_queries`: every query, a few at a time, into the comparer's candidate format;
* `judge`: `compare.py`'s own `compare_case` (`--full`), plus semantic-pending bookkeeping and crash checks.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from gql import GraphQLRequest
from gql.transport.exceptions import TransportQueryError

from tests.support import SHARED, Api, embed_server_process

CONFORMANCE = SHARED / "conformance"
EMBED_MODEL = "hash-64"
# Errors RecallQL reports on purpose; anything else (INTERNAL_SERVER_ERROR: a masked crash) is a failure
# even when the oracle errors too, since "any error matches any error" would otherwise hide it.
EXPECTED_ERROR_CODES = frozenset({"BAD_USER_INPUT", "NOT_FOUND", "FORBIDDEN"})


# ------------------------------------------------------------------------------------------- oracle side
def case_dir(tmp_path_factory: Any, name: str) -> Path:
    """Where one seed's artifacts go: $RECALLQL_CONFORMANCE_OUT/<name>/ when that is set (kept), else a
    new folder under pytest's basetemp."""
    keep = os.environ.get("RECALLQL_CONFORMANCE_OUT")
    if not keep:
        return Path(tmp_path_factory.mktemp(name))
    folder = Path(keep) / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def generate_dataset(
    seed: int,
    path: Path,
    *,
    threads: int = 5,
    messages: int = 200,
    queries: int = 160,
    resources: int | None = None,
    mismatched_resource_rate: float | None = None,
) -> dict:
    """Runs the generator (deterministic for a seed) into `path` and returns the dataset. `resources`
    and `mismatched_resource_rate` (messages filed under another resource than their thread's) are
    the generator's own defaults unless given."""
    options = {
        "--seed": seed,
        "--threads": threads,
        "--messages": messages,
        "--queries": queries,
        "--resources": resources,
        "--mismatched-resource-rate": mismatched_resource_rate,
    }
    out = subprocess.run(
        [
            sys.executable,
            str(CONFORMANCE / "gen_dataset.py"),
            *(part for flag, value in options.items() if value is not None for part in (flag, str(value))),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    path.write_text(out.stdout)
    return json.loads(out.stdout)


@dataclass(frozen=True)
class EmbedServer:
    """`embed_server.py` (tests/support.py starts it on a free port)."""

    url: str


@contextlib.contextmanager
def embed_server() -> Iterator[EmbedServer]:
    with embed_server_process() as url:
        yield EmbedServer(url)


def run_oracle(dataset_path: Path, out_path: Path, embed_url: str, *, timeout: float = 900) -> dict:
    """The real Mastra recall over the dataset (contract mode). The first run installs the pinned npm
    packages into ~/.cache/recall-oracle, hence the generous timeout."""
    env = {**os.environ, "EMBED_URL": embed_url, "EMBED_MODEL": EMBED_MODEL, "ORACLE_MODE": "contract"}
    env.pop("ORACLE_SAVE_MODE", None)
    proc = subprocess.run(
        ["bash", str(CONFORMANCE / "oracle.sh"), str(dataset_path), str(out_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0 or not out_path.exists():
        raise RuntimeError(f"oracle.sh failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(out_path.read_text())


# ------------------------------------------------------------------------------------------- RecallQL side
def server_env(dataset: dict, database_url: str, embed_url: str) -> dict[str, str]:
    """RecallQL settings equal to the dataset's `new Memory({options})`."""
    options = dataset.get("memoryOptions") or {}
    last = options.get("lastMessages", 10)
    return {
        "RECALLQL_DATABASE_URL": database_url,
        "RECALLQL_LAST_MESSAGES": "false" if last is False else str(last),
        "RECALLQL_SEMANTIC_RECALL": json.dumps(options.get("semanticRecall", False)),
        "RECALLQL_EMBEDDINGS_URL": embed_url,
        "RECALLQL_EMBEDDINGS_MODEL": EMBED_MODEL,
        # Mastra's saveMessages awaits its vector upsert however long it takes; a loaded machine must
        # not let a save answer (and its queries run) before its vectors are written.
        "RECALLQL_VECTOR_SYNC_TIMEOUT": "300",
    }


# Working memory off for this call: a thread is stored as given, as the oracles' saveThreads (Mastra's
# store) stores it, whatever the server's defaults (on, metadata.workingMemory would be the resource's).
CREATE_THREAD = """
mutation CreateThread($input: CreateThreadInput!) {
  createThread(input: $input, memoryConfig: {workingMemory: {enabled: false}}) { id }
}
"""

SAVE_MESSAGES = """
mutation SaveMessages($messages: [MessageInput!]!) {
  saveMessages(messages: $messages) { acknowledged messages { id } }
}
"""

# One document for every case: each Mastra argument is a variable, and a variable left out of the
# request means the argument is omitted (GraphQL's CoerceArgumentValues), exactly like a missing key.
RECALL = """
query Recall(
  $threadId: ID!
  $resourceId: String
  $perPage: PerPage
  $page: Int
  $include: [IncludeInput!]
  $filter: RecallFilter
  $orderBy: MessageOrderBy
  $hideSignals: HideSignalsInput
  $includeSystemReminders: Boolean
  $threadConfig: MemoryConfigInput
  $vectorSearchString: String
  $includeTotal: Boolean
) {
  recall(
    threadId: $threadId
    resourceId: $resourceId
    perPage: $perPage
    page: $page
    include: $include
    filter: $filter
    orderBy: $orderBy
    hideSignals: $hideSignals
    includeSystemReminders: $includeSystemReminders
    threadConfig: $threadConfig
    vectorSearchString: $vectorSearchString
    includeTotal: $includeTotal
  ) {
    total
    page
    perPage
    hasMore
    messages { id role type createdAt threadId resourceId content { raw } }
  }
}
"""


MESSAGE_FIELDS = ("id", "threadId", "resourceId", "role", "type", "createdAt", "content")


async def load_dataset(api: Api, dataset: dict, *, batch: int = 100) -> None:
    """Threads, then every message in dataset order (insertion order breaks createdAt ties), through
    the GraphQL API only."""
    for t in dataset.get("threads") or []:
        thread: dict[str, Any] = {"id": t["id"], "resourceId": t["resourceId"]}
        for key in ("title", "metadata", "createdAt"):
            if key in t:
                thread[key] = t[key]
        await api.execute(CREATE_THREAD, input=thread)
    messages = dataset.get("messages") or []
    for start in range(0, len(messages), batch):
        chunk = []
        for m in messages[start : start + batch]:
            # As given; without a `type` the server stores its default, v2, as Mastra's storage does.
            chunk.append({k: m[k] for k in MESSAGE_FIELDS if k in m})
        saved = await api.execute(SAVE_MESSAGES, messages=chunk)
        # Answered as Mastra lists them: oldest first (ties in the order given), system rows set aside.
        listed = sorted(
            (m for m in chunk if m["role"] != "system"), key=lambda m: datetime.fromisoformat(m["createdAt"])
        )
        got, sent = [m["id"] for m in saved["saveMessages"]["messages"]], [m["id"] for m in listed]
        assert got == sent, f"saveMessages stored {got}, expected {sent}"


# ------------------------------------------------------------------------------------------- arguments
class Untranslatable(ValueError):
    """A Mastra argument the GraphQL schema has no place for (a harness gap, reported as such)."""


# The SignalType enum holds exactly the six stored strings. Any other string ("bogus", "REACTIVE",
# "signal", ...) is dropped from hideSignals.types: Mastra matches exact stored strings, and no message
# is ever classified as an unknown type, so such an entry never hides anything. Dropping it therefore
# preserves the semantics, including when every entry is dropped: Mastra's ["bogus"] hides nothing,
# exactly like {types: []}.
SIGNAL_TYPES = {
    "user": "USER",
    "state": "STATE",
    "reactive": "REACTIVE",
    "notification": "NOTIFICATION",
    "user-message": "USER_MESSAGE",
    "system-reminder": "SYSTEM_REMINDER",
}
ORDER_FIELDS = {"createdAt": "CREATED_AT"}
SCOPES = {"thread": "THREAD", "resource": "RESOURCE"}
_DIRECT = (
    "threadId",
    "resourceId",
    "perPage",
    "page",
    "includeSystemReminders",
    "vectorSearchString",
    "includeTotal",
)


def _enum(mapping: dict[str, str], value: Any) -> Any:
    # A value outside the mapping is passed as is: GraphQL rejects it, which counts as an error.
    return mapping.get(value, value) if isinstance(value, str) else value


def _oneof(value: Any, flag: str, options: Any) -> Any:
    """boolean | object unions as @oneOf inputs: {flag: b} or {options: {...}}."""
    if value is None or isinstance(value, bool):
        return None if value is None else {flag: value}
    return {"options": options(value)} if isinstance(value, dict) else value


def _include_item(item: Any) -> Any:
    if not isinstance(item, dict):
        return item
    return {k: item[k] for k in ("id", "threadId", "withPreviousMessages", "withNextMessages") if k in item}


def _filter(flt: Any) -> Any:
    if not isinstance(flt, dict):
        return flt
    out: dict[str, Any] = {}
    for key, value in flt.items():
        if key == "dateRange":
            out[key] = value
        elif key == "metadata":
            out[key] = value  # JSON scalar: as is (validated by the server)
        else:
            raise Untranslatable(f"filter.{key}")
    return out


def _order_by(order: Any) -> Any:
    if not isinstance(order, dict):
        return order
    out = {}
    if "field" in order:
        out["field"] = _enum(ORDER_FIELDS, order["field"])
    if "direction" in order:
        out["direction"] = order["direction"]
    return out


def _hide_signals(value: Any) -> Any:
    if value is None or isinstance(value, bool):
        return None if value is None else {"all": value}
    if isinstance(value, list):
        return {"types": [SIGNAL_TYPES[v] for v in value if isinstance(v, str) and v in SIGNAL_TYPES]}
    raise Untranslatable(f"hideSignals {value!r}")


def _message_range(value: Any) -> Any:
    if isinstance(value, dict):
        return {"window": {k: value[k] for k in ("before", "after") if k in value}}
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {"size": value}
    return value


def _semantic_options(sr: dict) -> dict:
    out: dict[str, Any] = {}
    for key, value in sr.items():
        if key in ("topK", "threshold"):
            out[key] = value
        elif key == "messageRange":
            out[key] = _message_range(value)
        elif key == "scope":
            out[key] = _enum(SCOPES, value)
        else:
            raise Untranslatable(f"threadConfig.semanticRecall.{key}")
    return out


def _working_memory(wm: Any) -> Any:
    if not isinstance(wm, dict):
        return wm
    out = dict(wm)
    if "scope" in out:
        out["scope"] = _enum(SCOPES, out["scope"])
    return out


def _thread_config(tc: Any) -> Any:
    if not isinstance(tc, dict):
        return tc
    out: dict[str, Any] = {}
    for key, value in tc.items():
        if key == "lastMessages":
            out[key] = value  # PerPage scalar: a number or false
        elif key == "semanticRecall":
            out[key] = _oneof(value, "enabled", _semantic_options)
        elif key == "generateTitle":
            out[key] = _oneof(value, "enabled", dict)
        elif key == "threads" and isinstance(value, dict) and set(value) <= {"generateTitle"}:
            out[key] = {k: _oneof(v, "enabled", dict) for k, v in value.items()}
        elif key == "workingMemory":
            out[key] = _working_memory(value)
        else:
            raise Untranslatable(f"threadConfig.{key}")
    return out


def to_variables(args: dict) -> dict[str, Any]:
    """Mastra `recall(args)` as variables of `RECALL`. Values GraphQL's types cannot hold (a page of 1.5)
    are passed as they are and come back as GraphQL errors, which count as errors."""
    variables: dict[str, Any] = {}
    for key, value in args.items():
        if key in _DIRECT:
            variables[key] = value  # perPage: the PerPage scalar takes a number or false as is
        elif key == "include":
            variables[key] = [_include_item(i) for i in value] if isinstance(value, list) else value
        elif key == "filter":
            variables[key] = _filter(value)
        elif key == "orderBy":
            variables[key] = _order_by(value)
        elif key == "hideSignals":
            variables[key] = _hide_signals(value)
        elif key == "threadConfig":
            variables[key] = _thread_config(value)
        else:
            raise Untranslatable(key)
    return variables


# ------------------------------------------------------------------------------------------- running
def candidate_message(m: dict) -> dict:
    """A returned Message in the oracle's JSON shape (type left out when v2)."""
    out = {
        "id": m["id"],
        "content": m["content"]["raw"],
        "role": m["role"],
        "createdAt": m["createdAt"],
        "threadId": m["threadId"],
        "resourceId": m["resourceId"],
    }
    if m.get("type") not in (None, "v2"):
        out["type"] = m["type"]
    return out


async def run_query(session: Any, query: dict) -> dict:
    """One case through a connected gql session (`async with Api(url).client as session`)."""
    name = query["name"]
    try:
        variables = to_variables(query.get("args") or {})
    except Untranslatable as exc:
        return {
            "name": name,
            "ok": False,
            "error": f"harness: cannot express {exc} in GraphQL",
            "code": "UNTRANSLATABLE",
        }
    try:
        data = await session.execute(GraphQLRequest(RECALL, variable_values=variables or None))
    except TransportQueryError as exc:
        return failed(name, exc)
    r = data["recall"]
    messages = [candidate_message(m) for m in r["messages"]]
    return {
        "name": name,
        "ok": True,
        "ids": [m["id"] for m in messages],
        "total": r["total"],
        "page": r["page"],
        "perPage": r["perPage"],
        "hasMore": r["hasMore"],
        "messages": messages,
    }


def failed(name: str, exc: TransportQueryError) -> dict:
    """A case's GraphQL error in the comparer's candidate format: its first error's text and code."""
    first = (exc.errors or [{"message": str(exc)}])[0]
    return {
        "name": name,
        "ok": False,
        "error": first.get("message", str(first)),
        "code": (first.get("extensions") or {}).get("code"),
    }


async def run_each(
    base_url: str,
    queries: list[dict],
    run: Callable[[Any, dict], Awaitable[dict]],
    *,
    concurrency: int,
) -> list[dict]:
    """`run(session, query)` for every query, `concurrency` at a time (one kept-alive client per
    worker), results in dataset order."""
    results: list[dict | None] = [None] * len(queries)
    pending = iter(enumerate(queries))

    async def worker() -> None:
        async with Api(base_url).client as session:
            for i, q in pending:
                results[i] = await run(session, q)

    await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
    return [r for r in results if r is not None]


def run_listing_oracle(
    script: Path,
    dataset_path: Path,
    queries: list[dict],
    out_path: Path,
    packages: Path,
    mode: str,
    *extra: Path,
) -> dict:
    """One of the listing oracles beside this file (`node SCRIPT DATASET QUERIES OUT [EXTRA...]`) with the
    recall oracle's packages; its results."""
    queries_path = out_path.with_suffix(".queries.json")
    queries_path.write_text(json.dumps(queries, indent=1) + "\n")
    proc = subprocess.run(
        ["node", str(script), *(str(p) for p in (dataset_path, queries_path, out_path, *extra))],
        env={**os.environ, "RECALL_ORACLE_NODE_MODULES": str(packages), "ORACLE_MODE": mode},
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0 or not out_path.exists():
        raise RuntimeError(f"{script.name} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    result: dict = json.loads(out_path.read_text())
    return result


def assert_agree(
    workdir: Path,
    engine: str,
    results: list[dict],
    problems: list[str],
    cases: int,
    *,
    seed: int | None = None,
) -> None:
    """Keeps the candidate's answers beside the oracle's (candidate-<engine>.json in `workdir`) and fails
    with the first of `problems` (a compare_* function's), if any."""
    out = workdir / f"candidate-{engine}.json"
    out.write_text(json.dumps({"results": results}, indent=1, ensure_ascii=False) + "\n")
    label = engine if seed is None else f"seed {seed} / {engine}"
    assert not problems, (
        f"{label}: {len(problems)} of {cases} case(s) differ:\n"
        + "\n".join(p[:700] for p in problems[:30])
        + f"\n(oracle: {workdir / 'oracle.json'}, candidate: {out})"
    )


def page_result(name: str, page: dict, rows: str) -> dict:
    """A listing page as the candidate's result: its `rows` (a list of {id}) as ids, and its counts."""
    return {
        "name": name,
        "ok": True,
        "ids": [row["id"] for row in page[rows]],
        **{key: page[key] for key in ("total", "page", "perPage", "hasMore")},
    }


PageCheck = Callable[[str, dict, dict], list[str] | None]


def error_problems(
    prefix: str, o: dict, c: dict, codes: frozenset[str] = EXPECTED_ERROR_CODES
) -> list[str] | None:
    """Where either run of a case failed, its problems (none: both failed alike); None when both
    answered. A candidate's error must carry one of `codes` and, where the oracle errs too, its text."""
    if not c["ok"]:
        if c.get("code") not in codes:
            return [f"{prefix}: candidate crashed ({c.get('code')}): {c['error']}"]
        if o["ok"]:
            return [f"{prefix}: candidate error {c['error']!r}, oracle answered"]
        if o["error"] != c["error"]:
            return [f"{prefix}: error text: oracle {o['error']!r}, candidate {c['error']!r}"]
        return []
    if not o["ok"]:
        return [f"{prefix}: oracle error {o['error']!r}, candidate answered"]
    return None


def compare_cases(
    queries: list[dict],
    oracle: list[dict],
    candidate: list[dict],
    check: Callable[[str, dict, dict], list[str]],
    codes: frozenset[str] = EXPECTED_ERROR_CODES,
) -> list[str]:
    """Every disagreement between two runs of the same cases ({name, ok, ...} or {name, ok: false,
    error}), one line each (empty: they agree): errors as error_problems judges them, and
    `check(prefix, oracle, candidate)`'s problems for a pair both answered."""
    problems: list[str] = []
    by_name = {q["name"]: q for q in queries}
    assert [r["name"] for r in oracle] == [r["name"] for r in candidate] == list(by_name)
    for o, c in zip(oracle, candidate, strict=True):
        prefix = f"{o['name']} {json.dumps(by_name[o['name']]['args'], ensure_ascii=False)}"
        failure = error_problems(prefix, o, c, codes)
        problems.extend(check(prefix, o, c) if failure is None else failure)
    return problems


def compare_pages(
    queries: list[dict], oracle: list[dict], candidate: list[dict], check: PageCheck | None = None
) -> list[str]:
    """compare_cases for listing cases ({name, ok, ids, total, page, perPage, hasMore}).
    `check(prefix, oracle, candidate)`, for a pair both answered: None to compare ids in order, total,
    page, perPage and hasMore; a list (maybe empty) of the pair's problems instead."""

    def pages(prefix: str, o: dict, c: dict) -> list[str]:
        if check is not None and (special := check(prefix, o, c)) is not None:
            return special
        problems = []
        if o["ids"] != c["ids"]:
            at = next((i for i, (a, b) in enumerate(zip(o["ids"], c["ids"], strict=False)) if a != b), None)
            at = min(len(o["ids"]), len(c["ids"])) if at is None else at
            problems.append(
                f"{prefix}: ids ({len(o['ids'])} against {len(c['ids'])}) differ from position {at}: "
                f"only the oracle's {sorted(set(o['ids']) - set(c['ids']))}, only the candidate's "
                f"{sorted(set(c['ids']) - set(o['ids']))}, oracle from there {o['ids'][at : at + 4]}, "
                f"candidate {c['ids'][at : at + 4]}"
            )
        for key in ("total", "page", "perPage", "hasMore"):
            if o[key] != c[key]:
                problems.append(f"{prefix}: {key}: oracle {o[key]!r}, candidate {c[key]!r}")
        return problems

    return compare_cases(queries, oracle, candidate, pages)


async def run_queries(base_url: str, queries: list[dict], *, concurrency: int = 6) -> list[dict]:
    """Every recall case, `concurrency` at a time, results in dataset order."""
    return await run_each(base_url, queries, run_query, concurrency=concurrency)


# ------------------------------------------------------------------------------------------- verdict
def _truthy(value: Any) -> bool:
    """JavaScript truthiness ({} and [] are truthy)."""
    return value not in (None, False, 0, "")


def merged_semantic_recall(dataset: dict, args: dict) -> Any:
    """semanticRecall after deepMerge(memoryOptions, threadConfig)."""
    base = (dataset.get("memoryOptions") or {}).get("semanticRecall", False)
    tc = args.get("threadConfig")
    if not isinstance(tc, dict) or "semanticRecall" not in tc:
        return base
    override = tc["semanticRecall"]
    if isinstance(override, dict) and isinstance(base, dict):
        return {**base, **override}
    return override


def is_semantic_case(dataset: dict, args: dict) -> bool:
    """The merged config turns semantic recall on and a vectorSearchString is given."""
    vss = args.get("vectorSearchString")
    return _truthy(merged_semantic_recall(dataset, args)) and isinstance(vss, str) and vss != ""


@cache
def compare_module() -> ModuleType:
    """The shared comparer (`compare.py`), imported from its path so its rules are used as they are."""
    spec = importlib.util.spec_from_file_location("recall_conformance_compare", CONFORMANCE / "compare.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Verdict:
    label: str
    passed: list[str] = field(default_factory=list)
    failed: list[tuple[str, list[str]]] = field(default_factory=list)
    ambiguous: list[tuple[str, list[str]]] = field(default_factory=list)
    pending: list[tuple[str, list[str]]] = field(default_factory=list)  # semantic, excluded
    missing: list[str] = field(default_factory=list)
    untypable: list[str] = field(default_factory=list)  # see answers_what_graphql_cannot_type

    @property
    def ok(self) -> bool:
        return not self.failed and not self.missing

    def summary(self) -> str:
        pending_failing = sum(1 for _, p in self.pending if p)
        return (
            f"{self.label}: PASS {len(self.passed)}, FAIL {len(self.failed)}, "
            f"AMBIGUOUS {len(self.ambiguous)}, MISSING {len(self.missing)}, "
            f"semantic PENDING (excluded) {len(self.pending)} ({pending_failing} of them differ)"
            + (f", UNTYPABLE {len(self.untypable)}" if self.untypable else "")
        )

    def report(self, queries: dict[str, dict] | None = None, *, limit: int = 60) -> str:
        lines = [self.summary()]
        for name, probs in self.failed[:limit]:
            lines.append(f"FAIL      {name}")
            if queries and name in queries:
                lines.append(f"          args: {json.dumps(queries[name].get('args'), sort_keys=True)}")
            lines.extend(f"          {p[:1500]}" for p in probs)
        if len(self.failed) > limit:
            lines.append(f"... and {len(self.failed) - limit} more FAILs")
        lines.extend(f"MISSING   {name}" for name in self.missing)
        lines.extend(f"AMBIGUOUS {name}: {'; '.join(p)[:300]}" for name, p in self.ambiguous)
        return "\n".join(lines)


# Where Mastra's text says nothing useful, RecallQL says what is wrong. Only these pairs may differ.
CLEARER_ERRORS = {
    # LibSQLVector rejects topK 0 with MastraError MASTRA_VECTOR_LIBSQL_QUERY_INVALID_TOP_K, "Unknown error".
    "Unknown error": "semanticRecall.topK must be a positive integer.",
}


def same_error(oracle_error: object, candidate_error: object) -> bool:
    return oracle_error == candidate_error or CLEARER_ERRORS.get(str(oracle_error)) == candidate_error


def is_type_error(result: dict) -> bool:
    """GraphQL rejected a variable before recall ran (a page of 1.5 is no Int): its own wording."""
    return result.get("code") == "BAD_USER_INPUT" and str(result.get("error", "")).startswith("Variable '$")


def answers_what_graphql_cannot_type(oracle_result: dict, candidate_result: dict) -> bool:
    """Mastra answered with a page GraphQL's types cannot hold, and GraphQL rejected that variable.
    With lastMessages false, no perPage and no vector search, recall returns the empty result before
    any other check (the contract), page validation included, and echoes the page: a page of 1.5 comes
    back as `"page": 1.5`, which RecallResult.page (Int) cannot carry. The contract's GraphQL shape
    rejects every invalid value with a clear message, so the variable is refused before recall runs."""
    page = oracle_result.get("page")
    return (
        bool(oracle_result.get("ok"))
        and isinstance(page, float)
        and not page.is_integer()
        and is_type_error(candidate_result)
        and str(candidate_result.get("error")).startswith("Variable '$page'")
    )


def judge(
    oracle: dict,
    candidate: dict,
    dataset: dict,
    *,
    semantic_pending: bool,
    error_text: bool = True,
    label: str = "",
) -> Verdict:
    """compare.py's per-case rules with --full (outcome, ids in order, total/page/perPage/hasMore
    type-exact, each message's JSON), plus:
    * `error_text`: when both sides fail, the contract's exact error text (recall-contract.md: "the exact
      error texts"), except where GraphQL's own type check rejected a variable first (`is_type_error`);
    * an unexpected candidate error code (a masked crash, an argument the harness cannot express)
      always fails, even against an oracle error;
    * semantic cases (`is_semantic_case`) are compared but set aside while `semantic_pending`;
    * an answer whose page GraphQL's types cannot hold is set aside as UNTYPABLE, when GraphQL
      rejected that variable (`answers_what_graphql_cannot_type`)."""
    cmp = compare_module()
    options = argparse.Namespace(full=True, relax_ties=False, error_text=False, verbose=False)
    by_name = {r.get("name"): r for r in candidate.get("results", [])}
    args_of = {q["name"]: q.get("args") or {} for q in dataset.get("queries") or []}
    verdict = Verdict(label)
    for o in oracle.get("results", []):
        name = o.get("name")
        c = by_name.get(name)
        if c is None:
            verdict.missing.append(name)
            continue
        problems = list(cmp.compare_case(o, c, options))
        if (
            error_text
            and not o.get("ok")
            and not c.get("ok")
            and not same_error(o.get("error"), c.get("error"))
            and not is_type_error(c)
        ):
            problems.append(f"error text: oracle {o.get('error')!r}, candidate {c.get('error')!r}")
        if not c.get("ok") and c.get("code") not in EXPECTED_ERROR_CODES:
            problems.append(
                f"candidate error with code {c.get('code')!r}: {c.get('error')!r} "
                f"(oracle: {'ok' if o.get('ok') else repr(o.get('error'))})"
            )
        if answers_what_graphql_cannot_type(o, c):
            verdict.untypable.append(name)
        elif semantic_pending and is_semantic_case(dataset, args_of.get(name, {})):
            verdict.pending.append((name, problems))
        elif not problems:
            verdict.passed.append(name)
        elif any(v.get("tieAtCutoff") for v in o.get("vector") or []):
            verdict.ambiguous.append((name, problems))
        else:
            verdict.failed.append((name, problems))
    return verdict
