"""The threads listing, case by case, against the real Mastra's listThreads (see threads_harness.py).
Per seed: one generated set of threads, saved by Mastra into a LibSQL file and listed by it; per engine,
a fresh RecallQL database that imports that file (`recallql import mastra`) and a server answering every
case over HTTP. Needs node >= 20 (skipped without it, failed in CI)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conformance import harness
from tests.conformance.threads_harness import (
    compare_thread_results,
    run_thread_queries,
    run_threads_oracle,
    thread_dataset,
    thread_queries,
)
from tests.support import cli, database, engines, oracle_node_modules, running_server

pytestmark = pytest.mark.conformance

# Seed: threads, resources.
SEEDS = {31: (60, 3), 5: (150, 5)}


@dataclass
class ThreadsOracleRun:
    seed: int
    workdir: Path
    dataset: dict
    queries: list[dict]
    oracle: dict
    mastra_db: Path


@pytest.fixture(scope="module", params=sorted(SEEDS), ids=lambda s: f"seed{s}")
def threads_oracle(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> ThreadsOracleRun:
    seed = request.param
    threads, resources = SEEDS[seed]
    workdir = harness.case_dir(tmp_path_factory, f"threads-seed{seed}")
    dataset = thread_dataset(seed, threads=threads, resources=resources)
    (workdir / "dataset.json").write_text(json.dumps(dataset, indent=1, ensure_ascii=False) + "\n")
    queries = thread_queries(dataset, seed)
    packages = oracle_node_modules(workdir)
    db = workdir / "mastra.db"
    oracle = run_threads_oracle(workdir / "dataset.json", queries, workdir / "oracle.json", db, packages)
    return ThreadsOracleRun(seed, workdir, dataset, queries, oracle, db)


def test_cases_cover_what_they_should(threads_oracle: ThreadsOracleRun) -> None:
    """The cases reach what the comparison is for: ties on both fields (so pages cut through them), ids
    that a collation orders otherwise, metadata filters that cut, all threads and one resource's,
    several pages, errors."""
    threads = threads_oracle.dataset["threads"]
    for field in ("createdAt", "updatedAt"):
        assert max(Counter(t[field] for t in threads).values()) >= 3, field
    ids = [t["id"] for t in threads]
    assert sorted(ids) != sorted(ids, key=str.casefold)
    results = {r["name"]: r for r in threads_oracle.oracle["results"]}
    args = {q["name"]: q["args"] for q in threads_oracle.queries}
    answered = [r for r in results.values() if r["ok"]]
    assert len(answered) >= 100
    filtered = [r for r in answered if "metadata" in args[r["name"]].get("filter", {})]
    assert sum(1 for r in filtered if 0 < r["total"] < len(threads)) >= 15
    assert sum(1 for r in answered if r["name"].startswith("all-") and r["ids"]) >= 10
    assert sum(1 for r in answered if r["ids"] and r["hasMore"]) >= 15
    assert (
        sum(1 for r in answered if (args[r["name"]].get("orderBy") or {}).get("field") == "updatedAt") >= 15
    )
    assert sum(1 for r in results.values() if not r["ok"]) >= 5


@pytest.mark.parametrize("engine", engines())
async def test_thread_listing_matches_oracle(
    engine: str, threads_oracle: ThreadsOracleRun, tmp_path: Path
) -> None:
    queries = threads_oracle.queries
    async with database(engine, tmp_path) as url:
        data = tmp_path / "data"
        data.mkdir()
        cli(
            "import",
            "mastra",
            "--from",
            f"file:{threads_oracle.mastra_db}",
            "--no-embed",
            url=url,
            data_dir=data,
        )
        # RecallQL bounds perPage (1,000 by default; tests/test_limits.py); Mastra does not: lifted to its
        # largest, so that the cases near JavaScript's safe integers ask Mastra's question.
        env = {"RECALLQL_DATABASE_URL": url, "RECALLQL_MAX_PER_PAGE": str(2**53 - 1)}
        with running_server(data, env) as srv:
            results = await run_thread_queries(srv.url, queries)
    problems = compare_thread_results(queries, threads_oracle.oracle["results"], results)
    harness.assert_agree(
        threads_oracle.workdir, engine, results, problems, len(queries), seed=threads_oracle.seed
    )
