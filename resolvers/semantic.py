"""Semantic memory: embedding messages into the vector index and searching it.

SQL is the source of truth. Every change to a message is queued in the vector outbox in the same
transaction; `sync` brings the index in line with what SQL holds for those messages (re-embed, or
delete), so a crash between the SQL commit and the vector write is repaired by the next drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Protocol

from models.embedders import Embedder, Embedding, EmbeddingError, chunk_text, embedding_text
from models.records import MessageRecord
from models.repository import Repository
from models.vector_index import VectorHit, VectorIndexError, VectorItem
from resolvers.clock import now_ms
from resolvers.errors import ServiceUnavailable
from resolvers.recall import SemanticHit, SemanticResult

log = logging.getLogger("recallql.semantic")


class VectorIndex(Protocol):
    async def upsert(self, items: Sequence[VectorItem]) -> None: ...
    async def delete_messages(
        self, message_ids: Sequence[str], resource_ids: Sequence[str | None]
    ) -> None: ...
    async def query(
        self,
        vector: Sequence[float],
        *,
        resource_ids: Sequence[str | None],
        thread_id: str | None,
        top_k: int,
    ) -> list[VectorHit]: ...
    async def ping(self) -> None: ...
    async def aclose(self) -> None: ...


IndexFactory = Callable[[str, int], VectorIndex]


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
    ) -> None:
        self.repository = repository
        self.embedder = embedder
        self._index_factory = index_factory
        self._index: VectorIndex | None = None
        self._index_lock = asyncio.Lock()
        self._cache: OrderedDict[str, Embedding] = OrderedDict()
        self._cache_size = query_cache_size
        self.drain_batch = drain_batch

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
        self, text: str, *, thread_id: str, resource_id: str | None, resource_scope: bool, top_k: int
    ) -> SemanticResult:
        """An embedder or vector index that cannot answer is an outage (SERVICE_UNAVAILABLE) of the
        search only: saves queue their vector work in the outbox, and reads without a search go on."""
        try:
            embedding = await self._embed_query(text)
            index = await self.index()
        except EmbeddingError as exc:
            log.warning("semantic search: the embedder failed: %s", exc)
            raise ServiceUnavailable(
                "Semantic search is unavailable: the embedder cannot be reached.", service="embedder"
            ) from exc
        resource_ids: Sequence[str | None]
        if resource_scope:
            resource_ids = [resource_id]
        else:
            resource_ids = await self.repository.thread_resource_ids(thread_id)
        hits: list[SemanticHit] = []
        for vector in embedding.vectors:  # one query per chunk of a (very long) query text, as Mastra does
            try:
                found = await index.query(
                    vector,
                    resource_ids=resource_ids,
                    thread_id=None if resource_scope else thread_id,
                    top_k=top_k,
                )
            except VectorIndexError as exc:
                log.warning("semantic search: the vector index failed: %s", exc)
                raise ServiceUnavailable(
                    "Semantic search is unavailable: the vector index cannot be reached.", service="vectors"
                ) from exc
            hits.extend(SemanticHit(h.message_id, h.thread_id, h.score) for h in found)
        usage = {"tokens": embedding.tokens} if embedding.tokens is not None else None
        return SemanticResult(hits=hits, usage=usage)

    async def _embed_query(self, text: str) -> Embedding:
        key = hashlib.sha256(text.encode("utf-8")).hexdigest()
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        embedding = await self.embedder.embed(chunk_text(text))
        self._cache[key] = embedding
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return embedding

    # ------------------------------------------------------------------ write side
    async def sync(
        self, message_ids: Sequence[str] | None = None, *, queued_before: int | None = None
    ) -> int:
        """Applies queued changes (of these messages, or the oldest batch) to the index; returns how many
        outbox entries it settled."""
        entries, rows = await self.repository.outbox_snapshot(
            message_ids=message_ids,
            limit=max(self.drain_batch, len(message_ids or ()) * 4),
            queued_before=queued_before,
        )
        if not entries:
            return 0
        index = await self.index()
        stale: dict[str | None, set[str]] = {}
        for entry in entries:
            current = rows.get(entry.message_id)
            if current is None or embeddable_text(current) is None:
                resources = {entry.previous_resource_id}
                if current is not None:
                    resources.add(current.resource_id)
                for resource in resources:
                    stale.setdefault(resource, set()).add(entry.message_id)
            elif entry.previous_resource_id is not None and entry.previous_resource_id != current.resource_id:
                stale.setdefault(entry.previous_resource_id, set()).add(entry.message_id)
        for resource, ids in stale.items():
            await index.delete_messages(sorted(ids), [resource])
        await self._write(index, [m for m in rows.values() if embeddable_text(m) is not None])
        await self.repository.outbox_done([e.id for e in entries])
        return len(entries)

    async def _write(self, index: VectorIndex, messages: Sequence[MessageRecord]) -> None:
        if not messages:
            return
        texts: list[str] = []
        owners: list[tuple[MessageRecord, int]] = []
        for message in messages:
            for n, chunk in enumerate(chunk_text(embeddable_text(message) or "")):
                texts.append(chunk)
                owners.append((message, n))
        embedding = await self.embedder.embed(texts)
        await index.upsert(
            [
                VectorItem(
                    message_id=m.id,
                    thread_id=m.thread_id,
                    resource_id=m.resource_id,
                    chunk=n,
                    vector=vector,
                    created_at_ms=m.created_at,
                    role=m.role,
                )
                for (m, n), vector in zip(owners, embedding.vectors, strict=True)
            ]
        )

    async def reindex(
        self,
        *,
        resource_id: str | None = None,
        batch: int = 256,
        on_progress: Callable[[int], None] | None = None,
    ) -> int:
        """Re-embeds every message (of one resource, or all) from SQL; returns how many were read."""
        index = await self.index()
        after, done = 0, 0
        while rows := await self.repository.messages_in_order(
            after_seq=after, limit=batch, resource_id=resource_id
        ):
            await self._write(index, [m for m in rows if embeddable_text(m) is not None])
            after, done = rows[-1].seq, done + len(rows)
            if on_progress is not None:
                on_progress(len(rows))
        await self.drain()
        return done

    async def release(self, message_ids: Sequence[str]) -> None:
        """Hands these messages' vector work to the background drain at once."""
        await self.repository.outbox_release(message_ids)

    async def drain(self, *, grace: float = 0.0) -> int:
        """Settles the outbox; returns how many entries it settled. With a grace period, entries younger
        than it are left to the request that queued them (it writes them itself right after commit),
        so that they are not embedded twice."""
        queued_before = now_ms() - int(grace * 1000) if grace else None
        total = 0
        while settled := await self.sync(queued_before=queued_before):
            total += settled
        return total

    async def run_drainer(self, interval: float = 1.0, *, grace: float = 15.0) -> None:
        """Background loop: drains the outbox, backing off while the embedder or the index is down.
        The first pass takes everything (what a crashed process left); later ones leave the entries of
        the last `grace` seconds to their requests."""
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
                log.warning("vector outbox drain failed, retrying in %.0fs: %s", delay, exc)
                delay = min(delay * 2, 60.0)
            await asyncio.sleep(delay)

    async def aclose(self) -> None:
        if self._index is not None:
            with contextlib.suppress(Exception):
                await self._index.aclose()
        await self.embedder.aclose()
