"""Mutant zoo kill table: how fast the black-box oracle kills each vLLM-shaped mutant.

Run from the project root:
``PYTHONPATH=. python bench/zoo.py [--examples N] [--seeds S,S,...] [MUTANT ...]``.
For each mutant of ``tests.zoo.mutants`` it fuzzes ``tests.zoo.mutants:NAME`` as
``--impl`` does (threaded mode, every fault, strict efficiency) once per seed,
unshrunk (``asynclookup.conformance.testcase.first_violation``), at most ``--examples`` examples a
seed; then it shrinks the first kill (``asynclookup.conformance.replay.shrink``).  It prints
a Markdown table: mutant, expected property, properties named, seeds that
killed it, median examples and median seconds to kill over the seeds (a seed
that did not kill counts as its whole run: the medians are then lower bounds),
the counterexample's calls after shrinking and the seconds shrinking took.
It measures; it asserts nothing (tests/test_conformance_zoo.py does).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass

from asynclookup.conformance.counterexample import ConformanceError
from asynclookup.conformance.machine import Stats
from asynclookup.conformance.replay import shrink
from asynclookup.conformance.testcase import first_violation


@dataclass
class Run:
    """One seed's run against one mutant."""

    error: ConformanceError | None
    examples: int
    seconds: float


def run(name: str, seed: int, examples: int) -> Run:
    """Fuzz mutant ``name`` with ``seed`` until the first violation or ``examples`` examples."""
    stats = Stats()
    started = time.monotonic()
    error = first_violation(f"tests.zoo.mutants:{name}", seed=seed, examples=examples, stats=stats)
    return Run(error, stats.examples, time.monotonic() - started)


def row(name: str, expected: int, runs: list[Run], budget: float) -> str:
    """The table row of one mutant."""
    kills = [r for r in runs if r.error is not None]
    named = sorted({r.error.violation.number or 0 for r in kills if r.error is not None})
    examples = statistics.median(r.examples for r in runs)
    seconds = statistics.median(r.seconds for r in runs)
    calls, shrink_seconds = "-", "-"
    if kills and kills[0].error is not None:
        started = time.monotonic()
        shrunk = shrink(kills[0].error, budget)
        calls, shrink_seconds = str(len(shrunk.calls)), f"{time.monotonic() - started:.1f}"
    shown = ", ".join(map(str, named)) or "survived"
    return (f"| {name} | {expected} | {shown} | {len(kills)}/{len(runs)} | {examples:g} | "
            f"{seconds:.1f} | {calls} | {shrink_seconds} |")


def main(argv: list[str] | None = None) -> int:
    from tests.zoo.mutants import MUTANTS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=300, help="at most, per seed")
    parser.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated")
    parser.add_argument("--shrink-budget", type=float, default=20.0, help="seconds")
    parser.add_argument("mutants", nargs="*", default=list(MUTANTS))
    args = parser.parse_args(argv)
    unknown = [name for name in args.mutants if name not in MUTANTS]
    if unknown:
        print(f"bench/zoo.py: no mutant named {', '.join(unknown)}", file=sys.stderr)
        return 2
    seeds = [int(seed) for seed in args.seeds.split(",")]
    print("| mutant | expected | named | killed | median examples | median seconds "
          "| calls after shrinking | shrink seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.mutants:
        runs = [run(name, seed, args.examples) for seed in seeds]
        print(row(name, MUTANTS[name], runs, args.shrink_budget), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
