"""The trace checker of ``tests/event_checks.py`` over the reference, and its planted bugs.

Scenarios run in stepped mode on the reference and on three managers with a
planted bug (the seed bug, results applied by key, mark_miss forcing a
verdict); the checker must accept the reference's traces and report each bug
by the property of docs/properties.md it breaks.  Two forged traces (a duplicated post,
a tier call for a key never submitted) and a bug that only the state shows
complete the planted bugs.

The reference may use the spec only here, in tests: it is checked against the
spec, not built on it.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from asynclookup.reference import (
    AsyncLookupManager,
    Event,
    EventRecorder,
    InMemoryTier,
    RequestContext,
)
from asynclookup.reference.manager import IN_FLIGHT, RESOLVED
from tests.event_checks import TraceCheck, as_spec_state, replay_events

# -- the checker catches planted bugs ---------------------------------------------------


class FlushWithoutRevalidation(AsyncLookupManager):
    """Planted: the seed bug, flush submits cleaned-up entries too."""

    def flush(self) -> None:
        with self._guard:
            self._apply_posted()
            batch, self._batch = self._batch, []
            for key, _, _ in batch:
                if key in self._probes:
                    self._probes[key].phase = IN_FLIGHT
            self._drain_due = True
            assert self._observer is not None
            self._emit("flush", submitted=tuple((k, c.req_id, g) for k, c, g in batch), dropped=())
            if batch:
                self._batches.put(batch)


class ResultsAppliedByKey(AsyncLookupManager):
    """Planted: vLLM #54872, a result lands on whatever probe the key has now."""

    def _apply_posted(self) -> None:
        while self._posted:
            for key, generation, verdict in self._posted.popleft():
                probe = self._probes.get(key)
                if probe is not None:
                    probe.phase, probe.verdict = RESOLVED, verdict
                    self._emit("result_applied", key=key, generation=generation, verdict=verdict)
        self._drain_due = False


class MarkMissForcesResolved(AsyncLookupManager):
    """Planted: mark_miss resolves PENDING and IN_FLIGHT probes too."""

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        keys = tuple(keys)
        with self._guard:
            self._emit("mark_miss", keys=tuple(keys))
            for key in keys:
                probe = self._probes.get(key)
                if probe is not None:
                    probe.phase, probe.verdict = RESOLVED, False


R1, R2 = RequestContext("r1"), RequestContext("r2")
K = b"k"


def move(m: AsyncLookupManager, name: str) -> None:
    """One scenario move: "lookup r1", "cleanup r1", "flush", "take", "worker", ..."""
    verb, _, request = name.partition(" ")
    if verb == "lookup":
        m.lookup(K, RequestContext(request))
    elif verb == "cleanup":
        m.cleanup(request)
    elif verb == "mark_miss":
        m.mark_miss([K])
    elif verb == "mark_present":
        m.mark_present([K])
    elif verb == "flush":
        m.flush()
    elif verb == "take":
        m.worker.take_batch()
    else:
        assert verb == "worker", name
        m.worker.run_pending()


def record(cls: type[AsyncLookupManager], *scenario: str) -> list[Event]:
    """Run a scenario in stepped mode on ``cls``, shut down, return its events."""
    recorder = EventRecorder()
    m = cls(InMemoryTier(), mode="stepped", observer=recorder)
    for name in scenario:
        move(m, name)
    m.shutdown()
    return recorder.events


SEED_BUG = ("lookup r1", "cleanup r1", "flush", "worker", "flush")
LATE_RESULT = ("lookup r1", "flush", "take", "mark_present", "worker", "flush", "lookup r1")
FORCED_MISS = ("lookup r1", "flush", "mark_miss", "lookup r1", "worker", "flush")


@pytest.mark.parametrize("scenario", [SEED_BUG, LATE_RESULT, FORCED_MISS])
def test_checker_accepts_the_reference(scenario: tuple[str, ...]) -> None:
    """The checker finds nothing wrong in the reference's own trace of each scenario."""
    assert replay_events(record(AsyncLookupManager, *scenario)) == []


def test_checker_catches_flush_without_revalidation() -> None:
    """The seed bug (a cleaned-up entry submitted) is reported as property 1."""
    errors = replay_events(record(FlushWithoutRevalidation, *SEED_BUG))
    assert any("property 1 :" in e for e in errors)


def test_checker_catches_results_applied_by_key() -> None:
    """A stale result applied to the key's newer probe is reported as property 2."""
    errors = replay_events(record(ResultsAppliedByKey, *LATE_RESULT))
    assert any("property 2 :" in e for e in errors)


def test_checker_catches_mark_miss_forcing_a_verdict() -> None:
    """mark_miss forcing a verdict on an IN_FLIGHT probe is reported (its lookup sees it)."""
    errors = replay_events(record(MarkMissForcesResolved, *FORCED_MISS))
    assert any("property 2 :" in e for e in errors)


def test_checker_catches_a_duplicated_post() -> None:
    """A result posted twice (a second verdict for one generation) is reported."""
    events = record(AsyncLookupManager, "lookup r1", "flush", "worker", "flush")
    post = next(i for i, e in enumerate(events) if e.kind == "post")
    errors = replay_events(events[: post + 1] + events[post:])
    assert any("property 3 :" in e for e in errors)


def test_checker_catches_a_tier_call_for_an_unsubmitted_key() -> None:
    """A tier call naming a key no flush submitted is reported."""
    events = record(AsyncLookupManager, "lookup r1", "flush", "worker")
    forged = Event("tier_call_started", "worker", {"keys": (b"zzz",), "request": "r1"})
    assert any("property 1 :" in e for e in replay_events([*events[:-1], forged]))


def test_state_comparison_catches_a_bug_the_events_hide() -> None:
    """mark_miss forcing an IN_FLIGHT probe shows in the state though no event reveals it."""
    recorder = EventRecorder()
    m = MarkMissForcesResolved(InMemoryTier(), mode="stepped", observer=recorder)
    check = TraceCheck()
    agree = []
    for name in ("lookup r1", "flush", "mark_miss"):
        move(m, name)
        check.catch_up(recorder.events)
        agree.append(as_spec_state(m.snapshot()) == check.state)
    assert agree == [True, True, False] and check.finish() == []


def test_checker_catches_a_lookup_that_does_not_nest() -> None:
    """A lookup_returned without its lookup_called is reported as a malformed trace."""
    events = record(AsyncLookupManager, "lookup r1", "flush")
    called = next(i for i, e in enumerate(events) if e.kind == "lookup_called")
    errors = replay_events(events[:called] + events[called + 1 :])
    assert any("without its lookup_called" in e for e in errors)


def test_checker_catches_non_bool_verdicts() -> None:
    """A tier call whose derived verdicts are not all bools is reported as property 7."""
    events = record(AsyncLookupManager, "lookup r1", "flush", "worker")
    i = next(i for i, e in enumerate(events) if e.kind == "tier_call_finished")
    forged = Event("tier_call_finished", "worker", {**events[i].fields, "verdicts": (1,)})
    errors = replay_events([*events[:i], forged, *events[i + 1 :]])
    assert any("property 7 : the worker derived non-bool" in e for e in errors)
