"""How much two busy processes get from this machine's cores, next to one: the ceiling for --workers.

    python benchmarks/cpu_scaling.py [--rounds 5] [--seconds 3]

Runs the same CPU-bound work (a pure-Python loop: no I/O, a few kilobytes of memory) in one process,
then in one process per core at once, alternating, and reports the work done per second. On a machine
whose cores are independent, N processes do N times the work of one; virtual CPUs that share physical
cores (SMT siblings, an oversubscribed host) do less, and no server can scale across workers beyond that.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time


def spin(seconds: float, out: mp.Queue[int]) -> None:
    deadline = time.perf_counter() + seconds
    loops = 0
    while time.perf_counter() < deadline:
        x = 0
        for i in range(10_000):
            x += i
        loops += 1
    out.put(loops)


def work_per_second(processes: int, seconds: float) -> float:
    out: mp.Queue[int] = mp.Queue()
    procs = [mp.Process(target=spin, args=(seconds, out)) for _ in range(processes)]
    for p in procs:
        p.start()
    total = sum(out.get() for _ in procs)
    for p in procs:
        p.join()
    return total / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    ratios = []
    for n in range(args.rounds):
        one = work_per_second(1, args.seconds)
        many = work_per_second(cores, args.seconds)
        ratios.append(many / one)
        print(
            f"round {n + 1}: 1 process {one:,.0f} loops/s, "
            f"{cores} processes {many:,.0f} loops/s = {many / one:.2f}x"
        )
    print(
        f"median: {cores} busy processes do {statistics.median(ratios):.2f}x the work of one ({cores} cores)"
    )


if __name__ == "__main__":
    main()
