"""A GraphQL subscription client for tests: gql's WebsocketsTransport (graphql-transport-ws)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from gql import Client, GraphQLRequest
from gql.transport.websockets import WebsocketsTransport

MESSAGE_EVENTS = """subscription($t: ID!) { messageSaved(threadId: $t) {
  kind threadId messageId at message { id threadId role createdAt cursor content { raw } } } }"""
RESUMED_MESSAGE_EVENTS = """subscription($t: ID!, $after: String) {
  messageSaved(threadId: $t, after: $after) { kind messageId message { id cursor content { raw } } } }"""
THREAD_EVENTS = """subscription($r: String!) { threadUpdated(resourceId: $r) {
  kind threadId resourceId at thread { id title metadata createdAt updatedAt } } }"""


class Subscription:
    """Collects the events of one subscription in the background."""

    def __init__(self, base_url: str, query: str, **variables: Any) -> None:
        self.url = base_url.replace("http://", "ws://", 1) + "/graphql"
        self.request = GraphQLRequest(query, variable_values=variables or None)
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None

    async def _run(self) -> None:
        transport = WebsocketsTransport(
            url=self.url, subprotocols=[WebsocketsTransport.GRAPHQLWS_SUBPROTOCOL]
        )
        try:
            async with Client(transport=transport) as session:
                async for result in session.subscribe(self.request):
                    self.events.put_nowait(result)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # surfaced by next()
            self.error = exc

    async def next(self, timeout: float = 10.0) -> dict[str, Any]:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            if self.error is not None:
                raise AssertionError(f"subscription failed: {self.error!r}")
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise TimeoutError("no event in time")
            with contextlib.suppress(TimeoutError):
                return await asyncio.wait_for(self.events.get(), min(remaining, 0.2))

    async def expect_none(self, wait: float = 0.5) -> None:
        await asyncio.sleep(wait)
        assert self.events.empty(), self.events.get_nowait()

    async def until_live(self, trigger: Callable[[int], Awaitable[Any]], timeout: float = 20.0) -> None:
        """Calls `trigger` until the first event arrives (the server registers a subscription a moment
        after the client sent it; nothing in the protocol says when), then drops what was received."""
        deadline = asyncio.get_running_loop().time() + timeout
        n = 0
        while asyncio.get_running_loop().time() < deadline:
            await trigger(n)
            n += 1
            try:
                await self.next(timeout=0.3)
                break
            except TimeoutError:
                continue
        else:
            raise TimeoutError("the subscription never delivered an event")
        await self.drain()

    async def drain(self, settle: float = 0.3) -> None:
        """Drops the events received so far (after waiting `settle` seconds for stragglers)."""
        await asyncio.sleep(settle)
        while not self.events.empty():
            self.events.get_nowait()

    async def __aenter__(self) -> Subscription:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task


@contextlib.asynccontextmanager
async def subscribed(base_url: str, query: str, **variables: Any) -> AsyncIterator[Subscription]:
    async with Subscription(base_url, query, **variables) as sub:
        yield sub
