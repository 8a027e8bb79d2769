"""Expected errors. Each carries the GraphQL `extensions.code` its API layer reports.

The `extensions` attribute is read by graphql-core when it wraps an exception, so the schema layer
needs no mapping table and this package never imports GraphQL.
"""

from __future__ import annotations

import math
from typing import Any


class RecallQLError(Exception):
    code = "BAD_USER_INPUT"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    @property
    def extensions(self) -> dict[str, Any]:
        return {"code": self.code, **self.details}


class BadUserInput(RecallQLError):
    code = "BAD_USER_INPUT"


def every_row_refused(what: str, most: int, total: int, found: str) -> BadUserInput:
    """The refusal of a `perPage: false` read that matches more than RECALLQL_MAX_ALL_ROWS: `what` it
    returns (messages, threads), `found` says how many match ("this read matches 12000")."""
    return BadUserInput(
        f"perPage: false may return at most {most} {what}; {found}. Page through them with a numeric "
        "perPage.",
        limit="maxAllRows",
        max=most,
        total=total,
    )


# PostgreSQL's btree index entries hold at most 2,704 bytes, and one index pairs a thread id with a
# resource id: a longer id was an internal error there (SQLite stores any length). The same bound on
# both engines, for every id a write stores.
MAX_ID_BYTES = 1024


def id_size_fault(value: str | None, where: str) -> BadUserInput | None:
    """Why an id cannot be stored (see MAX_ID_BYTES), or None."""
    if value is None or len(value) <= MAX_ID_BYTES // 4:  # 4 bytes a character at most: fits
        return None
    if len(value.encode("utf-8", "surrogatepass")) <= MAX_ID_BYTES:
        return None
    return BadUserInput(
        f"{where} may be at most {MAX_ID_BYTES} bytes long (UTF-8).", limit="maxIdBytes", max=MAX_ID_BYTES
    )


def check_id_size(value: str | None, where: str) -> None:
    """Raises id_size_fault's error, if there is one."""
    if (fault := id_size_fault(value, where)) is not None:
        raise fault


class NotFound(RecallQLError):
    code = "NOT_FOUND"


class Forbidden(RecallQLError):
    code = "FORBIDDEN"


class Conflict(RecallQLError):
    code = "CONFLICT"


class ServiceUnavailable(RecallQLError):
    code = "SERVICE_UNAVAILABLE"


def outage(exc: BaseException) -> ServiceUnavailable | None:
    """The ServiceUnavailable an infrastructure failure stands for (the database unreachable), or None
    for anything else. The API layer reports these with their code instead of masking them as bugs."""
    from models.db import DatabaseUnavailable

    if isinstance(exc, ServiceUnavailable):
        return exc
    if isinstance(exc, DatabaseUnavailable):
        return ServiceUnavailable(exc.refusal.message, service="database", reason=exc.refusal.reason)
    return None


NUL_MESSAGE = "Strings may not contain U+0000 (NUL)."
SURROGATE_MESSAGE = "Strings must be valid Unicode: a lone surrogate cannot be stored."
NON_FINITE_MESSAGE = "Numbers must be finite: NaN and Infinity are not JSON and cannot be stored."


def scalar_fault(item: Any) -> str | None:
    """Why no database can store this string or number (U+0000, a lone surrogate, NaN or an
    infinity: transports that decode with Python's json module take them; stored as JSON they became
    null, and an answer echoing them was not JSON), or None. Anything else: None."""
    if isinstance(item, str):
        if "\x00" in item:
            return NUL_MESSAGE
        if not item.isascii():
            try:
                item.encode()
            except UnicodeEncodeError:
                return SURROGATE_MESSAGE
    elif isinstance(item, float) and not math.isfinite(item):
        return NON_FINITE_MESSAGE
    return None


# Deeper than any message content needs, and below orjson's limit of 254 when content is stored and
# answered: the HTTP front refuses bodies nested deeper, and the imports refuse such values.
MAX_JSON_DEPTH = 64


def json_depth(value: Any) -> int:
    """How many levels of arrays and objects a JSON-like value nests ([] is one). Iterative: a value may
    nest deeper than Python recurses."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def check_json_depth(value: Any, where: str, encoded: bytes) -> None:
    """Raises BadUserInput when a value to store nests deeper than MAX_JSON_DEPTH (`encoded`: its JSON,
    which settles most values without a walk). The HTTP front and the imports refused such values, but
    not a GraphQL literal or a WebSocket frame: stored 250 levels deep, a value made every answer that
    held it deeper than orjson writes (the compiled read path's HTTP 500)."""
    if encoded.count(b"[") + encoded.count(b"{") <= MAX_JSON_DEPTH:
        return
    if json_depth(value) > MAX_JSON_DEPTH:
        raise BadUserInput(
            f"{where} nests JSON deeper than {MAX_JSON_DEPTH} levels.",
            limit="maxJsonDepth",
            max=MAX_JSON_DEPTH,
        )


def value_fault(value: Any) -> BadUserInput | None:
    """The BadUserInput for the first string (keys included) or number in a JSON-like value that no
    database can store (scalar_fault), or None. Iterative: a value may nest deeper than Python
    recurses."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif (fault := scalar_fault(item)) is not None:
            return BadUserInput(fault)
    return None


def unstorable_text(exc: BaseException) -> BadUserInput | None:
    """The BadUserInput for text no database can store, found anywhere in an exception's chain: a lone
    UTF-16 surrogate (not valid Unicode; it fails to encode) or U+0000 (PostgreSQL refuses it)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, UnicodeEncodeError):
            return BadUserInput(SURROGATE_MESSAGE)
        # PostgreSQL: 22021 character_not_in_repertoire (U+0000), 22P05 untranslatable_character.
        if getattr(current, "sqlstate", None) in ("22021", "22P05") or "0x00" in str(current):
            return BadUserInput(NUL_MESSAGE)
        orig = getattr(current, "orig", None)
        current = orig if isinstance(orig, BaseException) else (current.__cause__ or current.__context__)
    return None
