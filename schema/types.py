"""Output types. Each wraps a domain record and maps it explicitly; nothing here touches storage."""

from __future__ import annotations

from typing import Annotated, Any

import strawberry
from strawberry.types import Info

from models.records import MessageRecord, ThreadRecord
from resolvers import cursors
from resolvers.context import RequestContext
from resolvers.recall import OrderBy, RecallArgs
from resolvers.threads import clone_metadata
from schema.enums import SIGNAL_TYPES_BY_VALUE, SignalType
from schema.federation import ENTITY_TAG, message_reference, thread_reference
from schema.inputs import (
    HideSignalsInput,
    IncludeInput,
    MemoryConfigInput,
    MessageOrderBy,
    RecallFilter,
    memory_config_value,
)
from schema.scalars import JSON, DateTime, PerPage, given


# ---------------------------------------------------------------------------------------------- parts
@strawberry.federation.type(shareable=True, description="Plain text.")
class TextPart:
    type: str = strawberry.field(description="Always `text`.")
    text: str = strawberry.field(description="The text.")


@strawberry.federation.type(shareable=True, description="Model reasoning.")
class ReasoningPart:
    type: str = strawberry.field(description="Always `reasoning`.")
    reasoning: str | None = strawberry.field(description="The reasoning text, when given as one string.")
    details: JSON | None = strawberry.field(description="Structured reasoning details, as stored.")


@strawberry.federation.type(shareable=True, description="A tool call and, once known, its result.")
class ToolInvocation:
    state: str | None = strawberry.field(description="call, partial-call or result.")
    tool_call_id: str | None = strawberry.field(description="The call id that links call and result.")
    tool_name: str | None = strawberry.field(description="The tool's name.")
    args: JSON | None = strawberry.field(description="The call's arguments.")
    result: JSON | None = strawberry.field(description="The tool's result (state result).")
    step: int | None = strawberry.field(description="The agent step the call belongs to.")


@strawberry.federation.type(shareable=True, description="A tool invocation part.")
class ToolInvocationPart:
    type: str = strawberry.field(description="Always `tool-invocation`.")
    tool_invocation: ToolInvocation = strawberry.field(description="The invocation.")


@strawberry.federation.type(shareable=True, description="A file (inline data or a URL).")
class FilePart:
    type: str = strawberry.field(description="Always `file`.")
    mime_type: str | None = strawberry.field(description="The file's media type.")
    data: JSON | None = strawberry.field(description="Inline data (base64) or a URL, as stored.")
    filename: str | None = strawberry.field(description="The file name, when known.")


@strawberry.federation.type(shareable=True, description="A cited source.")
class SourcePart:
    type: str = strawberry.field(description="Always `source`.")
    source: JSON | None = strawberry.field(description="The source object, as stored.")


@strawberry.federation.type(shareable=True, description="The start of an agent step.")
class StepStartPart:
    type: str = strawberry.field(description="Always `step-start`.")


@strawberry.federation.type(
    shareable=True, description="A custom data part (`data-<name>`), including signals (`data-signal`)."
)
class DataPart:
    type: str = strawberry.field(description="`data-` followed by the name.")
    name: str = strawberry.field(description="The part's name: its type without the `data-` prefix.")
    id: str | None = strawberry.field(description="The part's id, when it has one.")
    data: JSON | None = strawberry.field(description="The part's data, as stored.")


@strawberry.federation.type(
    shareable=True, description="A part of a type this schema does not model; `raw` holds it as stored."
)
class UnknownPart:
    type: str = strawberry.field(description="The stored type string.")
    raw: JSON = strawberry.field(description="The part as stored.")


MessagePart = Annotated[
    TextPart
    | ReasoningPart
    | ToolInvocationPart
    | FilePart
    | SourcePart
    | StepStartPart
    | DataPart
    | UnknownPart,
    strawberry.union("MessagePart", description="One part of a message's content."),
]


def _part(raw: dict[str, Any]) -> Any:
    kind = raw.get("type")
    if kind == "text" and isinstance(raw.get("text"), str):
        return TextPart(type=kind, text=raw["text"])
    if kind == "reasoning":
        reasoning = raw.get("reasoning")
        return ReasoningPart(
            type=kind, reasoning=reasoning if isinstance(reasoning, str) else None, details=raw.get("details")
        )
    if kind == "tool-invocation" and isinstance(raw.get("toolInvocation"), dict):
        inv = raw["toolInvocation"]
        step = inv.get("step")
        return ToolInvocationPart(
            type=kind,
            tool_invocation=ToolInvocation(
                state=_str(inv.get("state")),
                tool_call_id=_str(inv.get("toolCallId")),
                tool_name=_str(inv.get("toolName")),
                args=inv.get("args"),
                result=inv.get("result"),
                step=_int32(step),
            ),
        )
    if kind == "file":
        return FilePart(
            type=kind,
            mime_type=_str(raw.get("mimeType") or raw.get("mediaType")),
            data=raw.get("data", raw.get("url")),
            filename=_str(raw.get("filename")),
        )
    if kind == "source":
        return SourcePart(type=kind, source=raw.get("source"))
    if kind == "step-start":
        return StepStartPart(type=kind)
    if isinstance(kind, str) and kind.startswith("data-"):
        return DataPart(type=kind, name=kind[5:], id=_str(raw.get("id")), data=raw.get("data"))
    return UnknownPart(type=str(kind), raw=JSON(raw))


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int32(value: Any) -> int | None:
    """A stored number as GraphQL's Int, or null: content is free JSON, and a value beyond 32 bits made
    every read of its message an internal error."""
    if isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**31:
        return value
    return None


# ---------------------------------------------------------------------------------------------- messages
@strawberry.type(description="A message's content in the stored format (format 2).")
class MessageContent:
    _raw: strawberry.Private[dict[str, Any]]

    @strawberry.field(description="The content format; always 2.")
    def format(self) -> int:
        value = _int32(self._raw.get("format"))
        return 2 if value is None else value

    @strawberry.field(description="The parts, typed; select the part types you need.")
    def parts(self) -> list[MessagePart]:
        parts = self._raw.get("parts")
        return [_part(p) for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []

    @strawberry.field(description="The message metadata, as stored.")
    def metadata(self) -> JSON | None:
        return self._raw.get("metadata")

    @strawberry.field(description="The optional plain-text content string.")
    def content(self) -> str | None:
        return _str(self._raw.get("content"))

    @strawberry.field(description="The whole stored content JSON, as is.")
    def raw(self) -> JSON:
        return JSON(self._raw)


@strawberry.federation.type(keys=["id"], tags=[ENTITY_TAG], description="A stored message.")
class Message:
    _record: strawberry.Private[MessageRecord]

    @classmethod
    async def resolve_reference(
        cls, info: Info[RequestContext, None], **representation: Any
    ) -> Message | None:
        """Federation: a Message entity by its key (batched; null when unknown or not accessible)."""
        record = await message_reference(info.context, representation)
        return cls(_record=record) if record else None

    @strawberry.field(description="The message id.")
    def id(self) -> strawberry.ID:
        return strawberry.ID(self._record.id)

    @strawberry.field(description="user, assistant, signal, tool or system, as stored.")
    def role(self) -> str:
        return self._record.role

    @strawberry.field(description="The stored message type (v2 unless saved otherwise).")
    def type(self) -> str:
        return self._record.type

    @strawberry.field(description="When the message was created.")
    def created_at(self) -> DateTime:
        return DateTime(self._record.created_at)

    @strawberry.field(
        description="The message's place in its thread's order (createdAt, then insertion), for recall's "
        "after and before. Opaque; it stays valid when the message changes or is deleted."
    )
    def cursor(self) -> str:
        return cursors.encode(self._record.created_at, self._record.seq)

    @strawberry.field(description="The thread the message belongs to.")
    def thread_id(self) -> strawberry.ID:
        return strawberry.ID(self._record.thread_id)

    @strawberry.field(description="The resource stored on the message row (null when none was stored).")
    def resource_id(self) -> str | None:
        return self._record.resource_id

    @strawberry.field(description="The message content.")
    def content(self) -> MessageContent:
        return MessageContent(_raw=self._record.content)

    @strawberry.field(description="The signal type this message was classified as when it was written.")
    def signal_type(self) -> SignalType | None:
        kind = self._record.signal_type
        return SIGNAL_TYPES_BY_VALUE.get(kind) if kind else None

    @strawberry.field(description="Whether the legacy system-reminder rule hides this message by default.")
    def is_system_reminder(self) -> bool:
        return self._record.legacy_reminder

    @strawberry.field(description="The message's thread (batched).")
    async def thread(self, info: Info[RequestContext, None]) -> Thread | None:
        record = await info.context.threads.load(self._record.thread_id)
        return Thread(_record=record) if record else None

    @strawberry.federation.field(
        inaccessible=True,
        description="The resource that owns the message's thread (batched), for other subgraphs' "
        "@requires; @inaccessible: not in the public API, where thread { resourceId } gives it.",
    )
    async def thread_resource_id(self, info: Info[RequestContext, None]) -> str | None:
        record = await info.context.threads.load(self._record.thread_id)
        return record.resource_id if record else None


@strawberry.federation.type(shareable=True, description="Embedding usage of a call that embedded text.")
class EmbeddingUsage:
    tokens: int = strawberry.field(description="Tokens the embedder reported.")


@strawberry.type(description="The result of recall: the messages and the page they come from.")
class RecallResult:
    messages: list[Message] = strawberry.field(
        description="The messages, always in chronological order (createdAt, then insertion order)."
    )
    total: int = strawberry.field(
        description="Rows matched by the page query (not counting include or semantic rows); "
        "0 with perPage 0."
    )
    page: int = strawberry.field(description="The page argument, echoed.")
    per_page: PerPage = strawberry.field(description="The effective page size, or false.")
    has_more: bool = strawberry.field(description="Whether a further page exists (Mastra's two formulas).")
    usage: EmbeddingUsage | None = strawberry.field(description="Embedding usage when a vector search ran.")
    start_cursor: str | None = strawberry.field(
        description="The cursor of the page's oldest row (a hidden signal's too), for `before`: the page "
        "before this one. Null when the page read no rows."
    )
    end_cursor: str | None = strawberry.field(
        description="The cursor of the page's newest row (a hidden signal's too), for `after`: the page "
        "after this one. Null when the page read no rows."
    )


@strawberry.type(description="A page of a resource's messages across its threads (Resource.messages).")
class MessagePage:
    messages: list[Message] = strawberry.field(
        description="The page's messages, in the order asked for (createdAt, then insertion order)."
    )
    total: int | None = strawberry.field(
        graphql_type=int,
        description="Messages matching the filter (0 for perPage 0, as in Mastra). Counted only when "
        "selected: a page without it reads perPage + 1 messages and no count.",
    )
    page: int = strawberry.field(description="The page argument, echoed.")
    per_page: PerPage = strawberry.field(description="The page size, or false.")
    has_more: bool = strawberry.field(description="Whether a further page exists.")


# Query.recall's and Thread.recall's arguments, described once.
RECALL_ARGUMENTS = {
    "per_page": "Page size; false returns everything. Omitted: threadConfig.lastMessages.",
    "page": "Zero-based page (with perPage).",
    "include": "Messages to return as well, with neighbours in their own thread.",
    "filter": "dateRange and metadata filters on the page query.",
    "order_by": "Which window is read; default the newest. Output is chronological.",
    "hide_signals": "Hide typed signals: all of them, or the given types.",
    "thread_config": "Memory configuration for this call, over the server defaults.",
    "vector_search_string": "With semantic recall on: also return the messages most similar to this text.",
    "after": "Keyset paging (beyond Mastra): the page query reads only messages after this cursor "
    "(Message.cursor, RecallResult.endCursor); total and hasMore count them. With orderBy ASC, the page "
    "right after it.",
    "hide_in_page_query": "Opt-in (beyond Mastra): the page query itself leaves out the rows a recall hides "
    "(system rows, and the signals or reminders hideSignals hides), so pages are full and total and hasMore "
    "count only messages that can be returned. Default false: as in Mastra, they are removed from the page "
    "after it is read, and a page may come back short or empty.",
    "before": "Keyset paging (beyond Mastra): the page query reads only messages before this cursor "
    "(Message.cursor, RecallResult.startCursor); total and hasMore count them. In the default order, the "
    "page right before it.",
}


def recall_argument(name: str) -> Any:
    return strawberry.argument(description=RECALL_ARGUMENTS[name])


async def recall_field(
    info: Info[RequestContext, None],
    *,
    thread_id: str,
    resource_id: str | None,
    per_page: PerPage | None,
    page: int | None,
    include: list[IncludeInput] | None,
    filter: RecallFilter | None,
    order_by: MessageOrderBy | None,
    hide_signals: HideSignalsInput | None,
    include_system_reminders: bool | None,
    thread_config: MemoryConfigInput | None,
    vector_search_string: str | None,
    after: str | None,
    before: str | None,
    hide_in_page_query: bool | None,
    thread: ThreadRecord | None = None,
) -> RecallResult:
    """A recall, from the GraphQL arguments (each UNSET, null or given) to its result. `thread`: the
    thread as this request read it (resolvers.recall.RecallArgs.thread)."""
    flt = given(filter)
    date_range = given(flt.date_range) if flt else None
    order = given(order_by)
    hide = given(hide_signals)
    include_items = given(include)
    config = given(thread_config)
    result = await info.context.services.recall.recall(
        RecallArgs(
            thread_id=thread_id,
            resource_id=resource_id,
            per_page=given(per_page),
            page=given(page),
            include=[i.to_item() for i in include_items] if include_items is not None else None,
            date_range=date_range.to_range() if date_range else None,
            metadata=given(flt.metadata) if flt else None,
            order_by=OrderBy(order.field.value, order.direction.value) if order else None,
            hide_signals=hide.to_value() if hide else None,
            include_system_reminders=given(include_system_reminders),
            thread_config=config.to_value() if config else None,
            vector_search_string=given(vector_search_string),
            after=given(after),
            before=given(before),
            hide_in_page_query=given(hide_in_page_query),
            thread=thread,
        ),
        principal=info.context.principal,
        budget=info.context.rows,
        pages=info.context.pages if thread is not None else None,
    )
    assert result.total is not None  # recall always counts
    return RecallResult(
        messages=[Message(_record=m) for m in result.messages],
        total=result.total,
        page=result.page,
        per_page=PerPage(result.per_page),
        has_more=result.has_more,
        usage=EmbeddingUsage(tokens=result.usage["tokens"]) if result.usage else None,
        start_cursor=result.start_cursor,
        end_cursor=result.end_cursor,
    )


# ---------------------------------------------------------------------------------------------- threads
@strawberry.federation.type(
    keys=["id"], tags=[ENTITY_TAG], description="A conversation thread, owned by one resource."
)
class Thread:
    _record: strawberry.Private[ThreadRecord]

    @classmethod
    async def resolve_reference(
        cls, info: Info[RequestContext, None], **representation: Any
    ) -> Thread | None:
        """Federation: a Thread entity by its key (batched; null when unknown or not accessible)."""
        record = await thread_reference(info.context, representation)
        return cls(_record=record) if record else None

    @strawberry.field(description="The thread id.")
    def id(self) -> strawberry.ID:
        return strawberry.ID(self._record.id)

    @strawberry.field(description="The resource (end user) that owns the thread.")
    def resource_id(self) -> str:
        return self._record.resource_id

    @strawberry.field(description="The title ('' when none).")
    def title(self) -> str:
        return self._record.title

    @strawberry.field(description="The thread metadata, as stored.")
    def metadata(self) -> JSON | None:
        metadata = self._record.metadata
        return JSON(metadata) if metadata is not None else None

    @strawberry.field(description="When the thread was created; never changes.")
    def created_at(self) -> DateTime:
        return DateTime(self._record.created_at)

    @strawberry.field(description="When the thread or its messages last changed.")
    def updated_at(self) -> DateTime:
        return DateTime(self._record.updated_at)

    @strawberry.field(
        description="Mastra's isClone: whether metadata.clone is set (cloneThread sets it to "
        "{sourceThreadId, clonedAt, lastMessageId})."
    )
    def is_clone(self) -> bool:
        return clone_metadata(self._record) is not None

    @strawberry.field(
        description="Mastra's getSourceThread: the thread this one was cloned from (metadata.clone."
        "sourceThreadId); null when it is no clone, or its source is gone or not the caller's to see."
    )
    async def cloned_from(self, info: Info[RequestContext, None]) -> Thread | None:
        record = await info.context.cloned_from(self._record)
        return Thread(_record=record) if record is not None else None

    @strawberry.field(
        description="Mastra's listClones: the threads cloned from this one (metadata.clone.sourceThreadId "
        "is its id), newest first; read for all the threads of a listing at once. Its thread count draws "
        "on RECALLQL_MAX_REQUEST_ROWS."
    )
    async def clones(
        self,
        info: Info[RequestContext, None],
        resource_id: Annotated[
            str | None,
            strawberry.argument(
                description="Whose threads to look among (default: this thread's resource; another "
                "must be granted, FORBIDDEN otherwise): a clone given to another resource is that "
                "resource's thread."
            ),
        ] = strawberry.UNSET,
    ) -> list[Thread]:
        found = await info.context.clones_of(
            self._record, resource_id if isinstance(resource_id, str) else None
        )
        return [Thread(_record=t) for t in found]

    @strawberry.field(
        description="Mastra's getCloneHistory: the chain of sources back to the original, oldest first, "
        "this thread last (just this thread when it is no clone). It ends at a source that is gone or "
        "not the caller's to see, and where the chain meets a thread again. Each thread read draws on "
        "RECALLQL_MAX_REQUEST_ROWS."
    )
    async def clone_history(self, info: Info[RequestContext, None]) -> list[Thread]:
        return [Thread(_record=t) for t in await info.context.clone_history_of(self._record)]

    @strawberry.field(
        description="The thread's working memory under the memory config (server defaults deep-merged "
        "with memoryConfig): the resource's in resource scope (the default), metadata.workingMemory in "
        "thread scope; null when disabled or empty."
    )
    async def working_memory(
        self,
        info: Info[RequestContext, None],
        memory_config: Annotated[
            MemoryConfigInput | None,
            strawberry.argument(description="Memory configuration for this read, over the server defaults."),
        ] = strawberry.UNSET,
    ) -> str | None:
        service = info.context.services.working_memory
        cfg = service.config(memory_config_value(memory_config))
        if not cfg.enabled:
            return None
        resource = None
        if cfg.scope == "resource":
            resource = await info.context.resources.load(self._record.resource_id)
        return service.of_thread(self._record, resource, cfg)

    @strawberry.field(
        description="Query.recall for this thread and its resource, with every other option and the same "
        "rules and errors, so that a listing of threads brings each one's messages along: "
        "`threads(resourceId: ...) { threads { title recall(perPage: 1) { total messages { ... } } } }`. "
        "Each is a recall of its own: at most RECALLQL_MAX_THREAD_RECALLS per request, its rows counted "
        "towards RECALLQL_MAX_REQUEST_ROWS. Null, with the error, when it is refused or fails."
    )
    async def recall(
        self,
        info: Info[RequestContext, None],
        per_page: Annotated[PerPage | None, recall_argument("per_page")] = strawberry.UNSET,
        page: Annotated[int | None, recall_argument("page")] = strawberry.UNSET,
        include: Annotated[
            list[IncludeInput] | None,
            recall_argument("include"),
        ] = strawberry.UNSET,
        filter: Annotated[RecallFilter | None, recall_argument("filter")] = strawberry.UNSET,
        order_by: Annotated[MessageOrderBy | None, recall_argument("order_by")] = strawberry.UNSET,
        hide_signals: Annotated[
            HideSignalsInput | None,
            recall_argument("hide_signals"),
        ] = strawberry.UNSET,
        thread_config: Annotated[
            MemoryConfigInput | None,
            recall_argument("thread_config"),
        ] = strawberry.UNSET,
        vector_search_string: Annotated[
            str | None, recall_argument("vector_search_string")
        ] = strawberry.UNSET,
        after: Annotated[str | None, recall_argument("after")] = strawberry.UNSET,
        before: Annotated[str | None, recall_argument("before")] = strawberry.UNSET,
        hide_in_page_query: Annotated[bool | None, recall_argument("hide_in_page_query")] = strawberry.UNSET,
    ) -> RecallResult | None:
        info.context.count_thread_recall()
        return await recall_field(
            info,
            thread_id=self._record.id,
            resource_id=self._record.resource_id,
            per_page=per_page,
            page=page,
            include=include,
            filter=filter,
            order_by=order_by,
            hide_signals=hide_signals,
            include_system_reminders=None,
            thread_config=thread_config,
            vector_search_string=vector_search_string,
            after=after,
            before=before,
            hide_in_page_query=hide_in_page_query,
            thread=self._record,
        )


@strawberry.type(description="A page of threads.")
class ThreadPage:
    threads: list[Thread] = strawberry.field(description="The threads on this page.")
    # Counted only when the query selects it (schema.memory.thread_page); a selection missed would answer
    # an error (null for Int!), never a wrong number.
    total: int | None = strawberry.field(graphql_type=int, description="Threads matching the filter.")
    page: int = strawberry.field(description="The page argument, echoed.")
    per_page: PerPage = strawberry.field(description="The page size, or false.")
    has_more: bool = strawberry.field(description="Whether a further page exists.")
    start_cursor: str | None = strawberry.field(
        description="The cursor of the page's first thread, for `before`. Null when the page is empty.",
        default=None,
    )
    end_cursor: str | None = strawberry.field(
        description="The cursor of the page's last thread, for `after`: the next page. Null when the page "
        "is empty.",
        default=None,
    )


@strawberry.type(description="The result of saveMessages.")
class SaveMessagesPayload:
    messages: list[Message] = strawberry.field(
        description="The stored messages as Mastra's saveMessages returns them: each id once, oldest first "
        "(ties in the order given), system-role rows left out (stored, never listed, as in recall)."
    )
    acknowledged: int = strawberry.field(description="Transient signals accepted but, by design, not stored.")
