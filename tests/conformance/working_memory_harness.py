"""Working memory against the real Mastra's, case by case.

`working_memory_oracle.mjs` beside this file runs Mastra's `Memory` (its LibSQL store, no vector store,
no embedder) over a few threads, one case after another on one store; RecallQL answers the same cases, in
the same order, over HTTP. The pieces:

* `PROFILES`: the server-wide working-memory defaults a run has (Mastra's `new Memory({options})`,
  RecallQL's `RECALLQL_WORKING_MEMORY`): off (both ship so), on in thread scope with a template, on with a
  JSON Schema;
* `working_memory_dataset`: the threads (some with `metadata.workingMemory` already set) and the profile;
* `working_memory_queries`: fixed edge cases, then seeded ones, each under a memory config: with the
  defaults off, disabled (no config, `enabled: false`, a scope alone), resource scope (the default, or
  named), thread scope, a custom Markdown template, a JSON Schema; with them on, overrides of each
  (off, either scope, a template, another schema, `{}`). Operations: `updateWorkingMemory` (REPLACE,
  Mastra's only mode) with what its payload reports and the thread as then stored (metadata, whether
  `updatedAt` moved), `workingMemory` in either scope (another thread's or resource's too, unknown ones,
  missing ids), `Resource.workingMemory`, `Thread.workingMemory` and `workingMemoryTemplate`; values
  empty, blank, padded, multi-line, non-ASCII, long, JSON;
* `run_working_memory_oracle`, `server_env`, `run_working_memory_queries`,
  `compare_working_memory_results`: the answers compared exactly, error texts too.

Left out, because RecallQL differs on purpose (README, "Threads, messages and working memory"):
* with a schema, a value that is no JSON document or does not validate (`BAD_USER_INPUT`; Mastra stores
  any text), and a schema that is itself invalid, such as `{"type": 12}` (`BAD_USER_INPUT`; Mastra
  serves it as the template): every schema and value here is valid;
* in thread scope, a `resourceId` that does not own the thread (`FORBIDDEN`; Mastra ignores it): the
  cases give the owner or none;
* a whitespace-only `resourceId` (`BAD_USER_INPUT`, as everywhere in the API; Mastra stores under it);
* `mode: APPEND` and `MERGE` (RecallQL's own);
* a memoryConfig with `threads.generateTitle` (Mastra throws `The threads.generateTitle option has been
  moved. ...`; RecallQL accepts it) or with an explicit null (omitted, as everywhere in the contract;
  Mastra's deepMerge sets it);
* in resource scope, a value that starts with `{` or `[`, parses as JSON and is not as JSON.stringify would
  write it (`{"a": 1}`): Mastra's LibSQL store hands it back re-serialised (`{"a":1}`), an artefact of its
  row reader that its other stores do not share; RecallQL returns the text as written, as they do;
* reading, in thread scope, a `metadata.workingMemory` that is not a string (Mastra returns the number or
  object as it is; a GraphQL `String` cannot carry it, RecallQL answers null): the thread holding one is
  only read after an update replaced it.
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

from gql import GraphQLRequest
from gql.transport.exceptions import TransportQueryError

from tests.conformance.harness import compare_cases, failed, run_each, run_listing_oracle, to_variables

HERE = Path(__file__).resolve().parent

UPDATE = """
mutation Update(
  $threadId: ID!, $resourceId: String, $workingMemory: String!, $memoryConfig: MemoryConfigInput
) {
  updateWorkingMemory(threadId: $threadId, resourceId: $resourceId, workingMemory: $workingMemory,
                      memoryConfig: $memoryConfig) { scope threadId resourceId workingMemory }
}
"""
THREAD_STATE = "query State($id: ID!) { thread(id: $id) { metadata updatedAt } }"
CREATE_THREAD = """
mutation Create($input: CreateThreadInput!, $memoryConfig: MemoryConfigInput) {
  createThread(input: $input, memoryConfig: $memoryConfig) { id resourceId metadata }
}
"""
CLONE_THREAD = """
mutation Clone($input: CloneThreadInput!, $memoryConfig: MemoryConfigInput) {
  cloneThread(input: $input, memoryConfig: $memoryConfig) { thread { id resourceId } }
}
"""
UPDATE_THREAD = """
mutation Change($input: UpdateThreadInput!, $memoryConfig: MemoryConfigInput) {
  updateThread(input: $input, memoryConfig: $memoryConfig) { id resourceId metadata }
}
"""
GET = """
query Get($threadId: ID!, $resourceId: String, $memoryConfig: MemoryConfigInput) {
  workingMemory(threadId: $threadId, resourceId: $resourceId, memoryConfig: $memoryConfig)
}
"""
RESOURCE = """
query Resource($id: String!, $memoryConfig: MemoryConfigInput) {
  resource(id: $id) { workingMemory(memoryConfig: $memoryConfig) }
}
"""
THREAD = """
query Thread($id: ID!, $memoryConfig: MemoryConfigInput) {
  thread(id: $id) { workingMemory(memoryConfig: $memoryConfig) }
}
"""
TEMPLATE = """
query Template($memoryConfig: MemoryConfigInput) {
  workingMemoryTemplate(memoryConfig: $memoryConfig) { format content }
}
"""

# ------------------------------------------------------------------------------------------- dataset
SEEDED = "# Seeded thread notes\n- likes: tea"
# The thread whose metadata.workingMemory is a number: only read once an update has replaced it.
ODD_THREAD = "t-c1"


def working_memory_dataset(profile: str = "off") -> dict:
    def thread(i: int, id: str, resource: str, metadata: dict | None) -> dict:
        t: dict[str, Any] = {"id": id, "resourceId": resource, "createdAt": f"2026-01-01T00:0{i}:00.000Z"}
        if metadata is not None:
            t["metadata"] = metadata
        return t

    return {
        "threads": [
            thread(0, "t-a1", "res-a", {"topic": "travel"}),
            thread(1, "t-a2", "res-a", {"workingMemory": SEEDED}),
            thread(2, "t-b1", "res-b", None),
            thread(3, "t-b2", "res-b", {"workingMemory": "", "pinned": True}),
            thread(4, ODD_THREAD, "res-c", {"workingMemory": 7, "n": 1}),
        ],
        "messages": [],
        "memoryOptions": PROFILES[profile],
    }


# ------------------------------------------------------------------------------------------- configs
def _wm(**options: Any) -> dict:
    return {"workingMemory": options}


CUSTOM_TEMPLATE = "\n  # Profile\n- **Name**:\n- **Plan**:\n\n"
PROFILE = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "prefs": {"type": "object"}},
    "additionalProperties": False,
}
DISABLED: list[dict | None] = [
    None,
    _wm(enabled=False),
    _wm(scope="thread"),
    _wm(enabled=False, scope="resource", template="# Off"),
]
RESOURCE_SCOPE = [_wm(enabled=True), _wm(enabled=True, scope="resource")]
THREAD_SCOPE = [_wm(enabled=True, scope="thread")]
TEMPLATED = [_wm(enabled=True, template=CUSTOM_TEMPLATE), _wm(enabled=True, scope="thread", template="# T")]
SCHEMAS = [
    _wm(enabled=True, schema=PROFILE),
    _wm(enabled=True, schema={}),
    _wm(enabled=True, scope="thread", schema=PROFILE),
]
# Valid documents for each schema above (an invalid one is a deliberate difference). Resource scope gets
# them as JSON.stringify writes them, or not starting with { or [: Mastra's LibSQL store reads a resource's
# working memory that starts with { or [ and parses as JSON back re-serialised (its row reader parses every
# such text column; getResourceById stringifies the object again), so '{"a": 1}' comes back '{"a":1}'.
# Its PostgreSQL, MSSQL and in-memory stores, and RecallQL, return the text as written (deliberate).
PROFILE_VALUES = [
    '{"name":"Ada"}',
    '{"name":"Ada","prefs":{"tea":true,"sugar":0}}',
    '  {"name": "Spaced"}  \n',
    "{}",
]
ANY_JSON_VALUES = [
    '[1,2,"three"]',
    '"just text"',
    "null",
    "3.50",
    ' [1, 2.0, {"b": null}]',
    '{"any":[1,{"b":null}]}',
]
# In thread scope (the thread's metadata, a JSON column) any layout comes back as it is, in Mastra too.
THREAD_ONLY_VALUES = ['{\n  "name": "Pretty",\n  "prefs": {}\n}', '{"name": "Ada", "prefs": {"tea": true}}']
MARKDOWN_VALUES = [
    "# User\n- **Name**: Alice",
    "",
    " ",
    "\n\n",
    "  padded value  ",
    "\ttabbed\n",
    "line one\r\nline two",
    "café ☕ 𝄞 — ünïcödé",
    "# User Information\n- **First Name**: \n- **Last Name**: ",
    "<working_memory>tagged</working_memory>",
    "null",
    "- " + "long line " * 300,
]
RESOURCES = ["res-a", "res-b", "res-c", "res-x", "res with spaces", "résumé-ü"]
THREADS = ["t-a1", "t-a2", "t-b1", "t-b2"]


# The server-wide defaults each profile runs under (Mastra: `new Memory({options})`; RecallQL:
# RECALLQL_WORKING_MEMORY), and what a call's memoryConfig may then change.
SERVER_TEMPLATE = "\n# Server notes\n- **Topic**:\n"
SERVER_SCHEMA = {
    "type": "object",
    "properties": {"plan": {"type": "string"}, "seats": {"type": "integer", "minimum": 1.0}},
    "required": ["plan"],
}
LIST_SCHEMA = {"type": "array", "items": {"type": "string"}}
PROFILES: dict[str, dict] = {
    "off": {},
    "thread-default": {"workingMemory": {"enabled": True, "scope": "thread", "template": SERVER_TEMPLATE}},
    "schema-default": {"workingMemory": {"enabled": True, "schema": SERVER_SCHEMA}},
}
# Calls under an enabled default: nothing, off, either scope, another template, another schema (which
# replaces the default's: Mastra's getMergedThreadConfig does not merge schemas), the empty schema.
OVERRIDES: list[dict | None] = [
    None,
    None,
    _wm(enabled=False),
    _wm(scope="resource"),
    _wm(scope="thread"),
    _wm(template="# Call template"),
    _wm(schema=LIST_SCHEMA),
    _wm(scope="thread", schema=LIST_SCHEMA),
    _wm(schema={}),
]
# schema -> (values for any scope, values only for thread scope)
SCHEMA_VALUES: list[tuple[dict, list[str], list[str]]] = [
    (PROFILE, PROFILE_VALUES, THREAD_ONLY_VALUES),
    ({}, ANY_JSON_VALUES, THREAD_ONLY_VALUES),
    (
        SERVER_SCHEMA,
        ['{"plan":"pro"}', '{"plan":"team","seats":3}', ' {"plan": "free"}'],
        ['{ "plan": "x" }'],
    ),
    (LIST_SCHEMA, ['["a","b"]', "[]", ' ["x", "y"]'], ['[ "spaced" ]']),
]


def effective(options: dict, config: dict | None) -> dict:
    """The workingMemory options Mastra's getMergedThreadConfig gives: the call's deep-merged over the
    defaults, except a schema, which replaces the default's."""
    merged = _deep_merge(options.get("workingMemory") or {}, (config or {}).get("workingMemory") or {})
    schema = ((config or {}).get("workingMemory") or {}).get("schema")
    if schema is not None:
        merged["schema"] = schema
    return merged


def _deep_merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for key, value in override.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _deep_merge(out[key], value) if both else value
    return out


def _scope(wm: dict) -> str | None:
    """ "thread", "resource" or None (disabled), of effective workingMemory options."""
    return (wm.get("scope") or "resource") if wm.get("enabled") else None


def _values(wm: dict) -> list[str]:
    if wm.get("schema") is None:
        return MARKDOWN_VALUES
    for schema, values, thread_only in SCHEMA_VALUES:
        if schema == wm["schema"]:
            return values + thread_only if _scope(wm) == "thread" else values
    raise AssertionError(f"no values for schema {wm['schema']}")


def _case(name: str, op: str, config: dict | None = None, **args: Any) -> dict:
    if config is not None:
        args["memoryConfig"] = config
    return {"name": name, "args": {"op": op, **args}}


# ------------------------------------------------------------------------------------------- cases
def _fixed_cases() -> list[dict]:
    on, thread, schema = RESOURCE_SCOPE[0], THREAD_SCOPE[0], SCHEMAS[0]
    cases = [
        # Templates: every config family, the default, yours trimmed ("" is the default, blank trims
        # to ""), a schema wins over a template, and schemas printed as JSON.stringify prints them.
        *(_case(f"template-disabled-{i}", "template", c) for i, c in enumerate(DISABLED)),
        _case("template-default", "template", on),
        _case("template-thread", "template", thread),
        _case("template-custom", "template", TEMPLATED[0]),
        _case("template-empty", "template", _wm(enabled=True, template="")),
        _case("template-blank", "template", _wm(enabled=True, template=" \n\t ")),
        _case("template-schema", "template", schema),
        _case("template-schema-empty", "template", SCHEMAS[1]),
        _case("template-schema-over-template", "template", _wm(enabled=True, template="# T", schema=PROFILE)),
        _case("template-schema-disabled", "template", _wm(enabled=False, schema=PROFILE)),
        _case(
            "template-schema-draft07-given",
            "template",
            _wm(
                enabled=True, schema={"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}
            ),
        ),
        _case(
            "template-schema-2020-12",
            "template",
            _wm(
                enabled=True,
                schema={"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "array"},
            ),
        ),
        _case(
            "template-schema-rich",
            "template",
            _wm(
                enabled=True,
                scope="thread",
                schema={
                    "type": "object",
                    "title": "User ☕",
                    "description": 'quotes " and \\ and\nnewlines',
                    "required": ["n"],
                    "properties": {
                        "n": {"type": "number", "minimum": 0, "maximum": 100.5, "default": 1},
                        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 10},
                        "nested": {"type": "object", "properties": {"deep": {"type": ["string", "null"]}}},
                        "ref": {"$ref": "#/definitions/x"},
                    },
                    "definitions": {"x": {"type": "string", "enum": ["a", "b"]}},
                },
            ),
        ),
        # Numbers as JavaScript prints them: 0.0 is 0, 1e21 stays in exponent form, 1e20 does not.
        _case(
            "template-schema-numbers",
            "template",
            _wm(
                enabled=True,
                schema={
                    "type": "object",
                    "properties": {
                        "ratio": {"type": "number", "minimum": 0.0, "maximum": 1.0, "multipleOf": 0.25},
                        "big": {"type": "number", "maximum": 1e21, "minimum": -1e20},
                        "small": {"type": "number", "exclusiveMinimum": 1e-7, "maximum": 0.000001},
                        "neg": {"type": "number", "default": -0.0},
                        "huge": {"type": "integer", "maximum": 12345678901234567890},
                    },
                },
            ),
        ),
        # Integer-like keys come first, in numeric order, as in any JavaScript object.
        _case(
            "template-schema-index-keys",
            "template",
            _wm(
                enabled=True,
                schema={
                    "type": "object",
                    "properties": {"b": {}, "10": {}, "2": {}, "01": {}, "a": {}, "4294967295": {}, "0": {}},
                },
            ),
        ),
        # Errors, in Mastra's order and words.
        _case("update-disabled", "update", None, threadId="t-a1", resourceId="res-a", workingMemory="x"),
        _case("update-disabled-scope-only", "update", DISABLED[2], threadId="t-a1", workingMemory="x"),
        _case("update-no-resource", "update", on, threadId="t-a1", workingMemory="x"),
        _case("update-empty-resource", "update", on, threadId="t-a1", resourceId="", workingMemory="x"),
        _case("update-schema-no-resource", "update", schema, threadId="t-a1", workingMemory="{}"),
        _case("get-no-resource", "get", on, threadId="t-a1"),
        _case("get-empty-resource", "get", on, threadId="t-a1", resourceId=""),
        _case("get-disabled-no-resource", "get", None, threadId="t-a1"),
        _case("update-unknown-thread", "update", thread, threadId="t-none", workingMemory="x"),
        _case("update-empty-thread-id", "update", thread, threadId="", workingMemory="x"),
        _case("update-unknown-thread-schema", "update", SCHEMAS[2], threadId="t-none", workingMemory="{}"),
        _case("get-unknown-thread", "get", thread, threadId="t-none"),
        _case("get-empty-thread-id", "get", thread, threadId=""),
        _case("thread-unknown", "thread", thread, threadId="t-none"),
        # Nothing yet: unknown resources, a thread's seeded metadata.workingMemory ("" reads as null).
        _case("get-fresh-resource", "get", on, threadId="t-a1", resourceId="res-a"),
        _case("resource-fresh", "resource", on, resourceId="res-a"),
        _case("resource-unknown", "resource", on, resourceId="res-nobody"),
        _case("get-seeded-thread", "get", thread, threadId="t-a2"),
        _case("get-seeded-thread-owner", "get", thread, threadId="t-a2", resourceId="res-a"),
        _case("get-seeded-empty-thread", "get", thread, threadId="t-b2"),
        _case("thread-seeded", "thread", thread, threadId="t-a2"),
        _case("thread-seeded-resource-scope", "thread", on, threadId="t-a2"),
        # Resource scope: any thread id, even an unknown one; another resource keeps its own.
        _case("update-resource", "update", on, threadId="t-a1", resourceId="res-a", workingMemory="# A"),
        _case("get-resource-other-thread", "get", on, threadId="t-a2", resourceId="res-a"),
        _case("get-resource-unknown-thread", "get", on, threadId="t-none", resourceId="res-a"),
        _case("get-other-resource", "get", on, threadId="t-a1", resourceId="res-b"),
        _case("get-resource-disabled", "get", DISABLED[1], threadId="t-a1", resourceId="res-a"),
        _case("get-resource-as-thread", "get", thread, threadId="t-a1", resourceId="res-a"),
        _case("resource-read", "resource", on, resourceId="res-a"),
        _case("resource-read-disabled", "resource", None, resourceId="res-a"),
        _case("thread-read", "thread", on, threadId="t-a2"),
        _case("thread-read-other-resource", "thread", on, threadId="t-b1"),
        _case(
            "update-resource-new", "update", on, threadId="t-none", resourceId="res-x", workingMemory="# X"
        ),
        _case("resource-new", "resource", on, resourceId="res-x"),
        _case(
            "update-resource-threadless",
            "update",
            on,
            threadId="t-b1",
            resourceId="res with spaces",
            workingMemory="s",
        ),
        _case("get-resource-threadless", "get", on, threadId="t-none", resourceId="res with spaces"),
        # Thread scope: in metadata.workingMemory, other keys kept; the resource's stays apart.
        _case("update-thread", "update", thread, threadId="t-a1", workingMemory="# T-A1"),
        _case(
            "update-thread-owner",
            "update",
            thread,
            threadId="t-b1",
            resourceId="res-b",
            workingMemory="# T-B1",
        ),
        _case("get-thread", "get", thread, threadId="t-a1"),
        _case("get-thread-sibling", "get", thread, threadId="t-a2"),
        _case("get-thread-scope-resource", "get", on, threadId="t-a1", resourceId="res-a"),
        _case("thread-thread-scope", "thread", thread, threadId="t-a1"),
        _case("thread-resource-scope", "thread", on, threadId="t-a1"),
        _case(
            "update-thread-over-seeded", "update", TEMPLATED[1], threadId="t-a2", workingMemory="# replaced"
        ),
        # Empty and blank values: "" is stored and reads as null; blank is kept as it is.
        _case("update-resource-empty", "update", on, threadId="t-a1", resourceId="res-a", workingMemory=""),
        _case("get-resource-empty", "get", on, threadId="t-a1", resourceId="res-a"),
        _case("resource-empty", "resource", on, resourceId="res-a"),
        _case("thread-resource-empty", "thread", on, threadId="t-a1"),
        _case(
            "update-resource-blank", "update", on, threadId="t-a1", resourceId="res-a", workingMemory="  \n "
        ),
        _case("get-resource-blank", "get", on, threadId="t-a1", resourceId="res-a"),
        _case("update-thread-empty", "update", thread, threadId="t-b1", workingMemory=""),
        _case("get-thread-empty", "get", thread, threadId="t-b1"),
        _case("thread-empty", "thread", thread, threadId="t-b1"),
        _case("update-thread-blank", "update", thread, threadId="t-b2", workingMemory="\t"),
        _case("get-thread-blank", "get", thread, threadId="t-b2"),
        # Schema: valid documents stored verbatim (whitespace and all), read under any config.
        _case(
            "update-schema",
            "update",
            schema,
            threadId="t-a1",
            resourceId="res-b",
            workingMemory=PROFILE_VALUES[2],
        ),
        _case("get-schema", "get", schema, threadId="t-a1", resourceId="res-b"),
        _case("get-schema-as-markdown", "get", on, threadId="t-a1", resourceId="res-b"),
        _case(
            "update-schema-thread", "update", SCHEMAS[2], threadId="t-a1", workingMemory=THREAD_ONLY_VALUES[0]
        ),
        _case("get-schema-thread", "get", SCHEMAS[2], threadId="t-a1"),
        _case(
            "update-empty-schema",
            "update",
            SCHEMAS[1],
            threadId="t-b2",
            resourceId="res-c",
            workingMemory="null",
        ),
        _case("get-empty-schema", "get", SCHEMAS[1], threadId="t-b2", resourceId="res-c"),
        # A thread whose metadata.workingMemory is a number: replaced as any other, then read.
        _case("update-odd-thread", "update", thread, threadId=ODD_THREAD, workingMemory="now text"),
        _case("get-odd-thread", "get", thread, threadId=ODD_THREAD),
        _case("thread-odd-resource-scope", "thread", on, threadId=ODD_THREAD),
        # Other options beside working memory change nothing of it (no vector store is needed).
        _case(
            "update-other-options",
            "update",
            {**on, "lastMessages": 5, "semanticRecall": True, "generateTitle": False},
            threadId="t-a2",
            resourceId="res-c",
            workingMemory="# with other options",
        ),
        _case("get-other-options", "get", {**thread, "lastMessages": False}, threadId="t-a2"),
        _case(
            "get-other-options-resource",
            "get",
            {**on, "semanticRecall": {"topK": 2}},
            threadId="x",
            resourceId="res-c",
        ),
        # A failed update changes nothing.
        _case(
            "update-disabled-after",
            "update",
            DISABLED[3],
            threadId="t-a1",
            resourceId="res-a",
            workingMemory="no",
        ),
        _case(
            "update-unknown-thread-after",
            "update",
            thread,
            threadId="t-gone",
            resourceId="res-a",
            workingMemory="no",
        ),
        _case("get-after-failures", "get", on, threadId="t-a1", resourceId="res-a"),
        _case("get-thread-after-failures", "get", thread, threadId="t-a1"),
        *_thread_metadata_cases(on, thread),
    ]
    return cases


def _thread_metadata_cases(on: dict, thread: dict) -> list[dict]:
    """Mastra's saveThread and updateThread: a string metadata.workingMemory, with working memory on in
    resource scope, is the resource's working memory too; off, in thread scope, empty or not a string,
    it is only metadata. (A value a schema refuses is BAD_USER_INPUT in RecallQL, on purpose: left out.)
    Then Mastra's cloneThread, which carries working memory over."""

    def create(name: str, thread_id: str, resource: str, metadata: dict, config: dict | None) -> dict:
        new = {"id": thread_id, "resourceId": resource, "title": "", "metadata": metadata}
        return _case(name, "createThread", config, thread=new, createdAt="2026-01-02T00:00:00.000Z")

    def change(name: str, thread_id: str, metadata: dict, config: dict | None, **more: Any) -> dict:
        return _case(name, "updateThread", config, id=thread_id, metadata=metadata, **more)

    def clone(name: str, source: str, new_id: str, config: dict | None, **more: Any) -> dict:
        return _case(name, "cloneThread", config, sourceThreadId=source, newThreadId=new_id, **more)

    return [
        create("create-wm-on", "t-wm1", "res-wm1", {"workingMemory": "# From create", "k": 1}, on),
        _case("create-wm-on-read", "resource", on, resourceId="res-wm1"),
        create("create-wm-off", "t-wm2", "res-wm2", {"workingMemory": "# Not copied"}, None),
        _case("create-wm-off-read", "resource", on, resourceId="res-wm2"),
        create("create-wm-thread", "t-wm3", "res-wm3", {"workingMemory": "# Thread only"}, thread),
        _case("create-wm-thread-read", "resource", on, resourceId="res-wm3"),
        _case("create-wm-thread-own", "thread", thread, threadId="t-wm3"),
        change("update-wm-on", "t-wm1", {"workingMemory": "# From update"}, on, title="Renamed"),
        _case("update-wm-on-read", "resource", on, resourceId="res-wm1"),
        change("update-wm-empty", "t-wm1", {"workingMemory": ""}, on),
        _case("update-wm-empty-read", "resource", on, resourceId="res-wm1"),
        change("update-wm-number", "t-wm1", {"workingMemory": 5}, on),
        _case("update-wm-number-read", "resource", on, resourceId="res-wm1"),
        change("update-wm-other-key", "t-wm2", {"note": "x"}, on),
        _case("update-wm-other-key-read", "resource", on, resourceId="res-wm2"),
        change("update-wm-existing", "t-a1", {"workingMemory": "# Over res-a"}, on),
        _case("update-wm-existing-read", "get", on, threadId="t-a1", resourceId="res-a"),
        change("update-wm-schema", "t-wm2", {"workingMemory": '{"name":"Ann"}'}, SCHEMAS[0]),
        _case("update-wm-schema-read", "resource", SCHEMAS[0], resourceId="res-wm2"),
        change("update-wm-unknown", "t-wm-none", {"workingMemory": "# Lost"}, on),
        # Clones carry working memory over: resource scope into another resource (over what it held),
        # not within the same resource, nothing when off; thread scope to
        # the clone's metadata.
        _case(
            "clone-set-source", "update", on, threadId="t-wm1", resourceId="res-wm1", workingMemory="# Src"
        ),
        _case(
            "clone-set-target", "update", on, threadId="t-wm2", resourceId="res-wm2", workingMemory="# Old"
        ),
        clone("clone-into-other", "t-wm1", "t-cl1", on, resourceId="res-wm2"),
        _case("clone-into-other-read", "resource", on, resourceId="res-wm2"),
        _case("clone-into-other-thread", "get", on, threadId="t-cl1", resourceId="res-wm2"),
        clone("clone-same-resource", "t-wm1", "t-cl2", on),
        _case("clone-same-resource-read", "resource", on, resourceId="res-wm1"),
        clone("clone-off", "t-wm1", "t-cl3", None, resourceId="res-cl3"),
        _case("clone-off-read", "resource", on, resourceId="res-cl3"),
        clone("clone-from-res-b", "t-b1", "t-cl4", on, resourceId="res-wm2"),
        _case("clone-from-res-b-read", "resource", on, resourceId="res-wm2"),
        clone("clone-thread-scope", "t-a2", "t-cl5", thread),
        _case("clone-thread-scope-read", "thread", thread, threadId="t-cl5"),
        clone("clone-thread-scope-other", "t-a2", "t-cl6", thread, resourceId="res-cl6"),
        _case("clone-thread-scope-other-read", "thread", thread, threadId="t-cl6"),
        _case("clone-thread-scope-other-resource", "resource", on, resourceId="res-cl6"),
        # The call's metadata.workingMemory: the source's, written in after the copy, wins over it in
        # thread scope when the source has one (t-b1 has none); otherwise it stays, as other metadata
        # does. (A source whose value is not a string carries it too, but a thread read answers a
        # string or null, where Mastra's answers the value: not compared.)
        clone("clone-thread-scope-call-wm", "t-a2", "t-cl7", thread, metadata={"workingMemory": "# Call"}),
        _case("clone-thread-scope-call-wm-read", "thread", thread, threadId="t-cl7"),
        clone("clone-no-source-wm", "t-b1", "t-cl9", thread, metadata={"workingMemory": "# Call"}),
        _case("clone-no-source-wm-read", "thread", thread, threadId="t-cl9"),
        clone("clone-resource-scope-call-wm", "t-a2", "t-cl10", on, metadata={"workingMemory": "# R"}),
        _case("clone-resource-scope-call-wm-read", "thread", thread, threadId="t-cl10"),
    ]


def _profile_cases(profile: str) -> list[dict]:
    """Under an enabled default: the template each override leaves, and the default itself at work."""
    value = _values(effective(PROFILES[profile], None))[0]
    return [
        *(_case(f"template-{i}", "template", c) for i, c in enumerate(OVERRIDES[1:], 1)),
        _case("update-default", "update", None, threadId="t-a1", resourceId="res-a", workingMemory=value),
        _case("get-default", "get", None, threadId="t-a1", resourceId="res-a"),
        _case("get-default-no-resource", "get", None, threadId="t-a1"),
        _case("thread-default", "thread", None, threadId="t-a1"),
        _case("resource-default-off", "resource", _wm(enabled=False), resourceId="res-a"),
    ]


def working_memory_queries(profile: str, seed: int, *, cases: int = 90) -> list[dict]:
    """The profile's fixed cases, then `cases` seeded ones in the same store."""
    rng = random.Random(seed)
    options = PROFILES[profile]
    threads = {t["id"]: t["resourceId"] for t in working_memory_dataset()["threads"]}
    if options:
        queries = _profile_cases(profile)
        families: list[list[dict | None]] = [OVERRIDES]
        weights = [1]
    else:
        queries = _fixed_cases()
        families = [DISABLED, RESOURCE_SCOPE, THREAD_SCOPE, TEMPLATED, SCHEMAS]
        weights = [1, 3, 3, 2, 2]
    for n in range(cases):
        config = rng.choice(rng.choices(families, weights)[0])
        wm = effective(options, config)
        scope = _scope(wm)
        op = rng.choices(["update", "get", "resource", "thread", "template"], [9, 6, 2, 2, 1])[0]
        if op == "resource" and scope == "thread":
            op = "get"  # Resource.workingMemory has no thread to read
        thread_id = rng.choice(THREADS) if rng.random() > 0.08 else "t-none"
        if scope == "resource" or (scope is None and rng.random() < 0.5):
            owner_or_other = threads.get(thread_id, "res-x") if rng.random() < 0.6 else rng.choice(RESOURCES)
            roll = rng.random()
            resource_id: str | None = None if roll < 0.06 else "" if roll < 0.09 else owner_or_other
        else:
            # Thread scope: the owner or none (another resource is FORBIDDEN on purpose).
            resource_id = threads.get(thread_id) if rng.random() < 0.5 else None
        args: dict[str, Any] = {"threadId": thread_id}
        if resource_id is not None:
            args["resourceId"] = resource_id
        name = f"{op}-{n:03d}"
        if op == "update":
            queries.append(_case(name, op, config, workingMemory=rng.choice(_values(wm)), **args))
        elif op == "get":
            queries.append(_case(name, op, config, **args))
        elif op == "resource":
            queries.append(_case(name, op, config, resourceId=rng.choice(RESOURCES)))
        elif op == "thread":
            queries.append(_case(name, op, config, threadId=thread_id))
        else:
            queries.append(_case(name, op, config))
    return queries


def server_env(dataset: dict, database_url: str) -> dict[str, str]:
    """RecallQL settings equal to the dataset's `new Memory({options})`."""
    env = {"RECALLQL_DATABASE_URL": database_url}
    options = dataset.get("memoryOptions") or {}
    if "workingMemory" in options:
        env["RECALLQL_WORKING_MEMORY"] = json.dumps(options["workingMemory"])
    return env


# ------------------------------------------------------------------------------------------- running
def run_working_memory_oracle(
    dataset_path: Path, queries: list[dict], out_path: Path, packages: Path, *, mode: str = "contract"
) -> dict:
    return run_listing_oracle(
        HERE / "working_memory_oracle.mjs", dataset_path, queries, out_path, packages, mode
    )


def _graphql_config(config: dict | None) -> dict | None:
    """A Mastra memoryConfig as MemoryConfigInput (the recall harness's translation: scopes as the enum
    spells them, boolean-or-options unions as @oneOf inputs)."""
    return None if config is None else to_variables({"threadConfig": config})["threadConfig"]


def _variables(args: dict, *keys: str) -> dict[str, Any]:
    """The given keys of a case (a missing key is an omitted variable, like a missing argument)."""
    out = {k: args[k] for k in keys if k in args}
    if "memoryConfig" in args:
        out["memoryConfig"] = _graphql_config(args["memoryConfig"])
    return out


async def run_working_memory_queries(base_url: str, queries: list[dict]) -> list[dict]:
    """Every case, one after another (a later one sees an earlier one's update)."""

    async def thread_state(session: Any, thread_id: str) -> dict | None:
        data = await session.execute(GraphQLRequest(THREAD_STATE, variable_values={"id": thread_id}))
        thread: dict | None = data["thread"]
        return thread

    async def update(session: Any, args: dict) -> dict:
        before = await thread_state(session, args["threadId"])
        await asyncio.sleep(0.002)  # as the oracle: past the thread's last millisecond
        variables = _variables(args, "threadId", "resourceId", "workingMemory")
        data = await session.execute(GraphQLRequest(UPDATE, variable_values=variables))
        after = await thread_state(session, args["threadId"])
        thread = None
        if after is not None:
            touched = before is None or before["updatedAt"] != after["updatedAt"]
            thread = {"metadata": after["metadata"], "touched": touched}
        return {**data["updateWorkingMemory"], "thread": thread}

    async def read(session: Any, document: str, variables: dict, *path: str) -> Any:
        value: Any = await session.execute(GraphQLRequest(document, variable_values=variables))
        for key in path:
            value = None if value is None else value[key]
        return value

    async def run(session: Any, query: dict) -> dict:
        args = query["args"]
        op = args["op"]
        try:
            if op == "update":
                answer = await update(session, args)
            elif op == "get":
                variables = _variables(args, "threadId", "resourceId")
                answer = {"workingMemory": await read(session, GET, variables, "workingMemory")}
            elif op == "resource":
                variables = {"id": args["resourceId"], **_variables(args)}
                answer = {
                    "workingMemory": await read(session, RESOURCE, variables, "resource", "workingMemory")
                }
            elif op == "thread":
                variables = {"id": args["threadId"], **_variables(args)}
                answer = {"workingMemory": await read(session, THREAD, variables, "thread", "workingMemory")}
            elif op == "createThread":
                thread = {**args["thread"], "createdAt": args["createdAt"]}
                variables = {"input": thread, **_variables(args)}
                answer = {"thread": await read(session, CREATE_THREAD, variables, "createThread")}
            elif op == "cloneThread":
                variables = {
                    "input": _variables(args, "sourceThreadId", "newThreadId", "resourceId", "metadata"),
                    **_variables(args),
                }
                variables["input"].pop("memoryConfig", None)
                answer = {"thread": (await read(session, CLONE_THREAD, variables, "cloneThread"))["thread"]}
            elif op == "updateThread":
                variables = {"input": _variables(args, "id", "title", "metadata"), **_variables(args)}
                variables["input"].pop("memoryConfig", None)
                answer = {"thread": await read(session, UPDATE_THREAD, variables, "updateThread")}
            elif op == "template":
                answer = {
                    "template": await read(session, TEMPLATE, _variables(args), "workingMemoryTemplate")
                }
            else:
                raise AssertionError(f"unknown op {op}")
        except TransportQueryError as exc:
            return failed(query["name"], exc)
        return {"name": query["name"], "ok": True, **answer}

    return await run_each(base_url, queries, run, concurrency=1)


def compare_working_memory_results(
    queries: list[dict], oracle: list[dict], candidate: list[dict]
) -> list[str]:
    """Every disagreement, one line each (empty: they agree; harness.compare_cases): every key of the
    oracle's answer, exactly."""

    def answer(prefix: str, o: dict, c: dict) -> list[str]:
        return [
            f"{prefix}: {key}: oracle {o[key]!r}, candidate {c.get(key)!r}"
            for key in o
            if key not in ("name", "ok") and o[key] != c.get(key)
        ]

    return compare_cases(queries, oracle, candidate, answer)
