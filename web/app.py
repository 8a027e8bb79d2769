"""The Starlette application factory."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from cross_web import HTTPException
from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send
from strawberry import UNSET
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError

from models.db import create_engine, is_sqlite, is_unavailable, summary
from models.migrate import log_state, schema_state, upgrade
from models.repository import Repository
from resolvers.context import RequestContext, Services
from schema import build_schema
from web.auth import (
    PRINCIPAL_KEY,
    Authenticator,
    BearerAuth,
    Unauthenticated,
    carries_request,
    on_connect,
    websocket_principal,
)
from web.compiled import SCREENED_KEY, GraphQLFront, decode_request_json, refused, request_extensions
from web.frontend import frontend_routes, graphiql_response
from web.health import SchemaCheck, readiness
from web.limits import LegacyWSHandler, TransportWSHandler
from web.observability import Observability, observe_compiled_operation, request_id_of
from web.persisted import PersistedQueries, schema_documents
from web.settings import Settings, get_settings
from web.wiring import build_chat, build_events, build_semantic

log = logging.getLogger("recallql")


GRAPHQL_METHODS = "GET, POST"  # what /graphql serves (Starlette's routes add HEAD to GET; it is not)
_GRAPHQL_METHODS_ONLY = "{method} is not served here: send GraphQL requests with GET or POST."


class RecallQLGraphQL(GraphQL[RequestContext, None]):
    # The per-connection operation limit's refusal carries a code like every other error (web/limits.py).
    graphql_transport_ws_handler_class = TransportWSHandler
    graphql_ws_handler_class = LegacyWSHandler

    authenticator: Authenticator  # set by create_app (web/auth.py)
    max_query_tokens: int | None = None  # set by create_app
    max_query_chars: int | None = None  # set by create_app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        # Strawberry answers the requests it refuses before executing (no query, a body that is not
        # JSON, an unknown operationName, a mutation over GET) in plain text; a GraphQL client expects
        # the errors list with a code, as for every other error.
        try:
            response = await self.run(Request(scope=scope, receive=receive))
        except HTTPException as exc:
            if exc.status_code == 405 and scope.get("method") not in ("GET", "POST"):
                # HEAD: Starlette routes it with GET, Strawberry serves neither it nor a body for it.
                reason = _GRAPHQL_METHODS_ONLY.format(method=scope.get("method"))
                response = refused(405, reason, allow=GRAPHQL_METHODS)
            else:
                response = refused(exc.status_code, exc.reason)
        await response(scope, receive, send)

    def decode_json(self, data: str | bytes) -> object:
        # web/compiled.py: bounded depth (a deep frame closes with 4400); a body the front decoded
        # is not parsed again.
        return decode_request_json(data)

    async def get_context(self, request: Any, response: Any = None) -> RequestContext:
        # Who asks: BearerAuth put the principal of an HTTP request in its scope (the compiled read
        # path passes the same scope); a WebSocket's comes from its upgrade header, then connection_init.
        principal = request.scope.get(PRINCIPAL_KEY)
        if principal is None:
            if request.scope["type"] == "websocket":
                principal = await websocket_principal(self.authenticator, request.scope)
            else:
                principal = self.authenticator.default_principal
        context = RequestContext(
            services=request.app.state.services,
            principal=principal,
            variables_checked=request.scope.get(SCREENED_KEY, False),
            http_response=response,
        )
        # The X-Request-ID of this request (web.observability), so errors' requestId matches it.
        context.request_id = request_id_of(request) or context.request_id
        return context

    async def on_ws_connect(self, context: RequestContext) -> Any:
        try:
            await on_connect(self.authenticator, context)
        except Unauthenticated as exc:
            context.connection_refusal = exc.message
            raise ConnectionRejectionError({"message": exc.message, "code": exc.code}) from None
        return UNSET

    def should_render_graphql_ide(self, request: Any) -> bool:
        # What the auth layer lets through as the page (web/auth.py): a GET with none of a request's
        # parameters. Strawberry looked for `query` alone, so `?variables={}` got the page (200, HTML)
        # with authentication off, and a 401 with it on.
        return bool(super().should_render_graphql_ide(request)) and not carries_request(request.query_params)

    async def render_graphql_ide(self, request: Any) -> Response:
        return graphiql_response(self.graphql_ide_html)


class BodyLimit:
    """Rejects request bodies over the limit before anything parses them, and bodies that take longer
    than `timeout` seconds to arrive (a client sending a byte now and then held its connection and a
    buffer of up to max_bytes for as long as it liked)."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout: float | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await _too_large(self.max_bytes)(scope, receive, send)
            return
        seen, complete = 0, False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout if self.timeout is not None else None

        async def limited_receive() -> Any:
            nonlocal seen, complete
            if complete or deadline is None:
                # Once the body is in, receive() waits for the client to go away: no deadline.
                message = await receive()
            else:
                try:
                    async with asyncio.timeout_at(deadline):
                        message = await receive()
                except TimeoutError:
                    raise _BodyTooSlow from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                complete = not message.get("more_body", False)
                if seen > self.max_bytes:
                    raise _BodyTooLarge
            return message

        try:
            await self.app(scope, limited_receive, send)
        except _BodyTooLarge:
            await _too_large(self.max_bytes)(scope, receive, send)
        except _BodyTooSlow:
            await _too_slow(self.timeout or 0)(scope, receive, send)


class _BodyTooLarge(Exception):
    pass


class _BodyTooSlow(Exception):
    pass


def _too_slow(timeout: float) -> Response:
    message = f"The request body did not arrive within {timeout:g} seconds."
    body = {"errors": [{"message": message, "extensions": request_extensions("REQUEST_TIMEOUT")}]}
    # The connection closes: the rest of the body may still be on its way.
    return JSONResponse(body, status_code=408, headers={"Connection": "close"})


def _too_large(limit: int) -> Response:
    return JSONResponse(
        {
            "errors": [
                {
                    "message": f"Request body exceeds {limit} bytes.",
                    "extensions": request_extensions("PAYLOAD_TOO_LARGE"),
                }
            ]
        },
        status_code=413,
    )


def create_app(settings: Settings | None = None, *, services: Services | None = None) -> Starlette:
    settings = settings or get_settings()
    # Logging is configured for a served app; an app given its services (tests) leaves it alone.
    observability = Observability(settings, configure_logging_now=services is None)
    # Bearer tokens to principals (web/auth.py); a bad RECALLQL_API_KEYS / JWKS file stops startup here.
    authenticator = Authenticator(settings)
    authenticator.log_startup()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        url = settings.resolved_database_url
        if is_sqlite(url):
            settings.data_dir.mkdir(parents=True, exist_ok=True)
        engine = None
        built = services
        if built is None:
            engine = create_engine(url, **settings.engine_options())
            if settings.auto_migrate:
                log_state(await upgrade(engine), migrated=True)
            else:
                try:
                    log_state(await schema_state(engine), migrated=False)
                except Exception as exc:
                    # Not a reason to stop: the process serves once the database is back, and /readyz
                    # says so meanwhile (uvicorn's supervisor stops every worker when one fails to start).
                    if not is_unavailable(exc):
                        raise
                    log.warning("the database cannot be used at start: %s", summary(exc))
            repository = Repository(engine)
            built = Services.build(
                repository,
                memory_defaults=settings.memory_defaults(),
                semantic=build_semantic(settings, repository),
                max_include_items=settings.max_include_items,
                max_save_batch=settings.max_save_batch,
                vector_sync_timeout=settings.vector_sync_timeout,
                events=build_events(settings),
                chat=build_chat(settings),
                title_timeout=settings.chat_timeout,
                max_per_page=settings.max_per_page,
                max_all_rows=settings.max_all_rows,
                max_search_chars=settings.max_search_chars,
                max_request_rows=settings.max_request_rows,
                max_thread_recalls=settings.max_thread_recalls,
                change_retention=settings.change_retention,
            )
        app.state.services = built
        observability.instrument(built)
        # Vectors a crashed process never wrote (and any backlog) are written in the background.
        drainer = warming = None
        if built.semantic is not None:
            if services is None:  # a served app: /readyz waits for it (see web/health.py)
                warming = asyncio.create_task(built.semantic.warm())
            drainer = asyncio.create_task(
                built.semantic.run_drainer(
                    settings.vector_drain_interval, grace=settings.vector_sync_timeout + 5
                )
            )
        pruner = asyncio.create_task(built.messages.run_pruner())  # kept changes past their retention
        try:
            yield
        finally:
            for task in (warming, drainer, pruner):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            if services is None and built.semantic is not None:
                await built.semantic.aclose()
            if services is None:
                await built.aclose()  # titles in progress still write, so before the engine goes
            if engine is not None:
                built.repository.close()
                await engine.dispose()
            if persisted is not None:
                await persisted.aclose()
            observability.shutdown()

    schema = build_schema(
        max_depth=settings.max_query_depth,
        max_tokens=settings.max_query_tokens,
        max_chars=settings.max_query_chars,
        max_aliases=settings.max_aliases,
        mask_errors=not settings.debug,
        introspection=settings.introspection,
        max_entities=settings.max_entities,
        extensions=observability.graphql_extensions(),
    )
    graphql_app = RecallQLGraphQL(
        schema,
        graphql_ide="graphiql",
        max_subscriptions_per_connection=settings.max_subscriptions_per_connection,
        # Pages of other origins may open the WebSocket only when listed (cross-site WebSocket hijacking).
        allowed_origins=settings.cors_origins,
    )
    graphql_app.authenticator = authenticator
    # web/limits.py parses frames under these
    graphql_app.max_query_tokens = settings.max_query_tokens
    graphql_app.max_query_chars = settings.max_query_chars
    persisted = (
        PersistedQueries(
            schema_documents(
                schema._schema,
                max_tokens=settings.max_query_tokens,
                max_chars=settings.max_query_chars,
                rules=schema.limit_rules,
            ),
            cache_chars=settings.persisted_queries_cache_chars,
            redis_url=settings.redis_url,
            redis_prefix=settings.redis_prefix,
            ttl=settings.persisted_queries_ttl,
        )
        if settings.persisted_queries
        else None
    )
    graphql_endpoint = GraphQLFront(
        graphql_app,
        # Hot read queries skip graphql-core's per-field machinery (same results; see schema/fastpath.py).
        schema.fast_path if settings.compiled_reads else None,
        graphql_app.get_context,
        on_answer=lambda plan, name, seconds, errors: observe_compiled_operation(
            schema._schema, plan.document, name, seconds, plan.memo, errors
        ),
        max_tokens=settings.max_query_tokens,
        max_chars=settings.max_query_chars,
        tracing=observability.compiled_tracing(),
        persisted=persisted,
    )

    schema_check = SchemaCheck()

    async def healthz(_request: Request) -> Response:
        return PlainTextResponse("ok")

    async def readyz(request: Request) -> Response:
        status, report = await readiness(request.app.state.services, settings, schema_check)  # web/health.py
        return JSONResponse(report, status_code=status)

    async def method_not_allowed(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        # Starlette lists the route's methods from a set, in any order.
        allow = ", ".join(sorted(m.strip() for m in (exc.headers or {}).get("Allow", "").split(",")))
        if not request.url.path.endswith("/graphql"):
            return PlainTextResponse(exc.detail, status_code=405, headers={"Allow": allow})
        # GraphQL clients read the errors list; Starlette's own answer was the text "Method Not Allowed".
        return refused(405, _GRAPHQL_METHODS_ONLY.format(method=request.method), allow=GRAPHQL_METHODS)

    return Starlette(
        exception_handlers={405: method_not_allowed},
        routes=[
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            # CORS when configured (its preflights are OPTIONS), authentication (401 before anything
            # parses the request), then the compiled front.
            Route(
                "/graphql",
                _cors(BearerAuth(graphql_endpoint, authenticator), settings),
                methods=["GET", "POST", *(["OPTIONS"] if settings.cors_origins else [])],
            ),
            # Subscriptions: graphql-transport-ws (and the legacy graphql-ws) on the same path.
            WebSocketRoute("/graphql", BearerAuth(graphql_app, authenticator)),
            *observability.routes(),
            *frontend_routes(),
        ],
        middleware=[
            *observability.middleware(),
            Middleware(BodyLimit, max_bytes=settings.max_body_bytes, timeout=settings.body_timeout),
        ],
        lifespan=lifespan,
    )


def _cors(app: ASGIApp, settings: Settings) -> ASGIApp:
    """/graphql for browser apps of the origins RECALLQL_CORS_ORIGINS lists (Starlette's CORS
    middleware), outside authentication: a preflight carries no token, and a 401 must reach the page
    with its CORS headers for the app to read it. Bearer tokens, not cookies: no credentials mode."""
    if not settings.cors_origins:
        return app
    return CORSMiddleware(
        app,
        allow_origins=settings.cors_origins,
        allow_methods=["GET", "POST"],
        allow_headers=["Authorization", "Content-Type", "X-Request-ID"],
        expose_headers=["X-Request-ID", "WWW-Authenticate"],
        max_age=600,
    )
