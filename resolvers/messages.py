"""Saving messages: validation, classification (once, on write) and one transactional upsert."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from models.records import MessageRecord
from models.repository import Repository
from models.signals import is_legacy_reminder, is_transient_signal, signal_type
from resolvers.clock import now_ms
from resolvers.errors import BadUserInput

log = logging.getLogger("recallql.messages")


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
class SaveResult:
    messages: list[MessageRecord]
    acknowledged: int  # transient signals: accepted, not stored


class VectorSync(Protocol):
    async def sync(self, message_ids: Sequence[str] | None = None) -> int: ...


class MessageService:
    def __init__(
        self,
        repository: Repository,
        *,
        max_batch: int | None = None,
        vectors: VectorSync | None = None,
        vector_sync_timeout: float = 10.0,
    ) -> None:
        self.repository = repository
        self.max_batch = max_batch
        self.vectors = vectors
        self.vector_sync_timeout = vector_sync_timeout

    async def _sync_vectors(self, message_ids: Sequence[str]) -> None:
        """Indexes the messages now, so a recall right after the save finds them. SQL has committed:
        if this fails, the outbox still holds the work and the background drain finishes it."""
        if self.vectors is None or not message_ids:
            return
        try:
            # Bounded: a slow embedder must not hold the save; the drain catches up.
            await asyncio.wait_for(self.vectors.sync(message_ids), self.vector_sync_timeout)
        except Exception as exc:
            log.warning("vector write deferred to the outbox drain: %r", exc)

    async def save(self, inputs: Sequence[MessageInput]) -> SaveResult:
        if self.max_batch is not None and len(inputs) > self.max_batch:
            raise BadUserInput(
                f"saveMessages accepts at most {self.max_batch} messages per call, got {len(inputs)}.",
                limit="maxSaveBatch",
            )
        now = now_ms()
        owners = await self.repository.get_threads([m.thread_id for m in inputs if m.thread_id])
        records: list[MessageRecord] = []
        transient = 0
        last_generated = 0
        # Validate everything before writing anything: a bad batch writes nothing.
        for n, m in enumerate(inputs):
            where = f"messages[{n}]"
            if not m.thread_id or not m.thread_id.strip():
                raise BadUserInput(f"{where}.threadId must be a non-empty string.")
            if m.id is not None and not m.id.strip():
                raise BadUserInput(f"{where}.id must be a non-empty string when given.")
            if not m.role or not m.role.strip():
                raise BadUserInput(f"{where}.role must be a non-empty string.")
            _check_content(m.content, where)
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
                resource_id = owner.resource_id
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
        stored = await self.repository.save_messages(records, now=now, track_vectors=self.vectors is not None)
        await self._sync_vectors([m.id for m in stored])
        return SaveResult(stored, transient)


def _check_content(content: Any, where: str) -> None:
    if not isinstance(content, dict):
        raise BadUserInput(f"{where}.content must be an object {{format: 2, parts: [...]}}.")
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
