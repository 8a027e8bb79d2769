"""Background ingest with the write pipeline merging the batches embedded during a write, against one
batch per write, beside the embedder alone on the same texts.

    python benchmarks/write_merging.py [--messages 6000] [--resources 1000] [--save 2] [--rounds 4]
        [--merge 1,8] [--texts chat|conversation] [--model-dir DIR] [--out FILE]

Each variant (`--merge`: SemanticMemory's merge_batches; 1 is the pipeline as it was before merging) has
its own SQLite file and its own default index (embedded Chroma in a child process). Saves of `--save`
messages go round robin to `--resources` resources, the same ones every round; an untimed first round
(one save per resource) creates their collections, so that the rounds measure the steady state of many
end users at once, not the creation of their collections. Each round runs the raw embedder (calls of
1,024, the pipeline's batch) and then every variant, in an order that turns each round, since this
machine's speed drifts within minutes. Background mode, one writer; the clock stops once every vector is
written. Counted per variant: Chroma upsert calls (one per resource and write) per 1,000 messages.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from semantic_bench import DIM, INGEST_TEXTS, MODEL_NAME, ingest_batches, ingest_services, resolve_model_dir

from models.chroma_process import IsolatedChromaIndex
from models.db import create_engine
from models.embedders import OnnxMiniLMEmbedder
from models.migrate import upgrade
from models.repository import Repository
from models.vector_index import VectorItem, raise_open_file_limit
from resolvers.config import BUILTIN_DEFAULTS
from resolvers.context import Services
from resolvers.semantic import SemanticMemory

RAW = "raw"


class CountedIndex(IsolatedChromaIndex):
    """Counts the Chroma upsert calls its upserts make: one per resource among the items."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls = 0

    async def upsert(self, items: Sequence[VectorItem]) -> None:  # type: ignore[override]
        items = list(items)
        self.calls += len({item.resource_id for item in items})
        await super().upsert(items)


class Variant:
    def __init__(self, merge: int, work: Path, embedder: OnnxMiniLMEmbedder) -> None:
        self.merge = merge
        self.engine = create_engine(f"sqlite+aiosqlite:///{work / f'merge-{merge}.db'}")
        self.index = CountedIndex(path=work / f"chroma-{merge}", model_name=MODEL_NAME, dimension=DIM)
        self.repository = Repository(self.engine)
        self.semantic = SemanticMemory(
            self.repository, embedder, lambda _m, _d: self.index, background=True, merge_batches=merge
        )
        self.services = Services.build(
            self.repository, memory_defaults=dict(BUILTIN_DEFAULTS), semantic=self.semantic
        )

    @property
    def name(self) -> str:
        return f"merge {self.merge}"

    async def aclose(self) -> None:
        await self.semantic.aclose()
        await self.engine.dispose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=6000, help="messages saved per round")
    parser.add_argument("--resources", type=int, default=1000)
    parser.add_argument("--save", type=int, default=2, help="messages per save")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--merge", default="1,8", help="merge_batches of each variant")
    parser.add_argument("--texts", choices=sorted(INGEST_TEXTS), default="chat")
    parser.add_argument("--model-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    model_dir = resolve_model_dir(args.model_dir)
    merges = [int(m) for m in args.merge.split(",")]
    texts = INGEST_TEXTS[args.texts](args.messages, 2026)
    raise_open_file_limit()
    started = time.perf_counter()
    load: list[tuple[str, tuple[float, float, float]]] = [("start", os.getloadavg())]
    rates: dict[str, list[float]] = {}
    calls: dict[str, list[float]] = {}

    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        embedder = OnnxMiniLMEmbedder(model_dir)
        await embedder.warmup()
        variants = [Variant(m, work, embedder) for m in merges]
        for v in variants:
            await upgrade(v.engine)

        async def raw() -> float:
            begun = time.perf_counter()
            for start in range(0, len(texts), 1024):
                await embedder.embed(texts[start : start + 1024])
            return len(texts) / (time.perf_counter() - begun)

        async def saving(v: Variant, tag: str, round_texts: list[str] = texts) -> float:
            before = v.index.calls
            batches = ingest_batches(round_texts, args.save, tag, args.resources, same_resources=True)
            rate = await ingest_services(v.services, batches, settle=True)
            if backlog := await v.repository.outbox_backlog():
                raise SystemExit(f"{v.name}: {backlog} messages left in the outbox")
            calls.setdefault(v.name, []).append((v.index.calls - before) * 1000 / len(round_texts))
            return rate

        # One save per resource is enough to make every collection.
        warm = texts[: min(len(texts), args.resources * args.save)]
        try:
            for v in variants:  # untimed: every resource's collection made, Chroma's child started
                await saving(v, "warm", warm)
                calls.pop(v.name)
            print("  warm-up done", file=sys.stderr, flush=True)
            for rnd in range(args.rounds):
                load.append((f"round {rnd + 1}", os.getloadavg()))
                rates.setdefault(RAW, []).append(await raw())
                turn = rnd % len(variants)
                for v in variants[turn:] + variants[:turn]:
                    rates.setdefault(v.name, []).append(await saving(v, f"r{rnd}"))
                print(f"  round {rnd + 1} of {args.rounds} done", file=sys.stderr, flush=True)
            load.append(("end", os.getloadavg()))
            for v in variants:  # a pipeline that lost vectors would time as fast
                stored = sum([await v.index.count(f"ingest-r{r}") for r in range(args.resources)])
                if stored != (expected := args.rounds * len(texts) + len(warm)):
                    raise SystemExit(f"{v.name}: {stored} vectors, not {expected}")
        finally:
            for v in variants:
                await v.aclose()

    lines = [
        f"# Write merging in the vector pipeline, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "",
        "`python benchmarks/write_merging.py " + " ".join(sys.argv[1:]) + "`",
        "",
        f"- Machine: {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}",
        f"- {len(texts):,} {args.texts} messages a round, mean "
        f"{statistics.fmean(len(t) for t in texts):.0f} characters, saves of {args.save} round robin over "
        f"{args.resources:,} resources (the same every round; an untimed first round, one save per "
        f"resource, made their collections), {args.rounds} rounds; background mode, one writer, Chroma in a "
        "child process; the clock stops at the last vector.",
        "- Load average (1/5/15 min): "
        + "; ".join(f"{label} {a:.2f} / {b:.2f} / {c:.2f}" for label, (a, b, c) in load),
        f"- Total run time {time.perf_counter() - started:.0f} s.",
        "",
        "| path | messages/s (median) | per round | vs raw, each round (median) "
        "| Chroma upserts per 1,000 messages |",
        "|---|---:|---|---|---:|",
        f"| raw embedder, calls of 1,024 | {median(rates[RAW]):.0f} | "
        + ", ".join(f"{r:.0f}" for r in rates[RAW])
        + " | | |",
    ]
    for v in variants:
        mine = rates[v.name]
        ratios = [r / w for r, w in zip(mine, rates[RAW], strict=True)]
        lines.append(
            f"| background ingest, merge_batches {v.merge} | {median(mine):.0f} | "
            + ", ".join(f"{r:.0f}" for r in mine)
            + " | "
            + ", ".join(f"{x:.0%}" for x in ratios)
            + f" ({median(ratios):.0%}) | {median(calls[v.name]):.0f} |"
        )
    if len(variants) > 1:
        base = variants[0]
        lines.append("")
        for v in variants[1:]:
            each = [a / b for a, b in zip(rates[v.name], rates[base.name], strict=True)]
            lines.append(
                f"- {v.name} against {base.name}, each round: "
                + ", ".join(f"{x:.2f}x" for x in each)
                + f" (median {median(each):.2f}x)"
            )
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    asyncio.run(main())
