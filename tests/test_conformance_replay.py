"""Counterexamples replay, shrink and run as standalone pytest files (conformance.replay).

The replay file of a kill must fail under pytest on the variant and pass on the
reference; shrinking must keep the property and never lengthen the example.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from asynclookup.conformance.counterexample import Call, ConformanceError
from asynclookup.conformance.driver import Driver
from asynclookup.conformance.replay import (
    _answered_not_shut,
    _asked,
    _reuse_race,
    _sliced,
    open_replay,
    replay,
    replay_file,
    shrink,
)
from asynclookup.conformance.targets.adapter import Plan
from asynclookup.conformance.targets.vllm import impl_factory
from tests.zoo.vllm_shaped import ResultEntry, VllmShapedManager

ROOT = Path(__file__).resolve().parent.parent
DRAIN = "tests.mutants_reference:DrainWithoutGenerationCheck"


def long_drain_kill() -> ConformanceError:
    """A DrainWithoutGenerationCheck kill padded with calls that do not matter."""
    driver = Driver.open(DRAIN)
    with pytest.raises(ConformanceError) as raised:
        driver.lookup(b"k2", "C")
        driver.cleanup("C")
        driver.lookup(b"k1", "B")
        driver.drain_results()
        driver.flush()
        driver.probe_group(Plan("junk", (True, True, False), 1), post=True)
        driver.mark_present([b"k1"])
        driver.mark_miss([b"k2"])
        driver.lookup(b"k1", "B")
    driver.close()
    return raised.value


def test_a_replay_reproduces_the_violation() -> None:
    """Replaying the calls of a stepped counterexample breaks the same property again."""
    error = long_drain_kill()
    again = replay(error.config, [(c.method, c.args) for c in error.calls])
    assert again is not None and again.violation.number == error.violation.number


def test_shrinking_keeps_the_property_and_drops_calls() -> None:
    """Shrinking removes the calls that do not matter and keeps property 2."""
    error = long_drain_kill()
    small = shrink(error, budget=1.5)  # too short to delete twelve calls one by one
    assert small.violation.number == 2 and len(small.calls) < len(error.calls)


def test_shrinking_renames_keys_and_requests_canonically() -> None:
    """The shrunk counterexample uses k0 and A first."""
    small = shrink(long_drain_kill(), budget=10.0)
    assert small.calls[0].args == (b"k0", "A")


def run_pytest(path: Path, target: str | None) -> int:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("ASYNCLOOKUP_REPLAY_TARGET", None)
    if target is not None:
        env["ASYNCLOOKUP_REPLAY_TARGET"] = target
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    return done.returncode


def test_the_replay_file_fails_on_the_variant(tmp_path: Path) -> None:
    """The written replay file fails under pytest against the variant it was found on."""
    path = tmp_path / "test_replay_drain.py"
    path.write_text(replay_file(shrink(long_drain_kill(), budget=5.0)))
    assert run_pytest(path, None) == 1


def test_the_replay_file_passes_on_the_reference(tmp_path: Path) -> None:
    """The same file passes when ASYNCLOOKUP_REPLAY_TARGET points it at the reference."""
    path = tmp_path / "test_replay_drain.py"
    path.write_text(replay_file(shrink(long_drain_kill(), budget=5.0)))
    assert run_pytest(path, "reference") == 0


def test_the_replay_file_is_its_template_filled_in() -> None:
    """replay_template.py, a real module, is filled in: the placeholders and the
    template's own note are gone, the counterexample's calls and target are in, and the
    text parses."""
    error = shrink(long_drain_kill(), budget=5.0)
    text = replay_file(error)
    ast.parse(text)
    for gone in ("TITLE", "DETAIL", "CALLS", "This module is the template",
                 '"stepped", "memory", False'):
        assert gone not in text, gone
    assert error.violation.title in text and "DrainWithoutGenerationCheck" in text
    assert all(call.source in text for call in error.calls)


class SlowPoster(VllmShapedManager):
    """Conforms, but its worker posts each batch's results a second after probing."""

    def batch_lookup(self, keys: list[bytes], req_context: object) -> list[bool]:
        return [False] * len(keys)

    def _pair(self, entries: list[tuple[bytes, int]], verdicts: list[bool]) -> list[ResultEntry]:
        threading.Event().wait(1.0)  # a slow worker, not a synchronisation
        return super()._pair(entries, verdicts)


def test_a_threaded_shrink_that_does_not_hold_at_the_full_bound_is_dropped() -> None:
    """Shrink candidates wait only briefly for a post; a result that breaks the property
    only because of that (a slow post taken for a stall) is not returned."""
    driver = Driver(
        impl_factory("tests.test_conformance_replay:SlowPoster"), mode="threaded", wait_bound=0.3,
        config={"target": "impl:tests.test_conformance_replay:SlowPoster", "tier": "memory"},
    )
    try:
        with pytest.raises(ConformanceError) as found:
            driver.cleanup("B")
            driver.lookup(b"k1", "B")
            driver.cleanup("B")
            driver.lookup(b"k0", "A")
            driver.flush()
            driver.answer()
            driver.settle()
            driver.lookup(b"k0", "A")
            driver.await_verdict(b"k0", "A")  # the post comes after 1 s: late at this bound
    finally:
        driver.close()
    error = found.value
    assert error.violation.number == 6
    assert shrink(error, budget=4.0) is error


def test_a_stuck_probe_found_by_asking_again_shrinks_to_its_own_requester_asking() -> None:
    """A probe whose result is never posted, found only by the leak check asking again
    after its request's cleanup (four calls of the oracle's), shrinks to the request
    asking again itself, without the cleanup: no deletion of calls gets there."""
    impl = "tests.outside.callback_style:PostsAfterNextTake"
    driver = Driver(impl_factory(impl), mode="threaded",
                    config={"target": f"impl:{impl}", "tier": "memory"})
    try:
        with pytest.raises(ConformanceError) as found:
            driver.lookup(b"k0", "A")
            driver.flush()
            driver.cleanup("A")
            driver.answer()
            driver.settle()
            driver.await_empty()  # the leak check: then a new request asks for k0
    finally:
        driver.close()
    error = found.value
    assert error.violation.number == 6 and len(error.calls) == 9, str(error)
    small = shrink(error, budget=15.0)
    assert small.violation.number == 6, str(small)
    assert [c.method for c in small.calls] == [
        "lookup", "flush", "answer", "settle", "await_verdict"], str(small)


def test_a_threaded_shutdown_is_tried_as_an_answer_when_shrinking() -> None:
    """A shutdown shows the worker's next tier call only if the worker makes it before
    it sees the stop, a race replays often lose; an answer waits for that call.  The
    shrinking pass offers the run with its shutdown replaced by one answer, then two
    (a worker that makes its next call only once the last is answered), once each."""
    run = [("lookup", (b"k0", "A")), ("flush", ()), ("answer", (Plan(),)),
           ("shutdown", ([Plan()],))]
    offered: list[list[tuple[str, tuple[object, ...]]]] = []

    def attempt(steps: list[tuple[str, tuple[object, ...]]], larger: bool = False) -> bool:
        offered.append(steps)
        return False

    tried: set[str] = set()
    assert not _answered_not_shut(run, attempt, tried)
    answer = ("answer", (Plan(),))
    assert offered == [[*run[:3], answer], [*run[:3], answer, answer]]
    assert not _answered_not_shut(run, attempt, tried)  # each offered once
    assert len(offered) == 2


def test_a_run_is_sliced_to_the_calls_that_concern_the_violations_keys() -> None:
    """The slice keeps the lookups of the keys named, the cleanups of the requests that
    asked for one, mark_miss/mark_present cut down to them, and every call naming no
    key; it offers nothing when nothing would be cut."""
    answer = ("answer", (Plan(),))
    run = [
        ("lookup", (b"k0", "A")), ("lookup", (b"k1", "B")), ("flush", ()),
        ("mark_miss", ([b"k0", b"k1"],)), ("cleanup", ("B",)), ("cleanup", ("A",)),
        ("lookup", (b"k0", "C")), ("mark_present", ([b"k1"],)), ("flush", ()),
        answer, ("settle", ()), answer,
    ]
    assert _sliced(run, frozenset({b"k0"})) == [
        ("lookup", (b"k0", "A")), ("flush", ()), ("mark_miss", ([b"k0"],)),
        ("cleanup", ("A",)), ("lookup", (b"k0", "C")), ("flush", ()),
        answer, ("settle", ()), answer,
    ]
    assert _sliced(run, frozenset({b"k0", b"k1"})) is None
    assert _sliced(run, frozenset()) is None


def test_a_property_8_finding_is_offered_the_protocols_witness_when_shrinking() -> None:
    """A second probe found in a long threaded run (runs the fuzzer finds are longer,
    and often end in a shutdown racing the worker's second tier call, which a replay
    loses about half the time, so deleting calls seldom keeps the race): the shrinker
    offers the race of docs/protocol.md on the call's key and request first."""
    driver = open_replay("impl:tests.strangers.futures_pool:CleanupCancelsInFlight",
                         mode="threaded", strict_efficiency=True)
    with pytest.raises(ConformanceError) as found:
        try:
            for request in ("A", "C", "A", "C"):  # a probe made and dropped, four times
                driver.lookup(b"k0", request)
                driver.mark_miss([b"k0"])
                driver.cleanup(request)
            driver.lookup(b"k0", "B")
            driver.flush()
            driver.cleanup("B")
            driver.lookup(b"k0", "B")
            driver.flush()
            driver.answer()
            driver.answer()
            driver.answer()  # the second tier call for [b'k0']
        finally:
            driver.close()
    error = found.value
    assert error.violation.number == 8, str(error)
    witness = _reuse_race(error)
    assert witness is not None and witness[:5] == [
        ("lookup", (b"k0", "B")), ("flush", ()), ("cleanup", ("B",)),
        ("lookup", (b"k0", "B")), ("flush", ())]
    # Too short a budget to delete twelve calls one by one.  The witness races the
    # worker too (its first call must start before the cleanup), and the shrinker keeps
    # it only if a replay at the full bound reproduces it: a loaded machine once lost
    # that replay, so the shrink is tried up to three times.
    for _ in range(3):
        small = shrink(error, budget=1.5)
        assert small.violation.number == 8, str(small)
        if len(small.calls) <= 7:
            break
    assert len(small.calls) <= 7, f"{small}\n{small.shrink_report}"


def test_what_a_call_asked_keeps_a_key_whose_bytes_hold_an_arrow_whole() -> None:
    """A renamed finding's note names the call it came before by what that call asked:
    from a lookup's arguments, not its text cut at the first ' ->'."""
    key = b"x -> y"
    lookup = Call(f"lookup({key!r}, 'r') -> None", "lookup", (key, "r"))
    reask = Call(
        f"re-ask drain_results() and lookup({key!r}, 'r') -> True", "await_verdict", (key, "r")
    )
    drain = Call("drain_results() -> None", "drain_results", ())
    assert _asked(lookup) == "lookup(b'x -> y', 'r')"
    assert _asked(reask) == "re-ask drain_results() and lookup(b'x -> y', 'r')"
    assert _asked(drain) == "drain_results()"
