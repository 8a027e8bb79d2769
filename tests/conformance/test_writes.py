"""saveMessages, updateThread, deleteMessages and deleteThread, case by case, against the real Mastra's
(see write_harness.py). Per seed: one generated dataset, one oracle run shared by both engines; per
engine, a fresh RecallQL server loaded through the API and every case run over HTTP, in order. Needs
node >= 20 (skipped without it, failed in CI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance import harness
from tests.conformance.write_harness import (
    compare_write_results,
    run_write_oracle,
    run_write_queries,
    write_queries,
)
from tests.support import Api, database, engines, oracle_node_modules, running_server

pytestmark = pytest.mark.conformance

SEED, SHAPE = 29, {"threads": 5, "messages": 120, "resources": 2, "mismatched_resource_rate": 0.2}


@pytest.fixture(scope="module")
def write_oracle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, list[dict], dict]:
    workdir = harness.case_dir(tmp_path_factory, f"write-seed{SEED}")
    dataset = harness.generate_dataset(SEED, workdir / "dataset.json", queries=0, **SHAPE)
    queries = write_queries(dataset, SEED)
    packages = oracle_node_modules(workdir)
    oracle = run_write_oracle(workdir / "dataset.json", queries, workdir / "oracle.json", packages)
    return workdir, dataset, queries, oracle


@pytest.mark.parametrize("engine", engines())
async def test_writes_match_oracle(
    engine: str, write_oracle: tuple[Path, dict, list[dict], dict], tmp_path: Path
) -> None:
    workdir, dataset, queries, oracle = write_oracle
    async with database(engine, tmp_path) as url:
        with running_server(tmp_path / "data", {"RECALLQL_DATABASE_URL": url}) as srv:
            await harness.load_dataset(Api(srv.url), dataset)
            results = await run_write_queries(srv.url, queries, [m["id"] for m in dataset["messages"]])
    problems = compare_write_results(queries, oracle["results"], results)
    harness.assert_agree(workdir, engine, results, problems, len(queries))
