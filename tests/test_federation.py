"""RecallQL as an Apollo Federation v2 subgraph (schema/federation.py).

In process: the checks of Apollo's subgraph compatibility suite that apply to RecallQL (`_service`,
`@link`, single / multiple / composite `@key`, `_entities` across types, `@shareable`, `@tag`,
`@inaccessible`, and @oneOf still enforced by the subgraph), batching of entity fetches and the
principal's limits.

Through a real gateway: tests/federation/gateway.mjs starts a second subgraph (users), composes it with
RecallQL's `_service { sdl }` (read over HTTP from a running server) using @apollo/composition, and
serves Apollo Gateway in front of both; queries that cross the subgraphs run through it. The pinned npm
packages are installed with `npm ci` into a cache folder outside the repository, keyed by the lockfile
hash (as shared/conformance/oracle.sh does). package.json overrides @graphql-tools/schema and
@graphql-tools/merge to releases whose dependencies support Node 20 (@apollo/server's ^10 range
otherwise pulls a helper that requires Node >= 22.15).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from graphql import (
    DirectiveNode,
    ListValueNode,
    ObjectTypeDefinitionNode,
    SchemaDefinitionNode,
    SchemaExtensionNode,
    StringValueNode,
    UnionTypeDefinitionNode,
    build_schema,
    parse,
    specified_directives,
    visit,
)
from graphql.language import Visitor

from resolvers.auth import OPEN, Principal
from resolvers.context import RequestContext, Services
from schema import build_schema as build_recallql_schema
from schema.build import SDL_PATH, SUBGRAPH_SDL_PATH, export_sdl, export_subgraph_sdl
from schema.federation import ENTITY_TAG, FEDERATION_FIELDS, FEDERATION_VERSION
from tests.factories import msg, seed
from tests.support import REPO, metric_value, require, running_server, statements, text_message, uid

FEDERATION_DIR = REPO / "tests" / "federation"
BUILT_IN_DIRECTIVES = {d.name for d in specified_directives} | {"oneOf"}
SCHEMA = build_recallql_schema()


# ============================================================================================== helpers
async def run(
    services: Services, query: str, principal: Principal | None = None, **variables: Any
) -> tuple[Any, list[Any]]:
    context = RequestContext(services=services, principal=principal or OPEN)
    result = await SCHEMA.execute(query, variable_values=variables or None, context_value=context)
    return result.data, list(result.errors or [])


def directives(sdl: str) -> dict[str, list[DirectiveNode]]:
    """Directive applications of a subgraph SDL by their coordinate ("Type", "Type.field", "schema")."""
    found: dict[str, list[DirectiveNode]] = {}
    for definition in parse(sdl).definitions:
        if isinstance(definition, SchemaDefinitionNode | SchemaExtensionNode):
            found["schema"] = list(definition.directives or ())
            continue
        name = getattr(definition, "name", None)
        if name is None:
            continue
        found[name.value] = list(getattr(definition, "directives", None) or ())
        for field in getattr(definition, "fields", None) or ():
            found[f"{name.value}.{field.name.value}"] = list(field.directives or ())
    return found


def argument(directive: DirectiveNode, name: str) -> Any:
    for arg in directive.arguments or ():
        if arg.name.value == name:
            if isinstance(arg.value, ListValueNode):
                return [v.value for v in arg.value.values if isinstance(v, StringValueNode)]
            return getattr(arg.value, "value", None)
    return None


def keys(sdl: str, type_name: str) -> list[str]:
    return [argument(d, "fields") for d in directives(sdl)[type_name] if d.name.value == "key"]


def applied_directive_names(sdl: str) -> set[str]:
    names: set[str] = set()

    class Collect(Visitor):
        def enter_directive(self, node: DirectiveNode, *_args: Any) -> None:
            names.add(node.name.value)

    visit(parse(sdl), Collect())
    return names


# ============================================================================================== SDL
def test_checked_in_subgraph_sdl_is_current() -> None:
    assert SUBGRAPH_SDL_PATH.read_text() == export_subgraph_sdl(), (
        "schema/subgraph.graphql is stale: run `python -m schema`"
    )


async def test_service_sdl_is_the_subgraph_sdl_and_links_federation_v2(services: Services) -> None:
    data, errors = await run(services, "{ _service { sdl } }")
    assert not errors
    sdl = data["_service"]["sdl"]
    assert sdl + "\n" == SUBGRAPH_SDL_PATH.read_text()
    links = [d for d in directives(sdl)["schema"] if d.name.value == "link"]
    assert len(links) == 1
    assert argument(links[0], "url") == f"https://specs.apollo.dev/federation/v{FEDERATION_VERSION}"
    assert FEDERATION_VERSION.startswith("2.")
    # Exactly the federation directives the SDL applies are imported, and nothing else.
    imported = set(argument(links[0], "import"))
    used = applied_directive_names(sdl) - {"link"} - BUILT_IN_DIRECTIVES
    assert imported == {f"@{name}" for name in used} == {"@key", "@shareable", "@tag", "@inaccessible"}


def test_public_sdl_is_the_api_without_federation_machinery() -> None:
    public = SDL_PATH.read_text()
    assert public == export_sdl()
    # A plain GraphQL schema (graphql-core builds it; no federation directive is left undefined) ...
    api = build_schema(public)
    for hidden in ("_service", "_entities"):
        assert hidden not in api.query_type.fields
    for hidden_type in ("_Service", "_Entity", "_Any"):
        assert hidden_type not in api.type_map
    assert "threadResourceId" not in api.type_map["Message"].fields  # @inaccessible
    assert applied_directive_names(public) <= BUILT_IN_DIRECTIVES
    # ... that holds everything else the subgraph serves.
    subgraph = SCHEMA._schema
    for name, type_ in subgraph.type_map.items():
        if name.startswith("_") or name.startswith("link__"):
            continue
        assert name in api.type_map, name
        for field_name in getattr(type_, "fields", {}):
            if field_name in FEDERATION_FIELDS or f"{name}.{field_name}" == "Message.threadResourceId":
                continue
            assert field_name in api.type_map[name].fields, f"{name}.{field_name}"


# ============================================================================================== entities
def test_entity_keys() -> None:
    sdl = SUBGRAPH_SDL_PATH.read_text()
    assert keys(sdl, "Resource") == ["id"]
    assert keys(sdl, "Message") == ["id"]
    # One key each: ids are global primary keys (schema/federation.py says why no composite key).
    assert keys(sdl, "Thread") == ["id"]
    entity = next(
        d
        for d in parse(sdl).definitions
        if isinstance(d, UnionTypeDefinitionNode) and d.name.value == "_Entity"
    )
    assert sorted(t.name.value for t in entity.types) == ["Message", "Resource", "Thread"]
    # Every key field exists and is non-null (a gateway cannot build a representation otherwise).
    types = {d.name.value: d for d in parse(sdl).definitions if isinstance(d, ObjectTypeDefinitionNode)}
    for type_name in ("Resource", "Message", "Thread"):
        fields = {f.name.value: f for f in types[type_name].fields}
        for key in keys(sdl, type_name):
            for field in key.split():
                assert fields[field].type.kind == "non_null_type", f"{type_name}.{field}"


ENTITIES = """
query ($representations: [_Any!]!) {
  _entities(representations: $representations) {
    __typename
    ... on Message { id threadId role content { parts { ... on TextPart { text } } } }
    ... on Thread { id resourceId title }
    ... on Resource { resource: id threads { total threads { id } } }
  }
}
"""


async def test_entities_of_several_types_in_one_request(services: Services) -> None:
    await seed(
        services,
        msg("m1", thread="t1", text="first", resource="r1"),
        msg("m2", thread="t2", text="second", resource="r2"),
        threads={"t1": "r1", "t2": "r2"},
    )
    representations = [
        {"__typename": "Message", "id": "m2"},
        {"__typename": "Resource", "id": "r1"},
        {"__typename": "Thread", "id": "t1"},
        {"__typename": "Message", "id": "missing"},
        {"__typename": "Thread", "id": "t2", "title": "extra fields are ignored"},
        {"__typename": "Resource", "id": "nobody"},
        {"__typename": "Message", "id": "m1"},
        {"__typename": "Thread", "id": "missing"},
    ]
    data, errors = await run(services, ENTITIES, representations=representations)
    assert not errors
    # In the order given, null for unknown ids.
    assert data["_entities"] == [
        {
            "__typename": "Message",
            "id": "m2",
            "threadId": "t2",
            "role": "user",
            "content": {"parts": [{"text": "second"}]},
        },
        {"__typename": "Resource", "resource": "r1", "threads": {"total": 1, "threads": [{"id": "t1"}]}},
        {"__typename": "Thread", "id": "t1", "resourceId": "r1", "title": ""},
        None,
        {"__typename": "Thread", "id": "t2", "resourceId": "r2", "title": ""},
        None,
        {
            "__typename": "Message",
            "id": "m1",
            "threadId": "t1",
            "role": "user",
            "content": {"parts": [{"text": "first"}]},
        },
        None,
    ]


async def test_fifty_message_references_are_one_sql_statement(services: Services) -> None:
    threads = {f"t{n}": "r1" for n in range(5)}
    await seed(services, *(msg(f"m{n}", thread=f"t{n % 5}", at=n) for n in range(50)), threads=threads)
    representations = [{"__typename": "Message", "id": f"m{n}"} for n in reversed(range(50))]
    with statements(services) as seen:
        data, errors = await run(
            services,
            "query ($r: [_Any!]!) { _entities(representations: $r) { ... on Message { id threadId } } }",
            r=representations,
        )
    assert not errors
    assert [e["id"] for e in data["_entities"]] == [f"m{n}" for n in reversed(range(50))]
    assert [e["threadId"] for e in data["_entities"]] == [f"t{n % 5}" for n in reversed(range(50))]
    message_reads = [s for s in seen if "FROM messages" in s]
    assert len(message_reads) == 1, message_reads
    assert len(seen) == 1, seen


async def test_references_of_several_types_batch_per_type(services: Services) -> None:
    threads = {f"t{n}": f"r{n % 3}" for n in range(10)}
    await seed(
        services,
        *(msg(f"m{n}", thread=f"t{n % 10}", at=n, resource=f"r{n % 10 % 3}") for n in range(30)),
        threads=threads,
    )
    representations = [
        *({"__typename": "Message", "id": f"m{n}"} for n in range(30)),
        *({"__typename": "Thread", "id": f"t{n}"} for n in range(10)),
        *({"__typename": "Resource", "id": f"r{n}"} for n in range(3)),
    ]
    with statements(services) as seen:
        data, errors = await run(
            services,
            "query ($r: [_Any!]!) { _entities(representations: $r) "
            "{ __typename ... on Message { id thread { id } threadResourceId } ... on Thread { id } "
            "... on Resource { resource: id } } }",
            r=representations,
        )
    assert not errors
    assert len(data["_entities"]) == 43 and None not in data["_entities"]
    assert [e["threadResourceId"] for e in data["_entities"][:30]] == [f"r{n % 10 % 3}" for n in range(30)]
    for table in ("messages", "threads", "resources"):
        reads = [s for s in seen if f"FROM {table}" in s]
        assert len(reads) == 1, (table, reads)


async def test_entities_are_limited_to_the_principal(services: Services) -> None:
    await seed(
        services,
        msg("mine", thread="t1", resource="r1"),
        msg("theirs", thread="t2", resource="r2"),
        # In r1's thread but stored for r2: a message's own resourceId decides (resolvers.auth).
        msg("foreign", thread="t1", resource="r2"),
        threads={"t1": "r1", "t2": "r2"},
    )
    representations = [
        {"__typename": "Message", "id": "mine"},
        {"__typename": "Message", "id": "theirs"},
        {"__typename": "Message", "id": "foreign"},
        {"__typename": "Thread", "id": "t1"},
        {"__typename": "Thread", "id": "t2"},
        {"__typename": "Resource", "id": "r1"},
        {"__typename": "Resource", "id": "r2"},
    ]
    query = (
        "query ($r: [_Any!]!) { _entities(representations: $r) "
        "{ ... on Message { id } ... on Thread { id } ... on Resource { resource: id } } }"
    )
    restricted = Principal(name="key of r1", resources=frozenset({"r1"}))
    data, errors = await run(services, query, restricted, r=representations)
    assert not errors
    # Denied entities answer null, exactly as unknown ones (their existence is not disclosed).
    assert data["_entities"] == [{"id": "mine"}, None, None, {"id": "t1"}, None, {"resource": "r1"}, None]
    admin = Principal(name="admin")
    data, errors = await run(services, query, admin, r=representations)
    assert not errors and None not in data["_entities"]


async def test_bad_representations_are_bad_user_input(services: Services) -> None:
    await seed(services, msg("m1"))
    data, errors = await run(
        services,
        "query ($r: [_Any!]!) { _entities(representations: $r) { ... on Message { id } } }",
        r=[
            {"__typename": "Message", "id": "m1"},
            {"__typename": "TextPart", "text": "not an entity"},
            {"__typename": "Nope", "id": "x"},
            {"id": "m1"},
            {"__typename": "Message"},
            {"__typename": "Message", "id": {"nested": True}},
            # Fields besides the key are not used, whatever their names (info and cls failed the call).
            {"__typename": "Message", "id": "m1", "info": 1, "cls": 2, "representation": 3},
            "m1",
            {"__typename": True, "id": "m1"},
        ],
    )
    assert data["_entities"] == [{"id": "m1"}, None, None, None, None, None, {"id": "m1"}, None, None]
    assert sorted(e.path[1] for e in errors) == [1, 2, 3, 4, 5, 7, 8]
    for error in errors:
        assert error.extensions["code"] == "BAD_USER_INPUT", error
        assert error.message != "Internal server error."
    # In JSON's words: Python's (None, True, 'Nope') leaked into them.
    known = "(one of Message, Resource, Thread)."
    assert {e.path[1]: e.message for e in errors if e.path[1] in (1, 2, 3, 7, 8)} == {
        1: f'representations[1] __typename "TextPart" is not an entity of this subgraph {known}',
        2: f'representations[2] __typename "Nope" is not an entity of this subgraph {known}',
        3: f"representations[3] has no __typename {known}",
        7: f"representations[7] is not an object with a __typename {known}",
        8: f"representations[8] __typename true is not an entity of this subgraph {known}",
    }


# ============================================================================================== directives
def test_shareable_value_types_tags_and_inaccessible() -> None:
    found = directives(SUBGRAPH_SDL_PATH.read_text())

    def names(coordinate: str) -> list[str]:
        return [d.name.value for d in found[coordinate]]

    # @shareable: plain value types another subgraph may resolve too (no identity, no resolver state).
    shareable = {
        "EmbeddingUsage",
        "TextPart",
        "ReasoningPart",
        "ToolInvocation",
        "ToolInvocationPart",
        "FilePart",
        "SourcePart",
        "StepStartPart",
        "DataPart",
        "UnknownPart",
    }
    assert {c for c in found if "." not in c and "shareable" in names(c)} == shareable
    # @tag on the entities (for contracts).
    tagged = {c for c in found if any(d.name.value == "tag" for d in found[c])}
    assert tagged == {"Message", "Thread", "Resource"}
    for coordinate in tagged:
        tag = next(d for d in found[coordinate] if d.name.value == "tag")
        assert argument(tag, "name") == ENTITY_TAG
    # @inaccessible: only the graph-internal field added for @requires; nothing documented loses it.
    assert {c for c in found if "inaccessible" in names(c)} == {"Message.threadResourceId"}


async def test_inaccessible_field_still_resolves_in_the_subgraph(services: Services) -> None:
    await seed(services, msg("m1", thread="t1", resource="author"), threads={"t1": "owner"})
    data, errors = await run(
        services,
        'query { _entities(representations: [{__typename: "Message", id: "m1"}]) '
        "{ ... on Message { threadResourceId resourceId } } }",
    )
    assert not errors
    assert data["_entities"] == [{"threadResourceId": "owner", "resourceId": "author"}]


async def test_one_of_inputs_are_enforced_by_the_subgraph(services: Services) -> None:
    """Composition does not carry @oneOf into the supergraph, so a gateway may forward an input with
    two members set: RecallQL itself must reject it."""
    await seed(services, msg("m1"))
    sdl = SUBGRAPH_SDL_PATH.read_text()
    assert "input HideSignalsInput @oneOf" in sdl
    for query, variables in (
        ('{ recall(threadId: "t1", hideSignals: {all: true, types: [USER]}) { total } }', {}),
        (
            'query ($h: HideSignalsInput) { recall(threadId: "t1", hideSignals: $h) { total } }',
            {"h": {"all": True, "types": ["USER"]}},
        ),
    ):
        data, errors = await run(services, query, **variables)
        assert data is None
        assert len(errors) == 1 and "OneOf" in errors[0].message, errors
        assert errors[0].extensions["code"] in ("BAD_USER_INPUT", "GRAPHQL_VALIDATION_FAILED")
    data, errors = await run(services, '{ recall(threadId: "t1", hideSignals: {all: true}) { total } }')
    assert not errors and data["recall"]["total"] == 1


# ============================================================================================== gateway
def node_modules() -> Path:
    """The pinned packages of tests/federation, installed once into a cache folder outside the repository
    keyed by the lockfile hash:
    ${RECALLQL_FEDERATION_CACHE:-${XDG_CACHE_HOME:-~/.cache}/recallql-federation}/<hash>."""
    node, npm = shutil.which("node"), shutil.which("npm")
    require(node is not None and npm is not None, "node (>= 20) and npm are required for the gateway test")
    assert node is not None and npm is not None
    major = subprocess.run(
        [node, "-p", "process.versions.node.split('.')[0]"], capture_output=True, text=True, check=True
    ).stdout.strip()
    require(int(major) >= 20, f"node >= 20 is required for the gateway test, found {major}")
    lock = FEDERATION_DIR / "package-lock.json"
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()[:16]
    default_root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "recallql-federation"
    root = Path(os.environ.get("RECALLQL_FEDERATION_CACHE") or default_root)
    cache = root / digest
    if (cache / ".complete").is_file():
        return cache
    root.mkdir(parents=True, exist_ok=True)
    if cache.exists():  # a leftover without .complete
        shutil.rmtree(cache, ignore_errors=True)
    # Install in a temporary folder, then rename: a concurrent run never sees half a tree.
    tmp = Path(tempfile.mkdtemp(prefix=".install.", dir=root))
    try:
        shutil.copy(FEDERATION_DIR / "package.json", tmp)
        shutil.copy(lock, tmp)
        # --ignore-scripts: no install script runs (none is needed; some would download binaries).
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"],
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            pytest.fail(f"npm ci of tests/federation failed:\n{done.stdout}\n{done.stderr}")
        (tmp / ".complete").touch()
        if not cache.exists():
            tmp.rename(cache)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert (cache / ".complete").is_file()
    return cache


class Gateway:
    def __init__(self, url: str, users_url: str, out_dir: Path, fetch_log: Path) -> None:
        self.url = url
        self.users_url = users_url
        self.out_dir = out_dir
        self.fetch_log = fetch_log

    def fetches(self) -> list[dict[str, Any]]:
        if not self.fetch_log.exists():
            return []
        return [json.loads(line) for line in self.fetch_log.read_text().splitlines() if line]

    def query(self, query: str, **variables: Any) -> dict[str, Any]:
        self.fetch_log.unlink(missing_ok=True)
        response = httpx.post(self.url, json={"query": query, "variables": variables}, timeout=60)
        return response.json()


@contextlib.contextmanager
def gateway_process(
    modules: Path, recallql_url: str, users: list[dict[str, Any]], work: Path, *, apq: bool = False
) -> Iterator[Gateway]:
    work.mkdir(parents=True, exist_ok=True)
    config = work / "config.json"
    fetch_log = work / "fetches.jsonl"
    config.write_text(
        json.dumps(
            {
                "recallqlUrl": recallql_url,
                "users": users,
                "outDir": str(work),
                "fetchLog": str(fetch_log),
                "apq": apq,
            }
        )
    )
    # No Apollo key or graph ref: the gateway reports nothing anywhere.
    env = {k: v for k, v in os.environ.items() if not k.startswith("APOLLO_")}
    env["FEDERATION_NODE_MODULES"] = str(modules)
    log_path = work / "gateway.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            ["node", str(FEDERATION_DIR / "gateway.mjs"), str(config)],
            cwd=work,
            env=env,
            stdout=subprocess.PIPE,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
    ready: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def read_stdout() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith(b"FEDERATION-READY "):
                ready.put(json.loads(line.split(b" ", 1)[1]))
        ready.put(None)  # the process ended (or closed its stdout) without being ready

    threading.Thread(target=read_stdout, daemon=True).start()
    try:
        try:
            urls = ready.get(timeout=90)
        except queue.Empty:
            urls = None
        if urls is None:
            process.kill()
            process.wait(15)
            output = log_path.read_text(errors="replace")
            pytest.fail(f"the gateway did not start (exit code {process.poll()}):\n{output}")
        yield Gateway(urls["gateway"], urls["users"], work, fetch_log)
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(15)
        process.stdout.close()


def gql(url: str, query: str, **variables: Any) -> dict[str, Any]:
    body = httpx.post(f"{url}/graphql", json={"query": query, "variables": variables}, timeout=60).json()
    assert not body.get("errors"), body
    return body["data"]


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Gateway, dict[str, Any]]]:
    modules = node_modules()
    work = tmp_path_factory.mktemp("federation")
    # Semantic recall off: its background outbox drain would add SELECTs to the statement counts below.
    with running_server(work / "recallql", {"RECALLQL_EMBEDDING_MODEL_DIR": ""}) as recallql:
        alice, bob = uid("r-alice"), uid("r-bob")
        alice_thread, bob_thread = uid("t-alice"), uid("t-bob")
        create = "mutation ($i: CreateThreadInput!) { createThread(input: $i) { id } }"
        gql(recallql.url, create, i={"id": alice_thread, "resourceId": alice, "title": "Alice's plans"})
        gql(recallql.url, create, i={"id": bob_thread, "resourceId": bob, "title": "Bob's notes"})
        messages = [
            text_message(thread_id=alice_thread, id=uid("m"), text=f"note {n}", resource_id=alice)
            for n in range(30)
        ]
        gql(
            recallql.url,
            "mutation ($m: [MessageInput!]!) { saveMessages(messages: $m) { acknowledged } }",
            m=messages,
        )
        ids = [m["id"] for m in messages]
        users = [
            {
                "id": "u1",
                "name": "Alice",
                "resourceId": alice,
                "messageIds": ids,
                "threadIds": [alice_thread, uid("t-gone"), bob_thread],
                "greeting": "hello Alice",
            },
            {
                "id": "u2",
                "name": "Bob",
                "resourceId": bob,
                "messageIds": [],
                "threadIds": [bob_thread],
                "greeting": "hello Bob",
            },
        ]
        seeded = {
            "alice": alice,
            "bob": bob,
            "alice_thread": alice_thread,
            "bob_thread": bob_thread,
            "message_ids": ids,
            "texts": [f"note {n}" for n in range(30)],
        }
        with gateway_process(modules, f"{recallql.url}/graphql", users, work / "gateway") as gateway:
            yield recallql, gateway, seeded


def test_supergraph_composes_with_recallql_entities(federation: tuple[Any, Gateway, dict[str, Any]]) -> None:
    _, gateway, _ = federation
    supergraph = (gateway.out_dir / "supergraph.graphql").read_text()
    # A clean composition: no errors (the script exits on any) and no hints either.
    assert json.loads((gateway.out_dir / "hints.json").read_text()) == []
    assert '@join__type(graph: RECALLQL, key: "id")' in supergraph
    assert '@join__type(graph: USERS, key: "id", resolvable: false)' in supergraph
    assert f'@tag(name: "{ENTITY_TAG}")' in supergraph
    api = build_schema((gateway.out_dir / "api.graphql").read_text())
    assert {"users", "user", "recall", "thread", "threads", "messages", "resource"} <= set(
        api.query_type.fields
    )
    assert "threadResourceId" not in api.type_map["Message"].fields  # @inaccessible in the supergraph
    assert {"threads", "workingMemory", "id"} <= set(api.type_map["Resource"].fields)
    assert "user" in api.type_map["Message"].fields  # the users subgraph's field on RecallQL's entity
    assert "_entities" not in api.query_type.fields and "_service" not in api.query_type.fields


def test_gateway_joins_users_with_their_resources_threads(
    federation: tuple[Any, Gateway, dict[str, Any]],
) -> None:
    _, gateway, seeded = federation
    result = gateway.query("{ users { name resource { id threads { total threads { id title } } } } }")
    assert "errors" not in result, result
    assert result["data"]["users"] == [
        {
            "name": "Alice",
            "resource": {
                "id": seeded["alice"],
                "threads": {
                    "total": 1,
                    "threads": [{"id": seeded["alice_thread"], "title": "Alice's plans"}],
                },
            },
        },
        {
            "name": "Bob",
            "resource": {
                "id": seeded["bob"],
                "threads": {"total": 1, "threads": [{"id": seeded["bob_thread"], "title": "Bob's notes"}]},
            },
        },
    ]
    to_recallql = [f for f in gateway.fetches() if f["subgraph"] == "recallql"]
    assert len(to_recallql) == 1 and to_recallql[0]["representations"] == 2, gateway.fetches()


def test_gateway_fetches_thirty_messages_in_one_entities_request(
    federation: tuple[Any, Gateway, dict[str, Any]],
) -> None:
    recallql, gateway, seeded = federation
    # What a scrape alone adds (it reads the vector outbox backlog): two scrapes with nothing between.
    first = httpx.get(f"{recallql.url}/metrics").text
    before = httpx.get(f"{recallql.url}/metrics").text
    result = gateway.query(
        '{ user(id: "u1") { name recentMessages { id role content { parts { ... on TextPart { text } } } '
        "user { name } } } }"
    )
    after = httpx.get(f"{recallql.url}/metrics").text
    assert "errors" not in result, result
    messages = result["data"]["user"]["recentMessages"]
    assert [m["id"] for m in messages] == seeded["message_ids"]
    assert [m["content"]["parts"][0]["text"] for m in messages] == seeded["texts"]
    assert {m["role"] for m in messages} == {"user"}
    # Message.user is the users subgraph's, fed by RecallQL's @inaccessible threadResourceId (@requires).
    assert {m["user"]["name"] for m in messages} == {"Alice"}
    # The gateway sent RecallQL one _entities request with the 30 representations ...
    to_recallql = [f for f in gateway.fetches() if f["subgraph"] == "recallql"]
    assert len(to_recallql) == 1, gateway.fetches()
    assert to_recallql[0]["representations"] == 30 and "_entities" in to_recallql[0]["query"]
    # ... which RecallQL counted as one _entities operation, read with one statement per table (the
    # messages, and their threads for threadResourceId).
    name = "recallql_graphql_operation_duration_seconds_count"
    assert (
        metric_value(after, name, root_fields="_entities")
        - metric_value(before, name, root_fields="_entities")
        == 1
    )
    selects = "recallql_db_statement_duration_seconds_count"
    scrape = metric_value(before, selects, kind="select") - metric_value(first, selects, kind="select")
    assert (
        metric_value(after, selects, kind="select") - metric_value(before, selects, kind="select") - scrape
        == 2
    )


# The outcomes recallql_persisted_queries_total counts (web/persisted.py).
OUTCOMES = ("not_found", "text", "found", "refused", "not_supported")


def test_a_gateway_sending_persisted_queries_sends_recallql_each_text_once(
    federation: tuple[Any, Gateway, dict[str, Any]], tmp_path: Path
) -> None:
    """@apollo/gateway's `apq` data sources (automatic persisted queries to the subgraphs): RecallQL
    answers their hashes (web/persisted.py), so the gateway sends a query plan's text once."""
    recallql, gateway, seeded = federation
    users = json.loads((gateway.out_dir / "config.json").read_text())["users"]
    query = "{ users { name resource { id threads { total threads { id title } } } } }"
    name = "recallql_persisted_queries_total"
    with gateway_process(node_modules(), f"{recallql.url}/graphql", users, tmp_path, apq=True) as hashing:
        outcomes = []
        for _ in range(2):
            before = httpx.get(f"{recallql.url}/metrics").text
            result = hashing.query(query)
            after = httpx.get(f"{recallql.url}/metrics").text
            assert "errors" not in result, result
            assert result == gateway.query(query)  # as a gateway without APQ answers
            outcomes.append(
                {
                    o: metric_value(after, name, outcome=o) - metric_value(before, name, outcome=o)
                    for o in OUTCOMES
                }
            )
    # First the hash, unknown, then its text; the next time the hash alone.
    assert outcomes == [
        {"not_found": 1, "text": 1, "found": 0, "refused": 0, "not_supported": 0},
        {"not_found": 0, "text": 0, "found": 1, "refused": 0, "not_supported": 0},
    ]
    assert seeded["alice"] in json.dumps(result)


def test_gateway_resolves_thread_references(federation: tuple[Any, Gateway, dict[str, Any]]) -> None:
    _, gateway, seeded = federation
    result = gateway.query('{ user(id: "u1") { threads { id title resourceId } } }')
    assert "errors" not in result, result
    # In order; an unknown thread is null (the id comes from the users subgraph, the rest is RecallQL's).
    assert result["data"]["user"]["threads"] == [
        {"id": seeded["alice_thread"], "title": "Alice's plans", "resourceId": seeded["alice"]},
        None,
        {"id": seeded["bob_thread"], "title": "Bob's notes", "resourceId": seeded["bob"]},
    ]
    to_recallql = [f for f in gateway.fetches() if f["subgraph"] == "recallql"]
    assert len(to_recallql) == 1 and to_recallql[0]["representations"] == 3, gateway.fetches()


def test_gateway_shares_value_types_and_hides_inaccessible_fields(
    federation: tuple[Any, Gateway, dict[str, Any]],
) -> None:
    _, gateway, seeded = federation
    # TextPart is @shareable in both subgraphs: the users subgraph resolves its own.
    result = gateway.query('{ user(id: "u2") { greeting { type text } } }')
    assert result == {"data": {"user": {"greeting": {"type": "text", "text": "hello Bob"}}}}
    hidden = gateway.query('{ user(id: "u1") { recentMessages { threadResourceId } } }')
    assert "data" not in hidden or hidden["data"] is None
    assert "threadResourceId" in hidden["errors"][0]["message"]
    assert hidden["errors"][0]["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
    # RecallQL's own root fields pass through the gateway, and @oneOf is still enforced (by RecallQL:
    # the supergraph does not carry it).
    thread = seeded["alice_thread"]
    ok = gateway.query(
        "query ($t: ID!) { recall(threadId: $t, perPage: 2, hideSignals: {all: true}) { total } }", t=thread
    )
    assert ok == {"data": {"recall": {"total": 30}}}
    both = gateway.query(
        "query ($t: ID!) { recall(threadId: $t, hideSignals: {all: true, types: [USER]}) { total } }",
        t=thread,
    )
    assert both.get("errors") and not (both.get("data") or {}).get("recall"), both
    assert any("OneOf" in e["message"] or "oneOf" in e["message"] for e in both["errors"]), both
