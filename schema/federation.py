"""RecallQL as an Apollo Federation v2 subgraph.

Entities (each resolved through the request's DataLoaders, so an `_entities` call with many
representations of one type costs one SQL statement, and checked against the caller's principal:
an entity the principal may not access resolves to null, as an unknown id does):

    type Resource @key(fields: "id")   # id: String!, the Mastra resourceId
    type Thread   @key(fields: "id")
    type Message  @key(fields: "id")

One key each: every id is a global primary key. A second, composite key such as "id resourceId" would
never be chosen by a query planner (a subgraph that can provide it can provide `id`, the cheaper key),
so it would check nothing; access is the principal's business (the gateway forwards the credential).

Linking another subgraph to RecallQL. RecallQL's resources are the end users of an application, so a
`User` subgraph that knows each user's resource id references the Resource entity, and the gateway
fetches the rest (threads, working memory) from RecallQL:

    extend schema @link(url: "https://specs.apollo.dev/federation/v2.0", import: ["@key"])

    type User @key(fields: "id") {
      id: ID!
      name: String
      resource: Resource          # resolved in the User subgraph as { id: <the user's resource id> }
    }

    type Resource @key(fields: "id", resolvable: false) {
      id: String!                 # String!, not ID!: composition requires the key types to match
    }

A query through the gateway such as `{ users { name resource { threads { threads { id title } } } } }`
then runs one `_entities` fetch against RecallQL for all the users' resources. Messages and threads
are referenced the same way (`type Message @key(fields: "id", resolvable: false) { id: ID! }`).

With authentication on, the gateway forwards each caller's credential to RecallQL (with Apollo
Gateway: a RemoteGraphQLDataSource whose willSendRequest sets the Authorization header, as
tests/federation/gateway.mjs does); entity fetches are then limited to what that credential grants.

For `@requires`, `Message.threadResourceId` (the resource owning the message's thread) is an
`@inaccessible` field: other subgraphs may require it, clients of the gateway cannot select it.

The SDLs: `_service { sdl }` (checked in as schema/subgraph.graphql) is the subgraph SDL with the
federation directives; schema/schema.graphql is the public API, i.e. that SDL without the federation
machinery (`_service`, `_entities`, `_Any`, `_Entity`, `@link`, `@key`, `@tag`, ...) and without
`@inaccessible` elements. Both are written by `python -m schema`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Final

import strawberry
from graphql import (
    DirectiveDefinitionNode,
    DirectiveNode,
    DocumentNode,
    FieldDefinitionNode,
    InputValueDefinitionNode,
    Node,
    SchemaDefinitionNode,
    SchemaExtensionNode,
    TypeDefinitionNode,
    build_ast_schema,
    parse,
    print_ast,
    print_schema,
)
from strawberry.federation.schema import FederationAny
from strawberry.federation.schema_directives import Key
from strawberry.types import Info
from strawberry.types.base import StrawberryObjectDefinition

from models.records import MessageRecord, ResourceRecord, ThreadRecord
from resolvers.context import RequestContext
from resolvers.errors import BadUserInput

# The federation spec the subgraph links. Pinned (Strawberry's default moves with its releases) and
# kept at the lowest version whose directives the schema uses, so older gateways and routers compose
# it too; Strawberry refuses to build the schema if a directive needs a newer one.
FEDERATION_VERSION: Final = "2.0"
# The @tag every entity carries (contracts can include or exclude RecallQL's types by it).
ENTITY_TAG = "memory"

# Directives that only mean something to a gateway or to composition.
FEDERATION_DIRECTIVES = frozenset(
    {
        "link",
        "key",
        "shareable",
        "inaccessible",
        "tag",
        "external",
        "requires",
        "provides",
        "override",
        "composeDirective",
        "interfaceObject",
        "authenticated",
        "requiresScopes",
        "policy",
        "context",
        "fromContext",
        "cost",
        "listSize",
        "extends",
    }
)
# What Strawberry adds to a federated schema: the root fields, their types and the directive types.
FEDERATION_FIELDS = frozenset({"_service", "_entities"})
FEDERATION_TYPES = frozenset({"_Service", "_Entity", "_Any", "_FieldSet"})


def _is_federation_type(name: str) -> bool:
    return name in FEDERATION_TYPES or name.startswith(("link__", "federation__"))


# ---------------------------------------------------------------------------------------------- schema
class FederatedSchema(strawberry.federation.Schema):
    """Strawberry's federation schema with a stricter `_entities`: a representation must name one of
    this subgraph's entities (anything else is BAD_USER_INPUT for that item, not an internal error),
    and every reference resolves through the entity's `resolve_reference`, which loads through the
    request's DataLoaders: all the representations of one request are fetched in one batch per type."""

    # Set by build_schema; a gateway batches references, so a single call can carry thousands.
    max_entities: int | None = None

    def entities_resolver(self, info: Info, representations: list[FederationAny]) -> list[FederationAny]:
        if self.max_entities is not None and len(representations) > self.max_entities:
            raise BadUserInput(
                f"_entities may resolve at most {self.max_entities} representations per call, got "
                f"{len(representations)}.",
                limit="maxEntities",
                max=self.max_entities,
            )
        info.context.rows.spend(len(representations), "this _entities call")
        entities = self._entity_types()
        results: list[Any] = []
        for index, representation in enumerate(representations):
            # Anything but an object has no __typename, so it is reported like an unknown one.
            data = representation if isinstance(representation, dict) else {}
            typename = data.get("__typename")
            entity = entities.get(typename) if isinstance(typename, str) else None
            if entity is None:
                known = ", ".join(sorted(entities))
                if not isinstance(representation, dict):
                    problem = f"is not an object with a __typename (one of {known})"
                elif typename is None:
                    problem = f"has no __typename (one of {known})"
                else:
                    # json.dumps: JSON's words (Python's repr said None, True), whatever the value.
                    problem = f"__typename {json.dumps(typename)} is not an entity of this subgraph"
                    problem += f" (one of {known})"
                results.append(BadUserInput(f"representations[{index}] {problem}."))
                continue
            # Only the key (every entity here is @key(fields: "id")): other fields of a representation
            # are not needed, and one named like a parameter (info, cls) failed the whole call.
            key = {"id": data["id"]} if "id" in data else {}
            # A coroutine: graphql-core awaits the items together, so the loads share one batch.
            results.append(entity.resolve_reference(info, **key))
        return results

    def _entity_types(self) -> dict[str, Any]:
        cached = getattr(self, "_entities_by_name", None)
        if cached is None:
            cached = {}
            for name, type_ in self.schema_converter.type_map.items():
                definition = getattr(type_, "definition", None)
                if not isinstance(definition, StrawberryObjectDefinition):
                    continue
                if not hasattr(definition.origin, "resolve_reference"):
                    continue
                if any(isinstance(d, Key) for d in definition.directives or ()):
                    cached[name] = definition.origin
            self._entities_by_name = cached
        return cached


# ---------------------------------------------------------------------------------------------- references
def key_value(representation: dict[str, Any], field: str, typename: str) -> str:
    """A key field of a representation, as a string (ids arrive serialised: strings)."""
    value = representation.get(field)
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise BadUserInput(f"A {typename} representation needs its key field {field!r} (a string).")


async def resource_reference(
    context: RequestContext, representation: dict[str, Any]
) -> ResourceRecord | None:
    resource_id = key_value(representation, "id", "Resource")
    if not context.principal.can_access(resource_id):
        return None
    return await context.resources.load(resource_id)


async def thread_reference(context: RequestContext, representation: dict[str, Any]) -> ThreadRecord | None:
    record = await context.threads.load(key_value(representation, "id", "Thread"))
    return record if record is not None and context.principal.can_access(record.resource_id) else None


async def message_reference(context: RequestContext, representation: dict[str, Any]) -> MessageRecord | None:
    """A message is visible when its own resourceId is granted (resolvers.auth: one stored without a
    resource, to unrestricted principals only)."""
    record = await context.messages.load(key_value(representation, "id", "Message"))
    return record if record is not None and context.principal.can_access(record.resource_id) else None


# ---------------------------------------------------------------------------------------------- SDL
def subgraph_sdl(schema: strawberry.federation.Schema) -> str:
    """What `_service { sdl }` answers (a gateway composes this), with a final newline."""
    return schema.as_str() + "\n"


def public_sdl(subgraph: str) -> str:
    """The public API of a subgraph SDL: the federation machinery and the @inaccessible elements
    removed. The result is built into a schema (so it is valid on its own) and printed by graphql-core;
    directive definitions the API keeps (@oneOf) are printed first."""
    document = _strip(parse(subgraph))
    directives = [d for d in document.definitions if isinstance(d, DirectiveDefinitionNode)]
    printed = [print_ast(d) for d in directives]
    printed.append(print_schema(build_ast_schema(document)))
    return "\n\n".join(printed) + "\n"


def _has_inaccessible(node: Node) -> bool:
    return any(d.name.value == "inaccessible" for d in getattr(node, "directives", None) or ())


def _without_federation(directives: Iterable[DirectiveNode] | None) -> tuple[DirectiveNode, ...]:
    return tuple(d for d in directives or () if d.name.value not in FEDERATION_DIRECTIVES)


def _strip(document: DocumentNode) -> DocumentNode:
    kept: list[Any] = []
    for definition in document.definitions:
        if isinstance(definition, SchemaExtensionNode | SchemaDefinitionNode):
            directives = _without_federation(definition.directives)
            operations = getattr(definition, "operation_types", None)
            if isinstance(definition, SchemaExtensionNode) and not directives and not operations:
                continue
            kept.append(_copy(definition, directives=directives))
            continue
        if isinstance(definition, DirectiveDefinitionNode):
            if definition.name.value not in FEDERATION_DIRECTIVES:
                kept.append(definition)
            continue
        if not isinstance(definition, TypeDefinitionNode):
            raise ValueError(f"unexpected definition in a subgraph SDL: {definition.kind}")
        name = definition.name.value
        if _is_federation_type(name) or _has_inaccessible(definition):
            continue
        changes: dict[str, Any] = {"directives": _without_federation(definition.directives)}
        # Only some type definitions have fields (object, interface, input) or values (enum).
        field_nodes = getattr(definition, "fields", None)
        if field_nodes is not None:
            changes["fields"] = tuple(_strip_field(f) for f in field_nodes if not _hidden_field(f))
        value_nodes = getattr(definition, "values", None)
        if value_nodes is not None:
            changes["values"] = tuple(
                _copy(v, directives=_without_federation(v.directives))
                for v in value_nodes
                if not _has_inaccessible(v)
            )
        kept.append(_copy(definition, **changes))
    return DocumentNode(definitions=tuple(kept))


def _hidden_field(field: FieldDefinitionNode | InputValueDefinitionNode) -> bool:
    return field.name.value in FEDERATION_FIELDS or _has_inaccessible(field)


def _strip_field(field: Any) -> Any:
    changes: dict[str, Any] = {"directives": _without_federation(field.directives)}
    if getattr(field, "arguments", None) is not None:
        changes["arguments"] = tuple(
            _copy(a, directives=_without_federation(a.directives))
            for a in field.arguments
            if not _has_inaccessible(a)
        )
    return _copy(field, **changes)


def _copy(node: Any, **changes: Any) -> Any:
    """A shallow copy of an AST node with some attributes replaced."""
    return node.__class__(**{**{key: getattr(node, key) for key in node.keys}, **changes})
