"""Shared test helpers: services on a real database, a real server process, a gql client, factories."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import getpass
import hashlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import httpx
import pytest
from gql import Client, GraphQLRequest
from gql.transport.exceptions import TransportQueryError
from gql.transport.httpx import HTTPXAsyncTransport
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import event

if TYPE_CHECKING:
    from resolvers.context import Services

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("RECALLQL_SHARED_DIR", REPO.parent / "shared"))
IN_CI = bool(os.environ.get("CI"))
MODEL_DIR = Path(os.environ.get("RECALLQL_EMBEDDING_MODEL_DIR") or SHARED / "models/all-MiniLM-L6-v2")
PG_ADMIN_DSN = os.environ.get("RECALLQL_TEST_PG_DSN", "postgresql://127.0.0.1:5432/test")


T = TypeVar("T")


async def eventually(
    check: Callable[[], Awaitable[T]], *, timeout: float, what: str, every: float = 0.1
) -> T:
    """Polls `check` until it returns something truthy; fails with its last value after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {value!r})")
        await asyncio.sleep(every)


def require(condition: bool, reason: str) -> None:
    """Skips on a developer machine that lacks a service; in CI a missing service is a failure."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)


@contextlib.asynccontextmanager
async def loop_ticks(interval: float = 0.001) -> AsyncIterator[list[int]]:
    """How often a task sleeping `interval` got to run while inside: [count], a free event loop's pulse."""
    count = [0]

    async def tick() -> None:
        while True:
            await asyncio.sleep(interval)
            count[0] += 1

    task = asyncio.create_task(tick())
    try:
        yield count
    finally:
        task.cancel()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------------------------------- embeddings
EMBED_SERVER = SHARED / "conformance/embed_server.py"


@functools.cache
def embed_reference() -> ModuleType:
    """embed_server.py as a module: its embed(), bucket() and tokens() are what the server computes."""
    spec = importlib.util.spec_from_file_location("recallql_test_embed_server", EMBED_SERVER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def embed_server_process(port: int = 0) -> Iterator[str]:
    """embed_server.py (deterministic hash-64 embeddings) in a child process; yields its base URL."""
    process = subprocess.Popen(
        [sys.executable, str(EMBED_SERVER), str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        chosen = process.stdout.readline().strip()
        assert chosen.isdigit(), f"embed_server.py did not print its port (exit code {process.poll()})"
        yield f"http://127.0.0.1:{chosen}"
    finally:
        process.terminate()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


def uid(prefix: str = "x") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


# ---------------------------------------------------------------------------------------------- databases
async def postgres_available() -> bool:
    try:
        import asyncpg

        conn = await asyncio.wait_for(asyncpg.connect(PG_ADMIN_DSN), 3)
        await conn.close()
        return True
    except Exception:
        return False


@contextlib.asynccontextmanager
async def database(kind: str, tmp_path: Path, *, icu_locale: str | None = None) -> AsyncIterator[str]:
    """A new, empty database of the given engine; dropped afterwards. `icu_locale` (PostgreSQL): the
    database's default collation, as managed PostgreSQL services often have (en_US) instead of C."""
    if kind == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'recallql-test.db'}"
        return
    import asyncpg

    require(await postgres_available(), f"PostgreSQL is not reachable at {PG_ADMIN_DSN}")
    name = f"recallql_test_{uuid.uuid4().hex[:16]}"
    admin = await asyncpg.connect(PG_ADMIN_DSN)
    try:
        if icu_locale is None:
            await admin.execute(f'CREATE DATABASE "{name}"')
        else:
            try:
                await admin.execute(
                    f'CREATE DATABASE "{name}" TEMPLATE template0 LOCALE_PROVIDER icu '
                    f"ICU_LOCALE '{icu_locale}' LOCALE 'C.UTF-8'"
                )
            except asyncpg.PostgresError as error:  # before PostgreSQL 15, or built without ICU
                require(False, f"PostgreSQL cannot make an ICU {icu_locale} database: {error}")
    finally:
        await admin.close()
    base = PG_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
    try:
        yield f"{base}/{name}"
    finally:
        admin = await asyncpg.connect(PG_ADMIN_DSN)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


def engines() -> list[str]:
    return [
        e.strip() for e in os.environ.get("RECALLQL_TEST_ENGINES", "sqlite,postgres").split(",") if e.strip()
    ]


@contextlib.contextmanager
def pgbouncer() -> Iterator[int]:
    """A PgBouncer in transaction mode in front of the test PostgreSQL; yields its port."""
    binary = shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.path.exists(p)), None
    )
    require(binary is not None, "pgbouncer is not installed (Debian: apt-get install pgbouncer)")
    assert binary is not None
    dsn = urlsplit(PG_ADMIN_DSN)
    port = free_port()
    # Its own folder, readable by the unprivileged user it must run as when the tests run as root.
    folder = Path(tempfile.mkdtemp(prefix="recallql-pgbouncer-"))
    folder.chmod(0o755)
    config = folder / "pgbouncer.ini"
    user = dsn.username or getpass.getuser()
    config.write_text(
        "[databases]\n"
        f"* = host={dsn.hostname or '127.0.0.1'} port={dsn.port or 5432} user={user}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        "auth_type = any\npool_mode = transaction\n"
        # Two server connections for a server whose pool holds many: consecutive transactions of one
        # client connection are served by different server connections.
        "default_pool_size = 2\nmax_client_conn = 500\n"
    )
    config.chmod(0o644)
    command = [binary, str(config)]
    if os.geteuid() == 0:  # PgBouncer refuses to run as root
        command = ["runuser", "-u", "nobody", "--", *command]
    log = (folder / "pgbouncer.log").open("w")
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, (folder / "pgbouncer.log").read_text()
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            assert time.monotonic() < deadline, "pgbouncer did not listen within 20 s"
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- server
@contextlib.asynccontextmanager
async def app_client(services: Any, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The real ASGI app (middleware, request ids, error policy, compiled path) on given services."""
    from web.app import create_app
    from web.settings import Settings

    app = create_app(Settings(**settings), services=services)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            yield client


async def vector_backlog(base_url: str) -> float:
    """A running server's queue of vector writes not yet applied (its /metrics gauge)."""
    async with httpx.AsyncClient(timeout=30) as client:
        text = (await client.get(f"{base_url}/metrics")).text
    for line in text.splitlines():
        if line.startswith("recallql_vector_outbox_backlog "):
            return float(line.split()[1])
    raise AssertionError("/metrics has no recallql_vector_outbox_backlog")


def chroma_child(server_pid: int) -> int:
    """The pid of a running server's embedded-Chroma child process."""
    for task in Path(f"/proc/{server_pid}/task").glob("*/children"):  # each thread lists its own
        for pid in task.read_text().split():
            if b"multiprocessing.spawn" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return int(pid)
    raise AssertionError("the server runs no Chroma child")


class ServerProcess:
    """`recallql serve` in a child process on a free loopback port."""

    def __init__(
        self,
        data_dir: Path,
        env: dict[str, str] | None = None,
        workers: int = 1,
        *,
        command: Sequence[str] = (sys.executable, "-m", "web.cli", "serve"),
        cwd: Path = REPO,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = data_dir / f"server-{self.port}.log"
        data_dir.mkdir(parents=True, exist_ok=True)
        full_env = {**os.environ, "RECALLQL_DATA_DIR": str(data_dir), **(env or {})}
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [*command, "--port", str(self.port), "--workers", str(workers)],
            cwd=cwd,
            env=full_env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float = 60, probe: str = "/readyz") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited:\n{self.log_path.read_text()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}{probe}", timeout=1).status_code == 200:
                    return
            time.sleep(0.1)
        raise TimeoutError(f"server not ready in {timeout}s:\n{self.log_path.read_text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@contextlib.contextmanager
def running_server(
    data_dir: Path, env: dict[str, str] | None = None, workers: int = 1
) -> Iterator[ServerProcess]:
    server = ServerProcess(data_dir, env, workers)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


# ------------------------------------------------------------------------------------------------- cli
def cli_command(*args: str, url: str, data_dir: Path) -> list[str]:
    return [sys.executable, "-m", "web.cli", *args, "--database-url", url, "--data-dir", str(data_dir)]


def cli_env(env: dict[str, str] | None = None) -> dict[str, str]:
    unset = ("RECALLQL_EMBEDDING_MODEL_DIR", "RECALLQL_EMBEDDINGS_URL", "RECALLQL_EMBEDDINGS_MODEL")
    return {**{k: v for k, v in os.environ.items() if k not in unset}, **(env or {})}


def cli(
    *args: str,
    url: str,
    data_dir: Path,
    env: dict[str, str] | None = None,
    stdin: bytes | None = None,
    succeeds: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """`recallql …` in a child process against the given database; returns the completed process."""
    proc = subprocess.run(
        cli_command(*args, url=url, data_dir=data_dir),
        env=cli_env(env),
        cwd=data_dir.parent,
        input=stdin,
        capture_output=True,
        timeout=600,
    )
    if succeeds:
        assert proc.returncode == 0, f"recallql {' '.join(args)} failed:\n{proc.stderr.decode()[-4000:]}"
    return proc


# ---------------------------------------------------------------------------------------------- chroma
def chroma_binary() -> str | None:
    beside_python = Path(sys.executable).parent / "chroma"
    return str(beside_python) if beside_python.is_file() else shutil.which("chroma")


@contextlib.contextmanager
def chroma_server_process(data_dir: Path) -> Iterator[str]:
    """`chroma run` on a free loopback port; yields its URL."""
    binary = chroma_binary()
    require(binary is not None, "the `chroma` executable (from chromadb) is not installed")
    assert binary is not None
    data_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
    with open(data_dir / "chroma.log", "wb") as log:
        process = subprocess.Popen(
            [binary, "run", "--path", str(data_dir / "db"), "--host", "127.0.0.1", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/api/v2/heartbeat", timeout=1).status_code == 200:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                output = (data_dir / "chroma.log").read_text(errors="replace")[-3000:]
                pytest.fail(f"chroma run did not come up (exit code {process.poll()}):\n{output}")
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


# ---------------------------------------------------------------------------------------------- client
class Api:
    """A gql client over real HTTP."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.client = Client(transport=HTTPXAsyncTransport(url=f"{base_url}/graphql", timeout=60))

    async def execute(self, query: str, **variables: Any) -> dict[str, Any]:
        return await self.client.execute_async(GraphQLRequest(query, variable_values=variables or None))

    async def errors(self, query: str, **variables: Any) -> list[dict[str, Any]]:
        """The errors of a request that must fail."""
        try:
            data = await self.client.execute_async(GraphQLRequest(query, variable_values=variables or None))
        except TransportQueryError as exc:
            assert exc.errors, exc
            return list(exc.errors)
        raise AssertionError(f"expected errors, got data {data}")


def text_message(
    *,
    thread_id: str,
    id: str | None = None,
    role: str = "user",
    text: str = "hello",
    created_at: str | None = None,
    metadata: dict[str, Any] | None = None,
    resource_id: str | None = None,
    parts: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    content: dict[str, Any] = {
        "format": 2,
        "parts": parts if parts is not None else [{"type": "text", "text": text}],
    }
    if metadata is not None:
        content["metadata"] = metadata
    message: dict[str, Any] = {"threadId": thread_id, "role": role, "content": content}
    if id is not None:
        message["id"] = id
    if created_at is not None:
        message["createdAt"] = created_at
    if resource_id is not None:
        message["resourceId"] = resource_id
    return message


def at(seconds: float) -> str:
    """2026-01-01T00:00:00Z + seconds, in the contract's ISO form."""
    from resolvers.clock import to_iso

    return to_iso(1767225600000 + round(seconds * 1000))


@contextlib.contextmanager
def statements(services: Services) -> Iterator[list[str]]:
    """Every SQL statement the repository's engines run meanwhile."""
    seen: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append(statement)

    repo = services.repository
    engines = [repo.engine.sync_engine, *([repo.read_engine] if repo.read_engine is not None else [])]
    for engine in engines:
        event.listen(engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", count)


def metric_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """The samples of a /metrics page: (name, labels, value)."""
    return [
        (s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def metric_value(text: str, name: str, **labels: str) -> float:
    """The sum of the samples called `name` whose labels include `labels` (0 when there is none)."""
    return sum(
        v
        for n, sample_labels, v in metric_samples(text)
        if n == name and all(sample_labels.get(k) == want for k, want in labels.items())
    )


def oracle_node_modules(tmp: Path) -> Path:
    """The conformance oracle's package cache, where oracle.sh installs Mastra's pinned packages (on first
    use, as in CI): what RECALL_ORACLE_NODE_MODULES names for the scripts that run the real Mastra (the
    import fixture, the resource-listing oracle, the Mastra halves of the benchmarks)."""
    node = shutil.which("node")
    require(node is not None, "node (>= 20) is not installed: the real Mastra cannot run")
    assert node is not None
    major = subprocess.run(
        [node, "-p", "process.versions.node.split('.')[0]"], capture_output=True, text=True
    )
    require(major.returncode == 0 and int(major.stdout.strip()) >= 20, "node >= 20 is required")
    conformance = SHARED / "conformance"
    lock = conformance / "package-lock.json"
    require(lock.is_file(), f"the conformance oracle is not at {conformance}")
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()[:16]
    cache_home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    cache = Path(os.environ.get("RECALL_ORACLE_CACHE") or cache_home / "recall-oracle") / digest
    if not (cache / ".complete").is_file():
        dataset = tmp / "empty-dataset.json"
        dataset.write_text('{"threads": [], "messages": [], "queries": []}')
        # Only the install matters here: oracle.mjs itself stops on an empty dataset (its store check
        # finds no tables), after the packages are in place.
        proc = subprocess.run(
            ["bash", str(conformance / "oracle.sh"), str(dataset), str(tmp / "oracle-out.json")],
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert (cache / ".complete").is_file(), (
            f"oracle.sh could not install the Mastra packages into {cache}:\n{proc.stderr[-3000:]}"
        )
    assert (cache / ".complete").is_file(), f"oracle.sh did not install into {cache}"
    return cache


def persisted(text: str, version: Any = 1) -> dict[str, Any]:
    """A request's extensions for a persisted query (APQ) of this text: its hash, no text."""
    return {"persistedQuery": {"version": version, "sha256Hash": hashlib.sha256(text.encode()).hexdigest()}}
