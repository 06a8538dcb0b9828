"""No false alarm on a correct class, one name for one bug: the oracle on tests/strangers.

tests/strangers holds lookup managers written from docs/protocol.md by an outsider,
before reading the oracle, in styles nothing else in tests/ uses (a result tuple
per key on a SimpleQueue, an asyncio loop on a thread, futures, callbacks,
pools, a dict under a Condition, ...).  Every correct class must pass every
fault with strict efficiency; every one-bug copy must be named by its own
property.  CI runs a small seed set; docs/benchmarks.md has the full table
(``bench/outside.py --zoo strangers``).
"""

from __future__ import annotations

import time

import pytest

from asynclookup.conformance.counterexample import ConformanceError
from asynclookup.conformance.driver import Driver
from asynclookup.conformance.replay import shrink
from asynclookup.conformance.targets.adapter import FAULT_KINDS
from asynclookup.conformance.targets.vllm import impl_factory, impl_spec
from asynclookup.conformance.testcase import first_violation
from tests.strangers import BUG_KIND, BUGGY, CORRECT, HANGS

EXAMPLES = 60  # per seed, on each correct class
KILL_EXAMPLES = 300  # at most, per seed, on a one-bug copy
KILL_SEEDS = (1, 2, 3)
SHRINK_BUDGET = 15.0


@pytest.mark.parametrize("impl", CORRECT, ids=lambda p: p.rpartition(":")[2])
def test_correct_class_passes_every_fault_strictly(impl: str) -> None:
    """A correct class of any style passes every fault with strict efficiency."""
    error = first_violation(impl, seed=1, examples=EXAMPLES, faults="all")
    assert error is None, str(error)


@pytest.mark.parametrize("kind", sorted(FAULT_KINDS))
def test_the_per_key_and_asyncio_classes_pass_each_fault_kind_alone(kind: str) -> None:
    """The two styles that made the oracle red pass each fault kind on its own."""
    for impl in CORRECT[:2]:
        error = first_violation(impl, seed=2, examples=EXAMPLES // 2, faults=kind)
        assert error is None, str(error)


def test_naming_the_results_table_changes_no_verdict() -> None:
    """With --tables results=ATTR naming the queue it counts, still clean."""
    named = impl_spec(CORRECT[0], tables="results=_outbox")
    error = first_violation(named, seed=3, examples=EXAMPLES, faults="all")
    assert error is None, str(error)


def test_naming_the_asyncio_class_tables_changes_no_verdict() -> None:
    """The asyncio class with its tables named (its results are a list the oracle cannot
    count, so a settle still watches for idleness): still clean."""
    named = impl_spec(CORRECT[1], tables="probes=rows,index=index,batch=batch")
    error = first_violation(named, seed=3, examples=EXAMPLES, faults="all")
    assert error is None, str(error)


def test_a_results_table_the_oracle_cannot_count_is_refused() -> None:
    """--tables results=ATTR naming a list (the asyncio class's) is refused in one line:
    the oracle only counts puts on a results queue, and a list has none."""
    with pytest.raises(ValueError, match="is a list, not a queue") as raised:
        first_violation(impl_spec(CORRECT[1], tables="results=_results"), seed=3, examples=1)
    assert "\n" not in str(raised.value)


# CI kills one copy of each bug kind; bench/outside.py --zoo strangers kills them all
# (docs/benchmarks.md has the table).
ONE_PER_KIND = sorted({kind: path for path, kind in sorted(BUG_KIND.items())}.values())


@pytest.mark.parametrize("impl", ONE_PER_KIND, ids=lambda p: p.rpartition(":")[2])
def test_one_bug_copy_is_named_by_its_own_property(impl: str) -> None:
    """Each one-bug copy is killed, with exactly its property, shrunk to at most 8 calls
    (a later seed is tried only when one survives its examples)."""
    for seed in KILL_SEEDS:
        error = first_violation(impl, seed=seed, examples=KILL_EXAMPLES, faults="all")
        if error is not None:
            break
    assert error is not None, f"{impl} survived {KILL_EXAMPLES} examples on seeds {KILL_SEEDS}"
    assert error.violation.number == BUGGY[impl], str(error)
    shrunk = shrink(error, SHRINK_BUDGET)
    assert shrunk.violation.number == BUGGY[impl], str(shrunk)
    assert len(shrunk.calls) <= 8, f"{shrunk}\n{shrunk.shrink_report}"


@pytest.mark.parametrize("impl", sorted(HANGS), ids=lambda p: p.rpartition(":")[2])
def test_a_call_that_never_returns_is_reported_naming_it(impl: str) -> None:
    """A class whose lookup, flush or shutdown never returns is a finding (property 6)
    naming that call, reported within seconds, not a hung run."""
    started = time.monotonic()
    error = first_violation(impl, seed=1, examples=20, faults="all")
    assert error is not None and error.violation.number == 6, str(error)
    assert f"{HANGS[impl]}(" in error.violation.detail
    assert "did not return within" in error.violation.detail
    assert time.monotonic() - started < 90


def test_a_stale_probe_sent_under_a_sharers_context_is_property_9() -> None:
    """A batch's groups all sent under its last request's context: k0, batched for A and
    made stale by mark_present after B joined it, is probed for B.  No request was
    cleaned up, so it is not a re-probe after a cancelling cleanup (8): it is the probe
    under the wrong context (9).  (Seed 2 of the kill table once named it 8.)"""
    driver = Driver(impl_factory("tests.strangers.asyncio_loop:LastRequestContext"),
                    mode="threaded")
    try:
        driver.lookup(b"k0", "A")
        driver.lookup(b"k1", "B")
        driver.flush()
        driver.lookup(b"k0", "B")
        driver.mark_present([b"k0"])
        with pytest.raises(ConformanceError) as caught:
            driver.answer()  # [b'k0'] for 'B', the batch's last request
    finally:
        driver.close()
    assert caught.value.violation.number == 9, str(caught.value)


def test_another_requests_group_asked_with_a_cleaned_up_requests_context_is_9() -> None:
    """B's k2 entry goes stale (cleanup), A asks for k2 and B for k1: the batch's groups
    are A's [k2] and B's [k1].  The copy asks A's group with the batch's last context,
    B's: [k2] for B.  B's stale k2 entry, had it been submitted, would have come in
    B's own group beside k1, so this is the wrong context (9), not a stale entry
    submitted (1), which a search that moved the seeds once named it."""
    driver = Driver(impl_factory("tests.strangers.asyncio_loop:LastRequestContext"),
                    mode="threaded", strict_efficiency=True)
    try:
        driver.lookup(b"k2", "B")
        driver.cleanup("B")
        driver.lookup(b"k2", "A")
        driver.lookup(b"k1", "B")
        driver.flush()
        with pytest.raises(ConformanceError) as caught:
            driver.answer()  # [k2] for B: A's group, B's context
            driver.answer()
    finally:
        driver.close()
    assert caught.value.violation.number == 9, str(caught.value)


def _stale_k1_submitted() -> Driver:
    """FlushSubmitsWholeBatch with B's k1 entry gone stale (cleanup) and submitted anyway
    at the flush, where the spec drops it."""
    driver = Driver(impl_factory("tests.strangers.per_key_simplequeue:FlushSubmitsWholeBatch"),
                    mode="threaded", strict_efficiency=True)
    driver.lookup(b"k1", "B")
    driver.cleanup("B")
    driver.flush()
    return driver


def test_a_stale_entry_submitted_while_its_request_asks_again_is_property_1() -> None:
    """B's k1 entry goes stale (cleanup) and this copy submits it at the flush; B then
    asks for k1 again (a new probe, not yet flushed).  The call [k1] for B is the stale
    entry submitted (1), not a second probe of one B shares (8: that needs the first in
    flight at a cleanup), which a search that moved the seeds once named it."""
    driver = _stale_k1_submitted()
    try:
        with pytest.raises(ConformanceError) as caught:
            driver.lookup(b"k1", "B")
            driver.answer()
            driver.shutdown()
    finally:
        driver.close()
    assert caught.value.violation.number == 1, str(caught.value)


def test_a_stale_entry_submitted_beside_its_live_twin_is_property_1() -> None:
    """A flush that does not re-validate submits B's stale k1 entry; B then asks for k1
    again, and the next flush submits B's live k1 and k2.  The worker's first call,
    [k1] for B, is the stale batch: not a group the spec holds (B's is [k1, k2]), and
    every key of it is one whose entry for B a flush dropped, so property 1, not 9 (a
    search that moved the seeds once named this copy 9)."""
    driver = _stale_k1_submitted()
    try:
        driver.lookup(b"k1", "B")
        driver.lookup(b"k2", "B")
        driver.flush()
        with pytest.raises(ConformanceError) as caught:
            driver.answer()  # [k1] for B: the stale batch
    finally:
        driver.close()
    assert caught.value.violation.number == 1, str(caught.value)
