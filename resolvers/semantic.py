"""Semantic memory: embedding messages into the vector index and searching it.

SQL is the source of truth. Every change to a message is queued in the vector outbox in the same
transaction; `sync` brings the index in line with what SQL holds for those messages (re-embed, or
delete), so a crash between the SQL commit and the vector write is repaired by the next drain.

Requests hand their messages to one write pipeline per process (`submit`): it takes the work of all
waiting requests at once (up to `pipeline_batch` messages), embeds it in one call and writes each
resource's vectors in one index call, and embeds the next batches while the index writes the previous
one. Concurrent saves therefore share embedder batches and vector writes instead of each paying Chroma's
per-call cost, and a stream of saves keeps both the embedder and the index busy. When the index is the
slower of the two (saves spread over many resources: Chroma's cost is per call, not per vector), the
batches embedded meanwhile (up to `merge_batches`) are written together, each resource's vectors of all
of them in one call, so the slower the writes the fewer calls each vector costs. A request hands over
the rows it wrote, so the embedder starts on them while the pipeline reads SQL back; SQL's answer still
decides what is written.

A resource whose collection the index reports damaged (VectorIndexDamaged: Chroma fails every call on it,
or a process died while writing it) is rebuilt from SQL by whichever call meets the damage: all its
messages are queued in the outbox, the collection is dropped, and a background task embeds them again;
searches of the resource wait for that task (within `rebuild_wait`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import logging
import math
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol, TypeVar

from models.db import summary
from models.embedders import Embedder, Embedding, EmbeddingError, chunk_text, embedding_text
from models.records import MessageRecord, OutboxEntry
from models.repository import Repository
from models.vector_index import Vector, VectorHit, VectorIndexDamaged, VectorIndexError, VectorItem
from resolvers.clock import now_ms
from resolvers.errors import ServiceUnavailable
from resolvers.recall import SemanticHit, SemanticResult

log = logging.getLogger("recallql.semantic")

T = TypeVar("T")

# What an endpoint answers for a text (or a request) it will never take, as opposed to an outage or
# a configuration error (401, 403 and 404 refuse every text alike; halving would only multiply them).
_REFUSALS = frozenset({400, 413, 422})
# Held outbox entries the drain leaves out by id (one bound parameter each).
_MAX_HELD = 1000
# Halvings of one batch: about six refused messages in a batch of 1,024 (ten halvings each). Past them,
# or when every message of a batch of _REFUSED_BATCH or more is refused, the endpoint refuses everything.
_SPLIT_BUDGET = 64
_REFUSED_BATCH = 8
# Refusal counts kept (message ids); the oldest are forgotten past it (a deleted message's never clears).
_MAX_REFUSALS = 10_000
# Set inside a rebuild: damage met there fails the rebuild (the outbox keeps its work) instead of
# starting another one that would wait for it.
_REBUILDING: contextvars.ContextVar[bool] = contextvars.ContextVar("recallql_rebuilding", default=False)


class VectorIndex(Protocol):
    async def upsert(self, items: Sequence[VectorItem]) -> None: ...
    async def delete_messages(
        self, message_ids: Sequence[str], resource_ids: Sequence[str | None]
    ) -> None: ...
    async def query(
        self,
        vector: Vector,
        *,
        resource_ids: Sequence[str | None],
        thread_id: str | None,
        top_k: int,
    ) -> list[VectorHit]: ...
    async def drop(self, resource_ids: Sequence[str | None] | None = None) -> int: ...
    async def resources(self) -> list[str | None]: ...
    async def stored(self, resource_id: str | None) -> set[tuple[str, int]]: ...
    async def vectors(
        self, resource_id: str | None, message_ids: Sequence[str]
    ) -> dict[str, dict[int, Vector]]: ...
    async def unreachable(self, resource_id: str | None) -> set[str]: ...
    async def relink(self, resource_id: str | None) -> set[str]: ...
    async def ping(self) -> None: ...
    async def aclose(self) -> None: ...


IndexFactory = Callable[[str, int], VectorIndex]


class VectorPipelineStopped(Exception):
    """The write pipeline stopped (shutdown, or its writer ended) before it wrote a job; the outbox keeps
    the job's work."""


@dataclass(slots=True)
class _Job:
    """One request's messages in the write pipeline; `ticket` orders jobs (they finish in order).
    `stored`: the messages as the request wrote them, for a head start on embedding."""

    ticket: int
    message_ids: list[str]
    done: asyncio.Future[None] = field(repr=False)
    stored: list[MessageRecord] = field(default_factory=list, repr=False)
    # Vectors already in hand for some of `stored` (copied from the messages they copy), by message id.
    known: dict[str, list[VectorItem]] = field(default_factory=dict, repr=False)


@dataclass(slots=True)
class _VectorWork:
    """Outbox entries read from SQL and their messages embedded, before the index is written."""

    entry_ids: list[int]
    stale: dict[str | None, set[str]]  # per resource, messages whose vectors must go
    items: list[VectorItem]
    written: dict[str, MessageRecord | None]  # the rows (None: gone) the work was made from
    last_read: int | None = None  # the newest outbox entry read (settled or held back)

    @property
    def due(self) -> bool:
        """Something to write: entries to settle, or only the old vectors of refused messages to delete."""
        return bool(self.entry_ids or self.stale)


@dataclass(slots=True)
class _Prepared:
    """A pipeline batch: its jobs and their work, or why that could not be prepared."""

    jobs: list[_Job]
    work: _VectorWork | None
    error: BaseException | None = None


@dataclass(slots=True)
class _Rebuild:
    """A damaged resource's rebuild: `dropped` once its old collection is gone, `task` the whole of it."""

    dropped: asyncio.Future[None]
    task: asyncio.Task[None] = field(init=False)


@dataclass(slots=True)
class IndexCheck:
    """How one resource's vectors compare with what SQL holds (message ids, sorted)."""

    resource_id: str | None
    vectors: int  # stored in the resource's collection
    missing: list[str]  # messages SQL files under the resource whose vectors (or some chunk) are absent
    stray: list[str]  # messages with vectors here that SQL does not file under the resource
    # Stored, but Chroma's query for their own vectors does not return them: HNSW left them out of reach
    # (after deletes, chroma-core/chroma#7758; or a lone vector beside a dense cluster).
    unreachable: list[str]
    # The collection cannot be read at all (VectorIndexDamaged): every vector counts as missing.
    damaged: bool = False

    @property
    def ok(self) -> bool:
        return not (self.missing or self.stray or self.unreachable or self.damaged)


def embeddable_text(message: MessageRecord) -> str | None:
    """What Mastra embeds: nothing for system rows; content.content, else the text parts."""
    if message.role == "system":
        return None
    return embedding_text(message.content)


class SemanticMemory:
    def __init__(
        self,
        repository: Repository,
        embedder: Embedder,
        index_factory: IndexFactory,
        *,
        query_cache_size: int = 1000,
        drain_batch: int = 256,
        pipeline_batch: int = 1024,
        background: bool = False,
        max_backlog: int = 2048,
        merge_batches: int = 8,
        rebuild_wait: float = 10.0,
    ) -> None:
        if merge_batches < 1:
            raise ValueError("merge_batches must be positive")
        self.repository = repository
        self.embedder = embedder
        self._index_factory = index_factory
        self._index: VectorIndex | None = None
        self._index_lock = asyncio.Lock()
        self._cache: OrderedDict[str, Embedding] = OrderedDict()
        self._cache_size = query_cache_size
        self._embedding: dict[str, asyncio.Future[Embedding]] = {}  # query embeddings under way
        self.drain_batch = drain_batch
        # The write pipeline (see the module docstring). `background`: saves do not wait for their
        # vectors (searches in this process still see them, see _barrier); a save that finds more
        # than `max_backlog` messages queued (not yet taken by the pipeline) waits for room.
        self.pipeline_batch = pipeline_batch
        self.background = background
        self.max_backlog = max_backlog
        # Batches embedded while the index writes, written together once it is free (1: one at a time).
        self.merge_batches = merge_batches
        self._jobs: deque[_Job] = deque()
        self._backlog = 0  # messages submitted and not finished
        self._queued = 0  # messages submitted and not yet taken into a batch
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        self._tickets = 0
        self._finished = 0  # every job with a ticket <= this has finished
        self._last_ticket: dict[str | None, int] = {}  # the newest job touching each resource
        self._progress: asyncio.Condition | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the one _wake and _progress belong to
        self._applying: list[_Job] = []  # the jobs whose index writes are running
        # Damaged collections being rebuilt from SQL, by resource; searches wait `rebuild_wait` for them.
        self._rebuilds: dict[str | None, _Rebuild] = {}
        self.rebuild_wait = rebuild_wait
        # Outbox entries of messages whose text the embedder refused (see _embed_messages), by entry id:
        # when the drain may try them again. They stay queued, out of the drain's way until then.
        self._held: dict[int, float] = {}
        self._refusals: dict[str, int] = {}  # message id: refusals so far (the hold doubles each time)
        # "cold" (never warmed: what a command line or a test builds), "warming", then "ok" or "failed":
        # after the warm-up, whether the embedder and the index last answered (searches and rechecks).
        self.warm_state = "cold"
        self._recheck: asyncio.Task[None] | None = None
        self._rechecked_at = -math.inf

    async def warm(self, index_timeout: float = 10.0) -> None:
        """Loads the embedding model and opens the vector index now rather than in the first request
        that needs them: the first semantic recall after a start took 1.4 s (the next ones 25 ms), all
        of it model loading and the embedded Chroma's start. A failure (a Chroma server down, or not
        answering within `index_timeout`) is logged: those requests then meet it as they would have."""
        self.warm_state = "warming"
        started = time.perf_counter()
        try:
            warmup = getattr(self.embedder, "warmup", None)
            if warmup is not None:
                await warmup()
            await asyncio.wait_for(self._open_index(), index_timeout)
        except Exception as exc:
            self.warm_state = "failed"
            log.warning("semantic recall not warmed up at start: %s", summary(exc))
            return
        self.warm_state = "ok"
        log.info(
            "semantic recall warmed up in %.1f s: model loaded, vector index open",
            time.perf_counter() - started,
        )

    async def _open_index(self) -> None:
        await (await self.index()).ping()

    def _answered(self, ok: bool) -> None:
        if self.warm_state in ("ok", "failed"):
            if ok and self.warm_state == "failed":
                log.info("semantic recall is answering again")
            self.warm_state = "ok" if ok else "failed"

    def recheck(self, interval: float = 30.0) -> None:
        """After a failure (at the warm-up or in a search), asks the embedder and the index again in the
        background, at most every `interval` seconds: without it, a process that no search reached
        reported "failed" for good however soon the embedder or the Chroma server came back."""
        if self.warm_state != "failed" or (self._recheck is not None and not self._recheck.done()):
            return
        now = time.monotonic()
        if now - self._rechecked_at < interval:
            return
        self._rechecked_at = now
        self._recheck = asyncio.create_task(self._run_recheck())

    async def _run_recheck(self, index_timeout: float = 10.0) -> None:
        try:
            await self.embedder.embed(["ready?"])
            await asyncio.wait_for(self._open_index(), index_timeout)
        except Exception as exc:  # still down: the state says so, the next recheck tries again
            log.debug("semantic recall recheck failed: %s", summary(exc))
            return
        self._answered(True)

    async def index(self) -> VectorIndex:
        """The index for this embedder's identity (model name and dimension), created on first use:
        an HTTP embedder's dimension is only known once it has answered."""
        if self._index is None:
            async with self._index_lock:
                if self._index is None:
                    discover = getattr(self.embedder, "discover_dimension", None)
                    dimension = await discover() if discover else self.embedder.dimension
                    self._index = self._index_factory(self.embedder.name, dimension)
        return self._index

    # ------------------------------------------------------------------ read side
    async def search(
        self,
        text: str,
        *,
        thread_id: str,
        resource_id: str | None,
        resource_scope: bool,
        top_k: int,
        own_resource_only: bool = False,
    ) -> SemanticResult:
        """An embedder or vector index that cannot answer is an outage (SERVICE_UNAVAILABLE) of the
        search only: saves queue their vector work in the outbox, and reads without a search go on.
        `own_resource_only` (a restricted credential): a thread-scoped search reads only `resource_id`'s
        vectors. Other resources' messages in the thread used up topK before being dropped, so whether
        the caller's own message came back told how close a message it may not read was to the query."""
        try:
            embedding = await self._embed_query(text)
            index = await self.index()
        except EmbeddingError as exc:
            log.warning("semantic search: the embedder failed: %s", exc)
            self._answered(False)
            raise ServiceUnavailable(
                f"Semantic search is unavailable: {_embedder_failure(exc)}.", service="embedder"
            ) from exc
        resource_ids: Sequence[str | None]
        if resource_scope or own_resource_only:
            resource_ids = [resource_id]
        else:
            resource_ids = await self.repository.thread_resource_ids(thread_id)
        await self._barrier(resource_ids)
        await self._wait_for_rebuilds(resource_ids)
        hits: list[SemanticHit] = []
        for vector in embedding.vectors:  # one query per chunk of a (very long) query text, as Mastra does
            query = partial(
                index.query,
                vector,
                resource_ids=resource_ids,
                thread_id=None if resource_scope else thread_id,
                top_k=top_k,
            )
            try:
                # A damaged resource is searched again once rebuilt, not while it is being filled.
                found = await self._healing(query, wait=True)
            except VectorIndexError as exc:
                log.warning("semantic search: the vector index failed: %s", exc)
                self._answered(False)
                raise ServiceUnavailable(
                    "Semantic search is unavailable: the vector index cannot be reached.", service="vectors"
                ) from exc
            hits.extend(SemanticHit(h.message_id, h.thread_id, h.score) for h in found)
        self._answered(True)
        usage = {"tokens": embedding.tokens} if embedding.tokens is not None else None
        return SemanticResult(hits=hits, usage=usage)

    async def _embed_query(self, text: str) -> Embedding:
        key = hashlib.sha256(text.encode("utf-8")).hexdigest()
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        flight = self._embedding.get(key)
        if flight is None:
            # Searches of one text at once (a listing's Thread.recall fields, or many users asking the
            # same) share one embedding: the cache only answers those that come after it.
            flight = asyncio.ensure_future(self.embedder.embed(chunk_text(text)))
            self._embedding[key] = flight
            flight.add_done_callback(partial(self._embedded, key))
        # Shielded: a caller that is cancelled (its client gone) leaves the others their embedding.
        return await asyncio.shield(flight)

    def _embedded(self, key: str, flight: asyncio.Future[Embedding]) -> None:
        if self._embedding.get(key) is flight:
            del self._embedding[key]
        if flight.cancelled() or flight.exception() is not None:
            return  # each waiter has it; the next search asks the embedder again
        self._cache[key] = flight.result()
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    # ------------------------------------------------------------------ write side
    async def sync(
        self, message_ids: Sequence[str] | None = None, *, queued_before: int | None = None
    ) -> int:
        """Applies queued changes (of these messages, or the oldest batch) to the index; returns how many
        outbox entries it settled."""
        settled, _ = await self._sync(message_ids, queued_before=queued_before)
        return settled

    async def _sync(
        self,
        message_ids: Sequence[str] | None,
        *,
        queued_before: int | None = None,
        after: int | None = None,
    ) -> tuple[int, int | None]:
        """sync, also returning the newest entry it read (None: it read none)."""
        work = await self._load(message_ids, queued_before=queued_before, after=after)
        if work.due:
            await self._store(work)
        return len(work.entry_ids), work.last_read

    async def _load(
        self,
        message_ids: Sequence[str] | None,
        *,
        queued_before: int | None = None,
        after: int | None = None,
        ahead: Mapping[str, MessageRecord] | None = None,
        known: Mapping[str, Sequence[VectorItem]] | None = None,
    ) -> _VectorWork:
        """The queued entries (of these messages, or the oldest batch) with what SQL holds now,
        embedded. `ahead`: embeddable messages as their requests wrote them (a save's almost always
        read back unchanged); they are embedded while SQL is read, so the embedder does not wait for
        the read, and their vectors are kept where SQL still holds them as written. `known`: vectors
        of some of `ahead` in hand already (not embedded), kept on the same terms."""
        known = known or {}
        fresh = [m for m in (ahead or {}).values() if m.id not in known]
        early = asyncio.ensure_future(self._embed_messages(fresh)) if fresh else None
        try:
            entries, rows = await self.repository.outbox_snapshot(
                message_ids=message_ids,
                limit=max(self.drain_batch, len(message_ids or ()) * 4),
                queued_before=queued_before,
                after=after,
                # The drain leaves a resource being rebuilt to its rebuild, which would embed it again.
                skip_resources=[] if message_ids is not None else self._rebuilding(),
                skip_entries=[] if message_ids is not None else self._holding(),
            )
            embedded, refused_early = await early if early is not None else ([], set())
        finally:
            if early is not None:
                early.cancel()  # only when the read failed: the vectors would have no use
        current = [m for m in rows.values() if embeddable_text(m) is not None]
        unchanged = {m.id for m in current if ahead and m.id in ahead and _same_vectors(ahead[m.id], m)}
        items = [item for item in embedded if item.message_id in unchanged]
        items.extend(item for i in unchanged if i in known for item in known[i])
        more, refused = await self._embed_messages([m for m in current if m.id not in unchanged])
        items.extend(more)
        refused |= refused_early & unchanged
        stale = _stale_vectors(entries, rows)
        for message_id in refused:  # vectors of an earlier text would now stand for a text they miss
            stale.setdefault(rows[message_id].resource_id, set()).add(message_id)
        self._hold([e for e in entries if e.message_id in refused])
        written: dict[str, MessageRecord | None] = {e.message_id: None for e in entries} | rows
        entry_ids = [e.id for e in entries if e.id is not None and e.message_id not in refused]
        last_read = max((e.id for e in entries if e.id is not None), default=None)
        kept = {k: v for k, v in written.items() if k not in refused}
        return _VectorWork(entry_ids, stale, items, kept, last_read)

    def _hold(self, entries: Sequence[OutboxEntry]) -> None:
        """Keeps the entries of refused messages queued but out of the drain's way for a while (1 minute,
        doubling to an hour per refusal): tried first, one such message held every message queued after
        it, the drain taking the same oldest batch again and again."""
        now = time.monotonic()
        for message_id in {e.message_id for e in entries}:
            self._refusals[message_id] = self._refusals.pop(message_id, 0) + 1  # to the end: newest
        while len(self._refusals) > _MAX_REFUSALS:
            del self._refusals[next(iter(self._refusals))]
        for entry in entries:
            if entry.id is not None:
                self._held[entry.id] = now + min(60.0 * 2 ** (self._refusals[entry.message_id] - 1), 3600.0)

    def _holding(self) -> list[int]:
        """The held entries whose time has not come, the oldest _MAX_HELD of them (a drain pass reads
        each entry once, so one left out of this list is refused once more per pass, no more)."""
        now = time.monotonic()
        for entry_id in [e for e, until in self._held.items() if until <= now]:
            del self._held[entry_id]
        return sorted(self._held)[:_MAX_HELD]

    async def _store(self, work: _VectorWork, *, again: bool = True) -> None:
        """Stale vectors out, new ones in, then the entries settled (a crash before that repeats it).
        A damaged collection is dropped (its rebuild queued) and the work written again on a new one.
        Messages SQL changed meanwhile are queued again (see Repository.outbox_done) and, unless `again`
        is off, written again at once: another writer's newer vectors may just have been overwritten."""
        index = await self.index()

        async def write() -> None:
            for resource, ids in work.stale.items():
                await index.delete_messages(sorted(ids), [resource])
            if work.items:
                await index.upsert(work.items)

        try:
            await self._healing(write)
        except BaseException:
            # Part of the write may have landed before it failed (a delete, an upsert whose answer was
            # lost), over a newer version another writer wrote and settled meanwhile: what changed since
            # the read is queued again for the drain. The rest keeps its entries, or was written by
            # whoever settled them; either way whatever landed of it was the current version.
            with contextlib.suppress(Exception):
                if changed := await asyncio.shield(self.repository.outbox_done([], work.written)):
                    log.info("%d message(s) changed before a failed vector write; queued again", len(changed))
            raise
        changed = await self.repository.outbox_done(work.entry_ids, work.written)
        if changed:
            log.info(
                "%d message(s) changed while their vectors were written; writing them again", len(changed)
            )
            if again:  # once: a message that changes faster than that is left to the drain
                await self._store(await self._load(changed), again=False)

    async def _healing(self, call: Callable[[], Awaitable[T]], *, wait: bool = False) -> T:
        """Runs index calls; a damaged collection they meet is dropped (its rebuild from SQL queued)
        and they run again, now on a new collection, once per resource. `wait`: only once that
        resource's rebuild has ended (a search), not as soon as its collection is gone (a write)."""
        healed: set[str | None] = set()
        while True:
            try:
                return await call()
            except VectorIndexDamaged as exc:
                if exc.resource_id in healed:
                    raise
                healed.add(exc.resource_id)
                await self._heal(exc)
                if wait:
                    await self._wait_for_rebuilds([exc.resource_id])

    # ------------------------------------------------------------------ damaged collections
    async def _heal(self, damage: VectorIndexDamaged) -> None:
        """Starts the rebuild of a damaged resource from SQL (unless one is under way) and returns once
        its old collection is gone: its messages queued in the outbox first, so that a crash at any point
        leaves the work to the next drain, then the collection dropped. The rest runs in the background
        (searches of the resource wait for it, see _wait_for_rebuilds)."""
        resource_id = damage.resource_id
        rebuild = self._rebuilds.get(resource_id)
        if rebuild is None or rebuild.task.done():
            if _REBUILDING.get():
                raise damage
            rebuild = _Rebuild(asyncio.get_running_loop().create_future())
            # Said here, where the request that met the damage is known (its id on the log line); the
            # rebuild itself is the server's own work and runs in a context of its own.
            log.error("%s; rebuilding its vectors from the database", damage)
            rebuild.task = asyncio.create_task(
                self._rebuild(damage, rebuild),
                name=f"recallql-rebuild-vectors-{resource_id}",
                context=contextvars.Context(),
            )
            self._rebuilds[resource_id] = rebuild
            rebuild.task.add_done_callback(partial(self._rebuild_ended, resource_id, rebuild))
        await asyncio.shield(rebuild.dropped)

    async def _rebuild(self, damage: VectorIndexDamaged, rebuild: _Rebuild) -> None:
        _REBUILDING.set(True)
        resource_id = damage.resource_id
        started = time.monotonic()
        try:
            queued = await self.repository.outbox_queue_resource(resource_id)
            await (await self.index()).drop([resource_id])
        except Exception as exc:
            rebuild.dropped.set_exception(exc)
            raise
        rebuild.dropped.set_result(None)
        pages = self._messages_in_order(
            resource_id, batch=self.pipeline_batch, without_resource=resource_id is None
        )

        async def load(rows: list[MessageRecord]) -> Callable[[], Awaitable[None]] | None:
            work = await self._load([m.id for m in rows])
            return partial(self._store, work) if work.due else None

        # Pages hold distinct messages, so their outbox entries settle in any order.
        await _overlapped(pages, load)
        log.warning(
            "vectors of resource %r rebuilt from the database (%d messages) in %.1fs",
            resource_id,
            queued,
            time.monotonic() - started,
        )

    def _rebuild_ended(self, resource_id: str | None, rebuild: _Rebuild, task: asyncio.Task[None]) -> None:
        if self._rebuilds.get(resource_id) is rebuild:
            del self._rebuilds[resource_id]
        if not rebuild.dropped.done():
            # Stopped (shutdown), maybe before it began: for the writes that wait for the drop, a failure
            # of their own, not a cancellation, which would end the write pipeline one of them runs in.
            rebuild.dropped.set_exception(
                VectorIndexError(f"the rebuild of resource {resource_id!r} was stopped")
            )
        rebuild.dropped.exception()  # retrieved here: an error no write waited for is not reported
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.warning(
                "rebuild of the vectors of resource %r stopped; the outbox drain goes on: %r",
                resource_id,
                exc,
            )

    async def _wait_for_rebuilds(self, resource_ids: Iterable[str | None]) -> None:
        """Waits for the rebuilds under way of these resources: a search must not answer from a
        collection still being filled. SERVICE_UNAVAILABLE when one fails or takes longer than
        `rebuild_wait` (the outbox drain finishes it)."""
        tasks = [r.task for resource in resource_ids if (r := self._rebuilds.get(resource)) is not None]
        if not tasks:
            return
        done, pending = await asyncio.wait(tasks, timeout=self.rebuild_wait)
        if pending or any(t.cancelled() or t.exception() is not None for t in done):
            raise ServiceUnavailable(
                "Semantic search is unavailable for now: the vector index of this memory was damaged and "
                "is being rebuilt from the database; try again shortly.",
                service="vectors",
            )

    def _rebuilding(self) -> list[str | None]:
        return [resource for resource, r in self._rebuilds.items() if not r.task.done()]

    async def rebuilt(self) -> None:
        """Waits until every rebuild under way has ended (whichever way)."""
        while tasks := [r.task for r in self._rebuilds.values()]:
            await asyncio.wait(tasks)

    async def _embed_messages(self, messages: Sequence[MessageRecord]) -> tuple[list[VectorItem], set[str]]:
        """The messages' vectors, and the ids of those whose text the embedder refuses. An endpoint that
        refuses one text (content policy, too long for its model) or a request too large for it (more
        inputs than it takes) refuses the whole request: the batch is halved until what it accepts is
        embedded and each refused message stands alone. An endpoint that refuses every message of a
        batch of some size, or refuses again and again while it is halved, refuses everything (a wrong
        model name, an unsupported option): that is an outage, raised for the drain to back off from,
        rather than a request per message every second."""
        items, refused = await self._embed_halving(messages, [_SPLIT_BUDGET])
        if len(messages) >= _REFUSED_BATCH and len(refused) == len(messages):
            raise EmbeddingError(f"the embedder refused all {len(messages)} messages of a batch")
        return items, refused

    async def _embed_halving(
        self, messages: Sequence[MessageRecord], budget: list[int]
    ) -> tuple[list[VectorItem], set[str]]:
        texts: list[str] = []
        owners: list[tuple[MessageRecord, int]] = []
        for message in messages:
            for n, chunk in enumerate(chunk_text(embeddable_text(message) or "")):
                texts.append(chunk)
                owners.append((message, n))
        if not texts:
            return [], set()
        try:
            embedding = await self.embedder.embed(texts)
        except EmbeddingError as exc:
            if exc.status_code not in _REFUSALS:
                raise
            if len(messages) == 1:
                log.warning(
                    "the embedder refused the text of message %r, which stays without vectors (tried "
                    "again later, and by `recallql reindex`): %s",
                    messages[0].id,
                    exc,
                )
                return [], {messages[0].id}
            budget[0] -= 1
            if budget[0] < 0:
                raise EmbeddingError(f"the embedder kept refusing while a batch was halved: {exc}") from exc
            half = len(messages) // 2
            first, second = await asyncio.gather(
                self._embed_halving(messages[:half], budget), self._embed_halving(messages[half:], budget)
            )
            return first[0] + second[0], first[1] | second[1]
        if self._refusals:
            for message in messages:
                self._refusals.pop(message.id, None)
        return [
            VectorItem(
                message_id=m.id,
                thread_id=m.thread_id,
                resource_id=m.resource_id,
                chunk=n,
                vector=vector,
            )
            for (m, n), vector in zip(owners, embedding.vectors, strict=True)
        ], set()

    # ------------------------------------------------------------------ the write pipeline
    def submit(
        self,
        message_ids: Sequence[str],
        resource_ids: Iterable[str | None],
        stored: Sequence[MessageRecord] = (),
        known: Mapping[str, Sequence[VectorItem]] | None = None,
    ) -> asyncio.Future[None]:
        """Queues these messages' vector work; the future is done once the index matches SQL for them
        (or holds the error: the outbox keeps the work for the drain). `resource_ids`: the resources
        whose searches must wait for this work (background mode). `stored`: some of the messages as
        the caller has just written them; the pipeline embeds those while it reads SQL, and keeps the
        vectors of each one SQL still holds as written. `known`: vectors of some of `stored` that need
        no embedding (see copied_vectors), kept on the same terms."""
        loop = asyncio.get_running_loop()
        if self._wake is None or self._progress is None or self._loop is not loop:
            # Kept when a stopped pipeline is replaced: whoever waits on progress (flush, searches,
            # saves waiting for room) is woken by the next pipeline too.
            self._wake, self._progress, self._loop = asyncio.Event(), asyncio.Condition(), loop
        if self._worker is None or self._worker.done():
            # The pipeline serves every request from now on: not in the context (the request id on
            # log lines) of the one that happens to start it.
            self._worker = loop.create_task(
                self._run_pipeline(), name="recallql-vector-pipeline", context=contextvars.Context()
            )
        self._tickets += 1
        # Past the backlog (the embedder or the index stalls while saves go on answering after their
        # timeouts), a job keeps only its ids: the rows are a head start the pipeline can do without, and
        # would otherwise pile up in memory for as long as the stall lasts.
        ahead = list(stored) if self._queued <= self.max_backlog else []
        held = {m.id for m in ahead}
        reuse = {i: list(items) for i, items in (known or {}).items() if i in held}
        job = _Job(self._tickets, list(dict.fromkeys(message_ids)), loop.create_future(), ahead, reuse)
        for resource in resource_ids:
            self._last_ticket[resource] = job.ticket
        self._jobs.append(job)
        self._backlog += len(job.message_ids)
        self._queued += len(job.message_ids)
        self._wake.set()
        return job.done

    async def room(self, timeout: float) -> bool:
        """Waits (within `timeout`) until no more than `max_backlog` messages are queued for the
        pipeline; False when the time ran out first.

        Background saves wait here rather than for their own vectors: the queue then stays full while
        the pipeline works, so it goes on taking whole batches (a save waiting for its own vectors
        leaves the pipeline nothing but that save's messages to take next)."""
        if self._queued <= self.max_backlog or self._progress is None:
            return True
        progress = self._progress
        try:
            async with asyncio.timeout(timeout), progress:
                await progress.wait_for(lambda: self._queued <= self.max_backlog)
        except TimeoutError:
            return False
        return True

    async def _run_pipeline(self) -> None:
        assert self._wake is not None and self._progress is not None
        # Batches embedded and not yet handed to the writer, oldest first; the writer takes all of them
        # whenever it is free, so they queue up only while a write takes longer than an embedding.
        ready: list[_Prepared] = []
        changed = asyncio.Condition()
        jobs: list[_Job] = []

        async def write_ready() -> None:
            while True:
                async with changed:
                    await changed.wait_for(lambda: bool(ready))
                    batches = ready.copy()
                    ready.clear()
                    changed.notify_all()
                # The writes stay in order, batch after batch: a message saved twice ends with its
                # newer vectors.
                await self._apply(batches)

        # Inherits this task's empty context (see submit), as the pipeline must.
        writer = asyncio.create_task(write_ready(), name="recallql-vector-writer")
        # _apply settles every failure on its jobs; should it raise all the same, the pipeline stops
        # (its jobs fail, the outbox keeps their work) and the next submit starts a new one.
        pipeline = asyncio.current_task()
        assert pipeline is not None

        def writer_stopped(stopped: asyncio.Task[None]) -> None:
            # Only a writer that ended by itself gets here (the finally below unhooks this first). An
            # exception is logged there; a cancellation nobody asked for would otherwise pass unseen.
            if stopped.cancelled():
                log.error("the vector writer was cancelled; the pipeline stops, the outbox keeps its work")
            pipeline.cancel()

        writer.add_done_callback(writer_stopped)
        try:
            while True:
                if not self._jobs:
                    self._wake.clear()
                    await self._wake.wait()
                async with changed:
                    await changed.wait_for(lambda: len(ready) < self.merge_batches)
                jobs = []
                size = 0
                while self._jobs and (
                    not jobs or size + len(self._jobs[0].message_ids) <= self.pipeline_batch
                ):
                    job = self._jobs.popleft()
                    jobs.append(job)
                    size += len(job.message_ids)
                self._queued -= size
                async with self._progress:
                    self._progress.notify_all()  # saves waiting for room (background mode)
                # Embedding this batch overlaps the index writes of the ones before it.
                prepared = await self._prepare(jobs)
                async with changed:
                    ready.append(prepared)
                    jobs = []
                    changed.notify_all()
        finally:
            writer.remove_done_callback(writer_stopped)
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                try:
                    await writer
                except Exception:
                    log.exception("the vector write pipeline stopped")
            # Stopped mid-batch (shutdown, or the writer ended): the outbox keeps the work. The jobs taken
            # from the queue fail, so that a save waiting for its vectors answers as after a failed write
            # (it used to get a CancelledError of its own), and waiters on progress see them finished.
            taken = [*jobs, *(j for batch in ready for j in batch.jobs), *self._applying]
            self._applying = []
            if taken:
                self._abandon(taken)
                self._finished = max(self._finished, max(job.ticket for job in taken))
                progress = self._progress
                async with progress:
                    progress.notify_all()

    def _abandon(self, jobs: Iterable[_Job]) -> None:
        """Fails the jobs the pipeline will not write; their outbox entries stay for the drain."""
        for job in jobs:
            if not job.done.done():
                self._backlog -= len(job.message_ids)
                job.done.set_exception(VectorPipelineStopped("the vector pipeline stopped"))
                job.done.exception()  # retrieved: an abandoned future (background mode) logs nothing

    async def _prepare(self, jobs: list[_Job]) -> _Prepared:
        try:
            return _Prepared(
                jobs,
                await self._load(
                    [i for job in jobs for i in job.message_ids], ahead=_ahead(jobs), known=_known(jobs)
                ),
            )
        except Exception as exc:  # the jobs fail; their outbox entries stay for the drain
            return _Prepared(jobs, None, error=exc)

    async def _apply(self, batches: list[_Prepared]) -> None:
        """Writes these batches' work, merged (one index call per resource for all of them), then
        settles their jobs in order: each with the error that kept its batch from being prepared, or the
        write's."""
        jobs = [job for batch in batches for job in batch.jobs]
        self._applying = jobs
        write_error: BaseException | None = None
        work = _merged([b.work for b in batches if b.work is not None and b.error is None])
        if work is not None and work.due:
            try:
                await self._store(work)
            except Exception as exc:
                write_error = exc
        for batch in batches:
            error = batch.error or write_error
            for job in batch.jobs:
                self._backlog -= len(job.message_ids)
                if not job.done.done():
                    if error is None:
                        job.done.set_result(None)
                    else:
                        job.done.set_exception(error)
                        # Retrieved here so that an abandoned future (background mode) logs nothing more.
                        job.done.exception()
            if batch.error is not None and self.background:
                log.warning("vector write deferred to the outbox drain: %r", batch.error)
        if write_error is not None and self.background:
            log.warning("vector write deferred to the outbox drain: %r", write_error)
        self._applying = []
        self._finished = jobs[-1].ticket
        if len(self._last_ticket) > 4096:  # resources whose work is all done need no entry
            self._last_ticket = {r: t for r, t in self._last_ticket.items() if t > self._finished}
        assert self._progress is not None
        async with self._progress:
            self._progress.notify_all()

    async def _barrier(self, resource_ids: Sequence[str | None], timeout: float = 10.0) -> None:
        """Waits until the vector work queued in this process for these resources before now is done, so
        that a search sees what a save acknowledged (background mode; in wait mode saves waited)."""
        await self._finish(max((self._last_ticket.get(r, 0) for r in resource_ids), default=0), timeout)

    async def flush(self, timeout: float = 30.0) -> bool:
        """Waits until every message submitted so far has its vectors (or failed to the outbox); False
        when `timeout` ran out first."""
        return await self._finish(self._tickets, timeout)

    async def _finish(self, ticket: int, timeout: float) -> bool:
        if ticket <= self._finished or self._progress is None:
            return True
        progress = self._progress
        try:
            async with asyncio.timeout(timeout), progress:
                await progress.wait_for(lambda: self._finished >= ticket)
        except TimeoutError:
            return False
        return True

    async def reindex(
        self,
        *,
        resource_id: str | None = None,
        without_resource: bool = False,
        batch: int | None = None,
        on_progress: Callable[[int], None] | None = None,
        rebuild: bool = False,
    ) -> int:
        """Re-embeds every message (of one resource, those without one with `without_resource`, or all)
        from SQL; returns how many were read. With `rebuild`, the resource's collection (or every
        collection of this embedder) is dropped first, so that the index ends holding exactly what SQL
        holds; searches of those resources find nothing until their messages are written again.
        `on_progress(n)`: n more messages are in the index.

        A page (`batch`, by default the pipeline's batch) is read and embedded while the index writes the
        page before (reindex-2026-12-03.md, one resource of 4,000 chat messages: 641 messages/s in pages
        of 1,024, against 557/s one step at a time in pages of 256, as before; 91% of the embedder alone
        in calls of 1,024)."""
        index = await self.index()
        one = resource_id is not None or without_resource
        if rebuild:
            await index.drop([resource_id] if one else None)

        async def embed(rows: list[MessageRecord]) -> Callable[[], Awaitable[None]] | None:
            embeddable = [m for m in rows if embeddable_text(m) is not None]
            items, _refused = await self._embed_messages(embeddable)  # each one logged
            work = _VectorWork([], {}, items, {m.id: m for m in embeddable})
            return partial(self._store, work) if items else None

        pages = self._messages_in_order(
            resource_id, batch=batch or self.pipeline_batch, without_resource=without_resource
        )
        done = await _overlapped(pages, embed, on_progress)
        # The rebuilds the pages started first: what one of them could not finish is the drain's.
        await self.rebuilt()
        await self.drain()
        return done

    async def check(
        self,
        *,
        resource_id: str | None = None,
        without_resource: bool = False,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> list[IndexCheck]:
        """Compares the index with SQL, resource by resource (one, the null resource with
        `without_resource`, or every resource with messages or a collection), once the outbox is
        drained: vectors missing, vectors that should not be there, and vectors Chroma holds but its
        query cannot reach. `on_progress(done, total)` per resource.

        Meant for a quiet index (the embedded one is only open to one process anyway): a save during the
        check can show up as missing or stray."""
        await self.drain()
        if self._rebuilds:  # the drain met a damaged collection
            await self.rebuilt()
            await self.drain()
        index = await self.index()
        resources = (
            [resource_id]
            if resource_id is not None or without_resource
            else list(
                dict.fromkeys([*await self.repository.message_resource_ids(), *await index.resources()])
            )
        )
        checks: list[IndexCheck] = []
        for done, resource in enumerate(resources, 1):
            # One resource at a time: memory stays that of the largest resource, not of the whole store.
            wanted = await self._expected_vectors(resource)
            try:
                stored = await index.stored(resource)
                unreachable = await index.unreachable(resource)
            except VectorIndexDamaged:
                stored, unreachable, damaged = set(), set(), True
            else:
                damaged = False
            checks.append(
                IndexCheck(
                    resource_id=resource,
                    vectors=len(stored),
                    missing=sorted({m for m, _ in wanted - stored}),
                    stray=sorted({m for m, _ in stored - wanted}),
                    unreachable=sorted(unreachable),
                    damaged=damaged,
                )
            )
            if on_progress is not None:
                on_progress(done, len(resources))
        return checks

    async def _expected_vectors(self, resource_id: str | None) -> set[tuple[str, int]]:
        """(message id, chunk) of every vector SQL says this resource's collection should hold."""
        wanted: set[tuple[str, int]] = set()
        pages = self._messages_in_order(resource_id, batch=1000, without_resource=resource_id is None)
        async for rows in pages:
            for message in rows:
                text = embeddable_text(message)
                if text is not None:
                    wanted.update((message.id, n) for n in range(len(chunk_text(text))))
        return wanted

    async def _messages_in_order(
        self, resource_id: str | None, *, batch: int, without_resource: bool = False
    ) -> AsyncIterator[list[MessageRecord]]:
        """Pages of messages in a stable order (see Repository.messages_in_order)."""
        after: MessageRecord | None = None
        while rows := await self.repository.messages_in_order(
            after=after, limit=batch, resource_id=resource_id, without_resource=without_resource
        ):
            yield rows
            after = rows[-1]

    async def repair(self, checks: Sequence[IndexCheck]) -> list[str | None]:
        """Mends the resources a check found wrong; returns those resources. A collection missing
        vectors, holding strays or damaged is rebuilt (dropped, then refilled from SQL); then the records
        Chroma's query cannot reach are written again (`relink`), which a rebuild alone does not do: the
        same vectors build the same graph, with the same records out of reach."""
        broken = [c for c in checks if not c.ok]
        for check in broken:
            resource = check.resource_id
            if check.missing or check.stray or check.damaged:
                await self.reindex(resource_id=resource, without_resource=resource is None, rebuild=True)
            await self.relink([resource])
        return [c.resource_id for c in broken]

    async def relink(
        self,
        resource_ids: Sequence[str | None] | None = None,
        *,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> dict[str | None, set[str]]:
        """Writes again, one at a time, the records of these resources' collections (by default every
        one) that Chroma's query cannot reach (ChromaIndex.relink). Returns, by resource, the messages
        still out of reach: none, as a rule. `on_progress(done, total)` per resource."""
        index = await self.index()
        resources = list(resource_ids) if resource_ids is not None else await index.resources()
        still: dict[str | None, set[str]] = {}
        for done, resource in enumerate(resources, 1):
            lost = await index.relink(resource)
            if lost:
                still[resource] = lost
            if on_progress is not None:
                on_progress(done, len(resources))
        return still

    async def copied_vectors(
        self, pairs: Sequence[tuple[MessageRecord, MessageRecord]], *, moved: bool = False
    ) -> dict[str, list[VectorItem]]:
        """For (source, copy) pairs of messages of the same text: the source's stored vectors as the
        copy's, by copy id, so that the copy is not embedded again. A clone's copies are new messages
        made from the sources it read; `moved`: the pairs are instead the rows a move (a transfer to
        another resource) left behind and wrote, of the same message, whose vectors are still in the
        old resource's collection.

        Only where the index holds the vectors of the source's text: the source has no vector work
        queued (a moved one, only the move's own) before the index is read nor after it, and SQL still
        holds what the caller wrote (the source, for a clone; the moved row) — a change in between
        queues work, which a writer settles only once its vectors are written. Anything less (no
        vectors, a chunk missing, a failing index) leaves the copy to the embedder."""
        candidates = [
            (source, copy)
            for source, copy in pairs
            if (text := embeddable_text(source)) is not None and text == embeddable_text(copy)
        ]
        if not candidates:
            return {}
        ids = [source.id for source, _ in candidates]
        allowed = 1 if moved else 0  # a move queued one entry for each message it moved

        def busy(queued: Mapping[str, int], message_id: str) -> bool:
            return queued.get(message_id, 0) != allowed

        try:
            before = await self.repository.outbox_queued(ids)
            index = await self.index()
            stored: dict[str, dict[int, Vector]] = {}
            by_resource: dict[str | None, list[str]] = {}
            for source, _ in candidates:
                if not busy(before, source.id):
                    by_resource.setdefault(source.resource_id, []).append(source.id)
            for resource_id, message_ids in by_resource.items():
                stored.update(await index.vectors(resource_id, message_ids))
            after = await self.repository.outbox_queued(ids)
            now = await self.repository.get_messages(ids)  # a moved copy has its source's id
        except Exception as exc:  # an optimisation only: the embedder does the work instead
            log.info("vectors of %d copied message(s) not copied, embedded instead: %r", len(ids), exc)
            return {}
        known: dict[str, list[VectorItem]] = {}
        for source, copy in candidates:
            chunks = stored.get(source.id, {})
            expected = len(chunk_text(embeddable_text(copy) or ""))
            written = copy if moved else source
            if (
                busy(before, source.id)
                or busy(after, source.id)
                or now.get(written.id) != written
                or sorted(chunks) != list(range(expected))
            ):
                continue
            known[copy.id] = [
                VectorItem(copy.id, copy.thread_id, copy.resource_id, chunk, vector)
                for chunk, vector in sorted(chunks.items())
            ]
        return known

    async def release(self, message_ids: Sequence[str]) -> None:
        """Hands these messages' vector work to the background drain at once."""
        await self.repository.outbox_release(message_ids)

    async def drain(self, *, grace: float = 0.0, on_progress: Callable[[int], None] | None = None) -> int:
        """Settles the outbox; returns how many entries it settled. With a grace period, entries younger
        than it are left to the request that queued them (it writes them itself right after commit),
        so that they are not embedded twice. It goes through the queue once, oldest first, past batches
        that settle nothing (their messages refused and held back): it used to stop at the first such
        batch, leaving the entries behind it queued."""
        queued_before = now_ms() - int(grace * 1000) if grace else None
        total = 0
        after: int | None = None
        while True:
            settled, after = await self._sync(None, queued_before=queued_before, after=after)
            total += settled
            if on_progress is not None and settled:
                on_progress(settled)
            if after is None:
                return total

    async def run_drainer(
        self, interval: float = 1.0, *, grace: float = 15.0, longest_wait: float = 15.0
    ) -> None:
        """Background loop: drains the outbox, backing off while the embedder or the index is down, to
        at most `longest_wait` between tries (at 60 s, what was saved during an outage of a minute or
        more stayed out of searches for up to a minute after Chroma was back). The first pass takes
        everything (what a crashed process left); later ones leave the entries of the last `grace`
        seconds to their requests."""
        delay = interval
        first = True
        while True:
            try:
                await self.drain(grace=0.0 if first else grace)
                first = False
                delay = interval
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # an outage must not kill the loop; the outbox keeps the work
                log.warning("vector outbox drain failed, retrying in %.0fs: %s", delay, summary(exc))
                delay = min(delay * 2, longest_wait)
            await asyncio.sleep(delay)

    async def _stop_rebuilds(self) -> None:
        while rebuilding := [r.task for r in self._rebuilds.values() if not r.task.done()]:
            for task in rebuilding:  # the outbox keeps what they had left to do
                task.cancel()
            await asyncio.gather(*rebuilding, return_exceptions=True)

    async def aclose(self, *, flush_timeout: float = 10.0) -> None:
        if self._recheck is not None:
            self._recheck.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._recheck
        await self._stop_rebuilds()
        if self._worker is not None:
            # Background saves were acknowledged before their vectors: write them before going, within
            # reason. Whatever is left stays in the outbox for the next start's drain.
            if self._jobs or self._finished < self._tickets:
                await self.flush(flush_timeout)
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._worker
            self._worker = None
            self._abandon(self._jobs)
            self._jobs.clear()
            self._queued = 0
            self._finished = self._tickets
            if self._progress is not None:
                async with self._progress:
                    self._progress.notify_all()  # saves waiting for room: there is no queue any more
        await self._stop_rebuilds()  # and any the flush started
        if flights := list(self._embedding.values()):
            # The searches waiting for them get their answer (or the embedder's error), not a cancel.
            _, late = await asyncio.wait(flights, timeout=flush_timeout)
            for flight in late:
                flight.cancel()
        if self._index is not None:
            with contextlib.suppress(Exception):
                await self._index.aclose()
        await self.embedder.aclose()


def _embedder_failure(exc: EmbeddingError) -> str:
    """What a client is told: "cannot be reached" sent operators after a network fault when the
    endpoint had answered, refusing the key or sending vectors of another model (the log has its words)."""
    if exc.unreachable:
        return "the embedder cannot be reached"
    if exc.status_code is not None:
        return f"the embedder answered HTTP {exc.status_code}"
    return "the embedder's answer could not be used"


async def _overlapped(
    pages: AsyncIterator[list[MessageRecord]],
    prepare: Callable[[list[MessageRecord]], Awaitable[Callable[[], Awaitable[None]] | None]],
    on_written: Callable[[int], None] | None = None,
) -> int:
    """Runs `prepare` on each page (read, embed) while the write it returned for the page before runs
    (None: nothing to write); returns the messages paged. `on_written(n)`: a page of n is written.
    A failure stops the pages and leaves no write running."""
    done = 0
    # The page being written: its write and its size.
    writing: tuple[asyncio.Future[None] | None, int] | None = None

    async def written() -> None:
        assert writing is not None
        if writing[0] is not None:
            await writing[0]
        if on_written is not None:
            on_written(writing[1])

    try:
        async for rows in pages:
            write = await prepare(rows)
            if writing is not None:
                await written()
            writing = (asyncio.ensure_future(write()) if write is not None else None, len(rows))
            done += len(rows)
        if writing is not None:
            await written()
    finally:
        future = writing[0] if writing is not None else None
        if future is not None and not future.done():
            future.cancel()
        elif future is not None and not future.cancelled():
            future.exception()  # retrieved: a failure reading or embedding the next page is raised
    return done


def _merged(works: Sequence[_VectorWork]) -> _VectorWork | None:
    """Consecutive batches' work as one, older first: a message in a later batch keeps only that
    batch's vectors and row (read from SQL later), and every batch's stale vectors go (a message that
    moved in one batch and back in the next must leave the resource in between). Deletes run before
    upserts, so a message that came back to a resource it left ends with its vectors there."""
    if len(works) <= 1:
        return works[0] if works else None
    items: list[VectorItem] = []
    later: set[str] = set()
    for work in reversed(works):
        items[:0] = [item for item in work.items if item.message_id not in later]
        later.update(work.written)
    stale: dict[str | None, set[str]] = {}
    for work in works:
        for resource, ids in work.stale.items():
            stale.setdefault(resource, set()).update(ids)
    return _VectorWork(
        entry_ids=[i for work in works for i in work.entry_ids],
        stale=stale,
        items=items,
        written={k: v for work in works for k, v in work.written.items()},
    )


def _ahead(jobs: Sequence[_Job]) -> dict[str, MessageRecord]:
    """The embeddable messages the jobs' requests handed over; a later job's copy is the newer one."""
    ahead: dict[str, MessageRecord] = {}
    for job in jobs:
        for message in job.stored:
            ahead.pop(message.id, None)
            if embeddable_text(message) is not None:
                ahead[message.id] = message
    return ahead


def _known(jobs: Sequence[_Job]) -> dict[str, list[VectorItem]]:
    """The vectors in hand for the jobs' messages, as _ahead keeps their rows: a later job's copy of a
    message (with its own vectors or none) replaces an earlier one's."""
    known: dict[str, list[VectorItem]] = {}
    for job in jobs:
        for message in job.stored:
            known.pop(message.id, None)
            if message.id in job.known:
                known[message.id] = job.known[message.id]
    return known


def _same_vectors(a: MessageRecord, b: MessageRecord) -> bool:
    """Whether two versions of a message get the same vectors, in the same place."""
    return (
        a.thread_id == b.thread_id
        and a.resource_id == b.resource_id
        and embeddable_text(a) == embeddable_text(b)
    )


def _stale_vectors(
    entries: Sequence[OutboxEntry], rows: dict[str, MessageRecord]
) -> dict[str | None, set[str]]:
    """Per resource, the messages whose vectors must go there: deleted or no longer embeddable
    messages, and messages that moved to another resource."""
    stale: dict[str | None, set[str]] = {}
    for entry in entries:
        current = rows.get(entry.message_id)
        # A message stored without a resource had its vectors in the null resource's collection. An entry
        # that does not say whether the message was stored (older code's) is read as older code did:
        # stored, so a gone message is deleted from the null collection too.
        filed = entry.was_stored is not False or entry.previous_resource_id is not None
        resources: set[str | None] = {entry.previous_resource_id} if filed else set()
        if current is None or embeddable_text(current) is None:
            if current is not None:
                resources.add(current.resource_id)
        else:
            resources.discard(current.resource_id)
        for resource in resources:
            stale.setdefault(resource, set()).add(entry.message_id)
    return stale
