"""Recall cursors: a message's place in its thread's order, (createdAt, insertion sequence), as an
opaque string.

The place is what a page is bounded by, not the message: a cursor stays valid after its message is
deleted or changed, and means the same in every thread. The string is URL-safe base64 without padding,
so it can go into a GET query's variables as it is; its form is the server's to change.
"""

from __future__ import annotations

import base64
import binascii
import re

from models.records import MAX_MS, MIN_MS
from resolvers.errors import BadUserInput

_PLACE = re.compile(r"(-?[0-9]{1,15}):([0-9]{1,19})")
_SEQ_MAX = 2**63 - 1
# The longest place, encoded: two numbers of 16 and 19 characters and the colon, 36 bytes.
_MAX_CHARS = 48

Place = tuple[int, int]


def encode(created_at: int, seq: int) -> str:
    return base64.urlsafe_b64encode(f"{created_at}:{seq}".encode()).rstrip(b"=").decode()


def decode(cursor: str, argument: str) -> Place:
    """The place a cursor names; BAD_USER_INPUT for anything this server did not write, so that a
    mistaken value (a message id, say) is refused rather than read as some other place."""
    place = _decoded(cursor) if len(cursor) <= _MAX_CHARS else None
    if place is None or encode(*place) != cursor:
        raise BadUserInput(
            f"{argument} is not a recall cursor: pass a Message.cursor, RecallResult.startCursor or "
            "RecallResult.endCursor as it was returned.",
            argument=argument,
        )
    return place


def _decoded(cursor: str) -> Place | None:
    try:
        text = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    match = _PLACE.fullmatch(text)
    if match is None:
        return None
    created_at, seq = int(match[1]), int(match[2])
    if not MIN_MS <= created_at <= MAX_MS or seq > _SEQ_MAX:
        return None
    return created_at, seq
