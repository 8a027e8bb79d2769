"""The schema in process: the checked-in SDL, batching (no N+1) and error masking."""

from __future__ import annotations

from typing import Any

from resolvers.auth import OPEN
from resolvers.context import RequestContext, Services
from schema import build_schema, export_sdl
from schema.build import SDL_PATH
from tests.factories import msg, seed
from tests.support import statements


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
    include = ", ".join(f'{{id: "m{n}"}}' for n in range(20))
    query = (
        f'{{ recall(threadId: "t0", perPage: 0, include: [{include}]) '
        "{ messages { id thread { id } } } }"
    )
    with statements(services) as seen:
        result = await build_schema().execute(
            query, context_value=RequestContext(services=services, principal=OPEN)
        )
    assert result.errors is None
    messages = result.data["recall"]["messages"]
    assert len(messages) == 20 and {m["thread"]["id"] for m in messages} == set(threads)
    thread_queries = [s for s in seen if "FROM threads" in s]
    assert len(thread_queries) == 1, thread_queries
    # The 20 include windows are one statement too.
    assert len([s for s in seen if "FROM messages" in s]) == 1


async def test_nested_recalls_read_their_pages_together(services: Services) -> None:
    """Thread.recall under a listing: the threads' pages are read in one batch, so PostgreSQL runs as
    many statements for six threads as for two (one count, one page statement), and SQLite one page
    statement more per thread, on the same connection. Each answer is its own thread's."""
    threads = {f"t{n}": "r1" for n in range(6)}
    await seed(services, *(msg(f"m{n}", thread=f"t{n % 6}", at=n) for n in range(30)), threads=threads)
    query = (
        '{ threads(resourceId: "r1", perPage: %d) { threads { id recall(perPage: 2) '
        "{ total hasMore messages { id } } } } }"
    )
    reads: dict[int, list[str]] = {}
    for listed in (2, 6):
        context = RequestContext(services=services, principal=OPEN)
        with statements(services) as seen:
            result = await build_schema().execute(query % listed, context_value=context)
        assert result.errors is None and result.data is not None
        answers = result.data["threads"]["threads"]
        assert len(answers) == listed
        for thread in answers:
            n = int(thread["id"][1:])
            newest = [f"m{n + 18}", f"m{n + 24}"]  # each thread holds m{n}, m{n+6}, ... m{n+24}
            assert thread["recall"] == {"total": 5, "hasMore": True, "messages": [{"id": i} for i in newest]}
        assert context.pages.batches == 1
        reads[listed] = [s for s in seen if "messages" in s or "thread_resources" in s]
    extra = 0 if services.repository.is_postgres else 4
    assert len(reads[6]) == len(reads[2]) + extra, reads


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


async def test_a_failed_batch_of_pages_fails_each_of_its_recalls(
    services: Services, caplog: Any, monkeypatch: Any
) -> None:
    """Every nested recall waiting on a batch that fails gets the (masked) error; none hangs, and the
    listing answers."""
    await seed(services, msg("a", thread="t1"), msg("b", thread="t2"), threads={"t1": "r1", "t2": "r1"})

    async def broken(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("database password is hunter2")

    monkeypatch.setattr(services.repository, "read_pages", broken)
    context = RequestContext(services=services, principal=OPEN)
    result = await build_schema().execute(
        '{ threads(resourceId: "r1") { total threads { id recall(perPage: 1) { total } } } }',
        context_value=context,
    )
    assert result.data is not None and result.data["threads"]["total"] == 2
    assert [t["recall"] for t in result.data["threads"]["threads"]] == [None, None]
    assert result.errors is not None and len(result.errors) == 2
    assert {e.message for e in result.errors} == {"Internal server error."}
    assert "hunter2" in caplog.text
