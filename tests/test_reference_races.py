"""Each race of docs/protocol.md as a scenario, driven step by step.

The test thread plays the scheduler and, through ``manager.worker``, the
worker, so each scenario pins one interleaving.  Every scenario names the bug a
real implementation shipped and asserts the reference does not have it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from asynclookup.reference import (
    AsyncLookupManager,
    EventRecorder,
    InMemoryTier,
    Phase,
    RequestContext,
)

R1, R2 = RequestContext("r1"), RequestContext("r2")
K = b"k"


class CountingTier(InMemoryTier):
    """An in-memory tier that records every batch_lookup call."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[tuple[bytes, ...], str]] = []

    def batch_lookup(self, keys: Sequence[bytes], request_context: RequestContext) -> list[bool]:
        self.calls.append((tuple(keys), request_context.req_id))
        return super().batch_lookup(keys, request_context)


@pytest.fixture
def tier() -> CountingTier:
    return CountingTier()


@pytest.fixture
def recorder() -> EventRecorder:
    return EventRecorder()


@pytest.fixture
def manager(tier: CountingTier, recorder: EventRecorder) -> Iterator[AsyncLookupManager]:
    m = AsyncLookupManager(tier, mode="stepped", observer=recorder)
    yield m
    m.shutdown()


def in_flight(manager: AsyncLookupManager, key: bytes, request: RequestContext) -> None:
    """Look ``key`` up, flush, and let the worker take the batch (not probe it)."""
    manager.lookup(key, request)
    manager.flush()
    assert manager.worker.take_batch()


# -- cleanup before flush (the seed, vLLM #55075) --------------------------------


def test_cleanup_before_flush_submits_nothing(
    manager: AsyncLookupManager, tier: CountingTier
) -> None:
    """A key whose request was cleaned up before the flush never reaches the tier."""
    manager.lookup(K, R1)
    manager.cleanup("r1")
    manager.flush()
    manager.worker.run_pending()
    assert tier.calls == []
    assert manager.snapshot().queue == ()


def test_cleanup_before_flush_reports_the_dropped_entry(
    manager: AsyncLookupManager, recorder: EventRecorder
) -> None:
    """Flush reports the cleaned-up entry as dropped, with its generation."""
    manager.lookup(K, R1)
    manager.cleanup("r1")
    manager.flush()
    [flush] = recorder.of_kind("flush")
    assert flush.fields == {"submitted": (), "dropped": ((K, "r1", 0),)}


def test_cleanup_then_reuse_before_flush_submits_only_the_new_generation(
    manager: AsyncLookupManager, tier: CountingTier
) -> None:
    """Re-created before the flush, the key is probed once, for the new request."""
    manager.lookup(K, R1)
    manager.cleanup("r1")
    manager.lookup(K, R2)
    manager.flush()
    assert manager.snapshot().queue == (((K, "r2", 1),),)
    manager.worker.run_pending()
    assert tier.calls == [((K,), "r2")]


# -- cleanup while in flight, then reuse (vLLM #54872 and the redundant probe) -----


def test_cleanup_keeps_an_in_flight_probe(manager: AsyncLookupManager) -> None:
    """Cleaning up the only requester of an IN_FLIGHT probe keeps it, orphaned."""
    in_flight(manager, K, R1)
    manager.cleanup("r1")
    probe = manager.snapshot().probes[K]
    assert (probe.phase, probe.requesters) == (Phase.IN_FLIGHT, frozenset())


def test_reuse_joins_the_orphaned_in_flight_probe(
    manager: AsyncLookupManager, tier: CountingTier
) -> None:
    """A second request joins the orphaned in-flight probe instead of probing again."""
    in_flight(manager, K, R1)
    manager.cleanup("r1")
    assert manager.lookup(K, R2) is None
    manager.flush()
    assert manager.snapshot().queue == ()
    manager.worker.run_pending()
    assert tier.calls == [((K,), "r1")]


def test_reuse_of_an_orphaned_probe_gets_its_verdict(
    manager: AsyncLookupManager, tier: CountingTier
) -> None:
    """The joined request receives the verdict of the probe it joined."""
    tier.store(K)
    in_flight(manager, K, R1)
    manager.cleanup("r1")
    manager.lookup(K, R2)
    manager.worker.run_pending()
    manager.flush()
    assert manager.lookup(K, R2) is True


def test_result_of_an_orphaned_probe_deletes_it(
    manager: AsyncLookupManager, recorder: EventRecorder
) -> None:
    """A result for a probe with no requesters left deletes the state: nothing leaks."""
    in_flight(manager, K, R1)
    manager.cleanup("r1")
    manager.worker.run_pending()
    manager.drain_results()
    assert manager.snapshot().probes == {}
    assert [e.fields for e in recorder.of_kind("result_orphaned")] == [
        {"key": K, "generation": 0}
    ]


def test_late_result_is_not_applied_to_a_recreated_probe(
    manager: AsyncLookupManager, tier: CountingTier
) -> None:
    """A result for a deleted generation is stale for the key's new probe (results by key bug)."""
    tier.store(K)
    in_flight(manager, K, R1)
    manager.cleanup("r1")
    manager.mark_present([K])  # no requesters: the orphan is forgotten
    manager.lookup(K, R2)  # a new probe, generation 1, PENDING
    tier.delete(K)
    manager.worker.run_pending()  # posts (K, 0, True)
    manager.drain_results()
    probe = manager.snapshot().probes[K]
    assert (probe.generation, probe.phase, probe.verdict) == (1, Phase.PENDING, None)


def test_recreated_probe_receives_exactly_its_own_verdict(
    manager: AsyncLookupManager, tier: CountingTier, recorder: EventRecorder
) -> None:
    """After a stale result, the new probe's own result lands once (no double verdict)."""
    tier.store(K)
    in_flight(manager, K, R1)
    manager.cleanup("r1")
    manager.mark_present([K])
    manager.lookup(K, R2)
    tier.delete(K)
    manager.worker.run_pending()
    manager.flush()  # drains the stale result, submits generation 1
    manager.worker.run_pending()
    assert manager.lookup(K, R2) is False
    applied, stale = (
        [(e.fields["key"], e.fields["generation"]) for e in recorder.of_kind(kind)]
        for kind in ("result_applied", "result_stale")
    )
    assert (applied, stale) == ([(K, 1)], [(K, 0)])


# -- mark_miss on a pending or in-flight probe ---------------------------------------


def test_mark_miss_leaves_a_pending_probe_pending(manager: AsyncLookupManager) -> None:
    """mark_miss does not force a PENDING probe to RESOLVED."""
    manager.lookup(K, R1)
    manager.mark_miss([K])
    probe = manager.snapshot().probes[K]
    assert (probe.phase, probe.verdict) == (Phase.PENDING, None)


def test_mark_miss_on_a_pending_probe_then_its_own_verdict_lands(
    manager: AsyncLookupManager, tier: CountingTier
) -> None:
    """The pending probe is still submitted and its own verdict lands once."""
    tier.store(K)
    manager.lookup(K, R1)
    manager.mark_miss([K])
    manager.flush()
    manager.worker.run_pending()
    assert manager.lookup(K, R1) is True


def test_mark_miss_leaves_an_in_flight_probe_in_flight(manager: AsyncLookupManager) -> None:
    """mark_miss does not force an IN_FLIGHT probe to RESOLVED; its result still lands."""
    in_flight(manager, K, R1)
    manager.mark_miss([K])
    assert manager.snapshot().probes[K].phase is Phase.IN_FLIGHT
    manager.worker.run_pending()
    manager.flush()
    assert manager.snapshot().probes[K].phase is Phase.RESOLVED


# -- mark_present over a pending or in-flight probe ----------------------------------


def test_mark_present_over_an_in_flight_probe_makes_its_result_stale(
    manager: AsyncLookupManager, recorder: EventRecorder
) -> None:
    """The old generation's False is ignored: the store is newer than the probe."""
    in_flight(manager, K, R1)  # the tier does not hold K: the probe will say False
    manager.mark_present([K])
    manager.worker.run_pending()
    manager.flush()
    assert manager.lookup(K, R1) is True
    assert [e.fields for e in recorder.of_kind("result_stale")] == [{"key": K, "generation": 0}]


def test_mark_present_over_a_pending_probe_drops_its_entry(
    manager: AsyncLookupManager, tier: CountingTier
) -> None:
    """The superseded batch entry is dropped at flush: the tier is not asked."""
    manager.lookup(K, R1)
    manager.mark_present([K])
    manager.flush()
    manager.worker.run_pending()
    assert tier.calls == []
    assert manager.lookup(K, R1) is True


def test_mark_present_deletes_an_orphaned_in_flight_probe(manager: AsyncLookupManager) -> None:
    """An in-flight probe nobody wants is forgotten; its result is then stale."""
    in_flight(manager, K, R1)
    manager.cleanup("r1")
    manager.mark_present([K])
    assert manager.snapshot().probes == {}
    manager.worker.run_pending()
    manager.drain_results()
    assert manager.snapshot().probes == {}


# -- one more ordering: flush drains results of an earlier batch -------------------------


def test_two_batches_in_the_queue_are_probed_in_flush_order(
    manager: AsyncLookupManager, tier: CountingTier
) -> None:
    """Batches reach the tier in the order they were flushed."""
    manager.lookup(b"x", R1)
    manager.flush()
    manager.lookup(b"y", R2)
    manager.flush()
    manager.worker.run_pending()
    assert tier.calls == [((b"x",), "r1"), ((b"y",), "r2")]
