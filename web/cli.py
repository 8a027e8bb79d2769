"""The `recallql` command: serve, migrate, import and export, and the vector index's maintenance."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import signal
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from pydantic import ValidationError
from pydantic_settings import SettingsError

from web.settings import Settings, get_settings

if TYPE_CHECKING:  # imported where used: `recallql serve` need not load them
    import uvicorn
    from rich.progress import Progress
    from sqlalchemy.ext.asyncio import AsyncEngine

    from models.migrate import SchemaState
    from models.repository import Repository
    from resolvers.semantic import SemanticMemory


def _given(value: str) -> str:
    """An option's value, refused when empty: `--database-url "$URL"` with $URL unset silently used the
    local SQLite file, and `--data-dir ""` the current folder."""
    if not value.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return value


def _folder(value: str) -> Path:
    return Path(_given(value))


def _apply_overrides(args: argparse.Namespace) -> Settings:
    """Command-line options become RECALLQL_* variables so that every worker process sees them, and so
    that they are checked as those are (`--port 99999` listened on 34463, `--workers -1` started)."""
    for option, env in (
        ("data_dir", "RECALLQL_DATA_DIR"),
        ("database_url", "RECALLQL_DATABASE_URL"),
        ("port", "RECALLQL_PORT"),
        ("workers", "RECALLQL_WORKERS"),
    ):
        value = getattr(args, option, None)
        if value is not None:
            os.environ[env] = str(value)
    get_settings.cache_clear()
    return get_settings()


def _create_engine(settings: Settings) -> AsyncEngine:
    from models.db import create_engine, is_sqlite

    url = settings.resolved_database_url
    if is_sqlite(url):  # a first command on a fresh machine may come before the server ever ran
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        _check_sqlite_folder(url)
    return create_engine(url, **settings.engine_options())


@contextlib.asynccontextmanager
async def _repository(settings: Settings, *, existing: bool = False) -> AsyncIterator[Repository]:
    """The configured database (migrated unless RECALLQL_AUTO_MIGRATE=false), closed on the way out.
    `existing`: for commands that read what is stored, a SQLite file must already be there: a mistyped
    --data-dir made a new, empty store, and `export` a backup of nothing, with exit status 0."""
    from models.migrate import upgrade
    from models.repository import Repository

    if existing:
        _check_sqlite_exists(settings.resolved_database_url)
    engine = _create_engine(settings)
    try:
        if settings.auto_migrate:
            await upgrade(engine)
        repository = Repository(engine)
        try:
            yield repository
        finally:
            repository.close()
    finally:
        await engine.dispose()


async def _migrate(settings: Settings) -> SchemaState:
    from models.migrate import upgrade

    engine = _create_engine(settings)
    try:
        return await upgrade(engine)
    finally:
        await engine.dispose()


def cmd_migrate(args: argparse.Namespace) -> int:
    settings = _apply_overrides(args)
    state = asyncio.run(_migrate(settings))
    if state.newer:
        print(f"migrate: nothing applied: {state.describe()}", file=sys.stderr)  # noqa: T201
        return 1
    applied = state.pending
    print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'none pending'}")  # noqa: T201
    return 0


@contextlib.asynccontextmanager
async def _semantic_memory(settings: Settings, command: str) -> AsyncIterator[SemanticMemory]:
    """The configured semantic memory over the configured database, for a maintenance command."""
    from models.embedders import EmbeddingError
    from models.vector_index import VectorIndexError
    from web.wiring import build_semantic, has_embedder

    why = "RECALLQL_EMBEDDER=off" if settings.embedder == "off" else "see RECALLQL_EMBEDDING_MODEL_DIR"
    unconfigured = SystemExit(f"{command}: no embedder is configured ({why})")
    if not has_embedder(settings):  # said first: no database would change that
        raise unconfigured
    async with _repository(settings, existing=True) as repository:
        semantic = build_semantic(settings, repository)
        if semantic is None:
            raise unconfigured
        try:
            yield semantic
        # The directory is busy, the Chroma server or the embeddings endpoint is down: say so, no traceback.
        except (VectorIndexError, EmbeddingError) as exc:
            raise SystemExit(f"{command}: {exc}") from None
        finally:
            await semantic.aclose()


def _progress(label: str) -> Progress:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())


async def _reindex(settings: Settings, resource_id: str | None, rebuild: bool) -> int:
    async with _semantic_memory(settings, "reindex") as semantic:
        total = await semantic.repository.count_all_messages(resource_id)
        with _progress("embedding") as progress:
            task = progress.add_task("messages", total=total)
            done = await semantic.reindex(
                resource_id=resource_id, on_progress=lambda n: progress.advance(task, n), rebuild=rebuild
            )
        # HNSW leaves a few records of a fresh or rewritten graph out of every search's reach (about 1
        # in 2,000 near-alike texts); written again one by one, they are linked in.
        with _progress("linking") as progress:
            task = progress.add_task("resources", total=None)
            still = await semantic.relink(
                None if resource_id is None else [resource_id],
                on_progress=lambda n, of: progress.update(task, completed=n, total=of),
            )
        for resource, lost in still.items():
            reach = f"resource {resource!r}: still out of search's reach: {_some(sorted(lost))}"
            print(reach, file=sys.stderr)  # noqa: T201
        return done


def cmd_reindex(args: argparse.Namespace) -> int:
    settings = _apply_overrides(args)
    done = asyncio.run(_reindex(settings, args.resource, args.rebuild))
    print(f"re-indexed {done} message(s)")  # noqa: T201
    return 0


async def _check_index(settings: Settings, resource_id: str | None, repair: bool) -> bool:
    async with _semantic_memory(settings, "check-index") as semantic:
        with _progress("checking") as progress:
            task = progress.add_task("resources", total=None)
            checks = await semantic.check(
                resource_id=resource_id,
                on_progress=lambda done, total: progress.update(task, completed=done, total=total),
            )
        broken = [c for c in checks if not c.ok]
        for c in broken:
            print(  # noqa: T201
                f"resource {c.resource_id!r}: "
                + ("damaged, cannot be read; " if c.damaged else f"{c.vectors} vector(s); ")
                + f"missing {_some(c.missing)}, stray {_some(c.stray)}, unreachable {_some(c.unreachable)}"
            )
        print(f"checked {len(checks)} resource(s): {len(broken)} not in line with the database")  # noqa: T201
        if not broken or not repair:
            return not broken
        repaired = await semantic.repair(broken)
        again = [
            c
            for r in repaired
            for c in await semantic.check(resource_id=r, without_resource=r is None)
            if not c.ok
        ]
        print(  # noqa: T201
            f"repaired {len(repaired)} resource(s); {len(again)} still not in line with the database"
        )
        return not again


def _some(message_ids: list[str]) -> str:
    shown = ", ".join(message_ids[:5])
    more = f", ... ({len(message_ids)} in all)" if len(message_ids) > 5 else ""
    return f"{len(message_ids)}" + (f" ({shown}{more})" if message_ids else "")


def cmd_check_index(args: argparse.Namespace) -> int:
    settings = _apply_overrides(args)
    return 0 if asyncio.run(_check_index(settings, args.resource, args.repair)) else 1


def _exit_cleanly(_signum: int, _frame: object) -> None:
    raise SystemExit(0)


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    multiprocess_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if multiprocess_dir:
        # prometheus-client's multiprocess files must not outlive the processes that wrote them. Cleared
        # before web.observability is imported: its metrics open this process's files as it loads, and
        # a single worker runs in this process (its request counters went to deleted files).
        for stale in Path(multiprocess_dir).glob("*.db"):
            stale.unlink()
    settings = _apply_overrides(args)
    host = args.host or settings.host
    # The workers decide whether authentication is on from the bind host (RECALLQL_AUTH=auto).
    os.environ["RECALLQL_HOST"] = host
    get_settings.cache_clear()
    settings = get_settings()
    port, workers = settings.port, settings.workers
    from web.auth import Authenticator
    from web.wiring import has_embedder

    if workers > 1 and not settings.chroma_url and has_embedder(settings):
        # Each worker would open the embedded Chroma directory, which one process at a time may use
        # (Chroma's PersistentClient is not process-safe: lost writes, indexes out of step).
        raise SystemExit(
            f"serve: {workers} workers cannot share the embedded Chroma directory ({settings.chroma_path}); "
            "set RECALLQL_CHROMA_URL to a Chroma server (`chroma run`), or run one worker"
        )
    try:
        # What every worker would refuse as it builds the app, refused once, here: uvicorn's supervisor
        # restarted workers that failed so, forever.
        Authenticator(settings)
    except ValueError as exc:
        print(f"recallql: setting not valid: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    from web.observability import configure_logging

    configure_logging(settings.log_level, settings.log_format, access_log_enabled=settings.access_log)
    log = logging.getLogger("recallql")
    if workers > 1 and not settings.redis_url:
        log.warning(
            "%d workers without RECALLQL_REDIS_URL: a subscription sees only the changes made through "
            "its own worker; set RECALLQL_REDIS_URL for subscriptions across workers",
            workers,
        )
    from models.db import is_sqlite

    if is_sqlite(settings.resolved_database_url):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        _check_sqlite_folder(settings.resolved_database_url)  # also when the workers will not migrate
        if not settings.auto_migrate or args.no_migrate:
            _check_sqlite_file(settings.resolved_database_url)
    if settings.auto_migrate and not args.no_migrate:
        from models.migrate import log_state

        log_state(asyncio.run(_migrate(settings)), migrated=True)
    # Migrations ran once, here; the workers must not race each other doing it again.
    os.environ["RECALLQL_AUTO_MIGRATE"] = "false"
    get_settings.cache_clear()  # a single worker runs in this process: it must see the variables above
    log.info(
        "RecallQL on http://%s:%s/graphql (database %s, %s worker(s))",
        host,
        port,
        _redact(settings.resolved_database_url),
        workers,
    )
    # uvicorn's own logging configuration is left out (log_config=None): its lines go through ours, in
    # RECALLQL_LOG_FORMAT (the supervisor's were plain text under json).
    config = uvicorn.Config(
        "web.app:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=settings.log_level,
        log_config=None,
        timeout_graceful_shutdown=30,
        # A WebSocket frame is bounded like a request body (uvicorn's default: 16 MiB).
        ws_max_size=settings.max_body_bytes,
        http="web.protocol:HeaderDeadlineProtocol",  # by path: each worker builds it
    )
    if workers > 1:
        return _supervise(config)
    # Once its graceful shutdown is done (in-flight requests finished, the lifespan closed), uvicorn
    # re-raises the signal that stopped it. A SIGTERM-requested shutdown is a clean exit (status 0), as
    # it is under the supervisor of several workers.
    signal.signal(signal.SIGTERM, _exit_cleanly)
    config.load_app()
    server = uvicorn.Server(config)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: shut down, as uvicorn.run does
        server.run()
    return 0 if server.started else _STARTUP_FAILURE


def _supervise(config: uvicorn.Config) -> int:
    """uvicorn.run's supervisor for several workers, with its exit status: a worker that fails to start
    stops them all, and uvicorn.run then returned as if they had been stopped on purpose (status 0)."""
    from uvicorn.supervisors import Multiprocess

    supervisor = Multiprocess(config, sockets=[config.bind_socket()])
    supervisor.run()
    failed = any(process.exitcode == _STARTUP_FAILURE for process in supervisor.processes)
    return _STARTUP_FAILURE if failed else 0


_STARTUP_FAILURE = 3  # uvicorn's status for a server that never started (uvicorn.main.STARTUP_FAILURE)


# ------------------------------------------------------------------ import / export (resolvers.transfer)
class _ProgressBars:
    """resolvers.transfer.ProgressHook as rich progress bars, one per table, on stderr (stdout may be
    carrying an export)."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        columns = (
            TextColumn("{task.description:<10}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
        )
        self.progress = Progress(*columns, console=Console(stderr=True))
        self.tasks: dict = {}

    def start(self, kind: str, total: int | None) -> None:
        self.tasks[kind] = self.progress.add_task(kind, total=total)

    def advance(self, kind: str, n: int) -> None:
        self.progress.advance(self.tasks[kind], n)


async def _import(settings: Settings, args: argparse.Namespace) -> list[str]:
    if not 1 <= args.batch_size <= _MAX_IMPORT_BATCH:
        # Past a C int the Mastra readers' fetch sizes were a traceback (OverflowError).
        raise SystemExit(f"import: --batch-size must be from 1 to {_MAX_IMPORT_BATCH:,}")
    async with _repository(settings) as repository:
        return await _import_into(repository, settings, args)


async def _import_into(repository: Repository, settings: Settings, args: argparse.Namespace) -> list[str]:
    from models.mastra_source import MastraSourceError, open_mastra_source
    from resolvers.transfer import TransferError, embed_pending, import_jsonl, import_mastra

    semantic = None
    if not args.no_embed:
        from web.wiring import build_semantic  # loads the vector store client: only when it is needed

        semantic = build_semantic(settings, repository)
    notes: list[str] = []
    try:
        bars = _ProgressBars()
        with bars.progress:
            if args.format == "mastra":
                source = await open_mastra_source(args.source, schema=args.schema)
                try:
                    report = await import_mastra(
                        repository,
                        source,
                        batch=args.batch_size,
                        track_vectors=semantic is not None,
                        progress=bars,
                    )
                finally:
                    await source.aclose()
            else:
                stream = sys.stdin.buffer if args.source == "-" else open(args.source, "rb")  # noqa: SIM115
                try:
                    bars.start("bytes", None if args.source == "-" else os.fstat(stream.fileno()).st_size)
                    report = await import_jsonl(
                        repository,
                        stream,
                        batch=args.batch_size,
                        track_vectors=semantic is not None,
                        on_bytes=lambda n: bars.advance("bytes", n),
                    )
                finally:
                    if stream is not sys.stdin.buffer:
                        stream.close()
            # A running server's cached plans would otherwise treat the filled tables as the small ones
            # they were, until autovacuum analyzes them.
            await repository.refresh_statistics()
            if semantic is not None:
                bars.start("embedding", await repository.outbox_backlog())
                try:
                    await embed_pending(semantic, lambda n: bars.advance("embedding", n))
                except Exception as exc:  # the outbox keeps the work: the server's drain finishes it
                    notes.append(
                        f"embedding stopped ({exc!r}); {await repository.outbox_backlog()} message(s) stay "
                        "queued in the vector outbox for the server's drain or `recallql reindex`"
                    )
    except (MastraSourceError, TransferError, OSError) as exc:
        raise SystemExit(f"import: {exc}") from exc
    finally:
        if semantic is not None:
            await semantic.aclose()
    if args.no_embed:
        notes.append("vectors not built (--no-embed): run `recallql reindex` for semantic recall")
    elif semantic is None:
        notes.append("no embedder configured: vectors not built (configure one, then `recallql reindex`)")
    return report.lines() + notes


_MAX_IMPORT_BATCH = 1_000_000


def cmd_import(args: argparse.Namespace) -> int:
    settings = _apply_overrides(args)
    for line in asyncio.run(_import(settings, args)):
        print(line)  # noqa: T201
    return 0


async def _export(settings: Settings, args: argparse.Namespace) -> dict[str, int]:
    from resolvers.transfer import ExportWriteError, export_jsonl

    async with _repository(settings, existing=True) as repository:
        target = None if args.out in (None, "-") else Path(args.out)
        # A file is written aside and renamed at the end: a failed export never leaves a truncated file.
        # A link is followed (its file is replaced, not the link); a device or a pipe (/dev/stdout, a
        # FIFO) is written directly: a rename would replace it with a plain file.
        partial = None
        if target is not None and (target.is_file() or not target.exists()):
            target = Path(os.path.realpath(target))
            partial = target.with_name(target.name + ".partial")
        out: BinaryIO
        try:
            if partial is not None:
                out = _aside(partial, target)
            elif target is not None:
                out = target.open("wb")
            else:
                out = sys.stdout.buffer
        except OSError as exc:
            raise ExportWriteError(exc) from None
        try:
            bars = _ProgressBars()
            with bars.progress:
                counts = await export_jsonl(repository, out.write, resource_id=args.resource, progress=bars)
            try:
                out.flush()  # a full disk may show only here, when the buffer goes out
                if out is not sys.stdout.buffer:
                    out.close()
                if partial is not None and target is not None:
                    partial.replace(target)
            except OSError as exc:
                raise ExportWriteError(exc) from None
        finally:
            if out is not sys.stdout.buffer:
                with contextlib.suppress(OSError):  # its error, if any, is already on its way
                    out.close()
            if partial is not None:
                partial.unlink(missing_ok=True)
    return counts


def _aside(partial: Path, target: Path | None) -> BinaryIO:
    """The file an export is written to before it replaces `target`: with the mode (and, where this
    user may set it, the group) of a `target` that exists, so that replacing an owner-only export
    does not leave every conversation readable by everyone."""
    existing = target.stat() if target is not None and target.exists() else None
    # Owner-only until the mode is set, when it replaces a file; else as the umask says, like open().
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if existing else 0o666)
    out = os.fdopen(fd, "wb")
    try:
        if existing is not None:
            os.fchmod(fd, stat.S_IMODE(existing.st_mode))
            with contextlib.suppress(PermissionError):  # a group this user is not in: the mode stays
                os.fchown(fd, -1, existing.st_gid)
    except BaseException:
        out.close()
        raise
    return out


def cmd_export(args: argparse.Namespace) -> int:
    from resolvers.transfer import ExportWriteError

    settings = _apply_overrides(args)
    where = "stdout" if args.out in (None, "-") else args.out
    try:
        counts = asyncio.run(_export(settings, args))
    except ExportWriteError as exc:
        error = exc.error
        if isinstance(error, BrokenPipeError):
            # The reader went away (`recallql export | head`): quiet, as other tools are, and no second
            # error when Python flushes stdout on the way out.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        print(f"export: cannot write {where}: {error.strerror or error}", file=sys.stderr)  # noqa: T201
        return 1
    summary = ", ".join(f"{n} {kind}(s)" for kind, n in counts.items())
    print(f"exported {summary}", file=sys.stderr)  # noqa: T201
    if args.resource is not None and not any(counts.values()):
        print(f"export: nothing found for resource {args.resource!r}", file=sys.stderr)  # noqa: T201
        return 1
    return 0


def cmd_keys_new(args: argparse.Namespace) -> int:
    """A fresh key (shown once) and the entry to add to RECALLQL_API_KEYS (which holds only its hash)."""
    import json

    from web.auth import key_entry, new_key

    key = new_key()
    try:
        entry = key_entry(args.name, key, resources=args.resources or (), admin=args.admin)
    except ValueError as exc:
        raise SystemExit(f"keys new: {exc}") from exc
    print(f"key:   {key}")  # noqa: T201
    print(f"entry: {json.dumps(entry)}")  # noqa: T201
    print(  # noqa: T201
        "The key is shown once: give it to the client (Authorization: Bearer <key>). Add the entry to the "
        "RECALLQL_API_KEYS JSON list; the server stores only its SHA-256.",
        file=sys.stderr,
    )
    return 0


def _redact(url: str) -> str:
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    # libpq takes passwords in the query too (password, sslpassword for the client key).
    secret = {k: "hidden" for k in parsed.query if "password" in k}
    return parsed.update_query_dict(secret).render_as_string(hide_password=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="recallql", description="RecallQL: a GraphQL memory server.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the GraphQL server")
    serve.add_argument("--host", type=_given, help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8000)")
    serve.add_argument("--data-dir", type=_folder, help="folder for the SQLite file and the Chroma index")
    serve.add_argument(
        "--database-url", type=_given, help="SQLAlchemy async URL (overrides the data-dir SQLite file)"
    )
    serve.add_argument("--workers", type=int, help="worker processes (default 1)")
    serve.add_argument("--no-migrate", action="store_true", help="do not apply pending migrations on start")
    serve.set_defaults(func=cmd_serve)

    migrate = sub.add_parser("migrate", help="apply pending database migrations")
    migrate.add_argument("--data-dir", type=_folder)
    migrate.add_argument("--database-url", type=_given)
    migrate.set_defaults(func=cmd_migrate)

    reindex = sub.add_parser("reindex", help="rebuild the vector index from the database")
    reindex.add_argument("--resource", type=_given, help="only this resource's messages")
    reindex.add_argument(
        "--rebuild",
        action="store_true",
        help="drop the collection(s) first: the index then holds exactly what the database holds",
    )
    reindex.add_argument("--data-dir", type=_folder)
    reindex.add_argument("--database-url", type=_given)
    reindex.set_defaults(func=cmd_reindex)

    check = sub.add_parser(
        "check-index",
        help="compare the vector index with the database (missing, stray and unreachable vectors)",
    )
    check.add_argument("--resource", type=_given, help="only this resource")
    check.add_argument(
        "--repair", action="store_true", help="rebuild the collections of the resources found wrong"
    )
    check.add_argument("--data-dir", type=_folder)
    check.add_argument("--database-url", type=_given)
    check.set_defaults(func=cmd_check_index)

    imp = sub.add_parser("import", help="load memory from a Mastra store or a RecallQL export")
    imp_sub = imp.add_subparsers(dest="format", required=True)
    mastra = imp_sub.add_parser("mastra", help="copy a Mastra store (LibSQL file or PostgreSQL), read only")
    mastra.add_argument(
        "--from", dest="source", required=True, type=_given, help="file:PATH, a path, or postgresql://…"
    )
    mastra.add_argument(
        "--schema", type=_given, help="the PostgreSQL schema of Mastra's tables (default public)"
    )
    jsonl = imp_sub.add_parser("jsonl", help="load a `recallql export` JSON Lines file")
    jsonl.add_argument("--from", dest="source", required=True, type=_given, help="the file, or - for stdin")
    for p in (mastra, jsonl):
        p.add_argument("--batch-size", type=int, default=1000, help="rows per transaction (default 1000)")
        p.add_argument("--no-embed", action="store_true", help="do not embed the imported messages")
        p.add_argument("--data-dir", type=_folder)
        p.add_argument("--database-url", type=_given)
        p.set_defaults(func=cmd_import)

    export = sub.add_parser("export", help="write memory as JSON Lines (resources, threads, messages)")
    export.add_argument("--resource", type=_given, help="only this resource, its threads and their messages")
    export.add_argument("--out", type=_given, help="the file to write (default -, stdout)")
    export.add_argument("--data-dir", type=_folder)
    export.add_argument("--database-url", type=_given)
    export.set_defaults(func=cmd_export)

    keys = sub.add_parser("keys", help="API keys for RECALLQL_API_KEYS")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    new = keys_sub.add_parser("new", help="print a new random API key and its RECALLQL_API_KEYS entry")
    new.add_argument("--name", required=True, type=_given, help="a name for the key (logs, error messages)")
    grant = new.add_mutually_exclusive_group(required=True)
    grant.add_argument(
        "--resource",
        action="append",
        dest="resources",
        type=_given,
        help="a resource it may access (repeatable)",
    )
    grant.add_argument("--admin", action="store_true", help="it may access every resource")
    new.set_defaults(func=cmd_keys_new)

    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except ValidationError as exc:
        if exc.title != Settings.__name__:
            raise
        print(_settings_problem(exc), file=sys.stderr)  # noqa: T201
        return 2
    except SettingsError as exc:  # a value that is not even JSON, for a list or object setting
        named = re.sub(r'field "(\w+)"', lambda m: f"RECALLQL_{m[1].upper()}", str(exc))
        print(f"recallql: setting not valid: {named} (expected JSON)", file=sys.stderr)  # noqa: T201
        return 2
    except Exception as exc:  # an unreachable database is an outage to report, not a bug
        from models.db import UNREACHABLE, unavailability

        if (refusal := unavailability(exc)) is not None:
            what = "cannot be reached" if refusal == UNREACHABLE else "refused the work for now"
            print(f"recallql: the database {what}: {_root_cause(exc)}", file=sys.stderr)  # noqa: T201
            return 1
        if _refused(exc):
            print(f"recallql: the database refused the connection: {_root_cause(exc)}", file=sys.stderr)  # noqa: T201
            return 1
        unopenable = str(exc) if isinstance(exc, SQLiteUnopenable) else _sqlite_unopenable(exc)
        if unopenable is not None:
            print(f"recallql: the SQLite database cannot be opened: {unopenable}", file=sys.stderr)  # noqa: T201
            return 1
        raise


def _refused(exc: BaseException) -> bool:
    """PostgreSQL answered, but not for us: no such database, or the credentials are wrong."""
    from models.db import causes

    states = (getattr(e, "sqlstate", None) for e in causes(exc))
    return any(isinstance(s, str) and (s == "3D000" or s.startswith("28")) for s in states)


def _check_sqlite_folder(url: str) -> None:
    """Raises SQLiteUnopenable when a SQLite URL's file is in a folder that does not exist: said before
    aiosqlite tries, whose worker thread, failing to open the file, could outlive the event loop and
    print a traceback after the message (a server's startup logged one of 150 lines)."""
    from models.db import sqlite_file

    path = sqlite_file(url)
    if path is not None and not path.parent.is_dir():
        raise SQLiteUnopenable(f"{path}: its folder {path.parent} does not exist")


def _check_sqlite_exists(url: str) -> None:
    from models.db import sqlite_file

    _check_sqlite_folder(url)
    path = sqlite_file(url)
    if path is not None and not path.exists():
        raise SQLiteUnopenable(
            f"{path} does not exist: nothing is stored there (check --data-dir, RECALLQL_DATA_DIR or "
            "the database URL)"
        )


def _check_sqlite_file(url: str) -> None:
    """Raises SQLiteUnopenable when a SQLite URL's existing file is not a database it can read. Migrating
    finds that out; without migrating, every worker did as it started, a traceback each (exit 3)."""
    import sqlite3

    from models.db import probe_sqlite_file, sqlite_file

    path = sqlite_file(url)
    if path is None or not path.is_file():
        return  # a missing file is created by the workers
    try:
        probe_sqlite_file(path)
    except sqlite3.DatabaseError as exc:
        raise SQLiteUnopenable(_sqlite_unopenable(exc) or f"{path}: {exc}") from None


class SQLiteUnopenable(Exception):
    """The configured SQLite file cannot be used; the message says why, naming the file."""


# SQLite's words for a file it cannot use, and what to look at (these were tracebacks).
_SQLITE_UNOPENABLE = {
    "unable to open database file": "its folder must exist and be writable",
    "file is not a database": "the file is not a SQLite database",
    "readonly database": "the file and its folder must be writable",
}


def _sqlite_unopenable(exc: BaseException) -> str | None:
    """What main reports when SQLite refused the configured file: its reason, the path, a hint."""
    import sqlite3

    from sqlalchemy.engine import make_url

    from models.db import causes

    for cause in causes(exc):
        if isinstance(cause, sqlite3.DatabaseError):
            hint = next((h for words, h in _SQLITE_UNOPENABLE.items() if words in str(cause)), None)
            if hint is not None:
                path = make_url(get_settings().resolved_database_url).database
                return f"{path}: {cause} ({hint})"
    return None


def _root_cause(exc: BaseException) -> str:
    """The driver's own words (connection refused, timed out), without the wrappers around them."""
    from models.db import causes

    *_, root = causes(exc)
    return str(root) or type(root).__name__


def _settings_problem(exc: ValidationError) -> str:
    """A bad RECALLQL_* variable, named, instead of pydantic's traceback. The value is left out: it may
    be a secret (a JWT secret, API keys, a database URL with its password)."""
    lines = [f"recallql: {exc.error_count()} setting(s) not valid:"]
    for error in exc.errors():
        field = f"RECALLQL_{str(error['loc'][0]).upper()}: " if error["loc"] else ""
        lines.append(f"  {field}{error['msg']}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
