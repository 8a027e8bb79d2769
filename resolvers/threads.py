"""Threads: create, read, update, list, delete and clone (mastra-behaviour.md §6, with the contract's
divergences). Every change is announced on the event broker after it has committed."""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import orjson

from models.records import MessageRecord, ThreadRecord
from models.repository import CloneTooLarge, Repository, RowConflict
from resolvers import cursors
from resolvers.auth import Principal
from resolvers.budget import RowBudget
from resolvers.clock import now_ms, to_iso
from resolvers.errors import (
    BadUserInput,
    Conflict,
    Forbidden,
    NotFound,
    check_id_size,
    check_json_depth,
    every_row_refused,
)
from resolvers.events import (
    CHANGE_GRACE_MS,
    MESSAGE_DELETED,
    MESSAGE_SAVED,
    MESSAGE_UPDATED,
    THREAD_CREATED,
    THREAD_DELETED,
    THREAD_TITLE_GENERATED,
    THREAD_UPDATED,
    EventBroker,
    UnrecordedWrites,
    check_changed_since,
    message_event,
    publish_quietly,
    received_thread_event,
    resumed,
    thread_channel,
    thread_event,
    too_long_a_replay,
)
from resolvers.messages import VectorSync, sync_vectors
from resolvers.recall import PerPage, js_truthy, listed, validate_thread_metadata_filter
from resolvers.working_memory import merge_memory_config, working_memory_config, working_memory_from_metadata

# JavaScript's Number.MAX_SAFE_INTEGER: Mastra's bound on perPage and on a page's offset.
_MAX_SAFE_INTEGER = 2**53 - 1


def thread_page_size(page: int, per_page: PerPage) -> int | None:
    """Mastra's listThreads checks of page and perPage (validatePaginationInput), in their order and
    with their texts; the page size, None for every thread (perPage false). 2.0 is 2, as in
    JavaScript."""
    if per_page is not False:
        if (
            isinstance(per_page, bool)
            or not math.isfinite(per_page)
            or per_page != int(per_page)
            or abs(per_page) > _MAX_SAFE_INTEGER
        ):
            raise BadUserInput("perPage must be false or a safe integer")
        if per_page < 0:
            raise BadUserInput("perPage must be >= 0")
    elif page != 0:
        raise BadUserInput("page must be 0 when perPage is false")
    if page < 0:
        raise BadUserInput("page must be >= 0")
    if per_page is False:
        return None
    if per_page and page * int(per_page) > _MAX_SAFE_INTEGER:
        raise BadUserInput("page value too large")
    return int(per_page)


@dataclass(slots=True)
class ThreadPage:
    threads: list[ThreadRecord]
    total: int | None  # None: not counted (ThreadService.list)
    page: int
    per_page: int | Literal[False]
    has_more: bool
    # Keyset paging (resolvers.cursors): the places of the page's first and last threads, as listed.
    start_cursor: str | None = None
    end_cursor: str | None = None


def _thread_cursor(thread: ThreadRecord, order_field: str) -> str:
    at = thread.updated_at if order_field == "updatedAt" else thread.created_at
    return cursors.encode_thread(order_field, at, thread.id)


@dataclass(slots=True)
class CloneOptions:
    """Mastra's cloneThread options: messageLimit (the newest N; 0 or negative = all) and messageFilter."""

    message_limit: int | None = None
    start_date: int | None = None
    end_date: int | None = None
    message_ids: Sequence[str] | None = None


@dataclass(slots=True)
class CloneResult:
    thread: ThreadRecord
    messages: list[MessageRecord]  # the copies but system-role rows, chronologically
    message_id_map: dict[str, str] = field(default_factory=dict)


class ThreadService:
    def __init__(
        self,
        repository: Repository,
        *,
        events: EventBroker | None = None,
        vectors: VectorSync | None = None,
        defaults: dict[str, Any] | None = None,
        vector_sync_timeout: float = 10.0,
        max_per_page: int | None = None,
        max_all_rows: int | None = None,
        change_retention: float = 0.0,
    ) -> None:
        self.repository = repository
        self.change_retention = change_retention  # > 0: deletions are recorded for resumed streams
        self.unrecorded = UnrecordedWrites(repository, change_retention)
        self.events = events
        self.vectors = vectors
        self.defaults = defaults or {}
        self.vector_sync_timeout = vector_sync_timeout
        self.max_per_page = max_per_page  # threads' perPage limit (None: unlimited)
        self.max_all_rows = max_all_rows  # threads a perPage: false listing may return (None: unlimited)

    async def get(
        self, thread_id: str, resource_id: str | None = None, *, principal: Principal
    ) -> ThreadRecord | None:
        """The thread; None when unknown, not of `resource_id`, or not accessible to the principal."""
        thread = await self.repository.get_thread(thread_id)
        if thread is None or (resource_id and thread.resource_id != resource_id):
            return None
        return thread if principal.sees_thread(thread) else None

    async def create(
        self,
        *,
        resource_id: str,
        thread_id: str | None = None,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        created_at: int | None = None,
        memory_config: dict[str, Any] | None = None,
        principal: Principal,
    ) -> ThreadRecord:
        """Mastra's saveThread of a new thread; with working memory on in resource scope (the server's
        default, or `memory_config` over it), a string metadata.workingMemory becomes the resource's
        working memory in the same transaction."""
        if not resource_id or not resource_id.strip():
            raise BadUserInput("resourceId must be a non-empty string.")
        principal.require(resource_id)
        # "" is generated, as in Mastra's createThread (`threadId || generateId()`); blanks are refused.
        if thread_id and not thread_id.strip():
            raise BadUserInput("id must not be blank when given.")
        check_id_size(thread_id, "id")
        check_id_size(resource_id, "resourceId")
        _check_metadata(metadata)
        working_memory = working_memory_from_metadata(metadata, self.defaults, memory_config)
        now = now_ms()
        created = created_at if created_at is not None else now
        thread = ThreadRecord(
            id=thread_id or str(uuid.uuid4()),
            resource_id=resource_id,
            title=title or "",
            metadata=metadata,
            created_at=created,
            updated_at=created,
        )
        if not await self.repository.insert_thread(thread, resource_working_memory=working_memory, now=now):
            raise Conflict(f"Thread with id {thread.id} already exists.")
        await publish_quietly(self.events, [thread_event(THREAD_CREATED, thread)])
        return thread

    async def update(
        self,
        thread_id: str,
        *,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        memory_config: dict[str, Any] | None = None,
        principal: Principal,
    ) -> ThreadRecord:
        """Mastra's updateThread: the title when given, metadata shallow-merged; a string
        metadata.workingMemory also becomes the resource's working memory, as on create."""
        _check_metadata(metadata)
        working_memory = working_memory_from_metadata(metadata, self.defaults, memory_config)

        def guard(existing: ThreadRecord) -> None:
            # On the row the write locks: a thread deleted and created again under its id by another
            # resource between a check and the write is checked as it is written.
            principal.require_thread(existing, thread_id)

        thread = await self.repository.update_thread(
            thread_id,
            title=title,
            metadata=metadata,
            now=now_ms(),
            guard=guard if principal.restricted else None,
            resource_working_memory=working_memory,
        )
        if thread is None:
            raise NotFound(f"Thread {thread_id} not found")
        await publish_quietly(self.events, [thread_event(THREAD_UPDATED, thread)])
        return thread

    async def transfer(self, thread_id: str, resource_id: str, *, principal: Principal) -> ThreadRecord:
        """Mastra's updateThreadResourceId: the thread and every message filed under it now belong to
        `resource_id` (createdAt kept, updatedAt now); their vectors move to that resource's collection
        through the outbox. A thread already of that resource is returned as it is. Resource-scoped
        working memory stays with the old resource; thread-scoped working memory (in the thread's
        metadata) goes with the thread.

        Announced as the thread leaving the old resource (DELETED, as it was there) and arriving in the
        new one (CREATED), and each message UPDATED on the thread. A restricted principal needs the
        thread's resource and `resource_id` granted, and every message filed under the thread to be of
        a granted resource (FORBIDDEN otherwise, nothing written)."""
        if not thread_id or not thread_id.strip():
            raise BadUserInput("threadId must be a non-empty string.")
        if not resource_id or not resource_id.strip():
            raise BadUserInput("resourceId must be a non-empty string.")
        check_id_size(resource_id, "resourceId")
        principal.require(resource_id)

        def guard(thread: ThreadRecord, messages: list[MessageRecord]) -> None:
            # In the transfer's transaction: what moves is exactly what was checked.
            principal.require_thread(thread, thread_id)
            principal.require_messages(messages)

        await self.unrecorded()
        moved = await self.repository.transfer_thread(
            thread_id,
            resource_id,
            now=now_ms(),
            track_vectors=self.vectors is not None,
            record_changes=self.change_retention > 0,
            guard=guard if principal.restricted else None,
        )
        if moved is None:
            raise NotFound(f'Thread "{thread_id}" not found')  # Mastra's text here, quotes and all
        before, thread, left, messages = moved
        if before is thread:
            return thread
        # The same texts, now in another resource's collection: copied there rather than embedded again.
        await sync_vectors(
            self.vectors,
            messages,
            self.vector_sync_timeout,
            stored=messages,
            copied_from=list(zip(left, messages, strict=True)),
            moved=True,
        )
        events = [thread_event(THREAD_DELETED, before), thread_event(THREAD_CREATED, thread)]
        events.extend(message_event(MESSAGE_UPDATED, thread_id, m) for m in messages)
        await publish_quietly(self.events, events)
        return thread

    async def list(
        self,
        resource_id: str | None,
        *,
        page: int = 0,
        per_page: PerPage = 100,
        order_field: str = "createdAt",
        descending: bool = True,
        metadata: Any = None,
        principal: Principal,
        budget: RowBudget | None = None,
        after: str | None = None,
        before: str | None = None,
        counted: bool = True,
    ) -> ThreadPage:
        """`budget`: the rows the request may still read (resolvers.budget). `after` and `before` are
        cursors (ThreadPage.startCursor, endCursor): places in the listing's order, as Relay's are; the
        page is read, counted and offset among the threads strictly between them. Not `counted` (the
        caller does not need the total), a page of a perPage has no total, and hasMore (the same as
        Mastra's offset + perPage < total) comes from reading one thread more than the page.

        Without `resource_id` (Mastra's listThreads without filter.resourceId), every thread: an admin's
        listing of all resources, a restricted principal's of its granted ones."""
        scope: str | frozenset[str] | None = resource_id
        if resource_id is None:
            scope = principal.resources
        else:
            principal.require(resource_id)
        limit = thread_page_size(page, per_page)
        size: int | Literal[False] = False if limit is None else limit
        if size is not False and self.max_per_page is not None and size > self.max_per_page:
            raise BadUserInput(
                f"perPage may be at most {self.max_per_page}, got {size}.",
                limit="maxPerPage",
                max=self.max_per_page,
            )
        filters = validate_thread_metadata_filter(metadata)
        # After Mastra's own checks, as recall's cursors are.
        after_place = cursors.decode_thread(after, "after", order_field) if after is not None else None
        before_place = cursors.decode_thread(before, "before", order_field) if before is not None else None
        offset = 0 if size is False else page * size
        budget = budget if budget is not None else RowBudget(None)
        all_rows = self.max_all_rows if limit is None else None
        async with budget.turn():
            threads, total = await self.repository.list_threads(
                scope,
                offset=offset,
                limit=limit,
                order_field=order_field,
                descending=descending,
                metadata=filters,
                max_rows=budget.cap(all_rows),  # counted first: over it, nothing is read
                after=after_place,
                before=before_place,
                counted=counted,
            )
            if total is not None and all_rows is not None and total > all_rows:
                holder = "this resource has" if resource_id is not None else "there are"
                raise every_row_refused("threads", all_rows, total, f"{holder} {total}")
            # A page is one statement with its count: its rows are read before they can be counted.
            rows = total if limit is None and total is not None else len(threads)
            budget.spend(rows, "this threads listing")
        if total is None:  # not counted: the page and the first thread after it, if any
            assert limit is not None
            has_more, threads = len(threads) > limit, threads[:limit]
        else:
            has_more = size is not False and offset + size < total
        result = ThreadPage(threads, total, page, size, has_more)
        if threads:
            result.start_cursor = _thread_cursor(threads[0], order_field)
            result.end_cursor = _thread_cursor(threads[-1], order_field)
        return result

    async def delete(self, thread_id: str, resource_id: str | None = None, *, principal: Principal) -> bool:
        """Deletes the thread, its messages and (through the outbox) their vectors. An unknown id is a
        no-op answering false, as in Mastra; with resourceId, another resource's thread is FORBIDDEN.
        A restricted principal may delete only a thread of a granted resource (all its messages go with
        it) or, under an unknown thread id, only messages of granted resources."""
        if not thread_id or not thread_id.strip():
            raise BadUserInput("id must be a non-empty string.")
        if resource_id is not None and not resource_id.strip():  # it skipped the ownership check
            raise BadUserInput("resourceId must be a non-empty string when given.")
        if resource_id:
            principal.require(resource_id)
            existing = await self.repository.get_thread(thread_id)
            if existing is not None and not principal.can_access(existing.resource_id):
                raise principal.thread_forbidden(thread_id)
            if existing is not None and existing.resource_id != resource_id:
                raise Forbidden(
                    f"Thread with id {thread_id} is for resource with id {existing.resource_id} "
                    f"but resource {resource_id} was queried."
                )

        def guard(found: ThreadRecord | None, filed: list[MessageRecord]) -> None:
            # In the delete's transaction: what is deleted is exactly what was checked.
            if found is not None:
                principal.require_thread(found, thread_id)
            else:
                principal.require_messages(filed)

        await self.unrecorded()
        thread, messages = await self.repository.delete_thread(
            thread_id,
            now=now_ms(),
            track_vectors=self.vectors is not None,
            record_changes=self.change_retention > 0,
            guard=guard if principal.restricted else None,
        )
        await sync_vectors(self.vectors, messages, self.vector_sync_timeout)
        events = [message_event(MESSAGE_DELETED, thread_id, m) for m in messages]
        if thread is not None:
            events.append(thread_event(THREAD_DELETED, thread))
        await publish_quietly(self.events, events)
        return thread is not None or bool(messages)

    async def clone(
        self,
        source_thread_id: str,
        *,
        new_thread_id: str | None = None,
        resource_id: str | None = None,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        options: CloneOptions | None = None,
        memory_config: dict[str, Any] | None = None,
        principal: Principal,
    ) -> CloneResult:
        """Mastra's cloneThread: a new thread (new id, metadata.clone = {sourceThreadId, clonedAt,
        lastMessageId}) holding copies of the selected messages (new ids, same createdAt and order).

        The clone's metadata is the source's, merged with `metadata`, plus `clone` (Mastra's docs; its
        code drops the source's metadata). The title defaults to "Clone of <title>" ("" for an untitled
        source). Working memory follows Mastra: thread scope travels with the metadata (the source's,
        when it has one, over a workingMemory in `metadata`); resource scope is copied to a different
        target resource (when enabled and set).

        A restricted principal needs the source's resource and the target resource granted; messages
        in the source of resources it was not granted are not copied."""
        opts = options or CloneOptions()
        if not source_thread_id or not source_thread_id.strip():
            raise BadUserInput("sourceThreadId must be a non-empty string.")
        if new_thread_id and not new_thread_id.strip():  # "" is generated, as in Mastra's cloneThread
            raise BadUserInput("newThreadId must not be blank when given.")
        if resource_id is not None and not resource_id.strip():
            raise BadUserInput("resourceId must be a non-empty string when given.")
        check_id_size(new_thread_id, "newThreadId")
        check_id_size(resource_id, "resourceId")
        if resource_id is not None:
            principal.require(resource_id)
        _check_metadata(metadata)
        ids = list(opts.message_ids or [])
        if any(not isinstance(i, str) or not i for i in ids):
            raise BadUserInput("options.messageFilter.messageIds must be non-empty strings.")
        wm = working_memory_config(merge_memory_config(self.defaults, memory_config))
        copy_wm = wm.enabled and wm.scope == "resource" and resource_id is not None
        carry_thread_wm = wm.enabled and wm.scope == "thread"
        new_id = new_thread_id or str(uuid.uuid4())
        now = now_ms()
        id_map: dict[str, str] = {}
        pairs: list[tuple[MessageRecord, MessageRecord]] = []  # (source as the transaction read it, copy)

        def build(
            source: ThreadRecord, selected: list[MessageRecord]
        ) -> tuple[ThreadRecord, list[MessageRecord]]:
            id_map.clear()  # a retried transaction builds again
            pairs.clear()
            if principal.restricted:  # in the clone's transaction: the source as it is copied
                principal.require_thread(source, source.id)
                selected = [m for m in selected if principal.sees_message(m)]
            clone_info: dict[str, Any] = {"sourceThreadId": source.id, "clonedAt": to_iso(now)}
            if selected:
                clone_info["lastMessageId"] = selected[-1].id
            target = resource_id or source.resource_id
            merged = {**(source.metadata or {}), **(metadata or {}), "clone": clone_info}
            carried = (source.metadata or {}).get("workingMemory")
            if carry_thread_wm and js_truthy(carried):
                # Mastra writes the source's thread-scope working memory into the clone after copying
                # it, so the source's wins over a workingMemory the call's metadata gives.
                merged["workingMemory"] = carried
            thread = ThreadRecord(
                id=new_id,
                resource_id=target,
                title=title or (f"Clone of {source.title}" if source.title else ""),
                metadata=merged,
                created_at=now,
                updated_at=now,
            )
            for message in selected:
                copy_id = str(uuid.uuid4())
                id_map[message.id] = copy_id
                pairs.append(
                    (message, replace(message, id=copy_id, thread_id=new_id, resource_id=target, seq=0))
                )
            return thread, [copy for _, copy in pairs]

        try:
            result = await self.repository.clone_thread(
                source_thread_id,
                build,
                start=opts.start_date,
                end=opts.end_date,
                message_ids=ids or None,
                # Mastra copies the newest N only for messageLimit > 0: 0 and a negative one copy all.
                limit=opts.message_limit if opts.message_limit and opts.message_limit > 0 else None,
                copy_resource_working_memory=copy_wm,
                now=now,
                track_vectors=self.vectors is not None,
                resources=principal.resources,
                max_rows=self.max_all_rows,
            )
        except RowConflict as exc:
            raise Conflict(f"Thread with id {exc.args[0]} already exists") from exc
        except CloneTooLarge as exc:
            # One transaction holds every copy: bounded like a perPage: false read.
            assert self.max_all_rows is not None
            raise BadUserInput(
                f"cloneThread may copy at most {self.max_all_rows} messages; this clone would copy "
                f"{exc.args[0]}. Narrow it with options.messageLimit, a date range or message ids.",
                limit="maxAllRows",
                max=self.max_all_rows,
                total=exc.args[0],
            ) from None
        if result is None:
            raise NotFound(f"Source thread with id {source_thread_id} not found")
        thread, copies = result
        # The copies' texts are their sources': their vectors are copied rather than embedded again (a
        # clone of 1,000 chat messages took 2.5 s of embedding against 0.07 s without vectors).
        await sync_vectors(self.vectors, copies, self.vector_sync_timeout, stored=copies, copied_from=pairs)
        events = [thread_event(THREAD_CREATED, thread)]
        events.extend(message_event(MESSAGE_SAVED, thread.id, m) for m in copies)
        await publish_quietly(self.events, events)
        # Every copy is in the id map; Mastra's cloneThread lists the copies as recall does.
        return CloneResult(thread, listed(copies), id_map)

    # A resumed subscription replays at most this many threads (as many events as a live subscriber may
    # fall behind by); more is a read for the listing's pages.
    MAX_RESUMED = 1000

    async def watch(
        self,
        resource_id: str,
        *,
        principal: Principal,
        after: str | None = None,
        changed_since: int | None = None,
    ) -> AsyncGenerator[tuple[dict[str, Any], ThreadRecord], None]:
        """The thread events of a resource from now on, as (payload, thread). The resource must be
        granted (FORBIDDEN here, before anything is subscribed); each event is checked again.

        With `after` (a cursor of an updatedAt listing), the stream first replays every thread of the
        resource changed after that place as an UPDATED event (as it is stored now, least recently
        changed first), then goes on live (resolvers.events.resumed). On a server that keeps changes,
        the threads deleted since `changed_since` (ms; by default the place's time), CHANGE_GRACE_MS
        earlier included, come first, as DELETED events, oldest first. A `changed_since` the kept
        changes do not reach back to is refused (resolvers.events.check_changed_since); the place's
        time, often older (the top thread of a quiet sidebar), is not: deletions since it are replayed
        as far as they are kept."""
        if not resource_id:
            raise BadUserInput("resourceId must be a non-empty string.")
        principal.require(resource_id)
        place = cursors.decode_thread(after, "after", "updatedAt") if after is not None else None
        if changed_since is not None:
            await check_changed_since(
                self.repository,
                self.change_retention,
                changed_since,
                resumed=place is not None,
                reread="re-read the listing, then resume from its top thread.",
            )
        if self.events is None:
            raise RuntimeError("ThreadService.watch needs an event broker")
        if place is None:
            return self._watch(self.events, resource_id, principal)
        since = place[0] if changed_since is None else changed_since
        return self._resume(self.events, resource_id, principal, place, since - CHANGE_GRACE_MS)

    async def _resume(
        self,
        events: EventBroker,
        resource_id: str,
        principal: Principal,
        place: tuple[int, str],
        deleted_since: int,
    ) -> AsyncGenerator[tuple[dict[str, Any], ThreadRecord], None]:
        too_long = too_long_a_replay(self.MAX_RESUMED, "threads", "threads(after:)", "maxResumedThreads")

        async def read(limit: int) -> list[tuple[str, ThreadRecord]]:
            gone: list[ThreadRecord] = []
            if self.change_retention > 0:
                gone = await self.repository.thread_deletions_since(resource_id, deleted_since, limit)
                if len(gone) >= limit:  # (re-created ones among them or not: the rest is unread)
                    raise too_long
                again = await self.repository.get_threads([t.id for t in gone])
                # Gone, unless it is the resource's thread again (created anew, or given back): then
                # it is among the threads changed since the place. One now another resource's is gone.
                gone = [t for t in gone if (now := again.get(t.id)) is None or now.resource_id != resource_id]
            rows, _ = await self.repository.list_threads(
                resource_id,
                offset=0,
                limit=max(limit - len(gone) - 1, 0),  # not counted: the page and one thread more
                order_field="updatedAt",
                descending=False,
                after=place,
                counted=False,
            )
            return [(THREAD_DELETED, t) for t in gone] + [(THREAD_UPDATED, t) for t in rows]

        async for event in resumed(
            events,
            thread_channel(resource_id),
            read=read,
            event_of=lambda kind, row: thread_event(kind, row)[1],
            received=received_thread_event,
            visible=principal.sees_thread,
            repeats={THREAD_CREATED, THREAD_UPDATED, THREAD_TITLE_GENERATED},
            most=self.MAX_RESUMED,
            too_long=too_long,
        ):
            yield event

    @staticmethod
    async def _watch(
        events: EventBroker, resource_id: str, principal: Principal
    ) -> AsyncGenerator[tuple[dict[str, Any], ThreadRecord], None]:
        async for payload in events.subscribe(thread_channel(resource_id)):
            record = received_thread_event(payload)
            if record is not None and principal.sees_thread(record):
                yield payload, record


def clone_metadata(thread: ThreadRecord) -> Any:
    """Mastra's getCloneMetadata: metadata.clone when it is set (truthy, as JavaScript reads it), else
    None."""
    value = (thread.metadata or {}).get("clone")
    return value if js_truthy(value) else None


def clone_source(thread: ThreadRecord) -> str | None:
    """The id of the thread this one was cloned from (metadata.clone.sourceThreadId), if it names one."""
    info = clone_metadata(thread)
    source = info.get("sourceThreadId") if isinstance(info, dict) else None
    return source if isinstance(source, str) and source else None


async def clone_history(
    thread: ThreadRecord, load: Callable[[str], Awaitable[ThreadRecord | None]]
) -> list[ThreadRecord]:
    """Mastra's getCloneHistory: the thread's ancestors from the original, the thread last. The chain
    ends at a source that is gone (or that `load`, the caller's reader, does not give: another
    resource's thread for a restricted credential), and at a thread met before: metadata is the
    client's to change, and a chain that turns back on itself would not end."""
    history = [thread]
    seen = {thread.id}
    source = clone_source(thread)
    while source is not None and source not in seen:
        parent = await load(source)
        if parent is None:
            break
        history.append(parent)
        seen.add(parent.id)
        source = clone_source(parent)
    history.reverse()
    return history


def clones_of(pairs: Sequence[tuple[str, str]], found: Sequence[ThreadRecord]) -> list[list[ThreadRecord]]:
    """For each (resource, source thread id), Mastra's listClones: the resource's threads cloned from
    that thread, newest first (`found`: Repository.threads_naming_source's rows, in its order)."""
    by_pair: dict[tuple[str, str], list[ThreadRecord]] = {}
    for thread in found:
        source = clone_source(thread)
        if source is not None:
            by_pair.setdefault((thread.resource_id, source), []).append(thread)
    return [by_pair.get(pair, []) for pair in pairs]


def _check_metadata(metadata: Any) -> None:
    if metadata is not None and not isinstance(metadata, dict):
        raise BadUserInput("metadata must be a JSON object.")
    if metadata:
        # As for message content: what orjson cannot write (an integer literal beyond 64 bits) was
        # stored through a fallback as a float, unlike what the mutation answered, and failed the
        # Redis publication of every event of its write.
        try:
            encoded = orjson.dumps(metadata)
        except (orjson.JSONEncodeError, TypeError) as exc:
            raise BadUserInput(f"metadata cannot be stored as JSON text: {exc}.") from None
        check_json_depth(metadata, "metadata", encoded)
