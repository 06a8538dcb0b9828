"""API misuse, shutdown and the health check.

Misuse gets a clear error and leaves the state untouched; shutdown is
idempotent and bounded; a tier call that hangs is visible in ``health()`` and
cannot hold ``shutdown()`` past its timeout.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from asynclookup.reference import (
    AsyncLookupManager,
    EventRecorder,
    InMemoryTier,
    ManagerClosedError,
    RequestContext,
)

R1 = RequestContext("r1")
A = b"a"


class BlockingTier(InMemoryTier):
    """A tier whose batch_lookup blocks until released; it says when it is entered."""

    name = "blocking"

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def batch_lookup(self, keys: Sequence[bytes], request_context: RequestContext) -> list[bool]:
        self.entered.set()
        assert self.release.wait(timeout=30), "the test never released the tier"
        return super().batch_lookup(keys, request_context)


@pytest.fixture
def manager() -> Iterator[AsyncLookupManager]:
    m = AsyncLookupManager(InMemoryTier(), mode="stepped")
    yield m
    m.shutdown()


@pytest.fixture
def blocking() -> Iterator[BlockingTier]:
    tier = BlockingTier()
    yield tier
    tier.release.set()  # never leave a worker thread blocked behind a failed test


# -- calls after shutdown -------------------------------------------------------------

CALLS: dict[str, Callable[[AsyncLookupManager], Any]] = {
    "lookup": lambda m: m.lookup(A, R1),
    "flush": lambda m: m.flush(),
    "cleanup": lambda m: m.cleanup("r1"),
    "mark_miss": lambda m: m.mark_miss([A]),
    "mark_present": lambda m: m.mark_present([A]),
    "drain_results": lambda m: m.drain_results(),
}


@pytest.mark.parametrize("action", sorted(CALLS))
@pytest.mark.parametrize("mode", ["stepped", "threaded"])
def test_any_call_after_shutdown_raises_manager_closed(action: str, mode: str) -> None:
    """Every scheduler call after shutdown raises ManagerClosedError naming the call."""
    m = AsyncLookupManager(InMemoryTier(), mode=mode)  # type: ignore[arg-type]
    m.shutdown()
    with pytest.raises(ManagerClosedError, match=rf"closed: {action}\(\) was called after"):
        CALLS[action](m)


def test_observed_lookup_after_shutdown_raises_manager_closed() -> None:
    """The observed lookup path refuses after shutdown too, and emits nothing."""
    recorder = EventRecorder()
    m = AsyncLookupManager(InMemoryTier(), mode="stepped", observer=recorder)
    m.shutdown()
    recorder.clear()
    with pytest.raises(ManagerClosedError):
        m.lookup(A, R1)
    assert recorder.events == []


def test_lookup_asked_again_after_shutdown_raises_manager_closed() -> None:
    """A lookup the probe table could answer (same key, same request) is refused after
    shutdown as well."""
    m = AsyncLookupManager(InMemoryTier(), mode="stepped")
    m.lookup(A, R1)
    m.mark_present([A])
    assert m.lookup(A, R1) is True
    m.shutdown()
    with pytest.raises(ManagerClosedError, match=r"closed: lookup\(\) was called after"):
        m.lookup(A, R1)


def test_manager_closed_error_is_a_runtime_error() -> None:
    """Callers catching RuntimeError also catch ManagerClosedError."""
    assert issubclass(ManagerClosedError, RuntimeError)


def test_shutdown_is_idempotent() -> None:
    """A second shutdown returns quietly and emits nothing."""
    recorder = EventRecorder()
    m = AsyncLookupManager(InMemoryTier(), observer=recorder)
    m.shutdown()
    m.shutdown()
    assert recorder.kinds().count("shutdown") == 1


def test_health_works_after_shutdown() -> None:
    """health() stays callable after shutdown and reports the worker gone."""
    m = AsyncLookupManager(InMemoryTier())
    assert m.health().alive
    m.shutdown()
    assert not m.health().alive


def test_stepped_health_reports_alive_until_shutdown(manager: AsyncLookupManager) -> None:
    """A stepped worker counts as alive until shutdown."""
    assert manager.health().alive
    manager.shutdown()
    assert not manager.health().alive


# -- what misuse raises, and that it changes nothing --------------------------------

# The manager is typed Any here: these calls break its signature on purpose.
BAD_CALLS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "lookup_str_key": (lambda m: m.lookup("a", R1), "lookup: key must be bytes, got str"),
    "lookup_bytearray_key": (
        lambda m: m.lookup(bytearray(b"a"), R1),
        "lookup: key must be bytes, got bytearray",
    ),
    "lookup_str_request": (
        lambda m: m.lookup(A, "r1"),
        "lookup: request must be a RequestContext, got str",
    ),
    "cleanup_int": (lambda m: m.cleanup(1), "cleanup: request_id must be str, got int"),
    "mark_miss_single_key": (
        lambda m: m.mark_miss(A),
        "mark_miss: keys must be an iterable of bytes keys, not a single bytes",
    ),
    "mark_miss_str_element": (
        lambda m: m.mark_miss([A, "b"]),
        r"mark_miss: keys\[1\] must be bytes, got str",
    ),
    "mark_present_not_iterable": (
        lambda m: m.mark_present(3),
        "mark_present: keys must be an iterable of bytes, got int",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_misuse_raises_type_error_naming_the_argument(
    manager: AsyncLookupManager, case: str
) -> None:
    """A wrongly typed argument raises TypeError naming the call and the argument."""
    call, message = BAD_CALLS[case]
    with pytest.raises(TypeError, match=message):
        call(manager)


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_misuse_leaves_the_state_unchanged(manager: AsyncLookupManager, case: str) -> None:
    """A rejected call changes nothing, not even the batch or the drain flag."""
    manager.lookup(A, R1)
    manager.flush()
    manager.worker.run_pending()
    manager.lookup(b"b", R1)
    before = manager.snapshot()
    with pytest.raises(TypeError):
        BAD_CALLS[case][0](manager)
    assert manager.snapshot() == before


def test_mark_miss_rejects_a_bad_element_before_changing_anything(
    manager: AsyncLookupManager,
) -> None:
    """A bad key late in the list leaves earlier keys untouched."""
    manager.lookup(A, R1)
    manager.flush()
    manager.worker.run_pending()
    manager.flush()
    with pytest.raises(TypeError):
        manager.mark_miss([A, 3])  # type: ignore[list-item]
    assert manager.snapshot().probes[A].verdict is False  # tier is empty: False anyway
    manager.mark_present([A])
    with pytest.raises(TypeError):
        manager.mark_miss([A, 3])  # type: ignore[list-item]
    assert manager.snapshot().probes[A].verdict is True


def test_cleanup_of_an_unknown_request_is_a_no_op(manager: AsyncLookupManager) -> None:
    """Cleaning up a request that never asked anything changes nothing."""
    manager.lookup(A, R1)
    before = manager.snapshot()
    manager.cleanup("nobody")
    assert manager.snapshot() == before


def test_cleanup_twice_is_a_no_op(manager: AsyncLookupManager) -> None:
    """The second cleanup of the same request changes nothing."""
    manager.lookup(A, R1)
    manager.cleanup("r1")
    before = manager.snapshot()
    manager.cleanup("r1")
    assert manager.snapshot() == before


def test_unknown_mode_is_rejected() -> None:
    """A mode other than threaded or stepped raises ValueError."""
    with pytest.raises(ValueError, match="mode must be"):
        AsyncLookupManager(InMemoryTier(), mode="async")  # type: ignore[arg-type]


def test_negative_shutdown_timeout_is_rejected(manager: AsyncLookupManager) -> None:
    """shutdown(timeout=-1) raises ValueError and leaves the manager open."""
    with pytest.raises(ValueError, match="timeout"):
        manager.shutdown(timeout=-1)
    assert not manager.closed


def test_run_pending_refuses_a_threaded_worker() -> None:
    """The stepped shortcut cannot race the worker thread."""
    with AsyncLookupManager(InMemoryTier()) as m, pytest.raises(RuntimeError):
        m.worker.run_pending()


# -- shutdown ordering -------------------------------------------------------------------


def test_stepped_shutdown_finishes_the_batch_in_hand() -> None:
    """Stepped shutdown probes and posts the held batch, then applies the results."""
    tier = InMemoryTier()
    tier.store(A)
    m = AsyncLookupManager(tier, mode="stepped")
    m.lookup(A, R1)
    m.flush()
    m.worker.take_batch()
    m.shutdown()
    assert m.snapshot().probes[A].verdict is True


def test_stepped_shutdown_drops_batches_never_taken() -> None:
    """A queued batch the worker never took is dropped, not probed."""
    m = AsyncLookupManager(InMemoryTier(), mode="stepped")
    m.lookup(A, R1)
    m.flush()
    m.shutdown()
    snap = m.snapshot()
    assert snap.queue == () and snap.posted == () and snap.closed


def test_threaded_shutdown_finishes_the_batch_in_hand_and_drops_the_rest(
    blocking: BlockingTier,
) -> None:
    """The worker finishes the batch it holds; a batch still queued is never probed."""
    recorder = EventRecorder()
    m = AsyncLookupManager(blocking, observer=recorder)
    m.lookup(A, R1)
    m.flush()
    assert blocking.entered.wait(timeout=10)
    m.lookup(b"queued", R1)
    m.flush()

    def release_once_stopping() -> None:
        assert m.worker.stop_requested.wait(timeout=10)
        blocking.release.set()

    helper = threading.Thread(target=release_once_stopping)
    helper.start()
    m.shutdown(timeout=10)
    helper.join(timeout=10)
    calls = [e.fields["keys"] for e in recorder.of_kind("tier_call_started")]
    assert calls == [(A,)]
    assert m.snapshot().probes[A].verdict is False  # applied by shutdown
    assert not m.health().alive


# -- a tier call that hangs ------------------------------------------------------------


def test_health_reports_a_stuck_tier_call(blocking: BlockingTier) -> None:
    """While a tier call blocks, health() names it and says how long it has run."""
    with AsyncLookupManager(blocking) as m:
        m.lookup(A, R1)
        m.flush()
        assert blocking.entered.wait(timeout=10)
        health = m.health()
        blocking.release.set()
    assert health.alive and health.busy_for_seconds is not None
    assert health.busy_for_seconds >= 0
    assert health.current_call == "blocking.batch_lookup(1 keys, request 'r1')"


def test_health_of_an_idle_worker_reports_no_call() -> None:
    """An idle worker has no current call and no busy time."""
    with AsyncLookupManager(InMemoryTier()) as m:
        health = m.health()
    assert (health.busy_for_seconds, health.current_call) == (None, None)


def test_health_counts_finished_batches(manager: AsyncLookupManager) -> None:
    """batches_done counts batches taken and fully posted."""
    manager.lookup(A, R1)
    manager.lookup(b"b", RequestContext("r2"))
    manager.flush()
    manager.worker.take_batch()
    manager.worker.probe_group()
    manager.worker.post()
    assert manager.health().batches_done == 0
    manager.worker.run_pending()
    assert manager.health().batches_done == 1


def test_shutdown_returns_within_its_bound_when_the_tier_hangs(
    blocking: BlockingTier, caplog: pytest.LogCaptureFixture
) -> None:
    """A hung tier call cannot hold shutdown past its timeout; the manager closes anyway."""
    m = AsyncLookupManager(blocking)
    m.lookup(A, R1)
    m.flush()
    assert blocking.entered.wait(timeout=10)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="reference"):
        m.shutdown(timeout=0.2)
    elapsed = time.monotonic() - started
    assert m.closed and elapsed < 10  # generous: the bound is 0.2 s, CI may be slow
    assert m.health().alive  # abandoned, still blocked in the tier


def test_shutdown_past_its_bound_warns_naming_the_stuck_call(
    blocking: BlockingTier, caplog: pytest.LogCaptureFixture
) -> None:
    """The warning names the stuck tier call so an operator knows what hung."""
    m = AsyncLookupManager(blocking)
    m.lookup(A, R1)
    m.flush()
    assert blocking.entered.wait(timeout=10)
    with caplog.at_level(logging.WARNING, logger="reference"):
        m.shutdown(timeout=0.05)
    [record] = caplog.records
    assert "blocking.batch_lookup(1 keys, request 'r1')" in record.getMessage()


def test_abandoned_worker_exits_once_the_tier_returns(blocking: BlockingTier) -> None:
    """When the hung call finally returns, the abandoned worker stops by itself."""
    m = AsyncLookupManager(blocking)
    m.lookup(A, R1)
    m.flush()
    assert blocking.entered.wait(timeout=10)
    m.shutdown(timeout=0.05)
    blocking.release.set()
    thread = m.worker.thread
    assert thread is not None
    thread.join(timeout=10)
    assert not m.health().alive
