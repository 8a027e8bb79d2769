"""hideInPageQuery: the page query itself leaves out the rows a recall hides (system rows, and the signals
or reminders hideSignals hides), against a real database (both engines) and over real HTTP."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from models.records import MessageQuery, MessageRecord
from resolvers import cursors
from resolvers.auth import OPEN
from resolvers.context import RequestContext, Services
from resolvers.messages import MessageInput
from resolvers.recall import OrderBy, RecallArgs, RecallResult, filter_signals, hidden_rows
from schema import build_schema
from tests.factories import msg, seed
from tests.support import Api, statements, text_message, uid


async def recall(services: Services, **kwargs: Any) -> RecallResult:
    kwargs.setdefault("thread_id", "t1")
    return await services.recall.recall(RecallArgs(**kwargs), principal=OPEN)


def kinds(i: int) -> MessageInput:
    """Every sort of row a recall may hide, among plain ones, with tied times: by i % 7, plain (0, 5,
    6), a state signal (1), a system reminder (2: legacy and typed), a system row (3), a reactive
    signal (4)."""
    meta: dict[str, Any] = {"k": "a" if i % 3 else "b"}
    role, text = "user", None
    if i % 7 in (1, 4):
        role, meta = "signal", {**meta, "signal": {"type": "state" if i % 7 == 1 else "reactive"}}
    elif i % 7 == 2:
        text = "<system-reminder>be brief</system-reminder>"
    elif i % 7 == 3:
        role = "system"
    return msg(f"m{i:02}", at=i // 2, role=role, text=text, metadata=meta)


@pytest.fixture
async def mixed(services: Services) -> Services:
    await seed(services, *(kinds(i) for i in range(24)))
    return services


HIDING = [
    {"hide_signals": None, "include_system_reminders": None},
    {"hide_signals": None, "include_system_reminders": True},
    {"hide_signals": True},
    {"hide_signals": False},
    {"hide_signals": ["state"]},
    {"hide_signals": ["reactive", "system-reminder"]},
    {"hide_signals": []},
]


def expected(
    shown: list[MessageRecord], *, per_page: int, page: int, ascending: bool, metadata: dict[str, Any] | None
) -> tuple[list[str], int, bool]:
    """The contract's page, with `shown` (what the recall may return) as the thread's rows."""
    rows = [
        m
        for m in shown
        if metadata is None or all(m.content["metadata"].get(k) == v for k, v in metadata.items())
    ]
    walk = rows if ascending else rows[::-1]
    window = sorted(walk[page * per_page : (page + 1) * per_page], key=lambda m: m.order_key)
    total = len(rows)
    offset = page * per_page
    has_more = offset + len(window) < total if metadata else len(window) < total and offset + per_page < total
    return [m.id for m in window], total, has_more


async def test_pages_are_full_and_count_only_what_they_can_return(mixed: Services) -> None:
    every = (await recall(mixed, per_page=False, hide_signals=False)).messages  # all but system rows
    assert len(every) == 24 - 3
    for hiding, per_page, page, ascending, metadata in itertools.product(
        HIDING, (3, 5), (0, 1, 3), (False, True), (None, {"k": "a"})
    ):
        shown = filter_signals(every, hiding["hide_signals"], hiding.get("include_system_reminders"))
        result = await recall(
            mixed,
            per_page=per_page,
            page=page,
            order_by=OrderBy(direction="ASC") if ascending else None,
            metadata=metadata,
            hide_in_page_query=True,
            **hiding,
        )
        want = expected(shown, per_page=per_page, page=page, ascending=ascending, metadata=metadata)
        assert ([m.id for m in result.messages], result.total, result.has_more) == want, (
            hiding,
            per_page,
            page,
        )


async def test_without_it_hidden_rows_are_removed_after_the_page_as_in_mastra(mixed: Services) -> None:
    mastra = await recall(mixed, per_page=7, hide_signals=True)
    pushed = await recall(mixed, per_page=7, hide_signals=True, hide_in_page_query=True)
    assert mastra.total == 24 and len(mastra.messages) < 7  # the newest 7 rows, less what they hide
    assert pushed.total == 24 - 3 - 11 and len(pushed.messages) == 7  # 3 system rows, 11 typed signals


async def test_paging_with_cursors_walks_every_shown_row_once(mixed: Services) -> None:
    every = (await recall(mixed, per_page=False, hide_signals=False)).messages
    shown = [m.id for m in filter_signals(every, True, None)]
    page = await recall(mixed, per_page=4, hide_signals=True, hide_in_page_query=True)
    seen = [m.id for m in page.messages]
    while page.has_more:
        assert len(page.messages) == 4  # never short: nothing is removed after the page
        page = await recall(
            mixed, per_page=4, hide_signals=True, hide_in_page_query=True, before=page.start_cursor
        )
        assert page.total == len(shown) - len(seen)
        seen[:0] = [m.id for m in page.messages]
    assert seen == shown


async def test_the_hidden_rows_are_counted_along_their_own_index(mixed: Services) -> None:
    """The count of a page query that leaves hidden rows out is the thread's maintained count less the
    hidden rows', which ix_messages_thread_hidden holds: the thread's shown rows are never walked."""
    repo = mixed.repository
    ways: list[tuple[str | tuple[str, ...], dict[str, Any]]] = [
        ("system", {"hide_signals": False}),
        ("reminders", {"hide_signals": None}),
        ("signals", {"hide_signals": True}),
        (("state",), {"hide_signals": ["state"]}),
    ]
    for hidden, hiding in ways:
        plan = await repo.explain(repo.hidden_count_statement(MessageQuery(thread_id="t1", hidden=hidden)))
        assert "ix_messages_thread_hidden" in plan, (hidden, plan)
        with statements(mixed) as seen:
            await recall(mixed, per_page=2, hide_in_page_query=True, **hiding)
        counts = [s for s in seen if "count(" in s.lower()]
        assert len(counts) == 1 and "legacy_reminder" in counts[0] and "system" in counts[0], seen


@pytest.mark.parametrize(
    ("hiding", "hidden"),
    list(
        zip(
            HIDING,
            [
                "reminders",
                "system",
                "signals",
                "system",
                ("state",),
                ("reactive", "system-reminder"),
                "system",
            ],
            strict=True,
        )
    ),
)
def test_what_the_page_query_hides_is_what_the_page_hides(hiding: dict[str, Any], hidden: object) -> None:
    assert hidden_rows(hiding["hide_signals"], hiding.get("include_system_reminders")) == hidden


async def test_counts_follow_the_thread_as_it_changes(mixed: Services) -> None:
    before = await recall(mixed, per_page=2, hide_signals=True, hide_in_page_query=True)
    await seed(
        mixed,
        msg("new-signal", at=50, role="signal", metadata={"signal": {"type": "state"}}),
        msg("new-plain", at=51),
        threads={},
    )
    after = await recall(mixed, per_page=2, hide_signals=True, hide_in_page_query=True)
    assert after.total == before.total + 1 and [m.id for m in after.messages][-1] == "new-plain"
    await mixed.messages.delete(["new-plain", "m00"], principal=OPEN)
    assert (
        await recall(mixed, per_page=2, hide_signals=True, hide_in_page_query=True)
    ).total == before.total - 1


RECALL = """query($t: ID!, $hide: Boolean, $before: String) {
  recall(threadId: $t, perPage: 2, hideSignals: {all: true}, hideInPageQuery: $hide, before: $before) {
    total hasMore startCursor messages { id }
  }
  thread(id: $t) {
    recall(perPage: 2, hideSignals: {all: true}, hideInPageQuery: $hide) { total messages { id } }
  }
}"""


async def test_over_http(api: Api) -> None:
    thread_id = uid("t")
    await api.execute(
        "mutation($i: CreateThreadInput!) { createThread(input: $i) { id } }",
        i={"id": thread_id, "resourceId": uid("r")},
    )
    signal = {"format": 2, "parts": [], "metadata": {"signal": {"type": "state"}}}
    messages = [
        text_message(thread_id=thread_id, id=f"{thread_id}-{i}", created_at=f"2026-01-01T00:00:0{i}Z")
        for i in range(3)
    ]
    messages += [
        {
            "threadId": thread_id,
            "id": f"{thread_id}-s{i}",
            "role": "signal",
            "content": signal,
            "createdAt": f"2026-01-01T00:00:1{i}Z",
        }
        for i in range(2)
    ]
    await api.execute(
        "mutation($m: [MessageInput!]!) { saveMessages(messages: $m) { acknowledged } }", m=messages
    )
    as_mastra = await api.execute(RECALL, t=thread_id)
    assert (as_mastra["recall"]["total"], as_mastra["recall"]["messages"]) == (5, [])
    pushed = await api.execute(RECALL, t=thread_id, hide=True)
    for got in (pushed["recall"], pushed["thread"]["recall"]):
        assert (got["total"], [m["id"] for m in got["messages"]]) == (3, [f"{thread_id}-1", f"{thread_id}-2"])
    older = await api.execute(RECALL, t=thread_id, hide=True, before=pushed["recall"]["startCursor"])
    assert [m["id"] for m in older["recall"]["messages"]] == [f"{thread_id}-0"]
    assert cursors.decode(pushed["recall"]["startCursor"], "before")  # a cursor as recall returns them


async def test_a_listing_shows_each_threads_newest_message_in_one_batch(services: Services) -> None:
    """A thread listing with each thread's last message as a preview: when the newest row is a signal,
    Mastra's way gives an empty preview; in the page query it is the newest message that shows, and
    the threads' pages are still read in one batch."""
    threads = {f"t{n}": "r1" for n in range(4)}
    await seed(
        services,
        *(msg(f"m{n}", thread=f"t{n}", at=1) for n in range(4)),
        *(
            msg(f"s{n}", thread=f"t{n}", at=2, role="signal", metadata={"signal": {"type": "state"}})
            for n in range(4)
        ),
        threads=threads,
    )
    query = """query($pushed: Boolean) { threads(resourceId: "r1") { threads { id
      recall(perPage: 1, hideSignals: {all: true}, hideInPageQuery: $pushed) { total messages { id } } }
    } }"""
    for pushed, preview, total in ((False, [], 2), (True, ["m"], 1)):
        context = RequestContext(services=services, principal=OPEN)
        result = await build_schema().execute(
            query, variable_values={"pushed": pushed}, context_value=context
        )
        assert result.errors is None and result.data is not None
        for thread in result.data["threads"]["threads"]:
            n = thread["id"][1:]
            assert thread["recall"] == {"total": total, "messages": [{"id": f"{p}{n}"} for p in preview]}
        assert context.pages.batches == 1
