"""Outside-implementation kill table: the oracle on vLLM-shaped classes it was not tuned to.

Run from the project root:
``PYTHONPATH=. python bench/outside.py [--zoo outside|strangers] [--faults F] [--examples N]
[--seeds S,S,...] [--out FILE] [NAME ...]``.
For each class of the zoo (``tests.outside.OUTSIDE``, or ``tests.strangers``:
its ``CORRECT`` classes, which must pass, and its ``BUGGY`` one-bug copies, each
of which must be named by exactly its property; NAME is a class name) it fuzzes
``MODULE:CLASS`` as ``asynclookup fuzz --impl`` does (threaded mode, the faults
``--faults`` names, ``all`` by default, strict efficiency) once per seed, unshrunk
(``asynclookup.conformance.testcase.first_violation``), at most ``--examples``
examples a seed of 30 steps each (the CI tests' size; ``asynclookup fuzz`` draws 50,
so its seed S is another run than this seed S), and settles and shrinks every kill
as ``asynclookup fuzz`` does
(``asynclookup.conformance.replay.settled_and_shrunk``): the property named is the
one the command's report names.
It prints, and writes to ``--out`` when given, a Markdown table: class,
expected property (``-`` for a correct class), properties named, seeds whose
kill named an expected property, seconds to the first failure and calls after
shrinking (median and range over the kills; a seed that did not kill counts
its whole run in the seconds), and the seconds shrinking took.  One line per
seed goes to stderr as it finishes (property, seconds, calls, the shrinker's
own account), so a misdiagnosis can be reproduced with its seed.  It measures;
it asserts nothing (tests/test_conformance_outside.py does).
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from asynclookup.conformance.machine import Stats
from asynclookup.conformance.replay import settled_and_shrunk
from asynclookup.conformance.testcase import first_violation


@dataclass
class Run:
    """One seed's run against one class."""

    seed: int
    named: int | None  # the property named (None: no violation)
    seconds: float  # to the first failure (or the whole run)
    examples: int
    calls: int | None = None  # after shrinking
    shrink_seconds: float = 0.0
    detail: str = ""


def measure(impl: str, seed: int, examples: int, budget: float, faults: str = "all") -> Run:
    """Fuzz ``impl`` with ``seed``; shrink a kill within ``budget`` seconds."""
    stats = Stats()
    started = time.monotonic()
    try:
        error = first_violation(impl, seed=seed, examples=examples, stats=stats, faults=faults)
    except Exception as exc:  # the oracle itself failed: a finding about the oracle, not a kill
        crash = f"oracle error {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return Run(seed, None, time.monotonic() - started, stats.examples, detail=crash)
    seconds = time.monotonic() - started
    if error is None:
        return Run(seed, None, seconds, stats.examples)
    started = time.monotonic()
    shrunk = settled_and_shrunk(error, budget)  # what asynclookup fuzz reports
    report = getattr(shrunk, "shrink_report", None)
    return Run(
        seed, shrunk.violation.number, seconds, stats.examples, len(shrunk.calls),
        time.monotonic() - started,
        f"{shrunk.violation.detail} | shrink: {report.line() if report else '-'}",
    )


def spread(values: Sequence[float], fmt: str) -> str:
    """``median (low-high)`` of ``values``, or ``-``."""
    if not values:
        return "-"
    median = format(statistics.median(values), fmt)
    low, high = format(min(values), fmt), format(max(values), fmt)
    return median if low == high else f"{median} ({low}-{high})"


def row(name: str, wanted: set[int], number: int | None, runs: list[Run]) -> str:
    """The table row of one class."""
    kills = [r for r in runs if r.named is not None]
    crashed = sum(1 for r in runs if r.detail.startswith("oracle error"))
    named = ", ".join(str(n) for n in sorted({r.named for r in kills if r.named})) or "none"
    if number is None:
        verdict = f"passed {len(runs) - len(kills)}/{len(runs)}"
    else:
        verdict = f"{sum(1 for r in kills if r.named in wanted)}/{len(runs)}"
    if crashed:
        verdict += f" ({crashed} oracle error{'s' if crashed > 1 else ''})"
    shown = "-" if number is None else "/".join(map(str, sorted(wanted)))
    calls = [float(r.calls) for r in kills if r.calls is not None]
    return (
        f"| {name} | {shown} | {named} | {verdict} | {spread([r.seconds for r in runs], '.1f')} "
        f"| {spread(calls, 'g')} | {spread([r.shrink_seconds for r in kills], '.1f')} |"
    )


HEADER = (
    "| class | expected | named | right kills | seconds to first failure | "
    "calls after shrinking | shrink seconds |\n|---|---|---|---|---|---|---|"
)


def zoo(name: str) -> tuple[dict[str, int | None], Callable[[str], set[int]]]:
    """The classes of the zoo ``name`` (each -> its property, None: correct) and, for each,
    the properties a kill may name to count as right.  A class is its target's text."""
    if name == "tests":  # every correct class in tests/ (tests/correct.py), with its shape
        from tests.correct import CORRECT as EVERY_CORRECT

        return {str(target): None for target in EVERY_CORRECT.values()}, lambda impl: set()
    if name == "strangers":
        from tests.strangers import BUGGY, CORRECT

        classes: dict[str, int | None] = {impl: None for impl in CORRECT}
        classes.update(BUGGY)
        return classes, lambda impl: {BUGGY[impl]} if impl in BUGGY else set()
    from tests.outside import OUTSIDE, expected

    return dict(OUTSIDE), expected


def label(impl: str, qualified: bool = False) -> str:
    """A class's name in the table: ``Class``, or ``module:Class`` in the tests zoo, or
    wherever two modules hold classes of one name (``qualified``)."""
    path = impl.removeprefix("impl:").split(";", 1)[0]
    module, _, cls = path.rpartition(":")
    short = qualified or impl.startswith("impl:")
    return f"{module.rpartition('.')[2]}:{cls}" if short else cls


def labels(impls: list[str]) -> dict[str, str]:
    """Each class's name in the table (``label``), qualified by its module where two
    classes share one, so that no class is left out."""
    counts = collections.Counter(label(impl) for impl in impls)
    return {label(impl, counts[label(impl)] > 1): impl for impl in impls}


def seed_list(text: str) -> list[int]:
    """``--seeds``: a comma list of integers (argparse reports anything else in one line)."""
    try:
        return [int(seed) for seed in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma list of integers") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", choices=("outside", "strangers", "tests"), default="outside",
                        help="tests: every correct class in tests/ (tests/correct.py)")
    parser.add_argument("--faults", default="all", help="as fuzz --faults takes it")
    parser.add_argument("--examples", type=int, default=300, help="at most, per seed")
    parser.add_argument("--seeds", type=seed_list, default="0,1,2,3,4", help="comma-separated")
    parser.add_argument("--shrink-budget", type=float, default=20.0, help="seconds per kill")
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    parser.add_argument("--correct", action="store_true", help="only the correct classes")
    parser.add_argument("--buggy", action="store_true", help="only the one-bug copies")
    parser.add_argument("names", nargs="*")
    args = parser.parse_args(argv)
    classes, expected = zoo(args.zoo)
    by_name = labels(list(classes))
    names = args.names or [
        name for name, impl in by_name.items()
        if not (args.correct and classes[impl] is not None)
        and not (args.buggy and classes[impl] is None)
    ]
    unknown = [name for name in names if name not in by_name]
    if unknown:
        print(f"bench/outside.py: no {args.zoo} class named {', '.join(unknown)}",
              file=sys.stderr)
        return 2
    seeds = args.seeds
    lines = [HEADER]
    print(HEADER, flush=True)
    for name in names:
        impl = by_name[name]
        runs = []
        for seed in seeds:
            run = measure(impl, seed, args.examples, args.shrink_budget, args.faults)
            runs.append(run)
            print(f"# {name} seed {run.seed}: property {run.named}, {run.examples} examples, "
                  f"{run.seconds:.1f} s, {run.calls} calls after {run.shrink_seconds:.1f} s "
                  f"shrinking; {run.detail}", file=sys.stderr, flush=True)
        line = row(name, expected(impl), classes[impl], runs)
        lines.append(line)
        print(line, flush=True)
    if args.out is not None:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
