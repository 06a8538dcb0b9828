"""The observation hook: which events come out, in which order, with which fields.

The oracle and the trace recorder read these events, so their names, fields
and order are part of the API (asynclookup.reference.events.KINDS).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from asynclookup.reference import (
    AsyncLookupManager,
    Event,
    EventRecorder,
    InMemoryTier,
    RequestContext,
)
from asynclookup.reference.events import KINDS

R1, R2 = RequestContext("r1"), RequestContext("r2")
A, B = b"a", b"b"


@pytest.fixture
def recorder() -> EventRecorder:
    return EventRecorder()


@pytest.fixture
def manager(recorder: EventRecorder) -> Iterator[AsyncLookupManager]:
    tier = InMemoryTier()
    tier.store(A)
    m = AsyncLookupManager(tier, mode="stepped", observer=recorder)
    yield m
    m.shutdown()


def one_step(manager: AsyncLookupManager) -> None:
    """r1 asks for A and B, r2 for B; flush; the worker answers; r1 asks A again."""
    manager.lookup(A, R1)
    manager.lookup(B, R1)
    manager.lookup(B, R2)
    manager.flush()
    manager.worker.run_pending()
    manager.lookup(A, R1)


def test_one_step_emits_the_spec_actions_in_order(
    manager: AsyncLookupManager, recorder: EventRecorder
) -> None:
    """A step reads as the spec's actions: lookups, flush, take_batch, a tier call, post, drain."""
    one_step(manager)
    assert recorder.kinds() == [
        "lookup_called", "lookup_returned",
        "lookup_called", "lookup_returned",
        "lookup_called", "lookup_returned",
        "flush",
        "take_batch",
        "tier_call_started", "tier_call_finished",
        "post",
        "lookup_called", "result_applied", "result_applied", "lookup_returned",
    ]


def test_events_carry_exactly_their_documented_fields(
    manager: AsyncLookupManager, recorder: EventRecorder
) -> None:
    """Every event's fields are exactly those KINDS lists for its kind."""
    one_step(manager)
    manager.cleanup("r1")
    manager.mark_miss([B])
    manager.mark_present([B])
    manager.drain_results()
    manager.shutdown()
    events = recorder.events
    assert {e.kind for e in events} >= set(KINDS) - {"result_stale", "result_orphaned"}
    assert all(tuple(e.fields) == KINDS[e.kind] for e in events)


def test_events_name_the_role_that_acted(
    manager: AsyncLookupManager, recorder: EventRecorder
) -> None:
    """Worker actions are labelled worker, everything else scheduler, even in stepped mode."""
    one_step(manager)
    worker_kinds = {"take_batch", "tier_call_started", "tier_call_finished", "post"}
    assert all(
        e.thread == ("worker" if e.kind in worker_kinds else "scheduler")
        for e in recorder.events
    )


def test_flush_event_lists_submitted_and_dropped_entries(
    manager: AsyncLookupManager, recorder: EventRecorder
) -> None:
    """The flush event carries (key, request, generation) for kept and dropped entries."""
    manager.lookup(A, R1)
    manager.lookup(B, R2)
    manager.cleanup("r2")
    manager.flush()
    [flush] = recorder.of_kind("flush")
    assert flush.fields == {"submitted": ((A, "r1", 0),), "dropped": ((B, "r2", 1),)}


def test_tier_call_events_carry_keys_request_and_verdicts(
    manager: AsyncLookupManager, recorder: EventRecorder
) -> None:
    """tier_call_started/finished name the keys and request; finished adds verdicts."""
    one_step(manager)
    [started] = recorder.of_kind("tier_call_started")
    [finished] = recorder.of_kind("tier_call_finished")
    assert started.fields == {"keys": (A, B), "request": "r1"}
    assert finished.fields == {
        "keys": (A, B), "request": "r1", "verdicts": (True, False), "failure": None
    }


def test_post_and_apply_events_carry_generations(
    manager: AsyncLookupManager, recorder: EventRecorder
) -> None:
    """post lists (key, generation, verdict); each applied result names its generation."""
    one_step(manager)
    [post] = recorder.of_kind("post")
    assert post.fields == {"results": ((A, 0, True), (B, 1, False))}
    assert [e.fields for e in recorder.of_kind("result_applied")] == [
        {"key": A, "generation": 0, "verdict": True},
        {"key": B, "generation": 1, "verdict": False},
    ]


def test_lookup_returned_carries_the_verdict(
    manager: AsyncLookupManager, recorder: EventRecorder
) -> None:
    """lookup_returned reports the very verdict lookup returned."""
    one_step(manager)
    returned = recorder.of_kind("lookup_returned")
    assert [e.fields["verdict"] for e in returned] == [None, None, None, True]


def test_rejected_calls_emit_nothing(
    manager: AsyncLookupManager, recorder: EventRecorder
) -> None:
    """A call that raises TypeError leaves no event behind."""
    with pytest.raises(TypeError):
        manager.lookup("a", R1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        manager.mark_miss(A)  # type: ignore[arg-type]
    assert recorder.events == []


def test_drain_and_shutdown_events_follow_the_results_they_applied(
    manager: AsyncLookupManager, recorder: EventRecorder
) -> None:
    """Result events belong to the scheduler action whose event comes next."""
    manager.lookup(A, R1)
    manager.flush()
    manager.lookup(B, R1)  # the flag is cleared here; nothing posted yet
    manager.worker.run_pending()
    manager.drain_results()
    assert recorder.kinds()[-2:] == ["result_applied", "drain"]


def test_unobserved_manager_has_no_observed_lookup() -> None:
    """Without an observer, lookup is the plain class method: observation costs nothing."""
    m = AsyncLookupManager(InMemoryTier(), mode="stepped")
    assert "lookup" not in vars(m)
    m.shutdown()


def test_observed_manager_shadows_lookup() -> None:
    """With an observer, this instance's lookup is the observed one."""
    m = AsyncLookupManager(InMemoryTier(), mode="stepped", observer=EventRecorder())
    assert "lookup" in vars(m)
    m.shutdown()


def test_event_repr_is_readable() -> None:
    """An event prints as its kind, role and fields."""
    event = Event("cleanup", "scheduler", {"request": "r1"})
    assert repr(event) == "Event('cleanup', 'scheduler', {request='r1'})"
