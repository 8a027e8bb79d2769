"""Query and Mutation: thin resolvers that map GraphQL inputs to the services and back."""

from __future__ import annotations

from typing import Annotated, Any

import strawberry
from strawberry import UNSET
from strawberry.extensions import FieldExtension
from strawberry.extensions.field_extension import AsyncExtensionResolver
from strawberry.types import Info

from resolvers.context import RequestContext
from resolvers.messages import MessageInput as MessageData
from schema.inputs import (
    CreateThreadInput,
    HideSignalsInput,
    IncludeInput,
    MemoryConfigInput,
    MessageInput,
    MessageOrderBy,
    RecallFilter,
    ThreadOrderBy,
    UpdateThreadInput,
    given,
    memory_config_value,
)
from schema.memory import (
    THREADS_AFTER,
    THREADS_BEFORE,
    THREADS_PER_PAGE,
    MemoryMutation,
    MemoryQuery,
    thread_page,
)
from schema.scalars import JSON, PerPage
from schema.types import (
    Message,
    RecallResult,
    SaveMessagesPayload,
    Thread,
    ThreadPage,
    recall_argument,
    recall_field,
)

Ctx = Info[RequestContext, None]


def _arg(description: str, **kwargs: object) -> object:
    return strawberry.argument(description=description, **kwargs)  # type: ignore[arg-type]


@strawberry.type(description="Reads: recall, threads, messages, resources and working memory.")
class Query(MemoryQuery):
    @strawberry.field(
        description="Mastra's Memory.recall(): the messages of a thread an agent or a UI needs."
    )
    async def recall(
        self,
        info: Ctx,
        thread_id: Annotated[strawberry.ID, _arg("The thread to read.")],
        resource_id: Annotated[
            str | None,
            _arg(
                "When given, the thread must belong to it (FORBIDDEN otherwise) and only its rows are read."
            ),
        ] = UNSET,
        per_page: Annotated[PerPage | None, recall_argument("per_page")] = UNSET,
        page: Annotated[int | None, recall_argument("page")] = UNSET,
        include: Annotated[list[IncludeInput] | None, recall_argument("include")] = UNSET,
        filter: Annotated[RecallFilter | None, recall_argument("filter")] = UNSET,
        order_by: Annotated[MessageOrderBy | None, recall_argument("order_by")] = UNSET,
        hide_signals: Annotated[HideSignalsInput | None, recall_argument("hide_signals")] = UNSET,
        include_system_reminders: Annotated[
            bool | None,
            strawberry.argument(
                description="Keep legacy system reminders (when hideSignals is omitted).",
                deprecation_reason="Use hideSignals.",
            ),
        ] = UNSET,
        thread_config: Annotated[MemoryConfigInput | None, recall_argument("thread_config")] = UNSET,
        vector_search_string: Annotated[str | None, recall_argument("vector_search_string")] = UNSET,
        include_total: Annotated[
            bool | None, _arg("Accepted for compatibility; total is always counted.")
        ] = UNSET,
        after: Annotated[str | None, recall_argument("after")] = UNSET,
        before: Annotated[str | None, recall_argument("before")] = UNSET,
        hide_in_page_query: Annotated[bool | None, recall_argument("hide_in_page_query")] = UNSET,
    ) -> RecallResult:
        return await recall_field(
            info,
            thread_id=str(thread_id),
            resource_id=given(resource_id),
            per_page=per_page,
            page=page,
            include=include,
            filter=filter,
            order_by=order_by,
            hide_signals=hide_signals,
            include_system_reminders=include_system_reminders,
            thread_config=thread_config,
            vector_search_string=vector_search_string,
            after=after,
            before=before,
            hide_in_page_query=hide_in_page_query,
        )

    @strawberry.field(description="A thread by id (null when unknown or owned by another resource).")
    async def thread(
        self,
        info: Ctx,
        id: Annotated[strawberry.ID, _arg("The thread id.")],
        resource_id: Annotated[str | None, _arg("When given, the thread must belong to it.")] = UNSET,
    ) -> Thread | None:
        record = await info.context.services.threads.get(
            str(id), given(resource_id), principal=info.context.principal
        )
        return Thread(_record=record) if record else None

    @strawberry.field(
        description="A resource's threads, newest first by default; without resourceId (Mastra's "
        "listThreads without filter.resourceId), every resource's the credential may read."
    )
    async def threads(
        self,
        info: Ctx,
        resource_id: Annotated[
            str | None,
            _arg(
                "The owning resource; omitted or null: all threads (for a restricted credential, those "
                "of its resources)."
            ),
        ] = UNSET,
        page: Annotated[int, _arg("Zero-based page.")] = 0,
        per_page: Annotated[PerPage, _arg("Page size (default 100); false returns all.")] = THREADS_PER_PAGE,
        order_by: Annotated[ThreadOrderBy | None, _arg("Ordering (default createdAt DESC).")] = UNSET,
        metadata: Annotated[JSON | None, _arg("Exact-type equality on thread metadata keys.")] = UNSET,
        after: Annotated[str | None, _arg(THREADS_AFTER)] = UNSET,
        before: Annotated[str | None, _arg(THREADS_BEFORE)] = UNSET,
    ) -> ThreadPage:
        return await thread_page(info, given(resource_id), page, per_page, order_by, metadata, after, before)

    @strawberry.field(description="Messages by id (null for unknown ids), batched.")
    async def messages(
        self, info: Ctx, ids: Annotated[list[strawberry.ID], _arg("Message ids.")]
    ) -> list[Message | None]:
        # Unbounded, one request of repeated ids naming large messages answered a gigabyte.
        info.context.services.messages.check_batch("messages", len(ids))
        info.context.rows.spend(len(ids), "this messages lookup")
        records = await info.context.messages.load_many([str(i) for i in ids])
        return [Message(_record=r) if r else None for r in records]


_THREAD_MEMORY_CONFIG = (
    "Memory configuration for this call (workingMemory: whether a metadata.workingMemory string is also "
    "the resource's), deep-merged over the server defaults."
)


@strawberry.type(description="Writes: threads, messages and working memory.")
class Mutation(MemoryMutation):
    @strawberry.mutation(
        description="Creates a thread; an existing id is a CONFLICT. With working memory on in resource "
        "scope, a string metadata.workingMemory also becomes the resource's working memory (Mastra's "
        "saveThread)."
    )
    async def create_thread(
        self,
        info: Ctx,
        input: Annotated[CreateThreadInput, _arg("The thread to create.")],
        memory_config: Annotated[MemoryConfigInput | None, _arg(_THREAD_MEMORY_CONFIG)] = UNSET,
    ) -> Thread:
        record = await info.context.services.threads.create(
            resource_id=input.resource_id,
            thread_id=str(input.id) if given(input.id) is not None else None,
            title=given(input.title),
            metadata=given(input.metadata),
            created_at=given(input.created_at),
            memory_config=memory_config_value(memory_config),
            principal=info.context.principal,
        )
        return Thread(_record=record)

    @strawberry.mutation(
        description="Updates a thread's title and shallow-merges its metadata. With working memory on in "
        "resource scope, a string metadata.workingMemory also becomes the resource's working memory "
        "(Mastra's updateThread)."
    )
    async def update_thread(
        self,
        info: Ctx,
        input: Annotated[UpdateThreadInput, _arg("The thread and its changes.")],
        memory_config: Annotated[MemoryConfigInput | None, _arg(_THREAD_MEMORY_CONFIG)] = UNSET,
    ) -> Thread:
        record = await info.context.services.threads.update(
            str(input.id),
            title=given(input.title),
            metadata=given(input.metadata),
            memory_config=memory_config_value(memory_config),
            principal=info.context.principal,
        )
        return Thread(_record=record)

    @strawberry.mutation(
        description="Mastra's updateThreadResourceId: gives the thread and every message filed under it "
        "to another resource (createdAt kept, updatedAt now), in one transaction; their vectors follow. "
        "A thread already of that resource is returned unchanged; an unknown one is NOT_FOUND. "
        "Resource-scoped working memory stays with the old resource. Subscribers of the old resource "
        "hear DELETED, of the new one CREATED. A restricted credential needs both resources granted."
    )
    async def update_thread_resource_id(
        self,
        info: Ctx,
        thread_id: Annotated[strawberry.ID, _arg("The thread to transfer.")],
        resource_id: Annotated[str, _arg("The resource that owns the thread afterwards.")],
    ) -> Thread:
        record = await info.context.services.threads.transfer(
            str(thread_id), resource_id, principal=info.context.principal
        )
        return Thread(_record=record)

    @strawberry.mutation(
        description="Saves messages (upsert by id) in one transaction; a re-saved message keeps its "
        "createdAt and position. Transient signals are acknowledged but not stored."
    )
    async def save_messages(
        self,
        info: Ctx,
        messages: Annotated[list[MessageInput], _arg("The messages, in order (at most maxSaveBatch).")],
        memory_config: Annotated[
            MemoryConfigInput | None,
            _arg("Memory configuration for this save (generateTitle), deep-merged over the server defaults."),
        ] = UNSET,
    ) -> SaveMessagesPayload:
        result = await info.context.services.messages.save(
            [
                MessageData(
                    thread_id=str(m.thread_id),
                    role=m.role,
                    content=m.content,
                    id=str(m.id) if given(m.id) is not None else None,
                    resource_id=given(m.resource_id),
                    type=given(m.type),
                    created_at=given(m.created_at),
                )
                for m in messages
            ],
            memory_config_value(memory_config),
            principal=info.context.principal,
        )
        return SaveMessagesPayload(
            messages=[Message(_record=r) for r in result.listed_messages], acknowledged=result.acknowledged
        )


class FreshLoaders(FieldExtension):
    """Each root mutation starts with empty DataLoaders. Mutations run one after another, and the rows
    a field loaded for an earlier one (a thread's title, a message) were read before the later writes:
    `a: saveMessages { messages { thread { title } } } b: updateThread(title) c: saveMessages {...}`
    answered c's thread with the title from before b."""

    async def resolve_async(
        self, next_: AsyncExtensionResolver, source: Any, info: Info, **kwargs: Any
    ) -> Any:
        info.context.clear_caches()
        return await next_(source, info, **kwargs)


for _field in Mutation.__strawberry_definition__.fields:  # type: ignore[attr-defined]
    _field.extensions.append(FreshLoaders())
