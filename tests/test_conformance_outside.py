"""The black-box oracle on outside implementations: vLLM-shaped classes it was not tuned to.

Each class of ``tests.outside.OUTSIDE`` is fuzzed as ``asynclookup fuzz --impl``
does (threaded, every fault, strict efficiency) through the oracle's public
Python API, on the first of seeds 0-2 that kills, with bounded examples (bench/outside.py runs
five seeds).  A bug class must be killed with its expected property and shrink
to at most 8 calls; a correct class must pass.  No case is an expected failure.

Cost: a kill takes 0.1-10 s to find and 0.1-15 s to shrink (the shrink budget
bounds it; a seed that survives its 300 examples costs about 10 s more), a
correct class about 4 s; the 25 cases took 99-191 s in all on the loaded
2-core machine (``--durations``: at most 29 s for one, NonBoolCoerced).
"""

from __future__ import annotations

import pytest

from asynclookup.conformance.counterexample import ConformanceError
from asynclookup.conformance.replay import open_replay, replay, settle_name, shrink
from asynclookup.conformance.testcase import first_violation
from tests.outside import OUTSIDE, expected

SEEDS = (0, 1, 2)
EXAMPLES = 300  # at most, per seed, for a bug class
CORRECT_EXAMPLES = 100
SHRINK_BUDGET = 15.0  # seconds

BUGGY = [pytest.param(impl, id=impl.rpartition(":")[2])
         for impl, number in OUTSIDE.items() if number is not None]
CORRECT = [pytest.param(impl, id=impl.rpartition(":")[2])
           for impl, number in OUTSIDE.items() if number is None]


@pytest.mark.parametrize("impl", BUGGY)
def test_bug_class_is_killed_with_its_property_in_8_calls(impl: str) -> None:
    """A one-bug outside class is killed with the property its docstring names, and the
    kill shrinks to a counterexample of at most 8 calls (the first seed that kills
    decides; a later seed is tried only when one survives its examples)."""
    wanted = expected(impl)
    for seed in SEEDS:
        error = first_violation(impl, seed=seed, examples=EXAMPLES)
        if error is None:
            continue
        assert error.violation.number in wanted, str(error)
        shrunk = shrink(error, SHRINK_BUDGET)
        assert shrunk.violation.number in wanted, str(shrunk)
        assert len(shrunk.calls) <= 8, f"{shrunk}\n{shrunk.shrink_report}"
        return
    raise AssertionError(f"{impl} survived {EXAMPLES} examples on seeds {SEEDS}")


@pytest.mark.parametrize("impl", CORRECT)
def test_correct_class_passes_all_faults_strict(impl: str) -> None:
    """A correct outside class passes with every tier fault and strict efficiency."""
    error = first_violation(impl, seed=1, examples=CORRECT_EXAMPLES, faults="all",
                            strict_efficiency=True)
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


def test_a_tier_call_held_at_the_leak_check_is_judged_before_the_leftover() -> None:
    """C's k1 entry goes stale (mark_present); this copy submits it anyway, and the
    cleanup of C leaves the spec empty while the worker's call for it waits in the
    oracle's tier.  The leak check judges that call first (a stale entry submitted,
    property 1) rather than asking again at once, which the class's kept probe
    answered with its verdict (2) on a seed of the kill table."""
    impl = "tests.outside.callback_style:StaleBesideLive"
    driver = open_replay(f"impl:{impl}", mode="threaded", strict_efficiency=True)
    with pytest.raises(ConformanceError) as found:
        try:
            driver.lookup(b"k1", "C")
            driver.mark_present([b"k1"])
            driver.flush()
            driver.cleanup("C")  # the spec is empty: the leak check runs
        finally:
            driver.close()
    assert found.value.violation.number == 1, str(found.value)
    assert [c.method for c in found.value.calls][-1] == "answer", str(found.value)


def test_a_tier_call_waiting_before_a_wrong_verdict_is_judged_first() -> None:
    """A's k0 entry goes stale (mark_present) and this copy's flush submits it anyway,
    marking its probe in flight, so its mark_miss skips the probe and B is handed True
    where the spec's verdict is False.  The stale entry's tier call was already waiting
    in the oracle's tier: ``settle_name`` answers it in the run's place, and that
    shorter run, property 1, is the finding (a seed of the kill table named it 2)."""
    config = {"target": "impl:tests.outside.callback_style:RevalidateAnyState",
              "mode": "threaded", "tier": "memory", "strict_efficiency": True}
    error = replay(config, [
        ("lookup", (b"k0", "A")), ("mark_present", ([b"k0"],)), ("flush", ()),
        ("mark_miss", ([b"k0"],)), ("lookup", (b"k0", "B")),
    ])
    assert error is not None and error.violation.number == 2, str(error)
    settled = settle_name(error)
    assert settled.violation.number == 1, str(settled)
    assert [c.method for c in settled.calls][-1] == "answer", str(settled)


def _orphan_kept(impl: str) -> ConformanceError | None:
    """A's k0 answered and posted (the results queue counted it), then A cleaned up
    while its probe is in flight: the spec's orphan goes with its result, and the
    leak check runs as the machine runs it before its next rule."""
    driver = open_replay(f"impl:{impl}", mode="threaded", strict_efficiency=True)
    try:
        driver.lookup(b"k0", "A")
        driver.flush()
        driver.answer()
        driver.settle()
        driver.cleanup("A")
        driver.await_empty()
        driver.ask_about_leftover()
        driver.shutdown()
    except ConformanceError as error:
        return error
    finally:
        driver.close()
    return None


def test_a_held_probe_is_asked_about_as_soon_as_the_hint_says_it_was_posted() -> None:
    """The results queue's count says the worker posted; one drain leaves a probe in the
    class's tables where the spec holds none: a new request asks for its key at once
    and is handed the kept verdict (property 2), instead of after the leak check's
    3 s of re-asking."""
    error = _orphan_kept("tests.outside.condition_style:OrphanStateKept")
    assert error is not None and error.violation.number == 2, str(error)
    assert [(c.method, c.args) for c in error.calls][-2:] == [
        ("await_empty", ("first",)), ("lookup", (b"k0", "asked-again"))], str(error)
    assert not any("re-asked for" in c.text for c in error.calls), str(error)


def test_the_correct_class_passes_the_same_calls() -> None:
    """Its drain applies the orphan's result, which deletes the probe: nothing to ask."""
    assert _orphan_kept("tests.outside.condition_style:ConditionManager") is None
