"""Saving, updating and deleting messages: validation, classification (once, on write) and one
transaction per call. Changes are announced on the event broker after they commit; saves may start
title generation (resolvers.titles)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import uuid
from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Protocol

import orjson

from models.records import MessageQuery, MessageRecord, ThreadRecord
from models.repository import Repository, RowForbidden, ThreadChanged, ThreadForbidden
from models.signals import is_legacy_reminder, is_transient_signal, signal_type
from models.vector_index import VectorItem
from resolvers import cursors
from resolvers.auth import Principal
from resolvers.clock import now_ms
from resolvers.config import BUILTIN_DEFAULTS, deep_merge
from resolvers.errors import BadUserInput, Conflict, check_id_size, check_json_depth
from resolvers.events import (
    CHANGE_GRACE_MS,
    MESSAGE_DELETED,
    MESSAGE_SAVED,
    MESSAGE_UPDATED,
    THREAD_UPDATED,
    EventBroker,
    Publication,
    UnrecordedWrites,
    check_changed_since,
    message_channel,
    message_event,
    publish_quietly,
    received_message_event,
    resumed,
    thread_event,
    too_long_a_replay,
)
from resolvers.recall import listed
from resolvers.titles import TitleGenerator, TitleOptions, title_options

log = logging.getLogger("recallql.messages")
# A JSON \u0000 escape that is not itself an escaped backslash followed by "u0000".
_NUL_ESCAPE = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")


@dataclass(slots=True)
class MessageInput:
    thread_id: str
    role: str
    content: Any
    id: str | None = None
    resource_id: str | None = None
    type: str | None = None
    created_at: int | None = None


@dataclass(slots=True)
class MessagePatch:
    """An updateMessages item: None means "not given"."""

    id: str
    content: Any = None
    role: str | None = None
    type: str | None = None
    thread_id: str | None = None
    resource_id: str | None = None


@dataclass(slots=True)
class SaveResult:
    messages: list[MessageRecord]  # as stored, one per id, in the order given
    acknowledged: int  # transient signals: accepted, not stored

    @property
    def listed_messages(self) -> list[MessageRecord]:
        """The saved messages as Mastra's saveMessages returns them, through its MessageList: oldest
        first, ties in the order given (a stable sort, as MessageList's; a re-saved message among them
        too, though recall places it by its first insertion), system-role rows set aside."""
        return listed(sorted(self.messages, key=attrgetter("created_at")))


# A save whose threads change hands under it starts again; this many times at most.
_SAVE_ATTEMPTS = 3


class VectorSync(Protocol):
    background: bool

    async def release(self, message_ids: Sequence[str]) -> None: ...
    def submit(
        self,
        message_ids: Sequence[str],
        resource_ids: Iterable[str | None],
        stored: Sequence[MessageRecord] = (),
        known: Mapping[str, Sequence[VectorItem]] | None = None,
    ) -> asyncio.Future[None]: ...
    async def room(self, timeout: float) -> bool: ...
    async def copied_vectors(
        self, pairs: Sequence[tuple[MessageRecord, MessageRecord]], *, moved: bool = False
    ) -> dict[str, list[VectorItem]]: ...


async def sync_vectors(
    vectors: VectorSync | None,
    messages: Sequence[MessageRecord],
    timeout: float,
    *,
    stored: Sequence[MessageRecord] = (),
    copied_from: Sequence[tuple[MessageRecord, MessageRecord]] = (),
    moved: bool = False,
) -> None:
    """Hands these messages' vectors to the write pipeline and waits (within `timeout`) until the index
    matches SQL for them, or in background mode only until the pipeline's queue has room. SQL has
    committed: if the write fails or runs out of time, the outbox still holds the work for the drain.

    `stored`: those of the messages as this request has just written them (saved or updated, not
    deleted), which the pipeline may start embedding before it reads them back. `copied_from`:
    (source, copy) pairs of some of `stored` that have their sources' texts (a clone's copies; with
    `moved`, a transfer's messages before and after): their vectors are copied from the sources' where
    the index certainly holds them (SemanticMemory.copied_vectors), rather than embedded again."""
    if vectors is None or not messages:
        return
    message_ids = [m.id for m in messages]
    known = await vectors.copied_vectors(copied_from, moved=moved) if copied_from else None
    done = vectors.submit(message_ids, {m.resource_id for m in messages}, stored, known)
    if vectors.background:
        if not await vectors.room(timeout):
            log.warning("vector queue still full after %.1fs; the save answers anyway", timeout)
        return
    try:
        # Shielded: a request that gives up (timeout, client gone) leaves its work queued, and the
        # pipeline still writes it.
        await asyncio.wait_for(asyncio.shield(done), timeout)
    except asyncio.CancelledError:
        raise
    except TimeoutError:
        log.warning("vector write of %d message(s) still queued after %.1fs", len(message_ids), timeout)
    except Exception as exc:
        log.warning("vector write deferred to the outbox drain: %r", exc)
        # The drain leaves young entries to their request; this request has given up on them.
        with contextlib.suppress(Exception):
            await vectors.release(message_ids)


class MessageService:
    def __init__(
        self,
        repository: Repository,
        *,
        max_batch: int | None = None,
        vectors: VectorSync | None = None,
        vector_sync_timeout: float = 10.0,
        events: EventBroker | None = None,
        titles: TitleGenerator | None = None,
        defaults: dict[str, Any] | None = None,
        change_retention: float = 0.0,
    ) -> None:
        self.repository = repository
        # Seconds a message's latest change is kept for changedSince (run_pruner forgets older ones);
        # 0: none is recorded, the default (an update or a delete costs one statement less).
        self.change_retention = change_retention
        self.unrecorded = UnrecordedWrites(repository, change_retention)
        self.max_batch = max_batch
        self.vectors = vectors
        self.vector_sync_timeout = vector_sync_timeout
        self.events = events
        self.titles = titles
        self.defaults = defaults if defaults is not None else BUILTIN_DEFAULTS

    async def _sync_vectors(
        self, messages: Sequence[MessageRecord], stored: Sequence[MessageRecord] = ()
    ) -> None:
        """Indexes the messages now, so a recall right after the save finds them. SQL has committed:
        if this fails, the outbox still holds the work and the background drain finishes it."""
        # Bounded: a slow embedder must not hold the save; the drain catches up.
        await sync_vectors(self.vectors, messages, self.vector_sync_timeout, stored=stored)

    def check_batch(self, operation: str, size: int) -> None:
        if self.max_batch is not None and size > self.max_batch:
            raise BadUserInput(
                f"{operation} accepts at most {self.max_batch} messages per call, got {size}.",
                limit="maxSaveBatch",
            )

    async def save(
        self,
        inputs: Sequence[MessageInput],
        memory_config: dict[str, Any] | None = None,
        *,
        principal: Principal,
    ) -> SaveResult:
        """Upserts the batch. A restricted principal saves only into existing threads of granted
        resources, with granted message resources, and never over a stored message of a resource it
        was not granted (checked here, and again atomically in the write)."""
        self.check_batch("saveMessages", len(inputs))
        titles = title_options(deep_merge(self.defaults, memory_config))
        for attempt in range(_SAVE_ATTEMPTS):
            try:
                return await self._save(inputs, titles, principal)
            except ThreadChanged as exc:
                # A thread whose owner gave a message its resource was deleted or given to another
                # resource before the write: the save starts again from what is stored now.
                if attempt == _SAVE_ATTEMPTS - 1:
                    raise Conflict(
                        f"Thread {exc.args[0]} kept changing while these messages were saved; retry."
                    ) from None
        raise AssertionError("unreachable")

    async def _save(
        self, inputs: Sequence[MessageInput], titles: TitleOptions | None, principal: Principal
    ) -> SaveResult:
        now = now_ms()
        owners = await self.repository.get_threads([m.thread_id for m in inputs if m.thread_id])
        derived: dict[str, str] = {}  # thread id -> the owner's resource, given to messages without one
        if principal.restricted:
            existing = await self.repository.get_messages([m.id for m in inputs if m.id])
            principal.require_messages(existing.values())
        records: list[MessageRecord] = []
        transient = 0
        last_generated = 0
        # Validate everything before writing anything: a bad batch writes nothing.
        for n, m in enumerate(inputs):
            where = f"messages[{n}]"
            if not m.thread_id or not m.thread_id.strip():
                raise BadUserInput(f"{where}.threadId must be a non-empty string.")
            # "" is generated, as Mastra's MessageList does (`id || newMessageId()`); blanks are refused.
            if m.id and not m.id.strip():
                raise BadUserInput(f"{where}.id must not be blank when given.")
            if not m.role or not m.role.strip():
                raise BadUserInput(f"{where}.role must be a non-empty string.")
            # As on update: a blank resource would be one nobody can name in a recall ("" means none there).
            if m.resource_id is not None and not m.resource_id.strip():
                raise BadUserInput(f"{where}.resourceId must be a non-empty string when given.")
            check_id_size(m.thread_id, f"{where}.threadId")
            check_id_size(m.id, f"{where}.id")
            check_id_size(m.resource_id, f"{where}.resourceId")
            _check_content(m.content, where)
            if principal.restricted:
                principal.require_thread(owners.get(m.thread_id), m.thread_id)
                if m.resource_id is not None:
                    principal.require(m.resource_id)
            if is_transient_signal(m.role, m.content):
                transient += 1
                continue
            resource_id = m.resource_id
            if resource_id is None:
                owner = owners.get(m.thread_id)
                if owner is None:
                    raise BadUserInput(
                        f"{where}.resourceId is required when thread {m.thread_id} does not exist."
                    )
                resource_id = derived[m.thread_id] = owner.resource_id
            created_at = m.created_at
            if created_at is None:
                # Messages without a time keep their batch order: each is at least 1 ms after the last.
                created_at = max(now, last_generated + 1)
                last_generated = created_at
            records.append(
                MessageRecord(
                    id=m.id or str(uuid.uuid4()),
                    thread_id=m.thread_id,
                    resource_id=resource_id,
                    role=m.role,
                    type=m.type or "v2",
                    created_at=created_at,
                    content=m.content,
                    signal_type=signal_type(m.role, m.content),
                    legacy_reminder=is_legacy_reminder(m.role, m.content),
                )
            )
        await self.unrecorded()
        try:
            previous, stored = await self.repository.save_messages(
                records,
                now=now,
                track_vectors=self.vectors is not None,
                record_changes=self.change_retention > 0,
                owned_by=principal.resources,
                thread_owners=derived,
            )
        except ThreadForbidden as exc:  # the thread changed hands since the check above
            raise principal.thread_forbidden(exc.args[0]) from None
        except RowForbidden as exc:  # a row of another resource appeared since the check above
            raise principal.message_forbidden(exc.args[0]) from None
        # Both sides, as for an update: a re-save that moved a message to another resource leaves its
        # vectors in the old one to remove, and searches of the old one wait for that (background mode).
        await self._sync_vectors([*stored, *previous.values()], stored)
        events = [message_event(MESSAGE_SAVED, m.thread_id, m) for m in stored]
        # A message re-saved into another thread left its old one: that thread's subscribers hear of it.
        moved_from = {m.id: previous[m.id].thread_id for m in stored if m.id in previous}
        events += [
            message_event(MESSAGE_SAVED, moved_from[m.id], m)
            for m in stored
            if moved_from.get(m.id, m.thread_id) != m.thread_id
        ]
        threads = {m.thread_id for m in stored} | set(moved_from.values())
        await publish_quietly(self.events, events + await self._thread_events(threads))
        if titles is not None and self.titles is not None:
            # Threads without a title before this save; the generator checks the rest (a user message,
            # minMessages) on what the thread holds once the save has committed.
            untitled = {m.thread_id for m in stored if m.thread_id in owners}
            untitled = {t for t in untitled if not owners[t].title}
            self.titles.schedule(sorted(untitled), titles)
        return SaveResult(stored, transient)

    async def _thread_events(self, thread_ids: set[str]) -> list[Publication]:
        if self.events is None or not thread_ids:
            return []
        threads = await self.repository.get_threads(sorted(thread_ids))
        return [thread_event(THREAD_UPDATED, t) for t in threads.values()]

    async def update(self, patches: Sequence[MessagePatch], *, principal: Principal) -> list[MessageRecord]:
        """Mastra's updateMessages: unknown ids are skipped; content is shallow-merged (metadata one
        level deeper when both are objects; parts replaced); createdAt never changes. The signal
        classification is recomputed, vectors follow through the outbox, and the old and new threads'
        updatedAt are bumped. One transaction: an invalid item writes nothing.

        A restricted principal may change only messages of granted resources (checked on the locked
        rows, in the write's transaction), move them only to existing threads of granted resources and
        give them only granted resources; anything else is FORBIDDEN and writes nothing."""
        self.check_batch("updateMessages", len(patches))
        for n, p in enumerate(patches):
            where = f"messages[{n}]"
            if not p.id or not p.id.strip():
                raise BadUserInput(f"{where}.id must be a non-empty string.")
            if p.content is not None and not isinstance(p.content, dict):
                raise BadUserInput(f"{where}.content must be an object (merged into the stored content).")
            for name, value in (("role", p.role), ("type", p.type), ("threadId", p.thread_id)):
                if value is not None and not value.strip():
                    raise BadUserInput(f"{where}.{name} must be a non-empty string when given.")
            if p.resource_id is not None and not p.resource_id.strip():
                raise BadUserInput(f"{where}.resourceId must be a non-empty string when given.")
            check_id_size(p.thread_id, f"{where}.threadId")
            check_id_size(p.resource_id, f"{where}.resourceId")
        if not patches:
            return []
        if principal.restricted:
            for p in patches:
                if p.resource_id is not None:
                    principal.require(p.resource_id)
        targets = sorted({p.thread_id for p in patches if p.thread_id})

        def apply(existing: dict[str, MessageRecord], owners: dict[str, ThreadRecord]) -> list[MessageRecord]:
            # In the write's transaction, on the rows it locked: the messages and the threads they move
            # to (a message moved to an existing thread takes that thread's resource unless one is given).
            if principal.restricted:
                for thread_id in targets:
                    principal.require_thread(owners.get(thread_id), thread_id)
                principal.require_messages(existing.values())
            changed: dict[str, MessageRecord] = {}
            for n, p in enumerate(patches):
                current = changed.get(p.id) or existing.get(p.id)
                if current is None:
                    continue
                content = current.content
                if p.content is not None:
                    merged = {**content, **p.content}
                    old_meta, new_meta = content.get("metadata"), p.content.get("metadata")
                    if isinstance(old_meta, dict) and isinstance(new_meta, dict):
                        merged["metadata"] = {**old_meta, **new_meta}
                    _check_content(merged, f"messages[{n}]")
                    content = merged
                role = p.role or current.role
                thread_id = p.thread_id or current.thread_id
                resource_id = current.resource_id
                if p.resource_id is not None:
                    resource_id = p.resource_id
                elif thread_id != current.thread_id and thread_id in owners:
                    resource_id = owners[thread_id].resource_id
                changed[p.id] = MessageRecord(
                    id=current.id,
                    thread_id=thread_id,
                    resource_id=resource_id,
                    role=role,
                    type=p.type or current.type,
                    created_at=current.created_at,
                    content=content,
                    seq=current.seq,
                    signal_type=signal_type(role, content),
                    legacy_reminder=is_legacy_reminder(role, content),
                )
            return list(changed.values())

        # The threads involved, serialised with concurrent saves to them (PostgreSQL advisory locks).
        current = await self.repository.get_messages([p.id for p in patches])
        lock_keys = {m.thread_id for m in current.values()} | {p.thread_id for p in patches if p.thread_id}
        await self.unrecorded()
        before, after = await self.repository.update_messages(
            [p.id for p in patches],
            apply,
            now=now_ms(),
            track_vectors=self.vectors is not None,
            record_changes=self.change_retention > 0,
            lock_keys=lock_keys,
            threads=targets,
        )
        # Both sides: a message that moved leaves vectors in its old resource to remove.
        await self._sync_vectors([*after, *(before[m.id] for m in after)], after)
        events: list[Publication] = []
        for m in after:
            events.append(message_event(MESSAGE_UPDATED, m.thread_id, m))
            old_thread = before[m.id].thread_id
            if old_thread != m.thread_id:
                events.append(message_event(MESSAGE_UPDATED, old_thread, m))
        threads = {m.thread_id for m in after} | {before[m.id].thread_id for m in after}
        await publish_quietly(self.events, events + await self._thread_events(threads))
        # In id order, as Mastra returns them (its re-read of `WHERE id IN (...)` walks the id index).
        return sorted(after, key=lambda m: m.id)

    async def delete(self, ids: Sequence[str], *, principal: Principal) -> list[MessageRecord]:
        """Mastra's deleteMessages: unknown ids are ignored, [] is a no-op; the affected threads'
        updatedAt is bumped and the vectors go through the outbox. Returns the deleted messages.
        A restricted principal naming a message of a resource it was not granted gets FORBIDDEN and
        nothing is deleted (checked on the locked rows, in the delete's transaction)."""
        self.check_batch("deleteMessages", len(ids))
        if any(not isinstance(i, str) or not i.strip() for i in ids):
            raise BadUserInput("All message IDs must be non-empty strings")

        def guard(existing: dict[str, MessageRecord]) -> None:
            principal.require_messages(existing.values())

        await self.unrecorded()
        deleted = await self.repository.delete_messages(
            ids,
            now=now_ms(),
            track_vectors=self.vectors is not None,
            record_changes=self.change_retention > 0,
            guard=guard if principal.restricted else None,
        )
        await self._sync_vectors(deleted)
        events = [message_event(MESSAGE_DELETED, m.thread_id, m) for m in deleted]
        await publish_quietly(self.events, events + await self._thread_events({m.thread_id for m in deleted}))
        return deleted

    # A resumed subscription replays at most this many messages (the events a live subscriber may fall
    # behind by, EventBroker's queue); more is a read for recall's pages.
    MAX_RESUMED = 1000

    async def start_journal(self) -> None:
        """A server keeping changes opens the change journal (the time from which a replay can be
        complete), unless it is open. (One keeping none closes it before its first write:
        UnrecordedWrites.)"""
        if self.change_retention > 0:
            await self.repository.open_change_journal(now_ms())

    async def run_pruner(self) -> None:
        """Starts the change journal, then forgets the message changes and thread deletions older than
        `change_retention`, now and then every tenth of it (at most every 10 minutes), until cancelled.
        Every replica prunes, and opens the journal again if a replica keeping none closed it; a failed
        round is tried again later. A server keeping none has nothing to prune."""
        if self.change_retention <= 0:
            return
        every = min(600.0, self.change_retention / 10)
        while True:
            try:
                await self.start_journal()
                horizon = now_ms() - round(self.change_retention * 1000)
                if pruned := await self.repository.prune_changes(horizon):
                    log.debug("forgot %d change(s) past their retention", pruned)
            except Exception as exc:
                log.warning("could not prune kept changes (tried again in %.0f s): %r", every, exc)
            await asyncio.sleep(every)

    async def watch(
        self,
        thread_id: str,
        *,
        principal: Principal,
        after: str | None = None,
        changed_since: int | None = None,
    ) -> AsyncGenerator[tuple[dict[str, Any], MessageRecord], None]:
        """The message events of a thread from now on, as (payload, message). A restricted principal
        needs the thread to exist and belong to a granted resource (checked here, before anything is
        subscribed) and receives only messages of granted resources.

        With `after` (a recall cursor), the stream first replays every message of the thread after that
        place as a SAVED event (as it is stored now, oldest first), then goes on live; it subscribes
        before it reads, so no message saved meanwhile is missed, and a live SAVED event of a message
        the replay already gave as it is is left out.

        With `changed_since` too (ms), the replay begins with the messages at or before the place whose
        latest change (an update, a move, a delete) was made since then, CHANGE_GRACE_MS earlier
        included: UPDATED as each is stored now, or DELETED as it was last stored, oldest change
        first."""
        if not thread_id:
            raise BadUserInput("threadId must be a non-empty string.")
        place = cursors.decode(after, "after") if after is not None else None
        if changed_since is not None:
            await check_changed_since(
                self.repository,
                self.change_retention,
                changed_since,
                resumed=place is not None,
                reread="re-read the thread's window, then resume after its newest message.",
            )
        if principal.restricted:
            principal.require_thread(await self.repository.get_thread(thread_id), thread_id)
        if self.events is None:
            raise RuntimeError("MessageService.watch needs an event broker")
        if place is None:
            return self._watch(self.events, thread_id, principal)
        return self._resume(self.events, thread_id, principal, place, changed_since)

    async def _changed(
        self, thread_id: str, place: tuple[int, int], since: int, limit: int, too_long: BadUserInput
    ) -> list[tuple[str, MessageRecord]]:
        """(kind, message) of the messages at or before `place` changed since `since`; those after it
        the client never had. `too_long` if there are `limit` changes or more, those after the place
        included (the ones read are not all there are)."""
        changes = await self.repository.changes_since(thread_id, since - CHANGE_GRACE_MS, limit)
        if len(changes) >= limit:
            raise too_long
        current = await self.repository.get_messages([c.message_id for c in changes if c.deleted is None])
        changed: list[tuple[str, MessageRecord]] = []
        for change in changes:
            if change.deleted is not None:
                kind, record = MESSAGE_DELETED, change.deleted
            elif (now := current.get(change.message_id)) is not None:
                kind, record = MESSAGE_UPDATED, now  # in this thread, or moved away from it
            else:
                continue  # moved away, then deleted in another thread by a server keeping none
            if record.order_key <= place:
                changed.append((kind, record))
        return changed

    async def _resume(
        self,
        events: EventBroker,
        thread_id: str,
        principal: Principal,
        place: tuple[int, int],
        changed_since: int | None,
    ) -> AsyncGenerator[tuple[dict[str, Any], MessageRecord], None]:
        if changed_since is None:
            too_long = too_long_a_replay(self.MAX_RESUMED, "messages", "recall(after:)", "maxResumedMessages")
        else:
            too_long = BadUserInput(
                f"More than {self.MAX_RESUMED} messages came after this cursor or changed since "
                "changedSince: re-read the thread's window, then resume after its newest message.",
                argument="changedSince",
                limit="maxResumedMessages",
                max=self.MAX_RESUMED,
            )

        async def read(limit: int) -> list[tuple[str, MessageRecord]]:
            changed = []
            if changed_since is not None:
                changed = await self._changed(thread_id, place, changed_since, limit, too_long)
            query = MessageQuery(thread_id=thread_id, after=place)
            page = await self.repository.read_page(
                query, descending=False, limit=max(limit - len(changed), 0), offset=0
            )
            return changed + [(MESSAGE_SAVED, record) for record in page.rows]

        async for event in resumed(
            events,
            message_channel(thread_id),
            read=read,
            event_of=lambda kind, row: message_event(kind, thread_id, row)[1],
            received=received_message_event,
            visible=principal.sees_message,
            repeats={MESSAGE_SAVED, MESSAGE_UPDATED},
            most=self.MAX_RESUMED,
            too_long=too_long,
        ):
            yield event

    @staticmethod
    async def _watch(
        events: EventBroker, thread_id: str, principal: Principal
    ) -> AsyncGenerator[tuple[dict[str, Any], MessageRecord], None]:
        async for payload in events.subscribe(message_channel(thread_id)):
            record = received_message_event(payload)
            if record is not None and principal.sees_message(record):
                yield payload, record


def _check_content(content: Any, where: str) -> None:
    if not isinstance(content, dict):
        raise BadUserInput(f"{where}.content must be an object {{format: 2, parts: [...]}}.")
    try:
        encoded = orjson.dumps(content)
    except (orjson.JSONEncodeError, TypeError) as exc:
        raise BadUserInput(f"{where}.content cannot be stored as JSON text: {exc}.") from exc
    # PostgreSQL's jsonb cannot hold U+0000; refuse it on every engine so both behave the same.
    if _NUL_ESCAPE.search(encoded):
        raise BadUserInput(f"{where}.content contains the character U+0000, which cannot be stored.")
    check_json_depth(content, f"{where}.content", encoded)
    if content.get("format") != 2:
        raise BadUserInput(f"{where}.content.format must be 2.")
    parts = content.get("parts")
    if not isinstance(parts, list):
        raise BadUserInput(f"{where}.content.parts must be a list.")
    for i, part in enumerate(parts):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise BadUserInput(f"{where}.content.parts[{i}] must be an object with a string type.")
    text = content.get("content")
    if text is not None and not isinstance(text, str):
        raise BadUserInput(f"{where}.content.content must be a string when given.")
    metadata = content.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise BadUserInput(f"{where}.content.metadata must be an object when given.")
