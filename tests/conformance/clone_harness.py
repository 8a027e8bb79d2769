"""cloneThread against the real Mastra's, case by case.

`clone_oracle.mjs` beside this file runs Mastra's LibSQL cloneThread (copyThread, then the copies listed)
over a generated dataset, one case after another on one store; RecallQL answers the same cases, in the
same order, through its `cloneThread` mutation over HTTP. The pieces:

* `clone_queries`: seeded cases: sources of the dataset, earlier clones and unknown ids; new ids, taken
  ids and none; another resource or the source's; titles and metadata or none; `messageLimit` (0 and
  negative too), `messageFilter` dates cut at stored times, message ids of the thread and of others;
* `run_clone_oracle`, `run_clone_queries`, `compare_clone_results`: the copied messages (in the id
  map's order) and the listed copies, each named by the dataset message it descends from; the new
  thread's id, resource, title and metadata (but `clone.clonedAt`, and the source's own keys, which
  RecallQL keeps on purpose); that every copy holds its source's row; error texts.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from gql import GraphQLRequest
from gql.transport.exceptions import TransportQueryError

from tests.conformance.harness import (
    EXPECTED_ERROR_CODES,
    compare_cases,
    failed,
    run_each,
    run_listing_oracle,
)

HERE = Path(__file__).resolve().parent

CLONE = """
mutation Clone($input: CloneThreadInput!) {
  cloneThread(input: $input) {
    thread { id resourceId title metadata }
    messageIdMap { sourceId cloneId }
    clonedMessages { id }
  }
}
"""
ROWS = """
query Rows($ids: [ID!]!) {
  messages(ids: $ids) { id threadId resourceId role type createdAt content { raw } }
}
"""


def clone_queries(dataset: dict, seed: int, *, cases: int = 60) -> list[dict]:
    """Cases in the order they run: a later one may clone an earlier clone, or take its id."""
    rng = random.Random(seed)
    threads = [t["id"] for t in dataset["threads"]]
    resources = sorted({t["resourceId"] for t in dataset["threads"]})
    by_thread: dict[str, list[dict]] = {}
    for m in dataset["messages"]:
        by_thread.setdefault(m["threadId"], []).append(m)
    times = sorted({m["createdAt"] for m in dataset["messages"]})
    made: list[str] = []
    queries: list[dict] = []
    for n in range(cases):
        pick = rng.random()
        source = rng.choice(made) if made and pick < 0.15 else rng.choice(threads)
        args: dict[str, Any] = {"sourceThreadId": source}
        new_id = f"clone-{n:03d}"
        taken = rng.random()
        if taken < 0.05:
            args["newThreadId"] = rng.choice(threads + made)
        elif taken < 0.95:
            args["newThreadId"] = new_id
        if rng.random() < 0.3:
            args["resourceId"] = rng.choice([*resources, "res-new"])
        if rng.random() < 0.4:
            args["title"] = rng.choice(["Branch", f"Plan {n}", ""])
        if rng.random() < 0.4:
            args["metadata"] = rng.choice([{"branch": n}, {"topic": "x", "n": n}, {"clone": "mine"}, {}])
        options: dict[str, Any] = {}
        if rng.random() < 0.5:
            options["messageLimit"] = rng.choice([0, 1, 2, 3, 5, 10, 1000, -2])
        message_filter: dict[str, Any] = {}
        if rng.random() < 0.35 and times:
            low, high = sorted(rng.sample(times, 2))
            if rng.random() < 0.7:
                message_filter["startDate"] = low
            if rng.random() < 0.7:
                message_filter["endDate"] = high
        if rng.random() < 0.25:
            own = by_thread.get(source) or []
            ids = [m["id"] for m in rng.sample(own, min(len(own), rng.choice([0, 1, 3, 8])))]
            if rng.random() < 0.4:
                ids.append(rng.choice(dataset["messages"])["id"])  # most likely another thread's
            message_filter["messageIds"] = ids
        if message_filter:
            options["messageFilter"] = message_filter
        if options:
            args["options"] = options
        queries.append({"name": f"clone-{n:03d}", "args": args})
        if args.get("newThreadId") == new_id:
            made.append(new_id)  # taken by the case if it succeeds; a failed one is cloned as unknown
    first = threads[0]
    queries += [
        {"name": "unknown-source", "args": {"sourceThreadId": "thread-nowhere", "newThreadId": "clone-x"}},
        {"name": "taken-id", "args": {"sourceThreadId": first, "newThreadId": threads[-1]}},
        {"name": "generated-id", "args": {"sourceThreadId": first}},
        {"name": "empty-title", "args": {"sourceThreadId": first, "newThreadId": "clone-y", "title": ""}},
    ]
    return queries


def run_clone_oracle(
    dataset_path: Path, queries: list[dict], out_path: Path, packages: Path, *, mode: str = "contract"
) -> dict:
    return run_listing_oracle(HERE / "clone_oracle.mjs", dataset_path, queries, out_path, packages, mode)


async def run_clone_queries(base_url: str, queries: list[dict]) -> list[dict]:
    """Every case, one after another (a later one may clone an earlier clone), in the oracle's format."""
    origin: dict[str, str] = {}

    async def run(session: Any, query: dict) -> dict:
        try:
            data = await session.execute(
                GraphQLRequest(CLONE, variable_values={"input": query["args"]})  # Mastra's names
            )
        except TransportQueryError as exc:
            return failed(query["name"], exc)
        payload = data["cloneThread"]
        pairs = [(p["sourceId"], p["cloneId"]) for p in payload["messageIdMap"]]
        for source, copy in pairs:
            origin[copy] = origin.get(source, source)
        # Rows as stored, both sides (clonedMessages leaves system rows out).
        rows: dict[str, dict] = {}
        if pairs:
            ids = [i for pair in pairs for i in pair]
            found = await session.execute(GraphQLRequest(ROWS, variable_values={"ids": ids}))
            rows = {m["id"]: m for m in found["messages"] if m is not None}
        thread = payload["thread"]
        same_rows = all(
            (s := rows.get(source)) is not None
            and (c := rows.get(copy)) is not None
            and (c["threadId"], c["resourceId"]) == (thread["id"], thread["resourceId"])
            and all(s[k] == c[k] for k in ("role", "type", "createdAt"))
            and s["content"]["raw"] == c["content"]["raw"]
            for source, copy in pairs
        )
        metadata = dict(thread["metadata"] or {})
        clone_meta = dict(metadata.get("clone") or {})
        clone_meta.pop("clonedAt", None)
        if "lastMessageId" in clone_meta:
            clone_meta["lastMessageId"] = origin.get(clone_meta["lastMessageId"], clone_meta["lastMessageId"])
        metadata["clone"] = clone_meta
        return {
            "name": query["name"],
            "ok": True,
            "thread": {**thread, "metadata": metadata},
            "clonedAtIsSet": "clonedAt" in (thread["metadata"] or {}).get("clone", {}),
            "copied": [origin.get(s, s) for s, _ in pairs],
            "cloned": [origin.get(m["id"], m["id"]) for m in payload["clonedMessages"]],
            "sameRows": same_rows,
        }

    return await run_each(base_url, queries, run, concurrency=1)


def compare_clone_results(queries: list[dict], oracle: list[dict], candidate: list[dict]) -> list[str]:
    """Every disagreement, one line each (empty: they agree; harness.compare_cases, a CONFLICT being an
    expected error too). A generated thread id is compared by its being there; RecallQL's metadata is
    compared on Mastra's keys (it also keeps the source's own, as Mastra's documentation says and its
    code does not)."""
    args_of = {q["name"]: q["args"] for q in queries}

    def clone(prefix: str, o: dict, c: dict) -> list[str]:
        problems = []
        args = args_of[o["name"]]
        want, got = dict(o["thread"]), dict(c["thread"])
        if not args.get("newThreadId"):
            if not got["id"]:
                problems.append(f"{prefix}: no thread id generated")
            want.pop("id"), got.pop("id")
        got["metadata"] = {k: v for k, v in got["metadata"].items() if k in want["metadata"]}
        if want != got:
            problems.append(f"{prefix}: thread: oracle {want}, candidate {got}")
        for key in ("copied", "cloned", "sameRows", "clonedAtIsSet"):
            if o[key] != c[key]:
                problems.append(f"{prefix}: {key}: oracle {o[key]!r}, candidate {c[key]!r}")
        return problems

    return compare_cases(queries, oracle, candidate, clone, EXPECTED_ERROR_CODES | {"CONFLICT"})
