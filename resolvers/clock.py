"""Time in the contract's unit: integer milliseconds since the epoch, UTC."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def to_iso(ms: int) -> str:
    """JavaScript's Date.toISOString(): millisecond precision, always Z."""
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def parse_iso(value: str) -> int:
    """Parses an ISO-8601 timestamp with a timezone, truncated to milliseconds (as JS Date does)."""
    dt = datetime.fromisoformat(value)
    if dt.tzinfo is None:
        raise ValueError(f"DateTime must include a timezone (for example Z): {value!r}")
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
