"""Text embedders for semantic recall, and the Mastra rules for what text gets embedded.

Two implementations of :class:`Embedder`:

* :class:`OnnxMiniLMEmbedder` runs all-MiniLM-L6-v2 locally with onnxruntime. It gives the same vectors as
  chromadb's ``ONNXMiniLM_L6_V2`` but pads each batch only to its longest text, which is what makes short
  chat messages cheap.
* :class:`HttpEmbedder` calls an OpenAI-compatible ``/v1/embeddings`` endpoint.

:func:`embedding_text` and :func:`chunk_text` reproduce @mastra/memory 1.31 (mastra-behaviour.md §3.1, §3.6).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import email.utils
import hashlib
import heapq
import itertools
import logging
import math
import os
import queue
import re
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import httpx
import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import onnxruntime
    import tokenizers

__all__ = [
    "Embedder",
    "Embedding",
    "EmbeddingError",
    "HttpEmbedder",
    "OnnxMiniLMEmbedder",
    "chunk_text",
    "embedding_text",
]


# A float32 array row per vector where the model runs here: no Python float per component to build,
# pickle to the Chroma child and convert back (background ingest of chat texts, A/B in one process:
# 79.6% of the raw embedder's rate against 77.9% with lists). Lists where vectors come from JSON.
Vectors = list[list[float]] | npt.NDArray[np.float32]


@dataclass
class Embedding:
    """One vector per input text, in input order; ``tokens`` is None when the backend does not say."""

    vectors: Vectors
    tokens: int | None


class EmbeddingError(Exception):
    """The embedder could not produce vectors (bad endpoint answer, HTTP error, closed embedder...)."""

    def __init__(self, message: str, *, status_code: int | None = None, unreachable: bool = False) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.unreachable = unreachable  # no answer at all (connection refused, timed out...)


class Embedder(Protocol):
    """What the recall engine needs from an embedding model.

    ``name`` and ``dimension`` together are the model identity: vectors of different identities are never
    compared (the vector index keeps them in separate collections).
    """

    @property
    def name(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> Embedding: ...

    async def aclose(self) -> None: ...


# --------------------------------------------------------------------------------------------------------
# Mastra's text rules

# JavaScript's \s (and what String.prototype.trim removes). Python's own \s / str.split() differ on a few
# code points (\x1c-\x1f, \x85, \ufeff), and chunk boundaries must match Mastra's.
_JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680"
    + "".join(chr(c) for c in range(0x2000, 0x200B))
    + "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_JS_WHITESPACE_RUN = re.compile(f"[{re.escape(_JS_WHITESPACE)}]+")

# Mastra: chunkText(text, tokenSize = 4096) with CHARS_PER_TOKEN = 4.
DEFAULT_CHUNK_SIZE = 4096 * 4


def _utf16_len(text: str) -> int:
    # JavaScript string lengths count UTF-16 code units: characters outside the BMP count twice.
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def _hard_split(word: str, size: int) -> list[str]:
    # Mastra slices by UTF-16 units and may cut a surrogate pair in half; we never split a character, so a
    # piece may come out one unit short.
    pieces: list[str] = []
    start = 0
    units = 0
    for i, ch in enumerate(word):
        width = 2 if ord(ch) > 0xFFFF else 1
        if units + width > size:
            pieces.append(word[start:i])
            start, units = i, 0
        units += width
    pieces.append(word[start:])
    return pieces


def chunk_text(text: str, size: int = DEFAULT_CHUNK_SIZE) -> list[str]:
    """Split ``text`` the way Mastra's ``chunkText`` does before embedding.

    Words (runs between JavaScript whitespace) are joined with single spaces into chunks of at most
    ``size`` UTF-16 units; a word longer than ``size`` is flushed and hard-split on its own. An empty text
    gives no chunks. Like Mastra, a trailing whitespace run leaves a trailing space on the last chunk.
    """
    if size < 1:
        raise ValueError("size must be positive")
    if 2 * len(text) <= size:
        # Every chat message: even at two UTF-16 units per character the text fits in one chunk, so
        # the result is the text with each whitespace run made one space and a leading one dropped.
        joined = _JS_WHITESPACE_RUN.sub(" ", text)
        joined = joined[1:] if joined.startswith(" ") else joined
        return [joined] if joined else []
    return _chunk_words(text, size)


def _chunk_words(text: str, size: int) -> list[str]:
    chunks: list[str] = []
    current: list[str] = []
    current_len = 0
    for word in _JS_WHITESPACE_RUN.split(text):
        word_len = _utf16_len(word)
        if word_len > size:
            if current_len:
                chunks.append("".join(current))
                current, current_len = [], 0
            chunks.extend(_hard_split(word, size))
            continue
        # Mastra tests the accumulated string, not the word list: an empty leading word adds nothing and
        # the next word then gets no separator.
        sep = 1 if current_len else 0
        if current_len + sep + word_len > size:
            if current_len:
                chunks.append("".join(current))
            current, current_len = [word], word_len
        else:
            if sep:
                current.append(" ")
            current.append(word)
            current_len += sep + word_len
    if current_len:
        chunks.append("".join(current))
    return chunks


def _js_string(value: Any) -> str:
    # Array.prototype.join turns null/undefined into "" and other scalars into their String() form.
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, float):
        return repr(value)
    # Objects would print as "[object Object]" in JavaScript; text parts never hold them in practice.
    return ""


def embedding_text(content: Mapping[str, Any]) -> str | None:
    """The text Mastra embeds for a stored message ``content`` (format 2), or None when there is none.

    ``content.content`` when it is a non-blank string (as is, untrimmed), otherwise the ``text`` parts
    joined with one space and trimmed; tool-only or empty messages give None.
    """
    direct = content.get("content")
    if isinstance(direct, str) and direct.strip(_JS_WHITESPACE):
        return direct
    parts = content.get("parts")
    if isinstance(parts, list) and parts:
        joined = " ".join(
            _js_string(part.get("text"))
            for part in parts
            if isinstance(part, Mapping) and part.get("type") == "text"
        ).strip(_JS_WHITESPACE)
        if joined:
            return joined
    return None


# --------------------------------------------------------------------------------------------------------
# Local ONNX model


def _usable_cores() -> int:
    try:
        available = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        available = os.cpu_count() or 1
    # Beyond a handful of threads a 6-layer encoder on short inputs stops scaling.
    return max(1, min(available, 8))


T = TypeVar("T")


@dataclass(slots=True)
class _Task:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    fn: Callable[..., Any]
    args: tuple[Any, ...]


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # cancelled while it ran
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


class _Workers:
    """Threads that take jobs from one priority queue: lower numbers first, equal ones in the order
    they came. The threads take their next job themselves, so the model never idles while the event
    loop is busy elsewhere, and a query's single batch overtakes the queued batches of a bulk call."""

    def __init__(self, count: int, name: str) -> None:
        self._count = count
        self._name = name
        self._queue: queue.PriorityQueue[tuple[int, int, _Task | None]] = queue.PriorityQueue()
        self._order = itertools.count()
        self._threads: list[threading.Thread] = []
        self._closed = False

    def submit(self, priority: int, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Runs ``fn(*args)`` on a worker; cancelling the future before a worker takes it drops it."""
        if self._closed:
            raise EmbeddingError("the embedder is closed")
        if not self._threads:
            self._threads = [
                threading.Thread(target=self._work, name=f"{self._name}-{n}", daemon=True)
                for n in range(self._count)
            ]
            for thread in self._threads:
                thread.start()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put((priority, next(self._order), _Task(loop, future, fn, args)))
        return future

    def _work(self) -> None:
        while True:
            _, _, task = self._queue.get()
            if task is None:
                return
            # Read from another thread, cancelled() can be stale: at worst a dropped job still runs.
            if task.future.cancelled():
                continue
            result: Any = None
            error: BaseException | None = None
            try:
                result = task.fn(*task.args)
            except BaseException as exc:
                error = exc
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
                task.loop.call_soon_threadsafe(_settle, task.future, result, error)

    def shutdown(self) -> None:
        """Refuses new jobs, lets the queued ones finish, and joins the threads (blocking)."""
        self._closed = True
        for _ in self._threads:
            self._queue.put((sys.maxsize, next(self._order), None))
        for thread in self._threads:
            thread.join()


log = logging.getLogger("recallql.embedders")
# all-MiniLM-L6-v2's vector for the probe text begins so (any conversion of it: ours, Chroma's download).
_PROBE_TEXT = "RecallQL model identity probe"
_MINILM_PROBE = np.array([-0.0881, -0.03732, -0.08625, 0.06706, -0.00762, 0.07945, 0.10779, -0.03632])
# How much padding a batch may add to its shortest text: longest <= 1.5 x shortest + 8 tokens.
_PAD_RATIO = 1.5
_PAD_SLACK = 8


class OnnxMiniLMEmbedder:
    """all-MiniLM-L6-v2 on onnxruntime, vector-for-vector compatible with chromadb's ``ONNXMiniLM_L6_V2``.

    ``model_dir`` is the folder that *contains* ``onnx/`` (``model.onnx`` and ``tokenizer.json``), the same
    folder chromadb's ``ONNXMiniLM_L6_V2.DOWNLOAD_PATH`` points at. Nothing is ever downloaded.

    Differences from chromadb's function, none of which change the vectors beyond float noise:

    * texts are tokenized once, sorted by length and padded per batch to the longest text in the batch,
      batches holding texts of similar length (chromadb pads every text to 256 tokens, so a 10-token
      message costs as much as a 256-token one);
    * model work runs on ``workers`` threads of its own (default 1), off the event loop; each takes
      the next batch itself, so the model does not wait for a busy event loop between batches, and calls
      with fewer batches go first: a query waits for the batch that is running, not for the queued
      batches of a bulk save;
    * ``tokens`` reports the real token count (after truncation at 256, special tokens included).

    ``threads`` is onnxruntime's intra-op thread count per run (default: the usable cores, at most 8,
    with one worker; 1 with several). One worker running each batch on every core gives the lowest
    latency per query. Several single-threaded workers give more throughput for bulk work (their runs
    do not wait for each other at every layer; on 2 cores, 2 workers embed chat texts about 15% faster
    and with 10% less CPU per text) but a lone query runs on one core (short texts about 20% slower).
    ``spin`` lets intra-op threads spin-wait between runs (lower latency, more CPU).

    On a 2-core machine the vectors come out bit-identical to chromadb's, at 10-30x its rate for
    chat-sized texts (benchmarks/embedder_throughput.py).
    """

    MAX_TOKENS = 256
    DIMENSION = 384
    NAME = "all-MiniLM-L6-v2"

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        *,
        name: str | None = None,
        batch_size: int = 32,
        threads: int | None = None,
        workers: int = 1,
        spin: bool = False,
    ) -> None:
        self._dir = Path(model_dir) / "onnx"
        for required in ("model.onnx", "tokenizer.json"):
            if not (self._dir / required).is_file():
                raise FileNotFoundError(
                    f"{self._dir / required} is missing: model_dir must be the folder that contains onnx/"
                )
        if batch_size < 1 or workers < 1 or (threads is not None and threads < 1):
            raise ValueError("batch_size, threads and workers must be positive")
        self._given_name = name
        self._identity: tuple[str, int] | None = None
        self._batch_size = batch_size
        self._threads = threads or (_usable_cores() if workers == 1 else 1)
        self._spin = spin
        self._load_lock = threading.Lock()
        self._session: onnxruntime.InferenceSession | None = None
        self._tokenizer: tokenizers.Tokenizer | None = None
        self._workers_count = workers
        self._workers: _Workers | None = _Workers(workers, "onnx-embedder")

    @property
    def name(self) -> str:
        return self._identify()[0]

    @property
    def dimension(self) -> int:
        return self._identify()[1]

    async def discover_dimension(self) -> int:
        """The model's identity, worked out on a worker thread (it loads the model) before the index
        that depends on it is opened."""
        return (await self._submit(0, self._identify))[1]

    def _identify(self) -> tuple[str, int]:
        """(name, dimension) of the folder's model, which name the index's collections: vectors of two
        models must never share one. The folder's name says nothing (any BERT-like model can be put in
        a folder called all-MiniLM-L6-v2), and two conversions of MiniLM (ours, Chroma's download) differ
        byte for byte but give the same vectors. So a probe text is embedded: MiniLM's vector means
        MiniLM; any other model is named after its file's hash, unless `name` was given."""
        if self._identity is None:
            probe = self._run_batch([self._tokenize([_PROBE_TEXT])[0]])[0]
            dimension = int(probe.shape[0])
            if self._given_name is not None:
                name = self._given_name
            elif dimension == self.DIMENSION and np.allclose(
                probe[: len(_MINILM_PROBE)], _MINILM_PROBE, atol=1e-3
            ):
                name = self.NAME
            else:
                with (self._dir / "model.onnx").open("rb") as model:
                    name = f"onnx-{hashlib.file_digest(model, 'sha256').hexdigest()[:16]}"
                log.warning(
                    "the model in %s is not all-MiniLM-L6-v2 (its vectors differ): its vectors are kept "
                    "apart as %r (%d dimensions); set RECALLQL_EMBEDDING_MODEL_NAME to name it",
                    self._dir.parent,
                    name,
                    dimension,
                )
            self._identity = (name, dimension)
        return self._identity

    def __repr__(self) -> str:
        return f"OnnxMiniLMEmbedder(name={self._given_name or self.NAME!r}, dir={str(self._dir.parent)!r})"

    def _load(self) -> tuple[onnxruntime.InferenceSession, tokenizers.Tokenizer]:
        # Loading takes a few hundred ms, so it happens on first use; the lock makes direct calls from
        # other threads (embed_sync) safe as well.
        with self._load_lock:
            if self._session is None or self._tokenizer is None:
                import onnxruntime as ort
                from tokenizers import Tokenizer

                tokenizer = Tokenizer.from_file(str(self._dir / "tokenizer.json"))
                # tokenizer.json ships with truncation and fixed padding at 128; Chroma (and
                # sentence-transformers) cut at 256, and we pad ourselves per batch.
                tokenizer.enable_truncation(max_length=self.MAX_TOKENS)
                tokenizer.no_padding()

                options = ort.SessionOptions()
                options.log_severity_level = 3
                options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
                options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
                # A BERT encoder is one chain of ops: inter-op threads would only compete with the
                # intra-op ones. One session serves all workers (its run() is thread-safe).
                options.intra_op_num_threads = self._threads
                options.inter_op_num_threads = 1
                # Spin-waiting keeps the worker threads busy after each run. It cuts single-text latency
                # (about 2.6 -> 1.7 ms on 2 cores) but steals CPU from the event loop and the database
                # between runs, so it is opt-in.
                options.add_session_config_entry(
                    "session.intra_op.allow_spinning", "1" if self._spin else "0"
                )
                session = ort.InferenceSession(
                    str(self._dir / "model.onnx"), sess_options=options, providers=["CPUExecutionProvider"]
                )
                self._tokenizer, self._session = tokenizer, session
            return self._session, self._tokenizer

    def _run_batch(self, ids: list[list[int]]) -> npt.NDArray[np.float32]:
        session, _ = self._load()
        width = max(len(row) for row in ids)
        input_ids = np.zeros((len(ids), width), dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for row, token_ids in enumerate(ids):
            input_ids[row, : len(token_ids)] = token_ids
            mask[row, : len(token_ids)] = 1
        (hidden,) = session.run(
            ["last_hidden_state"],
            {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(input_ids)},
        )
        # Same arithmetic as chromadb (float32 hidden states times an int64 mask is float64), so the
        # results agree to the last bits rather than to float32 rounding.
        weights = mask[:, :, None]
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1)
        norms[norms == 0] = 1e-12
        return (pooled / norms[:, None]).astype(np.float32)

    def _tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        _, tokenizer = self._load()
        # encode() per text rather than encode_batch(): for chat-sized texts it is as fast, and it keeps
        # tokenizers' rayon pool (and its fork warnings in subprocess-heavy tests) out of the picture.
        return [tokenizer.encode(text).ids for text in texts]

    def embed_sync(self, texts: Sequence[str]) -> Embedding:
        """Blocking version of :meth:`embed`, for scripts and benchmarks (runs on the calling thread)."""
        if self._workers is None:
            raise EmbeddingError("the embedder is closed")
        token_ids = self._tokenize(texts)
        vectors = np.empty((len(token_ids), self.dimension), dtype=np.float32)
        for batch in self._batches(token_ids):
            vectors[batch] = self._run_batch([token_ids[i] for i in batch])
        return Embedding(vectors=vectors, tokens=sum(len(ids) for ids in token_ids))

    def _batches(self, token_ids: list[list[int]]) -> list[list[int]]:
        """Indexes of the texts, in runs of at most batch_size texts of similar length.

        Every text of a run is padded to the run's longest, so a run also ends where the next text is
        longer than 1.5 times the run's shortest plus 8 tokens: a short user message and a long reply
        in one save then do not pay for each other's length (batches of 50 conversation messages:
        98 -> 148 a second, semantic-2026-11-30-ingest-conversation.md). A call too small to fill a
        run per worker is cut into one run per worker, so that it still uses every core.
        """
        size = max(1, min(self._batch_size, math.ceil(len(token_ids) / self._workers_count)))
        order = sorted(range(len(token_ids)), key=lambda i: len(token_ids[i]))
        batches: list[list[int]] = []
        run: list[int] = []
        limit = 0.0
        for i in order:
            length = len(token_ids[i])
            if run and (len(run) >= size or length > limit):
                batches.append(run)
                run = []
            if not run:
                limit = _PAD_RATIO * length + _PAD_SLACK
            run.append(i)
        if run:
            batches.append(run)
        return batches

    def _submit(self, priority: int, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        if self._workers is None:
            raise EmbeddingError("the embedder is closed")
        return self._workers.submit(priority, fn, *args)

    async def embed(self, texts: Sequence[str]) -> Embedding:
        """Embed ``texts`` (truncated at 256 tokens); vectors are unit length, in input order."""
        texts = list(texts)
        if not texts:
            return Embedding(vectors=[], tokens=0)
        priority = math.ceil(len(texts) / self._batch_size)
        if priority == 1 and self._tokenizer is not None:
            # A few texts tokenize in microseconds: a hop to a worker and back would cost more.
            token_ids = self._tokenize(texts)
        else:
            token_ids = await self._submit(priority, self._tokenize, texts)
        batches = self._batches(token_ids)
        runs = [self._submit(priority, self._run_batch, [token_ids[i] for i in batch]) for batch in batches]
        try:
            outs = await asyncio.gather(*runs)
        finally:
            for run in runs:  # after a failure or a cancellation: the queued rest is dropped
                run.cancel()
        vectors = np.empty((len(texts), outs[0].shape[1]), dtype=np.float32)
        for batch, out in zip(batches, outs, strict=True):
            vectors[batch] = out
        return Embedding(vectors=vectors, tokens=sum(len(ids) for ids in token_ids))

    async def warmup(self) -> None:
        """Load the model now rather than on the first :meth:`embed`."""
        await self._submit(0, self._load)

    async def aclose(self) -> None:
        workers, self._workers = self._workers, None
        if workers is not None:
            await asyncio.to_thread(workers.shutdown)
        self._session = None
        self._tokenizer = None


# --------------------------------------------------------------------------------------------------------
# OpenAI-compatible HTTP endpoint


class _PrioritySlots:
    """At most `count` holders at once; a freed slot goes to the waiter with the lowest priority number,
    equal ones in the order they came (asyncio's Semaphore has no order but arrival)."""

    def __init__(self, count: int) -> None:
        self._free = count
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    @contextlib.asynccontextmanager
    async def slot(self, priority: int) -> AsyncIterator[None]:
        await self._acquire(priority)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, priority: int) -> None:
        # Free slots and waiters never coexist: a released slot goes to a waiter before it is counted.
        if self._free > 0:
            self._free -= 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (priority, next(self._order), future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release()  # handed a slot as it was cancelled: the next waiter gets it
            raise

    def _release(self) -> None:
        while self._waiting:
            _, _, future = heapq.heappop(self._waiting)
            if not future.done():  # a cancelled waiter's entry stays until it comes up
                future.set_result(None)
                return
        self._free += 1


_RETRY_STATUS = frozenset({408, 409, 429})


def _retried(status: int) -> bool:
    # Every 5xx but the two that say the server will never do it (not implemented, version refused):
    # gateways and overloaded model hosts answer 520-529 and 507 for what passes.
    return status in _RETRY_STATUS or (500 <= status <= 599 and status not in (501, 505))


class HttpEmbedder:
    """An OpenAI-compatible embeddings endpoint: ``POST {base_url}/v1/embeddings``.

    ``base_url`` may end in ``/v1`` (as OpenAI's own does); it is not doubled. The dimension is taken from
    ``dimension`` or discovered from the first answer; every later answer must match it. Texts go in
    requests of ``batch_size``, the requests of one call side by side; at most ``max_concurrency``
    requests are in flight at once across all calls, so a burst of searches or a re-index cannot flood a
    hosted endpoint into rate-limiting it, and a freed slot goes to the call of fewest requests first (a
    search's query before the queued batches of a bulk call). Transport errors, 408, 409, 429 and 5xx
    answers (but 501 and 505) are retried ``max_retries`` times with exponential backoff, or after the
    answer's ``Retry-After`` when it asks for longer; an answer asking for more than ``max_retry_after``
    seconds fails at once rather than holding a request that long. Everything else raises
    :class:`EmbeddingError`, with the answer's status.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        dimension: int | None = None,
        batch_size: int = 256,
        timeout: float = 60.0,
        max_retries: int = 2,
        retry_backoff: float = 0.5,
        max_retry_after: float = 10.0,
        max_concurrency: int = 4,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be positive")
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be positive")
        base = base_url.rstrip("/")
        self._url = f"{base}/embeddings" if base.endswith("/v1") else f"{base}/v1/embeddings"
        self._model = model
        self._dimension = dimension
        self._batch_size = batch_size
        self._max_retries = max_retries
        self._retry_backoff = retry_backoff
        self._max_retry_after = max_retry_after
        self._requests = _PrioritySlots(max_concurrency)
        self._sleep: Callable[[float], Awaitable[None]] = asyncio.sleep  # tests see the waits here
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient(timeout=timeout)
        self._headers = headers

    @property
    def name(self) -> str:
        return self._model

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            raise EmbeddingError(
                f"the dimension of {self._model!r} is not known yet: pass dimension= or call "
                "discover_dimension() first"
            )
        return self._dimension

    def __repr__(self) -> str:
        return f"HttpEmbedder(model={self._model!r}, url={self._url!r})"

    async def discover_dimension(self) -> int:
        """The model's dimension, asking the endpoint once (with a one-word text) if it is still unknown."""
        if self._dimension is None:
            await self.embed(["dimension"])
        return self.dimension

    async def embed(self, texts: Sequence[str]) -> Embedding:
        texts = list(texts)
        if not texts:
            return Embedding(vectors=[], tokens=0)
        answers = await self._embed_batches(texts)
        vectors: list[list[float]] = []
        tokens: int | None = 0
        for batch_vectors, batch_tokens in answers:
            vectors.extend(batch_vectors)
            tokens = None if tokens is None or batch_tokens is None else tokens + batch_tokens
        return Embedding(vectors=vectors, tokens=tokens)

    async def _embed_batches(self, texts: list[str]) -> list[tuple[list[list[float]], int | None]]:
        starts = range(0, len(texts), self._batch_size)
        # As the local model orders its runs: calls of fewer requests first, so that a search's query
        # waits for a request in flight, not for the queued batches of a bulk save or re-index.
        priority = len(starts)
        requests = [
            asyncio.ensure_future(self._embed_batch(texts[start : start + self._batch_size], priority))
            for start in starts
        ]
        try:
            return await asyncio.gather(*requests)
        finally:
            for request in requests:  # one failed (or the call was cancelled): the rest are not needed
                request.cancel()

    async def _post(self, payload: dict[str, Any], priority: int) -> httpx.Response:
        attempt = 0
        while True:
            wait = self._retry_backoff * 2**attempt
            try:
                async with self._requests.slot(priority):
                    response = await self._client.post(self._url, json=payload, headers=self._headers)
            except httpx.TransportError as exc:
                if attempt >= self._max_retries:
                    raise EmbeddingError(
                        f"embedding request to {self._url} failed: {exc!r}", unreachable=True
                    ) from exc
            else:
                if response.status_code < 400:
                    return response
                failure = (
                    f"embedding request to {self._url} failed with HTTP {response.status_code}: "
                    f"{_error_detail(response)}"
                )
                if not _retried(response.status_code) or attempt >= self._max_retries:
                    raise EmbeddingError(failure, status_code=response.status_code)
                asked = _retry_after(response)
                if asked is not None and asked > self._max_retry_after:
                    raise EmbeddingError(
                        f"{failure} (the endpoint asks to retry after {asked:g} s)",
                        status_code=response.status_code,
                    )
                wait = max(wait, asked or 0.0)
            await self._sleep(wait)
            attempt += 1

    async def _embed_batch(self, texts: list[str], priority: int) -> tuple[list[list[float]], int | None]:
        response = await self._post({"input": texts, "model": self._model}, priority)
        try:
            body = response.json()
            items = sorted(body["data"], key=lambda item: item["index"])
            vectors = [[_finite(x) for x in _array(item["embedding"])] for item in items]
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError(f"malformed answer from {self._url}: {exc!r}") from exc
        if [item["index"] for item in items] != list(range(len(texts))):
            raise EmbeddingError(f"{self._url} returned {len(items)} embeddings for {len(texts)} texts")
        # The whole answer is checked before its dimension is taken as the model's: a first answer with
        # an empty vector used to fix the dimension at 0 until the process restarted.
        expected = self._dimension if self._dimension is not None else len(vectors[0]) if vectors else 0
        for vector in vectors:
            if len(vector) != expected or not vector:
                raise EmbeddingError(
                    f"{self._url} returned a {len(vector)}-dimensional vector, expected "
                    f"{expected or 'a vector of at least one number'}"
                )
        if vectors:
            self._dimension = expected
        usage = body.get("usage") if isinstance(body, dict) else None
        tokens = None
        if isinstance(usage, dict):
            raw = usage.get("total_tokens", usage.get("prompt_tokens"))
            tokens = raw if isinstance(raw, int) else None
        return vectors, tokens

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()


def _array(value: Any) -> list[Any]:
    if not isinstance(value, list):  # a string would be read character by character
        raise TypeError(f"an embedding must be an array of numbers, not {type(value).__name__}")
    return value


def _finite(value: Any) -> float:
    # float() also reads "nan", "inf" and numeric strings: a vector holding NaN would be written to
    # the index, where every distance to it is NaN.
    try:
        number = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an integer beyond a double
        number = math.nan
    if not math.isfinite(number):
        raise ValueError(f"an embedding holds {str(value)[:40]}, not a finite number")
    return number


def _retry_after(response: httpx.Response) -> float | None:
    """The answer's Retry-After in seconds (RFC 9110: a number of seconds or an HTTP date), if usable."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - datetime.datetime.now(datetime.UTC)).total_seconds())


def _error_detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500] or response.reason_phrase
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    if isinstance(error, str):
        return error
    return response.text[:500]
