"""Random interleavings and a real-thread stress run, checked against the spec.

Stepped: random interleavings of every scheduler and worker action, the whole
state compared with the spec's after every step.  Threaded: thousands of steps
of random requests against a slow, flaky tier on a real worker thread; the
recorded trace is replayed through the spec (tests/event_checks.py)
and every property of docs/properties.md checked; nothing may leak, and the worker must
live until shutdown and be gone after it.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from asynclookup.reference import (
    AsyncLookupManager,
    Event,
    EventRecorder,
    InMemoryTier,
    RequestContext,
)
from asynclookup.reference.manager import Snapshot
from tests.event_checks import TraceCheck, as_spec_state, replay_events

# one xdist worker runs this module, and its fixtures are session-scoped: built once
# (a module fixture is torn down whenever another module's test runs between)
pytestmark = pytest.mark.xdist_group("reference_stress")

# -- random interleavings, stepped: the test chooses every step --------------------------

KEYS = [bytes([c]) for c in b"abcdef"]


def random_step(m: AsyncLookupManager, tier: InMemoryTier, rng: random.Random) -> None:
    """One random move of the scheduler, the worker or the world."""
    live = [RequestContext(f"r{i}") for i in range(4)]
    roll = rng.random()
    if roll < 0.35:
        m.lookup(rng.choice(KEYS), rng.choice(live))
    elif roll < 0.45:
        m.flush()
    elif roll < 0.55:
        m.cleanup(rng.choice(live).req_id)
    elif roll < 0.6:
        m.mark_miss(rng.sample(KEYS, 2))
    elif roll < 0.65:
        m.mark_present(rng.sample(KEYS, 2))
    elif roll < 0.7:
        m.drain_results()
    elif roll < 0.8:
        m.worker.take_batch()
    elif roll < 0.9:
        m.worker.probe_group()
    elif roll < 0.95:
        m.worker.post()
    else:
        key = rng.choice(KEYS)
        tier.store(key) if rng.random() < 0.5 else tier.delete(key)


@pytest.mark.parametrize("seed", range(8))
def test_random_stepped_interleavings_conform(seed: int) -> None:
    """Random interleavings of every action conform to the spec, events and state alike."""
    rng = random.Random(seed)
    recorder = EventRecorder()
    tier = InMemoryTier()
    m = AsyncLookupManager(tier, mode="stepped", observer=recorder)
    check = TraceCheck()
    for _ in range(400):
        random_step(m, tier, rng)
        check.catch_up(recorder.events)
        assert as_spec_state(m.snapshot()) == check.state
    m.shutdown()
    check.catch_up(recorder.events)
    assert check.finish() == []
    assert as_spec_state(m.snapshot()) == check.state


# -- the real-thread stress test -----------------------------------------------------------


class SlowFlakyTier(InMemoryTier):
    """An in-memory tier with latency that now and then misbehaves (worker thread only)."""

    name = "slow-flaky"

    def __init__(self, seed: int) -> None:
        super().__init__()
        self._rng = random.Random(seed)

    def batch_lookup(self, keys: Sequence[bytes], request_context: RequestContext) -> list[bool]:
        roll = self._rng.random()
        time.sleep(self._rng.uniform(0, 0.0002))  # simulated tier latency, not synchronisation
        answer = super().batch_lookup(keys, request_context)
        if roll < 0.02:
            raise ConnectionError("tier went away")
        if roll < 0.04:
            return answer[:-1]
        if roll < 0.05:
            return [*answer, True]
        return answer


class Watch(EventRecorder):
    """Records events and lets the test wait until every submitted entry was posted."""

    def __init__(self) -> None:
        super().__init__()
        self.progress = threading.Condition()
        self.submitted = self.posted = 0

    def __call__(self, event: Event) -> None:
        super().__call__(event)
        if event.kind in ("flush", "post"):
            with self.progress:
                items = event.fields["submitted" if event.kind == "flush" else "results"]
                count = len(items)  # type: ignore[arg-type]
                if event.kind == "flush":
                    self.submitted += count
                else:
                    self.posted += count
                self.progress.notify_all()

    def wait_all_posted(self, timeout: float) -> bool:
        with self.progress:
            return self.progress.wait_for(lambda: self.posted == self.submitted, timeout)


STRESS_STEPS = 3000
HOT_KEYS = [f"prefix-{i}".encode() for i in range(8)]  # shared by many requests
COLD_KEYS = [f"block-{i}".encode() for i in range(400)]


@dataclass
class StressRun:
    """What the stress run leaves for the tests to check."""

    events: list[Event]
    alive_during: list[bool]  # health().alive sampled during the run and before shutdown
    after_drain: Snapshot  # every request cleaned up, every result drained
    alive_after: bool  # the worker thread after shutdown


@pytest.fixture(scope="session")  # built once: see pytestmark
def stress() -> StressRun:
    """A threaded manager driven through STRESS_STEPS random steps, then shut down.

    Requests arrive with a few blocks (some shared prefixes, some their own),
    ask for the blocks still unknown at every step, and finish or are cancelled
    at random; stores and failed loads happen now and then; the tier is slow
    and sometimes fails.
    """
    rng = random.Random(20240601)
    tier = SlowFlakyTier(seed=7)
    watch = Watch()
    m = AsyncLookupManager(tier, observer=watch)
    live: dict[RequestContext, list[bytes]] = {}  # request -> its blocks still unknown
    alive: list[bool] = []
    serial = 0
    reference_log = logging.getLogger("reference")
    reference_log.setLevel(logging.ERROR)  # the flaky tier warns on purpose, a lot
    try:
        for step in range(STRESS_STEPS):
            for _ in range(2):
                if len(live) < 6 and rng.random() < 0.4:
                    serial += 1
                    blocks = rng.sample(HOT_KEYS, rng.randint(0, 2))
                    live[RequestContext(f"r{serial}")] = blocks + rng.sample(COLD_KEYS, 2)
            for request, blocks in live.items():
                blocks[:] = [k for k in blocks if m.lookup(k, request) is None]
            for request in [r for r in live if rng.random() < 0.15]:
                del live[request]
                m.cleanup(request.req_id)
            if rng.random() < 0.05:
                m.mark_miss(rng.sample(HOT_KEYS, 2))
            waiting = [k for blocks in live.values() for k in blocks]  # PENDING or IN_FLIGHT
            if waiting and rng.random() < 0.05:
                m.mark_present([rng.choice(waiting)])  # a store lands over a probe
            if rng.random() < 0.2:
                key = rng.choice(HOT_KEYS + COLD_KEYS)
                tier.store(key) if rng.random() < 0.5 else tier.delete(key)
            if rng.random() < 0.1:
                m.drain_results()
            m.flush()
            if rng.random() < 0.7:
                # The model-execution window: the scheduler thread leaves the GIL
                # for a while, as a real engine does during the forward pass.  Not
                # synchronisation: correctness never depends on it.
                time.sleep(rng.uniform(0, 0.0005))
            if step % 250 == 0:
                alive.append(m.health().alive)
        for request in live:
            m.cleanup(request.req_id)
        m.flush()
        assert watch.wait_all_posted(timeout=30), "the worker did not catch up"
        m.drain_results()
        after_drain = m.snapshot()
        alive.append(m.health().alive)
    finally:
        m.shutdown(timeout=10)
        reference_log.setLevel(logging.NOTSET)
    thread = m.worker.thread
    assert thread is not None
    return StressRun(watch.events, alive, after_drain, thread.is_alive())


@pytest.mark.slow
def test_stress_trace_conforms_to_the_spec(stress: StressRun) -> None:
    """Thousands of real-thread steps: every event agrees with the spec, every property holds."""
    assert replay_events(stress.events, every_state=False) == []


@pytest.mark.slow
def test_stress_leaves_nothing_behind(stress: StressRun) -> None:
    """With every request cleaned up and every result drained, no state remains."""
    snap = stress.after_drain
    assert (snap.probes, snap.index, snap.batch, snap.queue) == ({}, {}, (), ())
    assert (snap.held, snap.answered, snap.posted) == ((), (), ())


@pytest.mark.slow
def test_stress_worker_lives_until_shutdown(stress: StressRun) -> None:
    """The worker thread survives the flaky tier for the whole run."""
    assert stress.alive_during and all(stress.alive_during)


@pytest.mark.slow
def test_stress_worker_is_gone_after_shutdown(stress: StressRun) -> None:
    """shutdown() joins the worker thread."""
    assert not stress.alive_after


@pytest.mark.slow
def test_stress_exercises_the_races(stress: StressRun) -> None:
    """The run reached the interesting cases: drops, stale and orphaned results, tier failures."""
    kinds = {e.kind for e in stress.events}
    dropped = any(e.fields["dropped"] for e in stress.events if e.kind == "flush")
    failed = any(e.fields["failure"] for e in stress.events if e.kind == "tier_call_finished")
    assert dropped and failed and {"result_stale", "result_orphaned"} <= kinds
