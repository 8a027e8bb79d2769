"""`recallql import mastra`, `recallql export` and `recallql import jsonl`, on SQLite and PostgreSQL.

The Mastra import is checked against a database written by the REAL Mastra (tests/mastra_fixture.mjs,
run with the conformance oracle's pinned packages): every thread, message and working memory must come
back through RecallQL's recall with the content, createdAt, order and counts Mastra itself reports, and a
second run must change nothing. A PostgreSQL Mastra store is mirrored from @mastra/pg's DDL.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import threading
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import orjson
import pytest

from models.db import create_engine
from models.mastra_source import (
    MastraSourceError,
    decode_content,
    decode_json_column,
    decode_jsonb,
    open_mastra_source,
    parse_time,
)
from models.migrate import upgrade
from models.records import MAX_MS, MIN_MS, ResourceRecord
from models.repository import Repository
from resolvers.auth import OPEN
from resolvers.clock import parse_iso, to_iso
from resolvers.config import BUILTIN_DEFAULTS
from resolvers.context import Services
from resolvers.messages import MessageInput
from resolvers.recall import RecallArgs
from resolvers.transfer import TransferError, export_jsonl, import_jsonl, import_mastra, to_format2
from tests.support import (
    EMBED_SERVER,
    PG_ADMIN_DSN,
    app_client,
    at,
    cli,
    cli_command,
    cli_env,
    database,
    embed_server_process,
    free_port,
    oracle_node_modules,
    postgres_available,
    require,
)

FIXTURE_SCRIPT = Path(__file__).with_name("mastra_fixture.mjs")
REPORT_LINE = re.compile(
    r"^(resource|thread|message)s:\s+(\d+) read\s+(\d+) new\s+(\d+) updated\s+(\d+) unchanged"
)


# ---------------------------------------------------------------------------------------------- helpers
def write_mastra_fixture(tmp: Path, *extra: str) -> tuple[Path, dict[str, Any]]:
    modules = oracle_node_modules(tmp)
    db, expected = tmp / "mastra.db", tmp / "expected.json"
    proc = subprocess.run(
        ["node", str(FIXTURE_SCRIPT), str(db), str(expected), *extra],
        env={**os.environ, "RECALL_ORACLE_NODE_MODULES": str(modules)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"mastra_fixture.mjs failed:\n{proc.stderr[-4000:]}"
    return db, json.loads(expected.read_text())


@pytest.fixture(scope="session")
def mastra_fixture(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    return write_mastra_fixture(tmp_path_factory.mktemp("mastra-fixture"))


def report(stdout: bytes) -> dict[str, tuple[int, int, int, int]]:
    """{kind: (read, new, updated, unchanged)} from an import's report."""
    out = {}
    for line in stdout.decode().splitlines():
        if match := REPORT_LINE.match(line):
            out[match.group(1)] = tuple(int(match.group(n)) for n in range(2, 6))
    return out


async def export_bytes(repository: Repository, resource_id: str | None = None) -> bytes:
    chunks: list[bytes] = []
    await export_jsonl(repository, chunks.append, resource_id=resource_id, batch=7)
    return b"".join(chunks)


@contextlib.asynccontextmanager
async def fresh_repository(database_url: str, tmp: Path) -> AsyncIterator[Repository]:
    """Another new database of the same engine."""
    kind = "postgres" if database_url.startswith("postgresql") else "sqlite"
    tmp.mkdir(parents=True, exist_ok=True)
    async with database(kind, tmp) as url:
        engine = create_engine(url)
        await upgrade(engine)
        try:
            yield Repository(engine)
        finally:
            await engine.dispose()


async def all_ids(services: Services, thread_id: str, **kwargs: Any) -> list[str]:
    result = await services.recall.recall(
        RecallArgs(thread_id=thread_id, per_page=False, **kwargs), principal=OPEN
    )
    return [m.id for m in result.messages]


# -------------------------------------------------------------------------------------- Mastra (LibSQL)
async def check_against_mastra(services: Services, repository: Repository, expected: dict[str, Any]) -> None:
    rows = expected["messages"]  # rowid (insertion) order, as Mastra stored them
    rank = {m["id"]: n for n, m in enumerate(rows)}
    assert await repository.count_all_messages() == len(rows) == expected["counts"]["messages"]
    for t in expected["threads"]:
        thread = await services.threads.get(t["id"], principal=OPEN)
        assert thread is not None, t["id"]
        assert (thread.resource_id, thread.title, thread.metadata) == (
            t["resourceId"],
            t["title"],
            t["metadata"],
        )
        assert (to_iso(thread.created_at), to_iso(thread.updated_at)) == (t["createdAt"], t["updatedAt"])

        result = await services.recall.recall(
            RecallArgs(thread_id=t["id"], per_page=False, hide_signals=False), principal=OPEN
        )
        mine = [m for m in rows if m["threadId"] == t["id"]]
        want = sorted(
            (m for m in mine if m["role"] != "system"),
            key=lambda m: (parse_iso(m["createdAt"]), rank[m["id"]]),
        )
        assert [m.id for m in result.messages] == [m["id"] for m in want]
        assert result.total == len(mine)  # total counts the system row, as in Mastra
        for got, m in zip(result.messages, want, strict=True):
            mastra = m["mastra"]  # the message as Mastra's storage reads it back
            assert got.content == mastra["content"], m["id"]
            assert (got.role, got.type) == (mastra["role"], mastra["type"]), m["id"]
            assert to_iso(got.created_at) == mastra["createdAt"] == m["createdAt"], m["id"]
            assert (got.thread_id, got.resource_id) == (m["threadId"], m["resourceId"]), m["id"]

    system = (await repository.get_messages(["sys"]))["sys"]
    stored = next(m for m in rows if m["id"] == "sys")
    assert (system.role, system.content) == ("system", json.loads(stored["storedContent"]))

    # Ties keep Mastra's insertion order; a late insert with an early createdAt sorts by time.
    alpha = await all_ids(services, "alpha", hide_signals=False)
    assert alpha[:4] == ["a-001", "late-early", "a-002", "tie-z"]
    assert alpha[4:6] == ["tie-a", "tie-m"]
    assert await all_ids(services, "gamma") == ["g-001", "g-002", "raw-null-resource", "raw-not-json"]
    # Signal columns were classified on write: the default hides legacy reminders, hideSignals all signals.
    assert set(alpha) - set(await all_ids(services, "alpha")) == {"rem-text", "rem-meta", "sig-reactive"}
    assert set(alpha) - set(await all_ids(services, "alpha", hide_signals=True)) == {
        "rem-text",
        "rem-meta",
        "sig-reactive",
        "sig-part",
    }

    for r in expected["resources"]:
        resource = await repository.get_resource(r["id"])
        assert resource is not None, r["id"]
        assert (resource.working_memory, resource.metadata) == (r["workingMemory"], r["metadata"])
        assert (to_iso(resource.created_at), to_iso(resource.updated_at)) == (r["createdAt"], r["updatedAt"])
    # A thread's owner without a Mastra resource row gets RecallQL's usual empty resource row.
    carol = await repository.get_resource("carol")
    assert carol is not None and carol.working_memory is None
    beta = await services.threads.get("beta", principal=OPEN)
    assert beta is not None and beta.metadata == {"n": 1, "workingMemory": "# Thread notes\nbeta only"}


async def test_import_mastra_libsql_file(
    repository: Repository,
    services: Services,
    database_url: str,
    mastra_fixture: tuple[Path, dict[str, Any]],
    tmp_path: Path,
) -> None:
    db, expected = mastra_fixture
    counts = expected["counts"]
    data_dir = tmp_path / "data"
    source_digest = hashlib.sha256(db.read_bytes()).hexdigest()

    first = cli("import", "mastra", "--from", f"file:{db}", "--no-embed", url=database_url, data_dir=data_dir)
    assert report(first.stdout) == {
        "resource": (counts["resources"], counts["resources"], 0, 0),
        "thread": (counts["threads"], counts["threads"], 0, 0),
        "message": (counts["messages"], counts["messages"], 0, 0),
    }
    assert b"6 legacy message content(s) converted to format 2" in first.stdout
    await check_against_mastra(services, repository, expected)
    before = await export_bytes(repository)

    # Idempotent: the same ids, nothing written, nothing changed (a plain path works too).
    second = cli(
        "import", "mastra", "--from", str(db), "--batch-size", "3", url=database_url, data_dir=data_dir
    )
    assert report(second.stdout) == {
        "resource": (counts["resources"], 0, 0, counts["resources"]),
        "thread": (counts["threads"], 0, 0, counts["threads"]),
        "message": (counts["messages"], 0, 0, counts["messages"]),
    }
    assert await export_bytes(repository) == before
    await check_against_mastra(services, repository, expected)
    # A batch size out of range is one line (past a C int it was an OverflowError's traceback).
    for size in ("0", str(2**31)):
        refused = cli(
            "import",
            "mastra",
            "--from",
            str(db),
            "--batch-size",
            size,
            url=database_url,
            data_dir=data_dir,
            succeeds=False,
        )
        assert refused.returncode == 1, refused.stderr
        assert refused.stderr.decode().strip() == "import: --batch-size must be from 1 to 1,000,000"
    assert await export_bytes(repository) == before
    # The source is only read.
    assert hashlib.sha256(db.read_bytes()).hexdigest() == source_digest


async def test_an_import_into_postgresql_leaves_fresh_planner_statistics(
    mastra_fixture: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """A server's cached plans treated freshly filled tables as the small ones they were (a save's lookup
    by id stayed a sequential scan until autovacuum came by): the import analyzes what it filled."""
    require(await postgres_available(), f"PostgreSQL is not reachable at {PG_ADMIN_DSN}")
    from sqlalchemy import text

    async with database("postgres", tmp_path) as url:
        cli(
            "import",
            "mastra",
            "--from",
            f"file:{mastra_fixture[0]}",
            "--no-embed",
            url=url,
            data_dir=tmp_path / "d",
        )
        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                rows = await conn.execute(
                    text(
                        "SELECT relname, last_analyze IS NOT NULL FROM pg_stat_user_tables "
                        "WHERE relname IN ('messages', 'threads', 'resources')"
                    )
                )
                analyzed = dict(rows.all())
                messages = (await conn.execute(text("SELECT count(*) FROM messages"))).scalar_one()
                estimate = (
                    await conn.execute(text("SELECT reltuples FROM pg_class WHERE relname = 'messages'"))
                ).scalar_one()
        finally:
            await engine.dispose()
    assert analyzed == {"messages": True, "threads": True, "resources": True}
    assert messages == mastra_fixture[1]["counts"]["messages"] and estimate == messages


async def test_import_mastra_skips_rows_it_cannot_store(
    repository: Repository, mastra_fixture: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """LibSQL keeps U+0000 and any number as a time; the rows PostgreSQL could not store, or whose time
    an export could not write, are skipped with a warning, and the rest is imported."""
    import sqlite3

    db = tmp_path / "mastra.db"
    shutil.copy(mastra_fixture[0], db)
    content = json.dumps({"format": 2, "parts": [{"type": "text", "text": "a\u0000b"}]})
    with sqlite3.connect(db) as conn:
        thread_id, resource_id = conn.execute("SELECT id, resourceId FROM mastra_threads LIMIT 1").fetchone()
        columns = "(id, thread_id, content, role, type, createdAt, resourceId)"
        rows = [
            ("nul-content", content, "2026-01-01T00:00:00.000Z"),
            ("far-future", json.dumps({"format": 2, "parts": []}), str(10**16)),
            ("far-far-future", json.dumps({"format": 2, "parts": []}), "9" * 22),
            # Imported as Mastra reads it, with nothing in it: said, since its text is gone.
            ("format-3", json.dumps({"format": 3, "parts": [{"type": "text", "text": "t"}]}), "2026-01-01"),
        ]
        for mid, body, created in rows:
            conn.execute(
                f"INSERT INTO mastra_messages {columns} VALUES (?, ?, ?, 'user', 'v2', ?, ?)",
                (mid, thread_id, body, created, resource_id),
            )
        conn.execute(
            "INSERT INTO mastra_threads (id, resourceId, title, metadata, createdAt, updatedAt) "
            "VALUES ('nul-thread', ?, 'a' || char(0) || 'b', NULL, '2026-01-01T00:00:00.000Z', "
            "'2026-01-01T00:00:00.000Z')",
            (resource_id,),
        )
        # A time that cannot be read, beside one that can: kept, the other standing in, and said.
        for tid, created, updated in (
            ("late-garbage", "2026-01-01T00:00:00.000Z", "garbage"),
            ("early-garbage", "garbage", "2026-01-02T00:00:00.000Z"),
        ):
            conn.execute(
                "INSERT INTO mastra_threads (id, resourceId, title, metadata, createdAt, updatedAt) "
                "VALUES (?, ?, 't', NULL, ?, ?)",
                (tid, resource_id, created, updated),
            )
    source = await open_mastra_source(str(db))
    try:
        result = await import_mastra(repository, source)
    finally:
        await source.aclose()
    assert result.stats["message"].skipped == 3 and result.stats["thread"].skipped == 1
    warnings = "\n".join(result.warnings)
    assert "message 'nul-content': Strings may not contain U+0000 (NUL); skipped" in warnings
    assert "message 'far-future': no id, thread_id, role or readable createdAt; skipped" in warnings
    assert "thread 'nul-thread': Strings may not contain U+0000 (NUL); skipped" in warnings
    assert (
        "message 'format-3': content is an object of no known format; stored empty, as Mastra reads it"
        in warnings
    )
    assert (await repository.get_messages(["format-3"]))["format-3"].content == {"format": 2, "parts": []}
    assert "thread 'late-garbage': updatedAt cannot be read; its createdAt stands in" in warnings
    assert "thread 'early-garbage': createdAt cannot be read; its updatedAt stands in" in warnings
    late, early = await repository.get_thread("late-garbage"), await repository.get_thread("early-garbage")
    assert late is not None and late.updated_at == late.created_at
    assert early is not None and early.created_at == early.updated_at
    assert await repository.get_messages(["nul-content", "far-future", "far-far-future"]) == {}
    assert await repository.get_thread("nul-thread") is None
    exported = await export_bytes(repository)
    assert exported.count(b'"kind":"message"') == mastra_fixture[1]["counts"]["messages"] + 1


def hash_semantic(repository: Repository, url: str, data_dir: Path) -> Any:
    """Semantic memory over the conformance embeddings server (hash-64) and the import's Chroma."""
    from models.embedders import HttpEmbedder
    from models.vector_index import ChromaIndex
    from resolvers.semantic import SemanticMemory

    return SemanticMemory(
        repository,
        HttpEmbedder(url, "hash-64"),
        lambda model, dim: ChromaIndex(path=data_dir / "chroma", model_name=model, dimension=dim),
    )


async def test_import_mastra_embeds_the_messages(
    repository: Repository, database_url: str, mastra_fixture: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    require(EMBED_SERVER.is_file(), f"the conformance embeddings server is not at {EMBED_SERVER}")
    db, expected = mastra_fixture
    data_dir = tmp_path / "data"
    with embed_server_process() as url:
        env = {"RECALLQL_EMBEDDINGS_URL": url, "RECALLQL_EMBEDDINGS_MODEL": "hash-64"}
        first = cli("import", "mastra", "--from", f"file:{db}", url=database_url, data_dir=data_dir, env=env)
        assert b"embedding" in first.stderr
        assert await repository.outbox_backlog() == 0
        # A second run writes nothing, so nothing is queued or embedded again.
        cli("import", "mastra", "--from", f"file:{db}", url=database_url, data_dir=data_dir, env=env)
        assert await repository.outbox_backlog() == 0

        semantic = hash_semantic(repository, url, data_dir)
        try:
            found = await semantic.search(
                "Find me a train to Lyon, please",
                thread_id="alpha",
                resource_id="alice",
                resource_scope=True,
                top_k=1,
            )
            assert [h.message_id for h in found.hits] == ["a-001"]
            found = await semantic.search(
                "legacy v1 string content", thread_id="beta", resource_id=None, resource_scope=False, top_k=1
            )
            assert [h.message_id for h in found.hits] == ["legacy-str"]
        finally:
            await semantic.aclose()
    assert expected["counts"]["messages"] == await repository.count_all_messages()


async def test_a_message_of_no_resource_is_found_by_its_threads_search(
    repository: Repository, database_url: str, tmp_path: Path
) -> None:
    """A message's resourceId "" is no resource (as in recall): its vectors went to a collection of ""
    that the thread's search, which reads "" as none, never looked in. Whitespace is no resource
    anyone could name: refused, as by the API."""
    require(EMBED_SERVER.is_file(), f"the conformance embeddings server is not at {EMBED_SERVER}")
    created = '"createdAt":"2026-01-01T00:00:00.000Z"'
    lines = [
        '{"kind":"thread","id":"nr-t","resourceId":"nr-owner","title":"",' + created + "}",
        '{"kind":"message","id":"nr-m","threadId":"nr-t","resourceId":"","role":"user",'
        + created
        + ',"content":{"format":2,"parts":[{"type":"text","text":"a train to Lyon"}]}}',
    ]
    source = tmp_path / "no-resource.jsonl"
    source.write_text("\n".join(lines) + "\n")
    data_dir = tmp_path / "data"
    with embed_server_process() as url:
        env = {"RECALLQL_EMBEDDINGS_URL": url, "RECALLQL_EMBEDDINGS_MODEL": "hash-64"}
        cli("import", "jsonl", "--from", str(source), url=database_url, data_dir=data_dir, env=env)
        stored = (await repository.get_messages(["nr-m"]))["nr-m"]
        assert stored.resource_id is None
        semantic = hash_semantic(repository, url, data_dir)
        try:
            found = await semantic.search(
                "a train to Lyon", thread_id="nr-t", resource_id=None, resource_scope=False, top_k=1
            )
            assert [h.message_id for h in found.hits] == ["nr-m"]
        finally:
            await semantic.aclose()
    blank = lines[1].replace('"resourceId":""', '"resourceId":"  "').replace("nr-m", "nr-blank")
    with pytest.raises(TransferError, match=r"line 1: .*resourceId must be a non-empty string or null"):
        await import_jsonl(repository, [blank.encode()])


# ---------------------------------------------------------------------------------- Mastra (PostgreSQL)
# @mastra/pg's DDL (stores/pg/src/storage/db: generateTableSQL over core's TABLE_SCHEMAS): TIMESTAMP columns
# get a TIMESTAMPTZ "…Z" twin, jsonb columns are JSONB, text TEXT.
PG_DDL = """
CREATE SCHEMA IF NOT EXISTS "{s}";
CREATE TABLE IF NOT EXISTS "{s}"."mastra_threads" (
  "id" TEXT PRIMARY KEY NOT NULL, "resourceId" TEXT NOT NULL, "title" TEXT NOT NULL, "metadata" JSONB,
  "createdAt" TIMESTAMP NOT NULL, "updatedAt" TIMESTAMP NOT NULL,
  "createdAtZ" TIMESTAMPTZ DEFAULT NOW(), "updatedAtZ" TIMESTAMPTZ DEFAULT NOW());
CREATE TABLE IF NOT EXISTS "{s}"."mastra_messages" (
  "id" TEXT PRIMARY KEY NOT NULL, "thread_id" TEXT NOT NULL, "content" TEXT NOT NULL, "role" TEXT NOT NULL,
  "type" TEXT NOT NULL, "createdAt" TIMESTAMP NOT NULL, "resourceId" TEXT,
  "createdAtZ" TIMESTAMPTZ DEFAULT NOW());
CREATE TABLE IF NOT EXISTS "{s}"."mastra_resources" (
  "id" TEXT PRIMARY KEY NOT NULL, "workingMemory" TEXT, "metadata" JSONB,
  "createdAt" TIMESTAMP NOT NULL, "updatedAt" TIMESTAMP NOT NULL,
  "createdAtZ" TIMESTAMPTZ DEFAULT NOW(), "updatedAtZ" TIMESTAMPTZ DEFAULT NOW());
"""


def utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def local(ms: int) -> datetime:
    """What node-pg writes into a TIMESTAMP column from a process two hours east of UTC."""
    return datetime.fromtimestamp(ms / 1000 + 7200, tz=UTC).replace(tzinfo=None)


T0 = 1767225600000  # 2026-01-01T00:00:00Z


async def write_pg_mastra(conn: asyncpg.Connection, schema: str) -> None:
    await conn.execute(PG_DDL.format(s=schema))
    threads = [
        ("t1", "r1", "First", json.dumps({"a": 1, "workingMemory": "# t1 notes"}), T0, T0 + 500, True),
        ("t2", "r2", "", None, T0 + 1, T0 + 1, False),  # a row from before the Z columns were filled
    ]
    for tid, rid, title, meta, created, updated, with_z in threads:
        await conn.execute(
            f'INSERT INTO "{schema}".mastra_threads (id, "resourceId", title, metadata, "createdAt", '
            '"updatedAt", "createdAtZ", "updatedAtZ") VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7, $8)',
            tid,
            rid,
            title,
            meta,
            local(created) if with_z else utc(created).replace(tzinfo=None),
            local(updated) if with_z else utc(updated).replace(tzinfo=None),
            utc(created) if with_z else None,
            utc(updated) if with_z else None,
        )

    def text(t: str, **extra: Any) -> str:
        return json.dumps({"format": 2, "parts": [{"type": "text", "text": t}], **extra})

    messages = [
        # Inserted out of order: PostgreSQL has no rowid, so ties are broken by id.
        ("m3", "t1", text("third, same ms"), "assistant", T0 + 2000, "r1"),
        ("m1", "t1", text("first, same ms", metadata={"k": "v"}), "user", T0 + 2000, "r1"),
        ("m2", "t1", text("<system-reminder>hidden by default</system-reminder>"), "user", T0 + 2000, "r1"),
        ("m0", "t1", "a legacy string", "user", T0 + 1000, "r1"),
        ("m9", "t2", text("in t2"), "user", T0 + 3000, None),
    ]
    for mid, tid, content, role, created, rid in messages:
        await conn.execute(
            f'INSERT INTO "{schema}".mastra_messages (id, thread_id, content, role, type, "createdAt", '
            '"createdAtZ", "resourceId") VALUES ($1, $2, $3, $4, $5, $6, $7, $8)',
            mid,
            tid,
            content,
            role,
            "v1" if mid == "m0" else "v2",
            local(created),
            utc(created) if tid == "t1" else None,
            rid,
        )
    # Sub-millisecond precision is cut to the millisecond, as JavaScript's Date does.
    await conn.execute(
        f'UPDATE "{schema}".mastra_messages SET "createdAtZ" = "createdAtZ" + interval \'456 microseconds\' '
        "WHERE id = 'm9' OR id = 'm0'"
    )
    await conn.execute(
        f'UPDATE "{schema}".mastra_messages SET "createdAt" = "createdAt" - interval \'2 hours\' '
        "+ interval '789 microseconds' WHERE id = 'm9'"
    )
    resources = [
        ("r1", "# r1 memory", json.dumps({"plan": "pro"})),
        ("r3", None, json.dumps(json.dumps({"double": "encoded"}))),  # metadata written as a JSON string
    ]
    for rid, memory, meta in resources:
        await conn.execute(
            f'INSERT INTO "{schema}".mastra_resources (id, "workingMemory", metadata, "createdAt", '
            '"updatedAt", "createdAtZ", "updatedAtZ") VALUES ($1, $2, $3::jsonb, $4, $4, $5, $5)',
            rid,
            memory,
            meta,
            local(T0 + 10),
            utc(T0 + 10),
        )


async def test_import_mastra_postgres_store(
    repository: Repository, services: Services, database_url: str, tmp_path: Path
) -> None:
    async with database("postgres", tmp_path / "source") as source_url:
        dsn = source_url.replace("postgresql+asyncpg://", "postgresql://")
        conn = await asyncpg.connect(dsn)
        try:
            await write_pg_mastra(conn, "mastra")
        finally:
            await conn.close()

        with pytest.raises(MastraSourceError, match=r"no table public\.mastra_threads"):
            await open_mastra_source(dsn)

        data_dir = tmp_path / "data"
        # As a Mastra app's DATABASE_URL often is: libpq's connect_timeout, which asyncpg would send the
        # server as a setting ("unrecognized configuration parameter").
        pasted = f"{dsn}?connect_timeout=10&application_name=mastra-app"
        args = ("import", "mastra", "--from", pasted, "--schema", "mastra", "--no-embed")
        first = cli(*args, url=database_url, data_dir=data_dir)
        assert report(first.stdout) == {
            "resource": (2, 2, 0, 0),
            "thread": (2, 2, 0, 0),
            "message": (5, 5, 0, 0),
        }

        t1 = await services.threads.get("t1", principal=OPEN)
        assert t1 is not None
        assert (t1.resource_id, t1.title, t1.metadata) == (
            "r1",
            "First",
            {"a": 1, "workingMemory": "# t1 notes"},
        )
        assert (t1.created_at, t1.updated_at) == (T0, T0 + 500)  # the TIMESTAMPTZ twin wins
        t2 = await services.threads.get("t2", principal=OPEN)
        assert t2 is not None and (t2.metadata, t2.created_at) == (None, T0 + 1)  # naive, taken as UTC

        result = await services.recall.recall(
            RecallArgs(thread_id="t1", per_page=False, hide_signals=False), principal=OPEN
        )
        assert [m.id for m in result.messages] == ["m0", "m1", "m2", "m3"]
        assert [m.created_at for m in result.messages] == [T0 + 1000, T0 + 2000, T0 + 2000, T0 + 2000]
        m0, m1, m2, _ = result.messages
        assert (m0.type, m0.content) == (
            "v2",
            {
                "format": 2,
                "parts": [{"type": "text", "text": "a legacy string"}],
                "content": "a legacy string",
            },
        )
        assert m1.content["metadata"] == {"k": "v"} and m2.legacy_reminder
        assert await all_ids(services, "t1") == ["m0", "m1", "m3"]
        (m9,) = (
            await services.recall.recall(RecallArgs(thread_id="t2", per_page=False), principal=OPEN)
        ).messages
        assert (m9.created_at, m9.resource_id) == (T0 + 3000, None)

        r1, r2, r3 = [await repository.get_resource(r) for r in ("r1", "r2", "r3")]
        assert r1 is not None and (r1.working_memory, r1.metadata, r1.created_at) == (
            "# r1 memory",
            {"plan": "pro"},
            T0 + 10,
        )
        assert r2 is not None and r2.working_memory is None  # t2's owner, created with the thread
        assert r3 is not None and r3.metadata == {"double": "encoded"}
        before = await export_bytes(repository)

        # Again: nothing changes. Then the source changes: only what changed is written, createdAt is kept.
        again = cli(*args, url=database_url, data_dir=data_dir)
        assert report(again.stdout) == {
            "resource": (2, 0, 0, 2),
            "thread": (2, 0, 0, 2),
            "message": (5, 0, 0, 5),
        }
        assert await export_bytes(repository) == before
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(
                'UPDATE mastra.mastra_messages SET content = $1, "createdAtZ" = $2 WHERE id = $3',
                json.dumps({"format": 2, "parts": [{"type": "text", "text": "edited"}]}),
                utc(T0 + 9000),
                "m1",
            )
            await conn.execute("UPDATE mastra.mastra_threads SET title = 'Renamed' WHERE id = 't1'")
        finally:
            await conn.close()
        changed = cli(*args, url=database_url, data_dir=data_dir)
        assert report(changed.stdout) == {
            "resource": (2, 0, 0, 2),
            "thread": (2, 0, 1, 1),
            "message": (5, 0, 1, 4),
        }
        result = await services.recall.recall(
            RecallArgs(thread_id="t1", per_page=False, hide_signals=False), principal=OPEN
        )
        assert [m.id for m in result.messages] == ["m0", "m1", "m2", "m3"]
        assert result.messages[1].created_at == T0 + 2000
        assert result.messages[1].content["parts"] == [{"type": "text", "text": "edited"}]
        t1 = await services.threads.get("t1", principal=OPEN)
        assert t1 is not None and t1.title == "Renamed"


# ---------------------------------------------------------------------------------------------- JSON Lines
async def seed(services: Services, repository: Repository) -> None:
    """A bit of everything, through the services: ties, signals, a system row, metadata, tools."""
    alice, bob = "alice", "bob"
    await services.threads.create(
        thread_id="jt1",
        resource_id=alice,
        title="Ünïcode ✓",
        metadata={"a": [1, 2.5, None], "b": {"c": True}},
        principal=OPEN,
    )
    await services.threads.create(
        thread_id="jt2", resource_id=alice, created_at=parse_iso(at(-5)), principal=OPEN
    )
    await services.threads.create(thread_id="jt3", resource_id=bob, title="bob's", principal=OPEN)

    def msg(
        mid: str, thread: str, seconds: float, content: dict[str, Any], role: str = "user"
    ) -> MessageInput:
        return MessageInput(
            thread_id=thread, role=role, content=content, id=mid, created_at=parse_iso(at(seconds))
        )

    def text(t: str, **extra: Any) -> dict[str, Any]:
        return {"format": 2, "parts": [{"type": "text", "text": t}], **extra}

    await services.messages.save(
        [
            msg("j-3", "jt1", 1, text("tie, written first")),
            msg("j-1", "jt1", 1, text("tie, written second"), role="assistant"),
            msg("j-2", "jt1", 0.5, text('quotes " and \\ and \n and 東京', metadata={"n": 12345678901234})),
            msg("j-sig", "jt1", 2, text("s", metadata={"signal": {"type": "reactive"}}), role="signal"),
            msg("j-sys", "jt1", 3, text("system prompt"), role="system"),
            msg(
                "j-tool",
                "jt2",
                1,
                {
                    "format": 2,
                    "parts": [
                        {
                            "type": "tool-invocation",
                            "toolInvocation": {
                                "state": "result",
                                "toolCallId": "c",
                                "toolName": "x",
                                "args": {},
                                "result": [1],
                            },
                        }
                    ],
                },
                role="assistant",
            ),
            msg("j-bob", "jt3", 1, text("bob")),
        ],
        principal=OPEN,
    )
    await repository.import_resources(
        [
            ResourceRecord(
                id=alice,
                working_memory="# Alice\n- likes tea",
                metadata={"tier": 2},
                created_at=5,
                updated_at=6,
            )
        ]
    )


async def test_jsonl_round_trip(
    repository: Repository, services: Services, database_url: str, tmp_path: Path
) -> None:
    await seed(services, repository)
    first = await export_bytes(repository)
    lines = [json.loads(line) for line in first.splitlines()]
    kinds = [line["kind"] for line in lines]
    assert kinds == sorted(kinds, key=["resource", "thread", "message"].index)
    messages = [line for line in lines if line["kind"] == "message"]
    assert [m["id"] for m in messages] == ["j-3", "j-1", "j-2", "j-sig", "j-sys", "j-tool", "j-bob"]
    assert messages[0]["createdAt"] == at(1) and messages[0]["type"] == "v2"
    assert set(messages[0]) == {
        "kind",
        "id",
        "threadId",
        "resourceId",
        "role",
        "type",
        "createdAt",
        "content",
    }

    async with fresh_repository(database_url, tmp_path / "fresh") as fresh:
        result = await import_jsonl(fresh, iter(first.splitlines(keepends=True)), batch=2)
        assert result.stats["message"].inserted == 7 and result.converted == 0
        assert await export_bytes(fresh) == first
        again = await import_jsonl(fresh, iter(first.splitlines(keepends=True)))
        assert [again.stats[k].unchanged for k in ("resource", "thread", "message")] == [2, 3, 7]
        assert await export_bytes(fresh) == first
        # Ties keep their order and signals are classified again on the way in.
        fresh_services = Services.build(fresh, memory_defaults=dict(BUILTIN_DEFAULTS))
        assert await all_ids(fresh_services, "jt1", hide_signals=False) == ["j-2", "j-3", "j-1", "j-sig"]
        assert await all_ids(fresh_services, "jt1", hide_signals=True) == ["j-2", "j-3", "j-1"]


async def test_export_and_import_jsonl_cli(
    repository: Repository, services: Services, database_url: str, tmp_path: Path
) -> None:
    await seed(services, repository)
    data_dir = tmp_path / "data"
    out = tmp_path / "all.jsonl"
    cli("export", "--out", str(out), url=database_url, data_dir=data_dir)
    assert out.read_bytes() == await export_bytes(repository)
    assert not (tmp_path / "all.jsonl.partial").exists()
    stdout = cli("export", url=database_url, data_dir=data_dir).stdout
    assert stdout == out.read_bytes()

    owner = "alice"
    one = cli("export", "--resource", owner, "--out", "-", url=database_url, data_dir=data_dir).stdout
    lines = [json.loads(line) for line in one.splitlines()]
    assert {(line["kind"], line["id"]) for line in lines if line["kind"] != "message"} == {
        ("resource", owner),
        ("thread", "jt1"),
        ("thread", "jt2"),
    }
    assert [line["id"] for line in lines if line["kind"] == "message"] == [
        "j-3",
        "j-1",
        "j-2",
        "j-sig",
        "j-sys",
        "j-tool",
    ]

    async with fresh_repository(database_url, tmp_path / "fresh") as fresh:
        fresh_url = str(fresh.engine.url.render_as_string(hide_password=False))
        loaded = cli("import", "jsonl", "--from", str(out), "--no-embed", url=fresh_url, data_dir=data_dir)
        assert report(loaded.stdout) == {
            "resource": (2, 2, 0, 0),
            "thread": (3, 3, 0, 0),
            "message": (7, 7, 0, 0),
        }
        assert await export_bytes(fresh) == out.read_bytes()
        piped = cli(
            "import", "jsonl", "--from", "-", url=fresh_url, data_dir=data_dir, stdin=out.read_bytes()
        )
        assert report(piped.stdout) == {
            "resource": (2, 0, 0, 2),
            "thread": (3, 0, 0, 3),
            "message": (7, 0, 0, 7),
        }


async def test_duplicate_ids_in_one_file_do_not_depend_on_the_batch_size(
    database_url: str, tmp_path: Path
) -> None:
    """A record repeated in a file is read as if imported again: the later one wins except for what an
    import keeps of a stored row (a message's createdAt and position), and it is counted as an update,
    whatever --batch-size put the two in one transaction or in two."""

    def message(id: str, created: str, text: str) -> bytes:
        parts = [{"type": "text", "text": text}]
        return orjson.dumps(
            {
                "kind": "message",
                "id": id,
                "threadId": "dup-t",
                "resourceId": "r",
                "role": "user",
                "createdAt": created,
                "content": {"format": 2, "parts": parts},
            }
        )

    lines = [
        b'{"kind":"thread","id":"dup-t","resourceId":"r","title":"first","createdAt":"2026-01-01T00:00:00.000Z"}',
        b'{"kind":"thread","id":"dup-t","resourceId":"r","title":"second","createdAt":"2026-01-01T00:00:00.000Z"}',
        message("m-a", "2026-01-01T00:00:05.000Z", "a, first"),
        message("m-b", "2026-01-01T00:00:06.000Z", "b"),
        message("m-a", "2026-01-01T00:00:09.000Z", "a, second"),
        message("m-c", "2026-01-01T00:00:07.000Z", "c"),
    ]
    outcomes = []
    for batch in (1000, 2, 1):
        async with fresh_repository(database_url, tmp_path / f"batch-{batch}") as fresh:
            result = await import_jsonl(fresh, lines, batch=batch)
            counts = {kind: (s.read, s.inserted, s.updated) for kind, s in result.stats.items()}
            outcomes.append((counts, await export_bytes(fresh)))
    assert outcomes[0] == outcomes[1] == outcomes[2]
    counts, exported = outcomes[0]
    assert counts["thread"] == (2, 1, 1) and counts["message"] == (4, 3, 1)
    messages = [orjson.loads(line) for line in exported.splitlines() if b'"kind":"message"' in line]
    assert [(m["id"], m["createdAt"], m["content"]["parts"][0]["text"]) for m in messages] == [
        ("m-a", "2026-01-01T00:00:05.000Z", "a, second"),
        ("m-b", "2026-01-01T00:00:06.000Z", "b"),
        ("m-c", "2026-01-01T00:00:07.000Z", "c"),
    ]


async def test_jsonl_reports_messages_without_a_thread(repository: Repository) -> None:
    def message(id: str, thread_id: str) -> bytes:
        return orjson.dumps(
            {
                "kind": "message",
                "id": id,
                "threadId": thread_id,
                "role": "user",
                "createdAt": "2026-01-01T00:00:00.000Z",
                "content": {"format": 2, "parts": []},
            }
        )

    thread = '{"kind":"thread","id":"%s","resourceId":"r","createdAt":"2026-01-01T00:00:00.000Z"}'
    await import_jsonl(repository, [(thread % "stored-before").encode()])
    result = await import_jsonl(
        repository,
        [
            message("early", "in-file"),  # its thread comes later in the file
            (thread % "in-file").encode(),
            message("o1", "nowhere"),
            message("o2", "nowhere"),
            message("o3", "elsewhere"),
            message("kept", "stored-before"),
        ],
    )
    assert result.orphans == 3 and result.stats["message"].inserted == 5
    assert "3 message(s) belong to threads that neither the source nor this database has" in "\n".join(
        result.lines()
    )


async def test_export_reports_what_it_cannot_write(
    repository: Repository, database_url: str, tmp_path: Path
) -> None:
    """Output errors are the output's, not the database's (an OSError under the repository read as an
    outage): a clear line and exit 1, no traceback; a closed pipe is quiet; a device or a FIFO is written,
    never replaced by a renamed file."""
    text = "x" * 400
    lines = [
        b'{"kind":"thread","id":"big","resourceId":"r","createdAt":"2026-01-01T00:00:00.000Z"}',
        *(
            orjson.dumps(
                {
                    "kind": "message",
                    "id": f"big-{n}",
                    "threadId": "big",
                    "resourceId": "r",
                    "role": "user",
                    "createdAt": "2026-01-01T00:00:00.000Z",
                    "content": {"format": 2, "parts": [{"type": "text", "text": text}]},
                }
            )
            for n in range(600)
        ),
    ]
    await import_jsonl(repository, lines)  # about 300 kB of export: more than a pipe buffers
    data_dir = tmp_path / "data"

    def refused(proc: subprocess.CompletedProcess[bytes], message: str) -> None:
        stderr = proc.stderr.decode()
        assert proc.returncode == 1 and message in stderr and "Traceback" not in stderr, stderr

    with open("/dev/full", "wb") as full:
        proc = subprocess.run(
            cli_command("export", url=database_url, data_dir=data_dir),
            env=cli_env(),
            stdout=full,
            stderr=subprocess.PIPE,
            timeout=600,
        )
    refused(proc, "export: cannot write stdout: No space left on device")
    missing = tmp_path / "no" / "such" / "dir.jsonl"
    refused(
        cli("export", "--out", str(missing), url=database_url, data_dir=data_dir, succeeds=False),
        "export: cannot write",
    )
    # The reader goes away after a few bytes (`recallql export | head -c 100`).
    reader = subprocess.Popen(
        cli_command("export", url=database_url, data_dir=data_dir),
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert reader.stdout is not None and reader.stderr is not None
    assert len(reader.stdout.read(100)) == 100
    reader.stdout.close()
    with reader.stderr:
        stderr = reader.stderr.read().decode()
    assert reader.wait(600) == 1 and "Traceback" not in stderr and "Broken pipe" not in stderr, stderr
    # A FIFO stays a FIFO and gets the whole export.
    fifo = tmp_path / "export.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    drain = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    drain.start()
    cli("export", "--out", str(fifo), url=database_url, data_dir=data_dir)
    drain.join(60)
    assert stat.S_ISFIFO(fifo.stat().st_mode) and received == [await export_bytes(repository)]
    # An owner-only file it replaces stays owner-only (the file written aside took the umask's 0644).
    private = tmp_path / "private.jsonl"
    private.write_bytes(b"")
    private.chmod(0o600)
    cli("export", "--out", str(private), url=database_url, data_dir=data_dir)
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert private.read_bytes() == await export_bytes(repository)
    # A database that cannot be reached is said so, without a traceback.
    unreachable = f"postgresql+asyncpg://127.0.0.1:{free_port()}/none"
    refused(
        cli("export", url=unreachable, data_dir=data_dir, succeeds=False), "the database cannot be reached"
    )


async def test_jsonl_moves_between_engines(tmp_path: Path) -> None:
    """SQLite to PostgreSQL and back: equal as JSON (PostgreSQL's jsonb orders object keys its own way)."""
    async with fresh_repository("sqlite", tmp_path / "a") as lite:
        await seed(Services.build(lite, memory_defaults=dict(BUILTIN_DEFAULTS)), lite)
        original = await export_bytes(lite)
        async with fresh_repository("postgresql", tmp_path / "b") as pg:
            await import_jsonl(pg, original.splitlines(keepends=True))
            via_pg = await export_bytes(pg)
        async with fresh_repository("sqlite", tmp_path / "c") as back:
            await import_jsonl(back, via_pg.splitlines(keepends=True))
            again = await export_bytes(back)
    as_json = [[json.loads(line) for line in data.splitlines()] for data in (original, via_pg, again)]
    assert as_json[0] == as_json[1] == as_json[2]


async def test_jsonl_errors_name_the_line(repository: Repository) -> None:
    good = (
        b'{"kind":"thread","id":"e1","resourceId":"r","title":"","metadata":null,'
        b'"createdAt":"2026-01-01T00:00:00.000Z"}\n'
    )
    created = b'"createdAt":"2026-01-01T00:00:00Z"'
    cases = {
        b"not json\n": "line 2: not valid JSON",
        b'{"kind":"widget"}\n': "line 2: unknown kind 'widget'",
        b'{"kind":"message","id":"m","threadId":"e1","role":"user","content":{"format":2,"parts":[]}}\n': (
            "line 2: createdAt must be an ISO-8601 date-time string"
        ),
        b'{"kind":"message","id":"m","threadId":"e1","role":"user","createdAt":"2026-01-01T00:00:00",'
        b'"content":{"format":2,"parts":[]}}\n': "line 2: createdAt: DateTime must include a timezone",
        b'{"kind":"thread","id":"","resourceId":"r",' + created + b"}\n": "line 2: id must be",
        b'{"kind":"resource","id":"r","metadata":[1],' + created + b"}\n": "line 2: metadata",
    }
    # What the API refuses, an import refuses too, on both engines: U+0000 (PostgreSQL cannot store it;
    # SQLite did), lone surrogates, and numbers JSON cannot carry (Python's json read NaN, Infinity and
    # 1e400, which were then stored as null).
    thread = b'{"kind":"thread","id":"e2","resourceId":"r",' + created
    cases |= {
        thread + b',"title":"a\\u0000b"}\n': "line 2: Strings may not contain U+0000",
        thread + b',"metadata":{"k\\u0000":1}}\n': "line 2: Strings may not contain U+0000",
        thread + b',"title":"a\\ud800"}\n': "line 2: not valid JSON",
        thread + b',"title":"a\xed\xa0\x80"}\n': "line 2: not valid JSON",  # a surrogate, raw
        thread + b',"metadata":{"n":NaN}}\n': "line 2: not valid JSON",
        thread + b',"metadata":{"n":-Infinity}}\n': "line 2: not valid JSON",
        thread + b',"metadata":{"n":1e400}}\n': "line 2: not valid JSON",
    }
    for line, message in cases.items():
        with pytest.raises(TransferError, match=re.escape(message)):
            await import_jsonl(repository, [good, line])
    assert await repository.get_thread("e2") is None
    # Blank lines are fine; a missing updatedAt is the createdAt.
    result = await import_jsonl(repository, [b"\n", good, b"  \n"])
    assert result.stats["thread"].read == 1
    thread = await repository.get_thread("e1")
    assert thread is not None and thread.updated_at == thread.created_at == T0


@pytest.mark.parametrize(("batch", "written"), [(1, 4), (2, 4), (3, 3), (4, 4)])
async def test_jsonl_writes_every_full_batch_before_a_bad_line(
    repository: Repository, batch: int, written: int
) -> None:
    # A full batch was written only when the next good line came, so a bad line right after it lost it.
    prefix = f"full{batch}"
    thread = {"kind": "thread", "id": f"{prefix}-t", "resourceId": "r", "createdAt": "2026-01-01T00:00:00Z"}
    ids = [f"{prefix}-m{n}" for n in (1, 2, 3, 4, 9)]

    def message(message_id: str) -> bytes:
        line = {
            "kind": "message",
            "id": message_id,
            "threadId": f"{prefix}-t",
            "resourceId": "r",
            "role": "user",
            "createdAt": "2026-01-01T00:00:01Z",
            "content": {"format": 2, "parts": []},
        }
        return orjson.dumps(line) + b"\n"

    lines = [orjson.dumps(thread) + b"\n", *map(message, ids[:4]), b"garbage\n", message(ids[4])]
    with pytest.raises(TransferError, match=re.escape("line 6: not valid JSON")):
        await import_jsonl(repository, lines, batch=batch)
    assert await repository.get_thread(f"{prefix}-t") is not None
    assert sorted(await repository.get_messages(ids)) == ids[:written]


def nested(levels: int) -> Any:
    """Arrays nested `levels` deep: [] is one level."""
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


def content_of_depth(levels: int) -> dict[str, Any]:
    return {"format": 2, "parts": [], "deep": nested(levels - 1)}


async def test_jsonl_refuses_json_nested_deeper_than_the_api_takes(
    repository: Repository, services: Services
) -> None:
    """The API refuses JSON nested over 64 levels; an import took up to 1,024, and recall then answered
    HTTP 500 for such a message (orjson writes at most 254 levels). An import refuses what the API does,
    content counted as stored (a legacy content converted to format 2 nests two levels deeper)."""
    thread = {"kind": "thread", "id": "deep-t", "resourceId": "r", "createdAt": "2026-01-01T00:00:00.000Z"}
    good = orjson.dumps(thread)

    def message(id: str, content: Any) -> bytes:
        line = {"kind": "message", "id": id, "threadId": "deep-t", "resourceId": "r", "role": "user"}
        return orjson.dumps({**line, "createdAt": "2026-01-01T00:00:01.000Z", "content": content})

    tool_call = [{"type": "tool-call", "toolCallId": "c", "toolName": "x", "args": nested(62)}]
    cases = {
        message("m65", content_of_depth(65)): "line 2: content nests deeper than 64 levels",
        message("legacy", tool_call): "line 2: content nests deeper than 64 levels",
        orjson.dumps({**thread, "id": "t65", "metadata": {"k": nested(64)}}): (
            "line 2: metadata nests deeper than 64 levels"
        ),
        orjson.dumps(
            {"kind": "resource", "id": "r65", "metadata": {"k": nested(64)}, "createdAt": thread["createdAt"]}
        ): "line 2: metadata nests deeper than 64 levels",
    }
    for line, error in cases.items():
        with pytest.raises(TransferError, match=re.escape(error)):
            await import_jsonl(repository, [good, line])
    assert await repository.get_messages(["m65", "legacy"]) == {}
    assert await repository.get_thread("t65") is None and await repository.get_resource("r65") is None

    deepest = content_of_depth(64)
    result = await import_jsonl(repository, [good, message("m64", deepest)])
    assert result.stats["message"].inserted == 1
    async with app_client(services) as client:
        response = await client.post(
            "/graphql",
            json={
                "query": '{ recall(threadId: "deep-t", resourceId: "r") { messages { id content { raw } } } }'
            },
        )
    assert response.status_code == 200, response.text
    assert response.json()["data"]["recall"]["messages"] == [{"id": "m64", "content": {"raw": deepest}}]


# ------------------------------------------------------------------------------- Mastra (rows it must refuse)
LIBSQL_DDL = """
CREATE TABLE mastra_threads (id TEXT PRIMARY KEY, resourceId TEXT NOT NULL, title TEXT NOT NULL,
  metadata TEXT, createdAt TEXT NOT NULL, updatedAt TEXT NOT NULL);
CREATE TABLE mastra_messages (id TEXT PRIMARY KEY, thread_id TEXT NOT NULL, content TEXT NOT NULL,
  role TEXT NOT NULL, type TEXT NOT NULL, createdAt TEXT NOT NULL, resourceId TEXT);
CREATE TABLE mastra_resources (id TEXT PRIMARY KEY, workingMemory TEXT, metadata TEXT,
  createdAt TEXT NOT NULL, updatedAt TEXT NOT NULL);
"""
ISO_T0 = "2026-01-01T00:00:00.000Z"


def write_libsql_mastra(
    path: Path,
    *,
    threads: Sequence[tuple[Any, ...]] = (),
    messages: Sequence[tuple[Any, ...]] = (),
    resources: Sequence[tuple[Any, ...]] = (),
) -> None:
    """A Mastra LibSQL store with these rows, as @mastra/libsql lays it out (every column TEXT, which
    SQLite lets hold a BLOB). Threads: (id, resourceId, title, metadata, createdAt, updatedAt);
    messages: (id, thread_id, content, role, createdAt, resourceId); resources: (id, workingMemory,
    metadata, createdAt, updatedAt)."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.executescript(LIBSQL_DDL)
        conn.executemany("INSERT INTO mastra_threads VALUES (?, ?, ?, ?, ?, ?)", threads)
        conn.executemany(
            "INSERT INTO mastra_messages (id, thread_id, content, role, type, createdAt, resourceId) "
            "VALUES (?, ?, ?, ?, 'v2', ?, ?)",
            messages,
        )
        conn.executemany("INSERT INTO mastra_resources VALUES (?, ?, ?, ?, ?)", resources)


async def import_mastra_file(repository: Repository, url: str) -> Any:
    source = await open_mastra_source(url)
    try:
        return await import_mastra(repository, source)
    finally:
        await source.aclose()


async def test_import_mastra_refuses_json_nested_deeper_than_the_api_takes(
    repository: Repository, services: Services, tmp_path: Path
) -> None:
    """Mastra's JSON up to 1,024 levels was imported, and recall then answered HTTP 500 for it: rows
    nesting deeper than the API takes (64 levels, content counted as stored) are skipped."""
    db = tmp_path / "mastra.db"
    tool_call = [{"type": "tool-call", "toolCallId": "c", "toolName": "x", "args": nested(62)}]
    write_libsql_mastra(
        db,
        threads=[
            ("t", "r", "", json.dumps({"k": nested(63)}), ISO_T0, ISO_T0),
            ("deep-t", "r", "", json.dumps({"k": nested(64)}), ISO_T0, ISO_T0),
        ],
        resources=[("deep-r", None, json.dumps({"k": nested(64)}), ISO_T0, ISO_T0)],
        messages=[
            ("m64", "t", json.dumps(content_of_depth(64)), "user", ISO_T0, "r"),
            ("m65", "t", json.dumps(content_of_depth(65)), "user", ISO_T0, "r"),
            ("legacy", "t", json.dumps(tool_call), "assistant", ISO_T0, "r"),  # 66 levels once converted
        ],
    )
    result = await import_mastra_file(repository, str(db))
    assert [result.stats[k].skipped for k in ("resource", "thread", "message")] == [1, 1, 2]
    assert result.warnings == [
        "resource 'deep-r': metadata nests deeper than 64 levels; skipped",
        "thread 'deep-t': metadata nests deeper than 64 levels; skipped",
        "message 'm65': content nests deeper than 64 levels; skipped",
        "message 'legacy': content nests deeper than 64 levels; skipped",
    ]
    assert result.converted == 0
    assert await repository.get_messages(["m65", "legacy"]) == {}
    assert await repository.get_thread("deep-t") is None and await repository.get_resource("deep-r") is None
    async with app_client(services) as client:
        response = await client.post(
            "/graphql",
            json={"query": '{ recall(threadId: "t", resourceId: "r") { messages { id content { raw } } } }'},
        )
    assert response.status_code == 200, response.text
    assert response.json()["data"]["recall"]["messages"] == [
        {"id": "m64", "content": {"raw": content_of_depth(64)}}
    ]


# Times beyond Python's datetime (years 1 to 9999) and the infinities, and t0 (2026), as each store
# writes them: (LibSQL, JavaScript's toISOString, where 100 BC is year -99; PostgreSQL).
TIMES = {
    "t0": (ISO_T0, "2026-01-01 00:00:00"),
    "far": ("+012026-01-01T00:00:00.000Z", "12026-01-01 00:00:00"),
    "bc": ("-000099-01-01T00:00:00.000Z", "0100-01-01 00:00:00 BC"),
    "inf": ("infinity", "infinity"),
    "-inf": ("-infinity", "-infinity"),
}
BEYOND = ("far", "bc", "inf", "-inf")
FORMAT2_EMPTY = '{"format":2,"parts":[]}'


@contextlib.asynccontextmanager
async def beyond_source(kind: str, tmp_path: Path) -> AsyncIterator[str]:
    """The same Mastra rows in a store of either kind, with the BEYOND times; yields its URL."""
    threads = [("t", "t0"), ("t-far", "far"), ("t-inf", "inf")]  # (id, createdAt and updatedAt)
    messages = [("ok", "t0"), *((k, k) for k in BEYOND)]  # (id, createdAt), all in thread t
    resources = [("r-bc", "bc")]
    if kind == "sqlite":
        db = tmp_path / "mastra.db"
        write_libsql_mastra(
            db,
            threads=[(i, "r", "", None, TIMES[c][0], TIMES[c][0]) for i, c in threads],
            messages=[(i, "t", FORMAT2_EMPTY, "user", TIMES[c][0], "r") for i, c in messages],
            resources=[(i, None, None, TIMES[c][0], TIMES[c][0]) for i, c in resources],
        )
        yield str(db)
        return
    async with database("postgres", tmp_path / "source") as url:
        dsn = url.replace("postgresql+asyncpg://", "postgresql://")
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(PG_DDL.format(s="public"))
            # Mastra writes both columns; the TIMESTAMPTZ twin, which it reads first, as UTC here.
            at = "$2::text::timestamp"
            times = f"{at}, {at}, {at} AT TIME ZONE 'UTC', {at} AT TIME ZONE 'UTC'"
            columns = '"createdAt", "updatedAt", "createdAtZ", "updatedAtZ"'
            await conn.executemany(
                f'INSERT INTO mastra_threads (id, {columns}, "resourceId", title) '
                f"VALUES ($1, {times}, 'r', '')",
                [(i, TIMES[c][1]) for i, c in threads],
            )
            await conn.executemany(
                f"INSERT INTO mastra_resources (id, {columns}) VALUES ($1, {times})",
                [(i, TIMES[c][1]) for i, c in resources],
            )
            await conn.executemany(
                'INSERT INTO mastra_messages (id, "createdAt", "createdAtZ", content, thread_id, role, type, '
                f"\"resourceId\") VALUES ($1, {at}, {at} AT TIME ZONE 'UTC', $3, 't', 'user', 'v2', 'r')",
                [(i, TIMES[c][1], FORMAT2_EMPTY) for i, c in messages],
            )
        finally:
            await conn.close()
        yield dsn


@pytest.mark.parametrize("source_kind", ["sqlite", "postgres"])
async def test_import_mastra_skips_times_beyond_the_years_1_to_9999(
    repository: Repository, database_url: str, source_kind: str, tmp_path: Path
) -> None:
    """asyncpg cannot return a PostgreSQL time beyond Python's datetime (the import died with a
    traceback) and returns infinity as 9999-12-31 (imported as such): such rows are skipped, as from a
    LibSQL file, and the import goes on."""
    async with beyond_source(source_kind, tmp_path) as source_url:
        proc = cli(
            "import",
            "mastra",
            "--from",
            source_url,
            "--no-embed",
            url=database_url,
            data_dir=tmp_path / "data",
        )
    out = proc.stdout.decode()
    assert report(proc.stdout) == {
        "resource": (1, 0, 0, 0),
        "thread": (3, 1, 0, 0),
        "message": (5, 1, 0, 0),
    }, out
    unreadable = "no id, thread_id, role or readable createdAt; skipped"
    for line in (
        "resource 'r-bc': no id or no readable createdAt; skipped",
        "thread 't-far': no id, resourceId or readable createdAt; skipped",
        "thread 't-inf': no id, resourceId or readable createdAt; skipped",
        *(f"message {k!r}: {unreadable}" for k in BEYOND),
    ):
        assert f"  {line}\n" in out, out
    assert sum(line.endswith("; skipped") for line in out.splitlines()) == 7
    assert list(await repository.get_messages(["ok", *BEYOND])) == ["ok"]
    exported = cli("export", url=database_url, data_dir=tmp_path / "data").stdout
    assert exported.count(b'"kind":"message"') == 1


async def test_import_mastra_reads_blobs_in_text_columns(
    repository: Repository, database_url: str, tmp_path: Path
) -> None:
    """SQLite lets a TEXT column hold a BLOB: it was imported as bytes (SQLite stored them and the
    next export died; PostgreSQL refused the batch). A BLOB of UTF-8 is read as its text; any other
    BLOB makes its row unreadable, and the import goes on."""
    db = tmp_path / "mastra.db"
    content = json.dumps({"format": 2, "parts": [{"type": "text", "text": "blob é"}]})
    write_libsql_mastra(
        db,
        resources=[
            ("r", "# notes é".encode(), None, ISO_T0, ISO_T0),
            ("r-bad", b"\xff\xfe", None, ISO_T0, ISO_T0),
        ],
        threads=[
            (b"t", "r", "Café".encode(), None, ISO_T0, ISO_T0),
            ("t-bad", "r", b"caf\xe9", None, ISO_T0, ISO_T0),
        ],
        messages=[
            (b"m", b"t", content.encode(), b"user", ISO_T0, b"r"),
            ("m-bad", "t", b"\x80{}", "user", ISO_T0, "r"),
            ("m-bad-role", "t", content, b"\xc3", ISO_T0, "r"),
        ],
    )
    data_dir = tmp_path / "data"
    proc = cli("import", "mastra", "--from", str(db), "--no-embed", url=database_url, data_dir=data_dir)
    out = proc.stdout.decode()
    assert report(proc.stdout) == {
        "resource": (2, 1, 0, 0),
        "thread": (2, 1, 0, 0),
        "message": (3, 1, 0, 0),
    }, out
    for line in (
        "resource 'r-bad': workingMemory is a BLOB that is not UTF-8 text; skipped",
        "thread 't-bad': title is a BLOB that is not UTF-8 text; skipped",
        "message 'm-bad': content is a BLOB that is not UTF-8 text; skipped",
        "message 'm-bad-role': role is a BLOB that is not UTF-8 text; skipped",
    ):
        assert f"  {line}\n" in out, out
    exported = [
        json.loads(line) for line in cli("export", url=database_url, data_dir=data_dir).stdout.splitlines()
    ]
    by_id = {line["id"]: line for line in exported}
    assert set(by_id) == {"r", "t", "m"}
    assert by_id["r"]["workingMemory"] == "# notes é" and by_id["t"]["title"] == "Café"
    assert (by_id["m"]["threadId"], by_id["m"]["resourceId"], by_id["m"]["role"]) == ("t", "r", "user")
    assert by_id["m"]["content"] == json.loads(content)


# ---------------------------------------------------------------------------------------------- units
def jsonb(kind: int, payload: bytes) -> bytes:
    size = len(payload)
    if size <= 11:
        return bytes([size << 4 | kind]) + payload
    for code, width in ((12, 1), (13, 2), (14, 4), (15, 8)):
        if size < 1 << (8 * width):
            return bytes([code << 4 | kind]) + size.to_bytes(width, "big") + payload
    raise AssertionError


def test_decode_jsonb() -> None:
    long_text = "x" * 300
    blob = jsonb(
        12,
        jsonb(7, b"a")
        + jsonb(11, jsonb(3, b"1") + jsonb(5, b"2.5") + jsonb(0, b"") + jsonb(1, b"") + jsonb(2, b""))
        + jsonb(7, b"esc")
        + jsonb(8, b'q\\"\\n\\u00e9')
        + jsonb(7, b"five")
        + jsonb(11, jsonb(4, b"0x1F") + jsonb(4, b"-0x10") + jsonb(6, b".5") + jsonb(9, b"it\\'s\\x41"))
        + jsonb(7, b"raw")
        + jsonb(10, 'tab\t"é'.encode())
        + jsonb(7, b"long")
        + jsonb(7, long_text.encode()),
    )
    assert decode_jsonb(blob) == {
        "a": [1, 2.5, None, True, False],
        "esc": 'q"\né',
        "five": [31, -16, 0.5, "it'sA"],
        "raw": 'tab\t"é',
        "long": long_text,
    }
    for bad in (b"", b"\x13", blob + b"\x00", b"\x0d", jsonb(12, jsonb(3, b"1") + jsonb(3, b"2"))):
        with pytest.raises(ValueError):
            decode_jsonb(bad)


def test_parse_time() -> None:
    assert parse_time("2026-01-01T00:00:01.001Z") == T0 + 1001
    assert parse_time("2026-01-01T02:00:01.001+02:00") == T0 + 1001
    assert parse_time("2026-01-01 00:00:01.0019") == T0 + 1001  # naive: UTC; cut to the millisecond
    assert parse_time('"2026-01-01T00:00:30.000Z"') == T0 + 30000  # updateMessages' JSON-quoted createdAt
    assert parse_time(datetime(2026, 1, 1, 2, tzinfo=UTC)) == T0 + 7_200_000
    assert parse_time(T0) == T0
    assert parse_time(str(T0)) == T0
    assert [parse_time(v) for v in (None, "", "yesterday", True)] == [None, None, None, None]
    # Beyond the years 1 to 9999 a time has no ISO-8601 form to export: not readable, as "yesterday".
    assert parse_time(MAX_MS) == MAX_MS and parse_time(MIN_MS) == MIN_MS
    for beyond in (MAX_MS + 1, MIN_MS - 1, str(MAX_MS + 1), "9" * 22, "9" * 5000, float("inf"), float("nan")):
        assert parse_time(beyond) is None, beyond
    assert parse_time("9999-12-31T23:00:00-02:00") is None  # year 10000 in UTC


def test_content_conversion_rules() -> None:
    stored = {"format": 2, "parts": [None, {"type": "text", "text": "kept as stored"}]}
    assert to_format2("user", stored) == ("user", stored, False)
    assert to_format2("tool", []) == ("assistant", {"format": 2, "parts": []}, True)
    assert to_format2("user", {"content": "an object without format 2"}) == (
        "user",
        {"format": 2, "parts": []},
        True,
    )
    assert decode_json_column("{not json") == "{not json"
    assert decode_json_column('"{\\"a\\": 1}"') == {"a": 1}  # double-encoded
    assert decode_json_column(b"{}") == {}  # JSON text in a blob
    assert decode_content("[1, 2]") == [1, 2]
    assert decode_content("not json") == "not json"
    assert decode_content('"a json string"') == "a json string"
    assert decode_content(b"[1]") == [1] and decode_content(b"caf\xc3\xa9") == "café"  # a BLOB of UTF-8
    assert decode_content(b"caf\xe9") == b"caf\xe9"  # any other BLOB: its row is skipped


async def test_source_errors(tmp_path: Path) -> None:
    with pytest.raises(MastraSourceError, match="no such Mastra database file"):
        await open_mastra_source(f"file:{tmp_path / 'missing.db'}")
    with pytest.raises(MastraSourceError, match="remote LibSQL"):
        await open_mastra_source("libsql://example.turso.io")
    with pytest.raises(MastraSourceError, match="--schema applies to PostgreSQL"):
        await open_mastra_source(str(tmp_path / "x.db"), schema="s")
    # URLs asyncpg cannot use were a traceback (nothing is listening on port 1: never reached).
    for url, said in (
        ("postgresql://u@127.0.0.1:1/x?sslmode=bogus", "`sslmode` parameter must be one of"),
        ("postgresql://u@127.0.0.1:99999/x", "connect(): port must be 0-65535"),
        ("postgresql://u@127.0.0.1:abc/x", "invalid literal for int()"),
    ):
        with pytest.raises(
            MastraSourceError, match=re.escape(f"cannot connect to the Mastra PostgreSQL database: {said}")
        ):
            await open_mastra_source(url)
    # libpq's parameters asyncpg would send the server as settings ("unrecognized configuration parameter").
    with pytest.raises(MastraSourceError, match=r"^the URL parameter\(s\) channel_binding cannot be used"):
        await open_mastra_source("postgresql://u@127.0.0.1:1/x?sslmode=disable&channel_binding=require")
    with pytest.raises(MastraSourceError, match="connect_timeout 'soon' is not a number of seconds"):
        await open_mastra_source("postgresql://u@127.0.0.1:1/x?connect_timeout=soon")
    import sqlite3

    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(MastraSourceError, match="not a Mastra memory store: no table mastra_threads"):
        await open_mastra_source(f"file://{other}")
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database file" * 100)
    with pytest.raises(MastraSourceError, match=r"cannot read .* as a SQLite database"):
        await open_mastra_source(str(garbage))


def test_json_nested_past_the_parsers_limit_is_unreadable_not_a_crash() -> None:
    # Valid JSON past orjson's 1,024 levels fell back to json.loads, whose RecursionError killed
    # `import mastra` with a traceback: a row's content this deep is now unreadable like any non-JSON.
    from models.mastra_source import decode_json_column, parse_json_text

    deep = "[" * 1500 + "]" * 1500
    with pytest.raises(ValueError, match="nested too deeply"):
        parse_json_text(deep)
    assert decode_json_column(deep) == deep
