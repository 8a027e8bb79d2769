"""WebSocket handlers: limits and malformed frames, on both protocols (graphql-transport-ws, legacy
graphql-ws).

Strawberry enforces the count of operations at once on one connection; these handlers give its refusal
the shape of every other RecallQL error (a code, the limit's name and value). They also screen what a
client sends before Strawberry reads it: a frame that is not an object, or a subscribe without an object
payload and a query, crashed Strawberry's handler (the connection dropped with no close frame), and a
query that does not parse ended in a bare `complete` (its stream path raised the syntax error instead
of reporting it).

A connection authenticated with an expiring credential (a JWT's `exp`) is closed when it expires, with
4403 "Token expired": its subscriptions end and no operation runs on it after that time. The client
reconnects with a fresh token, as after any dropped connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from graphql import GraphQLSyntaxError, parse
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import BaseGraphQLTransportWSHandler
from strawberry.subscriptions.protocols.graphql_ws.handlers import BaseGraphQLWSHandler

from resolvers.errors import MAX_JSON_DEPTH, json_depth, value_fault
from schema.build import query_too_long

# Strawberry's wording for an operation refused over the per-connection limit.
_STRAWBERRY_LIMIT_MESSAGE = "Subscription limit reached"
LIMIT_CODE = "TOO_MANY_SUBSCRIPTIONS"


def limit_error(limit: int | None) -> dict[str, Any]:
    return {
        "message": f"At most {limit} subscriptions may run at once on one connection.",
        "extensions": {"code": LIMIT_CODE, "limit": "maxSubscriptionsPerConnection", "max": limit},
    }


def _is_limit_error(payload: Any) -> bool:
    return isinstance(payload, dict) and payload.get("message") == _STRAWBERRY_LIMIT_MESSAGE


_MALFORMED = "Failed to parse message"


def _malformed(message: Any, start: str) -> bool:
    """Whether a client frame lacks what the handlers read: a type, and for `start` (the protocol's
    subscribe) an id and a payload with a query."""
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        return True
    if message["type"] != start:
        return False
    payload = message.get("payload")
    return not (
        isinstance(message.get("id"), str)
        and isinstance(payload, dict)
        and isinstance(payload.get("query"), str)
        # null or absent, else of its type: `or` let 0, false, "" and [] through to Strawberry.
        and isinstance(payload.get("variables"), dict | None)
        and isinstance(payload.get("operationName"), str | None)
    )


def _frame_error(payload: dict[str, Any], view: Any) -> dict[str, Any] | None:
    """The error for a subscribe frame's payload that holds what no database can store anywhere (a
    lone surrogate in operationName, echoed in an error, could not even be sent back) or whose query
    HTTP would refuse; None when it may run."""
    fault = value_fault(payload)
    if fault is not None:
        return {"message": fault.message, "extensions": fault.extensions}
    if json_depth(payload) > MAX_JSON_DEPTH:
        # As an HTTP body, which the payload stands for, is refused (web/compiled.py): orjson took
        # frames of up to 1,024 levels, and content 250 deep was stored.
        message = f"The request nests JSON deeper than {MAX_JSON_DEPTH} levels."
        return {"message": message, "extensions": {"code": "BAD_REQUEST"}}
    return _parse_error(payload["query"], view)


def _parse_error(query: str, view: Any) -> dict[str, Any] | None:
    """The error HTTP answers for a query that does not parse, or is over the length or token limit,
    or None. The limits bound the parse itself: a frame of a million tokens held the event loop for
    seconds, and Strawberry's own refusal of it ended in a bare `complete` with the query in the log."""
    too_long = query_too_long(query, getattr(view, "max_query_chars", None))
    if too_long is not None:
        return dict(too_long.formatted)
    max_tokens = getattr(view, "max_query_tokens", None)
    try:
        parse(query, max_tokens=max_tokens)
    except GraphQLSyntaxError as exc:
        if "Document contains more than" in exc.message:
            return {**exc.formatted, "extensions": {"code": "QUERY_TOO_COMPLEX", "limit": "maxQueryTokens"}}
        return {**exc.formatted, "extensions": {"code": "GRAPHQL_PARSE_FAILED"}}
    return None


# graphql-transport-ws's Forbidden: a refused connection_init, and a connection whose token expired.
REFUSED_CLOSE_CODE = EXPIRED_CLOSE_CODE = 4403
EXPIRED_REASON = "Token expired"


class _CredentialExpiry:
    """Closes the connection when the principal's credential expires (see the module's docstring).
    First in its handlers' bases, so that its handle_connection_init wraps Strawberry's."""

    context: Any
    websocket: Any
    connection_acknowledged: bool
    _expiry_task: asyncio.Task[None] | None = None
    _expires_at: float | None = None

    async def handle_connection_init(self, message: Any) -> None:
        await super().handle_connection_init(message)  # type: ignore[misc]
        principal = getattr(self.context, "principal", None)
        expires_at = principal.expires_at if principal is not None else None
        if not self.connection_acknowledged:
            return
        # The legacy protocol takes another connection_init, whose token replaces the principal. The
        # operations already running keep the principal they started under, so the connection closes
        # at the earliest expiry of any token it was given: a later token, or a key without expiry,
        # used to cancel the timer and let an expired token's subscriptions run on for good.
        if expires_at is None or (self._expires_at is not None and self._expires_at <= expires_at):
            return
        if self._expiry_task is not None:
            self._expiry_task.cancel()
        self._expires_at = expires_at
        self._expiry_task = asyncio.create_task(self._close_at(expires_at))

    async def _refused_as_expired(self) -> bool:
        """Closes the connection when the credential expired before the timer ran (a frame arriving
        just after the expiry)."""
        principal = getattr(self.context, "principal", None)
        if self.connection_acknowledged and principal is not None and principal.expired(time.time()):
            await self._close_expired()
            return True
        return False

    async def _close_at(self, expires_at: float) -> None:
        # Until the wall clock (the token's and the client's) has reached the expiry: the event loop
        # sleeps on the monotonic clock, and a sleep of the difference ended 0.2 ms early in CI.
        while (left := expires_at - time.time()) > 0:
            await asyncio.sleep(left)
        await self._close_expired()

    async def _close_expired(self) -> None:
        with contextlib.suppress(Exception):  # the client may have gone already
            await self.websocket.close(code=EXPIRED_CLOSE_CODE, reason=EXPIRED_REASON)

    async def _stop_watching(self) -> None:
        if self._expiry_task is not None:
            self._expiry_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._expiry_task


MAX_CLOSE_REASON = 123  # bytes of UTF-8 a close frame's reason may hold (RFC 6455, 5.5)


def close_reason(text: str) -> str:
    """`text` cut to what a close frame holds, whole characters only."""
    data = text.encode()
    if len(data) <= MAX_CLOSE_REASON:
        return text
    return data[: MAX_CLOSE_REASON - 3].decode(errors="ignore") + "..."


class TransportWSHandler(_CredentialExpiry, BaseGraphQLTransportWSHandler[Any, Any]):
    async def handle_connection_init(self, message: Any) -> None:
        # Strawberry closes a refused connection_init with the bare reason "Forbidden": GraphiQL showed
        # that alone, after retrying for most of a minute, to someone whose tab had no token. The close
        # says why, as the refusal's error says it over HTTP.
        websocket = self.websocket
        close = websocket.close

        async def close_saying_why(code: int, reason: str) -> None:
            refusal = getattr(self.context, "connection_refusal", None)
            if code == REFUSED_CLOSE_CODE and refusal:
                reason = close_reason(f"Forbidden: {refusal}")
            await close(code=code, reason=reason)

        websocket.close = close_saying_why
        try:
            await super().handle_connection_init(message)
        finally:
            del websocket.close  # the class's again

    async def handle_subscribe(self, message: Any) -> None:
        if not await self._refused_as_expired():
            await super().handle_subscribe(message)

    async def shutdown(self) -> None:
        await self._stop_watching()
        await super().shutdown()

    async def handle_message(self, message: Any) -> None:
        if _malformed(message, "subscribe"):
            await self.handle_invalid_message(_MALFORMED)  # closes with 4400, as for any invalid message
            return
        if (
            message["type"] == "subscribe"
            and self.connection_acknowledged
            and message["id"] not in self.operations
        ):
            error = _frame_error(message["payload"], self.view)
            if error is not None:
                await self.send_message({"id": message["id"], "type": "error", "payload": [error]})
                return
        await super().handle_message(message)

    async def send_message(self, message: Any) -> None:
        payload = message.get("payload") if message.get("type") == "error" else None
        if isinstance(payload, list) and any(_is_limit_error(p) for p in payload):
            message = {**message, "payload": [limit_error(self.max_subscriptions_per_connection)]}
        await super().send_message(message)


class LegacyWSHandler(_CredentialExpiry, BaseGraphQLWSHandler[Any, Any]):
    async def handle_start(self, message: Any) -> None:
        if not await self._refused_as_expired():
            await super().handle_start(message)

    async def cleanup(self) -> None:
        await self._stop_watching()
        await super().cleanup()

    async def handle_message(self, message: Any) -> None:
        # The legacy protocol has no close code for a bad frame: the operation's error, the connection kept.
        if _malformed(message, "start"):
            operation = message.get("id") if isinstance(message, dict) else None
            payload = {"message": _MALFORMED, "extensions": {"code": "BAD_REQUEST"}}
            await self.send_message({"type": "error", "id": operation, "payload": payload})
            return
        if message["type"] == "start" and self.connection_acknowledged:
            error = _frame_error(message["payload"], self.view)
            if error is not None:
                await self.send_message({"type": "error", "id": message["id"], "payload": error})
                return
        await super().handle_message(message)

    async def send_message(self, message: Any) -> None:
        if message.get("type") == "error" and _is_limit_error(message.get("payload")):
            message = {**message, "payload": limit_error(self.max_subscriptions_per_connection)}
        await super().send_message(message)
