"""The rows one request may read across all its fields (RECALLQL_MAX_REQUEST_ROWS).

The other limits bound one field: a `perPage: false` recall, a recall's include windows, a `messages`
lookup. Aliases repeat fields, so thirty aliases of one recall of 10,000 large messages answered 1.2 GB
and held 2.8 GB of server memory. Every field that reads messages or threads draws on this request's
budget, and its reads take turns (one at a time per request, so that each sees what the others took):
a read that would go past what is left reads nothing, or, where the rows are only known once read (a
page of threads), is refused after that one page."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from resolvers.errors import BadUserInput


class RowBudget:
    def __init__(self, rows: int | None) -> None:
        self.max = rows  # None: unlimited
        self.left = rows
        self._turn = asyncio.Lock()

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[RowBudget]:
        """One field's read at a time: what one takes, the next sees."""
        async with self._turn:
            yield self

    def cap(self, limit: int | None) -> int | None:
        """The smaller of a field's own limit and what is left (None: neither bounds it)."""
        if self.left is None:
            return limit
        return self.left if limit is None else min(limit, self.left)

    def binds(self, limit: int | None) -> bool:
        """Whether what is left, rather than the field's own limit, bounds a read."""
        return self.left is not None and (limit is None or self.left < limit)

    def take(self, rows: int) -> bool:
        """Takes `rows` (counted or read) from what is left; False, taking nothing, when fewer are left."""
        if self.left is None:
            return True
        if rows > self.left:
            return False
        self.left -= rows
        return True

    def spend(self, rows: int, what: str) -> None:
        """Takes `rows`, or refuses the field (`what`) that would read them."""
        if not self.take(rows):
            raise self.refusal(rows, what)

    def refusal(self, rows: int | None, what: str) -> BadUserInput:
        """The error of a field that would read `rows` (None: more than are left)."""
        assert self.max is not None and self.left is not None
        wanted = f"{rows}" if rows is not None else f"more than {self.left}"
        return BadUserInput(
            f"One request may read at most {self.max} messages and threads across its fields; {what} "
            f"would read {wanted} with {self.left} left. Send its fields in separate requests.",
            limit="maxRequestRows",
            max=self.max,
        )
