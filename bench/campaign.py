"""Benchmark: steps per second of ``asynclookup fuzz --workers N`` for N = 1 and 2.

Each run is the real CLI in a fresh interpreter, on the reference, stepped mode,
in-memory tier, every fault, for a fixed ``--duration``, with ``--json``: its
``steps_per_second`` is the steps summed over the workers divided by the wall
time of the whole run, so start-up and the parent's merge count against it.
The worker counts alternate (1, 2, 1, 2, ...) for ``--rounds`` rounds, so a
change in the machine's load falls on both; the table gives the median of each
and the ratio of the medians.  Usage (from the repository root)::

    .venv/bin/python bench/campaign.py [--duration 20s] [--rounds 3] [--workers 1,2]

This script measures; it asserts nothing.  Close to ``--workers`` cores must be
free for the ratio to mean anything: ``os.cpu_count()`` is printed with it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-c", "import sys; from asynclookup.cli import main; sys.exit(main())"]


def one_run(workers: int, duration: str, seed: int) -> tuple[float, int]:
    """steps/s and examples of one ``fuzz --workers`` run on the reference."""
    done = subprocess.run(
        [*CLI, "fuzz", "--workers", str(workers), "--duration", duration, "--examples",
         "1000000", "--seed", str(seed), "--json", "--quiet"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"fuzz --workers {workers} exited {done.returncode}: {done.stderr}")
    report = json.loads(done.stdout)
    return float(report["steps_per_second"]), int(report["examples"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", default="20s")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", default="1,2", help="comma list of worker counts")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    rates: dict[int, list[float]] = {n: [] for n in counts}
    for round_ in range(args.rounds):
        for n in counts:
            rate, examples = one_run(n, args.duration, seed=1 + round_ * 10)
            rates[n].append(rate)
            print(f"round {round_ + 1}: {n} worker(s): {rate:,.0f} steps/s, "
                  f"{examples} examples", file=sys.stderr)
    base = statistics.median(rates[counts[0]])
    print(f"cores: {os.cpu_count()}; --duration {args.duration}, {args.rounds} rounds\n")
    print("| workers | steps/s (median) | range | ratio to 1 |")
    print("|---|---|---|---|")
    for n in counts:
        med = statistics.median(rates[n])
        print(f"| {n} | {med:,.0f} | {min(rates[n]):,.0f}-{max(rates[n]):,.0f} "
              f"| {med / base:.2f} |")


if __name__ == "__main__":
    main()
