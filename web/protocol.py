"""uvicorn's HTTP protocol with a deadline on request headers.

uvicorn bounds the idle time between two requests of a connection (keep-alive) and, through
RECALLQL_BODY_TIMEOUT (web/app.py), a body; nothing bounded the headers. A client that opened a
connection and sent nothing, or a request line and then a header now and then (slowloris), held its
connection for good, and a few hundred of them used up the server's file descriptors. Here the headers
of every request must arrive within RECALLQL_HEADER_TIMEOUT seconds of the connection or of the
request's first byte: a partial request is answered 408 REQUEST_TIMEOUT, a connection that sent nothing
is closed, as a browser's unused preconnection would be.

`recallql serve` selects it by import path (uvicorn's `http` option), so that every worker process
builds it from its own settings.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from web.settings import get_settings

log = logging.getLogger("recallql.http")


def _timed_out(timeout: float) -> bytes:
    message = f"The request headers did not arrive within {timeout:g} seconds."
    body = orjson.dumps({"errors": [{"message": message, "extensions": {"code": "REQUEST_TIMEOUT"}}]})
    head = (
        "HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


class HeaderDeadlineProtocol(HttpToolsProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timeout = get_settings().header_timeout
        self._deadline: asyncio.TimerHandle | None = None
        self._requested = False  # a byte of the awaited request has come
        self._lingering = False  # answered 408: what still comes is dropped until the close

    def data_received(self, data: bytes) -> None:
        if not self._lingering:
            super().data_received(data)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._requested = True
        self._arm()  # a further request of a kept-alive connection

    def on_headers_complete(self) -> None:
        self._disarm()
        self._requested = False
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._deadline is None:
            self._deadline = self.loop.call_later(self._timeout, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    # How long a refused connection is half-closed before it closes. Closed at once, the socket answers
    # what the client still sends with a reset, and a reset can destroy the 408 before the client
    # reads it.
    LINGER = 2.0

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self._arm()  # a pipelined request's stalled headers wait until the response before them is out
            return
        if not self._requested:
            self.transport.close()
            return
        log.info("request headers from %s took more than %g s: 408", self.client, self._timeout)
        self.transport.write(_timed_out(self._timeout))
        self._lingering = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(self.LINGER, self.transport.close)
