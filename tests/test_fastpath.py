"""The compiled read path answers exactly what Strawberry's normal execution answers."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.db import create_engine
from models.repository import Repository
from resolvers.auth import OPEN, Principal
from resolvers.config import BUILTIN_DEFAULTS
from resolvers.context import RequestContext, Services
from schema import build_schema
from schema.build import RecallQLSchema
from tests.factories import msg, seed
from tests.support import free_port

MESSAGE_FIELDS = "id role type createdAt threadId resourceId signalType isSystemReminder"
PARTS = """parts { __typename
  ... on TextPart { type text }
  ... on DataPart { type name id data }
  ... on ToolInvocationPart { type toolInvocation { state toolCallId toolName args result step } }
  ... on ReasoningPart { reasoning details }
  ... on FilePart { mimeType data filename }
  ... on SourcePart { source }
  ... on StepStartPart { type }
  ... on UnknownPart { type raw } }"""

SUPPORTED = [
    f'{{ recall(threadId: "t1") {{ total page perPage hasMore messages {{ {MESSAGE_FIELDS} }} }} }}',
    '{ recall(threadId: "t1", perPage: 3) { messages { id content { format metadata content raw '
    f"{PARTS} }} }} }} }}",
    '{ a: recall(threadId: "t1", perPage: 2) { messages { id } } b: recall(threadId: "t2", perPage: false) '
    "{ perPage total messages { key: id __typename } } }",
    "query Q($t: ID!, $p: PerPage, $f: RecallFilter, $o: MessageOrderBy, $h: HideSignalsInput) "
    "{ recall(threadId: $t, perPage: $p, filter: $f, orderBy: $o, hideSignals: $h) "
    "{ __typename total hasMore ...R } } fragment R on RecallResult { messages { ...M } } "
    f"fragment M on Message {{ id createdAt content {{ {PARTS} }} }}",
    '{ thread(id: "t1") { id resourceId title metadata createdAt updatedAt } }',
    '{ threads(resourceId: "r1", perPage: 1) { total page perPage hasMore threads { id title } } }',
    '{ messages(ids: ["m1", "nope", "m2"]) { id role } }',
    '{ recall(threadId: "t1", include: [{id: "o1", withNextMessages: 1}], perPage: 1) '
    "{ messages { id threadId } } }",
    # Thread.recall, resolved after the roots: a listing with each thread's newest messages, ...
    '{ threads(resourceId: "r1") { total threads { id recall(perPage: 1) { total messages { id } } } } }',
    # ... two recalls of one thread under aliases, and the same fragment at two depths, with variables.
    '{ thread(id: "t1") { title a: recall(perPage: 2, orderBy: {direction: ASC}) { messages { id } } '
    "b: recall(filter: {metadata: {even: true}}) { total hasMore } } }",
    "query Q($t: ID!, $p: PerPage, $h: HideSignalsInput) { thread(id: $t) { ...T } "
    'threads(resourceId: "r1", perPage: false) { threads { ...T } } } '
    "fragment T on Thread { id recall(perPage: $p, hideSignals: $h, "
    'include: [{id: "o1", withNextMessages: 1}]) { perPage messages { id threadId } } }',
]
FALLBACK = [
    '{ recall(threadId: "t1") { messages { id thread { id } } } }',  # async field
    '{ recall(threadId: "t1") @include(if: true) { total } }',  # directives
    'mutation { createThread(input: {resourceId: "r9"}) { resourceId } }',
    '{ recall(threadId: "t1") { nope } }',  # invalid
    '{ threads(resourceId: "r1") { threads { id recall(page: -1) { total } } } }',  # a nested error
    '{ thread(id: "t1") { recall { messages { thread { id } } } } }',  # an async field inside one
]


@pytest.fixture
async def populated(services: Services) -> Services:
    parts = [
        {"type": "step-start"},
        {"type": "reasoning", "reasoning": "", "details": [{"type": "text", "text": "hm"}]},
        {
            "type": "tool-invocation",
            "toolInvocation": {
                "state": "result",
                "toolCallId": "c",
                "toolName": "w",
                "args": {"q": 1},
                "result": {"ok": True},
            },
        },
        {"type": "text", "text": "hi"},
        {"type": "data-signal", "id": "s1", "data": {"type": "reactive"}},
        {"type": "file", "mimeType": "image/png", "data": "aGk="},
        {"type": "source", "source": {"url": "x"}},
        {"type": "mystery"},
    ]
    messages = [msg(f"m{n}", at=n, metadata={"n": n, "even": n % 2 == 0}) for n in range(8)]
    messages += [
        msg("p1", at=8.5, role="assistant", parts=parts),
        msg("sig", at=9, role="signal", metadata={"signal": {"type": "state"}}),
    ]
    messages += [msg("o1", thread="t2", at=0.5), msg("o2", thread="t2", at=1.5)]
    await seed(services, *messages, threads={"t1": "r1", "t2": "r1"})
    return services


async def both(
    services: Services,
    query: str,
    variables: dict[str, Any] | None = None,
    *,
    schema: RecallQLSchema | None = None,
    principal: Principal = OPEN,
) -> tuple[Any, Any]:
    """The compiled path's answer (None when it declines) and normal execution's result."""
    schema = schema or build_schema()
    plan = schema.fast_path.plan(query, None)
    fast = (
        await schema.fast_path.execute(
            plan, variables, RequestContext(services=services, principal=principal)
        )
        if plan
        else None
    )
    normal = await schema.execute(
        query, variable_values=variables, context_value=RequestContext(services=services, principal=principal)
    )
    return fast, normal


@pytest.mark.parametrize("query", SUPPORTED)
async def test_compiled_path_equals_normal_execution(populated: Services, query: str) -> None:
    variables = (
        {
            "t": "t1",
            "p": 4,
            "f": {"metadata": {"even": True}},
            "o": {"direction": "ASC"},
            "h": {"types": ["STATE"]},
        }
        if "$t" in query
        else None
    )
    fast, normal = await both(populated, query, variables)
    assert normal.errors is None, normal.errors
    assert fast is not None, "the compiled path should have answered this query"
    assert json.dumps(fast) == json.dumps({"data": normal.data})  # same values and same key order


def as_answered(result: Any) -> dict[str, Any]:
    """An answer (the compiled path's dict, or normal execution's result formatted as the HTTP layer
    writes it) without the request ids, which differ between the two runs."""
    if not isinstance(result, dict):
        result = {
            "data": result.data,
            **({"errors": [e.formatted for e in result.errors]} if result.errors else {}),
        }
    errors = [
        {**e, "extensions": {k: v for k, v in e["extensions"].items() if k != "requestId"}}
        for e in result.get("errors") or []
    ]
    return {"data": result["data"], **({"errors": errors} if errors else {})}


# Queries whose one root resolver raises an expected error: the compiled path answers them as the
# normal path does, instead of running them a second time there (see test_faults.py for outages).
FAILING = [
    '{ recall(threadId: "t1", page: -1) { total } }',  # non-null root: data is null
    '{ r: recall(threadId: "t1", perPage: -5) { total messages { id } } }',  # under an alias
    '{ threads(resourceId: "r1", page: -2) { total } }',
    '{ recall(threadId: "t1", include: [{id: "m1", withPreviousMessages: -1}]) { total } }',
]


@pytest.mark.parametrize("query", FAILING)
async def test_compiled_path_answers_a_failing_root_as_normal_execution_does(
    populated: Services, query: str
) -> None:
    fast, normal = await both(populated, query)
    assert normal.errors, "this query should fail"
    assert fast is not None, "the compiled path should have answered this query"
    assert json.dumps(as_answered(fast)) == json.dumps(as_answered(normal))
    assert fast["errors"][0]["extensions"]["requestId"]  # the request's id, as the error policy adds


@pytest.mark.parametrize(
    "query",
    [
        '{ recall(threadId: "t1") { total } }',
        '{ thread(id: "t1") { id } }',  # a nullable root: data holds its null
        '{ t: threads(resourceId: "r1") { total } }',
        '{ messages(ids: ["m1"]) { id } }',
    ],
)
async def test_compiled_path_answers_an_outage_as_normal_execution_does(query: str) -> None:
    """A database that refuses connections: each path answers SERVICE_UNAVAILABLE, the same way (the
    compiled one without running the query a second time on the normal path)."""
    engine = create_engine(f"postgresql+asyncpg://127.0.0.1:{free_port()}/nowhere")
    try:
        services = Services.build(Repository(engine), memory_defaults=dict(BUILTIN_DEFAULTS))
        fast, normal = await both(services, query)
    finally:
        await engine.dispose()
    assert fast is not None, "the compiled path should have answered this query"
    assert json.dumps(as_answered(fast)) == json.dumps(as_answered(normal))
    assert fast["errors"][0]["extensions"]["code"] == "SERVICE_UNAVAILABLE", fast


async def test_a_failing_root_beside_others_runs_on_the_normal_path(populated: Services) -> None:
    """With several roots the normal path runs them concurrently, and which others fail too is its to
    say: the compiled path does not answer."""
    fast, normal = await both(
        populated, '{ a: recall(threadId: "t1", page: -1) { total } b: thread(id: "t1") { id } }'
    )
    assert normal.errors and fast is None


@pytest.mark.parametrize("query", FALLBACK)
async def test_other_queries_fall_back(populated: Services, query: str) -> None:
    fast, _ = await both(populated, query)
    assert fast is None


async def test_nested_recalls_are_read_in_one_batch_with_their_paths(services: Services) -> None:
    """The compiled path resolves a listing's Thread.recall fields together, after the listing: their
    pages are read in one batch, as under normal execution. Each resolver sees its own response path
    (what a traced span reports)."""
    threads = {f"t{n}": "r1" for n in range(4)}
    await seed(services, *(msg(f"m{n}", thread=f"t{n % 4}", at=n) for n in range(12)), threads=threads)
    query = (
        '{ list: threads(resourceId: "r1", orderBy: {field: CREATED_AT, direction: ASC}) '
        "{ threads { id recall(perPage: 1) { messages { id } } } } }"
    )
    schema = build_schema()
    plan = schema.fast_path.plan(query, None)
    assert plan is not None
    context = RequestContext(services=services, principal=OPEN)
    paths: list[list[str | int]] = []

    @contextlib.contextmanager
    def around(info: Any, _args: dict[str, Any]) -> Iterator[None]:
        paths.append(info.path.as_list())
        yield

    fast = await schema.fast_path.execute(plan, None, context, around)
    assert fast is not None
    assert [t["recall"]["messages"] for t in fast["data"]["list"]["threads"]] == [
        [{"id": f"m{n + 8}"}] for n in range(4)
    ]
    assert context.pages.batches == 1
    assert paths == [["list"], *(["list", "threads", n, "recall"] for n in range(4))]
    normal = await schema.execute(query, context_value=RequestContext(services=services, principal=OPEN))
    assert json.dumps(fast) == json.dumps({"data": normal.data})


async def test_document_caches_are_bounded_by_characters(populated: Services) -> None:
    """Distinct long documents (a comment makes them megabytes within the token limit) filled the plan,
    parse and validation caches: about 14 MB kept per request. The caches now hold at most 1 MB of
    document text each; a document over a tenth of that is answered and not kept, one of 5 KB is (a
    cut-off at 4 KB made such documents 3 times slower). The plan cache is read from its internals:
    what it keeps is visible nowhere else."""
    from schema.caches import TextBudgetCache

    cache = TextBudgetCache(max_entries=20, max_chars=1000)
    for n in range(12):
        cache.put(n, str(n), 100)
    assert len(cache) == 10 and 0 not in cache and 1 not in cache  # 1,000 characters, the oldest out
    assert cache.get(2) == "2"  # now the most recently used
    cache.put("big", "x", 101)  # over a tenth of the budget: never kept
    assert "big" not in cache
    cache.put("next", "y", 100)
    assert 2 in cache and 3 not in cache
    few = TextBudgetCache(max_entries=3, max_chars=1000)
    for n in range(5):
        few.put(n, n, 10)
    assert len(few) == 3 and 1 not in few  # entries bound it too
    schema = build_schema()
    short = '{ thread(id: "t1") { id } }'
    medium = f"{short} # {'x' * 5_000}"
    assert schema.fast_path.plan(medium, None) is not None and (medium, None) in schema.fast_path._plans
    for n in range(3):
        long = f"{short} #{n} {'x' * 150_000}"
        fast, normal = await both(populated, long)
        assert fast == {"data": normal.data} == {"data": {"thread": {"id": "t1"}}}
        assert schema.fast_path.plan(long, None) is not None and (long, None) not in schema.fast_path._plans


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    per_page=st.one_of(st.none(), st.just(False), st.integers(0, 12)),
    page=st.one_of(st.none(), st.integers(0, 4)),
    direction=st.one_of(st.none(), st.sampled_from(["ASC", "DESC"])),
    hide=st.one_of(
        st.none(), st.booleans(), st.lists(st.sampled_from(["STATE", "REACTIVE", "USER"]), max_size=2)
    ),
    metadata=st.one_of(st.none(), st.fixed_dictionaries({"even": st.booleans()})),
    include=st.lists(st.sampled_from(["m1", "m5", "o2", "nope"]), max_size=2),
)
async def test_random_recalls_agree(
    populated: Services,
    per_page: Any,
    page: Any,
    direction: Any,
    hide: Any,
    metadata: Any,
    include: list[str],
) -> None:
    query = (
        "query($p: PerPage, $g: Int, $o: MessageOrderBy, $h: HideSignalsInput, $f: RecallFilter, "
        '$i: [IncludeInput!]) { recall(threadId: "t1", perPage: $p, page: $g, orderBy: $o, hideSignals: $h, '
        f"filter: $f, include: $i) {{ total page perPage hasMore messages {{ {MESSAGE_FIELDS} }} }} }}"
    )
    variables: dict[str, Any] = {
        "p": per_page,
        "g": page,
        "i": [{"id": i, "withPreviousMessages": 1} for i in include],
    }
    if direction:
        variables["o"] = {"direction": direction}
    if hide is not None:
        variables["h"] = {"all": hide} if isinstance(hide, bool) else {"types": hide}
    if metadata is not None:
        variables["f"] = {"metadata": metadata}
    fast, normal = await both(populated, query, variables)
    if normal.errors:
        assert fast is None
    else:
        assert fast == {"data": normal.data}


def test_the_plan_cache_charges_the_operation_name_it_keeps() -> None:
    """Plans are cached by document and operationName, but only the document was charged: 512 names of
    no operation, megabytes each, stayed in memory unseen by the cache's limit (a review measured
    +130 MB for 60 names of 2 MB)."""
    fast_path = build_schema().fast_path
    query = '{ thread(id: "t1") { id } }'
    for n in range(20):
        assert fast_path.plan(query, f"Op{n}" + "x" * 4_000_000) is None
    held = sum(len(query) + len(name or "") for query, name in fast_path._plans._items)
    assert held <= fast_path._plans.max_chars and held == fast_path._plans._chars
    fast_path.plan(query, "Short")
    assert (query, "Short") in fast_path._plans
