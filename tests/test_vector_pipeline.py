"""The vector write pipeline (resolvers/semantic.py): concurrent saves share embedder calls and index
writes; `wait` saves answer once their vectors are written, `background` saves once SQL has committed,
and a search waits for the vectors of the resources it reads; failures leave the work in the outbox.

Real parts: the repository on SQLite / PostgreSQL and an embedded Chroma collection. The embedder is
embed_server.py's deterministic hash-64 function in process, behind a gate the tests open and close (a
test double for the model: what is tested is the pipeline's logic), counting its calls; the index is
the real ChromaIndex, counted.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from models.embedders import Embedding, EmbeddingError, embedding_text
from models.records import MessageQuery, MessageRecord
from models.repository import Repository
from models.vector_index import ChromaIndex, VectorIndexDamaged, VectorIndexError, VectorItem, collection_name
from resolvers.auth import OPEN
from resolvers.config import BUILTIN_DEFAULTS
from resolvers.context import RequestContext, Services
from resolvers.errors import ServiceUnavailable
from resolvers.messages import MessageInput, MessagePatch
from resolvers.semantic import SemanticMemory
from schema import build_schema
from tests.support import (
    Api,
    app_client,
    database,
    embed_reference,
    embed_server_process,
    eventually,
    running_server,
    text_message,
    uid,
)
from tests.test_semantic import http_embedder_env

DIMENSION = 64
REF = embed_reference()
# Stands for the request id the web layer keeps in a ContextVar (and puts on every log line): work the
# server does for everyone must not run in the context of whichever request happened to start it.
REQUEST: contextvars.ContextVar[str | None] = contextvars.ContextVar("test_request", default=None)


class GatedEmbedder:
    """hash-64 vectors; while the gate is closed every call waits; `fail` makes calls raise."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.gate.set()
        self.entered = 0  # calls begun (before the gate)
        self.calls: list[int] = []  # texts per call
        self.requests: list[str | None] = []  # REQUEST as each call saw it
        self.fail = False
        self.delay = 0.0  # seconds per call, for a pipeline that saves can outrun
        # While this answers False, each call waits (at most 10 s) before it answers: a pipeline that
        # saves outrun however slow the machine is.
        self.hold: Callable[[], bool] | None = None
        # As hosted endpoints answer (HTTP 400) a request holding a text they refuse, or too many texts.
        self.refuse: str | None = None
        self.max_inputs: int | None = None

    @property
    def name(self) -> str:
        return "hash-64"

    @property
    def dimension(self) -> int:
        return DIMENSION

    async def embed(self, texts: Sequence[str]) -> Embedding:
        self.entered += 1
        await self.gate.wait()
        self.calls.append(len(texts))
        self.requests.append(REQUEST.get())
        await asyncio.sleep(self.delay)
        deadline = asyncio.get_running_loop().time() + 10
        while self.hold is not None and not self.hold() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.005)
        if self.fail:
            raise EmbeddingError("the embedder is down")
        if self.refuse is not None and any(self.refuse in t for t in texts):
            raise EmbeddingError(f"input refused: {self.refuse}", status_code=400)
        if self.max_inputs is not None and len(texts) > self.max_inputs:
            raise EmbeddingError(f"at most {self.max_inputs} inputs", status_code=400)
        return Embedding([list(REF.embed(t)) for t in texts], tokens=None)

    async def aclose(self) -> None:
        pass


class CountingIndex(ChromaIndex):
    """Counts its calls; while `write_gate` is closed every upsert waits before it writes; `hold_next`
    and `hold_next_delete` hold the next call of their kind; `fail_next_upsert` makes the next upsert
    raise after it has written (an answer lost with the Chroma process)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.upserts: list[int] = []  # vectors per call
        self.deletes: list[list[str | None]] = []  # resources per delete_messages call
        self.drops: list[list[str | None] | None] = []  # resources per drop call (None: all)
        self.write_gate = asyncio.Event()
        self.write_gate.set()
        self.hold_next: asyncio.Event | None = None  # the next upsert (only) waits for it
        self.hold_next_delete: asyncio.Event | None = None  # the next delete_messages waits for it
        self.deleting = asyncio.Event()  # set once a held delete waits
        self.fail_next_upsert = False

    async def drop(self, resource_ids: Sequence[str | None] | None = None) -> int:
        self.drops.append(None if resource_ids is None else list(resource_ids))
        return await super().drop(resource_ids)

    async def delete_messages(  # type: ignore[override]
        self, message_ids: Sequence[str], resource_ids: Sequence[str | None]
    ) -> None:
        self.deletes.append(list(resource_ids))
        if self.hold_next_delete is not None:
            hold, self.hold_next_delete = self.hold_next_delete, None
            self.deleting.set()
            await hold.wait()
        await super().delete_messages(message_ids, resource_ids)

    async def upsert(self, items: Sequence[VectorItem]) -> None:  # type: ignore[override]
        items = list(items)
        self.upserts.append(len(items))
        if self.hold_next is not None:
            hold, self.hold_next = self.hold_next, None
            await hold.wait()
        await self.write_gate.wait()
        await super().upsert(items)
        if self.fail_next_upsert:
            self.fail_next_upsert = False
            raise VectorIndexError("the Chroma process exited")


class Setup:
    def __init__(self, repository: Repository, path: Path, **options: Any) -> None:
        self.embedder = GatedEmbedder()
        self.index = CountingIndex(path=path, model_name="hash-64", dimension=DIMENSION)
        self.semantic = SemanticMemory(repository, self.embedder, lambda _m, _d: self.index, **options)
        self.services = Services.build(
            repository, memory_defaults=dict(BUILTIN_DEFAULTS), semantic=self.semantic, vector_sync_timeout=30
        )

    async def save(self, thread_id: str, resource_id: str, texts: Sequence[str]) -> list[str]:
        result = await self.services.messages.save(
            [
                MessageInput(
                    thread_id=thread_id,
                    resource_id=resource_id,
                    role="user",
                    content={"format": 2, "parts": [{"type": "text", "text": text}]},
                )
                for text in texts
            ],
            principal=OPEN,
        )
        return [m.id for m in result.messages]

    async def hits(self, text: str, thread_id: str, resource_id: str) -> list[str]:
        found = await self.semantic.search(
            text, thread_id=thread_id, resource_id=resource_id, resource_scope=True, top_k=50
        )
        return [h.message_id for h in found.hits]


@pytest.fixture
async def make(repository: Repository, tmp_path: Path) -> AsyncIterator[Any]:
    made: list[Setup] = []

    def build(**options: Any) -> Setup:
        setup = Setup(repository, tmp_path / f"chroma-{len(made)}", **options)
        made.append(setup)
        return setup

    yield build
    for setup in made:
        setup.embedder.gate.set()
        await setup.semantic.aclose()


def _text(text: str) -> dict[str, Any]:
    return {"format": 2, "parts": [{"type": "text", "text": text}]}


async def new_thread(setup: Setup) -> tuple[str, str]:
    thread_id, resource_id = uid("t"), uid("r")
    await setup.services.threads.create(resource_id=resource_id, thread_id=thread_id, principal=OPEN)
    return thread_id, resource_id


async def test_concurrent_saves_share_embedder_calls_and_index_writes(make: Any) -> None:
    setup = make()
    thread_id, resource_id = await new_thread(setup)
    # The first save holds the pipeline (gate closed) while eleven more queue up behind it.
    setup.embedder.gate.clear()
    saves = [
        asyncio.create_task(setup.save(thread_id, resource_id, [f"message {n} part {k}" for k in range(3)]))
        for n in range(12)
    ]
    repository = setup.services.repository
    for _ in range(200):  # until every save has committed (on PostgreSQL they take the thread's lock in turn)
        if await repository.outbox_backlog() == 36:
            break
        await asyncio.sleep(0.05)
    assert not any(task.done() for task in saves), "a wait-mode save answered before its vectors"
    setup.embedder.gate.set()
    saved = [i for ids in await asyncio.gather(*saves) for i in ids]
    assert len(saved) == 36
    # Every message has its vector, written in far fewer calls than saves.
    assert sorted(await setup.hits("message", thread_id, resource_id)) == sorted(saved)
    assert await setup.index.count(resource_id) == 36
    assert sum(setup.index.upserts) == 36 and len(setup.index.upserts) <= 3, setup.index.upserts
    assert sum(setup.embedder.calls) >= 36 and len(setup.embedder.calls) <= 4, setup.embedder.calls
    assert await setup.services.repository.outbox_backlog() == 0


async def test_searches_of_one_text_at_once_share_one_embedding(make: Any) -> None:
    setup = make()
    thread_id, resource_id = await new_thread(setup)
    ids = await setup.save(thread_id, resource_id, ["zebra crossing", "apple pie"])
    calls = len(setup.embedder.calls)
    setup.embedder.gate.clear()
    zebras = [asyncio.create_task(setup.hits("zebra", thread_id, resource_id)) for _ in range(8)]
    apple = asyncio.create_task(setup.hits("apple", thread_id, resource_id))
    for _ in range(3):  # every search has asked for its text's embedding (nothing before it awaits I/O)
        await asyncio.sleep(0)
    zebras[0].cancel()  # the search that started the embedding leaves: the others still get it
    setup.embedder.gate.set()
    found = await asyncio.gather(*zebras[1:])
    assert all(hits == found[0] for hits in found) and sorted(found[0]) == sorted(ids)
    assert sorted(await apple) == sorted(ids)
    assert zebras[0].cancelled()
    assert len(setup.embedder.calls) - calls == 2  # one per text, not one per search
    # The embedding is cached once made: the same text again asks the embedder nothing.
    assert await setup.hits("zebra", thread_id, resource_id) == found[0]
    assert len(setup.embedder.calls) - calls == 2


async def test_a_failed_shared_embedding_fails_its_searches_and_is_asked_again(make: Any) -> None:
    setup = make()
    thread_id, resource_id = await new_thread(setup)
    ids = await setup.save(thread_id, resource_id, ["zebra crossing"])
    calls = len(setup.embedder.calls)
    setup.embedder.gate.clear()
    setup.embedder.fail = True
    searches = [asyncio.create_task(setup.hits("zebra", thread_id, resource_id)) for _ in range(4)]
    for _ in range(3):
        await asyncio.sleep(0)
    setup.embedder.gate.set()
    outcomes = await asyncio.gather(*searches, return_exceptions=True)
    assert all(isinstance(o, ServiceUnavailable) for o in outcomes), outcomes
    assert len(setup.embedder.calls) - calls == 1
    setup.embedder.fail = False  # a failure is not cached: the next search embeds again
    assert await setup.hits("zebra", thread_id, resource_id) == ids
    assert len(setup.embedder.calls) - calls == 2


ALIASED = """query($t: ID!) {
  a: recall(threadId: $t, perPage: 0, vectorSearchString: "zebra",
            threadConfig: {semanticRecall: {options: {topK: 1, messageRange: {size: 0}, scope: THREAD}}}) {
    messages { id } }
  b: recall(threadId: $t, perPage: 0, vectorSearchString: "apple",
            threadConfig: {semanticRecall: {options: {topK: 1, messageRange: {size: 0}, scope: THREAD}}}) {
    messages { id } } }"""


async def test_the_compiled_path_runs_a_querys_root_fields_side_by_side(make: Any) -> None:
    """As normal execution does: two aliased searches wait for their embeddings at once (they ran one
    after the other, each waiting for the embedder and the index in turn)."""
    setup = make()
    thread_id, resource_id = await new_thread(setup)
    ids = await setup.save(thread_id, resource_id, ["zebra crossing", "apple pie"])
    fast_path = build_schema().fast_path
    plan = fast_path.plan(ALIASED, None)
    assert plan is not None
    entered = setup.embedder.entered
    setup.embedder.gate.clear()
    context = RequestContext(services=setup.services, principal=OPEN)
    answer = asyncio.create_task(fast_path.execute(plan, {"t": thread_id}, context))

    async def both_waiting() -> bool:
        return setup.embedder.entered - entered == 2

    try:
        await eventually(both_waiting, timeout=10, what="both searches asking for their embeddings")
    finally:
        setup.embedder.gate.set()
    result = await answer
    assert result is not None  # answered by the compiled path itself
    assert [[m["id"] in ids for m in result["data"][k]["messages"]] for k in "ab"] == [[True], [True]]


LISTING = """query($r: String!, $s: String) { threads(resourceId: $r) { threads { id
  recall(perPage: 0, vectorSearchString: $s,
         threadConfig: {semanticRecall: {options: {topK: 5, messageRange: {size: 0}, scope: THREAD}}}) {
    messages { id } } } } }"""


async def test_a_listings_searches_of_one_text_embed_it_once(make: Any) -> None:
    """Each thread of a listing searched for the same text: the nested recalls run together (the
    compiled path gathers them), and they share one embedding of it."""
    setup = make()
    resource_id = uid("r")
    saved: dict[str, list[str]] = {}
    for n in range(6):
        thread_id = uid("t")
        await setup.services.threads.create(resource_id=resource_id, thread_id=thread_id, principal=OPEN)
        saved[thread_id] = await setup.save(thread_id, resource_id, [f"zebra {n}", f"apple {n}"])
    calls = len(setup.embedder.calls)
    async with app_client(setup.services) as client:
        answer = (
            await client.post(
                "/graphql", json={"query": LISTING, "variables": {"r": resource_id, "s": "zebra"}}
            )
        ).json()
    assert "errors" not in answer, answer
    listed = {
        t["id"]: sorted(m["id"] for m in t["recall"]["messages"])
        for t in answer["data"]["threads"]["threads"]
    }
    assert listed == {t: sorted(ids) for t, ids in saved.items()}
    assert len(setup.embedder.calls) - calls == 1


async def test_background_saves_answer_first_and_searches_wait_for_their_vectors(make: Any) -> None:
    setup = make(background=True)
    thread_id, resource_id = await new_thread(setup)
    other_thread, other_resource = uid("t"), uid("r")
    # Query embeddings are cached: with these two warm, the searches below wait on nothing but vectors.
    assert await setup.hits("zebra crossing", thread_id, resource_id) == []
    assert await setup.hits("zebra", other_thread, other_resource) == []
    setup.embedder.gate.clear()
    ids = await asyncio.wait_for(setup.save(thread_id, resource_id, ["zebra crossing"]), 5)
    assert await setup.index.count(resource_id) == 0  # answered before any vector was written
    search = asyncio.create_task(setup.hits("zebra crossing", thread_id, resource_id))
    await asyncio.sleep(0.2)
    assert not search.done(), "the search did not wait for the resource's queued vectors"
    # A search of another resource has nothing to wait for.
    assert await asyncio.wait_for(setup.hits("zebra", other_thread, other_resource), 5) == []
    setup.embedder.gate.set()
    assert await asyncio.wait_for(search, 10) == ids
    assert await setup.services.repository.outbox_backlog() == 0


async def test_a_background_resave_into_another_resource_makes_searches_of_the_old_one_wait(
    make: Any,
) -> None:
    # A re-save that moves a message to another resource's thread answers first; its vectors in the old
    # resource are still to be removed, so a search there must wait for that, as for an update.
    setup = make(background=True)
    old_thread, old_resource = await new_thread(setup)
    new_thread_id, new_resource = await new_thread(setup)
    # The old thread keeps a message of the old resource: its searches read that resource's collection.
    stays, moved = await setup.save(old_thread, old_resource, ["hello there", "zebra crossing"])
    assert await setup.semantic.flush()
    in_old_thread = partial(
        setup.semantic.search,
        "zebra crossing",
        thread_id=old_thread,
        resource_id=None,
        resource_scope=False,
        top_k=4,
    )
    assert {h.message_id for h in (await in_old_thread()).hits} == {stays, moved}
    setup.embedder.gate.clear()
    result = await asyncio.wait_for(
        setup.services.messages.save(
            [
                MessageInput(
                    thread_id=new_thread_id,
                    resource_id=new_resource,
                    role="user",
                    content=_text("zebra crossing"),
                    id=moved,
                )
            ],
            principal=OPEN,
        ),
        5,
    )
    assert [(m.thread_id, m.resource_id) for m in result.messages] == [(new_thread_id, new_resource)]
    search = asyncio.create_task(in_old_thread())
    await asyncio.sleep(0.2)
    assert not search.done(), "the search of the old resource did not wait for the move's vector work"
    setup.embedder.gate.set()
    assert [h.message_id for h in (await asyncio.wait_for(search, 10)).hits] == [stays]
    assert await setup.index.count(old_resource) == 1
    assert await setup.hits("zebra crossing", new_thread_id, new_resource) == [moved]


async def test_background_saves_wait_for_room_when_the_queue_is_full(make: Any) -> None:
    setup = make(background=True, max_backlog=0)
    thread_id, resource_id = await new_thread(setup)
    setup.embedder.gate.clear()
    # The pipeline takes the first save's work at once (and stays in the closed gate): room again.
    await asyncio.wait_for(setup.save(thread_id, resource_id, ["one", "two"]), 5)
    save = asyncio.create_task(setup.save(thread_id, resource_id, ["three", "four"]))
    await asyncio.sleep(0.2)
    assert not save.done(), "over the queue limit a background save must wait for room"
    setup.embedder.gate.set()
    await asyncio.wait_for(save, 10)
    assert await setup.semantic.flush(10)
    assert await setup.index.count(resource_id) == 4


async def test_saves_waiting_for_room_are_let_go_at_shutdown(make: Any) -> None:
    setup = make(background=True, max_backlog=0)
    thread_id, resource_id = await new_thread(setup)
    setup.embedder.gate.clear()
    await asyncio.wait_for(setup.save(thread_id, resource_id, ["one"]), 5)
    waiting = asyncio.create_task(setup.save(thread_id, resource_id, ["two"]))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    # Shut down with the embedder still stuck: the waiting save answers (its work stays in the outbox)
    # instead of holding on for the whole sync timeout.
    await setup.semantic.aclose(flush_timeout=0.1)
    await asyncio.wait_for(waiting, 5)
    assert await setup.services.repository.outbox_backlog() == 2


async def test_a_save_waiting_for_its_vectors_answers_when_the_pipeline_stops_under_it(make: Any) -> None:
    # The pipeline cancelled the futures of the jobs it held: a save waiting for its vectors raised a
    # CancelledError it had not asked for (the request ended without an answer), and a flush or search
    # waiting for those jobs waited out its whole timeout.
    setup = make()
    thread_id, resource_id = await new_thread(setup)
    setup.index.write_gate.clear()  # the first save's write stays under way
    first = asyncio.create_task(setup.save(thread_id, resource_id, ["written when the writer ends"]))
    while not setup.index.upserts:
        await asyncio.sleep(0.01)
    flushing = asyncio.create_task(setup.semantic.flush(30))
    await asyncio.sleep(0.1)
    writer = next(t for t in asyncio.all_tasks() if t.get_name() == "recallql-vector-writer")
    writer.cancel()  # as if the writer ended by itself: the pipeline stops with the job in hand
    ids = await asyncio.wait_for(first, 5)
    assert len(ids) == 1
    assert await asyncio.wait_for(flushing, 5) is True
    assert setup.semantic._backlog == 0
    # The next save starts a new pipeline, and the drain still has the first save's work.
    setup.index.write_gate.set()
    await setup.save(thread_id, resource_id, ["after the restart"])
    assert await setup.semantic.drain() == 1
    assert await setup.index.count(resource_id) == 2

    # Shutdown under a save in the embedder: the same answer, the work left in the outbox.
    other = make()
    thread_id, resource_id = await new_thread(other)
    other.embedder.gate.clear()
    second = asyncio.create_task(other.save(thread_id, resource_id, ["stuck in the embedder"]))
    await asyncio.sleep(0.2)
    await other.semantic.aclose(flush_timeout=0.1)
    assert len(await asyncio.wait_for(second, 5)) == 1
    assert await other.services.repository.outbox_backlog() == 1


async def test_jobs_queued_past_the_backlog_keep_only_their_ids(make: Any) -> None:
    # Saves answer after their timeout while the embedder stalls, and their jobs stay queued: each held
    # its rows (message contents, for the head start) for as long as the stall lasted.
    setup = make(max_backlog=2)
    thread_id, resource_id = await new_thread(setup)
    semantic = setup.semantic
    setup.embedder.gate.clear()
    saves = [asyncio.create_task(setup.save(thread_id, resource_id, ["one"]))]
    while semantic._tickets < 1 or semantic._queued:  # taken into a batch: stuck in the embedder
        await asyncio.sleep(0.01)
    for n, texts in enumerate((["two", "three"], ["four", "five", "six"], ["seven"]), start=1):
        saves.append(asyncio.create_task(setup.save(thread_id, resource_id, texts)))
        while len(semantic._jobs) < n:
            await asyncio.sleep(0.01)
    # Queued before them: 0, 2, then 5 messages, against a backlog of 2.
    assert [len(job.stored) for job in semantic._jobs] == [2, 3, 0]
    setup.embedder.gate.set()
    await asyncio.wait_for(asyncio.gather(*saves), 30)
    assert await setup.index.count(resource_id) == 7
    assert await setup.services.repository.outbox_backlog() == 0


async def test_shutdown_writes_the_saves_of_healthy_resources_while_a_damaged_one_waits_for_its_rebuild(
    make: Any,
) -> None:
    # aclose cancels the rebuilds under way. The pipeline's write that waited for one (for the damaged
    # collection to go) used to take that cancellation as its own: the writer task ended, the pipeline
    # with it, silently, and aclose then waited its whole flush timeout for nothing.
    setup = make(background=True)
    (damaged_thread, damaged), (healthy_thread, healthy) = await new_thread(setup), await new_thread(setup)
    await setup.save(damaged_thread, damaged, ["first"])
    assert await setup.semantic.flush(10)
    setup.index._suspect[collection_name(damaged, "hash-64", DIMENSION)] = damaged  # as after a crash
    dropping, never = asyncio.Event(), asyncio.Event()
    drop = setup.index.drop

    async def slow_drop(resource_ids: Sequence[str | None] | None = None) -> int:
        dropping.set()
        await never.wait()
        return await drop(resource_ids)

    setup.index.drop = slow_drop  # type: ignore[method-assign]
    await setup.save(damaged_thread, damaged, ["second"])
    await asyncio.wait_for(dropping.wait(), 10)
    (acknowledged,) = await setup.save(healthy_thread, healthy, ["acknowledged before its vectors"])
    started = asyncio.get_running_loop().time()
    await setup.semantic.aclose(flush_timeout=20)
    assert asyncio.get_running_loop().time() - started < 15, "aclose waited for a pipeline that had died"
    assert await setup.index.count(healthy) == 1
    outbox, _ = await setup.services.repository.outbox_snapshot()
    # The damaged resource's work stays queued for the next start; the healthy one's is settled.
    assert outbox and {e.message_id for e in outbox}.isdisjoint({acknowledged})


async def test_a_rebuild_started_by_the_shutdown_flush_ends_with_the_shutdown(make: Any) -> None:
    setup = make(background=True)
    thread_id, resource_id = await new_thread(setup)
    await setup.save(thread_id, resource_id, [f"note {n}" for n in range(5)])
    assert await setup.semantic.flush(10)
    setup.index._suspect[collection_name(resource_id, "hash-64", DIMENSION)] = resource_id
    setup.embedder.gate.clear()
    await setup.save(thread_id, resource_id, ["acknowledged before its vectors"])
    embed = setup.embedder.embed
    calls = 0

    async def slow_after_the_first(texts: Sequence[str]) -> Embedding:
        nonlocal calls
        calls += 1
        if calls > 1:
            await asyncio.sleep(1.0)  # the rebuild's pages
        return await embed(texts)

    setup.embedder.embed = slow_after_the_first  # type: ignore[method-assign]
    asyncio.get_running_loop().call_later(0.2, setup.embedder.gate.set)
    # No rebuild yet when aclose starts: the flush's write meets the damage and starts one.
    await setup.semantic.aclose(flush_timeout=5)
    assert setup.index.drops, "the flush never started the rebuild"
    assert all(r.task.done() for r in setup.semantic._rebuilds.values()), "a rebuild outlived aclose"
    assert setup.index._client is None, "the closed index was opened again"


async def test_shutdown_waits_for_a_chroma_write_under_way_before_it_lets_go_of_the_directory(
    make: Any,
) -> None:
    # A cancelled await does not stop Chroma's worker thread. Closing under it let a restarted server
    # open the directory mid-write and take the write's journal note for a crash (a rebuild, two clients).
    setup = make(background=True)
    thread_id, resource_id = await new_thread(setup)
    entered, release = threading.Event(), threading.Event()
    upsert_sync = ChromaIndex._upsert_sync

    def slow_upsert_sync(collection: Any, group: dict[str, VectorItem]) -> None:
        entered.set()
        release.wait(30)
        upsert_sync(collection, group)

    setup.index._upsert_sync = slow_upsert_sync  # type: ignore[method-assign]
    await setup.save(thread_id, resource_id, ["written while the server stops"])
    await asyncio.to_thread(entered.wait, 10)
    lock = setup.index._directory_lock
    assert lock is not None and lock.is_locked
    closing = asyncio.create_task(setup.semantic.aclose(flush_timeout=0.2))
    await asyncio.sleep(0.5)
    assert not closing.done() and lock.is_locked, "the directory was let go under a live write"
    release.set()
    await asyncio.wait_for(closing, 30)
    assert not lock.is_locked
    assert setup.index._path is not None
    reopened = ChromaIndex(path=setup.index._path, model_name="hash-64", dimension=DIMENSION)
    try:
        assert await reopened.count(resource_id) == 1  # the write landed whole, nothing taken for damage
    finally:
        await reopened.aclose()


async def test_a_writer_that_outruns_the_pipeline_keeps_its_batches_whole(make: Any) -> None:
    # A save that found the queue full used to wait for its own vectors; the pipeline then found only
    # that save's messages to take next, and ran on in small batches.
    setup = make(background=True, pipeline_batch=6, max_backlog=6)
    # Each embedder call lasts until the writer has filled the queue (or is done): a fixed delay (0.6 s)
    # was outrun by a slow save now and then on a loaded machine, and a short batch followed.
    writing = True
    setup.embedder.hold = lambda: not writing or setup.semantic._queued >= 6
    thread_id, resource_id = await new_thread(setup)
    for n in range(15):
        await setup.save(thread_id, resource_id, [f"message {n} part {k}" for k in range(2)])
    writing = False
    assert await setup.semantic.flush(30)
    assert sum(setup.embedder.calls) == 30
    # The first save is taken alone, the last batch takes what is left; every other one is whole.
    assert setup.embedder.calls[1:-1] == [6] * (len(setup.embedder.calls) - 2), setup.embedder.calls
    assert await setup.index.count(resource_id) == 30


async def _embedded(setup: Setup, calls: int) -> bool:
    return len(setup.embedder.calls) >= calls


@pytest.mark.parametrize("merge_batches", [4, 2])
async def test_batches_embedded_while_the_index_writes_are_written_together(
    make: Any, merge_batches: int
) -> None:
    # Saves spread over many resources make the index the slower stage (Chroma's cost is per call): the
    # batches the embedder prepares meanwhile are then written in one call per resource, up to
    # `merge_batches` of them, instead of one call per resource and batch.
    setup = make(pipeline_batch=4, merge_batches=merge_batches)
    (t1, r1), (t2, r2) = await new_thread(setup), await new_thread(setup)
    setup.index.write_gate.clear()
    first = asyncio.create_task(setup.save(t1, r1, [f"first {k}" for k in range(4)]))
    await eventually(lambda: _embedded(setup, 1), timeout=10, what="the first batch embedded")
    later = []
    for n, (thread_id, resource_id) in enumerate([(t1, r1), (t2, r2), (t1, r1)]):
        later.append(
            asyncio.create_task(setup.save(thread_id, resource_id, [f"later {n} {k}" for k in range(4)]))
        )
        # One save per batch (pipeline_batch=4), in this order.
        await eventually(
            lambda n=n: _embedded(setup, min(n + 2, 1 + merge_batches)), timeout=10, what="a batch embedded"
        )
    await asyncio.sleep(0.3)
    # The embedder worked on while the first write was held, up to `merge_batches` batches ahead.
    assert len(setup.embedder.calls) == 1 + min(3, merge_batches), setup.embedder.calls
    assert setup.index.upserts == [4]
    setup.index.write_gate.set()
    saved = await asyncio.gather(first, *later)
    assert setup.index.upserts == ([4, 12] if merge_batches >= 3 else [4, 8, 4])
    assert await setup.index.count(r1) == 12 and await setup.index.count(r2) == 4
    for (thread_id, resource_id), ids in zip([(t1, r1), (t1, r1), (t2, r2), (t1, r1)], saved, strict=True):
        assert set(ids) <= set(await setup.hits("first later", thread_id, resource_id))
    assert await setup.services.repository.outbox_backlog() == 0


async def test_merged_batches_write_each_message_as_its_last_batch_left_it(make: Any) -> None:
    from resolvers.messages import MessagePatch

    setup = make(background=True)
    (t1, r1), (_, r2) = await new_thread(setup), await new_thread(setup)
    (okapi,) = await setup.save(t1, r1, ["okapi"])
    assert await setup.semantic.flush(10)
    setup.index.write_gate.clear()
    held = await setup.save(t1, r1, ["held write"])
    await eventually(lambda: _embedded(setup, 2), timeout=10, what="the held batch embedded")

    # Four batches while that write is held, each waiting for the one before to be embedded.
    async def batch(change: Awaitable[Any], calls: int) -> Any:
        result = await change
        await eventually(lambda: _embedded(setup, calls), timeout=10, what=f"batch {calls} embedded")
        return result

    (pelican,) = await batch(setup.save(t1, r1, ["pelican"]), 3)
    # okapi leaves r1 in one batch and changes its text in the next: r1 must still lose its vector.
    await batch(setup.services.messages.update([MessagePatch(id=okapi, resource_id=r2)], principal=OPEN), 4)
    await batch(
        setup.services.messages.update([MessagePatch(id=okapi, content=_text("zebra"))], principal=OPEN), 5
    )
    # pelican's vector from the first batch is for r1, which the last batch moved it out of.
    await batch(setup.services.messages.update([MessagePatch(id=pelican, resource_id=r2)], principal=OPEN), 6)
    setup.index.write_gate.set()
    assert await setup.semantic.flush(30)

    # okapi's first write, the held one, then the four batches in one.
    assert len(setup.index.upserts) == 3, setup.index.upserts
    assert await setup.index.count(r1) == 1 and await setup.index.count(r2) == 2
    assert await setup.hits("held write", t1, r1) == held
    for text, message in [("zebra", okapi), ("pelican", pelican)]:
        found = await setup.semantic.search(text, thread_id=t1, resource_id=r2, resource_scope=True, top_k=1)
        assert [(h.message_id, round(h.score, 6)) for h in found.hits] == [(message, 1.0)]
    assert await setup.services.repository.outbox_backlog() == 0


async def test_a_batch_that_could_not_be_prepared_fails_alone_in_a_merged_write(make: Any) -> None:
    setup = make(background=True)
    (t1, r1), (t2, r2) = await new_thread(setup), await new_thread(setup)
    setup.index.write_gate.clear()
    await setup.save(t1, r1, ["held write"])
    await eventually(lambda: _embedded(setup, 1), timeout=10, what="the held batch embedded")
    setup.embedder.fail = True
    lost = await setup.save(t2, r2, ["the embedder is down for this one"])
    await eventually(lambda: _embedded(setup, 2), timeout=10, what="the failing batch tried")
    setup.embedder.fail = False
    kept = await setup.save(t1, r1, ["this one is embedded"])
    await eventually(lambda: _embedded(setup, 3), timeout=10, what="the last batch embedded")
    setup.index.write_gate.set()
    assert await setup.semantic.flush(30)
    assert await setup.index.count(r1) == 2 and await setup.index.count(r2) == 0
    assert kept[0] in await setup.hits("this one is embedded", t1, r1)
    # The failed batch's work stays in the outbox, for the drain.
    assert await setup.services.repository.outbox_backlog() == 1
    assert await setup.semantic.drain() == 1
    assert await setup.hits("the embedder is down", t2, r2) == lost


async def test_a_failed_write_leaves_the_work_to_the_drain(make: Any) -> None:
    setup = make()
    thread_id, resource_id = await new_thread(setup)
    setup.embedder.fail = True
    ids = await setup.save(thread_id, resource_id, ["kept in sql", "and in the outbox"])
    assert await setup.index.count(resource_id) == 0
    assert await setup.services.repository.outbox_backlog() == 2
    page = await setup.services.repository.read_page(
        MessageQuery(thread_id=thread_id), descending=False, limit=10, offset=0
    )
    assert [m.id for m in page.rows] == ids
    # The request released its entries: the drain takes them at once, without the grace period.
    setup.embedder.fail = False
    assert await setup.semantic.drain(grace=3600) == 2
    assert sorted(await setup.hits("kept in sql", thread_id, resource_id)) == sorted(ids)


async def test_a_message_the_embedder_refuses_is_held_back_alone(make: Any) -> None:
    # One refused text used to fail its whole batch, and the drain took the same oldest batch again and
    # again: the clean messages queued with it (or after it) were never indexed.
    setup = make()
    thread_id, resource_id = await new_thread(setup)
    setup.embedder.fail = True  # the endpoint is down while they are saved: all four wait in the outbox
    clean = await setup.save(thread_id, resource_id, ["apples one", "apples two"])
    poisoned = await setup.save(thread_id, resource_id, ["apples POISON"])
    later = await setup.save(thread_id, resource_id, ["apples three"])
    setup.embedder.fail = False
    setup.embedder.refuse = "POISON"
    repository = setup.services.repository
    assert await setup.semantic.drain() == 3
    assert sorted(await setup.hits("apples", thread_id, resource_id)) == sorted(clean + later)
    # The refused message stays queued, and out of the drain's way: a second drain tries nothing.
    assert await repository.outbox_backlog() == 1
    calls = len(setup.embedder.calls)
    assert await setup.semantic.drain() == 0 and len(setup.embedder.calls) == calls
    # Once its hold has passed it is tried again, and refused again (held twice as long).
    setup.semantic._held = dict.fromkeys(setup.semantic._held, 0.0)
    assert await setup.semantic.drain() == 0 and len(setup.embedder.calls) == calls + 1
    assert setup.semantic._refusals == {poisoned[0]: 2}
    # An endpoint that takes it after all (or a changed text) settles it.
    setup.embedder.refuse = None
    setup.semantic._held = dict.fromkeys(setup.semantic._held, 0.0)
    assert await setup.semantic.drain() == 1
    assert await repository.outbox_backlog() == 0 and setup.semantic._refusals == {}
    assert sorted(await setup.hits("apples", thread_id, resource_id)) == sorted(clean + poisoned + later)


async def test_a_drain_goes_past_a_batch_whose_messages_are_all_refused(make: Any) -> None:
    # It stopped at the first batch that settled nothing, leaving the clean entries behind it queued.
    setup = make(drain_batch=2)
    thread_id, resource_id = await new_thread(setup)
    setup.embedder.fail = True
    refused = await setup.save(thread_id, resource_id, ["figs POISON one", "figs POISON two"])
    clean = await setup.save(thread_id, resource_id, ["figs one", "figs two"])
    setup.embedder.fail = False
    setup.embedder.refuse = "POISON"
    assert await setup.semantic.drain() == 2
    assert sorted(await setup.hits("figs", thread_id, resource_id)) == sorted(clean)
    assert sorted(setup.semantic._refusals) == sorted(refused)


async def test_an_endpoint_that_refuses_everything_is_an_outage(make: Any) -> None:
    # Each drain pass halved every batch down to single messages: 2N - 1 requests a second, without end.
    setup = make()
    thread_id, resource_id = await new_thread(setup)
    setup.embedder.fail = True
    await setup.save(thread_id, resource_id, [f"kiwi {n}" for n in range(200)])
    setup.embedder.fail = False
    setup.embedder.refuse = "kiwi"  # a wrong model name, say: every request refused
    calls = len(setup.embedder.calls)
    with pytest.raises(EmbeddingError, match="kept refusing"):
        await setup.semantic.drain()  # raised: the drainer backs off, as from any outage
    assert len(setup.embedder.calls) - calls <= 2 * 64 + 1
    assert setup.semantic._held == {} and await setup.services.repository.outbox_backlog() == 200
    # A small batch refused whole is an outage too, once it has been halved down to its messages.
    page = await setup.services.repository.read_page(
        MessageQuery(thread_id=thread_id), descending=False, limit=8, offset=0
    )
    with pytest.raises(EmbeddingError, match="refused all 8 messages"):
        await setup.semantic._embed_messages(page.rows)


async def test_a_refused_text_loses_the_vectors_of_its_earlier_text(make: Any) -> None:
    setup = make()
    thread_id, resource_id = await new_thread(setup)
    [message_id] = await setup.save(thread_id, resource_id, ["pears in a bowl"])
    assert await setup.hits("pears in a bowl", thread_id, resource_id) == [message_id]
    setup.embedder.refuse = "POISON"
    await setup.services.messages.update(
        [MessagePatch(id=message_id, content=_text("POISON now"))], principal=OPEN
    )
    # The old vector would find the message by a text it no longer holds.
    assert await setup.hits("pears in a bowl", thread_id, resource_id) == []
    assert await setup.services.repository.outbox_backlog() == 1


async def test_an_endpoint_that_takes_fewer_texts_per_request_gets_smaller_requests(make: Any) -> None:
    setup = make()
    thread_id, resource_id = await new_thread(setup)
    setup.embedder.max_inputs = 4
    ids = await setup.save(thread_id, resource_id, [f"plums number {n}" for n in range(10)])
    assert await setup.services.repository.outbox_backlog() == 0
    assert sorted(await setup.hits("plums", thread_id, resource_id)) == sorted(ids)
    # Refused as a whole (10, then 5 and 5), then taken in halves: no message was lost for it.
    assert setup.embedder.calls[:3] == [10, 5, 5] and setup.semantic._refusals == {}


async def test_reindex_embeds_the_next_page_while_the_index_writes_the_last(make: Any) -> None:
    setup = make()
    thread_id, resource_id = await new_thread(setup)
    ids = await setup.save(thread_id, resource_id, [f"note number {n}" for n in range(30)])
    calls_before = len(setup.embedder.calls)
    setup.index.write_gate.clear()
    written: list[int] = []
    reindex = asyncio.create_task(
        setup.semantic.reindex(resource_id=resource_id, batch=10, on_progress=written.append, rebuild=True)
    )

    async def embedded() -> int:
        return len(setup.embedder.calls) - calls_before >= 2

    # The first page's write is held: the second page is embedded meanwhile, the third waits for it.
    await eventually(embedded, timeout=10, what="the second page embedded during the first page's write")
    await asyncio.sleep(0.2)
    assert setup.embedder.calls[calls_before:] == [10, 10]
    assert written == []  # progress counts written pages only
    setup.index.write_gate.set()
    assert await reindex == 30
    assert written == [10, 10, 10]
    assert setup.index.upserts[-3:] == [10, 10, 10]
    assert sorted(await setup.hits("note number", thread_id, resource_id)) == sorted(ids)


async def test_reindex_that_fails_mid_way_leaves_no_write_running(make: Any) -> None:
    setup = make()
    thread_id, resource_id = await new_thread(setup)
    await setup.save(thread_id, resource_id, [f"entry {n}" for n in range(25)])
    embed = setup.embedder.embed
    calls_before = len(setup.embedder.calls)

    async def second_page_fails(texts: Sequence[str]) -> Embedding:
        if len(setup.embedder.calls) > calls_before:
            raise EmbeddingError("the embedder is down")
        return await embed(texts)

    setup.embedder.embed = second_page_fails  # type: ignore[method-assign]
    setup.index.write_gate.clear()
    with pytest.raises(EmbeddingError):
        async with asyncio.timeout(10):  # the second page is embedded without waiting for the first write
            await setup.semantic.reindex(resource_id=resource_id, batch=10, rebuild=True)
    # The first page's write, held when the second page failed, went with the reindex: opening the
    # gate writes nothing into the collection the rebuild emptied.
    assert setup.index.upserts[-1] == 10
    setup.index.write_gate.set()
    await asyncio.sleep(0.3)
    assert await setup.index.count(resource_id) == 0


async def test_the_rebuild_of_a_damaged_resource_embeds_the_next_page_while_the_last_is_written(
    make: Any,
) -> None:
    setup = make(pipeline_batch=10)
    thread_id, resource_id = await new_thread(setup)
    ids = await setup.save(thread_id, resource_id, [f"record number {n}" for n in range(25)])
    calls_before = len(setup.embedder.calls)
    setup.index.write_gate.clear()
    await setup.semantic._heal(VectorIndexDamaged(resource_id, "as a test says"))
    assert await setup.index.count(resource_id) == 0  # dropped before the rebuild refills it

    async def embedded() -> int:
        return len(setup.embedder.calls) - calls_before >= 2

    # The first page's write is held: the second page is embedded meanwhile, the third waits for it.
    await eventually(embedded, timeout=10, what="the second page embedded during the first page's write")
    await asyncio.sleep(0.2)
    assert setup.embedder.calls[calls_before:] == [10, 10]
    assert await setup.services.repository.outbox_backlog() == 25
    setup.index.write_gate.set()
    await asyncio.wait_for(setup.semantic.rebuilt(), 10)
    assert setup.index.upserts[-3:] == [10, 10, 5]
    assert await setup.services.repository.outbox_backlog() == 0
    assert sorted(await setup.hits("record number", thread_id, resource_id)) == sorted(ids)


async def test_a_search_of_a_damaged_resource_waits_for_its_rebuild(
    repository: Repository, tmp_path: Path
) -> None:
    path = tmp_path / "chroma"
    first = Setup(repository, path)
    thread_id, resource_id = await new_thread(first)
    other_thread, other_resource = await new_thread(first)
    ids = await first.save(thread_id, resource_id, ["apple pie", "banana bread", "cherry tart"])
    kept = await first.save(other_thread, other_resource, ["apple strudel"])
    await first.semantic.aclose()
    # What a process that died while writing the resource's collection leaves behind (ChromaIndex's
    # write journal): the next one to open the directory must not trust that collection.
    notes = path / ".recallql-writing"
    notes.mkdir(exist_ok=True)
    (notes / collection_name(resource_id, "hash-64", DIMENSION)).write_text(json.dumps(resource_id))
    setup = Setup(repository, path, rebuild_wait=0.3)
    try:
        # The query's embedding cached, then the embedder held: the rebuild cannot finish.
        assert await setup.hits("apple pie", other_thread, other_resource) == kept
        setup.embedder.gate.clear()
        seen = len(setup.embedder.requests)
        REQUEST.set("the search that met the damage")
        with pytest.raises(ServiceUnavailable, match="is being rebuilt from the database") as unavailable:
            await setup.hits("apple pie", thread_id, resource_id)
        assert unavailable.value.code == "SERVICE_UNAVAILABLE"
        assert await setup.index.count(resource_id) == 0  # dropped, waiting to be filled
        assert await setup.services.repository.outbox_backlog() == 3
        # Searches that come meanwhile wait for the rebuild too, and answer in full once it is done.
        setup.semantic.rebuild_wait = 30
        search = asyncio.create_task(setup.hits("apple pie", thread_id, resource_id))
        await asyncio.sleep(0.1)
        assert not search.done()
        setup.embedder.gate.set()
        assert sorted(await asyncio.wait_for(search, 10)) == sorted(ids)
        await setup.semantic.rebuilt()
        assert await setup.services.repository.outbox_backlog() == 0
        assert await setup.index.count(resource_id) == 3
        assert await setup.hits("apple pie", other_thread, other_resource) == kept  # never touched
        assert not any(notes.iterdir())
        # The rebuild outlives that search: it ran as the server's own work, not in its context.
        assert setup.embedder.requests[seen:] and set(setup.embedder.requests[seen:]) == {None}
    finally:
        setup.embedder.gate.set()
        await setup.semantic.aclose()


async def test_the_pipeline_runs_outside_the_context_of_the_request_that_started_it(make: Any) -> None:
    setup = make()
    thread_id, resource_id = await new_thread(setup)

    async def save_as(request: str, text: str) -> None:
        REQUEST.set(request)
        await setup.save(thread_id, resource_id, [text])

    # Each save runs as its own request (a task, as the web server runs them); the first starts the
    # pipeline, which then embeds for both.
    await asyncio.create_task(save_as("first", "one"))
    await asyncio.create_task(save_as("second", "two"))
    assert setup.embedder.requests == [None, None]


async def test_updates_and_deletes_go_through_the_pipeline_in_order(make: Any) -> None:
    setup = make(background=True)
    thread_id, resource_id = await new_thread(setup)
    (first,) = await setup.save(thread_id, resource_id, ["giraffe"])
    from resolvers.messages import MessagePatch

    await setup.services.messages.update(
        [MessagePatch(id=first, content={"format": 2, "parts": [{"type": "text", "text": "zebra"}]})],
        principal=OPEN,
    )
    # The search waits for both writes: the vector now is the updated text's.
    found = await setup.semantic.search(
        "zebra", thread_id=thread_id, resource_id=resource_id, resource_scope=True, top_k=1
    )
    assert [(h.message_id, round(h.score, 6)) for h in found.hits] == [(first, 1.0)]
    await setup.services.messages.delete([first], principal=OPEN)
    assert await setup.hits("zebra", thread_id, resource_id) == []
    assert await setup.index.count(resource_id) == 0


async def test_a_message_moved_out_of_the_null_resource_takes_its_vectors_along(
    make: Any, repository: Repository
) -> None:
    # Rows without a resource come from imports (Mastra's resourceId column may be NULL); their vectors
    # live in the null resource's collection, and a move must take them out of it.
    from resolvers.messages import MessagePatch

    setup = make()
    thread_id, resource_id = await new_thread(setup)
    orphan = MessageRecord(
        id=uid("m"),
        thread_id=thread_id,
        resource_id=None,
        role="user",
        type="v2",
        created_at=1_000,
        content={"format": 2, "parts": [{"type": "text", "text": "okapi"}]},
    )
    await repository.save_messages([orphan], now=1_000, track_vectors=True)
    await setup.semantic.sync([orphan.id])
    assert await setup.index.count(None) == 1

    await setup.services.messages.update(
        [MessagePatch(id=orphan.id, resource_id=resource_id)], principal=OPEN
    )

    assert await setup.index.count(None) == 0
    assert await setup.hits("okapi", thread_id, resource_id) == [orphan.id]
    # The thread's search reads both collections (the thread held a row without a resource): one hit.
    found = await setup.semantic.search(
        "okapi", thread_id=thread_id, resource_id=None, resource_scope=False, top_k=10
    )
    assert [h.message_id for h in found.hits] == [orphan.id]


async def test_outbox_ids_are_never_handed_out_again(make: Any, repository: Repository) -> None:
    # A writer settles the entries it read by id: an emptied outbox must not give a new entry one of them.
    setup = make()
    thread_id, resource_id = await new_thread(setup)
    (mid,) = await setup.save(thread_id, resource_id, ["giraffe"])
    stored = (await repository.get_messages([mid]))[mid]
    seen: list[int] = []
    for n in range(3):
        await repository.save_messages([stored], now=n, track_vectors=True)
        entries, _ = await repository.outbox_snapshot(message_ids=[mid])
        ids = [e.id for e in entries if e.id is not None]
        seen.extend(ids)
        await repository.outbox_done(ids)
        assert await repository.outbox_backlog() == 0
    assert len(seen) == 3 and seen == sorted(set(seen)), seen


async def test_settling_more_entries_than_one_statement_can_bind(make: Any, repository: Repository) -> None:
    # A merged write (or a large RECALLQL_VECTOR_BATCH) settles many thousand entries at once; PostgreSQL
    # binds at most 32,767 parameters per statement.
    setup = make()
    thread_id, resource_id = await new_thread(setup)
    stored = [
        MessageRecord(
            id=uid("m"),
            thread_id=thread_id,
            resource_id=resource_id,
            role="user",
            type="v2",
            created_at=1_000 + n,
            content=_text(f"note {n}"),
        )
        for n in range(1_100)
    ]
    await repository.save_messages(stored, now=1_000, track_vectors=True)
    for _ in range(30):
        await repository.outbox_queue_resource(resource_id)
    entries, _ = await repository.outbox_snapshot(limit=40_000)
    ids = [e.id for e in entries if e.id is not None]
    assert len(ids) == 31 * 1_100
    assert await repository.outbox_done(ids) == []
    assert await repository.outbox_backlog() == 0


async def held_write(
    setup: Setup, start: Callable[[], Awaitable[Any]]
) -> tuple[asyncio.Event, asyncio.Task[Any]]:
    """Starts `start` with the index's next upsert held; returns once that upsert is waiting."""
    hold = asyncio.Event()
    setup.index.hold_next = hold
    before = len(setup.index.upserts)
    task = asyncio.ensure_future(start())

    async def waiting() -> bool:
        assert not task.done(), task
        return len(setup.index.upserts) > before

    await eventually(waiting, timeout=10, what="the held upsert")
    return hold, task


async def drain_held_over_an_older_version(
    setup: Setup, repository: Repository
) -> tuple[str, str, str, asyncio.Event, asyncio.Task[Any]]:
    """A message saved as "giraffe", then changed to "zebra" by a writer whose own vector write never ran
    (a crash): the drain takes that work and is held just before its upsert. Returns the thread, the
    resource, the message, the hold and the drain."""
    thread_id, resource_id = await new_thread(setup)
    (mid,) = await setup.save(thread_id, resource_id, ["giraffe"])
    stored = (await repository.get_messages([mid]))[mid]
    await repository.save_messages([replace(stored, content=_text("zebra"))], now=1, track_vectors=True)
    hold, drain = await held_write(setup, setup.semantic.drain)
    return thread_id, resource_id, mid, hold, drain


async def scored_hits(setup: Setup, text: str, thread_id: str, resource_id: str) -> list[tuple[str, float]]:
    found = await setup.semantic.search(
        text, thread_id=thread_id, resource_id=resource_id, resource_scope=True, top_k=5
    )
    return [(h.message_id, round(h.score, 6)) for h in found.hits]


@pytest.mark.parametrize("change", ["update", "delete"])
async def test_a_late_drain_write_does_not_undo_a_newer_change(
    make: Any, repository: Repository, change: str
) -> None:
    # The drain reads a message, and before its write lands the message changes again and the pipeline
    # writes (or deletes) that version's vectors and settles the outbox. The drain's late write must not
    # be the index's last word.
    from resolvers.messages import MessagePatch

    setup = make()
    thread_id, resource_id, mid, hold, drain = await drain_held_over_an_older_version(setup, repository)

    if change == "update":
        await setup.services.messages.update([MessagePatch(id=mid, content=_text("okapi"))], principal=OPEN)
    else:
        await setup.services.messages.delete([mid], principal=OPEN)
    hold.set()
    await drain

    assert await repository.outbox_backlog() == 0
    if change == "update":
        assert await scored_hits(setup, "okapi", thread_id, resource_id) == [(mid, 1.0)]
    else:
        assert await setup.index.count(resource_id) == 0


async def test_a_late_write_that_fails_after_landing_does_not_undo_a_newer_change(
    make: Any, repository: Repository
) -> None:
    # As above, but the drain's late upsert lands and then reports a failure: its entries are gone
    # (the pipeline settled them), so unless the failure queues the changed message again, nothing would.
    from resolvers.messages import MessagePatch

    setup = make()
    thread_id, resource_id, mid, hold, drain = await drain_held_over_an_older_version(setup, repository)
    await setup.services.messages.update([MessagePatch(id=mid, content=_text("okapi"))], principal=OPEN)
    setup.index.fail_next_upsert = True
    hold.set()
    with pytest.raises(VectorIndexError):
        await drain

    assert await setup.semantic.drain() == 1
    assert await scored_hits(setup, "okapi", thread_id, resource_id) == [(mid, 1.0)]


async def test_a_thread_search_leaves_out_a_message_that_left_the_thread_before_its_vectors(
    make: Any, repository: Repository
) -> None:
    # A move whose vector work is still queued (the index down, or the drain not there yet) leaves the
    # message's vector naming its old thread. A thread-scoped recall there finds it, but returns it only
    # while the message is still in that thread; a resource-scoped one, wherever it is in the resource.
    from resolvers.recall import RecallArgs

    setup = make()
    thread_id, resource_id = await new_thread(setup)
    other_thread = uid("t")
    await setup.services.threads.create(resource_id=resource_id, thread_id=other_thread, principal=OPEN)
    giraffe, okapi = await setup.save(thread_id, resource_id, ["giraffe", "okapi"])
    stored = (await repository.get_messages([giraffe]))[giraffe]
    await repository.save_messages([replace(stored, thread_id=other_thread)], now=1, track_vectors=True)

    found = await setup.semantic.search(
        "giraffe", thread_id=thread_id, resource_id=None, resource_scope=False, top_k=1
    )
    assert [h.message_id for h in found.hits] == [giraffe]  # the stale vector is still there

    async def recalled(resource: str | None, scope: str) -> list[str]:
        config = {"semanticRecall": {"topK": 1, "messageRange": 0, "scope": scope}}
        args = RecallArgs(
            thread_id=thread_id,
            resource_id=resource,
            per_page=0,
            thread_config=config,
            vector_search_string="giraffe",
        )
        result = await setup.services.recall.recall(args, principal=OPEN)
        return [m.id for m in result.messages]

    assert await recalled(None, "thread") == []
    assert await recalled(resource_id, "thread") == []
    assert await recalled(resource_id, "resource") == [giraffe]
    # Once the move's vector work is done, the thread's search finds what is in the thread.
    assert await setup.semantic.drain() == 1
    assert await recalled(None, "thread") == [okapi]


async def test_a_late_move_that_fails_after_its_delete_does_not_lose_the_vectors(
    make: Any, repository: Repository
) -> None:
    # The drain takes a move r1 -> r2 and is held just before it deletes from r1; meanwhile the message
    # moves back to r1 and the pipeline writes it there. The drain's delete then removes those vectors,
    # and its upsert into r2 fails: the message must still end with its vectors in r1 alone.
    from resolvers.messages import MessagePatch

    setup = make()
    thread_id, r1 = await new_thread(setup)
    r2 = uid("r")
    (mid,) = await setup.save(thread_id, r1, ["giraffe"])
    stored = (await repository.get_messages([mid]))[mid]
    await repository.save_messages([replace(stored, resource_id=r2)], now=1, track_vectors=True)
    hold = asyncio.Event()
    setup.index.hold_next_delete = hold
    drain = asyncio.ensure_future(setup.semantic.drain())
    await asyncio.wait_for(setup.index.deleting.wait(), 10)
    await setup.services.messages.update([MessagePatch(id=mid, resource_id=r1)], principal=OPEN)
    assert (await setup.index.count(r1), await setup.index.count(r2)) == (1, 0)
    setup.index.fail_next_upsert = True  # it lands in r2, then fails
    hold.set()
    with pytest.raises(VectorIndexError):
        await drain

    await setup.semantic.drain()
    assert (await setup.index.count(r1), await setup.index.count(r2)) == (1, 0)
    assert await setup.hits("giraffe", thread_id, r1) == [mid]


async def test_a_late_reindex_write_does_not_undo_a_newer_change(make: Any, repository: Repository) -> None:
    from resolvers.messages import MessagePatch

    setup = make()
    thread_id, resource_id = await new_thread(setup)
    (mid,) = await setup.save(thread_id, resource_id, ["giraffe"])
    hold, reindex = await held_write(setup, partial(setup.semantic.reindex, resource_id=resource_id))

    await setup.services.messages.update([MessagePatch(id=mid, content=_text("okapi"))], principal=OPEN)
    hold.set()
    assert await reindex == 1

    assert await scored_hits(setup, "okapi", thread_id, resource_id) == [(mid, 1.0)]
    assert await repository.outbox_backlog() == 0


async def test_repairing_the_null_resource_rebuilds_its_collection_alone(
    make: Any, repository: Repository
) -> None:
    setup = make()
    thread_id, resource_id = await new_thread(setup)
    (kept,) = await setup.save(thread_id, resource_id, ["giraffe"])
    orphan = MessageRecord(uid("m"), thread_id, None, "user", "v2", 1_000, _text("okapi"))
    await repository.save_messages([orphan], now=1_000, track_vectors=True)
    await setup.semantic.sync([orphan.id])
    # A vector SQL knows nothing of, among those of messages stored without a resource.
    await setup.index.upsert([VectorItem("ghost", thread_id, None, 0, REF.embed("a ghost"))])

    broken = [c for c in await setup.semantic.check() if not c.ok]
    assert [(c.resource_id, c.stray) for c in broken] == [(None, ["ghost"])]
    assert await setup.semantic.repair(broken) == [None]

    assert setup.index.drops == [[None]]  # not every collection, as it used to be
    again = await setup.semantic.check(without_resource=True)
    assert [(c.resource_id, c.ok, c.vectors) for c in again] == [(None, True, 1)]
    assert await setup.hits("giraffe", thread_id, resource_id) == [kept]


async def test_an_entry_queued_by_older_code_is_read_as_it_was_then(
    make: Any, repository: Repository
) -> None:
    # Entries queued before migration 0002 (or by a replica older than it) do not say whether the
    # message was stored: a deleted message's entry naming no resource must still clean the null
    # collection, as it did then.
    from models.tables import outbox_table

    setup = make()
    thread_id, _ = await new_thread(setup)
    orphan = MessageRecord(uid("m"), thread_id, None, "user", "v2", 1_000, _text("okapi"))
    await repository.save_messages([orphan], now=1_000, track_vectors=True)
    await setup.semantic.sync([orphan.id])
    assert await setup.index.count(None) == 1
    await repository.delete_messages([orphan.id], now=2_000)
    async with repository.engine.begin() as conn:
        await conn.execute(
            outbox_table.insert().values(message_id=orphan.id, previous_resource_id=None, created_at=0)
        )

    assert await setup.semantic.drain() == 1
    assert await setup.index.count(None) == 0


@pytest.mark.parametrize("move", [False, True], ids=["stay", "move"])
async def test_a_save_past_its_outbox_limit_writes_all_its_messages(
    make: Any, repository: Repository, move: bool
) -> None:
    # The pipeline reads a save's outbox entries under a limit (here max(4, 4 per message) = 8): a message
    # with more entries queued than that must not keep the save's other messages from their vectors, nor,
    # when the save moves them to another resource, leave their old vectors behind before it answers
    # (a search of the thread would find them twice).
    setup = make(drain_batch=4)
    thread_id, r1 = await new_thread(setup)
    (busy,) = await setup.save(thread_id, r1, ["aardvark"])
    other = (await setup.save(thread_id, r1, ["pangolin"]))[0] if move else uid("m")
    stored = (await repository.get_messages([busy]))[busy]
    for n in range(12):  # queued by writers whose pipeline never ran (crashed, another replica)
        await repository.save_messages([replace(stored, created_at=n)], now=n, track_vectors=True)
    target = uid("r") if move else None
    await setup.services.messages.save(
        [
            MessageInput(id=i, thread_id=thread_id, resource_id=target, role="user", content=_text(text))
            for i, text in ((busy, "aardvark"), (other, "pangolin"))
        ],
        principal=OPEN,
    )

    assert await repository.outbox_backlog() > 0, "the limit was not reached: nothing tested"
    assert other in await setup.hits("pangolin", thread_id, target or r1)
    if target is not None:
        assert (await setup.index.count(r1), await setup.index.count(target)) == (0, 2)
        found = await setup.semantic.search(
            "pangolin", thread_id=thread_id, resource_id=None, resource_scope=False, top_k=10
        )
        assert sorted(h.message_id for h in found.hits) == sorted([busy, other])


async def test_a_new_message_without_vectors_deletes_nothing_from_other_collections(make: Any) -> None:
    setup = make()
    thread_id, resource_id = await new_thread(setup)
    await setup.services.messages.save(
        [
            MessageInput(
                thread_id=thread_id,
                resource_id=resource_id,
                role="system",
                content={"format": 2, "parts": [{"type": "text", "text": "be brief"}]},
            )
        ],
        principal=OPEN,
    )
    assert None not in [r for call in setup.index.deletes for r in call]


async def test_saved_messages_are_embedded_while_sql_is_read_and_sql_wins(make: Any) -> None:
    setup = make(background=True)
    thread_id, resource_id = await new_thread(setup)
    other_thread, other_resource = await new_thread(setup)
    repository = setup.services.repository
    read_gate = asyncio.Event()
    read = repository.outbox_snapshot

    async def gated_read(**kwargs: Any) -> Any:
        await read_gate.wait()
        return await read(**kwargs)

    repository.outbox_snapshot = gated_read  # type: ignore[method-assign]
    saved = await setup.save(thread_id, resource_id, ["alpha", "bravo", "charlie", "delta"])
    for _ in range(100):
        if setup.embedder.calls:
            break
        await asyncio.sleep(0.02)
    # The saved texts are being embedded although the pipeline has not read them back yet.
    assert setup.embedder.calls == [4]
    # Before that read, SQL changes under the pipeline (another replica's requests, say): bravo gets a
    # new text, charlie is deleted, delta moves to another resource's thread.
    rows = await repository.get_messages(saved)
    by_text = {embedding_text(m.content): m.id for m in rows.values()}
    ids = [by_text[text] for text in ("alpha", "bravo", "charlie", "delta")]
    now = rows[ids[0]].created_at + 1000
    await repository.save_messages(
        [
            replace(rows[ids[1]], content={"format": 2, "parts": [{"type": "text", "text": "foxtrot"}]}),
            replace(rows[ids[3]], thread_id=other_thread, resource_id=other_resource),
        ],
        now=now,
        track_vectors=True,
    )
    await repository.delete_messages([ids[2]], now=now, track_vectors=True)
    read_gate.set()
    assert await setup.semantic.flush(10)
    # What SQL holds wins: the two changed messages were embedded again, charlie was not written.
    assert setup.embedder.calls == [4, 2]
    assert await setup.index.stored(resource_id) == {(ids[0], 0), (ids[1], 0)}
    assert await setup.index.stored(other_resource) == {(ids[3], 0)}
    found = await setup.semantic.search(
        "foxtrot", thread_id=thread_id, resource_id=resource_id, resource_scope=True, top_k=1
    )
    assert [(h.message_id, round(h.score, 6)) for h in found.hits] == [(ids[1], 1.0)]
    assert await repository.outbox_backlog() == 0


# ---------------------------------------------------------------------------------------------- over HTTP
SAVE = "mutation($m: [MessageInput!]!) { saveMessages(messages: $m) { messages { id } } }"
CREATE = "mutation($input: CreateThreadInput!) { createThread(input: $input) { id } }"
SEARCH = """query($t: ID!, $s: String) {
  recall(threadId: $t, perPage: 0, vectorSearchString: $s,
         threadConfig: {semanticRecall: {options: {topK: 5, messageRange: {size: 0}, scope: THREAD}}}) {
    messages { id } } }"""


@pytest.mark.parametrize("engine", ["sqlite"])
async def test_background_mode_over_http_reads_its_writes(engine: str, tmp_path: Path) -> None:
    with embed_server_process() as embed_url:
        async with database(engine, tmp_path) as url:
            env = {
                **http_embedder_env(embed_url),
                "RECALLQL_DATABASE_URL": url,
                "RECALLQL_VECTOR_WRITES": "background",
            }
            with running_server(tmp_path / "data", env) as server:
                api = Api(server.url)
                thread_id = uid("t")
                await api.execute(CREATE, input={"id": thread_id, "resourceId": uid("r")})
                for n in range(5):
                    message = text_message(thread_id=thread_id, id=f"{thread_id}-m{n}", text=f"topic{n} note")
                    await api.execute(SAVE, m=[message])
                    # Right after each acknowledged save, a search in its thread finds it (perPage 0:
                    # only vector hits are returned, in time order).
                    found = await api.execute(SEARCH, t=thread_id, s=f"topic{n} note")
                    hits = [m["id"] for m in found["recall"]["messages"]]
                    assert hits == [f"{thread_id}-m{k}" for k in range(n + 1)]


async def _vectors_of(
    setup: Setup, resource_id: str, ids: Sequence[str]
) -> dict[str, dict[int, list[float]]]:
    found = await setup.index.vectors(resource_id, ids)
    return {i: {c: [round(float(x), 6) for x in v] for c, v in chunks.items()} for i, chunks in found.items()}


async def test_a_clone_copies_its_sources_vectors_instead_of_embedding_them(make: Any) -> None:
    """A clone's copies have their sources' texts: their vectors are the sources' (every chunk of a long
    text too), read from the index and written under the copies' ids, not embedded again; searches of
    the clone find them, into another resource as into the same one."""
    setup = make()
    thread_id, resource_id = await new_thread(setup)
    long_text = " ".join(f"word{n}" for n in range(5000))  # several chunks of 16,384 units
    saved = await setup.save(thread_id, resource_id, ["apples and pears", "a trip to lisbon", long_text])
    embedded = sum(setup.embedder.calls)
    assert embedded >= 5  # two short texts and at least three chunks
    sources = await _vectors_of(setup, resource_id, saved)
    assert len(sources[saved[2]]) >= 3
    for target in (None, uid("r")):
        clone = await setup.services.threads.clone(thread_id, resource_id=target, principal=OPEN)
        copies = [clone.message_id_map[i] for i in saved]
        assert sum(setup.embedder.calls) == embedded, "a copy was embedded again"
        owner = target or resource_id
        copied = await _vectors_of(setup, owner, copies)
        assert [copied[c] for c in copies] == [sources[s] for s in saved]
        assert await setup.services.repository.outbox_backlog() == 0
        found = await setup.semantic.search(
            "a trip to lisbon", thread_id=clone.thread.id, resource_id=owner, resource_scope=False, top_k=1
        )
        assert [h.message_id for h in found.hits] == [copies[1]]
        embedded += 1  # the search's own text


async def test_a_clone_embeds_the_copies_whose_sources_vectors_may_not_match_their_text(
    make: Any, repository: Repository
) -> None:
    """Only vectors the index certainly holds for the source's text are copied: a source with vector
    work queued (its vectors may be an older text's, or missing) or changed since the clone read it is
    embedded instead."""
    setup = make()
    thread_id, resource_id = await new_thread(setup)
    saved = await setup.save(thread_id, resource_id, ["one", "two", "three"])
    embedded = sum(setup.embedder.calls)
    # Work queued for every message of the resource (as a rebuild queues it), not yet written.
    assert await repository.outbox_queue_resource(resource_id) == 3
    clone = await setup.services.threads.clone(thread_id, principal=OPEN)
    assert sum(setup.embedder.calls) == embedded + 3
    copies = [clone.message_id_map[i] for i in saved]
    assert sorted(await setup.hits("two", clone.thread.id, resource_id)) == sorted([*saved, *copies])
    # A source as read before a change SQL has since made: not its vectors.
    await setup.semantic.drain()
    rows = await repository.get_messages(saved)
    earlier = replace(rows[saved[0]], content=_text("zero"))
    copy = replace(earlier, id=uid("m"))
    same = replace(rows[saved[1]], id=uid("m"))
    known = await setup.semantic.copied_vectors([(earlier, copy), (rows[saved[1]], same)])
    assert list(known) == [same.id]
    assert [(v.message_id, v.chunk) for v in known[same.id]] == [(same.id, 0)]


async def test_a_transfer_moves_its_messages_vectors_without_embedding_them(
    make: Any, repository: Repository
) -> None:
    """updateThreadResourceId: the messages keep their texts, so their vectors are copied from the old
    resource's collection to the new one's (and removed from the old), not embedded again; a message
    with other vector work queued besides the move's is embedded instead."""
    setup = make()
    thread_id, alice = await new_thread(setup)
    bob, carol = uid("r"), uid("r")
    long_text = " ".join(f"word{n}" for n in range(5000))
    saved = await setup.save(thread_id, alice, ["apples and pears", long_text])
    embedded = sum(setup.embedder.calls)
    before = await _vectors_of(setup, alice, saved)
    await setup.services.threads.transfer(thread_id, bob, principal=OPEN)
    assert sum(setup.embedder.calls) == embedded, "a moved message was embedded again"
    assert await _vectors_of(setup, bob, saved) == before
    assert await _vectors_of(setup, alice, saved) == {}
    assert await repository.outbox_backlog() == 0
    # Work queued besides the move's (as a rebuild queues it): the vectors may not be the text's.
    assert await repository.outbox_queue_resource(bob) == 2
    await setup.services.threads.transfer(thread_id, carol, principal=OPEN)
    assert sum(setup.embedder.calls) > embedded
    assert sorted(await _vectors_of(setup, carol, saved)) == sorted(saved)
    assert await _vectors_of(setup, bob, saved) == {}


async def test_the_drainer_tries_again_at_least_every_15_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The drain's back-off doubled up to 60 s: what was saved during an outage of a minute or more stayed
    out of searches for up to a minute after Chroma was back. It stops doubling at 15 s, and a drain that
    succeeds starts it over."""
    semantic = SemanticMemory(None, None, lambda _m, _d: None)  # type: ignore[arg-type]
    outcomes = iter([False] * 6 + [True] + [False] * 2)

    async def drain(**_: Any) -> int:
        if not next(outcomes):
            raise VectorIndexError("Chroma is down")
        return 0

    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 9:
            raise asyncio.CancelledError
        await real_sleep(0)

    monkeypatch.setattr(semantic, "drain", drain)
    monkeypatch.setattr(asyncio, "sleep", sleep)
    with pytest.raises(asyncio.CancelledError):
        await semantic.run_drainer(interval=1.0)
    assert waits == [2.0, 4.0, 8.0, 15.0, 15.0, 15.0, 1.0, 2.0, 4.0]
