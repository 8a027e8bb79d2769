"""A frontend's recall sent as its text, against the same recall sent as an automatic persisted query's hash
(web/persisted.py): request bytes and server time.

    python benchmarks/persisted_queries.py [--messages 50] [--requests 500] [--rounds 5] [--database-url URL]

The whole app in process (middleware, request ids, compiled reads on, persisted queries on), over httpx's
ASGI transport, on one database (a fresh SQLite file unless --database-url) with one thread of --messages
messages. The query is what a chat view asks for: a page of 20 messages with the fields it shows (about
600 characters). Each way runs --requests times in --rounds rounds; prints the request's bytes (the JSON
body, or the GET URL's path and query) and the best round's µs per request. The answers are checked equal.

- text: POST with the query text, as a client without APQ sends it;
- hash: POST with the hash alone (APQ, the text registered once beforehand);
- hash, GET: the hash alone in the URL (Apollo Client's useGETForHashedQueries).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import sys
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from in_process import best_round, client, database  # this folder

from resolvers.auth import OPEN
from resolvers.messages import MessageInput

QUERY = """query ChatView($threadId: ID!, $resourceId: String) {
  recall(threadId: $threadId, resourceId: $resourceId, perPage: 20) {
    total
    page
    hasMore
    messages {
      id
      threadId
      resourceId
      role
      type
      createdAt
      content {
        parts {
          ... on TextPart { type text }
          ... on ReasoningPart { type reasoning }
        }
        metadata
      }
    }
  }
}"""
DIGEST = hashlib.sha256(QUERY.encode()).hexdigest()
EXTENSIONS = {"persistedQuery": {"version": 1, "sha256Hash": DIGEST}}

Way = Callable[[httpx.AsyncClient], Awaitable[tuple[int, dict[str, Any]]]]


def ways(variables: dict[str, Any]) -> dict[str, Way]:
    text_body = orjson.dumps({"query": QUERY, "variables": variables})
    hash_body = orjson.dumps({"extensions": EXTENSIONS, "variables": variables})
    params = {"extensions": orjson.dumps(EXTENSIONS).decode(), "variables": orjson.dumps(variables).decode()}
    # Encoded once, as the body is: httpx takes about 85 µs more to build a request from `params`.
    target = f"/graphql?{urlencode(params)}"
    headers = {"content-type": "application/json"}

    async def text(http: httpx.AsyncClient) -> tuple[int, dict[str, Any]]:
        response = await http.post("/graphql", content=text_body, headers=headers)
        return len(text_body), response.json()

    async def hashed(http: httpx.AsyncClient) -> tuple[int, dict[str, Any]]:
        response = await http.post("/graphql", content=hash_body, headers=headers)
        return len(hash_body), response.json()

    async def hashed_get(http: httpx.AsyncClient) -> tuple[int, dict[str, Any]]:
        response = await http.get(target)
        return len(target), response.json()

    return {"text": text, "hash": hashed, "hash, GET": hashed_get}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--messages", type=int, default=50)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--database-url")
    args = parser.parse_args()
    async with database(args.database_url) as (engine, services):
        thread = f"apq-bench-{time.time_ns()}"
        await services.threads.create(resource_id="apq-bench", thread_id=thread, principal=OPEN)
        await services.messages.save(
            [
                MessageInput(
                    thread_id=thread,
                    role="user" if k % 2 == 0 else "assistant",
                    created_at=1767225600000 + k * 1000,
                    content={"format": 2, "parts": [{"type": "text", "text": f"message {k} of the chat"}]},
                )
                for k in range(args.messages)
            ],
            principal=OPEN,
        )
        variables = {"threadId": thread, "resourceId": "apq-bench"}
        dialect, chars = engine.dialect.name, len(QUERY)
        print(f"a recall of 20 of {args.messages} messages, {dialect}; query text {chars} chars")
        print(f"{'request':12s} {'bytes':>7s} {'µs':>8s} {'÷ text':>7s}")
        async with client(services) as http:
            # The text is registered once, as a client's first request after a miss does.
            body = {"query": QUERY, "variables": variables, "extensions": EXTENSIONS}
            registered = (await http.post("/graphql", json=body)).json()
            assert "errors" not in registered, registered
            results = {
                name: await best_round(partial(way, http), args.requests, args.rounds)
                for name, way in ways(variables).items()
            }
    reference = results["text"][1][1]
    page = reference["data"]["recall"]["messages"] if "errors" not in reference else None
    assert page is not None and len(page) == min(20, args.messages), reference
    for name, (micros, (size, answer)) in results.items():
        assert answer == reference, name
        print(f"{name:12s} {size:7d} {micros:8.0f} {micros / results['text'][0]:7.2f}")


if __name__ == "__main__":
    asyncio.run(main())
