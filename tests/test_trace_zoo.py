"""Traces recorded from the mutant zoo by ``VllmRecorder`` under real threads.

Each scenario is a short scripted run that makes one bug observable: a gated
tier holds the worker inside a tier call while the scheduler acts, and
``settle`` waits (bounded) until the worker has posted a given number of
batches.  The same scenario recorded from the correct ``VllmShapedManager``
must conform, and recorded from the mutant it targets must be rejected with the
property ``tests.zoo.mutants.MUTANTS`` names.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from asynclookup.reference.tier import RequestContext
from asynclookup.reference.trace import record_vllm
from asynclookup.trace.check import Outcome, check_lines
from tests.zoo import mutants
from tests.zoo.mutants import MUTANTS
from tests.zoo.vllm_shaped import VllmShapedManager

BOUND = 5.0  # seconds any wait in a scenario may take
K1, K2, K3 = b"k1", b"k2", b"k3"


class Gate:
    """Holds one tier call: ``entered`` is set when the worker is inside, ``release`` lets it go."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()


class ScriptTier:
    """The zoo's tier: answers from ``present``, with queued gates and faults per call."""

    def __init__(self) -> None:
        self.present: set[bytes] = {K1}
        self.gates: deque[Gate] = deque()
        self.faults: deque[str] = deque()
        self.open: list[Gate] = []

    def batch_lookup(self, keys: list[bytes], ctx: Any) -> Any:
        gate = self.gates.popleft() if self.gates else None
        if gate is not None:
            gate.entered.set()
            gate.release.wait(BOUND)
        fault = self.faults.popleft() if self.faults else "none"
        answer = [key in self.present for key in keys]
        if fault == "short":
            return answer[:-1]
        if fault == "lazy_raise":
            return _raising(answer[:1])
        return answer


def _raising(head: list[bool]) -> Iterator[bool]:
    yield from head
    raise OSError("tier connection reset")


class CountingQueue(queue.Queue[Any]):
    """The results queue, counting the worker's posts so that a scenario can wait for them."""

    def __init__(self) -> None:
        super().__init__()
        self.posts = 0
        self.posted = threading.Condition()

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        super().put(item, block, timeout)
        with self.posted:
            self.posts += 1
            self.posted.notify_all()


class Run:
    """One scripted run of a vLLM-shaped class, recorded to a trace."""

    def __init__(self, cls: Any) -> None:
        self.tier = ScriptTier()
        tier = self.tier

        class Scripted(cls):  # type: ignore[misc]
            def batch_lookup(self, keys: list[bytes], req_context: Any) -> Any:
                return tier.batch_lookup(keys, req_context)

        Scripted.__name__ = Scripted.__qualname__ = cls.__name__
        self.manager: Any = Scripted("script")
        self.results = CountingQueue()
        self.manager._pending_results = self.results

    def lookup(self, key: bytes, request: str) -> Any:
        return self.manager.lookup(key, RequestContext(request))

    def hold(self) -> Gate:
        """The next tier call waits inside the tier until ``release``."""
        gate = Gate()
        self.tier.gates.append(gate)
        self.tier.open.append(gate)
        return gate

    def entered(self, gate: Gate) -> None:
        assert gate.entered.wait(BOUND), "the worker never made the held tier call"

    def held_probe(self, key: bytes, request: str) -> Gate:
        """``lookup`` and ``flush``; the probe's tier call is made and held until released."""
        self.lookup(key, request)
        gate = self.hold()
        self.manager.flush()
        self.entered(gate)
        return gate

    def settle(self, posts: int) -> bool:
        """Wait until the worker has posted ``posts`` batches in all; False after the bound."""
        with self.results.posted:
            return self.results.posted.wait_for(lambda: self.results.posts >= posts, BOUND)

    def finish(self) -> None:
        for gate in self.tier.open:
            gate.release.set()
        self.manager.shutdown()


def _tolerant(step: Callable[[], None]) -> None:
    """Run ``step``; a mutant's own assertion or crash is in the trace, not a test error."""
    with contextlib.suppress(Exception):
        step()


def seed(run: Run) -> None:
    """A cleaned-up entry and a re-created one of the same key sit in one batch."""
    run.lookup(K1, "r1")
    run.manager.cleanup("r1")
    run.lookup(K1, "r1")
    run.manager.flush()
    run.settle(1)


def stale_result(run: Run) -> None:
    """A result for a deleted probe lands while a new probe of the key is in flight."""
    first = run.held_probe(K1, "r1")
    run.manager.cleanup("r1")
    run.manager.mark_present([K1])
    run.lookup(K1, "r2")
    second = run.hold()
    run.manager.flush()
    first.release.set()
    run.entered(second)
    run.settle(1)
    run.manager.drain_results()
    run.lookup(K1, "r2")


def mark_miss_in_flight(run: Run) -> None:
    """mark_miss names a key whose probe is in flight."""
    run.held_probe(K1, "r1")  # held: finish() releases it
    run.manager.mark_miss([K1])
    run.lookup(K1, "r1")


def lazy_raise(run: Run) -> None:
    """The tier's lazy answer raises part-way."""
    run.tier.faults.append("lazy_raise")
    run.lookup(K1, "r1")
    run.lookup(K2, "r1")
    run.manager.flush()  # shutdown (in finish) joins the worker, dead or alive


def short_answer(run: Run) -> None:
    """The tier answers one key short; a later batch forces the post of the first."""
    run.tier.faults.append("short")
    run.lookup(K1, "r1")
    run.lookup(K2, "r1")
    run.manager.flush()
    run.settle(1)
    run.lookup(K3, "r2")
    run.manager.flush()
    run.settle(2)
    run.manager.flush()
    run.lookup(K2, "r1")


def cleanup_in_flight(run: Run) -> None:
    """A request is cleaned up while its probe is in flight, then another asks for the key."""
    gate = run.held_probe(K1, "r1")
    run.manager.cleanup("r1")
    run.lookup(K1, "r2")
    gate.release.set()
    run.settle(1)
    run.manager.flush()  # the mutant probes K1 again; shutdown waits for that call


def cleanup_resolved(run: Run) -> None:
    """A request is cleaned up after its probe resolved."""
    run.lookup(K1, "r1")
    run.manager.flush()
    run.settle(1)
    run.manager.flush()
    run.manager.cleanup("r1")


def mark_present_in_flight(run: Run) -> None:
    """mark_present lands while the key's probe is in flight; the tier then says absent."""
    run.tier.present.clear()
    gate = run.held_probe(K1, "r1")
    run.manager.mark_present([K1])
    gate.release.set()
    run.settle(1)
    run.manager.drain_results()
    run.lookup(K1, "r1")


def posted_between_flush_and_lookup(run: Run) -> None:
    """A result is posted after a flush; the next lookup must drain it."""
    gate = run.held_probe(K1, "r1")
    run.lookup(K2, "r2")
    run.manager.flush()
    gate.release.set()
    run.settle(2)
    run.lookup(K1, "r1")


def two_requests(run: Run) -> None:
    """Two requests' keys in one batch; r1 also joins r2's probe of K2."""
    run.lookup(K1, "r1")
    run.lookup(K2, "r2")
    run.lookup(K2, "r1")
    run.manager.flush()
    run.settle(1)


def orphan_result(run: Run) -> None:
    """The result of an orphaned in-flight probe is drained; a later batch forces its post."""
    gate = run.held_probe(K1, "r1")
    run.manager.cleanup("r1")
    run.lookup(K2, "r2")
    run.manager.flush()
    gate.release.set()
    run.settle(2)
    run.manager.drain_results()
    run.lookup(K1, "r2")


def three_batches(run: Run) -> None:
    """Three batches are posted between two drains."""
    run.tier.present = {K1}
    gate = run.held_probe(K1, "r1")
    run.lookup(K2, "r2")
    run.manager.flush()
    run.lookup(K3, "r3")
    run.manager.flush()
    gate.release.set()
    run.settle(3)
    run.lookup(K1, "r1")
    run.lookup(K2, "r2")


SCENARIOS: dict[str, Callable[[Run], None]] = {
    "FlushWithoutRevalidation": seed,
    "ResultsAppliedByKey": stale_result,
    "MarkMissForcesResolved": mark_miss_in_flight,
    "LazyIterableKillsWorker": lazy_raise,
    "ZipTruncatesShortAnswers": short_answer,
    "CleanupDeletesInFlight": cleanup_in_flight,
    "CleanupKeepsIndex": cleanup_resolved,
    "MarkPresentKeepsGeneration": mark_present_in_flight,
    "LookupNeverDrains": posted_between_flush_and_lookup,
    "OneContextPerBatch": two_requests,
    "OrphanResultResurrects": orphan_result,
    "GenerationFromTableSize": stale_result,
    "DrainStopsAtFirstBatch": three_batches,
}


def record(cls: Any, scenario: Callable[[Run], None], path: Path) -> Outcome:
    """Run ``scenario`` on ``cls`` under the recorder and check the trace."""
    run = Run(cls)
    with record_vllm(run.manager, path, tables=("_lookup_state", "_req_keys")):
        _tolerant(lambda: scenario(run))
        _tolerant(run.finish)
    with path.open("rb") as f:
        return check_lines(f)


def test_every_mutant_has_a_scenario() -> None:
    """Each mutant of the zoo has a recorded scenario here."""
    assert set(SCENARIOS) == set(MUTANTS)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_conforms_on_the_correct_class(name: str, tmp_path: Path) -> None:
    """The scenario that kills a mutant, recorded from the correct class, conforms."""
    outcome = record(VllmShapedManager, SCENARIOS[name], tmp_path / "trace.jsonl")
    assert outcome.result == "conforming", (outcome.found, outcome.error)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_trace_is_rejected_with_its_property(name: str, tmp_path: Path) -> None:
    """A trace recorded from a mutant during a failing run names the mutant's property."""
    outcome = record(getattr(mutants, name), SCENARIOS[name], tmp_path / "trace.jsonl")
    assert outcome.result == "violation", outcome.error
    assert outcome.found is not None
    assert outcome.found.number == MUTANTS[name], outcome.found
