"""The services an API call uses, and the typed per-request context with its DataLoaders."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from models.records import MessageRecord, ThreadRecord
from models.repository import Repository
from resolvers.loaders import DataLoader
from resolvers.messages import MessageService
from resolvers.recall import RecallEngine
from resolvers.semantic import SemanticMemory
from resolvers.threads import ThreadService


@dataclass
class Services:
    repository: Repository
    recall: RecallEngine
    threads: ThreadService
    messages: MessageService
    semantic: SemanticMemory | None = None

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
    ) -> Services:
        return cls(
            repository=repository,
            recall=RecallEngine(
                repository, defaults=memory_defaults, semantic=semantic, max_include_items=max_include_items
            ),
            threads=ThreadService(repository),
            messages=MessageService(
                repository,
                max_batch=max_save_batch,
                vectors=semantic,
                vector_sync_timeout=vector_sync_timeout,
            ),
            semantic=semantic,
        )


@dataclass
class RequestContext:
    services: Services
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    threads: DataLoader[str, ThreadRecord | None] = field(init=False)
    messages: DataLoader[str, MessageRecord | None] = field(init=False)

    def __post_init__(self) -> None:
        repo = self.services.repository

        async def load_threads(ids: Sequence[str]) -> list[ThreadRecord | None]:
            found = await repo.get_threads(ids)
            return [found.get(i) for i in ids]

        async def load_messages(ids: Sequence[str]) -> list[MessageRecord | None]:
            found = await repo.get_messages(ids)
            return [found.get(i) for i in ids]

        self.threads = DataLoader(load_threads)
        self.messages = DataLoader(load_messages)
