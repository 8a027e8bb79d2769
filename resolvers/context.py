"""The services an API call uses, and the typed per-request context with its DataLoaders."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from models.records import MessageRecord, ResourceRecord, ThreadRecord
from models.repository import Repository
from resolvers.auth import Principal
from resolvers.budget import RowBudget
from resolvers.errors import BadUserInput
from resolvers.events import EventBroker, InProcessBroker
from resolvers.loaders import DataLoader
from resolvers.messages import MessageService
from resolvers.recall import PageBatch, RecallEngine
from resolvers.semantic import SemanticMemory
from resolvers.threads import ThreadService, clone_history, clone_source, clones_of
from resolvers.titles import Chat, TitleGenerator
from resolvers.working_memory import WorkingMemoryService


@dataclass
class Services:
    repository: Repository
    recall: RecallEngine
    threads: ThreadService
    messages: MessageService
    semantic: SemanticMemory | None = None
    working_memory: WorkingMemoryService = field(default=None)  # type: ignore[assignment]
    events: EventBroker = field(default_factory=InProcessBroker)
    titles: TitleGenerator = field(default=None)  # type: ignore[assignment]
    # Messages and threads one request may read across its fields (resolvers.budget; None: unlimited).
    max_request_rows: int | None = None
    # Thread.recall fields one request may resolve (None: unlimited): each is a recall of its own.
    max_thread_recalls: int | None = None

    def __post_init__(self) -> None:
        # Services built by hand (tests) get the memory-API collaborators with their defaults.
        if self.working_memory is None:
            self.working_memory = WorkingMemoryService(
                self.repository, defaults=self.recall.defaults, events=self.events
            )
        if self.titles is None:
            self.titles = TitleGenerator(self.repository, events=self.events)

    @classmethod
    def build(
        cls,
        repository: Repository,
        *,
        memory_defaults: dict[str, Any],
        semantic: SemanticMemory | None = None,
        max_include_items: int | None = None,
        max_save_batch: int | None = None,
        vector_sync_timeout: float = 10.0,
        events: EventBroker | None = None,
        chat: Chat | None = None,
        title_timeout: float = 30.0,
        max_per_page: int | None = None,
        max_all_rows: int | None = None,
        max_search_chars: int | None = None,
        max_request_rows: int | None = None,
        max_thread_recalls: int | None = None,
        change_retention: float = 0.0,
    ) -> Services:
        broker: EventBroker = events if events is not None else InProcessBroker()
        titles = TitleGenerator(repository, chat=chat, events=broker, timeout=title_timeout)
        return cls(
            repository=repository,
            recall=RecallEngine(
                repository,
                defaults=memory_defaults,
                semantic=semantic,
                max_include_items=max_include_items,
                max_per_page=max_per_page,
                max_all_rows=max_all_rows,
                max_search_chars=max_search_chars,
            ),
            threads=ThreadService(
                repository,
                events=broker,
                vectors=semantic,
                defaults=memory_defaults,
                vector_sync_timeout=vector_sync_timeout,
                max_per_page=max_per_page,
                max_all_rows=max_all_rows,
                change_retention=change_retention,
            ),
            messages=MessageService(
                repository,
                max_batch=max_save_batch,
                vectors=semantic,
                vector_sync_timeout=vector_sync_timeout,
                events=broker,
                titles=titles,
                defaults=memory_defaults,
                change_retention=change_retention,
            ),
            semantic=semantic,
            working_memory=WorkingMemoryService(repository, defaults=memory_defaults, events=broker),
            events=broker,
            titles=titles,
            max_request_rows=max_request_rows,
            max_thread_recalls=max_thread_recalls,
        )

    async def aclose(self) -> None:
        """Finishes (briefly) the titles in progress and closes the event broker."""
        await self.titles.aclose()
        await self.events.aclose()


@dataclass
class RequestContext:
    services: Services
    # Who asks (resolvers.auth); required, like the services' principal. The loaders below answer None
    # for rows it may not see, so every field that loads through them (Message.thread, messages(ids),
    # entity fetches) is limited to its grants.
    principal: Principal
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    # graphql-transport-ws connection_init payload (set by Strawberry; web.auth reads the token in it).
    connection_params: dict[str, Any] | None = None
    # Why a WebSocket's connection_init was refused, for its close frame's reason (web/limits.py).
    connection_refusal: str | None = None
    # The HTTP front (web.compiled) found nothing unstorable in the request's variables: the schema
    # need not walk them again.
    variables_checked: bool = False
    # The HTTP response being prepared (Strawberry's sub-response; None over WebSocket): a request
    # error found during validation sets its status.
    http_response: Any = None
    threads: DataLoader[str, ThreadRecord | None] = field(init=False)
    messages: DataLoader[str, MessageRecord | None] = field(init=False)
    resources: DataLoader[str, ResourceRecord | None] = field(init=False)
    # (resource, source thread id) -> that resource's clones of the thread (Thread.clones), newest first
    clones: DataLoader[tuple[str, str], list[ThreadRecord]] = field(init=False)
    rows: RowBudget = field(init=False)  # what the request's fields may still read
    pages: PageBatch = field(init=False)  # nested recalls' page reads, batched (drawing on `rows`)
    thread_recalls: int = field(init=False)  # Thread.recall fields resolved so far

    def __post_init__(self) -> None:
        repo = self.services.repository
        self.rows = RowBudget(self.services.max_request_rows)
        self.pages = PageBatch(repo, self.rows)
        self.thread_recalls = 0

        async def load_threads(ids: Sequence[str]) -> list[ThreadRecord | None]:
            found = await repo.get_threads(ids)
            return [t if self.principal.sees_thread(t := found.get(i)) else None for i in ids]

        async def load_messages(ids: Sequence[str]) -> list[MessageRecord | None]:
            found = await repo.get_messages(ids)
            return [m if self.principal.sees_message(m := found.get(i)) else None for i in ids]

        async def load_resources(ids: Sequence[str]) -> list[ResourceRecord | None]:
            found = await repo.get_resources(ids)
            return [found.get(i) if self.principal.can_access(i) else None for i in ids]

        async def load_clones(pairs: Sequence[tuple[str, str]]) -> list[list[ThreadRecord]]:
            # Every pair's resource was checked by the field: its threads are the principal's to see.
            return clones_of(pairs, await repo.threads_naming_source(pairs))

        self.threads = DataLoader(load_threads)
        self.clones = DataLoader(load_clones)
        self.messages = DataLoader(load_messages)
        self.resources = DataLoader(load_resources)

    def clear_caches(self) -> None:
        """Forgets loaded rows (a subscription's context lives as long as its connection)."""
        self.__post_init__()

    def count_thread_recall(self) -> None:
        """Counts one Thread.recall, or refuses it past the request's limit. Each is a recall of its own
        (a statement at least), and a page of a thousand threads could otherwise ask for a thousand; its
        rows are drawn on the request's row budget as any recall's are, but a page of none (perPage: 0,
        for the total) reads no rows."""
        limit = self.services.max_thread_recalls
        if limit is not None and self.thread_recalls >= limit:
            raise BadUserInput(
                f"One request may resolve Thread.recall for at most {limit} threads; ask for fewer "
                "threads (perPage) or send the rest in another request.",
                limit="maxThreadRecalls",
                max=limit,
            )
        self.thread_recalls += 1

    async def cloned_from(self, thread: ThreadRecord) -> ThreadRecord | None:
        """Thread.clonedFrom: the thread's source (Mastra's getSourceThread), if it is one the
        principal may see."""
        source = clone_source(thread)
        if source is None:
            return None
        self.rows.spend(1, "Thread.clonedFrom")
        return await self.threads.load(source)

    async def clones_of(self, thread: ThreadRecord, resource_id: str | None) -> list[ThreadRecord]:
        """Thread.clones: the resource's (default: the thread's own) threads cloned from this one, read
        with the request's other clones in one batch; another resource must be granted."""
        resource = resource_id if resource_id is not None else thread.resource_id
        if not resource.strip():
            raise BadUserInput("resourceId must be a non-empty string when given.")
        self.principal.require(resource)
        found = await self.clones.load((resource, thread.id))
        self.rows.spend(len(found), "Thread.clones")
        return found

    async def clone_history_of(self, thread: ThreadRecord) -> list[ThreadRecord]:
        """Thread.cloneHistory (resolvers.threads.clone_history), each source read as the principal's."""

        async def load(thread_id: str) -> ThreadRecord | None:
            self.rows.spend(1, "Thread.cloneHistory")
            return await self.threads.load(thread_id)

        return await clone_history(thread, load)

    async def resource(self, resource_id: str) -> ResourceRecord | None:
        """A resource by id (None when unknown); another resource than the principal's is FORBIDDEN. A
        blank id names none (nothing can be filed under it): refused as Mastra's resource calls
        refuse it, rather than answered null."""
        if not resource_id.strip():
            raise BadUserInput("resourceId is required")
        self.principal.require(resource_id)
        return await self.resources.load(resource_id)
