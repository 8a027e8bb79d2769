"""The schema in process: the checked-in SDL, batching (no N+1) and error masking."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event

from resolvers.auth import OPEN
from resolvers.context import RequestContext, Services
from schema import build_schema, export_sdl
from schema.build import SDL_PATH
from tests.factories import msg, seed


def test_checked_in_sdl_is_current() -> None:
    assert SDL_PATH.read_text() == export_sdl(), "schema/schema.graphql is stale: run `python -m schema`"


def test_deprecations_and_one_of_are_in_the_sdl() -> None:
    sdl = export_sdl()
    assert 'includeSystemReminders: Boolean @deprecated(reason: "Use hideSignals.")' in sdl
    for name in ("HideSignalsInput", "SemanticRecallInput", "MessageRangeInput", "GenerateTitleInput"):
        assert f"input {name} @oneOf" in sdl


async def test_message_threads_load_in_one_batch(services: Services) -> None:
    threads = {f"t{n}": "r1" for n in range(5)}
    await seed(services, *(msg(f"m{n}", thread=f"t{n % 5}", at=n) for n in range(20)), threads=threads)
    statements: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    repo = services.repository
    engines = [repo.engine.sync_engine, *([repo.read_engine] if repo.read_engine is not None else [])]
    for engine in engines:
        event.listen(engine, "before_cursor_execute", count)
    try:
        include = ", ".join(f'{{id: "m{n}"}}' for n in range(20))
        query = (
            f'{{ recall(threadId: "t0", perPage: 0, include: [{include}]) '
            "{ messages { id thread { id } } } }"
        )
        result = await build_schema().execute(
            query,
            context_value=RequestContext(services=services, principal=OPEN),
        )
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", count)
    assert result.errors is None
    messages = result.data["recall"]["messages"]
    assert len(messages) == 20 and {m["thread"]["id"] for m in messages} == set(threads)
    thread_queries = [s for s in statements if "FROM threads" in s]
    assert len(thread_queries) == 1, thread_queries
    # The 20 include windows are one statement too.
    assert len([s for s in statements if "FROM messages" in s]) == 1


class _Broken:
    async def read_page(self, *_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("database password is hunter2")


async def test_internal_errors_are_masked_and_logged(services: Services, caplog: Any) -> None:
    services.recall.repository = _Broken()  # type: ignore[assignment]
    context = RequestContext(services=services, principal=OPEN)
    result = await build_schema().execute(
        '{ recall(threadId: "t", resourceId: "r") { total } }', context_value=context
    )
    assert result.errors is not None
    error = result.errors[0]
    assert error.message == "Internal server error."
    assert error.extensions == {"code": "INTERNAL_SERVER_ERROR", "requestId": context.request_id}
    assert "hunter2" in caplog.text and context.request_id in caplog.text
