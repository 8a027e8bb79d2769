"""Embedded Chroma's SQLite file as RecallQL sets it up: an index on the log, collections whose log is
purged every `sync_threshold` records, and the journal mode left as Chroma sets it (models/chroma_sqlite.py).

The file is inspected from a child process: this process's Chroma keeps the file open (even after its
client is closed), and a second copy of SQLite here closing its own handle would drop Chroma's locks.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from models import chroma_sqlite
from models.vector_index import ChromaIndex, VectorItem, collection_name
from tests.support import REPO, chroma_server_process

DIM = 4
MODEL = "test-model"

# Chroma 1.5's own statements on the log (rust/log/src/sqlite_log.rs): the read of a write's backfill
# and the purge after it.
_LOG_READ = (
    "SELECT seq_id, id, operation, vector, encoding, metadata FROM embeddings_queue WHERE topic = ? "
    "AND seq_id > ? AND CAST(strftime('%s', created_at) AS INTEGER) <= (? / 1000000000) ORDER BY seq_id ASC"
)
_LOG_PURGE = "DELETE FROM embeddings_queue WHERE topic = ? AND seq_id < ?"


def inspect(path: Path) -> dict[str, object]:
    """The journal mode, RecallQL's indexes, log rows per collection and the plans of Chroma's two log
    statements, read by a child process."""
    script = textwrap.dedent(
        f"""
        import json, sqlite3, sys
        c = sqlite3.connect(sys.argv[1])
        plan = lambda sql, args: " ".join(r[3] for r in c.execute("EXPLAIN QUERY PLAN " + sql, args))
        print(json.dumps({{
            "journal_mode": c.execute("PRAGMA journal_mode").fetchone()[0],
            "indexes": [r[0] for r in c.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'recallql%'")],
            "log_rows": [r[0] for r in c.execute(
                "SELECT COUNT(*) FROM embeddings_queue GROUP BY topic ORDER BY 1 DESC")],
            "read_plan": plan({_LOG_READ!r}, ("t", 0, 2**62)),
            "purge_plan": plan({_LOG_PURGE!r}, ("t", 0)),
        }}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path / "chroma.sqlite3")],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


def vectors(n: int, seed: int = 1) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def items(prefix: str, block: np.ndarray, first: int = 0) -> list[VectorItem]:
    return [VectorItem(f"{prefix}{first + i}", "t1", "r1", 0, row) for i, row in enumerate(block)]


async def test_a_new_directory_gets_the_log_index(tmp_path: Path) -> None:
    path = tmp_path / "chroma"
    index = ChromaIndex(path=path, model_name=MODEL, dimension=DIM)
    try:
        await index.upsert(items("m", vectors(3)))
        hits = await index.query(vectors(3)[0], resource_ids=["r1"], thread_id=None, top_k=1)
        assert [h.message_id for h in hits] == ["m0"]
        collection = index._get_client().get_collection(collection_name("r1", MODEL, DIM))
        assert collection.configuration_json["hnsw"]["sync_threshold"] == 1
    finally:
        await index.aclose()
    found = inspect(path)
    assert found["journal_mode"] == "delete"  # not WAL: see models/chroma_sqlite.py
    assert found["indexes"] == [chroma_sqlite.LOG_INDEX]
    # Both of Chroma's log statements now find their collection's rows through the index instead of
    # walking the rows of every collection.
    assert chroma_sqlite.LOG_INDEX in str(found["read_plan"])
    assert chroma_sqlite.LOG_INDEX in str(found["purge_plan"])


async def test_an_existing_directory_made_by_plain_chroma_is_tuned_and_keeps_its_vectors(
    tmp_path: Path,
) -> None:
    path = tmp_path / "chroma"
    # Written by Chroma alone, in another process: rollback journal, no index, Chroma's defaults.
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        from models.vector_index import ChromaIndex, VectorItem
        import asyncio, numpy as np

        async def main():
            index = ChromaIndex(path=sys.argv[1], model_name={MODEL!r}, dimension={DIM}, tune_sqlite=False,
                                sync_threshold=1000)
            block = np.eye({DIM}, dtype=np.float32)
            await index.upsert([VectorItem(f"old{{i}}", "t1", "r1", 0, row) for i, row in enumerate(block)])
            await index.aclose()

        asyncio.run(main())
        """
    )
    subprocess.run([sys.executable, "-c", script, str(path)], check=True, capture_output=True, text=True)
    before = inspect(path)
    assert before["journal_mode"] == "delete" and before["indexes"] == []
    assert chroma_sqlite.LOG_INDEX not in str(before["read_plan"])

    index = ChromaIndex(path=path, model_name=MODEL, dimension=DIM)
    try:
        east = np.eye(DIM, dtype=np.float32)[1]
        assert [
            h.message_id for h in await index.query(east, resource_ids=["r1"], thread_id=None, top_k=1)
        ] == ["old1"]
        await index.upsert(items("new", vectors(5, seed=2)))
        assert await index.count("r1") == DIM + 5
    finally:
        await index.aclose()
    after = inspect(path)
    assert after["indexes"] == [chroma_sqlite.LOG_INDEX]
    assert chroma_sqlite.LOG_INDEX in str(after["read_plan"])


async def test_tune_sqlite_false_leaves_the_file_as_chroma_makes_it(tmp_path: Path) -> None:
    path = tmp_path / "chroma"
    index = ChromaIndex(path=path, model_name=MODEL, dimension=DIM, tune_sqlite=False)
    try:
        await index.upsert(items("m", vectors(3)))
    finally:
        await index.aclose()
    found = inspect(path)
    assert found["journal_mode"] == "delete" and found["indexes"] == []


@pytest.mark.parametrize(("threshold", "kept"), [(1, 1), (100, 51), (1000, 250)])
async def test_a_collection_keeps_at_most_sync_threshold_records_in_the_log(
    tmp_path: Path, threshold: int, kept: int
) -> None:
    path = tmp_path / "chroma"
    index = ChromaIndex(path=path, model_name=MODEL, dimension=DIM, sync_threshold=threshold)
    try:
        block = vectors(250)
        for start in range(0, 250, 50):
            await index.upsert(items("m", block[start : start + 50], first=start))
        collection = index._get_client().get_collection(collection_name("r1", MODEL, DIM))
        assert collection.configuration_json["hnsw"]["sync_threshold"] == threshold
        assert await index.count("r1") == 250
    finally:
        await index.aclose()
    # Chroma deletes a collection's log records once its HNSW index is saved, every `threshold` records
    # (keeping the last one): with RecallQL's 1 after every write, with 100 at 200 of the 250, with
    # Chroma's 1,000 never here.
    assert inspect(path)["log_rows"] == [kept]


async def test_a_directory_chroma_already_has_open_here_is_tuned_from_a_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import chromadb
    from chromadb.config import Settings

    path = tmp_path / "chroma"
    other = chromadb.PersistentClient(path=str(path), settings=Settings(anonymized_telemetry=False))
    other.heartbeat()

    def not_here(_directory: object) -> bool:
        raise AssertionError("tuned in this process while Chroma had the file open here")

    children: list[object] = []
    in_child = chroma_sqlite.tune_in_child
    monkeypatch.setattr(chroma_sqlite, "tune", not_here)
    monkeypatch.setattr(chroma_sqlite, "tune_in_child", lambda d: (children.append(d), in_child(d)))
    index = ChromaIndex(path=path, model_name=MODEL, dimension=DIM)
    try:
        await index.upsert(items("m", vectors(2)))
    finally:
        await index.aclose()
        other.close()
    assert children == [path]
    assert inspect(path)["indexes"] == [chroma_sqlite.LOG_INDEX]


async def test_a_chroma_servers_directory_tuned_while_the_server_is_stopped(tmp_path: Path) -> None:
    """The README's advice for `chroma run`: `python -m models.chroma_sqlite DIR` with the server down."""
    data = tmp_path / "server"
    with chroma_server_process(data) as url:
        index = ChromaIndex(url=url, model_name=MODEL, dimension=DIM)
        try:
            await index.upsert(items("old", vectors(4)))
        finally:
            await index.aclose()
    assert inspect(data / "db")["indexes"] == []
    subprocess.run([sys.executable, "-m", "models.chroma_sqlite", str(data / "db")], check=True, cwd=REPO)
    with chroma_server_process(data) as url:
        index = ChromaIndex(url=url, model_name=MODEL, dimension=DIM)
        try:
            first = vectors(4)[1]
            hits = await index.query(first, resource_ids=["r1"], thread_id=None, top_k=1)
            assert [h.message_id for h in hits] == ["old1"]
            block = vectors(250, seed=3)
            for start in range(0, 250, 50):
                await index.upsert(items("new", block[start : start + 50], first=start))
            assert await index.count("r1") == 254
        finally:
            await index.aclose()
    found = inspect(data / "db")
    assert found["indexes"] == [chroma_sqlite.LOG_INDEX]
    # RecallQL's threshold holds on a server too: every write saves, and the log keeps one record.
    assert found["log_rows"] == [1]


def segment_folders(path: Path) -> set[str]:
    return {p.name for p in path.iterdir() if p.is_dir() and not p.name.startswith(".")}


async def test_the_folders_of_dropped_collections_go_when_the_directory_is_next_opened(
    tmp_path: Path,
) -> None:
    path = tmp_path / "chroma"
    index = ChromaIndex(path=path, model_name=MODEL, dimension=DIM)
    kept = [VectorItem(f"k{i}", "t1", "r2", 0, row) for i, row in enumerate(vectors(4, seed=3))]
    try:
        await index.upsert(items("m", vectors(50)))
        await index.upsert(kept)
        both = segment_folders(path)
        assert len(both) == 2
        assert await index.drop(["r1"]) == 1
        assert segment_folders(path) == both  # Chroma deletes the collection, not its files
    finally:
        await index.aclose()
    (path / "not-a-segment").mkdir()  # nothing of Chroma's: left alone
    # Tuned as ChromaIndex tunes a directory before Chroma opens it (in a child: this process's Chroma
    # still has the file open).
    subprocess.run([sys.executable, str(REPO / "models" / "chroma_sqlite.py"), str(path)], check=True)
    (left,) = segment_folders(path) - {"not-a-segment"}
    assert left in both
    again = ChromaIndex(path=path, model_name=MODEL, dimension=DIM)
    try:
        hits = await again.query(kept[2].vector, resource_ids=["r2"], thread_id=None, top_k=1)
        assert [h.message_id for h in hits] == ["k2"]
        assert await again.count("r1") == 0
    finally:
        await again.aclose()
