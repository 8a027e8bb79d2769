"""The threads listing against the real Mastra's listThreads, case by case.

`threads_oracle.mjs` beside this file saves a dataset of threads with Mastra's LibSQL storage into a
file and runs `listThreads` over it; RecallQL imports that very file (`recallql import mastra`) and
answers the same cases over HTTP. The pieces:

* `thread_dataset`: seeded threads over a few resources, with createdAt and updatedAt ties, ids whose
  order by code point differs from a collation's (capitals, digits, punctuation, accents, an emoji) and
  metadata of every type, some keys missing, some null, some metadata absent;
* `thread_queries`: seeded listing cases, one resource's or all threads (pages, sizes, `false`, both
  fields, both directions, metadata filters), and bad input; a metadata filter is kept only where
  Mastra's semantics and RecallQL's documented exact-type ones select the same threads (see
  `mastra_matches`), the one deliberate difference;
* `run_threads_oracle`, `run_thread_queries`, `compare_thread_results`.
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Any

from gql import GraphQLRequest
from gql.transport.exceptions import TransportQueryError

from tests.conformance.harness import compare_pages, failed, page_result, run_each, run_listing_oracle

HERE = Path(__file__).resolve().parent

THREADS = """
query Threads(
  $resourceId: String, $page: Int! = 0, $perPage: PerPage! = 100, $orderBy: ThreadOrderBy, $metadata: JSON
) {
  threads(resourceId: $resourceId, page: $page, perPage: $perPage, orderBy: $orderBy, metadata: $metadata) {
    total page perPage hasMore threads { id }
  }
}
"""
ORDER_FIELDS = {"createdAt": "CREATED_AT", "updatedAt": "UPDATED_AT"}
BASE = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
# Characters whose code point order is not a collation's ("B" before "a", "_" between them, "é" after
# "z", an emoji after everything).
ID_CHARACTERS = ["a", "B", "b", "Z", "z", "0", "9", "_", "-", "é", "É", "\N{GRINNING FACE}"]
MISSING = object()


def _iso(seconds: float) -> str:
    return (BASE + dt.timedelta(seconds=seconds)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def thread_dataset(seed: int, *, threads: int, resources: int) -> dict:
    rng = random.Random(seed)
    ids: set[str] = set()
    while len(ids) < threads:
        ids.add("t-" + "".join(rng.choice(ID_CHARACTERS) for _ in range(rng.randint(1, 3))))
    out = []
    for thread_id in sorted(ids, key=lambda _: rng.random()):
        created = rng.randrange(0, threads // 3 + 2)  # several threads per instant
        updated = created + rng.choice([0, 0, 0, 1, 2, 7, 30, 30.5])
        metadata: dict[str, Any] = {}
        if rng.random() < 0.8:
            metadata["topic"] = rng.choice(["a", "b", "c", "1"])
        if rng.random() < 0.7:
            metadata["n"] = rng.choice([0, 1, 2, 3, -1, 2.5])
        if rng.random() < 0.6:
            metadata["flag"] = rng.choice([True, False])
        metadata["maybe"] = rng.choice([None, "x", "y"])  # on every thread: null is an explicit null
        if rng.random() < 0.3:
            metadata["sparse"] = rng.choice([None, "y"])
        if rng.random() < 0.2:
            metadata["obj"] = {"k": 1}
        out.append(
            {
                "id": thread_id,
                "resourceId": f"res-{rng.randint(1, resources)}",
                "title": rng.choice(["", "Trip", "Notes"]),
                "metadata": None if rng.random() < 0.08 else metadata,
                "createdAt": _iso(created),
                "updatedAt": _iso(updated),
            }
        )
    return {"threads": out}


def _number(v: Any) -> float | None:
    """The number SQLite's json_extract gives a stored JSON value (booleans are 1 and 0), else None."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, int | float):
        return float(v)
    return None


def mastra_matches(stored: Any, wanted: Any) -> bool:
    """listThreads' `json_extract(metadata, '$.k') = ?` (`IS NULL` for null); MISSING: no such key."""
    if wanted is None:
        return stored is MISSING or stored is None
    if isinstance(wanted, str):
        return isinstance(stored, str) and stored == wanted
    number = _number(stored) if stored is not MISSING else None
    return number is not None and number == float(wanted)


def exact_matches(stored: Any, wanted: Any) -> bool:
    """RecallQL's documented equality: the same JSON type and value; null matches an explicit null."""
    if stored is MISSING:
        return False
    if wanted is None or stored is None:
        return wanted is None and stored is None
    if isinstance(wanted, bool) or isinstance(stored, bool):
        return isinstance(wanted, bool) and isinstance(stored, bool) and wanted == stored
    if isinstance(wanted, str) or isinstance(stored, str):
        return isinstance(wanted, str) and isinstance(stored, str) and wanted == stored
    return isinstance(stored, int | float) and float(stored) == float(wanted)


def _selects(threads: list[dict], metadata: dict[str, Any], matches: Any) -> set[str]:
    return {
        t["id"]
        for t in threads
        if all(matches((t["metadata"] or {}).get(k, MISSING), v) for k, v in metadata.items())
    }


WANTED = [None, True, False, 0, 1, 2, 2.5, -1, "a", "b", "1", "x", "y", "none"]
FILTER_KEYS = ["topic", "n", "flag", "maybe", "sparse"]


def _metadata_filter(rng: random.Random, threads: list[dict]) -> dict[str, Any] | None:
    """A filter of 1 or 2 keys, mostly on values stored there, on which Mastra's semantics and RecallQL's
    select the same threads (None: none found in a few tries). Where they differ, the difference is
    the deliberate one, not a question for this oracle."""
    for _ in range(8):
        metadata = {}
        for key in rng.sample(FILTER_KEYS, rng.choice([1, 1, 2])):
            stored = [(t["metadata"] or {})[key] for t in threads if key in (t["metadata"] or {})]
            metadata[key] = rng.choice(stored) if stored and rng.random() < 0.7 else rng.choice(WANTED)
        if _selects(threads, metadata, mastra_matches) == _selects(threads, metadata, exact_matches):
            return metadata
    return None


def thread_queries(dataset: dict, seed: int, *, per_scope: int = 40) -> list[dict]:
    """Listing cases for every resource and for all threads, then bad input."""
    rng = random.Random(seed)
    threads = dataset["threads"]
    scopes: list[str | None] = [*sorted({t["resourceId"] for t in threads}), None]
    queries: list[dict] = []
    for scope in scopes:
        in_scope = [t for t in threads if scope is None or t["resourceId"] == scope]
        for n in range(per_scope):
            args: dict[str, Any] = {}
            if scope is not None:
                args["filter"] = {"resourceId": scope}
            if rng.random() < 0.85:
                args["perPage"] = rng.choice([0, 1, 2, 3, 5, 7, 10, 25, 100, False, False])
            if rng.random() < 0.8 and args.get("perPage") is not False:
                args["page"] = rng.choice([0, 0, 1, 1, 2, 3, 5, 10])
            if rng.random() < 0.7:
                order: dict[str, Any] = {"field": rng.choice(["createdAt", "updatedAt"])}
                if rng.random() < 0.85:
                    order["direction"] = rng.choice(["ASC", "DESC"])
                args["orderBy"] = order
            if rng.random() < 0.5 and (metadata := _metadata_filter(rng, in_scope)) is not None:
                args.setdefault("filter", {})["metadata"] = metadata
            queries.append({"name": f"{scope or 'all'}-{n:03d}", "args": args})
    first = scopes[0] or "res-1"
    queries += [
        {"name": "unknown-resource", "args": {"filter": {"resourceId": "res-nobody"}}},
        {"name": "unknown-resource-all", "args": {"filter": {"resourceId": "res-nobody"}, "perPage": False}},
        {"name": "bad-page", "args": {"filter": {"resourceId": first}, "page": -1}},
        {"name": "bad-per-page", "args": {"filter": {"resourceId": first}, "perPage": -3}},
        {"name": "fractional-per-page", "args": {"filter": {"resourceId": first}, "perPage": 2.5}},
        {"name": "all-past-page-0", "args": {"filter": {"resourceId": first}, "perPage": False, "page": 1}},
        {"name": "bad-metadata-key", "args": {"filter": {"resourceId": first, "metadata": {"a-b": 1}}}},
        {"name": "object-metadata-value", "args": {"filter": {"metadata": {"obj": {"k": 1}}}}},
        {"name": "list-metadata-value", "args": {"filter": {"metadata": {"n": [1]}}}},
        # Mastra's order of checks: perPage, then page; every key, then every value.
        {"name": "bad-page-and-per-page", "args": {"page": -1, "perPage": -3}},
        {"name": "all-and-bad-page", "args": {"page": -1, "perPage": False}},
        {"name": "fractional-negative-per-page", "args": {"perPage": -2.5}},
        {"name": "unsafe-per-page", "args": {"perPage": 2**53}},
        {"name": "largest-safe-per-page", "args": {"perPage": 2**53 - 1}},
        {"name": "page-too-large", "args": {"page": 2**31 - 1, "perPage": 2**23}},
        {"name": "page-just-small-enough", "args": {"page": 2**31 - 1, "perPage": 2**21}},
        {"name": "whole-float-per-page", "args": {"filter": {"resourceId": first}, "perPage": 2.0}},
        {"name": "value-then-key", "args": {"filter": {"metadata": {"n": [1], "a-b": 1}}}},
        {"name": "disallowed-key", "args": {"filter": {"metadata": {"constructor": 1}}}},
        {"name": "long-key", "args": {"filter": {"metadata": {"k" * 129: 1}}}},
        {"name": "longest-key", "args": {"filter": {"metadata": {"k" * 128: 1}}}},
    ]
    return queries


def run_threads_oracle(
    dataset_path: Path,
    queries: list[dict],
    out_path: Path,
    db_path: Path,
    packages: Path,
    *,
    mode: str = "contract",
) -> dict:
    oracle = HERE / "threads_oracle.mjs"
    return run_listing_oracle(oracle, dataset_path, queries, out_path, packages, mode, db_path)


def to_variables(args: dict) -> dict[str, Any]:
    """Mastra's args as the document's variables (absent keys left out: the schema's defaults are
    Mastra's)."""
    variables: dict[str, Any] = {k: args[k] for k in ("page", "perPage") if k in args}
    filters = args.get("filter") or {}
    if "resourceId" in filters:
        variables["resourceId"] = filters["resourceId"]
    if "metadata" in filters:
        variables["metadata"] = filters["metadata"]
    if "orderBy" in args:
        order = args["orderBy"]
        variables["orderBy"] = {
            "field": ORDER_FIELDS[order["field"]],
            **({"direction": order["direction"]} if "direction" in order else {}),
        }
    return variables


async def run_thread_query(session: Any, query: dict) -> dict:
    """One case through a connected gql session, in the oracle's format."""
    name = query["name"]
    try:
        data = await session.execute(GraphQLRequest(THREADS, variable_values=to_variables(query["args"])))
    except TransportQueryError as exc:
        return failed(name, exc)
    return page_result(name, data["threads"], "threads")


async def run_thread_queries(base_url: str, queries: list[dict], *, concurrency: int = 4) -> list[dict]:
    return await run_each(base_url, queries, run_thread_query, concurrency=concurrency)


def compare_thread_results(queries: list[dict], oracle: list[dict], candidate: list[dict]) -> list[str]:
    """Every disagreement, one line each (empty: they agree; see harness.compare_pages)."""
    return compare_pages(queries, oracle, candidate)
