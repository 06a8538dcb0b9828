"""The reference manager's actions, one behaviour each, in stepped mode.

Stepped mode makes every interleaving a test's choice: the test thread plays
the scheduler and, through ``manager.worker``, the worker.  Races between the
two live in test_reference_races.py; tier misbehaviour in
test_reference_tier.py; misuse and shutdown in test_reference_misuse.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

import pytest

from asynclookup.reference import AsyncLookupManager, Event, InMemoryTier, Phase, RequestContext

R1, R2 = RequestContext("r1"), RequestContext("r2")
A, B, C = b"a", b"b", b"c"


class CountingTier(InMemoryTier):
    """An in-memory tier that records every batch_lookup call."""

    def __init__(self, present: Sequence[bytes] = ()) -> None:
        super().__init__()
        self.calls: list[tuple[tuple[bytes, ...], str]] = []
        for key in present:
            self.store(key)

    def batch_lookup(self, keys: Sequence[bytes], request_context: RequestContext) -> list[bool]:
        self.calls.append((tuple(keys), request_context.req_id))
        return super().batch_lookup(keys, request_context)


@pytest.fixture
def tier() -> CountingTier:
    return CountingTier(present=[A])


@pytest.fixture
def manager(tier: CountingTier) -> Iterator[AsyncLookupManager]:
    m = AsyncLookupManager(tier, mode="stepped")
    yield m
    m.shutdown()


def test_first_lookup_returns_none(manager: AsyncLookupManager) -> None:
    """A key never asked about is not known yet: lookup returns None."""
    assert manager.lookup(A, R1) is None


def test_first_lookup_creates_a_pending_probe_in_the_batch(manager: AsyncLookupManager) -> None:
    """A new key gets a PENDING probe of a fresh generation and one batch entry."""
    manager.lookup(A, R1)
    snap = manager.snapshot()
    assert snap.probes[A].phase is Phase.PENDING
    assert snap.probes[A].requesters == {"r1"}
    assert snap.batch == ((A, "r1", 0),)
    assert snap.index == {"r1": {A}}


def test_second_request_joins_a_pending_probe(manager: AsyncLookupManager) -> None:
    """A second request for a PENDING key joins the probe instead of adding an entry."""
    manager.lookup(A, R1)
    manager.lookup(A, R2)
    snap = manager.snapshot()
    assert snap.batch == ((A, "r1", 0),)
    assert snap.probes[A].requesters == {"r1", "r2"}
    assert snap.next_generation == 1


def test_repeated_lookup_by_the_same_request_changes_nothing(
    manager: AsyncLookupManager,
) -> None:
    """Asking again for the same key on behalf of the same request records nothing new."""
    manager.lookup(A, R1)
    before = manager.snapshot()
    manager.lookup(A, R1)
    assert manager.snapshot() == before


def test_flush_moves_the_batch_to_the_queue_as_one_item(manager: AsyncLookupManager) -> None:
    """Flush submits the whole live batch as one queue item and marks it IN_FLIGHT."""
    manager.lookup(A, R1)
    manager.lookup(B, R2)
    manager.flush()
    snap = manager.snapshot()
    assert snap.batch == ()
    assert snap.queue == (((A, "r1", 0), (B, "r2", 1)),)
    assert {p.phase for p in snap.probes.values()} == {Phase.IN_FLIGHT}


def test_flush_of_an_empty_batch_submits_nothing(manager: AsyncLookupManager) -> None:
    """An empty batch puts nothing on the worker queue."""
    manager.flush()
    assert manager.snapshot().queue == ()


def test_worker_asks_the_tier_once_per_request_group(
    manager: AsyncLookupManager, tier: CountingTier
) -> None:
    """The worker groups the batch by request, in order of first appearance."""
    manager.lookup(A, R1)
    manager.lookup(B, R2)
    manager.lookup(C, R1)
    manager.flush()
    manager.worker.run_pending()
    assert tier.calls == [((A, C), "r1"), ((B,), "r2")]


def test_take_batch_waits_until_the_last_batch_is_posted(manager: AsyncLookupManager) -> None:
    """The worker takes no second batch while results of the first are unposted."""
    manager.lookup(A, R1)
    manager.flush()
    manager.lookup(B, R1)
    manager.flush()
    assert manager.worker.take_batch()
    assert manager.worker.probe_group()
    assert not manager.worker.take_batch()
    assert manager.worker.post()
    assert manager.worker.take_batch()


def test_results_are_not_visible_before_a_drain(manager: AsyncLookupManager) -> None:
    """A posted result waits in the posted queue until a drain point applies it."""
    manager.lookup(A, R1)
    manager.flush()
    manager.worker.run_pending()
    snap = manager.snapshot()
    assert snap.posted == ((A, 0, True),)
    assert snap.probes[A].phase is Phase.IN_FLIGHT


def test_first_lookup_after_a_flush_applies_posted_results(manager: AsyncLookupManager) -> None:
    """The first lookup after a flush applies everything posted and returns the verdict."""
    manager.lookup(A, R1)
    manager.flush()
    manager.worker.run_pending()
    assert manager.lookup(A, R1) is True
    assert manager.snapshot().probes[A].phase is Phase.RESOLVED


def test_a_second_lookup_after_a_drain_does_not_drain_again(
    manager: AsyncLookupManager,
) -> None:
    """Only the first lookup after a flush drains; results posted later wait."""
    manager.lookup(A, R1)
    manager.lookup(B, R2)
    manager.flush()
    manager.worker.take_batch()
    manager.worker.probe_group()
    manager.worker.post()  # r1's group only
    assert manager.lookup(A, R1) is True
    manager.worker.run_pending()  # r2's group posted after the drain
    assert manager.lookup(B, R2) is None
    assert manager.snapshot().posted == ((B, 1, False),)


def test_drain_results_applies_posted_results(manager: AsyncLookupManager) -> None:
    """drain_results applies every posted result even without a flush."""
    manager.lookup(B, R1)
    manager.flush()
    manager.lookup(C, R1)  # drains (nothing posted yet); the flag is now clear
    manager.worker.run_pending()
    manager.drain_results()
    assert manager.snapshot().probes[B].verdict is False


def test_flush_applies_posted_results_first(manager: AsyncLookupManager) -> None:
    """Flush applies posted results before it submits the batch."""
    manager.lookup(A, R1)
    manager.flush()
    manager.worker.run_pending()
    manager.flush()
    assert manager.snapshot().probes[A].verdict is True


def test_a_resolved_key_is_never_probed_again(
    manager: AsyncLookupManager, tier: CountingTier
) -> None:
    """A new request for a RESOLVED key gets the verdict without a tier call."""
    manager.lookup(A, R1)
    manager.flush()
    manager.worker.run_pending()
    manager.flush()
    assert manager.lookup(A, R2) is True
    manager.flush()
    manager.worker.run_pending()
    assert len(tier.calls) == 1


def test_cleanup_deletes_a_resolved_probe_without_requesters(
    manager: AsyncLookupManager,
) -> None:
    """Cleanup of the last requester deletes a RESOLVED probe and the index entry."""
    manager.lookup(A, R1)
    manager.flush()
    manager.worker.run_pending()
    manager.flush()
    manager.cleanup("r1")
    snap = manager.snapshot()
    assert snap.probes == {} and snap.index == {}


def test_cleanup_keeps_a_probe_other_requests_still_want(manager: AsyncLookupManager) -> None:
    """Cleanup removes only the cleaned request from a shared probe."""
    manager.lookup(A, R1)
    manager.lookup(A, R2)
    manager.cleanup("r1")
    snap = manager.snapshot()
    assert snap.probes[A].requesters == {"r2"}
    assert snap.index == {"r2": {A}}


def test_cleanup_never_applies_results(manager: AsyncLookupManager) -> None:
    """Cleanup leaves posted results where they are."""
    manager.lookup(A, R1)
    manager.lookup(B, R2)
    manager.flush()
    manager.worker.run_pending()
    manager.cleanup("r2")
    assert len(manager.snapshot().posted) == 2


def test_mark_miss_sets_a_resolved_probe_to_false(manager: AsyncLookupManager) -> None:
    """A failed load turns a RESOLVED True verdict into False."""
    manager.lookup(A, R1)
    manager.flush()
    manager.worker.run_pending()
    assert manager.lookup(A, R1) is True
    manager.mark_miss([A])
    assert manager.lookup(A, R1) is False


def test_mark_miss_of_an_unknown_key_is_a_no_op(manager: AsyncLookupManager) -> None:
    """mark_miss of a key without state changes nothing."""
    manager.lookup(A, R1)
    before = manager.snapshot()
    manager.mark_miss([B])
    assert manager.snapshot() == before


def test_mark_present_gives_a_new_generation_and_true(manager: AsyncLookupManager) -> None:
    """A store makes a probe with requesters RESOLVED True under a new generation."""
    manager.lookup(B, R1)
    manager.mark_present([B])
    probe = manager.snapshot().probes[B]
    assert (probe.generation, probe.phase, probe.verdict) == (1, Phase.RESOLVED, True)
    assert manager.lookup(B, R1) is True


def test_mark_present_leaves_a_true_probe_alone(manager: AsyncLookupManager) -> None:
    """A probe already resolved True keeps its generation."""
    manager.lookup(A, R1)
    manager.flush()
    manager.worker.run_pending()
    manager.flush()
    before = manager.snapshot()
    manager.mark_present([A])
    assert manager.snapshot() == before


def test_mark_present_of_an_unknown_key_is_a_no_op(manager: AsyncLookupManager) -> None:
    """mark_present of a key without state creates nothing."""
    manager.mark_present([A])
    assert manager.snapshot().probes == {}


def test_mark_present_never_applies_results(manager: AsyncLookupManager) -> None:
    """mark_present leaves posted results where they are."""
    manager.lookup(A, R1)
    manager.flush()
    manager.worker.run_pending()
    manager.mark_present([C])
    assert manager.snapshot().posted == ((A, 0, True),)


def test_generations_are_never_reused(manager: AsyncLookupManager) -> None:
    """Each new probe and each mark_present takes the next generation of one counter."""
    manager.lookup(A, R1)
    manager.cleanup("r1")
    manager.lookup(A, R1)
    manager.mark_present([A])
    manager.lookup(B, R1)
    snap = manager.snapshot()
    assert (snap.probes[A].generation, snap.probes[B].generation) == (2, 3)
    assert snap.next_generation == 4


def test_stepped_worker_is_idle_when_it_holds_nothing(manager: AsyncLookupManager) -> None:
    """worker.idle is False from take_batch until the last group is posted."""
    manager.lookup(A, R1)
    manager.flush()
    assert manager.worker.idle
    manager.worker.take_batch()
    assert not manager.worker.idle
    manager.worker.probe_group()
    assert not manager.worker.idle
    manager.worker.post()
    assert manager.worker.idle


def test_worker_steps_report_when_there_is_nothing_to_do(manager: AsyncLookupManager) -> None:
    """Each worker step returns False when it is not enabled."""
    assert not manager.worker.take_batch()
    assert not manager.worker.probe_group()
    assert not manager.worker.post()


def test_threaded_manager_resolves_a_lookup(tier: CountingTier) -> None:
    """In threaded mode the daemon worker answers and a drain after it applies the verdict."""
    posted = threading.Event()

    def observe(event: Event) -> None:
        if event.kind == "post":
            posted.set()

    with AsyncLookupManager(tier, observer=observe) as m:
        m.lookup(A, R1)
        m.flush()
        assert posted.wait(timeout=10)
        m.drain_results()
        assert m.lookup(A, R1) is True
