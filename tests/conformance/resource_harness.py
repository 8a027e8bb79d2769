"""Resource.messages against the real Mastra's listMessagesByResourceId, case by case.

The recall oracle (../shared/conformance/oracle.mjs) runs `recall` only; `resource_oracle.mjs` beside this
file runs Mastra's LibSQL `listMessagesByResourceId` with the same pinned packages over the same
generated dataset. The pieces:

* `resource_queries`: seeded listing cases per resource (pages, sizes, `false`, direction, date ranges
  with exclusive ends, metadata filters, include windows, bad input), as Mastra-shaped `args`;
* `run_resource_oracle`: the oracle (contract mode: the recall contract's total order for ties);
* `run_resource_queries`: the same cases through `resource(id) { messages(...) }` over HTTP;
* `compare_resource_results`: ids in order, total, page, perPage, hasMore, error texts.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

from gql import GraphQLRequest
from gql.transport.exceptions import TransportQueryError

from tests.conformance.harness import compare_pages, failed, page_result, run_each, run_listing_oracle

HERE = Path(__file__).resolve().parent

RESOURCE_MESSAGES = """
query ResourceMessages(
  $id: String!, $page: Int! = 0, $perPage: PerPage! = 40, $filter: RecallFilter, $orderBy: MessageOrderBy,
  $include: [IncludeInput!]
) {
  resource(id: $id) {
    messages(page: $page, perPage: $perPage, filter: $filter, orderBy: $orderBy, include: $include) {
      total page perPage hasMore messages { id }
    }
  }
}
"""


def _scalar_metadata(message: dict) -> dict[str, Any]:
    """A message's metadata values a filter can name (string, finite number, boolean, null)."""
    metadata = (message.get("content") or {}).get("metadata") or {}
    return {
        k: v
        for k, v in metadata.items()
        if v is None or isinstance(v, str | bool | int) or (isinstance(v, float) and math.isfinite(v))
    }


def resource_queries(dataset: dict, seed: int, *, per_resource: int = 40) -> list[dict]:
    """Listing cases: for every resource messages are filed under, `per_resource` random ones (sizes,
    pages, direction, date ranges cut at stored createdAt values, metadata filters on stored values);
    then a few for a resource that has none, and bad input."""
    rng = random.Random(seed)
    by_resource: dict[str, list[dict]] = {}
    for m in dataset.get("messages") or []:
        by_resource.setdefault(m["resourceId"], []).append(m)
    queries: list[dict] = []
    for resource_id, messages in sorted(by_resource.items()):
        others = [m for r, ms in by_resource.items() if r != resource_id for m in ms]
        times = sorted({m["createdAt"] for m in messages})
        values = [(k, v) for m in messages for k, v in _scalar_metadata(m).items()]
        for n in range(per_resource):
            args: dict[str, Any] = {"resourceId": resource_id}
            if rng.random() < 0.85:
                args["perPage"] = rng.choice([0, 1, 2, 3, 5, 7, 10, 25, 40, 100, False, False])
            if rng.random() < 0.8:
                args["page"] = rng.choice([0, 0, 1, 1, 2, 3, 5, 10, 40])
            if rng.random() < 0.6:
                order: dict[str, Any] = {"field": "createdAt"}
                if rng.random() < 0.9:
                    order["direction"] = rng.choice(["ASC", "DESC"])
                args["orderBy"] = order
            filters: dict[str, Any] = {}
            if rng.random() < 0.35 and times:
                low, high = sorted(rng.sample(times, 2) if len(times) > 1 else [times[0], times[0]])
                date_range: dict[str, Any] = {}
                if rng.random() < 0.8:
                    date_range["start"] = low
                    if rng.random() < 0.5:
                        date_range["startExclusive"] = rng.random() < 0.7
                if rng.random() < 0.8:
                    date_range["end"] = high
                    if rng.random() < 0.5:
                        date_range["endExclusive"] = rng.random() < 0.7
                filters["dateRange"] = date_range
            if rng.random() < 0.3 and values:
                picked = dict(rng.sample(values, min(len(values), rng.choice([1, 1, 2]))))
                if rng.random() < 0.15:
                    picked[rng.choice(list(picked))] = "no such value"
                filters["metadata"] = picked
            if filters:
                args["filter"] = filters
            if rng.random() < 0.3:
                items = rng.choice([1, 1, 2, 3])
                args["include"] = [_include_item(rng, messages, others) for _ in range(items)]
            queries.append({"name": f"{resource_id}-{n:03d}", "args": args})
    first = min(by_resource) if by_resource else "res-1"
    queries += [
        {"name": "unknown-resource", "args": {"resourceId": "res-nobody"}},
        {
            "name": "includes-alone",
            "args": {
                "resourceId": first,
                "perPage": 0,
                "include": [{"id": by_resource[first][0]["id"], "withNextMessages": 3}],
            },
        },
        {"name": "unknown-resource-all", "args": {"resourceId": "res-nobody", "perPage": False}},
        {"name": "bad-page", "args": {"resourceId": first, "page": -1}},
        {"name": "bad-per-page", "args": {"resourceId": first, "perPage": -3}},
        {"name": "fractional-per-page", "args": {"resourceId": first, "perPage": 2.5}},
        {"name": "bad-metadata-key", "args": {"resourceId": first, "filter": {"metadata": {"a-b": 1}}}},
        {"name": "bad-metadata-value", "args": {"resourceId": first, "filter": {"metadata": {"a": [1]}}}},
        {"name": "blank-resource", "args": {"resourceId": "   "}},
    ]
    return queries


def _include_item(rng: random.Random, messages: list[dict], others: list[dict]) -> dict[str, Any]:
    """An include item: mostly a message of the resource, sometimes another resource's (which the
    listing must not reach) or no message at all; neighbours absent (0) or 0 to 5 a side."""
    pick = rng.random()
    if pick < 0.8 or not others:
        target = rng.choice(messages)["id"]
    elif pick < 0.9:
        target = rng.choice(others)["id"]
    else:
        target = "msg-nowhere"
    item: dict[str, Any] = {"id": target}
    for side in ("withPreviousMessages", "withNextMessages"):
        if rng.random() < 0.75:
            item[side] = rng.choice([0, 1, 2, 5])
    return item


def run_resource_oracle(
    dataset_path: Path, queries: list[dict], out_path: Path, packages: Path, *, mode: str = "contract"
) -> dict:
    return run_listing_oracle(HERE / "resource_oracle.mjs", dataset_path, queries, out_path, packages, mode)


def to_variables(args: dict) -> dict[str, Any]:
    """Mastra's args as the document's variables (absent keys left out: the schema's defaults are
    Mastra's)."""
    variables: dict[str, Any] = {"id": args["resourceId"]}
    for key in ("page", "perPage", "filter", "include"):
        if key in args:
            variables[key] = args[key]
    if "orderBy" in args:
        order = args["orderBy"]
        variables["orderBy"] = {
            **({"field": "CREATED_AT"} if order.get("field") == "createdAt" else {}),
            **({"direction": order["direction"]} if "direction" in order else {}),
        }
    return variables


async def run_resource_query(session: Any, query: dict) -> dict:
    """One case through a connected gql session, in the resource oracle's format."""
    name = query["name"]
    try:
        data = await session.execute(
            GraphQLRequest(RESOURCE_MESSAGES, variable_values=to_variables(query["args"]))
        )
    except TransportQueryError as exc:
        return failed(name, exc)
    resource = data["resource"]
    if resource is None:  # RecallQL knows no such resource: nothing is filed under it
        return {"name": name, "ok": True, "resource": None}
    return page_result(name, resource["messages"], "messages")


async def run_resource_queries(base_url: str, queries: list[dict], *, concurrency: int = 4) -> list[dict]:
    return await run_each(base_url, queries, run_resource_query, concurrency=concurrency)


def compare_resource_results(queries: list[dict], oracle: list[dict], candidate: list[dict]) -> list[str]:
    """Every disagreement, one line each (empty: they agree; see harness.compare_pages). A resource
    RecallQL does not know answers null; Mastra answers an empty page for it, so null matches exactly
    that (an empty first page with a total of 0)."""

    def unknown_resource(prefix: str, o: dict, c: dict) -> list[str] | None:
        if c.get("resource", True) is not None:
            return None
        return (
            [f"{prefix}: resource null, oracle listed {o['total']} message(s)"]
            if o["ids"] or o["total"]
            else []
        )

    return compare_pages(queries, oracle, candidate, unknown_resource)


def file_some_under_a_new_resource(dataset: dict, resource_id: str, *, every: int = 11) -> dict:
    """The dataset with every `every`-th message filed under `resource_id`, which owns no thread (the
    generator files messages under other resources' threads, but only under resources that own one)."""
    messages = [
        {**m, "resourceId": resource_id} if n % every == every - 1 else m
        for n, m in enumerate(dataset.get("messages") or [])
    ]
    return {**dataset, "messages": messages}
