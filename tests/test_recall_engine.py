"""The recall engine against a real database: the contract's rules, one by one."""

from __future__ import annotations

from typing import Any

import pytest

from models.records import DateRange, IncludeWindow, MessageQuery
from models.repository import Repository, WindowRowsExceeded
from resolvers.auth import OPEN
from resolvers.context import Services
from resolvers.errors import BadUserInput, Forbidden, NotFound
from resolvers.recall import IncludeItem, OrderBy, RecallArgs, RecallResult
from tests.factories import msg, seed, t
from tests.support import statements


async def recall(services: Services, **kwargs: Any) -> RecallResult:
    kwargs.setdefault("thread_id", "t1")
    return await services.recall.recall(RecallArgs(**kwargs), principal=OPEN)


def ids(result: RecallResult) -> list[str]:
    return [m.id for m in result.messages]


def summary(result: RecallResult) -> tuple[list[str], int, int, int | bool, bool]:
    return ids(result), result.total, result.page, result.per_page, result.has_more


@pytest.fixture
async def seven(services: Services) -> Services:
    await seed(services, *(msg(f"m{i}", at=i) for i in range(7)))
    return services


async def test_pagination_walks_back_from_newest(seven: Services) -> None:
    assert summary(await recall(seven, per_page=3, page=0)) == (["m4", "m5", "m6"], 7, 0, 3, True)
    assert summary(await recall(seven, per_page=3, page=1)) == (["m1", "m2", "m3"], 7, 1, 3, True)
    assert summary(await recall(seven, per_page=3, page=2)) == (["m0"], 7, 2, 3, False)
    assert summary(await recall(seven, per_page=3, page=3)) == ([], 7, 3, 3, False)


async def test_default_page_size_is_last_messages(seven: Services) -> None:
    assert summary(await recall(seven)) == ([f"m{i}" for i in range(7)], 7, 0, 10, False)
    result = await recall(seven, thread_config={"lastMessages": 2})
    assert summary(result) == (["m5", "m6"], 7, 0, 2, True)


async def test_per_page_false_and_zero(seven: Services) -> None:
    assert summary(await recall(seven, per_page=False, page=2)) == (
        [f"m{i}" for i in range(7)],
        7,
        2,
        False,
        False,
    )
    assert summary(await recall(seven, per_page=0)) == ([], 0, 0, 0, False)


@pytest.mark.parametrize("bad", [-1, 2.5, float("inf")])
async def test_bad_per_page(seven: Services, bad: float) -> None:
    with pytest.raises(BadUserInput, match="perPage must be >= 0"):
        await recall(seven, per_page=bad)


async def test_bad_page(seven: Services) -> None:
    with pytest.raises(BadUserInput, match="page must be >= 0"):
        await recall(seven, page=-1, per_page=-1)  # page is checked first


async def test_history_disabled_returns_empty_before_any_check(seven: Services) -> None:
    result = await recall(
        seven, thread_config={"lastMessages": False}, resource_id="wrong", page=-1, metadata={"a-b": 1}
    )
    assert summary(result) == ([], 0, -1, 0, False)
    result = await recall(seven, thread_config={"lastMessages": False}, per_page=2)
    assert summary(result) == (["m5", "m6"], 7, 0, 2, True)


@pytest.mark.parametrize("bad", [-1, 2.5])
async def test_bad_last_messages(seven: Services, bad: float) -> None:
    with pytest.raises(BadUserInput, match="lastMessages must be a finite non-negative integer"):
        await recall(seven, thread_config={"lastMessages": bad}, per_page=3)


async def test_order_by_picks_the_window_output_is_chronological(seven: Services) -> None:
    assert ids(await recall(seven, per_page=3, order_by=OrderBy("createdAt", "ASC"))) == ["m0", "m1", "m2"]
    assert ids(await recall(seven, per_page=3, order_by=OrderBy("createdAt", "DESC"))) == ["m4", "m5", "m6"]


async def test_ties_follow_one_total_order(services: Services) -> None:
    await seed(
        services,
        msg("z", at=5),
        msg("a", at=5),
        msg("m", at=5),
        msg("b", at=5),
        msg("x", at=0),
        msg("y", at=9),
    )
    everything = ["x", "z", "a", "m", "b", "y"]
    assert ids(await recall(services)) == everything
    assert ids(await recall(services, per_page=False, order_by=OrderBy("createdAt", "DESC"))) == everything
    pages = [ids(await recall(services, per_page=2, page=p)) for p in range(3)]
    assert pages == [["b", "y"], ["a", "m"], ["x", "z"]]
    # Re-saving keeps createdAt and the insertion position, even with a new createdAt.
    await services.messages.save([msg("z", at=100, text="replaced")], principal=OPEN)
    result = await recall(services)
    assert ids(result) == everything
    assert result.messages[1].content["parts"][0]["text"] == "replaced"
    assert result.messages[1].created_at == t(5)


async def test_resource_ownership_and_row_filter(services: Services) -> None:
    await seed(services, msg("a", at=1), msg("b", at=2), msg("c", at=3, resource="rX"))
    with pytest.raises(
        Forbidden, match=r"Thread with id t1 is for resource with id r1 but resource r2 was queried\."
    ):
        await recall(services, resource_id="r2")
    with pytest.raises(NotFound, match="No thread found with id ghost"):
        await recall(services, thread_id="ghost", resource_id="r1")
    assert summary(await recall(services, resource_id="r1")) == (["a", "b"], 2, 0, 10, False)
    # Without resourceId every row of the thread is read.
    assert ids(await recall(services)) == ["a", "b", "c"]
    # Resource scope switches off the missing-thread error.
    result = await recall(
        services, thread_id="ghost", resource_id="r1", thread_config={"semanticRecall": True}
    )
    assert summary(result) == ([], 0, 0, 10, False)


async def test_a_thread_the_caller_read_is_not_read_again(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thread.recall hands over the thread its request read: the ownership check uses it (the page
    read leaves the thread out, one statement fewer per listed thread) and still refuses a mismatch."""
    await seed(services, msg("a", at=1), msg("b", at=2), msg("c", at=3, resource="rX"))
    thread = await services.repository.get_thread("t1")
    assert thread is not None and thread.resource_id == "r1"
    asked: list[bool] = []
    read_page = services.repository.read_page

    async def spy(*args: Any, **kwargs: Any) -> Any:
        asked.append(kwargs["with_thread"])
        return await read_page(*args, **kwargs)

    monkeypatch.setattr(services.repository, "read_page", spy)
    unknown = await recall(services, resource_id="r1")
    assert asked == [True]  # without it, the page read brings the thread for the check

    async def no_thread_read(thread_id: str) -> Any:
        raise AssertionError(f"thread {thread_id} read again")

    monkeypatch.setattr(services.repository, "get_thread", no_thread_read)
    asked.clear()
    known = await recall(services, resource_id="r1", thread=thread)
    assert summary(known) == summary(unknown) == (["a", "b"], 2, 0, 10, False) and asked == [False]
    with pytest.raises(Forbidden, match="is for resource with id r1 but resource r2 was queried"):
        await recall(services, resource_id="r2", thread=thread)


async def test_blank_thread_id(services: Services) -> None:
    with pytest.raises(BadUserInput, match="threadId must be a non-empty string"):
        await recall(services, thread_id="  ")
    with pytest.raises(NotFound, match="No thread found with id "):
        await recall(services, thread_id="", resource_id="r1")


async def test_unknown_thread_is_empty(services: Services) -> None:
    assert summary(await recall(services, thread_id="nope")) == ([], 0, 0, 10, False)


async def test_metadata_filter_exact_types(services: Services) -> None:
    values: dict[str, Any] = {
        "n1": 1,
        "n1f": 1.0,
        "ntrue": True,
        "s1": "1",
        "null": None,
        "snull": "null",
        "n0": 0,
        "nfalse": False,
        "caseB": "abc",
        "caseA": "Abc",
    }
    await seed(
        services,
        *(msg(k, at=i, metadata={"v": v}) for i, (k, v) in enumerate(values.items())),
        msg("missing", at=20, metadata={"other": 1}),
        msg("nometa", at=21),
    )

    async def match(flt: dict[str, Any]) -> list[str]:
        return ids(await recall(services, per_page=False, metadata=flt))

    assert await match({"v": 1}) == ["n1", "n1f"]
    assert await match({"v": True}) == ["ntrue"]
    assert await match({"v": "1"}) == ["s1"]
    assert await match({"v": None}) == ["null"]
    assert await match({"v": "null"}) == ["snull"]
    assert await match({"v": 0}) == ["n0"]
    assert await match({"v": False}) == ["nfalse"]
    assert await match({"v": "abc"}) == ["caseB"]
    assert await match({"other": 1}) == ["missing"]
    assert await match({"v": 1, "other": 1}) == []


@pytest.mark.parametrize(
    ("flt", "message"),
    [
        ([1], "Metadata filter must be an object."),
        ("x", "Metadata filter must be an object."),
        ({"ok": 1, "b-1": 2, "c-2": 3}, 'Invalid metadata filter key "b-1".'),
        ({"__proto__": 1}, 'Invalid metadata filter key "__proto__".'),
        ({"a" * 129: 1}, f'Invalid metadata filter key "{"a" * 129}".'),
        ({"é": 1}, 'Invalid metadata filter key "é".'),
        (
            {"v": {"a": 1}, "b-1": 2},
            'Invalid metadata filter value for key "v". Values must be string, finite '
            "number, boolean, or null.",
        ),
        ({"v": float("nan")}, 'Invalid metadata filter value for key "v".'),
    ],
)
async def test_metadata_filter_validation(services: Services, flt: Any, message: str) -> None:
    with pytest.raises(BadUserInput) as err:
        await recall(services, metadata=flt)
    assert err.value.message.startswith(message)


async def test_128_character_key_is_accepted(services: Services) -> None:
    assert (await recall(services, metadata={"a" * 128: 1})).total == 0


async def test_metadata_filter_has_more_formula(seven: Services) -> None:
    await seed(seven, msg("n7", at=7, metadata={"k": 1}), msg("n8", at=8, metadata={"k": 1}), threads={})
    assert summary(await recall(seven, per_page=1, metadata={"k": 1})) == (["n8"], 2, 0, 1, True)
    assert summary(await recall(seven, per_page=1, page=1, metadata={"k": 1})) == (["n7"], 2, 1, 1, False)
    # An empty filter is no filter.
    assert (await recall(seven, metadata={})).total == 9


async def test_date_range(services: Services) -> None:
    await seed(
        services,
        msg("m0", at=0),
        msg("m1", at=1),
        msg("m2", at=2),
        msg("m2b", at=2),
        msg("m3", at=3),
        msg("m4", at=4),
        msg("m5", at=5),
    )

    async def within(**kw: Any) -> list[str]:
        return ids(await recall(services, per_page=False, date_range=DateRange(**kw)))

    assert await within(start=t(2), end=t(4)) == ["m2", "m2b", "m3", "m4"]
    assert await within(start=t(2), end=t(4), start_exclusive=True) == ["m3", "m4"]
    assert await within(start=t(2), end=t(4), end_exclusive=True) == ["m2", "m2b", "m3"]
    assert await within(start=t(2), end=t(4), start_exclusive=True, end_exclusive=True) == ["m3"]
    assert await within(start=t(4)) == ["m4", "m5"]
    assert await within(end=t(1)) == ["m0", "m1"]
    assert await within(start=t(4), end=t(2)) == []
    result = await recall(services, per_page=2, date_range=DateRange(start=t(2)))
    assert summary(result) == (["m4", "m5"], 5, 0, 2, True)


async def test_include_windows(services: Services) -> None:
    await seed(
        services,
        *(msg(f"m{i}", at=i, metadata={"even": i % 2 == 0}) for i in range(10)),
        msg("o0", thread="t2", at=0.5),
        msg("o1", thread="t2", at=1.5),
        msg("o2", thread="t2", at=2.5),
        msg("x1", thread="tx", at=3.5, resource="rx"),
        msg("x2", thread="tx", at=4.5, resource="rx"),
        threads={"t1": "r1", "t2": "r1", "tx": "rx"},
    )
    inc = [IncludeItem("m3", with_previous_messages=1, with_next_messages=2)]
    result = await recall(services, per_page=2, include=inc)
    assert summary(result) == (["m2", "m3", "m4", "m5", "m8", "m9"], 10, 0, 2, True)
    # Defaults 0/0: the target alone. Cross-thread allowed; unknown ids skipped; duplicates merge.
    result = await recall(
        services, per_page=2, include=[IncludeItem("o1"), IncludeItem("nope"), IncludeItem("m9")]
    )
    assert ids(result) == ["o1", "m8", "m9"]
    # Another resource's message: allowed without resourceId, excluded with it.
    assert ids(await recall(services, per_page=2, include=[IncludeItem("x1", with_next_messages=1)])) == [
        "x1",
        "x2",
        "m8",
        "m9",
    ]
    assert ids(
        await recall(
            services, per_page=2, resource_id="r1", include=[IncludeItem("x1", with_next_messages=1)]
        )
    ) == ["m8", "m9"]
    # Include rows bypass the filters and never count in total.
    result = await recall(services, per_page=False, metadata={"even": True}, include=[IncludeItem("m3")])
    assert ids(result) == ["m0", "m2", "m3", "m4", "m6", "m8"]
    assert result.total == 5
    # perPage 0: include rows only, total 0.
    result = await recall(services, per_page=0, include=[IncludeItem("m2", with_previous_messages=1)])
    assert summary(result) == (["m1", "m2"], 0, 0, 0, False)
    # An unknown thread still returns include rows.
    result = await recall(services, thread_id="ghost", per_page=5, include=[IncludeItem("m2")])
    assert summary(result) == (["m2"], 0, 0, 5, False)


async def test_include_windows_stop_at_their_row_budget(services: Services) -> None:
    """With a budget, windows whose neighbour counts add up past it are read under a LIMIT: the read
    stops one row past the budget (then raises), and windows that fit are read as before."""
    await seed(services, *(msg(f"m{i}", at=i) for i in range(10)), threads={"t1": "r1"})
    repo = services.repository

    async def read(windows: list[IncludeWindow], budget: int) -> list[str]:
        page = await repo.read_page(
            MessageQuery(thread_id="t1"),
            descending=False,
            limit=0,
            offset=0,
            windows=windows,
            max_window_rows=budget,
        )
        return sorted({m.id for m in page.included}, key=lambda id: int(id[1:]))

    everything = 2**31 - 1
    assert await read([IncludeWindow("m4", everything, everything)], 10) == [f"m{i}" for i in range(10)]
    assert await read([IncludeWindow("m1", 1, 0), IncludeWindow("m8", 0, 1)], 4) == [
        "m0",
        "m1",
        "m8",
        "m9",
    ]
    with pytest.raises(WindowRowsExceeded):
        await read([IncludeWindow("m4", everything, everything)], 9)
    with pytest.raises(WindowRowsExceeded):  # over the budget across windows, not within one
        await read([IncludeWindow("m1", 1, 0), IncludeWindow("m8", 0, 1)], 3)
    # Overlapping windows count each message once: 12 rows read, 7 messages, within a budget of 8.
    overlapping = [IncludeWindow("m5", 5, 0), IncludeWindow("m6", 5, 0)]
    assert await read(overlapping, 8) == [f"m{i}" for i in range(7)]


async def test_include_windows_of_one_shape_share_one_statement(services: Services) -> None:
    """The windows' statement is built once per shape (building it per request cost more than the rest
    of a semantic recall) and each request reads its own rows through it."""
    await seed(services, *(msg(f"m{i}", at=i) for i in range(10)), threads={"t1": "r1"})
    repo = services.repository
    first = [IncludeItem("m3", with_previous_messages=1, with_next_messages=2), IncludeItem("m8")]
    second = [IncludeItem("m1"), IncludeItem("m6", with_previous_messages=2)]
    assert ids(await recall(services, per_page=0, include=first)) == ["m2", "m3", "m4", "m5", "m8"]
    assert ids(await recall(services, per_page=0, include=second)) == ["m1", "m4", "m5", "m6"]
    assert ids(await recall(services, per_page=0, resource_id="r1", include=second)) == [
        "m1",
        "m4",
        "m5",
        "m6",
    ]
    windows = [IncludeWindow(i.id, 1, 1) for i in first]
    template, params = repo._window_template(windows, None)
    assert repo._window_template([IncludeWindow("m0", 5, 2), IncludeWindow("m9", 0, 3)], None)[0] is template
    assert repo._window_template(windows, "r1")[0] is not template  # bound to a resource: another shape
    # A window with nothing after its target has no second SELECT: another shape.
    assert (
        repo._window_template([IncludeWindow("m0", 1, 0), IncludeWindow("m9", 1, 1)], None)[0] is not template
    )
    assert params["window_id_1"] == "m8" and params["window_after_1"] == 1
    # A target bound to a thread (a thread-scoped search's hit): another shape, the thread a parameter.
    bound, bound_params = repo._window_template([IncludeWindow("m3", 1, 1, "t1"), windows[1]], None)
    assert bound is not template and bound_params["window_thread_0"] == "t1"
    assert "window_thread_1" not in bound_params


async def test_include_window_holds_its_target_among_ties(services: Services) -> None:
    await seed(
        services,
        msg("q_before", at=0),
        msg("q0", at=1),
        msg("q1", at=1),
        msg("q2", at=1),
        msg("q3", at=1),
        msg("q_after", at=2),
    )
    result = await recall(services, per_page=0, include=[IncludeItem("q0", with_previous_messages=1)])
    assert ids(result) == ["q_before", "q0"]
    result = await recall(services, per_page=0, include=[IncludeItem("q1", with_next_messages=1)])
    assert ids(result) == ["q1", "q2"]


async def test_include_limits_and_validation(services: Services) -> None:
    await seed(services, msg("a", at=1), msg("b", at=2))
    # An empty id names no message: skipped, as Mastra skips unknown ids (it was BAD_USER_INPUT).
    result = await recall(services, per_page=1, include=[IncludeItem(""), IncludeItem("a")])
    assert summary(result) == (["a", "b"], 2, 0, 1, False)
    # A negative count is refused (Mastra's LIMIT -1 + 1 = 0 quietly drops the target itself).
    with pytest.raises(BadUserInput, match="withPreviousMessages and withNextMessages must be >= 0"):
        await recall(services, include=[IncludeItem("a", with_previous_messages=-1)])
    with pytest.raises(BadUserInput, match="include accepts at most 100 items"):
        await recall(services, include=[IncludeItem(f"i{n}") for n in range(101)])


async def test_has_more_counts_include_rows_of_the_thread(services: Services) -> None:
    await seed(services, msg("a", at=1), msg("b", at=2), msg("c", at=3))
    result = await recall(services, per_page=1, include=[IncludeItem("a", with_next_messages=3)])
    assert summary(result) == (["a", "b", "c"], 3, 0, 1, False)


async def test_system_rows_count_but_are_never_returned(services: Services) -> None:
    await seed(services, msg("x", at=1), msg("sys", at=2, role="system"), msg("y", at=3), msg("z", at=4))
    assert summary(await recall(services)) == (["x", "y", "z"], 4, 0, 10, False)
    result = await recall(services, per_page=1, include=[IncludeItem("x", with_next_messages=3)])
    assert summary(result) == (["x", "y", "z"], 4, 0, 1, True)


SIGNALS = [
    msg("plain", at=0),
    msg("legacy", at=1, text="<system-reminder>be brief</system-reminder>"),
    msg("reactive", at=2, role="signal", metadata={"signal": {"type": "reactive"}}),
    msg("state", at=3, role="signal", metadata={"signal": {"type": "state"}}),
    msg(
        "notif",
        at=4,
        role="assistant",
        parts=[{"type": "text", "text": "n"}, {"type": "data-signal", "data": {"type": "notification"}}],
    ),
]


@pytest.mark.parametrize(
    ("hide", "isr", "visible"),
    [
        (None, None, ["plain", "state", "notif"]),
        (None, False, ["plain", "state", "notif"]),
        (None, True, ["plain", "legacy", "reactive", "state", "notif"]),
        (False, None, ["plain", "legacy", "reactive", "state", "notif"]),
        ([], None, ["plain", "legacy", "reactive", "state", "notif"]),
        (True, True, ["plain"]),
        (["reactive"], None, ["plain", "legacy", "state", "notif"]),
        (["system-reminder", "state"], False, ["plain", "reactive", "notif"]),
        (["bogus"], None, ["plain", "legacy", "reactive", "state", "notif"]),
    ],
)
async def test_hide_signals_precedence(services: Services, hide: Any, isr: Any, visible: list[str]) -> None:
    await seed(services, *SIGNALS)
    result = await recall(services, hide_signals=hide, include_system_reminders=isr)
    assert ids(result) == visible
    assert result.total == 5  # filtering happens after pagination


async def test_signal_filter_can_empty_a_page(services: Services) -> None:
    await seed(services, *SIGNALS)
    assert summary(await recall(services, per_page=2, hide_signals=True)) == ([], 5, 0, 2, True)


async def test_semantic_arguments_are_validated(services: Services) -> None:
    await seed(services, msg("a", at=1))
    with pytest.raises(BadUserInput, match="Resource-scoped semantic recall is enabled but no resourceId"):
        await recall(services, thread_config={"semanticRecall": True}, vector_search_string="apple")
    # Thread scope needs no resource.
    result = await recall(
        services, thread_config={"semanticRecall": {"scope": "thread"}}, vector_search_string="x"
    )
    assert ids(result) == ["a"]


async def test_thread_config_accepts_generate_title(services: Services) -> None:
    await seed(services, msg("a", at=1))
    result = await recall(services, thread_config={"threads": {"generateTitle": True}, "generateTitle": True})
    assert ids(result) == ["a"]


async def test_pages_of_several_threads_read_as_each_alone(services: Services) -> None:
    """read_pages (Thread.recall's batch) answers what read_page answers for each thread: counts,
    pages, filters, hidden rows left out, order, offsets, repeated and unknown threads, another
    resource's rows, and the filtered counts it caches (recounted once a thread changes). PostgreSQL
    reads every page in one statement whatever the number of threads."""
    threads = {"t1": "r1", "t2": "r1", "t3": "r1", "t4": "r1", "t5": "r2"}
    sizes = {"t1": 7, "t2": 3, "t3": 12, "t4": 0, "t5": 4}
    await seed(
        services,
        *(
            msg(
                f"{thread}-m{n}",
                thread=thread,
                at=n // 2,  # pairs share a createdAt: ties follow the insertion order
                # Some rows a recall hides: signals of two types and a system row.
                role="signal" if n % 5 in (1, 3) else "system" if n % 7 == 5 else "user",
                metadata={
                    "n": n % 3,
                    "tag": "x" if n % 2 else "y",
                    **(
                        {"signal": {"type": "state" if n % 5 == 1 else "reactive"}} if n % 5 in (1, 3) else {}
                    ),
                },
                resource="rX" if thread == "t3" and n in (4, 9) else threads[thread],
            )
            for thread, size in sizes.items()
            for n in range(size)
        ),
        threads=threads,
    )
    repo = services.repository
    asked = ["t3", "t1", "t2", "t3", "ghost", "t4", "t5"]
    filters: list[dict[str, Any]] = [
        {},
        {"resource_id": None},
        {"date_range": DateRange(start=t(1), end=t(4), end_exclusive=True)},
        {"metadata": {"n": 1}},
        {"metadata": {"tag": "x"}, "date_range": DateRange(start=t(1))},
        {"hidden": "signals"},
        {"hidden": "system"},
        {"hidden": ("state",), "metadata": {"n": 1}},
    ]

    # The answers to compare with come from a repository of their own: the two share no count cache, so
    # a count read_pages got wrong and cached cannot become read_page's answer too.
    alone = Repository(repo.engine)

    async def compare() -> None:
        for flt in filters:
            for descending in (True, False):
                for limit, offset in ((1, 0), (2, 1), (3, 4), (50, 0)):
                    queries = [MessageQuery(**{"thread_id": i, "resource_id": "r1", **flt}) for i in asked]
                    with statements(services) as seen:
                        got = await repo.read_pages(
                            queries, descending=descending, limit=limit, offset=offset
                        )
                    pages = [s for s in seen if "FROM messages" in s and "count" not in s.lower()]
                    if repo.is_postgres:
                        assert len(pages) == 1, pages
                    expected = []
                    for q in queries:
                        read = await alone.read_page(q, descending=descending, limit=limit, offset=offset)
                        expected.append((read.total, sorted(m.id for m in read.rows)))
                    answered = [(total, sorted(m.id for m in rows or [])) for total, rows in got]
                    assert answered == expected, (flt, descending, limit, offset)
                    assert all(rows is not None for _, rows in got)
        # Not vacuous: the threads' answers differ (t5 is r2's, so r1 has none of it; 2 of t3's are rX's).
        first = await repo.read_pages(
            [MessageQuery(thread_id=i, resource_id="r1") for i in asked], descending=True, limit=2, offset=0
        )
        assert [(total, sorted(m.id for m in rows or [])) for total, rows in first] == [
            (10, ["t3-m10", "t3-m11"]),
            (sizes["t1"], [f"t1-m{sizes['t1'] - 2}", f"t1-m{sizes['t1'] - 1}"]),
            (3, ["t2-m1", "t2-m2"]),
            (10, ["t3-m10", "t3-m11"]),
            (0, []),
            (0, []),
            (0, []),
        ]

    try:
        await compare()
        await compare()  # the filtered counts now come from the cache
        await services.messages.save(
            [msg("t1-m7", thread="t1", at=9, metadata={"n": 1, "tag": "x"})], principal=OPEN
        )
        sizes["t1"] += 1
        await compare()  # t1 changed: its cached counts are stale
    finally:
        alone.close()

    # A budget: the threads take their pages in the order asked while the rows fit; one that would go
    # past what is left is not read and takes nothing, and a smaller one after it may still fit.
    queries = [MessageQuery(thread_id=i, resource_id="r1") for i in ("t3", "t2", "t1", "t2")]
    got = await repo.read_pages(queries, descending=True, limit=3, offset=5, max_rows=3)
    # Rows of each page: t3 (10 of r1) 3, t2 (3) 0, t1 (8) 3, t2 0; 3 left after t3.
    assert [(total, rows is not None and len(rows)) for total, rows in got] == [
        (10, 3),
        (3, 0),
        (8, False),
        (3, 0),
    ]
    with pytest.raises(ValueError, match="differ only in their thread"):
        await repo.read_pages(
            [MessageQuery(thread_id="t1"), MessageQuery(thread_id="t2", resource_id="r1")],
            descending=True,
            limit=1,
            offset=0,
        )
