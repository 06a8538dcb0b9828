"""Scripted scenarios for the outsider's managers of tests/strangers, without the oracle.

Each class is subclassed with a gated tier: ``batch_lookup`` records the call, waits (bounded)
for a gate the test controls, then answers what the test says.  Synchronisation is by events
and queues only: a tier call is awaited on a queue, verdicts are polled with
``drain_results()`` + ``lookup`` under a deadline, and "every earlier batch is posted" is
established by flushing a sentinel key in a batch of its own and waiting for its tier call
(a worker, or a pool that behaves like one, takes a batch only after posting the last).

The correct classes must pass every scenario; each one-bug copy must fail a scenario written
for its property.
"""

from __future__ import annotations

import importlib
import itertools
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.strangers import BUG_KIND, BUGGY, BUGGY_ALSO, CORRECT, HANGS, PROPERTY_OF_KIND

WAIT = 3.0  # bound on waiting for a tier call that must come
POLL = 1.5  # bound on polling for a verdict that must land

K0, K1, K2, K3 = b"k0", b"k1", b"k2", b"k3"


@dataclass(frozen=True)
class Ctx:
    req_id: str


Call = tuple[tuple[bytes, ...], str]
Respond = Callable[[list[bytes], str], object]


def load(path: str) -> type[Any]:
    module, _, name = path.partition(":")
    cls = getattr(importlib.import_module(module), name)
    assert isinstance(cls, type)
    return cls


def all_true(keys: list[bytes], rid: str) -> object:
    return [True] * len(keys)


def all_false(keys: list[bytes], rid: str) -> object:
    return [False] * len(keys)


class Tier:
    """A tier whose every call is recorded, held at a gate, then answered by ``respond``."""

    def __init__(self) -> None:
        self.calls: queue.Queue[Call] = queue.Queue()
        self.gate = threading.Event()
        self.gate.set()
        self.respond: Respond = all_true
        self.finished = 0
        self._lock = threading.Lock()

    def __call__(self, keys: list[bytes], req_context: Any) -> object:
        self.calls.put((tuple(keys), req_context.req_id))
        if not self.gate.wait(2 * WAIT):
            raise TimeoutError("the test never opened the gate")
        try:
            return self.respond(list(keys), req_context.req_id)
        finally:
            with self._lock:
                self.finished += 1


class Harness:
    """One manager of the class at ``path``, wired to a gated ``Tier``."""

    _sentinels = itertools.count()

    def __init__(self, path: str) -> None:
        self.path = path
        self.tier = tier = Tier()

        def batch_lookup(self_: Any, keys: list[bytes], req_context: Any) -> object:
            return tier(keys, req_context)

        cls = load(path)
        gated = type(f"Gated{cls.__name__}", (cls,), {"batch_lookup": batch_lookup})
        self.mgr: Any = gated("memory")
        self._tick = threading.Event()

    def lookup(self, key: bytes, rid: str) -> bool | None:
        verdict: bool | None = self.mgr.lookup(key, Ctx(rid))
        return verdict

    def flush(self) -> None:
        self.mgr.flush()

    def next_call(self) -> Call:
        try:
            return self.tier.calls.get(timeout=WAIT)
        except queue.Empty:
            raise AssertionError(f"{self.path}: no tier call within {WAIT} s") from None

    def calls_until(self, key: bytes) -> list[Call]:
        """The tier calls made before the first call that holds ``key`` (normalised)."""
        before: list[Call] = []
        while True:
            keys, rid = self.next_call()
            if key in keys:
                return before
            before.append((tuple(sorted(keys)), rid))

    def sentinel(self) -> list[Call]:
        """Flushes a fresh key in a batch of its own; returns the tier calls made before it.

        When the sentinel's call comes, every earlier batch has been probed and posted.
        """
        n = next(self._sentinels)
        key, rid = b"sentinel-%d" % n, f"Z{n}"
        assert self.lookup(key, rid) is None
        self.flush()
        return sorted(self.calls_until(key))

    def poll(self, key: bytes, rid: str, deadline: float = POLL) -> bool | None:
        """drain_results() + lookup until a verdict lands or the deadline passes."""
        end = time.monotonic() + deadline
        while True:
            self.mgr.drain_results()
            verdict = self.lookup(key, rid)
            if verdict is not None or time.monotonic() > end:
                return verdict
            self._tick.wait(0.002)

    def close(self) -> None:
        self.tier.gate.set()
        self.mgr.shutdown()


@pytest.fixture
def make() -> Iterator[Callable[[str], Harness]]:
    made: list[Harness] = []

    def factory(path: str) -> Harness:
        harness = Harness(path)
        made.append(harness)
        return harness

    yield factory
    for harness in made:
        harness.close()


# ---------------------------------------------------------------------- scenarios


def basic_verdicts(h: Harness) -> None:
    assert h.lookup(K0, "A") is None
    assert h.lookup(K1, "A") is None
    h.tier.respond = lambda keys, rid: [key == K0 for key in keys]
    h.flush()
    keys, rid = h.next_call()
    assert (sorted(keys), rid) == ([K0, K1], "A")
    assert h.poll(K0, "A") is True
    assert h.poll(K1, "A") is False
    assert h.lookup(K0, "B") is True  # B joins a resolved probe
    assert h.sentinel() == []  # nothing was probed again


def one_request_per_tier_call(h: Harness) -> None:
    h.lookup(K0, "A")
    h.lookup(K1, "B")
    h.lookup(K2, "A")
    h.flush()
    assert h.sentinel() == [((K0, K2), "A"), ((K1,), "B")]
    assert h.poll(K1, "B") is True
    assert h.poll(K2, "A") is True


def join_pending_probe(h: Harness) -> None:
    assert h.lookup(K0, "A") is None
    assert h.lookup(K0, "B") is None
    h.flush()
    assert h.sentinel() == [((K0,), "A")]
    assert h.poll(K0, "A") is True
    assert h.poll(K0, "B") is True


def cleanup_before_flush(h: Harness) -> None:
    h.lookup(K0, "A")
    h.mgr.cleanup("A")
    assert h.lookup(K0, "B") is None
    h.flush()
    assert h.sentinel() == [((K0,), "B")]
    assert h.poll(K0, "B") is True


def superseded_entry_not_sent(h: Harness) -> None:
    assert h.lookup(K0, "A") is None
    h.mgr.mark_present([K0])
    assert h.lookup(K0, "A") is True
    h.flush()
    assert h.sentinel() == []


def cleanup_keeps_in_flight_probe(h: Harness) -> None:
    h.tier.gate.clear()
    h.lookup(K0, "A")
    h.flush()
    assert h.next_call() == ((K0,), "A")
    h.mgr.cleanup("A")
    assert h.lookup(K0, "B") is None
    h.flush()
    h.tier.gate.set()
    assert h.sentinel() == []  # B joined the in-flight probe: no second probe
    assert h.poll(K0, "B") is True


def orphan_result_is_dropped(h: Harness) -> None:
    h.tier.gate.clear()
    h.lookup(K0, "A")
    h.flush()
    assert h.next_call() == ((K0,), "A")
    h.mgr.cleanup("A")
    h.tier.gate.set()
    h.sentinel()
    h.mgr.drain_results()  # the orphan's own result deletes it
    assert h.lookup(K0, "B") is None
    h.tier.respond = all_false
    h.flush()
    assert h.next_call() == ((K0,), "B")
    assert h.poll(K0, "B") is False


def stale_result_after_mark_present(h: Harness) -> None:
    h.tier.gate.clear()
    h.lookup(K0, "A")
    h.flush()
    assert h.next_call() == ((K0,), "A")
    h.mgr.mark_present([K0])
    assert h.lookup(K0, "A") is True
    h.tier.respond = all_false
    h.tier.gate.set()
    h.sentinel()
    h.mgr.drain_results()
    assert h.lookup(K0, "A") is True


def stale_result_after_cleanup_and_relookup(h: Harness) -> None:
    b_gate = threading.Event()

    def respond(keys: list[bytes], rid: str) -> object:
        if rid == "B":
            assert b_gate.wait(2 * WAIT)
            return [False] * len(keys)
        return [True] * len(keys)

    h.tier.gate.clear()
    h.lookup(K0, "A")
    h.flush()
    assert h.next_call() == ((K0,), "A")
    h.mgr.cleanup("A")  # orphaned in flight
    h.mgr.mark_present([K0])  # no requesters: the state goes
    assert h.lookup(K0, "B") is None  # a new probe, a new generation
    h.flush()
    h.tier.respond = respond
    h.tier.gate.set()
    assert h.next_call() == ((K0,), "B")  # so A's stale result is posted
    h.mgr.drain_results()
    assert h.lookup(K0, "B") is None
    b_gate.set()
    assert h.poll(K0, "B") is False


def mark_miss_leaves_pending_and_in_flight(h: Harness) -> None:
    assert h.lookup(K0, "A") is None
    h.mgr.mark_miss([K0])
    assert h.lookup(K0, "A") is None
    h.flush()
    assert h.next_call() == ((K0,), "A")
    assert h.poll(K0, "A") is True
    h.mgr.mark_miss([K0])
    assert h.lookup(K0, "A") is False
    h.tier.gate.clear()
    h.lookup(K1, "A")
    h.flush()
    assert h.next_call() == ((K1,), "A")
    h.mgr.mark_miss([K1])
    assert h.lookup(K1, "A") is None
    h.tier.gate.set()
    assert h.poll(K1, "A") is True


def mark_present_over_resolved(h: Harness) -> None:
    h.tier.respond = all_false
    h.lookup(K0, "A")
    h.flush()
    assert h.next_call() == ((K0,), "A")
    assert h.poll(K0, "A") is False
    h.mgr.mark_present([K0])
    assert h.lookup(K0, "A") is True
    h.mgr.mark_miss([K0])
    assert h.lookup(K0, "A") is False
    h.mgr.mark_present([K2])  # a key never looked up: nothing happens
    assert h.lookup(K2, "A") is None


def tier_raises_gives_false(h: Harness) -> None:
    def respond(keys: list[bytes], rid: str) -> object:
        raise RuntimeError("tier down")

    h.tier.respond = respond
    h.lookup(K0, "A")
    h.lookup(K1, "A")
    h.flush()
    h.next_call()
    assert h.poll(K0, "A") is False
    assert h.poll(K1, "A") is False
    h.tier.respond = all_true
    h.lookup(K2, "A")
    h.flush()
    assert h.next_call() == ((K2,), "A")
    assert h.poll(K2, "A") is True


def short_answer_gives_false(h: Harness) -> None:
    h.tier.respond = lambda keys, rid: [True]
    h.lookup(K0, "A")
    h.lookup(K1, "A")
    h.flush()
    (first, second), _ = h.next_call()
    assert h.poll(second, "A") is False
    assert h.poll(first, "A") in (True, False)


def worker_survives_lazy_raise(h: Harness) -> None:
    def respond(keys: list[bytes], rid: str) -> object:
        def answers() -> Iterator[bool]:
            yield True
            raise RuntimeError("tier broke part-way")

        return answers()

    h.tier.respond = respond
    h.lookup(K0, "A")
    h.lookup(K1, "A")
    h.flush()
    (first, second), _ = h.next_call()
    assert h.poll(second, "A") is False
    assert h.poll(first, "A") in (True, False)
    h.tier.respond = all_true
    h.lookup(K2, "A")
    h.flush()
    assert h.next_call() == ((K2,), "A")
    assert h.poll(K2, "A") is True


def non_bool_long_and_junk_answers(h: Harness) -> None:
    h.tier.respond = lambda keys, rid: [1, True]
    h.lookup(K0, "A")
    h.lookup(K1, "A")
    h.flush()
    (first, second), _ = h.next_call()
    assert h.poll(first, "A") is False  # 1 is not a bool
    assert h.poll(second, "A") in (True, False)
    h.tier.respond = lambda keys, rid: [True, False, True]
    h.lookup(K2, "B")
    h.lookup(K3, "B")
    h.flush()
    (first, second), _ = h.next_call()
    assert h.poll(first, "B") in (True, False)
    assert h.poll(second, "B") is False
    h.tier.respond = lambda keys, rid: None  # not even iterable
    h.lookup(b"k4", "C")
    h.flush()
    h.next_call()
    assert h.poll(b"k4", "C") is False


def first_lookup_after_flush_drains(h: Harness) -> None:
    h.tier.gate.clear()
    h.lookup(K0, "A")
    h.flush()
    assert h.next_call() == ((K0,), "A")
    h.lookup(K1, "Z")  # K0's result cannot be posted yet: the gate is closed
    h.flush()  # so this flush applies nothing of K0
    h.tier.gate.set()
    assert h.next_call() == ((K1,), "Z")  # K0's batch is posted before K1's is taken
    assert h.lookup(K0, "A") is True  # the first lookup after a flush applies it


# ---------------------------------------------------------------------- correct classes


@pytest.mark.parametrize("path", CORRECT)
def test_basic_verdicts(make: Callable[[str], Harness], path: str) -> None:
    """lookup answers None, then the tier's verdicts once they land, with no second probe."""
    basic_verdicts(make(path))


@pytest.mark.parametrize("path", CORRECT)
def test_one_request_per_tier_call(make: Callable[[str], Harness], path: str) -> None:
    """Each tier call holds the keys of one request, with that request's context."""
    one_request_per_tier_call(make(path))


@pytest.mark.parametrize("path", CORRECT)
def test_join_pending_probe(make: Callable[[str], Harness], path: str) -> None:
    """A second request for a PENDING key joins the probe: one tier call serves both."""
    join_pending_probe(make(path))


@pytest.mark.parametrize("path", CORRECT)
def test_cleanup_before_flush(make: Callable[[str], Harness], path: str) -> None:
    """An entry cleaned up before the flush never reaches the tier (the seed race)."""
    cleanup_before_flush(make(path))


@pytest.mark.parametrize("path", CORRECT)
def test_superseded_entry_not_sent(make: Callable[[str], Harness], path: str) -> None:
    """mark_present on a PENDING probe answers True at once and its old entry is not sent."""
    superseded_entry_not_sent(make(path))


@pytest.mark.parametrize("path", CORRECT)
def test_cleanup_keeps_in_flight_probe(make: Callable[[str], Harness], path: str) -> None:
    """An orphaned IN_FLIGHT probe survives cleanup and a later request joins it."""
    cleanup_keeps_in_flight_probe(make(path))


@pytest.mark.parametrize("path", CORRECT)
def test_orphan_result_is_dropped(make: Callable[[str], Harness], path: str) -> None:
    """An orphan's own result deletes it, so a later request probes the key anew."""
    orphan_result_is_dropped(make(path))


@pytest.mark.parametrize("path", CORRECT)
def test_stale_result_after_mark_present(make: Callable[[str], Harness], path: str) -> None:
    """A result for the generation mark_present superseded is ignored."""
    stale_result_after_mark_present(make(path))


@pytest.mark.parametrize("path", CORRECT)
def test_stale_result_after_cleanup_and_relookup(make: Callable[[str], Harness], path: str) -> None:
    """A cleaned-up probe's late result does not land on a new probe of the same key."""
    stale_result_after_cleanup_and_relookup(make(path))


@pytest.mark.parametrize("path", CORRECT)
def test_mark_miss(make: Callable[[str], Harness], path: str) -> None:
    """mark_miss leaves PENDING and IN_FLIGHT probes alone and sets RESOLVED ones to False."""
    mark_miss_leaves_pending_and_in_flight(make(path))


@pytest.mark.parametrize("path", CORRECT)
def test_mark_present_over_resolved(make: Callable[[str], Harness], path: str) -> None:
    """mark_present turns a RESOLVED False into True and ignores unknown keys."""
    mark_present_over_resolved(make(path))


@pytest.mark.parametrize("path", CORRECT)
def test_tier_raises(make: Callable[[str], Harness], path: str) -> None:
    """A raising tier gives False to every key of its call and the worker goes on."""
    tier_raises_gives_false(make(path))


@pytest.mark.parametrize("path", CORRECT)
def test_short_answer(make: Callable[[str], Harness], path: str) -> None:
    """A key the tier's short answer left out gets False."""
    short_answer_gives_false(make(path))


@pytest.mark.parametrize("path", CORRECT)
def test_lazy_raise(make: Callable[[str], Harness], path: str) -> None:
    """A lazy answer raising part-way gives False to the rest and the worker survives."""
    worker_survives_lazy_raise(make(path))


@pytest.mark.parametrize("path", CORRECT)
def test_non_bool_long_and_junk(make: Callable[[str], Harness], path: str) -> None:
    """Non-bool elements, extra elements and a non-iterable answer never yield a wrong True."""
    non_bool_long_and_junk_answers(make(path))


@pytest.mark.parametrize("path", CORRECT)
def test_first_lookup_after_flush_drains(make: Callable[[str], Harness], path: str) -> None:
    """The first lookup after a flush applies every result posted by then."""
    first_lookup_after_flush_drains(make(path))


@pytest.mark.parametrize("path", CORRECT)
def test_shutdown_finishes_batch_joins_and_is_idempotent(path: str) -> None:
    """shutdown lets the batch in hand finish, joins every thread it started, and may repeat."""
    before = set(threading.enumerate())
    h = Harness(path)
    try:
        h.lookup(K0, "A")
        h.flush()
        assert h.next_call() == ((K0,), "A")
        assert h.poll(K0, "A") is True
        h.tier.gate.clear()
        h.lookup(K1, "A")
        h.flush()
        assert h.next_call() == ((K1,), "A")
        h.tier.gate.set()
        h.mgr.shutdown()
        assert h.tier.finished == 2
        h.mgr.shutdown()
    finally:
        h.tier.gate.set()
        h.mgr.shutdown()
    leftover = [t.name for t in threading.enumerate() if t not in before and t.is_alive()]
    assert leftover == []


# ---------------------------------------------------------------------- one-bug copies

SCENARIOS_FOR: dict[int, tuple[Callable[[Harness], None], ...]] = {
    1: (cleanup_before_flush, superseded_entry_not_sent),
    2: (stale_result_after_mark_present, stale_result_after_cleanup_and_relookup),
    3: (mark_miss_leaves_pending_and_in_flight,),
    4: (),  # filled below: the cleanup scenario
    5: (),
    # a verdict that never comes: keys a short answer stranded, or never drained
    6: (short_answer_gives_false, first_lookup_after_flush_drains),
    7: (worker_survives_lazy_raise,),  # a worker that dies
    8: (cleanup_keeps_in_flight_probe,),
    9: (one_request_per_tier_call,),
}


def cleanup_forgets_everything(h: Harness) -> None:
    h.tier.respond = all_true
    h.lookup(K2, "A")
    h.flush()
    assert h.next_call() == ((K2,), "A")
    assert h.poll(K2, "A") is True  # a RESOLVED probe of A's
    h.lookup(K0, "A")
    h.lookup(K0, "B")  # B joins A's PENDING probe
    h.lookup(K1, "A")
    h.mgr.cleanup("A")
    h.mgr.cleanup("B")
    h.flush()
    assert h.sentinel() == []  # nobody is left to ask for k0 or k1
    assert h.lookup(K2, "C") is None  # A's resolved probe went with A
    h.flush()
    assert h.next_call() == ((K2,), "C")


SCENARIOS_FOR[4] = SCENARIOS_FOR[5] = (cleanup_forgets_everything,)


@pytest.mark.parametrize("path", CORRECT)
def test_cleanup_forgets_everything(make: Callable[[str], Harness], path: str) -> None:
    """After every requester is cleaned up, nothing of theirs is probed or answered."""
    cleanup_forgets_everything(make(path))


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("path", sorted(BUGGY))
def test_bug_copy_fails_a_scenario_of_its_property(
    make: Callable[[str], Harness], path: str
) -> None:
    """Each one-bug copy fails a scripted scenario written for the property it breaks."""
    scenarios = SCENARIOS_FOR[PROPERTY_OF_KIND[BUG_KIND[path]]]
    failed: list[str] = []
    for scenario in scenarios:
        try:
            scenario(make(path))
        except AssertionError as error:
            failed.append(f"{scenario.__name__}: {error}")
            break
    assert failed, f"{path} passed {[s.__name__ for s in scenarios]}"


# ---------------------------------------------------------------------- registry, hangs


def test_registry_is_consistent() -> None:
    """Every registered path imports, bug copies subclass a correct class, properties are 1-9."""
    correct = {path: load(path) for path in CORRECT}
    assert len(correct) >= 10
    # one style to a module, but for the later outsider's three, on one shared base
    first = [path.partition(":")[0] for path in CORRECT if ".newcomers:" not in path]
    assert len(set(first)) == len(first)
    for path, prop in BUGGY.items():
        assert 1 <= prop <= 9
        assert prop not in BUGGY_ALSO[path]
        cls = load(path)
        assert any(issubclass(cls, base) for base in correct.values()), path
    for path in HANGS:
        assert any(issubclass(load(path), base) for base in correct.values()), path


@pytest.mark.parametrize("path", sorted(HANGS))
def test_hang_class_blocks_in_its_call(path: str) -> None:
    """A hang class gets stuck in exactly the call HANGS names (checked with a bounded wait)."""
    h = Harness(path)
    in_call: list[str] = []
    done = threading.Event()

    def drive() -> None:
        for i, key in enumerate((K0, K1, K2)):
            in_call.append("lookup")
            h.lookup(key, f"R{i}")
            in_call.append("flush")
            h.flush()
        in_call.append("shutdown")
        h.mgr.shutdown()
        done.set()

    # A daemon thread: the call never returns, and the process must still be able to exit.
    threading.Thread(target=drive, name=f"drive-{path}", daemon=True).start()
    assert not done.wait(0.3)
    assert in_call[-1] == HANGS[path]
