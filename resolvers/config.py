"""Memory configuration: Mastra-shaped dicts, deep-merged call over server defaults (§2.11)."""

from __future__ import annotations

import copy
from typing import Any

_TEMPLATE_FIELDS = (
    "First Name",
    "Last Name",
    "Location",
    "Occupation",
    "Interests",
    "Goals",
    "Events",
    "Facts",
    "Projects",
)
# Mastra's default working-memory template (each line ends in ": ", as Mastra's does).
DEFAULT_WORKING_MEMORY_TEMPLATE = "# User Information\n" + "".join(
    f"- **{name}**: \n" for name in _TEMPLATE_FIELDS
)

BUILTIN_DEFAULTS: dict[str, Any] = {
    "lastMessages": 10,
    "semanticRecall": False,
    "generateTitle": False,
    "workingMemory": {"enabled": False, "template": DEFAULT_WORKING_MEMORY_TEMPLATE},
}


def deep_merge(base: dict[str, Any], override: dict[str, Any] | None) -> dict[str, Any]:
    """Plain objects merge recursively; anything else replaces. None means "not given" (the contract
    treats an explicit GraphQL null as omitted) and is skipped."""
    merged = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if value is None:
            continue
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged
