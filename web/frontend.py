"""The web pages: the memory explorer at `/`, static files under `/static`, and GraphiQL at `/graphql`.

The explorer is hand-written (web/static/). GraphiQL is bundled from pinned npm packages by
web/build.sh into web/static/build/graphiql/, so that it works with no internet access; until that
build exists the server falls back to Strawberry's GraphiQL page (which loads from a CDN) and logs
a warning.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

log = logging.getLogger("recallql.frontend")

STATIC_DIR = Path(__file__).resolve().parent / "static"
BUILD_DIR = STATIC_DIR / "build"
EXPLORER_PAGE = STATIC_DIR / "index.html"

_warned: set[Path] = set()
# The pages may not be framed: GraphiQL on a server without authentication (loopback) runs mutations,
# and a page of another site framing it could lead a user into clicking them.
PAGE_HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": "frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
# The pages show stored messages, which anyone allowed to write may have written: with only what each
# page loads from this server allowed, a way to inject markup would still run no script and send
# nothing elsewhere. 'self' covers the same origin's WebSockets (CSP 3). GraphiQL's editor (Monaco) sets
# inline styles, runs its language services in workers of its own files and loads its icon font; the
# CDN fallback page loads everything from elsewhere, and keeps frame-ancestors alone.
_LOCAL_ONLY = (
    "default-src 'none'; script-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)
EXPLORER_CSP = f"{_LOCAL_ONLY}; style-src 'self'"
GRAPHIQL_CSP = f"{_LOCAL_ONLY}; style-src 'self' 'unsafe-inline'; font-src 'self' data:; worker-src 'self'"


def graphiql_page_path(build_dir: Path | None = None) -> Path:
    """The built GraphiQL page (it may not exist)."""
    return (build_dir or BUILD_DIR) / "graphiql" / "index.html"


def graphiql_html(fallback_html: str, build_dir: Path | None = None) -> str:
    """The local GraphiQL page when it is built, else `fallback_html` (with a warning, once per path)."""
    page = graphiql_page_path(build_dir)
    try:
        return page.read_text(encoding="utf-8")
    except FileNotFoundError:
        if page not in _warned:
            _warned.add(page)
            log.warning(
                "GraphiQL build not found at %s: serving Strawberry's GraphiQL page, which loads its "
                "assets from a CDN (it needs internet access). Run web/build.sh to build the local one.",
                page,
            )
        return fallback_html


def graphiql_response(fallback_html: str) -> Response:
    """The answer to a browser's GET /graphql."""
    html = graphiql_html(fallback_html)
    local = html is not fallback_html
    headers = {**PAGE_HEADERS, "Content-Security-Policy": GRAPHIQL_CSP} if local else PAGE_HEADERS
    return HTMLResponse(html, headers=headers)


class _Static(StaticFiles):
    """StaticFiles; the build's content-hashed files are cached for good."""

    def file_response(
        self,
        full_path: str | os.PathLike[str],
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        response.headers["X-Content-Type-Options"] = "nosniff"
        path = Path(full_path)
        if BUILD_DIR in path.parents and path.name != "index.html":
            response.headers["Cache-Control"] = "public, max-age=31536000, immutable"
        else:
            response.headers["Cache-Control"] = "no-cache"
        return response


async def explorer(_request: Request) -> Response:
    headers = {**PAGE_HEADERS, "Content-Security-Policy": EXPLORER_CSP}
    return FileResponse(EXPLORER_PAGE, media_type="text/html", headers=headers)


def frontend_routes() -> list[BaseRoute]:
    """The explorer at `/` and the static files under `/static`."""
    if not graphiql_page_path().is_file():
        graphiql_html("")  # warns at start-up rather than at the first visit
    return [
        Route("/", explorer, methods=["GET", "HEAD"]),
        Mount("/static", app=_Static(directory=STATIC_DIR), name="static"),
    ]
