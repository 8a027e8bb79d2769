"""Expected errors. Each carries the GraphQL `extensions.code` its API layer reports.

The `extensions` attribute is read by graphql-core when it wraps an exception, so the schema layer
needs no mapping table and this package never imports GraphQL.
"""

from __future__ import annotations

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


class NotFound(RecallQLError):
    code = "NOT_FOUND"


class Forbidden(RecallQLError):
    code = "FORBIDDEN"


class Conflict(RecallQLError):
    code = "CONFLICT"


class ServiceUnavailable(RecallQLError):
    code = "SERVICE_UNAVAILABLE"
