"""Threads: create, read, update and list (mastra-behaviour.md §6, with the contract's divergences)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Literal

from models.records import ThreadRecord
from models.repository import Repository
from resolvers.clock import now_ms
from resolvers.errors import BadUserInput, Conflict, NotFound
from resolvers.recall import validate_metadata_filter


@dataclass(slots=True)
class ThreadPage:
    threads: list[ThreadRecord]
    total: int
    page: int
    per_page: int | Literal[False]
    has_more: bool


class ThreadService:
    def __init__(self, repository: Repository) -> None:
        self.repository = repository

    async def get(self, thread_id: str, resource_id: str | None = None) -> ThreadRecord | None:
        thread = await self.repository.get_thread(thread_id)
        if thread is None or (resource_id and thread.resource_id != resource_id):
            return None
        return thread

    async def create(
        self,
        *,
        resource_id: str,
        thread_id: str | None = None,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        created_at: int | None = None,
    ) -> ThreadRecord:
        if not resource_id or not resource_id.strip():
            raise BadUserInput("resourceId must be a non-empty string.")
        if thread_id is not None and not thread_id.strip():
            raise BadUserInput("id must be a non-empty string when given.")
        _check_metadata(metadata)
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
        if not await self.repository.insert_thread(thread):
            raise Conflict(f"Thread with id {thread.id} already exists.")
        return thread

    async def update(
        self, thread_id: str, *, title: str | None = None, metadata: dict[str, Any] | None = None
    ) -> ThreadRecord:
        _check_metadata(metadata)
        thread = await self.repository.update_thread(thread_id, title=title, metadata=metadata, now=now_ms())
        if thread is None:
            raise NotFound(f"Thread {thread_id} not found")
        return thread

    async def list(
        self,
        resource_id: str,
        *,
        page: int = 0,
        per_page: int | Literal[False] = 100,
        order_field: str = "createdAt",
        descending: bool = True,
        metadata: Any = None,
    ) -> ThreadPage:
        if page < 0:
            raise BadUserInput("page must be >= 0")
        if per_page is not False and per_page < 0:
            raise BadUserInput("perPage must be >= 0")
        if per_page is False and page != 0:
            raise BadUserInput("page must be 0 when perPage is false")
        filters = validate_metadata_filter(metadata)
        offset = 0 if per_page is False else page * per_page
        limit = None if per_page is False else per_page
        threads, total = await self.repository.list_threads(
            resource_id,
            offset=offset,
            limit=limit,
            order_field=order_field,
            descending=descending,
            metadata=filters,
        )
        has_more = per_page is not False and offset + per_page < total
        return ThreadPage(threads, total, page, per_page, has_more)


def _check_metadata(metadata: Any) -> None:
    if metadata is not None and not isinstance(metadata, dict):
        raise BadUserInput("metadata must be a JSON object.")
