"""Caches of what is derived from GraphQL document texts: compiled plans (schema/fastpath.py), parsed
and validated documents (schema/build.py)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

MISSING: Any = object()


class TextBudgetCache:
    """An LRU cache of values derived from document texts, bounded by entries and by the characters
    of the texts it keeps. Unbounded in characters, distinct long documents (megabytes of comment
    within the token limit) kept about 14 MB each; a parsed document is up to about 70 bytes a
    character. A text over a tenth of the budget is not kept at all."""

    def __init__(self, max_entries: int = 512, max_chars: int = 1_000_000) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self._items: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._chars = 0

    def get(self, key: Any) -> Any:
        """The value, or MISSING."""
        found = self._items.get(key)
        if found is None:
            return MISSING
        self._items.move_to_end(key)
        return found[0]

    def put(self, key: Any, value: Any, chars: int) -> None:
        if chars > self.max_chars // 10 or key in self._items:
            return
        self._items[key] = (value, chars)
        self._chars += chars
        while len(self._items) > self.max_entries or self._chars > self.max_chars:
            _, (_, size) = self._items.popitem(last=False)
            self._chars -= size

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Any) -> bool:
        return key in self._items
