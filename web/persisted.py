"""Automatic persisted queries: Apollo's APQ protocol, as Apollo Client's persisted-queries link speaks it.

A client sends a query's SHA-256 in `extensions.persistedQuery` instead of its text; the server answers
from the text it has for that hash, or with PERSISTED_QUERY_NOT_FOUND, and the client then sends the text
with the hash once, which registers it. A page's requests shrink to a hash and their variables, and a
query over GET fits in a URL (so a CDN or a browser cache can key on it).

The texts live in a bounded in-process LRU; with RECALLQL_REDIS_URL also in Redis (with a TTL), so
that a query registered through one replica is known to the others behind the same load balancer. Redis
is a cache here: when it cannot answer, a lookup is a miss (the client sends the text again) and a
registration stays local, and the request goes on.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache
from graphql import ASTValidationRule, GraphQLError, GraphQLSchema, parse, specified_rules, validate

from schema.build import query_too_long

log = logging.getLogger("recallql.persisted")

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Refusal:
    """A request the protocol refuses before execution: 400 for a malformed one; 200 for a hash this
    server does not know or a server without APQ (an answer the client acts on, not a failure).
    `outcome`: its label in recallql_persisted_queries_total."""

    status: int
    message: str
    code: str
    outcome: str = "refused"


def _malformed(message: str) -> Refusal:
    return Refusal(400, message, "BAD_REQUEST")


# Apollo Server's messages and codes: clients match them (Apollo Client retries with the full text on
# PERSISTED_QUERY_NOT_FOUND and stops hashing on PERSISTED_QUERY_NOT_SUPPORTED; @apollo/gateway matches
# the message "PersistedQueryNotFound").
NOT_FOUND_REFUSAL = Refusal(200, "PersistedQueryNotFound", "PERSISTED_QUERY_NOT_FOUND", "not_found")
# What a server with APQ turned off answers a hash (Apollo Client then sends every query's text).
NOT_SUPPORTED_REFUSAL = Refusal(
    200, "PersistedQueryNotSupported", "PERSISTED_QUERY_NOT_SUPPORTED", "not_supported"
)
HASH_MISMATCH = _malformed("provided sha does not match query")
BAD_VERSION = _malformed("Unsupported persisted query version")
BAD_HASH = _malformed("extensions.persistedQuery.sha256Hash must be a SHA-256 digest in lowercase hex.")


class PersistedQueries:
    """The query texts by hash. `valid(text)`: whether a text is a document the schema accepts (only
    those are kept, so that garbage cannot push real queries out)."""

    HOLD_OFF = 5.0  # seconds Redis is not asked after it failed

    def __init__(
        self,
        valid: Callable[[str], bool],
        *,
        cache_chars: int,
        redis_url: str | None = None,
        redis_prefix: str = "recallql:",
        ttl: int = 7 * 24 * 3600,
    ) -> None:
        self._valid = valid
        self._local: LRUCache[str, str] = LRUCache(maxsize=cache_chars, getsizeof=len)
        self._prefix = f"{redis_prefix}apq:"
        self._ttl = ttl
        self._redis: Any = None
        self._held_until = 0.0
        if redis_url:
            import redis.asyncio as redis

            # Short timeouts: a request waits on this cache, and a miss only costs the client a retry.
            self._redis = redis.from_url(redis_url, socket_timeout=1.0, socket_connect_timeout=1.0)

    async def resolve(self, persisted: Any, query: Any) -> str | Refusal | None:
        """What a request's `extensions.persistedQuery` and `query` make of it: the query text to run
        (a hash found, or a text registered under its hash), a Refusal, or None for a query that is
        not a text (the view refuses the request as it is)."""
        version = persisted.get("version") if isinstance(persisted, dict) else None
        if isinstance(version, bool) or version != 1:  # JSON's true is not the number 1
            return BAD_VERSION
        digest = persisted.get("sha256Hash")
        if not isinstance(digest, str) or _SHA256_HEX.fullmatch(digest) is None:
            return BAD_HASH
        if isinstance(query, str):
            if hashlib.sha256(query.encode("utf-8", "surrogatepass")).hexdigest() != digest:
                return HASH_MISMATCH
            await self._register(digest, query)
            return query
        if query is not None:
            return None
        found = await self._lookup(digest)
        return found if found is not None else NOT_FOUND_REFUSAL

    async def _lookup(self, digest: str) -> str | None:
        found = self._local.get(digest)
        if found is not None or not self._redis_usable():
            return found
        try:
            stored = await self._redis.get(self._prefix + digest)
        except Exception as exc:  # any Redis failure: a miss, the client sends the text again
            self._redis_failed("lookup", exc)
            return None
        # The hash is checked first: a value another program wrote (or any bytes at all) must neither
        # choose what runs nor fail the request.
        if stored is None or hashlib.sha256(stored).hexdigest() != digest:
            return None
        text: str = stored.decode("utf-8", "surrogatepass")
        self._keep(digest, text)
        return text

    async def _register(self, digest: str, text: str) -> None:
        if digest in self._local or not self._valid(text):
            return
        self._keep(digest, text)
        if not self._redis_usable():
            return
        try:
            await self._redis.set(self._prefix + digest, text.encode("utf-8", "surrogatepass"), ex=self._ttl)
        except Exception as exc:
            self._redis_failed("registration", exc)

    def _redis_usable(self) -> bool:
        return self._redis is not None and time.monotonic() >= self._held_until

    def _redis_failed(self, what: str, exc: Exception) -> None:
        """After a failure Redis is left alone for HOLD_OFF seconds: a Redis that does not answer would
        otherwise hold every request with a hash unknown here for the whole socket timeout."""
        self._held_until = time.monotonic() + self.HOLD_OFF
        log.warning("persisted queries: Redis %s failed (not asked for %g s): %s", what, self.HOLD_OFF, exc)

    def _keep(self, digest: str, text: str) -> None:
        with contextlib.suppress(ValueError):  # larger than the whole cache: served, not kept
            self._local[digest] = text

    async def aclose(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()


def refusal_body(refusal: Refusal, extensions: dict[str, str]) -> dict[str, Any]:
    return {"errors": [{"message": refusal.message, "extensions": extensions}]}


def schema_documents(
    schema: GraphQLSchema,
    *,
    max_tokens: int | None,
    max_chars: int | None,
    rules: Sequence[type[ASTValidationRule]] = (),
) -> Callable[[str], bool]:
    """Whether a text is a document this schema validates, under the server's size limits and the
    server's own validation `rules` (its depth and alias limits): a text that could never run is not
    kept."""
    all_rules = (*specified_rules, *rules)

    def valid(text: str) -> bool:
        if query_too_long(text, max_chars):
            return False
        try:
            document = parse(text, max_tokens=max_tokens)
        except GraphQLError:
            return False
        return not validate(schema, document, all_rules)

    return valid
