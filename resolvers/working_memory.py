"""Working memory (mastra-behaviour.md §6.8): per resource (default) or per thread, Markdown or JSON.

Resource scope stores it in `resources.working_memory`, thread scope in `thread.metadata.workingMemory`.
Every update of one scope runs under a row lock (SQLite: the database write lock), so concurrent
updates are serialised: a replace never interleaves with another, and the read-modify-write modes
(APPEND, MERGE) never lose an update.

Unlike Mastra, a JSON Schema (`workingMemory.schema`) is enforced: the stored value must be a JSON
document that validates against it.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import jsonschema_rs
import orjson

from models.records import ResourceRecord, ThreadRecord
from models.repository import Repository
from resolvers.auth import Principal
from resolvers.clock import now_ms
from resolvers.config import DEFAULT_WORKING_MEMORY_TEMPLATE, deep_merge
from resolvers.errors import BadUserInput, Forbidden, NotFound, check_id_size, json_depth
from resolvers.events import THREAD_UPDATED, EventBroker, publish_quietly, thread_event

DISABLED_ERROR = "Working memory is not enabled for this memory instance"
RESOURCE_SCOPE_ERROR = (
    "Memory error: Resource-scoped working memory is enabled but no resourceId was provided. "
    "Either provide a resourceId or explicitly set workingMemory.scope to 'thread'."
)
USE_REMOVED_ERROR = (
    "The workingMemory.use option has been removed. Working memory always uses tool-call mode."
)
DRAFT_07 = "http://json-schema.org/draft-07/schema#"
# JSON working memory nests at most this deep: a MERGE writes the document back with orjson, which
# refuses more than 254 levels, and the merge itself recurses.
MAX_DOCUMENT_DEPTH = 64

REPLACE = "replace"
APPEND = "append"
MERGE = "merge"
MODES = (REPLACE, APPEND, MERGE)


@dataclass(slots=True, frozen=True)
class WorkingMemoryConfig:
    enabled: bool
    scope: str  # "resource" | "thread"
    template: str | None
    schema: dict[str, Any] | None
    validator: jsonschema_rs.Validator | None = field(default=None, compare=False, repr=False)


@dataclass(slots=True, frozen=True)
class WorkingMemoryTemplate:
    format: str  # "markdown" | "json"
    content: str


@dataclass(slots=True)
class WorkingMemoryState:
    scope: str
    thread_id: str
    resource_id: str | None
    working_memory: str | None
    updated_at: int


def working_memory_config(merged: dict[str, Any]) -> WorkingMemoryConfig:
    """The workingMemory part of a merged memory config, validated."""
    raw = merged.get("workingMemory")
    wm: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if "use" in wm:
        raise BadUserInput(USE_REMOVED_ERROR)
    scope = wm.get("scope") or "resource"
    if scope not in ("resource", "thread"):
        raise BadUserInput("workingMemory.scope must be 'resource' or 'thread'.")
    template = wm.get("template")
    if template is not None and not isinstance(template, str):
        raise BadUserInput("workingMemory.template must be a string.")
    schema = wm.get("schema")
    if schema is not None and not isinstance(schema, dict):
        raise BadUserInput("workingMemory.schema must be a JSON Schema object.")
    # {} is a schema (one every JSON document meets), as it is in Mastra, where {} is truthy: working
    # memory is then JSON, bounded and parsed like any other.
    validator = _compile(schema) if schema is not None else None
    return WorkingMemoryConfig(bool(wm.get("enabled")), scope, template, schema, validator)


def merge_memory_config(defaults: dict[str, Any], memory_config: dict[str, Any] | None) -> dict[str, Any]:
    """The call's memory config deep-merged over the defaults, as Mastra's getMergedThreadConfig does,
    except that a call's workingMemory.schema replaces the default's whole (merged, a call's array schema
    kept the default's `properties` and `required`, and `{}` changed nothing)."""
    merged = deep_merge(defaults, memory_config)
    given = (memory_config or {}).get("workingMemory")
    schema = given.get("schema") if isinstance(given, dict) else None
    if schema is not None and isinstance(merged.get("workingMemory"), dict):
        merged["workingMemory"]["schema"] = copy.deepcopy(schema)
    return merged


# The schema is the caller's: its $refs resolve within it only (retrieval would let a request read the
# server's files or call any host), and its patterns run on a linear-time engine (Rust's regex). A
# backtracking engine with a limit per match still let one document hold the event loop for seconds: a
# pattern that backtracks just under the limit, tried on every string of a large array (under `not`
# nothing fails early), 30 KB took 11.9 s. The linear engine has neither lookaround nor backreferences,
# which JSON Schema's recommended subset of ECMA 262 leaves out too.
_PATTERNS = jsonschema_rs.RegexOptions()
_BACKTRACKING = jsonschema_rs.FancyRegexOptions()  # only to tell such a pattern from a malformed one


def _compile(schema: dict[str, Any]) -> jsonschema_rs.Validator:
    try:
        return jsonschema_rs.validator_for(schema, offline=True, pattern_options=_PATTERNS)
    except jsonschema_rs.ValidationError as exc:
        if isinstance(exc.kind, jsonschema_rs.ValidationErrorKind.Referencing):
            raise BadUserInput(
                f"workingMemory.schema has a $ref that cannot be resolved within the schema: {exc.message}"
            ) from None
        if _needs_backtracking(schema):
            raise BadUserInput(
                f"workingMemory.schema has a pattern{_at(exc.instance_path)} with lookaround or a "
                "backreference: patterns run on a linear-time engine, which has neither (nor does JSON "
                "Schema's recommended subset of regular expressions)."
            ) from None
        raise BadUserInput(
            f"workingMemory.schema is not a valid JSON Schema{_at(exc.instance_path)}: {exc.message}"
        ) from None
    except ValueError as exc:  # the compiler's own recursion bound
        raise BadUserInput(f"workingMemory.schema is not a valid JSON Schema: {exc}") from None


def _needs_backtracking(schema: dict[str, Any]) -> bool:
    """Whether the schema, refused by the linear engine, compiles with a backtracking one."""
    try:
        jsonschema_rs.validator_for(schema, offline=True, pattern_options=_BACKTRACKING)
    except (jsonschema_rs.ValidationError, ValueError):
        return False
    return True


def _at(path: list[str | int]) -> str:
    return f" at /{'/'.join(str(p) for p in path)}" if path else ""


def deep_merge_working_memory(existing: Any, update: Any) -> dict[str, Any]:
    """Mastra's deepMergeWorkingMemory: objects merge recursively, null deletes a key, arrays and
    scalars replace."""
    result = dict(existing) if isinstance(existing, dict) else {}
    if not isinstance(update, dict) or not update:
        return result
    for key, value in update.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            result[key] = deep_merge_working_memory(result.get(key), value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def _json_text(value: Any) -> str:
    return orjson.dumps(value).decode()


# JavaScript keeps an object's array-index keys ("0" up to 2**32 - 2, no leading zero) first, in numeric
# order, whatever order they were given in: JSON.parse and then JSON.stringify reorder them.
_MAX_ARRAY_INDEX = 2**32 - 2
_MAX_SAFE_INTEGER = 2**53 - 1


def _is_array_index(key: str) -> bool:
    return key.isascii() and key.isdigit() and (key == "0" or key[0] != "0") and int(key) <= _MAX_ARRAY_INDEX


def js_number(value: int | float) -> str:
    """A JSON number as JSON.stringify prints it (Number::toString): every number is a double, so an
    integer beyond 2**53 loses digits; 1.0 is `1`, -0.0 is `0`, exponents only from 1e21 and below 1e-6,
    infinities (a literal too large for a double) are `null`."""
    if isinstance(value, int) and abs(value) <= _MAX_SAFE_INTEGER:
        return str(value)
    try:
        x = float(value)
    except OverflowError:
        return "null"
    if not math.isfinite(x):
        return "null"
    if x == 0:
        return "0"
    # repr gives the shortest digits that read back as the same double, as JavaScript picks them.
    _, digit_tuple, exponent = Decimal(repr(abs(x))).normalize().as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple))
    k, n = len(digits), exponent + len(digits)  # value = 0.digits * 10**n
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = f"{digits[:n]}.{digits[n:]}"
    elif -6 < n <= 0:
        body = f"0.{'0' * -n}{digits}"
    else:
        mantissa = digits[0] + (f".{digits[1:]}" if k > 1 else "")
        body = f"{mantissa}e{'+' if n >= 1 else '-'}{abs(n - 1)}"
    return ("-" if x < 0 else "") + body


def js_json(value: Any) -> str:
    """JSON.stringify(value) of a parsed JSON value, byte for byte: compact, numbers as JavaScript prints
    them, array-index keys first (orjson prints 0.0 as `0.0` and keeps keys in the order given)."""
    if value is None or isinstance(value, bool):
        return "null" if value is None else "true" if value else "false"
    if isinstance(value, int | float):
        return js_number(value)
    if isinstance(value, str):
        # The escapes JSON.stringify makes: \b \t \n \f \r, other controls as \u00xx, nothing else.
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return f"[{','.join(js_json(v) for v in value)}]"
    if isinstance(value, dict):
        indexes = sorted((k for k in value if _is_array_index(k)), key=int)
        keys = indexes + [k for k in value if not _is_array_index(k)]
        return "{" + ",".join(f"{js_json(k)}:{js_json(value[k])}" for k in keys) + "}"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


class WorkingMemoryService:
    def __init__(
        self, repository: Repository, *, defaults: dict[str, Any], events: EventBroker | None = None
    ) -> None:
        self.repository = repository
        self.defaults = defaults
        self.events = events

    def config(self, memory_config: dict[str, Any] | None) -> WorkingMemoryConfig:
        return working_memory_config(merge_memory_config(self.defaults, memory_config))

    # ------------------------------------------------------------------ reads
    def template(self, memory_config: dict[str, Any] | None) -> WorkingMemoryTemplate | None:
        """getWorkingMemoryTemplate: null when disabled; the JSON Schema (draft-07), printed as Mastra's
        JSON.stringify prints it, or the Markdown template (the call's, else the default), trimmed."""
        cfg = self.config(memory_config)
        if not cfg.enabled:
            return None
        if cfg.schema is not None:
            schema = dict(cfg.schema)
            schema.setdefault("$schema", DRAFT_07)
            return WorkingMemoryTemplate("json", js_json(schema))
        return WorkingMemoryTemplate("markdown", (cfg.template or DEFAULT_WORKING_MEMORY_TEMPLATE).strip())

    async def get(
        self,
        thread_id: str,
        resource_id: str | None,
        memory_config: dict[str, Any] | None,
        *,
        principal: Principal,
    ) -> str | None:
        """getWorkingMemory: null when disabled or empty; resource scope needs a resourceId. A
        restricted principal reads as a granted resource (resourceId defaults to its only one; another
        is FORBIDDEN) and only threads of granted resources (FORBIDDEN otherwise)."""
        resource_id = await self._acting_resource(thread_id, resource_id, principal)
        cfg = self.config(memory_config)
        if not cfg.enabled:
            return None
        if cfg.scope == "resource":
            if not resource_id:
                raise BadUserInput(RESOURCE_SCOPE_ERROR)
            resource = await self.repository.get_resource(resource_id)
            return (resource.working_memory if resource else None) or None
        thread = await self.repository.get_thread(thread_id)
        if thread is None:
            return None
        _check_owner(thread, resource_id, principal)
        return _thread_working_memory(thread)

    async def _acting_resource(
        self, thread_id: str, resource_id: str | None, principal: Principal
    ) -> str | None:
        """The resource a restricted principal acts as, as in recall: the one given (which must be
        granted), else the credential's only one, else the thread's owner when it is granted."""
        if not principal.restricted:
            return resource_id
        resource_id = principal.effective_resource(resource_id)
        if resource_id is None and thread_id:
            thread = await self.repository.get_thread(thread_id)
            if thread is not None and principal.can_access(thread.resource_id):
                resource_id = thread.resource_id
        return resource_id

    @staticmethod
    def of_thread(
        thread: ThreadRecord, resource: ResourceRecord | None, cfg: WorkingMemoryConfig
    ) -> str | None:
        """A thread's working memory for the given config (the resource's in resource scope)."""
        if not cfg.enabled:
            return None
        if cfg.scope == "thread":
            return _thread_working_memory(thread)
        return (resource.working_memory if resource else None) or None

    @staticmethod
    def of_resource(resource: ResourceRecord, cfg: WorkingMemoryConfig) -> str | None:
        if not cfg.enabled or cfg.scope != "resource":
            return None
        return resource.working_memory or None

    # ------------------------------------------------------------------ writes
    async def update(
        self,
        thread_id: str,
        resource_id: str | None,
        working_memory: str,
        memory_config: dict[str, Any] | None,
        *,
        mode: str = REPLACE,
        principal: Principal,
    ) -> WorkingMemoryState:
        """updateWorkingMemory, with Mastra's checks and messages, plus schema validation and the
        APPEND (Markdown) and MERGE (JSON) modes. One scope's updates are serialised. A restricted
        principal writes as a granted resource, as `get` reads."""
        resource_id = await self._acting_resource(thread_id, resource_id, principal)
        cfg = self.config(memory_config)
        if not cfg.enabled:
            raise BadUserInput(DISABLED_ERROR)
        if cfg.scope == "resource" and not resource_id:
            raise BadUserInput(RESOURCE_SCOPE_ERROR)
        check_id_size(resource_id, "resourceId")
        if resource_id and not resource_id.strip():
            # As for saveMessages: a resource nobody could name again (recall trims nothing either).
            raise BadUserInput("resourceId must be a non-empty string when given.")
        if mode not in MODES:
            raise BadUserInput(f"mode must be one of {', '.join(MODES)}.")
        if mode == APPEND and cfg.schema is not None:
            raise BadUserInput("APPEND applies to Markdown working memory; use MERGE with a schema.")
        if mode == MERGE and cfg.schema is None:
            raise BadUserInput("MERGE applies to JSON working memory (workingMemory.schema).")
        if not isinstance(working_memory, str):
            raise BadUserInput("workingMemory must be a string.")
        document = self._parse(working_memory, cfg) if cfg.schema is not None else None
        if mode == MERGE and not isinstance(document, dict):
            raise BadUserInput(
                "MERGE takes a JSON object to merge into working memory; REPLACE stores other values."
            )
        if document is not None and mode == REPLACE:
            self._validate(document, cfg)

        def change(current: str | None) -> str:
            if mode == APPEND:
                return f"{current}\n{working_memory}" if current else working_memory
            if mode == MERGE:
                try:
                    existing = orjson.loads(current) if current else None
                except orjson.JSONDecodeError:
                    existing = None
                if json_depth(existing) > MAX_DOCUMENT_DEPTH:  # stored as text, before a schema was set
                    raise BadUserInput(
                        f"The stored working memory nests deeper than {MAX_DOCUMENT_DEPTH} levels; "
                        "REPLACE it instead of merging into it."
                    )
                merged = deep_merge_working_memory(existing, document)
                self._validate(merged, cfg)
                return _json_text(merged)
            return working_memory

        now = now_ms()
        if cfg.scope == "resource":
            assert resource_id is not None
            resource = await self.repository.modify_resource_working_memory(resource_id, change, now=now)
            # What a read now gives, as in thread scope: "" is no working memory (Mastra's getWorkingMemory).
            return WorkingMemoryState(
                "resource", thread_id, resource_id, resource.working_memory or None, resource.updated_at
            )
        thread = await self.repository.modify_thread_working_memory(
            thread_id,
            change,
            now=now,
            # On the locked row: the thread as written is the thread checked.
            guard=lambda existing: _check_owner(existing, resource_id, principal),
        )
        if thread is None:
            raise NotFound(f"Thread {thread_id} not found")
        await publish_quietly(self.events, [thread_event(THREAD_UPDATED, thread)])
        return WorkingMemoryState(
            "thread", thread_id, thread.resource_id, _thread_working_memory(thread), thread.updated_at
        )

    @staticmethod
    def _parse(text: str, cfg: WorkingMemoryConfig) -> Any:
        try:
            document = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise BadUserInput(
                "workingMemory must be a JSON document when workingMemory.schema is set: "
                f"{exc.args[0] if exc.args else exc}"
            ) from exc
        if json_depth(document) > MAX_DOCUMENT_DEPTH:
            raise BadUserInput(f"workingMemory nests deeper than {MAX_DOCUMENT_DEPTH} levels.")
        return document

    @staticmethod
    def _validate(document: Any, cfg: WorkingMemoryConfig) -> None:
        assert cfg.validator is not None
        error = next(cfg.validator.iter_errors(document), None)
        if error is None:
            return
        raise BadUserInput(
            f"workingMemory does not match workingMemory.schema{_at(error.instance_path)}: {error.message}"
        )


def working_memory_from_metadata(
    metadata: dict[str, Any] | None, defaults: dict[str, Any], memory_config: dict[str, Any] | None
) -> str | None:
    """Mastra's handleWorkingMemoryFromMetadata, which its saveThread and updateThread run: a thread
    saved with a non-empty string metadata.workingMemory, while working memory is on in resource scope,
    makes it its resource's working memory too. That value (checked against the schema, when there is
    one, as an update's is), or None when there is nothing to write."""
    value = (metadata or {}).get("workingMemory")
    if not isinstance(value, str) or not value:
        return None
    cfg = working_memory_config(merge_memory_config(defaults, memory_config))
    if not cfg.enabled or cfg.scope != "resource":
        return None
    if cfg.schema is not None:
        WorkingMemoryService._validate(WorkingMemoryService._parse(value, cfg), cfg)
    return value


def _thread_working_memory(thread: ThreadRecord) -> str | None:
    value = (thread.metadata or {}).get("workingMemory")
    return value if isinstance(value, str) and value else None


def _check_owner(thread: ThreadRecord, resource_id: str | None, principal: Principal) -> None:
    if not principal.can_access(thread.resource_id):
        raise principal.thread_forbidden(thread.id)  # names no resource the caller may not see
    if resource_id and thread.resource_id != resource_id:
        raise Forbidden(
            f"Thread with id {thread.id} is for resource with id {thread.resource_id} "
            f"but resource {resource_id} was queried."
        )
