"""A compiled execution path for the hot read queries.

graphql-core resolves every field of every list item through its general machinery (resolve info,
awaitable checks, completion per field), which for a page of 20 messages costs several times the
recall itself. This module compiles a validated query document once into a plan: the root fields run
through their normal Strawberry resolvers (same argument coercion, same engine, same errors), and the
result objects are then serialised by precomputed per-type field getters.

It handles queries whose selections below the root are plain fields (no arguments, no directives, no
async resolvers) or nested fields it is told to resolve (`nested_fields`: Thread.recall). Those run
through their resolvers too, after the roots and all at once, so that what batches their reads (the
request's PageBatch) sees them together as it does under normal execution. Anything else (mutations,
subscriptions, @skip/@include, `Message.thread`, a bug in a resolver, a null in a non-null position, a
nested field's error) returns None, and the caller runs the normal Strawberry execution instead, which
produces identical results and the proper errors. A root resolver's expected error or outage is
answered here, shaped by the schema's error policy (FastPath's answer_error).
Equivalence with that path is tested in tests/test_fastpath.py.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any, cast

import strawberry
from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLBoolean,
    GraphQLError,
    GraphQLField,
    GraphQLID,
    GraphQLInterfaceType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLResolveInfo,
    GraphQLSchema,
    GraphQLString,
    GraphQLUnionType,
    InlineFragmentNode,
    OperationDefinitionNode,
    OperationType,
    SelectionSetNode,
    located_error,
    parse,
    specified_rules,
)
from graphql.execution.values import VariableValues, get_argument_values, get_variable_values
from graphql.pyutils import Path
from strawberry.schema.schema import validate_document
from strawberry.types.base import get_object_definition

from schema.caches import MISSING, TextBudgetCache

_Getter = Callable[[Any], Any]
_Serializer = Callable[[Any], dict[str, Any]]


class _Unsupported(Exception):
    pass


@dataclass(slots=True)
class _Field:
    key: str
    getter: _Getter
    nullable: bool
    # One of: a leaf serializer, a compiled object serializer, or one per union member (by type name).
    leaf: Callable[[Any], Any] | None
    plan: _Serializer | None
    union: dict[str, _Serializer] | None
    list_depth: int
    item_nullable: bool
    # The Python attribute the getter reads, when it is a plain attribute (the serializer reads it inline).
    attr: str | None = None
    # Set for a nested field resolved after the roots (the serializer leaves a placeholder, see _defer).
    nested: _Nested | None = None


@dataclass(slots=True)
class _Nested:
    field_def: GraphQLField
    parent: GraphQLObjectType
    nodes: list[FieldNode]
    shape: _Field  # how the resolver's value is completed (its getter is unused)


@dataclass(slots=True)
class _RootField:
    key: str
    field_name: str
    field_nodes: list[FieldNode]
    shape: _Field  # how the resolver's value is completed (its getter is unused)


@dataclass(slots=True)
class Plan:
    document: DocumentNode
    operation: OperationDefinitionNode
    fragments: dict[str, FragmentDefinitionNode]
    roots: list[_RootField]
    # What callers work out once per compiled document (the HTTP layer keeps its metric labels here).
    memo: dict[str, Any] = dataclass_field(default_factory=dict)


class FastPath:
    def __init__(
        self,
        schema: strawberry.Schema,
        *,
        root_fields: frozenset[str],
        nested_fields: frozenset[tuple[str, str]] = frozenset(),
        max_tokens: int,
        extra_rules: tuple[Any, ...] = (),
        cache_size: int = 512,
        answer_error: Callable[[GraphQLError, Any], dict[str, Any] | None] | None = None,
    ) -> None:
        """`answer_error(error, context)`: a root resolver's error, formatted as the normal path would
        answer it, or None for the normal path to run the query again and report it."""
        self.answer_error = answer_error
        self.strawberry_schema = schema
        self.schema: GraphQLSchema = schema._schema
        self.root_fields = root_fields
        self.nested_fields = nested_fields  # (type, field) pairs, resolved after the roots
        self.max_tokens = max_tokens
        self._plans = TextBudgetCache(max_entries=cache_size)
        self._getters: dict[tuple[str, str], tuple[_Getter, str | None]] = {}
        # The same rules the normal path validates with: graphql-core's, Strawberry's, our limits.
        self._rules = (*specified_rules, *extra_rules)

    # ------------------------------------------------------------------ compile
    def plan(self, query: str, operation_name: str | None) -> Plan | None:
        key = (query, operation_name)
        plan = self._plans.get(key)
        if plan is not MISSING:
            return cast(Plan | None, plan)
        try:
            plan = self._compile(query, operation_name)
        except Exception:  # unsupported, invalid or anything unexpected: the normal path handles it
            plan = None
        # The name is part of the key: charged too (long names of no operation filled memory unseen).
        self._plans.put(key, plan, len(query) + len(operation_name or ""))
        return cast(Plan | None, plan)

    def _compile(self, query: str, operation_name: str | None) -> Plan:
        document = parse(query, max_tokens=self.max_tokens)
        # The normal path validates with the schema's rules and our limits; a document with any
        # error is left to it, so the client sees exactly the usual errors.
        if validate_document(self.schema, document, self._rules):
            raise _Unsupported
        operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
        operation: OperationDefinitionNode | None
        if operation_name is None and len(operations) == 1:
            operation = operations[0]
        else:
            operation = next((o for o in operations if o.name and o.name.value == operation_name), None)
            if operation is None:
                raise _Unsupported
        if operation.operation is not OperationType.QUERY or operation.directives:
            raise _Unsupported
        fragments = {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
        query_type = self.schema.query_type
        assert query_type is not None
        roots: list[_RootField] = []
        for key, nodes in self._collect(operation.selection_set, query_type, fragments).items():
            name = nodes[0].name.value
            if name not in self.root_fields:
                raise _Unsupported
            field_def = query_type.fields[name]
            shape = self._compile_field(query_type, key, name, field_def.type, nodes, fragments, root=True)
            roots.append(_RootField(key, name, nodes, shape))
        return Plan(document, operation, fragments, roots)

    def _collect(
        self,
        selection_set: SelectionSetNode,
        parent: GraphQLObjectType,
        fragments: dict[str, FragmentDefinitionNode],
        visited: set[str] | None = None,
    ) -> OrderedDict[str, list[FieldNode]]:
        """The fields of a selection set by response key (the spec's CollectFields). `visited`: the
        fragments already spread in this collection, which adds nothing when spread again (without it,
        fragments that each spread the next twice expand exponentially)."""
        visited = set() if visited is None else visited
        fields: OrderedDict[str, list[FieldNode]] = OrderedDict()
        for selection in selection_set.selections:
            if selection.directives:
                raise _Unsupported
            if isinstance(selection, FieldNode):
                key = selection.alias.value if selection.alias else selection.name.value
                fields.setdefault(key, []).append(selection)
            elif isinstance(selection, InlineFragmentNode):
                condition = selection.type_condition
                if condition is None or condition.name.value == parent.name:
                    for key, nodes in self._collect(
                        selection.selection_set, parent, fragments, visited
                    ).items():
                        fields.setdefault(key, []).extend(nodes)
                elif not self._applies(condition.name.value, parent):
                    continue
                else:
                    raise _Unsupported
            elif isinstance(selection, FragmentSpreadNode):
                if selection.name.value in visited:
                    continue
                fragment = fragments[selection.name.value]
                if fragment.type_condition.name.value == parent.name:
                    visited.add(selection.name.value)
                    for key, nodes in self._collect(
                        fragment.selection_set, parent, fragments, visited
                    ).items():
                        fields.setdefault(key, []).extend(nodes)
                elif self._applies(fragment.type_condition.name.value, parent):
                    raise _Unsupported
        return fields

    def _applies(self, condition: str, parent: GraphQLObjectType) -> bool:
        """Whether a fragment on `condition` applies to objects of type `parent`."""
        target = self.schema.type_map.get(condition)
        if isinstance(target, GraphQLUnionType):
            return parent in target.types
        # Only interfaces have implementations (an object or input type has no possible types).
        return target is parent or (
            isinstance(target, GraphQLInterfaceType) and parent in self.schema.get_possible_types(target)
        )

    def _compile_object(
        self, parent: GraphQLObjectType, nodes: list[FieldNode], fragments: dict[str, FragmentDefinitionNode]
    ) -> _Serializer:
        merged: OrderedDict[str, list[FieldNode]] = OrderedDict()
        visited: set[str] = set()  # one collection over all the nodes (the spec's CollectSubfields)
        for node in nodes:
            if node.selection_set is None:
                raise _Unsupported
            for key, sub in self._collect(node.selection_set, parent, fragments, visited).items():
                merged.setdefault(key, []).extend(sub)
        plan: list[_Field] = []
        for key, sub_nodes in merged.items():
            name = sub_nodes[0].name.value
            if name == "__typename":
                type_name = parent.name
                plan.append(_Field(key, _constant(type_name), False, _identity, None, None, 0, False))
                continue
            field_def = parent.fields[name]
            if (parent.name, name) in self.nested_fields:
                # Validation made every node of this key ask the same arguments (fields merge only so).
                shape = self._compile_field(
                    parent, key, name, field_def.type, sub_nodes, fragments, root=True
                )
                nested = _Nested(field_def, parent, sub_nodes, shape)
                plan.append(_Field(key, _identity, shape.nullable, None, None, None, 0, False, nested=nested))
                continue
            if any(n.arguments for n in sub_nodes) or field_def.args:
                raise _Unsupported
            plan.append(self._compile_field(parent, key, name, field_def.type, sub_nodes, fragments))
        return _serializer(plan)

    def _compile_field(
        self,
        parent: GraphQLObjectType,
        key: str,
        name: str,
        gql_type: Any,
        nodes: list[FieldNode],
        fragments: dict[str, FragmentDefinitionNode],
        *,
        root: bool = False,
    ) -> _Field:
        nullable = not isinstance(gql_type, GraphQLNonNull)
        inner = gql_type.of_type if not nullable else gql_type
        depth, item_nullable = 0, True
        while isinstance(inner, GraphQLList):
            depth += 1
            item = inner.of_type
            item_nullable = not isinstance(item, GraphQLNonNull)
            inner = item.of_type if not item_nullable else item
        getter, attr = (_identity, None) if root else self._getter(parent, name)
        if isinstance(inner, GraphQLObjectType):
            return _Field(
                key,
                getter,
                nullable,
                None,
                self._compile_object(inner, nodes, fragments),
                None,
                depth,
                item_nullable,
                attr,
            )
        if isinstance(inner, GraphQLUnionType):
            union = {}
            for member in inner.types:
                union[member.name] = self._compile_object(member, nodes, fragments)
            return _Field(key, getter, nullable, None, None, union, depth, item_nullable, attr)
        if any(n.selection_set for n in nodes):
            raise _Unsupported
        return _Field(key, getter, nullable, inner.serialize, None, None, depth, item_nullable, attr)

    def _getter(self, parent: GraphQLObjectType, name: str) -> tuple[_Getter, str | None]:
        cache_key = (parent.name, name)
        if cache_key in self._getters:
            return self._getters[cache_key]
        origin = self.strawberry_schema.get_type_by_name(parent.name)
        definition = get_object_definition(getattr(origin, "origin", None)) if origin is not None else None
        if definition is None:
            raise _Unsupported
        field = next(
            (
                f
                for f in definition.fields
                if f.graphql_name == name or (f.graphql_name is None and _camel(f.python_name) == name)
            ),
            None,
        )
        if field is None:
            raise _Unsupported
        resolver = field.base_resolver
        attr: str | None = None
        getter: _Getter
        if resolver is None:
            attr = python_name = field.python_name

            def getter(obj: Any) -> Any:
                return getattr(obj, python_name)
        else:
            func = resolver.wrapped_func
            # An unbound classmethod object (not callable) made inspect.signature raise here anyway.
            if not callable(func):
                raise _Unsupported
            params = [p for p in inspect.signature(func).parameters.values() if p.name != "self"]
            if resolver.is_async or params or field.extensions:
                raise _Unsupported
            getter = func
        self._getters[cache_key] = (getter, attr)
        return getter, attr

    # ------------------------------------------------------------------ execute
    async def execute(
        self,
        plan: Plan,
        variables: dict[str, Any] | None,
        context: Any,
        around_field: Callable[[GraphQLResolveInfo, dict[str, Any]], AbstractContextManager[Any]]
        | None = None,
    ) -> dict[str, Any] | None:
        """The plan's answer, or None for the normal path to give. `around_field`: entered around each
        resolver that runs here, the roots' and the nested fields' (tracing spans; the schema's
        extensions do not run here)."""
        coerced = get_variable_values(self.schema, plan.operation.variable_definitions or [], variables or {})
        if isinstance(coerced, list):  # variable errors: the normal path reports them
            return None
        query_type = self.schema.query_type
        assert query_type is not None
        data: dict[str, Any] = {}
        pending: list[_Deferred] = []
        token = _PENDING.set(pending)
        try:
            field_defs = [query_type.fields[root.field_name] for root in plan.roots]
            # Nothing between here and the awaits can fail: a coroutine created and then dropped by an
            # exception would never be awaited.
            resolving = [
                self._resolve(
                    plan,
                    field_def,
                    root.field_nodes,
                    query_type,
                    Path(None, root.key, "Query"),
                    None,
                    coerced,
                    context,
                    around_field,
                )
                for root, field_def in zip(plan.roots, field_defs, strict=True)
            ]
            values: list[Any] | None
            if len(resolving) == 1:
                try:
                    values = [await resolving[0]]
                except Exception as exc:
                    return self._failed(plan, plan.roots[0], exc, context)
            else:
                # Side by side, as normal execution runs a query's root fields: their reads overlap
                # (aliased recalls: PostgreSQL's pool, vector searches). Which of several fail, and so
                # the answer, is the normal path's to give (see _failed).
                values = await _all_or_none(resolving)
                if values is None:
                    return None
            for root, value in zip(plan.roots, values, strict=True):
                if value is None:
                    _check_nullable(root.shape)
                    data[root.key] = None
                else:
                    data[root.key] = _complete(value, root.shape, root.shape.list_depth)
            while pending:
                # Every nested field the answer so far holds, resolved concurrently: their reads batch.
                batch = pending[:]
                pending.clear()
                paths = _paths(data, {id(target) for _, _, target in batch})
                # Everything that can fail is worked out before the first coroutine exists: one created
                # and then dropped by an exception would never be awaited.
                calls = [
                    (obj, field, _nested(field), paths[id(target)], target) for obj, field, target in batch
                ]
                outcomes = await _all_or_none(
                    [
                        self._resolve(
                            plan,
                            nested.field_def,
                            nested.nodes,
                            nested.parent,
                            path.add_key(field.key, nested.parent.name),
                            obj,
                            coerced,
                            context,
                            around_field,
                        )
                        for obj, field, nested, path, _ in calls
                    ]
                )
                if outcomes is None:
                    return None
                for (_, field, nested, _, target), outcome in zip(calls, outcomes, strict=True):
                    if outcome is None:
                        _check_nullable(field)
                    else:
                        target[field.key] = _complete(outcome, nested.shape, nested.shape.list_depth)
        except Exception:  # any failure: the normal path re-runs the query and reports it properly
            return None
        finally:
            _PENDING.reset(token)
        return {"data": data}

    async def _resolve(
        self,
        plan: Plan,
        field_def: GraphQLField,
        nodes: list[FieldNode],
        parent: GraphQLObjectType,
        path: Path,
        source: Any,
        coerced: VariableValues,
        context: Any,
        around_field: Callable[[GraphQLResolveInfo, dict[str, Any]], AbstractContextManager[Any]] | None,
    ) -> Any:
        """A field's value through its resolver, as graphql-core calls it."""
        args = get_argument_values(field_def, nodes[0], coerced)
        info = GraphQLResolveInfo(
            nodes[0].name.value,
            nodes,
            field_def.type,
            parent,
            path,
            self.schema,
            plan.fragments,
            None,
            plan.operation,
            coerced,
            context,
            # graphql-core types this as returning TypeGuard, typeshed's isawaitable as TypeIs:
            # the same check, the two stubs disagree.
            inspect.isawaitable,  # type: ignore[arg-type]
            None,
            # No async-work helpers: the fields resolved here do not track or gather work.
            None,  # type: ignore[arg-type]
        )
        assert field_def.resolve is not None
        with nullcontext() if around_field is None else around_field(info, args):
            value = field_def.resolve(source, info, **args)
            if inspect.isawaitable(value):
                value = await value
        return value

    def _failed(self, plan: Plan, root: _RootField, exc: Exception, context: Any) -> dict[str, Any] | None:
        """The answer to a query whose one root resolver raised, as the normal path gives it (the error
        at the root's path; null data for a non-null root), or None for that path to run it again. With
        several roots the normal path runs them concurrently, and which others fail too is its to say."""
        if self.answer_error is None or len(plan.roots) != 1:
            return None
        formatted = self.answer_error(located_error(exc, root.field_nodes, [root.key]), context)
        if formatted is None:
            return None
        return {"data": {root.key: None} if root.shape.nullable else None, "errors": [formatted]}


class _NullInNonNull(Exception):
    pass


# A nested field met while serialising: (its parent object, the field, the dict its value goes into).
_Deferred = tuple[Any, _Field, dict[str, Any]]
# The nested fields met so far by the execute() running in this context (serializers are synchronous and
# generated, so they report through here rather than through a parameter).
_PENDING: ContextVar[list[_Deferred] | None] = ContextVar("fastpath_pending", default=None)


async def _all_or_none(resolving: list[Coroutine[Any, Any, Any]]) -> list[Any] | None:
    """The values of resolvers run side by side, or None when any of them raised: the normal path then
    answers, placing the errors (and the nulls they cause) where they belong."""
    values = await asyncio.gather(*resolving, return_exceptions=True)
    for value in values:
        if isinstance(value, BaseException):
            if not isinstance(value, Exception):
                raise value  # a cancellation is not a resolver's error
            return None
    return values


def _nested(field: _Field) -> _Nested:
    assert field.nested is not None
    return field.nested


def _defer(obj: Any, field: _Field, target: dict[str, Any]) -> None:
    pending = _PENDING.get()
    if pending is None:  # serialised outside execute(): nothing would ever resolve it
        raise _Unsupported
    pending.append((obj, field, target))


def _paths(data: dict[str, Any], wanted: set[int]) -> dict[int, Path]:
    """The response path of each wanted dict (by id) in the answer so far: the path its nested fields'
    resolvers see (info.path, in traced spans), found by a walk rather than carried through every
    serializer call."""
    found: dict[int, Path] = {}
    stack: list[tuple[Any, Path]] = [(value, Path(None, key, "Query")) for key, value in data.items()]
    while stack and len(found) < len(wanted):
        value, path = stack.pop()
        if isinstance(value, dict):
            if id(value) in wanted:
                found[id(value)] = path
            stack.extend((v, path.add_key(k)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, path.add_key(i)) for i, v in enumerate(value))
    return found


# Leaf serializers that return a value of this exact class unchanged (graphql-core's String, ID and
# Boolean): the generated code skips the call for such values.
_PASS_THROUGH: dict[Any, str] = {
    GraphQLString.serialize: "str",
    GraphQLID.serialize: "str",
    GraphQLBoolean.serialize: "bool",
}


def _serializer(plan: list[_Field]) -> _Serializer:
    """One object's selection as a generated function: a dict display of its fields' values.

    A page of 20 messages runs this hundreds of times per request; generated straight-line code with
    attributes read inline costs about half of a loop over field descriptions.
    """
    env: dict[str, Any] = {"_NullInNonNull": _NullInNonNull, "_complete": _complete, "_defer": _defer}
    lines = ["def serialize(obj):"]
    entries = []
    deferred = []
    for i, field in enumerate(plan):
        env[f"get{i}"], env[f"leaf{i}"], env[f"field{i}"] = field.getter, field.leaf, field
        if field.nested is not None:  # its key in its place, its value once resolved (execute)
            entries.append(f"{field.key!r}: None")
            deferred.append(f"    _defer(obj, field{i}, d)")
            continue
        value = f"v{i}"
        read = f"obj.{field.attr}" if field.attr and field.attr.isidentifier() else f"get{i}(obj)"
        lines.append(f"    {value} = {read}")
        if field.leaf is not None and not field.list_depth:
            if field.leaf is _identity:
                convert = None
            elif field.leaf in _PASS_THROUGH:
                cls = _PASS_THROUGH[field.leaf]
                convert = f"{value} if {value}.__class__ is {cls} else leaf{i}({value})"
            else:
                convert = f"leaf{i}({value})"
        else:
            convert = f"_complete({value}, field{i}, {field.list_depth})"
        if not field.nullable:
            lines.append(f"    if {value} is None: raise _NullInNonNull({field.key!r})")
            if convert:
                lines.append(f"    {value} = {convert}")
        elif convert:
            lines.append(f"    if {value} is not None: {value} = {convert}")
        entries.append(f"{field.key!r}: {value}")
    if deferred:
        lines.append("    d = {" + ", ".join(entries) + "}")
        lines.extend(deferred)
        lines.append("    return d")
    else:
        lines.append("    return {" + ", ".join(entries) + "}")
    # The source holds only GraphQL names (validated: [_A-Za-z][_0-9A-Za-z]*, written with repr) and
    # Python attribute names of the schema's types; every value is passed in through env.
    exec(compile("\n".join(lines), "<fastpath serializer>", "exec"), env)
    return env["serialize"]


def _check_nullable(field: _Field) -> None:
    if not field.nullable:
        raise _NullInNonNull(field.key)


def _complete(value: Any, field: _Field, depth: int) -> Any:
    if depth:
        items: list[Any] = []
        for item in value:
            if item is None:
                if not field.item_nullable:
                    raise _NullInNonNull(field.key)
                items.append(None)
            else:
                items.append(_complete(item, field, depth - 1))
        return items
    if field.leaf is not None:
        return field.leaf(value)
    if field.plan is not None:
        return field.plan(value)
    assert field.union is not None
    return field.union[_type_name(type(value))](value)


_TYPE_NAMES: dict[type, str] = {}


def _type_name(cls: type) -> str:
    """The GraphQL name of a union member's Python class (looked up once per class)."""
    name = _TYPE_NAMES.get(cls)
    if name is None:
        definition = get_object_definition(cls)
        if definition is None:
            raise _Unsupported
        name = _TYPE_NAMES[cls] = definition.name
    return name


def _identity(value: Any) -> Any:
    return value


def _constant(value: str) -> _Getter:
    return lambda _obj: value


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)
