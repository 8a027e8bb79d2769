"""Schema quality: every element documented, naming conventions, deliberate deprecations.

Walks the executable schema (what RecallQL serves, @inaccessible fields included) and the checked-in
public SDL. The federation machinery Strawberry adds (`_service`, `_entities`, `_Service`, `_Entity`,
`_Any`, `link__*`) is not RecallQL's API and is skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from graphql import (
    GraphQLArgument,
    GraphQLEnumType,
    GraphQLEnumValue,
    GraphQLField,
    GraphQLInputField,
    GraphQLInputObjectType,
    GraphQLInterfaceType,
    GraphQLNamedType,
    GraphQLObjectType,
    GraphQLSchema,
    GraphQLUnionType,
    build_schema,
    is_introspection_type,
    is_specified_scalar_type,
)

from schema import build_schema as build_recallql_schema
from schema.build import SDL_PATH
from schema.federation import FEDERATION_FIELDS

PASCAL_CASE = re.compile(r"[A-Z][A-Za-z0-9]*")
CAMEL_CASE = re.compile(r"[a-z][A-Za-z0-9]*")
UPPER_SNAKE = re.compile(r"[A-Z][A-Z0-9]*(_[A-Z0-9]+)*")
# Input object names end with Input, or with a suffix the GraphQL world knows for arguments that are not
# "an object to write": orderings (`...OrderBy`) and filters (`...Filter`).
INPUT_SUFFIXES = ("Input", "OrderBy", "Filter")
# Every deprecation, with its reason: a new one must be added here on purpose.
DEPRECATED = {"Query.recall(includeSystemReminders:)": "Use hideSignals."}

Element = GraphQLNamedType | GraphQLField | GraphQLArgument | GraphQLInputField | GraphQLEnumValue


def own_types(schema: GraphQLSchema) -> Iterator[GraphQLNamedType]:
    for name, type_ in sorted(schema.type_map.items()):
        if is_introspection_type(type_) or is_specified_scalar_type(type_):
            continue
        if name.startswith(("_", "link__", "federation__")):
            continue
        yield type_


def elements(schema: GraphQLSchema) -> Iterator[tuple[str, str, Element]]:
    """(kind, schema coordinate, element) for every documentable element."""
    for type_ in own_types(schema):
        yield "type", type_.name, type_
        if isinstance(type_, GraphQLObjectType | GraphQLInterfaceType):
            for field_name, field in type_.fields.items():
                if field_name in FEDERATION_FIELDS:
                    continue
                yield "field", f"{type_.name}.{field_name}", field
                for arg_name, arg in field.args.items():
                    yield "argument", f"{type_.name}.{field_name}({arg_name}:)", arg
        elif isinstance(type_, GraphQLInputObjectType):
            for field_name, field in type_.fields.items():
                yield "input field", f"{type_.name}.{field_name}", field
        elif isinstance(type_, GraphQLEnumType):
            for value_name, value in type_.values.items():
                yield "enum value", f"{type_.name}.{value_name}", value


SERVED = build_recallql_schema()._schema
PUBLIC = build_schema(SDL_PATH.read_text())


@pytest.mark.parametrize("schema", [SERVED, PUBLIC], ids=["served", "public-sdl"])
def test_every_element_has_a_description(schema: GraphQLSchema) -> None:
    missing = [
        f"{kind} {coordinate}" for kind, coordinate, element in elements(schema) if not element.description
    ]
    assert not missing, "undocumented:\n" + "\n".join(missing)


def test_descriptions_are_prose() -> None:
    bad = []
    for kind, coordinate, element in elements(SERVED):
        text = element.description or ""
        name = coordinate.rsplit(".", 1)[-1].strip("():")
        if (
            text != text.strip()
            or len(text) < 5
            or text.lower().rstrip(".") == name.lower()
            or "TODO" in text
        ):
            bad.append(f"{kind} {coordinate}: {text!r}")
    assert not bad, "\n".join(bad)


def test_names_follow_the_conventions() -> None:
    bad = []
    for kind, coordinate, element in elements(SERVED):
        name = coordinate.rsplit(".", 1)[-1].split("(")[-1].rstrip(":)")
        if kind == "type":
            if not PASCAL_CASE.fullmatch(name):
                bad.append(f"type {name}: PascalCase")
            if isinstance(element, GraphQLInputObjectType) and not name.endswith(INPUT_SUFFIXES):
                bad.append(f"input {name}: name it ...Input (or ...OrderBy / ...Filter)")
            if not isinstance(element, GraphQLInputObjectType) and name.endswith("Input"):
                bad.append(f"{name}: only input objects end with Input")
        elif kind == "enum value":
            if not UPPER_SNAKE.fullmatch(name):
                bad.append(f"enum value {coordinate}: UPPER_SNAKE_CASE")
        elif not CAMEL_CASE.fullmatch(name):
            bad.append(f"{kind} {coordinate}: camelCase")
    assert not bad, "\n".join(bad)


def test_union_members_and_interfaces_are_own_types() -> None:
    """Part unions hold object types named ...Part (clients switch on __typename)."""
    part = SERVED.type_map["MessagePart"]
    assert isinstance(part, GraphQLUnionType)
    assert all(member.name.endswith("Part") for member in part.types)


def test_deprecations_are_deliberate_and_explained() -> None:
    found: dict[str, str] = {}
    for _kind, coordinate, element in elements(SERVED):
        reason = getattr(element, "deprecation_reason", None)
        if reason is not None:
            found[coordinate] = reason
            assert element.description, f"{coordinate} is deprecated but undocumented"
    assert found == DEPRECATED
    # The deprecated argument still works and is still in the public SDL, with its reason.
    recall = PUBLIC.query_type.fields["recall"]
    assert recall.args["includeSystemReminders"].deprecation_reason == "Use hideSignals."
