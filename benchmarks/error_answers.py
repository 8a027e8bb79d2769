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
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.db import create_engine
from models.migrate import upgrade
from models.repository import Repository
from resolvers.auth import OPEN
from resolvers.config import BUILTIN_DEFAULTS
from resolvers.context import Services
from resolvers.messages import MessageInput
from web.app import create_app
from web.settings import Settings

REQUESTS = {
    "recall (answered)": '{ recall(threadId: "t1") { total messages { id } } }',
    "recall, BAD_USER_INPUT": '{ recall(threadId: "t1", page: -1) { total messages { id } } }',
    "recall, FORBIDDEN": '{ recall(threadId: "t1", resourceId: "someone-else") { total messages { id } } }',
}


@asynccontextmanager
async def client(services: Services, compiled: bool) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(compiled_reads=compiled, access_log=False, metrics=False), services=services)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            yield http


async def per_request(http: httpx.AsyncClient, query: str, requests: int, rounds: int) -> tuple[float, str]:
    """The best round's µs per request, and the answer's error code ("" for none)."""
    body = {"query": query}
    for _ in range(requests // 4):  # warm: plans, caches
        await http.post("/graphql", json=body)
    best = float("inf")
    answer: dict[str, object] = {}
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(requests):
            answer = (await http.post("/graphql", json=body)).json()
        best = min(best, (time.perf_counter() - started) / requests * 1e6)
    errors = answer.get("errors")
    code = errors[0]["extensions"]["code"] if isinstance(errors, list) and errors else ""
    return best, str(code)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--database-url")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        url = args.database_url or f"sqlite+aiosqlite:///{folder}/bench.db"
        engine = create_engine(url)
        await upgrade(engine)
        services = Services.build(Repository(engine), memory_defaults=dict(BUILTIN_DEFAULTS))
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
        try:
            for name, query in REQUESTS.items():
                async with client(services, compiled=True) as fast:
                    compiled, code = await per_request(fast, query, args.requests, args.rounds)
                async with client(services, compiled=False) as plain:
                    normal, plain_code = await per_request(plain, query, args.requests, args.rounds)
                assert code == plain_code, (name, code, plain_code)
                print(f"{name:26s} {compiled:8.0f}µs {normal:8.0f}µs {compiled / normal:6.2f}")
        finally:
            await services.aclose()
            await engine.dispose()


if __name__ == "__main__":
    asyncio.run(main())
