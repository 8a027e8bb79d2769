"""Keyset paging: recall's `after` and `before` cursors, Message.cursor and RecallResult's start and end
cursors, against a real database (both engines) and over real HTTP."""

from __future__ import annotations

import base64
import itertools
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from models.records import MAX_MS, MIN_MS, MessageRecord
from resolvers import cursors
from resolvers.auth import OPEN
from resolvers.context import Services
from resolvers.errors import BadUserInput
from resolvers.recall import IncludeItem, OrderBy, RecallArgs, RecallResult
from tests.factories import msg, seed
from tests.support import Api, statements, text_message, uid

SEQ_MAX = 2**63 - 1


# ------------------------------------------------------------------------------------------ the codec
@given(st.integers(MIN_MS, MAX_MS), st.integers(0, SEQ_MAX))
def test_a_cursor_names_its_place(created_at: int, seq: int) -> None:
    cursor = cursors.encode(created_at, seq)
    assert cursors.decode(cursor, "after") == (created_at, seq)
    assert cursor.isascii() and not set(cursor) & set("+/=")  # as it is in a URL


def _raw(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "m-1",  # a message id, say
        "not base64!",
        cursors.encode(1, 2) + "==",  # padded: not as it was returned
        cursors.encode(1, 2) + "A",
        _raw("01:2"),  # leading zero
        _raw("-0:2"),
        _raw("1:-2"),
        _raw("1:2:3"),
        _raw(" 1:2"),
        _raw(f"{MAX_MS + 1}:1"),
        _raw(f"{MIN_MS - 1}:1"),
        _raw(f"1:{SEQ_MAX + 1}"),
        _raw("1"),
        base64.urlsafe_b64encode(b"\xff\xfe:1").rstrip(b"=").decode(),  # not UTF-8
        "A" * 10_000,
    ],
)
def test_anything_else_is_refused(cursor: str) -> None:
    with pytest.raises(BadUserInput, match="before is not a recall cursor") as refused:
        cursors.decode(cursor, "before")
    assert refused.value.extensions["argument"] == "before"


# ---------------------------------------------------------------------------------- against a model
async def recall(services: Services, **kwargs: Any) -> RecallResult:
    kwargs.setdefault("thread_id", "t1")
    return await services.recall.recall(RecallArgs(**kwargs), principal=OPEN)


def place(m: MessageRecord) -> tuple[int, int]:
    return m.order_key


@dataclass
class Case:
    after: tuple[int, int] | None
    before: tuple[int, int] | None
    ascending: bool
    per_page: int
    page: int
    metadata: dict[str, Any] | None


def expected(rows: list[MessageRecord], case: Case) -> tuple[list[str], int, bool, str | None, str | None]:
    """What the contract's page query gives, with the cursors as two more conditions on it."""
    matching = [
        m
        for m in sorted(rows, key=place)
        if (case.after is None or place(m) > case.after)
        and (case.before is None or place(m) < case.before)
        and (
            case.metadata is None
            or all(m.content.get("metadata", {}).get(k) == v for k, v in case.metadata.items())
        )
    ]
    walk = matching if case.ascending else matching[::-1]
    offset = case.page * case.per_page
    page = sorted(walk[offset : offset + case.per_page], key=place)
    total = len(matching)
    if case.metadata:
        has_more = offset + len(page) < total
    else:
        has_more = len(page) < total and offset + case.per_page < total
    start = cursors.encode(*place(page[0])) if page else None
    end = cursors.encode(*place(page[-1])) if page else None
    return [m.id for m in page], total, has_more, start, end


def observed(result: RecallResult) -> tuple[list[str], int, bool, str | None, str | None]:
    return (
        [m.id for m in result.messages],
        result.total,
        result.has_more,
        result.start_cursor,
        result.end_cursor,
    )


# Ties: several messages of one instant, which only the insertion order tells apart.
TIMES = [0, 0, 0, 1, 2, 2, 3, 4, 4, 4, 5, 6, 6]


async def stored(services: Services) -> list[MessageRecord]:
    return (await recall(services, per_page=False)).messages


@pytest.fixture
async def tied(services: Services) -> tuple[Services, list[tuple[int, int]]]:
    """A thread of 12 messages with tied times (one more was deleted), and the places to page from:
    every message's, the deleted one's, and places before and after everything."""
    await seed(
        services,
        *(msg(f"m{i:02}", at=at, metadata={"k": "a" if i % 3 else "b"}) for i, at in enumerate(TIMES)),
    )
    rows = await stored(services)
    gone = next(m for m in rows if m.id == "m05")
    await services.messages.delete(["m05"], principal=OPEN)
    places = [place(m) for m in rows] + [(MIN_MS, 0), (MAX_MS, SEQ_MAX)]
    assert place(gone) in places
    return services, places


async def check(services: Services, cases: list[Case]) -> None:
    rows = await stored(services)
    for case in cases:
        result = await recall(
            services,
            after=cursors.encode(*case.after) if case.after else None,
            before=cursors.encode(*case.before) if case.before else None,
            order_by=OrderBy(direction="ASC") if case.ascending else None,
            per_page=case.per_page,
            page=case.page,
            metadata=case.metadata,
        )
        assert observed(result) == expected(rows, case), case


def cases(places: list[tuple[int, int]], pairs: list[tuple[Any, Any]]) -> list[Case]:
    return [
        Case(after, before, ascending, per_page, page, metadata)
        for after, before in pairs
        for ascending, per_page, page, metadata in itertools.product(
            (False, True), (2, 5), (0, 1), (None, {"k": "a"})
        )
    ]


async def test_one_sided_pages_match_the_model(tied: tuple[Services, list[tuple[int, int]]]) -> None:
    services, places = tied
    pairs: list[tuple[Any, Any]] = [(None, None), *((p, None) for p in places), *((None, p) for p in places)]
    await check(services, cases(places, pairs))
    # Counted again from the cache: the same answers.
    await check(services, cases(places, pairs[:6]))


async def test_pages_between_two_places_match_the_model(tied: tuple[Services, list[tuple[int, int]]]) -> None:
    services, places = tied
    pairs = [(a, b) for a, b in itertools.product(places[::3], places[1::3])]  # b before a too: empty
    await check(services, cases(places, pairs))


async def test_counts_follow_the_thread_as_it_changes(tied: tuple[Services, list[tuple[int, int]]]) -> None:
    """Counts between places are cached under the thread's change counter: a message saved after a
    place, one saved into the history before it, and a deletion all show in the next answer."""
    services, places = tied
    pairs: list[tuple[Any, Any]] = [(places[4], None), (None, places[7]), (places[2], places[9])]
    await check(services, cases(places, pairs))
    await seed(services, msg("late", at=9), msg("early", at=-1), msg("tied", at=2), threads={})
    await check(services, cases(places, pairs))
    await services.messages.delete(["m08", "early"], principal=OPEN)
    await check(services, cases(places, pairs))


@pytest.mark.parametrize("ascending", [False, True])
@pytest.mark.parametrize("metadata", [None, {"k": "a"}])
async def test_walks_from_page_to_page_match_the_model(
    tied: tuple[Services, list[tuple[int, int]]], ascending: bool, metadata: dict[str, Any] | None
) -> None:
    """Walking on from each page's far end (startCursor newest first, endCursor oldest first): after
    the first page from a cursor, each page's count is the one the page before left in the cache, and it
    must be the model's too."""
    services, _ = tied
    rows = await stored(services)
    order = OrderBy(direction="ASC") if ascending else None
    page = await recall(services, per_page=2, order_by=order, metadata=metadata)
    walked = 1
    while page.has_more:
        cursor = page.end_cursor if ascending else page.start_cursor
        assert cursor is not None
        side = "after" if ascending else "before"
        with statements(services) as seen:
            page = await recall(services, per_page=2, order_by=order, metadata=metadata, **{side: cursor})
        counted = [s for s in seen if "count(" in s.lower()]
        assert len(counted) == (1 if walked == 1 else 0), seen
        case = Case(
            cursors.decode(cursor, side) if ascending else None,
            None if ascending else cursors.decode(cursor, side),
            ascending,
            2,
            0,
            metadata,
        )
        assert observed(page) == expected(rows, case), case
        walked += 1
    assert walked == (4 if metadata else 6)


# --------------------------------------------------------------------------------------- in use
async def test_paging_back_while_messages_arrive_sees_each_message_once(services: Services) -> None:
    """A chat view scrolling back from the newest messages with startCursor, while new messages keep
    arriving: offsets would shift by every new message (and show some twice); places do not."""
    await seed(services, *(msg(f"m{i:02}", at=i // 3) for i in range(25)))  # three to an instant
    page = await recall(services, per_page=4)
    seen = [m.id for m in page.messages]
    arrived = 0
    while page.has_more:
        arrived += 1
        await seed(services, msg(f"new{arrived}", at=100 + arrived), threads={})
        assert page.start_cursor is not None
        page = await recall(services, per_page=4, before=page.start_cursor)
        assert page.total == 25 - len(seen)  # what is older than the cursor; none of the new ones
        seen[:0] = [m.id for m in page.messages]
    assert seen == [f"m{i:02}" for i in range(25)]
    # Catching up from the newest message seen: what arrived meanwhile, oldest first.
    newest = cursors.encode(*place((await stored(services))[24]))
    caught = await recall(services, after=newest, order_by=OrderBy(direction="ASC"), per_page=100)
    assert [m.id for m in caught.messages] == [f"new{i}" for i in range(1, arrived + 1)]
    assert (caught.total, caught.has_more) == (arrived, False)


async def test_a_page_of_hidden_signals_still_moves_the_cursor(services: Services) -> None:
    """Signals are hidden after the page is read (as in Mastra): a page of signals only is empty, and
    its cursors still point past it, so paging back does not stall on it."""
    await seed(
        services,
        msg("old", at=0),
        *(msg(f"s{i}", at=1 + i, role="signal", metadata={"signal": {"type": "state"}}) for i in range(3)),
        msg("new", at=9),
    )
    first = await recall(services, per_page=1, hide_signals=True)
    assert [m.id for m in first.messages] == ["new"]
    assert first.start_cursor is not None
    signals = await recall(services, per_page=3, before=first.start_cursor, hide_signals=True)
    assert (signals.messages, signals.total, signals.has_more) == ([], 4, True)
    assert signals.start_cursor is not None and signals.end_cursor is not None
    last = await recall(services, per_page=3, before=signals.start_cursor, hide_signals=True)
    assert ([m.id for m in last.messages], last.total, last.has_more) == (["old"], 1, False)


async def test_no_rows_no_cursors(services: Services) -> None:
    await seed(services, msg("a", at=0))
    for kwargs in (
        {"per_page": 0},
        {"thread_id": "t1", "page": 5},
        {"thread_config": {"lastMessages": False}},
    ):
        result = await recall(services, **kwargs)
        assert (result.start_cursor, result.end_cursor) == (None, None)


async def test_include_rows_are_not_bounded_by_cursors(services: Services) -> None:
    """include (and semantic hits) are not the page: the cursors bound only the page query."""
    await seed(services, *(msg(f"m{i}", at=i) for i in range(6)))
    rows = await stored(services)
    result = await recall(
        services, per_page=2, before=cursors.encode(*place(rows[3])), include=[IncludeItem(id="m5")]
    )
    assert [m.id for m in result.messages] == ["m1", "m2", "m5"]
    assert (result.total, result.start_cursor) == (3, cursors.encode(*place(rows[1])))
    assert result.end_cursor == cursors.encode(*place(rows[2]))  # the page's, not the include row's


async def test_a_bad_cursor_is_refused_before_anything_is_read(services: Services) -> None:
    await seed(services, msg("a", at=0))
    with pytest.raises(BadUserInput, match="after is not a recall cursor"):
        await recall(services, after="a")
    # Mastra's own checks come first: the page's.
    with pytest.raises(BadUserInput, match="page must be >= 0"):
        await recall(services, page=-1, before="a")


# ------------------------------------------------------------------------------------- over HTTP
PAGE = """query(
  $threadId: ID!, $perPage: PerPage, $after: String, $before: String, $orderBy: MessageOrderBy
) {
  recall(threadId: $threadId, perPage: $perPage, after: $after, before: $before, orderBy: $orderBy) {
    total hasMore startCursor endCursor messages { id cursor }
  }
}"""
SAVE = "mutation($m: [MessageInput!]!) { saveMessages(messages: $m) { messages { id cursor } } }"
LISTING = """query($r: String!, $before: String) {
  threads(resourceId: $r) {
    threads { id recall(perPage: 2, before: $before) { total startCursor messages { id } } }
  }
}"""


async def test_cursors_over_http(api: Api) -> None:
    thread_id, resource_id = uid("t"), uid("r")
    await api.execute(
        "mutation($i: CreateThreadInput!) { createThread(input: $i) { id } }",
        i={"id": thread_id, "resourceId": resource_id},
    )
    saved = await api.execute(
        SAVE,
        m=[
            text_message(
                thread_id=thread_id, id=f"{thread_id}-{i}", created_at=f"2026-01-01T00:00:0{i // 2}Z"
            )
            for i in range(6)
        ],
    )
    cursor_of = {m["id"]: m["cursor"] for m in saved["saveMessages"]["messages"]}
    newest = (await api.execute(PAGE, threadId=thread_id, perPage=2))["recall"]
    assert [m["id"] for m in newest["messages"]] == [f"{thread_id}-4", f"{thread_id}-5"]
    # A message's cursor is the same wherever it is read, and the page's cursors are its rows'.
    assert [m["cursor"] for m in newest["messages"]] == [
        cursor_of[f"{thread_id}-4"],
        cursor_of[f"{thread_id}-5"],
    ]
    assert (newest["startCursor"], newest["endCursor"]) == (
        cursor_of[f"{thread_id}-4"],
        cursor_of[f"{thread_id}-5"],
    )
    older = (await api.execute(PAGE, threadId=thread_id, perPage=2, before=newest["startCursor"]))["recall"]
    assert ([m["id"] for m in older["messages"]], older["total"], older["hasMore"]) == (
        [f"{thread_id}-2", f"{thread_id}-3"],
        4,
        True,
    )
    # A saved message's cursor (from saveMessages) pages forward from it.
    after = await api.execute(
        PAGE, threadId=thread_id, perPage=3, after=cursor_of[f"{thread_id}-1"], orderBy={"direction": "ASC"}
    )
    assert [m["id"] for m in after["recall"]["messages"]] == [f"{thread_id}-{i}" for i in (2, 3, 4)]
    # Nested in a listing: each thread's recall takes the cursor as well.
    listing = await api.execute(LISTING, r=resource_id, before=cursor_of[f"{thread_id}-3"])
    (nested,) = listing["threads"]["threads"]
    assert nested["recall"]["total"] == 3
    assert [m["id"] for m in nested["recall"]["messages"]] == [f"{thread_id}-1", f"{thread_id}-2"]
    # A cursor that is not one is the caller's mistake, said as such.
    errors = await api.errors(PAGE, threadId=thread_id, after=f"{thread_id}-1")
    assert errors[0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert errors[0]["message"].startswith("after is not a recall cursor")
