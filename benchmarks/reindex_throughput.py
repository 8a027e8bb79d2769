"""`recallql reindex` throughput with embedding, beside the embedder alone on the same texts.

    python benchmarks/reindex_throughput.py [--messages 3000] [--pages 256,1024] [--rounds 4]
        [--texts chat|conversation] [--model-dir DIR]

One resource of --messages messages in a fresh SQLite file (the embedded default) and the default index
(embedded Chroma in a child process). Each round, for each page size: the embedder alone on the texts in
calls of that size (raw), SemanticMemory.reindex(rebuild=True) as the command runs it (a page is read and
embedded while the index writes the page before), and the same pages one step after another (embed,
then write, then the next page: what reindex did before the overlap). The three run back to back per
page size and round, in turn, since this machine's speed drifts within minutes; prints messages/s,
medians of the rounds, and the ratios of each round.

With --damage it measures instead the rebuild that starts when a collection is found damaged (a write
cut off, files Chroma cannot load): the resource's messages queued in the outbox, its collection dropped,
then refilled from SQL through the outbox. Now a page of the pipeline's batch (1,024) is read and embedded
while the one before is written; before, pages of the drain's batch (256) went one step at a time. The
two run back to back each round, in turn.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from semantic_bench import DIM, INGEST_TEXTS, MODEL_NAME, ingest_batches, ingest_services, resolve_model_dir

from models.chroma_process import IsolatedChromaIndex
from models.db import create_engine
from models.embedders import OnnxMiniLMEmbedder
from models.migrate import upgrade
from models.repository import Repository
from models.vector_index import VectorIndexDamaged
from resolvers.config import BUILTIN_DEFAULTS
from resolvers.context import Services
from resolvers.semantic import SemanticMemory, embeddable_text


async def one_step_at_a_time(semantic: SemanticMemory, page: int) -> int:
    """The pages as reindex wrote them before it overlapped them: embed, write, then the next page."""
    index = await semantic.index()
    await index.drop(None)
    done = 0
    async for rows in semantic._messages_in_order(None, batch=page):
        items, _ = await semantic._embed_messages([m for m in rows if embeddable_text(m) is not None])
        if items:
            await semantic._healing(partial(index.upsert, items))
        done += len(rows)
    return done


async def damage_rebuild(semantic: SemanticMemory, resource: str) -> int:
    """The rebuild a damaged collection starts, as the server runs it; returns the messages rebuilt."""
    await semantic._heal(VectorIndexDamaged(resource, "measured"))
    await semantic.rebuilt()
    return await semantic.repository.count_all_messages(resource_id=resource)


async def damage_rebuild_before(semantic: SemanticMemory, resource: str) -> int:
    """The same rebuild as it ran before its pages overlapped: queued, dropped, then one page of the
    drain's batch at a time (read, embed, write, settle)."""
    queued = await semantic.repository.outbox_queue_resource(resource)
    await (await semantic.index()).drop([resource])
    async for rows in semantic._messages_in_order(resource, batch=semantic.drain_batch):
        await semantic.sync([m.id for m in rows])
    return queued


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--pages", default="256,1024")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--texts", choices=sorted(INGEST_TEXTS), default="chat")
    parser.add_argument("--model-dir", type=Path, default=None)
    parser.add_argument("--damage", action="store_true", help="measure the rebuild of a damaged collection")
    args = parser.parse_args()
    model_dir = resolve_model_dir(args.model_dir)
    pages = [int(p) for p in args.pages.split(",")]
    texts = INGEST_TEXTS[args.texts](args.messages, 2026)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        embedder = OnnxMiniLMEmbedder(model_dir)
        await embedder.warmup()
        engine = create_engine(f"sqlite+aiosqlite:///{work / 'reindex.db'}")
        await upgrade(engine)
        repository = Repository(engine)
        plain = Services.build(repository, memory_defaults=dict(BUILTIN_DEFAULTS))
        batches = ingest_batches(texts, 100, "r", resources=1)
        await ingest_services(plain, batches)
        index = IsolatedChromaIndex(path=work / "chroma", model_name=MODEL_NAME, dimension=DIM)
        semantic = SemanticMemory(repository, embedder, lambda _m, _d: index)
        rates: dict[tuple[int, str], list[float]] = {}

        async def timed(page: int, name: str, work: Awaitable[int]) -> None:
            started = time.perf_counter()
            n = await work
            rates.setdefault((page, name), []).append(n / (time.perf_counter() - started))

        async def raw(page: int) -> int:
            for start in range(0, len(texts), page):
                await embedder.embed(texts[start : start + page])
            return len(texts)

        try:
            await semantic.reindex(rebuild=True)  # warm-up: Chroma's child, the collection, SQLite's cache
            if args.damage:
                pages = [semantic.pipeline_batch]
            for rnd in range(args.rounds):
                if args.damage:
                    first, second = ("rebuild", "before") if rnd % 2 == 0 else ("before", "rebuild")
                    for name in (first, second):
                        run = damage_rebuild if name == "rebuild" else damage_rebuild_before
                        await timed(pages[0], name, run(semantic, batches[0].resource_id))
                        stored = await index.count(batches[0].resource_id)
                        if stored != len(texts):  # a rebuild that lost vectors would time as fast
                            raise SystemExit(f"{name}: {stored} vectors after the rebuild, not {len(texts)}")
                    await timed(pages[0], "raw", raw(pages[0]))
                    print(f"  round {rnd + 1} of {args.rounds} done", file=sys.stderr, flush=True)
                    continue
                for page in pages:
                    await timed(page, "raw", raw(page))
                    await timed(page, "reindex", semantic.reindex(batch=page, rebuild=True))
                    await timed(page, "before", one_step_at_a_time(semantic, page))
                print(f"  round {rnd + 1} of {args.rounds} done", file=sys.stderr, flush=True)
        finally:
            await semantic.aclose()
            await engine.dispose()

    def median(page: int, name: str) -> float:
        return statistics.median(rates[(page, name)])

    def each(page: int, a: str, b: str) -> str:
        return ", ".join(f"{x / y:.0%}" for x, y in zip(rates[(page, a)], rates[(page, b)], strict=True))

    print(f"{len(texts):,} {args.texts} messages in one resource, {args.rounds} rounds, messages/s (medians)")
    print()
    if args.damage:
        page = pages[0]
        print(
            "| raw embedder (calls of 1,024) | damage rebuild | as before (pages of 256, one step at a time) "
            "| rebuild / before, each round |"
        )
        print("|---:|---:|---:|---|")
        print(
            f"| {median(page, 'raw'):.0f} | {median(page, 'rebuild'):.0f} | {median(page, 'before'):.0f} "
            f"| {each(page, 'rebuild', 'before')} |"
        )
        return
    print(
        "| page | raw embedder | reindex | one step at a time (before) "
        "| reindex / raw, each round | reindex / before, each round |"
    )
    print("|---:|---:|---:|---:|---|---|")
    for page in pages:
        print(
            f"| {page:,} | {median(page, 'raw'):.0f} | {median(page, 'reindex'):.0f} | "
            f"{median(page, 'before'):.0f} | {each(page, 'reindex', 'raw')} | "
            f"{each(page, 'reindex', 'before')} |"
        )


if __name__ == "__main__":
    asyncio.run(main())
