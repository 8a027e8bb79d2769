"""SQLite and PostgreSQL answer alike (hypothesis, differential).

The two engines run different SQL for the same operations: JSON functions against `jsonb @>`, row
locks against `BEGIN IMMEDIATE`, upserts, window reads, the clone's copy. Each example runs one random
history of writes on a fresh pair of databases, the same operation on both engines one after the
other, with the same clock and the same generated ids, and compares every outcome: the value returned,
or the error's type and message. Then it compares reads (recall with the engine-fuzz arguments and its
signal variants, thread listings with orderings and metadata filters, messages by id, working memory)
and finally the whole stored state as `export` reads it.

What is allowed to differ, and nothing else: the message sequence numbers (a PostgreSQL sequence is
not rolled back with a refused batch, so its numbers may skip; the order they give is compared), and
so the sequence part of a recall's startCursor and endCursor (their time is compared), and
the order of keys inside stored JSON objects (`jsonb` keeps its own; the README says so). Python's
`==` on dicts already ignores key order.
"""

from __future__ import annotations

import dataclasses
import time
import types
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.db import create_engine
from models.migrate import upgrade
from models.records import MessageRecord
from models.repository import Repository
from resolvers import cursors
from resolvers.auth import OPEN, Principal
from resolvers.config import BUILTIN_DEFAULTS
from resolvers.context import Services
from resolvers.errors import RecallQLError
from resolvers.messages import MessageInput, MessagePatch
from resolvers.recall import RecallResult
from resolvers.threads import CloneOptions
from tests.support import database, engines, require
from tests.test_fuzz_engine import (
    BASE,
    EXAMPLES,
    FUZZ,
    ArgSpec,
    MessageSpec,
    World,
    arg_specs,
    build_args,
    content_of,
    message_specs,
    metadata_keys,
    scalars,
    texts,
)

ENGINES = ("sqlite", "postgres")


@dataclass
class Pair:
    services: dict[str, Services]
    clock: list[int]
    ids: list[int]
    ops: int = 0


@pytest.fixture
async def pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Pair]:
    require(
        all(e in engines() for e in ENGINES),
        f"the engine parity test needs both engines; RECALLQL_TEST_ENGINES={','.join(engines())}",
    )
    # One clock and one id source, set before each engine runs an operation, so that updatedAt, clone
    # ids and clonedAt are the same on both sides (and ties, the usual source of differences, common).
    clock = [BASE]
    ids = [0]

    def generated() -> str:
        ids[0] += 1
        return f"gen-{ids[0]:06d}"

    monkeypatch.setattr(
        "resolvers.clock.time",
        types.SimpleNamespace(time_ns=lambda: clock[0] * 1_000_000, gmtime=time.gmtime),
    )
    monkeypatch.setattr("resolvers.threads.uuid", types.SimpleNamespace(uuid4=generated))
    async with (
        database("sqlite", tmp_path) as sqlite_url,
        database("postgres", tmp_path, icu_locale="en-US") as postgres_url,
    ):
        built = {}
        made = []
        for name, url in (("sqlite", sqlite_url), ("postgres", postgres_url)):
            engine = create_engine(url)
            made.append(engine)
            await upgrade(engine)
            built[name] = Services.build(
                Repository(engine), memory_defaults=dict(BUILTIN_DEFAULTS), max_include_items=100
            )
        try:
            yield Pair(built, clock, ids)
        finally:
            for engine in made:
                await engine.dispose()


def normal(value: Any) -> Any:
    """A comparable form: dataclasses as dicts without `seq`, errors as their type and message."""
    if isinstance(value, RecallQLError):
        return ("error", type(value).__name__, value.message)
    if isinstance(value, RecallResult):
        # A message cursor is (createdAt, seq): its time is the engines' to agree on, its seq is not.
        places = {"start_cursor": value.start_cursor, "end_cursor": value.end_cursor}
        value = dataclasses.replace(
            value,
            **{
                name: None if cursor is None else f"at {cursors.decode(cursor, name)[0]}"
                for name, cursor in places.items()
            },
        )
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: normal(getattr(value, f.name)) for f in dataclasses.fields(value) if f.name != "seq"}
    if isinstance(value, (list, tuple)):
        return [normal(v) for v in value]
    if isinstance(value, dict):
        return {k: normal(v) for k, v in value.items()}
    return value


async def same(pair: Pair, what: str, call: Callable[[Services], Awaitable[Any]]) -> Any:
    """Runs `call` on both engines at the same instant with the same ids; asserts equal outcomes."""
    pair.ops += 1
    pair.clock[0] += 1000
    seen = {}
    for name, services in pair.services.items():
        pair.ids[0] = pair.ops * 1000
        try:
            seen[name] = normal(await call(services))
        except RecallQLError as error:
            seen[name] = normal(error)
        except Exception as error:
            raise AssertionError(f"{what} on {name} raised {type(error).__name__}: {error!r}") from error
    assert seen["sqlite"] == seen["postgres"], f"{what}: the engines differ"
    return seen["sqlite"]


# ---------------------------------------------------------------------------------------------- history
@dataclass
class Save:
    specs: list[MessageSpec]


@dataclass
class Update:
    # (target message, new content or None, new role, move to thread, new resource)
    items: list[tuple[int | str, MessageSpec | None, str | None, int | None, int | None]]


@dataclass
class Delete:
    targets: list[int | str]


@dataclass
class EditThread:
    thread: int
    title: str | None
    metadata: dict[str, Any] | None


@dataclass
class DropThread:
    thread: int


@dataclass
class Transfer:
    thread: int
    resource: int


@dataclass
class NewThread:
    thread: int
    resource: int
    metadata: dict[str, Any] | None
    at: int | None


@dataclass
class Clone:
    source: int
    target: int | None
    resource: int | None
    limit: int | None
    pick: list[int] | None
    dates: tuple[int | None, int | None] | None


@dataclass
class Memory:
    thread: int
    resource: int | None
    text: str
    scope: str
    mode: str


threads = st.integers(0, 5)
resources = st.integers(0, 2)
targets = st.one_of(st.integers(0, 30), st.just("missing"))
thread_metadata = st.one_of(st.none(), st.dictionaries(metadata_keys, scalars, max_size=3))
operations = st.one_of(
    st.builds(Save, st.lists(message_specs, min_size=1, max_size=6)),
    st.builds(Save, st.lists(message_specs, min_size=1, max_size=6)),
    st.builds(
        Update,
        st.lists(
            st.tuples(
                targets,
                st.one_of(st.none(), message_specs),
                st.sampled_from([None, None, "user", "assistant", "signal", "system"]),
                st.one_of(st.none(), st.none(), threads),
                st.one_of(st.none(), st.none(), resources),
            ),
            min_size=1,
            max_size=3,
        ),
    ),
    st.builds(Delete, st.lists(targets, max_size=3)),
    st.builds(EditThread, threads, st.one_of(st.none(), texts(6)), thread_metadata),
    st.builds(DropThread, threads),
    st.builds(Transfer, threads, resources),
    st.builds(
        NewThread, st.integers(3, 5), resources, thread_metadata, st.one_of(st.none(), st.integers(0, 12))
    ),
    st.builds(
        Clone,
        threads,
        st.one_of(st.none(), st.integers(3, 5)),
        st.one_of(st.none(), resources),
        st.one_of(st.none(), st.integers(0, 4)),
        st.one_of(st.none(), st.lists(st.integers(0, 30), max_size=4)),
        st.one_of(
            st.none(),
            st.tuples(st.one_of(st.none(), st.integers(0, 12)), st.one_of(st.none(), st.integers(0, 12))),
        ),
    ),
    st.builds(
        Memory,
        threads,
        st.one_of(st.none(), resources),
        texts(12),
        st.sampled_from(["resource", "thread"]),
        st.sampled_from(["replace", "append"]),
    ),
)


class History:
    def __init__(self, pair: Pair, world: World) -> None:
        self.pair, self.world, self.saved = pair, world, 0

    def thread(self, n: int) -> str:
        return self.world.threads[n]

    def message(self, target: int | str) -> str:
        return self.world.message_id(target) if isinstance(target, int) else target

    def resource(self, n: int | None) -> str | None:
        return None if n is None else self.world.resources[n]

    def principal(self, who: str) -> Principal:
        """Who writes: authentication off, a key of one or two of the example's resources, or of none."""
        if who == "open":
            return OPEN
        granted = frozenset(self.world.resources[int(n)] for n in who[1:])
        return Principal(f"key:{who}", granted)

    async def run(self, op: Any, who: str = "open") -> None:
        world = self.world
        principal = self.principal(who)
        if isinstance(op, Save):
            inputs = []
            for spec in op.specs:
                if spec.reuse is not None and spec.reuse < self.saved:
                    message_id = world.message_id(spec.reuse)
                else:
                    message_id = world.message_id(self.saved)
                    self.saved += 1
                role, content = content_of(spec)
                inputs.append(
                    MessageInput(
                        thread_id=self.thread(min(spec.thread, 5)),
                        role=role,
                        content=content,
                        id=message_id,
                        resource_id=self.resource(spec.explicit_resource),
                        created_at=BASE + spec.at * 1000,
                    )
                )
            await same(self.pair, f"save {inputs!r}", lambda s: s.messages.save(inputs, principal=principal))
        elif isinstance(op, Update):
            patches = [
                MessagePatch(
                    id=self.message(target),
                    content=content_of(spec)[1] if spec is not None else None,
                    role=role,
                    thread_id=self.thread(thread) if thread is not None else None,
                    resource_id=self.resource(resource),
                )
                for target, spec, role, thread, resource in op.items
            ]
            await same(
                self.pair, f"update {patches!r}", lambda s: s.messages.update(patches, principal=principal)
            )
        elif isinstance(op, Delete):
            ids = [self.message(t) for t in op.targets]
            await same(self.pair, f"delete {ids}", lambda s: s.messages.delete(ids, principal=principal))
        elif isinstance(op, EditThread):
            thread_id = self.thread(op.thread)
            await same(
                self.pair,
                f"updateThread {op!r}",
                lambda s: s.threads.update(
                    thread_id, title=op.title, metadata=op.metadata, principal=principal
                ),
            )
        elif isinstance(op, DropThread):
            thread_id = self.thread(op.thread)
            await same(
                self.pair, f"deleteThread {op!r}", lambda s: s.threads.delete(thread_id, principal=principal)
            )
        elif isinstance(op, Transfer):
            thread_id, resource_id = self.thread(op.thread), world.resources[op.resource]
            moved = await same(
                self.pair,
                f"updateThreadResourceId {op!r}",
                lambda s: s.threads.transfer(thread_id, resource_id, principal=principal),
            )
            if isinstance(moved, dict):
                world.owners[moved["id"]] = moved["resource_id"]
        elif isinstance(op, NewThread):
            created = await same(
                self.pair,
                f"createThread {op!r}",
                lambda s: s.threads.create(
                    resource_id=world.resources[op.resource],
                    thread_id=self.thread(op.thread),
                    metadata=op.metadata,
                    created_at=BASE + op.at * 1000 if op.at is not None else None,
                    principal=principal,
                ),
            )
            if isinstance(created, dict):
                world.owners[created["id"]] = created["resource_id"]
        elif isinstance(op, Clone):
            start, end = op.dates or (None, None)
            options = CloneOptions(
                message_limit=op.limit,
                start_date=BASE + start * 1000 if start is not None else None,
                end_date=BASE + end * 1000 if end is not None else None,
                message_ids=[self.message(n) for n in op.pick] if op.pick is not None else None,
            )
            source = self.thread(op.source)
            target = self.thread(op.target) if op.target is not None else None
            await same(
                self.pair,
                f"cloneThread {op!r}",
                lambda s: s.threads.clone(
                    source,
                    new_thread_id=target,
                    resource_id=self.resource(op.resource),
                    options=options,
                    principal=principal,
                ),
            )
        elif isinstance(op, Memory):
            config = {"workingMemory": {"enabled": True, "scope": op.scope}}
            thread_id = self.thread(op.thread)
            await same(
                self.pair,
                f"updateWorkingMemory {op!r}",
                lambda s: s.working_memory.update(
                    thread_id, self.resource(op.resource), op.text, config, mode=op.mode, principal=principal
                ),
            )
            await same(
                self.pair,
                f"workingMemory {op!r}",
                lambda s: s.working_memory.get(
                    thread_id, self.resource(op.resource), config, principal=principal
                ),
            )
        else:  # pragma: no cover - the strategy makes only the kinds above
            raise AssertionError(op)


# ---------------------------------------------------------------------------------------------- reads
@dataclass
class Listing:
    resource: int | None  # None: every resource's threads
    page: int
    per_page: int | bool
    order_field: str
    descending: bool
    metadata: Any
    # Keyset paging: the places of these threads (of the world's, by index) as cursors; counted or not.
    after: int | None = None
    before: int | None = None
    counted: bool = True


listings = st.builds(
    Listing,
    st.one_of(resources, st.none()),
    st.integers(0, 2),
    st.one_of(st.just(False), st.integers(0, 4)),
    st.sampled_from(["createdAt", "updatedAt"]),
    st.booleans(),
    st.one_of(st.none(), st.none(), st.dictionaries(metadata_keys, scalars, min_size=1, max_size=2)),
    st.one_of(st.none(), st.integers(0, 5)),
    st.one_of(st.none(), st.none(), st.integers(0, 5)),
    st.booleans(),
)


async def listed(services: Services, world: World, listing: Listing) -> Any:
    async def cursor(index: int | None) -> str | None:
        """The place of a thread of the world (as this engine holds it; a deleted one's at BASE)."""
        if index is None:
            return None
        thread_id = world.threads[index % len(world.threads)]
        record = await services.threads.get(thread_id, principal=OPEN)
        updated = listing.order_field == "updatedAt"
        at = BASE if record is None else record.updated_at if updated else record.created_at
        return cursors.encode_thread(listing.order_field, at, thread_id)

    return await services.threads.list(
        world.resources[listing.resource] if listing.resource is not None else None,
        page=listing.page,
        per_page=listing.per_page if listing.per_page is False else int(listing.per_page),
        order_field=listing.order_field,
        descending=listing.descending,
        metadata=listing.metadata,
        principal=OPEN,
        after=await cursor(listing.after),
        before=await cursor(listing.before),
        counted=listing.counted,
    )


async def compare_reads(
    pair: Pair, history: History, calls: list[ArgSpec], lists: list[Listing], whos: list[str]
) -> None:
    world = history.world
    for spec, who in zip(calls, whos, strict=False):
        principal = history.principal(who)
        base = build_args(world, spec)
        variants = [
            base,
            dataclasses.replace(base, hide_signals=None, include_system_reminders=spec.reminders),
            dataclasses.replace(base, hide_signals=True),
            dataclasses.replace(
                base, hide_signals=spec.signal_subset, include_system_reminders=spec.reminders
            ),
        ]
        for args in variants:
            await same(
                pair,
                f"recall {args!r} as {who}",
                lambda s, a=args, p=principal: s.recall.recall(a, principal=p),
            )
        # A resource's messages across its threads, with the same page, filters and include windows.
        await same(
            pair,
            f"resource messages {base!r} as {who}",
            lambda s, a=base, p=principal: s.recall.resource_messages(
                a.resource_id or world.resources[0],
                page=a.page or 0,
                per_page=a.per_page,
                date_range=a.date_range,
                metadata=a.metadata,
                descending=a.order_by is not None and a.order_by.direction == "DESC",
                include=a.include,
                principal=p,
            ),
        )
    for listing in lists:
        await same(pair, f"threads {listing!r}", lambda s, ls=listing: listed(s, world, ls))
    every_id = [world.message_id(n) for n in range(history.saved)]
    await same(pair, "messages by id", lambda s: s.repository.get_messages(every_id))
    for thread_id in world.threads:
        await same(pair, f"thread {thread_id}", lambda s, t=thread_id: s.threads.get(t, principal=OPEN))


async def exported(services: Services, resource_id: str) -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []

    async def emit(kind: str, records: list[Any]) -> None:
        rows.extend((kind, normal(r)) for r in records)

    await services.repository.export_rows(emit, resource_id=resource_id)
    return rows


# ---------------------------------------------------------------------------------------------- test
@settings(FUZZ, max_examples=max(1, EXAMPLES // 2))
@given(
    owners=st.lists(resources, min_size=3, max_size=3),
    metadata=st.lists(thread_metadata, min_size=3, max_size=3),
    history=st.lists(operations, min_size=1, max_size=8),
    calls=st.lists(arg_specs, min_size=1, max_size=4),
    lists=st.lists(listings, min_size=1, max_size=3),
    whos=st.lists(st.sampled_from(["open", "open", "open", "r0", "r1", "r01", "r"]), min_size=8, max_size=8),
)
async def test_engines_agree(
    pair: Pair,
    owners: list[int],
    metadata: list[dict[str, Any] | None],
    history: list[Any],
    calls: list[ArgSpec],
    lists: list[Listing],
    whos: list[str],
) -> None:
    prefix = f"par{pair.ops}"
    # Names whose order depends on the collation (case, punctuation, digits): a tie-break on ids must
    # not follow the database's locale.
    world = World(
        prefix,
        [f"{prefix}-{name}" for name in ("b", "B", "_a", "-c", "a1", "A-0")],
        {},
        [f"{prefix}{name}" for name in ("-x", "_X", "x")],
    )
    for n, (owner, meta) in enumerate(zip(owners, metadata, strict=True)):
        await same(
            pair,
            f"createThread {n}",
            lambda s, n=n, owner=owner, meta=meta: s.threads.create(
                resource_id=world.resources[owner],
                thread_id=world.threads[n],
                metadata=meta,
                created_at=BASE,
                principal=OPEN,
            ),
        )
        world.owners[world.threads[n]] = world.resources[owner]
    run = History(pair, world)
    for op, who in zip(history, whos, strict=False):
        await run.run(op, who)
    await compare_reads(pair, run, calls, lists, whos[len(history) % 8 :] + whos)
    for resource_id in world.resources:
        await same(pair, f"export {resource_id}", lambda s, r=resource_id: exported(s, r))


async def test_ties_are_in_code_point_order(pair: Pair) -> None:
    """Threads of one instant list in code-point order of their ids, oldest-first and newest-first, and
    export in it, on SQLite and on a PostgreSQL database whose collation is en-US (which would put
    "p-_a" before "p-B" and "p-b" before "p-B")."""
    names = ["p-b", "p-B", "p-_a", "p--c", "p-a1", "p-A-0", "p-é", "p-z"]
    for name in names:
        await same(
            pair,
            f"createThread {name}",
            lambda s, n=name: s.threads.create(
                resource_id="ties", thread_id=n, created_at=BASE, principal=OPEN
            ),
        )
    for descending in (False, True):
        page = await same(
            pair,
            f"threads descending={descending}",
            lambda s, d=descending: s.threads.list("ties", descending=d, principal=OPEN),
        )
        assert [t["id"] for t in page["threads"]] == sorted(names, reverse=descending)
    rows = await same(pair, "export", lambda s: exported(s, "ties"))
    assert [r["id"] for kind, r in rows if kind == "thread"] == sorted(names)


async def test_id_lists_past_the_driver_limit(pair: Pair) -> None:
    """asyncpg takes at most 32,767 parameters a statement: reads of threads or resources by id (federation
    representations, the threads of a request's messages) and deletes of messages are split, on both
    engines, however many ids the settings let through."""
    many = 33_000
    for services in pair.services.values():
        repository = services.repository
        assert await repository.get_threads([f"missing-{n}" for n in range(many)]) == {}
        assert await repository.get_resources([f"missing-{n}" for n in range(many)]) == {}
        content = {"format": 2, "parts": [{"type": "text", "text": "x"}]}
        records = [
            MessageRecord(f"big-{n}", "big", "r", "user", "v2", BASE + n, content) for n in range(many)
        ]
        for start in range(0, many, 5000):
            await repository.save_messages(records[start : start + 5000], now=BASE)
        deleted = await repository.delete_messages([r.id for r in records], now=BASE)
        assert len(deleted) == many
        assert await repository.get_messages([r.id for r in records[:10]]) == {}
