"""The GraphQL API over real HTTP (uvicorn in a child process), with the gql client."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support import Api, ServerProcess, at, text_message, uid

RECALL = """
query Recall($threadId: ID!, $resourceId: String, $perPage: PerPage, $page: Int, $include: [IncludeInput!],
             $filter: RecallFilter, $orderBy: MessageOrderBy, $hideSignals: HideSignalsInput,
             $threadConfig: MemoryConfigInput, $vectorSearchString: String) {
  recall(threadId: $threadId, resourceId: $resourceId, perPage: $perPage, page: $page, include: $include,
         filter: $filter, orderBy: $orderBy, hideSignals: $hideSignals, threadConfig: $threadConfig,
         vectorSearchString: $vectorSearchString) {
    total page perPage hasMore
    messages { id role type createdAt threadId resourceId }
  }
}
"""
CREATE = """mutation($input: CreateThreadInput!) {
  createThread(input: $input) { id resourceId title metadata createdAt updatedAt } }"""
SAVE = (
    "mutation($m: [MessageInput!]!) { saveMessages(messages: $m) { acknowledged messages { id createdAt } } }"
)


async def new_thread(api: Api, **extra: object) -> tuple[str, str]:
    thread_id, resource_id = uid("t"), uid("r")
    await api.execute(CREATE, input={"id": thread_id, "resourceId": resource_id, **extra})
    return thread_id, resource_id


async def test_health_endpoints(server: ServerProcess) -> None:
    async with httpx.AsyncClient() as client:
        assert (await client.get(f"{server.url}/healthz")).text == "ok"
        ready = await client.get(f"{server.url}/readyz")
        body = ready.json()
        # Chroma is reported too when semantic recall is configured (scripts/test configures the model).
        assert ready.status_code == 200 and body["ready"] is True and body["database"] == "ok"


async def test_create_thread_and_conflict(api: Api) -> None:
    thread_id, resource_id = uid("t"), uid("r")
    created = await api.execute(
        CREATE,
        input={
            "id": thread_id,
            "resourceId": resource_id,
            "title": "Trip",
            "metadata": {"a": 1},
            "createdAt": "2026-01-01T00:00:00Z",
        },
    )
    assert created["createThread"] == {
        "id": thread_id,
        "resourceId": resource_id,
        "title": "Trip",
        "metadata": {"a": 1},
        "createdAt": "2026-01-01T00:00:00.000Z",
        "updatedAt": "2026-01-01T00:00:00.000Z",
    }
    errors = await api.errors(CREATE, input={"id": thread_id, "resourceId": "other"})
    assert errors[0]["extensions"]["code"] == "CONFLICT"
    assert errors[0]["message"] == f"Thread with id {thread_id} already exists."
    # The original is untouched.
    got = await api.execute("query($id: ID!) { thread(id: $id) { resourceId title } }", id=thread_id)
    assert got["thread"] == {"resourceId": resource_id, "title": "Trip"}


async def test_update_thread_merges_metadata(api: Api) -> None:
    thread_id, _ = await new_thread(api, metadata={"a": 1, "b": 2}, title="x")
    q = "mutation($i: UpdateThreadInput!) { updateThread(input: $i) { title metadata createdAt updatedAt } }"
    got = (await api.execute(q, i={"id": thread_id, "metadata": {"b": 3, "c": 4}}))["updateThread"]
    assert got["title"] == "x" and got["metadata"] == {"a": 1, "b": 3, "c": 4}
    assert got["updatedAt"] >= got["createdAt"]
    errors = await api.errors(q, i={"id": uid("missing"), "title": "y"})
    assert errors[0]["extensions"]["code"] == "NOT_FOUND"


async def test_save_and_recall_roundtrip(api: Api) -> None:
    thread_id, resource_id = await new_thread(api)
    messages = [
        text_message(
            thread_id=thread_id,
            id=f"{thread_id}-m{i}",
            created_at=at(i),
            text=f"hi {i}",
            role="user" if i % 2 == 0 else "assistant",
            metadata={"i": i, "even": i % 2 == 0},
        )
        for i in range(7)
    ]
    saved = (await api.execute(SAVE, m=messages))["saveMessages"]
    assert [m["id"] for m in saved["messages"]] == [m["id"] for m in messages]
    assert saved["messages"][0]["createdAt"] == "2026-01-01T00:00:00.000Z"

    result = (await api.execute(RECALL, threadId=thread_id, perPage=3, page=1))["recall"]
    assert [m["id"][-2:] for m in result["messages"]] == ["m1", "m2", "m3"]
    assert (result["total"], result["page"], result["perPage"], result["hasMore"]) == (7, 1, 3, True)
    assert result["messages"][0] == {
        "id": f"{thread_id}-m1",
        "role": "assistant",
        "type": "v2",
        "createdAt": "2026-01-01T00:00:01.000Z",
        "threadId": thread_id,
        "resourceId": resource_id,
    }
    every = (
        await api.execute(RECALL, threadId=thread_id, perPage=False, filter={"metadata": {"even": True}})
    )["recall"]
    assert [m["id"][-2:] for m in every["messages"]] == ["m0", "m2", "m4", "m6"]
    assert every["perPage"] is False and every["hasMore"] is False

    windowed = (
        await api.execute(
            RECALL,
            threadId=thread_id,
            perPage=1,
            orderBy={"direction": "ASC"},
            include=[{"id": f"{thread_id}-m4", "withPreviousMessages": 1, "withNextMessages": 1}],
            filter={"dateRange": {"start": at(0), "end": at(0)}},
        )
    )["recall"]
    assert [m["id"][-2:] for m in windowed["messages"]] == ["m0", "m3", "m4", "m5"]
    assert windowed["total"] == 1


async def test_recall_options_reach_the_engine(api: Api) -> None:
    thread_id, resource_id = await new_thread(api)
    await api.execute(
        SAVE,
        m=[
            text_message(thread_id=thread_id, id=f"{thread_id}-a", created_at=at(1)),
            text_message(
                thread_id=thread_id,
                id=f"{thread_id}-sig",
                created_at=at(2),
                role="signal",
                metadata={"signal": {"type": "state"}},
            ),
            text_message(
                thread_id=thread_id,
                id=f"{thread_id}-rem",
                created_at=at(3),
                text="<system-reminder>x</system-reminder>",
            ),
        ],
    )

    async def visible(**args: object) -> list[str]:
        result = (await api.execute(RECALL, threadId=thread_id, **args))["recall"]
        return [m["id"].rsplit("-", 1)[1] for m in result["messages"]]

    assert await visible() == ["a", "sig"]
    assert await visible(hideSignals={"all": True}) == ["a"]
    assert await visible(hideSignals={"all": False}) == ["a", "sig", "rem"]
    assert await visible(hideSignals={"types": ["STATE"]}) == ["a", "rem"]
    assert await visible(threadConfig={"lastMessages": 1}) == []  # the newest row is a hidden reminder
    assert await visible(threadConfig={"lastMessages": False}) == []
    q = f'{{ recall(threadId: "{thread_id}", includeSystemReminders: true) {{ messages {{ id }} }} }}'
    assert len((await api.execute(q))["recall"]["messages"]) == 3
    assert await visible(
        resourceId=resource_id,
        threadConfig={
            "semanticRecall": {
                "options": {"topK": 2, "messageRange": {"window": {"before": 1}}, "scope": "THREAD"}
            }
        },
        vectorSearchString="anything",
    ) == ["a", "sig"]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        ({"perPage": -1}, "BAD_USER_INPUT", "perPage must be >= 0"),
        ({"perPage": 2.5}, "BAD_USER_INPUT", "perPage must be >= 0"),
        ({"page": -1}, "BAD_USER_INPUT", "page must be >= 0"),
        ({"filter": {"metadata": {"a-b": 1}}}, "BAD_USER_INPUT", 'Invalid metadata filter key "a-b".'),
        ({"filter": {"metadata": [1]}}, "BAD_USER_INPUT", "Metadata filter must be an object."),
        ({"resourceId": "someone-else"}, "FORBIDDEN", "but resource someone-else was queried."),
        (
            {"threadConfig": {"lastMessages": -1}},
            "BAD_USER_INPUT",
            "lastMessages must be a finite non-negative",
        ),
        (
            {"threadConfig": {"semanticRecall": {"enabled": True}}, "vectorSearchString": "x"},
            "BAD_USER_INPUT",
            "Memory error: Resource-scoped semantic recall is enabled but no resourceId was provided.",
        ),
        (
            {"hideSignals": {"all": True, "types": ["STATE"]}},
            "BAD_USER_INPUT",
            "must specify exactly one key",
        ),
        ({"filter": {"dateRange": {"start": "yesterday"}}}, "BAD_USER_INPUT", "Invalid DateTime"),
        (
            {"filter": {"dateRange": {"end": "9999-12-31T23:59:59-14:00"}}},
            "BAD_USER_INPUT",
            "it must fall within the years 1 to 9999 in UTC",
        ),
        ({"perPage": True}, "BAD_USER_INPUT", "PerPage must be a non-negative integer or false"),
    ],
)
async def test_bad_input_is_bad_user_input(
    api: Api, args: dict[str, object], code: str, message: str
) -> None:
    thread_id, _ = await new_thread(api)
    errors = await api.errors(RECALL, threadId=thread_id, **args)
    assert errors[0]["extensions"]["code"] == code, errors
    assert message in errors[0]["message"]
    assert "Traceback" not in str(errors)


@pytest.mark.parametrize(
    ("document", "variables"),
    [
        ('query($p: Int) { threads(resourceId: "r", page: $p) { total } }', {"p": None}),
        ('query($p: PerPage) { threads(resourceId: "r", perPage: $p) { total } }', {"p": None}),
        (
            "query($r: String!, $p: PerPage) { resource(id: $r) { messages(perPage: $p) { total } } }",
            {"p": None},
        ),
        ("query($d: SortDirection) { threads(orderBy: {direction: $d}) { total } }", {"d": None}),
        (
            "mutation($t: ID!, $m: WorkingMemoryUpdateMode) { updateWorkingMemory(threadId: $t,"
            ' workingMemory: "# Lost", mode: $m, memoryConfig: {workingMemory: {enabled: true,'
            " scope: THREAD}}) { workingMemory } }",
            {"m": None},
        ),
    ],
)
async def test_a_null_variable_where_an_argument_cannot_be_null_is_bad_user_input(
    api: Api, document: str, variables: dict[str, Any]
) -> None:
    # The document is valid (the argument has a default, so a nullable variable may stand for it); an
    # explicit null is refused only as the field runs, by graphql-core, which used to be masked as an
    # internal error.
    thread_id, resource_id = await new_thread(api)
    errors = await api.errors(document, t=thread_id, r=resource_id, **variables)
    assert errors[0]["extensions"]["code"] == "BAD_USER_INPUT", errors
    assert "has invalid value" in errors[0]["message"] and "not to be None" in errors[0]["message"]
    wm = await api.execute(
        "query($t: ID!) { thread(id: $t) { workingMemory(memoryConfig: {workingMemory: {enabled: true,"
        " scope: THREAD}}) } }",
        t=thread_id,
    )
    assert wm["thread"]["workingMemory"] is None  # nothing written


async def test_a_variable_not_given_inside_a_json_literal_is_left_out(api: Api) -> None:
    # As JavaScript's JSON.stringify reads graphql-js's undefined: a key is dropped, a list item is null
    # (it used to be refused: "Type is not JSON serializable: UndefinedType").
    thread_id = uid("t")
    created = await api.execute(
        "mutation($t: ID!, $x: String, $y: Int = 3) { createThread(input: {id: $t, resourceId: "
        '"r-json", metadata: {a: $x, b: [1, $x, $y], c: {d: $x, e: $y}, f: "kept"}}) { metadata } }',
        t=thread_id,
    )
    expected = {"b": [1, None, 3], "c": {"e": 3}, "f": "kept"}
    assert created["createThread"]["metadata"] == expected
    stored = await api.execute("query($t: ID!) { thread(id: $t) { metadata } }", t=thread_id)
    assert stored["thread"]["metadata"] == expected
    await api.execute(
        "mutation($t: ID!, $x: String) { saveMessages(messages: [{id: $t, threadId: $t, role: "
        '"user", content: {format: 2, parts: [{type: "text", text: "hi", extra: $x}], metadata: '
        "{k: 1, gone: $x}}}]) { messages { id } } }",
        t=thread_id,
    )
    found = await api.execute(
        "query($t: ID!, $x: String) { recall(threadId: $t, filter: {metadata: {k: 1, gone: $x}}) "
        "{ total messages { content { raw } } } }",
        t=thread_id,
    )
    assert found["recall"]["total"] == 1
    raw = found["recall"]["messages"][0]["content"]["raw"]
    assert raw["metadata"] == {"k": 1} and raw["parts"] == [{"type": "text", "text": "hi"}]


async def test_metadata_filters_take_up_to_64_keys(api: Api) -> None:
    # 300 keys used to overflow SQLite's expression depth (an internal error); now a bounded filter.
    wide = {f"k{n}": n for n in range(64)}
    thread_id, resource_id = await new_thread(api, metadata=wide)
    await api.execute(SAVE, m=[text_message(thread_id=thread_id, id=uid("m"), metadata=wide)])
    await api.execute(SAVE, m=[text_message(thread_id=thread_id, id=uid("m"), metadata={**wide, "k63": 0})])
    found = (await api.execute(RECALL, threadId=thread_id, filter={"metadata": wide}))["recall"]
    assert found["total"] == 1
    threads = "query($r: String!, $m: JSON) { threads(resourceId: $r, metadata: $m) { total } }"
    assert (await api.execute(threads, r=resource_id, m=wide))["threads"]["total"] == 1
    wider = {**wide, "k64": 64}
    for errors in (
        await api.errors(RECALL, threadId=thread_id, filter={"metadata": wider}),
        await api.errors(threads, r=resource_id, m=wider),
    ):
        assert errors[0]["extensions"]["code"] == "BAD_USER_INPUT", errors
        assert errors[0]["extensions"]["limit"] == "maxMetadataFilterKeys"
        assert errors[0]["extensions"]["max"] == 64
        assert "at most 64 keys, got 65" in errors[0]["message"]


async def test_metadata_filters_match_integers_past_2_53_exactly_as_saved(api: Api) -> None:
    # Saves keep such integers exact; the filter used to round them to doubles and so missed them.
    values = [2**53 + 1, 2**63 - 1, -(2**63)]
    thread_id, resource_id = await new_thread(api, metadata={"b": 2**53 + 1})
    for n, value in enumerate(values):
        await api.execute(
            SAVE, m=[text_message(thread_id=thread_id, id=f"{thread_id}-{n}", metadata={"b": value})]
        )
    threads = "query($r: String!, $m: JSON) { threads(resourceId: $r, metadata: $m) { total } }"
    for n, value in enumerate(values):
        found = (await api.execute(RECALL, threadId=thread_id, filter={"metadata": {"b": value}}))["recall"]
        assert [m["id"] for m in found["messages"]] == [f"{thread_id}-{n}"], value
    # Neighbours of an integer past 2^53 round to it as doubles, and do not match it here.
    for near in (2**53, 2**53 + 2, 2**63 - 2):
        found = (await api.execute(RECALL, threadId=thread_id, filter={"metadata": {"b": near}}))["recall"]
        assert found["total"] == 0, near
    assert (await api.execute(threads, r=resource_id, m={"b": 2**53 + 1}))["threads"]["total"] == 1
    assert (await api.execute(threads, r=resource_id, m={"b": 2**53}))["threads"]["total"] == 0


async def test_missing_thread_is_not_found(api: Api) -> None:
    errors = await api.errors(RECALL, threadId=uid("ghost"), resourceId="r")
    assert errors[0]["extensions"]["code"] == "NOT_FOUND"


async def test_failed_save_writes_nothing(api: Api) -> None:
    thread_id, _ = await new_thread(api)
    good = text_message(thread_id=thread_id, id=f"{thread_id}-ok", created_at=at(1))
    bad = {"threadId": thread_id, "role": "user", "content": {"format": 2, "parts": "nope"}}
    errors = await api.errors(SAVE, m=[good, bad])
    assert errors[0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert "messages[1].content.parts must be a list" in errors[0]["message"]
    assert (await api.execute(RECALL, threadId=thread_id))["recall"]["total"] == 0


async def test_upsert_keeps_created_at_and_position(api: Api) -> None:
    thread_id, _ = await new_thread(api)
    await api.execute(
        SAVE,
        m=[text_message(thread_id=thread_id, id=f"{thread_id}-{n}", created_at=at(5)) for n in ("z", "a")],
    )
    again = text_message(thread_id=thread_id, id=f"{thread_id}-z", created_at=at(100), text="edited")
    saved = (await api.execute(SAVE, m=[again]))["saveMessages"]["messages"][0]
    assert saved["createdAt"] == at(5)
    q = """query($t: ID!) {
      recall(threadId: $t) { messages { id content { parts { ... on TextPart { text } } } } } }"""
    got = (await api.execute(q, t=thread_id))["recall"]["messages"]
    assert [m["id"][-1] for m in got] == ["z", "a"] and got[0]["content"]["parts"] == [{"text": "edited"}]


async def test_transient_signals_are_acknowledged_not_stored(api: Api) -> None:
    thread_id, _ = await new_thread(api)
    transient = text_message(
        thread_id=thread_id, role="signal", metadata={"signal": {"type": "state", "transient": True}}
    )
    saved = (await api.execute(SAVE, m=[transient, text_message(thread_id=thread_id)]))["saveMessages"]
    assert saved["acknowledged"] == 1 and len(saved["messages"]) == 1
    assert (await api.execute(RECALL, threadId=thread_id))["recall"]["total"] == 1


async def test_typed_parts_and_raw_content(api: Api) -> None:
    thread_id, _ = await new_thread(api)
    parts = [
        {"type": "step-start"},
        {"type": "reasoning", "reasoning": "", "details": [{"type": "text", "text": "think"}]},
        {
            "type": "tool-invocation",
            "toolInvocation": {
                "state": "result",
                "toolCallId": "c1",
                "toolName": "getWeather",
                "args": {"q": "x"},
                "result": {"ok": True},
            },
        },
        {"type": "text", "text": "sunny"},
        {"type": "data-signal", "data": {"type": "notification"}},
        {"type": "file", "mimeType": "image/png", "data": "aGk="},
        {"type": "source", "source": {"url": "https://example.org"}},
        {"type": "mystery", "x": 1},
    ]
    await api.execute(SAVE, m=[text_message(thread_id=thread_id, role="assistant", parts=parts)])
    q = """query($t: ID!) { recall(threadId: $t) { messages {
      signalType isSystemReminder content { format raw parts {
      __typename
      ... on TextPart { text }
      ... on ReasoningPart { details }
      ... on ToolInvocationPart { toolInvocation { state toolCallId toolName args result } }
      ... on DataPart { name data }
      ... on FilePart { mimeType data }
      ... on SourcePart { source }
      ... on UnknownPart { type raw }
    } } } } }"""
    message = (await api.execute(q, t=thread_id))["recall"]["messages"][0]
    assert message["signalType"] == "NOTIFICATION" and message["isSystemReminder"] is False
    content = message["content"]
    assert content["format"] == 2 and content["raw"]["parts"] == parts
    assert [p["__typename"] for p in content["parts"]] == [
        "StepStartPart",
        "ReasoningPart",
        "ToolInvocationPart",
        "TextPart",
        "DataPart",
        "FilePart",
        "SourcePart",
        "UnknownPart",
    ]
    assert content["parts"][2]["toolInvocation"] == {
        "state": "result",
        "toolCallId": "c1",
        "toolName": "getWeather",
        "args": {"q": "x"},
        "result": {"ok": True},
    }
    assert content["parts"][4] == {
        "__typename": "DataPart",
        "name": "signal",
        "data": {"type": "notification"},
    }
    assert content["parts"][7] == {"__typename": "UnknownPart", "type": "mystery", "raw": parts[7]}


async def test_a_tool_step_beyond_graphql_int_reads_as_null(api: Api) -> None:
    # Content is free JSON; a step of 2^31 made every read of its message an internal error.
    thread_id, _ = await new_thread(api)
    steps = [2, 2**31 - 1, 2**31, -(2**31) - 1, 2**40, "two", 1.5, True]
    parts = [
        {"type": "tool-invocation", "toolInvocation": {"state": "call", "toolName": "x", "step": step}}
        for step in steps
    ]
    await api.execute(SAVE, m=[text_message(thread_id=thread_id, role="assistant", parts=parts)])
    q = """query($t: ID!) { recall(threadId: $t) { messages { content { parts {
      ... on ToolInvocationPart { toolInvocation { step } } } } } } }"""
    read = (await api.execute(q, t=thread_id))["recall"]["messages"][0]["content"]["parts"]
    assert [p["toolInvocation"]["step"] for p in read] == [2, 2**31 - 1, None, None, None, None, None, None]


async def test_instants_stay_within_the_years_the_api_reads_back(api: Api) -> None:
    # An offset used to carry an instant past year 9999 in UTC: stored, then written as 10000-01-01, a
    # value this API refused when it was sent back.
    thread_id, _ = await new_thread(api)
    for edge in ("9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00"):
        message = text_message(thread_id=thread_id, id=uid("m"), created_at=edge)
        errors = await api.errors(SAVE, m=[message])
        assert errors[0]["extensions"]["code"] == "BAD_USER_INPUT", errors
        assert "within the years 1 to 9999" in errors[0]["message"]
    for edge in ("9999-12-31T23:59:59.999Z", "0001-01-01T00:00:00.000Z"):
        await api.execute(SAVE, m=[text_message(thread_id=thread_id, id=uid("m"), created_at=edge)])
    recall = await api.execute(RECALL, threadId=thread_id, orderBy={"direction": "ASC"})
    stamps = [m["createdAt"] for m in recall["recall"]["messages"]]
    assert stamps == ["0001-01-01T00:00:00.000Z", "9999-12-31T23:59:59.999Z"]
    window = {"dateRange": {"start": stamps[0], "end": stamps[1]}}  # what it answered, sent back
    assert (await api.execute(RECALL, threadId=thread_id, filter=window))["recall"]["total"] == 2


async def test_threads_listing(api: Api) -> None:
    resource_id = uid("r")
    for n in range(3):
        await api.execute(
            CREATE,
            input={
                "id": f"{resource_id}-t{n}",
                "resourceId": resource_id,
                "createdAt": at(n),
                "metadata": {"n": n, "odd": n % 2 == 1},
            },
        )
    q = """query($r: String!, $p: PerPage, $page: Int, $o: ThreadOrderBy, $m: JSON) {
      threads(resourceId: $r, perPage: $p, page: $page, orderBy: $o, metadata: $m) {
        total page perPage hasMore threads { id } } }"""
    newest = (await api.execute(q, r=resource_id, p=2))["threads"]
    assert [t["id"][-2:] for t in newest["threads"]] == ["t2", "t1"]
    assert (newest["total"], newest["hasMore"]) == (3, True)
    oldest = await api.execute(q, r=resource_id, p=False, o={"field": "CREATED_AT", "direction": "ASC"})
    assert [t["id"][-2:] for t in oldest["threads"]["threads"]] == ["t0", "t1", "t2"]
    odd = (await api.execute(q, r=resource_id, m={"odd": True}))["threads"]
    assert [t["id"][-2:] for t in odd["threads"]] == ["t1"]
    errors = await api.errors(q, r=resource_id, p=False, page=1)
    assert errors[0]["message"] == "page must be 0 when perPage is false"


async def test_several_operations_need_an_operation_name(server: ServerProcess) -> None:
    document = "query A { a: __typename } query B { b: __typename }"
    async with httpx.AsyncClient() as client:
        unnamed = await client.post(f"{server.url}/graphql", json={"query": document})
        named = await client.post(f"{server.url}/graphql", json={"query": document, "operationName": "B"})
    body = unnamed.json()
    assert body.get("data") is None
    assert (
        body["errors"][0]["message"] == "Must provide operation name if query contains multiple operations."
    )
    assert body["errors"][0]["extensions"]["code"] == "OPERATION_RESOLUTION_FAILURE"
    assert named.json() == {"data": {"b": "Query"}}


@pytest.mark.parametrize(
    ("method", "kwargs", "status", "code", "message"),
    [
        (
            "POST",
            {"json": {"query": "{ __typename }", "operationName": "Nope"}},
            400,
            "OPERATION_RESOLUTION_FAILURE",
            'Unknown operation named "Nope".',
        ),
        ("POST", {"json": {"query": ""}}, 400, "BAD_REQUEST", "No GraphQL query found in the request"),
        ("POST", {"json": {"variables": {}}}, 400, "BAD_REQUEST", "No GraphQL query found in the request"),
        (
            "POST",
            {"content": b"{not json", "headers": {"content-type": "application/json"}},
            400,
            "BAD_REQUEST",
            "Unable to parse request body as JSON",
        ),
        (
            "GET",
            {"params": {"query": 'mutation { deleteThread(threadId: "x") }'}},
            405,
            "METHOD_NOT_ALLOWED",
            "mutations are not allowed when using GET",
        ),
        # These were bare 500s from Strawberry's parsing (and closed the keep-alive connection). It reads
        # any media type containing application/json as JSON: such bodies got past the front's checks,
        # which matched application/json exactly.
        *(
            (
                "POST",
                {"content": body, "headers": {"content-type": media}},
                400,
                "BAD_REQUEST",
                message,
            )
            for media in ("application/json", "application/jsonx")
            for body, message in (
                (
                    b'{"query": "{ __typename }", "variables": {"v": ' + b"[" * 4000 + b"]" * 4000 + b"}}",
                    "The request body nests",
                ),
                (
                    b'{"query": "subscription { threadUpdated(resourceId: \\"a\\") { kind } }"}',
                    "Subscriptions are served",
                ),
                (b'"hello"', "The request body must be a JSON object."),
                (b"5", "The request body must be a JSON object."),
                (b"null", "The request body must be a JSON object."),
                (b'{"query": "\xff\xfe"}', "Unable to parse request body as JSON"),
                (
                    b'{"query": "{ __typename }", "variables": {"v": ' + b"[" * 400 + b"]" * 400 + b"}}",
                    "The request body nests JSON deeper than 64 levels.",
                ),
            )
        ),
        *(
            (
                "POST",
                {"json": {"query": query, **extra}},
                400,
                "BAD_REQUEST",
                "Subscriptions are served over WebSocket",
            )
            for query, extra in (
                ('subscription { messageSaved(threadId: "t") { kind } }', {}),
                (
                    'query Q { __typename } subscription S { messageSaved(threadId: "t") { kind } }',
                    {"operationName": "S"},
                ),
            )
        ),
        (
            "GET",
            {"params": {"query": 'subscription { messageSaved(threadId: "t") { kind } }'}},
            400,
            "BAD_REQUEST",
            "Subscriptions are served over WebSocket",
        ),
        # The compiled read path answered these; the normal path refuses them.
        (
            "POST",
            {"json": {"query": '{ thread(id: "t1") { id } }', "extensions": [1]}},
            400,
            "BAD_REQUEST",
            "The GraphQL operation's `extensions` must be an object or null",
        ),
        # Strawberry took a number as the name of an unknown operation ("5").
        *(
            (
                "POST",
                {"json": body},
                400,
                "BAD_REQUEST",
                "The GraphQL operation's `operationName` must be a string or null",
            )
            for body in (
                {"query": "query A { __typename }", "operationName": 5},
                [{"query": "{ __typename }"}, {"query": '{ thread(id: "t1") { id } }', "operationName": []}],
            )
        ),
        # Starlette's own plain-text "Method Not Allowed" before.
        *(
            (method, {}, 405, "METHOD_NOT_ALLOWED", f"{method} is not served here")
            for method in ("PUT", "DELETE", "PATCH", "OPTIONS")
        ),
        # GET: the last of repeated parameters is the one Strawberry runs, and its JSON is screened too.
        (
            "GET",
            {
                "params": [
                    ("query", "{ __typename }"),
                    ("query", 'subscription { threadUpdated(resourceId: "a") { kind } }'),
                ]
            },
            400,
            "BAD_REQUEST",
            "Subscriptions are served over WebSocket",
        ),
        *(
            (
                "GET",
                {"params": {"query": "{ __typename }", name: "[" * depth + "]" * depth}},
                400,
                "BAD_REQUEST",
                "The request's variables or extensions nest",
            )
            for name in ("variables", "extensions")
            for depth in (65, 3000)
        ),
    ],
)
async def test_requests_refused_before_execution_are_graphql_errors(
    server: ServerProcess, method: str, kwargs: dict[str, Any], status: int, code: str, message: str
) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.request(method, f"{server.url}/graphql", **kwargs)
    assert response.status_code == status
    assert response.headers["content-type"].startswith("application/json")
    (error,) = response.json()["errors"]
    # With the request's id, as every error has (the same as X-Request-ID).
    expected = {"code": code, "requestId": response.headers["x-request-id"]}
    assert error["message"].startswith(message) and error["extensions"] == expected
    assert response.json() == {"errors": [error]}
    if status == 405:  # the methods that would do
        assert response.headers["allow"] == ("POST" if method == "GET" else "GET, POST")
        assert method == "GET" or error["message"].endswith("send GraphQL requests with GET or POST.")


async def test_head_is_refused_like_the_other_methods(server: ServerProcess) -> None:
    # It answered 405 without an Allow header while every other 405 advertised HEAD as served.
    async with httpx.AsyncClient() as client:
        response = await client.head(f"{server.url}/graphql", params={"query": "{ __typename }"})
        put = await client.put(f"{server.url}/graphql")
    assert response.status_code == put.status_code == 405
    assert response.headers["allow"] == put.headers["allow"] == "GET, POST"


async def test_graphiql_is_served(server: ServerProcess) -> None:
    async with httpx.AsyncClient() as client:
        page = await client.get(f"{server.url}/graphql", headers={"accept": "text/html"})
    assert page.status_code == 200 and "graphiql" in page.text.lower()


async def test_body_limit(server: ServerProcess) -> None:
    async with httpx.AsyncClient() as client:
        resp = await client.post(
            f"{server.url}/graphql",
            content=b"x" * (9 * 1024 * 1024),
            headers={"content-type": "application/json"},
        )
    assert resp.status_code == 413
    assert resp.json()["errors"][0]["extensions"]["code"] == "PAYLOAD_TOO_LARGE"


async def test_internal_errors_are_masked(api: Api) -> None:
    errors = await api.errors(
        '{ recall(threadId: "x", filter: {metadata: {}}, include: [{id: "a", withPreviousMessages: -1}])'
        " { total } }"
    )
    assert errors[0]["extensions"]["code"] == "BAD_USER_INPUT"


async def test_operation_resolution_failures_are_400_alike(server: ServerProcess) -> None:
    """Several operations and no operationName was an HTTP 200, an unknown operationName a 400 (and the
    refusals before execution had no requestId): both are request errors, alike."""
    two = "query A { __typename } query B { __typename }"
    async with httpx.AsyncClient() as client:
        for body in ({"query": two}, {"query": two, "operationName": "C"}):
            response = await client.post(f"{server.url}/graphql", json=body)
            assert response.status_code == 400, response.text
            (error,) = response.json()["errors"]
            assert error["extensions"] == {
                "code": "OPERATION_RESOLUTION_FAILURE",
                "requestId": response.headers["x-request-id"],
            }
        chosen = await client.post(f"{server.url}/graphql", json={"query": two, "operationName": "B"})
    assert (chosen.status_code, chosen.json()) == (200, {"data": {"__typename": "Query"}})


def test_the_front_parses_under_the_token_limit() -> None:
    """The front's subscription check parsed without a limit: the word anywhere (a comment) made a
    parse of a million tokens hold the event loop for seconds before the view refused the document."""
    from web.compiled import _subscription

    query = "subscription { " + "a " * 100 + "}  # a comment"
    assert _subscription({"query": query}, None) is True
    assert _subscription({"query": query}, 50) is False  # over the limit: the view says QUERY_TOO_COMPLEX
