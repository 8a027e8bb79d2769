"""Signal classification (mastra-behaviour.md §2.8), on the probe messages of experiment e07."""

from __future__ import annotations

from typing import Any

import pytest

from models.signals import is_legacy_reminder, is_transient_signal, signal_type


def content(parts: list[Any] | None = None, metadata: Any = None) -> dict[str, Any]:
    c: dict[str, Any] = {
        "format": 2,
        "parts": parts if parts is not None else [{"type": "text", "text": "x"}],
    }
    if metadata is not None:
        c["metadata"] = metadata
    return c


def text(t: str) -> dict[str, str]:
    return {"type": "text", "text": t}


PROBES: dict[str, tuple[str, dict[str, Any], bool, str | None]] = {
    # name: (role, content, legacy reminder?, typed classification)
    "plain": ("user", content([text("hi")]), False, None),
    "sr_text": ("user", content([text("<system-reminder>x</system-reminder>")]), True, "system-reminder"),
    "sr_text_nolt": ("user", content([text("<system-reminder")]), True, "system-reminder"),
    "sr_text_space_via_storage": ("user", content([text(" <system-reminder>x")]), False, None),
    "sr_second_text": ("user", content([text("a"), text("<system-reminder>x")]), False, None),
    "sr_after_file": (
        "user",
        content([{"type": "file", "data": "x"}, text("<system-reminder>x")]),
        True,
        "system-reminder",
    ),
    "sr_assistant": ("assistant", content([text("<system-reminder>x")]), False, None),
    "meta_sr_obj": (
        "user",
        content(metadata={"systemReminder": {"type": "agents-md"}}),
        True,
        "system-reminder",
    ),
    "meta_sr_array": ("user", content(metadata={"systemReminder": []}), True, "system-reminder"),
    "meta_sr_true": ("user", content(metadata={"systemReminder": True}), False, None),
    "meta_dyn_null": ("user", content(metadata={"dynamicAgentsMdReminder": None}), True, "system-reminder"),
    "meta_dyn_asst": ("assistant", content(metadata={"dynamicAgentsMdReminder": True}), False, None),
    "sig_reactive": ("signal", content(metadata={"signal": {"type": "reactive"}}), True, "reactive"),
    "sig_sysrem": (
        "signal",
        content(metadata={"signal": {"type": "system-reminder"}}),
        True,
        "system-reminder",
    ),
    "sig_state": ("signal", content(metadata={"signal": {"type": "state"}}), False, "state"),
    "sig_user": ("signal", content(metadata={"signal": {"type": "user"}}), False, "user"),
    "sig_bogus": ("signal", content(metadata={"signal": {"type": "bogus"}}), False, None),
    "sig_nometa": ("signal", content(), False, None),
    "user_meta_signal_reactive": ("user", content(metadata={"signal": {"type": "reactive"}}), False, None),
    "ds_notification": (
        "assistant",
        content([text("a"), {"type": "data-signal", "data": {"type": "notification"}}]),
        False,
        "notification",
    ),
    "du_usermsg_asst": (
        "assistant",
        content([{"type": "data-user-message", "data": {"type": "user-message"}}]),
        False,
        "user-message",
    ),
    "ds_reactive_over_srtext": (
        "user",
        content([{"type": "data-signal", "data": {"type": "reactive"}}, text("<system-reminder>x")]),
        True,
        "reactive",
    ),
    "ds_unknown_srtext": (
        "user",
        content([{"type": "data-signal", "data": {"type": "heartbeat"}}, text("<system-reminder>x")]),
        True,
        "system-reminder",
    ),
    "ds_malformed_srtext": (
        "user",
        content([{"type": "data-signal", "data": "reactive"}, text("<system-reminder")]),
        True,
        "system-reminder",
    ),
    "ds_user_on_sig_reactive": (
        "signal",
        content(
            [{"type": "data-signal", "data": {"type": "user"}}], metadata={"signal": {"type": "reactive"}}
        ),
        True,
        "user",
    ),
    "du_type_signal_part": (
        "assistant",
        content([{"type": "data-user-message", "data": {"type": "reactive"}}]),
        False,
        "reactive",
    ),
    "ds_state_late": (
        "assistant",
        content([text("a"), text("b"), {"type": "data-signal", "data": {"type": "state"}}]),
        False,
        "state",
    ),
    "case_sensitive": (
        "assistant",
        content([{"type": "data-signal", "data": {"type": "Reactive"}}]),
        False,
        None,
    ),
    "data_array_is_record": (
        "assistant",
        content([{"type": "data-signal", "data": ["reactive"]}]),
        False,
        None,
    ),
}


@pytest.mark.parametrize("name", sorted(PROBES))
def test_classification(name: str) -> None:
    role, c, legacy, typed = PROBES[name]
    assert is_legacy_reminder(role, c) is legacy
    assert signal_type(role, c) == typed


def test_transient_signal() -> None:
    assert is_transient_signal("signal", content(metadata={"signal": {"type": "state", "transient": True}}))
    assert not is_transient_signal(
        "signal", content(metadata={"signal": {"type": "state", "transient": "yes"}})
    )
    assert not is_transient_signal("user", content(metadata={"signal": {"transient": True}}))
