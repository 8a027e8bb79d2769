"""Custom scalars: DateTime (UTC, milliseconds, ISO-8601 with Z), JSON and PerPage (Int or false)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, NewType

import strawberry
from graphql import (
    BooleanValueNode,
    FloatValueNode,
    IntValueNode,
    Undefined,
    ValueNode,
    value_from_ast_untyped,
)
from strawberry.scalars import JSON
from strawberry.schema.types.scalar import DEFAULT_SCALAR_REGISTRY
from strawberry.types.scalar import ScalarDefinition

from resolvers.clock import OutOfRange, parse_iso, to_iso


def _serialize_datetime(value: Any) -> str:
    return to_iso(value) if isinstance(value, int) else str(value)


def _parse_datetime(value: Any) -> int:
    if not isinstance(value, str):
        raise ValueError("DateTime must be an ISO-8601 string, for example 2026-01-01T00:00:00.000Z")
    try:
        return parse_iso(value)
    except OutOfRange as exc:
        message = f"Invalid DateTime {value!r}: it must fall within the years 1 to 9999 in UTC"
        raise ValueError(message) from exc
    except ValueError as exc:
        raise ValueError(
            f"Invalid DateTime {value!r}: use ISO-8601 with a timezone, e.g. 2026-01-01T00:00:00Z"
        ) from exc


DateTime = NewType("DateTime", int)
PerPage = NewType("PerPage", object)

DATETIME = strawberry.scalar(
    name="DateTime",
    description="A UTC instant with millisecond precision, as ISO-8601 with Z: 2026-01-01T00:00:00.000Z. "
    "Input accepts any ISO-8601 timestamp with a timezone; sub-millisecond digits are truncated.",
    serialize=_serialize_datetime,
    parse_value=_parse_datetime,
)


def _parse_per_page(value: Any) -> int | float | bool:
    if value is False:
        return False
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError("PerPage must be a non-negative integer or false")
    return value


def _parse_per_page_literal(node: ValueNode, _variables: Any = None) -> int | float | bool:
    if isinstance(node, BooleanValueNode):
        return _parse_per_page(node.value)
    if isinstance(node, IntValueNode):
        return int(node.value)
    if isinstance(node, FloatValueNode):
        return _parse_per_page(float(node.value))
    raise ValueError("PerPage must be a non-negative integer or false")


PER_PAGE = strawberry.scalar(
    name="PerPage",
    description="A page size: a non-negative integer, or false for every row. "
    "Other numbers are rejected by the operation with 'perPage must be >= 0'.",
    serialize=lambda v: v,
    parse_value=_parse_per_page,
    parse_literal=_parse_per_page_literal,
)


def _defined(value: Any) -> Any:
    """A JSON literal's value as JavaScript's JSON.stringify would keep it: a key whose variable was
    not given is left out, and such an item of a list is null (graphql-core gives its Undefined)."""
    if isinstance(value, dict):
        return {k: _defined(v) for k, v in value.items() if v is not Undefined}
    if isinstance(value, list):
        return [None if v is Undefined else _defined(v) for v in value]
    return value


def _parse_json_literal(node: ValueNode, variables: Any = None) -> Any:
    value = value_from_ast_untyped(node, variables)
    return None if value is Undefined else _defined(value)


# Strawberry's own JSON (its name, description and specifiedBy stay), reading literals as above.
JSON_SCALAR = replace(DEFAULT_SCALAR_REGISTRY[JSON], parse_literal=_parse_json_literal)

SCALAR_MAP: dict[object, ScalarDefinition] = {DateTime: DATETIME, PerPage: PER_PAGE, JSON: JSON_SCALAR}

__all__ = ["JSON", "SCALAR_MAP", "DateTime", "PerPage"]


def given(value: Any) -> Any:
    """UNSET and an explicit null both mean "omitted" (the contract's rule for GraphQL nulls)."""
    return None if value is strawberry.UNSET else value
