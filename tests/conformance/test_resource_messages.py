"""Resource.messages, case by case, against the real Mastra's listMessagesByResourceId (see
resource_harness.py). Per seed: one generated dataset (several resources, a fifth of the messages filed
under another resource than their thread's), one oracle run shared by both engines; per engine, a fresh
RecallQL server loaded through the API and every case run over HTTP. Needs node >= 20 (skipped without
it, failed in CI)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conformance import harness
from tests.conformance.resource_harness import (
    compare_resource_results,
    file_some_under_a_new_resource,
    resource_queries,
    run_resource_oracle,
    run_resource_queries,
)
from tests.support import Api, database, engines, oracle_node_modules, running_server

pytestmark = pytest.mark.conformance

# Seed: the generator's shape. Ties in createdAt, system-role rows, signals and messages filed under
# another resource than their thread's are in every one.
SEEDS = {
    86: {"threads": 4, "messages": 286, "resources": 3, "mismatched_resource_rate": 0.2},
    7: {"threads": 6, "messages": 400, "resources": 2, "mismatched_resource_rate": 0.3},
}
# A resource that owns no thread, only messages filed under it in other resources' threads.
MESSAGES_ONLY = "res-messages-only"


@dataclass
class ResourceOracleRun:
    seed: int
    workdir: Path
    dataset: dict
    queries: list[dict]
    oracle: dict
    embed_url: str


@pytest.fixture(scope="module", params=sorted(SEEDS), ids=lambda s: f"seed{s}")
def resource_oracle(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, embedder: harness.EmbedServer
) -> ResourceOracleRun:
    seed = request.param
    workdir = harness.case_dir(tmp_path_factory, f"resource-seed{seed}")
    generated = harness.generate_dataset(seed, workdir / "generated.json", queries=0, **SEEDS[seed])
    dataset = file_some_under_a_new_resource(generated, MESSAGES_ONLY)
    (workdir / "dataset.json").write_text(json.dumps(dataset, indent=1) + "\n")
    queries = resource_queries(dataset, seed)
    packages = oracle_node_modules(workdir)
    oracle = run_resource_oracle(workdir / "dataset.json", queries, workdir / "oracle.json", packages)
    return ResourceOracleRun(seed, workdir, dataset, queries, oracle, embedder.url)


def test_cases_cover_what_they_should(resource_oracle: ResourceOracleRun) -> None:
    """The generated cases reach what the comparison is for: pages past ties, system rows left out of
    a page yet counted, filters that cut, several resources, include windows, errors."""
    results = {r["name"]: r for r in resource_oracle.oracle["results"]}
    answered = [r for r in results.values() if r["ok"]]
    assert len(answered) >= 60
    assert {r["name"].split("-0")[0] for r in answered if r["ids"]} >= {"res-1", "res-2", MESSAGES_ONLY}
    messages = {m["id"]: m for m in resource_oracle.dataset["messages"]}
    assert any(
        messages[m]["resourceId"] != _thread_resource(resource_oracle.dataset, messages[m]) for m in messages
    )
    full = [r for r in answered if r["perPage"] is False and r["total"]]
    assert any(len(r["ids"]) < r["total"] for r in full), "no listing leaves a system row out"
    assert sum(1 for r in answered if r["ids"] and r["hasMore"]) >= 10
    assert sum(1 for r in results.values() if not r["ok"]) >= 5
    args = {q["name"]: q["args"] for q in resource_oracle.queries}
    assert sum(1 for r in answered if "include" in args[r["name"]]) >= 15
    alone = results["includes-alone"]
    assert len(alone["ids"]) == 4 and alone["total"] == 0, alone  # the target and its next 3


def _thread_resource(dataset: dict, message: dict) -> str:
    return next(t["resourceId"] for t in dataset["threads"] if t["id"] == message["threadId"])


@pytest.mark.parametrize("engine", engines())
async def test_resource_messages_match_oracle(
    engine: str, resource_oracle: ResourceOracleRun, tmp_path: Path
) -> None:
    dataset, queries = resource_oracle.dataset, resource_oracle.queries
    async with database(engine, tmp_path) as url:
        env = harness.server_env(dataset, url, resource_oracle.embed_url)
        with running_server(tmp_path / "data", env) as srv:
            await harness.load_dataset(Api(srv.url), dataset)
            results = await run_resource_queries(srv.url, queries)
    problems = compare_resource_results(queries, resource_oracle.oracle["results"], results)
    harness.assert_agree(
        resource_oracle.workdir, engine, results, problems, len(queries), seed=resource_oracle.seed
    )
