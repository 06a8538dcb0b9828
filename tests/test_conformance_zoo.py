"""The black-box oracle against vLLM-shaped classes: the mutant zoo, --impl, the CI factory.

Every mutant of ``tests.zoo.mutants`` is fuzzed through ``asynclookup fuzz
--impl`` (in-process) in threaded mode with a fixed seed and a bounded number
of examples, and must be killed with its expected property.  The correct
class passes with every fault and strict efficiency.  Classes written to
``tmp_path`` stand for a user's code outside the project.
"""

from __future__ import annotations

import json
import textwrap
import unittest
import weakref
from pathlib import Path
from typing import Any

import pytest

from asynclookup.cli import main
from asynclookup.conformance.counterexample import ConformanceError
from asynclookup.conformance.driver import Driver
from asynclookup.conformance.replay import open_replay, shrink
from asynclookup.conformance.targets.vllm import impl_factory
from asynclookup.conformance.testcase import conformance_test_case, first_violation
from tests.conftest import write_module
from tests.zoo.mutants import MUTANTS

# Threaded runs do not replay exactly (the worker's timing steers the machine's
# preconditions), so each mutant gets seeds tried in order, each a bounded run.
SEEDS = (0, 1, 2, 3, 4, 5)
EXAMPLES = 200
SHRINK_BUDGET = 30.0  # seconds; threaded shrinking takes 0.1-5 s
# mutants that take the oracle longest (over ~15 s on 2 cores): still run in CI
SLOW = {
    "ResultsAppliedByKey", "LookupNeverDrains", "OneContextPerBatch",
    "ZipTruncatesShortAnswers", "CleanupDeletesInFlight",
}
# rarer kills get more seeds (ResultsAppliedByKey needs cleanup, mark_present and a
# new lookup between its probe's flush and its result)
MORE_SEEDS: dict[str, tuple[int, ...]] = {"ResultsAppliedByKey": tuple(range(16))}

# Mutants whose first visible symptom is another property's than MUTANTS names, or
# whose bug docs/properties.md lists under two properties: the oracle may name either.
# (MUTANTS stays as it is: tests/test_trace_zoo.py pins it too.)
ALSO_NAMED: dict[str, set[int]] = {
    # no new generation, so the superseded batch entry passes the flush: submitted (1);
    # or the old probe's result matches, and the IUT's once-only assertion trips (3)
    "MarkPresentKeepsGeneration": {1, 3},
    # a reused generation lets a stale batch entry pass the flush: submitted (1); or a
    # stale result matches the new probe, and the IUT's once-only assertion trips (3)
    "GenerationFromTableSize": {1, 3},
    # property 4 is not observable from outside; the leak check sees the index left
    # behind once every request is cleaned up (5)
    "CleanupKeepsIndex": {5},
    # docs/properties.md: "results applied by key only" breaks properties 2 and 3
    "ResultsAppliedByKey": {3},
    # docs/properties.md: the dying worker breaks 7 and 6; a dead worker is seen either as
    # its uncaught exception (7) or as a tier call that never comes (6), by timing
    "LazyIterableKillsWorker": {6},
    # the resurrected orphan is seen either by the leak check (5) or, from outside,
    # as a later request receiving the deleted probe's verdict (2)
    "OrphanResultResurrects": {2},
    # the undrained item is seen either as a verdict not delivered (6) or, once every
    # request is cleaned up, as the orphaned probe it keeps alive (5)
    "DrainStopsAtFirstBatch": {5},
}

BASE = "from tests.zoo.vllm_shaped import VllmShapedManager\n"
OUTSIDE = BASE + textwrap.dedent('''
    class ShippedManager(VllmShapedManager):
        """The seed's bug: flush submits every batched entry."""

        def batch_lookup(self, keys, req_context):
            return [False] * len(keys)

        def _revalidate(self, batch):
            return [e for e in batch if e[0] in self._lookup_state]


    class FixedManager(ShippedManager):
        """The same class with the seed's fix."""

        def _revalidate(self, batch):
            return VllmShapedManager._revalidate(self, batch)
''')
RAISES = BASE + textwrap.dedent('''
    class RaisingManager(VllmShapedManager):
        def lookup(self, key, req_context):
            raise KeyError("boom")
''')
SILENT = BASE + textwrap.dedent('''
    class SilentWorker(VllmShapedManager):
        def _worker(self):
            while self._lookup_queue.get() is not None:
                pass  # takes every batch, never calls the tier
''')
NO_TABLES = textwrap.dedent('''
    class Bare:
        def __init__(self, tier_type): ...
        def batch_lookup(self, keys, req_context): ...
        def lookup(self, key, req_context): ...
        def flush(self): ...
        def cleanup(self, req_id): ...
        def drain_results(self): ...
        def shutdown(self): ...
''')
NO_MARKS = BASE + textwrap.dedent('''
    class NoMarks(VllmShapedManager):
        def batch_lookup(self, keys, req_context):
            return [False] * len(keys)

        mark_miss = None  # not callable: the class has no mark_miss
        mark_present = None
''')
NO_SHUTDOWN = textwrap.dedent('''
    class NoShutdown:
        def __init__(self, tier_type): ...
        def batch_lookup(self, keys, req_context): ...
        def lookup(self, key, req_context): ...
        def flush(self): ...
        def cleanup(self, req_id): ...
        def drain_results(self): ...
''')


def _fuzz(capsys: pytest.CaptureFixture[str], impl: str, *options: str) -> tuple[int, Any]:
    code = main(["fuzz", "--impl", impl, "--json", *options])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else None


def _mark(name: str) -> Any:
    return pytest.param(name, marks=[pytest.mark.slow] if name in SLOW else [])


def _kill(impl: str) -> ConformanceError | None:
    for seed in MORE_SEEDS.get(impl.rpartition(":")[2], SEEDS):
        error = first_violation(impl, seed=seed, examples=EXAMPLES)
        if error is not None:
            return error
    return None


# A drain that applies one posted batch per call looks, from outside, like a worker
# that posts late: each re-ask drains one more batch and the verdict shows within the
# bound.  The oracle names it only where later tier calls prove the posts happened
# (docs/oracle.md, "How it judges"); random runs rarely build that, so it is pinned by
# test_drain_that_stops_at_the_first_batch_is_seen_when_posts_are_proven instead.
UNSEEN_BY_FUZZING = {"DrainStopsAtFirstBatch"}


@pytest.mark.parametrize(
    "name", [_mark(name) for name in sorted(MUTANTS) if name not in UNSEEN_BY_FUZZING]
)
def test_mutant_is_killed_with_its_property(name: str) -> None:
    """Each mutant is killed within its bounded run, every kill names an expected
    property, and a kill shrinks to a counterexample of at most 8 calls.

    A threaded kill can hinge on when the worker posted: when a tier call is still
    owed behind it, no settle can pin that moment, and the shrinker keeps the calls
    that gave the worker its time.  So a kill that does not shrink to 8 calls lets
    the next seed try.
    """
    impl = f"tests.zoo.mutants:{name}"
    expected = {MUTANTS[name], *ALSO_NAMED.get(name, set())}
    kills: list[int] = []
    for seed in MORE_SEEDS.get(name, SEEDS):
        error = first_violation(impl, seed=seed, examples=EXAMPLES)
        if error is None:
            continue
        assert error.violation.number in expected, str(error)
        shrunk = shrink(error, SHRINK_BUDGET)
        kills.append(len(shrunk.calls))
        if len(shrunk.calls) <= 8:
            return
    assert kills, f"{name} survived {EXAMPLES} examples for each seed tried"
    raise AssertionError(f"{name}: no kill shrank to 8 calls or fewer: {kills}")


def test_correct_class_passes_all_faults_strict(capsys: pytest.CaptureFixture[str]) -> None:
    """The correct vLLM-shaped class passes with every tier fault and strict efficiency."""
    code, result = _fuzz(
        capsys, "tests.zoo.vllm_shaped:VllmShapedManager",
        "--faults", "all", "--strict-efficiency", "--seed", "1", "--examples", "100",
    )
    assert code == 0, result["violation"]


def test_outside_class_with_shipped_bug_is_killed(outside: Path) -> None:
    """A class in a file outside the project with the seed's bug is killed on property 1."""
    module = write_module(outside, "user_manager_shipped", OUTSIDE)
    error = _kill(f"{module}:ShippedManager")
    assert error is not None
    assert error.violation.number == 1


def test_outside_class_fixed_passes(outside: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same outside class with the fix passes with every fault."""
    module = write_module(outside, "user_manager_fixed", OUTSIDE)
    code, result = _fuzz(capsys, f"{module}:FixedManager", "--seed", "0", "--examples", "100")
    assert code == 0, result["violation"]


def test_import_failure_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """--impl naming a module that does not import exits 2 with one line on stderr."""
    code = main(["fuzz", "--impl", "no_such_module_xyz:Manager"])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "cannot import" in err


def test_shape_misfit_names_what_is_missing(
    outside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--impl naming a class without shutdown exits 2 with one line naming shutdown."""
    module = write_module(outside, "user_no_shutdown", NO_SHUTDOWN)
    code = main(["fuzz", "--impl", f"{module}:NoShutdown"])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "shutdown" in err


def test_calls_a_class_lacks_are_not_generated(
    outside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A class without mark_miss and mark_present passes: neither is ever called on it."""
    module = write_module(outside, "user_no_marks", NO_MARKS)
    code, result = _fuzz(capsys, f"{module}:NoMarks", "--seed", "0", "--examples", "60")
    assert code == 0, result["violation"]
    assert result["not_generated"] == ["after_shutdown", "mark_miss", "mark_present"]
    assert result["leak_check"] is True


def test_calls_not_generated_are_said(outside: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The text output names the calls a class lacks, and calls after shutdown()."""
    module = write_module(outside, "user_no_marks_said", NO_MARKS)
    main(["fuzz", "--impl", f"{module}:NoMarks", "--seed", "0", "--examples", "3"])
    out = capsys.readouterr().out
    assert "not generated: mark_miss, mark_present, calls after shutdown()" in out


def test_no_call_after_shutdown_is_generated(monkeypatch: pytest.MonkeyPatch) -> None:
    """For a vLLM-shaped class the machine makes no call on an IUT after its shutdown()."""
    after: list[str] = []
    shut: weakref.WeakSet[Driver] = weakref.WeakSet()
    for name in ("lookup", "flush", "cleanup", "mark_miss", "mark_present",
                 "drain_results", "shutdown"):
        original = getattr(Driver, name)

        def watched(self: Driver, *args: Any, _original: Any = original, _name: str = name,
                    **kwargs: Any) -> None:
            if self in shut:
                after.append(_name)
            _original(self, *args, **kwargs)
            if _name == "shutdown":
                shut.add(self)

        monkeypatch.setattr(Driver, name, watched)
    assert first_violation("tests.zoo.vllm_shaped:VllmShapedManager", seed=3, examples=40) is None
    assert shut and not after


def test_leak_check_off_is_said(outside: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A class with no table that holds a looked-up key is reported with the leak check
    off, and the line says why and which option would turn it on."""
    module = write_module(outside, "user_bare", NO_TABLES)
    main(["fuzz", "--impl", f"{module}:Bare", "--seed", "0", "--examples", "1"])
    assert (
        "leak check (properties 4, 5): OFF (no attribute of the class holds the looked-up key "
        "after lookup(): name its tables with --tables" in capsys.readouterr().out
    )


def test_iut_exception_is_property_7_with_its_place(outside: Path) -> None:
    """An exception raised by an IUT method is property 7, and the report says where."""
    module = write_module(outside, "user_raising", RAISES)
    driver = Driver(impl_factory(f"{module}:RaisingManager"), mode="threaded")
    try:
        with pytest.raises(ConformanceError) as found:
            driver.lookup(b"k0", "A")
    finally:
        driver.close()
    assert found.value.violation.number == 7
    assert "user_raising.py:" in found.value.violation.detail


def test_tier_call_that_never_comes_is_a_finding(outside: Path) -> None:
    """A worker that takes a batch and never calls the tier is found by the bounded wait."""
    module = write_module(outside, "user_silent", SILENT)
    driver = Driver(impl_factory(f"{module}:SilentWorker"), mode="threaded")
    driver.lookup(b"k0", "A")
    driver.flush()
    try:
        with pytest.raises(ConformanceError) as found:
            driver.answer()
    finally:
        driver.close()
    assert found.value.violation.number == 6


def test_factory_test_case_passes_on_correct_class() -> None:
    """conformance_test_case gives a TestCase that passes on the correct class."""
    case = conformance_test_case(
        "tests.zoo.vllm_shaped:VllmShapedManager", faults="all", examples=30, seed=1
    )
    outcome = unittest.TextTestRunner(stream=_Null(), verbosity=0).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(case)
    )
    assert outcome.wasSuccessful()


def test_factory_test_case_fails_on_mutant() -> None:
    """conformance_test_case gives a TestCase that fails on a mutant with the numbered,
    shrunk counterexample naming the property."""
    case = conformance_test_case(
        "tests.zoo.mutants:MarkMissForcesResolved", examples=EXAMPLES, seed=0
    )
    outcome = unittest.TextTestRunner(stream=_Null(), verbosity=0).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(case)
    )
    assert len(outcome.failures) == 1
    report = outcome.failures[0][1]
    assert "property 3 (exactly once)" in report and "  1. lookup(" in report


def test_factory_rejects_a_misfit_at_once() -> None:
    """conformance_test_case raises ValueError when the class cannot be driven."""
    with pytest.raises(ValueError, match="cannot import"):
        conformance_test_case("no_such_module_xyz:Manager")


class _Null:
    """A stream that swallows the runner's output."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def test_drain_that_stops_at_the_first_batch_is_seen_when_posts_are_proven() -> None:
    """Three batches answered in turn prove the first two were posted (a worker takes a
    batch only after posting the last): a drain that applies only the first is then
    property 6 at once, with no re-ask needed."""
    driver = open_replay("impl:tests.zoo.mutants:DrainStopsAtFirstBatch", mode="threaded")
    try:
        with pytest.raises(ConformanceError) as caught:
            for key in (b"k0", b"k1", b"k2"):
                driver.lookup(key, "A")
                driver.flush()
            driver.catch_up()
            driver.drain_results()
            driver.lookup(b"k1", "A")
    finally:
        driver.close()
    assert caught.value.violation.number == 6, str(caught.value)
    assert "lookup(b'k1', 'A') returned None" in caught.value.violation.detail
