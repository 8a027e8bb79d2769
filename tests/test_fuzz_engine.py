"""Property tests of the recall engine on a real database (hypothesis).

Each test function gets one database (the `services` fixture) and runs many examples in it; every
example writes its own threads (fresh ids), then calls recall with random arguments, each under several
signal-filtering variants. Invariants:

* only RecallQLError subclasses are raised, and the same one whatever the signal filtering;
* hideSignals / includeSystemReminders only remove messages: every variant's result is a subsequence of
  the unfiltered one (hideSignals: false), and total / page / perPage / hasMore are the same;
* a returned message is in the thread, or in the thread of an included id (include windows);
* with a resourceId, every returned message has that resourceId;
* the output is in (createdAt, seq) order, without duplicates, without system rows;
* perPage: false without filters returns exactly the thread's stored non-system rows.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.records import DateRange, MessageRecord
from models.signals import SIGNAL_TYPES
from resolvers import cursors
from resolvers.auth import OPEN
from resolvers.context import Services
from resolvers.errors import RecallQLError, unstorable_text
from resolvers.messages import MessageInput
from resolvers.recall import IncludeItem, OrderBy, RecallArgs, RecallResult
from tests.support import uid

BASE = 1767225600000  # 2026-01-01T00:00:00Z
# RECALLQL_FUZZ_EXAMPLES=2000 for a deeper run by hand; the default keeps the file well under a minute.
EXAMPLES = int(os.environ.get("RECALLQL_FUZZ_EXAMPLES", "100"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    print_blob=True,
)


# ---------------------------------------------------------------------------------------------- values
def texts(max_size: int) -> st.SearchStrategy[str]:
    # No NUL: PostgreSQL cannot store U+0000 in text or jsonb and the server does not reject it yet
    # (an internal error; see test_nul_character_never_fails_internally).
    return st.text(st.characters(exclude_characters="\x00"), max_size=max_size)


def mostly(valid: st.SearchStrategy[Any], invalid: st.SearchStrategy[Any], one_in: int = 8) -> Any:
    """`valid`, and `invalid` about once in `one_in` draws (hypothesis weighs one_of branches equally)."""
    # The invalid branch is the largest draw: hypothesis favours small ones, and shrinks towards valid.
    return st.integers(0, one_in - 1).flatmap(lambda n: invalid if n == one_in - 1 else valid)


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0.5, 1.0, -0.0, 1e300]),
    st.sampled_from(["a", "b", "", "travel", "1", "true"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts(3), inner, max_size=3),
    max_leaves=6,
)
metadata_keys = st.sampled_from(["topic", "n", "flag", "a", "b_2"])
signal_kinds = st.sampled_from([*sorted(SIGNAL_TYPES), "bogus", "", "SYSTEM-REMINDER"])
signal_data = st.one_of(
    st.fixed_dictionaries({"type": signal_kinds}, optional={"text": texts(5)}),
    st.just({}),
    st.just([]),
    st.just(None),
    st.just("state"),
    st.just([{"type": "state"}]),
    st.fixed_dictionaries({"type": st.integers(0, 2)}),
)
text_parts = st.builds(
    lambda text: {"type": "text", "text": text},
    st.one_of(
        texts(8),
        st.sampled_from(["<system-reminder>x</system-reminder>", "<system-reminder", " <system-reminder>"]),
    ),
)
parts = st.one_of(
    text_parts,
    st.builds(
        lambda kind, data: {"type": kind, "data": data},
        st.sampled_from(["data-signal", "data-user-message"]),
        signal_data,
    ),
    st.builds(lambda data: {"type": "data-signal", "data": data}, json_values),
    st.just({"type": "step-start"}),
    st.just(
        {"type": "tool-invocation", "toolInvocation": {"state": "call", "toolCallId": "c", "toolName": "x"}}
    ),
    st.builds(lambda t: {"type": t}, st.sampled_from(["mystery", "data-other", ""])),
)
signal_meta = st.fixed_dictionaries(
    {"type": signal_kinds}, optional={"transient": st.sampled_from([True, False, "true", 1])}
)
metadata = st.one_of(
    st.none(),
    st.dictionaries(metadata_keys, scalars, max_size=3),
    st.builds(
        lambda m, s: {**m, "signal": s},
        st.dictionaries(metadata_keys, scalars, max_size=2),
        signal_meta | json_values,
    ),
    st.builds(
        lambda m: {**m, "systemReminder": {"type": "x"}}, st.dictionaries(metadata_keys, scalars, max_size=2)
    ),
    st.builds(
        lambda m: {**m, "dynamicAgentsMdReminder": True}, st.dictionaries(metadata_keys, scalars, max_size=2)
    ),
)


@dataclass
class MessageSpec:
    thread: int  # index into the example's threads (or the orphan thread)
    role: str
    at: int
    parts: list[Any]
    metadata: Any
    content_text: Any
    explicit_resource: int | None  # index into the resource pool
    reuse: int | None  # re-save (upsert) an earlier message of this example
    malformed: bool
    flavor: str  # what kind of message it mostly is (signals and reminders must be common)
    kind: str  # the signal type the flavor uses


message_specs = st.builds(
    MessageSpec,
    thread=mostly(st.integers(0, 2), st.just(3), 30),
    role=st.sampled_from(["user", "assistant", "system", "signal", "tool", "user", "signal"]),
    at=st.integers(0, 12),
    parts=st.lists(parts, max_size=3),
    metadata=metadata,
    content_text=mostly(st.one_of(st.none(), st.none(), texts(5)), st.just(3), 40),
    explicit_resource=st.one_of(st.none(), st.none(), st.integers(0, 2)),
    reuse=st.one_of(st.none(), st.none(), st.none(), st.integers(0, 30)),
    malformed=st.integers(0, 40).map(lambda n: n == 0),
    flavor=st.sampled_from(
        [
            "plain",
            "data-signal",
            "data-user-message",
            "signal-role",
            "reminder-text",
            "reminder-meta",
            "random",
        ]
    ),
    kind=signal_kinds,
)


def content_of(spec: MessageSpec) -> tuple[str, dict[str, Any]]:
    """The role and content a spec stands for."""
    role, parts, meta = spec.role, list(spec.parts), spec.metadata
    if spec.flavor == "plain":
        parts = [{"type": "text", "text": "hello"}, *parts[:1]]
    elif spec.flavor in ("data-signal", "data-user-message"):
        parts = [*parts[:1], {"type": spec.flavor, "data": {"type": spec.kind}}]
    elif spec.flavor == "signal-role":
        role = "signal"
        meta = {**(meta if isinstance(meta, dict) else {}), "signal": {"type": spec.kind}}
    elif spec.flavor == "reminder-text":
        role = "user"
        parts = [{"type": "text", "text": "<system-reminder>be brief</system-reminder>"}, *parts[:1]]
    elif spec.flavor == "reminder-meta":
        role = "user"
        meta = {**(meta if isinstance(meta, dict) else {}), "systemReminder": {"type": "x"}}
    content: dict[str, Any] = {"format": 2, "parts": parts}
    if meta is not None:
        content["metadata"] = meta
    if spec.content_text is not None:
        content["content"] = spec.content_text
    if spec.malformed:
        content = {"format": 2, "parts": "not a list"}
    return role, content


@dataclass
class Scenario:
    owners: list[int]  # resource index of threads 0..2 (thread 3 is never created)
    batches: list[list[MessageSpec]]


scenarios = st.builds(
    Scenario,
    owners=st.lists(st.integers(0, 2), min_size=3, max_size=3),
    batches=st.lists(st.lists(message_specs, min_size=1, max_size=8), min_size=1, max_size=4),
)


@dataclass
class ArgSpec:
    thread: int | str
    resource: int | str | None
    per_page: Any
    page: Any
    include: list[tuple[int | str, Any, Any]] | None
    date_range: tuple[Any, Any, bool, bool] | None
    metadata: Any
    order: str | None
    thread_config: dict[str, Any] | None
    vector_search: str | None
    signal_subset: list[str]
    reminders: bool | None


arg_specs = st.builds(
    ArgSpec,
    thread=mostly(st.integers(0, 2), st.sampled_from([3, "", "  "]), 10),
    resource=mostly(st.sampled_from([None, None, "owner", "owner", 0, 1, 2]), st.just(""), 10),
    per_page=mostly(
        st.one_of(st.none(), st.just(False), st.integers(0, 12), st.just(2.0)),
        st.sampled_from([-1, -3, 2.5, math.inf, math.nan, True]),
    ),
    page=mostly(st.one_of(st.none(), st.integers(0, 3)), st.integers(-2, -1), 12),
    include=mostly(
        st.none(),
        st.lists(
            st.tuples(
                mostly(st.integers(0, 30), st.sampled_from(["", "missing"]), 6),
                mostly(st.one_of(st.none(), st.integers(0, 3)), st.just(-1), 12),
                mostly(st.one_of(st.none(), st.integers(0, 3)), st.just(-1), 12),
            ),
            min_size=1,
            max_size=4,
        ),
        3,
    ),
    date_range=mostly(
        st.none(),
        st.tuples(
            st.one_of(st.none(), st.integers(-1, 13)),
            st.one_of(st.none(), st.integers(-1, 13)),
            st.booleans(),
            st.booleans(),
        ),
        4,
    ),
    metadata=mostly(
        st.none(),
        st.one_of(
            st.just({}),
            st.dictionaries(metadata_keys, scalars, min_size=1, max_size=2),
            st.dictionaries(metadata_keys, scalars, min_size=1, max_size=2),
            st.dictionaries(metadata_keys, scalars, min_size=1, max_size=2),
            st.dictionaries(
                st.sampled_from(["a-b", "__proto__", "1a", "x" * 129, "", "constructor"]),
                scalars,
                min_size=1,
                max_size=1,
            ),
            st.dictionaries(
                metadata_keys, st.sampled_from([[1], {"a": 1}, math.inf, math.nan]), min_size=1, max_size=1
            ),
            st.sampled_from([[1], "topic", 3, True]),
        ),
        3,
    ),
    order=st.sampled_from([None, "ASC", "DESC"]),
    thread_config=mostly(
        st.none(),
        st.one_of(
            st.fixed_dictionaries(
                {
                    "lastMessages": mostly(
                        st.one_of(st.integers(0, 6), st.just(False)),
                        st.sampled_from([-1, 2.5, True, math.inf]),
                        4,
                    )
                }
            ),
            st.just({"semanticRecall": True}),
            st.just({"semanticRecall": {"scope": "thread", "topK": 2}}),
        ),
        3,
    ),
    vector_search=st.sampled_from([None, None, "find me"]),
    signal_subset=st.lists(st.sampled_from([*sorted(SIGNAL_TYPES), "nope"]), max_size=3, unique=True),
    reminders=st.sampled_from([None, True, False]),
)


# ---------------------------------------------------------------------------------------------- model
@dataclass
class World:
    prefix: str
    threads: list[str]
    owners: dict[str, str]  # created thread -> resource
    resources: list[str]
    stored: dict[str, MessageRecord] = field(default_factory=dict)
    saved_order: list[str] = field(default_factory=list)

    def message_id(self, n: int) -> str:
        return f"{self.prefix}-m{n}"


async def build_world(services: Services, scenario: Scenario) -> World:
    prefix = uid("fz")
    resources = [f"{prefix}-r{n}" for n in range(3)]
    world = World(prefix, [f"{prefix}-t{n}" for n in range(4)], {}, resources)
    for n, owner in enumerate(scenario.owners):
        thread = await services.threads.create(
            resource_id=resources[owner], thread_id=world.threads[n], principal=OPEN
        )
        world.owners[thread.id] = thread.resource_id
    counter = 0
    for batch in scenario.batches:
        inputs = []
        for spec in batch:
            if spec.reuse is not None and spec.reuse < counter:
                message_id = world.message_id(spec.reuse)
            else:
                message_id = world.message_id(counter)
                counter += 1
            role, content = content_of(spec)
            thread_id = world.threads[spec.thread]
            inputs.append(
                MessageInput(
                    thread_id=thread_id,
                    role=role,
                    content=content,
                    id=message_id,
                    resource_id=resources[spec.explicit_resource]
                    if spec.explicit_resource is not None
                    else None,
                    created_at=BASE + spec.at * 1000,
                )
            )
        try:
            result = await services.messages.save(inputs, principal=OPEN)
        except RecallQLError:
            continue  # a bad batch (malformed content, an orphan without a resource) writes nothing
        for record in result.messages:
            world.stored[record.id] = record
    return world


def build_args(world: World, spec: ArgSpec) -> RecallArgs:
    thread_id = world.threads[spec.thread] if isinstance(spec.thread, int) else spec.thread
    if spec.resource == "owner":
        resource_id = world.owners.get(thread_id, world.resources[0])
    else:
        resource_id = world.resources[spec.resource] if isinstance(spec.resource, int) else spec.resource
    include = None
    if spec.include is not None:
        include = [
            IncludeItem(
                id=world.message_id(target) if isinstance(target, int) else target,
                with_previous_messages=before,
                with_next_messages=after,
            )
            for target, before, after in spec.include
        ]
    date_range = None
    if spec.date_range is not None:
        start, end, start_exclusive, end_exclusive = spec.date_range
        date_range = DateRange(
            start=BASE + start * 1000 if start is not None else None,
            end=BASE + end * 1000 if end is not None else None,
            start_exclusive=start_exclusive,
            end_exclusive=end_exclusive,
        )
    return RecallArgs(
        thread_id=thread_id,
        resource_id=resource_id,
        per_page=spec.per_page,
        page=spec.page,
        include=include,
        date_range=date_range,
        metadata=spec.metadata,
        order_by=OrderBy("createdAt", spec.order) if spec.order else None,
        hide_signals=False,
        thread_config=spec.thread_config,
        vector_search_string=spec.vector_search,
    )


async def outcome(services: Services, args: RecallArgs) -> RecallResult | RecallQLError:
    try:
        return await services.recall.recall(args, principal=OPEN)
    except RecallQLError as error:
        return error
    except Exception as error:
        raise AssertionError(f"recall raised {type(error).__name__}: {error!r} for {args!r}") from error


def _subsequence(small: Sequence[str], big: Sequence[str]) -> bool:
    it = iter(big)
    return all(any(x == y for y in it) for x in small)


def check_result(world: World, args: RecallArgs, result: RecallResult) -> None:
    ids = [m.id for m in result.messages]
    assert len(ids) == len(set(ids)), f"duplicates in {ids}"
    keys = [(m.created_at, m.seq) for m in result.messages]
    assert keys == sorted(keys), f"not in (createdAt, seq) order: {keys}"
    assert all(m.role != "system" for m in result.messages)
    allowed = {args.thread_id}
    for item in args.include or ():
        if item.id in world.stored:
            allowed.add(world.stored[item.id].thread_id)
    for m in result.messages:
        assert m.thread_id in allowed, f"{m.id} of thread {m.thread_id} is not in {allowed}"
        if args.resource_id:
            assert m.resource_id == args.resource_id, f"{m.id} has resource {m.resource_id}"
    if isinstance(result.per_page, int) and not isinstance(result.per_page, bool) and not args.include:
        assert len(result.messages) <= result.per_page


def check_everything_oracle(world: World, args: RecallArgs, result: RecallResult) -> None:
    """perPage: false, no include, no filters: the thread's stored rows (of the resource), all of them."""
    if args.per_page is not False or args.include or args.date_range or args.metadata:
        return
    rows = [
        m
        for m in world.stored.values()
        if m.thread_id == args.thread_id and (not args.resource_id or m.resource_id == args.resource_id)
    ]
    assert result.total == len(rows), (result.total, len(rows))
    expected = sorted((m for m in rows if m.role != "system"), key=lambda m: (m.created_at, m.seq))
    assert [m.id for m in result.messages] == [m.id for m in expected]
    assert result.has_more is False


async def check_recall(services: Services, world: World, spec: ArgSpec) -> None:
    base = build_args(world, spec)
    unfiltered = await outcome(services, base)
    variants = [
        replace(base, hide_signals=None, include_system_reminders=spec.reminders),
        replace(base, hide_signals=None),
        replace(base, hide_signals=True),
        replace(base, hide_signals=spec.signal_subset, include_system_reminders=spec.reminders),
        replace(base, hide_signals=False, include_system_reminders=spec.reminders),
    ]
    for variant in variants:
        got = await outcome(services, variant)
        if isinstance(unfiltered, RecallQLError):
            assert isinstance(got, RecallQLError), f"{variant.hide_signals!r} succeeded where false failed"
            assert (type(got), got.message) == (type(unfiltered), unfiltered.message)
            continue
        assert not isinstance(got, RecallQLError), f"{variant.hide_signals!r} failed: {got!r}"
        check_result(world, variant, got)
        assert (got.total, got.page, got.per_page, got.has_more) == (
            unfiltered.total,
            unfiltered.page,
            unfiltered.per_page,
            unfiltered.has_more,
        ), variant
        assert _subsequence([m.id for m in got.messages], [m.id for m in unfiltered.messages])
        if variant.hide_signals is True:
            assert all(m.signal_type is None for m in got.messages)
    if not isinstance(unfiltered, RecallQLError):
        check_result(world, base, unfiltered)
        check_everything_oracle(world, base, unfiltered)


# ---------------------------------------------------------------------------------------------- tests
# pytest-asyncio runs async hypothesis tests; the database fixture is made once per test function and
# shared by its examples (hence the suppressed function_scoped_fixture check), each example using new ids.
@FUZZ
@given(scenario=scenarios, calls=st.lists(arg_specs, min_size=1, max_size=6))
async def test_recall_properties(services: Services, scenario: Scenario, calls: list[ArgSpec]) -> None:
    world = await build_world(services, scenario)
    for spec in calls:
        await check_recall(services, world, spec)


@settings(FUZZ, max_examples=max(1, EXAMPLES // 3))
@given(
    scenario=st.builds(
        Scenario,
        owners=st.just([0, 0, 1]),
        batches=st.lists(st.lists(message_specs, min_size=10, max_size=25), min_size=1, max_size=2),
    ),
    per_page=st.integers(1, 7),
    thread=st.integers(0, 2),
    owner_only=st.booleans(),
)
async def test_paging_walks_every_row_once(
    services: Services, scenario: Scenario, per_page: int, thread: int, owner_only: bool
) -> None:
    """Bigger threads with many createdAt ties: paging oldest-first walks every row exactly once, in the
    order perPage: false returns them."""
    world = await build_world(services, scenario)
    thread_id = world.threads[thread]
    resource_id = world.owners[thread_id] if owner_only else None
    seen: list[str] = []
    total = None
    for page in range(100):
        args = RecallArgs(
            thread_id=thread_id,
            resource_id=resource_id,
            per_page=per_page,
            page=page,
            order_by=OrderBy("createdAt", "ASC"),
            hide_signals=False,
        )
        result = await services.recall.recall(args, principal=OPEN)
        check_result(world, args, result)
        total = result.total
        seen.extend(m.id for m in result.messages)
        if not result.has_more:
            break
    every = await services.recall.recall(
        RecallArgs(thread_id=thread_id, resource_id=resource_id, per_page=False, hide_signals=False),
        principal=OPEN,
    )
    assert every.total == total
    assert seen == [m.id for m in every.messages], "paging oldest-first must walk the same rows in order"


async def test_nul_character_never_fails_internally(services: Services) -> None:
    """U+0000 in a message, a thread title or a filter value: stored (SQLite) or rejected as bad input.
    PostgreSQL's text and jsonb cannot hold it: there the database refuses the write (nothing is stored)
    and the API reports that error as BAD_USER_INPUT (resolvers.errors.unstorable_text)."""
    prefix = uid("nul")
    await services.threads.create(resource_id=f"{prefix}-r", thread_id=f"{prefix}-t", principal=OPEN)
    attempts = {
        "saveMessages": services.messages.save(
            [
                MessageInput(
                    thread_id=f"{prefix}-t",
                    role="user",
                    content={"format": 2, "parts": [{"type": "text", "text": "a\x00b"}]},
                )
            ],
            principal=OPEN,
        ),
        "createThread title": services.threads.create(
            resource_id=f"{prefix}-r", title="x\x00", principal=OPEN
        ),
        "recall threadId": services.recall.recall(RecallArgs(thread_id=f"{prefix}\x00"), principal=OPEN),
        "recall metadata": services.recall.recall(
            RecallArgs(thread_id=f"{prefix}-t", metadata={"a": "\x00"}), principal=OPEN
        ),
    }
    failures = []
    for what, attempt in attempts.items():
        try:
            await attempt
        except RecallQLError:
            pass
        except Exception as error:
            if unstorable_text(error) is None:
                failures.append(f"{what}: {type(error).__name__}: {str(error).splitlines()[0]}")
    assert not failures


@settings(FUZZ, max_examples=max(1, EXAMPLES // 3))
@given(
    scenario=scenarios,
    spec=arg_specs,
    cuts=st.lists(st.integers(-1, 13), min_size=2, max_size=2),
    picks=st.lists(st.integers(0, 30), max_size=2),
)
async def test_cursors_are_conditions_on_the_page_query(
    services: Services, scenario: Scenario, spec: ArgSpec, cuts: list[int], picks: list[int]
) -> None:
    """`after` and `before` keep exactly the rows of the same recall that lie between the places, under
    every filter; and at places no row has (seq 0), the counts on either side add up to the whole."""
    world = await build_world(services, scenario)
    base = replace(
        build_args(world, spec),
        per_page=False,
        page=None,
        include=None,
        thread_config=None,
        vector_search_string=None,
    )
    whole = await outcome(services, base)
    free = [(BASE + cut * 1000, 0) for cut in cuts]  # between rows: no seq is 0
    # Places rows have: of rows the recall returns (ties show here), and of any stored message.
    taken = [world.stored[i].order_key for i in (world.message_id(n) for n in picks) if i in world.stored]
    if not isinstance(whole, RecallQLError) and whole.messages:
        taken += [whole.messages[n % len(whole.messages)].order_key for n in picks]

    async def between(
        after: tuple[int, int] | None, before: tuple[int, int] | None
    ) -> RecallResult | RecallQLError:
        return await outcome(
            services,
            replace(
                base,
                after=cursors.encode(*after) if after else None,
                before=cursors.encode(*before) if before else None,
            ),
        )

    for after in (None, *free, *taken):
        for before in (None, *free, *taken):
            got = await between(after, before)
            if isinstance(whole, RecallQLError):  # the same refusal: valid cursors add none
                assert isinstance(got, RecallQLError) and got.message == whole.message
                continue
            assert not isinstance(got, RecallQLError), got
            inside = [
                m.id
                for m in whole.messages
                if (after is None or m.order_key > after) and (before is None or m.order_key < before)
            ]
            assert [m.id for m in got.messages] == inside, (after, before)
            assert got.has_more is False
    if isinstance(whole, RecallQLError):
        return
    totals = {}
    for place in free:
        older, newer = await between(None, place), await between(place, None)
        assert not isinstance(older, RecallQLError) and not isinstance(newer, RecallQLError)
        assert older.total + newer.total == whole.total, place
        totals[place] = (older.total, newer.total)
    low, high = sorted(free)
    middle = await between(low, high)
    assert not isinstance(middle, RecallQLError)
    assert middle.total == whole.total - totals[low][0] - totals[high][1] if low < high else middle.total == 0


@settings(FUZZ, max_examples=max(1, EXAMPLES // 3))
@given(scenario=scenarios, spec=arg_specs, per_page=st.integers(1, 5))
async def test_hiding_in_the_page_query_returns_what_hiding_after_it_returns(
    services: Services, scenario: Scenario, spec: ArgSpec, per_page: int
) -> None:
    """hideInPageQuery, under every filter and every way of hiding: perPage false returns the same
    messages as without it, and total counts exactly those; pages walk them in order, each one full
    but the last."""
    world = await build_world(services, scenario)
    base = replace(build_args(world, spec), include=None, thread_config=None, vector_search_string=None)
    hidings: list[tuple[bool | Sequence[str] | None, bool | None]] = [
        (None, spec.reminders),
        (None, None),
        (True, None),
        (spec.signal_subset, spec.reminders),
        (False, spec.reminders),
    ]
    for hide, reminders in hidings:
        args = replace(base, hide_signals=hide, include_system_reminders=reminders, per_page=False, page=None)
        after = await outcome(services, args)
        within = await outcome(services, replace(args, hide_in_page_query=True))
        if isinstance(after, RecallQLError):
            assert isinstance(within, RecallQLError) and within.message == after.message
            continue
        assert not isinstance(within, RecallQLError), within
        shown = [m.id for m in after.messages]
        assert [m.id for m in within.messages] == shown
        assert within.total == len(shown) and within.has_more is False
        walked: list[str] = []
        for page in range(len(shown) // per_page + 1):
            got = await outcome(
                services,
                replace(
                    args,
                    hide_in_page_query=True,
                    per_page=per_page,
                    page=page,
                    order_by=OrderBy("createdAt", "ASC"),
                ),
            )
            assert not isinstance(got, RecallQLError), got
            assert got.total == len(shown)
            assert len(got.messages) == min(per_page, len(shown) - page * per_page)
            assert got.has_more == ((page + 1) * per_page < len(shown))
            walked.extend(m.id for m in got.messages)
        assert walked == shown
