"""Schema assembly: limits, error codes and masking."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from traceback import extract_tb
from typing import Any

from graphql import (
    ASTValidationRule,
    FloatValueNode,
    GraphQLError,
    OperationDefinitionNode,
    StringValueNode,
    ValidationRule,
    parse,
)
from graphql.validation import NoSchemaIntrospectionCustomRule
from strawberry.extensions import (
    AddValidationRules,
    DisableIntrospection,
    MaxTokensLimiter,
    SchemaExtension,
)
from strawberry.schema.config import StrawberryConfig
from strawberry.schema.exceptions import CannotGetOperationTypeError, InvalidOperationTypeError
from strawberry.types.execution import ExecutionContext

from resolvers.errors import RecallQLError, outage, unstorable_text, value_fault
from schema.caches import MISSING, TextBudgetCache
from schema.fastpath import FastPath
from schema.federation import FEDERATION_VERSION, FederatedSchema, public_sdl, subgraph_sdl
from schema.limits import shape_limits
from schema.memory import Subscription
from schema.root import Mutation, Query
from schema.scalars import SCALAR_MAP

SDL_PATH = Path(__file__).with_name("schema.graphql")  # the public API (no federation machinery)
SUBGRAPH_SDL_PATH = Path(__file__).with_name("subgraph.graphql")  # `_service { sdl }`
MASKED_MESSAGE = "Internal server error."
log = logging.getLogger("recallql.errors")
# graphql-core's wording for a value that does not fit its type (as opposed to a malformed query).
_BAD_VALUE_MARKERS = (
    "got invalid value",
    "has invalid value",
    "OneOf Input Object",
    "cannot represent",
    "Expected value of type",
)


def _is_internal(error: GraphQLError) -> bool:
    """A bug or an outage in a resolver, as opposed to bad input. Request-level errors (parsing,
    validation, variable coercion) have no path and are always the client's to see."""
    original = error.original_error
    return (
        original is not None
        and error.path is not None
        and not isinstance(original, RecallQLError)
        and not _argument_error(original)
    )


_ARGUMENT_COERCION = str(Path("graphql", "execution", "values.py"))


def _argument_error(original: BaseException) -> bool:
    """graphql-core's refusal of a field's argument value as the field runs: the client's input, with a
    path all the same. A variable that is valid for the document but not for the argument (an explicit
    null for `page: Int! = 0`) is only found there, as the GraphQL spec says (CoerceArgumentValues).
    Known by where it was raised, not by its wording: an output value a scalar cannot represent is a
    GraphQLError too, and a bug."""
    if not isinstance(original, GraphQLError):
        return False
    return any(frame.filename.endswith(_ARGUMENT_COERCION) for frame in extract_tb(original.__traceback__))


# The token limit's error (the parser's), by its wording; the depth and alias rules set their codes.
_LIMIT_MARKERS = (("Document contains more than", "maxQueryTokens"),)


def _limit(error: GraphQLError) -> str | None:
    return next((limit for marker, limit in _LIMIT_MARKERS if marker in error.message), None)


def _classify(extensions: dict[str, Any], error: GraphQLError) -> None:
    """Fills in the code (and, for a query over a limit, which limit) of an error that has none."""
    if "code" in extensions:
        return
    limit = _limit(error)
    if limit is not None:
        extensions["code"] = "QUERY_TOO_COMPLEX"
        extensions.setdefault("limit", limit)
        return
    extensions["code"] = _code(error)


def _code(error: GraphQLError) -> str:
    if "Syntax Error" in error.message:
        return "GRAPHQL_PARSE_FAILED"
    if any(marker in error.message for marker in _BAD_VALUE_MARKERS):
        return "BAD_USER_INPUT"
    return "GRAPHQL_VALIDATION_FAILED"


_NOT_READ = object()


class OperationChoice(SchemaExtension):
    """A document with several operations must name the one to run (GraphQL spec, GetOperation): without
    an operationName Strawberry would run the first. Runs after DocumentCache, whose result it replaces
    by this request error."""

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        # Strawberry keeps the name the request gave only privately (`operation_name` falls back to the
        # first operation's); if that ever moves, this check stands down rather than guess.
        provided = getattr(context, "_provided_operation_name", _NOT_READ)
        document = context.graphql_document
        if provided is None and document is not None:
            operations = sum(isinstance(d, OperationDefinitionNode) for d in document.definitions)
            if operations > 1:
                # A request error, as an unknown operationName is (HTTP 400 there too).
                response = getattr(context.context, "http_response", None)
                if response is not None:
                    response.status_code = 400
                context.pre_execution_errors = [
                    GraphQLError(
                        "Must provide operation name if query contains multiple operations.",
                        extensions={"code": "OPERATION_RESOLUTION_FAILURE"},
                    )
                ]
        yield


class StorableVariables(SchemaExtension):
    """Variables holding a string or number no database can store (U+0000, a lone surrogate, NaN, an
    infinity) are refused before execution, over every transport. The HTTP front refuses U+0000 and
    orjson the rest, but a WebSocket's frames come through the standard json module, which takes them
    all: a subscription to such a thread waited for events that could never come, and NaN in metadata
    was stored as null and echoed in an answer that was not JSON."""

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        # Over HTTP the front checked them already, without a walk in Python (seconds for 8 MB of
        # tiny values).
        checked = getattr(context.context, "variables_checked", False)
        if not context.pre_execution_errors and not checked:
            fault = value_fault(context.variables)
            if fault is not None:
                context.pre_execution_errors = [GraphQLError(fault.message, extensions=fault.extensions)]
        yield


class LiteralValues(ValidationRule):
    """Literals get the rules variables get: strings a database can store, finite floats. graphql-core
    reads `1e999` as infinity, which a variable could never carry (JSON has no infinity)."""

    def enter_string_value(self, node: StringValueNode, *_args: Any) -> None:
        fault = value_fault(node.value)
        if fault is not None:
            self.report_error(GraphQLError(fault.message, node, extensions=fault.extensions))

    def enter_float_value(self, node: FloatValueNode, *_args: Any) -> None:
        if not math.isfinite(float(node.value)):
            message = f"Float cannot represent a value beyond the range of a double: {node.value}"
            self.report_error(GraphQLError(message, node, extensions={"code": "BAD_USER_INPUT"}))


class ErrorPolicy(SchemaExtension):
    """Every error leaves with an extensions.code and the request id; internal ones are logged with
    their traceback and reach the client only as a masked message."""

    def __init__(self, *, mask: bool = True) -> None:
        self.mask = mask

    def on_operation(self) -> Iterator[None]:
        yield
        result = self.execution_context.result
        # getattr: an incremental (@defer/@stream) result from graphql-core has no `errors`.
        errors: list[GraphQLError] | None = getattr(result, "errors", None)
        if result is None or not errors:
            return
        request_id = getattr(self.execution_context.context, "request_id", None)
        result.errors = [shape_error(error, request_id, mask=self.mask) for error in errors]


def answered_error(error: GraphQLError, context: Any) -> dict[str, Any] | None:
    """A resolver's error as the error policy shapes it, formatted, when the compiled read path should
    answer it itself (schema/fastpath.py): an expected error (bad input, not found, forbidden) or an
    outage. Running the query again on the normal path just to report it waited out a timeout twice,
    loaded a struggling database twice and repeated a statement an operator had cancelled. None for a
    bug, which the normal path re-runs, logs and masks."""
    original = error.original_error
    if original is None or not (isinstance(original, RecallQLError) or outage(original) is not None):
        return None
    return dict(shape_error(error, getattr(context, "request_id", None), mask=True).formatted)


def shape_error(error: GraphQLError, request_id: str | None, *, mask: bool) -> GraphQLError:
    """An error as it leaves: with its code and the request id; an outage logged and said so; a bug
    logged with its traceback and, with `mask`, reaching the client only as a masked message."""
    extensions: dict[str, Any] = dict(error.extensions or {})
    # An internal error always has its original error.
    original = error.original_error if _is_internal(error) else None
    unavailable = outage(original) if original is not None else None
    bad_text = unstorable_text(original) if original is not None else None
    if bad_text is not None:  # input no database can store: the client's error, and nothing was written
        error = GraphQLError(bad_text.message, nodes=error.nodes, path=error.path)
        extensions = dict(bad_text.extensions)
    elif unavailable is not None:  # an outage (database unreachable): not a bug, and said so
        log.warning(
            "service unavailable in %s (request %s): %s", error.path, request_id, error.original_error
        )
        error = GraphQLError(unavailable.message, nodes=error.nodes, path=error.path)
        extensions = dict(unavailable.extensions)
    elif _is_internal(error):
        log.error("internal error in %s (request %s)", error.path, request_id, exc_info=error.original_error)
        extensions = {"code": "INTERNAL_SERVER_ERROR"}
        if mask:
            error = GraphQLError(MASKED_MESSAGE, nodes=error.nodes, path=error.path)
    _classify(extensions, error)
    if request_id:
        extensions["requestId"] = request_id
    error.extensions = extensions
    return error


# Read-only root fields whose results the compiled path may serialise (schema/fastpath.py).
FAST_ROOT_FIELDS = frozenset({"recall", "thread", "threads", "messages"})
# Nested fields with arguments and async resolvers that it resolves too, after the roots: a listing of
# threads with each one's messages.
FAST_NESTED_FIELDS = frozenset({("Thread", "recall")})


class RecallQLSchema(FederatedSchema):
    fast_path: FastPath
    # The validation rules beyond GraphQL's own (the depth, alias and literal limits; introspection when
    # it is off): what a document must pass to run, and so to be kept as a persisted query.
    limit_rules: tuple[type[ASTValidationRule], ...]

    def process_errors(
        self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None
    ) -> None:
        # ErrorPolicy logs what deserves a log line; bad input is not a server event. Errors raised past
        # the extensions (DocumentCache parses in on_parse, so a syntax error escapes ErrorPolicy) get
        # their code and request id here; anything that is not a GraphQL error is internal and masked.
        request_id = getattr(getattr(execution_context, "context", None), "request_id", None)
        for n, error in enumerate(errors):
            extensions = dict(error.extensions or {})
            if extensions.get("code"):
                # Coded before ErrorPolicy saw it (a limit refused in on_parse): the id all the same.
                if request_id and "requestId" not in extensions:
                    error.extensions = {**extensions, "requestId": request_id}
                continue
            original = error.original_error
            if isinstance(original, InvalidOperationTypeError):
                # The legacy graphql-ws protocol, as Strawberry serves it, runs subscriptions only.
                kind = original.as_http_error_reason("graphql-ws").split(" ")[0]
                error = errors[n] = GraphQLError(
                    f"The graphql-ws (legacy) protocol serves subscriptions here: send {kind} over HTTP "
                    "or graphql-transport-ws."
                )
                extensions = {"code": "BAD_REQUEST"}
            elif isinstance(original, CannotGetOperationTypeError):
                # Over a WebSocket (HTTP answers it before the schema runs, web/compiled.py): an
                # operationName the document does not hold is the client's, as over HTTP.
                error = errors[n] = GraphQLError(original.as_http_error_reason())
                extensions = {"code": "OPERATION_RESOLUTION_FAILURE"}
            elif original is not None and not error.nodes and not isinstance(original, GraphQLError):
                log.error("internal error (request %s)", request_id, exc_info=original)
                error = errors[n] = GraphQLError(MASKED_MESSAGE)
                extensions = {"code": "INTERNAL_SERVER_ERROR"}
            _classify(extensions, error)
            if request_id:
                extensions["requestId"] = request_id
            error.extensions = extensions


class DocumentCache(SchemaExtension):
    """Parses and validates each document text once (Strawberry's ParserCache and ValidationCache,
    keyed by text in a TextBudgetCache: bounded by characters as well as entries)."""

    def __init__(self, parsed: TextBudgetCache, validated: TextBudgetCache) -> None:
        super().__init__()
        self.parsed = parsed
        self.validated = validated

    def on_parse(self) -> Iterator[None]:
        context = self.execution_context
        query = context.query
        if query is not None and context.graphql_document is None:
            key = (query, tuple(sorted(context.parse_options.items())))
            document = self.parsed.get(key)
            if document is MISSING:
                document = parse(query, **context.parse_options)  # a syntax error: not cached
                self.parsed.put(key, document, len(query))
            context.graphql_document = document
        yield

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        query = context.query
        if query is not None and context.graphql_document is not None and context.validation_rules:
            key = (query, tuple(context.validation_rules))
            errors = self.validated.get(key)
            if errors is MISSING:
                from strawberry.schema.schema import validate_document

                errors = validate_document(
                    context.schema._schema, context.graphql_document, context.validation_rules
                )
                self.validated.put(key, errors, len(query))
            context.pre_execution_errors = errors
        yield


def query_too_long(query: str, max_chars: int | None) -> GraphQLError | None:
    """The error for a document over the length limit, or None. The token limit stops the parser, not
    the lexer: one comment or string is one token however long, and lexing 8 MB of it held the event
    loop for over a second."""
    if max_chars is None or len(query) <= max_chars:
        return None
    message = f"The document is {len(query)} characters long; at most {max_chars} are accepted."
    extensions = {"code": "QUERY_TOO_COMPLEX", "limit": "maxQueryChars", "max": max_chars}
    return GraphQLError(message, extensions=extensions)


class QueryLength(SchemaExtension):
    """Refuses a document over the length limit before anything lexes it (see query_too_long)."""

    def __init__(self, max_chars: int | None) -> None:
        super().__init__()
        self.max_chars = max_chars

    def on_parse(self) -> Iterator[None]:
        query = self.execution_context.query
        error = query_too_long(query, self.max_chars) if query is not None else None
        if error is not None:
            raise error
        yield


def build_schema(
    *,
    max_depth: int = 12,
    max_tokens: int = 5000,
    max_chars: int | None = 262_144,
    max_aliases: int = 30,
    mask_errors: bool = True,
    introspection: bool = True,
    max_entities: int | None = 1000,
    extensions: Sequence[Callable[[], SchemaExtension]] = (),
) -> RecallQLSchema:
    """`extensions`: extra extension factories (metrics, tracing), run outside the error policy so that
    they see the errors as clients will. `introspection=False` rejects `__schema` and `__type`
    (GRAPHQL_VALIDATION_FAILED); `__typename` stays allowed."""
    parsed, validated = TextBudgetCache(), TextBudgetCache()  # this schema's, shared by its requests
    limit_rules: list[type[ASTValidationRule]] = [
        shape_limits(max_depth, max_aliases),
        LiteralValues,
    ]
    schema = RecallQLSchema(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        config=StrawberryConfig(scalar_map=SCALAR_MAP),
        federation_version=FEDERATION_VERSION,
        # Factories: Strawberry builds fresh extension instances for every request.
        extensions=[
            *extensions,
            # The limit rules are built once: DocumentCache keys on the rule classes, so per-request
            # classes (what QueryDepthLimiter(...) would make) would never hit the cache.
            lambda: AddValidationRules(limit_rules),
            *([] if introspection else [DisableIntrospection]),
            lambda: MaxTokensLimiter(max_token_count=max_tokens),
            lambda: ErrorPolicy(mask=mask_errors),
            lambda: QueryLength(max_chars),  # before anything parses
            # Clients send the same few documents over and over: parse and validate each once.
            lambda: DocumentCache(parsed, validated),
            OperationChoice,
            StorableVariables,
        ],
    )
    # The compiled path only ever answers FAST_ROOT_FIELDS (never __schema / __type); it validates with
    # the same rules all the same.
    fast_rules = (*limit_rules, *([] if introspection else [NoSchemaIntrospectionCustomRule]))
    schema.max_entities = max_entities
    schema.limit_rules = fast_rules
    schema.fast_path = FastPath(
        schema,
        root_fields=FAST_ROOT_FIELDS,
        nested_fields=FAST_NESTED_FIELDS,
        max_tokens=max_tokens,
        extra_rules=fast_rules,
        answer_error=answered_error,
    )
    return schema


def export_sdl() -> str:
    """The public SDL (schema/schema.graphql): what clients of RecallQL or of a gateway can query."""
    return public_sdl(export_subgraph_sdl())


def export_subgraph_sdl() -> str:
    """The subgraph SDL (schema/subgraph.graphql): what `_service { sdl }` gives a gateway."""
    return subgraph_sdl(build_schema())
