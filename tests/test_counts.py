"""The maintained per-thread counts always equal the rows, whatever writes happened."""

from __future__ import annotations

import random
from typing import Any

from sqlalchemy import func, select

from models.records import MessageQuery
from models.tables import messages_table as M
from models.tables import thread_resources_table as TR
from resolvers.context import Services
from resolvers.messages import MessagePatch
from tests.factories import msg


async def counts(services: Services) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
    engine = services.repository.engine
    async with engine.connect() as conn:
        actual = {
            (t, r or ""): n
            for t, r, n in await conn.execute(
                select(M.c.thread_id, M.c.resource_id, func.count()).group_by(M.c.thread_id, M.c.resource_id)
            )
        }
        kept = {
            (t, r): n
            for t, r, n in await conn.execute(select(TR.c.thread_id, TR.c.resource_id, TR.c.message_count))
        }
    return actual, {k: n for k, n in kept.items() if n}


async def test_counts_follow_every_kind_of_write(services: Services) -> None:
    rng = random.Random(7)
    threads = [f"t{n}" for n in range(4)]
    resources = ["r1", "r2"]
    for n, thread_id in enumerate(threads):
        await services.threads.create(resource_id=resources[n % 2], thread_id=thread_id)
    ids: list[str] = []
    for step in range(120):
        action = rng.choice(["save", "save", "resave", "update", "delete", "delete_thread", "clone"])
        if action == "save" or not ids:
            batch = [
                msg(
                    f"m{step}-{k}",
                    thread=rng.choice(threads),
                    at=step + k / 10,
                    resource=rng.choice(resources),
                )
                for k in range(rng.randint(1, 4))
            ]
            await services.messages.save(batch)
            ids += [m.id for m in batch if m.id]
        elif action == "resave":
            target = rng.choice(ids)
            await services.messages.save(
                [msg(target, thread=rng.choice(threads), at=step, resource=rng.choice(resources))]
            )
        elif action == "update":
            patches = [
                MessagePatch(id=i, thread_id=rng.choice(threads), resource_id=rng.choice(resources))
                for i in rng.sample(ids, min(len(ids), 3))
            ]
            await services.messages.update(patches)
        elif action == "delete":
            gone = rng.sample(ids, min(len(ids), 2))
            await services.messages.delete([*gone, "never-existed"])
            ids = [i for i in ids if i not in gone]
        elif action == "delete_thread":
            victim = rng.choice(threads)
            await services.threads.delete(victim)
            await services.threads.create(resource_id=rng.choice(resources), thread_id=victim)
            remaining = await services.repository.get_messages(ids)
            ids = [i for i in ids if i in remaining]
        else:
            new_id = f"c{step}"
            result = await services.threads.clone(rng.choice(threads), new_thread_id=new_id)
            threads.append(new_id)
            ids += [m.id for m in result.messages]
        actual, kept = await counts(services)
        assert kept == actual, f"after step {step} ({action})"

    # Recall's total uses the maintained counts; it must equal a real COUNT, with and without filters.
    for thread_id in threads:
        for resource_id in (None, *resources):
            query = MessageQuery(thread_id=thread_id, resource_id=resource_id)
            read = await services.repository.read_page(query, descending=True, limit=1, offset=0)
            async with services.repository.engine.connect() as conn:
                real = (await conn.execute(services.repository.count_statement(query))).scalar_one()
            assert read.total == real


async def test_filtered_counts_are_recomputed_after_a_write(services: Services) -> None:
    await services.threads.create(resource_id="r1", thread_id="t1")
    await services.messages.save([msg(f"m{n}", at=n, metadata={"k": n % 2}) for n in range(10)])
    query: dict[str, Any] = {"thread_id": "t1", "metadata": {"k": 1}}
    first = await services.repository.read_page(MessageQuery(**query), descending=True, limit=5, offset=0)
    again = await services.repository.read_page(MessageQuery(**query), descending=True, limit=5, offset=0)
    assert first.total == again.total == 5
    await services.messages.save([msg("m10", at=10, metadata={"k": 1})])
    after = await services.repository.read_page(MessageQuery(**query), descending=True, limit=5, offset=0)
    assert after.total == 6
    await services.messages.update([MessagePatch(id="m10", content={"metadata": {"k": 0}})])
    assert (
        await services.repository.read_page(MessageQuery(**query), descending=True, limit=5, offset=0)
    ).total == 5
