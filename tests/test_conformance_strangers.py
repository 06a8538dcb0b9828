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
from asynclookup.conformance.replay import (
    open_replay,
    replay,
    settle_name,
    settled_and_shrunk,
)
from asynclookup.conformance.targets.adapter import FAULT_KINDS, Plan
from asynclookup.conformance.targets.vllm import impl_factory, impl_spec, tables_used
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


def test_a_results_table_the_oracle_cannot_count_is_taken_and_not_counted() -> None:
    """--tables results=ATTR naming a list (the asyncio class's) is taken as said: the
    oracle cannot count a list's posts, so the settles watch the worker thread go idle,
    the coverage line says so, and the class passes."""
    named = impl_spec(CORRECT[1], tables="results=_results")
    error = first_violation(named, seed=3, examples=EXAMPLES, faults="all")
    assert error is None, str(error)
    used = tables_used(named)
    assert used.results is None
    assert used.post_watch() == (
        "results `_results` named, a list, not a queue (put and get_nowait) whose puts "
        "the oracle can count: not counted, a settle watches the worker thread go idle "
        "(a hint)")


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
    assert settle_name(error).violation.number == BUGGY[impl], str(error)
    shrunk = settled_and_shrunk(error, SHRINK_BUDGET)  # what asynclookup fuzz reports
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


def _second_probe_after_mark_miss(impl: str) -> ConformanceError:
    """lookup, flush, mark_miss of the in-flight key, cleanup of its only requester, a
    new request asks for it, flush: the worker probes the key a second time."""
    driver = open_replay(f"impl:{impl}", mode="threaded", strict_efficiency=True)
    with pytest.raises(ConformanceError) as found:
        try:
            driver.lookup(b"k0", "A")
            driver.flush()
            driver.mark_miss([b"k0"])
            driver.cleanup("A")
            driver.lookup(b"k0", "B")
            driver.flush()
            driver.answer()
            driver.answer()
        finally:
            driver.close()  # judges the second tier call
    return found.value


def test_a_mark_miss_that_forced_the_probe_is_named_3_by_asking_after_it() -> None:
    """The second probe reads as a cleanup deleting the in-flight orphan (8), or as a
    mark_miss that forced the probe, whose resolved orphan the cleanup then deleted as
    it may (3).  ``settle_name`` asks the request right after the mark_miss: this
    copy's forced False there is the finding, property 3, in four calls."""
    error = _second_probe_after_mark_miss("tests.outside.condition_style:MarkMissOnceAssert")
    assert error.violation.number == 8, str(error)
    settled = settle_name(error)
    assert settled.violation.number == 3, str(settled)
    assert [c.method for c in settled.calls] == ["lookup", "flush", "mark_miss", "lookup"]
    assert "named 3, not 8" in str(settled)


def test_a_cleanup_that_deleted_the_in_flight_probe_stays_8_after_asking() -> None:
    """The same calls on a copy whose mark_miss is right and whose cleanup deletes the
    in-flight orphan: asked after the mark_miss, it answers None as the spec does, so
    the finding stays property 8."""
    error = _second_probe_after_mark_miss("tests.strangers.futures_pool:CleanupCancelsInFlight")
    assert error.violation.number == 8, str(error)
    assert settle_name(error) is error


def _replayed(impl: str, steps: list[tuple[str, tuple[object, ...]]]) -> ConformanceError:
    config = {"target": f"impl:{impl}", "mode": "threaded", "tier": "memory",
              "strict_efficiency": True}
    error = replay(config, steps)
    assert error is not None, steps
    return error


def test_a_verdict_that_only_the_mark_miss_explains_is_named_3() -> None:
    """B's probe of k1 is in flight when B is cleaned up (an orphan the spec keeps); the
    tier answers; a mark_miss of k1 forces this copy's orphan to False, which B, asking
    again, is handed.  The verdict reads as an orphan's result delivered (2) or a verdict
    the mark_miss forced (3); without the mark_miss the same calls break nothing, so
    ``settle_name`` names it 3 (a seed of the kill table once named this copy 2)."""
    error = _replayed("tests.strangers.futures_pool:MissForcesResolved", [
        ("lookup", (b"k1", "B")), ("flush", ()), ("cleanup", ("B",)), ("answer", (Plan(),)),
        ("mark_miss", ([b"k1"],)), ("lookup", (b"k1", "B")),
    ])
    assert error.violation.number == 2, str(error)
    settled = settle_name(error)
    assert settled.violation.number == 3, str(settled)
    assert "named 3, not 2" in str(settled)


def test_an_orphans_result_delivered_stays_2_when_a_mark_miss_did_not_make_it() -> None:
    """A copy whose cleanup keeps shared requesters: both of k1's requesters are cleaned
    up while it is in flight, a mark_miss names it, the tier answers False and a new
    request is handed that result.  Without the mark_miss the same lookup still breaks
    property 2, so the name stays 2."""
    error = _replayed("tests.strangers.raw_pool:ReleasesOnlyLastRequester", [
        ("lookup", (b"k1", "A")), ("lookup", (b"k1", "B")), ("flush", ()),
        ("mark_miss", ([b"k1"],)), ("cleanup", ("A",)), ("cleanup", ("B",)),
        ("answer", (Plan(),)), ("settle", ()), ("lookup", (b"k1", "A")),
    ])
    assert error.violation.number == 2, str(error)
    assert settle_name(error) is error


def test_a_none_that_proper_answers_also_give_is_not_the_tiers_none_passed_through() -> None:
    """This copy's lookup never drains.  The tier answers k0 None (a non-bool), then k1;
    A's lookup of k0 returns None where the spec's verdict is False, which reads as the
    tier's None passed through (7) as well as a verdict not delivered (6).  With every
    tier answer proper the same lookup still returns None, so ``settle_name`` names it
    6 (a seed once named this copy 7)."""
    none = Plan("junk", (), 2)  # JUNK[2]: the tier answers None for the one key
    error = _replayed("tests.strangers.asyncio_loop:LoopNeverDrainsInLookup", [
        ("lookup", (b"k0", "A")), ("flush", ()), ("lookup", (b"k1", "B")), ("flush", ()),
        ("answer", (none,)), ("answer", (Plan(),)), ("lookup", (b"k0", "A")),
    ])
    assert error.violation.number == 7, str(error)
    settled = settle_name(error)
    assert settled.violation.number == 6, str(settled)
    assert "named 6, not 7" in str(settled)


def test_a_group_missing_only_a_key_a_short_answer_stranded_is_property_6() -> None:
    """vLLM 0.34's zip bug: the short answer to A's [k0] leaves k0's probe in flight in
    the class for ever.  After A's cleanup, B asks for k0 and k2; the spec's B group
    is [k0, k2] (k0's orphan was settled with False and deleted), the class asks
    [k2] alone.  Not a wrong grouping (9): the stranded probe (6), which a search that
    moved the seeds once named 9."""
    error = _replayed("tests.zoo.mutants:ZipTruncatesShortAnswers", [
        ("lookup", (b"k0", "A")), ("flush", ()), ("lookup", (b"k1", "A")),
        ("answer", (Plan("short"),)), ("flush", ()), ("answer", (Plan(),)),
        ("cleanup", ("A",)), ("lookup", (b"k0", "B")), ("lookup", (b"k2", "B")),
        ("flush", ()), ("answer", (Plan(),)),
    ])
    assert error.violation.number == 6, str(error)
    assert "leaving out [b'k0']" in error.violation.detail


def _posted_after_the_flush(impl: str) -> Driver:
    """A's k0 answered, its answer held across the next step's flush; the settle hands
    it over, and the worker's tier call for B's k1 arrives (unanswered): one worker posts
    before it takes the next batch, so A's result was posted after the flush and before
    the lookup that follows, which must apply it (docs/protocol.md, "The operations")."""
    driver = open_replay(f"impl:{impl}", mode="threaded", strict_efficiency=True)
    driver.lookup(b"k0", "A")
    driver.flush()
    driver.answer()
    driver.lookup(b"k1", "B")
    driver.flush()
    driver.settle()
    assert "its next tier call came: [b'k1'] for 'B'" in driver.calls[-1].text
    return driver


@pytest.mark.parametrize("impl", [
    "tests.strangers.minimal_drain:DrainsOnlyInFlush",
    "tests.strangers.asyncio_loop:LoopNeverDrainsInLookup",
])
def test_a_post_proven_by_the_next_tier_call_must_be_applied_by_the_lookup(impl: str) -> None:
    """The tier call seen arrive is a fact, not a hint: it proves the post, so a lookup
    that does not apply it is late (6) at once, with no re-ask that could drain it."""
    driver = _posted_after_the_flush(impl)
    try:
        with pytest.raises(ConformanceError) as caught:
            driver.lookup(b"k0", "C")
    finally:
        driver.close()
    assert caught.value.violation.number == 6, str(caught.value)
    assert [c.method for c in caught.value.calls][-1] == "lookup"


@pytest.mark.parametrize("impl", [
    "tests.strangers.minimal_drain:MinimalDrainManager",
    "tests.strangers.asyncio_loop:EventLoopManager",
])
def test_a_class_that_applies_the_proven_post_passes(impl: str) -> None:
    driver = _posted_after_the_flush(impl)
    try:
        driver.lookup(b"k0", "C")
        assert driver.calls[-1].text.endswith("-> False"), driver.calls[-1].text
        driver.answer()
        driver.shutdown()
    finally:
        driver.close()


# -- a verdict given to a probe the spec still owes a tier call for --------------------

SORTED = "tests.strangers.sorted_bisect:"


def _stale_result_over_a_new_probe(impl: str) -> tuple[ConformanceError | None, list[str]]:
    """The run in which a class that applies results by key resolves a newer probe of
    the key with the old probe's result before the flush that should submit it (so it
    never asks the tier), then waits for that tier call."""
    driver = open_replay(f"impl:{impl}", mode="threaded")
    try:
        driver.lookup(b"k0", "A")
        driver.flush()
        driver.cleanup("A")  # the probe stays in flight, an orphan
        driver.drain_results()
        driver.mark_present((b"k0",))  # deletes the orphan's state
        driver.lookup(b"k0", "B")  # a new probe of the key
        driver.answer(Plan())  # the old probe's result is posted...
        driver.settle()
        driver.flush()  # ...and applied here, to the new probe if by key
        driver.answer(Plan())
    except ConformanceError as error:
        return error, [c.text for c in driver.calls]
    finally:
        driver.close()
    return None, [c.text for c in driver.calls]


def test_a_verdict_given_to_a_probe_owed_a_tier_call_is_judged_before_the_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When a tier call the spec owes does not come, the probes' requests ask again first
    (harmless), so the stale verdict the class gave the new probe is property 2, as on
    every other seed, and not 6 for the call it never made (the sorted stranger's
    by-key copy was named 6 on one seed).  The correct class makes that call; without
    the asking (planted), the copy is named 6."""
    error, calls = _stale_result_over_a_new_probe(SORTED + "SortedBisectAppliesByKey")
    assert error is not None and error.violation.number == 2, (error, calls)
    assert calls[-1].endswith("then its requests asked again: lookup(b'k0', 'B') -> False"), calls
    error, calls = _stale_result_over_a_new_probe(SORTED + "SortedBisectManager")
    assert error is None, (error, calls)
    monkeypatch.setattr("asynclookup.conformance.driver.ASK_BEFORE_STALLED", 0)
    error, calls = _stale_result_over_a_new_probe(SORTED + "SortedBisectAppliesByKey")
    assert error is not None and error.violation.number == 6, (error, calls)


# -- a cleanup that keeps orphans: one name whichever orphan a run makes first ----------


def _kept_orphan_delivered(impl: str, *, cleanup_first: bool) -> ConformanceError:
    """A run in which a resolved orphan's verdict reaches a new request: property 2.
    ``cleanup_first``: the request is cleaned up while its probe is in flight, so the
    orphan's own result is applied to it (a class that applies instead of deleting);
    otherwise after the verdict landed (a class whose cleanup keeps the orphan)."""
    driver = open_replay(f"impl:{impl}", mode="threaded")
    try:
        driver.lookup(b"k0", "A")
        driver.flush()
        if cleanup_first:
            driver.cleanup("A")
        driver.answer(Plan())
        driver.settle()
        driver.drain_results()
        if not cleanup_first:
            driver.cleanup("A")
        driver.lookup(b"k0", "C")
    except ConformanceError as error:
        return error
    finally:
        driver.close()
    raise AssertionError(f"{impl}: the run broke nothing")


def test_a_kept_orphans_verdict_is_named_1_when_pending_orphans_are_kept_too() -> None:
    """A cleanup that keeps every orphan shows as 2 on runs where a resolved orphan's
    verdict is delivered first, and as 1 where a PENDING orphan is flushed first.  The
    report asks, in a run of four calls, whether a PENDING orphan is kept and submitted
    (``_pending_orphan_kept``): it is, so the name is 1 on every run.  A
    class that only applies an orphan's result (the condition style's
    ``OrphanStateKept``) deletes a PENDING orphan, and keeps its 2."""
    error = _kept_orphan_delivered(SORTED + "SortedCleanupKeepsOrphans", cleanup_first=False)
    assert error.violation.number == 2, str(error)
    settled = settle_name(error)
    assert settled.violation.number == 1, str(settled)
    assert any(n.startswith("named 1, not 2: asked in a run of its own")
               for n in settled.notes), settled.notes
    assert [c.text for c in settled.calls][:3] == [
        "lookup(b'k0', 'A') -> None", "cleanup('A')", "flush()"]
    error = _kept_orphan_delivered(
        "tests.outside.condition_style:OrphanStateKept", cleanup_first=True
    )
    assert error.violation.number == 2, str(error)
    assert settle_name(error) is error
