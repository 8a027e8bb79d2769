"""The memory API beyond recall: resources and working memory, deleting and cloning threads, updating
and deleting messages, and live updates (subscriptions). Thin resolvers over resolvers/*."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from enum import Enum
from typing import Annotated, Any, cast

import strawberry
from graphql import (
    FieldNode,
    FragmentSpreadNode,
    GraphQLError,
    InlineFragmentNode,
    SelectionSetNode,
    located_error,
)
from strawberry import UNSET
from strawberry.types import Info

from models.records import ResourceRecord
from resolvers.context import RequestContext
from resolvers.messages import MessagePatch
from resolvers.recall import RESOURCE_MESSAGES_PER_PAGE
from resolvers.recall import PerPage as PageSize
from resolvers.threads import CloneOptions
from schema.federation import ENTITY_TAG, resource_reference
from schema.inputs import (
    IncludeInput,
    MemoryConfigInput,
    MessageOrderBy,
    RecallFilter,
    ThreadOrderBy,
    WorkingMemoryScope,
    given,
    memory_config_value,
)
from schema.scalars import JSON, DateTime, PerPage
from schema.types import Message, MessagePage, Thread, ThreadPage

Ctx = Info[RequestContext, None]


def _arg(description: str, **kwargs: Any) -> Any:
    return strawberry.argument(description=description, **kwargs)


def _per_page(value: object) -> PageSize:
    """A PerPage argument as the resolvers take it: the scalar parsed it (an int, a float or false);
    they refuse what Mastra refuses (a fraction, a negative size) with Mastra's text."""
    return cast(PageSize, value)


# Query.threads and Resource.threads: the page size when perPage is omitted.
THREADS_PER_PAGE = PerPage(100)
RESOURCE_PER_PAGE = PerPage(RESOURCE_MESSAGES_PER_PAGE)


async def thread_page(
    info: Ctx,
    resource_id: str | None,
    page: int,
    per_page: object,
    order_by: Any,
    metadata: Any,
    after: str | None = None,
    before: str | None = None,
) -> ThreadPage:
    """A page of a resource's threads (None: of every resource the principal may read): Query.threads and
    Resource.threads. The threads are counted only
    when the query selects total: a sidebar that asks for hasMore and endCursor alone reads its page and
    one thread more, however many threads the resource has."""
    order = given(order_by)
    result = await info.context.services.threads.list(
        resource_id,
        page=page,
        per_page=_per_page(per_page),
        order_field=order.field.value if order else "createdAt",
        descending=order.direction.value == "DESC" if order else True,
        metadata=given(metadata),
        principal=info.context.principal,
        budget=info.context.rows,
        after=given(after),
        before=given(before),
        counted=selects(info, "total"),
    )
    return ThreadPage(
        threads=[Thread(_record=t) for t in result.threads],
        total=result.total,
        page=result.page,
        per_page=PerPage(result.per_page),
        has_more=result.has_more,
        start_cursor=result.start_cursor,
        end_cursor=result.end_cursor,
    )


def selects(info: Ctx, name: str) -> bool:
    """Whether the query selects the field `name` of the object this field returns, directly or in a
    fragment. A selection under @skip or @include counts as selected: the answer may only err towards
    reading more."""
    raw = info._raw_info

    def within(selection_set: SelectionSetNode | None) -> bool:
        for node in selection_set.selections if selection_set else ():
            if isinstance(node, FieldNode):
                if node.name.value == name:
                    return True
            elif isinstance(node, InlineFragmentNode):
                if within(node.selection_set):
                    return True
            elif isinstance(node, FragmentSpreadNode):
                fragment = raw.fragments.get(node.name.value)
                if fragment is not None and within(fragment.selection_set):
                    return True
        return False

    return any(within(node.selection_set) for node in raw.field_nodes)


# Query.threads' and Resource.threads' cursor arguments, described once.
THREADS_AFTER = (
    "Keyset paging (beyond Mastra): only the threads after this cursor in the listing's order "
    "(ThreadPage.endCursor: newest first, the older ones), counted by total and hasMore."
)
THREADS_BEFORE = (
    "Keyset paging (beyond Mastra): only the threads before this cursor in the listing's order "
    "(ThreadPage.startCursor), counted by total and hasMore; the page is the first of them."
)


# ---------------------------------------------------------------------------------------------- types
@strawberry.enum(description="How working memory is stored: a Markdown template or a JSON Schema.")
class WorkingMemoryFormat(Enum):
    MARKDOWN = strawberry.enum_value("markdown", description="A Markdown template.")
    JSON = strawberry.enum_value("json", description="A JSON Schema (working memory is a JSON document).")


@strawberry.type(description="The working-memory template of a memory config (getWorkingMemoryTemplate).")
class WorkingMemoryTemplate:
    format: WorkingMemoryFormat = strawberry.field(
        description="JSON when workingMemory.schema is set, else MARKDOWN."
    )
    content: str = strawberry.field(
        description="The Markdown template (the config's, else the default), trimmed; or the JSON Schema "
        "as a JSON string (draft-07 `$schema` added when missing)."
    )


@strawberry.federation.type(
    keys=["id"],
    tags=[ENTITY_TAG],
    description="A resource (an end user): owns threads and, in resource scope, working memory.",
)
class Resource:
    _record: strawberry.Private[ResourceRecord]

    @classmethod
    async def resolve_reference(cls, info: Ctx, **representation: Any) -> Resource | None:
        """Federation: a Resource entity by id (batched; null when unknown or not accessible)."""
        record = await resource_reference(info.context, representation)
        return cls(_record=record) if record else None

    @strawberry.field(description="The resource id.")
    def id(self) -> str:
        return self._record.id

    @strawberry.field(
        description="The resource's working memory under the memory config (server defaults deep-merged "
        "with memoryConfig): null when working memory is disabled, in thread scope, or empty."
    )
    def working_memory(
        self,
        info: Ctx,
        memory_config: Annotated[
            MemoryConfigInput | None, _arg("Memory configuration for this read, over the server defaults.")
        ] = UNSET,
    ) -> str | None:
        service = info.context.services.working_memory
        return service.of_resource(self._record, service.config(memory_config_value(memory_config)))

    @strawberry.field(description="The resource metadata, as stored.")
    def metadata(self) -> JSON | None:
        metadata = self._record.metadata
        return JSON(metadata) if metadata is not None else None

    @strawberry.field(
        description="When the resource row was created (first thread or working memory); for a "
        "resource only messages are filed under (in other resources' threads), its first message's createdAt."
    )
    def created_at(self) -> DateTime:
        return DateTime(self._record.created_at)

    @strawberry.field(
        description="When the resource row (its working memory) last changed (for a resource only "
        "messages are filed under: its first message's createdAt)."
    )
    def updated_at(self) -> DateTime:
        return DateTime(self._record.updated_at)

    @strawberry.field(description="The resource's threads, newest first by default (as Query.threads).")
    async def threads(
        self,
        info: Ctx,
        page: Annotated[int, _arg("Zero-based page.")] = 0,
        per_page: Annotated[PerPage, _arg("Page size (default 100); false returns all.")] = THREADS_PER_PAGE,
        order_by: Annotated[ThreadOrderBy | None, _arg("Ordering (default createdAt DESC).")] = UNSET,
        metadata: Annotated[JSON | None, _arg("Exact-type equality on thread metadata keys.")] = UNSET,
        after: Annotated[str | None, _arg(THREADS_AFTER)] = UNSET,
        before: Annotated[str | None, _arg(THREADS_BEFORE)] = UNSET,
    ) -> ThreadPage:
        return await thread_page(info, self._record.id, page, per_page, order_by, metadata, after, before)

    @strawberry.field(
        description="Mastra's listMessagesByResourceId: the messages filed under this resource across "
        "all its threads, oldest first by default, a page at a time, with recall's date-range and "
        "metadata filters (signals and system reminders are not hidden; system-role rows, as in recall and "
        "Mastra, count in total but are not returned). Its rows count towards "
        "RECALLQL_MAX_REQUEST_ROWS."
    )
    async def messages(
        self,
        info: Ctx,
        page: Annotated[int, _arg("Zero-based page.")] = 0,
        per_page: Annotated[PerPage, _arg("Page size (default 40); false returns all.")] = RESOURCE_PER_PAGE,
        filter: Annotated[RecallFilter | None, _arg("By creation time and message metadata.")] = UNSET,
        order_by: Annotated[MessageOrderBy | None, _arg("Ordering (default createdAt ASC).")] = UNSET,
        include: Annotated[
            list[IncludeInput] | None,
            _arg(
                "Also these messages of this resource with neighbours in their thread (default 0 each "
                "side; only messages filed under this resource), whatever the filters, not counted in "
                "total. With perPage 0, only these."
            ),
        ] = UNSET,
    ) -> MessagePage:
        flt = given(filter)
        date_range = given(flt.date_range) if flt else None
        order = given(order_by)
        items = given(include)
        result = await info.context.services.recall.resource_messages(
            self._record.id,
            page=page,
            per_page=_per_page(per_page),
            date_range=date_range.to_range() if date_range else None,
            metadata=given(flt.metadata) if flt else None,
            descending=order is not None and order.direction.value == "DESC",
            include=[i.to_item() for i in items] if items else None,
            principal=info.context.principal,
            budget=info.context.rows,
            counted=selects(info, "total"),
        )
        return MessagePage(
            messages=[Message(_record=m) for m in result.messages],
            total=result.total,
            page=result.page,
            per_page=PerPage(result.per_page),
            has_more=result.has_more,
        )


@strawberry.type(description="The working memory an update left in its scope.")
class WorkingMemoryPayload:
    scope: WorkingMemoryScope = strawberry.field(description="Where it is stored: RESOURCE or THREAD.")
    thread_id: strawberry.ID = strawberry.field(description="The thread of the call.")
    resource_id: str | None = strawberry.field(description="The resource (in thread scope: the owner).")
    working_memory: str | None = strawberry.field(description="The stored working memory after the update.")
    updated_at: DateTime = strawberry.field(description="When the resource (or thread) row was written.")


@strawberry.type(description="A source message id and the id of its copy.")
class ClonedMessageId:
    source_id: strawberry.ID = strawberry.field(description="The message in the source thread.")
    clone_id: strawberry.ID = strawberry.field(description="Its copy in the new thread.")


@strawberry.type(description="The result of cloneThread.")
class CloneThreadPayload:
    thread: Thread = strawberry.field(description="The new thread (metadata.clone records the source).")
    cloned_messages: list[Message] = strawberry.field(
        description="The copies, chronologically, but system-role rows (copied, and in messageIdMap, but "
        "not listed, as in Mastra and recall)."
    )
    message_id_map: list[ClonedMessageId] = strawberry.field(
        description="Source message id to copy id, chronologically."
    )


@strawberry.type(description="The result of deleteMessages.")
class DeleteMessagesPayload:
    deleted: int = strawberry.field(description="How many messages were deleted (unknown ids are ignored).")
    ids: list[strawberry.ID] = strawberry.field(description="The ids that were deleted.")


@strawberry.enum(description="What happened to a message.")
class MessageEventKind(Enum):
    SAVED = strawberry.enum_value("SAVED", description="Stored by saveMessages, or copied in by cloneThread.")
    UPDATED = strawberry.enum_value(
        "UPDATED",
        description="Changed by updateMessages (on a thread it moves into, a message the client may not "
        "have yet), or in a resumed replay changed while the client was away: apply it as an upsert by id.",
    )
    DELETED = strawberry.enum_value("DELETED", description="Deleted (deleteMessages or deleteThread).")


@strawberry.enum(description="What happened to a thread.")
class ThreadEventKind(Enum):
    CREATED = strawberry.enum_value(
        "CREATED",
        description="A new thread (createThread, cloneThread), or one given to this resource "
        "(updateThreadResourceId).",
    )
    UPDATED = strawberry.enum_value(
        "UPDATED", description="Its title, metadata or working memory, or its messages, changed."
    )
    DELETED = strawberry.enum_value(
        "DELETED",
        description="Deleted by deleteThread, or given to another resource (updateThreadResourceId): "
        "gone from this resource's threads. The thread is as it was last stored here.",
    )
    TITLE_GENERATED = strawberry.enum_value(
        "TITLE_GENERATED", description="Title generation gave the thread a title."
    )


@strawberry.type(description="A change to a message of the subscribed thread.")
class MessageEvent:
    kind: MessageEventKind = strawberry.field(description="SAVED, UPDATED or DELETED.")
    thread_id: strawberry.ID = strawberry.field(
        description="The subscribed thread (a message moved away is announced on its old thread too)."
    )
    message_id: strawberry.ID = strawberry.field(description="The message's id.")
    message: Message = strawberry.field(
        description="The message as the change left it; for DELETED, as it was last stored."
    )
    at: DateTime = strawberry.field(description="When the change was published.")


@strawberry.type(description="A change to a thread of the subscribed resource.")
class ThreadEvent:
    kind: ThreadEventKind = strawberry.field(
        description="CREATED, UPDATED (title, metadata, working memory, or its messages changed), "
        "DELETED or TITLE_GENERATED."
    )
    thread_id: strawberry.ID = strawberry.field(description="The thread's id.")
    resource_id: str = strawberry.field(description="The subscribed resource.")
    thread: Thread = strawberry.field(
        description="The thread as the change left it; for DELETED, as it was last stored."
    )
    at: DateTime = strawberry.field(description="When the change was published.")


# ---------------------------------------------------------------------------------------------- inputs
@strawberry.enum(description="How updateWorkingMemory combines the new value with the stored one.")
class WorkingMemoryUpdateMode(Enum):
    REPLACE = strawberry.enum_value("replace", description="The new value replaces the stored one.")
    APPEND = strawberry.enum_value("append", description="Adds a line to Markdown working memory.")
    MERGE = strawberry.enum_value(
        "merge", description="Deep-merges a JSON object into JSON working memory (null deletes a key)."
    )


@strawberry.input(description="Which messages cloneThread copies (all given conditions apply).")
class CloneMessageFilterInput:
    start_date: DateTime | None = strawberry.field(default=UNSET, description="Created at or after.")
    end_date: DateTime | None = strawberry.field(default=UNSET, description="Created at or before.")
    message_ids: list[strawberry.ID] | None = strawberry.field(
        default=UNSET, description="Only these messages (ids of other threads are ignored)."
    )


@strawberry.input(description="cloneThread options (Mastra's CloneOptions).")
class CloneThreadOptionsInput:
    message_limit: int | None = strawberry.field(
        default=UNSET,
        description="Copy only the newest N of the selected messages (0, negative or omitted: all).",
    )
    message_filter: CloneMessageFilterInput | None = strawberry.field(
        default=UNSET, description="Which messages to copy."
    )


@strawberry.input(description="A thread to clone and how.")
class CloneThreadInput:
    source_thread_id: strawberry.ID = strawberry.field(description="The thread to copy.")
    new_thread_id: strawberry.ID | None = strawberry.field(
        default=UNSET,
        description='The new thread\'s id (default, and for "": generated, as in Mastra; a taken id is a '
        "CONFLICT).",
    )
    resource_id: str | None = strawberry.field(
        default=UNSET, description="The new thread's resource (default: the source's)."
    )
    title: str | None = strawberry.field(
        default=UNSET, description="The title (default: 'Clone of <source title>', or '' when untitled)."
    )
    metadata: JSON | None = strawberry.field(
        default=UNSET, description="Merged over the source's metadata; `clone` is always added."
    )
    options: CloneThreadOptionsInput | None = strawberry.field(
        default=UNSET, description="Which messages to copy (default: all)."
    )


@strawberry.input(description="Changes to one stored message (omitted fields keep their value).")
class UpdateMessageInput:
    id: strawberry.ID = strawberry.field(description="The message (unknown ids are skipped).")
    content: JSON | None = strawberry.field(
        default=UNSET,
        description="Shallow-merged into the stored content; metadata is merged one level deeper, "
        "parts are replaced. The result must still be valid content.",
    )
    role: str | None = strawberry.field(default=UNSET, description="The new role.")
    type: str | None = strawberry.field(default=UNSET, description="The new message type.")
    thread_id: strawberry.ID | None = strawberry.field(
        default=UNSET, description="Move the message to this thread (createdAt is kept)."
    )
    resource_id: str | None = strawberry.field(
        default=UNSET, description="The new resource (default when moving: the target thread's owner)."
    )

    def to_patch(self) -> MessagePatch:
        thread_id = given(self.thread_id)
        return MessagePatch(
            id=str(self.id),
            content=given(self.content),
            role=given(self.role),
            type=given(self.type),
            thread_id=str(thread_id) if thread_id is not None else None,
            resource_id=given(self.resource_id),
        )


# ---------------------------------------------------------------------------------------------- roots
@strawberry.type
class MemoryQuery:
    @strawberry.field(
        description="A resource by id: one with threads or working memory, or one messages are filed under "
        "(null when unknown; FORBIDDEN when the credential does not grant it; BAD_USER_INPUT when blank)."
    )
    async def resource(self, info: Ctx, id: Annotated[str, _arg("The resource id.")]) -> Resource | None:
        record = await info.context.resource(id)
        return Resource(_record=record) if record else None

    @strawberry.field(
        description="Mastra's getWorkingMemory: null when disabled or empty; resource scope (the default) "
        "needs a resourceId, thread scope reads the thread's metadata.workingMemory."
    )
    async def working_memory(
        self,
        info: Ctx,
        thread_id: Annotated[strawberry.ID, _arg("The thread.")],
        resource_id: Annotated[
            str | None,
            _arg("The resource (required in resource scope; in thread scope it must own the thread)."),
        ] = UNSET,
        memory_config: Annotated[
            MemoryConfigInput | None, _arg("Memory configuration for this call, over the server defaults.")
        ] = UNSET,
    ) -> str | None:
        return await info.context.services.working_memory.get(
            str(thread_id),
            given(resource_id),
            memory_config_value(memory_config),
            principal=info.context.principal,
        )

    @strawberry.field(
        description="Mastra's getWorkingMemoryTemplate: the Markdown template or the JSON Schema of the "
        "memory config; null when working memory is disabled."
    )
    def working_memory_template(
        self,
        info: Ctx,
        memory_config: Annotated[
            MemoryConfigInput | None, _arg("Memory configuration for this call, over the server defaults.")
        ] = UNSET,
    ) -> WorkingMemoryTemplate | None:
        template = info.context.services.working_memory.template(memory_config_value(memory_config))
        if template is None:
            return None
        return WorkingMemoryTemplate(format=WorkingMemoryFormat(template.format), content=template.content)


@strawberry.type
class MemoryMutation:
    @strawberry.mutation(
        description="Deletes a thread, its messages and their vectors. An unknown id is a no-op that "
        "answers false (as in Mastra); with resourceId, another resource's thread is FORBIDDEN."
    )
    async def delete_thread(
        self,
        info: Ctx,
        id: Annotated[strawberry.ID, _arg("The thread id.")],
        resource_id: Annotated[str | None, _arg("When given, the thread must belong to it.")] = UNSET,
    ) -> bool:
        return await info.context.services.threads.delete(
            str(id), given(resource_id), principal=info.context.principal
        )

    @strawberry.mutation(
        description="Mastra's cloneThread: a new thread with copies of (a selection of) the source's "
        "messages (new ids, same createdAt and order), in one transaction."
    )
    async def clone_thread(
        self,
        info: Ctx,
        input: Annotated[CloneThreadInput, _arg("The source thread and the clone's details.")],
        memory_config: Annotated[
            MemoryConfigInput | None,
            _arg("Memory configuration (working memory is copied as Mastra does), over the server defaults."),
        ] = UNSET,
    ) -> CloneThreadPayload:
        options = given(input.options)
        message_filter = given(options.message_filter) if options else None
        ids = given(message_filter.message_ids) if message_filter else None
        new_id = given(input.new_thread_id)
        result = await info.context.services.threads.clone(
            str(input.source_thread_id),
            new_thread_id=str(new_id) if new_id is not None else None,
            resource_id=given(input.resource_id),
            title=given(input.title),
            metadata=given(input.metadata),
            options=CloneOptions(
                message_limit=given(options.message_limit) if options else None,
                start_date=given(message_filter.start_date) if message_filter else None,
                end_date=given(message_filter.end_date) if message_filter else None,
                message_ids=[str(i) for i in ids] if ids is not None else None,
            ),
            memory_config=memory_config_value(memory_config),
            principal=info.context.principal,
        )
        return CloneThreadPayload(
            thread=Thread(_record=result.thread),
            cloned_messages=[Message(_record=m) for m in result.messages],
            message_id_map=[
                ClonedMessageId(source_id=strawberry.ID(s), clone_id=strawberry.ID(c))
                for s, c in result.message_id_map.items()
            ],
        )

    @strawberry.mutation(
        description="Mastra's updateMessages, in one transaction: unknown ids are skipped; returns the "
        "updated messages, in id order as Mastra does. createdAt never changes; vectors follow."
    )
    async def update_messages(
        self,
        info: Ctx,
        messages: Annotated[list[UpdateMessageInput], _arg("The changes, applied in order.")],
    ) -> list[Message]:
        updated = await info.context.services.messages.update(
            [m.to_patch() for m in messages], principal=info.context.principal
        )
        return [Message(_record=m) for m in updated]

    @strawberry.mutation(
        description="Deletes messages by id in one transaction (unknown ids are ignored); their vectors "
        "go too and their threads' updatedAt is bumped."
    )
    async def delete_messages(
        self, info: Ctx, ids: Annotated[list[strawberry.ID], _arg("The message ids.")]
    ) -> DeleteMessagesPayload:
        deleted = await info.context.services.messages.delete(
            [str(i) for i in ids], principal=info.context.principal
        )
        return DeleteMessagesPayload(deleted=len(deleted), ids=[strawberry.ID(m.id) for m in deleted])

    @strawberry.mutation(
        description="Mastra's updateWorkingMemory: replaces (or appends to / merges into) the working "
        "memory of the configured scope. With workingMemory.schema the value must be a JSON document "
        "that validates against it. Concurrent updates of one scope are serialised."
    )
    async def update_working_memory(
        self,
        info: Ctx,
        thread_id: Annotated[strawberry.ID, _arg("The thread (must exist in thread scope).")],
        working_memory: Annotated[str, _arg("The new working memory (Markdown, or JSON with a schema).")],
        resource_id: Annotated[
            str | None, _arg("The resource (required in resource scope, the default).")
        ] = UNSET,
        memory_config: Annotated[
            MemoryConfigInput | None, _arg("Memory configuration for this call, over the server defaults.")
        ] = UNSET,
        mode: Annotated[
            WorkingMemoryUpdateMode,
            _arg(
                "REPLACE (Mastra's behaviour); APPEND adds a line to Markdown working memory; MERGE "
                "deep-merges a JSON object into JSON working memory (null deletes a key)."
            ),
        ] = WorkingMemoryUpdateMode.REPLACE,
    ) -> WorkingMemoryPayload:
        state = await info.context.services.working_memory.update(
            str(thread_id),
            given(resource_id),
            working_memory,
            memory_config_value(memory_config),
            # @strawberry.enum has replaced each member's EnumValueDefinition by its string.
            mode=cast(str, mode.value),
            principal=info.context.principal,
        )
        return WorkingMemoryPayload(
            scope=WorkingMemoryScope(state.scope),
            thread_id=strawberry.ID(state.thread_id),
            resource_id=state.resource_id,
            working_memory=state.working_memory,
            updated_at=DateTime(state.updated_at),
        )


@strawberry.type(description="Live updates over graphql-transport-ws (the same /graphql path).")
class Subscription:
    @strawberry.subscription(
        description="Every change to the thread's messages after the subscription starts: SAVED, UPDATED "
        "and DELETED events (best effort: events published while disconnected are not replayed; `after` "
        "resumes from a cursor)."
    )
    async def message_saved(
        self,
        info: Ctx,
        thread_id: Annotated[strawberry.ID, _arg("The thread to watch.")],
        after: Annotated[
            str | None,
            _arg(
                "Resume (beyond Mastra): first every message after this cursor (Message.cursor, "
                "RecallResult.endCursor) as a SAVED event, as stored now and oldest first (at most 1,000), "
                "then the live events, none missed in between and none given twice as it is."
            ),
        ] = UNSET,
        changed_since: Annotated[
            DateTime | None,
            _arg(
                "With after (beyond Mastra): the replay begins with every message at or before the "
                "cursor changed or deleted since this time (the `at` of the last event received; 30 s "
                "earlier included, as changes are published when they commit), as UPDATED (as stored "
                "now) or DELETED (as last stored), oldest change first. Changes are kept for "
                "RECALLQL_CHANGE_RETENTION seconds (0, the default, keeps none: changedSince is refused, "
                "as is one older than the retention or than the time the server began keeping them)."
            ),
        ] = UNSET,
    ) -> AsyncGenerator[MessageEvent, None]:
        try:
            events = await info.context.services.messages.watch(
                str(thread_id),
                principal=info.context.principal,
                after=given(after),
                changed_since=given(changed_since),
            )
            async for payload, record in events:
                info.context.clear_caches()
                yield MessageEvent(
                    kind=MessageEventKind(payload["kind"]),
                    thread_id=strawberry.ID(payload["threadId"]),
                    message_id=strawberry.ID(payload["messageId"]),
                    message=Message(_record=record),
                    at=DateTime(payload["at"]),
                )
        except Exception as exc:
            raise _located(exc, info) from exc

    @strawberry.subscription(
        description="Changes to the resource's threads: CREATED, UPDATED, DELETED and TITLE_GENERATED "
        "(`after` resumes from a cursor)."
    )
    async def thread_updated(
        self,
        info: Ctx,
        resource_id: Annotated[str, _arg("The resource whose threads to watch.")],
        after: Annotated[
            str | None,
            _arg(
                "Resume (beyond Mastra): first every thread changed after this cursor of an UPDATED_AT "
                "listing (ThreadPage.startCursor of a newest-first page: its top thread) as an UPDATED "
                "event, as stored now and least recently changed first (at most 1,000), then the live "
                "events, none missed in between and none given twice as it is. On a server that keeps "
                "changes (RECALLQL_CHANGE_RETENTION), the threads deleted since the cursor's time (30 s "
                "earlier included) come first, as DELETED events."
            ),
        ] = UNSET,
        changed_since: Annotated[
            DateTime | None,
            _arg(
                "With after (beyond Mastra): the DELETED events are of the threads deleted since this "
                "time (the `at` of the last event received; 30 s earlier included) instead of the "
                "cursor's, and a time the kept changes do not reach back to is refused instead of "
                "answered without the deletions no longer kept. Needs RECALLQL_CHANGE_RETENTION."
            ),
        ] = UNSET,
    ) -> AsyncGenerator[ThreadEvent, None]:
        try:
            events = await info.context.services.threads.watch(
                resource_id,
                principal=info.context.principal,
                after=given(after),
                changed_since=given(changed_since),
            )
            async for payload, record in events:
                info.context.clear_caches()
                yield ThreadEvent(
                    kind=ThreadEventKind(payload["kind"]),
                    thread_id=strawberry.ID(payload["threadId"]),
                    resource_id=payload["resourceId"],
                    thread=Thread(_record=record),
                    at=DateTime(payload["at"]),
                )
        except Exception as exc:
            raise _located(exc, info) from exc


def _located(error: Exception, info: Ctx) -> GraphQLError:
    """A subscription's own error as a field error, with the path and location every other field error
    has: Strawberry passes an exception raised by the event stream on bare (no `path`)."""
    return located_error(error, info._raw_info.field_nodes, info.path.as_list())
