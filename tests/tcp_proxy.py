"""A small loopback TCP proxy for outage tests: a server points at it instead of its database, and the
test takes the database "away" and brings it back without touching the database itself.

Modes:
  * ``forward`` (the default): every connection is piped to the target.
  * ``refuse``: the listening socket is closed (new connections are refused, as when the database host is
    up but the database is not) and every open connection is cut.
  * ``blackhole``: new connections are accepted and never answered (a database behind a dead network path);
    open connections are cut.
  * ``freeze``: as ``blackhole``, but open connections stay open and carry nothing more (a silent network
    partition: no reset reaches either end); what they sent meanwhile arrives once forwarding resumes.

It runs its own event loop in a daemon thread, so synchronous and asynchronous tests can drive it alike.

    with TcpProxy("127.0.0.1", 5432) as proxy:
        url = f"postgresql+asyncpg://127.0.0.1:{proxy.port}/db"
        proxy.refuse(); ...; proxy.forward()
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Coroutine
from typing import Any


class TcpProxy:
    def __init__(self, target_host: str, target_port: int, *, port: int = 0) -> None:
        self.target = (target_host, target_port)
        with socket.socket() as probe:  # a fixed port, so that refusing and listening again keep it
            probe.bind(("127.0.0.1", port))
            self.port = int(probe.getsockname()[1])
        self.mode = "forward"
        self.accepted = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()
        self._held: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------------ control (any thread)
    def start(self) -> TcpProxy:
        self._thread.start()
        self._run(self._listen())
        return self

    def forward(self) -> None:
        """Pipe new connections to the target again."""
        self._run(self._set_mode("forward"))

    def refuse(self) -> None:
        """Stop listening (connections are refused) and cut every open connection."""
        self._run(self._set_mode("refuse"))

    def blackhole(self) -> None:
        """Accept new connections but never answer them; cut every open connection."""
        self._run(self._set_mode("blackhole"))

    def freeze(self) -> None:
        """Accept new connections but never answer them; open connections carry nothing, and stay open."""
        self._run(self._set_mode("freeze"))

    def cut(self) -> int:
        """Cut every open connection (the mode stays); returns how many were cut."""
        return self._run(self._cut())

    def open_connections(self) -> int:
        return self._run(self._count())

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            self._run(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    # ------------------------------------------------------------------ on the proxy's loop
    async def _count(self) -> int:
        return len(self._connections) + len(self._held)

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(
                self._accept, "127.0.0.1", self.port, reuse_address=True
            )

    async def _unlisten(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    async def _set_mode(self, mode: str) -> None:
        self.mode = mode
        if mode == "refuse":
            await self._unlisten()
        else:
            await self._listen()
        if mode in ("refuse", "blackhole"):
            await self._cut()
        else:  # connections held by the black hole never reached the target: drop them too
            for writer in list(self._held):
                _abort(writer)
            self._held.clear()

    async def _cut(self) -> int:
        doomed = list(self._connections) + list(self._held)
        for writer in doomed:
            _abort(writer)
        self._connections.clear()
        self._held.clear()
        await asyncio.sleep(0)
        return len(doomed)

    async def _shutdown(self) -> None:
        await self._unlisten()
        await self._cut()
        for task in list(self._tasks):
            task.cancel()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.mode in ("blackhole", "freeze"):
            self._held.add(writer)
            return
        if self.mode != "forward":
            _abort(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _abort(writer)
            return
        self._connections.update((writer, up_writer))
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.ensure_future(self._pipe(source, sink, (writer, up_writer)))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
    ) -> None:
        try:
            while data := await source.read(65536):
                while self.mode == "freeze":
                    await asyncio.sleep(0.05)
                sink.write(data)
                await sink.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for writer in pair:
                self._connections.discard(writer)
                _abort(writer)


def _abort(writer: asyncio.StreamWriter) -> None:
    """Closes at once, with a reset where possible (a crashed peer, not a polite goodbye)."""
    transport = writer.transport
    with contextlib.suppress(Exception):
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(Exception):
        transport.abort()
