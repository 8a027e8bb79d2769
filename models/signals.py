"""Signal classification of a stored message, computed once when the message is written.

The rules are Mastra's (recall-contract.md, mastra-behaviour.md §2.8). Recall filters on the two
stored results and never re-parses content.
"""

from __future__ import annotations

from typing import Any

SIGNAL_TYPES: frozenset[str] = frozenset(
    {"user", "state", "reactive", "notification", "user-message", "system-reminder"}
)
_SIGNAL_PART_TYPES = ("data-signal", "data-user-message")
_LEGACY_SIGNAL_TYPES = ("system-reminder", "reactive")


def _is_record(value: Any) -> bool:
    # JavaScript's `typeof x === 'object' && x !== null`: arrays count as records too.
    return isinstance(value, dict | list)


def _get(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None


def _has_signal_type(value: Any, allowed: frozenset[str] | tuple[str, ...]) -> str | None:
    kind = _get(value, "type")
    return kind if isinstance(kind, str) and kind in allowed else None


def is_legacy_reminder(role: str, content: Any) -> bool:
    """The default (legacy) reminder rule: the only filter when hideSignals is not given."""
    if not _is_record(content):
        return False
    metadata = _get(content, "metadata")
    if role == "signal":
        return (
            _is_record(metadata)
            and _is_record(_get(metadata, "signal"))
            and _has_signal_type(_get(metadata, "signal"), _LEGACY_SIGNAL_TYPES) is not None
        )
    if role != "user":
        return False
    if isinstance(metadata, dict) and (
        _is_record(metadata.get("systemReminder")) or "dynamicAgentsMdReminder" in metadata
    ):
        return True
    parts = _get(content, "parts")
    if not isinstance(parts, list):
        return False
    first_text = next((p for p in parts if isinstance(p, dict) and p.get("type") == "text"), None)
    text = _get(first_text, "text")
    return isinstance(text, str) and text.startswith("<system-reminder")


def signal_type(role: str, content: Any) -> str | None:
    """The typed classification used by hideSignals; None when the message is no signal."""
    if not _is_record(content):
        return None
    parts = _get(content, "parts")
    if isinstance(parts, list):
        for part in parts:
            if (
                isinstance(part, dict)
                and part.get("type") in _SIGNAL_PART_TYPES
                and _is_record(part.get("data"))
            ):
                found = _has_signal_type(part.get("data"), SIGNAL_TYPES)
                if found:
                    return found
    metadata = _get(content, "metadata")
    if role == "signal" and _is_record(metadata) and _is_record(_get(metadata, "signal")):
        found = _has_signal_type(_get(metadata, "signal"), SIGNAL_TYPES)
        if found:
            return found
    return "system-reminder" if is_legacy_reminder(role, content) else None


def is_transient_signal(role: str, content: Any) -> bool:
    """Transient signals are acknowledged on save but never stored (as in Mastra)."""
    signal = _get(_get(content, "metadata"), "signal")
    return role == "signal" and _get(signal, "transient") is True
