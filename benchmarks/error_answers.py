"""What a read that fails costs, answered by the compiled read path and by Strawberry's normal execution.

    python benchmarks/error_answers.py [--requests 400] [--rounds 5] [--database-url URL]

The whole app in process (middleware, request ids, error policy), over httpx's ASGI transport, on one
database (a fresh SQLite file unless --database-url) with one thread of 20 messages. Two apps on the
same services: compiled reads on (the default) and off (RECALLQL_COMPILED_READS=false). Each request
(a recall that succeeds, one refused as bad input, one for a thread of another resource) runs --requests
times, one after another, in --rounds rounds; prints the best round's µs per request on each app and
their ratio.

Until stop 38 the compiled path handed a failing query to the normal path, which ran it again to report
the error: its errored reads cost the two together (a ratio above 1). It now answers a lone root's
expected error or outage itself.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from in_process import best_round, client, database  # this folder

from resolvers.auth import OPEN
from resolvers.messages import MessageInput

REQUESTS = {
    "recall (answered)": '{ recall(threadId: "t1") { total messages { id } } }',
    "recall, BAD_USER_INPUT": '{ recall(threadId: "t1", page: -1) { total messages { id } } }',
    "recall, FORBIDDEN": '{ recall(threadId: "t1", resourceId: "someone-else") { total messages { id } } }',
}


async def per_request(http: httpx.AsyncClient, query: str, requests: int, rounds: int) -> tuple[float, str]:
    """The best round's µs per request, and the answer's error code ("" for none)."""
    body = {"query": query}

    async def call() -> dict[str, Any]:
        return (await http.post("/graphql", json=body)).json()

    best, answer = await best_round(call, requests, rounds)
    errors = answer.get("errors")
    code = errors[0]["extensions"]["code"] if isinstance(errors, list) and errors else ""
    return best, str(code)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--database-url")
    args = parser.parse_args()
    async with database(args.database_url) as (_engine, services):
        await services.threads.create(resource_id="r1", thread_id="t1", principal=OPEN)
        messages = [
            MessageInput(
                thread_id="t1",
                role="user",
                created_at=1767225600000 + n * 1000,
                content={"format": 2, "parts": [{"type": "text", "text": f"message {n}"}]},
            )
            for n in range(20)
        ]
        await services.messages.save(messages, principal=OPEN)
        print(f"{'request':26s} {'compiled':>10s} {'normal':>10s} {'ratio':>6s}")
        for name, query in REQUESTS.items():
            async with client(services, compiled_reads=True) as fast:
                compiled, code = await per_request(fast, query, args.requests, args.rounds)
            async with client(services, compiled_reads=False) as plain:
                normal, plain_code = await per_request(plain, query, args.requests, args.rounds)
            assert code == plain_code, (name, code, plain_code)
            print(f"{name:26s} {compiled:8.0f}µs {normal:8.0f}µs {compiled / normal:6.2f}")


if __name__ == "__main__":
    asyncio.run(main())
