"""The depth and alias limits as one validation rule that walks each fragment once.

Strawberry's QueryDepthLimiter and MaxAliasesLimiter walk a fragment again at every spread of it: twenty
fragments that each spread the next twice (826 characters) took 8.5 s of validation on the event loop.
Here each fragment's shape (its depth and its aliases, counted as often as they are spread) is
computed once and reused at every spread, so validation is linear in the document's length while the
limits still apply to the document as it expands. The wording of the errors is Strawberry's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graphql import (
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
    ValidationRule,
)


@dataclass(frozen=True, slots=True)
class _Shape:
    depth: int  # nesting of fields with a selection set below this point (Strawberry's measure)
    aliases: int  # aliased fields, each counted once per spread of the fragment holding it


_EMPTY = _Shape(0, 0)


class _Walker:
    """Shapes of selection sets, with each fragment's shape memoised. A spread of an unknown fragment
    or one in a cycle counts as empty: KnownFragmentNamesRule and NoFragmentCyclesRule report those."""

    def __init__(self, fragments: dict[str, FragmentDefinitionNode]) -> None:
        self.fragments = fragments
        self.shapes: dict[str, _Shape] = {}
        self.open: set[str] = set()

    def selection_set(self, selection_set: SelectionSetNode | None) -> _Shape:
        depth = aliases = 0
        for selection in selection_set.selections if selection_set is not None else ():
            if isinstance(selection, FieldNode):
                shape = self.field(selection)
            elif isinstance(selection, InlineFragmentNode):
                shape = self.selection_set(selection.selection_set)
            elif isinstance(selection, FragmentSpreadNode):
                shape = self.fragment(selection.name.value)
            else:  # pragma: no cover - graphql-core has no other selection
                continue
            depth = max(depth, shape.depth)
            aliases += shape.aliases
        return _Shape(depth, aliases)

    def field(self, node: FieldNode) -> _Shape:
        own = 1 if node.alias is not None else 0
        if node.selection_set is None:
            return _Shape(0, own)
        inner = self.selection_set(node.selection_set)
        # Introspection fields add no depth (Strawberry's rule), but aliases under them still count.
        depth = 0 if node.name.value.startswith("__") else 1 + inner.depth
        return _Shape(depth, own + inner.aliases)

    def fragment(self, name: str) -> _Shape:
        shape = self.shapes.get(name)
        if shape is not None:
            return shape
        definition = self.fragments.get(name)
        if definition is None or name in self.open:
            return _EMPTY
        self.open.add(name)
        shape = self.selection_set(definition.selection_set)
        self.open.discard(name)
        self.shapes[name] = shape
        return shape


def shape_limits(max_depth: int, max_aliases: int) -> type[ValidationRule]:
    """The rule: one error per operation deeper than `max_depth` (depth counts from 0 at the root
    field), one for a document with more than `max_aliases` aliases in its operations."""

    class ShapeLimits(ValidationRule):
        # Not in __init__: graphql-core turns a RecursionError raised while visiting (fragments nested
        # past the interpreter's limit) into its "Validation aborted." error, but not one raised
        # while it builds the rules.
        def enter_document(self, *_args: Any) -> None:
            context = self.context
            definitions = context.document.definitions
            fragments = {d.name.value: d for d in definitions if isinstance(d, FragmentDefinitionNode)}
            walker = _Walker(fragments)
            aliases = 0
            for operation in definitions:
                if not isinstance(operation, OperationDefinitionNode):
                    continue
                shape = walker.selection_set(operation.selection_set)
                aliases += shape.aliases
                if shape.depth > max_depth:
                    name = operation.name.value if operation.name else "anonymous"
                    message = f"'{name}' exceeds maximum operation depth of {max_depth}"
                    extensions = {"code": "QUERY_TOO_COMPLEX", "limit": "maxQueryDepth"}
                    context.report_error(GraphQLError(message, [operation], extensions=extensions))
            if aliases > max_aliases:
                message = f"{aliases} aliases found. Allowed: {max_aliases}"
                extensions = {"code": "QUERY_TOO_COMPLEX", "limit": "maxAliases"}
                context.report_error(GraphQLError(message, extensions=extensions))

    return ShapeLimits
