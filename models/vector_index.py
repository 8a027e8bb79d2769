"""The vector index for semantic recall: a small async interface over Chroma.

Layout: one Chroma collection per (message resource id, embedding model name, dimension), in cosine space.
Keeping resources apart makes resource-scoped search a plain nearest-neighbour query and deleting a
resource cheap; keeping models apart means vectors of two embedders are never compared. Messages whose
resource id is NULL share one collection per model.

Each vector is one chunk of one message, with the id ``f"{message_id}:{chunk}"`` and the metadata
``message_id, thread_id``: the two keys searches and deletes filter on. Chroma writes one row per
metadata key, so every further key costs CPU on each save (measured: 42 ms of CPU for an upsert of 50
vectors with six keys, 37 ms with two); the rest of a message lives in SQL. Collections written with
the older six-key metadata stay readable. Saving a message again replaces its vector set
(recall-contract.md, table row 4).

chromadb's client is blocking, so every call runs in a worker thread. Nothing here downloads anything:
collections are opened with ``embedding_function=None`` and always given vectors.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import json
import logging
import os
import threading
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import numpy as np
import numpy.typing as npt
from filelock import FileLock, Timeout

from models import chroma_sqlite

# Chroma reads this when its Settings are first built; we also pass Settings explicitly, this covers any
# client created elsewhere in the process.
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection
    from chromadb.api.types import Where
    from chromadb.base_types import InclusionExclusionOperator, LiteralValue

__all__ = [
    "ChromaIndex",
    "VectorHit",
    "VectorIndexDamaged",
    "VectorIndexError",
    "VectorItem",
    "collection_name",
    "default_cached_indexes",
    "heartbeat_url",
    "raise_open_file_limit",
]

T = TypeVar("T")
log = logging.getLogger("recallql.chroma")

# Bump when the layout (naming, metadata) changes incompatibly: old collections are then simply not found.
_LAYOUT_VERSION = "recallql-v1"
# Chroma caps batches (5461 records for the embedded client); stay well below for ids, $in lists and adds.
_BATCH = 1000

# A list where vectors come from JSON, a float32 array (row) where the model runs in process.
Vector = Sequence[float] | npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class VectorHit:
    """One matching vector. A message stored as several chunks can appear once per matching chunk."""

    message_id: str
    thread_id: str
    score: float  # 1 - cosine distance: 1.0 for the same direction, 0.0 orthogonal, -1.0 opposite


@dataclass(frozen=True, slots=True)
class VectorItem:
    """One chunk's vector of one message, as written to the index."""

    message_id: str
    thread_id: str
    resource_id: str | None
    chunk: int
    vector: Vector


# SQLite's messages for a file that is not (or no longer) a database.
_SQLITE_DAMAGE = ("file is not a database", "database disk image is malformed")


class VectorIndexError(Exception):
    """Chroma failed (unreachable server, rejected request...). The original error is ``__cause__``."""


class VectorIndexDamaged(VectorIndexError):
    """One resource's collection cannot be trusted any more: Chroma fails every call on it, or a write to
    it was cut off by the death of the process making it (see :class:`_WriteJournal`). Only its vectors
    are affected; dropping the collection (:meth:`ChromaIndex.drop`) and writing them again from SQL
    repairs it, and until it is dropped every call on it raises this again."""

    def __init__(self, resource_id: str | None, reason: str) -> None:
        super().__init__(f"the vector index of resource {resource_id!r} is damaged: {reason}")
        self.resource_id = resource_id
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:  # crosses the pipe from the Chroma child intact
        return (type(self), (self.resource_id, self.reason))


def collection_name(resource_id: str | None, model_name: str, dimension: int) -> str:
    """The Chroma collection for one resource and one embedder identity.

    Resource ids and model names are arbitrary strings while Chroma names are 3-512 characters of
    ``[a-zA-Z0-9._-]``, so the name is a hash; the JSON encoding keeps None apart from the string "null".
    """
    key = json.dumps([_LAYOUT_VERSION, resource_id, model_name, dimension], ensure_ascii=False)
    return "rql-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:40]


# Embedded Chroma keeps at most (soft RLIMIT_NOFILE) // 5 collections' HNSW indexes loaded (chromadb's
# RustBindingsAPI: four data files and a metadata file each, read when the client starts); a query or
# write of any other resource reloads its index from disk first. The usual soft limit of 1,024 caps that
# at 204 resources (400 resources of 2,000 vectors, random queries: p95 34.8 ms against 6.6 ms with all
# of them loaded, benchmarks/chroma_cache.py). The hard limit is the operator's; the soft one is ours to
# raise up to it. 65,536 files is 13,107 indexes, far past the point where memory is the real bound.
_OPEN_FILES_WANTED = 65536
# Below this many loaded indexes, say so at start: searches across more resources will reload.
_FEW_INDEXES = 1000
_FILES_PER_INDEX = 5


def raise_open_file_limit() -> None:
    """Raises this process's soft limit on open files to _OPEN_FILES_WANTED (or the hard limit, if
    lower), and warns when that leaves embedded Chroma room for few loaded indexes."""
    try:
        import resource
    except ImportError:  # Windows: chromadb asks msvcrt instead, nothing to raise here
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _OPEN_FILES_WANTED if hard == resource.RLIM_INFINITY else min(_OPEN_FILES_WANTED, hard)
    # An unlimited soft limit is made finite too: chromadb sizes its cache from it.
    if soft == resource.RLIM_INFINITY or soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError) as exc:
            log.warning("could not set the open-file limit to %d: %s", target, exc)
    slots = max(soft, 0) // _FILES_PER_INDEX
    if slots < _FEW_INDEXES:
        log.warning(
            "embedded Chroma can keep only %d resources' vector indexes loaded (open-file limit %d, hard "
            "limit %s); searches and writes across more resources reload indexes from disk. Raise the hard "
            "limit (ulimit -Hn, or LimitNOFILE= for a systemd service) to let RecallQL raise it further.",
            slots,
            soft,
            "unlimited" if hard == resource.RLIM_INFINITY else hard,
        )


# Each HNSW index embedded Chroma keeps loaded costs about 2.6 MB before its first vector (hnswlib gives
# every index 65,536 label locks; 400 one-vector collections: +1,032 MB of RSS), its vectors and links on
# top. Chroma's only bound is a fifth of the open-file limit, which RecallQL raises to 65,536: 13,107
# indexes, over 34 GB. By default the cache gets a quarter of the memory this process may use.
_BYTES_PER_INDEX = 3 * 2**20
_MEMORY_SHARE = 0.25
_FEWEST_CACHED = 200


def _usable_memory() -> int | None:
    """Physical memory, or the cgroup (container) limit where that is lower; None when unknown."""
    try:
        memory: int | None = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        memory = None
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and (memory is None or int(text) < memory):
            memory = int(text)
    return memory


def default_cached_indexes() -> int:
    """How many collections' indexes embedded Chroma keeps loaded unless told otherwise."""
    memory = _usable_memory()
    if memory is None:
        return _FEW_INDEXES
    return max(_FEWEST_CACHED, int(memory * _MEMORY_SHARE) // _BYTES_PER_INDEX)


def _start_embedded(settings: Any, cached_indexes: int) -> None:
    """Starts embedded Chroma for ``settings.persist_directory`` with a cache of ``cached_indexes``
    loaded HNSW indexes, where PersistentClient will find it (Chroma shares one system per directory).
    chromadb sizes that cache from the open-file limit when it builds its system and offers no setting,
    so the system is built here and the size set before it starts."""
    from chromadb.api import ServerAPI
    from chromadb.api.shared_system_client import SharedSystemClient
    from chromadb.config import System
    from chromadb.telemetry.product import ProductTelemetryClient

    identifier = settings.persist_directory
    if identifier in SharedSystemClient._identifier_to_system:
        return  # already running in this process; its cache stays as it was started
    _fix_mmap_threshold()
    system = System(settings)
    system.instance(ProductTelemetryClient)  # type: ignore[type-abstract]
    api = system.instance(ServerAPI)  # type: ignore[type-abstract]
    api.hnsw_cache_size = min(api.hnsw_cache_size, cached_indexes)  # type: ignore[attr-defined]
    system.start()
    SharedSystemClient._identifier_to_system[identifier] = system


# Each loaded HNSW index holds blocks of a few MB (hnswlib's 65,536 label locks: 2.6 MB). glibc serves
# such blocks with mmap and returns them on free, but each such free raises its mmap threshold (up to
# 32 MB), after which the blocks come from the heap and an evicted index's memory stays with the process:
# 320 resources through a cache of 64 left 375 MB instead of 181 MB. A threshold set once stays fixed.
_MMAP_THRESHOLD = 1 << 20
_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def _fix_mmap_threshold() -> None:
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):  # not glibc (musl, macOS): its allocator does not do this
        return
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)


class _WriteJournal:
    """The collections of an embedded directory that a write was under way in when its process died.

    Chroma saves a collection's HNSW index in place, file by file, after each write (RecallQL's
    sync_threshold 1): a process killed meanwhile leaves files of two states, which Chroma then either
    refuses on every call ("Failed to apply logs to the hnsw segment writer") or, depending on which
    files were cut short, reads without complaint and answers wrongly. So before a write the collection
    is noted in ``<directory>/.recallql-writing/`` (a file named after it, holding its resource id), and
    the note is removed once the write returns, whichever way. The directory is open to one process at a
    time, so a note found when it is opened is a write that never returned.

    No fsync: the danger is a killed process, whose writes the kernel still completes."""

    _DIRECTORY = ".recallql-writing"

    def __init__(self, path: Path) -> None:
        self._directory = path / self._DIRECTORY
        self._lock = threading.Lock()
        self._writers: dict[str, int] = {}  # collection name -> writes under way (reloads run beside)

    def left_behind(self) -> dict[str, str | None]:
        """Collection name -> resource id of every note a dead process left."""
        found: dict[str, str | None] = {}
        with contextlib.suppress(FileNotFoundError):
            for note in self._directory.iterdir():
                try:
                    resource_id = json.loads(note.read_text(encoding="utf-8"))
                except (OSError, ValueError):  # cut off while it was being written: the write had not begun
                    note.unlink(missing_ok=True)
                    continue
                found[note.name] = resource_id if isinstance(resource_id, str) else None
        return found

    @contextlib.contextmanager
    def writing(self, name: str, resource_id: str | None) -> Iterator[None]:
        with self._lock:
            count = self._writers.get(name, 0)
            if count == 0:
                self._directory.mkdir(exist_ok=True)
                (self._directory / name).write_text(json.dumps(resource_id), encoding="utf-8")
            self._writers[name] = count + 1
        try:
            yield
        finally:
            with self._lock:
                count = self._writers.pop(name) - 1
                if count:
                    self._writers[name] = count
                else:
                    (self._directory / name).unlink(missing_ok=True)

    def forget(self, name: str) -> None:
        """The collection is gone (dropped), and with it whatever a dead write left."""
        (self._directory / name).unlink(missing_ok=True)


def _open_in_this_process(path: Path) -> bool:
    """Whether a Chroma client of this process (ours or not) has this directory open."""
    from chromadb.api.shared_system_client import SharedSystemClient

    target = path.resolve()
    return any(Path(key).resolve() == target for key in list(SharedSystemClient._identifier_to_system))


def _vector_id(message_id: str, chunk: int) -> str:
    return f"{message_id}:{chunk}"


def _chunks(seq: Sequence[T], size: int = _BATCH) -> Iterable[Sequence[T]]:
    for start in range(0, len(seq), size):
        yield seq[start : start + size]


class ChromaIndex:
    """Message vectors in Chroma, either embedded (``path``) or on a server (``url``).

    ``model_name`` and ``dimension`` are the embedder identity this index reads and writes; build one
    index per embedder. The client is created on first use, in a worker thread, since creating an
    HTTP client already talks to the server.

    ``ef_search`` is HNSW's search breadth. A search keeps exploring until it holds that many
    candidates, so over a collection of fewer vectors it visits every one it can reach: exact, as
    Mastra's search is, where HNSW's usual 100 missed true neighbours (a 140-vector resource of the
    conformance data: the query's second-best vector left out of its top 4 in 3 builds of 100;
    benchmarks/hnsw_ef.py at 1,000 vectors: 142 and 149 of 150 queries exact, 150 with 1,000, for
    0.4-0.5 ms). Per-resource collections are mostly that small; the price is a larger one's search
    (20,000 vectors: p50 3.2 -> 6.2 ms). Collections made with less are raised to it when first opened.

    ``sync_threshold`` is Chroma's, for the collections this index creates: how many records a
    collection takes between two saves of its HNSW index. Chroma drops an index from its cache without
    saving it, loads it again from disk and replays its log only on the next write, so reads in between
    miss every record since the last save (a 150-vector collection saved every 100: 100 found). The
    default, 1, saves after every write, so the index on disk is always whole; each write also re-reads
    fewer of its own records (at most that many).
    ``tune_sqlite`` False leaves an embedded directory's SQLite file without RecallQL's log index (see
    :mod:`models.chroma_sqlite`; benchmarks compare the two). ``cached_indexes`` bounds how many
    collections' HNSW indexes embedded Chroma keeps loaded (default: :func:`default_cached_indexes`,
    and never more than a fifth of the open-file limit); a search of any other resource loads its index
    first.

    A collection Chroma can no longer serve, or (embedded) one whose write was cut off by the death of
    its process, raises :class:`VectorIndexDamaged` on every call until it is dropped.
    """

    def __init__(
        self,
        *,
        path: str | os.PathLike[str] | None = None,
        url: str | None = None,
        model_name: str,
        dimension: int,
        allow_reset: bool = False,
        ef_search: int = 1000,
        ef_construction: int = 100,
        sync_threshold: int = 1,
        lock_timeout: float = 10.0,
        tune_sqlite: bool = True,
        cached_indexes: int | None = None,
        timeout: float = 30.0,
        database: str | None = None,
    ) -> None:
        if (path is None) == (url is None):
            raise ValueError("give exactly one of path (embedded Chroma) or url (Chroma server)")
        if database is not None and url is None:
            raise ValueError("a database is a Chroma server's (url): an embedded directory is its own")
        if dimension < 1:
            raise ValueError("dimension must be positive")
        if not model_name:
            raise ValueError("model_name must not be empty")
        if sync_threshold < 1:
            raise ValueError("sync_threshold must be positive")
        if cached_indexes is not None and cached_indexes < 1:
            raise ValueError("cached_indexes must be positive")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self._path = Path(path) if path is not None else None
        self._url = url
        if url is not None:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"not an http(s) URL: {url!r}")
        self.model_name = model_name
        self.dimension = dimension
        self._allow_reset = allow_reset
        # A Chroma server's requests: chromadb's HTTP client waits for ever, so a server that accepts
        # connections but does not answer (stopped, swapping, a half-open connection) would hang searches
        # and hold the write pipeline and its worker threads. Failed in time, a request is an ordinary
        # failure: searches say SERVICE_UNAVAILABLE, writes stay in the outbox for the drain.
        self.timeout = timeout
        # A Chroma server's database (created when missing), so that deployments sharing one server
        # keep apart: collections are named by resource, so two deployments holding a resource of one
        # name wrote into one collection, and each one's check-index --repair deleted the other's vectors.
        self.database = database
        self._lock_timeout = lock_timeout
        self._lock_refused = False  # once refused, later calls fail at once until the holder lets go
        self._directory_lock: FileLock | None = None
        self._journal = _WriteJournal(self._path) if self._path is not None else None
        # Collection name -> resource id: collections a dead process was writing (see _WriteJournal).
        self._suspect: dict[str, str | None] = {}
        self._tune_sqlite = tune_sqlite
        self._cached_indexes = cached_indexes
        self._ef_search = ef_search
        # Set when a collection is created; collections made earlier keep theirs (Chroma's default 1,000),
        # but for ef_search (raised in _collection).
        self._configuration: dict[str, Any] = {
            "hnsw": {
                "space": "cosine",
                "ef_search": ef_search,
                "ef_construction": ef_construction,
                "sync_threshold": sync_threshold,
            }
        }
        self._client: ClientAPI | None = None
        self._client_lock = threading.Lock()
        # Chroma calls running in worker threads. A cancelled await does not stop its thread, so aclose
        # waits for them: closing the client or letting go of the directory under a live write would let
        # a restarted server take it as a write cut off by a crash, and two clients share one directory.
        self._running = 0
        self._idle = threading.Condition()
        self._left_open: list[tuple[ClientAPI, FileLock | None]] = []
        self._collections: dict[str, Collection] = {}
        # Writes to one collection are serialised so that two saves of the same message cannot interleave
        # their upsert and stale-chunk cleanup. Weak values: a lock nobody holds or awaits can go.
        self._write_locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def __repr__(self) -> str:
        where = f"url={self._url!r}" if self._url else f"path={str(self._path)!r}"
        if self.database is not None:
            where += f", database={self.database!r}"
        return f"ChromaIndex({where}, model_name={self.model_name!r}, dimension={self.dimension})"

    # -- plumbing ------------------------------------------------------------------------------------

    def _get_client(self) -> ClientAPI:
        with self._client_lock:
            if self._client is None:
                import chromadb
                from chromadb.config import Settings

                settings = Settings(anonymized_telemetry=False, allow_reset=self._allow_reset)
                if self._path is not None:
                    self._path.mkdir(parents=True, exist_ok=True)
                    self._lock_directory()
                    assert self._directory_lock is not None and self._journal is not None
                    # Another index of this process may hold the directory already, and be writing.
                    if self._directory_lock.lock_counter == 1:
                        self._suspect = self._journal.left_behind()
                        if self._suspect:
                            log.warning(
                                "a process died while writing the vectors of %d resource(s) in %s; they "
                                "will be rebuilt from the database",
                                len(self._suspect),
                                self._path,
                            )
                    raise_open_file_limit()
                    tune = self._tune_sqlite and not chroma_sqlite.tuned(self._path)
                    if tune and not _open_in_this_process(self._path):
                        chroma_sqlite.tune(self._path)  # an existing directory, before Chroma opens it
                    settings.persist_directory = str(self._path)
                    settings.is_persistent = True
                    _start_embedded(settings, self._cached_indexes or default_cached_indexes())
                    self._client = chromadb.PersistentClient(path=str(self._path), settings=settings)
                    if tune and not chroma_sqlite.tuned(self._path):
                        chroma_sqlite.tune_in_child(self._path)  # a new one, which Chroma just created
                else:
                    assert self._url is not None
                    self._client = self._http_client(settings)
            return self._client

    def _http_client(self, settings: Any) -> ClientAPI:
        import chromadb
        import httpx

        assert self._url is not None
        limit = httpx.Timeout(self.timeout, connect=min(self.timeout, 5.0))
        # Making the client asks the server for its tenant, with no time limit: asked first, in time.
        httpx.get(heartbeat_url(self._url), timeout=limit).raise_for_status()
        parts = urlsplit(self._url)
        ssl = parts.scheme == "https"
        client = chromadb.HttpClient(
            host=parts.hostname or "localhost",
            port=parts.port or (443 if ssl else 80),
            ssl=ssl,
            settings=settings,
        )
        for owner in (client, getattr(client, "_admin_client", None)):
            session = getattr(getattr(owner, "_server", None), "_session", None)
            if session is not None:
                session.timeout = limit
        if self.database is not None:
            # Made in the default database, then moved: a client made in a missing database is refused,
            # and a separate AdminClient would be a second connection to close (it was left open).
            _ensure_database(client._admin_client, self.database)  # type: ignore[attr-defined]
            client.set_database(self.database)
        return client

    def _lock_directory(self) -> None:
        """Chroma's embedded client is not safe for two processes on one directory (chroma-core/chroma
        #3792): a second one (a CLI command beside a running server, a server started while the child
        process of a killed one is still closing) waits a moment, then is refused. Indexes of one process
        share the lock."""
        assert self._path is not None
        lock = FileLock(self._path / ".recallql.lock", thread_local=False, is_singleton=True)
        try:
            lock.acquire(timeout=0.0 if self._lock_refused else self._lock_timeout)
        except Timeout:
            self._lock_refused = True
            raise VectorIndexError(
                f"the embedded Chroma directory {self._path} is open in another process; stop that process "
                "(one at a time may open it), or use a Chroma server (RECALLQL_CHROMA_URL)"
            ) from None
        self._directory_lock = lock

    async def _call(self, operation: str, fn: Callable[..., T], *args: Any) -> T:
        def counted() -> T:
            with self._idle:
                self._running += 1
            try:
                return fn(*args)
            finally:
                with self._idle:
                    self._running -= 1
                    self._idle.notify_all()

        try:
            return await asyncio.to_thread(counted)
        except VectorIndexError:
            raise
        except Exception as exc:
            raise VectorIndexError(f"Chroma {operation} failed: {exc}{self._damaged_store(exc)}") from exc

    def _damaged_store(self, exc: Exception) -> str:
        """Advice for an embedded store whose SQLite file is not a database (or is corrupt): SQLite's own
        words ("file is not a database") named neither the file nor a way out."""
        if self._path is None or not any(sign in str(exc) for sign in _SQLITE_DAMAGE):
            return ""
        return (
            f" ({self._path / 'chroma.sqlite3'} is damaged: stop RecallQL, move {self._path} aside, "
            "and run `recallql reindex` to rebuild the vectors from SQL)"
        )

    async def _write_alone(
        self,
        operation: str,
        resource_id: str | None,
        create: bool,
        action: Callable[[Collection], T],
        default: T = None,  # type: ignore[assignment]
    ) -> T:
        """Runs one write of a resource's collection, alone among this index's writes of it."""
        async with self._write_lock(resource_id):
            call = asyncio.ensure_future(
                self._call(operation, self._writing_collection, resource_id, create, action, default)
            )
            try:
                return await asyncio.shield(call)
            except asyncio.CancelledError:
                # The caller is cancelled (a shutdown, a rebuild that failed on its next page), but not
                # Chroma's thread: the collection stays locked until that write has ended, so that no
                # other write of it runs beside it and settles work this one then overwrites.
                while not call.done():
                    with contextlib.suppress(asyncio.CancelledError):
                        await asyncio.wait([call])
                if not call.cancelled():
                    call.exception()  # its failure is the caller's no more: retrieved, not reported
                raise

    def _write_lock(self, resource_id: str | None) -> asyncio.Lock:
        name = collection_name(resource_id, self.model_name, self.dimension)
        lock = self._write_locks.get(name)
        if lock is None:
            lock = self._write_locks[name] = asyncio.Lock()
        return lock

    def _collection(self, resource_id: str | None, *, create: bool) -> Collection | None:
        from chromadb.errors import NotFoundError

        name = collection_name(resource_id, self.model_name, self.dimension)
        cached = self._collections.get(name)
        if cached is not None:
            return cached
        client = self._get_client()
        if create:
            metadata: dict[str, str | int | bool] = {
                "recallql_layout": _LAYOUT_VERSION,
                "embedding_model": self.model_name,
                "dimension": self.dimension,
                "resource_is_null": resource_id is None,
            }
            if resource_id is not None:
                metadata["resource_id"] = resource_id
            collection = client.get_or_create_collection(
                name,
                configuration=self._configuration,  # type: ignore[arg-type]
                metadata=metadata,
                embedding_function=None,
            )
        else:
            try:
                collection = client.get_collection(name, embedding_function=None)
            except NotFoundError:
                return None
        # Chroma 1.5 (local executor: embedded, and a server's own) "backfills" a collection on the first
        # read of it in a process; coming after a write, that backfill resets the HNSW writer's
        # high-water mark, and the next write re-applies every record since the last persist as updates,
        # in parallel with the new inserts, which can leave a record that get() returns but no query
        # finds (about 1 in 3,000 records on a busy machine, until the process restarts). A read before
        # any write makes that backfill harmless.
        collection.count()
        hnsw = (collection.configuration_json or {}).get("hnsw") or {}
        if int(hnsw.get("ef_search") or 0) < self._ef_search:
            collection.modify(configuration={"hnsw": {"ef_search": self._ef_search}})
        self._collections[name] = collection
        return collection

    def _forget(self, resource_id: str | None) -> None:
        # A cached handle goes stale when the collection is deleted behind our back (reset, another
        # process); dropping it makes the next call look the collection up again.
        self._collections.pop(collection_name(resource_id, self.model_name, self.dimension), None)

    def _with_collection(
        self,
        resource_id: str | None,
        create: bool,
        action: Callable[[Collection], T],
        default: T,
        *,
        write: bool = False,
    ) -> T:
        from chromadb.errors import NotFoundError

        name = collection_name(resource_id, self.model_name, self.dimension)
        self._get_client()  # opening the directory reads what dead writers left
        if name in self._suspect:
            raise VectorIndexDamaged(resource_id, "a write to it was cut off by the death of its process")
        forgotten = reloaded = False
        while True:
            collection: Collection | None = None
            try:
                collection = self._collection(resource_id, create=create)
                if collection is None:
                    return default
                with self._writing(name, resource_id) if write else contextlib.nullcontext():
                    return action(collection)
            except NotFoundError:
                if forgotten:
                    raise
                forgotten = True
                self._forget(resource_id)
            except Exception as exc:
                text = str(exc)
                if _EVICTED_UNPERSISTED in text and collection is not None and not reloaded:
                    reloaded = True
                    with self._writing(name, resource_id):
                        _reload(collection)
                    continue
                # Still nothing on disk once rebuilt from the log: as damaged as Chroma's own signs say.
                if any(sign in text for sign in _DAMAGE_SIGNS) or (reloaded and _EVICTED_UNPERSISTED in text):
                    short_of_files = _out_of_files_note()
                    if short_of_files:
                        # Likely whole files Chroma could not open: left alone, the call fails like an
                        # unreachable server (a save retries, a search says so); damage is declared only
                        # when the sign comes with files to spare.
                        raise VectorIndexError(
                            f"the vector index of resource {resource_id!r} cannot be opened now: "
                            + text
                            + short_of_files
                        ) from exc
                    raise VectorIndexDamaged(resource_id, text) from exc
                raise

    def _writing_collection(
        self, resource_id: str | None, create: bool, action: Callable[[Collection], T], default: T
    ) -> T:
        return self._with_collection(resource_id, create, action, default, write=True)

    def _writing(self, name: str, resource_id: str | None) -> contextlib.AbstractContextManager[None]:
        if self._journal is None:  # a Chroma server: its own process, its own disk
            return contextlib.nullcontext()
        return self._journal.writing(name, resource_id)

    # -- writes --------------------------------------------------------------------------------------

    async def upsert(self, items: Iterable[VectorItem]) -> None:
        """Store message vectors; a message given here keeps exactly the chunks given here.

        Items are grouped by resource. For every message in a group, vectors of older, higher-numbered
        chunks in that resource's collection are removed after the new ones are written, so a reader
        never sees the message without vectors. A message that moved to another resource must first be
        removed from the old one with :meth:`delete_messages`.
        """
        by_resource: dict[str | None, dict[str, VectorItem]] = defaultdict(dict)
        for item in items:
            if len(item.vector) != self.dimension:
                raise ValueError(
                    f"vector of {item.message_id}:{item.chunk} has {len(item.vector)} dimensions, "
                    f"this index holds {self.dimension}"
                )
            if item.chunk < 0:
                raise ValueError(f"negative chunk number for {item.message_id}")
            # The same id twice in one Chroma upsert is an error; the last one given wins.
            by_resource[item.resource_id][_vector_id(item.message_id, item.chunk)] = item
        for resource_id, group in by_resource.items():
            await self._write_alone("upsert", resource_id, True, partial(self._upsert_sync, group=group))

    @staticmethod
    def _upsert_sync(collection: Collection, group: dict[str, VectorItem]) -> None:
        ids = list(group)
        keep = set(ids)
        existing: set[str] = set()
        for batch in _chunks(sorted({item.message_id for item in group.values()})):
            existing.update(collection.get(where=_message_in(batch), include=[])["ids"])
        for batch in _chunks(ids):
            _write(collection, [group[i] for i in batch])
        # Chroma applies an upsert of a stored id as an HNSW update, in parallel with the batch's
        # inserts, and such an update can cut a record of the batch off the graph (chroma-core/chroma
        # #7758): get() still returns it, no query reaches it. A batch that replaced vectors is checked
        # and its unreachable records written again.
        if existing & keep:
            for batch in _chunks(ids):
                _reconnect(collection, [group[i] for i in batch])
        stale = sorted(existing - keep)
        for batch in _chunks(stale):
            collection.delete(ids=list(batch))

    async def delete_messages(self, message_ids: Sequence[str], resource_ids: Iterable[str | None]) -> None:
        """Remove every vector of these messages from the collections of these resources."""
        ids = sorted(set(message_ids))
        if not ids:
            return

        def action(collection: Collection) -> None:
            for batch in _chunks(ids):
                collection.delete(where=_message_in(batch))

        for resource_id in dict.fromkeys(resource_ids):
            await self._write_alone("delete", resource_id, False, action)

    async def delete_resource_thread(self, resource_id: str | None, thread_id: str) -> None:
        """Remove every vector of one thread from that resource's collection."""

        def action(collection: Collection) -> None:
            collection.delete(where={"thread_id": thread_id})

        await self._write_alone("delete", resource_id, False, action)

    async def drop(self, resource_ids: Sequence[str | None] | None = None) -> int:
        """Deletes the collections of these resources (None: every collection of this embedder identity),
        vectors and graph alike; returns how many existed. A rebuild starts from here: an HNSW graph that
        deletes and upserts have left with unreachable records (chroma-core/chroma#7758) is not repaired
        by upserting into it again."""

        def drop_sync() -> int:
            from chromadb.errors import NotFoundError

            client = self._get_client()
            if resource_ids is None:
                names = [c.name for c in client.list_collections() if self._ours(c.metadata)]
            else:
                names = [
                    collection_name(r, self.model_name, self.dimension) for r in dict.fromkeys(resource_ids)
                ]
            dropped = 0
            for name in names:
                self._collections.pop(name, None)
                try:
                    client.delete_collection(name)
                    dropped += 1
                except NotFoundError:
                    pass
                self._suspect.pop(name, None)
                if self._journal is not None:
                    self._journal.forget(name)
            return dropped

        return await self._call("delete collection", drop_sync)

    def _ours(self, metadata: Mapping[str, Any] | None) -> bool:
        """Whether a collection with this metadata is one of this embedder identity's."""
        meta = metadata or {}
        return (
            meta.get("recallql_layout") == _LAYOUT_VERSION
            and meta.get("embedding_model") == self.model_name
            and meta.get("dimension") == self.dimension
        )

    # -- reads ---------------------------------------------------------------------------------------

    async def query(
        self,
        vector: Vector,
        *,
        resource_ids: Sequence[str | None],
        thread_id: str | None,
        top_k: int,
    ) -> list[VectorHit]:
        """The ``top_k`` vectors nearest to ``vector`` over the given resources, best first.

        ``thread_id`` None searches the whole of each resource (resource scope); otherwise only that
        thread's vectors. Resources that have no collection yet contribute nothing. Equal scores keep the
        order of ``resource_ids``, then Chroma's order.
        """
        if top_k < 1:
            raise ValueError("top_k must be at least 1")
        if len(vector) != self.dimension:
            raise ValueError(f"query vector has {len(vector)} dimensions, this index holds {self.dimension}")
        query_vector = np.asarray([vector], dtype=np.float32)
        where: Where | None = {"thread_id": thread_id} if thread_id is not None else None

        def action(collection: Collection) -> list[VectorHit]:
            result = collection.query(
                query_embeddings=query_vector,
                n_results=top_k,
                where=where,
                include=["metadatas", "distances"],
            )
            metadatas = (result.get("metadatas") or [[]])[0]
            distances = (result.get("distances") or [[]])[0]
            return [
                VectorHit(
                    message_id=str(meta["message_id"]), thread_id=str(meta["thread_id"]), score=1.0 - dist
                )
                for meta, dist in zip(metadatas, distances, strict=True)
                if meta is not None and "message_id" in meta and "thread_id" in meta
            ]

        hits: list[VectorHit] = []
        for resource_id in dict.fromkeys(resource_ids):
            hits.extend(await self._call("query", self._with_collection, resource_id, False, action, []))
        hits.sort(key=lambda hit: -hit.score)
        return hits[:top_k]

    async def count(self, resource_id: str | None) -> int:
        """How many vectors (chunks) this resource holds for this embedder."""
        return await self._call("count", self._with_collection, resource_id, False, _count, 0)

    async def resources(self) -> list[str | None]:
        """The resources that have a collection of this embedder identity."""

        def resources_sync() -> list[str | None]:
            found: list[str | None] = []
            for collection in self._get_client().list_collections():
                meta = collection.metadata or {}
                if self._ours(meta):
                    found.append(None if meta.get("resource_is_null") else str(meta.get("resource_id")))
            return found

        return await self._call("list collections", resources_sync)

    async def stored(self, resource_id: str | None) -> set[tuple[str, int]]:
        """The (message id, chunk) of every vector this resource's collection holds."""

        def action(collection: Collection) -> set[tuple[str, int]]:
            found: set[tuple[str, int]] = set()
            for ids, _ in _pages(collection, []):
                found.update(_parse_vector_id(vector_id) for vector_id in ids)
            return found

        return await self._call("get", self._with_collection, resource_id, False, action, set())

    async def vectors(
        self, resource_id: str | None, message_ids: Sequence[str]
    ) -> dict[str, dict[int, Vector]]:
        """The stored vectors of these messages in this resource's collection, by chunk (a message with
        none is left out)."""
        ids = sorted(set(message_ids))

        def action(collection: Collection) -> dict[str, dict[int, Vector]]:
            found: dict[str, dict[int, Vector]] = {}
            for batch in _chunks(ids):
                got = collection.get(where=_message_in(batch), include=["embeddings"])
                embeddings = got.get("embeddings")
                if embeddings is None:
                    continue
                for vector_id, embedding in zip(got["ids"], embeddings, strict=True):
                    message_id, chunk = _parse_vector_id(vector_id)
                    found.setdefault(message_id, {})[chunk] = np.asarray(embedding, dtype=np.float32)
            return found

        if not ids:
            return {}
        return await self._call("get", self._with_collection, resource_id, False, action, {})

    async def unreachable(self, resource_id: str | None, *, k: int = 10) -> set[str]:
        """Messages of this resource whose stored vector Chroma's query for that very vector (top ``k``)
        does not return: records its HNSW graph cannot reach (chroma-core/chroma#7758), which a search
        would never find. Exact duplicates tie at distance 0, so a vector outranked only by ``k`` of them
        counts as reached."""

        def action(collection: Collection) -> set[str]:
            lost: set[str] = set()
            for ids, embeddings in _pages(collection, ["embeddings"], size=256):
                lost.update(_parse_vector_id(v)[0] for v in _out_of_reach(collection, ids, embeddings, k))
            return lost

        return await self._call("query", self._with_collection, resource_id, False, action, set())

    async def relink(self, resource_id: str | None) -> set[str]:
        """Writes again, one record per call, every record of this resource's collection that Chroma's
        query cannot reach (see :meth:`unreachable`): a lone upsert of the same vector links it into
        the graph again, where rebuilding the collection from the same vectors builds the same graph
        and leaves the same records out (HNSW does so to about 1 in 2,000 of near-alike texts). Returns
        the messages still out of reach."""

        def action(collection: Collection) -> set[str]:
            lost: list[str] = []
            for ids, embeddings in _pages(collection, ["embeddings"], size=256):
                lost.extend(_out_of_reach(collection, ids, embeddings))
            still: set[str] = set()
            for batch in _chunks(lost):
                got = collection.get(ids=list(batch), include=["embeddings", "metadatas"])
                vectors = got["embeddings"] if got["embeddings"] is not None else []  # an array, else
                items = [
                    VectorItem(
                        message_id=_parse_vector_id(vid)[0],
                        chunk=_parse_vector_id(vid)[1],
                        vector=vector,
                        resource_id=resource_id,
                        thread_id=str((metadata or {}).get("thread_id", "")),
                    )
                    for vid, vector, metadata in zip(got["ids"], vectors, got["metadatas"] or [], strict=True)
                ]
                still.update(_reconnect(collection, items))
            return {_parse_vector_id(v)[0] for v in still}

        return await self._write_alone("upsert", resource_id, False, action, set())

    async def ping(self) -> None:
        """Raise :class:`VectorIndexError` unless Chroma answers."""
        await self._call("heartbeat", lambda: self._get_client().heartbeat())

    async def aclose(self) -> None:
        client, self._client = self._client, None
        self._collections.clear()
        if client is None:
            return

        lock, self._directory_lock = self._directory_lock, None

        def close() -> None:
            with self._idle:
                if not self._idle.wait_for(lambda: self._running == 0, timeout=self.timeout):
                    # Still writing: the client stays open and the directory locked (held here, since a
                    # collected FileLock lets go) until the process ends.
                    log.warning("Chroma calls still run after %.0f s; the index stays open", self.timeout)
                    self._left_open.append((client, lock))
                    return
            try:
                client.close()  # type: ignore[attr-defined]
            finally:
                if lock is not None:
                    lock.release()
            # chromadb 1.5's HTTP client never closes its httpx sessions (one for the client, one for its
            # internal admin client), which leaves sockets to the server open until garbage collection.
            for owner in (client, getattr(client, "_admin_client", None)):
                session = getattr(getattr(owner, "_server", None), "_session", None)
                if session is not None:
                    session.close()

        try:
            await asyncio.to_thread(close)  # not _call: it would count itself as running
        except Exception as exc:
            raise VectorIndexError(f"Chroma close failed: {exc}") from exc


def heartbeat_url(server_url: str) -> str:
    """The address at which a Chroma server (1.x API) answers whether it is up."""
    return f"{server_url.rstrip('/')}/api/v2/heartbeat"


def _write(collection: Collection, items: Sequence[VectorItem]) -> None:
    collection.upsert(
        ids=[_vector_id(i.message_id, i.chunk) for i in items],
        embeddings=np.asarray([i.vector for i in items], dtype=np.float32),
        metadatas=[_metadata(i) for i in items],
    )


# Chroma 1.5 drops a collection's HNSW index from its cache (see raise_open_file_limit) without saving
# it, and saves an index only every `sync_threshold` records (1,000 unless set, as for collections made
# before RecallQL saved after every write): a collection with fewer records has nothing on disk, and reads
# of it then fail with this error, every one of them (300 resources of 20 vectors at the usual open-file
# limit: 128 unreadable). A write rebuilds the index from Chroma's own log, where the records still are;
# deleting an id that cannot exist is a write that changes nothing.
_EVICTED_UNPERSISTED = "Nothing found on disk"
# What Chroma says of a query that names an id it does not hold (the HNSW graph's, or the caller's).
_MISSING_ID = "Error finding id"
# What Chroma 1.5 says of a collection whose saved HNSW files it cannot use (a save cut off half-way,
# files lost): every later call on the collection fails the same way, reads and writes alike.
_DAMAGE_SIGNS = (
    "Failed to apply logs to the hnsw segment writer",
    "Error loading hnsw index",
    "Error creating hnsw segment writer",
    # A collection whose HNSW folder is gone: Chroma rebuilds a graph from the part of its log not yet
    # compacted, so a search quietly misses the rest, and a query that reaches a record only the
    # metadata still names fails so (check-index's query of every stored vector does).
    _MISSING_ID,
)
# Chroma cannot tell running out of open files from damaged files: loading an index it cannot open says
# "Failed to apply logs to the hnsw segment writer" all the same (seen with 158 of 160 files open).
# Dropping the collection then would throw away a healthy index and rebuild it into the same shortage, so
# the sign counts as damage only while files are to spare; if a save cut short by the shortage did leave
# broken files, the next call with files to spare finds them.
_FILES_FREE_AT_EXHAUSTION = 4 * _FILES_PER_INDEX


def _out_of_files_note() -> str:
    """Why a damage sign met while this process has (almost) no open files left is not damage, else ''."""
    try:
        import resource
    except ImportError:
        return ""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return ""
    try:
        in_use = len(os.listdir("/proc/self/fd"))
    except OSError as exc:
        if exc.errno != errno.EMFILE:
            return ""  # no /proc (macOS): nothing to go by
        in_use = soft
    if soft - in_use > _FILES_FREE_AT_EXHAUSTION:
        return ""
    return (
        f" (the process had {in_use} of its {soft} open files in use, and Chroma fails this way when it "
        "cannot open an index's files: raise the open-file limit, ulimit -Hn or LimitNOFILE=)"
    )


_RELOAD_ID = "recallql:reload"  # never a vector id: those end in ":<chunk number>"
_reloads = 0  # how many so far (for the log's pace, and for tests)


def _reload(collection: Collection) -> None:
    global _reloads
    _reloads += 1
    level = logging.WARNING if _reloads == 1 or _reloads % 1000 == 0 else logging.DEBUG
    log.log(
        level,
        "Chroma had dropped an unsaved vector index from its cache; rebuilt it from Chroma's log (%d so "
        "far). A higher open-file limit lets Chroma keep more indexes loaded.",
        _reloads,
    )
    collection.delete(ids=[_RELOAD_ID])


def _reconnect(collection: Collection, items: Sequence[VectorItem], attempts: int = 3) -> list[str]:
    """Writes again, one record per call (a lone upsert repairs the record's links and races with
    nothing), each record of ``items`` that Chroma's query for its own vector does not return (see
    :func:`_out_of_reach`). Returns the vector ids still out of reach.

    The query is not restricted to the batch's ids: Chroma answers such a query by comparing the few
    ids given one by one, never walking the graph, so it returned every record it was asked about
    (a plain `recallql reindex` over an existing index left 3 of 2,000 records unreachable, unseen).

    Records deleted meanwhile (another replica deleted or moved their message: writes of a resource are
    serialised within a process only) are neither written back nor taken for damage, though Chroma
    fails a query that meets a missing id with "Error finding id", one of its signs of a damaged index:
    that race, under writes from two replicas, dropped and rebuilt healthy collections. A record still
    out of reach after ``attempts`` writes is left as it is, logged: failing the write held every
    resource's vector work back behind it (the outbox retried it for good); check-index reports such
    records."""
    by_id = {_vector_id(i.message_id, i.chunk): i for i in items}
    lost: list[str] = []
    for _ in range(attempts):
        if not by_id:
            return []
        ids = list(by_id)
        try:
            lost = _out_of_reach(
                collection, ids, np.asarray([by_id[vid].vector for vid in ids], dtype=np.float32)
            )
        except Exception as exc:
            if _MISSING_ID not in str(exc):
                raise
            stored = _stored_ids(collection, ids)
            if stored == set(by_id):
                raise  # every id is there: the index itself lost track of one
            by_id = {vid: item for vid, item in by_id.items() if vid in stored}
            continue
        if lost:
            stored = _stored_ids(collection, lost)
            lost = [vid for vid in lost if vid in stored]
        if not lost:
            return []
        log.warning("Chroma query cannot reach %d record(s) it stores; writing them again", len(lost))
        for vid in lost:
            _write(collection, [by_id[vid]])
        by_id = {vid: by_id[vid] for vid in lost}
    log.warning(
        "Chroma query still cannot reach %d record(s) after writing them again (%s); left as they are: "
        "`recallql check-index` reports them",
        len(lost),
        ", ".join(lost[:5]) + (", ..." if len(lost) > 5 else ""),
    )
    return lost


def _out_of_reach(collection: Collection, ids: Sequence[str], embeddings: Any, k: int = 10) -> list[str]:
    """Which of these records (``embeddings``: their stored vectors, in order) Chroma's unrestricted
    query for their own vector, top ``k``, does not return: records its HNSW graph cannot reach
    (chroma-core/chroma#7758), which no search finds. Exact duplicates tie at distance 0, so a vector
    outranked only by ``k`` of them counts as reached."""
    total = collection.count()
    if not total or not len(ids):
        return []
    n = min(k, total)
    result = collection.query(query_embeddings=embeddings, n_results=n, include=["distances"])
    distances = result.get("distances") or []
    return [
        vector_id
        for vector_id, found, dist in zip(ids, result["ids"], distances, strict=True)
        if vector_id not in found and not (len(found) == n and dist[-1] <= 1e-6)
    ]


def _stored_ids(collection: Collection, ids: list[str]) -> set[str]:
    return set(collection.get(ids=ids, include=[])["ids"])


def _ensure_database(admin: Any, name: str) -> None:
    from chromadb.errors import NotFoundError

    try:
        admin.get_database(name)
    except NotFoundError:
        with contextlib.suppress(Exception):  # another replica made it meanwhile: checked again below
            admin.create_database(name)
        admin.get_database(name)


def _parse_vector_id(vector_id: str) -> tuple[str, int]:
    message_id, _, chunk = vector_id.rpartition(":")
    return message_id, int(chunk)


def _pages(collection: Collection, include: list[str], size: int = _BATCH) -> Iterator[tuple[list[str], Any]]:
    """The collection's records, page by page: (ids, and the first included field, if any)."""
    offset = 0
    while True:
        got = collection.get(include=include, limit=size, offset=offset)  # type: ignore[arg-type]
        ids = list(got["ids"])
        if not ids:
            return
        yield ids, (got.get(include[0]) if include else None)
        if len(ids) < size:
            return
        offset += len(ids)


def _count(collection: Collection) -> int:
    return collection.count()


def _message_in(message_ids: Sequence[str]) -> Where:
    """Chroma's filter for the records of these messages."""
    values: list[LiteralValue] = list(message_ids)
    condition: dict[InclusionExclusionOperator, list[LiteralValue]] = {"$in": values}
    return {"message_id": condition}


def _metadata(item: VectorItem) -> dict[str, str]:
    return {"message_id": item.message_id, "thread_id": item.thread_id}
