"""Embedders: parity of the local ONNX model with chromadb's own function, the HTTP embedder against the
conformance embedding server, and Mastra's text rules (chunking, which text is embedded)."""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path

import httpx
import numpy as np
import numpy.typing as npt
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.embedders import (
    Embedder,
    Embedding,
    EmbeddingError,
    HttpEmbedder,
    OnnxMiniLMEmbedder,
    _chunk_words,
    _Workers,
    chunk_text,
    embedding_text,
)
from tests.support import EMBED_SERVER, MODEL_DIR, embed_reference, embed_server_process, loop_ticks

needs_model = pytest.mark.skipif(
    not (MODEL_DIR / "onnx/model.onnx").is_file() or not (MODEL_DIR / "onnx/tokenizer.json").is_file(),
    reason=f"all-MiniLM-L6-v2 not found in {MODEL_DIR}/onnx (set RECALLQL_EMBEDDING_MODEL_DIR)",
)
needs_embed_server = pytest.mark.skipif(
    not EMBED_SERVER.is_file(), reason=f"conformance embedding server not found at {EMBED_SERVER}"
)

LONG_ENGLISH = " ".join(
    f"Sentence {i} of a long meeting transcript talks about budgets, deadlines and the roadmap."
    for i in range(40)
)  # about 700 tokens: truncated at 256 by both sides
TEXTS = [
    "",
    " ",
    "\n",
    ".",
    "\U0001f600",
    "hi",
    "Remind me to buy milk tomorrow.",
    "What did we decide about the project deadline last Friday?",
    "The deploy failed again with a timeout during the database migration step.",
    "Der Zug nach München fährt um acht Uhr ab.",
    "Je préfère le thé au café, surtout le matin.",
    "¿Dónde está la estación de tren más cercana?",
    "Москва — столица России.",
    "我喜欢在周末去公园散步。",
    "明日の会議は午後三時からです。",
    "مرحبا، كيف حالك اليوم؟",
    "नमस्ते, आप कैसे हैं?",
    "def add(a: int, b: int) -> int:\n    return a + b",
    "word " * 300,
    LONG_ENGLISH,
    "x" * 3000,
]


def cosines(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> list[float]:
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return list((x * y).sum(axis=1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)))


# ------------------------------------------------------------------------------------------------------
# OnnxMiniLMEmbedder


@pytest.fixture(scope="module")
async def onnx_embedder() -> AsyncIterator[OnnxMiniLMEmbedder]:
    embedder = OnnxMiniLMEmbedder(MODEL_DIR)
    yield embedder
    await embedder.aclose()


async def test_the_model_in_the_folder_names_the_index_not_the_folder(tmp_path: Path) -> None:
    # Any model put where MiniLM is expected was named all-MiniLM-L6-v2, 384 dimensions: its vectors
    # went into MiniLM's collections and were compared with MiniLM's.
    other = tmp_path / "all-MiniLM-L6-v2"
    shutil.copytree(MODEL_DIR, other)
    model = other / "onnx" / "model.onnx"
    with model.open("r+b") as f:  # a megabyte of weights zeroed: another model
        f.seek(model.stat().st_size * 4 // 5)  # in the encoder layers (the first half is the vocabulary)
        f.write(bytes(1 << 20))
    minilm, changed, named = (
        OnnxMiniLMEmbedder(MODEL_DIR),
        OnnxMiniLMEmbedder(other),
        OnnxMiniLMEmbedder(other, name="my-model"),
    )
    try:
        assert (minilm.name, minilm.dimension) == ("all-MiniLM-L6-v2", 384)
        assert await changed.discover_dimension() == 384
        assert changed.name.startswith("onnx-") and len(changed.name) == len("onnx-") + 16
        assert named.name == "my-model"
        a, b = [(await e.embed(["the same text"])).vectors[0] for e in (minilm, changed)]
        assert float(np.dot(a, b)) < 0.99  # it is another model
    finally:
        for embedder in (minilm, changed, named):
            await embedder.aclose()


@pytest.fixture(scope="module")
def chroma_embed() -> Iterator[Callable[[list[str]], list[list[float]]]]:
    from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2

    saved = ONNXMiniLM_L6_V2.DOWNLOAD_PATH
    # A class attribute: this is how Chroma is pointed at a model folder without downloading.
    ONNXMiniLM_L6_V2.DOWNLOAD_PATH = MODEL_DIR
    function = ONNXMiniLM_L6_V2()
    try:
        yield lambda texts: [list(map(float, v)) for v in function(texts)]
    finally:
        ONNXMiniLM_L6_V2.DOWNLOAD_PATH = saved


@needs_model
async def test_onnx_matches_chromadb_function(
    onnx_embedder: OnnxMiniLMEmbedder, chroma_embed: Callable[[list[str]], list[list[float]]]
) -> None:
    ours = await onnx_embedder.embed(TEXTS)
    theirs = chroma_embed(TEXTS)
    # One float32 array: what Chroma takes as it is (no Python float per component on the way).
    assert isinstance(ours.vectors, np.ndarray) and ours.vectors.dtype == np.float32
    assert ours.vectors.shape == (len(TEXTS), 384)
    similarity = cosines(ours.vectors, theirs)
    worst = min(range(len(TEXTS)), key=lambda i: similarity[i])
    assert similarity[worst] >= 0.99999, f"text {worst} ({TEXTS[worst][:30]!r}): cosine {similarity[worst]}"
    assert np.abs(np.asarray(ours.vectors) - np.asarray(theirs)).max() < 1e-4


@needs_model
async def test_onnx_identity_and_unit_vectors(onnx_embedder: OnnxMiniLMEmbedder) -> None:
    embedder: Embedder = onnx_embedder  # structural typing, checked by the type checker
    assert embedder.name == "all-MiniLM-L6-v2"
    assert embedder.dimension == 384
    result = await onnx_embedder.embed(TEXTS)
    norms = np.linalg.norm(np.asarray(result.vectors), axis=1)
    assert np.allclose(norms, 1.0, atol=1e-5)


@needs_model
async def test_onnx_batch_equals_single(onnx_embedder: OnnxMiniLMEmbedder) -> None:
    batched = await onnx_embedder.embed(TEXTS)
    singles = [(await onnx_embedder.embed([text])).vectors[0] for text in TEXTS]
    assert min(cosines(batched.vectors, singles)) >= 0.99999


@needs_model
async def test_onnx_order_is_preserved_across_batches() -> None:
    # A small batch size forces several batches, and the length sort reorders texts inside the call.
    embedder = OnnxMiniLMEmbedder(MODEL_DIR, batch_size=3)
    try:
        forward = await embedder.embed(TEXTS)
        backward = await embedder.embed(TEXTS[::-1])
        assert min(cosines(forward.vectors, backward.vectors[::-1])) >= 0.99999
        # Each vector belongs to its own text: it is closest to that text's single embedding.
        singles = np.asarray([(await embedder.embed([t])).vectors[0] for t in TEXTS[5:12]])
        nearest = (np.asarray(forward.vectors[5:12]) @ singles.T).argmax(axis=1)
        assert list(nearest) == list(range(7))
    finally:
        await embedder.aclose()


@needs_model
def test_onnx_batches_hold_texts_of_similar_length() -> None:
    import random

    embedder = OnnxMiniLMEmbedder(MODEL_DIR, batch_size=8)
    rng = random.Random(3)
    for _ in range(200):
        lengths = [rng.choice([rng.randint(3, 20), rng.randint(40, 256)]) for _ in range(rng.randint(1, 60))]
        batches = embedder._batches([[0] * n for n in lengths])
        assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
        for batch, following in zip(batches, [*batches[1:], None], strict=True):
            sizes = [lengths[i] for i in batch]
            assert len(batch) <= 8
            assert sizes == sorted(sizes) and max(sizes) <= 1.5 * min(sizes) + 8
            if following is not None:  # a batch ends only when full or when the next text is too long
                assert len(batch) == 8 or lengths[following[0]] > 1.5 * min(sizes) + 8
    # Short chat messages of about the same length still share one batch.
    assert embedder._batches([[0] * n for n in (12, 9, 15, 11)]) == [[1, 3, 0, 2]]


@needs_model
async def test_onnx_token_counts(onnx_embedder: OnnxMiniLMEmbedder) -> None:
    assert (await onnx_embedder.embed(["hello world"])).tokens == 4  # [CLS] hello world [SEP]
    assert (await onnx_embedder.embed([""])).tokens == 2
    assert (await onnx_embedder.embed([LONG_ENGLISH])).tokens == 256  # truncated like Chroma
    assert (await onnx_embedder.embed(["hello world", ""])).tokens == 6
    assert await onnx_embedder.embed([]) == Embedding(vectors=[], tokens=0)


@needs_model
async def test_onnx_similar_texts_are_closer(onnx_embedder: OnnxMiniLMEmbedder) -> None:
    a, b, c = (
        await onnx_embedder.embed(["I love apples", "apples are my favourite fruit", "the train"])
    ).vectors
    assert np.dot(a, b) > np.dot(a, c) + 0.2


@needs_model
async def test_onnx_concurrent_calls_give_the_same_vectors(onnx_embedder: OnnxMiniLMEmbedder) -> None:
    alone = await onnx_embedder.embed(TEXTS)
    results = await asyncio.gather(*(onnx_embedder.embed(TEXTS[i:] + TEXTS[:i]) for i in range(4)))
    for i, result in enumerate(results):
        vectors = list(result.vectors)
        rotated_back = vectors[-i:] + vectors[:-i] if i else vectors
        assert min(cosines(alone.vectors, rotated_back)) >= 0.99999


@needs_model
async def test_onnx_embed_does_not_block_the_event_loop(onnx_embedder: OnnxMiniLMEmbedder) -> None:
    async with loop_ticks() as ticks:
        await onnx_embedder.embed([LONG_ENGLISH] * 64)
    assert ticks[0] > 5


async def test_workers_take_lower_priorities_first_and_skip_cancelled_jobs() -> None:
    workers = _Workers(1, "test-workers")
    gate = threading.Event()
    ran: list[str] = []

    def job(name: str) -> str:
        if name == "blocker":
            assert gate.wait(10)
        ran.append(name)
        return name

    try:
        blocker = workers.submit(0, job, "blocker")
        await asyncio.sleep(0.05)  # the one worker is now held by the blocker
        bulk = [workers.submit(5, job, f"bulk{n}") for n in range(3)]
        dropped = workers.submit(5, job, "dropped")
        query = workers.submit(1, job, "query")
        dropped.cancel()
        gate.set()
        assert await asyncio.gather(blocker, query, *bulk) == ["blocker", "query", "bulk0", "bulk1", "bulk2"]
        assert ran == ["blocker", "query", "bulk0", "bulk1", "bulk2"]  # the query overtook the bulk jobs

        def fails() -> None:
            raise ValueError("boom")

        with pytest.raises(ValueError, match="boom"):
            await workers.submit(0, fails)
    finally:
        gate.set()
        await asyncio.to_thread(workers.shutdown)
    assert "dropped" not in ran
    with pytest.raises(EmbeddingError, match="closed"):
        workers.submit(0, job, "late")


@needs_model
async def test_onnx_query_overtakes_a_bulk_call_and_a_cancelled_call_leaves_the_queue() -> None:
    # One text per batch: the bulk call queues 40 runs of a long text (tens of ms each).
    embedder = OnnxMiniLMEmbedder(MODEL_DIR, batch_size=1)
    runs = 0
    run_batch = embedder._run_batch

    def counted(ids: list[list[int]]) -> npt.NDArray[np.float32]:
        nonlocal runs
        runs += 1
        return run_batch(ids)

    embedder._run_batch = counted  # type: ignore[method-assign]
    try:
        await embedder.warmup()
        bulk = asyncio.create_task(embedder.embed([f"{LONG_ENGLISH} {n}" for n in range(40)]))
        while runs == 0:
            await asyncio.sleep(0.005)
        query = await embedder.embed(["hello world"])
        assert len(query.vectors) == 1
        assert not bulk.done() and runs < 40  # it ran next, not after the bulk call's queue
        bulk.cancel()
        with pytest.raises(asyncio.CancelledError):
            await bulk
        after_cancel = runs
        # A call of the same priority queues behind whatever the cancelled call left in the queue.
        await embedder.embed([f"hi {n}" for n in range(40)])
        assert runs <= after_cancel + 41  # its own 40 runs, and at most one the cancelled call had taken
    finally:
        await embedder.aclose()


@needs_model
async def test_onnx_several_workers_give_the_same_vectors(onnx_embedder: OnnxMiniLMEmbedder) -> None:
    embedder = OnnxMiniLMEmbedder(MODEL_DIR, workers=2, batch_size=4)
    try:
        # A call too small for a full batch per worker is cut into one per worker.
        assert len(embedder._batches([[0] * 10] * 6)) == 2
        assert len(embedder._batches([[0] * 10] * 20)) == 5
        alone = await onnx_embedder.embed(TEXTS)
        spread, small = await asyncio.gather(embedder.embed(TEXTS), embedder.embed(TEXTS[5:9]))
        assert min(cosines(alone.vectors, spread.vectors)) >= 0.99999
        assert min(cosines(alone.vectors[5:9], small.vectors)) >= 0.99999
        assert spread.tokens == alone.tokens
    finally:
        await embedder.aclose()


@needs_model
async def test_embedding_workers_setting_reaches_the_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    from web.settings import Settings
    from web.wiring import build_embedder

    monkeypatch.setenv("RECALLQL_EMBEDDING_WORKERS", "3")
    embedder = build_embedder(Settings(embedding_model_dir=MODEL_DIR, embeddings_url=None))
    assert isinstance(embedder, OnnxMiniLMEmbedder)
    try:
        assert (embedder._workers_count, embedder._threads) == (3, 1)
        assert len((await embedder.embed(["a", "b", "c"])).vectors) == 3
    finally:
        await embedder.aclose()
    monkeypatch.setenv("RECALLQL_EMBEDDING_WORKERS", "0")
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        Settings()


@needs_model
async def test_onnx_closed_embedder_raises() -> None:
    embedder = OnnxMiniLMEmbedder(MODEL_DIR)
    await embedder.warmup()
    await embedder.aclose()
    await embedder.aclose()  # idempotent
    with pytest.raises(EmbeddingError, match="closed"):
        await embedder.embed(["hello"])
    with pytest.raises(EmbeddingError, match="closed"):
        embedder.embed_sync(["hello"])


def test_onnx_missing_model_dir(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="contains onnx/"):
        OnnxMiniLMEmbedder(tmp_path)


# ------------------------------------------------------------------------------------------------------
# HttpEmbedder against the conformance server


@pytest.fixture(scope="module")
def embed_server_url() -> Iterator[str]:
    with embed_server_process() as url:
        yield url


@needs_embed_server
async def test_http_embedder_matches_reference(embed_server_url: str) -> None:
    reference = embed_reference()
    texts = ["talk about apple", "", "Apple pie, apple tart!", "ünïcödé only", "x" * 100] * 3
    embedder: Embedder = HttpEmbedder(embed_server_url, "hash-64", batch_size=4)
    try:
        result = await embedder.embed(texts)
        assert embedder.name == "hash-64"
        assert embedder.dimension == 64
        for text, vector in zip(texts, result.vectors, strict=True):
            assert vector == pytest.approx(reference.embed(text), abs=1e-12)
        assert result.tokens == sum(len(reference.tokens(t)) for t in texts)
        assert await embedder.embed([]) == Embedding(vectors=[], tokens=0)
    finally:
        await embedder.aclose()


@needs_embed_server
async def test_http_embedder_base_url_forms(embed_server_url: str) -> None:
    for base in (embed_server_url, embed_server_url + "/", embed_server_url + "/v1"):
        embedder = HttpEmbedder(base, "m")
        try:
            assert await embedder.discover_dimension() == 64
        finally:
            await embedder.aclose()


async def test_http_embedder_sends_bearer_key_and_sorts_by_index() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        data = [{"index": i, "embedding": [float(i), 1.0]} for i in (2, 0, 1)]  # out of order on purpose
        return httpx.Response(200, json={"data": data, "usage": {"prompt_tokens": 7}})

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    embedder = HttpEmbedder("http://embed.test", "m", api_key="sk-test", client=client)
    result = await embedder.embed(["a", "b", "c"])
    assert result == Embedding(vectors=[[0.0, 1.0], [1.0, 1.0], [2.0, 1.0]], tokens=7)
    assert seen[0].headers["authorization"] == "Bearer sk-test"
    assert seen[0].url == "http://embed.test/v1/embeddings"
    await embedder.aclose()
    assert not client.is_closed  # a client handed in belongs to the caller
    await client.aclose()


@needs_embed_server
async def test_http_embedder_errors(embed_server_url: str) -> None:
    # The conformance server answers 404 on any other path.
    embedder = HttpEmbedder(embed_server_url + "/nowhere", "m", max_retries=0)
    try:
        with pytest.raises(EmbeddingError, match="HTTP 404: not found") as info:
            await embedder.embed(["x"])
        assert info.value.status_code == 404
        with pytest.raises(EmbeddingError, match="not known yet"):
            _ = embedder.dimension
    finally:
        await embedder.aclose()


async def test_http_embedder_unreachable() -> None:
    embedder = HttpEmbedder("http://127.0.0.1:9", "m", max_retries=1, retry_backoff=0.01, timeout=2)
    try:
        with pytest.raises(EmbeddingError, match="failed") as info:
            await embedder.embed(["x"])
        assert info.value.status_code is None
    finally:
        await embedder.aclose()


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (500, {"error": {"message": "boom"}}, "HTTP 500: boom"),
        (200, {"data": [{"index": 0, "embedding": [1.0]}]}, "returned 1 embeddings for 2 texts"),
        (200, {"nope": []}, "malformed answer"),
        (
            200,
            {"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [1.0, 2.0]}]},
            "expected 1",
        ),
        # Vectors nobody can search with: they were written to the index (float() reads "nan").
        *(
            (
                200,
                {"data": [{"index": 0, "embedding": [1.0, bad]}, {"index": 1, "embedding": [1.0, 2.0]}]},
                "not a finite number",
            )
            for bad in (float("nan"), float("inf"), "nan", "0.5", None, True, 10**400)
        ),
        (
            200,
            {"data": [{"index": 0, "embedding": "12"}, {"index": 1, "embedding": "34"}]},
            "must be an array",
        ),
    ],
)
async def test_http_embedder_bad_answers(status: int, body: dict[str, object], message: str) -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        # json.dumps writes NaN and Infinity as some endpoints do (httpx's json= refuses them).
        return httpx.Response(status, content=json.dumps(body), headers={"content-type": "application/json"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        embedder = HttpEmbedder("http://embed.test", "m", client=client, max_retries=2, retry_backoff=0.001)
        with pytest.raises(EmbeddingError, match=message):
            await embedder.embed(["a", "b"])
    assert calls == (3 if status == 500 else 1)  # only server errors are retried


async def test_http_embedder_retries_then_succeeds() -> None:
    answers = [httpx.Response(503), httpx.Response(429), None]

    def handler(request: httpx.Request) -> httpx.Response:
        answer = answers.pop(0)
        return answer or httpx.Response(200, json={"data": [{"index": 0, "embedding": [0.6, 0.8]}]})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        embedder = HttpEmbedder("http://embed.test", "m", client=client, dimension=2, retry_backoff=0.001)
        result = await embedder.embed(["a"])
    assert result == Embedding(vectors=[[0.6, 0.8]], tokens=None)


@pytest.mark.parametrize(("status", "tries"), [(507, 3), (520, 3), (529, 3), (501, 1), (505, 1), (404, 1)])
async def test_http_embedder_retries_every_passing_server_error(status: int, tries: int) -> None:
    # Only 500 and 502-504 were retried; gateways and overloaded hosts answer 507 and 520-529.
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(status, json={"error": "busy"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        embedder = HttpEmbedder("http://embed.test", "m", client=client, retry_backoff=0.001)
        with pytest.raises(EmbeddingError) as failed:
            await embedder.embed(["a"])
    assert (calls, failed.value.status_code) == (tries, status)


async def test_a_bad_first_answer_does_not_become_the_dimension() -> None:
    # An empty first vector used to fix the dimension at 0, and every later answer was "wrong".
    answers = [[[]], [[0.6, 0.8], [0.6]], [[0.6, 0.8]]]

    def handler(request: httpx.Request) -> httpx.Response:
        vectors = answers.pop(0)
        return httpx.Response(
            200, json={"data": [{"index": i, "embedding": v} for i, v in enumerate(vectors)]}
        )

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        embedder = HttpEmbedder("http://embed.test", "m", client=client)
        with pytest.raises(EmbeddingError, match="returned a 0-dimensional vector"):
            await embedder.discover_dimension()
        with pytest.raises(EmbeddingError, match="returned a 1-dimensional vector, expected 2"):
            await embedder.embed(["a", "b"])
        assert await embedder.discover_dimension() == 2


def _vector_answers(
    log: list[list[str]] | None = None, fail_on: str | None = None, delay: float = 0.01
) -> tuple[Callable[[httpx.Request], Awaitable[httpx.Response]], Callable[[], int]]:
    """An endpoint that embeds text i as [len(text), 1] after `delay`, and records the most requests it
    ever had in flight at once."""
    in_flight = peak = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        texts = orjson.loads(request.content)["input"]
        if log is not None:
            log.append(texts)
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            await asyncio.sleep(delay)
        finally:
            in_flight -= 1
        if fail_on is not None and fail_on in texts:
            return httpx.Response(400, json={"error": {"message": "bad input"}})
        data = [{"index": i, "embedding": [float(len(t)), 1.0]} for i, t in enumerate(texts)]
        return httpx.Response(200, json={"data": data, "usage": {"total_tokens": len(texts)}})

    return handler, lambda: peak


async def test_http_embedder_sends_batches_side_by_side_within_its_bound() -> None:
    handler, peak = _vector_answers()
    texts = ["x" * n for n in range(1, 41)]
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        embedder = HttpEmbedder("http://embed.test", "m", client=client, batch_size=2, max_concurrency=3)
        # Two calls of 20 requests each, at once: the bound holds across calls, not per call.
        first, second = await asyncio.gather(embedder.embed(texts), embedder.embed(texts[::-1]))
    assert peak() == 3
    assert first.vectors == [[float(n), 1.0] for n in range(1, 41)]  # in input order whatever came first
    assert second.vectors == [[float(n), 1.0] for n in range(40, 0, -1)]
    assert first.tokens == second.tokens == 40


async def test_http_embedder_serves_a_query_before_the_queued_batches_of_a_bulk_call() -> None:
    sent: list[list[str]] = []
    handler, peak = _vector_answers(sent, delay=0.05)
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        embedder = HttpEmbedder("http://embed.test", "m", client=client, batch_size=1, max_concurrency=1)
        bulk = asyncio.create_task(embedder.embed([f"bulk {n}" for n in range(6)]))
        while not sent:  # the bulk call's first request is in flight, its other five wait
            await asyncio.sleep(0.005)
        query = await embedder.embed(["the query"])
        await bulk
    assert query.vectors == [[9.0, 1.0]]
    assert sent[:3] == [["bulk 0"], ["the query"], ["bulk 1"]]
    assert peak() == 1


async def test_http_embedder_a_cancelled_waiter_gives_up_its_place() -> None:
    sent: list[list[str]] = []
    handler, peak = _vector_answers(sent, delay=0.05)
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        embedder = HttpEmbedder("http://embed.test", "m", client=client, max_concurrency=1)
        first = asyncio.create_task(embedder.embed(["first"]))
        while not sent:
            await asyncio.sleep(0.005)
        waiting = asyncio.create_task(embedder.embed(["given up"]))
        await asyncio.sleep(0.01)
        waiting.cancel()
        await first
        async with asyncio.timeout(5):  # the slot the cancelled call waited for is free again
            last = await embedder.embed(["last"])
    assert last.vectors == [[4.0, 1.0]]
    assert ["given up"] not in sent and peak() == 1


async def test_http_embedder_one_failed_batch_fails_the_call_and_stops_the_rest() -> None:
    sent: list[list[str]] = []
    handler, _ = _vector_answers(sent, fail_on="bad", delay=0.05)
    texts = ["bad", *(f"t{n}" for n in range(30))]
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        embedder = HttpEmbedder("http://embed.test", "m", client=client, batch_size=1, max_concurrency=2)
        with pytest.raises(EmbeddingError, match="HTTP 400: bad input"):
            await embedder.embed(texts)
        await asyncio.sleep(0.2)  # anything not cancelled would go on sending meanwhile
    assert ["bad"] in sent and len(sent) < len(texts)


async def _rate_limited(
    retry_after: str, embedder_options: dict[str, float]
) -> tuple[list[float], int, object]:
    """One 429 with this Retry-After, then an answer; returns the waits, the requests and the result."""
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            return httpx.Response(429, headers={"Retry-After": retry_after}, json={"error": "slow down"})
        return httpx.Response(200, json={"data": [{"index": 0, "embedding": [0.6, 0.8]}]})

    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        embedder = HttpEmbedder("http://embed.test", "m", client=client, **embedder_options)
        embedder._sleep = sleep
        try:
            result: object = await embedder.embed(["a"])
        except EmbeddingError as exc:
            result = exc
    return waits, calls, result


async def test_http_embedder_waits_as_long_as_retry_after_asks() -> None:
    waits, calls, result = await _rate_limited("2", {"retry_backoff": 0.001})
    assert waits == [2.0] and calls == 2 and isinstance(result, Embedding)
    # Backoff longer than the answer asks: the backoff stands.
    waits, _, _ = await _rate_limited("0", {"retry_backoff": 0.3})
    assert waits == [0.3]
    # An HTTP date, as RFC 9110 allows.
    when = email.utils.format_datetime(
        datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=5), usegmt=True
    )
    waits, _, _ = await _rate_limited(when, {"retry_backoff": 0.001})
    assert len(waits) == 1 and 3.0 < waits[0] <= 5.0
    # Unreadable: the backoff.
    waits, _, _ = await _rate_limited("soon", {"retry_backoff": 0.001})
    assert waits == [0.001]


async def test_http_embedder_fails_at_once_when_retry_after_is_too_long() -> None:
    waits, calls, result = await _rate_limited("3600", {"retry_backoff": 0.001, "max_retry_after": 10})
    assert waits == [] and calls == 1
    assert isinstance(result, EmbeddingError) and result.status_code == 429
    assert "HTTP 429: slow down (the endpoint asks to retry after 3600 s)" in str(result)


async def test_embeddings_concurrency_setting_reaches_the_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    from web.settings import Settings
    from web.wiring import build_embedder

    monkeypatch.setenv("RECALLQL_EMBEDDINGS_CONCURRENCY", "2")
    embedder = build_embedder(Settings(embeddings_url="http://embed.test", embeddings_model="m"))
    assert isinstance(embedder, HttpEmbedder)
    handler, peak = _vector_answers()
    await embedder._client.aclose()
    embedder._client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    try:
        await asyncio.gather(*(embedder.embed([f"text {n}"]) for n in range(8)))
    finally:
        await embedder.aclose()
    assert peak() == 2
    monkeypatch.setenv("RECALLQL_EMBEDDINGS_CONCURRENCY", "0")
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        Settings()


def test_http_embedder_concurrency_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_concurrency"):
        HttpEmbedder("http://embed.test", "m", max_concurrency=0)


# ------------------------------------------------------------------------------------------------------
# Mastra's text rules


def test_chunk_text_matches_mastra_e15() -> None:
    # The lengths Mastra produced in experiment e15 (mastra-behaviour.md §3.1).
    long = " ".join(f"word{i}" for i in range(3000))
    assert [len(c) for c in chunk_text(long)] == [16376, 9512]
    assert " ".join(chunk_text(long)) == long
    assert [len(c) for c in chunk_text("x" * 40000)] == [16384, 16384, 7232]


def test_chunk_text_small_cases() -> None:
    assert chunk_text("") == []
    assert chunk_text("hello world") == ["hello world"]
    assert chunk_text("  hello \n\t world  ", 100) == ["hello world "]  # Mastra keeps one trailing space
    assert chunk_text("aa bb cc", 5) == ["aa bb", "cc"]
    assert chunk_text("a bbbbbbb c", 3) == ["a", "bbb", "bbb", "b", "c"]
    assert chunk_text("a\u00a0b\u3000c\ufeffd", 100) == ["a b c d"]  # JavaScript's \s, not Python's
    assert chunk_text("a\x1cb", 100) == ["a\x1cb"]
    # Lengths are counted in UTF-16 units, like JavaScript; a character is never split.
    assert chunk_text("\U0001f600" * 3, 4) == ["\U0001f600" * 2, "\U0001f600"]
    assert chunk_text("\U0001f600\U0001f600 a", 4) == ["\U0001f600\U0001f600", "a"]
    with pytest.raises(ValueError, match="positive"):
        chunk_text("a", 0)


@settings(max_examples=500, deadline=None)
@given(
    text=st.text(
        alphabet=st.sampled_from(["a", "b", "\U0001f600", " ", "\n", "\t", "\u00a0", "\u3000", "\x1c"]),
        max_size=40,
    ),
    size=st.integers(min_value=1, max_value=90),
)
def test_chunk_text_short_cut_agrees_with_the_word_walk(text: str, size: int) -> None:
    # chunk_text answers texts that fit whole without walking their words; the walk is Mastra's rule.
    assert chunk_text(text, size) == _chunk_words(text, size)


def test_chunk_text_never_exceeds_size() -> None:
    text = " ".join("w" * (i % 37 + 1) for i in range(2000)) + " " + "y" * 1000
    for size in (7, 50, 333):
        chunks = chunk_text(text, size)
        assert all(0 < len(c) <= size for c in chunks)
        assert "".join(chunks).replace(" ", "") == text.replace(" ", "")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            {"format": 2, "parts": [{"type": "text", "text": "hello"}], "content": "from content"},
            "from content",
        ),
        ({"format": 2, "parts": [{"type": "text", "text": "hello"}], "content": "   "}, "hello"),
        (
            {
                "format": 2,
                "parts": [
                    {"type": "text", "text": " a "},
                    {"type": "step-start"},
                    {"type": "text", "text": "b"},
                ],
            },
            "a  b",  # parts are not trimmed one by one: RecallQL stores them as given
        ),
        ({"format": 2, "parts": [{"type": "tool-invocation", "toolInvocation": {}}]}, None),
        ({"format": 2, "parts": [{"type": "text", "text": "  "}]}, None),
        ({"format": 2, "parts": []}, None),
        ({"format": 2, "parts": [], "content": "  kept as is  "}, "  kept as is  "),
        ({"format": 2, "parts": [{"type": "text"}, {"type": "text", "text": "x"}]}, "x"),
        ({"format": 2, "parts": [{"type": "text", "text": 1}, {"type": "text", "text": True}]}, "1 true"),
        ({"format": 2, "content": 42, "parts": [{"type": "text", "text": "t"}]}, "t"),
        ({}, None),
    ],
)
def test_embedding_text(content: dict[str, object], expected: str | None) -> None:
    assert embedding_text(content) == expected


def test_embedder_off_turns_semantic_recall_off_where_a_model_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from web.settings import Settings
    from web.wiring import build_semantic, has_embedder

    data = tmp_path / "data"
    model = data / "models" / "all-MiniLM-L6-v2"
    (model / "onnx").mkdir(parents=True)
    (model / "onnx" / "model.onnx").write_bytes(b"")  # found by its place; never loaded here
    monkeypatch.delenv("RECALLQL_EMBEDDING_MODEL_DIR", raising=False)
    monkeypatch.delenv("RECALLQL_EMBEDDINGS_URL", raising=False)
    monkeypatch.setenv("RECALLQL_DATA_DIR", str(data))
    assert Settings().resolved_model_dir() == model and has_embedder(Settings())

    monkeypatch.setenv("RECALLQL_EMBEDDER", "off")
    monkeypatch.setenv("RECALLQL_EMBEDDINGS_URL", "http://127.0.0.1:9")  # an endpoint too: still off
    monkeypatch.setenv("RECALLQL_EMBEDDINGS_MODEL", "hash-64")
    off = Settings()
    assert not has_embedder(off)
    assert build_semantic(off, None) is None
    assert not (data / "chroma").exists()
    monkeypatch.setenv("RECALLQL_EMBEDDER", "sometimes")
    with pytest.raises(ValueError, match="embedder"):
        Settings()

    monkeypatch.setenv("RECALLQL_EMBEDDER", "off")
    done = subprocess.run(
        [sys.executable, "-m", "web.cli", "reindex"],
        cwd=Path(__file__).parent.parent,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        done.returncode == 1 and "reindex: no embedder is configured (RECALLQL_EMBEDDER=off)" in done.stderr
    )


@pytest.mark.parametrize("command", [["serve", "--port", "9"], ["reindex"]])
def test_a_model_folder_without_the_model_is_a_setting_error(tmp_path: Path, command: list[str]) -> None:
    """RECALLQL_EMBEDDING_MODEL_DIR naming a folder without onnx/model.onnx: every worker failed as it
    started, a traceback each (exit 3), and `reindex` died with one. It is a bad setting, said once."""
    (tmp_path / "model").mkdir()
    env = {
        **os.environ,
        "RECALLQL_EMBEDDING_MODEL_DIR": str(tmp_path / "model"),
        "RECALLQL_DATA_DIR": str(tmp_path),
    }
    env.pop("RECALLQL_EMBEDDINGS_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "web.cli", *command], env=env, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stderr) == (
        2,
        "recallql: 1 setting(s) not valid:\n"
        f"  Value error, RECALLQL_EMBEDDING_MODEL_DIR: {tmp_path / 'model'} holds no onnx/model.onnx "
        "(it must be the folder that contains onnx/, as in all-MiniLM-L6-v2's download)\n",
    )
    # Not read when embedding is off.
    off = subprocess.run(
        [sys.executable, "-m", "web.cli", "migrate"],
        env={**env, "RECALLQL_EMBEDDER": "off"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert off.returncode == 0, off.stderr
