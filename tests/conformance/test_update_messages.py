"""updateMessages, case by case, against the real Mastra's (see update_harness.py). Per seed: one
generated dataset, one oracle run shared by both engines; per engine, a fresh RecallQL server loaded
through the API and every case run over HTTP, in order. Needs node >= 20 (skipped without it, failed in
CI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance import harness
from tests.conformance.update_harness import (
    compare_update_results,
    run_update_oracle,
    run_update_queries,
    update_queries,
)
from tests.support import Api, database, engines, oracle_node_modules, running_server

pytestmark = pytest.mark.conformance

SEED, SHAPE = 23, {"threads": 4, "messages": 160, "resources": 2, "mismatched_resource_rate": 0.2}


@pytest.fixture(scope="module")
def update_oracle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, list[dict], dict]:
    workdir = harness.case_dir(tmp_path_factory, f"update-seed{SEED}")
    dataset = harness.generate_dataset(SEED, workdir / "dataset.json", queries=0, **SHAPE)
    queries = update_queries(dataset, SEED)
    packages = oracle_node_modules(workdir)
    oracle = run_update_oracle(workdir / "dataset.json", queries, workdir / "oracle.json", packages)
    return workdir, dataset, queries, oracle


@pytest.mark.parametrize("engine", engines())
async def test_update_messages_matches_oracle(
    engine: str, update_oracle: tuple[Path, dict, list[dict], dict], tmp_path: Path
) -> None:
    workdir, dataset, queries, oracle = update_oracle
    async with database(engine, tmp_path) as url:
        with running_server(tmp_path / "data", {"RECALLQL_DATABASE_URL": url}) as srv:
            await harness.load_dataset(Api(srv.url), dataset)
            results = await run_update_queries(srv.url, queries)
    problems = compare_update_results(queries, oracle["results"], results)
    harness.assert_agree(workdir, engine, results, problems, len(queries))
