"""Import rate of `recallql import mastra` (embedding excluded), into RecallQL on SQLite and PostgreSQL.

    .venv/bin/python benchmarks/import_bench.py [--messages 50000] [--batch-size 1000] \
        [--engines sqlite,postgres]

The Mastra source is a LibSQL file written by the real Mastra (tests/mastra_fixture.mjs --bulk N: N text
messages over N/500 threads, every fifth sharing its createdAt with the one before), with the conformance
oracle's pinned packages (installed by ../shared/conformance/oracle.sh on first use). Each engine gets a
fresh database; the import runs twice: the first writes everything, the second (idempotent) reads and
compares everything and writes nothing. "CPU here" is this process's CPU time (reading the source,
conversion, classification, the driver), which a loaded machine distorts less than the wall clock.
PostgreSQL is the server at RECALLQL_TEST_PG_DSN (default postgresql://127.0.0.1:5432/test), where a
scratch database is created and dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from models.db import create_engine  # noqa: E402
from models.mastra_source import open_mastra_source  # noqa: E402
from models.migrate import upgrade  # noqa: E402
from models.repository import Repository  # noqa: E402
from resolvers.transfer import import_mastra  # noqa: E402

SHARED = Path(os.environ.get("RECALLQL_SHARED_DIR", REPO.parent / "shared"))
PG_ADMIN_DSN = os.environ.get("RECALLQL_TEST_PG_DSN", "postgresql://127.0.0.1:5432/test")


def node_modules(tmp: Path) -> Path:
    conformance = SHARED / "conformance"
    digest = hashlib.sha256((conformance / "package-lock.json").read_bytes()).hexdigest()[:16]
    cache_home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    cache = Path(os.environ.get("RECALL_ORACLE_CACHE") or cache_home / "recall-oracle") / digest
    if not (cache / ".complete").is_file():
        dataset = tmp / "empty.json"
        dataset.write_text('{"threads": [], "messages": [], "queries": []}')
        oracle = [str(conformance / "oracle.sh"), str(dataset), str(tmp / "out.json")]
        subprocess.run(["bash", *oracle], check=True)
    return cache


def mastra_file(tmp: Path, messages: int) -> tuple[Path, float]:
    db = tmp / "mastra-bulk.db"
    started = time.perf_counter()
    subprocess.run(
        [
            "node",
            str(REPO / "tests/mastra_fixture.mjs"),
            str(db),
            str(tmp / "x.json"),
            "--bulk",
            str(messages),
        ],
        env={**os.environ, "RECALL_ORACLE_NODE_MODULES": str(node_modules(tmp))},
        check=True,
    )
    return db, time.perf_counter() - started


async def run(url: str, source: Path, batch: int) -> list[tuple[float, float, str]]:
    engine = create_engine(url)
    await upgrade(engine)
    repository = Repository(engine)
    out = []
    try:
        for _ in range(2):
            started, cpu = time.perf_counter(), time.process_time()
            src = await open_mastra_source(f"file:{source}")
            try:
                report = await import_mastra(repository, src, batch=batch)
            finally:
                await src.aclose()
            out.append((time.perf_counter() - started, time.process_time() - cpu, report.lines()[2]))
        assert await repository.count_all_messages() == report.stats["message"].read
    finally:
        await engine.dispose()
    return out


async def scratch_postgres() -> tuple[str, str]:
    import asyncpg

    name = f"recallql_bench_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(PG_ADMIN_DSN)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    return name, PG_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://") + "/" + name


async def drop_postgres(name: str) -> None:
    import asyncpg

    admin = await asyncpg.connect(PG_ADMIN_DSN)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--engines", default="sqlite,postgres")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="recallql-import-bench-") as tmp_name:
        tmp = Path(tmp_name)
        source, took = mastra_file(tmp, args.messages)
        print(f"Mastra wrote {args.messages} messages in {took:.1f}s ({args.messages / took:,.0f} msg/s)")
        for engine in args.engines.split(","):
            if engine == "sqlite":
                results = await run(f"sqlite+aiosqlite:///{tmp / 'recallql.db'}", source, args.batch_size)
            else:
                name, url = await scratch_postgres()
                try:
                    results = await run(url, source, args.batch_size)
                finally:
                    await drop_postgres(name)
            for label, (seconds, cpu, line) in zip(("first import", "second (no-op)"), results, strict=True):
                rate = args.messages / seconds
                print(
                    f"{engine:<9} {label:<15} {seconds:6.2f}s ({cpu:5.2f}s CPU here) {rate:>9,.0f} msg/s"
                    f"   {line}"
                )


if __name__ == "__main__":
    asyncio.run(main())
