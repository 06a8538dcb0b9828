"""Mutant zoo kill table: how fast the black-box oracle kills each vLLM-shaped mutant.

Run from the project root:
``PYTHONPATH=. python bench/zoo.py [--examples N] [--seeds S,S,...] [MUTANT ...]``.
For each mutant of ``tests.zoo.mutants`` it fuzzes ``tests.zoo.mutants:NAME`` as
``--impl`` does, but unshrunk (``spec.testcase.first_violation``), in threaded
mode, one seed after another until one kills it, and prints a Markdown table:
mutant, expected property, property named, seed, examples run, seconds.
It measures; it asserts nothing (tests/test_zoo.py does).
"""

from __future__ import annotations

import argparse
import sys
import time

from spec.oracle_machine import Stats
from spec.testcase import first_violation
from spec.vllm_adapter import property_named


def kill(name: str, seed: int, examples: int) -> tuple[int | None, int, float]:
    """(property named or None if it survived, examples run, seconds) for one seed."""
    stats = Stats()
    started = time.monotonic()
    error = first_violation(
        f"tests.zoo.mutants:{name}", seed=seed, examples=examples, stats=stats
    )
    number = None if error is None else property_named(
        error.violation.number, error.violation.detail
    )
    return number, stats.examples, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    from tests.zoo.mutants import MUTANTS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100)
    parser.add_argument("--seeds", default="0,1,2,3", help="comma-separated, tried in order")
    parser.add_argument("mutants", nargs="*", default=list(MUTANTS))
    args = parser.parse_args(argv)
    print("| mutant | expected | named | seed | examples | seconds |")
    print("|---|---|---|---|---|---|")
    for name in args.mutants:
        total = 0.0
        for seed in map(int, args.seeds.split(",")):
            number, examples, seconds = kill(name, seed, args.examples)
            total += seconds
            if number is not None:
                print(f"| {name} | {MUTANTS[name]} | {number} | {seed} | {examples} | "
                      f"{total:.1f} |", flush=True)
                break
        else:
            print(f"| {name} | {MUTANTS[name]} | survived | - | - | {total:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
