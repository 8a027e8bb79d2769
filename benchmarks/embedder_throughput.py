"""Throughput of chromadb's ONNXMiniLM_L6_V2 versus OnnxMiniLMEmbedder on short chat messages.

    python benchmarks/embedder_throughput.py [--messages 500] [--model-dir DIR] [--threads N] [--workers N]
        [--spin]

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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.embedders import OnnxMiniLMEmbedder

DEFAULT_MODEL_DIR = Path(__file__).resolve().parents[2] / "shared/models/all-MiniLM-L6-v2"

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500)
    parser.add_argument("--model-dir", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=None, help="intra-op threads per run for ours")
    parser.add_argument("--workers", type=int, default=1, help="batches ours runs at once")
    parser.add_argument("--spin", action="store_true", help="let ours spin-wait (lower latency)")
    args = parser.parse_args()
    model_dir = args.model_dir or Path(os.environ.get("RECALLQL_EMBEDDING_MODEL_DIR") or DEFAULT_MODEL_DIR)

    from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2

    ONNXMiniLM_L6_V2.DOWNLOAD_PATH = model_dir
    chroma = ONNXMiniLM_L6_V2()
    texts = chat_messages(args.messages)
    print(
        f"{len(texts)} chat messages, mean {np.mean([len(t) for t in texts]):.0f} characters; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )

    async def run() -> dict[str, float]:
        ours = OnnxMiniLMEmbedder(model_dir, threads=args.threads, workers=args.workers, spin=args.spin)
        loop = asyncio.get_running_loop()
        await ours.warmup()

        def embed(batch: Sequence[str]) -> object:
            # The timed path includes the hop to the embedder's thread and back, as in the server.
            return asyncio.run_coroutine_threadsafe(ours.embed(batch), loop).result()

        try:
            return await asyncio.to_thread(
                lambda: {
                    "ours_b1": rate(embed, texts, 1),
                    "ours_b32": rate(embed, texts, 32),
                    "ours_all": rate(embed, texts, len(texts)),
                    "ours_latency": latency_ms(embed, texts),
                }
            )
        finally:
            await ours.aclose()

    chroma(["warm up"])
    results = {
        "chroma_b1": rate(chroma, texts, 1),
        "chroma_b32": rate(chroma, texts, 32),
        "chroma_latency": latency_ms(chroma, texts),
    }
    results |= asyncio.run(run())

    print(f"{'workload':<28}{'chroma ONNXMiniLM_L6_V2':>26}{'OnnxMiniLMEmbedder':>22}{'ratio':>9}")
    for label, key in (("batches of 1 (sentences/s)", "b1"), ("batches of 32 (sentences/s)", "b32")):
        c, o = results[f"chroma_{key}"], results[f"ours_{key}"]
        print(f"{label:<28}{c:>26.1f}{o:>22.1f}{o / c:>8.1f}x")
    label = f"one call of {len(texts)} (sent./s)"
    print(f"{label:<28}{'-':>26}{results['ours_all']:>22.1f}")
    c, o = results["chroma_latency"], results["ours_latency"]
    print(f"{'one-query latency (ms)':<28}{c:>26.2f}{o:>22.2f}{c / o:>8.1f}x")


if __name__ == "__main__":
    main()
