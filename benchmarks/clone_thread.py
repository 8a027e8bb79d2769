"""cloneThread (or updateThreadResourceId, --operation transfer) with semantic recall on: the copies'
(the moved messages') vectors copied from their sources, against embedding them again (what both did
before) and against a server without an embedder.

    python benchmarks/clone_thread.py [--sizes 100,1000] [--rounds 5] [--texts chat|conversation]
        [--operation clone|transfer] [--model-dir DIR] [--out FILE]

One thread of each size in a fresh SQLite file, saved with its vectors written (all-MiniLM-L6-v2 and
embedded Chroma in a child process, the defaults), then cloned: each round, for each size, a clone that
copies the sources' vectors (now), one that embeds the copies (SemanticMemory.copied_vectors answering
nothing, as before), and one by a server without an embedder (SQL alone), in turn, since this machine's
speed drifts within minutes. A clone answers once its copies' vectors are written (the default, wait
mode), as a save does. A transfer gives the thread to another resource and back, in turn (its vectors
move between the two resources' collections). Prints the median ms of the rounds and the ratios; checks
that the vectors of each clone (each moved thread) are all there.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale_bench import machine
from semantic_bench import DIM, INGEST_TEXTS, MODEL_NAME, resolve_model_dir

from models.chroma_process import IsolatedChromaIndex
from models.db import create_engine
from models.embedders import OnnxMiniLMEmbedder
from models.migrate import upgrade
from models.repository import Repository
from resolvers.auth import OPEN
from resolvers.config import BUILTIN_DEFAULTS
from resolvers.context import Services
from resolvers.messages import MessageInput
from resolvers.semantic import SemanticMemory

WAYS = ("copied vectors", "embedded again", "no embedder")


async def _no_copies(_pairs: Any, **_options: Any) -> dict[str, Any]:
    return {}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--texts", choices=sorted(INGEST_TEXTS), default="chat")
    parser.add_argument("--operation", choices=("clone", "transfer"), default="clone")
    parser.add_argument("--model-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    embedder = OnnxMiniLMEmbedder(resolve_model_dir(args.model_dir))
    await embedder.warmup()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        engine = create_engine(f"sqlite+aiosqlite:///{work / 'clone.db'}")
        await upgrade(engine)
        repository = Repository(engine)
        index = IsolatedChromaIndex(path=work / "chroma", model_name=MODEL_NAME, dimension=DIM)
        semantic = SemanticMemory(repository, embedder, lambda _m, _d: index)
        services = Services.build(
            repository, memory_defaults=dict(BUILTIN_DEFAULTS), semantic=semantic, vector_sync_timeout=600
        )
        plain = Services.build(repository, memory_defaults=dict(BUILTIN_DEFAULTS))
        times: dict[tuple[int, str], list[float]] = {}
        try:
            sources: dict[int, str] = {}
            saved: dict[int, list[str]] = {}
            for size in sizes:
                thread_id = f"source-{size}"
                await services.threads.create(resource_id="r", thread_id=thread_id, principal=OPEN)
                texts = INGEST_TEXTS[args.texts](size, size)
                saved[size] = []
                for start in range(0, size, 100):
                    result = await services.messages.save(
                        [
                            MessageInput(
                                thread_id=thread_id,
                                resource_id="r",
                                role="user",
                                content={"format": 2, "parts": [{"type": "text", "text": text}]},
                            )
                            for text in texts[start : start + 100]
                        ],
                        principal=OPEN,
                    )
                    saved[size].extend(m.id for m in result.messages)
                sources[size] = thread_id
            copier = semantic.copied_vectors

            owners = dict.fromkeys(sizes, "r")

            async def operate(size: int, way: str) -> tuple[str, list[str]]:
                """Times one clone (or transfer); the resource its vectors are in and their ids."""
                semantic.copied_vectors = copier if way == "copied vectors" else _no_copies  # type: ignore[method-assign,assignment]
                chosen = plain if way == "no embedder" else services
                if args.operation == "transfer":
                    here, there = owners[size], "r2" if owners[size] == "r" else "r"
                    started = time.perf_counter()
                    await chosen.threads.transfer(sources[size], there, principal=OPEN)
                    times.setdefault((size, way), []).append((time.perf_counter() - started) * 1000)
                    if way == "no embedder":  # its vectors stayed behind: back to them, untimed
                        await chosen.threads.transfer(sources[size], here, principal=OPEN)
                    else:
                        owners[size] = there
                    return owners[size], saved[size]
                started = time.perf_counter()
                result = await chosen.threads.clone(sources[size], principal=OPEN)
                times.setdefault((size, way), []).append((time.perf_counter() - started) * 1000)
                return "r", [m.id for m in result.messages]

            await operate(sizes[0], "copied vectors")  # warm-up: Chroma's child, the collection
            for rnd in range(args.rounds):
                order = WAYS if rnd % 2 == 0 else WAYS[::-1]
                for size in sizes:
                    for way in order:
                        owner, copies = await operate(size, way)
                        if way != "no embedder":  # every copy's vector is there
                            stored = await index.vectors(owner, copies)
                            if len(stored) != size:
                                raise SystemExit(f"{way}: {len(stored)} of {size} copies have vectors")
                print(f"  round {rnd + 1} of {args.rounds} done", file=sys.stderr, flush=True)
        finally:
            semantic.copied_vectors = copier  # type: ignore[method-assign]
            await semantic.aclose()
            await engine.dispose()
    lines = [
        f"# {'cloneThread' if args.operation == 'clone' else 'updateThreadResourceId'} with semantic "
        f"recall — {dt.date.today()}",
        "",
        machine(),
        "",
        f"In process, SQLite, all-MiniLM-L6-v2 and embedded Chroma (child process), {args.texts} texts, "
        f"median ms of {args.rounds} rounds; the call answers once the vectors are written.",
        "",
        "| messages | " + " | ".join(WAYS) + " | embedded again ÷ copied | copied ÷ no embedder |",
        "|---|" + "---|" * (len(WAYS) + 2),
    ]
    for size in sizes:
        median = {way: statistics.median(times[(size, way)]) for way in WAYS}
        lines.append(
            f"| {size:,} | "
            + " | ".join(f"{median[w]:.0f}" for w in WAYS)
            + f" | {median['embedded again'] / median['copied vectors']:.1f}x"
            + f" | {median['copied vectors'] / median['no embedder']:.1f}x |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    asyncio.run(main())
