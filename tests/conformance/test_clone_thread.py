"""cloneThread, case by case, against the real Mastra's (see clone_harness.py). Per seed: one generated
dataset (several resources, some messages filed under another resource than their thread's), one oracle
run shared by both engines; per engine, a fresh RecallQL server loaded through the API and every case
run over HTTP, in order. Needs node >= 20 (skipped without it, failed in CI)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conformance import harness
from tests.conformance.clone_harness import (
    clone_queries,
    compare_clone_results,
    run_clone_oracle,
    run_clone_queries,
)
from tests.support import Api, database, engines, oracle_node_modules, running_server

pytestmark = pytest.mark.conformance

# Seed: the generator's shape (createdAt ties and messages of other resources in every one).
SEEDS = {
    12: {"threads": 4, "messages": 160, "resources": 3, "mismatched_resource_rate": 0.2},
    58: {"threads": 6, "messages": 300, "resources": 2, "mismatched_resource_rate": 0.1},
}


@dataclass
class CloneOracleRun:
    seed: int
    workdir: Path
    dataset: dict
    queries: list[dict]
    oracle: dict


@pytest.fixture(scope="module", params=sorted(SEEDS), ids=lambda s: f"seed{s}")
def clone_oracle(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> CloneOracleRun:
    seed = request.param
    workdir = harness.case_dir(tmp_path_factory, f"clone-seed{seed}")
    dataset = harness.generate_dataset(seed, workdir / "dataset.json", queries=0, **SEEDS[seed])
    queries = clone_queries(dataset, seed)
    packages = oracle_node_modules(workdir)
    oracle = run_clone_oracle(workdir / "dataset.json", queries, workdir / "oracle.json", packages)
    return CloneOracleRun(seed, workdir, dataset, queries, oracle)


def test_cases_cover_what_they_should(clone_oracle: CloneOracleRun) -> None:
    """The cases reach what the comparison is for: limits that cut through ties, filters, clones of
    clones, other resources, errors."""
    results = {r["name"]: r for r in clone_oracle.oracle["results"]}
    args = {q["name"]: q["args"] for q in clone_oracle.queries}
    answered = [r for r in results.values() if r["ok"]]
    assert len(answered) >= 40
    assert all(r["sameRows"] for r in answered)
    limited = [r for r in answered if (args[r["name"]].get("options") or {}).get("messageLimit", 0) > 0]
    assert sum(1 for r in limited if r["copied"]) >= 8
    assert sum(1 for r in answered if args[r["name"]]["sourceThreadId"].startswith("clone-")) >= 3
    assert sum(1 for r in answered if "messageFilter" in (args[r["name"]].get("options") or {})) >= 8
    assert sum(1 for r in answered if "resourceId" in args[r["name"]]) >= 8
    assert sum(1 for r in answered if not r["copied"]) >= 2
    assert sum(1 for r in results.values() if not r["ok"]) >= 2


@pytest.mark.parametrize("engine", engines())
async def test_clone_thread_matches_oracle(engine: str, clone_oracle: CloneOracleRun, tmp_path: Path) -> None:
    dataset, queries = clone_oracle.dataset, clone_oracle.queries
    async with database(engine, tmp_path) as url:
        with running_server(tmp_path / "data", {"RECALLQL_DATABASE_URL": url}) as srv:
            await harness.load_dataset(Api(srv.url), dataset)
            results = await run_clone_queries(srv.url, queries)
    problems = compare_clone_results(queries, clone_oracle.oracle["results"], results)
    harness.assert_agree(
        clone_oracle.workdir, engine, results, problems, len(queries), seed=clone_oracle.seed
    )
