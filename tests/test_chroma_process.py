"""Embedded Chroma in a child process (models/chroma_process.py): the same index as ChromaIndex, its
errors, a child that dies, and a parent that dies. Real Chroma directories, real processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from models.chroma_process import IsolatedChromaIndex
from models.vector_index import ChromaIndex, VectorHit, VectorIndexDamaged, VectorIndexError, VectorItem
from tests.support import eventually
from tests.test_vector_index import DIM, E0, E1, E2, MODEL, ids, item

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
async def index(tmp_path: Path) -> AsyncIterator[IsolatedChromaIndex]:
    idx = IsolatedChromaIndex(path=tmp_path / "chroma", model_name=MODEL, dimension=DIM)
    yield idx
    await idx.aclose()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


async def test_the_child_serves_the_whole_index(index: IsolatedChromaIndex, tmp_path: Path) -> None:
    await index.ping()
    child = index._process
    assert child is not None and child.pid != os.getpid() and alive(child.pid)
    await index.upsert(
        [
            item("m1", E0),
            item("m2", E1, thread_id="t2"),
            item("m3", E2, resource_id="r2"),
            item("m4", E1, resource_id=None),
        ]
    )
    assert ids(await index.query(E0, resource_ids=["r1"], thread_id=None, top_k=5)) == ["m1", "m2"]
    assert ids(await index.query(E1, resource_ids=["r1"], thread_id="t2", top_k=5)) == ["m2"]
    hits = await index.query(E2, resource_ids=["r1", "r2"], thread_id=None, top_k=1)
    assert hits == [VectorHit("m3", "t1", pytest.approx(1.0, abs=1e-5))]
    assert (await index.count("r1"), await index.count(None)) == (2, 1)
    assert sorted(await index.resources(), key=str) == sorted(["r1", "r2", None], key=str)
    assert await index.stored("r1") == {("m1", 0), ("m2", 0)}
    assert await index.unreachable("r1") == set()
    await index.delete_messages(["m1"], ["r1"])
    await index.delete_resource_thread("r1", "t2")
    assert await index.count("r1") == 0
    assert await index.drop(["r2", "never-written"]) == 1
    # Errors come back as what they are, with their message.
    with pytest.raises(ValueError, match="has 3 dimensions, this index holds 4"):
        await index.upsert([item("bad", [1.0, 0.0, 0.0])])
    with pytest.raises(ValueError, match="top_k must be at least 1"):
        await index.query(E0, resource_ids=["r1"], thread_id=None, top_k=0)
    await index.aclose()
    assert not alive(child.pid)
    # The child wrote the same directory a ChromaIndex reads.
    direct = ChromaIndex(path=tmp_path / "chroma", model_name=MODEL, dimension=DIM)
    try:
        assert ids(await direct.query(E1, resource_ids=[None], thread_id=None, top_k=1)) == ["m4"]
    finally:
        await direct.aclose()


async def test_float32_rows_cross_to_the_child_each_with_its_own_message(tmp_path: Path) -> None:
    # The local embedder hands over rows of one float32 array; they travel as one array beside the
    # ids, threads, resources and chunk numbers, and each must land on its own record.
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((300, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    items = [VectorItem(f"m{k}", f"t{k % 3}", f"r{k % 2}", k % 2, vectors[k]) for k in range(len(vectors))]
    idx = IsolatedChromaIndex(path=tmp_path / "chroma", model_name=MODEL, dimension=8)
    try:
        await idx.upsert(items)
        assert (await idx.count("r0"), await idx.count("r1")) == (150, 150)
        assert await idx.stored("r1") == {(f"m{k}", 1) for k in range(1, 300, 2)}
        for k in range(0, 300, 37):
            (hit,) = await idx.query(vectors[k], resource_ids=[f"r{k % 2}"], thread_id=f"t{k % 3}", top_k=1)
            assert (hit.message_id, hit.thread_id) == (f"m{k}", f"t{k % 3}")
            assert hit.score == pytest.approx(1.0, abs=1e-5)
        # One vector of the wrong size fails the whole write, which stores nothing of it.
        bad = [*items[:5], VectorItem("m-bad", "t0", "r0", 0, vectors[0][:4])]
        with pytest.raises(ValueError, match="has 4 dimensions, this index holds 8"):
            await idx.upsert([replace(i, message_id=f"x{i.message_id}") for i in bad])
        assert await idx.count("r0") == 150
    finally:
        await idx.aclose()


async def test_a_dead_child_fails_its_calls_and_the_next_call_starts_another(
    index: IsolatedChromaIndex, tmp_path: Path
) -> None:
    await index.upsert([item("m1", E0), item("k1", E1, resource_id="r2")])
    first = index._process
    assert first is not None and first.pid is not None
    # Killed in the middle of a long write (its note in the write journal is there): that call fails,
    # nothing hangs.
    notes = tmp_path / "chroma" / ".recallql-writing"
    many = [item(f"n{k}", [1.0, k / 8000, 0.5, 0.25]) for k in range(8000)]
    writing = asyncio.create_task(index.upsert(many))
    deadline = time.monotonic() + 30
    while not written_note(notes) and not writing.done():
        assert time.monotonic() < deadline, "the write never began"
        await asyncio.sleep(0.005)
    os.kill(first.pid, signal.SIGKILL)
    with pytest.raises(VectorIndexError, match=r"exited|gone"):
        await asyncio.wait_for(writing, 30)
    # A new child, on the same directory. Chroma may have been saving r1's index when it died, leaving
    # files of two states (seen: every call then fails, "Failed to apply logs to the hnsw segment
    # writer"), so r1 is reported damaged whatever its files hold, until it is dropped. Its error
    # crosses the pipe with the resource it names.
    with pytest.raises(VectorIndexDamaged, match="cut off") as damaged:
        await index.query(E0, resource_ids=["r1"], thread_id=None, top_k=1)
    assert damaged.value.resource_id == "r1"
    with pytest.raises(VectorIndexDamaged):
        await index.upsert([item("m2", E2)])
    second = index._process
    assert second is not None and second.pid != first.pid
    # The resource nobody was writing is untouched.
    assert ids(await index.query(E1, resource_ids=["r2"], thread_id=None, top_k=1)) == ["k1"]
    # Dropped, r1 starts afresh (its vectors come again from SQL, resolvers/semantic.py), and the note goes.
    assert await index.drop(["r1"]) == 1
    assert not any(notes.iterdir())
    await index.upsert([item("m1", E0)])
    assert ids(await index.query(E0, resource_ids=["r1"], thread_id=None, top_k=5)) == ["m1"]


async def test_a_child_that_stops_answering_fails_searches_and_writes_in_time(tmp_path: Path) -> None:
    # SIGSTOP: the child keeps its pipe and answers nothing (a deadlock inside Chroma would look the
    # same). Searches and writes fail after their deadline, as with a Chroma server that stops
    # answering, instead of hanging their request or the write pipeline; once the child goes on, what
    # it was given is done and the next calls are answered.
    index = IsolatedChromaIndex(path=tmp_path / "chroma", model_name=MODEL, dimension=DIM, timeout=1)
    try:
        await index.upsert([item("m1", E0)])
        child = index._process
        assert child is not None and child.pid is not None
        os.kill(child.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(VectorIndexError, match=r"timed out.*\(query\) within 1.5 s"):
                await index.query(E0, resource_ids=["r1", "r2"], thread_id=None, top_k=1)
            with pytest.raises(VectorIndexError, match=r"timed out.*\(upsert\) within 1.25 s"):
                await index.upsert([item("m2", E1)])
            took = time.monotonic() - started
            assert 2.7 <= took < 10, took
            # Until the child has done that write, another write of r1 could land before it (calls run
            # side by side there) and be overwritten with older vectors: refused at once instead.
            started = time.monotonic()
            for refused in (
                index.upsert([item("m2", E2), item("k1", E0, resource_id="r2")]),
                index.delete_messages(["m1"], ["r1"]),
                index.drop(None),
            ):
                with pytest.raises(VectorIndexError, match="earlier write of resource 'r1'"):
                    await refused
            assert time.monotonic() - started < 0.5
        finally:
            os.kill(child.pid, signal.SIGCONT)
        assert ids(await index.query(E0, resource_ids=["r1"], thread_id=None, top_k=5))[0] == "m1"

        async def written() -> bool:  # the write that timed out, which the child was left to finish
            # ... and its answer, which tells the parent that r1 takes writes again.
            return await index.count("r1") == 2 and not index._late

        await eventually(written, timeout=10, what="the timed-out write to land")
        assert index._process is child  # the same child: nothing was killed
        await index.upsert([item("m2", E2)])  # r1 takes writes again
        hits = await index.query(E2, resource_ids=["r1"], thread_id=None, top_k=1)
        assert hits == [VectorHit("m2", "t1", pytest.approx(1.0, abs=1e-5))]
        # Maintenance calls scan whole collections in one call and have no deadline.
        assert await index.stored("r1") == {("m1", 0), ("m2", 0)}
    finally:
        await index.aclose()


def written_note(notes: Path) -> bool:
    """Whether a write's note is there, whole: a note still empty (created, not yet written) names a
    write that had not begun, and the next opener rightly drops it."""
    return notes.is_dir() and any(note.stat().st_size > 0 for note in notes.iterdir())


async def test_the_child_exits_when_its_parent_dies(tmp_path: Path) -> None:
    script = (
        "import asyncio, sys\n"
        "from models.chroma_process import IsolatedChromaIndex\n"
        "async def main():\n"
        f"    index = IsolatedChromaIndex(path={str(tmp_path / 'chroma')!r}, model_name='m', dimension=4)\n"
        "    await index.ping()\n"
        "    print(index._process.pid, flush=True)\n"
        "    await asyncio.sleep(600)\n"
        "if __name__ == '__main__':\n"
        "    asyncio.run(main())\n"
    )
    (tmp_path / "parent.py").write_text(script)
    parent = subprocess.Popen(
        [sys.executable, str(tmp_path / "parent.py")],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        child_pid = int(await asyncio.wait_for(asyncio.to_thread(parent.stdout.readline), 120))
        assert alive(child_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 20
        while alive(child_pid) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert not alive(child_pid), "the Chroma child outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()


async def test_a_parent_gone_mid_write_lets_the_write_end_before_the_index_closes() -> None:
    # A unit test of the child's loop, with a stand-in index: closing the real one gives up the
    # directory's lock, which a write still running in this process must not outlive.
    from multiprocessing import Pipe

    from models.chroma_process import _dumps, _serve_calls

    events: list[str] = []

    class SlowIndex:
        async def upsert(self, items: list[object]) -> None:
            events.append("write started")
            await asyncio.sleep(0.3)
            events.append("write ended")

        async def aclose(self) -> None:
            events.append("closed")

    parent, child = Pipe()
    parent.send_bytes(_dumps((1, "upsert", ([],), {})))
    parent.close()  # the parent dies with the write sent
    await asyncio.wait_for(_serve_calls(child, SlowIndex()), 10)  # type: ignore[arg-type]
    assert events == ["write started", "write ended", "closed"]


def test_serve_refuses_several_workers_on_the_embedded_directory(tmp_path: Path) -> None:
    # Each worker would open the directory, which Chroma's PersistentClient does not allow safely.
    env = {
        **os.environ,
        "RECALLQL_DATA_DIR": str(tmp_path / "data"),
        "RECALLQL_EMBEDDINGS_URL": "http://127.0.0.1:9",  # never called: serve stops first
        "RECALLQL_EMBEDDINGS_MODEL": "hash-64",
    }
    env.pop("RECALLQL_CHROMA_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "web.cli", "serve", "--port", "9", "--workers", "2"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "2 workers cannot share the embedded Chroma directory" in done.stderr
    assert "RECALLQL_CHROMA_URL" in done.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was created
