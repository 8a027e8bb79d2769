"""A minimal per-request DataLoader: keys asked for in one tick are fetched in one batch."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class DataLoader(Generic[K, V]):
    def __init__(self, batch: Callable[[Sequence[K]], Awaitable[Sequence[V]]]) -> None:
        self._batch = batch
        self._cache: dict[K, asyncio.Future[V]] = {}
        self._queue: list[K] = []
        self._tasks: set[asyncio.Future[None]] = set()
        self.batches = 0  # how many times the batch function ran (N+1 tests read it)

    def load(self, key: K) -> asyncio.Future[V]:
        if key in self._cache:
            return self._cache[key]
        loop = asyncio.get_running_loop()
        future: asyncio.Future[V] = loop.create_future()
        self._cache[key] = future
        self._queue.append(key)
        if len(self._queue) == 1:
            loop.call_soon(self._dispatch)
        return future

    async def load_many(self, keys: Sequence[K]) -> list[V]:
        return list(await asyncio.gather(*(self.load(k) for k in keys)))

    def _dispatch(self) -> None:
        keys, self._queue = self._queue, []
        task = asyncio.ensure_future(self._run(keys))
        # The loop keeps only weak references to tasks: hold this one until it is done.
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, keys: list[K]) -> None:
        self.batches += 1
        try:
            values = await self._batch(keys)
            if len(values) != len(keys):
                raise RuntimeError("a batch function must return one value per key")
        except Exception as exc:  # every waiter sees the failure, none hangs
            for key in keys:
                future = self._cache.pop(key)
                if not future.done():
                    future.set_exception(exc)
            return
        for key, value in zip(keys, values, strict=True):
            future = self._cache[key]
            if not future.done():
                future.set_result(value)
