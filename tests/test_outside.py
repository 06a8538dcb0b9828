"""The black-box oracle on outside implementations: vLLM-shaped classes it was not tuned to.

Each class of ``tests.outside.OUTSIDE`` is fuzzed as ``asynclookup fuzz --impl``
does (threaded, every fault, strict efficiency) through the oracle's public
Python API, with one or two seeds and bounded examples (bench/outside.py runs
five seeds).  A bug class must be killed with its expected property and shrink
to at most 8 calls; a correct class must pass.  Where the oracle does not do so
today, the case is a strict xfail whose reason says what it does instead, so
the fix flips it.
"""

from __future__ import annotations

from typing import Any

import pytest

from asynclookup.conformance.replay import shrink
from asynclookup.conformance.testcase import first_violation
from tests.outside import OUTSIDE, expected

SEEDS = (0, 1)
EXAMPLES = 100
SHRINK_BUDGET = 15.0  # seconds

# What the oracle does today where it falls short (measured with bench/outside.py).
# Not strict: these runs are threaded, and a lucky interleaving may pass.
TODAY: dict[str, str] = {
    "CleanupKeepsRequestIndex": (
        "names property 5: a Leftover is always 5, even when the table left is the "
        "request index (_by_request) and the rule broken is 4"
    ),
    "OrphanStateKept": (
        "survives seed 0; kills on other seeds name 2 but stay at 8-34 calls: with no "
        "results queue to settle on, the shrunk run does not reproduce at the full bound"
    ),
    "NonBoolCoerced": (
        "survives the fuzzer: it posts into a lock-protected dict, the adapter finds no "
        "results queue, so settle never waits and the next lookup runs before the post "
        "(None); given the post (a pause), the oracle names 7 rightly"
    ),
}
# Misdiagnoses that depend on the worker's timing (some runs of a seed name the right
# property): xfail, but not strict, or the test would flake.
BY_TIMING: dict[str, str] = {
    "LazyOutsideTry": (
        "some runs name property 3: classify.raised reads the worker's death (a TierFault "
        "escaping the worker thread) as a call due to apply a result mark_miss named"
    ),
}


def _param(impl: str) -> Any:
    name = impl.rpartition(":")[2]
    if name in TODAY:
        mark = pytest.mark.xfail(strict=False, reason=TODAY[name])
        return pytest.param(impl, id=name, marks=mark)
    if name in BY_TIMING:
        return pytest.param(impl, id=name, marks=pytest.mark.xfail(reason=BY_TIMING[name]))
    return pytest.param(impl, id=name)


BUGGY = [_param(impl) for impl, number in OUTSIDE.items() if number is not None]
CORRECT = [pytest.param(impl, id=impl.rpartition(":")[2])
           for impl, number in OUTSIDE.items() if number is None]


@pytest.mark.parametrize("impl", BUGGY)
def test_bug_class_is_killed_with_its_property_in_8_calls(impl: str) -> None:
    """A one-bug outside class is killed with the property its docstring names, and the
    kill shrinks to a counterexample of at most 8 calls."""
    wanted = expected(impl)
    lengths: list[int] = []
    # a known shortfall needs one seed to show (it fails the same way on the next)
    for seed in SEEDS[:1] if impl.rpartition(":")[2] in TODAY else SEEDS:
        error = first_violation(impl, seed=seed, examples=EXAMPLES)
        if error is None:
            continue
        assert error.violation.number in wanted, str(error)
        shrunk = shrink(error, SHRINK_BUDGET)
        assert shrunk.violation.number in wanted, str(shrunk)
        lengths.append(len(shrunk.calls))
        if len(shrunk.calls) <= 8:
            return
    assert lengths, f"{impl} survived {EXAMPLES} examples on seeds {SEEDS}"
    raise AssertionError(f"{impl}: no kill shrank to 8 calls or fewer: {lengths}")


@pytest.mark.parametrize("impl", CORRECT)
def test_correct_class_passes_all_faults_strict(impl: str) -> None:
    """A correct outside class passes with every tier fault and strict efficiency."""
    error = first_violation(impl, seed=1, examples=EXAMPLES, faults="all", strict_efficiency=True)
    assert error is None, str(error)


def test_every_outside_class_is_listed_with_a_reason() -> None:
    """At least ten bug classes and two correct ones, each with a docstring giving its reason."""
    import importlib

    assert sum(1 for n in OUTSIDE.values() if n is not None) >= 10
    assert sum(1 for n in OUTSIDE.values() if n is None) >= 2
    for impl in OUTSIDE:
        module, _, name = impl.partition(":")
        cls = getattr(importlib.import_module(module), name)
        assert cls.__doc__ and ("property" in cls.__doc__.lower() or OUTSIDE[impl] is None), impl
