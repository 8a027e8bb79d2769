"""Embedded Chroma in a child process.

Embedded Chroma holds Python's GIL for the whole of each write (a thread ticking every millisecond stalls
110 ms during a 200-vector upsert, 0.6-0.8 s during a 1,024-vector one; chroma-core/chroma#3873 released
it for reads only). In the server process that stalls the event loop, so every request, and the embedder
thread between its ONNX runs. :class:`IsolatedChromaIndex` runs a :class:`ChromaIndex` on the data
directory in a child process instead and forwards every call over a pipe: the writes then run beside
the requests and the embedder, on the other core.

The child is started on first use (spawned, not forked: the parent runs threads). It exits when the
parent closes the index or dies (its end of the pipe reads EOF). If it dies, the calls waiting on it fail
with :class:`VectorIndexError` and the next call starts a new one. A search or a write that the child
does not answer in time (``timeout`` seconds, a quarter second more per collection it touches) fails the
same way, as with a Chroma server that does not answer: the child is left to finish it (killing it
mid-write could damage the collection), its answer then goes nowhere, and the outbox has the work of a
write that failed. Until the child has done such a write, writes of its resources are refused at once
(their work stays in the outbox), so that none can land before it and be overwritten by its older vectors.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import multiprocessing
import os
import pickle
import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import numpy.typing as npt

from models.vector_index import ChromaIndex, Vector, VectorHit, VectorIndexError, VectorItem

log = logging.getLogger("recallql.chroma")

__all__ = ["IsolatedChromaIndex"]


class IsolatedChromaIndex:
    """The interface of :class:`ChromaIndex` (embedded mode), served by a child process."""

    def __init__(
        self, *, path: str | os.PathLike[str], model_name: str, dimension: int, **options: Any
    ) -> None:
        # Validated here, where the mistake is made, rather than in the child on first use.
        checked = ChromaIndex(path=path, model_name=model_name, dimension=dimension, **options)
        self.model_name = model_name
        self.dimension = dimension
        self._options = {"path": os.fspath(path), "model_name": model_name, "dimension": dimension, **options}
        # Seconds a search or a write may take, as with a server (see _PER_COLLECTION_SECONDS).
        self._timeout = checked.timeout
        self._answered: Connection | None = None  # the connection whose child has answered a call
        # Writes that timed out and that the child may still be doing: call id -> (its connection, the
        # resources it writes). See _refuse_behind.
        self._late: dict[int, tuple[Connection, frozenset[str | None]]] = {}
        self._conn: Connection | None = None
        self._process: multiprocessing.process.BaseProcess | None = None
        # Calls waiting for an answer, with the connection they went out on (a child that died fails
        # only its own calls, even when a new child is already serving).
        self._pending: dict[int, tuple[Connection, asyncio.Future[Any]]] = {}
        self._ids = itertools.count()
        self._start_lock = asyncio.Lock()
        self._send_lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"IsolatedChromaIndex(path={self._options['path']!r}, model_name={self.model_name!r}, "
            f"dimension={self.dimension})"
        )

    # -- plumbing ------------------------------------------------------------------------------------

    async def _connection(self) -> Connection:
        async with self._start_lock:
            if self._conn is not None and self._process is not None and self._process.is_alive():
                return self._conn
            context = multiprocessing.get_context("spawn")
            ours, theirs = context.Pipe()
            process = context.Process(
                target=_serve, args=(theirs, self._options), name="recallql-chroma", daemon=True
            )
            await asyncio.to_thread(process.start)
            theirs.close()  # the child's end lives in the child only, so its death reads as EOF here
            self._conn, self._process = ours, process
            reader = threading.Thread(
                target=self._read, args=(ours, asyncio.get_running_loop()), name="recallql-chroma-reader"
            )
            reader.daemon = True
            reader.start()
            return ours

    def _read(self, conn: Connection, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            try:
                call_id, ok, value = conn.recv()
            except (EOFError, OSError):
                break
            loop.call_soon_threadsafe(self._settle, call_id, ok, value)
        # The reader may outlive the loop it reports to (the parent shut down first).
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._lost, conn)

    def _settle(self, call_id: int, ok: bool, value: Any) -> None:
        conn, future = self._pending.pop(call_id, (None, None))
        if conn is not None:
            self._answered = conn
        self._late.pop(call_id, None)
        if future is None or future.done():
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def _lost(self, conn: Connection) -> None:
        if self._conn is conn:
            self._conn = None
        conn.close()
        self._late = {call_id: late for call_id, late in self._late.items() if late[0] is not conn}
        for call_id, (sent_on, future) in list(self._pending.items()):
            if sent_on is conn:
                del self._pending[call_id]
                if not future.done():
                    future.set_exception(VectorIndexError("the Chroma process exited"))

    def _send(self, conn: Connection, data: bytes) -> None:
        with self._send_lock:
            conn.send_bytes(data)

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return await self._call_within(None, method, *args, **kwargs)

    async def _timed(
        self, resources: Iterable[str | None], method: str, *args: Any, write: bool = False, **kwargs: Any
    ) -> Any:
        """A call that serves a request or the write pipeline: it must not wait for ever on a hung child."""
        touched = frozenset(resources)
        if write:
            self._refuse_behind(touched)
        deadline = self._timeout + _PER_COLLECTION_SECONDS * len(touched)
        return await self._call_within(deadline, method, *args, writes=touched if write else None, **kwargs)

    def _refuse_behind(self, resources: frozenset[str | None] | None) -> None:
        """Refuses a write of a resource (None: of any) that a timed-out write still being done by the
        child also writes. Sent now, it could be done first (the child runs calls side by side) and then
        be overwritten with the older vectors; refused, its work stays in the outbox until later."""
        for _, late in self._late.values():
            if resources is None or late & resources:
                busy = sorted(late if resources is None else late & resources, key=str)
                raise VectorIndexError(
                    f"an earlier write of resource {busy[0]!r} that timed out is still being done by the "
                    "Chroma process"
                )

    async def _call_within(
        self,
        deadline: float | None,
        method: str,
        *args: Any,
        writes: frozenset[str | None] | None = None,
        **kwargs: Any,
    ) -> Any:
        conn = await self._connection()
        call_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = (conn, future)
        try:
            await _write(partial(self._send, conn), (call_id, method, args, kwargs))
        except (OSError, ValueError) as exc:  # the pipe broke (or was closed) under us
            self._pending.pop(call_id, None)
            raise VectorIndexError(f"the Chroma process is gone: {exc}") from exc
        if deadline is None:
            return await future
        if self._answered is not conn:
            deadline += _STARTUP_SECONDS  # a child's first call also waits for its imports and Chroma
        try:
            return await asyncio.wait_for(future, deadline)
        except TimeoutError:
            self._pending.pop(call_id, None)  # its answer, if it ever comes, is dropped (_settle)
            if writes is not None:
                self._late[call_id] = (conn, writes)
            raise VectorIndexError(
                f"timed out: the Chroma process did not answer ({method}) within {deadline:g} s"
            ) from None

    # -- the index -----------------------------------------------------------------------------------

    async def upsert(self, items: Iterable[VectorItem]) -> None:
        items = list(items)
        if not items:
            return
        # Rows of one size stack into one array; a wrong-sized one goes as it is, for ChromaIndex in
        # the child to refuse with its own message.
        rows = _Columns.of(items) if len({len(i.vector) for i in items}) == 1 else items
        await self._timed({i.resource_id for i in items}, "upsert", rows, write=True)

    async def delete_messages(self, message_ids: Sequence[str], resource_ids: Iterable[str | None]) -> None:
        resources = list(resource_ids)
        await self._timed(resources, "delete_messages", list(message_ids), resources, write=True)

    async def delete_resource_thread(self, resource_id: str | None, thread_id: str) -> None:
        await self._timed([resource_id], "delete_resource_thread", resource_id, thread_id, write=True)

    async def drop(self, resource_ids: Sequence[str | None] | None = None) -> int:
        self._refuse_behind(None if resource_ids is None else frozenset(resource_ids))
        return int(await self._call("drop", None if resource_ids is None else list(resource_ids)))

    async def query(
        self,
        vector: Vector,
        *,
        resource_ids: Sequence[str | None],
        thread_id: str | None,
        top_k: int,
    ) -> list[VectorHit]:
        hits: list[VectorHit] = await self._timed(
            resource_ids,
            "query",
            list(vector),
            resource_ids=list(resource_ids),
            thread_id=thread_id,
            top_k=top_k,
        )
        return hits

    async def count(self, resource_id: str | None) -> int:
        return int(await self._timed([resource_id], "count", resource_id))

    async def resources(self) -> list[str | None]:
        found: list[str | None] = await self._call("resources")
        return found

    async def stored(self, resource_id: str | None) -> set[tuple[str, int]]:
        found: set[tuple[str, int]] = await self._call("stored", resource_id)
        return found

    async def vectors(
        self, resource_id: str | None, message_ids: Sequence[str]
    ) -> dict[str, dict[int, Vector]]:
        found: dict[str, dict[int, Vector]] = await self._timed(
            [resource_id], "vectors", resource_id, list(message_ids)
        )
        return found

    async def unreachable(self, resource_id: str | None, *, k: int = 10) -> set[str]:
        lost: set[str] = await self._call("unreachable", resource_id, k=k)
        return lost

    async def relink(self, resource_id: str | None) -> set[str]:
        lost: set[str] = await self._call("relink", resource_id)
        return lost

    async def ping(self) -> None:
        await self._timed([], "ping")

    async def aclose(self) -> None:
        process, conn = self._process, self._conn
        if process is None:
            return
        if conn is not None and process.is_alive():
            try:
                await asyncio.wait_for(self._call("aclose"), 30)
            except (VectorIndexError, TimeoutError) as exc:
                log.warning("the Chroma process did not close cleanly: %r", exc)
        await asyncio.to_thread(process.join, 10)
        if process.is_alive():
            process.kill()
            await asyncio.to_thread(process.join, 5)
        self._process = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None


@dataclass(frozen=True, slots=True)
class _Columns:
    """VectorItems as they cross the pipe: one float32 array and plain lists, iterated back into
    VectorItems by ChromaIndex.upsert in the child. A list of VectorItems pickles an array object per
    vector: for 1,000 vectors about 10 ms on the sender's event loop and 8 ms to unpickle in the child,
    against about 1 ms each way for this."""

    message_ids: list[str]
    thread_ids: list[str]
    resource_ids: list[str | None]
    chunks: list[int]
    vectors: npt.NDArray[np.float32]

    @classmethod
    def of(cls, items: Sequence[VectorItem]) -> _Columns:
        return cls(
            [i.message_id for i in items],
            [i.thread_id for i in items],
            [i.resource_id for i in items],
            [i.chunk for i in items],
            np.asarray([i.vector for i in items], dtype=np.float32),
        )

    def __iter__(self) -> Iterator[VectorItem]:
        columns = (self.message_ids, self.thread_ids, self.resource_ids, self.chunks, self.vectors)
        for m, t, r, c, v in zip(*columns, strict=True):
            yield VectorItem(m, t, r, c, v)


# ------------------------------------------------------------------------------------------ the child
def _serve(conn: Connection, options: dict[str, Any]) -> None:
    # Ctrl-C reaches the whole process group: the parent closes this process itself, cleanly.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    asyncio.run(_serve_calls(conn, ChromaIndex(**options)))


async def _serve_calls(conn: Connection, index: ChromaIndex) -> None:
    send_lock = threading.Lock()

    def reply(data: bytes) -> None:
        with send_lock:
            conn.send_bytes(data)

    async def run(call_id: int, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            message: tuple[Any, ...] = (call_id, True, await getattr(index, method)(*args, **kwargs))
        except Exception as exc:
            message = (call_id, False, _portable(exc))
        await _write(reply, message)

    running: set[asyncio.Task[None]] = set()
    while True:
        try:
            call_id, method, args, kwargs = await asyncio.to_thread(conn.recv)
        except (EOFError, OSError):  # the parent is gone
            break
        if method == "aclose":
            await asyncio.gather(*running, return_exceptions=True)
            await index.aclose()
            reply(_dumps((call_id, True, None)))
            return
        # Concurrently, as in the parent: reads do not wait for writes (ChromaIndex orders the writes
        # of one collection itself).
        task = asyncio.create_task(run(call_id, method, args, kwargs))
        running.add(task)
        task.add_done_callback(running.discard)
    # Writes under way end first (their answers go nowhere): closing gives up the directory's lock, and a
    # new server could otherwise open it while this process still writes to it.
    await asyncio.gather(*running, return_exceptions=True)
    await index.aclose()


# What a call may take beyond the deadline per collection it touches: one call here does what a server
# gets a request per collection for (a pipeline batch over 1,000 new resources: about 25 ms of Chroma's
# work each), while a hung child is still noticed after about the deadline.
_PER_COLLECTION_SECONDS = 0.25

# How long a new child may take to serve its first call beyond that call's deadline: spawning, importing
# chromadb, waiting for the directory's lock (10 s, ChromaIndex's lock_timeout) and opening the client.
_STARTUP_SECONDS = 60.0

# A pipe holds 64 KiB: a message this small is written at once while the other side reads, so it is sent
# from the event loop; a larger one from a worker thread.
_INLINE_BYTES = 16 * 1024


def _dumps(message: tuple[Any, ...]) -> bytes:
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


async def _write(send: Callable[[bytes], None], message: tuple[Any, ...]) -> None:
    """Sends a message down the pipe: a small one from the event loop, a large one (an upsert is
    megabytes, written as fast as the other side reads) from a worker thread."""
    data = _dumps(message)
    if len(data) <= _INLINE_BYTES:
        send(data)
    else:
        await asyncio.to_thread(send, data)


def _portable(exc: Exception) -> Exception:
    """The error as the parent can receive it: itself when it pickles, else its text."""
    try:
        pickle.dumps(exc)
    except Exception:
        return VectorIndexError(f"{type(exc).__name__}: {exc}")
    return exc
