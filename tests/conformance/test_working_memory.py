"""Working memory, case by case, against the real Mastra's (see working_memory_harness.py). Per profile
(the server-wide working-memory defaults: off, as both ship; on in thread scope with a template; on with
a JSON Schema), one oracle run shared by both engines; per engine, a fresh RecallQL server with the same
defaults and threads, loaded through the API, and every case run over HTTP, in order. Needs node >= 20
(skipped without it, failed in CI)."""

from __future__ import annotations

import json
import math
import random
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from resolvers.working_memory import js_json
from tests.conformance import harness
from tests.conformance.working_memory_harness import (
    PROFILES,
    compare_working_memory_results,
    run_working_memory_oracle,
    run_working_memory_queries,
    server_env,
    working_memory_dataset,
    working_memory_queries,
)
from tests.support import Api, database, engines, oracle_node_modules, require, running_server

pytestmark = pytest.mark.conformance

SEED = 31


@pytest.fixture(scope="module", params=list(PROFILES))
def working_memory_oracle(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict, list[dict], dict]:
    profile = request.param
    workdir = harness.case_dir(tmp_path_factory, f"working-memory-{profile}-seed{SEED}")
    dataset = working_memory_dataset(profile)
    (workdir / "dataset.json").write_text(json.dumps(dataset, indent=1) + "\n")
    queries = working_memory_queries(profile, SEED)
    packages = oracle_node_modules(workdir)
    oracle = run_working_memory_oracle(workdir / "dataset.json", queries, workdir / "oracle.json", packages)
    return workdir, dataset, queries, oracle


@pytest.mark.parametrize("engine", engines())
async def test_working_memory_matches_oracle(
    engine: str, working_memory_oracle: tuple[Path, dict, list[dict], dict], tmp_path: Path
) -> None:
    workdir, dataset, queries, oracle = working_memory_oracle
    async with database(engine, tmp_path) as url:
        with running_server(tmp_path / "data", server_env(dataset, url)) as srv:
            await harness.load_dataset(Api(srv.url), dataset)
            results = await run_working_memory_queries(srv.url, queries)
    problems = compare_working_memory_results(queries, oracle["results"], results)
    harness.assert_agree(workdir, engine, results, problems, len(queries))


def test_schema_template_prints_as_json_stringify(tmp_path: Path) -> None:
    """The JSON template is printed as Mastra prints it, JSON.stringify of the parsed schema: checked
    against node on numbers at every boundary of JavaScript's Number::toString (exponent thresholds,
    doubles' shortest digits, integers past 2**53, -0, overflow), keys that JavaScript puts first, and
    strings with escapes."""
    node = shutil.which("node")
    require(node is not None, "node (>= 20) is not installed: JSON.stringify cannot be asked")
    assert node is not None
    rng = random.Random(7)
    numbers: list[int | float] = [
        0,
        -0.0,
        1.0,
        -1.5,
        0.1,
        1e21,
        1e20,
        123456789012345680000.0,
        1e-6,
        1e-7,
        1.5e-7,
        5e-324,
        1.7976931348623157e308,
        2**53,
        2**53 + 1,
        2**64,
        -(2**70),
        10**400,
        0.000001234,
        100.0,
        3.14159,
        1 / 3,
    ]
    numbers += [rng.uniform(-1e6, 1e6) for _ in range(200)]
    numbers += [struct.unpack("<d", rng.randbytes(8))[0] for _ in range(500)]
    numbers = [n for n in numbers if not (isinstance(n, float) and math.isnan(n))]
    values: list[Any] = [
        {"10": 1, "b": 2, "2": 3, "0": 4, "01": 5, "4294967294": 6, "4294967295": 7, "a": [1.0, None]},
        {"s": 'quote " backslash \\ \b\t\n\f\r \u0001 \u2028 é 😀', "t": True, "f": False},
        *numbers,
    ]
    # What JavaScript reads as the same values: a random infinity is written as a literal past the
    # doubles (Python writes "Infinity", which JSON has not), and 10**400 is one already.
    source = tmp_path / "values.json"
    source.write_text(
        "[" + ",".join(json.dumps(v, allow_nan=True).replace("Infinity", "1e999") for v in values) + "]"
    )
    script = "const v = JSON.parse(require('fs').readFileSync(process.argv[1], 'utf8'));"
    script += "process.stdout.write(JSON.stringify(v.map((x) => JSON.stringify(x))));"
    out = subprocess.run([node, "-e", script, str(source)], capture_output=True, text=True, check=True)
    want = json.loads(out.stdout)
    got = [js_json(v) for v in values]
    wrong = [(v, w, g) for v, w, g in zip(values, want, got, strict=True) if w != g]
    assert not wrong, wrong[:10]
