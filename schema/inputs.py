"""Input types: recall's options mirrored type-safely (unions as @oneOf inputs), and write inputs."""

from __future__ import annotations

from enum import Enum
from typing import Any, cast

import strawberry
from strawberry import UNSET

from models.records import DateRange
from resolvers.recall import IncludeItem
from schema.enums import SignalType, SortDirection
from schema.scalars import JSON, DateTime, PerPage, given


@strawberry.enum(description="The field messages are ordered by.")
class MessageOrderField(Enum):
    CREATED_AT = strawberry.enum_value("createdAt", description="Creation time, then insertion order.")


@strawberry.enum(description="Where a semantic search looks: the thread, or every thread of the resource.")
class RecallScope(Enum):
    THREAD = strawberry.enum_value("thread", description="Only the thread being recalled.")
    RESOURCE = strawberry.enum_value("resource", description="Every thread of the thread's resource.")


@strawberry.enum(description="Where working memory lives: on the resource (default) or on the thread.")
class WorkingMemoryScope(Enum):
    THREAD = strawberry.enum_value("thread", description="In the thread's metadata.workingMemory.")
    RESOURCE = strawberry.enum_value("resource", description="On the resource, shared by its threads.")


@strawberry.enum(description="The field threads are ordered by.")
class ThreadOrderField(Enum):
    CREATED_AT = strawberry.enum_value("createdAt", description="When the thread was created.")
    UPDATED_AT = strawberry.enum_value(
        "updatedAt", description="When the thread or its messages last changed."
    )


@strawberry.input(description="Which window of the thread is read. Output is always chronological.")
class MessageOrderBy:
    field: MessageOrderField = strawberry.field(
        default=MessageOrderField.CREATED_AT, description="The ordering field."
    )
    direction: SortDirection = strawberry.field(
        default=SortDirection.ASC, description="ASC reads the oldest window, DESC the newest."
    )


@strawberry.input(description="A message to return with its neighbours in its own thread.")
class IncludeInput:
    id: strawberry.ID = strawberry.field(description="The message id.")
    thread_id: strawberry.ID | None = strawberry.field(
        default=UNSET, description="Accepted for compatibility; the thread comes from the message itself."
    )
    with_previous_messages: int | None = strawberry.field(
        default=UNSET, description="Messages before it (default 2 when a vector search runs, else 0)."
    )
    with_next_messages: int | None = strawberry.field(
        default=UNSET, description="Messages after it (default 2 when a vector search runs, else 0)."
    )

    def to_item(self) -> IncludeItem:
        return IncludeItem(
            id=str(self.id),
            thread_id=given(self.thread_id),
            with_previous_messages=given(self.with_previous_messages),
            with_next_messages=given(self.with_next_messages),
        )


@strawberry.input(description="A creation-time range; inclusive unless the exclusive flag is set.")
class DateRangeInput:
    start: DateTime | None = strawberry.field(default=UNSET, description="Earliest createdAt.")
    end: DateTime | None = strawberry.field(default=UNSET, description="Latest createdAt.")
    start_exclusive: bool | None = strawberry.field(default=UNSET, description="Exclude start itself.")
    end_exclusive: bool | None = strawberry.field(default=UNSET, description="Exclude end itself.")

    def to_range(self) -> DateRange:
        return DateRange(
            start=given(self.start),
            end=given(self.end),
            start_exclusive=bool(given(self.start_exclusive)),
            end_exclusive=bool(given(self.end_exclusive)),
        )


@strawberry.input(description="Filters on the page query (never on include or semantic rows).")
class RecallFilter:
    date_range: DateRangeInput | None = strawberry.field(default=UNSET, description="By creation time.")
    metadata: JSON | None = strawberry.field(
        default=UNSET,
        description="Shallow scalar equality on message metadata, AND over keys, exact JSON types "
        "(true is not 1; null matches an explicit null only). Keys match ^[A-Za-z_][A-Za-z0-9_]*$.",
    )


@strawberry.input(one_of=True, description="hideSignals: true/false, or the signal types to hide.")
class HideSignalsInput:
    all: bool | None = strawberry.field(
        default=UNSET, description="true hides every typed signal; false hides nothing."
    )
    types: list[SignalType] | None = strawberry.field(
        default=UNSET, description="Hide messages classified as one of these types."
    )

    def to_value(self) -> bool | list[str]:
        if given(self.all) is not None:
            return bool(self.all)
        # @strawberry.enum has replaced each member's EnumValueDefinition by its string.
        return [cast(str, t.value) for t in self.types or []]


@strawberry.input(description="A context window: messages before and after each hit.")
class MessageWindowInput:
    before: int | None = strawberry.field(default=UNSET, description="Messages before (default 0).")
    after: int | None = strawberry.field(default=UNSET, description="Messages after (default 0).")


@strawberry.input(one_of=True, description="messageRange: one number for both sides, or a window.")
class MessageRangeInput:
    size: int | None = strawberry.field(default=UNSET, description="Messages before and after each hit.")
    window: MessageWindowInput | None = strawberry.field(default=UNSET, description="Before and after apart.")

    def to_value(self) -> int | dict[str, int]:
        if given(self.size) is not None:
            return int(self.size)  # type: ignore[arg-type]
        window = self.window
        out: dict[str, int] = {}
        if window is not None and given(window.before) is not None:
            out["before"] = int(window.before)  # type: ignore[arg-type]
        if window is not None and given(window.after) is not None:
            out["after"] = int(window.after)  # type: ignore[arg-type]
        return out


@strawberry.input(description="Semantic recall options (defaults: topK 4, messageRange 1, scope resource).")
class SemanticRecallOptionsInput:
    top_k: int | None = strawberry.field(default=UNSET, description="How many similar messages.")
    message_range: MessageRangeInput | None = strawberry.field(
        default=UNSET, description="Context around each hit."
    )
    scope: RecallScope | None = strawberry.field(
        default=UNSET, description="thread, or resource (the default)."
    )
    threshold: float | None = strawberry.field(
        default=UNSET, description="Minimum similarity score (1 - cosine distance), inclusive."
    )

    def to_value(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if given(self.top_k) is not None:
            out["topK"] = self.top_k
        if given(self.message_range) is not None:
            out["messageRange"] = self.message_range.to_value()  # type: ignore[union-attr]
        if given(self.scope) is not None:
            out["scope"] = self.scope.value  # type: ignore[union-attr]
        if given(self.threshold) is not None:
            out["threshold"] = self.threshold
        return out


@strawberry.input(one_of=True, description="semanticRecall: on/off, or options (which turn it on).")
class SemanticRecallInput:
    enabled: bool | None = strawberry.field(default=UNSET, description="true: on with the defaults.")
    options: SemanticRecallOptionsInput | None = strawberry.field(
        default=UNSET, description="On, with options."
    )

    def to_value(self) -> bool | dict[str, Any]:
        if given(self.enabled) is not None:
            return bool(self.enabled)
        return self.options.to_value() if self.options else {}


@strawberry.input(description="Working memory configuration.")
class WorkingMemoryConfigInput:
    enabled: bool | None = strawberry.field(default=UNSET, description="Turn working memory on.")
    template: str | None = strawberry.field(default=UNSET, description="Markdown template.")
    schema: JSON | None = strawberry.field(default=UNSET, description="A JSON Schema (JSON working memory).")
    scope: WorkingMemoryScope | None = strawberry.field(default=UNSET, description="resource or thread.")

    def to_value(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in ("enabled", "template", "schema"):
            if given(getattr(self, key)) is not None:
                out[key] = getattr(self, key)
        if given(self.scope) is not None:
            out["scope"] = self.scope.value  # type: ignore[union-attr]
        return out


@strawberry.input(description="Title generation options.")
class GenerateTitleOptionsInput:
    model: str | None = strawberry.field(default=UNSET, description="The chat model to ask.")
    instructions: str | None = strawberry.field(default=UNSET, description="Instructions for the model.")
    min_messages: int | None = strawberry.field(
        default=UNSET, description="Messages needed first (default 1)."
    )

    def to_value(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, name in (
            ("model", "model"),
            ("instructions", "instructions"),
            ("min_messages", "minMessages"),
        ):
            if given(getattr(self, key)) is not None:
                out[name] = getattr(self, key)
        return out


@strawberry.input(one_of=True, description="generateTitle: on/off, or options (which turn it on).")
class GenerateTitleInput:
    enabled: bool | None = strawberry.field(default=UNSET, description="true: on with the defaults.")
    options: GenerateTitleOptionsInput | None = strawberry.field(
        default=UNSET, description="On, with options."
    )

    def to_value(self) -> bool | dict[str, Any]:
        if given(self.enabled) is not None:
            return bool(self.enabled)
        return self.options.to_value() if self.options else {}


@strawberry.input(description="Thread options.")
class ThreadsConfigInput:
    generate_title: GenerateTitleInput | None = strawberry.field(
        default=UNSET, description="Same as the top-level generateTitle (accepted for compatibility)."
    )


@strawberry.input(description="Memory configuration for this call, deep-merged over the server defaults.")
class MemoryConfigInput:
    last_messages: PerPage | None = strawberry.field(
        default=UNSET, description="Default page size when perPage is omitted; false or 0 turns history off."
    )
    semantic_recall: SemanticRecallInput | None = strawberry.field(
        default=UNSET, description="Semantic recall."
    )
    working_memory: WorkingMemoryConfigInput | None = strawberry.field(
        default=UNSET, description="Working memory."
    )
    generate_title: GenerateTitleInput | None = strawberry.field(
        default=UNSET, description="Title generation."
    )
    threads: ThreadsConfigInput | None = strawberry.field(default=UNSET, description="Thread options.")

    def to_value(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if given(self.last_messages) is not None:
            out["lastMessages"] = self.last_messages
        if given(self.semantic_recall) is not None:
            out["semanticRecall"] = self.semantic_recall.to_value()  # type: ignore[union-attr]
        if given(self.working_memory) is not None:
            out["workingMemory"] = self.working_memory.to_value()  # type: ignore[union-attr]
        if given(self.generate_title) is not None:
            out["generateTitle"] = self.generate_title.to_value()  # type: ignore[union-attr]
        threads = given(self.threads)
        if threads is not None and given(threads.generate_title) is not None:
            out["threads"] = {"generateTitle": threads.generate_title.to_value()}
        return out


def memory_config_value(memory_config: MemoryConfigInput | None) -> dict[str, Any] | None:
    """A memoryConfig argument as the resolvers take it (None: omitted or null)."""
    value = given(memory_config)
    return value.to_value() if value is not None else None


@strawberry.input(description="How threads are ordered.")
class ThreadOrderBy:
    field: ThreadOrderField = strawberry.field(default=ThreadOrderField.CREATED_AT, description="The field.")
    direction: SortDirection = strawberry.field(default=SortDirection.DESC, description="The direction.")


@strawberry.input(description="A new thread.")
class CreateThreadInput:
    resource_id: str = strawberry.field(description="The owning resource.")
    id: strawberry.ID | None = strawberry.field(
        default=UNSET, description='The id (generated when omitted or "", as in Mastra).'
    )
    title: str | None = strawberry.field(default=UNSET, description="The title.")
    metadata: JSON | None = strawberry.field(default=UNSET, description="Metadata (a JSON object).")
    created_at: DateTime | None = strawberry.field(
        default=UNSET, description="Creation time, for imports (default: now)."
    )


@strawberry.input(description="Changes to a thread.")
class UpdateThreadInput:
    id: strawberry.ID = strawberry.field(description="The thread id.")
    title: str | None = strawberry.field(default=UNSET, description="The new title.")
    metadata: JSON | None = strawberry.field(default=UNSET, description="Shallow-merged into the metadata.")


@strawberry.input(description="A message to save (upserted by id).")
class MessageInput:
    thread_id: strawberry.ID = strawberry.field(description="The thread.")
    role: str = strawberry.field(description="user, assistant, signal, tool or system.")
    content: JSON = strawberry.field(description="{format: 2, parts: [...], metadata?, content?}.")
    id: strawberry.ID | None = strawberry.field(
        default=UNSET, description='The id (generated when omitted or "", as in Mastra).'
    )
    resource_id: str | None = strawberry.field(
        default=UNSET, description="The resource (default: the thread's)."
    )
    type: str | None = strawberry.field(default=UNSET, description="The message type (default v2).")
    created_at: DateTime | None = strawberry.field(
        default=UNSET, description="Creation time (default: now). Kept when the id already exists."
    )
