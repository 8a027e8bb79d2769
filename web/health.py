"""Readiness (/readyz): whether this process can serve requests now, and how its optional
collaborators are doing.

Ready means the database answers (503 otherwise: a load balancer should send traffic elsewhere). The
Chroma server, when semantic recall uses one, is reported but does not make the process unready: while
it is down only vector searches fail (SERVICE_UNAVAILABLE); saves keep their vector work in the outbox
and reads without a search go on.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx

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
        log.warning("readyz: database unreachable: %r", exc)
        return "unreachable"
    return "ok"


async def _chroma(url: str) -> str:
    try:
        async with httpx.AsyncClient(timeout=CHECK_TIMEOUT) as client:
            response = await client.get(heartbeat_url(url))
        response.raise_for_status()
    except Exception as exc:
        log.warning("readyz: Chroma unreachable at %s: %r", url, exc)
        return "unreachable"
    return "ok"


async def readiness(services: Services, settings: Settings) -> tuple[int, dict[str, Any]]:
    """(HTTP status, report): {"ready", "database": ok|unreachable[, "chroma": ok|unreachable|embedded]}."""
    checks: dict[str, Any] = {"database": _database(services)}
    if services.semantic is not None:
        if settings.chroma_url:
            checks["chroma"] = _chroma(settings.chroma_url)
        else:
            checks["chroma"] = asyncio.sleep(0, "embedded")
    results = dict(zip(checks, await asyncio.gather(*checks.values()), strict=True))
    ready = results["database"] == "ok"
    return (200 if ready else 503), {"ready": ready, **results}
