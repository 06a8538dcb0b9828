"""Benchmark: the conformance oracle's speed and its power against broken variants.

Two tables, printed as Markdown:

- throughput: steps (machine rules) per second of ``asynclookup fuzz`` on the
  reference, in-memory tier, every fault, in stepped and threaded mode: the
  median over ``--seeds`` runs of ``--examples`` examples each;
- seconds to kill: for each broken variant of ``tests.mutants_reference``, the
  wall-clock seconds from the start of a run to the shrunk counterexample, over
  seeds 1..``--seeds`` (stepped, in-memory tier, every fault; the property-8
  variant with strict efficiency), with the median, the range, the median time
  to the first failing example (before shrinking) and the counterexample's
  length after shrinking.

By default the process pins itself to one CPU (``--cores all`` does not), so the
figures are "on one core".  Usage (from the repository root)::

    .venv/bin/python bench/conformance.py [--seeds 5] [--examples 300] [--steps 50]

This script measures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from asynclookup.conformance.counterexample import ConformanceError
from asynclookup.conformance.machine import FuzzConfig, Stats, run
from asynclookup.conformance.targets.target import FuzzTarget
from tests.mutants_reference import VARIANTS


def throughput(mode: str, seeds: int, examples: int, steps: int) -> list[float]:
    """Steps per second of clean runs on the reference, one figure per seed."""
    rates = []
    for seed in range(1, seeds + 1):
        stats = Stats()
        started = time.monotonic()
        run(FuzzConfig(mode=mode), examples=examples, seed=seed, steps=steps, stats=stats)
        rates.append(stats.steps / (time.monotonic() - started))
    return rates


def kill(variant: str, seed: int, steps: int) -> tuple[float, float, int, int]:
    """Seconds to the shrunk kill and to the first failure, the calls, the property."""
    config = FuzzConfig(
        target=FuzzTarget.parse(f"tests.mutants_reference:{variant}"),
        strict_efficiency=VARIANTS[variant] == 8,
    )
    stats = Stats()
    try:
        run(config, examples=1_000_000, seed=seed, steps=steps, stats=stats)
    except ConformanceError as error:
        total = time.monotonic() - stats.started
        found = stats.found_after if stats.found_after is not None else total
        return total, found, len(error.calls), int(error.violation.number or 0)
    raise RuntimeError(f"{variant} survived seed {seed}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--examples", type=int, default=300)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--cores", choices=("one", "all"), default="one")
    parser.add_argument("--only", choices=("throughput", "kills"), default=None)
    args = parser.parse_args()
    if args.cores == "one" and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    print(f"python {sys.version.split()[0]}, {args.cores} core(s), "
          f"{args.steps} steps per example\n")
    if args.only in (None, "throughput"):
        print("| mode | steps/s (median) | range | examples x seeds |")
        print("|---|---|---|---|")
        for mode in ("stepped", "threaded"):
            rates = throughput(mode, args.seeds, args.examples, args.steps)
            print(f"| {mode} | {statistics.median(rates):,.0f} | "
                  f"{min(rates):,.0f}-{max(rates):,.0f} | {args.examples} x {args.seeds} |",
                  flush=True)
        print()
    if args.only in (None, "kills"):
        print("| variant | property | s to kill (median) | range | s to first failure "
              "(median) | calls after shrinking |")
        print("|---|---|---|---|---|---|")
        for variant in sorted(VARIANTS):
            results = [kill(variant, seed, args.steps) for seed in range(1, args.seeds + 1)]
            totals = [total for total, _, _, _ in results]
            founds = [found for _, found, _, _ in results]
            calls = sorted({n for _, _, n, _ in results})
            numbers = sorted({p for _, _, _, p in results})
            print(f"| {variant} | {', '.join(map(str, numbers))} | "
                  f"{statistics.median(totals):.1f} | {min(totals):.1f}-{max(totals):.1f} | "
                  f"{statistics.median(founds):.1f} | {', '.join(map(str, calls))} |",
                  flush=True)


if __name__ == "__main__":
    main()
