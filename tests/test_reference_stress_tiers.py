"""Stress: the threaded manager on real tiers, with faults and concurrent writers.

One scheduler (this thread) runs thousands of steps of random lookups,
cleanups, mark_miss, mark_present and drains, ending each with a flush; the
manager's worker probes a real tier (filesystem or Redis) through a
``FaultyTier`` (0-1 ms latency, short hangs, exceptions, wrong lengths,
non-bools, lazy iterables that raise); a mutator thread stores and deletes the
same keys meanwhile.  Keys and requests come from small pools (request ids are
reused after cleanup) so that the races of docs/protocol.md actually happen.

Afterwards, from the observation events (``tests/event_checks.py``): the trace
replays through the spec with every property holding; every verdict the worker
derived follows the fault policy and the real tier's state at some instant of
its call; and once every request is cleaned up and every result drained, no
state is left in the manager.  A planted bug shows the checks can fail.
"""

from __future__ import annotations

import queue
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import asynclookup.reference.worker
from asynclookup.reference import (
    AsyncLookupManager,
    Event,
    RequestContext,
    Snapshot,
    Tier,
    WorkerHealth,
)
from asynclookup.reference.faulty import CallRecord, Faults, FaultyTier
from asynclookup.reference.fs_tier import FilesystemTier
from asynclookup.reference.redis_tier import RedisTier
from asynclookup.reference.tier import InMemoryTier
from asynclookup.spec.properties import SOMETIMES, quiescent
from tests.event_checks import (
    History,
    Watcher,
    check_events,
    check_tier_answers,
    final_state,
    sometimes_reached,
)
from tests.redis_server import RedisServer

# one xdist worker runs this module, and its fixtures are session-scoped: built once
# (a module fixture is torn down whenever another module's test runs between)
pytestmark = pytest.mark.xdist_group("reference_stress_tiers")

FAULTS = Faults(
    latency=(0.0, 0.001),
    hang_rate=0.01,
    hang_seconds=0.005,
    raise_rate=0.05,
    short_rate=0.03,
    long_rate=0.03,
    non_bool_rate=0.03,
    lazy_raise_rate=0.03,
)
KEYS = [bytes([i, 0, 255 - i]) for i in range(8)]
REQUEST_POOL = [f"r{i}" for i in range(6)]
WAIT = 30.0  # seconds: bound on every wait for the worker


@dataclass(frozen=True)
class StressRun:
    """What a stress run leaves behind for the checks."""

    events: list[Event]
    calls: list[CallRecord]
    history: History
    caught_up: bool  # the worker posted every submitted entry within the bound
    health: WorkerHealth  # just before shutdown
    leftover: Snapshot  # after every request was cleaned up and results drained


def mutate(tier: Tier, commands: queue.Queue[tuple[str, bytes] | None], history: History) -> None:
    """The mutator thread: store or delete keys as told, noting when each took effect."""
    while (command := commands.get()) is not None:
        op, key = command
        started = time.monotonic_ns()
        if op == "store":
            tier.store(key, b"block:" + key)
        else:
            tier.delete(key)
        history.record(key, op == "store", started, time.monotonic_ns())


def run_stress(tier: Tier, *, steps: int, seed: int, faults: Faults = FAULTS) -> StressRun:
    """Drive a threaded manager over ``tier`` for ``steps`` scheduler steps."""
    rng = random.Random(seed)
    faulty = FaultyTier(tier, faults, seed=seed)
    watcher = Watcher()
    history = History()
    commands: queue.Queue[tuple[str, bytes] | None] = queue.Queue()
    mutator = threading.Thread(target=mutate, args=(tier, commands, history), name="mutator")
    manager = AsyncLookupManager(faulty, observer=watcher)
    live: set[str] = set()
    mutator.start()
    try:
        for _ in range(steps):
            for _ in range(rng.randint(1, 5)):
                scheduler_action(manager, rng, live)
            commands.put((rng.choice(["store", "delete"]), rng.choice(KEYS)))
            manager.flush()
            if rng.random() < 0.1:  # now and then let the worker catch up
                watcher.wait_until_posted(WAIT)
        caught_up = watcher.wait_until_posted(WAIT)
        for request in sorted(live):
            manager.cleanup(request)
        manager.drain_results()
        leftover = manager.snapshot()
        health = manager.health()
    finally:
        commands.put(None)
        mutator.join(WAIT)
        faulty.release()
        manager.shutdown()
    return StressRun(watcher.events, faulty.calls, history, caught_up, health, leftover)


def scheduler_action(manager: AsyncLookupManager, rng: random.Random, live: set[str]) -> None:
    """One random scheduler call, lookups most often."""
    roll = rng.random()
    if roll < 0.55 or not live:
        idle = [r for r in REQUEST_POOL if r not in live]
        request = rng.choice(sorted(live)) if live and (rng.random() < 0.7 or not idle) else None
        request = request or rng.choice(idle)
        live.add(request)
        manager.lookup(rng.choice(KEYS), RequestContext(request))
    elif roll < 0.78:
        request = rng.choice(sorted(live))
        live.discard(request)
        manager.cleanup(request)
    elif roll < 0.85:
        manager.mark_miss(rng.sample(KEYS, rng.randint(1, 3)))
    elif roll < 0.92:
        manager.mark_present(rng.sample(KEYS, rng.randint(1, 3)))
    else:
        manager.drain_results()


def assert_clean(run: StressRun) -> None:
    """Every check of the module docstring, with the first problems in the message."""
    assert run.caught_up, "the worker did not post every submitted entry in time"
    assert run.health.alive, f"the worker died: {run.health}"
    assert check_events(run.events) == []
    assert check_tier_answers(run.events, run.calls, run.history)[:5] == []
    left = run.leftover
    assert (left.probes, left.index, left.batch, left.queue, left.posted) == ({}, {}, (), (), ())
    assert quiescent(final_state(run.events))


@pytest.fixture(params=["filesystem", "redis"])
def real_tier(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tier]:
    """A real tier, empty: a filesystem root or a Redis prefix of this test's own."""
    if request.param == "filesystem":
        yield FilesystemTier(tmp_path, sync=False)
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    tier = RedisTier(server.url, prefix=f"stress:{uuid.uuid4().hex}:")
    yield tier
    tier.close()


# -- the stress suite --------------------------------------------------------------


@pytest.mark.slow
def test_stress_on_real_tier_keeps_every_property(real_tier: Tier) -> None:
    """3,000 steps against a real tier with faults and concurrent writers pass every check."""
    assert_clean(run_stress(real_tier, steps=3000, seed=20240611))


@pytest.fixture(scope="session")  # built once: see pytestmark
def short_run(tmp_path_factory: pytest.TempPathFactory) -> StressRun:
    """A 600-step run on the filesystem tier, shared by the coverage tests below."""
    tier = FilesystemTier(tmp_path_factory.mktemp("short"), sync=False)
    return run_stress(tier, steps=600, seed=5)


def test_short_stress_keeps_every_property(short_run: StressRun) -> None:
    """A 600-step run on the filesystem tier passes every check."""
    assert_clean(short_run)


def test_stress_injects_every_fault_kind(short_run: StressRun) -> None:
    """The stress injects each fault kind at least once, so the checks see them all."""
    assert {c.plan.kind for c in short_run.calls} == {
        "none", "hang", "raise", "short", "long", "non_bool", "lazy_raise"
    }


def test_stress_reaches_the_interesting_states(short_run: StressRun) -> None:
    """The stress passes through every SOMETIMES state of the spec (races really happen)."""
    assert sometimes_reached(short_run.events) == {name for name, _ in SOMETIMES}


# -- the checks catch planted bugs ---------------------------------------------------


def test_stress_fails_when_the_worker_turns_exceptions_into_present(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker whose tier boundary answers True for a raising tier fails the stress checks."""
    real_ask_tier = asynclookup.reference.worker.ask_tier

    def exceptions_become_present(
        tier: Tier, keys: Sequence[bytes], context: RequestContext
    ) -> asynclookup.reference.worker.TierAnswer:
        answer = real_ask_tier(tier, keys, context)
        if answer.failure is not None and answer.failure.startswith("raised"):
            return asynclookup.reference.worker.TierAnswer([True] * len(keys), None)
        return answer

    monkeypatch.setattr(asynclookup.reference.worker, "ask_tier", exceptions_become_present)
    run = run_stress(FilesystemTier(tmp_path, sync=False), steps=300, seed=11)
    with pytest.raises(AssertionError):
        assert_clean(run)
    problems = check_tier_answers(run.events, run.calls, run.history)
    assert any("(raise," in p and "the policy demands" in p for p in problems)


class InvertingTier(InMemoryTier):
    """A planted tier bug: batch_lookup answers the opposite of the truth."""

    def batch_lookup(self, keys: Sequence[bytes], request_context: RequestContext) -> list[bool]:
        return [not v for v in super().batch_lookup(keys, request_context)]


def test_tier_answer_check_catches_a_lying_tier() -> None:
    """A tier whose answers contradict its stores and deletes fails the history check."""
    run = run_stress(InvertingTier(), steps=200, seed=3, faults=Faults())
    problems = check_tier_answers(run.events, run.calls, run.history)
    assert any("throughout the call" in p for p in problems)


@pytest.fixture(scope="session")  # built once: see pytestmark
def good_trace() -> list[Event]:
    """A conformant trace of a short in-memory run, for the mutation tests below."""
    run = run_stress(InMemoryTier(), steps=300, seed=8, faults=Faults(raise_rate=0.1))
    assert check_events(run.events) == []
    return run.events


Fields = dict[str, Any]


def _replace_first(
    events: list[Event], kind: str, test: Callable[[Fields], bool],
    change: Callable[[Fields], Fields],
) -> list[Event]:
    """``events`` with the first event of ``kind`` that passes ``test`` changed."""
    for i, event in enumerate(events):
        if event.kind == kind and test(event.fields):
            fields = {**event.fields, **change(event.fields)}
            return [*events[:i], Event(kind, event.thread, fields), *events[i + 1 :]]
    raise AssertionError(f"the trace has no suitable {kind} event")


PLANTED: list[tuple[str, Callable[[Fields], bool], Callable[[Fields], Fields], str]] = [
    # a lookup returns the opposite of its probe's verdict (property 2)
    ("lookup_returned", lambda f: f["verdict"] is not None,
     lambda f: {"verdict": not f["verdict"]}, "lookup returned"),
    # flush submits the entries it should drop: the seed bug (property 1)
    ("flush", lambda f: bool(f["dropped"]),
     lambda f: {"submitted": f["submitted"] + f["dropped"], "dropped": ()}, "flush sent"),
    # a result lands on another generation (property 2)
    ("result_applied", lambda f: True,
     lambda f: {"generation": f["generation"] + 1}, "the spec applies"),
    # a result lands with another verdict (property 2)
    ("result_applied", lambda f: True, lambda f: {"verdict": not f["verdict"]}, "the spec applies"),
    # the worker loses a result (properties 5, 6)
    ("post", lambda f: len(f["results"]) > 1, lambda f: {"results": f["results"][1:]}, "posted"),
    # the worker takes a batch other than the oldest submitted one (property 3)
    ("take_batch", lambda f: len(f["entries"]) > 1,
     lambda f: {"entries": f["entries"][::-1]}, "the worker took"),
    # a tier call holds another request's keys or order (property 9)
    ("tier_call_finished", lambda f: len(f["keys"]) > 1,
     lambda f: {"keys": f["keys"][::-1]}, "the tier was asked"),
]


@pytest.mark.parametrize(
    ("kind", "test", "change", "complaint"), PLANTED, ids=[f"{p[0]}-{p[3]}" for p in PLANTED]
)
def test_event_replay_catches_a_planted_trace_bug(
    good_trace: list[Event],
    kind: str,
    test: Callable[[Fields], bool],
    change: Callable[[Fields], Fields],
    complaint: str,
) -> None:
    """Each planted deviation from the spec in a good trace is reported by the replay."""
    problems = check_events(_replace_first(good_trace, kind, test, change))
    assert len(problems) == 1 and complaint in problems[0], problems


def test_event_replay_catches_a_missing_result(good_trace: list[Event]) -> None:
    """A trace in which a posted result is never applied is reported by the replay."""
    i = next(i for i, e in enumerate(good_trace) if e.kind == "result_applied")
    assert check_events(good_trace[:i] + good_trace[i + 1 :]) != []


def test_history_places_answers_in_time() -> None:
    """A key's possible states during an interval are those of every overlapping write."""
    history = History(present_at_start=[b"k"])
    history.record(b"k", False, 10, 20)  # a delete that took effect within [10, 20]
    history.record(b"k", True, 30, 40)
    assert history.possible(b"k", 0, 5) == {True}
    assert history.possible(b"k", 15, 15) == {True, False}
    assert history.possible(b"k", 21, 29) == {False}
    assert history.possible(b"k", 41, 50) == {True}
    assert history.possible(b"other", 0, 50) == {False}
