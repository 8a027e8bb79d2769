"""Observability: request ids, structured logs, Prometheus metrics and (when configured) OpenTelemetry.

Everything that knows about prometheus-client or OpenTelemetry lives here; models/ and resolvers/ stay
free of it. web.app creates one :class:`Observability` per application and hooks it in:

* :meth:`Observability.middleware` — the request-id / HTTP-metrics / access-log middleware (and the
  OpenTelemetry ASGI middleware when tracing is on);
* :meth:`Observability.routes` — ``GET /metrics``;
* :meth:`Observability.graphql_extensions` — GraphQL operation timings and error counts (and Strawberry's
  OpenTelemetry extension when tracing is on);
* :meth:`Observability.instrument` — SQLAlchemy statement timings on the engine, embedder and vector-index
  timings around the semantic memory, and the outbox backlog collected on scrape;
* :meth:`Observability.shutdown` — flushes spans, marks a multiprocess worker dead.

Request ids: an incoming ``X-Request-ID`` (1-128 characters of ``[A-Za-z0-9._:@/+=-]``) is kept, anything
else is replaced by a new uuid4 hex; the id is returned in the ``X-Request-ID`` response header, is the
GraphQL context's ``request_id`` (so errors' ``extensions.requestId``), and is on every log line written
while the request runs.

Metrics are module-level objects in prometheus-client's default registry (one set per process). With
``PROMETHEUS_MULTIPROC_DIR`` set (needed for ``--workers N``), prometheus-client keeps values in files in
that directory and ``/metrics`` aggregates every worker's; the directory must exist and be emptied before
the server starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import json
import logging
import os
import re
import sys
import time
import traceback
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from graphql import (
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
)
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from sqlalchemy import event
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from strawberry.extensions import SchemaExtension
from strawberry.schema.exceptions import CannotGetOperationTypeError

from models.db import summary

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.ext.asyncio import AsyncEngine

    from resolvers.context import Services
    from web.settings import Settings

log = logging.getLogger("recallql.observability")
access_log = logging.getLogger("recallql.access")

REQUEST_ID_HEADER = "X-Request-ID"
_SCOPE_KEY = "recallql.request_id"
_VALID_REQUEST_ID = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")
_request_id: ContextVar[str | None] = ContextVar("recallql_request_id", default=None)
# Probes and scrapes are logged at debug level, not once every few seconds at info.
_QUIET_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
# Control characters, and the separators Python's splitlines (and some log viewers) break lines at.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _escaped(text: str) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 256 else f"\\u{ord(m[0]):04x}", text)


def current_request_id() -> str | None:
    """The id of the HTTP request being served by this task, if any."""
    return _request_id.get()


def request_id_of(request: Any) -> str | None:
    """The request id the middleware gave this Starlette request or websocket (None without it)."""
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict):
        value = scope.get(_SCOPE_KEY)
        if isinstance(value, str):
            return value
    return None


def _incoming_request_id(scope: Scope) -> str | None:
    for name, value in scope.get("headers") or ():
        if name == b"x-request-id":
            try:
                text = value.decode("ascii")
            except UnicodeDecodeError:
                return None
            return text if _VALID_REQUEST_ID.fullmatch(text) else None
    return None


# ============================================================================================== logging
# Attributes every LogRecord has; anything else on a record came in through `extra=` and is logged.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "request_id",
    "taskName",
    "color_message",
    "rid",
    "fields",
}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _RECORD_FIELDS and not k.startswith("_")}


def _trace_ids() -> dict[str, str]:
    """The current OpenTelemetry trace and span ids, when tracing is on and a span is active."""
    if not _TRACING_ON:
        return {}
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return {}
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return {}
    return {"trace_id": f"{ctx.trace_id:032x}", "span_id": f"{ctx.span_id:016x}"}


_TRACING_ON = False


class RequestIdFilter(logging.Filter):
    """Puts the current request id on every record (None outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            record.request_id = _request_id.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, request_id (when known), the fields passed
    with ``extra=``, trace/span ids when tracing, and ``exc`` (the traceback) for exceptions."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds")[:-6]
            + "Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None) or _request_id.get()
        if request_id:
            entry["request_id"] = request_id
        entry.update(_trace_ids())
        for key, value in _extras(record).items():
            entry.setdefault(key, value)
        if record.exc_info:
            entry["exc"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        elif record.exc_text:
            entry["exc"] = record.exc_text
        if record.stack_info:
            entry["stack"] = record.stack_info
        return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``2026-01-01 12:00:00,000 INFO recallql.access [request id] message key=value ...``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(rid)s: %(message)s%(fields)s")

    def format(self, record: logging.LogRecord) -> str:
        request_id = getattr(record, "request_id", None) or _request_id.get()
        record.rid = f" [{request_id}]" if request_id else ""
        extras = {k: v for k, v in _extras(record).items() if k not in ("rid", "fields")}
        # An access line says it all in its message already; its fields are for the JSON format.
        record.fields = (
            "" if record.name == access_log.name else "".join(f" {k}={v}" for k, v in extras.items())
        )
        return super().format(record)

    def formatMessage(self, record: logging.LogRecord) -> str:
        # One record, one line: a thread id, a path or an error text holding a newline started a log
        # line of the sender's choosing. (A traceback, added after this, keeps its lines.)
        return _escaped(super().formatMessage(record))


def make_formatter(fmt: str) -> logging.Formatter:
    return JsonFormatter() if fmt == "json" else TextFormatter()


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time (test runners swap it)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        return None


def configure_logging(level: str = "info", fmt: str = "text", *, access_log_enabled: bool = True) -> None:
    """Sends every log record of the process, uvicorn's included, to stderr in the chosen format.

    Replaces the handlers that ``logging.basicConfig`` and uvicorn installed (exact StreamHandlers on the
    root logger; the handlers of the ``uvicorn`` and ``uvicorn.access`` loggers); handlers of other types
    (pytest's capture, for one) are left alone. Idempotent. With our own access log on, uvicorn's access
    lines (which know no request id) are silenced.
    """
    handler = _StderrHandler()
    handler.setFormatter(make_formatter(fmt))
    handler.addFilter(RequestIdFilter())
    handler._recallql = True  # type: ignore[attr-defined]
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_recallql", False) or type(old) is logging.StreamHandler:
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.access"):
        logger = logging.getLogger(name)
        if logger.handlers:
            logger.handlers = [handler]
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING if access_log_enabled else logging.INFO)
    # Python's warnings (a library's RuntimeWarning, graphql-core's never-awaited coroutines when it
    # cancels a failed query's fields) were written to stderr as raw text, lines a JSON log parser
    # rejects: they go through the "py.warnings" logger, in the chosen format, instead.
    logging.captureWarnings(True)
    # Alembic reports at INFO its plugins at import and its dialect on every version read (each /readyz
    # while a migration is pending); what was applied is RecallQL's own "applied migrations" line.
    logging.getLogger("alembic").setLevel(logging.WARNING)


# ============================================================================================== metrics
_MULTIPROCESS = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
_FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_SLOW_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

HTTP_REQUESTS = Counter("recallql_http_requests", "HTTP requests served.", ["method", "route", "status"])
HTTP_DURATION = Histogram(
    "recallql_http_request_duration_seconds",
    "HTTP request latency, from the first byte in to the last byte out.",
    ["method", "route"],
    buckets=_FAST_BUCKETS,
)
HTTP_IN_PROGRESS = Gauge(
    "recallql_http_requests_in_progress",
    "HTTP requests being served.",
    multiprocess_mode="livesum",
)
GRAPHQL_DURATION = Histogram(
    "recallql_graphql_operation_duration_seconds",
    "GraphQL operation latency (parse, validate, execute), by operation and root field(s).",
    ["operation_type", "operation_name", "root_fields"],
    buckets=_FAST_BUCKETS,
)
GRAPHQL_ERRORS = Counter("recallql_graphql_errors", "GraphQL errors returned, by extensions.code.", ["code"])
PERSISTED_QUERIES = Counter(
    "recallql_persisted_queries",
    "Requests with an automatic persisted query's hash, by outcome: found, not_found, text (sent with its "
    "hash), refused (malformed), not_supported (APQ off).",
    ["outcome"],
)
DB_DURATION = Histogram(
    "recallql_db_statement_duration_seconds",
    "Database statement latency, by statement kind.",
    ["kind"],
    buckets=_FAST_BUCKETS,
)
DB_ERRORS = Counter("recallql_db_statement_errors", "Database statements that failed.", ["kind"])
VECTOR_DURATION = Histogram(
    "recallql_vector_index_duration_seconds",
    "Vector index (Chroma) call latency, by operation and outcome.",
    ["operation", "outcome"],
    buckets=_SLOW_BUCKETS,
)
EMBED_DURATION = Histogram(
    "recallql_embedder_duration_seconds",
    "Embedder call latency, by outcome.",
    ["outcome"],
    buckets=_SLOW_BUCKETS,
)
EMBED_TEXTS = Counter("recallql_embedder_texts", "Texts (chunks) sent to the embedder.")


class _LabelGuard:
    """Caps the distinct values of a client-controlled label (operation names); the rest become 'other'."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.seen: set[str] = set()

    def __call__(self, value: str) -> str:
        if value in self.seen:
            return value
        if len(self.seen) >= self.limit:
            return "other"
        self.seen.add(value)
        return value


_operation_names = _LabelGuard(200)
_root_field_sets = _LabelGuard(300)
_GRAPHQL_NAME = re.compile(r"[_A-Za-z][_0-9A-Za-z]{0,63}")


class _Forward:
    """Collects another registry (so that one scrape can combine it with the per-scrape backlog)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Any]:
        yield from self.registry.collect()


class _Backlog:
    def __init__(self, value: int | None) -> None:
        self.value = value

    def collect(self) -> Iterator[Any]:
        if self.value is not None:
            yield GaugeMetricFamily(
                "recallql_vector_outbox_backlog",
                "Message changes queued for the vector index and not yet applied.",
                value=self.value,
            )


def _scrape_registry(backlog: int | None) -> CollectorRegistry:
    registry = CollectorRegistry()
    if _MULTIPROCESS:
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry)
    else:
        registry.register(_Forward(REGISTRY))
    registry.register(_Backlog(backlog))
    return registry


async def metrics_endpoint(request: Request) -> Response:
    backlog: int | None = None
    services = getattr(request.app.state, "services", None)
    if services is not None:
        try:
            backlog = await asyncio.wait_for(services.repository.outbox_backlog(), 2.0)
        except Exception as exc:  # a scrape must not fail because the database is slow or down
            log.warning("metrics: outbox backlog unavailable: %s", summary(exc))
    return Response(generate_latest(_scrape_registry(backlog)), media_type=CONTENT_TYPE_LATEST)


# ============================================================================================== HTTP
class RequestMiddleware:
    """Request ids (in and out), HTTP metrics and one access log line per request."""

    def __init__(self, app: ASGIApp, *, metrics: bool = True, access_log_enabled: bool = True) -> None:
        self.app = app
        self.metrics = metrics
        self.access_log = access_log_enabled

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        request_id = _incoming_request_id(scope) or uuid.uuid4().hex
        scope[_SCOPE_KEY] = request_id
        token = _request_id.set(request_id)
        try:
            if scope["type"] == "websocket":
                await self.app(scope, receive, send)
            else:
                await self._http(scope, receive, send, request_id)
        finally:
            _request_id.reset(token)

    async def _http(self, scope: Scope, receive: Receive, send: Send, request_id: str) -> None:
        status = 500
        start = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                MutableHeaders(scope=message)[REQUEST_ID_HEADER] = request_id
            await send(message)

        if self.metrics:
            HTTP_IN_PROGRESS.inc()
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - start
            method = scope.get("method", "GET")
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            if self.metrics:
                HTTP_IN_PROGRESS.dec()
                labelled(HTTP_REQUESTS, method, route, str(status)).inc()
                labelled(HTTP_DURATION, method, route).observe(elapsed)
            if self.access_log:
                path = scope.get("path", "")
                access_log.log(
                    logging.DEBUG if path in _QUIET_PATHS else logging.INFO,
                    "%s %s %s %.1fms",
                    method,
                    path,  # a decoded path may hold a newline (%0a): the text format escapes it
                    status,
                    elapsed * 1000,
                    extra={
                        "method": method,
                        "path": path,
                        "route": route,
                        "status": status,
                        "duration_ms": round(elapsed * 1000, 3),
                        "client": (scope.get("client") or ("", 0))[0],
                    },
                )


# ============================================================================================== GraphQL
def _root_fields(document: Any, operation: OperationDefinitionNode) -> list[str]:
    fragments = {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
    names: set[str] = set()
    seen_fragments: set[str] = set()

    def walk(selection_set: SelectionSetNode | None) -> None:
        for selection in selection_set.selections if selection_set else ():
            if isinstance(selection, FieldNode):
                names.add(selection.name.value)
            elif isinstance(selection, InlineFragmentNode):
                walk(selection.selection_set)
            elif isinstance(selection, FragmentSpreadNode):
                name = selection.name.value
                if name in fragments and name not in seen_fragments:
                    seen_fragments.add(name)
                    walk(fragments[name].selection_set)

    walk(operation.selection_set)
    return sorted(names)


def describe_operation(execution_context: Any, schema: Any = None) -> tuple[str, str, str]:
    """(operation type, operation name, root fields) as bounded metric labels."""
    document = getattr(execution_context, "graphql_document", None)
    requested = getattr(execution_context, "operation_name", None)
    operation: OperationDefinitionNode | None = None
    if document is not None:
        operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
        for candidate in operations:
            if requested is None or (candidate.name and candidate.name.value == requested):
                operation = candidate
                break
    if operation is None:
        return "unknown", "unknown", "unknown"
    op_type = operation.operation.value
    name = operation.name.value if operation.name else requested
    if name is None:
        name_label = "anonymous"
    elif _GRAPHQL_NAME.fullmatch(name):
        name_label = _operation_names(name)
    else:
        name_label = "invalid"
    fields = _root_fields(document, operation)
    root_type = None
    if schema is not None:
        root_type = {
            "query": schema.query_type,
            "mutation": schema.mutation_type,
            "subscription": schema.subscription_type,
        }.get(op_type)
    if root_type is not None:
        fields = [f if f in root_type.fields or f.startswith("__") else "invalid" for f in fields]
        fields = sorted(set(fields))
    return op_type, name_label, _root_field_sets(",".join(fields) or "none")


def _error_code(extensions: Mapping[str, Any] | None) -> str:
    """An error's extensions.code, for the metric's label ("NONE" without one)."""
    code = (extensions or {}).get("code")
    return code if isinstance(code, str) and code else "NONE"


class GraphQLMetrics(SchemaExtension):
    """Times each operation and counts its errors by code. Listed before the error policy, so that it
    sees the codes the policy gives."""

    def on_operation(self) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        except GraphQLError as error:  # raised past the extensions (a syntax error from the parser cache)
            GRAPHQL_ERRORS.labels("GRAPHQL_PARSE_FAILED" if "Syntax Error" in error.message else "NONE").inc()
            raise
        except CannotGetOperationTypeError:  # an unknown operationName (web/app.py answers it)
            GRAPHQL_ERRORS.labels("OPERATION_RESOLUTION_FAILURE").inc()
            raise
        except Exception:  # a missing query, a mutation over GET: answered by the HTTP layer
            GRAPHQL_ERRORS.labels("BAD_REQUEST").inc()
            raise
        ec = self.execution_context
        schema = getattr(getattr(ec, "schema", None), "_schema", None)
        op_type, name, fields = describe_operation(ec, schema)
        if op_type != "subscription":
            GRAPHQL_DURATION.labels(op_type, name, fields).observe(time.perf_counter() - start)
        result = ec.result
        for result_error in (getattr(result, "errors", None) or []) if result is not None else []:
            GRAPHQL_ERRORS.labels(_error_code(result_error.extensions)).inc()


def observe_compiled_operation(
    schema: Any,
    document: Any,
    operation_name: str | None,
    seconds: float,
    memo: dict[str, Any],
    errors: Sequence[Mapping[str, Any]] = (),
) -> None:
    """The operation metrics for a query answered by the compiled read path (web/compiled.py), which
    does not run the schema's extensions: its duration and its errors (formatted) by code. `memo`
    lives as long as the compiled plan of the document: its labelled metric is worked out once."""
    child = memo.get("duration")
    if child is None:
        context = SimpleNamespace(graphql_document=document, operation_name=operation_name)
        child = memo["duration"] = GRAPHQL_DURATION.labels(*describe_operation(context, schema))
    child.observe(seconds)
    for error in errors:
        labelled(GRAPHQL_ERRORS, _error_code(error.get("extensions"))).inc()


_children: dict[tuple[Any, ...], Any] = {}


def labelled(metric: Any, *values: str) -> Any:
    """`metric.labels(*values)`, remembered: prometheus_client validates and locks on every call, and
    the hot paths label with the same few values all the time (label sets here are bounded)."""
    key = (metric, *values)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(*values)
    return child


# ============================================================================================== database
_STATEMENT_KIND = re.compile(r"\s*(?:--[^\n]*\n\s*|/\*.*?\*/\s*)*(\w+)", re.S)
_CTE_VERB = re.compile(r"\b(insert\s+into|update\s+\S+\s+set|delete\s+from)\b", re.I)


@functools.lru_cache(maxsize=4096)  # statements are built once per shape: the same few strings
def statement_kind(statement: str) -> str:
    match = _STATEMENT_KIND.match(statement)
    verb = match.group(1).lower() if match else ""
    if verb in ("select", "insert", "update", "delete"):
        return verb
    if verb == "with":
        found = _CTE_VERB.search(statement)
        return found.group(1).split()[0].lower() if found else "select"
    return "other"


_instrumented_engines: weakref.WeakSet[Any] = weakref.WeakSet()


def instrument_engine(engine: AsyncEngine | Engine, tracer: Any = None) -> None:
    """Times every statement of this engine (and, with a tracer, gives each a client span). Idempotent."""
    sync_engine = getattr(engine, "sync_engine", engine)  # an AsyncEngine, or a plain one
    if sync_engine in _instrumented_engines:
        return
    _instrumented_engines.add(sync_engine)
    db_system = "postgresql" if sync_engine.dialect.name == "postgresql" else sync_engine.dialect.name
    db_name = sync_engine.url.database or ""

    def before(conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        kind = statement_kind(statement)
        span = None
        if tracer is not None:
            span = tracer.start_span(
                f"{kind.upper()} {os.path.basename(db_name) if db_system == 'sqlite' else db_name}".strip(),
                kind=_client_kind(),
                attributes={
                    "db.system": db_system,
                    "db.name": db_name,
                    "db.operation": kind.upper(),
                    "db.statement": statement[:2000],
                },
            )
        conn.info.setdefault("recallql_timings", []).append((time.perf_counter(), kind, span))

    def after(conn: Any, *_args: Any) -> None:
        stack = conn.info.get("recallql_timings")
        if not stack:
            return
        start, kind, span = stack.pop()
        labelled(DB_DURATION, kind).observe(time.perf_counter() - start)
        if span is not None:
            span.end()

    def failed(context: Any) -> None:
        conn = context.connection
        stack = conn.info.get("recallql_timings") if conn is not None else None
        if not stack:
            return
        start, kind, span = stack.pop()
        DB_DURATION.labels(kind).observe(time.perf_counter() - start)
        DB_ERRORS.labels(kind).inc()
        if span is not None:
            from opentelemetry.trace import Status, StatusCode

            span.set_status(Status(StatusCode.ERROR, type(context.original_exception).__name__))
            span.end()

    event.listen(sync_engine, "before_cursor_execute", before)
    event.listen(sync_engine, "after_cursor_execute", after)
    event.listen(sync_engine, "handle_error", failed)


def _client_kind() -> Any:
    from opentelemetry.trace import SpanKind

    return SpanKind.CLIENT


# ============================================================================================== semantic
class TimedEmbedder:
    """An embedder that records each call's latency (and a span when tracing); otherwise the same."""

    def __init__(self, inner: Any, tracer: Any = None) -> None:
        self._inner = inner
        self._tracer = tracer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __repr__(self) -> str:
        return repr(self._inner)

    async def embed(self, texts: Sequence[str]) -> Any:
        EMBED_TEXTS.inc(len(texts))
        span_cm = (
            self._tracer.start_as_current_span("embed", attributes={"recallql.texts": len(texts)})
            if self._tracer is not None
            else contextlib.nullcontext()
        )
        start = time.perf_counter()
        outcome = "error"
        try:
            with span_cm:
                result = await self._inner.embed(texts)
            outcome = "ok"
            return result
        finally:
            EMBED_DURATION.labels(outcome).observe(time.perf_counter() - start)


_INDEX_OPERATIONS = frozenset(
    {"upsert", "delete_messages", "delete_resource_thread", "query", "count", "ping", "aclose"}
)


class TimedIndex:
    """A vector index that records each call's latency by operation (and a span when tracing)."""

    def __init__(self, inner: Any, tracer: Any = None) -> None:
        self._inner = inner
        self._tracer = tracer

    def __repr__(self) -> str:
        return repr(self._inner)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name in _INDEX_OPERATIONS and callable(attr):
            return functools.partial(self._timed, name, attr)
        return attr

    async def _timed(self, operation: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        span_cm = (
            self._tracer.start_as_current_span(f"vector {operation}")
            if self._tracer is not None
            else contextlib.nullcontext()
        )
        start = time.perf_counter()
        outcome = "error"
        try:
            with span_cm:
                result = await fn(*args, **kwargs)
            outcome = "ok"
            return result
        finally:
            VECTOR_DURATION.labels(operation, outcome).observe(time.perf_counter() - start)


def instrument_semantic(semantic: Any, tracer: Any = None) -> None:
    """Wraps a SemanticMemory's embedder and vector index (present and future) in timing proxies."""
    if not isinstance(semantic.embedder, TimedEmbedder):
        semantic.embedder = TimedEmbedder(semantic.embedder, tracer)
    factory = semantic._index_factory
    if not getattr(factory, "_recallql_timed", False):

        def timed_factory(model: str, dimension: int) -> TimedIndex:
            return TimedIndex(factory(model, dimension), tracer)

        timed_factory._recallql_timed = True  # type: ignore[attr-defined]
        semantic._index_factory = timed_factory
    if semantic._index is not None and not isinstance(semantic._index, TimedIndex):
        semantic._index = TimedIndex(semantic._index, tracer)


# ============================================================================================== tracing
def tracing_endpoint(settings: Settings) -> str | None:
    """Where spans go: RECALLQL_OTEL_ENDPOINT, else the standard OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    return (
        settings.otel_endpoint
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def _traces_url(base: str) -> str:
    base = base.rstrip("/")
    return base if base.endswith("/v1/traces") else f"{base}/v1/traces"


def build_tracer_provider(settings: Settings) -> Any:
    """An SDK TracerProvider exporting over OTLP/HTTP, or None when tracing is not configured (then no
    OpenTelemetry module is imported here). Not installed as the global provider."""
    if not tracing_endpoint(settings):
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        log.warning(
            "tracing is configured but OpenTelemetry is not installed (pip install 'recallql[otel]'): %s", exc
        )
        return None
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "recallql"}
    provider = TracerProvider(resource=Resource.create(attributes))
    # An explicit RECALLQL_OTEL_ENDPOINT is a base URL; otherwise the exporter reads the OTEL_* variables.
    if settings.otel_endpoint:
        exporter = OTLPSpanExporter(endpoint=_traces_url(settings.otel_endpoint))
    else:
        exporter = OTLPSpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    log.info("tracing: spans to %s", settings.otel_endpoint or tracing_endpoint(settings))
    return provider


# ============================================================================================== wiring
class Observability:
    """What one application instance uses; see the module docstring."""

    def __init__(self, settings: Settings, *, configure_logging_now: bool = True) -> None:
        global _TRACING_ON
        self.settings = settings
        self.metrics = settings.metrics
        if configure_logging_now:
            configure_logging(settings.log_level, settings.log_format, access_log_enabled=settings.access_log)
        self.tracer_provider = build_tracer_provider(settings)
        self.tracer = None
        if self.tracer_provider is not None:
            _TRACING_ON = True
            self.tracer = self.tracer_provider.get_tracer("recallql")

    def middleware(self) -> list[Middleware]:
        stack = [
            Middleware(RequestMiddleware, metrics=self.metrics, access_log_enabled=self.settings.access_log)
        ]
        if self.tracer_provider is not None:
            try:
                from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
            except ImportError:
                log.warning("HTTP spans are off: opentelemetry-instrumentation-asgi is not installed")
            else:
                stack.append(
                    Middleware(
                        OpenTelemetryMiddleware,
                        tracer_provider=self.tracer_provider,
                        excluded_urls="healthz,readyz,metrics",
                        exclude_spans=["receive", "send"],
                        server_request_hook=_tag_request_id,
                    )
                )
        return stack

    def routes(self) -> list[Route]:
        return [Route("/metrics", metrics_endpoint, methods=["GET"])] if self.metrics else []

    def graphql_extensions(self) -> list[Callable[[], SchemaExtension]]:
        extensions: list[Callable[[], SchemaExtension]] = []
        if self.metrics:
            extensions.append(GraphQLMetrics)
        if self.tracer_provider is not None:
            from strawberry.extensions.tracing import OpenTelemetryExtension

            provider = self.tracer_provider
            extensions.append(lambda: OpenTelemetryExtension(tracer_provider=provider))
        return extensions

    def compiled_tracing(self) -> CompiledTracing | None:
        """Spans for queries the compiled read path answers (None when tracing is off)."""
        return CompiledTracing(self.tracer_provider) if self.tracer_provider is not None else None

    def instrument(self, services: Services) -> None:
        """Statement timings on the services' engine; embedder and index timings on semantic memory."""
        if self.metrics or self.tracer is not None:
            instrument_engine(services.repository.engine, self.tracer)
            if services.repository.read_engine is not None:  # SQLite's threaded reads
                instrument_engine(services.repository.read_engine, self.tracer)
            if services.semantic is not None:
                instrument_semantic(services.semantic, self.tracer)

    def shutdown(self) -> None:
        if self.tracer_provider is not None:
            with contextlib.suppress(Exception):
                self.tracer_provider.shutdown()
        if _MULTIPROCESS:
            from prometheus_client import multiprocess

            with contextlib.suppress(Exception):
                multiprocess.mark_process_dead(os.getpid())


class CompiledTracing:
    """The spans Strawberry's OpenTelemetryExtension makes, for queries the compiled read path
    answers (web/compiled.py), which runs no schema extension: without them a traced server showed
    GraphQL spans only for errors and cold queries, and every hot read's SQL hung from the HTTP span.
    The same names, kinds and attributes; no parse or validation spans (a compiled plan does neither).
    An operation the compiled path gives up on keeps its span, marked, beside the normal path's."""

    def __init__(self, provider: Any) -> None:
        from opentelemetry import trace
        from strawberry.extensions.tracing import OpenTelemetryExtension

        self._trace = trace
        self._extension = OpenTelemetryExtension(tracer_provider=provider)  # its tags for field spans
        self._tracer = trace.get_tracer("strawberry", tracer_provider=provider)

    @contextlib.contextmanager
    def operation(self, query: str, name: str | None) -> Iterator[CompiledOperation]:
        from opentelemetry.trace import SpanKind

        span = self._tracer.start_span(
            f"GraphQL Query: {name}" if name else "GraphQL Query", kind=SpanKind.SERVER
        )
        span.set_attribute("component", "graphql")
        span.set_attribute("query", query)
        try:
            yield CompiledOperation(self, span)
        finally:
            span.end()


class CompiledOperation:
    """One compiled operation's span; `field` opens a root field's span under it."""

    def __init__(self, tracing: CompiledTracing, span: Any) -> None:
        self._tracing = tracing
        self._span = span
        self._parent = tracing._trace.set_span_in_context(span)

    @contextlib.contextmanager
    def field(self, info: Any, args: dict[str, Any]) -> Iterator[None]:
        tracing = self._tracing
        with tracing._tracer.start_as_current_span(
            f"GraphQL Resolving: {info.field_name}", context=self._parent
        ) as span:
            tracing._extension.add_tags(span, info, args)
            yield

    def fell_back(self) -> None:
        self._span.set_attribute("recallql.compiled_fallback", True)


def _tag_request_id(span: Any, scope: Scope) -> None:
    request_id = scope.get(_SCOPE_KEY)
    if request_id and span is not None and span.is_recording():
        span.set_attribute("recallql.request_id", request_id)
