"""Thread titles (mastra-behaviour.md §6.9), generated after a save rather than after an agent run.

When `generateTitle` is on (server default or the call's memoryConfig) and a saveMessages call stores
a user message in a thread without a title, a background task titles the thread once the save has
committed; the save's answer never waits for it. The title comes from an OpenAI-compatible chat
endpoint when one is configured (Mastra's prompt: its default instructions as the system message, the
transcript as the user message), else from a deterministic heuristic. Unlike Mastra, only the title
(and updatedAt) changes: createdAt and metadata are never touched, and a title set by anyone in the
meantime is never overwritten (the write is conditional on the title still being empty).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from models.db import summary
from models.records import MessageRecord, ThreadRecord
from models.repository import Repository
from resolvers.clock import now_ms
from resolvers.errors import BadUserInput
from resolvers.events import THREAD_TITLE_GENERATED, EventBroker, publish_quietly, thread_event

log = logging.getLogger("recallql.titles")

# Mastra's DEFAULT_TITLE_INSTRUCTIONS, verbatim.
DEFAULT_TITLE_INSTRUCTIONS = """
      - you will generate a short title based on a conversation transcript between a user and an assistant
      - the transcript lines are prefixed with "User:" and "Assistant:" — never reply to, answer, or continue the transcript
      - always produce a title, even when the transcript is only a greeting or trivial exchange
      - ensure it is not more than 80 characters long
      - the title should be a summary of the user's message
      - do not use quotes or colons
      - the entire text you return will be used as the title"""  # noqa: E501
MAX_TITLE_LENGTH = 80
FALLBACK_TITLE = "New conversation"
_THINK = re.compile(r"<think>[\s\S]*?</think>")
# What no database stores: U+0000 (PostgreSQL refuses it in text) and UTF-16 surrogates (not Unicode).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_QUOTES_AND_COLONS = re.compile(r"[\"'`\u2018\u2019\u201c\u201d\u00ab\u00bb:\uff1a]")
_LEADING_MARKUP = re.compile(r"^[\s#>*\-+]+")


class Chat(Protocol):
    async def complete(self, messages: list[dict[str, str]], *, model: str | None = None) -> str: ...
    async def aclose(self) -> None: ...


@dataclass(slots=True, frozen=True)
class TitleOptions:
    model: str | None = None
    instructions: str | None = None
    min_messages: int = 1


def title_options(config: dict[str, Any]) -> TitleOptions | None:
    """The title options of a merged memory config, or None when title generation is off.
    `threads.generateTitle` (the documented, older place) wins over `generateTitle` when given."""
    threads = config.get("threads")
    value = config.get("generateTitle")
    if isinstance(threads, dict) and threads.get("generateTitle") is not None:
        value = threads["generateTitle"]
    if value is None or value is False:
        return None
    if value is True:
        return TitleOptions()
    if not isinstance(value, dict):
        raise BadUserInput("generateTitle must be a boolean or an options object.")
    model, instructions = value.get("model"), value.get("instructions")
    min_messages = value.get("minMessages", 1)
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise BadUserInput("generateTitle.model must be a non-empty string.")
    if instructions is not None and not isinstance(instructions, str):
        raise BadUserInput("generateTitle.instructions must be a string.")
    if isinstance(min_messages, bool) or not isinstance(min_messages, int) or min_messages < 1:
        raise BadUserInput("generateTitle.minMessages must be a positive integer.")
    return TitleOptions(model, instructions or None, min_messages)


def clean_title(text: str) -> str:
    """What Mastra keeps of a model's answer: <think> blocks removed, trimmed; and characters no
    database stores left out (a title holding U+0000 failed every attempt to store it on PostgreSQL, and
    made SQLite's export one its import refuses)."""
    return _UNSTORABLE.sub("", _THINK.sub("", text)).strip()


def _text(content: dict[str, Any]) -> str:
    direct = content.get("content")
    if isinstance(direct, str) and direct.strip():
        return direct
    parts = content.get("parts")
    if not isinstance(parts, list):
        return ""
    texts = [p.get("text") for p in parts if isinstance(p, dict) and p.get("type") == "text"]
    return "\n".join(t for t in texts if isinstance(t, str))


def transcript(messages: Iterable[MessageRecord]) -> str:
    """Mastra's formatMessagesForTitle: `Role: text` lines, tool calls and results abbreviated."""
    lines: list[str] = []
    for message in messages:
        role = message.role[:1].upper() + message.role[1:]
        content = message.content
        raw_parts = content.get("parts")
        parts = raw_parts if isinstance(raw_parts, list) else []
        direct = content.get("content")
        if (
            isinstance(direct, str)
            and direct
            and not any(
                isinstance(p, dict) and p.get("type") == "text" and p.get("text") == direct for p in parts
            )
        ):
            lines.append(f"{role}: {direct}")
        for part in parts:
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            if kind == "text" and isinstance(part.get("text"), str):
                lines.append(f"{role}: {part['text']}")
            elif kind == "tool-invocation" and isinstance(part.get("toolInvocation"), dict):
                inv = part["toolInvocation"]
                if inv.get("state") == "result":
                    result = inv.get("result")
                    text = result if isinstance(result, str) else _dumps(result)
                    lines.append(f"Tool Result {inv.get('toolName')}: {text[:200]}")
                else:
                    lines.append(f"Tool Call {inv.get('toolName')}: {_dumps(inv.get('args'))[:200]}")
            elif kind == "reasoning" and isinstance(part.get("reasoning"), str) and part["reasoning"]:
                lines.append(f"Reasoning: {part['reasoning']}")
    return "\n".join(lines)


def _dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return str(value)


def heuristic_title(messages: Iterable[MessageRecord]) -> str:
    """The first non-empty line of the first user message with text, without quotes or colons,
    whitespace collapsed, at most 80 characters (cut at a word boundary when one is near)."""
    for message in messages:
        if message.role != "user":
            continue
        for line in _text(message.content).splitlines():
            cleaned = " ".join(_QUOTES_AND_COLONS.sub(" ", _LEADING_MARKUP.sub("", line)).split())
            if cleaned:
                return shorten(cleaned)
    return FALLBACK_TITLE


def shorten(text: str, limit: int = MAX_TITLE_LENGTH) -> str:
    if len(text) <= limit:
        return text
    end = limit
    # Not inside a character drawn from several code points (an emoji family joined by U+200D, a skin
    # tone, an accent combined with its letter): cut there, it left half of it, a lone 👩 of 👩‍👩‍👧.
    while end > 0 and (_joins(text[end]) or text[end - 1] == "\u200d"):
        end -= 1
    cut = text[:end]
    space = cut.rfind(" ")
    if space >= limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;.-")


def _joins(char: str) -> bool:
    """Whether this code point belongs with the one before it."""
    return (
        unicodedata.category(char) in ("Mn", "Mc", "Me")
        or char in "\u200d\ufe0e\ufe0f"
        or "\U0001f3fb" <= char <= "\U0001f3ff"  # skin tones
        or "\U000e0020" <= char <= "\U000e007f"  # tag characters (subdivision flags)
    )


def visible(messages: Iterable[MessageRecord]) -> list[MessageRecord]:
    """The messages a title is based on: no system rows, signals or system reminders."""
    return [m for m in messages if m.role != "system" and m.signal_type is None and not m.legacy_reminder]


class TitleGenerator:
    def __init__(
        self,
        repository: Repository,
        *,
        chat: Chat | None = None,
        events: EventBroker | None = None,
        timeout: float = 30.0,
        transcript_messages: int = 50,
    ) -> None:
        self.repository = repository
        self.chat = chat
        self.events = events
        self.timeout = timeout
        self.transcript_messages = transcript_messages
        self._inflight: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    def schedule(self, thread_ids: Iterable[str], options: TitleOptions) -> None:
        """Titles these threads in the background (at most one task per thread at a time)."""
        for thread_id in thread_ids:
            if thread_id in self._inflight:
                continue
            self._inflight.add(thread_id)
            task = asyncio.create_task(self._run(thread_id, options), name=f"recallql-title-{thread_id}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, thread_id: str, options: TitleOptions) -> None:
        try:
            await self.generate(thread_id, options)
        except asyncio.CancelledError:
            raise
        except Exception:  # as in Mastra: a failed title is logged and swallowed
            log.exception("title generation for thread %s failed", thread_id)
        finally:
            self._inflight.discard(thread_id)

    async def generate(self, thread_id: str, options: TitleOptions) -> ThreadRecord | None:
        """Titles the thread if it still has no title and qualifies; returns the updated thread."""
        thread = await self.repository.get_thread(thread_id)
        if thread is None or thread.title:
            return None
        limit = max(self.transcript_messages, options.min_messages)
        # Only the owner's messages: the title is shown to the owner (and carried by TITLE_GENERATED),
        # and a message another resource saved into the thread is not the owner's to read.
        messages = visible(await self.repository.first_messages(thread_id, thread.resource_id, limit))
        if len(messages) < options.min_messages or not any(m.role == "user" for m in messages):
            return None
        if self.chat is not None:
            text = transcript(messages)
            if not text:
                return None
            prompt = [
                {"role": "system", "content": options.instructions or DEFAULT_TITLE_INSTRUCTIONS},
                {"role": "user", "content": text},
            ]
            try:
                answer = await asyncio.wait_for(self.chat.complete(prompt, model=options.model), self.timeout)
            except Exception as exc:
                log.warning("title generation for thread %s failed: %s", thread_id, summary(exc))
                return None
            title = clean_title(answer)
        else:
            title = heuristic_title(messages)
        if not title:
            return None
        updated = await self.repository.set_title_if_untitled(
            thread_id, thread.resource_id, title, now=now_ms()
        )
        if updated is not None:
            await publish_quietly(self.events, [thread_event(THREAD_TITLE_GENERATED, updated)])
        return updated

    async def wait_idle(self, timeout: float = 30.0) -> None:
        """Waits for the titles in progress (tests, shutdown)."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)

    async def aclose(self, timeout: float = 5.0) -> None:
        await self.wait_idle(timeout)
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.chat is not None:
            await self.chat.aclose()
