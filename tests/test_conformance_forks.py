"""One bug, one name (issue 21, item 4): the oracle on twins of public vLLM forks.

``tests/forks`` holds a correct manager in the shape of vLLM 0.34's module and
three one-bug copies, each a bug a fork shipped that the oracle once named by
another property: the enqueue-once assert after ``mark_miss`` on an in-flight
probe (was 7, is 3), a cleanup that cancels a probe another request shares, so
the key is probed again (was 9, is 8), and a four-thread pool that takes the
next batch early (was 9; clean unless what it broke shows, then 6).  Each is
pinned twice: fuzzed on seeds 1-3, and as the one scripted run that once got
the wrong name.  docs/benchmarks.md has nothing of these; the report of the
change that added them gives five seeds by hand.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from asynclookup.conformance.counterexample import ConformanceError
from asynclookup.conformance.driver import Driver
from asynclookup.conformance.targets.adapter import Plan
from asynclookup.conformance.targets.vllm import impl_factory
from asynclookup.conformance.testcase import first_violation
from tests.forks import BUGGY, CORRECT
from tests.forks.vllm_fork import Group, PoolTakesNextBatchEarly, Result

SEEDS = (1, 2, 3)
MORE_SEEDS = (4, 5, 6, 7)  # tried only while a fork that must be found is not
EXAMPLES = 300
SHORT_WAIT = 0.5  # seconds a scripted run waits for a tier call that does not come


def test_the_correct_base_passes_every_fault_strictly() -> None:
    """The vLLM 0.34-shaped base with the proper answer rule conforms: no finding."""
    error = first_violation(CORRECT[0], seed=1, examples=60, faults="all")
    assert error is None, str(error)


@pytest.mark.parametrize("impl", sorted(BUGGY), ids=lambda p: p.rpartition(":")[2])
def test_each_fork_is_named_by_its_own_property_on_every_seed(impl: str) -> None:
    """On seeds 1-3 every finding on a fork names its own property; the enqueue-once and
    cancel forks are found (the pool's early take rarely shows: clean is allowed).

    Whether 300 examples reach the cancel fork's bug depends on the worker's timing (a
    loaded CI machine once missed it on seeds 1-3 that find it here), so a fork not yet
    found is tried on more seeds, up to ``MORE_SEEDS``; every finding must name its own
    property on every seed tried."""
    named: dict[int, int | None] = {}
    for seed in (*SEEDS, *MORE_SEEDS):
        if seed not in SEEDS and (named or impl.endswith("PoolTakesNextBatchEarly")):
            break
        error = first_violation(impl, seed=seed, examples=EXAMPLES, faults="all")
        if error is not None:
            named[seed] = error.violation.number
            assert error.violation.number == BUGGY[impl], f"seed {seed}: {error}"
    if not impl.endswith("PoolTakesNextBatchEarly"):
        tried = (*SEEDS, *MORE_SEEDS)
        assert named, f"{impl} survived {EXAMPLES} examples on seeds {tried}"


def _scripted(impl: str, **options: Any) -> Driver:
    return Driver(impl_factory(f"tests.forks.vllm_fork:{impl}"), mode="threaded", **options)


def _force_a_miss_in_flight(driver: Driver, request: str) -> None:
    """``request``'s k0 probe in flight, its False result posted, then mark_miss([k0]):
    the fork's bug forces False on that in-flight probe."""
    driver.lookup(b"k0", request)
    driver.flush()
    driver.lookup(b"k1", "B")  # the drain due after the flush: nothing posted yet
    driver.answer(Plan(bits=(False,)))
    driver.settle()
    driver.mark_miss([b"k0"])


def test_enqueue_once_assert_after_an_early_drain_is_exactly_once() -> None:
    """mark_miss forces False on an in-flight probe whose False result was posted; the
    lookup's False is explained by an early drain, and the flush that then applies the
    result trips the enqueue-once assert: property 3, not 7."""
    driver = _scripted("MarkMissBeforeEnqueueOnce")
    try:
        _force_a_miss_in_flight(driver, "A")
        driver.lookup(b"k0", "A")  # False: the spec's early drain explains it
        with pytest.raises(ConformanceError) as caught:
            driver.flush()
    finally:
        driver.close()
    assert caught.value.violation.number == 3, str(caught.value)
    assert "enqueue-once" in caught.value.violation.detail


def test_a_forced_miss_then_a_cleanup_is_still_exactly_once() -> None:
    """As above, but the request is cleaned up before it asks again, so the probe is an
    orphan with a posted False.  No drain could have applied that result (the one due
    came before the post), so the False delivered is mark_miss's: property 3, not 2
    (an orphan's result delivered; a search that moved the seeds once named the fork
    2 this way)."""
    driver = _scripted("MarkMissBeforeEnqueueOnce")
    try:
        _force_a_miss_in_flight(driver, "C")
        driver.cleanup("C")  # k0's probe is in flight, so it stays, an orphan
        with pytest.raises(ConformanceError) as caught:
            driver.lookup(b"k0", "C")  # False, where the spec has None
    finally:
        driver.close()
    assert caught.value.violation.number == 3, str(caught.value)


def _cancel_shared_probe(driver: Driver) -> None:
    """A's k1 probe, shared by B, still queued behind A's k0 call; cleanup('A') cancels it."""
    driver.lookup(b"k0", "A")
    driver.flush()  # the worker calls the tier for k0 and blocks there
    driver.lookup(b"k1", "A")
    driver.lookup(b"k1", "B")
    driver.flush()
    driver.cleanup("A")  # the bug: k1's probe, B's too, is cancelled and deleted


def test_a_second_probe_after_a_cancelled_shared_probe_is_redundant() -> None:
    """B probes k1 again after cleanup('A') cancelled the probe B shared: property 8 (the
    probe cleanup must keep), not 9 (the context the old entry was batched with)."""
    driver = _scripted("CleanupCancelsSharedProbe", strict_efficiency=True)
    try:
        _cancel_shared_probe(driver)
        driver.lookup(b"k1", "B")  # the fork made a new probe
        driver.flush()
        driver.answer()  # k0 for A
        with pytest.raises(ConformanceError) as caught:
            driver.answer()  # k1 for B: the cancelled call for A never comes
    finally:
        driver.close()
    assert caught.value.violation.number == 8, str(caught.value)
    assert "cleaned up" in caught.value.violation.detail


def test_a_call_left_short_by_a_cancelled_probe_is_the_same_finding() -> None:
    """A's group holds k1 (shared by B) and k2 (A's alone); cleanup('A') cancels k1's
    probe, so A's call comes for k2 only.  That call is not A's whole group, but what it
    leaves out is a probe cleanup cancelled: property 8, not 9 (a loaded CI machine once
    named the fork 9 this way on seed 3)."""
    driver = _scripted("CleanupCancelsSharedProbe", strict_efficiency=True)
    try:
        driver.lookup(b"k0", "A")
        driver.flush()  # the worker calls the tier for k0 and blocks there
        driver.lookup(b"k1", "A")
        driver.lookup(b"k2", "A")
        driver.lookup(b"k1", "B")
        driver.flush()
        driver.cleanup("A")  # the bug: k1's probe, B's too, is cancelled and deleted
        driver.answer()  # k0 for A
        with pytest.raises(ConformanceError) as caught:
            driver.answer()  # [k2] for A, without k1
    finally:
        driver.close()
    assert caught.value.violation.number == 8, str(caught.value)
    assert "group without" in caught.value.violation.detail, str(caught.value)


def test_a_cancelled_group_skipped_after_its_request_asked_again_is_the_same_finding(
) -> None:
    """cleanup('A') cancels A's queued k1 group (k1 shared by C), then A asks for k1 again,
    so the spec has A a requester of that probe once more.  The worker skips the
    cancelled group for C's later one: property 8 (a cleanup came while the group was
    in flight), not 6 (a batch taken early; a loaded CI machine named the fork 6 this
    way on seed 3)."""
    driver = _scripted("CleanupCancelsSharedProbe", strict_efficiency=True)
    try:
        driver.lookup(b"k2", "B")
        driver.flush()  # the worker calls the tier for k2 and blocks there
        driver.lookup(b"k1", "A")
        driver.lookup(b"k1", "C")
        driver.flush()
        driver.lookup(b"k0", "C")
        driver.flush()
        driver.cleanup("A")  # the bug: A's k1 group, C's probe too, is cancelled
        driver.lookup(b"k1", "A")  # the spec: A joins the in-flight probe again
        driver.answer()  # k2 for B
        with pytest.raises(ConformanceError) as caught:
            driver.answer()  # [k0] for C: A's k1 group was skipped
    finally:
        driver.close()
    assert caught.value.violation.number == 8, str(caught.value)


def test_a_cancelled_call_that_never_comes_is_the_same_finding() -> None:
    """Without B asking again, the cancelled call just never comes: still property 8."""
    driver = _scripted("CleanupCancelsSharedProbe", strict_efficiency=True, wait_bound=SHORT_WAIT)
    try:
        _cancel_shared_probe(driver)
        driver.answer()  # k0 for A
        with pytest.raises(ConformanceError) as caught:
            driver.answer()  # k1 for A is owed; none comes
    finally:
        driver.close()
    assert caught.value.violation.number == 8, str(caught.value)
    assert "no tier call came" in caught.value.violation.detail


def test_a_call_never_made_for_a_request_cleaned_up_before_the_flush_is_progress() -> None:
    """The same stall when the request was cleaned up before the flush: no cleanup came
    while the probe was in flight, so none cancelled it.  The outside class whose flush
    drops a live entry of a cleaned-up request (B still waits) is named 6, not 8 (seed
    4 of the kill table once named it 8)."""
    driver = Driver(impl_factory("tests.outside.callback_style:StaleBesideLive"),
                    mode="threaded", strict_efficiency=True, wait_bound=SHORT_WAIT)
    try:
        driver.lookup(b"k0", "A")
        driver.lookup(b"k0", "B")
        driver.cleanup("A")
        driver.flush()  # the class drops A's entry although B waits on its probe
        with pytest.raises(ConformanceError) as caught:
            driver.answer()  # k0 for A is owed; none comes
    finally:
        driver.close()
    assert caught.value.violation.number == 6, str(caught.value)


class GatedPool(PoolTakesNextBatchEarly):
    """The early-taking pool whose thread for request B's group waits for ``gate`` before
    its tier call: the test, not the threads' luck, makes a later batch's call first."""

    def __init__(self, tier_type: str) -> None:
        self.gate = threading.Event()
        super().__init__(tier_type)

    def _probe(self, group: Group) -> list[Result]:
        if group[0].req_id == "B":
            self.gate.wait(10)
        return super()._probe(group)


def test_a_call_of_the_next_batch_before_the_last_is_done_is_progress() -> None:
    """C's group (batch 2) reaches the tier while B's (batch 1) is still owed: the pool
    took the next batch early, so batch 1's verdicts come late: property 6, not 9."""
    driver = Driver(impl_factory(f"{__name__}:GatedPool"), mode="threaded")
    manager = driver.target.manager  # type: ignore[attr-defined]
    try:
        driver.lookup(b"k0", "A")
        driver.lookup(b"k1", "B")
        driver.flush()
        driver.lookup(b"k2", "C")
        driver.flush()  # the pool takes this batch at once
        driver.answer()  # A's group
        with pytest.raises(ConformanceError) as caught:
            driver.answer()  # C's group, while B's is held at the gate
    finally:
        manager.gate.set()
        driver.close()
    assert caught.value.violation.number == 6, str(caught.value)
    assert "a group of a later batch" in caught.value.violation.detail


class PostGatedPool(PoolTakesNextBatchEarly):
    """The early-taking pool whose thread for request A's first group waits for ``gate``
    before it posts (``posted`` is set once it has): the test makes the next batch's
    tier call come while that verdict is still unposted."""

    def __init__(self, tier_type: str) -> None:
        self.gate, self.posted = threading.Event(), threading.Event()
        super().__init__(tier_type)

    def _probe_and_post(self, group: Group) -> None:
        results = self._probe(group)
        if group[0].req_id == "A" and not self.posted.is_set():
            self.gate.wait(10)
            self._pending_results.put(results)
            self.posted.set()
            return
        self._pending_results.put(results)


def test_a_post_made_after_the_next_tier_call_is_progress_not_waste() -> None:
    """The run a CI machine once named 8: cleanup('A') leaves k1's probe, in flight, to B;
    A's k1 is answered but its post waits while the next batch's call ([k2] for A)
    arrives; lookup(k1, 'A') then gets None.  Either cleanup deleted the probe (8) or the
    post came after the next call (6): the finding waits until one is ruled out.  The
    pool then posts, a drain applies it, and the lookup's False rules out the deleted
    probe: property 6."""
    driver = Driver(impl_factory(f"{__name__}:PostGatedPool"), mode="threaded",
                    strict_efficiency=True)
    manager = driver.target.manager  # type: ignore[attr-defined]
    try:
        driver.lookup(b"k1", "A")
        driver.flush()
        driver.cleanup("A")
        driver.lookup(b"k1", "B")
        driver.lookup(b"k2", "A")
        driver.flush()
        driver.answer()  # [k1] for A: False, its post held at the gate
        driver.settle()
        assert "its next tier call came: [b'k2'] for 'A'" in driver.calls[-1].text
        driver.lookup(b"k1", "A")  # None: wasteful cleanup or a late post, undecided
        assert not driver.failed, str(driver.checker.violation)
        manager.gate.set()
        assert manager.posted.wait(10)
        driver.drain_results()
        with pytest.raises(ConformanceError) as caught:
            driver.lookup(b"k1", "A")  # False: the probe was never deleted
    finally:
        manager.gate.set()
        driver.close()
    assert caught.value.violation.number == 6, str(caught.value)
    assert "before it takes the next" in caught.value.violation.detail
