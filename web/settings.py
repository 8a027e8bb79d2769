"""Settings from RECALLQL_* environment variables and an optional .env file (pydantic-settings)."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

_URL_FORMS = "use sqlite+aiosqlite:///path/to/file.db or postgresql+asyncpg://user:password@host/database"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="RECALLQL_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        env_ignore_empty=True,
    )

    # Where the embedded defaults live: the SQLite file and the Chroma directory.
    data_dir: Path = Field(default=Path("recallql-data"))
    database_url: str | None = Field(
        default=None, description="SQLAlchemy async URL; default sqlite+aiosqlite:///<data_dir>/recallql.db"
    )
    db_pool_size: int = Field(default=10, ge=1)
    db_max_overflow: int = Field(default=10, ge=0)
    # PostgreSQL: seconds a new connection may take before the request fails with SERVICE_UNAVAILABLE.
    db_connect_timeout: float = Field(default=5.0, gt=0)
    # PostgreSQL through a pooler in transaction mode (PgBouncer, Supavisor): no prepared statements kept.
    db_transaction_pooler: bool = False
    # PostgreSQL: seconds a statement may wait for a lock before the request fails with
    # SERVICE_UNAVAILABLE, where the role and database set no lock_timeout; 0 waits as they say.
    db_lock_timeout: float = Field(default=30.0, ge=0, le=2_147_483)  # PostgreSQL's bound, in seconds
    # PostgreSQL: seconds a statement may take, round trip, before the request fails with
    # SERVICE_UNAVAILABLE and its connection is dropped; 0 waits for ever. Migrations are not bounded.
    db_command_timeout: float = Field(default=60.0, ge=0)
    auto_migrate: bool = True

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    workers: int = Field(default=1, ge=1, le=256)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    debug: bool = False

    # Observability (web/observability.py): log lines as text or JSON objects, one access line per
    # request, Prometheus metrics at /metrics, OpenTelemetry spans over OTLP/HTTP when an endpoint is set
    # (here or in the standard OTEL_EXPORTER_OTLP_ENDPOINT).
    log_format: Literal["text", "json"] = "text"
    access_log: bool = True
    metrics: bool = True
    otel_endpoint: str | None = None

    # Server-wide memory defaults; a call's threadConfig is deep-merged over them.
    last_messages: Annotated[int, Field(ge=0)] | Literal[False] = 10
    semantic_recall: bool | dict[str, Any] = False
    working_memory: dict[str, Any] = Field(default_factory=lambda: {"enabled": False})
    generate_title: bool | dict[str, Any] = False

    # Semantic recall: the embedder (a local ONNX model folder, or an OpenAI-compatible endpoint) and
    # the vector index (embedded Chroma under the data dir, or a Chroma server). `embedder` off: no
    # semantic recall even where a model folder would be found (nothing embedded, no index opened).
    embedder: Literal["auto", "off"] = "auto"
    embedding_model_dir: Path | None = None
    # The local model's name in the index (unset: all-MiniLM-L6-v2 when the folder holds it, else a
    # name from its file's hash): vectors of differently named models never meet.
    embedding_model_name: str | None = Field(default=None, min_length=1, max_length=64)
    embeddings_url: str | None = None
    embeddings_model: str | None = None
    embeddings_api_key: str | None = None
    embeddings_dimension: int | None = Field(default=None, ge=1)
    # Requests to the embeddings endpoint in flight at once, across every search, save and re-index of
    # the process (a re-index sends its batches side by side up to this bound).
    embeddings_concurrency: int = Field(default=4, ge=1, le=256)
    # Texts per request (an endpoint that takes fewer answers 400 or 413, and the request is halved
    # until it takes it, at the cost of the refused requests), and seconds per request (a timed-out
    # request is retried twice, like a 5xx).
    embeddings_batch: int = Field(default=256, ge=1, le=8192)
    embeddings_timeout: float = Field(default=60.0, gt=0)
    # The local model's threads: 1 runs one batch at a time on every core (lowest query latency); N
    # runs N batches at once on one core each (more throughput for bulk ingest, slower lone queries).
    embedding_workers: int = Field(default=1, ge=1, le=64)
    chroma_url: str | None = None
    # The Chroma server's database RecallQL keeps its collections in (created when missing): one per
    # deployment sharing a server. Unset: the server's default database.
    chroma_database: str | None = Field(
        default=None, pattern=r"^[a-zA-Z0-9][a-zA-Z0-9._-]{1,510}[a-zA-Z0-9]$"
    )
    # Seconds a request to the Chroma server may take (connecting: at most 5) before it counts as failed;
    # with embedded Chroma's child process, a search or a write (models/chroma_process.py).
    chroma_timeout: float = Field(default=30.0, gt=0)
    # Embedded Chroma in a child process (models/chroma_process.py): its writes hold the GIL, which
    # there stalls neither the requests nor the embedder (read p99 during ingest about halved).
    chroma_process: bool = True
    # How many resources' vector indexes embedded Chroma keeps loaded (about 3 MB each, more for large
    # resources); unset: as many as a quarter of the memory holds (models/vector_index.py).
    chroma_cached_indexes: int | None = Field(default=None, ge=1)
    # Both above 0: an interval of 0 made the drainer spin (a core at 100% on an idle server).
    vector_drain_interval: float = Field(default=1.0, gt=0)
    vector_sync_timeout: float = Field(default=10.0, gt=0)
    # wait: a save answers once its vectors are written (Mastra's behaviour); background: once SQL has
    # committed, with the vectors written right after (searches in the same process wait for them).
    vector_writes: Literal["wait", "background"] = "wait"
    # Messages the write pipeline embeds and writes at once: larger batches mean fewer Chroma calls
    # under load (each call costs several ms on top of its vectors); light traffic never fills them.
    # At most 8,192: a batch's message ids are bound one per parameter in single statements (PostgreSQL
    # takes 32,767), and a merged write settles several batches' outbox entries.
    vector_batch: int = Field(default=1024, ge=1, le=8192)

    # Title generation: an OpenAI-compatible chat endpoint (else a deterministic heuristic).
    chat_url: str | None = None
    chat_model: str | None = None
    chat_api_key: str | None = None
    chat_timeout: float = Field(default=30.0, gt=0)

    # Live updates: Redis pub/sub fans events out across processes (else in-process only).
    redis_url: str | None = None
    redis_prefix: str = "recallql:"

    # Answer supported read queries through the compiled path (identical results, less CPU).
    compiled_reads: bool = True

    # Automatic persisted queries (web/persisted.py): query texts by hash, in an LRU of this many
    # characters; with redis_url also in Redis for this many seconds, shared by every replica.
    persisted_queries: bool = True
    persisted_queries_cache_chars: int = Field(default=8 * 1024 * 1024, ge=1)
    persisted_queries_ttl: int = Field(default=7 * 24 * 3600, ge=1)

    # Authentication (web/auth.py; README "Authentication"): "auto" is off on a loopback host and
    # required otherwise. Bearer tokens are API keys (stored as sha256 hex) or JWTs.
    auth: Literal["auto", "required", "off"] = "auto"
    api_keys: list[dict[str, Any]] = Field(default_factory=list)  # [{name, sha256, resources | admin}]
    # Origins of browser apps on other sites that may call /graphql (CORS) and open its WebSocket; none:
    # only pages of this server's own origin may. "*": any (only with authentication on).
    cors_origins: list[str] = Field(default_factory=list)
    jwt_secret: str | None = None  # HS256
    jwt_jwks_file: Path | None = None  # RS256, keys from a JWKS file
    jwt_jwks_url: str | None = None  # RS256, keys from a JWKS endpoint (cached)
    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    jwt_resource_claim: str = "sub"
    jwt_admin_claim: str | None = None
    jwt_leeway: float = Field(default=0.0, ge=0)  # seconds of clock skew allowed on exp / nbf / iat
    # A JWT must then carry an `exp` at most this many seconds ahead: no token lasts forever (a leaked one
    # included), whatever its issuer put in it. None: `exp` is checked when present.
    jwt_max_lifetime: float | None = Field(default=None, gt=0)

    # Limits. Counts and sizes are at least 1 (0 where "none" makes sense), times above 0: a negative
    # body limit refused every request, a negative page size failed every recall.
    max_query_depth: int = Field(default=12, ge=1)
    max_query_tokens: int = Field(default=5000, ge=1)
    max_query_chars: int = Field(
        default=262_144, ge=1
    )  # query document length (lexing a long comment costs ~0.15 s a MB)
    max_aliases: int = Field(default=30, ge=0)
    max_include_items: int = Field(default=100, ge=0)
    # At most 10,000: PostgreSQL takes one advisory lock per thread a save touches, and its lock table
    # (max_locks_per_transaction x max_connections, 6,400 by default, with slack) ran out at about 15,000.
    max_save_batch: int = Field(default=1000, ge=1, le=10_000)
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1)
    body_timeout: float = Field(default=30.0, gt=0)  # seconds a request body may take to arrive
    # Seconds a message's latest change is kept, for subscriptions resumed with changedSince (0: none).
    change_retention: float = Field(default=0.0, ge=0, le=365 * 86_400)
    header_timeout: float = Field(default=10.0, gt=0)  # seconds request headers may take (web/protocol.py)
    max_per_page: int = Field(
        default=1000, ge=1
    )  # recall / threads perPage (and lastMessages as a page size)
    max_all_rows: int = Field(
        default=10_000, ge=1
    )  # rows a `perPage: false` recall (or threads listing) may return
    max_request_rows: int = Field(
        default=20_000, ge=1
    )  # messages and threads one request may read across its fields (aliases repeat a field)
    max_entities: int = Field(default=1000, ge=1)  # representations per federation `_entities` call
    max_thread_recalls: int = Field(default=100, ge=0)  # Thread.recall fields per request
    max_search_chars: int = Field(default=16_384 * 4, ge=1)  # vectorSearchString length
    max_subscriptions_per_connection: int = Field(default=16, ge=1)  # operations at once on one WebSocket
    introspection: bool = True  # __schema / __type (GraphiQL needs them)

    @model_validator(mode="after")
    def _pairs(self) -> Settings:
        # Checked with the others, before anything starts: a server's workers used to fail one by one
        # as each built its services.
        for url, model in (("chat_url", "chat_model"), ("embeddings_url", "embeddings_model")):
            if getattr(self, url) and not getattr(self, model):
                raise ValueError(f"RECALLQL_{model.upper()} is required with RECALLQL_{url.upper()}")
        if 0 < self.db_command_timeout <= self.db_lock_timeout:
            # The statement would be cut as "unreachable" before its lock wait ended with its own error.
            raise ValueError(
                f"RECALLQL_DB_COMMAND_TIMEOUT ({self.db_command_timeout:g} s) must be longer than "
                f"RECALLQL_DB_LOCK_TIMEOUT ({self.db_lock_timeout:g} s)"
            )
        if self.chroma_database is not None and not self.chroma_url:
            raise ValueError(
                "RECALLQL_CHROMA_DATABASE names a database of the Chroma server (RECALLQL_CHROMA_URL)"
            )
        embedded_chroma = self.embedder != "off" and not self.chroma_url
        if embedded_chroma and self.chroma_path.exists() and not self.chroma_path.is_dir():
            # Else a traceback from serve, and "the database cannot be reached" from the other commands.
            raise ValueError(
                f"RECALLQL_DATA_DIR: {self.chroma_path} is a file; the embedded Chroma index is that folder"
            )
        if self.embedder != "off" and not self.embeddings_url and self.embedding_model_dir is not None:
            # The folder the ONNX embedder will read (web/wiring.py): a wrong one was a traceback from
            # every worker as it started (exit 3), and from `reindex` and the imports.
            for required in ("model.onnx", "tokenizer.json"):
                if not (self.embedding_model_dir / "onnx" / required).is_file():
                    raise ValueError(
                        f"RECALLQL_EMBEDDING_MODEL_DIR: {self.embedding_model_dir} holds no onnx/{required} "
                        "(it must be the folder that contains onnx/, as in all-MiniLM-L6-v2's download)"
                    )
        return self

    @model_validator(mode="after")
    def _memory_config(self) -> Settings:
        # Checked as a request's config is: a default no request could run with was accepted, and then
        # every save (a bad generateTitle), recall or working-memory call failed as the client's error.
        from resolvers.errors import BadUserInput
        from resolvers.recall import check_semantic_config
        from resolvers.titles import title_options
        from resolvers.working_memory import working_memory_config

        merged = self.memory_defaults()
        checks: tuple[tuple[str, Callable[[], object]], ...] = (
            ("RECALLQL_SEMANTIC_RECALL", lambda: check_semantic_config(merged.get("semanticRecall"))),
            ("RECALLQL_WORKING_MEMORY", lambda: working_memory_config(merged)),
            ("RECALLQL_GENERATE_TITLE", lambda: title_options(merged)),
        )
        for setting, check in checks:
            try:
                check()
            except BadUserInput as exc:
                raise ValueError(f"{setting}: {exc.message}") from None
        return self

    @field_validator("embeddings_url", "chroma_url", "chat_url", "jwt_jwks_url", "otel_endpoint")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        # Else accepted, and every embedding, search, title or token check failed on it later (a server
        # with a Chroma "URL" without a scheme started and reported itself ready).
        if value is not None and not _is_http_url(value):
            raise ValueError("not an http:// or https:// URL with a host (and a numeric port, if any)")
        return value

    @field_validator("cors_origins")
    @classmethod
    def _cors_origins(cls, value: list[str]) -> list[str]:
        # An origin is scheme://host[:port]: a path or a trailing slash never matches the browser's
        # Origin header, and such an entry silently allowed nothing.
        for origin in value:
            if origin != "*" and (not _is_http_url(origin) or urlsplit(origin).path or "?" in origin):
                raise ValueError(f"{origin!r} is not an origin (scheme://host[:port], no path) or *")
        return [origin.lower() for origin in value]

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        # Else every worker failed as it started, a traceback each (exit 3).
        if value is not None and urlsplit(value).scheme not in ("redis", "rediss", "unix"):
            raise ValueError("not a redis://, rediss:// or unix:// URL")
        if value is not None:
            try:
                urlsplit(value).port  # noqa: B018 - raises for a port that is not a number in range
            except ValueError:
                raise ValueError("its port is not a number from 0 to 65535") from None
        return value

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str | None) -> str | None:
        # Checked here so that a URL of another driver is one line naming the setting, not an import
        # error from deep inside SQLAlchemy (postgresql:// loads psycopg, which is not installed).
        if value is None:
            return value
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            parsed = make_url(value)
        except ArgumentError:
            raise ValueError(f"not a database URL; {_URL_FORMS}") from None
        driver = parsed.drivername
        if driver in ("postgresql", "postgres"):
            # The form providers hand out (postgres:// from Heroku and its heirs): asyncpg is the driver.
            driver = "postgresql+asyncpg"
            value = parsed.set(drivername=driver).render_as_string(hide_password=False)
        if driver not in ("sqlite+aiosqlite", "postgresql+asyncpg"):
            raise ValueError(f"the driver {driver!r} is not supported; {_URL_FORMS}")
        if driver == "sqlite+aiosqlite":
            from models.db import sqlite_busy_timeout

            database = parsed.database or ""
            if database in ("", ":memory:") or "mode=memory" in database:
                # Each connection would see its own empty database: migrations "applied" to one that
                # vanished, and a server that found nothing migrated.
                raise ValueError("an in-memory SQLite database keeps nothing; name a file")

            try:
                busy = sqlite_busy_timeout(value)
            except ValueError:
                busy = math.nan
            if not (math.isfinite(busy) and busy > 0):
                raise ValueError(
                    "the URL's timeout (seconds a write waits for the lock) must be a number above 0"
                )
        if driver == "postgresql+asyncpg":
            from models.db import postgres_url_problem, supported_parameters, unsupported_parameters

            problem = postgres_url_problem(value)
            if problem is not None:
                raise ValueError(problem)

            # Else every connection failed with "connect() got an unexpected keyword argument", a
            # traceback from each command and worker.
            unknown = unsupported_parameters(value)
            if unknown:
                hint = (
                    "; for connect_timeout set RECALLQL_DB_CONNECT_TIMEOUT"
                    if "connect_timeout" in unknown
                    else ""
                )
                raise ValueError(
                    f"the URL parameter(s) {', '.join(unknown)} are not supported by asyncpg, which takes "
                    f"{', '.join(supported_parameters())}{hint}"
                )
        return value

    @field_validator("data_dir")
    @classmethod
    def _data_dir(cls, value: Path) -> Path:
        # Else every command failed on mkdir, reported as an unreachable database ("File exists").
        if value.exists() and not value.is_dir():
            raise ValueError(f"{value} is a file, not a folder")
        return value

    @field_validator("last_messages", mode="before")
    @classmethod
    def _last_messages(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() == "false":
            return False
        return value

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{(self.data_dir / 'recallql.db').resolve()}"

    def engine_options(self) -> dict[str, Any]:
        """models.db.create_engine's options for the configured database."""
        return {
            "pool_size": self.db_pool_size,
            "max_overflow": self.db_max_overflow,
            "connect_timeout": self.db_connect_timeout,
            "transaction_pooler": self.db_transaction_pooler,
            "lock_timeout": self.db_lock_timeout,
            "command_timeout": self.db_command_timeout,
        }

    @property
    def chroma_path(self) -> Path:
        return self.data_dir / "chroma"

    def resolved_model_dir(self) -> Path | None:
        """The configured model folder, else the first standard place that holds the model."""
        if self.embedding_model_dir is not None:
            return self.embedding_model_dir
        for candidate in (
            self.data_dir / "models" / "all-MiniLM-L6-v2",
            Path.home() / ".cache" / "chroma" / "onnx_models" / "all-MiniLM-L6-v2",
        ):
            if (candidate / "onnx" / "model.onnx").is_file():
                return candidate
        return None

    def memory_defaults(self) -> dict[str, Any]:
        from resolvers.config import BUILTIN_DEFAULTS, deep_merge

        return deep_merge(
            BUILTIN_DEFAULTS,
            {
                "lastMessages": self.last_messages,
                "semanticRecall": self.semantic_recall,
                "workingMemory": self.working_memory,
                "generateTitle": self.generate_title,
            },
        )


@lru_cache
def get_settings() -> Settings:
    return Settings()


def _is_http_url(value: str) -> bool:
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises for a port that is not a number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)
