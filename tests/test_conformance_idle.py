"""Settles without a results queue: the oracle watches the worker go idle (threads.IdleWatch).

A class that posts into a dict under a lock (``tests/outside/condition_style.py``)
offers no queue to count posts on.  The oracle then lets a settle end once the
thread that made the tier call blocks in its next wait: a hint that shortens
the wait, never a verdict.  The next lookup, re-asked within a bound when only
an unseen post explains its None, judges: a coerced non-bool answer is
property 7, a worker that holds its results while it waits for the next batch
is property 6 (after the bound), and the correct class passes the same calls.
Cost: about four seconds (one bound).
"""

from __future__ import annotations

import queue
from types import SimpleNamespace
from typing import Any

import pytest

from asynclookup.conformance.counterexample import ConformanceError
from asynclookup.conformance.replay import open_replay
from asynclookup.conformance.targets.adapter import Plan
from asynclookup.conformance.targets.tables import watch_puts
from asynclookup.conformance.targets.threads import results_in
from asynclookup.conformance.targets.vllm import tables_used
from tests.outside.condition_style import ConditionManager, Job

CONDITION = "tests.outside.condition_style"


class HoldsUntilNextBatch(ConditionManager):
    """Bug (property 6): the worker posts a batch's results only when it takes the next."""

    def _loop(self) -> None:
        held: dict[tuple[bytes, int], bool] = {}
        while True:
            with self._cv:
                self._cv.wait_for(lambda: bool(self._jobs) or self._stopping)
                if not self._jobs:
                    self._post(held)
                    return
                batch: list[Job] = self._jobs.popleft()
            self._post(held)
            held = self._results_of(batch)


def _run(impl: str, plan: Plan) -> tuple[ConformanceError | None, list[str]]:
    driver = open_replay(f"impl:{impl}", mode="threaded")
    try:
        driver.lookup(b"k0", "A")
        driver.flush()
        driver.answer(plan)
        driver.settle()
        driver.lookup(b"k0", "A")
        driver.await_verdict(b"k0", "A")
    except ConformanceError as error:
        return error, [c.text for c in driver.calls]
    finally:
        driver.close()
    return None, [c.text for c in driver.calls]


def test_no_results_queue_is_found_for_a_dict_of_results() -> None:
    """The premise: the condition style's results dict is no queue."""
    assert tables_used(f"{CONDITION}:ConditionManager").results is None


@pytest.mark.parametrize("value", [1, "yes", 1.0])
def test_settle_waits_for_a_post_into_a_dict(value: Any) -> None:
    """The settle waits until the worker is idle, so the coerced non-bool is seen (7), and
    the correct class answers False after the same calls."""
    from asynclookup.conformance.targets.adapter import JUNK

    plan = Plan("junk", (False,), JUNK.index(value))
    error, _ = _run(f"{CONDITION}:NonBoolCoerced", plan)
    assert error is not None and error.violation.number == 7, error
    assert "coerced it with bool()" in error.violation.detail
    error, calls = _run(f"{CONDITION}:ConditionManager", plan)
    assert error is None and "lookup(b'k0', 'A') -> False" in calls, calls
    assert any(
        c.startswith("let the worker post -> ") and c.endswith(" owed, its thread went idle")
        for c in calls
    ), calls


def test_worker_idle_with_results_held_back_is_property_6() -> None:
    """A worker that waits for its next batch without posting holds its results for ever."""
    error, _ = _run(f"{__name__}:HoldsUntilNextBatch", Plan(bits=(True,)))
    assert error is not None and error.violation.number == 6, error
    assert "still returned None" in error.violation.detail


# -- a results queue the worker holds itself --------------------------------------------


def test_a_results_queue_handed_to_the_worker_thread_is_counted() -> None:
    """The table-driven stranger hands its results queue to its worker thread's
    constructor, so the thread puts on its own reference, not through the manager's
    attribute: the oracle watches the queue object itself, and finds it (it found none
    while it only replaced the attribute)."""
    used = tables_used("tests.strangers.transition_table:TransitionTableManager")
    assert used.results is not None and used.results.path == "_results"


def test_watch_puts_counts_every_holder_once_and_undoes() -> None:
    """A ``queue.Queue`` is watched in place: a put by anyone holding it counts once (a
    ``put_nowait`` goes through ``put`` and still counts once); the undo leaves the
    queue as it was.  A ``SimpleQueue`` has no instance dictionary: the attribute is
    replaced by a watching stand-in, and the undo puts it back."""
    seen: list[object] = []
    owner = SimpleNamespace(results=queue.Queue(), simple=queue.SimpleQueue())
    held = owner.results
    undo = watch_puts(owner, "results", seen.append)
    assert undo is not None and owner.results is held
    held.put("a")
    held.put_nowait("b")
    assert seen == ["a", "b"] and [held.get_nowait(), held.get_nowait()] == ["a", "b"]
    undo()
    held.put("c")
    assert seen == ["a", "b"] and "put" not in vars(held)
    simple = owner.simple
    undo = watch_puts(owner, "simple", seen.append)
    assert undo is not None and owner.simple is not simple
    owner.simple.put_nowait("d")
    assert seen[-1] == "d" and simple.get_nowait() == "d"
    undo()
    assert owner.simple is simple
    assert watch_puts(owner, "missing", seen.append) is None


def test_a_record_per_group_counts_the_results_it_holds() -> None:
    """A results queue's items are counted as results, whatever their shape: a record of
    the class's own holding its group's results in a field counts those (the
    table-driven stranger's, with ``__slots__``; one with a ``__dict__``), a result
    object with no collection among its fields is one.  A record counted as one result
    made each settle of that class run to its bound."""

    class Record:
        __slots__ = ("request", "results")

        def __init__(self, results: tuple[tuple[bytes, int, bool], ...]) -> None:
            self.request, self.results = "A", results

    triples = ((b"k0", 0, True), (b"k1", 1, False))
    assert results_in(Record(triples)) == 2
    assert results_in(SimpleNamespace(request="A", results=list(triples))) == 2
    assert results_in(SimpleNamespace(key=b"k0", generation=0, verdict=True)) == 1
    assert results_in([Record(triples), Record(triples[:1])]) == 3
