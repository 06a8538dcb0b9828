"""How long correct classes take to show what the spec owes them, against the oracle's bounds.

Run from the project root:
``PYTHONPATH=. python bench/latency.py [--seed S ...] [--examples N] [NAME ...]``.
It fuzzes every correct class in tests/ (``tests.correct.CORRECT``; NAME picks
some) in threaded mode with every fault, strict efficiency, one run a seed, and
times two kinds of bounded wait wherever they ended because what was owed came:

- an owed tier call: from the start of the oracle's wait for the worker's next
  tier call to its arrival (``OracleTier.next_call`` with a full bound);
- a re-ask window: from its start to the re-ask that saw the verdict, or the
  tables empty (``Driver._reask``), counted only when it took more than one ask.

It prints the count, median, 99th percentile and maximum of each, next to the
bounds they are judged by (``WAIT_BOUND``, ``NAMING_WAIT``), and any false alarm
(a correct class condemned).  Run two at once, on different seeds, to see them
on a loaded machine.  It measures; it asserts nothing (tests/test_conformance_correct.py
does).  The timing wraps two oracle methods in this process only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from asynclookup.conformance import driver as driver_module
from asynclookup.conformance.counterexample import Call
from asynclookup.conformance.driver import Driver
from asynclookup.conformance.eventually import NAMING_WAIT, WAIT_BOUND
from asynclookup.conformance.targets.adapter import OracleTier
from asynclookup.conformance.testcase import first_violation

Waits = dict[str, list[float]]


def instrument(waits: Waits) -> None:
    """Time the two waits into ``waits`` (this process only)."""
    next_call = OracleTier.next_call
    reask_window = Driver._reask

    def timed_next_call(self: OracleTier, timeout: float) -> Any:
        started = time.monotonic()
        pending = next_call(self, timeout)
        if timeout >= NAMING_WAIT and pending is not None:
            waits["owed tier call"].append(time.monotonic() - started)
        return pending

    def timed_reask(
        self: Driver, record: Call, reask: Callable[[], bool], key: bytes | None,
        request: str | None,
    ) -> None:
        started = time.monotonic()
        asks = 0

        def counted() -> bool:
            nonlocal asks
            asks += 1
            done = reask()
            if done and asks > 1:
                waits["re-ask window"].append(time.monotonic() - started)
            return done

        reask_window(self, record, counted, key, request)

    OracleTier.next_call = timed_next_call  # type: ignore[method-assign]
    driver_module.Driver._reask = timed_reask  # type: ignore[method-assign,assignment]


def summary(name: str, values: list[float]) -> str:
    if not values:
        return f"| {name} | 0 | - | - | - |"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (f"| {name} | {len(values)} | {statistics.median(values) * 1e3:.3f} ms "
            f"| {p99 * 1e3:.2f} ms | {ordered[-1] * 1e3:.2f} ms |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, action="append", dest="seeds",
                        help="a seed to run (repeatable; 0 if none)")
    parser.add_argument("--examples", type=int, default=200, help="at most, per seed")
    parser.add_argument("names", nargs="*")
    args = parser.parse_args(argv)
    from tests.correct import CORRECT

    unknown = [name for name in args.names if name not in CORRECT]
    if unknown:
        print(f"bench/latency.py: no correct class named {', '.join(unknown)}", file=sys.stderr)
        return 2
    seeds: list[int] = args.seeds or [0]
    waits: Waits = {"owed tier call": [], "re-ask window": []}
    instrument(waits)
    alarms = runs = 0
    for name in args.names or list(CORRECT):
        for seed in seeds:
            runs += 1
            error = first_violation(CORRECT[name], seed=seed, examples=args.examples)
            if error is not None:
                alarms += 1
                print(f"# FALSE ALARM {name} seed {seed}: property {error.violation.number}",
                      file=sys.stderr, flush=True)
    print(f"{runs} runs, {alarms} false alarms; bounds: WAIT_BOUND {WAIT_BOUND:g} s, "
          f"NAMING_WAIT {NAMING_WAIT:g} s")
    print("| wait | ended by what was owed | median | 99th percentile | longest |")
    print("|---|---|---|---|---|")
    for name, values in waits.items():
        print(summary(name, values))
    return 0


if __name__ == "__main__":
    sys.exit(main())
