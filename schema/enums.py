"""Enums the output types and the inputs share (a module of their own, so that neither imports the
other's module to get them)."""

from __future__ import annotations

from enum import Enum
from typing import cast

import strawberry


@strawberry.enum(description="The six stored signal types (exact strings, no aliasing).")
class SignalType(Enum):
    USER = strawberry.enum_value("user", description="Signals of type `user`.")
    STATE = strawberry.enum_value("state", description="Signals of type `state`.")
    REACTIVE = strawberry.enum_value("reactive", description="Signals of type `reactive`.")
    NOTIFICATION = strawberry.enum_value("notification", description="Signals of type `notification`.")
    USER_MESSAGE = strawberry.enum_value(
        "user-message", description="Signals of type `user-message` (such as a `data-user-message` part)."
    )
    SYSTEM_REMINDER = strawberry.enum_value(
        "system-reminder",
        description="Signals of type `system-reminder`; also legacy system reminders of no other type.",
    )


# @strawberry.enum has replaced each member's EnumValueDefinition by its string (mypy sees the former).
SIGNAL_TYPES_BY_VALUE: dict[str, SignalType] = {cast(str, member.value): member for member in SignalType}


@strawberry.enum(description="Sort direction.")
class SortDirection(Enum):
    ASC = strawberry.enum_value("ASC", description="Ascending: oldest (smallest) first.")
    DESC = strawberry.enum_value("DESC", description="Descending: newest (largest) first.")
