"""Tenant isolation over real HTTP: a server with RECALLQL_AUTH=required, eight tenants (each created its own
threads, messages and working memory with its own credential: API keys for some, JWTs for others), and
then thousands of randomized attempts across tenant boundaries: every query and mutation, include items
and semantic hits pointing at other tenants' messages, subscriptions. It asserts zero leaks (no response
holds another tenant's ids, texts or resource id unless the request itself named them), that every
cross-tenant mutation is FORBIDDEN, and, afterwards with an admin key, that every tenant's data is intact.

Semantic recall runs with the deterministic embed_server.py HTTP embedder. Besides the tenants' own
messages, each tenant thread holds a message of an "orphan" resource no credential is granted (saved
with the admin key), worded like the searches: the nearest hit of a thread-scoped search and a target
of include items, which must never come back.

RECALLQL_TEST_SEED fixes the random choices (the seed is in every failure message).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
import jwt
import pytest

from models.records import MessageRecord, ThreadRecord
from models.repository import RowForbidden
from resolvers.auth import OPEN, Principal
from resolvers.context import Services
from resolvers.errors import BadUserInput, Forbidden
from resolvers.messages import MessagePatch
from tests.conformance.harness import embed_server
from tests.factories import msg, seed
from tests.support import SHARED, database, engines, running_server, uid
from tests.test_auth import ws_session
from web.auth import key_entry, new_key

ATTEMPTS = int(os.environ.get("RECALLQL_TEST_ATTEMPTS", "1200"))
SUBSCRIPTION_ATTEMPTS = 64
TENANTS = 8
THREADS_PER_TENANT = 3
MESSAGES_PER_THREAD = 5
SECRET = "isolation-secret-" + "k" * 40
WORDS = ["zebra", "budget", "lisbon", "invoice", "tomato", "giraffe", "monday", "flight", "garden", "train"]
SEED = int(os.environ.get("RECALLQL_TEST_SEED", str(random.SystemRandom().randrange(1 << 30))))

if not (SHARED / "conformance" / "embed_server.py").is_file():  # pragma: no cover - depends on the checkout
    pytest.skip("the conformance embeddings server is not available", allow_module_level=True)


# ---------------------------------------------------------------------------------------------- the world
@dataclass
class Message:
    id: str
    thread_id: str
    resource_id: str
    text: str


@dataclass
class Thread:
    id: str
    resource_id: str
    title: str
    metadata: dict[str, Any]
    working_memory: str  # thread scope
    messages: list[Message] = field(default_factory=list)


@dataclass
class Tenant:
    n: int
    resource_id: str
    token: str
    kind: str  # "key" or "jwt"
    working_memory: str = ""
    threads: list[Thread] = field(default_factory=list)

    @property
    def messages(self) -> list[Message]:
        return [m for t in self.threads for m in t.messages]

    def secrets(self) -> set[str]:
        out = {self.resource_id, self.working_memory}
        for thread in self.threads:
            out |= {thread.id, thread.title, thread.metadata["secret"], thread.working_memory}
            for message in thread.messages:
                out |= {message.id, message.text.split()[-1]}
        return out


@dataclass
class Attacker:
    name: str
    token: str
    grants: frozenset[str]

    def own(self, world: World) -> list[Tenant]:
        return [t for t in world.tenants if t.resource_id in self.grants]

    def victims(self, world: World) -> list[Tenant]:
        return [t for t in world.tenants if t.resource_id not in self.grants]


@dataclass
class World:
    url: str
    admin: str
    tenants: list[Tenant]
    attackers: list[Attacker]
    orphans: list[Message]  # of resources no attacker holds, inside tenant threads
    made_up: set[str] = field(default_factory=set)  # ids attempts tried to create: must not exist

    def secrets_outside(self, grants: frozenset[str]) -> set[str]:
        out: set[str] = set()
        for tenant in self.tenants:
            if tenant.resource_id not in grants:
                out |= tenant.secrets()
        for orphan in self.orphans:
            out |= {orphan.id, orphan.resource_id, orphan.text.split()[-1]}
        return out


def marker(kind: str) -> str:
    return f"{kind}{uid('s').replace('-', '')}"


# ---------------------------------------------------------------------------------------------- HTTP
class Client:
    def __init__(self, url: str) -> None:
        self.http = httpx.AsyncClient(base_url=url, timeout=60)

    async def post(
        self, token: str, query: str, **variables: Any
    ) -> tuple[str, dict[str, Any], httpx.Response]:
        request = json.dumps({"query": query, "variables": variables})
        response = await self.http.post(
            "/graphql",
            content=request,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        return request, response.json(), response

    async def ok(self, token: str, query: str, **variables: Any) -> dict[str, Any]:
        _, body, response = await self.post(token, query, **variables)
        assert response.status_code == 200 and not body.get("errors"), body
        return body["data"]


CREATE = "mutation($i: CreateThreadInput!) { createThread(input: $i) { id } }"
SAVE = "mutation($m: [MessageInput!]!) { saveMessages(messages: $m) { messages { id } } }"
SET_WM = """mutation($t: ID!, $r: String, $w: String!, $c: MemoryConfigInput) {
  updateWorkingMemory(threadId: $t, resourceId: $r, workingMemory: $w, memoryConfig: $c) {
    workingMemory } }"""
THREAD_SCOPE = {"workingMemory": {"enabled": True, "scope": "THREAD"}}


def content(text: str) -> dict[str, Any]:
    return {"format": 2, "parts": [{"type": "text", "text": text}]}


async def build_world(url: str, tokens: dict[str, Any], rng: random.Random) -> World:
    client = Client(url)
    tenants = [
        Tenant(n, tokens["resources"][n], tokens["tenants"][n], "key" if n % 2 == 0 else "jwt")
        for n in range(TENANTS)
    ]
    orphans: list[Message] = []

    async def populate(tenant: Tenant) -> None:
        for j in range(THREADS_PER_TENANT):
            thread = Thread(
                id=uid(f"t{tenant.n}"),
                resource_id=tenant.resource_id,
                title=marker("title"),
                metadata={"secret": marker("meta"), "n": j},
                working_memory=marker("twm"),
            )
            await client.ok(
                tenant.token,
                CREATE,
                i={
                    "id": thread.id,
                    "resourceId": tenant.resource_id,
                    "title": thread.title,
                    "metadata": thread.metadata,
                },
            )
            for _ in range(MESSAGES_PER_THREAD):
                text = " ".join([*rng.sample(WORDS, 3), marker("msg")])
                thread.messages.append(Message(uid(f"m{tenant.n}"), thread.id, tenant.resource_id, text))
            # One batch each; the thread's own resource is the default.
            await client.ok(
                tenant.token,
                SAVE,
                m=[
                    {"id": m.id, "threadId": thread.id, "role": "user", "content": content(m.text)}
                    for m in thread.messages
                ],
            )
            await client.ok(tenant.token, SET_WM, t=thread.id, w=thread.working_memory, c=THREAD_SCOPE)
            tenant.threads.append(thread)
        tenant.working_memory = marker("wm")
        await client.ok(
            tenant.token, SET_WM, t=tenant.threads[0].id, r=tenant.resource_id, w=tenant.working_memory
        )

    try:
        await asyncio.gather(*(populate(t) for t in tenants))
        # Messages of resources nobody but the admin holds, inside tenant threads, worded like every search.
        for tenant in tenants:
            for thread in tenant.threads:
                orphan = Message(
                    uid("orphan"), thread.id, uid("nobody"), " ".join([*WORDS, marker("orphan")])
                )
                await client.ok(
                    tokens["admin"],
                    SAVE,
                    m=[
                        {
                            "id": orphan.id,
                            "threadId": thread.id,
                            "resourceId": orphan.resource_id,
                            "role": "user",
                            "content": content(orphan.text),
                        }
                    ],
                )
                orphans.append(orphan)
    finally:
        await client.http.aclose()
    attackers = [Attacker(f"tenant{t.n}", t.token, frozenset({t.resource_id})) for t in tenants]
    attackers.append(Attacker("pair-key", tokens["pair"], frozenset(tokens["resources"][:2])))
    attackers.append(Attacker("list-jwt", tokens["list_jwt"], frozenset(tokens["resources"][2:4])))
    return World(url, tokens["admin"], tenants, attackers, orphans)


# ---------------------------------------------------------------------------------------------- fixtures
def credentials() -> dict[str, Any]:
    resources = [uid(f"r{n}") for n in range(TENANTS)]
    keys = {n: new_key() for n in range(TENANTS) if n % 2 == 0}
    jwts = {
        n: jwt.encode(
            {"sub": f"user{n}", "tenants": resources[n], "exp": int(time.time()) + 7200}, SECRET, "HS256"
        )
        for n in range(TENANTS)
        if n % 2 == 1
    }
    admin, pair = new_key(), new_key()
    list_jwt = jwt.encode(
        {"sub": "list-user", "tenants": resources[2:4], "exp": int(time.time()) + 7200}, SECRET, "HS256"
    )
    entries = [key_entry(f"tenant{n}", key, resources=[resources[n]]) for n, key in keys.items()]
    entries += [key_entry("pair", pair, resources=resources[:2]), key_entry("admin", admin, admin=True)]
    return {
        "resources": resources,
        "tenants": [keys.get(n) or jwts[n] for n in range(TENANTS)],
        "admin": admin,
        "pair": pair,
        "list_jwt": list_jwt,
        "entries": entries,
    }


@pytest.fixture(scope="module")
def embed_url() -> Iterator[str]:
    with embed_server() as server:
        yield server.url


@pytest.fixture(scope="module", params=engines())
async def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, embed_url: str
) -> AsyncIterator[World]:
    tmp = tmp_path_factory.mktemp(f"isolation-{request.param}")
    tokens = credentials()
    async with database(request.param, tmp) as database_url:
        env = {
            "RECALLQL_AUTH": "required",
            "RECALLQL_API_KEYS": json.dumps(tokens["entries"]),
            "RECALLQL_JWT_SECRET": SECRET,
            "RECALLQL_JWT_RESOURCE_CLAIM": "tenants",
            "RECALLQL_DATABASE_URL": database_url,
            "RECALLQL_EMBEDDINGS_URL": embed_url,
            "RECALLQL_EMBEDDINGS_MODEL": "hash-64",
            "RECALLQL_WORKING_MEMORY": json.dumps({"enabled": True}),
        }
        with running_server(tmp / "data", env) as server:
            yield await build_world(server.url, tokens, random.Random(SEED))


# ---------------------------------------------------------------------------------------------- attempts
@dataclass
class Attempt:
    op: str
    attacker: Attacker
    query: str
    variables: dict[str, Any]
    expect: str  # "forbidden", "null", "own" (succeeds with own data only)
    check: Callable[[dict[str, Any]], None] | None = None


MESSAGE_FIELDS = "id threadId resourceId content { raw }"
RECALL = f"""query($t: ID!, $r: String, $inc: [IncludeInput!], $cfg: MemoryConfigInput, $q: String,
               $pp: PerPage) {{
  recall(threadId: $t, resourceId: $r, include: $inc, threadConfig: $cfg, vectorSearchString: $q,
         perPage: $pp) {{
    total usage {{ tokens }} messages {{ {MESSAGE_FIELDS} }} }} }}"""
RECALL_NESTED = """query($t: ID!, $r: String, $inc: [IncludeInput!], $cfg: MemoryConfigInput, $q: String) {
  recall(threadId: $t, resourceId: $r, include: $inc, threadConfig: $cfg, vectorSearchString: $q) {
    messages { id resourceId content { raw } thread { id title metadata resourceId workingMemory
      recall(perPage: false) { total messages { id resourceId content { raw } } } } } } }"""
THREAD = "query($id: ID!, $r: String) { thread(id: $id, resourceId: $r) { id title metadata resourceId } }"
THREAD_WM = """query($id: ID!) { thread(id: $id) { id workingMemory
  tw: workingMemory(memoryConfig: {workingMemory: {enabled: true, scope: THREAD}}) } }"""
THREADS = "query($r: String!) { threads(resourceId: $r, perPage: false) { total threads { id title } } }"
THREADS_FULL = (
    "query($r: String!) { threads(resourceId: $r, perPage: false) { threads { id title metadata } } }"
)
RESOURCE = """query($r: String!) { resource(id: $r) { id workingMemory threads { total threads { id title
      recall(perPage: 5) { total messages { id resourceId content { raw } } } } } } }"""
MESSAGES = "query($ids: [ID!]!) { messages(ids: $ids) { id resourceId threadId content { raw } } }"
MESSAGES_NESTED = """query($ids: [ID!]!) { messages(ids: $ids) { id thread { id title workingMemory
  recall(perPage: 3) { messages { id resourceId content { raw } } } } } }"""
WORKING_MEMORY = """query($t: ID!, $r: String, $c: MemoryConfigInput) {
  workingMemory(threadId: $t, resourceId: $r, memoryConfig: $c) }"""
UPDATE_THREAD = "mutation($i: UpdateThreadInput!) { updateThread(input: $i) { id title } }"
DELETE_THREAD = "mutation($id: ID!, $r: String) { deleteThread(id: $id, resourceId: $r) }"
TRANSFER = """mutation($t: ID!, $r: String!) { updateThreadResourceId(threadId: $t, resourceId: $r) {
  id resourceId title } }"""
CLONE = """mutation($i: CloneThreadInput!) { cloneThread(input: $i) {
  thread { id resourceId } clonedMessages { id content { raw } } messageIdMap { sourceId cloneId } } }"""
UPDATE_MESSAGES = (
    "mutation($m: [UpdateMessageInput!]!) { updateMessages(messages: $m) { id content { raw } } }"
)
DELETE_MESSAGES = "mutation($ids: [ID!]!) { deleteMessages(ids: $ids) { deleted ids } }"
MESSAGE_EVENTS = (
    "subscription($t: ID!) { messageSaved(threadId: $t) { kind messageId message { id content { raw } } } }"
)
THREAD_EVENTS = (
    "subscription($r: String!) { threadUpdated(resourceId: $r) { kind threadId thread { title } } }"
)


def semantic_config(rng: random.Random, scope: str) -> dict[str, Any]:
    return {
        "semanticRecall": {
            "options": {
                "topK": rng.randint(3, 12),
                "messageRange": {"size": rng.randint(0, 3)},
                "scope": scope,
            }
        }
    }


class Generator:
    """One random attempt of a random kind, by a random attacker against a random other tenant."""

    def __init__(self, world: World, rng: random.Random) -> None:
        self.world = world
        self.rng = rng
        self.kinds: list[Callable[[Attacker, Tenant, Tenant], Attempt]] = [
            getattr(self, name) for name in dir(self) if name.startswith("op_")
        ]

    def next(self) -> Attempt:
        attacker = self.rng.choice(self.world.attackers)
        victim = self.rng.choice(attacker.victims(self.world))
        own = self.rng.choice(attacker.own(self.world))
        return self.rng.choice(self.kinds)(attacker, victim, own)

    # helpers
    def thread(self, tenant: Tenant) -> Thread:
        return self.rng.choice(tenant.threads)

    def message_ids(self, tenant: Tenant, k: int) -> list[str]:
        return [m.id for m in self.rng.sample(tenant.messages, k)]

    def orphan_ids(self, thread: Thread) -> list[str]:
        return [o.id for o in self.world.orphans if o.thread_id == thread.id]

    def own_only(self, attacker: Attacker) -> Callable[[dict[str, Any]], None]:
        def check(data: dict[str, Any]) -> None:
            for message in data["recall"]["messages"]:
                assert message["resourceId"] in attacker.grants, message
                if "thread" in message:
                    assert (
                        message["thread"] is not None and message["thread"]["resourceId"] in attacker.grants
                    )

        return check

    # reads
    def op_recall_other_thread(self, attacker: Attacker, victim: Tenant, own: Tenant) -> Attempt:
        resource = self.rng.choice([None, victim.resource_id, own.resource_id])
        variables: dict[str, Any] = {"t": self.thread(victim).id, "r": resource}
        if self.rng.random() < 0.5:
            variables["q"] = " ".join(self.rng.sample(WORDS, 2))
            variables["cfg"] = semantic_config(self.rng, self.rng.choice(["THREAD", "RESOURCE"]))
        if self.rng.random() < 0.3:
            variables["inc"] = [{"id": i} for i in self.message_ids(victim, 2)]
        return Attempt("recall(other thread)", attacker, RECALL, variables, "forbidden")

    def op_recall_as_other_resource(self, attacker: Attacker, victim: Tenant, own: Tenant) -> Attempt:
        variables = {"t": self.thread(own).id, "r": victim.resource_id, "pp": self.rng.choice([False, 5])}
        return Attempt("recall(own thread, other resourceId)", attacker, RECALL, variables, "forbidden")

    def op_recall_including_others(self, attacker: Attacker, victim: Tenant, own: Tenant) -> Attempt:
        thread = self.thread(own)
        targets = self.message_ids(victim, 3) + self.orphan_ids(thread) + self.message_ids(own, 1)
        self.rng.shuffle(targets)
        include = [
            {
                "id": i,
                "withPreviousMessages": self.rng.randint(0, 4),
                "withNextMessages": self.rng.randint(0, 4),
            }
            for i in targets
        ]
        query = self.rng.choice([RECALL, RECALL_NESTED])
        variables = {"t": thread.id, "inc": include, "r": self.rng.choice([None, own.resource_id])}
        return Attempt("recall(include others)", attacker, query, variables, "own", self.own_only(attacker))

    def op_recall_semantic(self, attacker: Attacker, victim: Tenant, own: Tenant) -> Attempt:
        thread = self.thread(own)
        scope = self.rng.choice(["THREAD", "RESOURCE"])
        # Words of the victim's messages and the orphans' (which hold every word): hits across tenants.
        words = self.rng.choice(victim.messages).text.split()[:3]
        variables = {
            "t": thread.id,
            "r": own.resource_id if scope == "RESOURCE" or self.rng.random() < 0.5 else None,
            "q": " ".join(words),
            "cfg": semantic_config(self.rng, scope),
            "inc": [{"id": i} for i in self.orphan_ids(thread)] if self.rng.random() < 0.3 else None,
        }
        if variables["r"] is None and len(attacker.grants) > 1 and scope == "RESOURCE":
            variables["r"] = own.resource_id
        query = self.rng.choice([RECALL, RECALL_NESTED])

        def check(data: dict[str, Any]) -> None:
            self.own_only(attacker)(data)
            if query is RECALL:
                assert data["recall"]["usage"] is not None, "the vector search did not run"

        return Attempt(f"recall(semantic {scope})", attacker, query, variables, "own", check)

    def op_thread(self, attacker: Attacker, victim: Tenant, own: Tenant) -> Attempt:
        variables = {"id": self.thread(victim).id, "r": self.rng.choice([None, victim.resource_id])}
        query = self.rng.choice([THREAD, THREAD_WM])
        if query is THREAD_WM:
            variables = {"id": variables["id"]}
        return Attempt("thread(other)", attacker, query, variables, "null")

    def op_threads(self, attacker: Attacker, victim: Tenant, own: Tenant) -> Attempt:
        return Attempt("threads(other)", attacker, THREADS, {"r": victim.resource_id}, "forbidden")

    def op_resource(self, attacker: Attacker, victim: Tenant, own: Tenant) -> Attempt:
        return Attempt("resource(other)", attacker, RESOURCE, {"r": victim.resource_id}, "forbidden")

    def op_own_resource_nesting(self, attacker: Attacker, victim: Tenant, own: Tenant) -> Attempt:
        def check(data: dict[str, Any]) -> None:
            ids = {t["id"] for t in data["resource"]["threads"]["threads"]}
            assert ids == {t.id for t in own.threads}, ids

        return Attempt("resource(own) nesting", attacker, RESOURCE, {"r": own.resource_id}, "own", check)

    def op_messages(self, attacker: Attacker, victim: Tenant, own: Tenant) -> Attempt:
        theirs = self.message_ids(victim, 3) + self.orphan_ids(self.thread(own))[:1]
        mine = self.message_ids(own, 2)
        ids = theirs + mine
        self.rng.shuffle(ids)
        query = self.rng.choice([MESSAGES, MESSAGES_NESTED])

        def check(data: dict[str, Any]) -> None:
            for requested, got in zip(ids, data["messages"], strict=True):
                if requested in mine:
                    assert got is not None and got["id"] == requested
                else:
                    assert got is None, got

        return Attempt("messages(other ids)", attacker, query, {"ids": ids}, "own", check)

    def op_working_memory(self, attacker: Attacker, victim: Tenant, own: Tenant) -> Attempt:
        variant = self.rng.randrange(3)
        if variant == 0:  # resource scope, another resource
            variables: dict[str, Any] = {"t": self.thread(own).id, "r": victim.resource_id}
        elif variant == 1:  # thread scope, another resource's thread
            variables = {"t": self.thread(victim).id, "c": THREAD_SCOPE, "r": own.resource_id}
            if len(attacker.grants) == 1 and self.rng.random() < 0.5:
                variables["r"] = None
        else:  # resource scope, named through another resource's thread
            variables = {"t": self.thread(victim).id, "r": victim.resource_id}
        return Attempt("workingMemory(other)", attacker, WORKING_MEMORY, variables, "forbidden")

    # mutations
    def op_create_thread(self, attacker: Attacker, victim: Tenant, own: Tenant) -> Attempt:
        new_id = uid("evil-t")
        self.world.made_up.add(new_id)
        variables = {"i": {"id": new_id, "resourceId": victim.resource_id, "title": "pwned"}}
        return Attempt("createThread(other resource)", attacker, CREATE, variables, "forbidden")

    def op_update_thread(self, attacker: Attacker, victim: Tenant, own: Tenant) -> Attempt:
        variables = {"i": {"id": self.thread(victim).id, "title": "pwned", "metadata": {"secret": "pwned"}}}
        return Attempt("updateThread(other)", attacker, UPDATE_THREAD, variables, "forbidden")

    def op_delete_thread(self, attacker: Attacker, victim: Tenant, own: Tenant) -> Attempt:
        resource = self.rng.choice([None, victim.resource_id, own.resource_id])
        variables = {"id": self.thread(victim).id, "r": resource}
        return Attempt("deleteThread(other)", attacker, DELETE_THREAD, variables, "forbidden")

    def op_transfer_thread(self, attacker: Attacker, victim: Tenant, own: Tenant) -> Attempt:
        if self.rng.random() < 0.5:  # take another resource's thread (to oneself, or where it is)
            variables = {"t": self.thread(victim).id, "r": self.rng.choice([own, victim]).resource_id}
        else:  # give one's own thread to another resource
            variables = {"t": self.thread(own).id, "r": victim.resource_id}
        return Attempt("updateThreadResourceId(other)", attacker, TRANSFER, variables, "forbidden")

    def op_clone_thread(self, attacker: Attacker, victim: Tenant, own: Tenant) -> Attempt:
        new_id = uid("evil-clone")
        self.world.made_up.add(new_id)
        if self.rng.random() < 0.5:  # copy another resource's thread (to oneself, or in place)
            source = self.thread(victim)
            data = {"sourceThreadId": source.id, "newThreadId": new_id}
            if self.rng.random() < 0.5:
                data["resourceId"] = own.resource_id
            if self.rng.random() < 0.3:
                data["options"] = {"messageFilter": {"messageIds": [m.id for m in source.messages[:2]]}}
        else:  # copy one's own thread into another resource
            data = {
                "sourceThreadId": self.thread(own).id,
                "newThreadId": new_id,
                "resourceId": victim.resource_id,
            }
        return Attempt("cloneThread(other)", attacker, CLONE, {"i": data}, "forbidden")

    def op_save_messages(self, attacker: Attacker, victim: Tenant, own: Tenant) -> Attempt:
        fresh = uid("evil-m")
        self.world.made_up.add(fresh)
        victim_thread, own_thread = self.thread(victim), self.thread(own)
        variant = self.rng.randrange(4)
        evil: dict[str, Any] = {"role": "user", "content": content("pwned")}
        if variant == 0:  # into another resource's thread
            evil |= {"id": fresh, "threadId": victim_thread.id}
        elif variant == 1:  # as another resource, into one's own thread
            evil |= {"id": fresh, "threadId": own_thread.id, "resourceId": victim.resource_id}
        elif variant == 2:  # hijack an existing message by id (into one's own thread)
            evil |= {"id": self.rng.choice(victim.messages).id, "threadId": own_thread.id}
        else:  # hijack by id, in place
            target = self.rng.choice(victim.messages)
            evil |= {"id": target.id, "threadId": target.thread_id, "resourceId": victim.resource_id}
        batch = [evil]
        if self.rng.random() < 0.5:  # with a valid message of one's own first: the batch writes nothing
            ok_id = uid("ok-m")
            self.world.made_up.add(ok_id)
            batch.insert(
                0, {"id": ok_id, "threadId": own_thread.id, "role": "user", "content": content("fine")}
            )
        return Attempt(f"saveMessages(variant {variant})", attacker, SAVE, {"m": batch}, "forbidden")

    def op_update_messages(self, attacker: Attacker, victim: Tenant, own: Tenant) -> Attempt:
        variant = self.rng.randrange(3)
        mine = self.rng.choice(own.messages)
        if variant == 0:  # change another resource's message
            patch: dict[str, Any] = {
                "id": self.rng.choice(victim.messages).id,
                "content": {"parts": [{"type": "text", "text": "pwned"}]},
            }
        elif variant == 1:  # move one's own message into another resource's thread
            patch = {"id": mine.id, "threadId": self.thread(victim).id}
        else:  # give one's own message to another resource
            patch = {"id": mine.id, "resourceId": victim.resource_id}
        batch = [patch]
        if self.rng.random() < 0.5:
            batch.insert(0, {"id": mine.id, "content": {"metadata": {"touched": True}}})
        return Attempt(
            f"updateMessages(variant {variant})", attacker, UPDATE_MESSAGES, {"m": batch}, "forbidden"
        )

    def op_delete_messages(self, attacker: Attacker, victim: Tenant, own: Tenant) -> Attempt:
        ids = self.message_ids(victim, self.rng.randint(1, 3))
        if self.rng.random() < 0.5:
            ids += self.message_ids(own, 1)
        if self.rng.random() < 0.3:
            ids += self.orphan_ids(self.thread(own))
        self.rng.shuffle(ids)
        return Attempt("deleteMessages(other)", attacker, DELETE_MESSAGES, {"ids": ids}, "forbidden")

    def op_update_working_memory(self, attacker: Attacker, victim: Tenant, own: Tenant) -> Attempt:
        if self.rng.random() < 0.5:
            variables: dict[str, Any] = {"t": self.thread(own).id, "r": victim.resource_id, "w": "pwned"}
        else:
            variables = {"t": self.thread(victim).id, "w": "pwned", "c": THREAD_SCOPE, "r": own.resource_id}
        return Attempt("updateWorkingMemory(other)", attacker, SET_WM, variables, "forbidden")


def judge(world: World, attempt: Attempt, request: str, body: dict[str, Any], status: int) -> list[str]:
    """What went wrong with one attempt (empty: nothing)."""
    problems: list[str] = []
    text = json.dumps(body)
    for secret in world.secrets_outside(attempt.attacker.grants):
        if secret in text and secret not in request:
            problems.append(f"leaked {secret!r}")
    if status != 200:
        return [*problems, f"HTTP {status}"]
    errors = body.get("errors") or []
    codes = [e.get("extensions", {}).get("code") for e in errors]
    if attempt.expect == "forbidden":
        data = body.get("data") or {}  # a nullable root field answers null beside its error
        if codes != ["FORBIDDEN"] or any(v is not None for v in data.values()):
            problems.append(f"expected FORBIDDEN, got {codes} data={body.get('data')}")
    elif attempt.expect == "null":
        data = body.get("data") or {}
        if errors or any(v is not None for v in data.values()):
            problems.append(f"expected null, got {body}")
    else:
        if errors:
            problems.append(f"expected success, got {codes}: {errors[0].get('message')}")
        elif attempt.check is not None:
            try:
                attempt.check(body["data"])
            except AssertionError as exc:
                problems.append(f"check failed: {exc}")
    return problems


async def run_attempts(world: World, attempts: list[Attempt]) -> dict[str, int]:
    client = Client(world.url)
    failures: list[str] = []
    counts: dict[str, int] = {}
    limit = asyncio.Semaphore(8)

    async def one(attempt: Attempt) -> None:
        async with limit:
            request, body, response = await client.post(
                attempt.attacker.token, attempt.query, **attempt.variables
            )
        counts[attempt.op] = counts.get(attempt.op, 0) + 1
        for problem in judge(world, attempt, request, body, response.status_code):
            failures.append(f"{attempt.op} by {attempt.attacker.name} {attempt.variables}: {problem}")

    try:
        await asyncio.gather(*(one(a) for a in attempts))
    finally:
        await client.http.aclose()
    assert not failures, f"seed {SEED}: {len(failures)} problem(s):\n" + "\n".join(failures[:30])
    return counts


async def subscription_attempts(world: World, rng: random.Random) -> int:
    done = 0
    failures: list[str] = []
    for _ in range(SUBSCRIPTION_ATTEMPTS):
        attacker = rng.choice(world.attackers)
        victim = rng.choice(attacker.victims(world))
        if rng.random() < 0.5:
            query, variables = MESSAGE_EVENTS, {"t": rng.choice(victim.threads).id}
        else:
            query, variables = THREAD_EVENTS, {"r": victim.resource_id}
        async with ws_session(
            world.url, init_payload={"Authorization": f"Bearer {attacker.token}"}
        ) as session:
            op = await session.subscribe(query, **variables)
            answer = await session.receive_for(op, timeout=10)
        errors = (
            answer["payload"] if answer["type"] == "error" else (answer.get("payload") or {}).get("errors")
        )
        codes = [e["extensions"]["code"] for e in errors or []]
        if codes != ["FORBIDDEN"]:
            failures.append(
                f"{query.split('{')[1].split('(')[0].strip()} {variables} by {attacker.name}: {answer}"
            )
        request = json.dumps(variables)
        for secret in world.secrets_outside(attacker.grants):
            if secret in json.dumps(answer) and secret not in request:
                failures.append(f"subscription leaked {secret!r}")
        done += 1
    assert not failures, f"seed {SEED}:\n" + "\n".join(failures[:20])
    return done


async def own_subscriptions_see_only_own(world: World) -> None:
    """A tenant subscribed to its own thread gets its own events and never the orphan's (another
    resource's message saved into that thread)."""
    client = Client(world.url)
    tenant = world.tenants[0]
    thread = tenant.threads[1]
    try:
        async with ws_session(world.url, init_payload={"Authorization": f"Bearer {tenant.token}"}) as session:
            op = await session.subscribe(MESSAGE_EVENTS, t=thread.id)
            seen: list[str] = []
            probe = uid("probe")
            deadline = time.monotonic() + 20
            while not seen:
                # Another resource's message into this thread (admin), then one of the tenant's own.
                await client.ok(
                    world.admin,
                    SAVE,
                    m=[
                        {
                            "id": uid("orphan-event"),
                            "threadId": thread.id,
                            "resourceId": uid("nobody"),
                            "role": "user",
                            "content": content("orphan event"),
                        }
                    ],
                )
                await client.ok(
                    tenant.token,
                    SAVE,
                    m=[{"id": probe, "threadId": thread.id, "role": "user", "content": content("probe")}],
                )
                with_timeout = time.monotonic() + 1
                while time.monotonic() < with_timeout:
                    try:
                        event = await session.receive_for(op, timeout=0.3)
                    except TimeoutError:
                        continue
                    seen.append(event["payload"]["data"]["messageSaved"]["messageId"])
                assert time.monotonic() < deadline, "no event"
            assert set(seen) == {probe}, seen
        await client.ok(tenant.token, DELETE_MESSAGES, ids=[probe])
    finally:
        await client.http.aclose()


async def verify_intact(world: World) -> None:
    """With the admin key: every tenant's threads, messages and working memory are exactly as created,
    and nothing an attempt tried to create exists."""
    client = Client(world.url)
    try:
        for tenant in world.tenants:
            data = await client.ok(world.admin, THREADS_FULL, r=tenant.resource_id)
            stored = {t["id"]: t for t in data["threads"]["threads"]}
            assert set(stored) == {t.id for t in tenant.threads}, (tenant.resource_id, stored)
            for thread in tenant.threads:
                assert stored[thread.id]["title"] == thread.title
                assert stored[thread.id]["metadata"]["secret"] == thread.metadata["secret"]
                assert stored[thread.id]["metadata"]["workingMemory"] == thread.working_memory
                recall = await client.ok(world.admin, RECALL, t=thread.id, r=tenant.resource_id, pp=False)
                got = [
                    (m["id"], m["content"]["raw"]["parts"][0]["text"]) for m in recall["recall"]["messages"]
                ]
                assert got == [(m.id, m.text) for m in thread.messages], (thread.id, got)
                everything = await client.ok(world.admin, RECALL, t=thread.id, pp=False)
                orphan_ids = {o.id for o in world.orphans if o.thread_id == thread.id}
                assert {m["id"] for m in everything["recall"]["messages"]} - {
                    m.id for m in thread.messages
                } >= orphan_ids
            wm = await client.ok(world.admin, WORKING_MEMORY, t=tenant.threads[0].id, r=tenant.resource_id)
            assert wm["workingMemory"] == tenant.working_memory
        made_up = sorted(world.made_up)
        for start in range(0, len(made_up), 200):
            data = await client.ok(world.admin, MESSAGES, ids=made_up[start : start + 200])
            assert all(m is None for m in data["messages"]), [m for m in data["messages"] if m]
        for thread_id in made_up:
            data = await client.ok(world.admin, THREAD, id=thread_id)
            assert data["thread"] is None, thread_id
        orphans = await client.ok(world.admin, MESSAGES, ids=[o.id for o in world.orphans])
        assert all(m is not None for m in orphans["messages"])
    finally:
        await client.http.aclose()


# ---------------------------------------------------------------------------------------------- the test
@pytest.mark.slow
async def test_no_leaks_across_tenants(world: World) -> None:
    rng = random.Random(SEED)
    generator = Generator(world, rng)
    attempts = [generator.next() for _ in range(ATTEMPTS)]
    # Every kind runs, whatever the draw.
    for kind in generator.kinds:
        attacker = rng.choice(world.attackers)
        attempts.append(kind(attacker, rng.choice(attacker.victims(world)), rng.choice(attacker.own(world))))
    counts = await run_attempts(world, attempts)
    assert sum(counts.values()) >= 1000 and len(counts) >= 15, counts
    assert await subscription_attempts(world, rng) == SUBSCRIPTION_ATTEMPTS
    await own_subscriptions_see_only_own(world)
    await verify_intact(world)


@pytest.mark.slow
async def test_credentials_hold_exactly_their_resources(world: World) -> None:
    """The positive side: each credential reads and writes its own resources (including the two
    multi-resource ones), which is what makes the refusals above meaningful."""
    client = Client(world.url)
    try:
        for attacker in world.attackers:
            for tenant in attacker.own(world):
                data = await client.ok(attacker.token, THREADS, r=tenant.resource_id)
                assert {t["id"] for t in data["threads"]["threads"]} == {t.id for t in tenant.threads}
                thread = tenant.threads[0]
                data = await client.ok(attacker.token, RECALL, t=thread.id, r=tenant.resource_id, pp=False)
                assert [m["id"] for m in data["recall"]["messages"]] == [m.id for m in thread.messages]
                # Without resourceId: the only resource of a one-resource credential, else the owner.
                data = await client.ok(attacker.token, RECALL, t=thread.id, pp=False)
                assert [m["id"] for m in data["recall"]["messages"]] == [m.id for m in thread.messages]
                wm = await client.ok(attacker.token, WORKING_MEMORY, t=thread.id, r=tenant.resource_id)
                assert wm["workingMemory"] == tenant.working_memory
    finally:
        await client.http.aclose()


# ---------------------------------------------------------------------------------------------- races
# The checks that guard writes run inside the write's transaction (on the locked rows), so a row that
# changes owner or appears between a pre-check and the write is still refused. These tests take the
# pre-checks away (as a concurrent writer would) and show the transaction refusing on its own.
async def test_save_cannot_overwrite_a_row_that_appeared_after_the_check(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    await seed(services, msg("theirs", thread="tb", resource="b"), threads={"ta": "a", "tb": "b"})
    alice = Principal("key:a", frozenset({"a"}))

    async def nothing_stored(ids: Any) -> dict[str, Any]:  # the pre-check sees no row (a race)
        return {}

    monkeypatch.setattr(services.repository, "get_messages", nothing_stored)
    hijack = [msg("mine", thread="ta", resource="a"), msg("theirs", thread="ta", resource="a", text="pwned")]
    with pytest.raises(Forbidden):
        await services.messages.save(hijack, principal=alice)
    monkeypatch.undo()
    stored = await services.repository.get_messages(["theirs", "mine"])
    assert set(stored) == {"theirs"}  # nothing of the batch was written
    assert stored["theirs"].resource_id == "b" and stored["theirs"].thread_id == "tb"
    assert stored["theirs"].content["parts"][0]["text"] == "text theirs"
    # The repository refuses by itself, on both engines.
    with pytest.raises(RowForbidden):
        await services.repository.save_messages(
            [MessageRecord(**{**asdict(stored["theirs"]), "resource_id": "a"})], now=1, owned_by={"a"}
        )
    # An unrestricted save still moves it (the open API is unchanged).
    await services.messages.save([msg("theirs", thread="ta", resource="a", text="moved")], principal=OPEN)
    assert (await services.repository.get_messages(["theirs"]))["theirs"].resource_id == "a"


async def test_writes_check_the_thread_they_lock_not_one_read_before(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread deleted and created again by another resource between a write's check and the write
    (the repository methods are wrapped to do just that, as a concurrent writer could) is refused by the
    write itself: alice's title, metadata, working memory and messages never land in bob's thread."""
    await seed(services, msg("a1", thread="ta", resource="a"), threads={"ta": "a", "tx": "a"})
    alice = Principal("key:a", frozenset({"a"}))
    repo = services.repository

    async def hand_over(thread_id: str) -> None:  # alice's thread becomes bob's, under the same id
        await repo.delete_thread(thread_id, now=1)
        await repo.insert_thread(ThreadRecord(thread_id, "b", "bob's", {"owner": "bob"}, 2, 2))

    def racing(name: str) -> None:
        real = getattr(repo, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            await hand_over("tx")
            return await real(*args, **kwargs)

        monkeypatch.setattr(repo, name, call)

    wm = {"workingMemory": {"enabled": True, "scope": "thread"}}
    writes = {
        "update_thread": lambda: services.threads.update(
            "tx", title="alice's", metadata={"x": 1}, principal=alice
        ),
        "modify_thread_working_memory": lambda: services.working_memory.update(
            "tx", None, "alice's notes", wm, principal=alice
        ),
        "save_messages": lambda: services.messages.save(
            [msg("a2", thread="tx", resource="a")], principal=alice
        ),
        "update_messages": lambda: services.messages.update(
            [MessagePatch(id="a1", thread_id="tx")], principal=alice
        ),
    }
    for name, write in writes.items():
        await repo.delete_thread("tx", now=1)
        await repo.insert_thread(ThreadRecord("tx", "a", "", None, 1, 1))
        racing(name)
        with pytest.raises(Forbidden):
            await write()
        monkeypatch.undo()
        thread = await repo.get_thread("tx")
        assert thread is not None and (thread.resource_id, thread.title, thread.metadata) == (
            "b",
            "bob's",
            {"owner": "bob"},
        ), name
        assert set(await repo.get_messages(["a1", "a2"])) == {"a1"}, name
        assert (await repo.get_messages(["a1"]))["a1"].thread_id == "ta", name
    # A title generated from alice's messages is set only while the thread is still alice's.
    await repo.insert_thread(ThreadRecord("ty", "b", "", None, 1, 1))
    assert await repo.set_title_if_untitled("ty", "a", "from alice's messages", now=3) is None
    titled = await repo.set_title_if_untitled("ty", "b", "from bob's messages", now=3)
    assert titled is not None and titled.title == "from bob's messages"


async def test_working_memory_acts_as_the_threads_owner_for_a_key_of_several_resources(
    services: Services,
) -> None:
    """Without resourceId, a credential of several resources acts as the thread's owner, as recall
    does (it was "resource scope needs a resourceId"); never as a resource it does not hold."""
    await seed(services, threads={"ta": "a", "tc": "c", "tb": "b"})
    both = Principal("key:ac", frozenset({"a", "c"}))
    wm = {"workingMemory": {"enabled": True, "scope": "resource"}}
    wm_service = services.working_memory
    for thread_id, resource_id in (("ta", "a"), ("tc", "c")):
        state = await wm_service.update(thread_id, None, f"notes of {resource_id}", wm, principal=both)
        assert (state.resource_id, state.working_memory) == (resource_id, f"notes of {resource_id}")
        assert await wm_service.get(thread_id, None, wm, principal=both) == f"notes of {resource_id}"
    with pytest.raises(BadUserInput):  # b's thread: no resource to act as
        await wm_service.update("tb", None, "not mine", wm, principal=both)
    assert await wm_service.get("tb", "b", wm, principal=OPEN) is None


async def test_delete_and_update_check_the_locked_rows(services: Services) -> None:
    await seed(
        services,
        msg("a1", thread="ta", resource="a"),
        msg("b1", thread="tb", resource="b"),
        msg("orphan-b", thread="gone", resource="b"),
        threads={"ta": "a", "tb": "b"},
    )
    alice = Principal("key:a", frozenset({"a"}))
    with pytest.raises(Forbidden):
        await services.messages.delete(["a1", "b1"], principal=alice)
    with pytest.raises(Forbidden):
        await services.messages.update([MessagePatch(id="b1", role="assistant")], principal=alice)
    with pytest.raises(Forbidden):  # moving one's own message into another resource's thread
        await services.messages.update([MessagePatch(id="a1", thread_id="tb")], principal=alice)
    with pytest.raises(Forbidden):  # a thread id with no thread, holding another resource's messages
        await services.threads.delete("gone", principal=alice)
    with pytest.raises(Forbidden):
        await services.threads.delete("tb", principal=alice)
    assert set(await services.repository.get_messages(["a1", "b1", "orphan-b"])) == {"a1", "b1", "orphan-b"}
    assert await services.repository.get_thread("tb") is not None
    # Their own: allowed, and only theirs goes.
    assert [m.id for m in await services.messages.delete(["a1"], principal=alice)] == ["a1"]
    assert await services.threads.delete("ta", principal=alice) is True


async def test_a_thread_transfer_needs_both_resources_and_every_message_granted(services: Services) -> None:
    await seed(
        services,
        msg("a1", thread="ta", resource="a"),
        msg("a2", thread="tmixed", resource="a"),
        msg("b1", thread="tmixed", resource="b"),
        threads={"ta": "a", "tmixed": "a", "tb": "b"},
    )
    repo = services.repository
    alice = Principal("key:a", frozenset({"a"}))
    alice_and_c = Principal("key:ac", frozenset({"a", "c"}))
    for principal, thread_id, target in (
        (alice, "ta", "c"),  # a resource not granted
        (alice, "tb", "a"),  # another resource's thread
        (alice_and_c, "tmixed", "c"),  # a message of another resource filed under one's own thread
    ):
        with pytest.raises(Forbidden):
            await services.threads.transfer(thread_id, target, principal=principal)
    threads = await repo.get_threads(["ta", "tmixed", "tb"])
    assert {t.id: t.resource_id for t in threads.values()} == {"ta": "a", "tmixed": "a", "tb": "b"}
    assert {m.id: m.resource_id for m in (await repo.get_messages(["a1", "a2", "b1"])).values()} == {
        "a1": "a",
        "a2": "a",
        "b1": "b",
    }
    # Both resources granted, every message too: allowed.
    moved = await services.threads.transfer("ta", "c", principal=alice_and_c)
    assert moved.resource_id == "c" and (await repo.get_messages(["a1"]))["a1"].resource_id == "c"
