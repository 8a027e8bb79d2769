"""RecallQL's recall, case by case, against the real Mastra `Memory.recall()` (the conformance oracle).

Per seed: one generated dataset and one oracle run (module-scoped, shared by both engines). Per seed and
database engine: a fresh RecallQL server loaded through the GraphQL API, every query run, and the
results compared with compare.py's rules (`--full`). Needs node >= 20 (skipped without it, failed in CI).

    pytest tests/conformance -q                 # RECALLQL_TEST_ENGINES=sqlite to skip PostgreSQL

Artifacts (dataset.json, oracle.json, candidate-<engine>.json) go to pytest's basetemp, or to
$RECALLQL_CONFORMANCE_OUT/seed<S>/ when that is set (kept); rerun the comparer on them by hand with
`python3 {SHARED}/conformance/compare.py oracle.json candidate-sqlite.json --full`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conformance import harness
from tests.support import Api, database, engines, running_server, vector_backlog

pytestmark = pytest.mark.conformance

SEEDS = (1, 2, 3, 35, 86)
# The generator's default shape (5 threads, 200 messages, one resource per thread), except for these
# seeds, found by sweeps of other seeds and shapes. Seed 35's gives a case whose answer GraphQL cannot
# type (harness.answers_what_graphql_cannot_type); seed 86's spreads the threads over 3 resources and
# files a fifth of the messages under another resource than their thread's.
SHAPES = {
    35: {"threads": 4, "messages": 135},
    86: {"threads": 4, "messages": 286, "resources": 3, "mismatched_resource_rate": 0.2},
}
MIN_QUERIES = 150
# Semantic recall (merged semanticRecall truthy and a vectorSearchString) is not implemented yet. While
# True, those cases are compared and counted but left out of the verdict; everything else must pass.
# Set it to False once semantic recall lands: then they must all pass too.
SEMANTIC_PENDING = False
# When both sides fail, the error messages must be equal (the contract keeps Mastra's exact texts), except
# where GraphQL's type system rejects a variable first (a page of 1.5 is no Int). False: any error matches.
EXACT_ERROR_TEXT = True


@dataclass
class OracleRun:
    seed: int
    workdir: Path
    dataset: dict
    oracle: dict
    embed_url: str
    seconds: float


@pytest.fixture(scope="module", params=SEEDS, ids=lambda s: f"seed{s}")
def oracle_run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, embedder: harness.EmbedServer
) -> OracleRun:
    seed = request.param
    workdir = harness.case_dir(tmp_path_factory, f"seed{seed}")
    dataset = harness.generate_dataset(seed, workdir / "dataset.json", **SHAPES.get(seed, {}))
    started = time.monotonic()
    oracle = harness.run_oracle(workdir / "dataset.json", workdir / "oracle.json", embedder.url)
    return OracleRun(seed, workdir, dataset, oracle, embedder.url, time.monotonic() - started)


def test_oracle_run_is_sound(oracle_run: OracleRun) -> None:
    dataset, oracle = oracle_run.dataset, oracle_run.oracle
    queries = dataset["queries"]
    assert len(queries) >= MIN_QUERIES, f"seed {oracle_run.seed}: only {len(queries)} queries"
    assert [r["name"] for r in oracle["results"]] == [q["name"] for q in queries]
    assert oracle["oracle"]["mode"] == "contract" and oracle["oracle"]["semantic"] is True, oracle["oracle"]
    check = oracle["storeCheck"]
    assert check["mismatches"] == [], f"oracle stored rows differently: {check['mismatches'][:5]}"
    assert check["rows"] == check["input"] == len(dataset["messages"]), check
    assert check["insertOrderMatchesDataset"] is True, check


@pytest.mark.parametrize("engine", engines())
async def test_recall_matches_oracle(engine: str, oracle_run: OracleRun, tmp_path: Path) -> None:
    dataset = oracle_run.dataset
    assert len(dataset["queries"]) >= MIN_QUERIES
    assert oracle_run.oracle["storeCheck"]["mismatches"] == []
    label = f"seed {oracle_run.seed} / {engine}"
    timings = {"oracle (shared by engines)": oracle_run.seconds}

    async with database(engine, tmp_path) as url:
        started = time.monotonic()
        with running_server(tmp_path / "data", harness.server_env(dataset, url, oracle_run.embed_url)) as srv:
            timings["server start"] = time.monotonic() - started
            started = time.monotonic()
            await harness.load_dataset(Api(srv.url), dataset)
            timings["load"] = time.monotonic() - started
            # Every save answered after its vectors were written (as Mastra's do); a write deferred to
            # the background drain would show up as semantic mismatches below, so say so here instead.
            backlog = await vector_backlog(srv.url)
            assert backlog == 0, f"{backlog:.0f} vector write(s) deferred while loading; see {srv.log_path}"
            started = time.monotonic()
            results = await harness.run_queries(srv.url, dataset["queries"], concurrency=4)
            timings["queries"] = time.monotonic() - started

    candidate = {"results": results}
    candidate_path = oracle_run.workdir / f"candidate-{engine}.json"
    candidate_path.write_text(json.dumps(candidate, indent=1, ensure_ascii=False) + "\n")

    verdict = harness.judge(
        oracle_run.oracle,
        candidate,
        dataset,
        semantic_pending=SEMANTIC_PENDING,
        error_text=EXACT_ERROR_TEXT,
        label=label,
    )
    print(verdict.summary())
    print("  timings: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()))
    if SEMANTIC_PENDING and verdict.pending:
        print(f"  {len(verdict.pending)} semantic case(s) excluded from the verdict (SEMANTIC_PENDING)")
    queries = {q["name"]: q for q in dataset["queries"]}
    assert verdict.ok, (
        verdict.report(queries)
        + f"\n(oracle: {oracle_run.workdir / 'oracle.json'}, candidate: {candidate_path})"
    )
