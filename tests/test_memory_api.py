"""The memory API over real HTTP: deleting and cloning threads, updating and deleting messages,
resources and working memory (with concurrency), and what a failed call leaves behind (nothing)."""

from __future__ import annotations

import asyncio
import http.server
import itertools
import json
import os
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from resolvers.config import DEFAULT_WORKING_MEMORY_TEMPLATE
from tests.support import Api, at, require, text_message, uid

CREATE = "mutation($i: CreateThreadInput!) { createThread(input: $i) { id createdAt updatedAt } }"
SAVE = "mutation($m: [MessageInput!]!) { saveMessages(messages: $m) { messages { id createdAt } } }"
THREAD = """query($id: ID!) { thread(id: $id) {
  id resourceId title metadata createdAt updatedAt } }"""
RECALL = """query($t: ID!) { recall(threadId: $t, perPage: false) {
  total messages { id threadId resourceId role type createdAt signalType content { raw } } } }"""
DELETE_THREAD = "mutation($id: ID!, $r: String) { deleteThread(id: $id, resourceId: $r) }"
CLONE = """mutation($i: CloneThreadInput!, $c: MemoryConfigInput) { cloneThread(input: $i, memoryConfig: $c) {
  thread { id resourceId title metadata createdAt updatedAt }
  clonedMessages { id threadId resourceId role createdAt content { raw } }
  messageIdMap { sourceId cloneId } } }"""
UPDATE = """mutation($m: [UpdateMessageInput!]!) { updateMessages(messages: $m) {
  id threadId resourceId role type createdAt signalType isSystemReminder content { raw } } }"""
DELETE = "mutation($ids: [ID!]!) { deleteMessages(ids: $ids) { deleted ids } }"
WM_UPDATE = """mutation($t: ID!, $r: String, $w: String!, $c: MemoryConfigInput, $mode: WorkingMemoryUpdateMode! = REPLACE) {
  updateWorkingMemory(threadId: $t, resourceId: $r, workingMemory: $w, memoryConfig: $c, mode: $mode) {
    scope threadId resourceId workingMemory updatedAt } }"""  # noqa: E501
WM_GET = """query($t: ID!, $r: String, $c: MemoryConfigInput) {
  workingMemory(threadId: $t, resourceId: $r, memoryConfig: $c) }"""
TEMPLATE = "query($c: MemoryConfigInput) { workingMemoryTemplate(memoryConfig: $c) { format content } }"
ON = {"workingMemory": {"enabled": True}}
THREAD_SCOPE = {"workingMemory": {"enabled": True, "scope": "THREAD"}}


async def new_thread(api: Api, **extra: Any) -> tuple[str, str]:
    thread_id = extra.pop("id", None) or uid("t")
    resource_id = extra.pop("resourceId", None) or uid("r")
    await api.execute(CREATE, i={"id": thread_id, "resourceId": resource_id, **extra})
    return thread_id, resource_id


async def seed(api: Api, thread_id: str, count: int, **extra: Any) -> list[str]:
    ids = [f"{thread_id}-m{n}" for n in range(count)]
    await api.execute(
        SAVE,
        m=[
            text_message(
                thread_id=thread_id,
                id=mid,
                created_at=at(n),
                text=f"text {n}",
                role="user" if n % 2 == 0 else "assistant",
                metadata={"n": n},
                **extra,
            )
            for n, mid in enumerate(ids)
        ],
    )
    return ids


async def thread_of(api: Api, thread_id: str) -> dict[str, Any] | None:
    return (await api.execute(THREAD, id=thread_id))["thread"]


async def recall(api: Api, thread_id: str) -> list[dict[str, Any]]:
    return (await api.execute(RECALL, t=thread_id))["recall"]["messages"]


def fresh(api: Api) -> Api:
    """A client of its own: one gql client runs one request at a time; these run in parallel."""
    return Api(api.base_url)


async def error(api: Api, query: str, **variables: Any) -> dict[str, Any]:
    errors = await api.errors(query, **variables)
    assert len(errors) == 1, errors
    return errors[0]


# ---------------------------------------------------------------------------------------------- threads
async def test_delete_thread_removes_it_and_its_messages(api: Api) -> None:
    thread_id, resource_id = await new_thread(api)
    ids = await seed(api, thread_id, 3)
    keep, _ = await new_thread(api, resourceId=resource_id)
    await seed(api, keep, 1)

    got = await error(api, DELETE_THREAD, id=thread_id, r="someone-else")
    assert got["extensions"]["code"] == "FORBIDDEN"
    assert got["message"] == (
        f"Thread with id {thread_id} is for resource with id {resource_id} "
        "but resource someone-else was queried."
    )
    assert await thread_of(api, thread_id) is not None  # nothing happened
    # An empty resourceId skipped the check and deleted another resource's thread.
    got = await error(api, DELETE_THREAD, id=thread_id, r="")
    assert (got["extensions"]["code"], got["message"]) == (
        "BAD_USER_INPUT",
        "resourceId must be a non-empty string when given.",
    )
    assert await thread_of(api, thread_id) is not None

    assert (await api.execute(DELETE_THREAD, id=thread_id, r=resource_id))["deleteThread"] is True
    assert await thread_of(api, thread_id) is None
    assert await recall(api, thread_id) == []
    found = await api.execute("query($ids: [ID!]!) { messages(ids: $ids) { id } }", ids=ids)
    assert found["messages"] == [None, None, None]
    listed = await api.execute(
        "query($r: String!) { threads(resourceId: $r) { total threads { id } } }", r=resource_id
    )
    assert listed["threads"] == {"total": 1, "threads": [{"id": keep}]}
    assert len(await recall(api, keep)) == 1
    # Unknown (or already deleted) ids: a no-op answering false, as Mastra's no-op.
    assert (await api.execute(DELETE_THREAD, id=thread_id))["deleteThread"] is False
    assert (await api.execute(DELETE_THREAD, id=uid("ghost")))["deleteThread"] is False
    assert (await error(api, DELETE_THREAD, id=" "))["extensions"]["code"] == "BAD_USER_INPUT"


async def test_clone_thread_copies_messages_with_new_ids(api: Api) -> None:
    source, resource_id = await new_thread(api, title="Trip", metadata={"project": "p1", "keep": True})
    ids = await seed(api, source, 4)
    new_id = uid("clone")
    result = (
        await api.execute(CLONE, i={"sourceThreadId": source, "newThreadId": new_id, "metadata": {"keep": 2}})
    )["cloneThread"]
    thread = result["thread"]
    assert (thread["id"], thread["resourceId"], thread["title"]) == (new_id, resource_id, "Clone of Trip")
    clone_meta = thread["metadata"].pop("clone")
    assert thread["metadata"] == {"project": "p1", "keep": 2}  # the source's, merged with the call's
    assert clone_meta["sourceThreadId"] == source and clone_meta["lastMessageId"] == ids[-1]
    assert clone_meta["clonedAt"] == thread["createdAt"] == thread["updatedAt"]
    copies = result["clonedMessages"]
    assert [m["createdAt"] for m in copies] == [at(n) for n in range(4)]
    assert {m["threadId"] for m in copies} == {new_id} and {m["resourceId"] for m in copies} == {resource_id}
    assert not {m["id"] for m in copies} & set(ids)
    assert [(p["sourceId"], p["cloneId"]) for p in result["messageIdMap"]] == list(
        zip(ids, [m["id"] for m in copies], strict=True)
    )
    assert [m["content"]["raw"] for m in copies] == [m["content"]["raw"] for m in await recall(api, source)]
    # The copy is an ordinary thread: recall reads it; the source is untouched.
    assert [m["id"] for m in await recall(api, new_id)] == [m["id"] for m in copies]
    assert [m["id"] for m in await recall(api, source)] == ids
    assert (await thread_of(api, source))["metadata"] == {"project": "p1", "keep": True}


async def test_clone_thread_options(api: Api) -> None:
    source, _ = await new_thread(api)
    ids = await seed(api, source, 6)

    async def clone(**options: Any) -> list[str]:
        got = (await api.execute(CLONE, i={"sourceThreadId": source, **options}))["cloneThread"]
        assert got["thread"]["title"] == ""  # untitled source: no "Clone of"
        return [p["sourceId"] for p in got["messageIdMap"]]

    assert await clone(options={"messageLimit": 2}) == ids[4:]
    assert await clone(options={"messageLimit": 0}) == ids
    assert await clone(options={"messageLimit": -1}) == ids  # Mastra limits only for messageLimit > 0
    assert await clone(options={"messageFilter": {"startDate": at(1), "endDate": at(3)}}) == ids[1:4]
    assert await clone(
        options={
            "messageFilter": {"startDate": at(1), "messageIds": [ids[0], ids[2], ids[5]]},
            "messageLimit": 1,
        }
    ) == [ids[5]]
    assert await clone(options={"messageFilter": {"messageIds": ["nope"]}}) == []
    other_resource = uid("r")
    got = (
        await api.execute(CLONE, i={"sourceThreadId": source, "resourceId": other_resource, "title": "Mine"})
    )["cloneThread"]
    assert (got["thread"]["resourceId"], got["thread"]["title"]) == (other_resource, "Mine")
    assert {m["resourceId"] for m in got["clonedMessages"]} == {other_resource}
    empty = (
        await api.execute(
            CLONE, i={"sourceThreadId": source, "options": {"messageFilter": {"messageIds": ["x"]}}}
        )
    )["cloneThread"]
    assert "lastMessageId" not in empty["thread"]["metadata"]["clone"]


async def test_clone_thread_errors_write_nothing(api: Api) -> None:
    source, resource_id = await new_thread(api)
    await seed(api, source, 2)
    taken, _ = await new_thread(api, resourceId=resource_id)
    got = await error(api, CLONE, i={"sourceThreadId": source, "newThreadId": taken})
    assert (got["extensions"]["code"], got["message"]) == (
        "CONFLICT",
        f"Thread with id {taken} already exists",
    )
    assert await recall(api, taken) == []  # no copies slipped into the existing thread
    ghost = uid("ghost")
    got = await error(api, CLONE, i={"sourceThreadId": ghost})
    assert (got["extensions"]["code"], got["message"]) == (
        "NOT_FOUND",
        f"Source thread with id {ghost} not found",
    )
    got = await error(api, CLONE, i={"sourceThreadId": source, "metadata": [1]})
    assert got["extensions"]["code"] == "BAD_USER_INPUT"
    listed = await api.execute("query($r: String!) { threads(resourceId: $r) { total } }", r=resource_id)
    assert listed["threads"]["total"] == 2


CLONE_FIELDS = """query($t: ID!, $r: String) { thread(id: $t) {
  isClone clonedFrom { id } clones { id } elsewhere: clones(resourceId: $r) { id } cloneHistory { id } } }"""


async def test_clone_utilities_follow_clones_both_ways(api: Api) -> None:
    """Mastra's isClone, getSourceThread, listClones and getCloneHistory, as Thread fields."""
    source, resource_id = await new_thread(api, title="Plan")
    await seed(api, source, 2)
    elsewhere = uid("r")

    async def clone(of: str, **extra: Any) -> str:
        await asyncio.sleep(0.005)  # createdAt apart: clones list newest first
        new_id = uid("c")
        await api.execute(CLONE, i={"sourceThreadId": of, "newThreadId": new_id, **extra})
        return new_id

    a = await clone(source)
    b = await clone(source)
    c = await clone(a)
    d = await clone(source, resourceId=elsewhere)

    async def fields(thread_id: str, r: str | None = None) -> dict[str, Any]:
        thread = (await api.execute(CLONE_FIELDS, t=thread_id, r=r or elsewhere))["thread"]
        return {k: [t["id"] for t in v] if isinstance(v, list) else v for k, v in thread.items()}

    assert await fields(source) == {
        "isClone": False,
        "clonedFrom": None,
        "clones": [b, a],  # newest first, this resource's
        "elsewhere": [d],
        "cloneHistory": [source],
    }
    assert await fields(c) == {
        "isClone": True,
        "clonedFrom": {"id": a},
        "clones": [],
        "elsewhere": [],
        "cloneHistory": [source, a, c],
    }
    assert (await fields(d, resource_id))["cloneHistory"] == [source, d]
    # A listing reads every thread's clones (one batch).
    listing = """query($r: String!) { threads(resourceId: $r, orderBy: {field: CREATED_AT, direction: ASC}) {
      threads { id clones { id } } } }"""
    got = (await api.execute(listing, r=resource_id))["threads"]["threads"]
    assert [(t["id"], [x["id"] for x in t["clones"]]) for t in got] == [
        (source, [b, a]),
        (a, [c]),
        (b, []),
        (c, []),
    ]

    # metadata.clone is the client's: as Mastra reads it, a falsy clone is no clone, and a chain that
    # turns back on itself ends where it meets a thread again.
    edit = "mutation($i: UpdateThreadInput!) { updateThread(input: $i) { id } }"
    for falsy in (None, "", 0, False):
        await api.execute(edit, i={"id": b, "metadata": {"clone": falsy}})
        assert (await fields(b))["isClone"] is False, falsy
    await api.execute(edit, i={"id": d, "metadata": {"clone": {}}})
    assert (await fields(d))["isClone"] is True and (await fields(d))["clonedFrom"] is None
    await api.execute(edit, i={"id": source, "metadata": {"clone": {"sourceThreadId": c}}})
    assert (await fields(b))["isClone"] is False
    assert (await fields(source))["clones"] == [a]
    assert (await fields(c))["cloneHistory"] == [source, a, c]  # c <- a <- source <- c: it stops
    await api.execute(edit, i={"id": a, "metadata": {"clone": {"sourceThreadId": 5}}})
    assert (await fields(a))["isClone"] is True and (await fields(a))["clonedFrom"] is None
    await api.execute(DELETE_THREAD, id=source)
    assert (await fields(c))["cloneHistory"] == [a, c]  # (a names no thread now)
    assert (await fields(b))["cloneHistory"] == [b]
    got = await error(api, CLONE_FIELDS, t=c, r=" ")
    assert (got["extensions"]["code"], got["path"]) == ("BAD_USER_INPUT", ["thread", "elsewhere"])


async def test_threads_without_a_resource_lists_every_resources_threads(api: Api) -> None:
    """Mastra's listThreads without filter.resourceId: every thread, with the listing's options (the
    server holds other tests' threads too, so the metadata filter keeps this test's)."""
    suite = uid("suite")
    made = []
    for n, resource in enumerate([uid("r"), uid("r"), uid("r")] * 2):
        thread_id, _ = await new_thread(
            api, resourceId=resource, createdAt=at(n), metadata={"suite": suite, "odd": n % 2 == 1}
        )
        made.append((thread_id, resource))
    query = """query($m: JSON, $after: String, $o: ThreadOrderBy, $p: PerPage! = 4) {
      threads(metadata: $m, perPage: $p, orderBy: $o, after: $after) {
        total hasMore endCursor threads { id resourceId } } }"""
    first = (await api.execute(query, m={"suite": suite}))["threads"]
    newest = [{"id": t, "resourceId": r} for t, r in reversed(made)]
    assert (first["total"], first["hasMore"], first["threads"]) == (6, True, newest[:4])
    rest = (await api.execute(query, m={"suite": suite}, after=first["endCursor"]))["threads"]
    assert (rest["total"], rest["hasMore"], rest["threads"]) == (2, False, newest[4:])
    odd = (await api.execute(query, m={"suite": suite, "odd": True}, p=False))["threads"]
    assert [t["id"] for t in odd["threads"]] == [t for t, _ in reversed(made[1::2])]
    oldest = await api.execute(query, m={"suite": suite}, o={"field": "CREATED_AT", "direction": "ASC"})
    assert [t["id"] for t in oldest["threads"]["threads"]] == [t for t, _ in made[:4]]
    # Without a filter: all of them (other tests' too), however resourceId is left out.
    counted = [
        (await api.execute(q))["threads"]["total"]
        for q in ("{ threads(perPage: 0) { total } }", "{ threads(resourceId: null, perPage: 0) { total } }")
    ]
    assert counted[0] == counted[1] >= 6


RESOURCE_MESSAGES = """query($r: String!, $page: Int! = 0, $p: PerPage! = 40, $f: RecallFilter,
    $o: MessageOrderBy, $i: [IncludeInput!]) {
  resource(id: $r) { messages(page: $page, perPage: $p, filter: $f, orderBy: $o, include: $i) {
    total page perPage hasMore messages { id threadId resourceId } } } }"""


async def test_a_resources_messages_across_its_threads(api: Api) -> None:
    """Mastra's listMessagesByResourceId as Resource.messages: the messages filed under the resource,
    whatever thread holds them, oldest first, by pages of 40, with recall's filters; nothing hidden."""
    t1, resource = await new_thread(api)
    t2, _ = await new_thread(api, resourceId=resource)
    elsewhere, other = await new_thread(api)
    placed = [(t1, 0), (t2, 1), (t1, 2), (t2, 3), (elsewhere, 4), (t1, 5)]
    ids = [f"{t}-x{n}" for t, n in placed]
    await api.execute(
        SAVE,
        m=[
            text_message(
                thread_id=t,
                id=f"{t}-x{n}",
                created_at=at(n),
                resource_id=resource,  # the one in another resource's thread is this resource's too
                metadata={"even": n % 2 == 0},
                role="signal" if n == 3 else "user",
            )
            for t, n in placed
        ],
    )
    # Filed under another resource, in this resource's thread: not this resource's message.
    await api.execute(
        SAVE, m=[text_message(thread_id=t1, id=f"{t1}-theirs", created_at=at(6), resource_id=other)]
    )

    async def listed(**variables: Any) -> dict[str, Any]:
        got = (await api.execute(RESOURCE_MESSAGES, r=resource, **variables))["resource"]["messages"]
        return {**got, "messages": [m["id"] for m in got["messages"]]}

    assert await listed() == {"total": 6, "page": 0, "perPage": 40, "hasMore": False, "messages": ids}
    assert await listed(page=1, p=2) == {
        "total": 6,
        "page": 1,
        "perPage": 2,
        "hasMore": True,
        "messages": ids[2:4],
    }
    assert await listed(page=1, p=2.0) == await listed(page=1, p=2)  # 2.0 is an integer to Mastra
    assert (await listed(p=4, o={"direction": "DESC"}))["messages"] == ids[::-1][:4]
    assert (await listed(p=False, page=3))["messages"] == ids  # false: everything, whatever the page
    assert await listed(p=0) == {"total": 0, "page": 0, "perPage": 0, "hasMore": False, "messages": []}
    after_first = {"dateRange": {"start": at(0), "startExclusive": True}}
    assert (await listed(f=after_first))["messages"] == ids[1:]
    assert await listed(f={**after_first, "metadata": {"even": True}}) == {
        "total": 2,
        "page": 0,
        "perPage": 40,
        "hasMore": False,
        "messages": [ids[2], ids[4]],
    }
    # Include windows: inside the resource (the other resource's row in t1 is no neighbour, nor a
    # target), whatever the filters, not counted, in the page's order; with perPage 0, alone.
    odd = {"metadata": {"even": False}}
    windows = [{"id": ids[0], "withNextMessages": 2}, {"id": f"{t1}-theirs", "withPreviousMessages": 1}]
    assert await listed(f=odd, i=windows) == {
        "total": 3,
        "page": 0,
        "perPage": 40,
        "hasMore": False,
        "messages": [ids[0], ids[1], ids[2], ids[3], ids[5]],
    }
    assert (await listed(f=odd, i=windows, o={"direction": "DESC"}))["messages"] == [
        ids[5],
        ids[3],
        ids[2],
        ids[1],
        ids[0],
    ]
    assert await listed(p=0, i=windows) == {
        "total": 0,
        "page": 0,
        "perPage": 0,
        "hasMore": False,
        "messages": [ids[0], ids[2], ids[5]],
    }
    for variables, message in (
        (
            {"i": [{"id": ids[0], "withPreviousMessages": -1}]},
            "include[0]: withPreviousMessages and withNextMessages must be >= 0.",
        ),
        ({"page": -1}, "page must be >= 0"),
        ({"p": -1}, "perPage must be >= 0"),
        ({"p": 2.5}, "perPage must be >= 0"),  # the PerPage scalar takes it; Mastra refuses it
        ({"f": {"metadata": {"bad key": 1}}}, 'Invalid metadata filter key "bad key".'),
    ):
        got = await error(api, RESOURCE_MESSAGES, r=resource, **variables)
        assert (got["extensions"]["code"], got["message"]) == ("BAD_USER_INPUT", message)


async def test_a_resources_messages_leave_system_rows_out_and_reach_a_resource_of_messages_only(
    api: Api,
) -> None:
    """As Mastra's listMessagesByResourceId (checked against it in tests/conformance): a system-role row
    counts in total but is not returned, as in recall; a resource that owns no thread but has messages
    filed under it (in another resource's thread) is a resource whose messages are listed; a blank id
    is refused with Mastra's text, not answered null."""
    thread_id, resource = await new_thread(api)
    visitor = f"{resource}-visitor"
    await api.execute(
        SAVE,
        m=[
            text_message(thread_id=thread_id, id=f"{thread_id}-a", created_at=at(0)),
            text_message(thread_id=thread_id, id=f"{thread_id}-sys", created_at=at(1), role="system"),
            text_message(thread_id=thread_id, id=f"{thread_id}-b", created_at=at(2)),
            text_message(thread_id=thread_id, id=f"{thread_id}-v", created_at=at(3), resource_id=visitor),
        ],
    )
    page = (await api.execute(RESOURCE_MESSAGES, r=resource, p=2))["resource"]["messages"]
    assert (page["total"], page["hasMore"], [m["id"] for m in page["messages"]]) == (
        3,
        True,
        [f"{thread_id}-a"],
    )
    everything = (await api.execute(RESOURCE_MESSAGES, r=resource, p=False))["resource"]["messages"]
    assert [m["id"] for m in everything["messages"]] == [f"{thread_id}-a", f"{thread_id}-b"]

    document = """query($r: String!) { resource(id: $r) { id createdAt updatedAt workingMemory metadata
      threads { total } messages { total messages { id threadId resourceId } } } }"""
    got = (await api.execute(document, r=visitor))["resource"]
    assert got == {
        "id": visitor,
        "createdAt": at(3),
        "updatedAt": at(3),
        "workingMemory": None,
        "metadata": {},
        "threads": {"total": 0},
        "messages": {
            "total": 1,
            "messages": [{"id": f"{thread_id}-v", "threadId": thread_id, "resourceId": visitor}],
        },
    }
    assert (await api.execute(document, r=f"{resource}-nobody"))["resource"] is None
    for blank in ("", "  "):
        got = await error(api, document, r=blank)
        assert (got["extensions"]["code"], got["message"]) == ("BAD_USER_INPUT", "resourceId is required")


async def test_thread_metadata_is_refused_when_it_cannot_be_stored_as_written(api: Api) -> None:
    """An integer literal beyond 64 bits was answered exactly but stored as a float (and failed the
    Redis events of its write): refused, as in message content. In a JSON request body the number is
    read as JavaScript reads it, a double, which is stored and answered alike."""
    huge = 123456789012345678901234567890
    source, resource_id = await new_thread(api)
    meta = f"metadata: {{n: {huge}}}"
    for mutation in (
        f'mutation {{ createThread(input: {{resourceId: "{resource_id}", {meta}}}) {{ id }} }}',
        f'mutation {{ updateThread(input: {{id: "{source}", {meta}}}) {{ id }} }}',
        f'mutation {{ cloneThread(input: {{sourceThreadId: "{source}", {meta}}}) {{ thread {{ id }} }}}}',
    ):
        got = await error(api, mutation)
        assert got["extensions"]["code"] == "BAD_USER_INPUT" and "64-bit" in got["message"], got
    listed = await api.execute("query($r: String!) { threads(resourceId: $r) { total } }", r=resource_id)
    assert listed["threads"]["total"] == 1
    created = await api.execute(
        "mutation($i: CreateThreadInput!) { createThread(input: $i) { id metadata } }",
        i={"resourceId": resource_id, "metadata": {"n": huge}},
    )
    stored = await api.execute(THREAD, id=created["createThread"]["id"])
    assert created["createThread"]["metadata"] == stored["thread"]["metadata"] == {"n": float(huge)}


async def test_each_mutation_reads_what_the_ones_before_it_wrote(api: Api) -> None:
    """Root mutation fields run in order; nested fields of a later one read rows as the earlier ones
    left them, not as the request's DataLoaders cached them before."""
    thread_id, _ = await new_thread(api)
    document = """mutation($t: ID!, $m1: [MessageInput!]!, $m2: [MessageInput!]!) {
      a: saveMessages(messages: $m1) { messages { thread { title } } }
      b: updateThread(input: {id: $t, title: "renamed"}) { title }
      c: saveMessages(messages: $m2) { messages { thread { title } } }
    }"""
    got = await api.execute(
        document,
        t=thread_id,
        m1=[text_message(thread_id=thread_id, text="one")],
        m2=[text_message(thread_id=thread_id, text="two")],
    )
    assert got["a"]["messages"][0]["thread"]["title"] != "renamed"
    assert got["b"]["title"] == got["c"]["messages"][0]["thread"]["title"] == "renamed"


async def test_clone_copies_working_memory_as_mastra_does(api: Api) -> None:
    source, resource_id = await new_thread(api)
    await api.execute(WM_UPDATE, t=source, r=resource_id, w="# resource memory", c=ON)
    await api.execute(WM_UPDATE, t=source, w="# thread memory", c=THREAD_SCOPE)
    other = uid("r")
    clone = (await api.execute(CLONE, i={"sourceThreadId": source, "resourceId": other}, c=ON))["cloneThread"]
    new_id = clone["thread"]["id"]
    # Resource scope, another resource: copied there. Thread scope: travels with the metadata.
    assert (await api.execute(WM_GET, t=new_id, r=other, c=ON))["workingMemory"] == "# resource memory"
    assert (await api.execute(WM_GET, t=new_id, c=THREAD_SCOPE))["workingMemory"] == "# thread memory"


async def test_threads_listing_pages_orders_and_filters(api: Api) -> None:
    resource_id = uid("r")
    for n in range(3):
        await new_thread(
            api, id=f"{resource_id}-t{n}", resourceId=resource_id, createdAt=at(n), metadata={"n": n}
        )
    # A new message makes the oldest thread the most recently updated.
    await api.execute(SAVE, m=[text_message(thread_id=f"{resource_id}-t0")])
    q = """query($r: String!, $p: PerPage, $page: Int, $o: ThreadOrderBy, $m: JSON) {
      threads(resourceId: $r, perPage: $p, page: $page, orderBy: $o, metadata: $m) {
        total page perPage hasMore threads { id } } }"""

    async def ids(**args: Any) -> list[str]:
        return [t["id"][-2:] for t in (await api.execute(q, r=resource_id, **args))["threads"]["threads"]]

    assert await ids(o={"field": "UPDATED_AT", "direction": "DESC"}) == ["t0", "t2", "t1"]
    assert await ids(o={"field": "CREATED_AT", "direction": "DESC"}) == ["t2", "t1", "t0"]
    assert await ids(p=False) == ["t2", "t1", "t0"]
    assert await ids(p=1, page=2) == ["t0"]
    assert await ids(m={"n": 1}) == ["t1"]

    async def page(**args: Any) -> tuple[int, bool, int]:
        got = (await api.execute(q, r=resource_id, **args))["threads"]
        return got["total"], got["hasMore"], len(got["threads"])

    # The total rides on the page's rows; a page without rows still counts them.
    assert await page(p=2, page=0) == (3, True, 2)
    assert await page(p=2, page=1) == (3, False, 1)
    assert await page(p=2, page=5) == (3, False, 0)
    assert await page(p=0) == (3, True, 0)  # Mastra: offset + perPage < total
    assert await page(p=1, m={"n": 2}) == (1, False, 1)
    assert await page(p=1, page=3, m={"n": 2}) == (1, False, 0)
    assert await page(p=2.0, page=0) == (3, True, 2)  # Mastra's normalizePerPage: 2.0 is an integer
    # A fraction, which the PerPage scalar takes, is refused as listThreads refuses it (its texts are
    # not listMessages'; tests/conformance/test_thread_listing.py checks them against Mastra).
    for bad, message in ((-1, "perPage must be >= 0"), (2.5, "perPage must be false or a safe integer")):
        got = await error(api, q, r=resource_id, p=bad)
        assert (got["extensions"]["code"], got["message"]) == ("BAD_USER_INPUT", message)


MESSAGE_FIELDS = "id threadId resourceId role type createdAt signalType content { raw }"
RECALL_SELECTION = f"total page perPage hasMore usage {{ tokens }} messages {{ {MESSAGE_FIELDS} }}"
RECALL_OPTIONS = (
    "perPage: $p, page: $page, orderBy: $o, filter: $f, include: $i, hideSignals: $h, "
    "threadConfig: $c, vectorSearchString: $s"
)
RECALL_VARIABLES = (
    "$p: PerPage, $page: Int, $o: MessageOrderBy, $f: RecallFilter, $i: [IncludeInput!], "
    "$h: HideSignalsInput, $c: MemoryConfigInput, $s: String"
)
THREAD_SEARCH = {"semanticRecall": {"options": {"topK": 1, "messageRange": {"size": 0}, "scope": "THREAD"}}}


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"p": 1},
        {"p": 2, "page": 1, "o": {"field": "CREATED_AT", "direction": "ASC"}},
        {"p": False, "f": {"metadata": {"n": 2}}},
        {"p": 3, "f": {"dateRange": {"start": at(1), "end": at(3), "endExclusive": True}}},
        {"p": 1, "h": {"all": True}},
        {"p": 0},
        {"p": 1, "s": "text 1", "c": THREAD_SEARCH},
    ],
)
@pytest.mark.parametrize("with_include", [True, False], ids=["include", "no-include"])
async def test_a_threads_recall_is_query_recall_for_that_thread(
    api: Api, options: dict[str, Any], with_include: bool
) -> None:
    """Thread.recall, wherever a thread is listed (a page of threads, a resource's threads, one thread,
    a message's thread, a federation entity), answers what Query.recall answers for the thread and its
    resource with the same options. Without include (or a vector search) the request's numbered pages
    are read in batches (PageBatch), several threads at once; with it each recall reads its own."""
    if "s" in options:
        require(
            bool(os.environ.get("RECALLQL_EMBEDDING_MODEL_DIR")),
            "the search needs the embedding model (RECALLQL_EMBEDDING_MODEL_DIR; scripts/test sets it)",
        )
    resource_id = uid("r")
    threads = [f"{resource_id}-t{n}" for n in range(3)]
    for n, thread_id in enumerate(threads):
        await new_thread(api, id=thread_id, resourceId=resource_id, createdAt=at(n))
        await seed(api, thread_id, 2 + 2 * n)
    signal = text_message(
        thread_id=threads[2],
        id=f"{threads[2]}-signal",
        role="signal",
        created_at=at(9),
        metadata={"signal": {"type": "state"}},
    )
    await api.execute(SAVE, m=[signal])
    include = [{"id": f"{threads[0]}-m0", "withNextMessages": 1}]
    if with_include:
        options = {"i": include, **options}

    nested = f"""query($r: String!, $t: ID!, $m: [ID!]!, $reps: [_Any!]!, {RECALL_VARIABLES}) {{
      threads(resourceId: $r) {{ threads {{ id recall({RECALL_OPTIONS}) {{ {RECALL_SELECTION} }} }} }}
      resource(id: $r) {{ threads {{ threads {{ id recall({RECALL_OPTIONS}) {{ {RECALL_SELECTION} }} }} }} }}
      thread(id: $t) {{ id recall({RECALL_OPTIONS}) {{ {RECALL_SELECTION} }} }}
      messages(ids: $m) {{ thread {{ id recall({RECALL_OPTIONS}) {{ {RECALL_SELECTION} }} }} }}
      _entities(representations: $reps) {{
        ... on Thread {{ id recall({RECALL_OPTIONS}) {{ {RECALL_SELECTION} }} }} }} }}"""
    got = await api.execute(
        nested,
        r=resource_id,
        t=threads[1],
        m=[f"{threads[2]}-m0", f"{threads[0]}-m1"],
        reps=[{"__typename": "Thread", "id": threads[0]}],
        **options,
    )
    direct = f"""query($t: ID!, $r: String, {RECALL_VARIABLES}) {{
      recall(threadId: $t, resourceId: $r, {RECALL_OPTIONS}) {{ {RECALL_SELECTION} }} }}"""
    expected = {}
    for thread_id in threads:
        expected[thread_id] = (await api.execute(direct, t=thread_id, r=resource_id, **options))["recall"]
    listed = [*got["threads"]["threads"], *got["resource"]["threads"]["threads"]]
    assert sorted(t["id"] for t in listed) == sorted(threads * 2)
    for thread in [*listed, got["thread"], *(m["thread"] for m in got["messages"]), *got["_entities"]]:
        assert thread["recall"] == expected[thread["id"]], thread["id"]
    # Not empty answers: the threads' own pages differ (their sizes do); with perPage 0 only the
    # include window, in the thread it names, is returned, alike for every thread (without include,
    # nothing is; and a later page of the smallest thread is empty).
    zero_page = type(options.get("p")) is int and options["p"] == 0
    if with_include:
        assert all(e["messages"] for e in expected.values())
    else:
        assert any(e["messages"] for e in expected.values()) != zero_page
    if "s" in options:  # the search ran (MiniLM, the tests' default embedder), once for each thread
        assert all(e["usage"] and e["usage"]["tokens"] > 0 for e in expected.values()), expected
    assert len({str(e) for e in expected.values()}) == (1 if zero_page else 3)


async def test_a_threads_recall_reports_the_errors_of_recall(api: Api) -> None:
    """Bad options are refused as Query.recall refuses them, on each thread's own field: the listing
    itself answers."""
    resource_id = uid("r")
    thread_id, _ = await new_thread(api, resourceId=resource_id)
    query = """query($r: String!) { threads(resourceId: $r) {
      total threads { id recall(perPage: -1) { total } } } }"""
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(
            f"{api.base_url}/graphql", json={"query": query, "variables": {"r": resource_id}}
        )
    body = response.json()
    assert body["data"] == {"threads": {"total": 1, "threads": [{"id": thread_id, "recall": None}]}}, body
    [error] = body["errors"]
    assert error["message"] == "perPage must be >= 0"
    assert error["path"] == ["threads", "threads", 0, "recall"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"


TRANSFER = """mutation($t: ID!, $r: String!) { updateThreadResourceId(threadId: $t, resourceId: $r) {
  id resourceId title metadata createdAt updatedAt } }"""


async def test_update_thread_resource_id_gives_the_thread_and_its_messages_to_another_resource(
    api: Api,
) -> None:
    """Mastra's updateThreadResourceId: the thread and every message filed under it (one of a third
    resource too) move; createdAt stays, updatedAt moves; resource-scoped working memory stays."""
    thread_id, old = await new_thread(api, title="Anonymous chat", createdAt=at(0))
    ids = await seed(api, thread_id, 3)
    third = uid("r")
    await api.execute(SAVE, m=[text_message(thread_id=thread_id, id=f"{thread_id}-x", resource_id=third)])
    stays, _ = await new_thread(api, resourceId=old)
    await api.execute(WM_UPDATE, t=thread_id, w="# thread notes", c=THREAD_SCOPE)
    await api.execute(WM_UPDATE, t=thread_id, r=old, w="# old resource notes", c=ON)
    new = uid("r")
    before = await thread_of(api, thread_id)
    await asyncio.sleep(0.01)

    moved = (await api.execute(TRANSFER, t=thread_id, r=new))["updateThreadResourceId"]
    assert {k: v for k, v in moved.items() if k not in ("resourceId", "updatedAt")} == {
        k: v for k, v in before.items() if k not in ("resourceId", "updatedAt")
    }
    assert moved["resourceId"] == new and moved["updatedAt"] > before["updatedAt"]
    assert moved["createdAt"] == at(0) and moved["metadata"] == {"workingMemory": "# thread notes"}
    assert await thread_of(api, thread_id) == moved
    assert {m["resourceId"] for m in await recall(api, thread_id)} == {new}
    assert [m["id"] for m in await recall(api, thread_id)] == [*ids, f"{thread_id}-x"]
    listing = "query($r: String!) { threads(resourceId: $r) { total threads { id } } }"
    assert (await api.execute(listing, r=old))["threads"] == {"total": 1, "threads": [{"id": stays}]}
    assert (await api.execute(listing, r=new))["threads"] == {"total": 1, "threads": [{"id": thread_id}]}
    resource = "query($r: String!) { resource(id: $r) { id threads { total } } }"
    assert (await api.execute(resource, r=new))["resource"] == {"id": new, "threads": {"total": 1}}
    # Recall of the thread as its new resource's (counts moved along), not the old one's.
    counted = "query($t: ID!, $r: String) { recall(threadId: $t, resourceId: $r, perPage: 1) { total } }"
    assert (await api.execute(counted, t=thread_id, r=new))["recall"]["total"] == 4
    refused = await error(api, counted, t=thread_id, r=old)
    assert refused["extensions"]["code"] == "FORBIDDEN"
    assert refused["message"] == (
        f"Thread with id {thread_id} is for resource with id {new} but resource {old} was queried."
    )
    # Working memory: the thread's went with it, the resource's stayed.
    assert (await api.execute(WM_GET, t=thread_id, r=new, c=THREAD_SCOPE))[
        "workingMemory"
    ] == "# thread notes"
    assert (await api.execute(WM_GET, t=stays, r=old, c=ON))["workingMemory"] == "# old resource notes"
    assert (await api.execute(WM_GET, t=thread_id, r=new, c=ON))["workingMemory"] is None

    # Already the resource's: returned as it is (updatedAt unchanged), as in Mastra.
    assert (await api.execute(TRANSFER, t=thread_id, r=new))["updateThreadResourceId"] == moved
    ghost = uid("ghost")
    got = await error(api, TRANSFER, t=ghost, r=new)
    assert (got["extensions"]["code"], got["message"]) == ("NOT_FOUND", f'Thread "{ghost}" not found')
    for bad in ("", " "):
        got = await error(api, TRANSFER, t=thread_id, r=bad)
        assert (got["extensions"]["code"], got["message"]) == (
            "BAD_USER_INPUT",
            "resourceId must be a non-empty string.",
        )
    got = await error(api, TRANSFER, t=thread_id, r="x" * 1025)
    assert got["extensions"]["code"] == "BAD_USER_INPUT" and got["extensions"]["limit"] == "maxIdBytes"
    assert await thread_of(api, thread_id) == moved  # nothing written by the refused calls


async def test_updated_at_follows_every_write(api: Api) -> None:
    thread_id, resource_id = await new_thread(api, createdAt=at(0))
    other, _ = await new_thread(api, resourceId=resource_id, createdAt=at(0))

    async def updated(tid: str) -> str:
        thread = await thread_of(api, tid)
        assert thread is not None and thread["createdAt"] == at(0)  # never moves
        return thread["updatedAt"]

    await api.execute(SAVE, m=[text_message(thread_id=thread_id, id=f"{thread_id}-m")])
    after_save = await updated(thread_id)
    assert after_save > at(0)
    await asyncio.sleep(0.01)
    await api.execute(UPDATE, m=[{"id": f"{thread_id}-m", "threadId": other}])
    assert await updated(thread_id) > after_save and await updated(other) > at(0)
    after_move = await updated(other)
    await asyncio.sleep(0.01)
    await api.execute(DELETE, ids=[f"{thread_id}-m"])
    assert await updated(other) > after_move
    before = await updated(thread_id)
    await asyncio.sleep(0.01)
    await api.execute(
        "mutation($i: UpdateThreadInput!) { updateThread(input: $i) { id } }", i={"id": thread_id}
    )
    assert await updated(thread_id) > before


# ---------------------------------------------------------------------------------------------- messages
async def test_update_messages_merges_content_as_mastra_does(api: Api) -> None:
    thread_id, resource_id = await new_thread(api)
    mid = f"{thread_id}-u1"
    await api.execute(
        SAVE,
        m=[
            text_message(
                thread_id=thread_id, id=mid, text="orig", metadata={"a": 1, "b": 2}, created_at=at(1)
            )
        ],
    )
    merged = (await api.execute(UPDATE, m=[{"id": mid, "content": {"metadata": {"b": 3, "c": 4}}}]))[
        "updateMessages"
    ]
    assert merged[0]["content"]["raw"] == {
        "format": 2,
        "parts": [{"type": "text", "text": "orig"}],
        "metadata": {"a": 1, "b": 3, "c": 4},
    }
    replaced = (
        await api.execute(UPDATE, m=[{"id": mid, "content": {"parts": [{"type": "text", "text": "new"}]}}])
    )["updateMessages"][0]
    assert replaced["content"]["raw"]["parts"] == [{"type": "text", "text": "new"}]
    assert replaced["content"]["raw"]["metadata"] == {"a": 1, "b": 3, "c": 4}
    assert replaced["createdAt"] == at(1)
    # role and type; createdAt never changes; {id} alone returns the row unchanged; unknown ids skipped.
    got = (
        await api.execute(
            UPDATE,
            m=[
                {"id": mid, "role": "assistant", "type": "v3"},
                {"id": uid("unknown"), "role": "user"},
                {"id": mid},
            ],
        )
    )["updateMessages"]
    assert [(m["id"], m["role"], m["type"], m["createdAt"]) for m in got] == [(mid, "assistant", "v3", at(1))]
    assert (await api.execute(UPDATE, m=[{"id": uid("unknown")}]))["updateMessages"] == []
    stored = (await recall(api, thread_id))[0]
    assert (stored["role"], stored["type"], stored["createdAt"], stored["resourceId"]) == (
        "assistant",
        "v3",
        at(1),
        resource_id,
    )


async def test_update_messages_reclassifies_signals(api: Api) -> None:
    thread_id, _ = await new_thread(api)
    mid = f"{thread_id}-s"
    await api.execute(SAVE, m=[text_message(thread_id=thread_id, id=mid)])
    signal = {"parts": [{"type": "data-signal", "data": {"type": "notification"}}]}
    got = (await api.execute(UPDATE, m=[{"id": mid, "content": signal}]))["updateMessages"][0]
    assert got["signalType"] == "NOTIFICATION"
    q = "query($t: ID!) { recall(threadId: $t, hideSignals: {all: true}) { messages { id } } }"
    assert (await api.execute(q, t=thread_id))["recall"]["messages"] == []
    reminder = {"parts": [{"type": "text", "text": "<system-reminder>x</system-reminder>"}]}
    got = (await api.execute(UPDATE, m=[{"id": mid, "content": reminder}]))["updateMessages"][0]
    assert (got["signalType"], got["isSystemReminder"]) == ("SYSTEM_REMINDER", True)
    assert await recall(api, thread_id) == []  # hidden by default now
    got = (await api.execute(UPDATE, m=[{"id": mid, "role": "assistant"}]))["updateMessages"][0]
    assert (got["signalType"], got["isSystemReminder"]) == (None, False)


async def test_update_messages_moves_between_threads(api: Api) -> None:
    source, _ = await new_thread(api)
    target, target_resource = await new_thread(api)
    mid = f"{source}-mv"
    await api.execute(SAVE, m=[text_message(thread_id=source, id=mid, created_at=at(7))])
    moved = (await api.execute(UPDATE, m=[{"id": mid, "threadId": target}]))["updateMessages"][0]
    # The target thread's owner becomes the message's resource unless one is given.
    assert (moved["threadId"], moved["resourceId"], moved["createdAt"]) == (target, target_resource, at(7))
    assert await recall(api, source) == []
    assert [m["id"] for m in await recall(api, target)] == [mid]
    explicit = await api.execute(UPDATE, m=[{"id": mid, "threadId": source, "resourceId": "r-x"}])
    assert explicit["updateMessages"][0]["resourceId"] == "r-x"


async def test_an_id_given_twice_in_one_save_is_saved_once_where_its_last_copy_says(api: Api) -> None:
    first, _ = await new_thread(api)
    second, second_resource = await new_thread(api)
    third, _ = await new_thread(api)
    stored = f"{first}-kept"
    await api.execute(SAVE, m=[text_message(thread_id=first, id=stored, created_at=at(1))])
    batch = []
    # One new id first given in the third thread, one already stored in the first thread.
    for mid, origin in ((f"{first}-new", third), (stored, first)):
        batch += [
            text_message(thread_id=origin, id=mid, text="first copy", created_at=at(2)),
            text_message(thread_id=second, id=f"{mid}-between", created_at=at(3)),
            text_message(thread_id=second, id=mid, text="last copy", created_at=at(4)),
        ]
    before = await thread_of(api, third)
    assert before is not None
    await asyncio.sleep(0.002)  # updatedAt has millisecond precision
    saved = (await api.execute(SAVE, m=batch))["saveMessages"]["messages"]
    # Each id once (its last version, with the first one's createdAt, as Mastra stores it): the first
    # and third threads, which no message of the batch ends up in, are not ones the save checks (it
    # used to: CONFLICT, "retry", every time), but are touched, as every thread the batch names is in
    # Mastra.
    assert sorted(m["id"] for m in saved) == sorted({m["id"] for m in batch})
    in_second = {m["id"]: m for m in await recall(api, second)}
    assert sorted(in_second) == sorted(m["id"] for m in saved)
    assert {m["resourceId"] for m in in_second.values()} == {second_resource}
    assert {in_second[i]["content"]["raw"]["parts"][0]["text"] for i in (f"{first}-new", stored)} == {
        "last copy"
    }
    assert (in_second[f"{first}-new"]["createdAt"], in_second[stored]["createdAt"]) == (at(2), at(1))
    assert await recall(api, first) == await recall(api, third) == []
    after = await thread_of(api, third)
    assert after is not None and after["updatedAt"] > before["updatedAt"]
    totals = await api.execute(
        "query($a: ID!, $b: ID!) { a: recall(threadId: $a) { total } b: recall(threadId: $b) { total } }",
        a=first,
        b=second,
    )
    assert (totals["a"]["total"], totals["b"]["total"]) == (0, 4)  # maintained counts, moved too


async def test_an_empty_id_is_generated_as_in_mastra(api: Api) -> None:
    # Mastra's createThread, cloneThread and saveMessages read "" as no id (`id || generate()`).
    resource_id = uid("r")
    created = (await api.execute(CREATE, i={"id": "", "resourceId": resource_id}))["createThread"]
    assert len(created["id"]) == 36 and await thread_of(api, created["id"]) is not None
    saved = await api.execute(
        SAVE,
        m=[
            text_message(thread_id=created["id"], id="", text=t, created_at=at(n)) for n, t in enumerate("ab")
        ],
    )
    ids = [m["id"] for m in saved["saveMessages"]["messages"]]
    assert len(set(ids)) == 2 and all(len(i) == 36 for i in ids)  # each its own
    assert [m["id"] for m in await recall(api, created["id"])] == ids
    clone = await api.execute(CLONE, i={"sourceThreadId": created["id"], "newThreadId": ""})
    clone_id = clone["cloneThread"]["thread"]["id"]
    assert len(clone_id) == 36 and clone_id != created["id"]
    assert len(await recall(api, clone_id)) == 2
    # Blank ids are refused, and write nothing.
    for document, variables, message in (
        (CREATE, {"i": {"id": "  ", "resourceId": resource_id}}, "id must not be blank when given."),
        (CLONE, {"i": {"sourceThreadId": created["id"], "newThreadId": " "}}, "newThreadId must not be"),
    ):
        errors = await api.errors(document, **variables)
        assert errors[0]["extensions"]["code"] == "BAD_USER_INPUT" and message in errors[0]["message"]
    listing = "query($r: String!) { threads(resourceId: $r) { total } }"
    assert (await api.execute(listing, r=resource_id))["threads"]["total"] == 2


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"threadId": " "}, "messages[1].threadId must be a non-empty string."),
        ({"id": "  "}, "messages[1].id must not be blank when given."),
        ({"role": ""}, "messages[1].role must be a non-empty string."),
        ({"resourceId": ""}, "messages[1].resourceId must be a non-empty string when given."),
        ({"resourceId": "  "}, "messages[1].resourceId must be a non-empty string when given."),
        ({"content": "text"}, "messages[1].content must be an object"),
    ],
)
async def test_save_messages_validation(api: Api, fields: dict[str, Any], message: str) -> None:
    thread_id, _ = await new_thread(api)
    good = text_message(thread_id=thread_id, id=f"{thread_id}-ok")
    got = await error(api, SAVE, m=[good, {**text_message(thread_id=thread_id), **fields}])
    assert got["extensions"]["code"] == "BAD_USER_INPUT" and message in got["message"]
    assert await recall(api, thread_id) == []  # the valid message beside it is not saved either


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([{"id": ""}], "messages[0].id must be a non-empty string."),
        ([{"id": "x", "content": [1]}], "messages[0].content must be an object"),
        ([{"id": "x", "role": " "}], "messages[0].role must be a non-empty string when given."),
        ([{"id": "x", "threadId": ""}], "messages[0].threadId must be a non-empty string when given."),
    ],
)
async def test_update_messages_validation(api: Api, items: list[dict[str, Any]], message: str) -> None:
    got = await error(api, UPDATE, m=items)
    assert got["extensions"]["code"] == "BAD_USER_INPUT" and message in got["message"]


async def test_a_failed_update_writes_nothing(api: Api) -> None:
    thread_id, _ = await new_thread(api)
    first, second = await seed(api, thread_id, 2)
    before = await recall(api, thread_id)
    updated_at = (await thread_of(api, thread_id))["updatedAt"]
    got = await error(
        api,
        UPDATE,
        m=[
            {"id": first, "content": {"parts": [{"type": "text", "text": "changed"}]}, "role": "assistant"},
            {"id": second, "content": {"format": 3}},  # valid JSON, invalid merged content
        ],
    )
    assert got["extensions"]["code"] == "BAD_USER_INPUT"
    assert got["message"] == "messages[1].content.format must be 2."
    assert await recall(api, thread_id) == before
    assert (await thread_of(api, thread_id))["updatedAt"] == updated_at


async def test_delete_messages(api: Api) -> None:
    thread_id, _ = await new_thread(api)
    ids = await seed(api, thread_id, 3)
    got = (await api.execute(DELETE, ids=[ids[0], "unknown", ids[2], ids[0]]))["deleteMessages"]
    assert got["deleted"] == 2 and sorted(got["ids"]) == sorted([ids[0], ids[2]])
    assert [m["id"] for m in await recall(api, thread_id)] == [ids[1]]
    assert (await api.execute(DELETE, ids=[]))["deleteMessages"] == {"deleted": 0, "ids": []}
    assert (await api.execute(DELETE, ids=["unknown"]))["deleteMessages"]["deleted"] == 0
    got = await error(api, DELETE, ids=[ids[1], ""])
    assert (got["extensions"]["code"], got["message"]) == (
        "BAD_USER_INPUT",
        "All message IDs must be non-empty strings",
    )
    assert [m["id"] for m in await recall(api, thread_id)] == [ids[1]]  # nothing half-done


# ------------------------------------------------------------------------------------------ working memory
async def test_working_memory_disabled_and_scope_errors(api: Api) -> None:
    thread_id, resource_id = await new_thread(api)
    assert (await api.execute(WM_GET, t=thread_id, r=resource_id))["workingMemory"] is None
    got = await error(api, WM_UPDATE, t=thread_id, r=resource_id, w="x")
    assert (got["extensions"]["code"], got["message"]) == (
        "BAD_USER_INPUT",
        "Working memory is not enabled for this memory instance",
    )
    resource_error = (
        "Memory error: Resource-scoped working memory is enabled but no resourceId was provided. "
        "Either provide a resourceId or explicitly set workingMemory.scope to 'thread'."
    )
    for query, args in ((WM_UPDATE, {"w": "x"}), (WM_GET, {})):
        got = await error(api, query, t=thread_id, c=ON, **args)
        assert (got["extensions"]["code"], got["message"]) == ("BAD_USER_INPUT", resource_error)
    got = await error(api, WM_UPDATE, t="ghost", w="x", c=THREAD_SCOPE)
    assert (got["extensions"]["code"], got["message"]) == ("NOT_FOUND", "Thread ghost not found")
    got = await error(api, WM_UPDATE, t=thread_id, r="intruder", w="x", c=THREAD_SCOPE)
    assert got["extensions"]["code"] == "FORBIDDEN"
    assert (await api.execute(WM_GET, t="ghost", c=THREAD_SCOPE))["workingMemory"] is None
    # A blank resource is one nobody could name again: refused, and nothing is written.
    got = await error(api, WM_UPDATE, t=thread_id, r="  ", w="x", c=ON)
    assert (got["extensions"]["code"], got["message"]) == (
        "BAD_USER_INPUT",
        "resourceId must be a non-empty string when given.",
    )
    assert (await api.execute(WM_GET, t=thread_id, r="  ", c=ON))["workingMemory"] is None


async def test_resource_scoped_working_memory(api: Api) -> None:
    thread_id, resource_id = await new_thread(api)
    sibling, _ = await new_thread(api, resourceId=resource_id)
    got = (await api.execute(WM_UPDATE, t=thread_id, r=resource_id, w="# R1 data", c=ON))[
        "updateWorkingMemory"
    ]
    assert (got["scope"], got["resourceId"], got["workingMemory"]) == ("RESOURCE", resource_id, "# R1 data")
    assert (await api.execute(WM_GET, t=sibling, r=resource_id, c=ON))["workingMemory"] == "# R1 data"
    assert (await api.execute(WM_GET, t=thread_id, r=uid("other"), c=ON))["workingMemory"] is None
    q = """query($id: String!, $t: ID!, $c: MemoryConfigInput) {
      resource(id: $id) { id workingMemory(memoryConfig: $c) off: workingMemory metadata createdAt updatedAt
        threads(perPage: 1) { total hasMore threads { id } } }
      thread(id: $t) { workingMemory(memoryConfig: $c) } }"""
    data = await api.execute(q, id=resource_id, t=sibling, c=ON)
    resource = data["resource"]
    assert (resource["id"], resource["workingMemory"], resource["off"]) == (resource_id, "# R1 data", None)
    assert resource["metadata"] == {} and resource["updatedAt"] >= resource["createdAt"]
    assert resource["threads"]["total"] == 2 and resource["threads"]["hasMore"] is True
    assert data["thread"]["workingMemory"] == "# R1 data"
    # Thread scope does not read the resource's.
    assert (await api.execute(q, id=resource_id, t=sibling, c=THREAD_SCOPE))["thread"][
        "workingMemory"
    ] is None
    assert (await api.execute(q, id=uid("nobody"), t=sibling))["resource"] is None
    # An update may create the resource row (metadata {}).
    fresh = uid("r")
    await api.execute(WM_UPDATE, t="any", r=fresh, w="# new", c=ON)
    assert (await api.execute(q, id=fresh, t=sibling, c=ON))["resource"]["workingMemory"] == "# new"


async def test_thread_scoped_working_memory(api: Api) -> None:
    thread_id, resource_id = await new_thread(api, metadata={"i": 0, "tag": "a"})
    got = (await api.execute(WM_UPDATE, t=thread_id, w="# T0 data", c=THREAD_SCOPE))["updateWorkingMemory"]
    assert (got["scope"], got["resourceId"], got["workingMemory"]) == ("THREAD", resource_id, "# T0 data")
    thread = await thread_of(api, thread_id)
    assert thread["metadata"] == {"i": 0, "tag": "a", "workingMemory": "# T0 data"}
    assert (await api.execute(WM_GET, t=thread_id, r=resource_id, c=THREAD_SCOPE))[
        "workingMemory"
    ] == "# T0 data"
    assert (await api.execute(WM_GET, t=thread_id, r=resource_id, c=ON))["workingMemory"] is None
    q = "query($t: ID!, $c: MemoryConfigInput) { thread(id: $t) { workingMemory(memoryConfig: $c) } }"
    assert (await api.execute(q, t=thread_id, c=THREAD_SCOPE))["thread"]["workingMemory"] == "# T0 data"


async def test_working_memory_templates(api: Api) -> None:
    assert (await api.execute(TEMPLATE))["workingMemoryTemplate"] is None  # disabled
    default = (await api.execute(TEMPLATE, c=ON))["workingMemoryTemplate"]
    assert default == {"format": "MARKDOWN", "content": DEFAULT_WORKING_MEMORY_TEMPLATE.strip()}
    assert default["content"].endswith("- **Projects**:")
    custom = {"workingMemory": {"enabled": True, "template": "  # Custom\n- a:\n"}}
    assert (await api.execute(TEMPLATE, c=custom))["workingMemoryTemplate"]["content"] == "# Custom\n- a:"
    schema = {"type": "object", "properties": {"name": {"type": "string"}}}
    got = await api.execute(TEMPLATE, c={"workingMemory": {"enabled": True, "schema": schema}})
    assert got["workingMemoryTemplate"] == {
        "format": "JSON",
        "content": '{"type":"object","properties":{"name":{"type":"string"}},'
        '"$schema":"http://json-schema.org/draft-07/schema#"}',
    }
    bad = await error(api, TEMPLATE, c={"workingMemory": {"enabled": True, "schema": {"type": 12}}})
    assert bad["extensions"]["code"] == "BAD_USER_INPUT" and "not a valid JSON Schema" in bad["message"]


async def test_json_schema_working_memory_is_validated(api: Api) -> None:
    thread_id, resource_id = await new_thread(api)
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "prefs": {"type": "object"}},
        "additionalProperties": False,
    }
    config = {"workingMemory": {"enabled": True, "schema": schema}}

    async def update(value: str, mode: str = "REPLACE") -> dict[str, Any]:
        return (await api.execute(WM_UPDATE, t=thread_id, r=resource_id, w=value, c=config, mode=mode))[
            "updateWorkingMemory"
        ]

    assert json.loads((await update('{"name": "Ada"}'))["workingMemory"]) == {"name": "Ada"}
    for value, fragment in (
        ('{"name": 1}', 'at /name: 1 is not of type "string"'),
        ('{"age": 3}', "Additional properties are not allowed"),
        ("not json", "must be a JSON document"),
        ("[1]", 'is not of type "object"'),
    ):
        got = await error(api, WM_UPDATE, t=thread_id, r=resource_id, w=value, c=config)
        assert got["extensions"]["code"] == "BAD_USER_INPUT" and fragment in got["message"], got
    # MERGE: Mastra's deep merge (null deletes), validated after merging.
    await update('{"prefs": {"tea": true, "milk": true}}', "MERGE")
    merged = await update('{"prefs": {"milk": null, "sugar": 0}}', "MERGE")
    assert json.loads(merged["workingMemory"]) == {"name": "Ada", "prefs": {"tea": True, "sugar": 0}}
    got = await error(api, WM_UPDATE, t=thread_id, r=resource_id, w='{"x": 1}', c=config, mode="MERGE")
    assert "Additional properties" in got["message"]
    # Only an object merges (anything else answered success and changed nothing).
    for value in ("[1, 2]", '"text"', "null", "3"):
        got = await error(api, WM_UPDATE, t=thread_id, r=resource_id, w=value, c=config, mode="MERGE")
        assert got["extensions"]["code"] == "BAD_USER_INPUT" and "MERGE takes a JSON object" in got["message"]
    got = await error(api, WM_UPDATE, t=thread_id, r=resource_id, w="line", c=config, mode="APPEND")
    assert got["extensions"]["code"] == "BAD_USER_INPUT"
    got = await error(api, WM_UPDATE, t=thread_id, r=resource_id, w="{}", c=ON, mode="MERGE")
    assert got["extensions"]["code"] == "BAD_USER_INPUT"
    # Nothing of the failed calls was stored.
    stored = (await api.execute(WM_GET, t=thread_id, r=resource_id, c=config))["workingMemory"]
    assert json.loads(stored) == {"name": "Ada", "prefs": {"tea": True, "sugar": 0}}


async def test_thread_metadata_working_memory_goes_to_the_resource_or_nowhere(api: Api) -> None:
    # Mastra's saveThread and updateThread copy a string metadata.workingMemory to the resource (working
    # memory on, resource scope). A value the schema refuses refuses the whole call: no thread, no copy.
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "additionalProperties": False}
    config = {"workingMemory": {"enabled": True, "schema": schema}}
    create = """mutation($i: CreateThreadInput!, $c: MemoryConfigInput) {
      createThread(input: $i, memoryConfig: $c) { id metadata } }"""
    change = """mutation($i: UpdateThreadInput!, $c: MemoryConfigInput) {
      updateThread(input: $i, memoryConfig: $c) { id title metadata } }"""
    resource_id, thread_id = uid("r"), uid("t")
    await api.execute(
        create,
        i={"id": thread_id, "resourceId": resource_id, "metadata": {"workingMemory": '{"name": "Ann"}'}},
        c=config,
    )
    assert (await api.execute(WM_GET, t=thread_id, r=resource_id, c=config))[
        "workingMemory"
    ] == '{"name": "Ann"}'
    refused = uid("t")
    got = await error(
        api,
        create,
        i={"id": refused, "resourceId": resource_id, "metadata": {"workingMemory": '{"age": 3}'}},
        c=config,
    )
    assert got["extensions"]["code"] == "BAD_USER_INPUT" and "Additional properties" in got["message"]
    assert await thread_of(api, refused) is None
    got = await error(
        api, change, i={"id": thread_id, "title": "New", "metadata": {"workingMemory": "x"}}, c=config
    )
    assert got["extensions"]["code"] == "BAD_USER_INPUT" and "must be a JSON document" in got["message"]
    thread = await thread_of(api, thread_id)
    assert (
        thread is not None
        and thread["title"] == ""
        and thread["metadata"] == {"workingMemory": '{"name": "Ann"}'}
    )
    # An unknown thread: NOT_FOUND, and the resource's working memory is not touched either.
    got = await error(
        api, change, i={"id": uid("none"), "metadata": {"workingMemory": '{"name": "Bo"}'}}, c=config
    )
    assert got["extensions"]["code"] == "NOT_FOUND"
    assert (await api.execute(WM_GET, t=thread_id, r=resource_id, c=config))[
        "workingMemory"
    ] == '{"name": "Ann"}'
    # Accepted: the thread's metadata and the resource's working memory change together.
    updated = (
        await api.execute(
            change, i={"id": thread_id, "metadata": {"workingMemory": '{"name": "Cy"}'}}, c=config
        )
    )["updateThread"]
    assert updated["metadata"] == {"workingMemory": '{"name": "Cy"}'}
    assert (await api.execute(WM_GET, t=thread_id, r=resource_id, c=config))[
        "workingMemory"
    ] == '{"name": "Cy"}'
    # Without working memory on (the server's default here), metadata is only metadata.
    await api.execute(change, i={"id": thread_id, "metadata": {"workingMemory": "# plain"}})
    assert (await api.execute(WM_GET, t=thread_id, r=resource_id, c=config))[
        "workingMemory"
    ] == '{"name": "Cy"}'


async def test_an_empty_schema_is_a_schema(api: Api) -> None:
    # {} (any JSON document) was taken for no schema: Markdown working memory, any text, any depth.
    thread_id, resource_id = await new_thread(api)
    config = {"workingMemory": {"enabled": True, "schema": {}}}
    template = (await api.execute(TEMPLATE, c=config))["workingMemoryTemplate"]
    assert template["format"] == "JSON"
    for value in ("not json", "[" * 100 + "]" * 100):
        got = await error(api, WM_UPDATE, t=thread_id, r=resource_id, w=value, c=config)
        assert got["extensions"]["code"] == "BAD_USER_INPUT", got
    stored = await api.execute(
        WM_UPDATE, t=thread_id, r=resource_id, w='{"any": [1]}', c=config, mode="MERGE"
    )
    assert json.loads(stored["updateWorkingMemory"]["workingMemory"]) == {"any": [1]}


async def test_a_working_memory_schema_refers_only_within_itself(api: Api, tmp_path: Path) -> None:
    # Python jsonschema's default resolver fetched any $ref: a file of the server's (its content came
    # back in the error) or any host (on the event loop, without a timeout: one that never answered froze
    # it).
    thread_id, resource_id = await new_thread(api)
    secret = tmp_path / "secret.json"
    secret.write_text('{"properties": {"k": {"const": "s3cr3t"}}}')
    fetched: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fetched.append(self.path)
            body = b'{"type": "string"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:
            pass

    listener = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=listener.serve_forever, daemon=True).start()
    try:
        await api.execute(WM_UPDATE, t=thread_id, r=resource_id, w='{"k": "kept"}', c=ON)
        remote = f"http://127.0.0.1:{listener.server_address[1]}/schema.json"
        for schema, fragment in (
            ({"$ref": secret.as_uri()}, "cannot be resolved"),
            ({"properties": {"k": {"$ref": remote}}}, "cannot be resolved"),
            ({"$ref": "#/definitions/nope"}, "cannot be resolved"),
            ({"$schema": 5, "type": "object"}, 'at /$schema: 5 is not of type "string"'),
            ({"$schema": f"{remote}#"}, "cannot be resolved"),
        ):
            config = {"workingMemory": {"enabled": True, "schema": schema}}
            got = await error(api, WM_UPDATE, t=thread_id, r=resource_id, w='{"k": "x"}', c=config)
            assert got["extensions"]["code"] == "BAD_USER_INPUT" and fragment in got["message"], got
            assert "s3cr3t" not in got["message"]
    finally:
        listener.shutdown()
        listener.server_close()
    assert fetched == []
    # A reference within the schema still works.
    local = {
        "definitions": {"name": {"type": "string"}},
        "type": "object",
        "properties": {"k": {"$ref": "#/definitions/name"}},
    }
    config = {"workingMemory": {"enabled": True, "schema": local}}
    got = await error(api, WM_UPDATE, t=thread_id, r=resource_id, w='{"k": 1}', c=config)
    assert 'at /k: 1 is not of type "string"' in got["message"]
    done = await api.execute(WM_UPDATE, t=thread_id, r=resource_id, w='{"k": "new"}', c=config)
    assert json.loads(done["updateWorkingMemory"]["workingMemory"]) == {"k": "new"}


async def test_a_schema_that_refers_to_itself_checks_every_level(api: Api) -> None:
    thread_id, resource_id = await new_thread(api)
    tree = {"type": "object", "properties": {"child": {"$ref": "#"}, "n": {"type": "integer"}}}
    config = {"workingMemory": {"enabled": True, "schema": tree}}
    got = await error(
        api, WM_UPDATE, t=thread_id, r=resource_id, w='{"child": {"child": {"n": "x"}}}', c=config
    )
    assert got["extensions"]["code"] == "BAD_USER_INPUT"
    assert 'at /child/child/n: "x" is not of type "integer"' in got["message"], got
    done = await api.execute(WM_UPDATE, t=thread_id, r=resource_id, w='{"child": {"n": 2}}', c=config)
    assert json.loads(done["updateWorkingMemory"]["workingMemory"]) == {"child": {"n": 2}}
    # A schema that is only a reference to itself allows anything; it no longer loops.
    config = {"workingMemory": {"enabled": True, "schema": {"$ref": "#"}}}
    done = await api.execute(WM_UPDATE, t=thread_id, r=resource_id, w='{"any": [1]}', c=config)
    assert json.loads(done["updateWorkingMemory"]["workingMemory"]) == {"any": [1]}


async def test_a_schema_pattern_cannot_hold_the_server(api: Api) -> None:
    # Python's re backtracks without bound: with these patterns each check below would take 2**40 steps
    # or more, on the event loop, and no other request would be answered meanwhile. Patterns run on a
    # linear-time engine instead.
    thread_id, resource_id = await new_thread(api)
    await api.execute(WM_UPDATE, t=thread_id, r=resource_id, w='{"k": "kept"}', c=ON)
    subject = "a" * 48 + "!"
    for schema, fragment in (
        ({"properties": {"k": {"pattern": "(a+)+$"}}}, "at /k: " + json.dumps(subject) + " does not match"),
        ({"patternProperties": {"(a+)+$": {"type": "string"}}, "additionalProperties": False}, "not allowed"),
        ({"propertyNames": {"pattern": "^(a|a)*b$"}}, "does not match"),
    ):
        config = {"workingMemory": {"enabled": True, "schema": schema}}
        value = json.dumps({"k": subject} if "properties" in schema else {subject: 1})
        got = await error(api, WM_UPDATE, t=thread_id, r=resource_id, w=value, c=config)
        assert got["extensions"]["code"] == "BAD_USER_INPUT" and fragment in got["message"], got
    # A backtracking engine with a limit per match was not enough: this pattern backtracks some 130,000
    # steps on each string before it matches, and under `not` nothing fails early, so every string of
    # an array was tried: 30 KB held the event loop for 11.9 s, and this document for minutes. Its
    # backreference needs backtracking, so the schema is refused before the document is looked at.
    pattern = "^(?:(a|a)*\\1b|.*)$"
    config = {
        "workingMemory": {
            "enabled": True,
            "schema": {"not": {"type": "array", "items": {"type": "string", "pattern": pattern}}},
        }
    }
    strings = json.dumps(["a" * 17 + "!"] * 20_000)
    got = await error(api, WM_UPDATE, t=thread_id, r=resource_id, w=strings, c=config)
    assert got["message"].startswith(
        "workingMemory.schema has a pattern at /not/items/pattern with lookaround or a backreference"
    ), got["message"][:200]
    # Lookaround and backreferences, which the linear engine lacks, are refused with the schema.
    for pattern in ("^(a|a)*\\1$", "^(\\w)\\1(?=!)", "(?<!x)y"):
        config = {"workingMemory": {"enabled": True, "schema": {"properties": {"k": {"pattern": pattern}}}}}
        got = await error(api, WM_UPDATE, t=thread_id, r=resource_id, w='{"k": "aa!"}', c=config)
        assert got["extensions"]["code"] == "BAD_USER_INPUT", got
        assert got["message"].startswith(
            "workingMemory.schema has a pattern at /properties/k/pattern with lookaround or a backreference"
        ), got
    config = {"workingMemory": {"enabled": True, "schema": {"properties": {"k": {"pattern": "^(\\w)\\w!$"}}}}}
    got = await error(api, WM_UPDATE, t=thread_id, r=resource_id, w='{"k": "ab"}', c=config)
    assert "does not match" in got["message"], got
    done = await api.execute(WM_UPDATE, t=thread_id, r=resource_id, w='{"k": "aa!"}', c=config)
    assert json.loads(done["updateWorkingMemory"]["workingMemory"]) == {"k": "aa!"}
    bad = {"workingMemory": {"enabled": True, "schema": {"properties": {"k": {"pattern": "(unclosed"}}}}}
    got = await error(api, WM_UPDATE, t=thread_id, r=resource_id, w='{"k": "x"}', c=bad)
    assert "not a valid JSON Schema at /properties/k/pattern" in got["message"], got
    assert json.loads((await api.execute(WM_GET, t=thread_id, r=resource_id, c=ON))["workingMemory"]) == {
        "k": "aa!"
    }


async def test_json_working_memory_nests_at_most_64_levels(api: Api) -> None:
    # A MERGE writes the document back with orjson, which refuses more than 254 levels: such a merge was
    # an internal error, and a merge of 1,000 levels overflowed the recursion of the merge itself.
    thread_id, resource_id = await new_thread(api)
    config = {"workingMemory": {"enabled": True, "schema": {"type": "object"}}}

    def nested(levels: int) -> str:
        return '{"a":' * (levels - 1) + "{}" + "}" * (levels - 1)

    done = await api.execute(WM_UPDATE, t=thread_id, r=resource_id, w=nested(64), c=config, mode="MERGE")
    assert done["updateWorkingMemory"]["workingMemory"] == nested(64)
    for levels in (65, 300, 1000):
        for mode in ("REPLACE", "MERGE"):
            got = await error(
                api, WM_UPDATE, t=thread_id, r=resource_id, w=nested(levels), c=config, mode=mode
            )
            assert got["extensions"]["code"] == "BAD_USER_INPUT", got
            assert "nests deeper than 64 levels" in got["message"], got
    # Text stored before a schema was set is not merged into when it nests too deep.
    await api.execute(WM_UPDATE, t=thread_id, r=resource_id, w=nested(300), c=ON)
    got = await error(api, WM_UPDATE, t=thread_id, r=resource_id, w='{"b": 1}', c=config, mode="MERGE")
    assert got["extensions"]["code"] == "BAD_USER_INPUT" and "REPLACE it" in got["message"], got
    assert (await api.execute(WM_GET, t=thread_id, r=resource_id, c=ON))["workingMemory"] == nested(300)


async def test_concurrent_replaces_end_in_the_last_committed_write(api: Api) -> None:
    thread_id, resource_id = await new_thread(api)
    values = [f"# value {n}" for n in range(20)]
    results = await asyncio.gather(
        *(fresh(api).execute(WM_UPDATE, t=thread_id, r=resource_id, w=v, c=ON) for v in values)
    )
    # Each answer is the value its own (serialised) write left; the last commit is the stored one.
    assert sorted(r["updateWorkingMemory"]["workingMemory"] for r in results) == sorted(values)
    last = max(results, key=lambda r: r["updateWorkingMemory"]["updatedAt"])["updateWorkingMemory"]
    stored = (await api.execute(WM_GET, t=thread_id, r=resource_id, c=ON))["workingMemory"]
    assert stored in values
    latest = [r for r in results if r["updateWorkingMemory"]["updatedAt"] == last["updatedAt"]]
    assert stored in [r["updateWorkingMemory"]["workingMemory"] for r in latest]


@pytest.mark.parametrize("scope", ["RESOURCE", "THREAD"])
async def test_concurrent_appends_never_lose_an_update(api: Api, scope: str) -> None:
    thread_id, resource_id = await new_thread(api)
    config = {"workingMemory": {"enabled": True, "scope": scope}}
    lines = [f"- fact {n}" for n in range(20)]
    results = await asyncio.gather(
        *(
            fresh(api).execute(WM_UPDATE, t=thread_id, r=resource_id, w=line, c=config, mode="APPEND")
            for line in lines
        )
    )
    answers = sorted((r["updateWorkingMemory"]["workingMemory"] for r in results), key=len)
    stored = (await api.execute(WM_GET, t=thread_id, r=resource_id, c=config))["workingMemory"]
    assert sorted(stored.split("\n")) == sorted(lines)  # every line exactly once
    # The writes were serialised: each answer extends the previous one, the last is what is stored.
    for shorter, longer in itertools.pairwise(answers):
        assert longer.startswith(shorter + "\n")
    assert answers[-1] == stored


async def test_concurrent_merges_and_thread_updates_never_lose_an_update(api: Api) -> None:
    thread_id, resource_id = await new_thread(api, metadata={"base": True})
    config = {"workingMemory": {"enabled": True, "scope": "THREAD", "schema": {"type": "object"}}}
    await asyncio.gather(
        *(
            fresh(api).execute(WM_UPDATE, t=thread_id, w=json.dumps({f"k{n}": n}), c=config, mode="MERGE")
            for n in range(20)
        ),
        *(
            fresh(api).execute(
                "mutation($i: UpdateThreadInput!) { updateThread(input: $i) { id } }",
                i={"id": thread_id, "metadata": {f"m{n}": n}},
            )
            for n in range(20)
        ),
    )
    metadata = (await thread_of(api, thread_id))["metadata"]
    assert json.loads(metadata.pop("workingMemory")) == {f"k{n}": n for n in range(20)}
    assert metadata == {"base": True, **{f"m{n}": n for n in range(20)}}
    assert resource_id


async def test_ids_too_long_to_store_are_refused_alike_on_both_engines(api: Api) -> None:
    # PostgreSQL's index entries hold at most 2,704 bytes: longer ids were INTERNAL_SERVER_ERROR there
    # (and stored on SQLite).
    thread_id, resource_id = await new_thread(api)
    long, fits = "x" * 1025, "é" * 512  # 1,025 and 1,024 bytes
    refusals = [
        (CREATE, {"i": {"id": long, "resourceId": resource_id}}, "id"),
        (CREATE, {"i": {"resourceId": long}}, "resourceId"),
        (SAVE, {"m": [text_message(thread_id=thread_id, id=long)]}, "messages[0].id"),
        (SAVE, {"m": [text_message(thread_id=thread_id, resource_id=long)]}, "messages[0].resourceId"),
        (CLONE, {"i": {"sourceThreadId": thread_id, "newThreadId": long}}, "newThreadId"),
        (WM_UPDATE, {"t": thread_id, "r": long, "w": "# notes", "c": ON}, "resourceId"),
    ]
    for query, variables, where in refusals:
        [error] = await api.errors(query, **variables)
        assert error["extensions"]["code"] == "BAD_USER_INPUT", error
        assert error["extensions"]["limit"] == "maxIdBytes", error
        assert error["message"] == f"{where} may be at most 1024 bytes long (UTF-8).", error
    # At the bound, every one is stored.
    await api.execute(CREATE, i={"id": fits, "resourceId": fits})
    await api.execute(SAVE, m=[text_message(thread_id=fits, id=fits[:-1] + "a", resource_id=fits)])
    await api.execute(CLONE, i={"sourceThreadId": fits, "newThreadId": fits[:-1] + "b"})
    await api.execute(WM_UPDATE, t=fits, r=fits, w="# notes", c=ON)
