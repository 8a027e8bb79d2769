"""Plain domain records returned by the repository (no ORM state, cheap to build in bulk)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The instants a stored time may hold: what an ISO-8601 string with a four-digit year can write.
MIN_MS = -62_135_596_800_000  # 0001-01-01T00:00:00.000Z
MAX_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


@dataclass(slots=True)
class MessageRecord:
    id: str
    thread_id: str
    resource_id: str | None
    role: str
    type: str
    created_at: int  # ms since the epoch, UTC
    content: dict[str, Any]
    seq: int = 0
    signal_type: str | None = None
    legacy_reminder: bool = False

    @property
    def order_key(self) -> tuple[int, int]:
        return (self.created_at, self.seq)


@dataclass(slots=True)
class ChangeRecord:
    """The latest change to a message of a thread after its first save (tables.MessageChange)."""

    message_id: str
    changed_at: int  # ms since the epoch, UTC
    deleted: MessageRecord | None  # the change deleted it: as it was last stored


@dataclass(slots=True)
class ThreadRecord:
    id: str
    resource_id: str
    title: str
    metadata: dict[str, Any] | None
    created_at: int
    updated_at: int


@dataclass(slots=True)
class ResourceRecord:
    id: str
    working_memory: str | None
    metadata: dict[str, Any] | None
    created_at: int
    updated_at: int


@dataclass(slots=True, frozen=True)
class DateRange:
    start: int | None = None
    end: int | None = None
    start_exclusive: bool = False
    end_exclusive: bool = False


@dataclass(slots=True, frozen=True)
class MessageQuery:
    """What one page query reads: the thread, optional resource row filter and the filters. `after` and
    `before` are places in the thread's order, (createdAt, seq): only rows strictly between them."""

    thread_id: str
    resource_id: str | None = None
    date_range: DateRange | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    after: tuple[int, int] | None = None
    before: tuple[int, int] | None = None
    # Rows the page query leaves out (None: none): system rows, and "reminders" (legacy ones), "signals"
    # (every typed one) or the signal types given; "system": system rows only.
    hidden: str | tuple[str, ...] | None = None


@dataclass(slots=True, frozen=True)
class IncludeWindow:
    message_id: str
    before: int
    after: int
    # Set: the target counts only while it is in this thread (a thread-scoped search's hit whose vector
    # still names a thread the message has since left).
    thread_id: str | None = None


@dataclass(slots=True, frozen=True)
class OutboxEntry:
    id: int | None  # None: a change read to be applied, its entry left queued (see outbox_snapshot)
    message_id: str
    previous_resource_id: str | None  # where the message was filed before the change (None: nowhere)
    was_stored: bool | None  # whether it had a row then (None: queued by code older than migration 0002)


@dataclass(slots=True)
class PageRead:
    """One recall's reads: the thread (when asked for), the page, its count and the include rows."""

    thread: ThreadRecord | None
    rows: list[MessageRecord]
    total: int
    included: list[MessageRecord]
