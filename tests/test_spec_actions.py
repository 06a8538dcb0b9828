"""Unit tests of the spec's actions: one behaviour each, the whole state after each step.

After h11's state tests: every test builds its state by running spec actions
from ``INITIAL`` through ``step``, then compares the *whole* resulting State
(and the action's output) with one written out in full, so that a change to
any field shows.  A disabled action must raise ``ProtocolError`` and leave the
state as it was.  The decisions docs/spec.md takes where the protocol leaves room
are pinned here too (each test names its letter).
"""

from __future__ import annotations

import pytest

from asynclookup.spec.core import (
    INITIAL,
    TRANSITIONS,
    Action,
    Cleanup,
    Drain,
    Entry,
    Flush,
    FlushOutput,
    Lookup,
    MarkMiss,
    MarkPresent,
    Output,
    Phase,
    Post,
    Probe,
    ProbeGroup,
    ProtocolError,
    Result,
    Shutdown,
    State,
    TakeBatch,
    TierCall,
    posts,
    step,
)
from asynclookup.spec.properties import phases_match_pipeline_inv

K, J, L = b"k", b"j", b"l"
A, B = "A", "B"
PENDING, IN_FLIGHT, RESOLVED = Phase.PENDING, Phase.IN_FLIGHT, Phase.RESOLVED


def probe(generation: int, phase: Phase, verdict: bool | None, *requesters: str) -> Probe:
    return Probe(generation, phase, verdict, frozenset(requesters))


def run(*actions: Action, state: State = INITIAL) -> State:
    """The state after ``actions``, each applied with ``step``."""
    for action in actions:
        state, _ = step(state, action)
    return state


def last(*actions: Action, state: State = INITIAL) -> tuple[State, Output]:
    """The state and the output of the last of ``actions``."""
    state = run(*actions[:-1], state=state)
    return step(state, actions[-1])


def assert_disabled(state: State, action: Action) -> None:
    """``action`` raises ProtocolError in ``state``, and ``state`` is as it was."""
    before = state._replace()
    with pytest.raises(ProtocolError, match=type(action).__name__):
        step(state, action)
    assert state == before


# A probe of K for A, answered True by the tier and posted, not yet drained.
POSTED = (Lookup(K, A), Flush(), TakeBatch(), ProbeGroup((True,)), Post())
# The same probe, resolved True.
RESOLVED_TRUE = (*POSTED, Drain())


# -- lookup --------------------------------------------------------------------


def test_lookup_creates_a_pending_probe() -> None:
    """A lookup of a key without state creates a PENDING probe and batches it."""
    assert last(Lookup(K, A)) == (
        State(
            probes=((K, probe(0, PENDING, None, A)),),
            index=((A, frozenset({K})),),
            next_generation=1,
            batch=(Entry(K, A, 0),),
        ),
        None,
    )


def test_lookup_joins_a_pending_probe() -> None:
    """A second request joins the pending probe; nothing new is batched."""
    assert last(Lookup(K, A), Lookup(K, B)) == (
        State(
            probes=((K, probe(0, PENDING, None, A, B)),),
            index=((A, frozenset({K})), (B, frozenset({K}))),
            next_generation=1,
            batch=(Entry(K, A, 0),),
        ),
        None,
    )


def test_lookup_joins_an_in_flight_probe() -> None:
    """A request joins an IN_FLIGHT probe instead of probing the key again."""
    assert last(Lookup(K, A), Flush(), Lookup(K, B)) == (
        State(
            probes=((K, probe(0, IN_FLIGHT, None, A, B)),),
            index=((A, frozenset({K})), (B, frozenset({K}))),
            next_generation=1,
            queue=((Entry(K, A, 0),),),
        ),
        None,
    )


def test_lookup_joins_an_orphaned_in_flight_probe() -> None:
    """A request joins an in-flight probe whose requesters were all cleaned up."""
    assert last(Lookup(K, A), Flush(), Cleanup(A), Lookup(K, B)) == (
        State(
            probes=((K, probe(0, IN_FLIGHT, None, B)),),
            index=((B, frozenset({K})),),
            next_generation=1,
            queue=((Entry(K, A, 0),),),
        ),
        None,
    )


def test_first_lookup_after_flush_drains() -> None:
    """(c) The first lookup after a flush applies posted results before answering."""
    assert last(*POSTED, Lookup(K, A)) == (
        State(
            probes=((K, probe(0, RESOLVED, True, A)),),
            index=((A, frozenset({K})),),
            next_generation=1,
        ),
        True,
    )


def test_later_lookup_does_not_drain() -> None:
    """(c) A lookup with no flush since the last drain leaves posted results posted."""
    actions = (
        Lookup(K, A), Flush(), TakeBatch(), Lookup(J, B), ProbeGroup((True,)), Post(),
        Lookup(K, B),
    )
    assert last(*actions) == (
        State(
            probes=((J, probe(1, PENDING, None, B)), (K, probe(0, IN_FLIGHT, None, A, B))),
            index=((A, frozenset({K})), (B, frozenset({J, K}))),
            next_generation=2,
            batch=(Entry(J, B, 1),),
            posted=(Result(K, 0, True),),
        ),
        None,
    )


# -- flush ---------------------------------------------------------------------


def test_flush_submits_the_batch_as_one_item() -> None:
    """Flush submits the live batch as one queue item and marks its probes IN_FLIGHT."""
    state, output = last(Lookup(K, A), Lookup(J, B), Flush())
    assert output == FlushOutput((Entry(K, A, 0), Entry(J, B, 1)), ())
    assert state == State(
        probes=((J, probe(1, IN_FLIGHT, None, B)), (K, probe(0, IN_FLIGHT, None, A))),
        index=((A, frozenset({K})), (B, frozenset({J}))),
        next_generation=2,
        queue=((Entry(K, A, 0), Entry(J, B, 1)),),
        drain_due=True,
    )


def test_flush_drops_an_entry_cleaned_up_since_batched() -> None:
    """Flush re-validates: an entry whose request was cleaned up is dropped (the seed)."""
    assert last(Lookup(K, A), Cleanup(A), Flush()) == (
        State(next_generation=1, drain_due=True),
        FlushOutput((), (Entry(K, A, 0),)),
    )


def test_flush_drops_an_entry_superseded_by_mark_present() -> None:
    """Flush drops an entry whose probe got a new generation from mark_present."""
    assert last(Lookup(K, A), MarkPresent((K,)), Flush()) == (
        State(
            probes=((K, probe(1, RESOLVED, True, A)),),
            index=((A, frozenset({K})),),
            next_generation=2,
            drain_due=True,
        ),
        FlushOutput((), (Entry(K, A, 0),)),
    )


def test_flush_keeps_an_entry_by_generation_with_its_batched_context() -> None:
    """(b) An entry whose request left while another joined is submitted with its own
    batched request context."""
    state, output = last(Lookup(K, A), Lookup(K, B), Cleanup(A), Flush())
    assert output == FlushOutput((Entry(K, A, 0),), ())
    assert state == State(
        probes=((K, probe(0, IN_FLIGHT, None, B)),),
        index=((B, frozenset({K})),),
        next_generation=1,
        queue=((Entry(K, A, 0),),),
        drain_due=True,
    )


def test_flush_of_an_empty_batch_submits_nothing() -> None:
    """An empty batch puts nothing on the queue; a drain is still due."""
    assert last(Flush()) == (State(drain_due=True), FlushOutput((), ()))


def test_flush_applies_posted_results_first() -> None:
    """Flush applies posted results before it submits."""
    state, output = last(*POSTED, Lookup(J, A), Flush(), TakeBatch(), ProbeGroup((False,)),
                         Post(), Flush())
    assert output == FlushOutput((), ())
    assert state == State(
        probes=((J, probe(1, RESOLVED, False, A)), (K, probe(0, RESOLVED, True, A))),
        index=((A, frozenset({J, K})),),
        next_generation=2,
        drain_due=True,
    )


# -- cleanup -------------------------------------------------------------------


def test_cleanup_deletes_a_pending_orphan_but_not_its_entry() -> None:
    """Cleanup deletes a PENDING probe left without requesters; its entry stays for
    flush to drop."""
    assert last(Lookup(K, A), Cleanup(A)) == (
        State(next_generation=1, batch=(Entry(K, A, 0),)),
        None,
    )


def test_cleanup_keeps_an_in_flight_orphan() -> None:
    """Cleanup keeps an IN_FLIGHT probe left without requesters (property 8)."""
    assert last(Lookup(K, A), Flush(), Cleanup(A)) == (
        State(
            probes=((K, probe(0, IN_FLIGHT, None)),),
            next_generation=1,
            queue=((Entry(K, A, 0),),),
            drain_due=True,
        ),
        None,
    )


def test_cleanup_deletes_a_resolved_orphan() -> None:
    """Cleanup deletes a RESOLVED probe left without requesters."""
    assert last(*RESOLVED_TRUE, Cleanup(A)) == (State(next_generation=1), None)


def test_cleanup_keeps_a_probe_other_requests_still_ask() -> None:
    """Cleanup removes only its request from a shared probe."""
    assert last(Lookup(K, A), Lookup(K, B), Lookup(J, A), Cleanup(A)) == (
        State(
            probes=((K, probe(0, PENDING, None, B)),),
            index=((B, frozenset({K})),),
            next_generation=2,
            batch=(Entry(K, A, 0), Entry(J, A, 1)),
        ),
        None,
    )


def test_cleanup_of_an_unknown_request_changes_nothing() -> None:
    """Cleanup of a request that asked for nothing leaves the state as it was."""
    state = run(Lookup(K, A))
    assert step(state, Cleanup(B)) == (state, None)


def test_cleanup_never_applies_results() -> None:
    """Cleanup leaves posted results posted, even after a flush."""
    state, output = last(*POSTED, Lookup(J, B), Cleanup(B))
    assert output is None
    assert state == State(
        probes=((K, probe(0, RESOLVED, True, A)),),
        index=((A, frozenset({K})),),
        next_generation=2,
        batch=(Entry(J, B, 1),),
    )


# -- mark_miss -----------------------------------------------------------------


def test_mark_miss_turns_a_resolved_verdict_false() -> None:
    """(e) mark_miss sets a RESOLVED probe's verdict to False and keeps its generation."""
    assert last(*RESOLVED_TRUE, MarkMiss((K,))) == (
        State(
            probes=((K, probe(0, RESOLVED, False, A)),),
            index=((A, frozenset({K})),),
            next_generation=1,
        ),
        None,
    )


def test_mark_miss_leaves_pending_and_in_flight_probes() -> None:
    """mark_miss touches only RESOLVED probes: PENDING and IN_FLIGHT ones keep waiting."""
    state = run(Lookup(K, A), Flush(), Lookup(J, A))
    assert step(state, MarkMiss((K, J, L))) == (state, None)


def test_mark_miss_never_applies_results() -> None:
    """mark_miss leaves posted results posted."""
    state = run(*POSTED)
    assert step(state, MarkMiss((K,))) == (state, None)


# -- mark_present --------------------------------------------------------------


def test_mark_present_gives_a_new_generation() -> None:
    """(e) mark_present makes a probe with requesters RESOLVED True under a new generation."""
    assert last(Lookup(K, A), Flush(), MarkPresent((K,))) == (
        State(
            probes=((K, probe(1, RESOLVED, True, A)),),
            index=((A, frozenset({K})),),
            next_generation=2,
            queue=((Entry(K, A, 0),),),
            drain_due=True,
        ),
        None,
    )


def test_mark_present_deletes_an_orphan() -> None:
    """mark_present deletes a probe without requesters (an orphaned in-flight one)."""
    assert last(Lookup(K, A), Flush(), Cleanup(A), MarkPresent((K,))) == (
        State(next_generation=1, queue=((Entry(K, A, 0),),), drain_due=True),
        None,
    )


def test_mark_present_skips_a_probe_already_true() -> None:
    """mark_present leaves a probe already True as it is: no new generation."""
    state = run(*RESOLVED_TRUE)
    assert step(state, MarkPresent((K, L))) == (state, None)


def test_mark_present_makes_the_old_result_stale() -> None:
    """After mark_present, the old generation's result is ignored by drain."""
    assert last(*POSTED, MarkPresent((K,)), MarkMiss((K,)), Drain()) == (
        State(
            probes=((K, probe(1, RESOLVED, False, A)),),
            index=((A, frozenset({K})),),
            next_generation=2,
        ),
        None,
    )


# -- drain ---------------------------------------------------------------------


def test_drain_applies_a_result_of_the_live_generation() -> None:
    """Drain resolves a probe with its own generation's verdict."""
    assert last(*POSTED, Drain()) == (
        State(
            probes=((K, probe(0, RESOLVED, True, A)),),
            index=((A, frozenset({K})),),
            next_generation=1,
        ),
        None,
    )


def test_drain_ignores_a_result_for_a_recreated_key() -> None:
    """A result for a deleted probe is stale when the key has a new probe (vLLM #54872)."""
    actions = (Lookup(K, A), Flush(), Cleanup(A), MarkPresent((K,)), Lookup(K, B), TakeBatch(),
               ProbeGroup((True,)), Post(), Drain())
    assert last(*actions) == (
        State(
            probes=((K, probe(1, PENDING, None, B)),),
            index=((B, frozenset({K})),),
            next_generation=2,
            batch=(Entry(K, B, 1),),
        ),
        None,
    )


def test_drain_deletes_an_orphan_when_its_result_lands() -> None:
    """The result of an orphaned in-flight probe deletes it."""
    assert last(Lookup(K, A), Flush(), Cleanup(A), TakeBatch(), ProbeGroup((True,)), Post(),
                Drain()) == (State(next_generation=1), None)


def test_drain_with_nothing_posted_clears_drain_due() -> None:
    """Drain with nothing posted only clears drain_due."""
    assert last(Lookup(K, A), Flush(), Drain()) == (
        State(
            probes=((K, probe(0, IN_FLIGHT, None, A)),),
            index=((A, frozenset({K})),),
            next_generation=1,
            queue=((Entry(K, A, 0),),),
        ),
        None,
    )


# -- shutdown ------------------------------------------------------------------


def test_shutdown_drops_untaken_batches_and_applies_posted() -> None:
    """(a) Shutdown applies posted results and drops the batch and every queued batch."""
    actions = (*POSTED, Lookup(J, A), Flush(), Lookup(L, B), Shutdown())
    assert last(*actions) == (
        State(
            probes=(
                (J, probe(1, IN_FLIGHT, None, A)),
                (K, probe(0, RESOLVED, True, A)),
                (L, probe(2, PENDING, None, B)),
            ),
            index=((A, frozenset({J, K})), (B, frozenset({L}))),
            next_generation=3,
            stopped=True,
        ),
        None,
    )


def test_shutdown_waits_for_the_batch_in_hand() -> None:
    """(a) Shutdown is disabled while the worker holds a batch or has unposted results."""
    held = run(Lookup(K, A), Flush(), TakeBatch())
    assert_disabled(held, Shutdown())
    assert_disabled(run(ProbeGroup((True,)), state=held), Shutdown())


def test_shutdown_is_idempotent() -> None:
    """(a) A second shutdown changes nothing."""
    state = run(Lookup(K, A), Shutdown())
    assert step(state, Shutdown()) == (state, None)


EVERY_OTHER_ACTION: tuple[Action, ...] = (
    Lookup(K, A), Flush(), Cleanup(A), MarkMiss((K,)), MarkPresent((K,)), Drain(),
    TakeBatch(), ProbeGroup(None), Post(),
)


@pytest.mark.parametrize("action", EVERY_OTHER_ACTION, ids=lambda a: type(a).__name__)
def test_every_action_after_shutdown_raises(action: Action) -> None:
    """(a) After shutdown every other action raises ProtocolError."""
    assert_disabled(run(Lookup(K, A), Flush(), Shutdown()), action)


def test_shutdown_waives_the_pipeline_invariants() -> None:
    """(f) After shutdown an IN_FLIGHT probe whose batch was dropped breaks no invariant."""
    state = run(Lookup(K, A), Flush(), Shutdown())
    assert state.probes == ((K, probe(0, IN_FLIGHT, None, A)),) and state.queue == ()
    assert phases_match_pipeline_inv(state)
    assert not phases_match_pipeline_inv(state._replace(stopped=False))


# -- worker: take_batch, probe_group, post -------------------------------------


def test_take_batch_takes_the_oldest_batch() -> None:
    """take_batch holds the oldest queued batch and leaves the rest queued."""
    state, output = last(Lookup(K, A), Flush(), Lookup(J, B), Flush(), TakeBatch())
    assert output is None
    assert state == State(
        probes=((J, probe(1, IN_FLIGHT, None, B)), (K, probe(0, IN_FLIGHT, None, A))),
        index=((A, frozenset({K})), (B, frozenset({J}))),
        next_generation=2,
        queue=((Entry(J, B, 1),),),
        held=(Entry(K, A, 0),),
        drain_due=True,
    )


def test_take_batch_only_when_idle() -> None:
    """take_batch is disabled with an empty queue, a batch in hand, or unposted results."""
    assert_disabled(INITIAL, TakeBatch())
    queued_twice = run(Lookup(K, A), Flush(), Lookup(J, A), Flush())
    held = run(TakeBatch(), state=queued_twice)
    assert_disabled(held, TakeBatch())
    assert_disabled(run(ProbeGroup((True,)), state=held), TakeBatch())


def test_probe_group_groups_by_request() -> None:
    """One tier call holds the keys of the first held entry's request, with its context."""
    batched = run(Lookup(K, A), Lookup(J, B), Lookup(L, A), Flush(), TakeBatch())
    state, output = step(batched, ProbeGroup((True, False)))
    assert output == TierCall((K, L), A)
    assert state == batched._replace(
        held=(Entry(J, B, 1),), answered=(Result(K, 0, True), Result(L, 2, False))
    )


def test_probe_group_keeps_each_keys_answer() -> None:
    """(d) Answers land per key, in order: a key the tier answered badly is False alone."""
    batched = run(Lookup(K, A), Lookup(J, A), Flush(), TakeBatch())
    state, output = step(batched, ProbeGroup((False, True)))
    assert output == TierCall((K, J), A)
    assert state == batched._replace(held=(), answered=(Result(K, 0, False), Result(J, 1, True)))


def test_probe_group_tier_failure_gives_all_false() -> None:
    """(d) A failed tier call (answers None) gives False to every key of the group."""
    batched = run(Lookup(K, A), Lookup(J, A), Flush(), TakeBatch())
    state, output = step(batched, ProbeGroup(None))
    assert output == TierCall((K, J), A)
    assert state == batched._replace(
        held=(), answered=(Result(K, 0, False), Result(J, 1, False))
    )


def test_probe_group_rejects_a_wrong_length_answer() -> None:
    """An answer of the wrong length is not a ProbeGroup the spec allows."""
    batched = run(Lookup(K, A), Lookup(J, A), Flush(), TakeBatch())
    assert_disabled(batched, ProbeGroup((True,)))
    assert_disabled(batched, ProbeGroup((True, True, True)))


def test_probe_group_needs_a_batch_in_hand() -> None:
    """probe_group is disabled when the worker holds nothing."""
    assert_disabled(run(Lookup(K, A), Flush()), ProbeGroup(None))


def test_post_posts_the_answered_results() -> None:
    """post moves every answered result, in order, to the posted results."""
    answered = run(Lookup(K, A), Lookup(J, B), Flush(), TakeBatch(), ProbeGroup((True,)),
                   ProbeGroup((False,)))
    state, output = step(answered, Post())
    assert output is None
    assert state == answered._replace(
        answered=(), posted=(Result(K, 0, True), Result(J, 1, False))
    )


def test_post_needs_answered_results() -> None:
    """post is disabled when nothing is answered."""
    assert_disabled(run(Lookup(K, A), Flush(), TakeBatch()), Post())


def test_post_may_post_the_first_results_answered() -> None:
    """(h) A worker may post what it answered in parts: Post(n) moves the first n
    answered results, in order, and leaves the rest answered; the next batch is taken
    only once every result is posted."""
    answered = run(Lookup(K, A), Lookup(J, A), Lookup(L, B), Flush(), TakeBatch(),
                   ProbeGroup((True, False)))
    state, output = step(answered, Post(1))
    assert output is None
    assert state == answered._replace(
        answered=(Result(J, 1, False),), posted=(Result(K, 0, True),)
    )
    assert step(state, Post(1))[0] == step(answered, Post())[0]
    assert_disabled(answered, Post(0))
    assert_disabled(answered, Post(3))
    assert posts(answered) == (Post(), Post(1))
    assert posts(run(Lookup(K, A), Flush(), TakeBatch())) == ()


def test_every_action_kind_is_covered() -> None:
    """This module exercises every action of the transition table."""
    assert set(TRANSITIONS) == {type(a) for a in EVERY_OTHER_ACTION} | {Shutdown}
