"""Keyword-only factories for engine-level tests."""

from __future__ import annotations

from typing import Any

from resolvers.auth import OPEN
from resolvers.context import Services
from resolvers.messages import MessageInput

BASE_MS = 1767225600000  # 2026-01-01T00:00:00.000Z


def t(seconds: float) -> int:
    return BASE_MS + round(seconds * 1000)


def msg(
    id: str,
    *,
    thread: str = "t1",
    at: float = 0,
    role: str = "user",
    text: str | None = None,
    metadata: dict[str, Any] | None = None,
    resource: str | None = "r1",
    parts: list[dict[str, Any]] | None = None,
) -> MessageInput:
    content: dict[str, Any] = {
        "format": 2,
        "parts": parts if parts is not None else [{"type": "text", "text": text or f"text {id}"}],
    }
    if metadata is not None:
        content["metadata"] = metadata
    return MessageInput(
        thread_id=thread, role=role, content=content, id=id, resource_id=resource, created_at=t(at)
    )


async def seed(services: Services, *messages: MessageInput, threads: dict[str, str] | None = None) -> None:
    for thread_id, resource_id in (threads if threads is not None else {"t1": "r1"}).items():
        await services.threads.create(resource_id=resource_id, thread_id=thread_id, principal=OPEN)
    for m in messages:  # one call each: insertion order is the order given
        await services.messages.save([m], principal=OPEN)
