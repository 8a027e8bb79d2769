"""updateMessages against the real Mastra's, case by case.

`update_oracle.mjs` beside this file runs Mastra's LibSQL updateMessages over a generated dataset, one
case after another on one store; RecallQL answers the same cases, in the same order, through its
`updateMessages` mutation over HTTP. The pieces:

* `update_queries`: seeded calls of 1 to 3 changes: content (metadata merged one level deeper, parts
  or the text replaced), role, a move to another thread (with the message's own resource: a move that
  changes the resource is a deliberate difference, see the README), an id alone, an unknown id, the
  same id twice;
* `run_update_oracle`, `run_update_queries`, `compare_update_results`: the rows returned, in order,
  each as stored (thread, resource, role, type, createdAt, content); error texts.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from gql import GraphQLRequest
from gql.transport.exceptions import TransportQueryError

from tests.conformance.harness import compare_cases, failed, run_each, run_listing_oracle

HERE = Path(__file__).resolve().parent

UPDATE = """
mutation Update($messages: [UpdateMessageInput!]!) {
  updateMessages(messages: $messages) { id threadId resourceId role type createdAt content { raw } }
}
"""


def update_queries(dataset: dict, seed: int, *, cases: int = 40) -> list[dict]:
    rng = random.Random(seed)
    messages = [m for m in dataset["messages"] if m["role"] != "system"]
    threads = {t["id"]: t["resourceId"] for t in dataset["threads"]}
    queries: list[dict] = []
    for n in range(cases):
        changes = []
        for _ in range(rng.choice([1, 1, 2, 3])):
            message = rng.choice(messages)
            change: dict[str, Any] = {"id": message["id"]}
            kind = rng.random()
            if kind < 0.3:
                change["content"] = {"metadata": {"edited": n, rng.choice(["topic", "tag"]): f"v{n}"}}
            elif kind < 0.45:
                change["content"] = {"parts": [{"type": "text", "text": f"edited text {n}"}]}
            elif kind < 0.55:
                change["content"] = {
                    "metadata": {"pinned": rng.random() < 0.5},
                    "parts": [{"type": "text", "text": f"both {n}"}],
                }
            elif kind < 0.65:
                change["role"] = rng.choice(["user", "assistant"])
            elif kind < 0.8:
                # A move keeps the message's resource (given, so that neither side picks another).
                change["threadId"] = rng.choice(list(threads))
                change["resourceId"] = message["resourceId"]
            elif kind < 0.9:
                pass  # the id alone
            else:
                change["id"] = f"msg-unknown-{n}"
            changes.append(change)
        # One change per id: RecallQL applies a call's changes of one id in order, Mastra only the first
        # (its find), a deliberate difference.
        once = {c["id"]: c for c in reversed(changes)}
        queries.append(
            {
                "name": f"update-{n:03d}",
                "args": {"messages": [once[i] for i in dict.fromkeys(c["id"] for c in changes)]},
            }
        )
    plain, other = messages[0], messages[1]
    queries += [
        {
            "name": "text-content",
            "args": {"messages": [{"id": plain["id"], "content": {"content": "plain text"}}]},
        },
        {"name": "only-unknown", "args": {"messages": [{"id": "msg-nowhere"}]}},
        {"name": "ids-alone", "args": {"messages": [{"id": other["id"]}, {"id": plain["id"]}]}},
        {
            "name": "metadata-then-more",
            "args": {"messages": [{"id": other["id"], "content": {"metadata": {"a": {"deep": 1}}}}]},
        },
        {
            "name": "metadata-deeper",
            "args": {"messages": [{"id": other["id"], "content": {"metadata": {"a": {"other": 2}}}}]},
        },
    ]
    return queries


def run_update_oracle(
    dataset_path: Path, queries: list[dict], out_path: Path, packages: Path, *, mode: str = "contract"
) -> dict:
    return run_listing_oracle(HERE / "update_oracle.mjs", dataset_path, queries, out_path, packages, mode)


async def run_update_queries(base_url: str, queries: list[dict]) -> list[dict]:
    """Every case, one after another (a later one sees an earlier one's changes)."""

    async def run(session: Any, query: dict) -> dict:
        try:
            data = await session.execute(GraphQLRequest(UPDATE, variable_values=query["args"]))
        except TransportQueryError as exc:
            return failed(query["name"], exc)
        rows = [{**m, "content": m["content"]["raw"]} for m in data["updateMessages"]]
        return {"name": query["name"], "ok": True, "rows": rows}

    return await run_each(base_url, queries, run, concurrency=1)


def compare_update_results(queries: list[dict], oracle: list[dict], candidate: list[dict]) -> list[str]:
    """Every disagreement, one line each (empty: they agree; harness.compare_cases)."""

    def update(prefix: str, o: dict, c: dict) -> list[str]:
        want_ids, got_ids = [r["id"] for r in o["rows"]], [r["id"] for r in c["rows"]]
        if want_ids != got_ids:
            return [f"{prefix}: ids: oracle {want_ids}, candidate {got_ids}"]
        return [
            f"{prefix}: row {want['id']}: oracle {want}, candidate {got}"
            for want, got in zip(o["rows"], c["rows"], strict=True)
            if want != got
        ]

    return compare_cases(queries, oracle, candidate, update)
