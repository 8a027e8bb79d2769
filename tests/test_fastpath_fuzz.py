"""Differential fuzzing of the compiled read path (schema/fastpath.py) against Strawberry's normal
execution: random valid documents over the read roots (random field subsets at every level, aliases,
repeated keys, named and inline fragments, __typename, variables with defaults), run under several
principals against deliberately odd stored data. Whenever the compiled path answers, its answer must
be exactly the normal path's (same values, same key order; the same errors, when one root failed), and
the answer must be encodable by orjson (what web/compiled.py's _answer does with it)."""

from __future__ import annotations

import gc
import json
import os
import warnings
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from graphql import (
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLUnionType,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.records import MessageRecord, ThreadRecord
from resolvers.auth import NOBODY, OPEN, Principal
from resolvers.context import RequestContext, Services
from schema import build_schema
from tests.factories import msg, seed, t
from tests.support import app_client
from tests.test_fastpath import as_answered
from web.auth import key_entry, new_key

# Generous alias and depth limits: generated documents repeat fields under many aliases (both paths
# validate with the same limits, so this changes nothing in the comparison).
SCHEMA = build_schema(max_aliases=100_000, max_depth=40, max_tokens=200_000)
GQL = SCHEMA._schema
FUZZ: dict[str, Any] = {
    "deadline": None,
    "suppress_health_check": [
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
}
# More with FASTPATH_FUZZ_EXAMPLES (a review ran 1,500 per engine: no difference left).
EXAMPLES = int(os.environ.get("FASTPATH_FUZZ_EXAMPLES", "150"))

PRINCIPALS = {
    "open": OPEN,
    "admin": Principal("key:admin"),
    "r1": Principal("key:r1", frozenset({"r1"})),
    "r2": Principal("key:r2", frozenset({"r2"})),
    "r1r2": Principal("key:r1r2", frozenset({"r1", "r2"})),
    "nobody": NOBODY,
}

ALL_PARTS: list[dict[str, Any]] = [
    {"type": "step-start"},
    {"type": "step-start", "extra": {"x": [1, 2]}},
    {"type": "text", "text": ""},
    {"type": "text", "text": 'h\u00e9llo \U0001f600 \u2028 "quoted" \\ back'},
    {"type": "text", "text": 5},  # not a string: UnknownPart
    {"type": "text"},  # no text: UnknownPart
    {"type": "reasoning", "reasoning": "", "details": [{"type": "text", "text": "hm"}]},
    {"type": "reasoning", "reasoning": 7, "details": None},
    {"type": "reasoning"},
    {
        "type": "tool-invocation",
        "toolInvocation": {
            "state": "result",
            "toolCallId": "c",
            "toolName": "w",
            "args": {"q": 1, "nested": {"deep": [None, True, 1.5, "s"]}},
            "result": {"ok": True},
            "step": 3,
        },
    },
    {"type": "tool-invocation", "toolInvocation": {"step": 2**40, "state": 1, "args": None}},
    {"type": "tool-invocation", "toolInvocation": {"step": True}},
    {"type": "tool-invocation", "toolInvocation": {"step": -(2**31)}},
    {"type": "tool-invocation", "toolInvocation": "not an object"},
    {"type": "file", "mimeType": "image/png", "data": "aGk=", "filename": "a.png"},
    {"type": "file", "mediaType": "text/plain", "url": "https://x.example/\u00fc"},
    {"type": "file", "mimeType": "", "data": None},
    {"type": "file"},
    {"type": "source", "source": {"url": "x", "title": "\u0436"}},
    {"type": "source"},
    {"type": "data-signal", "id": "s1", "data": {"type": "reactive"}},
    {"type": "data-", "id": 5, "data": [1, {"a": None}]},
    {"type": "data-x"},
    {"type": "mystery", "payload": {"k": [1, 2, {"z": ""}]}},
    {"type": ""},
]
RAW_ONLY_PARTS: list[Any] = [{"noType": True}, {"type": None}, {"type": 3}, "text", None, 7]


def _record(id: str, thread: str, at: float, content: Any, **kw: Any) -> MessageRecord:
    return MessageRecord(
        id=id,
        thread_id=thread,
        resource_id=kw.pop("resource", "r1"),
        role=kw.pop("role", "user"),
        type=kw.pop("type", "v2"),
        created_at=t(at),
        content=content,
        **kw,
    )


@pytest.fixture
async def odd(services: Services) -> Services:
    messages = [msg(f"m{n}", at=n, metadata={"n": n, "even": n % 2 == 0}) for n in range(4)]
    messages += [
        msg("p1", at=4.5, role="assistant", parts=ALL_PARTS),
        msg("p2", at=4.6, role="assistant", parts=[]),
        msg("u1", at=4.7, text="\u00e9\u4e2d\U0001f600", metadata={"": "", "nested": {"a": [[], {}, [{}]]}}),
        msg("sig", at=5, role="signal", metadata={"signal": {"type": "state"}}),
        msg("rem", at=5.5, text="<system-reminder>x</system-reminder>"),
        msg("o1", thread="t2", at=0.5),
        msg("x1", thread="t3", at=0.5, resource="r2", text="other resource"),
    ]
    await seed(services, *messages, threads={"t1": "r1", "t2": "r1", "t3": "r2"})
    repo = services.repository
    await repo.import_threads(
        [
            ThreadRecord(
                "t4", "r1", "t\u00eftle \U0001f600", {"deep": {"a": [1, {"b": None}]}, "": 1.25}, t(1), t(2)
            ),
            ThreadRecord("t5", "r2", "", None, t(3), t(3)),
        ]
    )
    await repo.import_messages(
        [
            _record("f1", "t4", 1, {"format": 1, "parts": "not a list", "content": "legacy text"}),
            _record("f2", "t4", 2, {"format": 2**40, "parts": [5, None, {"type": "text", "text": "ok"}]}),
            _record("f3", "t4", 3, {"parts": None, "metadata": None, "content": 17}, resource=None),
            _record("f4", "t4", 4, {"format": "2", "metadata": [1, 2]}, signal_type="bogus", type=""),
            _record("f5", "t4", 5, {}, role="", signal_type="user-message", legacy_reminder=True),
            _record(
                "f6",
                "t5",
                1,
                {"format": 2, "parts": ALL_PARTS[:5] + RAW_ONLY_PARTS},
                resource="r2",
                signal_type="state",
            ),
        ],
        now=t(10),
    )
    return services


# ------------------------------------------------------------------------------------------ generator
def _unwrap(gql_type: Any) -> Any:
    while isinstance(gql_type, GraphQLNonNull | GraphQLList):
        gql_type = gql_type.of_type
    return gql_type


class Doc:
    def __init__(self, draw: Any) -> None:
        self.draw = draw
        self.fragments: dict[str, str] = {}
        self.by_type: dict[str, list[str]] = {}

    def fragment(self, type_name: str, depth: int) -> str:
        existing = self.by_type.get(type_name, [])
        if existing and self.draw(st.booleans()):
            return self.draw(st.sampled_from(existing))
        name = f"F{len(self.fragments)}_{type_name}"
        self.fragments[name] = ""  # reserved (a fragment may spread others, never itself)
        body = self.selection(type_name, depth)
        self.fragments[name] = f"fragment {name} on {type_name} {{ {body} }}"
        self.by_type.setdefault(type_name, []).append(name)
        return name

    def selection(self, type_name: str, depth: int) -> str:
        gql_type = GQL.type_map[type_name]
        draw = self.draw
        items: list[str] = []
        if isinstance(gql_type, GraphQLUnionType):
            members = [m.name for m in gql_type.types]
            for _ in range(draw(st.integers(1, 6))):
                kind = draw(st.sampled_from(["inline", "inline", "named", "typename", "on-union", "bare"]))
                member = draw(st.sampled_from(members))
                if kind == "inline":
                    items.append(f"... on {member} {{ {self.selection(member, depth + 1)} }}")
                elif kind == "named":
                    items.append(f"...{self.fragment(member, depth + 1)}")
                elif kind == "typename":
                    alias = draw(st.sampled_from(["", "tn: ", "kind: "]))
                    items.append(f"{alias}__typename")
                elif kind == "on-union":  # a fragment on the union itself (the compiled path declines)
                    items.append(f"... on {type_name} {{ __typename }}")
                else:  # inline fragment without a type condition
                    items.append("... { __typename }")
            return " ".join(items)
        assert isinstance(gql_type, GraphQLObjectType)
        names = list(gql_type.fields)
        if type_name == "Thread" and depth < 8:
            names += ["recall"] * 8  # the one nested field the compiled path resolves: often
        count = draw(st.integers(1, 5 if depth < 4 else 3))
        for _ in range(count):
            kind = draw(
                st.sampled_from(
                    ["field"] * 6 + ["typename", "inline", "inline-bare", "named", "spread-again"]
                )
            )
            if kind == "typename":
                alias = draw(st.sampled_from(["", "__typename_a: ", "tn: "]))
                items.append(f"{alias}__typename")
            elif kind in ("inline", "inline-bare") and depth < 7:
                cond = f"on {type_name} " if kind == "inline" else ""
                items.append(f"... {cond}{{ {self.selection(type_name, depth + 1)} }}")
            elif kind in ("named", "spread-again") and depth < 7:
                name = self.fragment(type_name, depth + 1)
                items.append(f"...{name}")
                if kind == "spread-again":
                    items.append(f"...{name}")
            else:
                name = draw(st.sampled_from(names))
                field = gql_type.fields[name]
                args = ""
                alias = draw(st.sampled_from(["", "", f"{name}_a: ", f"{name}_b: "]))
                if (type_name, name) == ("Thread", "recall"):
                    n = draw(st.integers(0, len(THREAD_RECALL_ARGUMENTS) - 1))
                    args = THREAD_RECALL_ARGUMENTS[n]
                    # Mostly a key per argument set (they merge); now and then one key for two sets.
                    alias = draw(st.sampled_from([alias, f"recall{n}: ", f"recall{n}: ", f"recall{n}: "]))
                elif field.args and draw(st.integers(0, 9)) != 0:
                    continue  # other fields with arguments (Thread.workingMemory): now and then
                if name in ("thread", "threadResourceId") and draw(st.integers(0, 4)) != 0:
                    continue  # async fields: now and then
                inner = _unwrap(field.type)
                if isinstance(inner, GraphQLObjectType | GraphQLUnionType):
                    if depth >= 8:
                        continue
                    items.append(f"{alias}{name}{args} {{ {self.selection(inner.name, depth + 1)} }}")
                else:
                    items.append(f"{alias}{name}")
        if not items:
            items.append("__typename")
        return " ".join(items)


# Thread.recall (resolved by the compiled path after the roots, its reads batched): every kind of page,
# include windows (read one by one), refused pages (the whole answer left to the normal path) and, when
# two of these meet under one key, a document neither path runs.
THREAD_RECALL_ARGUMENTS = [
    "",
    "(perPage: 1)",
    "(perPage: false)",
    "(perPage: 2, page: 1, orderBy: {direction: ASC})",
    "(filter: {metadata: {even: true}}, perPage: 3)",
    "(hideSignals: {all: true}, threadConfig: {lastMessages: 2})",
    '(include: [{id: "f1", withPreviousMessages: 1}, {id: "m2", withNextMessages: 1}], perPage: 1)',
    "(page: -1)",
]

ROOTS = {
    "recall": (
        "RecallResult",
        [
            "(threadId: $t)",
            '(threadId: "t1", perPage: 3)',
            '(threadId: "t4", perPage: false)',
            '(threadId: "t1", perPage: $p, orderBy: $o, hideSignals: $h)',
            '(threadId: "t5")',
            '(threadId: "t3", perPage: 5)',
            '(threadId: "t1", include: [{id: "x1", withPreviousMessages: 1}, {id: "f3"}], perPage: 2)',
            '(threadId: "t4", resourceId: "r1", perPage: 10, orderBy: {direction: ASC})',
            '(threadId: "t1", perPage: 20, hideSignals: {all: false}, includeSystemReminders: true)',
            '(threadId: "nope")',
        ],
    ),
    "thread": (
        "Thread",
        ["(id: $t)", '(id: "t4")', '(id: "t5")', '(id: "nope")', '(id: "t3", resourceId: "r2")'],
    ),
    "threads": (
        "ThreadPage",
        [
            '(resourceId: "r1")',
            '(resourceId: "r2", perPage: false)',
            '(resourceId: "r1", perPage: 2, page: 1, orderBy: {field: UPDATED_AT, direction: ASC})',
            "(resourceId: $r)",
        ],
    ),
    "messages": (
        "Message",
        [
            "(ids: $ids)",
            '(ids: ["p1", "f1", "f2", "f3", "f4", "f5", "f6", "x1", "nope", "u1"])',
            "(ids: [])",
            '(ids: ["p1", "p1"])',
        ],
    ),
}
VARIABLES = {
    "$t": ("ID!", ['"t1"', '"t4"', None]),
    "$p": ("PerPage", ["3", "false", None]),
    "$o": ("MessageOrderBy", ["{direction: DESC}", None]),
    "$h": ("HideSignalsInput", ["{types: [STATE, USER_MESSAGE]}", None]),
    "$r": ("String!", ['"r1"', '"r2"', None]),
    "$ids": ("[ID!]!", ['["f1", "p1"]', '["sig", "nope", "rem", "f6"]', None]),
}
VALUES = {
    "$t": ["t1", "t4", "t5", "t3"],
    "$p": [0, 2, False, None, 2.0],
    "$o": [{"direction": "ASC"}, {"field": "CREATED_AT"}, None],
    "$h": [{"all": True}, {"types": ["STATE"]}, None],
    "$r": ["r1", "r2"],
    "$ids": [["p1", "f6", "x1"], ["u1"], []],
}


@st.composite
def documents(draw: Any) -> tuple[str, dict[str, Any], str]:
    doc = Doc(draw)
    roots: list[str] = []
    used_vars: set[str] = set()
    root_count = draw(st.integers(1, 3))
    for n in range(root_count):
        field = draw(st.sampled_from(sorted(ROOTS)))
        type_name, arg_options = ROOTS[field]
        args = draw(st.sampled_from(arg_options))
        used_vars.update(v for v in VARIABLES if v + ")" in args or v + "," in args)
        body = doc.selection(type_name, 1)
        alias = f"r{n}: " if n or draw(st.booleans()) else ""
        roots.append(f"{alias}{field}{args} {{ {body} }}")
        if draw(st.integers(0, 4)) == 0:  # the same key again, same arguments: merged
            roots.append(f"{alias}{field}{args} {{ {doc.selection(type_name, 1)} }}")
    selection = " ".join(roots)
    if draw(st.integers(0, 5)) == 0:
        selection = f"... on Query {{ {selection} }}"
    definitions = []
    variables: dict[str, Any] = {}
    for var in sorted(used_vars):
        var_type, defaults = VARIABLES[var]
        default = draw(st.sampled_from(defaults))
        # A required variable without a default must be given; others now and then.
        if (default is None and var_type.endswith("!")) or draw(st.booleans()):
            variables[var[1:]] = draw(st.sampled_from(VALUES[var]))
        definitions.append(f"{var}: {var_type}" + (f" = {default}" if default is not None else ""))
    head = (
        f"query Q({', '.join(definitions)})"
        if definitions
        else draw(st.sampled_from(["", "query", "query Q"]))
    )
    query = f"{head} {{ {selection} }} " + " ".join(f for f in doc.fragments.values() if f)
    principal = draw(st.sampled_from(sorted(PRINCIPALS)))
    return query, variables, principal


@pytest.fixture(autouse=True)
def abandoned_by_graphql_core() -> Iterator[None]:
    """Each test with the coroutines graphql-core's normal execution abandons forgiven, and every other
    never-awaited coroutine still an error. When a non-null field's error nulls the whole answer (a
    root other than `threads` failing beside a listing whose Thread.recall fields are still pending),
    graphql-core 3.3's gather_with_cancel cancels its siblings and leaves some of their coroutines (its
    get_results and complete_awaitable_value, Strawberry's _async_resolver) never started. Python warns
    when they are collected, and that can be examples later (the CancelledError that holds their frames
    is released late), so they are told apart by their code, not by when they are collected. The
    compiled path cannot leave one of those: it awaits a resolver's coroutine as soon as the resolver
    returns it (FastPath._resolve); what it could abandon is a _resolve, which stays an error."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.filterwarnings("always", r"coroutine '.*' was never awaited", RuntimeWarning)
        yield
        gc.collect()
    ours = [w for w in caught if not _graphql_cores(w.source)]
    assert not ours, [str(w.message) for w in ours]


def _graphql_cores(coroutine: Any) -> bool:
    code = getattr(coroutine, "cr_code", None)
    if code is None:
        return False
    path = code.co_filename.replace("\\", "/")
    return "/graphql/execution/" in path or (
        "/strawberry/" in path and code.co_qualname.endswith("._async_resolver")
    )


async def _both(services: Services, query: str, variables: dict[str, Any], principal: Principal) -> Any:
    plan = SCHEMA.fast_path.plan(query, None)
    context = RequestContext(services=services, principal=principal)
    fast = await SCHEMA.fast_path.execute(plan, variables, context) if plan else None
    normal = await SCHEMA.execute(
        query,
        variable_values=variables,
        context_value=RequestContext(services=services, principal=principal),
    )
    return fast, normal


@settings(max_examples=EXAMPLES, **FUZZ)
@given(case=documents())
async def test_compiled_path_agrees_with_normal_execution(
    odd: Services, case: tuple[str, dict[str, Any], str]
) -> None:
    query, variables, principal = case
    fast, normal = await _both(odd, query, variables, PRINCIPALS[principal])
    if normal.errors:
        # Answered only as the normal path answers (an expected error of a lone root), else declined.
        assert fast is None or json.dumps(as_answered(fast)) == json.dumps(as_answered(normal)), (
            query,
            variables,
            principal,
            fast,
            normal.errors,
        )
        return
    if fast is None:
        return
    assert json.dumps(fast) == json.dumps({"data": normal.data}), (query, variables, principal)
    encoded = orjson.dumps(fast)  # what web/compiled.py answers with
    assert orjson.loads(encoded) == json.loads(json.dumps({"data": normal.data}))


# ------------------------------------------------------------------------------ end to end, over HTTP
KEYS = {name: new_key() for name in ("admin", "r1", "r2", "r1r2", "none")}
API_KEYS = [
    key_entry("admin", KEYS["admin"], admin=True),
    key_entry("r1", KEYS["r1"], resources=["r1"]),
    key_entry("r2", KEYS["r2"], resources=["r2"]),
    key_entry("r1r2", KEYS["r1r2"], resources=["r1", "r2"]),
    key_entry("none", KEYS["none"], resources=["nobody-owns-this"]),
]


@pytest.fixture
async def clients(odd: Services) -> Any:
    """The real app twice on the same services: with the compiled read path, and without it."""
    auth = {"auth": "required", "api_keys": API_KEYS}
    async with app_client(odd, **auth) as compiled, app_client(odd, compiled_reads=False, **auth) as plain:
        yield compiled, plain


EXTRA_OPERATION = 'query Other { thread(id: "t1") { id } }'


@st.composite
def http_cases(draw: Any) -> tuple[dict[str, Any], str]:
    query, variables, principal = draw(documents())
    payload: dict[str, Any] = {"query": query}
    if variables or draw(st.booleans()):
        payload["variables"] = variables
    shape = draw(
        st.sampled_from(["plain", "plain", "named", "two-ops-named", "two-ops-unnamed", "wrong-name"])
    )
    if shape == "named" and query.startswith("query Q"):
        payload["operationName"] = "Q"
    elif shape.startswith("two-ops") and query.startswith("query Q"):
        payload["query"] = f"{query} {EXTRA_OPERATION}"
        if shape == "two-ops-named":
            payload["operationName"] = draw(st.sampled_from(["Q", "Other"]))
    elif shape == "wrong-name":
        payload["operationName"] = "Nope"
    if draw(st.integers(0, 9)) == 0 and payload.get("variables"):
        payload["variables"] = {
            k: "wrong" if not isinstance(v, str) else 5 for k, v in payload["variables"].items()
        }
    return payload, principal


@settings(max_examples=max(EXAMPLES // 2, 10), **FUZZ)
@given(case=http_cases())
async def test_http_answers_agree(clients: Any, case: tuple[dict[str, Any], str]) -> None:
    compiled, plain = clients
    payload, principal = case
    key = KEYS.get(principal, KEYS["admin"] if principal == "open" else KEYS["none"])
    headers = {"Authorization": f"Bearer {key}"}
    a = await compiled.post("/graphql", json=payload, headers=headers)
    b = await plain.post("/graphql", json=payload, headers=headers)
    assert a.status_code == b.status_code, (payload, a.text[:500], b.text[:500])
    body_a, body_b = a.json(), b.json()
    for body in (body_a, body_b):  # request ids differ
        for error in body.get("errors") or []:
            (error.get("extensions") or {}).pop("requestId", None)
    assert json.dumps(body_a) == json.dumps(body_b), payload
