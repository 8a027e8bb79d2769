"""Throughput of chromadb's ONNXMiniLM_L6_V2 versus OnnxMiniLMEmbedder on short chat messages.

    python benchmarks/embedder_throughput.py [--messages 500] [--rounds 5] [--model-dir DIR] [--threads N]
        [--workers N] [--spin] [--token-sweep]

Both read the same model folder (the one that contains onnx/); nothing is downloaded. Chroma pads every
text to 256 tokens, OnnxMiniLMEmbedder pads each batch to its longest text, so the gap is largest for
short texts. OnnxMiniLMEmbedder is timed through its async API, as the server uses it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from semantic_bench import resolve_model_dir  # this folder

from models.embedders import OnnxMiniLMEmbedder

_OPENERS = ["hey", "ok so", "quick question:", "thanks!", "hmm,", "btw", "sure,", "honestly", "", ""]
_BODIES = [
    "can you remind me to buy milk tomorrow",
    "what did we decide about the project deadline",
    "I moved the standup to 10am on Friday",
    "the deploy failed again with a timeout on the database migration",
    "let's book the train to Lyon for the weekend",
    "my favourite colour is green, not blue",
    "please summarise the last meeting notes",
    "is the bug in the login form fixed yet",
    "call mom about dinner plans on Sunday",
    "the coffee machine on the third floor is broken",
    "send the invoice to the client before the end of the month",
    "I prefer Python over JavaScript for scripts",
    "where did I put the keys for the storage room",
    "we need two more reviewers for the pull request",
]
_CLOSERS = ["", "", "?", " please", " :)", " asap", " if you can", " no rush"]


def chat_messages(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.choice(_OPENERS)} {rng.choice(_BODIES)}{rng.choice(_CLOSERS)}".strip() for _ in range(n)]


def rate(fn: Callable[[Sequence[str]], object], texts: Sequence[str], batch: int) -> float:
    start = time.perf_counter()
    for i in range(0, len(texts), batch):
        fn(texts[i : i + batch])
    return len(texts) / (time.perf_counter() - start)


def latency_ms(fn: Callable[[Sequence[str]], object], texts: Sequence[str], calls: int = 50) -> float:
    samples = []
    for text in texts[:calls]:
        start = time.perf_counter()
        fn([text])
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def token_sweep(model_dir: Path) -> None:
    """What one text costs the model by its length, on one thread with nothing else in the way: the
    bound on how far ahead of Chroma's function (every text padded to 256 tokens) a lone text can be."""
    ours = OnnxMiniLMEmbedder(model_dir, threads=1)
    print("tokens  model run p50 (ms), one text, one intra-op thread")
    for n in (2, 8, 16, 32, 64, 128, 256):
        ids = [[101] + [2000] * (n - 2) + [102]]  # [CLS] ... [SEP]
        for _ in range(5):
            ours._run_batch(ids)
        samples = []
        for _ in range(40):
            start = time.perf_counter()
            ours._run_batch(ids)
            samples.append(time.perf_counter() - start)
        print(f"{n:>6}  {statistics.median(samples) * 1000:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (ratios are per round)")
    parser.add_argument("--model-dir", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=None, help="intra-op threads per run for ours")
    parser.add_argument("--workers", type=int, default=1, help="batches ours runs at once")
    parser.add_argument("--spin", action="store_true", help="let ours spin-wait (lower latency)")
    parser.add_argument(
        "--token-sweep", action="store_true", help="only: ours on one text of 2-256 tokens, one thread"
    )
    args = parser.parse_args()
    model_dir = resolve_model_dir(args.model_dir)

    if args.token_sweep:
        token_sweep(model_dir)
        return

    from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2

    ONNXMiniLM_L6_V2.DOWNLOAD_PATH = model_dir
    chroma = ONNXMiniLM_L6_V2()
    texts = chat_messages(args.messages)
    print(
        f"{len(texts)} chat messages, mean {np.mean([len(t) for t in texts]):.0f} characters; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; {args.rounds} rounds"
    )

    async def run() -> dict[str, list[float]]:
        ours = OnnxMiniLMEmbedder(model_dir, threads=args.threads, workers=args.workers, spin=args.spin)
        loop = asyncio.get_running_loop()
        await ours.warmup()

        def embed(batch: Sequence[str]) -> object:
            # The timed path includes the hop to the embedder's thread and back, as in the server.
            return asyncio.run_coroutine_threadsafe(ours.embed(batch), loop).result()

        def rounds() -> dict[str, list[float]]:
            # This shared machine's speed drifts by 10-20% within minutes: both embedders are timed in
            # every round, on the round's own slice of texts, in alternating order, and each ratio is
            # taken within its round.
            chroma(["warm up"])
            results: dict[str, list[float]] = {}
            per = max(1, len(texts) // args.rounds)
            for n in range(args.rounds):
                part = texts[n * per : (n + 1) * per]
                # Chroma's function is typed for lists of texts; the slices given are lists.
                theirs = cast(Callable[[Sequence[str]], object], chroma)
                order = [("chroma", theirs), ("ours", embed)]
                for name, fn in order if n % 2 == 0 else order[::-1]:
                    results.setdefault(f"{name}_b1", []).append(rate(fn, part, 1))
                    results.setdefault(f"{name}_b32", []).append(rate(fn, part, 32))
                    results.setdefault(f"{name}_latency", []).append(latency_ms(fn, part, calls=20))
                results.setdefault("ours_all", []).append(rate(embed, part, len(part)))
            return results

        try:
            return await asyncio.to_thread(rounds)
        finally:
            await ours.aclose()

    results = asyncio.run(run())
    median = statistics.median

    def ratios(key: str, inverse: bool = False) -> list[float]:
        pairs = zip(results[f"chroma_{key}"], results[f"ours_{key}"], strict=True)
        return [c / o if inverse else o / c for c, o in pairs]

    def spread(values: list[float]) -> str:
        return f"{median(values):.1f}x ({min(values):.1f}-{max(values):.1f})"

    print(
        f"{'workload (medians)':<28}{'chroma ONNXMiniLM_L6_V2':>26}{'OnnxMiniLMEmbedder':>22}  ratio (rounds)"
    )
    for label, key in (("batches of 1 (sentences/s)", "b1"), ("batches of 32 (sentences/s)", "b32")):
        c, o = median(results[f"chroma_{key}"]), median(results[f"ours_{key}"])
        print(f"{label:<28}{c:>26.1f}{o:>22.1f}  {spread(ratios(key))}")
    label = f"one call of {len(texts) // args.rounds} (sent./s)"
    print(f"{label:<28}{'-':>26}{median(results['ours_all']):>22.1f}")
    c, o = median(results["chroma_latency"]), median(results["ours_latency"])
    print(f"{'one-query latency (ms)':<28}{c:>26.2f}{o:>22.2f}  {spread(ratios('latency', inverse=True))}")


if __name__ == "__main__":
    main()
