"""The index embedded Chroma's SQLite file lacks, added where RecallQL owns the directory.

Every write to embedded Chroma 1.5 appends its records to one log table that all collections share,
then re-reads this collection's records logged since its HNSW index was last saved, and deletes the
older ones. Both statements filter on the collection's `topic`, which no index covers, so each write
scans the log rows of every collection. A collection's index is saved every `sync_threshold` records
(1,000 by default; RecallQL's new collections save after every write), which few per-resource
collections reach, so the log keeps nearly every vector
ever written and each write costs more the more resources there are (a 20-vector write: 22 ms of CPU
beside an empty log, 171 ms beside 1,000 resources of 100 vectors; benchmarks/chroma_writes.py).

:func:`tune` adds the missing index; it persists in the file, and Chroma's own statements use it. It
also removes what Chroma leaves behind of deleted collections: Chroma 1.5 deletes a collection's rows but
not the folder of its HNSW files, so every dropped collection (a rebuild, a repair) kept its index on
disk for good.

The file stays in Chroma's rollback-journal mode. WAL would spare each write a journal file made, synced
and deleted, but Chroma reads through sqlx, which may reset a statement read with fetch_optional later,
on its worker thread (launchbadge/sqlx#2543). Under WAL that leaves the connection on an old snapshot,
and a write's read-back of its own log could miss the records it has just logged; in rollback-journal
mode the lingering read holds a lock that makes the write wait instead. With WAL on, a semantic
conformance case failed twice in about thirty runs, a vector that belonged in the top 4 missing from the
results, as that would cause.

This module imports nothing but the standard library: it also runs as a script, in a child process
(see :func:`tune_in_child`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

log = logging.getLogger("recallql.chroma")

__all__ = ["LOG_INDEX", "tune", "tune_in_child", "tuned"]

LOG_INDEX = "recallql_embeddings_queue_topic"
_FILE = "chroma.sqlite3"
# Directories this process has tuned: once is enough, and later opens must not touch the file again.
_tuned: set[Path] = set()


def tune(directory: str | os.PathLike[str]) -> bool:
    """Adds the log index to ``directory``'s Chroma file, if it has one (idempotent), and removes the
    segment folders of collections deleted since. Returns whether there was a file to tune.

    Only where no Chroma client of this process has the file open: Chroma links its own copy of SQLite,
    and closing this module's connection would drop the POSIX locks Chroma's copy holds on the file
    (sqlite.org/howtocorrupt.html, 2.2.1). :func:`tune_in_child` is for that case.
    """
    db = Path(directory) / _FILE
    if not db.is_file():
        return False
    with contextlib.closing(sqlite3.connect(db, timeout=60)) as conn:
        has_log = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'embeddings_queue'"
        ).fetchone()
        if has_log:
            conn.execute(f"CREATE INDEX IF NOT EXISTS {LOG_INDEX} ON embeddings_queue (topic)")
            conn.commit()
        _remove_orphan_segments(conn, Path(directory))
    _tuned.add(Path(directory).resolve())
    return True


def _remove_orphan_segments(conn: sqlite3.Connection, directory: Path) -> None:
    """Deletes the segment folders (named by segment id) that no segment of the file owns any more."""
    has_segments = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'segments'"
    ).fetchone()
    if not has_segments:
        return
    owned = {str(row[0]) for row in conn.execute("SELECT id FROM segments")}
    removed = 0
    for entry in directory.iterdir():
        if entry.name in owned or not entry.is_dir() or not _is_uuid(entry.name):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed += 1
    if removed:
        log.info("removed the index folders of %d deleted Chroma collection(s) in %s", removed, directory)


def _is_uuid(name: str) -> bool:
    try:
        return str(uuid.UUID(name)) == name
    except ValueError:
        return False


def tuned(directory: str | os.PathLike[str]) -> bool:
    """Whether this process has tuned ``directory``'s file already."""
    return Path(directory).resolve() in _tuned


def tune_in_child(directory: str | os.PathLike[str], timeout: float = 120.0) -> None:
    """:func:`tune`, in a child process: for a file Chroma already has open in this process."""
    result = subprocess.run(
        [sys.executable, __file__, os.fspath(directory)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        log.warning("could not tune Chroma's SQLite file in %s: %s", directory, result.stderr.strip()[-500:])
        return
    _tuned.add(Path(directory).resolve())


if __name__ == "__main__":
    tune(sys.argv[1])
