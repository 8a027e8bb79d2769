"""A thread listing with each thread's newest message: Thread.recall nested in one request, against the
requests a client makes without it.

    python benchmarks/thread_recall.py [--threads 20] [--messages 50] [--requests 200] [--rounds 5]
                                       [--database-url URL] [--search]

The whole app in process (middleware, request ids, error policy, compiled reads on), over httpx's ASGI
transport, on one database (a fresh SQLite file unless --database-url) with one resource of --threads
threads of --messages messages each. Each way of getting the page of threads with each one's newest
message runs --requests times, one after another, in --rounds rounds; prints the best round's µs per
listing and its ratio to the nested field. The answers are checked equal (the same newest messages).

- nested: one request, `threads { threads { ... recall(perPage: 1) { ... } } }`;
- nested, hideInPageQuery: the same, with signals hidden in the page query (none are stored here: the
  cost of the way, not of hiding);
- threads, then aliases: the page of threads, then one request with a recall alias per thread;
- threads, then one each: the page of threads, then one recall request per thread;
- threads alone: the page of threads without messages (the floor).

--search: semantic recall on (all-MiniLM-L6-v2 from RECALLQL_EMBEDDING_MODEL_DIR or ../shared/models,
embedded Chroma), and every recall also searches its thread for a text that is new with each listing
(vectorSearchString, topK 2, no neighbours), so each listing embeds its text afresh: the cost of a
listing searched, where the nested recalls all search for one text. The answers then differ from way to
way (different texts); each thread's recall is checked to hold its newest message and a hit.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from in_process import best_round, client  # this folder
from semantic_bench import DIM, MODEL_NAME, resolve_model_dir

from models.db import create_engine
from models.embedders import OnnxMiniLMEmbedder
from models.migrate import upgrade
from models.repository import Repository
from models.vector_index import ChromaIndex
from resolvers.auth import OPEN
from resolvers.config import BUILTIN_DEFAULTS
from resolvers.context import Services
from resolvers.messages import MessageInput
from resolvers.semantic import SemanticMemory

THREAD_FIELDS = "id title updatedAt"
MESSAGE = "total messages { id role createdAt content { parts { ... on TextPart { text } } } }"
THREADS = "query($r: String!, $p: PerPage!%s) { threads(resourceId: $r, perPage: $p) { threads { %s } } }"
ALONE = THREADS % ("", THREAD_FIELDS)
# With --search, every recall also takes this (and the request the variable $s).
SEARCH = (
    "vectorSearchString: $s, threadConfig: {semanticRecall: "
    "{options: {topK: 2, messageRange: {size: 0}, scope: THREAD}}}"
)


def queries(search: bool, hide: bool = False) -> tuple[str, str, str]:
    """The nested listing, the recall of one thread, and the recall arguments an alias repeats; `hide`:
    signals hidden in the page query (hideInPageQuery)."""
    args = f"perPage: 1, {SEARCH}" if search else "perPage: 1"
    if hide:
        args += ", hideSignals: {all: true}, hideInPageQuery: true"
    nested = THREADS % (", $s: String" if search else "", f"{THREAD_FIELDS} recall({args}) {{ {MESSAGE} }}")
    variables = "$t: ID!, $r: String, $s: String" if search else "$t: ID!, $r: String"
    recall = f"query({variables}) {{ recall(threadId: $t, resourceId: $r, {args}) {{ {MESSAGE} }} }}"
    return nested, recall, args


Listing = list[tuple[str, dict[str, Any] | None]]  # (thread id, its newest-message recall)


async def post(http: httpx.AsyncClient, query: str, **variables: Any) -> dict[str, Any]:
    body = (await http.post("/graphql", json={"query": query, "variables": variables})).json()
    assert "errors" not in body, body
    return body["data"]


def ways(
    resource: str, threads: int, search: bool
) -> dict[str, Callable[[httpx.AsyncClient], Awaitable[Listing]]]:
    nested_query, recall_query, args = queries(search)
    texts = itertools.count()

    def text() -> dict[str, Any]:  # a search text no listing has asked for before (--search)
        return {"s": f"what did we say about message {next(texts)} of the trip?"} if search else {}

    async def nested(http: httpx.AsyncClient, query: str = nested_query) -> Listing:
        data = await post(http, query, r=resource, p=threads, **text())
        return [(t["id"], t["recall"]) for t in data["threads"]["threads"]]

    hidden_query = queries(search, hide=True)[0]

    async def nested_hidden(http: httpx.AsyncClient) -> Listing:
        return await nested(http, hidden_query)

    async def aliases(http: httpx.AsyncClient) -> Listing:
        ids = [t["id"] for t in (await post(http, ALONE, r=resource, p=threads))["threads"]["threads"]]
        fields = " ".join(
            f'a{n}: recall(threadId: "{t}", resourceId: $r, {args}) {{ {MESSAGE} }}'
            for n, t in enumerate(ids)
        )
        variables = "$r: String, $s: String" if search else "$r: String"
        data = await post(http, f"query({variables}) {{ {fields} }}", r=resource, **text())
        return [(t, data[f"a{n}"]) for n, t in enumerate(ids)]

    async def one_each(http: httpx.AsyncClient) -> Listing:
        ids = [t["id"] for t in (await post(http, ALONE, r=resource, p=threads))["threads"]["threads"]]
        variables = text()  # one text for the listing's requests
        return [(t, (await post(http, recall_query, t=t, r=resource, **variables))["recall"]) for t in ids]

    async def alone(http: httpx.AsyncClient) -> Listing:
        return [
            (t["id"], None) for t in (await post(http, ALONE, r=resource, p=threads))["threads"]["threads"]
        ]

    return {
        "nested": nested,
        "nested, hideInPageQuery": nested_hidden,
        "threads, then aliases": aliases,
        "threads, then one each": one_each,
        "threads alone": alone,
    }


def newest(listing: Listing) -> list[tuple[str, str | None]]:
    return [(t, r["messages"][-1]["id"] if r and r["messages"] else None) for t, r in listing]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--threads", type=int, default=20)
    parser.add_argument("--messages", type=int, default=50)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--database-url")
    parser.add_argument("--search", action="store_true", help="every recall also runs a vector search")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        url = args.database_url or f"sqlite+aiosqlite:///{folder}/bench.db"
        engine = create_engine(url)
        await upgrade(engine)
        repository = Repository(engine)
        semantic = None
        if args.search:
            embedder = OnnxMiniLMEmbedder(resolve_model_dir())
            await embedder.warmup()
            index = ChromaIndex(path=Path(folder) / "chroma", model_name=MODEL_NAME, dimension=DIM)
            semantic = SemanticMemory(repository, embedder, lambda _m, _d: index)
        services = Services.build(repository, memory_defaults=dict(BUILTIN_DEFAULTS), semantic=semantic)
        resource = f"bench-{uuid.uuid4().hex[:8]}"
        for n in range(args.threads):
            thread = f"{resource}-t{n}"
            await services.threads.create(resource_id=resource, thread_id=thread, principal=OPEN)
            messages = [
                MessageInput(
                    thread_id=thread,
                    role="user" if k % 2 == 0 else "assistant",
                    created_at=1767225600000 + (n * args.messages + k) * 1000,
                    content={"format": 2, "parts": [{"type": "text", "text": f"thread {n}, message {k}"}]},
                )
                for k in range(args.messages)
            ]
            await services.messages.save(messages, principal=OPEN)
        searched = ", each recall searched" if args.search else ""
        print(f"{args.threads} threads of {args.messages} messages, {engine.dialect.name}{searched}")
        print(f"{'listing':24s} {'µs':>9s} {'÷ nested':>9s}")
        try:
            async with client(services) as http:
                results = {
                    name: await best_round(partial(way, http), args.requests, args.rounds)
                    for name, way in ways(resource, args.threads, args.search).items()
                }
        finally:
            await services.aclose()
            if semantic is not None:
                await semantic.aclose()
            await engine.dispose()
        reference = results["nested"][1]
        assert len(reference) == args.threads and all(r and r["messages"] for _, r in reference), reference
        for name, (micros, listing) in results.items():
            if name == "threads alone":
                pass
            elif args.search:  # other texts: other hits, beside the same newest message
                assert newest(listing) == newest(reference), name
                assert all(r and len(r["messages"]) > 1 for _, r in listing), name
            else:
                assert listing == reference, name
            print(f"{name:24s} {micros:9.0f} {micros / results['nested'][0]:9.2f}")


if __name__ == "__main__":
    asyncio.run(main())
