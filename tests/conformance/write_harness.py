"""createThread, saveMessages, updateThread, updateThreadResourceId, deleteMessages and deleteThread
against the real Mastra's, case by case.

`write_oracle.mjs` beside this file runs Mastra's writes over a generated dataset, one case after another
on one store; RecallQL runs the same cases, in the same order, through its mutations over HTTP, and after
each both give what the call returned and everything then stored. The pieces:

* `write_queries`: seeded calls: saves of new messages (ties on createdAt included) and re-saves of
  stored ones (content replaced, role, type, another thread, another createdAt, which a re-save keeps),
  several of one id in a batch, system rows; thread creations (one without metadata); thread updates
  (title, metadata merged, both, an empty title, an empty object, an unknown thread); transfers to
  another resource or the thread's own, and of an unknown thread; deletes of
  messages (several threads, unknown ids, none, a blank id); deletes of threads (an unknown one too);
* `run_write_oracle`, `run_write_queries`, `compare_write_results`: what each call returned (a save's
  ids in order, an updated thread), then every thread (resource, title, metadata, createdAt, whether the
  call moved its updatedAt) and every message (thread, resource, role, type, createdAt, content).

Two deliberate differences are left out of the comparison (see the README), and one bug of Mastra's (the
metadata its updateThreadResourceId answers: see compare_write_results):
* Mastra's store moves the updatedAt of a save's first message's thread only; RecallQL moves every thread
  a save names, writes to or takes a message from, so for a save only that first thread's `touched` is
  compared;
* a re-saved message keeps its createdAt on both, but Mastra's answer lists it at the createdAt given,
  RecallQL's at the one kept: a re-save in a batch of several gives the stored createdAt (a re-save
  alone gives another, which must be ignored).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from gql import GraphQLRequest
from gql.transport.exceptions import TransportQueryError

from tests.conformance.harness import compare_cases, failed, run_each, run_listing_oracle

HERE = Path(__file__).resolve().parent

SAVE = """
mutation Save($messages: [MessageInput!]!) { saveMessages(messages: $messages) { messages { id } } }
"""
UPDATE_THREAD = """
mutation UpdateThread($input: UpdateThreadInput!) {
  updateThread(input: $input) { id resourceId title metadata }
}
"""
CREATE_THREAD = """
mutation CreateThread($input: CreateThreadInput!) {
  createThread(input: $input) { id resourceId title metadata }
}
"""
TRANSFER = """
mutation Transfer($threadId: ID!, $resourceId: String!) {
  updateThreadResourceId(threadId: $threadId, resourceId: $resourceId) { id resourceId title metadata }
}
"""
DELETE_MESSAGES = "mutation Delete($ids: [ID!]!) { deleteMessages(ids: $ids) { deleted } }"
DELETE_THREAD = "mutation DeleteThread($id: ID!) { deleteThread(id: $id) }"
STATE = """
query State($ids: [ID!]!) {
  threads(perPage: false) { threads { id resourceId title metadata createdAt updatedAt } }
  messages(ids: $ids) { id threadId resourceId role type createdAt content { raw } }
}
"""


def _text(n: int, k: int) -> dict:
    return {"format": 2, "parts": [{"type": "text", "text": f"written {n}.{k}"}]}


def write_queries(dataset: dict, seed: int, *, cases: int = 60) -> list[dict]:
    """Cases in the order they run: a later one sees an earlier one's writes."""
    rng = random.Random(seed)
    threads = {t["id"]: t["resourceId"] for t in dataset["threads"]}
    live_threads = list(threads)
    stored = {m["id"]: dict(m) for m in dataset["messages"]}
    created = {m["id"]: m["createdAt"] for m in dataset["messages"]}  # what a re-save keeps
    times = sorted(created.values())
    queries: list[dict] = []

    def message(n: int, k: int, alone: bool) -> dict:
        """A new message, or a re-save of a stored one (content replaced; alone in its batch, another
        createdAt given, which it must not take)."""
        if stored and rng.random() < 0.45:
            old = stored[rng.choice(sorted(stored))]
            when = rng.choice(times) if alone else created[old["id"]]
            m = {**old, "content": _text(n, k), "createdAt": when}
            if rng.random() < 0.3:
                m["role"] = rng.choice(["user", "assistant"])
            if rng.random() < 0.2:
                m["type"] = rng.choice(["v2", "text"])
            if rng.random() < 0.25:
                m["threadId"] = rng.choice(live_threads)
            m = {
                key: m[key]
                for key in ("id", "threadId", "resourceId", "role", "type", "createdAt", "content")
                if key in m
            }
        else:
            thread = rng.choice(live_threads)
            m = {
                "id": f"msg-new-{n:03d}-{k}",
                "threadId": thread,
                "resourceId": threads[thread],
                "role": rng.choice(["user", "assistant"]),
                "createdAt": rng.choice(times),  # ties with stored messages
                "content": _text(n, k),
            }
            if rng.random() < 0.3:
                m["content"]["metadata"] = {"topic": rng.choice(["a", "b"]), "n": n}
        return m

    for n in range(cases):
        kind = rng.random()
        if kind < 0.45:
            size = rng.choice([1, 1, 2, 3, 5])
            batch = [message(n, k, size == 1) for k in range(size)]
            if rng.random() < 0.15:
                # The same id twice in one batch: the later one is stored, at the earlier one's place.
                batch.append(dict(batch[0], content=_text(n, 99), createdAt=batch[0]["createdAt"]))
            for m in batch:
                stored[m["id"]] = m
                created.setdefault(m["id"], m["createdAt"])
            queries.append({"name": f"save-{n:03d}", "args": {"op": "save", "messages": batch}})
        elif kind < 0.7:
            thread = rng.choice([*live_threads, "thread-nowhere"] if rng.random() < 0.1 else live_threads)
            args: dict[str, Any] = {"op": "updateThread", "id": thread}
            shape = rng.random()
            if shape < 0.35 or shape >= 0.7:
                args["title"] = rng.choice([f"Title {n}", "", "Renamed"])
            if shape >= 0.35:
                args["metadata"] = rng.choice(
                    [{"channel": "app"}, {"n": n, "nested": {"a": n}}, {}, {"flag": True, "channel": None}]
                )
            queries.append({"name": f"update-thread-{n:03d}", "args": args})
        elif kind < 0.86:
            ids = rng.sample(sorted(stored), min(len(stored), rng.choice([0, 1, 1, 2, 4])))
            if rng.random() < 0.3:
                ids.append(f"msg-unknown-{n}")
            for i in ids:
                stored.pop(i, None)
            queries.append({"name": f"delete-messages-{n:03d}", "args": {"op": "deleteMessages", "ids": ids}})
        elif kind < 0.93:
            # The thread and every message filed under it take the resource (another, or its own).
            thread = rng.choice(live_threads)
            resource = rng.choice([threads[thread], "res-1", "res-2", f"res-moved-{n}"])
            threads[thread] = resource
            for m in stored.values():
                if m["threadId"] == thread:
                    m["resourceId"] = resource
            args = {"op": "transfer", "threadId": thread, "resourceId": resource}
            queries.append({"name": f"transfer-{n:03d}", "args": args})
        else:
            unknown = len(live_threads) <= 2 or rng.random() < 0.3
            thread = "thread-nowhere" if unknown else live_threads.pop(rng.randrange(len(live_threads)))
            stored = {i: m for i, m in stored.items() if m["threadId"] != thread}
            queries.append({"name": f"delete-thread-{n:03d}", "args": {"op": "deleteThread", "id": thread}})
    thread = live_threads[0]
    resource = threads[thread]
    system = next((m for m in stored.values() if m["role"] == "system"), None)

    def new(name: str, when: str, role: str = "user") -> dict:
        return {
            "id": name,
            "threadId": thread,
            "resourceId": resource,
            "role": role,
            "createdAt": when,
            "content": _text(cases, 0),
        }

    queries += [
        # A thread saved without metadata, then given a title alone: Mastra's update leaves {}. (Its store
        # refuses a thread without a title; its createThread gives "", as RecallQL's does: "" is given.)
        {
            "name": "create-bare",
            "args": {
                "op": "createThread",
                "id": "thread-bare",
                "resourceId": resource,
                "title": "",
                "createdAt": times[0],
            },
        },
        {"name": "title-bare", "args": {"op": "updateThread", "id": "thread-bare", "title": "Bare"}},
        {
            "name": "create-full",
            "args": {
                "op": "createThread",
                "id": "thread-full",
                "resourceId": "res-new",
                "title": "Full",
                "metadata": {"a": {"b": [1, None]}},
                "createdAt": times[-1],
            },
        },
        {
            "name": "save-out-of-order",
            "args": {
                "op": "save",
                "messages": [
                    new("msg-late", times[-1]),
                    new("msg-early", times[0]),
                    new("msg-tied", times[0]),
                ],
            },
        },
        {
            "name": "save-twice-in-batch",
            "args": {
                "op": "save",
                "messages": [
                    new("msg-twice", times[3]),
                    new("msg-between", times[2]),
                    {**new("msg-twice", times[3]), "role": "assistant"},
                ],
            },
        },
        {
            # The same id in two threads of one batch: the last copy is stored, in its thread.
            "name": "save-twice-across-threads",
            "args": {
                "op": "save",
                "messages": [
                    {**new("msg-twice-across", times[3]), "threadId": live_threads[-1]},
                    {**new("msg-twice-across", times[4]), "role": "assistant"},
                ],
            },
        },
        {
            "name": "save-with-system",
            "args": {
                "op": "save",
                "messages": [new("msg-system", times[4], "system"), new("msg-beside-system", times[5])],
            },
        },
        {
            "name": "update-unknown-thread",
            "args": {"op": "updateThread", "id": "thread-nowhere", "title": "x"},
        },
        {
            "name": "transfer-unknown",
            "args": {"op": "transfer", "threadId": "thread-nowhere", "resourceId": "r"},
        },
        {"name": "delete-no-messages", "args": {"op": "deleteMessages", "ids": []}},
        {"name": "delete-unknown-thread", "args": {"op": "deleteThread", "id": "thread-nowhere"}},
        {"name": "delete-blank-id", "args": {"op": "deleteMessages", "ids": [""]}},
    ]
    if system is not None:  # a stored system row re-saved (as given) and then deleted
        queries += [
            {
                "name": "resave-system",
                "args": {
                    "op": "save",
                    "messages": [{**system, "content": _text(cases, 1)}, new("msg-after-system", times[-1])],
                },
            },
        ]
    return queries


def run_write_oracle(
    dataset_path: Path, queries: list[dict], out_path: Path, packages: Path, *, mode: str = "contract"
) -> dict:
    return run_listing_oracle(HERE / "write_oracle.mjs", dataset_path, queries, out_path, packages, mode)


async def run_write_queries(base_url: str, queries: list[dict], known: list[str]) -> list[dict]:
    """Every case, one after another, in the oracle's format; `known`: the dataset's message ids (with
    those the cases save, every id a message can have)."""
    ids = sorted(
        {*known, *(m["id"] for q in queries if q["args"]["op"] == "save" for m in q["args"]["messages"])}
    )

    async def state(session: Any) -> tuple[dict[str, str], dict]:
        data = await session.execute(GraphQLRequest(STATE, variable_values={"ids": ids}))
        threads = sorted(data["threads"]["threads"], key=lambda t: t["id"])
        messages = [{**m, "content": m["content"]["raw"]} for m in data["messages"] if m is not None]
        return {t["id"]: t["updatedAt"] for t in threads}, {"threads": threads, "messages": messages}

    async def run(session: Any, query: dict) -> dict:
        args = dict(query["args"])
        op = args.pop("op")
        before, _ = await state(session)
        returned: Any
        try:
            if op == "createThread":
                data = await session.execute(GraphQLRequest(CREATE_THREAD, variable_values={"input": args}))
                returned = data["createThread"]
            elif op == "save":
                data = await session.execute(GraphQLRequest(SAVE, variable_values=args))
                returned = [m["id"] for m in data["saveMessages"]["messages"]]
            elif op == "updateThread":
                data = await session.execute(GraphQLRequest(UPDATE_THREAD, variable_values={"input": args}))
                returned = data["updateThread"]
            elif op == "transfer":
                data = await session.execute(GraphQLRequest(TRANSFER, variable_values=args))
                returned = data["updateThreadResourceId"]
            elif op == "deleteMessages":
                await session.execute(GraphQLRequest(DELETE_MESSAGES, variable_values=args))
                returned = None
            else:
                await session.execute(GraphQLRequest(DELETE_THREAD, variable_values=args))
                returned = None
        except TransportQueryError as exc:
            return failed(query["name"], exc)
        _, after = await state(session)
        threads = [
            {
                **{k: v for k, v in t.items() if k != "updatedAt"},
                "touched": t["id"] in before and before[t["id"]] != t["updatedAt"],
            }
            for t in after["threads"]
        ]
        return {
            "name": query["name"],
            "ok": True,
            "returned": returned,
            "threads": threads,
            "messages": after["messages"],
        }

    return await run_each(base_url, queries, run, concurrency=1)


def _by_id(rows: list[dict]) -> dict[str, dict]:
    return {r["id"]: r for r in rows}


def compare_write_results(queries: list[dict], oracle: list[dict], candidate: list[dict]) -> list[str]:
    """Every disagreement, one line each (empty: they agree; harness.compare_cases)."""
    by_name = {q["name"]: q["args"] for q in queries}

    def write(prefix: str, o: dict, c: dict) -> list[str]:
        problems = []
        args = by_name[o["name"]]
        want, got = o["returned"], c["returned"]
        if args["op"] == "transfer":
            # Mastra's LibSQL store answers a moved thread's metadata as it reads the column, a JSONB
            # blob it does not parse (it serialises as {}): a bug, left out; the stored metadata is compared.
            want, got = ({k: v for k, v in r.items() if k != "metadata"} for r in (want, got))
        if want != got:
            problems.append(f"{prefix}: returned: oracle {want}, candidate {got}")
        # A save: only its first message's thread is known to Mastra as touched (see the module's doc).
        judged = {args["messages"][0]["threadId"]} if args["op"] == "save" else None
        for kind in ("threads", "messages"):
            want, got = _by_id(o[kind]), _by_id(c[kind])
            if want.keys() != got.keys():
                problems.append(
                    f"{prefix}: {kind}: only in oracle {sorted(want.keys() - got.keys())}, "
                    f"only in candidate {sorted(got.keys() - want.keys())}"
                )
            for key in sorted(want.keys() & got.keys()):
                w, g = dict(want[key]), dict(got[key])
                if kind == "threads" and judged is not None and key not in judged:
                    w.pop("touched"), g.pop("touched")
                if w != g:
                    problems.append(f"{prefix}: {kind[:-1]} {key}: oracle {w}, candidate {g}")
        return problems

    return compare_cases(queries, oracle, candidate, write)
