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
from resolvers.errors import MAX_ID_BYTES, BadUserInput

_PLACE = re.compile(r"(-?[0-9]{1,15}):([0-9]{1,19})")
_SEQ_MAX = 2**63 - 1
# The longest place, encoded: two numbers of 16 and 19 characters and the colon, 36 bytes.
_MAX_CHARS = 48

Place = tuple[int, int]


def encode(created_at: int, seq: int) -> str:
    return _packed(f"{created_at}:{seq}")


def decode(cursor: str, argument: str) -> Place:
    """The place a cursor names; BAD_USER_INPUT for anything this server did not write, so that a
    mistaken value (a message id, say) is refused rather than read as some other place."""
    place = _decoded(cursor)
    if place is None or encode(*place) != cursor:
        raise BadUserInput(
            f"{argument} is not a recall cursor: pass a Message.cursor, RecallResult.startCursor or "
            "RecallResult.endCursor as it was returned.",
            argument=argument,
        )
    return place


def _decoded(cursor: str) -> Place | None:
    text = _unpacked(cursor, _MAX_CHARS)
    match = _PLACE.fullmatch(text) if text is not None else None
    if match is None:
        return None
    created_at, seq = int(match[1]), int(match[2])
    if not MIN_MS <= created_at <= MAX_MS or seq > _SEQ_MAX:
        return None
    return created_at, seq


# ------------------------------------------------------------------------------------- thread cursors
# A thread's place in a listing: the value of the field the listing is ordered by, then the thread id
# (in code point order, the listing's tie-break). The field is part of the cursor, because the place of
# a thread in createdAt order says nothing of its place in updatedAt order; the direction is not, so a
# cursor is a place in either direction of its field's order.
THREAD_ORDER_FIELDS = {"createdAt": "c", "updatedAt": "u"}
_FIELD_OF_TAG = {tag: name for name, tag in THREAD_ORDER_FIELDS.items()}
_THREAD_PLACE = re.compile(r"([cu]):(-?[0-9]{1,15}):(.+)", re.DOTALL)
# An id of MAX_ID_BYTES bytes and the longest time and field tag, encoded: (1024 + 19) * 4 / 3 characters.
_MAX_THREAD_CHARS = 1400

ThreadPlace = tuple[int, str]


def encode_thread(order_field: str, at: int, thread_id: str) -> str:
    return _packed(f"{THREAD_ORDER_FIELDS[order_field]}:{at}:{thread_id}")


def decode_thread(cursor: str, argument: str, order_field: str) -> ThreadPlace:
    """The place a thread cursor names in a listing ordered by `order_field`: BAD_USER_INPUT for
    anything this server did not write, and for a cursor of the other field's order (a place in
    createdAt order is no place in updatedAt order)."""
    decoded = _decoded_thread(cursor)
    if decoded is None or encode_thread(*decoded) != cursor:
        raise BadUserInput(
            f"{argument} is not a threads cursor: pass a ThreadPage.startCursor or ThreadPage.endCursor "
            "as it was returned.",
            argument=argument,
        )
    field, at, thread_id = decoded
    if field != order_field:
        raise BadUserInput(
            f"{argument} is a cursor of a listing ordered by {field}, and this listing is ordered by "
            f"{order_field}: a cursor is a place in its own order only.",
            argument=argument,
        )
    return at, thread_id


def _decoded_thread(cursor: str) -> tuple[str, int, str] | None:
    text = _unpacked(cursor, _MAX_THREAD_CHARS)
    match = _THREAD_PLACE.fullmatch(text) if text is not None else None
    if match is None:
        return None
    at, thread_id = int(match[2]), match[3]
    # No stored id holds U+0000 (PostgreSQL refuses it in text, so it must not reach a statement).
    if not MIN_MS <= at <= MAX_MS or len(thread_id.encode()) > MAX_ID_BYTES or "\x00" in thread_id:
        return None
    return _FIELD_OF_TAG[match[1]], at, thread_id


# ------------------------------------------------------------------------------------- the wrapping
def _packed(text: str) -> str:
    """URL-safe base64 without padding: a cursor goes into a GET query's variables as it is."""
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


def _unpacked(cursor: str, max_chars: int) -> str | None:
    """The text of a cursor, or None when it is longer than any this server writes or is not base64 of
    UTF-8 (strictly: no stored id holds a lone surrogate)."""
    if len(cursor) > max_chars:
        return None
    try:
        return base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
