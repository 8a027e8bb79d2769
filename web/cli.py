"""The `recallql` command: serve and migrate."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path

from web.settings import Settings, get_settings


def _apply_overrides(args: argparse.Namespace) -> Settings:
    """Command-line options become RECALLQL_* variables so that every worker process sees them."""
    for option, env in (("data_dir", "RECALLQL_DATA_DIR"), ("database_url", "RECALLQL_DATABASE_URL")):
        value = getattr(args, option, None)
        if value is not None:
            os.environ[env] = str(value)
    get_settings.cache_clear()
    return get_settings()


async def _migrate(settings: Settings) -> list[str]:
    from models.db import create_engine, is_sqlite
    from models.migrate import pending_revisions, upgrade

    url = settings.resolved_database_url
    if is_sqlite(url):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url)
    try:
        pending = await pending_revisions(engine)
        await upgrade(engine)
        return pending
    finally:
        await engine.dispose()


def cmd_migrate(args: argparse.Namespace) -> int:
    settings = _apply_overrides(args)
    applied = asyncio.run(_migrate(settings))
    print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'none pending'}")  # noqa: T201
    return 0


async def _reindex(settings: Settings, resource_id: str | None) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from models.db import create_engine
    from models.migrate import upgrade
    from models.repository import Repository
    from web.wiring import build_semantic

    engine = create_engine(settings.resolved_database_url)
    try:
        if settings.auto_migrate:
            await upgrade(engine)
        repository = Repository(engine)
        semantic = build_semantic(settings, repository)
        if semantic is None:
            raise SystemExit("reindex: no embedder is configured (see RECALLQL_EMBEDDING_MODEL_DIR)")
        total = await repository.count_all_messages(resource_id)
        columns = (TextColumn("embedding"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        try:
            with Progress(*columns) as progress:
                task = progress.add_task("messages", total=total)
                return await semantic.reindex(
                    resource_id=resource_id, on_progress=lambda n: progress.advance(task, n)
                )
        finally:
            await semantic.aclose()
    finally:
        await engine.dispose()


def cmd_reindex(args: argparse.Namespace) -> int:
    settings = _apply_overrides(args)
    done = asyncio.run(_reindex(settings, args.resource))
    print(f"re-indexed {done} message(s)")  # noqa: T201
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    settings = _apply_overrides(args)
    host = args.host or settings.host
    port = args.port if args.port is not None else settings.port
    workers = args.workers or settings.workers
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    log = logging.getLogger("recallql")
    if settings.auto_migrate and not args.no_migrate:
        applied = asyncio.run(_migrate(settings))
        if applied:
            log.info("applied migrations: %s", ", ".join(applied))
    # Migrations ran once, here; the workers must not race each other doing it again.
    os.environ["RECALLQL_AUTO_MIGRATE"] = "false"
    log.info(
        "RecallQL on http://%s:%s/graphql (database %s, %s worker(s))",
        host,
        port,
        _redact(settings.resolved_database_url),
        workers,
    )
    uvicorn.run(
        "web.app:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=settings.log_level,
        timeout_graceful_shutdown=30,
    )
    return 0


def _redact(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="recallql", description="RecallQL: a GraphQL memory server.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the GraphQL server")
    serve.add_argument("--host", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8000)")
    serve.add_argument("--data-dir", type=Path, help="folder for the SQLite file and the Chroma index")
    serve.add_argument("--database-url", help="SQLAlchemy async URL (overrides the data-dir SQLite file)")
    serve.add_argument("--workers", type=int, help="worker processes (default 1)")
    serve.add_argument("--no-migrate", action="store_true", help="do not apply pending migrations on start")
    serve.set_defaults(func=cmd_serve)

    migrate = sub.add_parser("migrate", help="apply pending database migrations")
    migrate.add_argument("--data-dir", type=Path)
    migrate.add_argument("--database-url")
    migrate.set_defaults(func=cmd_migrate)

    reindex = sub.add_parser("reindex", help="rebuild the vector index from the database")
    reindex.add_argument("--resource", help="only this resource's messages")
    reindex.add_argument("--data-dir", type=Path)
    reindex.add_argument("--database-url")
    reindex.set_defaults(func=cmd_reindex)

    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
