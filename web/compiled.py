"""The HTTP front of /graphql: input screening and the compiled read path (schema/fastpath.py).

A POST /graphql with a JSON body whose document the compiled path supports is answered here; every
other request (and any request the compiled path declines) goes to Strawberry's view unchanged, with
its body replayed. Requests carrying U+0000 in any string are refused first: no engine can store it
(PostgreSQL rejects it in text and jsonb), so it is bad input everywhere, not a server error.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

import orjson
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from schema.fastpath import FastPath, Plan
from web.observability import current_request_id

# GraphQL's \u0000 escape in a query text (not an escaped backslash followed by "u0000").
_GRAPHQL_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


class GraphQLFront:
    def __init__(
        self,
        app: ASGIApp,
        fast_path: FastPath | None,
        context_for: Callable[[Request], Awaitable[Any]],
        on_answer: Callable[[Plan, str | None, float], None] | None = None,
    ) -> None:
        self.app = app
        self.fast_path = fast_path
        self.context_for = context_for
        self.on_answer = on_answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] != "POST":
            params = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            if any(_has_nul(value) for values in params.values() for value in values):
                await _respond(send, _nul_error())
                return
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        payload: Any = None
        if _is_json(scope):
            try:
                payload = orjson.loads(body)
            except orjson.JSONDecodeError:
                payload = None
        if _has_nul(payload):
            await _respond(send, _nul_error())
            return
        answer = await self._answer(scope, payload) if self.fast_path is not None else None
        if answer is None:
            await self.app(scope, _replay(body, receive), send)
            return
        await _respond(send, answer)

    async def _answer(self, scope: Scope, payload: Any) -> bytes | None:
        if not isinstance(payload, dict):
            return None
        query, variables, operation = (
            payload.get("query"),
            payload.get("variables"),
            payload.get("operationName"),
        )
        if not isinstance(query, str) or not isinstance(variables, dict | None):
            return None
        if not isinstance(operation, str | None):
            return None
        assert self.fast_path is not None
        plan = self.fast_path.plan(query, operation)
        if plan is None:
            return None
        started = time.perf_counter()
        context = await self.context_for(Request(scope))
        result = await self.fast_path.execute(plan, variables, context)
        if result is None:
            return None
        if self.on_answer is not None:
            self.on_answer(plan, operation, time.perf_counter() - started)
        return orjson.dumps(result)


def _has_nul(value: Any) -> bool:
    """Whether any string in a decoded request (keys included) holds U+0000, or a query text spells it."""
    if isinstance(value, str):
        return "\x00" in value or ("\\u0000" in value and _GRAPHQL_NUL.search(value) is not None)
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


def _nul_error() -> bytes:
    extensions: dict[str, Any] = {"code": "BAD_USER_INPUT"}
    request_id = current_request_id()
    if request_id:
        extensions["requestId"] = request_id
    message = "Strings may not contain U+0000 (NUL)."
    return orjson.dumps({"data": None, "errors": [{"message": message, "extensions": extensions}]})


async def _respond(send: Send, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _is_json(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-type":
            return value.split(b";")[0].strip().lower() == b"application/json"
    return False


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
