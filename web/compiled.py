"""The HTTP front of /graphql: input screening and the compiled read path (schema/fastpath.py).

A POST /graphql with a JSON body whose document the compiled path supports is answered here; every
other request (and any request the compiled path declines) goes to Strawberry's view unchanged, with
its body replayed. Requests carrying U+0000 in any string are refused first: no engine can store it
(PostgreSQL rejects it in text and jsonb), so it is bad input everywhere, not a server error.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Any
from urllib.parse import parse_qs, quote

import orjson
from graphql import GraphQLError, OperationType, get_operation_ast, parse
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from resolvers.errors import MAX_JSON_DEPTH, NON_FINITE_MESSAGE, NUL_MESSAGE, SURROGATE_MESSAGE, scalar_fault
from schema.build import query_too_long
from schema.fastpath import FastPath, Plan
from web.observability import PERSISTED_QUERIES, CompiledTracing, current_request_id, labelled
from web.persisted import NOT_SUPPORTED_REFUSAL, PersistedQueries, Refusal, refusal_body

# GraphQL's \u0000 escape in a query text (not an escaped backslash followed by "u0000").
_GRAPHQL_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


class GraphQLFront:
    def __init__(
        self,
        app: ASGIApp,
        fast_path: FastPath | None,
        context_for: Callable[[Request], Awaitable[Any]],
        on_answer: Callable[[Plan, str | None, float, list[dict[str, Any]]], None] | None = None,
        *,
        max_tokens: int | None = None,
        max_chars: int | None = None,
        tracing: CompiledTracing | None = None,
        persisted: PersistedQueries | None = None,
    ) -> None:
        self.app = app
        self.persisted = persisted
        self.tracing = tracing
        self.fast_path = fast_path
        self.context_for = context_for
        self.on_answer = on_answer
        self.max_tokens = max_tokens
        self.max_chars = max_chars

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] != "POST":
            params = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            found = await self._persisted({k: v[-1] for k, v in params.items()}, get=True)
            if isinstance(found, Response):
                await found(scope, receive, send)
                return
            if found is not None:
                # The text the hash stands for, as the query parameter the view reads (the last one).
                query_string = scope.get("query_string", b"") + b"&query=" + quote(found).encode()
                scope = {**scope, "query_string": query_string}
                params["query"] = [found]
            fault = _fault(list(params.values())) or _query_fault({"query": params.get("query", [None])[-1]})
            if fault is not None:
                await _respond(send, _bad_input(fault))
                return
            # Starlette (and so Strawberry) reads the last of repeated parameters: so does this front.
            if any(_too_deep(params[name][-1]) for name in _JSON_PARAMS if name in params):
                message = (
                    f"The request's variables or extensions nest JSON deeper than {MAX_JSON_DEPTH} levels."
                )
                await refused(400, message)(scope, receive, send)
                return
            if _subscription({k: v[-1] for k, v in params.items()}, self.max_tokens, self.max_chars):
                await refused(400, _OVER_WEBSOCKET)(scope, receive, send)
                return
            compiled = scope["method"] == "GET" and self.fast_path is not None
            request = _get_payload(params) if compiled else None
            answer = await self._answer(scope, request) if request is not None else None
            if answer is None:
                await self.app(scope, receive, send)
                return
            await _respond(send, answer)
            return
        body = await _read_body(receive)
        payload: Any = None
        fault = None
        if _is_json(scope):
            # Strawberry's own parsing answered these with a bare 500 (an object is all it expects).
            strict = True  # read by orjson
            try:
                payload = orjson.loads(body)
            except orjson.JSONDecodeError:
                strict = False
            try:
                payload = payload if strict else decode_json(body)
            except TooDeep:
                await refused(400, _TOO_DEEP)(scope, receive, send)
                return
            except ValueError:
                await refused(400, "Unable to parse request body as JSON")(scope, receive, send)
                return
            if not isinstance(payload, dict | list):
                await refused(400, "The request body must be a JSON object.")(scope, receive, send)
                return
            if any(not isinstance(item.get("operationName"), str | None) for item in _requests(payload)):
                # Strawberry took 5 as the name "5" (an unknown operation), unlike a query or variables
                # of the wrong type.
                await refused(400, _NAME_TYPE)(scope, receive, send)
                return
            fault = _body_fault(body if strict else None, payload)
        fault = fault or _query_fault(payload)
        if fault == _DEEP:
            await refused(400, _TOO_DEEP)(scope, receive, send)
            return
        if fault is not None:
            await _respond(send, _bad_input(fault))
            return
        if isinstance(payload, dict):
            found = await self._persisted(payload, get=False)
            if isinstance(found, Response):
                await found(scope, receive, send)
                return
            if found is not None:
                # A hash found: the request as if it had sent the text (the view reads these bytes).
                payload = {**payload, "query": found}
                body = orjson.dumps(payload)
        # Checked (a JSON body): the GraphQL layer need not walk the variables again (StorableVariables).
        scope[SCREENED_KEY] = _is_json(scope)
        if isinstance(payload, dict) and _subscription(payload, self.max_tokens, self.max_chars):
            await refused(400, _OVER_WEBSOCKET)(scope, receive, send)
            return
        answer = await self._answer(scope, payload) if self.fast_path is not None else None
        if answer is None:
            # The view reads the same bytes (decode_request_json): it need not parse them again.
            token = _DECODED.set((body, payload)) if payload is not None else None
            try:
                await self.app(scope, _replay(body, receive), send)
            finally:
                if token is not None:
                    _DECODED.reset(token)
            return
        await _respond(send, answer)

    async def _persisted(self, request: Mapping[str, Any], *, get: bool) -> str | Response | None:
        """Automatic persisted queries (web/persisted.py): the text a request's hash stands for when it
        sent none, a refusal, or None (nothing to change: no hash, or a text registered under it)."""
        extensions = request.get("extensions")
        if get and isinstance(extensions, str):
            try:
                extensions = orjson.loads(extensions)
            except orjson.JSONDecodeError:
                return None  # the view reports it
        if not isinstance(extensions, dict) or "persistedQuery" not in extensions:
            return None
        query = request.get("query")
        if isinstance(query, str) and (_query_fault({"query": query}) or _fault(query)):
            return None  # refused with the request's other faults (a GET's are checked after this)
        if self.persisted is None:
            outcome: str | Refusal | None = NOT_SUPPORTED_REFUSAL
        else:
            outcome = await self.persisted.resolve(extensions["persistedQuery"], query)
        labelled(PERSISTED_QUERIES, _apq_outcome(outcome, query)).inc()
        if isinstance(outcome, Refusal):
            # Not cached anywhere: the same request succeeds once the client has sent the text.
            return JSONResponse(
                refusal_body(outcome, request_extensions(outcome.code)),
                status_code=outcome.status,
                headers={"Cache-Control": "private, no-cache, must-revalidate"},
            )
        return outcome if query is None else None  # a text sent is run as sent

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
        if not isinstance(operation, str | None) or not isinstance(payload.get("extensions"), dict | None):
            return None  # the view refuses these (400); the compiled path answered some
        assert self.fast_path is not None
        if query_too_long(query, self.max_chars):
            return None  # refused by the view before anything lexes it
        plan = self.fast_path.plan(query, operation)
        if plan is None:
            return None
        started = time.perf_counter()
        context = await self.context_for(Request(scope))
        if self.tracing is None:
            result = await self.fast_path.execute(plan, variables, context)
        else:
            name = plan.operation.name.value if plan.operation.name else None
            with self.tracing.operation(query, name) as traced:
                result = await self.fast_path.execute(plan, variables, context, traced.field)
                if result is None:
                    traced.fell_back()
        if result is None:
            return None
        try:
            body = orjson.dumps(result)
        except TypeError:  # nested past orjson's 254 levels (a value stored before the write limit)
            return None  # the view writes it with the json module
        if self.on_answer is not None:
            self.on_answer(plan, operation, time.perf_counter() - started, result.get("errors") or [])
        return body


def _apq_outcome(outcome: str | Refusal | None, query: Any) -> str:
    """The label of recallql_persisted_queries for a request's outcome."""
    if isinstance(outcome, Refusal):
        return outcome.outcome
    if outcome is None:
        return "refused"  # a query that is not a string: the view refuses the request
    return "text" if isinstance(query, str) else "found"


def _get_payload(params: Mapping[str, list[str]]) -> dict[str, Any] | None:
    """A GET request's parameters as the JSON body a POST would send, for the compiled path (hashed
    queries go by GET, so that a cache can key on the URL); None when the view should judge them (JSON
    that does not parse, variables that are not an object, or values no database can store)."""
    payload: dict[str, Any] = {"query": params["query"][-1]} if "query" in params else {}
    if "operationName" in params:
        payload["operationName"] = params["operationName"][-1]
    for name in _JSON_PARAMS:
        if name in params:
            try:
                value = orjson.loads(params[name][-1])
            except orjson.JSONDecodeError:
                return None
            if value is not None and not isinstance(value, dict):
                return None
            payload[name] = value
    return payload if _fault(payload, MAX_JSON_DEPTH) is None else None


# Set in an HTTP request's scope once its variables are checked here (StorableVariables then skips them).
SCREENED_KEY = "recallql.screened"
_OVER_WEBSOCKET = (
    "Subscriptions are served over WebSocket at this path (graphql-transport-ws or graphql-ws), "
    "not over HTTP."
)
_DEEP = "deep"


def _fault(value: Any, depth_limit: int | None = None) -> str | None:
    """What a decoded value holds that no operation may: a string (keys included) or number no
    database can store, anywhere in it (resolvers.errors.scalar_fault; a lone surrogate in an
    operationName, echoed in an error, was a bare 500), as that fault's message; or _DEEP for arrays
    and objects nested over `depth_limit`. Without recursion: a deep value must not exhaust the stack
    that checks it. A walk in Python: for request bodies, _body_fault."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            # Only the rare string that may fail is handed over: the call per string cost a third more.
            if "\x00" in item or not item.isascii():
                fault = scalar_fault(item)
                if fault is not None:
                    return fault
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return scalar_fault(item)
            continue
        if isinstance(item, dict):
            children = [*item.keys(), *item.values()]
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth_limit is not None and depth > depth_limit:
            return _DEEP
        stack.extend((child, depth + 1) for child in children)
    return None


_NAME_TYPE = "The GraphQL operation's `operationName` must be a string or null, if provided."


def _requests(payload: Any) -> list[dict[str, Any]]:
    """The GraphQL requests of a body: itself, or a batch's objects."""
    items = payload if isinstance(payload, list) else [payload]
    return [item for item in items if isinstance(item, dict)]


def _query_fault(payload: Any) -> str | None:
    """NUL_MESSAGE for a query text (of a request, or of a batch's) that spells U+0000 with GraphQL's
    escape; other strings may hold those six characters as they are."""
    for item in _requests(payload):
        query = item.get("query")
        if isinstance(query, str) and "\\u0000" in query and _GRAPHQL_NUL.search(query) is not None:
            return NUL_MESSAGE
    return None


# A body's faults without a walk of its decoded values (a walk took seconds for millions of tiny
# ones): orjson's bytes escape U+0000 as \u0000 after an even run of backslashes, and arrays and
# objects nest as the brackets outside strings do.
_JSON_NUL = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")
_NESTING = tuple(1 if c in b"[{" else -1 if c in b"]}" else 0 for c in range(256))


def _body_fault(body: bytes | None, payload: Any) -> str | None:
    """_fault(payload, MAX_JSON_DEPTH) for a request body, given when orjson read it (orjson refuses
    lone surrogates, NaN and infinities), and the payload decoded from it."""
    clean = body
    if clean is None:
        # What only the json module takes: its C encoder finds those (and writes U+0000 as \u0000).
        try:
            clean = json.dumps(payload, ensure_ascii=False, allow_nan=False).encode()
        except UnicodeEncodeError:
            return SURROGATE_MESSAGE
        except ValueError:
            return NON_FINITE_MESSAGE
        except RecursionError:
            return _DEEP
    if b"\\u0000" in clean and _JSON_NUL.search(clean) is not None:
        return NUL_MESSAGE
    if clean.count(b"[") + clean.count(b"{") <= MAX_JSON_DEPTH:
        return None
    brackets = _JSON_STRING.sub(b"", clean).translate(None, _NOT_BRACKETS)
    deepest = max(itertools.accumulate(map(_NESTING.__getitem__, brackets)), default=0)
    return _DEEP if deepest > MAX_JSON_DEPTH else None


_JSON_PARAMS = ("variables", "extensions")
_TOO_DEEP = f"The request body nests JSON deeper than {MAX_JSON_DEPTH} levels."


class TooDeep(json.JSONDecodeError):
    """JSON nested past what a parser may take (a JSONDecodeError: transports report it as not JSON)."""

    def __init__(self) -> None:
        super().__init__("JSON nested too deep", "", 0)


def decode_json(data: str | bytes) -> Any:
    """A request body or WebSocket frame as the view reads it: orjson, which stops at 1,024 levels
    (the json module ran out of stack on deeper input: bare 500s, and WebSocket connections dropped
    without a close frame), else the json module for what only it takes (a lone surrogate's escape,
    NaN), which the GraphQL layer refuses as BAD_USER_INPUT like every transport does. Raises TooDeep,
    or another ValueError for what is not JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc):
            raise TooDeep from None
    try:
        return json.loads(data)
    except RecursionError:
        raise TooDeep from None


# The body the front decoded, and what it decoded it to, while the view handles the request.
_DECODED: ContextVar[tuple[bytes, Any] | None] = ContextVar("recallql_decoded_body", default=None)


def decode_request_json(data: str | bytes) -> Any:
    """decode_json for the view: the body the front decoded already is not parsed twice (parsing was
    most of a large request's time; comparing the bytes costs a millisecond for 8 MB)."""
    decoded = _DECODED.get()
    if decoded is not None and decoded[0] == data:
        return decoded[1]
    return decode_json(data)


def _too_deep(text: str) -> bool:
    """Whether a GET parameter's JSON nests deeper than MAX_JSON_DEPTH (the view's json.loads ran out
    of stack on it: a bare 500). JSON that does not parse is the view's to report."""
    try:
        return _fault(orjson.loads(text), MAX_JSON_DEPTH) == _DEEP
    except orjson.JSONDecodeError as exc:
        return "depth limit" in str(exc)


def _subscription(payload: Mapping[str, Any], max_tokens: int | None, max_chars: int | None = None) -> bool:
    """Whether a request's operation is a subscription, which HTTP cannot serve here (Strawberry ran it
    as a query, and its null answer was an internal error). Parsed under the token limit: the word
    anywhere (a comment, a string) made a parse of a million tokens hold the event loop for seconds."""
    query = payload.get("query")
    if not isinstance(query, str) or "subscription" not in query or query_too_long(query, max_chars):
        return False  # too long: the view refuses it (QUERY_TOO_COMPLEX) before lexing it
    try:
        document = parse(query, max_tokens=max_tokens)
    except GraphQLError:
        return False  # the view reports it (over the limit: QUERY_TOO_COMPLEX)
    name = payload.get("operationName")
    operation = get_operation_ast(document, name if isinstance(name, str) else None)
    return operation is not None and operation.operation == OperationType.SUBSCRIPTION


def refused(status: int, reason: str, *, allow: str | None = None) -> Response:
    """A request refused before execution, as a GraphQL response: its status, the errors list. `allow`:
    a method that is not served at all (405, with the methods that are)."""
    code, headers = "BAD_REQUEST", None
    if allow is not None:
        status, code, headers = 405, "METHOD_NOT_ALLOWED", {"Allow": allow}
    elif reason.startswith("Unknown operation named"):
        code = "OPERATION_RESOLUTION_FAILURE"
    elif reason.endswith("are not allowed when using GET"):
        # GraphQL over HTTP: a mutation over GET is 405, with the method that would do.
        status, code, headers = 405, "METHOD_NOT_ALLOWED", {"Allow": "POST"}
    return JSONResponse(
        {"errors": [{"message": reason, "extensions": request_extensions(code)}]},
        status_code=status,
        headers=headers,
    )


def request_extensions(code: str) -> dict[str, str]:
    """An error's code, and the request's id as X-Request-ID has it (as every GraphQL error has)."""
    request_id = current_request_id()
    return {"code": code, "requestId": request_id} if request_id else {"code": code}


def _bad_input(message: str) -> bytes:
    return orjson.dumps(
        {"data": None, "errors": [{"message": message, "extensions": request_extensions("BAD_USER_INPUT")}]}
    )


async def _respond(send: Send, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _is_json(scope: Scope) -> bool:
    """Whether Strawberry's view will read the body as JSON: it does for any media type containing
    application/json (application/jsonx too), so the front screens exactly those; an exact match let
    such bodies past every check (deep nesting, U+0000, a subscription) into bare 500s."""
    for name, value in scope["headers"]:
        if name == b"content-type":
            return b"application/json" in value.split(b";")[0].strip().lower()
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
