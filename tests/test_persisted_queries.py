"""Automatic persisted queries (web/persisted.py) over real HTTP: Apollo's APQ protocol as Apollo Client's
persisted-queries link speaks it, by POST and by GET, with the texts shared through Redis by replicas."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from resolvers.context import Services
from schema.fastpath import FastPath
from tests.factories import msg, seed
from tests.support import ServerProcess, free_port, metric_value, persisted, require, running_server, uid
from tests.tcp_proxy import TcpProxy
from tests.test_federation import FEDERATION_DIR, node_modules
from tests.test_subscriptions import REDIS_URL, redis_available
from web.app import create_app
from web.persisted import NOT_FOUND_REFUSAL, PersistedQueries
from web.settings import Settings

THREADS = "query Threads($r: String!) { threads(resourceId: $r) { total threads { id title } } }"
CREATE = (
    "mutation Create($r: String!, $t: String) { createThread(input: {resourceId: $r, title: $t}) { id } }"
)
BAD = "BAD_REQUEST"
NOT_FOUND, NOT_SUPPORTED = "PERSISTED_QUERY_NOT_FOUND", "PERSISTED_QUERY_NOT_SUPPORTED"
QUIET = {"RECALLQL_EMBEDDER": "off", "RECALLQL_ACCESS_LOG": "false"}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def hashed_as(text: str) -> dict[str, Any]:
    """What a request's extensions.persistedQuery holds for this text."""
    return persisted(text)["persistedQuery"]


async def post(http: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
    return await http.post("/graphql", json=body)


async def register(http: httpx.AsyncClient, text: str, r: str = "x") -> httpx.Response:
    """The text sent with its hash (Apollo Client's second try)."""
    return await post(http, {"query": text, "extensions": persisted(text), "variables": {"r": r}})


async def by_hash(http: httpx.AsyncClient, text: str, r: str = "x") -> httpx.Response:
    """The hash alone (Apollo Client's first try)."""
    return await post(http, {"extensions": persisted(text), "variables": {"r": r}})


async def get(http: httpx.AsyncClient, **params: Any) -> httpx.Response:
    encoded = {k: v if isinstance(v, str) else orjson.dumps(v).decode() for k, v in params.items()}
    return await http.get("/graphql", params=encoded)


def code(response: httpx.Response) -> str:
    return response.json()["errors"][0]["extensions"]["code"]


@pytest.fixture
async def http(server: ServerProcess) -> Iterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        yield client


async def thread_of(http: httpx.AsyncClient, resource: str, title: str) -> str:
    created = await post(http, {"query": CREATE, "variables": {"r": resource, "t": title}})
    return created.json()["data"]["createThread"]["id"]


async def test_a_hash_the_server_does_not_know_asks_for_the_text_then_answers_alone(
    http: httpx.AsyncClient,
) -> None:
    resource = uid("apq")
    thread = await thread_of(http, resource, "first")
    # A text of its own: no other test (or earlier run on this server) registered it.
    text = f"{THREADS} # {uuid.uuid4().hex}"
    variables = {"r": resource}

    missing = await post(http, {"extensions": persisted(text), "variables": variables})
    assert missing.status_code == 200
    assert missing.json()["errors"][0]["message"] == "PersistedQueryNotFound"
    assert code(missing) == "PERSISTED_QUERY_NOT_FOUND"
    assert "no-cache" in missing.headers["cache-control"]  # the retry must not be served from a cache

    registered = await post(http, {"query": text, "extensions": persisted(text), "variables": variables})
    assert registered.status_code == 200, registered.text
    expected = {"threads": {"total": 1, "threads": [{"id": thread, "title": "first"}]}}
    assert registered.json() == {"data": expected}

    by_hash = await post(http, {"extensions": persisted(text), "variables": variables})
    assert by_hash.json() == {"data": expected}
    # By GET, as Apollo Client sends hashed queries with useGETForHashedQueries: no text in the URL.
    by_get = await get(http, extensions=persisted(text), variables=variables, operationName="Threads")
    assert by_get.status_code == 200, by_get.text
    assert by_get.json() == {"data": expected}
    # The text runs with each request's own variables.
    other = uid("apq")
    await thread_of(http, other, "second")
    answer = (await post(http, {"extensions": persisted(text), "variables": {"r": other}})).json()
    assert [t["title"] for t in answer["data"]["threads"]["threads"]] == ["second"]


async def test_a_text_registered_by_get_is_found_by_post(http: httpx.AsyncClient) -> None:
    resource = uid("apq")
    await thread_of(http, resource, "by get")
    text = f"{THREADS} # {uuid.uuid4().hex}"
    registered = await get(http, query=text, extensions=persisted(text), variables={"r": resource})
    assert registered.json()["data"]["threads"]["total"] == 1
    found = await post(http, {"extensions": persisted(text), "variables": {"r": resource}})
    assert found.json()["data"]["threads"]["threads"][0]["title"] == "by get"


async def test_a_persisted_mutation_runs_by_post_and_is_refused_by_get(http: httpx.AsyncClient) -> None:
    resource = uid("apq")
    text = f"{CREATE} # {uuid.uuid4().hex}"
    first = await post(http, {"query": text, "extensions": persisted(text), "variables": {"r": resource}})
    again = await post(http, {"extensions": persisted(text), "variables": {"r": resource, "t": "two"}})
    assert first.json()["data"]["createThread"]["id"] != again.json()["data"]["createThread"]["id"]
    # GraphQL over HTTP: no mutation over GET, whether its text or its hash was sent.
    refused = await get(http, extensions=persisted(text), variables={"r": resource})
    assert refused.status_code == 405 and code(refused) == "METHOD_NOT_ALLOWED"
    listed = await post(http, {"query": THREADS, "variables": {"r": resource}})
    assert listed.json()["data"]["threads"]["total"] == 2


@pytest.mark.parametrize(
    ("extensions", "status", "message", "expected_code"),
    [
        ({"persistedQuery": {"version": 2, "sha256Hash": sha(THREADS)}}, 400, "Unsupported", BAD),
        ({"persistedQuery": {"sha256Hash": sha(THREADS)}}, 400, "Unsupported", BAD),
        ({"persistedQuery": {"version": True, "sha256Hash": sha(THREADS)}}, 400, "Unsupported", BAD),
        ({"persistedQuery": "yes"}, 400, "Unsupported", BAD),
        (
            {"persistedQuery": {"version": 1, "sha256Hash": sha(THREADS).upper()}},
            400,
            "SHA-256",
            "BAD_REQUEST",
        ),
        ({"persistedQuery": {"version": 1, "sha256Hash": 12}}, 400, "SHA-256", "BAD_REQUEST"),
        (
            {"persistedQuery": {"version": 1, "sha256Hash": sha("{ other }")}},
            400,
            "provided sha",
            "BAD_REQUEST",
        ),
    ],
)
async def test_a_malformed_persisted_query_is_refused_with_a_code(
    http: httpx.AsyncClient, extensions: dict[str, Any], status: int, message: str, expected_code: str
) -> None:
    response = await post(http, {"query": THREADS, "extensions": extensions, "variables": {"r": "x"}})
    assert response.status_code == status
    assert message in response.json()["errors"][0]["message"]
    assert code(response) == expected_code
    assert "data" not in response.json()  # nothing ran


async def test_only_documents_the_schema_validates_are_kept(http: httpx.AsyncClient) -> None:
    deep = "query { " + 'threads(resourceId: "r") { threads { ' * 7 + "id" + " } }" * 7 + " }"
    aliased = "query { " + " ".join(f'a{n}: thread(id: "t") {{ id }}' for n in range(31)) + " }"
    for text, refusal in (
        (f"query {{ noSuchField }} # {uuid.uuid4().hex}", "GRAPHQL_VALIDATION_FAILED"),
        (f"query {{ threads(resourceId: 1) {{ total }} # {uuid.uuid4().hex}", None),  # does not parse
        # Valid, but over the server's depth or alias limit: it could never run.
        (f"{deep} # {uuid.uuid4().hex}", "QUERY_TOO_COMPLEX"),
        (f"{aliased} # {uuid.uuid4().hex}", "QUERY_TOO_COMPLEX"),
    ):
        answered = await post(http, {"query": text, "extensions": persisted(text)})
        assert answered.status_code in (200, 400)
        first = answered.json()["errors"][0]
        if refusal is None:
            assert "Syntax Error" in first["message"], first
        else:
            assert first["extensions"]["code"] == refusal, first
        # Its hash was not registered: garbage cannot push real queries out of the cache.
        missing = await post(http, {"extensions": persisted(text)})
        assert code(missing) == "PERSISTED_QUERY_NOT_FOUND"


async def test_a_hash_and_a_text_that_spells_nul_is_refused_before_registration(
    http: httpx.AsyncClient,
) -> None:
    text = f'query {{ thread(id: "a\\u0000b") {{ id }} }} # {uuid.uuid4().hex}'
    refused = await post(http, {"query": text, "extensions": persisted(text)})
    assert code(refused) == "BAD_USER_INPUT"
    # By GET too, whose parameters are screened after the hash is looked at.
    assert code(await get(http, query=text, extensions=persisted(text))) == "BAD_USER_INPUT"
    assert code(await post(http, {"extensions": persisted(text)})) == "PERSISTED_QUERY_NOT_FOUND"


async def test_each_outcome_is_counted_in_the_metrics(http: httpx.AsyncClient) -> None:
    before = (await http.get("/metrics")).text
    text = f"{THREADS} # {uuid.uuid4().hex}"
    assert code(await by_hash(http, text)) == NOT_FOUND
    assert "data" in (await register(http, text)).json()
    for _ in range(3):
        assert "data" in (await by_hash(http, text)).json()
    refused = await post(http, {"query": text, "extensions": persisted(text, version=2)})
    assert refused.status_code == 400
    after = (await http.get("/metrics")).text

    def grew(outcome: str) -> float:
        name = "recallql_persisted_queries_total"
        return metric_value(after, name, outcome=outcome) - metric_value(before, name, outcome=outcome)

    # The session's server is shared: other tests may add to these, never take away.
    grown = {outcome: grew(outcome) for outcome in ("not_found", "text", "found", "refused")}
    wanted = {"not_found": 1, "text": 1, "found": 3, "refused": 1}
    assert all(grown[outcome] >= n for outcome, n in wanted.items()), grown


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@contextlib.asynccontextmanager
async def serving(
    data_dir: Path, env: dict[str, str]
) -> AsyncIterator[tuple[ServerProcess, httpx.AsyncClient]]:
    """A server of its own (`recallql serve` with `env`) and a client for it."""
    with running_server(data_dir, env) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            yield server, http


async def unknown_then_registered_then_found(
    asking: httpx.AsyncClient, registering: httpx.AsyncClient
) -> str:
    """A new text: a miss for `asking`, registered through `registering`, then found by `asking`."""
    text = f"{THREADS} # {uuid.uuid4().hex}"
    assert code(await post(asking, {"extensions": persisted(text)})) == "PERSISTED_QUERY_NOT_FOUND"
    registered = await register(registering, text)
    assert "data" in registered.json()
    found = await by_hash(asking, text)
    assert found.json() == {"data": {"threads": {"total": 0, "threads": []}}}
    return text


async def test_a_server_with_persisted_queries_off_says_so(data_dir: Path) -> None:
    async with serving(data_dir, {**QUIET, "RECALLQL_PERSISTED_QUERIES": "false"}) as (_server, http):
        text = f"{THREADS} # off"
        for body in ({"extensions": persisted(text)}, {"query": text, "extensions": persisted(text)}):
            response = await post(http, {**body, "variables": {"r": "x"}})
            assert response.status_code == 200
            assert response.json()["errors"][0]["message"] == "PersistedQueryNotSupported"
            assert code(response) == "PERSISTED_QUERY_NOT_SUPPORTED"
        # Without the hash the text runs as always (what Apollo Client sends after that answer).
        plain = await post(http, {"query": text, "variables": {"r": "x"}})
        assert plain.json() == {"data": {"threads": {"total": 0, "threads": []}}}
        metrics = (await http.get("/metrics")).text
        assert metric_value(metrics, "recallql_persisted_queries_total", outcome="not_supported") == 2


async def test_the_cache_keeps_the_texts_used_last_within_its_size(data_dir: Path) -> None:
    texts = [f"{THREADS} # {n:04d}" for n in range(4)]
    # Room for three of these texts, not four.
    room = str(len(texts[0]) * 3 + 10)
    env = {**QUIET, "RECALLQL_PERSISTED_QUERIES_CACHE_CHARS": room}
    async with serving(data_dir, env) as (_server, http):
        for text in texts[:3]:
            await register(http, text)
        # The first is used again: the second is now the one used longest ago.
        assert "data" in (await by_hash(http, texts[0])).json()
        await register(http, texts[3])
        kept = {n: "data" in (await by_hash(http, t)).json() for n, t in enumerate(texts)}
        assert kept == {0: True, 1: False, 2: True, 3: True}
        # A text larger than the whole cache runs, and is not kept.
        big = f"{THREADS} # {'x' * int(room)}"
        ran = await register(http, big)
        assert ran.json()["data"]["threads"]["total"] == 0
        assert code(await post(http, {"extensions": persisted(big)})) == "PERSISTED_QUERY_NOT_FOUND"


async def test_replicas_sharing_redis_know_each_others_texts(data_dir: Path) -> None:
    require(await redis_available(), f"Redis is not reachable at {REDIS_URL}")
    prefix = f"recallql-test-{uuid.uuid4().hex[:8]}:"
    env = {**QUIET, "RECALLQL_REDIS_URL": REDIS_URL, "RECALLQL_REDIS_PREFIX": prefix}
    database = f"sqlite+aiosqlite:///{data_dir}/shared.db"
    with (
        running_server(data_dir / "a", {**env, "RECALLQL_DATABASE_URL": database}) as one,
        running_server(data_dir / "b", {**env, "RECALLQL_DATABASE_URL": database}) as other,
    ):
        async with (
            httpx.AsyncClient(base_url=one.url, timeout=30) as first,
            httpx.AsyncClient(base_url=other.url, timeout=30) as second,
        ):
            text = await unknown_then_registered_then_found(second, first)

    import redis.asyncio as redis

    client = redis.from_url(REDIS_URL)
    try:
        key = f"{prefix}apq:{sha(text)}"
        assert await client.get(key) == text.encode()
        assert 0 < await client.ttl(key) <= 7 * 24 * 3600
        await client.delete(key)
    finally:
        await client.aclose()


async def test_a_text_in_redis_under_another_hash_is_not_run(data_dir: Path) -> None:
    """A key written by another program (or a damaged value) does not choose what a hash runs."""
    require(await redis_available(), f"Redis is not reachable at {REDIS_URL}")
    import redis.asyncio as redis

    prefix = f"recallql-test-{uuid.uuid4().hex[:8]}:"
    # Another document's text, and bytes that are not UTF-8 at all, under the hashes of two texts.
    other_document, not_utf8 = (f"{THREADS} # {uuid.uuid4().hex}" for _ in range(2))
    claimed = {other_document: CREATE.encode(), not_utf8: b"\xff\xfe"}
    client = redis.from_url(REDIS_URL)
    try:
        for text, stored in claimed.items():
            await client.set(f"{prefix}apq:{sha(text)}", stored, ex=60)
        env = {**QUIET, "RECALLQL_REDIS_URL": REDIS_URL, "RECALLQL_REDIS_PREFIX": prefix}
        async with serving(data_dir, env) as (_server, http):
            for text in claimed:
                answer = await by_hash(http, text)
                assert answer.status_code == 200 and code(answer) == "PERSISTED_QUERY_NOT_FOUND"
    finally:
        await client.delete(*(f"{prefix}apq:{sha(text)}" for text in claimed))
        await client.aclose()


async def test_a_redis_that_cannot_answer_leaves_the_local_cache_working(data_dir: Path) -> None:
    # Nothing listens on this port: every Redis call fails fast (connection refused).
    env = {**QUIET, "RECALLQL_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    async with serving(data_dir, env) as (server, http):
        await unknown_then_registered_then_found(http, http)
        assert "persisted queries: Redis" in server.log_path.read_text()


# ===================================================================================== Apollo Client
def apollo_client(modules: Path, url: str, resource: str, method: str) -> dict[str, Any]:
    """tests/federation/apq_client.mjs: Apollo Client's own persisted-queries link against `url`."""
    env = {**os.environ, "FEDERATION_NODE_MODULES": str(modules)}
    done = subprocess.run(
        ["node", str(FEDERATION_DIR / "apq_client.mjs"), f"{url}/graphql", resource, method],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def hashed(*, text: bool, method: str = "POST", codes: Sequence[str] = ()) -> dict[str, Any]:
    """One request as apq_client.mjs logs it."""
    return {"method": method, "status": 200, "text": text, "hash": True, "codes": list(codes)}


@pytest.mark.parametrize("method", ["post", "get"])
async def test_apollo_clients_persisted_queries_link_sends_each_text_once(
    server: ServerProcess, method: str
) -> None:
    modules = node_modules()
    resource = uid("apollo")
    seen = apollo_client(modules, server.url, resource, method)
    hashed_by = "GET" if method == "get" else "POST"
    assert seen["steps"] == {
        # Mutations always go by POST; a hash the server does not know is retried with the text.
        "mutation": [hashed(text=False, codes=[NOT_FOUND]), hashed(text=True)],
        "first": [hashed(text=False, method=hashed_by, codes=[NOT_FOUND]), hashed(text=True)],
        # The text is known now: the hash alone is answered.
        "second": [hashed(text=False, method=hashed_by)],
    }
    thread = {
        "__typename": "Thread",
        "id": seen["created"]["createThread"]["id"],
        "title": "from Apollo Client",
    }
    page = {"threads": {"__typename": "ThreadPage", "total": 1, "threads": [thread]}}
    assert seen["first"] == seen["second"] == page


async def test_apollo_client_sends_texts_to_a_server_with_persisted_queries_off(data_dir: Path) -> None:
    modules = node_modules()
    with running_server(data_dir, {**QUIET, "RECALLQL_PERSISTED_QUERIES": "false"}) as server:
        seen = apollo_client(modules, server.url, uid("apollo"), "post")
    not_supported = {"method": "POST", "status": 200, "text": False, "hash": True, "codes": [NOT_SUPPORTED]}
    plain = {"method": "POST", "status": 200, "text": True, "hash": False, "codes": []}
    # The link stops hashing after the first answer, for the rest of the session.
    assert seen["steps"] == {"mutation": [not_supported, plain], "first": [plain], "second": [plain]}
    assert seen["first"]["threads"]["total"] == 1


# ====================================================================== GET on the compiled read path
@pytest.fixture
async def seeded(services: Services) -> Services:
    await seed(
        services,
        *(msg(f"g{n}", at=n, metadata={"n": n}) for n in range(6)),
        threads={"t1": "r1"},
    )
    return services


GET_RECALL = (
    "query Page($t: ID!, $r: String, $p: PerPage) { recall(threadId: $t, resourceId: $r, perPage: $p) "
    "{ total hasMore messages { id role createdAt content { parts { ... on TextPart { text } } metadata } } "
    "} }"
)


@pytest.mark.parametrize(
    "params",
    [
        {"query": GET_RECALL, "variables": '{"t": "t1", "r": "r1", "p": 3}'},
        {"query": GET_RECALL, "variables": '{"t": "t1", "p": false}', "operationName": "Page"},
        {"query": GET_RECALL, "variables": '{"t": "t1", "r": "someone else"}'},  # FORBIDDEN
        {"query": GET_RECALL, "variables": '{"t": "t1", "p": -1}'},  # BAD_USER_INPUT
        {"query": GET_RECALL, "variables": '{"t": "t1"', "operationName": "Page"},  # not JSON
        {"query": GET_RECALL, "variables": '["t1"]'},  # not an object
        {"query": GET_RECALL, "operationName": "Other", "variables": '{"t": "t1"}'},
        {"query": '{ thread(id: "t1") { id title resourceId } }'},
    ],
)
async def test_a_get_query_is_answered_as_the_view_answers_it(
    seeded: Services, params: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """GET queries take the compiled read path too (hashed queries go by GET): the same status and
    body as Strawberry's view gives, for answers and refusals alike."""
    answered: list[object] = []
    execute = FastPath.execute

    async def counted(self: FastPath, *args: Any, **kwargs: Any) -> Any:
        result = await execute(self, *args, **kwargs)
        answered.append(result)
        return result

    monkeypatch.setattr(FastPath, "execute", counted)
    responses = []
    for compiled in (True, False):
        app = create_app(Settings(access_log=False, metrics=False, compiled_reads=compiled), services=seeded)
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http,
        ):
            response = await http.get("/graphql", params=params)
        body = response.json()
        for error in body.get("errors", []):
            error["extensions"].pop("requestId")  # each request's own
        responses.append((response.status_code, body))
    assert responses[0] == responses[1]
    if params["query"] == GET_RECALL and params.get("variables", "").startswith('{"t": "t1", "r": "r1"'):
        assert answered and answered[0] is not None, "the compiled path should have answered"
        assert len(responses[0][1]["data"]["recall"]["messages"]) == 3


async def test_a_redis_that_hangs_is_left_alone_for_a_while_then_asked_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Redis behind a dead network path holds a call for the socket timeout (1 s): after one failure
    the store answers from its own cache for HOLD_OFF seconds instead of holding every request."""
    require(await redis_available(), f"Redis is not reachable at {REDIS_URL}")
    parts = urlsplit(REDIS_URL)
    prefix = f"recallql-test-{uuid.uuid4().hex[:8]}:"
    text = f"{THREADS} # {uuid.uuid4().hex}"

    def store(port: int) -> PersistedQueries:
        made = PersistedQueries(
            lambda _text: True,
            cache_chars=100_000,
            redis_url=f"redis://127.0.0.1:{port}/0",
            redis_prefix=prefix,
        )
        made.HOLD_OFF = 0.5  # the test's own: the server's is 5 s
        return made

    with TcpProxy(parts.hostname or "127.0.0.1", parts.port or 6379) as proxy:
        writer, reader = store(proxy.port), store(proxy.port)
        try:
            assert await writer.resolve(hashed_as(text), text) == text
            proxy.blackhole()
            with caplog.at_level(logging.WARNING, logger="recallql.persisted"):
                for n in range(3):
                    unknown = f"{THREADS} # unknown {n}"
                    assert await reader.resolve(hashed_as(unknown), None) == NOT_FOUND_REFUSAL
            # Asked once: the other two lookups were answered without it.
            failures = [r for r in caplog.records if "Redis lookup failed" in r.getMessage()]
            assert len(failures) == 1, caplog.text
            proxy.forward()
            await asyncio.sleep(0.6)
            # Asked again once the hold-off has passed: the text another store registered is found.
            assert await reader.resolve(hashed_as(text), None) == text
        finally:
            await writer.aclose()
            await reader.aclose()
    import redis.asyncio as redis

    client = redis.from_url(REDIS_URL)
    try:
        await client.delete(f"{prefix}apq:{sha(text)}")
    finally:
        await client.aclose()
