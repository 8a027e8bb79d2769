"""A resource's messages across its threads (Resource.messages, Mastra's listMessagesByResourceId) as
the resource grows, on SQLite and PostgreSQL.

    python benchmarks/resource_messages.py [--size 100000] [--engines sqlite,postgres] [--calls 20]

Loads one resource of N messages over 100 threads (and as many again for 9 other resources), with
metadata {"topic": ...} on every message (one topic in five), through the repository, then times in
process, through the recall engine, pages of 40:

- the oldest page (the default order) and the newest (orderBy DESC);
- the page 100 pages deep (an offset of 4,000);
- the second page of one topic (a metadata filter; its count cached since the first call);
- the oldest page without its total (a query that does not select it: one message more, no count);
- the oldest page with three include windows of 5 messages a side, deep in the resource;
- the oldest page counted as before migration 0012, by walking the resource's messages, and the
  second page of one topic counted afresh, as before its count was cached (the same database, through
  a repository that counts so).

Every call but the one without its total counts the resource's matching messages (`total`), as
Mastra's does. Unfiltered, the count is the sum of the resource's per-thread counts (a row per
thread); a filter's count walks every match, and grows with the resource, but is cached until one of
the resource's messages changes. Writes a Markdown table to --out
(benchmarks/results/resource-messages-<date>.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

from scale_bench import TOPICS, Scenario, depth_main, depth_rows, machine, migrated, settle  # this folder
from sqlalchemy import bindparam, func, select

from models.records import MessageRecord, ThreadRecord
from models.repository import Repository, _conditioned
from models.tables import messages_table as M
from resolvers.auth import OPEN
from resolvers.config import BUILTIN_DEFAULTS
from resolvers.context import Services
from resolvers.recall import IncludeItem

PAGE = 40
THREADS = 100
RESOURCES = 10
WAYS = (
    "oldest page",
    "newest page",
    "100 pages deep",
    "metadata filter, page 2",
    "without total",
    "3 include windows",
    "oldest page, counted as before 0012",
    "metadata filter, page 2, counted as before",
)


async def load(repo: Repository, size: int) -> None:
    for r in range(RESOURCES):
        await repo.import_threads(
            [ThreadRecord(f"r{r}-t{t}", f"r{r}", "", None, 0, 0) for t in range(THREADS)]
        )
    batch: list[MessageRecord] = []
    for n in range(size * RESOURCES):
        r, i = n % RESOURCES, n // RESOURCES
        content = {
            "format": 2,
            "parts": [{"type": "text", "text": f"m{i}"}],
            "metadata": {"topic": TOPICS[i % 5]},
        }
        batch.append(MessageRecord(f"r{r}-m{i}", f"r{r}-t{i % THREADS}", f"r{r}", "user", "v2", i, content))
        if len(batch) == 5_000:
            await repo.save_messages(batch, now=1)
            batch = []
    if batch:
        await repo.save_messages(batch, now=1)


class WalkingCount(Repository):
    """Counts as before migration 0012: an unfiltered page by a walk of the resource's messages, a
    filtered one afresh every time."""

    def _resource_rows(self, conn: Any, resource_id: str, shape: Any, params: Any, count: Any) -> int:
        return int(conn.execute(count, params).scalar_one())

    def _resource_statements(self, shape: Any, descending: bool, *, every_row: bool) -> tuple[Any, Any]:
        page, count = super()._resource_statements(shape, descending, every_row=every_row)
        if not _conditioned(shape):
            count = select(func.count()).select_from(M).where(M.c.resource_id == bindparam("owner"))
        return page, count


def _reader(services: Services, **options: object) -> Scenario:
    async def read() -> object:
        return await services.recall.resource_messages("r0", per_page=PAGE, principal=OPEN, **options)  # type: ignore[arg-type]

    return read


@contextlib.asynccontextmanager
async def loaded(kind: str, size: int, _calls: int) -> AsyncIterator[dict[tuple[int, str], Scenario]]:
    async with migrated(kind) as (repo, services):
        await load(repo, size)
        await settle(repo, kind, "messages")
        # Each way reads what it should.
        first = await services.recall.resource_messages("r0", per_page=PAGE, principal=OPEN)
        assert first.total == size and [m.id for m in first.messages][:2] == ["r0-m0", "r0-m1"]
        topic = await services.recall.resource_messages(
            "r0", per_page=PAGE, metadata={"topic": TOPICS[1]}, principal=OPEN
        )
        assert topic.total == len(range(1, size, 5)) and topic.messages[0].id == "r0-m1"
        bare = await services.recall.resource_messages("r0", per_page=PAGE, principal=OPEN, counted=False)
        assert bare.total is None and bare.messages == first.messages and bare.has_more
        # Around three messages deep in the resource, in threads 1, 2 and 3: 11 of each thread.
        deep = [f"r0-m{size * k // 4 + k}" for k in (1, 2, 3)]
        windows = [IncludeItem(m, with_previous_messages=5, with_next_messages=5) for m in deep]
        included = await services.recall.resource_messages(
            "r0", per_page=PAGE, include=windows, principal=OPEN
        )
        assert len(included.messages) == PAGE + 33
        walking = Services.build(WalkingCount(repo.engine), memory_defaults=dict(BUILTIN_DEFAULTS))
        before = await walking.recall.resource_messages("r0", per_page=PAGE, principal=OPEN)
        assert (before.total, before.messages) == (first.total, first.messages)
        for reader in (services, walking):
            second = await reader.recall.resource_messages(
                "r0", page=1, per_page=PAGE, metadata={"topic": TOPICS[1]}, principal=OPEN
            )
            assert second.total == topic.total and second.messages[0].id == f"r0-m{1 + 5 * PAGE}"
        yield {
            (size, "oldest page"): _reader(services),
            (size, "newest page"): _reader(services, descending=True),
            (size, "100 pages deep"): _reader(services, page=100),
            (size, "metadata filter, page 2"): _reader(services, page=1, metadata={"topic": TOPICS[1]}),
            (size, "without total"): _reader(services, counted=False),
            (size, "3 include windows"): _reader(services, include=windows),
            (size, "oldest page, counted as before 0012"): _reader(walking),
            (size, "metadata filter, page 2, counted as before"): _reader(
                walking, page=1, metadata={"topic": TOPICS[1]}
            ),
        }


def report(size: int, results: dict[str, dict[tuple[int, str], tuple[float, float]]]) -> str:
    lines = [
        f"# A resource's messages across its threads — {dt.date.today()}",
        "",
        machine(),
        "",
        f"In-process recall engine, one resource of {size:,} messages over {THREADS} threads (and "
        f"{RESOURCES - 1} more resources of as many), pages of {PAGE} with their total unless said; p50 / "
        "p99 ms, then "
        "the oldest page's p50 over each other way's.",
        "",
        "| engine | messages | "
        + " | ".join(WAYS)
        + " | "
        + " | ".join(f"oldest ÷ {w}" for w in WAYS[1:])
        + " |",
        "|---|---|" + "---|" * (2 * len(WAYS) - 1),
        *depth_rows(results, WAYS),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    asyncio.run(depth_main(__doc__, "resource-messages", 100_000, loaded, report))
