"""Profile one GraphQL request through the whole ASGI app, in process (no socket, no uvicorn).

    python benchmarks/profile_request.py [--query Q] [--requests 3000] [--sort tottime|cumtime]
        [--threads 100] [--messages 0]

Builds the app on a temporary SQLite database (semantic recall off), creates `--threads` threads of
resource r1 (and `--messages` messages in thread small-00), sends the query once to show the answer,
warms up, then reports the CPU per request over `--requests` calls and a cProfile of as many more. The
default query is the peer benchmark's thread listing. What it leaves out (HTTP parsing, sockets) is
about 0.05-0.08 ms per request with uvicorn and httptools.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from resolvers.auth import OPEN

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

THREADS = (
    'query { threads(resourceId: "r1", perPage: 20) { total page perPage hasMore '
    "threads { id resourceId title metadata createdAt updatedAt } } }"
)


async def call(app: Any, body: bytes) -> bytes:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/graphql",
        "raw_path": b"/graphql",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 5555),
        "server": ("127.0.0.1", 4112),
        "state": {},
    }
    sent = False
    out: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client never disconnects
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            out.append(message.get("body", b""))

    await app(scope, receive, send)
    return b"".join(out)


async def main(args: argparse.Namespace) -> None:
    os.environ["RECALLQL_DATA_DIR"] = tempfile.mkdtemp(prefix="recallql-profile-")
    os.environ.setdefault("RECALLQL_LOG_LEVEL", "warning")
    os.environ.pop("RECALLQL_EMBEDDING_MODEL_DIR", None)
    os.environ.pop("RECALLQL_EMBEDDINGS_URL", None)
    from resolvers.messages import MessageInput
    from web.app import create_app
    from web.settings import Settings

    app = create_app(Settings())
    async with app.router.lifespan_context(app):
        services = app.state.services
        for i in range(args.threads):
            await services.threads.create(resource_id="r1", thread_id=f"small-{i:02d}", principal=OPEN)
        if args.messages:
            await services.messages.save(
                [
                    MessageInput(
                        thread_id="small-00",
                        role="user",
                        content={"format": 2, "parts": [{"type": "text", "text": f"message {n}"}]},
                    )
                    for n in range(args.messages)
                ],
                principal=OPEN,
            )
        body = orjson.dumps({"query": args.query})
        print((await call(app, body))[:300].decode(errors="replace"))
        for _ in range(300):
            await call(app, body)
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(args.requests):
            await call(app, body)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        per = 1000 / args.requests
        print(f"{wall * per:.3f} ms wall, {cpu * per:.3f} ms CPU per request")
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(args.requests):
            await call(app, body)
        profile.disable()
        pstats.Stats(profile).sort_stats(args.sort).print_stats(40)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--query", default=THREADS)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--sort", default="tottime", choices=["tottime", "cumtime"])
    parser.add_argument("--threads", type=int, default=100)
    parser.add_argument("--messages", type=int, default=0)
    asyncio.run(main(parser.parse_args()))
