"""Observability (web/observability.py): Prometheus metrics at /metrics, X-Request-ID, JSON logs and
OpenTelemetry spans, on a real `recallql serve` process where it matters."""

from __future__ import annotations

import asyncio
import gzip
import http.server
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from models.embedders import Embedding
from models.vector_index import VectorHit
from resolvers.context import Services
from resolvers.semantic import SemanticMemory
from tests.support import (
    PG_ADMIN_DSN,
    REPO,
    ServerProcess,
    at,
    metric_samples,
    metric_value,
    postgres_available,
    require,
    running_server,
    text_message,
    uid,
)
from web.observability import (
    JsonFormatter,
    RequestIdFilter,
    TextFormatter,
    instrument_semantic,
    statement_kind,
)

CREATE = "mutation ObsCreate($i: CreateThreadInput!) { createThread(input: $i) { id } }"
SAVE = "mutation ObsSave($m: [MessageInput!]!) { saveMessages(messages: $m) { messages { id } } }"
RECALL = "query ObsRecall($t: ID!, $r: String) { recall(threadId: $t, resourceId: $r) { total } }"


async def gql(
    client: httpx.AsyncClient, url: str, query: str, headers: dict[str, str] | None = None, **variables: Any
) -> httpx.Response:
    return await client.post(
        f"{url}/graphql", json={"query": query, "variables": variables}, headers=headers or {}
    )


# ---------------------------------------------------------------------------------------------- metrics
async def test_metrics_grow_with_graphql_traffic(server: ServerProcess) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        before = (await client.get(f"{server.url}/metrics")).text
        thread_id, resource_id = uid("t"), uid("r")
        assert (
            await gql(client, server.url, CREATE, i={"id": thread_id, "resourceId": resource_id})
        ).is_success
        messages = [text_message(thread_id=thread_id, created_at=at(n)) for n in range(3)]
        saved = (await gql(client, server.url, SAVE, m=messages)).json()["data"]["saveMessages"]
        assert len(saved["messages"]) == 3
        for _ in range(4):
            got = await gql(client, server.url, RECALL, t=thread_id, r=resource_id)
            assert got.json()["data"]["recall"]["total"] == 3
        missing = await gql(client, server.url, RECALL, t=uid("ghost"), r="someone")
        assert missing.json()["errors"][0]["extensions"]["code"] == "NOT_FOUND"
        bad = await gql(client, server.url, "{ recall(")
        assert bad.json()["errors"][0]["extensions"]["code"] == "GRAPHQL_PARSE_FAILED"
        unknown = await client.post(
            f"{server.url}/graphql", json={"query": "{ __typename }", "operationName": "Nope"}
        )
        assert unknown.json()["errors"][0]["extensions"]["code"] == "OPERATION_RESOLUTION_FAILURE"
        response = await client.get(f"{server.url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    after = response.text

    def grew(name: str, by: float = 1, **labels: str) -> None:
        delta = metric_value(after, name, **labels) - metric_value(before, name, **labels)
        assert delta >= by, f"{name}{labels} grew by {delta}, expected >= {by}"

    grew("recallql_http_requests_total", 8, method="POST", route="/graphql", status="200")
    grew("recallql_http_request_duration_seconds_count", 8, method="POST", route="/graphql")
    recall_labels = {"operation_type": "query", "operation_name": "ObsRecall", "root_fields": "recall"}
    grew("recallql_graphql_operation_duration_seconds_count", 5, **recall_labels)
    grew("recallql_graphql_operation_duration_seconds_sum", 1e-6, **recall_labels)
    grew(
        "recallql_graphql_operation_duration_seconds_count",
        1,
        operation_type="mutation",
        operation_name="ObsSave",
        root_fields="saveMessages",
    )
    grew("recallql_graphql_errors_total", 1, code="NOT_FOUND")
    grew("recallql_graphql_errors_total", 1, code="GRAPHQL_PARSE_FAILED")
    grew("recallql_graphql_errors_total", 1, code="OPERATION_RESOLUTION_FAILURE")
    grew("recallql_db_statement_duration_seconds_count", 5, kind="select")
    grew("recallql_db_statement_duration_seconds_count", 1, kind="insert")
    grew("recallql_db_statement_duration_seconds_count", 1, kind="update")
    # The outbox backlog is read on each scrape.
    names = {n for n, _, _ in metric_samples(after)}
    assert "recallql_vector_outbox_backlog" in names
    assert metric_value(after, "recallql_vector_outbox_backlog") >= 0
    # Nothing client-controlled becomes an unbounded label: /metrics itself is counted under its route.
    assert metric_value(after, "recallql_http_requests_total", route="/metrics") >= 1


async def test_semantic_calls_are_timed(services: Services) -> None:
    class Embedder:
        name = "fake"
        dimension = 3

        async def embed(self, texts: Sequence[str]) -> Embedding:
            return Embedding([[1.0, 0.0, 0.0] for _ in texts], tokens=len(texts))

        async def aclose(self) -> None:
            return None

    class Index:
        async def upsert(self, items: Sequence[Any]) -> None:
            return None

        async def delete_messages(self, message_ids: Sequence[str], resource_ids: Sequence[Any]) -> None:
            return None

        async def query(self, vector: Sequence[float], **kwargs: Any) -> list[VectorHit]:
            return [VectorHit("m", "t", 0.5)]

        async def ping(self) -> None:
            raise RuntimeError("down")

        async def aclose(self) -> None:
            return None

    semantic = SemanticMemory(services.repository, Embedder(), lambda model, dimension: Index())
    instrument_semantic(semantic)
    instrument_semantic(semantic)  # idempotent: one timing per call, not two

    def count(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(f"{name}_count", labels) or 0.0

    embeds = count("recallql_embedder_duration_seconds", outcome="ok")
    queries = count("recallql_vector_index_duration_seconds", operation="query", outcome="ok")
    pings = count("recallql_vector_index_duration_seconds", operation="ping", outcome="error")
    found = await semantic.search("hello", thread_id="t", resource_id="r", resource_scope=True, top_k=2)
    assert [h.message_id for h in found.hits] == ["m"]
    with pytest.raises(RuntimeError):
        await (await semantic.index()).ping()
    assert count("recallql_embedder_duration_seconds", outcome="ok") == embeds + 1
    assert count("recallql_vector_index_duration_seconds", operation="query", outcome="ok") == queries + 1
    assert count("recallql_vector_index_duration_seconds", operation="ping", outcome="error") == pings + 1
    assert semantic.embedder.name == "fake" and semantic.embedder.dimension == 3


@pytest.mark.parametrize(
    ("statement", "kind"),
    [
        ("SELECT 1", "select"),
        ("  select * from messages", "select"),
        ("INSERT INTO messages VALUES (1)", "insert"),
        ("UPDATE threads SET title = 'x'", "update"),
        ("DELETE FROM vector_outbox WHERE id = 1", "delete"),
        ("WITH t AS (SELECT 1) SELECT * FROM t", "select"),
        ("WITH t AS (SELECT 1) DELETE FROM messages WHERE id IN (SELECT * FROM t)", "delete"),
        ("/* hint */ SELECT 1", "select"),
        ("BEGIN IMMEDIATE", "other"),
        ("SELECT pg_advisory_xact_lock(1)", "select"),
    ],
)
def test_statement_kind(statement: str, kind: str) -> None:
    assert statement_kind(statement) == kind


# ---------------------------------------------------------------------------------------------- request ids
async def test_request_id_round_trip(server: ServerProcess) -> None:
    ghost = {"t": uid("ghost"), "r": "someone"}
    async with httpx.AsyncClient(timeout=30) as client:
        given = f"req-{uid()}"
        response = await gql(client, server.url, RECALL, headers={"X-Request-ID": given}, **ghost)
        assert response.headers["x-request-id"] == given
        error = response.json()["errors"][0]
        assert error["extensions"] == {"code": "NOT_FOUND", "requestId": given}

        # Without one (or with one that could forge log lines) a fresh id is made, and used alike.
        for headers in ({}, {"X-Request-ID": "two words"}, {"X-Request-ID": "x" * 129}):
            response = await gql(client, server.url, RECALL, headers=headers, **ghost)
            made = response.headers["x-request-id"]
            assert len(made) == 32 and made != headers.get("X-Request-ID")
            assert response.json()["errors"][0]["extensions"]["requestId"] == made

        # Validation errors and every other route carry it too.
        response = await gql(client, server.url, "{ nope }", headers={"X-Request-ID": "v-1"})
        assert response.json()["errors"][0]["extensions"] == {
            "code": "GRAPHQL_VALIDATION_FAILED",
            "requestId": "v-1",
        }
        assert (await client.get(f"{server.url}/healthz", headers={"X-Request-ID": "h-1"})).headers[
            "x-request-id"
        ] == "h-1"
        too_large = await client.post(
            f"{server.url}/graphql",
            content=b"x" * (9 * 1024 * 1024),
            headers={"content-type": "application/json", "X-Request-ID": "big-1"},
        )
        assert too_large.status_code == 413 and too_large.headers["x-request-id"] == "big-1"


# ---------------------------------------------------------------------------------------------- logs
def test_json_formatter_fields() -> None:
    record = logging.LogRecord("recallql.test", logging.ERROR, __file__, 1, "hello %s", ("world",), None)
    record.request_id = "rid-1"
    record.thread_id = "t1"
    record.sizes = [1, 2]
    line = JsonFormatter().format(record)
    entry = json.loads(line)
    assert entry["level"] == "error" and entry["logger"] == "recallql.test"
    assert entry["message"] == "hello world" and entry["request_id"] == "rid-1"
    assert entry["thread_id"] == "t1" and entry["sizes"] == [1, 2]
    assert entry["ts"].endswith("Z") and "T" in entry["ts"]
    try:
        raise ValueError("boom")
    except ValueError:
        failing = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", None, sys.exc_info())
    RequestIdFilter().filter(failing)
    entry = json.loads(JsonFormatter().format(failing))
    assert "ValueError: boom" in entry["exc"] and "request_id" not in entry
    text = TextFormatter().format(record)
    assert "[rid-1]" in text and "hello world" in text and "thread_id=t1" in text


def test_json_logs_take_pythons_warnings_in() -> None:
    # A warning was written to stderr as raw text (its message, then its source line): two lines a
    # JSON log parser rejects. In a process of its own: pytest keeps warnings for itself.
    program = (
        "import warnings\n"
        "from web.observability import configure_logging\n"
        "configure_logging('info', 'json')\n"
        "warnings.warn('a library is unhappy', RuntimeWarning)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    entries = [json.loads(line) for line in lines]
    assert [(e["logger"], e["level"]) for e in entries] == [("py.warnings", "warning")], lines
    assert "RuntimeWarning: a library is unhappy" in entries[0]["message"]


def test_json_logs_carry_request_ids(tmp_path: Path) -> None:
    env = {
        "RECALLQL_LOG_FORMAT": "json",
        "RECALLQL_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}",
    }
    with running_server(tmp_path / "data", env) as srv:
        with httpx.Client(timeout=30) as client:
            client.post(
                f"{srv.url}/graphql",
                json={"query": RECALL, "variables": {"t": "ghost", "r": "r"}},
                headers={"X-Request-ID": "log-rid-1"},
            )
            generated = client.get(f"{srv.url}/healthz").headers["x-request-id"]
        log_path = srv.log_path
    lines = log_path.read_text().splitlines()
    # The CLI logs a few text lines before the app exists; from the app's start on, every line is JSON.
    first = next(n for n, line in enumerate(lines) if line.startswith("{"))
    entries = [json.loads(line) for line in lines[first:] if line.strip()]
    for entry in entries:
        assert {"ts", "level", "logger", "message"} <= entry.keys(), entry
    assert any(e["logger"] == "uvicorn.error" and "startup complete" in e["message"] for e in entries)
    access = [e for e in entries if e["logger"] == "recallql.access"]
    graphql_line = next(e for e in access if e.get("request_id") == "log-rid-1")
    assert graphql_line["method"] == "POST" and graphql_line["path"] == "/graphql"
    assert graphql_line["status"] == 200 and graphql_line["duration_ms"] > 0
    # Probes are logged at debug level only (the server runs at info).
    assert not any(e.get("request_id") == generated for e in access)


def test_json_logs_with_several_workers_are_json_throughout(tmp_path: Path) -> None:
    # uvicorn's supervisor configured its own text handlers over ours ("INFO:     Started parent process").
    env = {"RECALLQL_LOG_FORMAT": "json", "RECALLQL_EMBEDDER": "off"}
    with running_server(tmp_path / "data", env, workers=2) as srv:
        httpx.get(f"{srv.url}/healthz", timeout=30)
        log_path = srv.log_path
    lines = [line for line in log_path.read_text().splitlines() if line.strip()]
    entries = [json.loads(line) for line in lines]  # every line, the parent's included
    assert any(e["logger"] == "uvicorn.error" and "Started parent process" in e["message"] for e in entries)
    assert sum("Application startup complete" in e["message"] for e in entries) == 2


def test_one_worker_counts_its_requests_in_the_multiprocess_directory(tmp_path: Path) -> None:
    # The CLI cleared the directory after web.observability had opened this process's files: with one
    # worker (in the CLI's process) request counts went to deleted files and vanished from /metrics.
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    (metrics_dir / "counter_1.db").write_bytes(b"stale")  # a dead process's file: cleared
    env = {"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir), "RECALLQL_EMBEDDER": "off"}
    with running_server(tmp_path / "data", env) as srv:
        for _ in range(3):
            httpx.post(f"{srv.url}/graphql", json={"query": "{ __typename }"}, timeout=30)
        text = httpx.get(f"{srv.url}/metrics", timeout=30).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    posts = [
        s.value
        for s in families["recallql_http_requests"].samples
        if s.name.endswith("_total") and s.labels.get("method") == "POST"
    ]
    assert sum(posts) == 3, posts
    assert not (metrics_dir / "counter_1.db").exists()


def test_serve_refuses_what_every_worker_would_refuse(tmp_path: Path) -> None:
    # With several workers uvicorn's supervisor restarted each worker as it died on the bad secret,
    # forever, a traceback each time.
    done = subprocess.run(
        [sys.executable, "-m", "web.cli", "serve", "--workers", "2", "--port", "1"],
        cwd=REPO,
        env={
            **os.environ,
            "RECALLQL_DATA_DIR": str(tmp_path),
            "RECALLQL_EMBEDDER": "off",
            "RECALLQL_JWT_SECRET": "short",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert (
        done.stderr.strip()
        == "recallql: setting not valid: RECALLQL_JWT_SECRET must be at least 32 bytes long (HS256)"
    )


def _two_workers_without_migration(tmp_path: Path, database_url: str) -> ServerProcess:
    env = {
        "RECALLQL_DATABASE_URL": database_url,
        "RECALLQL_AUTO_MIGRATE": "false",
        "RECALLQL_EMBEDDER": "off",
    }
    return ServerProcess(tmp_path / "data", env, workers=2)


def test_several_workers_that_cannot_start_end_serve_with_a_failure(tmp_path: Path) -> None:
    # The supervisor stopped when a worker failed to start, and serve then exited 0.
    # A PostgreSQL database that does not exist: serve, which does not migrate here, does not connect
    # before the workers do (SQLite files it checks itself, exit 1).
    require(asyncio.run(postgres_available()), f"PostgreSQL is not reachable at {PG_ADMIN_DSN}")
    base = PG_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
    server = _two_workers_without_migration(tmp_path, f"{base}/recallql_no_such_database")
    try:
        assert server.proc.wait(60) == 3, server.log_path.read_text()
        assert 'database "recallql_no_such_database" does not exist' in server.log_path.read_text()
    finally:
        server.stop()


def test_workers_start_while_the_database_is_unreachable(tmp_path: Path) -> None:
    # A worker read the schema's version as it started; with the database away it failed to start, and
    # uvicorn's supervisor then stopped every worker: a restart during an outage took the server down.
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # nothing listens there: the database is refused
    server = _two_workers_without_migration(tmp_path, f"postgresql+asyncpg://postgres@127.0.0.1:{port}/test")
    try:
        server.wait_ready(probe="/healthz")
        ready = httpx.get(f"{server.url}/readyz", timeout=30)
        assert (ready.status_code, ready.json()["database"]) == (503, "unreachable")
    finally:
        server.stop()


def test_no_value_logged_can_forge_a_text_log_line() -> None:
    """Thread ids, error texts and other values reach log messages and fields (title generation's and
    the event broker's warnings name threads and channels): a newline in one started a line of the
    sender's choosing. The text format writes every record on one line; a traceback keeps its lines."""
    forged = "2026-12-04 21:00:00,000 ERROR recallql: forged"
    for separator in ("\n", "\r", "\u2028", "\x85"):
        record = logging.LogRecord(
            "recallql.titles",
            logging.WARNING,
            __file__,
            1,
            "no title for thread %s",
            (f"t{separator}{forged}",),
            None,
        )
        record.thread_id = f"t{separator}{forged}"
        line = TextFormatter().format(record)
        assert line.splitlines() == [line] and forged in line, repr(line)
    try:
        raise ValueError("boom")
    except ValueError:
        failing = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed\nagain", None, sys.exc_info())
    lines = TextFormatter().format(failing).splitlines()
    assert lines[0].endswith("failed\\x0aagain") and lines[-1] == "ValueError: boom", lines


def test_a_path_cannot_forge_a_text_log_line(tmp_path: Path) -> None:
    """The default text access log wrote the decoded path: %0a in a URL started a line of the
    requester's choosing."""
    env = {"RECALLQL_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}"}
    forged = "2026-12-04 21:00:00,000 ERROR recallql: forged line"
    with running_server(tmp_path / "data", env) as srv:
        with httpx.Client(timeout=30) as client:
            client.get(f"{srv.url}/x%0a{forged.replace(' ', '%20')}")
        log_path = srv.log_path
    lines = log_path.read_text().splitlines()
    assert not any(line.startswith(forged) for line in lines)
    assert any("/x\\x0a2026-12-04 21:00:00,000 ERROR recallql: forged line 404" in line for line in lines), (
        lines[-5:]
    )


# ---------------------------------------------------------------------------------------------- tracing
class OtlpReceiver:
    """A loopback OTLP/HTTP trace receiver: decodes each export request into spans."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        self.spans: list[Any] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                encoding = self.headers.get("content-encoding", "")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.paths.append(self.path)
                for resource_spans in request.resource_spans:
                    service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}.get(
                        "service.name"
                    )
                    for scope_spans in resource_spans.scope_spans:
                        for span in scope_spans.spans:
                            receiver.spans.append((service, span))
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> OtlpReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def otlp() -> Iterator[OtlpReceiver]:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the otel extra is not installed")
    pytest.importorskip("opentelemetry.instrumentation.asgi", reason="the otel extra is not installed")
    with OtlpReceiver() as receiver:
        yield receiver


def test_spans_for_http_graphql_and_sql(tmp_path: Path, otlp: OtlpReceiver) -> None:
    env = {
        "RECALLQL_OTEL_ENDPOINT": otlp.url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "RECALLQL_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}",
    }
    trace_id, answered_id = "4bf92f3577b34da6a3ce929d0e0e4736", "5bf92f3577b34da6a3ce929d0e0e4737"
    # Two roots that fail: the compiled path leaves the answer to the normal path, which runs them.
    twice = RECALL.replace("{ total } }", "{ total } again: recall(threadId: $t, resourceId: $r) { total } }")
    with running_server(tmp_path / "data", env) as srv, httpx.Client(timeout=30) as client:
        response = client.post(
            f"{srv.url}/graphql",
            json={"query": twice, "variables": {"t": "ghost", "r": "r"}},
            headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01", "X-Request-ID": "trace-rid"},
        )
        assert response.json()["errors"][0]["extensions"]["code"] == "NOT_FOUND"
        # One root that fails: the compiled path answers, its field's span marked as an error.
        response = client.post(
            f"{srv.url}/graphql",
            json={"query": RECALL, "variables": {"t": "ghost", "r": "r"}},
            headers={"traceparent": f"00-{answered_id}-00f067aa0ba902b7-01"},
        )
        assert response.json()["errors"][0]["extensions"]["code"] == "NOT_FOUND"
    # Stopping the server flushed its spans.
    answered = [span for _, span in otlp.spans if span.trace_id.hex() == answered_id]
    (operation,) = (s for s in answered if s.name == "GraphQL Query: ObsRecall")
    assert "recallql.compiled_fallback" not in {a.key for a in operation.attributes}
    (field,) = (s for s in answered if s.name == "GraphQL Resolving: recall")
    assert field.parent_span_id == operation.span_id
    assert field.status.code == field.status.STATUS_CODE_ERROR, field.status
    assert otlp.paths and set(otlp.paths) == {"/v1/traces"}
    ours = [span for service, span in otlp.spans if span.trace_id.hex() == trace_id]
    assert {service for service, _ in otlp.spans} == {"recallql"}
    names = [s.name for s in ours]
    http_span = next(s for s in ours if s.kind == s.SPAN_KIND_SERVER and s.name.startswith("POST"))
    attributes = {a.key: a.value.string_value for a in http_span.attributes}
    assert attributes["recallql.request_id"] == "trace-rid"
    # The compiled path tried first (its span marked as given up), then the normal path answered.
    tried, operation = (s for s in ours if s.name == "GraphQL Query: ObsRecall")
    assert {a.key: a.value.bool_value for a in tried.attributes}.get("recallql.compiled_fallback") is True
    assert "recallql.compiled_fallback" not in {a.key for a in operation.attributes}
    assert operation.parent_span_id == tried.parent_span_id == http_span.span_id
    assert any(n == "GraphQL Resolving: recall" for n in names), names
    selects = [s for s in ours if s.kind == s.SPAN_KIND_CLIENT and s.name.startswith("SELECT")]
    assert selects, names
    statements = []
    for span in selects:
        db_attributes = {a.key: a.value.string_value for a in span.attributes}
        assert db_attributes["db.system"] == "sqlite"
        statements.append(db_attributes["db.statement"])
    assert any("FROM threads" in statement for statement in statements), statements


def test_scripts_serve_reads_relative_paths_from_where_it_runs(tmp_path: Path) -> None:
    # It changed into the checkout first: --data-dir data (and .env) were read there, not here.
    server = ServerProcess(
        tmp_path / "logs",
        {"RECALLQL_EMBEDDER": "off"},
        command=(str(REPO / "scripts" / "serve"), "--data-dir", "data"),
        cwd=tmp_path,
    )
    try:
        server.wait_ready(120)
        assert (tmp_path / "data" / "recallql.db").is_file()
        assert not (REPO / "data").exists()
    finally:
        server.stop()


LISTING = (
    "query Listing($r: String!) "
    "{ list: threads(resourceId: $r) { threads { recall(perPage: 1) { total } } } }"
)


def test_compiled_reads_are_traced_as_operations(tmp_path: Path, otlp: OtlpReceiver) -> None:
    """A hot read answered by the compiled path (web/compiled.py) skips Strawberry's extensions, and
    with them the OpenTelemetry one: a traced server showed GraphQL spans only for errors and cold
    queries, and the SQL of every recall hung from the HTTP span. It has the operation's span and each
    root field's, as the normal path has, the statements under the field that ran them."""
    env = {
        "RECALLQL_OTEL_ENDPOINT": otlp.url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "RECALLQL_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}",
    }
    trace_id, listing_trace = "0af7651916cd43dd8448eb211c80319c", "1bf7651916cd43dd8448eb211c80319d"
    query = (
        "query HotRead($t: ID!) { recall(threadId: $t, perPage: 2) { total } "
        "again: recall(threadId: $t, perPage: false) { total } }"
    )
    with running_server(tmp_path / "data", env) as srv, httpx.Client(timeout=30) as client:
        created = client.post(
            f"{srv.url}/graphql", json={"query": CREATE, "variables": {"i": {"resourceId": "r"}}}
        ).json()
        thread = created["data"]["createThread"]["id"]
        response = client.post(
            f"{srv.url}/graphql",
            json={"query": query, "variables": {"t": thread}},
            headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"},
        )
        assert response.json() == {"data": {"recall": {"total": 0}, "again": {"total": 0}}}
        listing = client.post(
            f"{srv.url}/graphql",
            json={"query": LISTING, "variables": {"r": "r"}},
            headers={"traceparent": f"00-{listing_trace}-00f067aa0ba902b7-01"},
        )
        assert listing.json() == {"data": {"list": {"threads": [{"recall": {"total": 0}}]}}}
    # A nested Thread.recall, resolved by the compiled path after its root: its span has its real path.
    spans = [span for _, span in otlp.spans if span.trace_id.hex() == listing_trace]
    (listed,) = (s for s in spans if s.name == "GraphQL Query: Listing")
    assert not any(a.key == "recallql.compiled_fallback" for a in listed.attributes)
    # Answered by the compiled path: Strawberry's extension (parsing and validation spans) never ran.
    assert not {"GraphQL Parsing", "GraphQL Validation"} & {s.name for s in spans}, [s.name for s in spans]
    nested = {
        s.name: {a.key: a.value.string_value for a in s.attributes}["graphql.path"]
        for s in spans
        if s.name.startswith("GraphQL Resolving") and s.parent_span_id == listed.span_id
    }
    assert nested == {
        "GraphQL Resolving: threads": "list",
        "GraphQL Resolving: recall": "list.threads.0.recall",
    }
    ours = [span for _, span in otlp.spans if span.trace_id.hex() == trace_id]
    by_id = {span.span_id: span for span in ours}
    http_span = next(s for s in ours if s.kind == s.SPAN_KIND_SERVER and s.name.startswith("POST"))
    operation = next(s for s in ours if s.name == "GraphQL Query: HotRead")
    assert operation.parent_span_id == http_span.span_id
    attributes = {a.key: a.value.string_value for a in operation.attributes}
    assert attributes["component"] == "graphql" and attributes["query"] == query
    fields = [s for s in ours if s.name == "GraphQL Resolving: recall"]
    assert len(fields) == 2 and all(s.parent_span_id == operation.span_id for s in fields)
    paths = sorted({a.key: a.value.string_value for a in s.attributes}["graphql.path"] for s in fields)
    assert paths == ["again", "recall"]
    selects = [s for s in ours if s.kind == s.SPAN_KIND_CLIENT and s.name.startswith("SELECT")]
    assert selects and all(by_id[s.parent_span_id].name == "GraphQL Resolving: recall" for s in selects)
