"""The benchmark scripts still run against the code they measure (tiny sizes, nothing timed here)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import (
    MODEL_DIR,
    PG_ADMIN_DSN,
    REPO,
    database,
    oracle_node_modules,
    postgres_available,
    require,
)


def run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RECALLQL_EMBEDDING_MODEL_DIR": str(MODEL_DIR)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture
def model() -> Path:
    require((MODEL_DIR / "onnx" / "model.onnx").is_file(), f"all-MiniLM-L6-v2 not found in {MODEL_DIR}/onnx")
    return MODEL_DIR


def test_embedder_throughput_runs(model: Path) -> None:
    for extra in ((), ("--workers", "2")):
        out = run(
            "embedder_throughput.py", "--messages", "12", "--rounds", "2", "--model-dir", str(model), *extra
        )
        assert "one-query latency (ms)" in out and "one call of 6" in out
        assert "batches of 1 (sentences/s)" in out and "x (" in out  # per-round ratio and its range
    sweep = run("embedder_throughput.py", "--token-sweep", "--model-dir", str(model))
    assert [line.split()[0] for line in sweep.splitlines()[1:]] == ["2", "8", "16", "32", "64", "128", "256"]


def test_semantic_bench_recall_beside_mastra_runs(model: Path, tmp_path: Path) -> None:
    """The full-recall rows, RecallQL's and the real Mastra's, on a tiny dataset: both must answer and
    agree (the comparison the README quotes)."""
    oracle_node_modules(tmp_path)
    report = tmp_path / "recall.md"
    run(
        "semantic_bench.py",
        *("--sizes", "400", "--recall-sizes", "400", "--mastra-sizes", "400", "--modes", "embedded"),
        *("--resources", "20", "--threads", "2", "--queries", "10", "--recall-calls", "10"),
        *("--skip", "ingest,http,spare-core", "--model-dir", str(model), "--out", str(report)),
    )
    text = report.read_text(encoding="utf-8")
    assert "failed" not in text, text[-3000:]
    for system in ("RecallQL", "Mastra"):
        for scope in ("resource", "thread"):
            assert f"| {system} | 400 | {scope} | 10 |" in text
    assert text.count("identical message lists in 10/10 calls") == 2, text[-3000:]


def test_reindex_paging_runs() -> None:
    out = run("reindex_paging.py", "--sizes", "1500,3000", "--page", "500")
    assert "| 1,500 | 3 |" in out and "| 3,000 | 6 |" in out


def test_reindex_throughput_runs(model: Path) -> None:
    out = run(
        "reindex_throughput.py",
        *("--messages", "40", "--pages", "10,20", "--rounds", "1", "--model-dir", str(model)),
    )
    assert "40 chat messages in one resource" in out
    assert re.search(r"\| 10 \| \d+ \| \d+ \| \d+ \| \d+% \| \d+% \|", out), out
    assert re.search(r"\| 20 \| \d+ \| \d+ \| \d+ \| \d+% \| \d+% \|", out), out
    damage = run(
        "reindex_throughput.py",
        *("--damage", "--messages", "40", "--rounds", "2", "--model-dir", str(model)),
    )
    assert re.search(r"\| \d+ \| \d+ \| \d+ \| \d+%, \d+% \|", damage), damage


def test_clone_thread_runs(model: Path) -> None:
    # The script itself checks that every clone's copies have their vectors.
    out = run("clone_thread.py", *("--sizes", "12,30", "--rounds", "1", "--model-dir", str(model)))
    assert re.search(r"\| 12 \| \d+ \| \d+ \| \d+ \| [\d.]+x \| [\d.]+x \|", out), out
    assert re.search(r"\| 30 \| \d+ \| \d+ \| \d+ \| [\d.]+x \| [\d.]+x \|", out), out
    moved = run(
        "clone_thread.py",
        *("--operation", "transfer", "--sizes", "12", "--rounds", "2", "--model-dir", str(model)),
    )
    assert "updateThreadResourceId with semantic recall" in moved
    assert re.search(r"\| 12 \| \d+ \| \d+ \| \d+ \| [\d.]+x \| [\d.]+x \|", moved), moved


def test_write_merging_runs(model: Path) -> None:
    out = run(
        "write_merging.py",
        *("--messages", "60", "--resources", "5", "--save", "3", "--rounds", "2", "--merge", "1,3"),
        *("--model-dir", str(model)),
    )
    # Both variants wrote every vector (the script checks the counts) and report rates and Chroma calls.
    for merge in (1, 3):
        assert re.search(
            rf"\| background ingest, merge_batches {merge} \| \d+ \| \d+, \d+ \| .+ \| \d+ \|", out
        ), out
    assert re.search(r"merge 3 against merge 1, each round: [\d.]+x, [\d.]+x", out), out


def test_write_latency_runs() -> None:
    out = run("write_latency.py", "--calls", "5")
    assert "| write on SQLite (5 calls each) |" in out and "| delete of 2 messages |" in out


@pytest.mark.parametrize(
    ("operation", "name"), [("delete", "deleteThread"), ("transfer", "updateThreadResourceId")]
)
def test_thread_delete_runs(operation: str, name: str) -> None:
    out = run("thread_delete.py", "--sizes", "3,20", "--rounds", "1", "--operation", operation)
    assert f"| {name} on SQLite (1 rounds) |" in out, out
    assert re.search(r"\| thread of 20 messages \| [\d.]+ \| [\d.]+ \| [\d.]+x \|", out), out


async def test_write_latency_runs_on_postgres(tmp_path: Path) -> None:
    async with database("postgres", tmp_path) as url:
        for _ in range(2):  # a database used before: the second run's rows are its own
            out = run("write_latency.py", "--calls", "5", "--database-url", url)
            assert "| write on PostgreSQL (5 calls each) |" in out, out
            assert re.search(r"\| re-save of 2 stored messages \| [\d.]+ \| [\d.]+ \|", out), out


@pytest.mark.parametrize(("workers", "same_resources"), [("1", False), ("2", True)])
def test_semantic_bench_ingest_runs(model: Path, tmp_path: Path, workers: str, same_resources: bool) -> None:
    report = tmp_path / "ingest.md"
    run(
        "semantic_bench.py",
        *("--skip", "search,recall,mastra,http", "--ingest-messages", "60", "--ingest-rounds", "1"),
        *("--embedding-workers", workers, "--model-dir", str(model), "--out", str(report)),
        *(["--ingest-same-resources"] if same_resources else []),
    )
    text = report.read_text(encoding="utf-8")
    # Saves of 50: the first resource holds the 50 vectors of the one-writer row; with the same
    # resources everywhere also the untimed warm-up save's 50 and the four-writer row's 50, which
    # share its directory.
    stored = 150 if same_resources else 50
    assert f"vectors in one in-process ingest resource after the run: {stored}" in text, text
    assert "## 3. Ingest throughput with embedding" in text
    assert f"RECALLQL_EMBEDDING_WORKERS={workers}" in text
    assert "- The same path with the vector writes thrown away (SQL, outbox and embedding only)" in text
    assert "Chroma in a child process" in text
    assert "With a core left to the rest (the embedder on one intra-op thread)" in text
    assert "each round between two raw runs of the embedder" in text
    assert "| after the last run (the last vector write), ms |" in text
    # CPU by thread, the Chroma child (a process of its own) included.
    assert "| thread | raw embedder | saving (background, Chroma child) |" in text
    assert "| embedder worker (tokenizer, the model's first thread) |" in text
    assert re.search(r"\| Chroma child: [^|]+ \| \d+\.\d\d \| \d+\.\d\d \|", text)
    assert "90% of its rate leaves" in text
    assert "with Chroma's file and collections as Chroma ships them" in text


def test_chroma_child_pipe_runs() -> None:
    out = run("chroma_child_pipe.py", "--vectors", "20", "--calls", "2", "--dimension", "8")
    assert "| one float32 array and plain lists (upsert) |" in out and "(before) |" in out


def test_chroma_cache_runs() -> None:
    out = run("chroma_cache.py", "--resources", "12", "--vectors", "5", "--queries", "10", "--nofile", "512")
    assert "| as started | 512 | 102 |" in out and "| raised |" in out


def test_chroma_writes_runs() -> None:
    out = run("chroma_writes.py", "--resources", "5", "--vectors", "20", "--calls", "4", "--large", "200")
    assert "| variant | resources 1-1 |" in out and "| recallql |" in out and "| shipped |" in out
    assert "## 2. Chat saves: 4 writes of 2 vectors into one resource" in out
    assert "| variant | 0-200 |" in out


def test_hnsw_ef_runs() -> None:
    out = run("hnsw_ef.py", "--sizes", "30,60", "--efs", "10,100", "--queries", "3")
    assert "| 30 | scattered | resource | 10 |" in out and "| 60 | clustered | small thread | 100 |" in out


def test_pooled_layout_runs() -> None:
    out = run(
        "pooled_layout.py",
        *("--resources", "12", "--per-resource", "3", "--pools", "1,3"),
        *("--saves", "6", "--batch", "3", "--queries", "8"),
    )
    rows = {line.split(" | ")[0].lstrip("| "): line for line in out.splitlines() if line.startswith("| ")}
    # Searches are exact in every layout: the pooled ones find a resource's vectors through the filter.
    for layout, calls in (("one collection per resource", None), ("1 pool(s)", "2"), ("3 pool(s)", None)):
        assert layout in rows, out
        assert rows[layout].endswith("| 8/8 |"), rows[layout]
        if calls is not None:
            # two batches of three saves each, one pool: one write call per batch
            assert rows[layout].split(" | ")[2] == calls, rows[layout]


def test_error_answers_runs() -> None:
    out = run("error_answers.py", "--requests", "8", "--rounds", "1")
    rows = {line.rsplit(None, 3)[0]: line.split()[-3:] for line in out.splitlines()[1:]}
    assert set(rows) == {"recall (answered)", "recall, BAD_USER_INPUT", "recall, FORBIDDEN"}, out


def test_thread_recall_runs() -> None:
    # The script itself checks that every way answers the same newest messages.
    out = run("thread_recall.py", "--threads", "3", "--messages", "4", "--requests", "4", "--rounds", "1")
    rows = {line.rsplit(None, 2)[0]: line.split()[-2:] for line in out.splitlines()[2:]}
    assert set(rows) == {
        "nested",
        "nested, hideInPageQuery",
        "threads, then aliases",
        "threads, then one each",
        "threads alone",
    }, out
    assert rows["nested"][1] == "1.00", out


def test_persisted_queries_runs() -> None:
    # The script checks that the text and both hashed requests get the same answer.
    out = run("persisted_queries.py", "--messages", "4", "--requests", "4", "--rounds", "1")
    rows = {line.rsplit(None, 3)[0]: line.split()[-3:] for line in out.splitlines()[2:]}
    assert set(rows) == {"text", "hash", "hash, GET"}, out
    assert int(rows["hash"][0]) < int(rows["text"][0]), out  # the hash is the smaller request


def test_thread_recall_runs_searched() -> None:
    # The script checks that every thread's recall holds its newest message and a vector hit.
    out = run(
        "thread_recall.py",
        "--threads",
        "3",
        "--messages",
        "4",
        "--requests",
        "2",
        "--rounds",
        "1",
        "--search",
    )
    assert "each recall searched" in out.splitlines()[0], out
    rows = {line.rsplit(None, 2)[0]: line.split()[-2:] for line in out.splitlines()[2:]}
    assert set(rows) >= {"nested", "nested, hideInPageQuery", "threads, then aliases", "threads alone"}, out


async def test_keyset_paging_runs(tmp_path: Path) -> None:
    # The script itself checks that a page by offset and by cursor hold the same rows, at every depth.
    require(await postgres_available(), f"PostgreSQL is not reachable at {PG_ADMIN_DSN}")
    out = run(
        "keyset_paging.py",
        *("--size", "2400", "--calls", "4", "--rounds", "2", "--out", str(tmp_path / "k.md")),
    )
    rows = [
        [cell.strip() for cell in line.split("|")[1:3]] for line in out.splitlines() if line.startswith("| ")
    ]
    assert rows[1:] == [[e, d] for e in ("sqlite", "postgres") for d in ("0", "1,000", "1,200")], out
    assert (tmp_path / "k.md").read_text() == out.rstrip("\n") + "\n"


async def test_thread_paging_runs(tmp_path: Path) -> None:
    # The script itself checks that a page by offset and by cursor hold the same threads, at every depth.
    require(await postgres_available(), f"PostgreSQL is not reachable at {PG_ADMIN_DSN}")
    out = run(
        "thread_paging.py",
        *("--size", "2400", "--calls", "4", "--rounds", "2", "--out", str(tmp_path / "t.md")),
    )
    rows = [
        [cell.strip() for cell in line.split("|")[1:3]] for line in out.splitlines() if line.startswith("| ")
    ]
    assert rows[1:] == [[e, d] for e in ("sqlite", "postgres") for d in ("0", "1,000", "1,200")], out
    assert (tmp_path / "t.md").read_text() == out.rstrip("\n") + "\n"


async def test_all_threads_runs(tmp_path: Path) -> None:
    # The script itself checks that each listing holds the threads it should.
    require(await postgres_available(), f"PostgreSQL is not reachable at {PG_ADMIN_DSN}")
    out = run(
        "all_threads.py",
        *("--size", "2400", "--calls", "4", "--rounds", "2", "--out", str(tmp_path / "a.md")),
    )
    rows = [
        [cell.strip() for cell in line.split("|")[1:4]] for line in out.splitlines() if line.startswith("| ")
    ]
    ways = ["one resource", "all, no total", "all, total", "all by updatedAt, after a cursor"]
    ways += ["all, metadata filter", "all, a filter no thread matches, no total", "save of 2 messages"]
    assert rows[1:] == [[e, "2,400", w] for e in ("sqlite", "postgres") for w in ways], out
    assert re.findall(r"^- (\w+): [\d,]+ ms$", out, re.M) == ["sqlite", "postgres"], out  # 0011's build
    assert (tmp_path / "a.md").read_text() == out.rstrip("\n") + "\n"


async def test_resource_messages_runs(tmp_path: Path) -> None:
    # The script itself checks that the pages and totals are the resource's.
    require(await postgres_available(), f"PostgreSQL is not reachable at {PG_ADMIN_DSN}")
    out = run(
        "resource_messages.py",
        *("--size", "2400", "--calls", "4", "--rounds", "2", "--out", str(tmp_path / "r.md")),
    )
    rows = [
        [cell.strip() for cell in line.split("|")[1:3]] for line in out.splitlines() if line.startswith("| ")
    ]
    assert rows[1:] == [["sqlite", "2,400"], ["postgres", "2,400"]], out
    assert (tmp_path / "r.md").read_text() == out.rstrip("\n") + "\n"


async def test_outbox_backlog_runs(tmp_path: Path) -> None:
    # The script itself checks that each lookup finds exactly the entries of the messages it asks for.
    require(await postgres_available(), f"PostgreSQL is not reachable at {PG_ADMIN_DSN}")
    out = run(
        "outbox_backlog.py",
        *("--backlogs", "0,300,1200", "--calls", "4", "--rounds", "2", "--out", str(tmp_path / "o.md")),
    )
    rows = [
        [cell.strip() for cell in line.split("|")[1:3]] for line in out.splitlines() if line.startswith("| ")
    ]
    sizes = ("0", "300", "1,200")
    assert rows[1:] == [[kind, size] for kind in ("sqlite", "postgres") for size in sizes], out
    assert (tmp_path / "o.md").read_text() == out.rstrip("\n") + "\n"


async def test_plan_cache_runs(tmp_path: Path) -> None:
    # The script itself checks what each call answers under both settings, and that the setting took.
    require(await postgres_available(), f"PostgreSQL is not reachable at {PG_ADMIN_DSN}")
    out = run(
        "plan_cache.py", *("--size", "600", "--calls", "4", "--rounds", "2", "--out", str(tmp_path / "p.md"))
    )
    rows = [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ")][1:]
    assert len(rows) == 6 and rows[0] == "thread page" and rows[-1] == "save of 2 messages", out
    assert all(line.endswith("x |") for line in out.splitlines() if line.startswith("| thread page")), out
    assert (tmp_path / "p.md").read_text() == out.rstrip("\n") + "\n"


async def test_resumed_subscription_runs(tmp_path: Path) -> None:
    from tests.test_subscriptions import REDIS_URL, redis_available

    require(await redis_available(), f"Redis is not reachable at {REDIS_URL}")
    out = run(
        "resumed_subscription.py",
        *("--gap", "3,10", "--calls", "2", "--redis", REDIS_URL, "--out", str(tmp_path / "r.md")),
    )
    rows = [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ")][1:]
    ways = ("live", "resumed, gap 3", "resumed, gap 10", "resumed, gap 20, 20 changed")
    assert rows == [f"{broker}: {way}" for broker in ("in-process", "Redis") for way in ways], out


async def test_hidden_rows_runs(tmp_path: Path) -> None:
    # The script itself checks that the page hidden in the page query is full and the other is not.
    require(await postgres_available(), f"PostgreSQL is not reachable at {PG_ADMIN_DSN}")
    out = run(
        "hidden_rows.py",
        *("--sizes", "200,400", "--calls", "4", "--rounds", "2", "--out", str(tmp_path / "h.md")),
    )
    rows = [
        [cell.strip() for cell in line.split("|")[1:3]] for line in out.splitlines() if line.startswith("| ")
    ]
    assert rows[1:] == [[e, n] for e in ("sqlite", "postgres") for n in ("200", "400")], out


async def test_tenant_recall_runs() -> None:
    # The script itself checks each scenario's answer (its page, its dated page, its include window).
    require(await postgres_available(), f"PostgreSQL is not reachable at {PG_ADMIN_DSN}")
    out = run(
        "tenant_recall.py",
        *("--resources", "6", "--threads", "2", "--messages", "30"),
        *("--fresh-threads", "3", "--fresh-messages", "40", "--calls", "10"),
    )
    rows = [
        [cell.strip() for cell in line.split("|")[1:3]] for line in out.splitlines() if line.startswith("| ")
    ]
    assert rows[1:] == [[e, t] for e in ("sqlite", "postgres") for t in ("established", "fresh")], out
