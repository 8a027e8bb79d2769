"""Readiness (/readyz): whether this process can serve requests now, and how its optional
collaborators are doing.

Ready means the database answers and has this code's migrations (503 otherwise: a load balancer should
send traffic elsewhere; with RECALLQL_AUTO_MIGRATE=false nothing else would say that every request is
about to fail on a missing table). A schema migrated by a newer RecallQL is reported but stays ready:
replicas of the older version keep serving during a rolling upgrade. The Chroma server, when semantic
recall uses one, is reported but does not make the process unready: while it is down only vector
searches fail (SERVICE_UNAVAILABLE); saves keep their vector work in the outbox and reads without a
search go on. At start, semantic recall's warm-up (the model loading, the index opening: seconds)
makes it unready until it ends, however it ends; "semantic" then says whether the embedder and the
vector index answer ("failed" after a failed warm-up or search, "ok" again once they answer).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx

from models.db import summary
from models.migrate import schema_state
from models.vector_index import heartbeat_url
from resolvers.context import Services
from web.settings import Settings

log = logging.getLogger("recallql")
# Each check's budget: a probe must answer well within a load balancer's timeout.
CHECK_TIMEOUT = 3.0


async def _database(services: Services) -> str:
    try:
        await asyncio.wait_for(services.repository.ping(), CHECK_TIMEOUT)
    except Exception as exc:  # readiness reports any failure; it must not raise
        log.warning("readyz: database unreachable: %s", summary(exc))
        return "unreachable"
    return "ok"


class SchemaCheck:
    """Whether the database has this code's migrations: "ok", "newer" or "pending <revisions>". Asked
    until the answer is final (a schema at or past this code's head does not go back), then remembered,
    so that a probe costs one query only while a deploy's `recallql migrate` has not run yet."""

    def __init__(self) -> None:
        self._final: str | None = None

    async def __call__(self, services: Services) -> str:
        if self._final is not None:
            return self._final
        try:
            state = await asyncio.wait_for(schema_state(services.repository.engine), CHECK_TIMEOUT)
        except Exception as exc:  # the database check reports the outage
            log.warning("readyz: schema version unreadable: %s", summary(exc))
            return "unknown"
        if state.pending:
            return f"pending {', '.join(state.pending)}"
        self._final = "newer" if state.newer else "ok"
        return self._final


async def _sql(services: Services, schema: SchemaCheck) -> tuple[str, str]:
    """The database, then its schema: one connection at a time (a database at its connection limit,
    asked for two at once, answered "ok" and "unknown"), and no schema query when it is unreachable."""
    database = await _database(services)
    return database, (await schema(services) if database == "ok" else "unknown")


async def _chroma(url: str) -> str:
    try:
        async with httpx.AsyncClient(timeout=CHECK_TIMEOUT) as client:
            response = await client.get(heartbeat_url(url))
        response.raise_for_status()
    except Exception as exc:
        log.warning("readyz: Chroma unreachable at %s: %r", url, exc)
        return "unreachable"
    return "ok"


async def readiness(
    services: Services, settings: Settings, schema: SchemaCheck
) -> tuple[int, dict[str, Any]]:
    """(HTTP status, report): {"ready", "database": ok|unreachable, "schema": ok|newer|pending …|unknown
    [, "chroma": ok|unreachable|embedded, "semantic": warming|ok|failed]}."""
    results: dict[str, Any] = {}
    if services.semantic is None:
        results["database"], results["schema"] = await _sql(services, schema)
    else:
        chroma = _chroma(settings.chroma_url) if settings.chroma_url else asyncio.sleep(0, "embedded")
        (results["database"], results["schema"]), results["chroma"] = await asyncio.gather(
            _sql(services, schema), chroma
        )
    ready = results["database"] == "ok" and results["schema"] in ("ok", "newer")
    if services.semantic is not None and services.semantic.warm_state != "cold":
        # Not ready while the model loads: a balancer's first requests would wait for it (seconds).
        # A failed warm-up is logged and leaves readiness to the database, as a Chroma outage does;
        # "failed" also follows a search the embedder or the index did not answer, and lasts until one
        # answers (the recheck asks them again in the background, so no search is needed to see it).
        services.semantic.recheck()
        results["semantic"] = services.semantic.warm_state
        ready = ready and results["semantic"] != "warming"
    return (200 if ready else 503), {"ready": ready, **results}
