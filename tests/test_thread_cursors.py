"""Keyset paging of threads listings: `threads(after:, before:)` and ThreadPage's start and end cursors,
against a real database (both engines) and over real HTTP."""

from __future__ import annotations

import base64
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from models.records import MAX_MS, MIN_MS, ThreadRecord
from resolvers import cursors
from resolvers.auth import OPEN
from resolvers.context import RequestContext, Services
from resolvers.errors import MAX_ID_BYTES, BadUserInput
from resolvers.threads import ThreadPage
from schema import build_schema
from tests.support import Api, database, engines, statements, uid

FIELDS = ("createdAt", "updatedAt")
Place = tuple[int, str]


# Both engines, and PostgreSQL again with a locale's collation (as managed services often have), in
# which "_a" sorts before "B" and "b" before "B": a place's tie-break must still be code point order.
@pytest.fixture(params=[*engines(), *(["postgres-en-US"] if "postgres" in engines() else [])])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    kind, _, locale = request.param.partition("-")
    async with database(kind, tmp_path, icu_locale=locale or None) as url:
        yield url


# ------------------------------------------------------------------------------------------ the codec
IDS = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), min_size=1, max_size=40)


@given(st.sampled_from(FIELDS), st.integers(MIN_MS, MAX_MS), IDS)
def test_a_cursor_names_its_place(field: str, at: int, thread_id: str) -> None:
    cursor = cursors.encode_thread(field, at, thread_id)
    assert cursors.decode_thread(cursor, "after", field) == (at, thread_id)
    assert cursor.isascii() and not set(cursor) & set("+/=")  # as it is in a URL


def test_the_longest_id_fits() -> None:
    longest = "\U0001f600" * (MAX_ID_BYTES // 4)
    cursor = cursors.encode_thread("updatedAt", MIN_MS, longest)
    assert cursors.decode_thread(cursor, "before", "updatedAt") == (MIN_MS, longest)


def _raw(text: str | bytes) -> str:
    data = text.encode() if isinstance(text, str) else text
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "t-1",  # a thread id, say
        "not base64!",
        cursors.encode(1, 2),  # a recall cursor
        cursors.encode_thread("createdAt", 1, "t") + "==",  # padded: not as it was returned
        cursors.encode_thread("createdAt", 1, "t") + "A",
        _raw("c:01:t"),  # leading zero
        _raw("c:-0:t"),
        _raw("c:1:"),  # no id
        _raw("x:1:t"),
        _raw("C:1:t"),
        _raw("c: 1:t"),
        _raw(f"c:{MAX_MS + 1}:t"),
        _raw(f"c:{MIN_MS - 1}:t"),
        _raw("c:1:t\x00"),  # no stored id holds U+0000
        _raw("c:1:" + "x" * (MAX_ID_BYTES + 1)),
        _raw(b"c:1:\xff\xfe"),  # not UTF-8
        _raw(b"c:1:\xed\xa0\x80"),  # a lone surrogate
        "A" * 10_000,
        "\ud800",
    ],
)
def test_anything_else_is_refused(cursor: str) -> None:
    with pytest.raises(BadUserInput, match="before is not a threads cursor") as refused:
        cursors.decode_thread(cursor, "before", "createdAt")
    assert refused.value.extensions["argument"] == "before"


def test_a_cursor_of_the_other_order_is_refused() -> None:
    cursor = cursors.encode_thread("createdAt", 1, "t")
    with pytest.raises(BadUserInput, match="after is a cursor of a listing ordered by createdAt"):
        cursors.decode_thread(cursor, "after", "updatedAt")


# ---------------------------------------------------------------------------------- against a model
# Ids whose code point order differs from a locale's ("B" < "_a" < "a" < "b"), times with ties, and an
# updatedAt order unlike the createdAt one.
THREADS = [
    ("B", 0, 7),
    ("_a", 0, 3),
    ("b", 0, 7),
    ("a", 1, 2),
    ("é", 2, 7),
    ("t10", 2, 0),
    ("t2", 2, 9),
    ("Z9", 3, 3),
    ("gone", 3, 5),
    ("ü", 4, 3),
    ("x", 5, 1),
]


@dataclass
class Case:
    field: str
    descending: bool
    after: Place | None
    before: Place | None
    per_page: int | bool
    page: int
    metadata: dict[str, Any] | None


def key(thread: ThreadRecord, field: str) -> Place:
    return (thread.updated_at if field == "updatedAt" else thread.created_at), thread.id


def expected(
    threads: list[ThreadRecord], case: Case
) -> tuple[list[str], int | None, bool, str | None, str | None]:
    """A listing is its threads in (field, id) order; after and before are places in that order."""

    def ahead(a: Place, b: Place) -> bool:  # whether a is listed ahead of b
        return a > b if case.descending else a < b

    listing = sorted(
        (
            t
            for t in threads
            if (case.after is None or ahead(case.after, key(t, case.field)))
            and (case.before is None or ahead(key(t, case.field), case.before))
            and (
                case.metadata is None or all((t.metadata or {}).get(k) == v for k, v in case.metadata.items())
            )
        ),
        key=lambda t: key(t, case.field),
        reverse=case.descending,
    )
    if case.per_page is False:
        page, has_more = listing, False
    else:
        assert isinstance(case.per_page, int)
        offset = case.page * case.per_page
        page, has_more = listing[offset : offset + case.per_page], offset + case.per_page < len(listing)
    start = cursors.encode_thread(case.field, *key(page[0], case.field)) if page else None
    end = cursors.encode_thread(case.field, *key(page[-1], case.field)) if page else None
    return [t.id for t in page], len(listing), has_more, start, end


def observed(page: ThreadPage) -> tuple[list[str], int | None, bool, str | None, str | None]:
    return [t.id for t in page.threads], page.total, page.has_more, page.start_cursor, page.end_cursor


@pytest.fixture
async def listed(services: Services) -> tuple[Services, list[ThreadRecord], dict[str, list[Place]]]:
    """The threads above in resource r1 (one more was deleted; another resource's threads around them),
    and per order field the places to page from: every thread's, the deleted one's, and places before
    and after everything."""
    repo = services.repository
    for n, (thread_id, created, updated) in enumerate(THREADS):
        metadata = {"k": "a" if n % 3 else "b"}
        await repo.insert_thread(ThreadRecord(thread_id, "r1", "", metadata, created, updated))
        await repo.insert_thread(ThreadRecord(f"other-{thread_id}", "r2", "", metadata, created, updated))
    everything = (await services.threads.list("r1", per_page=False, principal=OPEN)).threads
    assert await services.threads.delete("gone", principal=OPEN)
    places = {
        field: [key(t, field) for t in everything] + [(MIN_MS, "0"), (MAX_MS, "zzz")] for field in FIELDS
    }
    kept = [t for t in everything if t.id != "gone"]
    return services, kept, places


async def check(services: Services, threads: list[ThreadRecord], cases: list[Case]) -> None:
    """Each case, counted and (the page then tells hasMore by reading one thread more) not counted."""
    for case in cases:
        for counted in (True, False):
            page = await services.threads.list(
                "r1",
                page=case.page,
                per_page=case.per_page,  # type: ignore[arg-type]
                order_field=case.field,
                descending=case.descending,
                metadata=case.metadata,
                after=cursors.encode_thread(case.field, *case.after) if case.after else None,
                before=cursors.encode_thread(case.field, *case.before) if case.before else None,
                principal=OPEN,
                counted=counted,
            )
            ids, total, has_more, start, end = expected(threads, case)
            if not counted and case.per_page is not False:
                total = None
            assert observed(page) == (ids, total, has_more, start, end), (case, counted)


def cases(field: str, pairs: list[tuple[Place | None, Place | None]]) -> list[Case]:
    shapes = [(2, 0), (2, 1), (5, 0), (5, 1), (False, 0)]
    return [
        Case(field, descending, after, before, per_page, page, metadata)
        for after, before in pairs
        for descending, (per_page, page), metadata in itertools.product(
            (True, False), shapes, (None, {"k": "a"})
        )
    ]


@pytest.mark.parametrize("field", FIELDS)
async def test_one_sided_pages_match_the_model(
    listed: tuple[Services, list[ThreadRecord], dict[str, list[Place]]], field: str
) -> None:
    services, threads, places = listed
    pairs: list[tuple[Place | None, Place | None]] = [(p, None) for p in places[field]]
    pairs += [(None, p) for p in places[field]]
    await check(services, threads, cases(field, pairs))


@pytest.mark.parametrize("field", FIELDS)
async def test_pages_between_two_places_match_the_model(
    listed: tuple[Services, list[ThreadRecord], dict[str, list[Place]]], field: str
) -> None:
    services, threads, places = listed
    # Every pair, either way round (a reversed pair is an empty listing), in one direction's shapes.
    pairs = list(itertools.permutations(places[field][::2], 2))
    await check(services, threads, [c for c in cases(field, pairs) if c.metadata is None and c.page == 0])


async def test_without_cursors_nothing_changes(
    listed: tuple[Services, list[ThreadRecord], dict[str, list[Place]]],
) -> None:
    services, threads, _ = listed
    await check(services, threads, cases("createdAt", [(None, None)]) + cases("updatedAt", [(None, None)]))


async def test_a_cursor_is_checked_before_anything_is_read(services: Services) -> None:
    with pytest.raises(BadUserInput, match="after is not a threads cursor"):
        await services.threads.list("r1", after="B", principal=OPEN)
    # Mastra's own checks come first: the page's.
    with pytest.raises(BadUserInput, match="page must be >= 0"):
        await services.threads.list("r1", page=-1, after="B", principal=OPEN)
    by_created = cursors.encode_thread("createdAt", 0, "B")
    with pytest.raises(
        BadUserInput, match="listing ordered by createdAt, and this listing is ordered by updatedAt"
    ):
        await services.threads.list("r1", before=by_created, order_field="updatedAt", principal=OPEN)


# ------------------------------------------------------------------------------------- a sidebar
async def scroll(services: Services, resource_id: str, *, by_cursor: bool) -> list[str]:
    """Newest activity first, pages of 5, over 30 threads; before each of the first three pages after
    the first, two threads get a new message: one the reader has seen, one not yet seen."""
    for n in range(30):
        await services.repository.insert_thread(
            ThreadRecord(f"{resource_id}-{n:02}", resource_id, "", None, n, n)
        )
    bumped = iter(f"{resource_id}-{n:02}" for n in (29, 3, 27, 5, 25, 7))
    shown: list[str] = []
    page, cursor = 0, None
    while True:
        listing = await services.threads.list(
            resource_id, page=0 if by_cursor else page, per_page=5, order_field="updatedAt",
            after=cursor if by_cursor else None,
            principal=OPEN,
        )  # fmt: skip
        shown += [t.id for t in listing.threads]
        if not listing.has_more:
            return shown
        page, cursor = page + 1, listing.end_cursor
        if page <= 3:
            for _ in range(2):
                await services.threads.update(next(bumped), title="a new message", principal=OPEN)


async def test_a_sidebar_scrolled_while_threads_move_to_the_top_shows_each_thread_once(
    services: Services,
) -> None:
    by_cursor = await scroll(services, "r1", by_cursor=True)
    assert len(by_cursor) == len(set(by_cursor))
    moved = {f"r1-{n:02}" for n in (29, 3, 27, 5, 25, 7)}
    assert {f"r1-{n:02}" for n in range(30)} - moved <= set(by_cursor)
    # The same scroll by page, for contrast: each move pushes the rest down, and threads come twice.
    by_page = await scroll(services, "r2", by_cursor=False)
    assert len(by_page) > len(set(by_page))


# ------------------------------------------------------------------------------------- the plans
async def test_cursor_pages_walk_the_resource_index(services: Services) -> None:
    """A place bounds the range of the resource's index that the page and its count read."""
    repo = services.repository
    for n in range(2000):  # one resource of 1,000 threads among 21
        resource = "big" if n < 1000 else f"r{n % 20}"
        await repo.insert_thread(ThreadRecord(f"t{n:04}", resource, "", None, n, 4000 - n))
    if repo.is_postgres:
        async with repo.engine.begin() as conn:
            await conn.exec_driver_sql("ANALYZE")
    low = {"createdAt": 100, "updatedAt": 3100}  # near either end of big's times: narrow ranges
    high = {"createdAt": 900, "updatedAt": 3900}
    flags = (True, False)
    for field, descending, after, before in itertools.product(FIELDS, flags, flags, flags):
        # Newest first, `after` bounds the times from above and `before` from below; oldest first, the
        # other way round.
        after_at, before_at = (low[field], high[field]) if descending else (high[field], low[field])
        values = {"resource_id": "big", "offset": 0, "limit": 20, "after_at": after_at, "after_id": "t"}
        values |= {"before_at": before_at, "before_id": "t"}
        page, count = repo.thread_statements(field, descending, every_row=False, after=after, before=before)
        index = "ix_threads_resource_updated" if field == "updatedAt" else "ix_threads_resource_created"
        for statement in (page, count):
            plan = await repo.explain(statement.params({p: values[p] for p in statement.compile().params}))
            if after or before:
                assert index in plan, plan
                assert "Seq Scan" not in plan and "SCAN threads" not in plan, plan
            elif statement is page:  # (half the table's threads are big's: counting them may scan)
                assert index in plan, plan


async def test_pages_of_every_resources_threads_walk_an_index(services: Services) -> None:
    """Listing all threads (no resource) reads a page's rows along the time index, not every thread
    sorted: from the top, from a place, in either order, by either field."""
    repo = services.repository
    await repo.import_threads(
        [ThreadRecord(f"t{n:05}", f"r{n % 50}", "", None, n, 40_000 - n) for n in range(20_000)]
    )
    if repo.is_postgres:
        async with repo.engine.begin() as conn:
            await conn.exec_driver_sql("ANALYZE")
    middle = {"createdAt": 10_000, "updatedAt": 30_000}
    flags = (True, False)
    for field, descending, after in itertools.product(FIELDS, flags, flags):
        values = {"offset": 0, "limit": 21, "after_at": middle[field], "after_id": "t"}
        page, _ = repo.thread_statements(
            field, descending, every_row=False, after=after, counted=False, scope="all"
        )
        plan = await repo.explain(page.params({p: values[p] for p in page.compile().params}))
        index = "ix_threads_updated" if field == "updatedAt" else "ix_threads_created"
        assert index in plan, (field, descending, after, plan)
        assert "Seq Scan" not in plan and "SCAN threads\n" not in plan + "\n", plan
        assert "USE TEMP B-TREE FOR ORDER BY" not in plan, plan  # SQLite: no sort of the rows read
    # With a metadata filter the page reads every thread and sorts those that match: a walk along the
    # index would look up every thread, one at a time, to find a value few (or none) of them hold.
    values = {"offset": 0, "limit": 21}
    for field in FIELDS:
        page, _ = repo.thread_statements(
            field, True, every_row=False, metadata={"k": 1}, counted=False, scope="all"
        )
        plan = await repo.explain(page.params({p: values[p] for p in page.compile().params if p in values}))
        assert "ix_threads_created" not in plan and "ix_threads_updated" not in plan, plan
        assert ("Sort" if repo.is_postgres else "USE TEMP B-TREE FOR ORDER BY") in plan, plan
    # Some resources' threads (a restricted credential's listing) come from their own index, sorted:
    # the walk of all threads would pass every other resource's newer threads first.
    values = {"offset": 0, "limit": 21, "resource_ids": ["r1", "r2"]}
    for field in FIELDS:
        page, _ = repo.thread_statements(field, True, every_row=False, counted=False, scope="some")
        plan = await repo.explain(page.params({p: values[p] for p in page.compile().params if p in values}))
        assert "ix_threads_created" not in plan and "ix_threads_updated" not in plan, plan
        assert "ix_threads_resource" in plan, plan
    # And the listing reads what it should: the newest by updatedAt are the oldest created.
    listed = await services.threads.list(
        None, per_page=3, order_field="updatedAt", counted=False, principal=OPEN
    )
    assert [t.id for t in listed.threads] == ["t00000", "t00001", "t00002"]


# ------------------------------------------------------------------------------------- counting
COUNTED = [
    '{ threads(resourceId: "r1", perPage: 2) { total hasMore threads { id } } }',
    '{ threads(resourceId: "r1", perPage: 2) { n: total hasMore threads { id } } }',
    '{ threads(resourceId: "r1", perPage: 2) { ...F } }'
    " fragment F on ThreadPage { total hasMore threads { id } }",
    '{ threads(resourceId: "r1", perPage: 2) { hasMore threads { id } ... on ThreadPage { total } } }',
    '{ threads(resourceId: "r1", perPage: 2) { hasMore threads { id } total @skip(if: false) } }',
    '{ resource(id: "r1") { threads(perPage: 2) { total hasMore threads { id } } } }',
]
UNCOUNTED = [
    '{ threads(resourceId: "r1", perPage: 2) { hasMore endCursor threads { id } } }',
    '{ threads(resourceId: "r1", perPage: 2) { ...F } } fragment F on ThreadPage { hasMore threads { id } }',
    # A total of something else (a thread's recall) is not the listing's.
    '{ threads(resourceId: "r1", perPage: 2) { hasMore threads { id recall(perPage: 1) { total } } } }',
    '{ resource(id: "r1") { threads(perPage: 2) { hasMore threads { id } } } }',
]


@pytest.mark.parametrize("query", COUNTED + UNCOUNTED)
async def test_threads_are_counted_only_when_the_query_selects_total(services: Services, query: str) -> None:
    """Both ways a query runs (the compiled path the HTTP front tries first, and Strawberry's): the same
    answer as counted, and a count of the resource's threads only for a query that selects total."""
    for n in range(5):
        await services.repository.insert_thread(ThreadRecord(f"t{n}", "r1", "", None, n, n))
    schema = build_schema()
    runs = []
    plan = schema.fast_path.plan(query, None)
    # The compiled path takes them all but a directive's and Query.resource's (left to Strawberry).
    assert (plan is None) == ("@" in query or "resource(" in query)
    if plan is not None:
        with statements(services) as fast_seen:
            fast = await schema.fast_path.execute(
                plan, None, RequestContext(services=services, principal=OPEN)
            )
        runs.append((fast, fast_seen))
    with statements(services) as normal_seen:
        normal = await schema.execute(query, context_value=RequestContext(services=services, principal=OPEN))
    assert not normal.errors, normal.errors
    runs.append(({"data": normal.data}, normal_seen))
    assert all(answer == {"data": normal.data} for answer, _ in runs)
    listing = normal.data["threads"] if "threads" in normal.data else normal.data["resource"]["threads"]
    assert listing["hasMore"] is True and [t["id"] for t in listing["threads"]] == ["t4", "t3"]
    for _, seen in runs:
        threads_counted = [s for s in seen if "count(" in s.lower() and "FROM threads" in s]
        assert len(threads_counted) == (1 if query in COUNTED else 0), seen
    if query in COUNTED:
        assert listing.get("total", listing.get("n")) == 5


async def test_has_more_without_a_count_is_mastras(services: Services) -> None:
    """offset + perPage < total, read as "a thread after the page": at every page and size."""
    for n in range(5):
        await services.repository.insert_thread(ThreadRecord(f"t{n}", "r1", "", None, n, n))
    for per_page, page in itertools.product(range(0, 7), range(0, 7)):
        counted = await services.threads.list("r1", page=page, per_page=per_page, principal=OPEN)
        assert counted.total is not None
        bare = await services.threads.list("r1", page=page, per_page=per_page, principal=OPEN, counted=False)
        assert (bare.has_more, bare.threads) == (page * per_page + per_page < counted.total, counted.threads)


# ------------------------------------------------------------------------------------- over HTTP
LISTING = """query($r: String!, $perPage: PerPage, $after: String, $before: String, $orderBy: ThreadOrderBy) {
  threads(resourceId: $r, perPage: $perPage, after: $after, before: $before, orderBy: $orderBy) {
    total hasMore startCursor endCursor threads { id }
  }
}"""
NESTED = """query($r: String!, $after: String) {
  resource(id: $r) { threads(perPage: 2, after: $after) { total endCursor threads { id } } }
}"""


async def test_thread_cursors_over_http(api: Api) -> None:
    resource_id = uid("r")
    ids = [f"{resource_id}-{n}" for n in range(5)]
    for n, thread_id in enumerate(ids):
        await api.execute(
            "mutation($i: CreateThreadInput!) { createThread(input: $i) { id } }",
            i={"id": thread_id, "resourceId": resource_id, "createdAt": f"2026-01-01T00:00:0{n}Z"},
        )
    first = (await api.execute(LISTING, r=resource_id, perPage=2))["threads"]
    assert [t["id"] for t in first["threads"]] == [ids[4], ids[3]]
    second = (await api.execute(LISTING, r=resource_id, perPage=2, after=first["endCursor"]))["threads"]
    assert ([t["id"] for t in second["threads"]], second["total"], second["hasMore"]) == (
        [ids[2], ids[1]],
        3,
        True,
    )
    # The threads above a page's first one, for a refresh of the top.
    above = (await api.execute(LISTING, r=resource_id, before=second["startCursor"]))["threads"]
    assert ([t["id"] for t in above["threads"]], above["total"]) == ([ids[4], ids[3]], 2)
    # Oldest first, `after` is the newer side.
    ascending = await api.execute(
        LISTING, r=resource_id, after=second["endCursor"], orderBy={"field": "CREATED_AT", "direction": "ASC"}
    )
    assert [t["id"] for t in ascending["threads"]["threads"]] == [ids[2], ids[3], ids[4]]
    nested = (await api.execute(NESTED, r=resource_id, after=second["endCursor"]))["resource"]["threads"]
    assert ([t["id"] for t in nested["threads"]], nested["total"]) == ([ids[0]], 1)
    empty = (await api.execute(LISTING, r=resource_id, before=first["startCursor"]))["threads"]
    assert (empty["threads"], empty["total"], empty["startCursor"], empty["endCursor"]) == ([], 0, None, None)

    errors = await api.errors(LISTING, r=resource_id, after=ids[0])
    assert errors[0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert errors[0]["message"].startswith("after is not a threads cursor")
    errors = await api.errors(
        LISTING,
        r=resource_id,
        before=first["endCursor"],
        orderBy={"field": "UPDATED_AT", "direction": "DESC"},
    )
    assert errors[0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert errors[0]["message"].startswith("before is a cursor of a listing ordered by createdAt")
