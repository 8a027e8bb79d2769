"""WebSocket limits: at most `max_subscriptions_per_connection` operations at once on one connection.

Strawberry enforces the count; these handlers only give its refusal the shape of every other RecallQL
error (a code, the limit's name and value), on both protocols (graphql-transport-ws, legacy graphql-ws).
"""

from __future__ import annotations

from typing import Any

from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import BaseGraphQLTransportWSHandler
from strawberry.subscriptions.protocols.graphql_ws.handlers import BaseGraphQLWSHandler

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


class TransportWSHandler(BaseGraphQLTransportWSHandler[Any, Any]):
    async def send_message(self, message: Any) -> None:
        payload = message.get("payload") if message.get("type") == "error" else None
        if isinstance(payload, list) and any(_is_limit_error(p) for p in payload):
            message = {**message, "payload": [limit_error(self.max_subscriptions_per_connection)]}
        await super().send_message(message)


class LegacyWSHandler(BaseGraphQLWSHandler[Any, Any]):
    async def send_message(self, message: Any) -> None:
        if message.get("type") == "error" and _is_limit_error(message.get("payload")):
            message = {**message, "payload": limit_error(self.max_subscriptions_per_connection)}
        await super().send_message(message)
