"""Shapes near vLLM's, driven without an adapter: one correct class and one bug each.

The options: --method (cleanup=none included), --cleanup-arg, --verdicts,
--impl-arg (constructor arguments), --drain-before-lookup; and worker pools.

Each shape of ``tests/shapes/`` has a correct class, which passes with every
fault and strict efficiency, and a class with one planted bug, which is killed
with its property, through the oracle's Python API with bounded examples.  A
class that does not fit exits 2 with one line naming what is missing and the
option that would fit it.  The adapter's ``threading.excepthook`` lives only
as long as an adapter does.
"""

from __future__ import annotations

import json
import threading
import unittest
from typing import Any

import pytest
from hypothesis.errors import FlakyStrategyDefinition

from asynclookup.cli import main
from asynclookup.conformance.counterexample import ConformanceError
from asynclookup.conformance.driver import Driver
from asynclookup.conformance.replay import replay
from asynclookup.conformance.targets.adapter import Plan
from asynclookup.conformance.targets.threads import hook_users
from asynclookup.conformance.targets.vllm import impl_factory, impl_spec
from asynclookup.conformance.testcase import conformance_test_case, first_violation
from tests.shapes.all_renamed import EVERY_NAME
from tests.shapes.pool import PooledWithoutJoin

SEEDS = (0, 1, 2, 3, 4)
EXAMPLES = 150
TO_BOOL = "tests.shapes.verdicts:to_bool"

# (correct class, buggy class, options that fit both, properties the bug may be named by)
SHAPES: dict[str, tuple[str, str, dict[str, Any], set[int]]] = {
    "renamed": ("renamed:Invalidating", "renamed:InvalidatingForcesResolved",
                {"methods": "mark_miss=invalidate"}, {3}),
    # the orphaned probe is submitted (1), its verdict reaches a later request (2), or it
    # is left behind once every request is cleaned up (5)
    "context": ("context_cleanup:ContextCleanup", "context_cleanup:ContextCleanupKeepsOrphans",
                {"cleanup_arg": "context"}, {1, 2, 5}),
    "enum": ("verdicts:EnumVerdicts", "verdicts:EnumVerdictsUnvalidated",
             {"verdicts": TO_BOOL}, {1}),
    "ints": ("verdicts:IntVerdicts", "verdicts:IntVerdictsUnvalidated",
             {"verdicts": "tests.shapes.verdicts:int_to_bool"}, {1}),
    # the keys zip drops stay IN_FLIGHT: never delivered (6), or left once all cleaned up (5)
    "pool": ("pool:Pooled", "pool:PooledZipTruncates", {}, {6, 5}),
    # no cleanup: a result mark_present made stale still lands (2); the correct class
    # passing also shows that no cleanup was generated (its adapter would raise: 7)
    "no-cleanup": ("no_cleanup:NoCleanup", "no_cleanup:NoCleanupAppliesByKey",
                   {"methods": "cleanup=none"}, {2}),
    # a pool size given to the constructor; one thread, so the twin's zip bug is 6 (or 5)
    "sized": ("sized:SizedPool", "sized:SizedPoolZipTruncates",
              {"args": {"n_lookup_threads": 1}}, {6, 5}),
    # the scheduler drains before each lookup; the twin applies results by key (2)
    "drained": ("drained:NeedsDrain", "drained:NeedsDrainAppliesByKey",
                {"drain_before_lookup": True}, {2}),
    # each result of a call posted on its own, 2 ms apart; the twin never posts a call's
    # last result: a verdict that never comes (6)
    "per-result": ("per_result:OnePerPost", "per_result:OnePerPostDropsLast", {}, {6}),
}


def _spec(name: str, options: dict[str, Any]) -> str:
    return impl_spec(f"tests.shapes.{name}", **options)


def _kill(spec: str, seeds: tuple[int, ...] = SEEDS, faults: str = "all",
          wanted: set[int] | None = None) -> ConformanceError | None:
    """The first kill over ``seeds`` (naming one of ``wanted``, if given).

    A threaded run whose replay Hypothesis finds inconsistent (the worker's timing
    differed) counts as no kill for that seed.
    """
    error = None
    for seed in seeds:
        try:
            error = first_violation(spec, seed=seed, examples=EXAMPLES, faults=faults)
        except FlakyStrategyDefinition:
            continue
        if error is not None and (wanted is None or error.violation.number in wanted):
            return error
    return error


def _fuzz(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["fuzz", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_correct_class_of_each_shape_passes(shape: str) -> None:
    """The correct class of each shape passes with every fault and strict efficiency."""
    correct, _, options, _ = SHAPES[shape]
    assert first_violation(_spec(correct, options), seed=1, examples=60, faults="all") is None


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_buggy_class_of_each_shape_is_killed(shape: str) -> None:
    """The class with a planted bug is killed, naming its property."""
    _, buggy, options, expected = SHAPES[shape]
    error = _kill(_spec(buggy, options))
    assert error is not None, f"{buggy} survived every seed"
    assert error.violation.number in expected, str(error)


class GatedPoolWithoutJoin(PooledWithoutJoin):
    """``PooledWithoutJoin`` whose pool thread holds request A's results until ``gate`` is
    set, and says when request B's are posted: the test, not the scheduler's luck, decides
    when each group is posted."""

    def __init__(self, tier_type: str) -> None:
        self.gate = threading.Event()
        self.posted_b = threading.Event()
        super().__init__(tier_type)

    def _serve(self) -> None:
        while (item := self._work.get()) is not None:
            group, left = item
            results = self._probe(group)
            if group[0].req_id == "A":
                self.gate.wait(10)
            self._done.put(results)
            if group[0].req_id == "B":
                self.posted_b.set()
            left.done()


def test_pool_that_takes_batches_concurrently_is_killed() -> None:
    """A pool that takes the next batch before the last one's groups are posted is not the
    spec's one worker: here A's group is answered and held unposted while the next batch
    (B's) is taken, probed and posted, so a drain applies B's verdict and not A's, which
    one worker never does (it posts A before it takes B's batch): property 6, A's computed
    verdict not delivered.  Deterministic: events order the posts (a few ms)."""
    driver = Driver(impl_factory(f"{__name__}:GatedPoolWithoutJoin"), mode="threaded")
    manager = driver.target.manager  # type: ignore[attr-defined]
    try:
        driver.lookup(b"k0", "A")
        driver.flush()
        driver.answer(Plan(bits=(True,)))  # A's group: answered, its post held at the gate
        driver.lookup(b"k1", "B")
        driver.flush()  # the bug: the dispatcher takes this batch at once
        driver.answer(Plan(bits=(True,)))  # B's group, probed while A's is unposted
        driver.tier.release()  # hand B's answer over (the oracle's next wait would)
        assert manager.posted_b.wait(5)
        driver.lookup(b"k1", "B")  # drains B's result: True
        with pytest.raises(ConformanceError) as caught:
            driver.lookup(b"k0", "A")  # A's result was never posted: None
    finally:
        manager.gate.set()
        driver.close()
    assert caught.value.violation.number == 6, str(caught.value)
    assert "lookup(b'k0', 'A') returned None" in caught.value.violation.detail


def test_pool_thread_killed_by_the_tier_is_property_7_with_its_place() -> None:
    """A pool thread that dies of a raising tier is watched like a lone worker: property 7,
    naming the line it died at, or, when a wait for its post saw it first, that the
    thread is gone."""
    error = _kill("tests.shapes.pool:PooledDiesOnRaise", faults="raise", wanted={7})
    assert error is not None and error.violation.number == 7, str(error)
    detail = error.violation.detail
    assert "pool.py:" in detail or "its thread is gone" in detail, detail


def test_pool_threads_are_the_workers() -> None:
    """Every thread a pooled class starts is watched: four here (a dispatcher and three)."""
    driver = Driver(impl_factory("tests.shapes.pool:Pooled"), mode="threaded")
    try:
        assert len(driver.target.threads) == 4  # type: ignore[attr-defined]
        assert driver.target.worker_alive()
    finally:
        driver.close()


def test_renamed_call_is_made_under_its_new_name() -> None:
    """With --method mark_miss=invalidate, mark_miss is generated and reaches invalidate."""
    spec = _spec("renamed:Invalidating", {"methods": "mark_miss=invalidate"})
    driver = Driver(impl_factory(spec), mode="threaded")
    try:
        assert "mark_miss" in driver.supports
        driver.lookup(b"k0", "A")
        driver.flush()
        driver.catch_up()
        driver.lookup(b"k0", "A")
        driver.mark_miss([b"k0"])
        driver.lookup(b"k0", "A")
        assert driver.calls[-1].text == "lookup(b'k0', 'A') -> False"
    finally:
        driver.close()


def test_options_travel_with_the_target_into_replays() -> None:
    """A kill's target names its options, so a replay of its calls builds the same adapter
    and breaks the same property."""
    spec = _spec("renamed:InvalidatingForcesResolved", {"methods": "mark_miss=invalidate"})
    error = _kill(spec)
    assert error is not None
    assert str(error.config["target"]) == "impl:" + spec
    steps = [(c.method, c.args) for c in error.calls]
    again = next((e for _ in range(5) if (e := replay(error.config, steps)) is not None), None)
    assert again is not None and again.violation.number == error.violation.number


@pytest.mark.parametrize(("impl", "options", "said"), [
    ("renamed:Invalidating", (),
     "has no method mark_miss; it has invalidate: try --method mark_miss=invalidate"),
    ("renamed:Invalidating", ("--method", "mark_miss=revoke"),
     "has no method revoke (named by --method mark_miss=revoke); it has invalidate"),
    ("context_cleanup:ContextCleanup", (),
     "cleanup(req_context) looks like it takes the request context: try --cleanup-arg context"),
    ("verdicts:EnumVerdicts", (),
     "answered <Verdict.UNKNOWN: 'unknown'> for a key never looked up (the spec's None): map "
     "its verdicts to True/False/None with --verdicts MODULE:FUNC"),
    ("verdicts:IntVerdicts", (),
     "answered -1 for a key never looked up"),
    ("verdicts:IntVerdicts", ("--verdicts", "tests.shapes.verdicts:to_bool"),
     "--verdicts tests.shapes.verdicts:to_bool: raised KeyError on -1"),
    ("verdicts:EnumVerdicts", ("--verdicts", "tests.shapes.verdicts:nothing"),
     "--verdicts tests.shapes.verdicts:nothing: tests.shapes.verdicts has no function nothing"),
    ("own_names:OwnNames", ("--method", "flush=submit"),
     "has no method submit (named by --method flush=submit)"),
    ("own_names:OwnNames", ("--method", "flushh=submit"), "'flushh' is not a protocol call"),
    ("own_names:OwnNames", ("--method", "lookup=none"), "lookup is required"),
    ("own_names:OwnNames", ("--method", "lookup=flush"),
     "OwnNames.flush would be both lookup and flush"),
    ("no_cleanup:NoCleanup", (),
     "NoCleanup has no method cleanup (or --method cleanup=none if it has no such call)"),
    ("sized:SizedPool", (), "SizedPool cannot be constructed with one argument (tier_type: "
     "str): missing a required argument: 'n_lookup_threads': give --impl-arg "
     "n_lookup_threads=VALUE"),
    # the hint names every call the class renames, those already given too: one option
    ("all_renamed:AllRenamed", ("--method", "lookup=query,flush=end_step"),
     f"try --method {EVERY_NAME} (or --method cleanup=none,mark_miss=none,mark_present=none"),
    ("all_renamed:AllRenamed", ("--method", "lookup=query,flush=end_step,cleanup=release,"
                                "drain_results=collect,shutdown=close,mark_miss=invalidate"),
     f"has no method batch_lookup, mark_present; it has probe_batch, mark_stored: "
     f"try --method {EVERY_NAME} (or --method mark_present=none"),
])
def test_a_class_that_does_not_fit_exits_2_with_the_option_that_would(
    capsys: pytest.CaptureFixture[str], impl: str, options: tuple[str, ...], said: str
) -> None:
    """A misfit exits 2 with one line saying what is missing and which option fits."""
    code, _, err = _fuzz(capsys, "--impl", f"tests.shapes.{impl}", *options)
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert said in err, err


def test_a_class_without_the_call_opts_out_with_none(capsys: pytest.CaptureFixture[str]) -> None:
    """--method mark_miss=none: the class has no mark_miss, invalidate is not it."""
    code, out, _ = _fuzz(capsys, "--impl", "tests.shapes.renamed:Invalidating", "--method",
                         "mark_miss=none", "--examples", "3", "--seed", "0", "--json")
    assert code == 0
    assert "mark_miss" in json.loads(out)["not_generated"]


@pytest.mark.parametrize("flag", [("--method", "mark_miss=x"), ("--cleanup-arg", "context"),
                                  ("--verdicts", "m:f"), ("--tables", "none")])
def test_shape_options_need_impl(capsys: pytest.CaptureFixture[str], flag: tuple[str, str]) -> None:
    """A shape option without --impl exits 2 saying it belongs to --impl."""
    code, _, err = _fuzz(capsys, *flag)
    assert code == 2
    assert f"{flag[0]} is an option of --impl" in err


def test_cli_runs_a_renamed_context_enum_class(capsys: pytest.CaptureFixture[str]) -> None:
    """All three options at once, on the command line: the run is judged and passes."""
    code, out, _ = _fuzz(
        capsys, "--impl", "tests.shapes.context_cleanup:ContextCleanup", "--cleanup-arg",
        "context", "--method", "drain_results=drain_results", "--examples", "20", "--seed", "2",
    )
    assert code == 0, out
    assert "impl:tests.shapes.context_cleanup:ContextCleanup;method=drain_results=drain_results;"\
        "cleanup-arg=context" in out


def test_a_class_that_drains_only_when_told_is_property_6_without_the_option() -> None:
    """NeedsDrain's lookup never applies posted results; the protocol's first lookup after
    a flush does, so without --drain-before-lookup a verdict the worker's next tier call
    proves posted is missing (property 6); with it the class passes (SHAPES)."""
    error = _kill(_spec("drained:NeedsDrain", {}), wanted={6})
    assert error is not None and error.violation.number == 6, str(error)


def test_the_drain_before_lookup_is_made_by_the_adapter() -> None:
    """With --drain-before-lookup a posted verdict shows at the next lookup, no re-ask."""
    spec = _spec("drained:NeedsDrain", {"drain_before_lookup": True})
    driver = Driver(impl_factory(spec), mode="threaded")
    try:
        driver.lookup(b"k0", "A")
        driver.flush()
        driver.catch_up([Plan("proper", (True, True, True))])
        manager = driver.target.manager  # type: ignore[attr-defined]
        assert manager._done.qsize() == 1  # posted, not applied: the class's flush drained
        driver.lookup(b"k0", "A")
        assert driver.calls[-1].text == "lookup(b'k0', 'A') -> True"
    finally:
        driver.close()


def test_a_class_without_cleanup_is_never_sent_one_and_the_report_says_what_is_lost(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--method cleanup=none: no cleanup is generated (the JSON's not_generated), and the
    coverage line names the properties a run without cleanups cannot check."""
    argv = ("--impl", "tests.shapes.no_cleanup:NoCleanup", "--method", "cleanup=none",
            "--examples", "15", "--seed", "0")
    code, out, _ = _fuzz(capsys, *argv, "--json")
    assert code == 0 and "cleanup" in json.loads(out)["not_generated"]
    code, out, _ = _fuzz(capsys, *argv)
    assert code == 0
    assert "not generated: cleanup, calls after shutdown(); without cleanup() properties 4 " \
        "and 5 go unchecked" in out


def test_constructor_arguments_travel_into_replays() -> None:
    """A kill of a class built with --impl-arg replays with the same arguments: its
    target's text parses back to it, and the replay breaks the same property."""
    from asynclookup.conformance.targets.target import FuzzTarget

    error = _kill(_spec("sized:SizedPoolZipTruncates", {"args": {"n_lookup_threads": 1}}))
    assert error is not None
    target = error.config["target"]
    assert FuzzTarget.parse(str(target)) == target
    assert target.shape.constructor_kwargs() == {"n_lookup_threads": 1}
    steps = [(c.method, c.args) for c in error.calls]
    again = next((e for _ in range(5) if (e := replay(error.config, steps)) is not None), None)
    assert again is not None and again.violation.number == error.violation.number


def test_a_renamed_class_passes_with_the_hint_it_was_given() -> None:
    """AllRenamed, run with the --method the misfit line suggested, passes."""
    spec = _spec("all_renamed:AllRenamed", {"methods": EVERY_NAME})
    assert first_violation(spec, seed=1, examples=40, faults="all") is None


def test_test_case_takes_the_shape_options() -> None:
    """conformance_test_case takes methods / cleanup_arg / verdicts / tables like the CLI."""
    passing = conformance_test_case("tests.shapes.verdicts:EnumVerdicts", verdicts=TO_BOOL,
                                    examples=20, seed=1)
    failing = conformance_test_case("tests.shapes.renamed:InvalidatingForcesResolved",
                                    methods={"mark_miss": "invalidate"}, examples=EXAMPLES,
                                    seed=0, shrink=False)
    assert passing.__name__ == "ConformanceEnumVerdicts"
    assert _outcome(passing).wasSuccessful()
    failures = _outcome(failing).failures
    assert len(failures) == 1 and "property 3" in failures[0][1]
    with pytest.raises(ValueError, match="try --method mark_miss=invalidate"):
        conformance_test_case("tests.shapes.renamed:Invalidating")
    sized = conformance_test_case("tests.shapes.sized:SizedPool", examples=10, seed=1,
                                  impl_args={"n_lookup_threads": 2})
    drained = conformance_test_case("tests.shapes.drained:NeedsDrain", examples=10, seed=1,
                                    drain_before_lookup=True)
    assert _outcome(sized).wasSuccessful() and _outcome(drained).wasSuccessful()


def test_excepthook_is_restored_after_a_run() -> None:
    """The adapter's threading.excepthook is installed while an adapter lives and the
    hook it replaced is back after the run, also after a kill: a pool thread killed by a
    raising tier (the settle wakes on its crash, so no timing is involved)."""
    before = threading.excepthook
    driver = Driver(impl_factory("tests.shapes.own_names:OwnNames"), mode="threaded")
    try:
        assert threading.excepthook is not before and hook_users() == 1
    finally:
        driver.close()
    assert threading.excepthook is before and hook_users() == 0
    driver = Driver(impl_factory("tests.shapes.pool:PooledDiesOnRaise"), mode="threaded")
    try:
        assert hook_users() == 1
        with pytest.raises(ConformanceError) as caught:
            driver.lookup(b"k0", "A")
            driver.flush()
            driver.answer(Plan("raise"))
            driver.settle()
    finally:
        driver.close()
    assert caught.value.violation.number == 7, str(caught.value)
    assert "pool.py:" in caught.value.violation.detail
    assert threading.excepthook is before and hook_users() == 0


def test_a_hook_installed_meanwhile_is_left_alone() -> None:
    """When someone replaces the hook while an adapter lives, shutting it down does not
    take theirs away."""
    before = threading.excepthook
    driver = Driver(impl_factory("tests.shapes.own_names:OwnNames"), mode="threaded")

    def theirs(args: Any) -> None:
        before(args)

    threading.excepthook = theirs
    try:
        driver.close()
        assert threading.excepthook is theirs
    finally:
        threading.excepthook = before


def _outcome(case: type[unittest.TestCase]) -> unittest.TestResult:
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(case)
    return unittest.TextTestRunner(stream=_Null(), verbosity=0).run(suite)


class _Null:
    """A stream that swallows the runner's output."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass
