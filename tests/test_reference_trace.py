"""A trace checker for the reference: replays observer events through the spec.

``check_trace`` replays a recorded event trace through the spec (``spec.core``)
and checks, event by event, that the reference did what the spec does: same
lookup verdicts, same flush split, same tier calls, same posts, same
classification of each applied result; and that every ALWAYS property of
``spec.properties`` holds at every step.  It also checks, without the spec,
that each generation is submitted at most once and receives at most one
verdict, and that every key the tier saw was submitted by a flush.
``as_spec_state`` lays a reference snapshot out as a spec State, so stepped
tests can compare the whole state after every step.

The reference may use the spec only here, in tests: it is checked against the
spec, not built on it.  The observer makes scheduler actions atomic against the
worker's hand-overs, so a trace is a valid interleaving (reference.events).
Each test below plants a bug and proves the checker reports it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pytest

from reference import AsyncLookupManager, Event, EventRecorder, InMemoryTier, RequestContext
from reference.manager import IN_FLIGHT, RESOLVED, Snapshot
from spec import core, properties
from spec.core import (
    INITIAL,
    Action,
    Cleanup,
    Drain,
    Entry,
    Flush,
    FlushOutput,
    Lookup,
    MarkMiss,
    MarkPresent,
    Phase,
    Post,
    Probe,
    ProbeGroup,
    ProtocolError,
    Result,
    Shutdown,
    State,
    TakeBatch,
    TierCall,
)

RESULT_KINDS = ("result_applied", "result_stale", "result_orphaned")


def spec_classification(state: State) -> list[tuple[object, ...]]:
    """How the spec's apply_posted treats each posted result of ``state``, in order."""
    probes = dict(state.probes)
    out: list[tuple[object, ...]] = []
    for key, generation, verdict in state.posted:
        probe = probes.get(key)
        if probe is None or probe.generation != generation:
            out.append(("result_stale", key, generation))
        elif not probe.requesters:
            del probes[key]
            out.append(("result_orphaned", key, generation))
        else:
            probes[key] = probe._replace(phase=Phase.RESOLVED, verdict=verdict)
            out.append(("result_applied", key, generation, verdict))
    return out


def _classified(event: Event) -> tuple[object, ...]:
    f = event.fields
    if event.kind == "result_applied":
        return (event.kind, f["key"], f["generation"], f["verdict"])
    return (event.kind, f["key"], f["generation"])


_SPEC = object()  # "the reference claims no output of its own for this action"


class TraceCheck:
    """Replays events through the spec; collects every disagreement and violation.

    Each message names the PROTOCOL.md property it breaks.  Step properties
    are evaluated with the *reference's* output (its flush split, its lookup
    verdict, its tier call) against the spec's states, so a reference that
    disagrees with the spec is reported by the property it breaks.
    """

    def __init__(self, every_state: bool = True) -> None:
        self.every_state = every_state  # False: state invariants at flush and shutdown only
        self.state = INITIAL
        self.errors: list[str] = []
        self.results: list[Event] = []  # result events of the scheduler action in progress
        self.submitted: dict[int, tuple[bytes, str]] = {}  # generation -> (key, request)
        self.verdicts: set[int] = set()  # generations that received a verdict
        self.index = 0  # of the event being fed, for messages
        self.fed = 0  # how many events were fed

    def error(self, prop: int, message: str) -> None:
        self.errors.append(f"event #{self.index}: property {prop} : {message}")

    def act(self, action: Action, claimed: object = _SPEC, prop: int = 0) -> bool:
        """Apply ``action`` to the spec state; check the reference's claimed output."""
        before = self.state
        try:
            after, output = core.step(before, action)
        except ProtocolError:
            self.error(prop, f"the spec refuses {action!r} here")
            return False
        if claimed is not _SPEC and claimed != output:
            self.error(prop, f"{action!r}: the reference gave {claimed!r}, the spec {output!r}")
        shown = output if claimed is _SPEC else claimed
        states = self.every_state or isinstance(action, Flush | Shutdown)
        for rule in properties.ALWAYS:
            if rule.state is not None:
                broken = states and not rule.state(after)
            else:
                assert rule.step is not None
                broken = not rule.step(before, action, after, shown)  # type: ignore[arg-type]
            if broken:
                self.error(rule.number, f"{rule.name} broken by {action!r}")
        self.state = after
        return True

    def scheduler(
        self, action: Action, drains: bool, claimed: object = _SPEC, prop: int = 0
    ) -> None:
        """A scheduler action: its result events must be the spec's drain, exactly."""
        expected = spec_classification(self.state) if drains else []
        got = [_classified(e) for e in self.results]
        if got != expected:
            self.error(2, f"{action!r} applied results {got}, the spec applies {expected}")
        for e in self.results:
            if e.kind == "result_applied":
                generation = e.fields["generation"]
                assert isinstance(generation, int)
                if generation in self.verdicts:
                    self.error(3, f"generation {generation} received a second verdict")
                self.verdicts.add(generation)
        self.results = []
        self.act(action, claimed, prop)

    def feed(self, event: Event) -> None:
        f, kind = event.fields, event.kind
        if kind in RESULT_KINDS:
            self.results.append(event)
        elif kind == "lookup_called":
            pass  # the action is replayed at lookup_returned, with its drain
        elif kind == "lookup_returned":
            action = Lookup(f["key"], f["request"])  # type: ignore[arg-type]
            self.scheduler(action, self.state.drain_due, f["verdict"], prop=2)
        elif kind == "flush":
            claimed = FlushOutput(f["submitted"], f["dropped"])  # type: ignore[arg-type]
            self.scheduler(Flush(), drains=True, claimed=claimed, prop=1)
            for key, request, generation in claimed.submitted:
                if generation in self.submitted:
                    self.error(3, f"generation {generation} submitted twice")
                self.submitted[generation] = (key, request)
        elif kind == "drain":
            self.scheduler(Drain(), drains=True)
        elif kind == "shutdown":
            if not f["joined"]:
                self.error(7, "shutdown did not join the worker")
            self.scheduler(Shutdown(), drains=not self.state.stopped)
        elif kind == "cleanup":
            self.scheduler(Cleanup(f["request"]), drains=False, prop=4)  # type: ignore[arg-type]
        elif kind == "mark_miss":
            self.scheduler(MarkMiss(f["keys"]), drains=False)  # type: ignore[arg-type]
        elif kind == "mark_present":
            self.scheduler(MarkPresent(f["keys"]), drains=False)  # type: ignore[arg-type]
        elif kind == "take_batch":
            if self.act(TakeBatch(), prop=3) and self.state.held != f["entries"]:
                self.error(3, f"took {f['entries']}, the spec holds {self.state.held}")
        elif kind == "tier_call_started":
            for key in f["keys"]:  # type: ignore[attr-defined]
                if (key, f["request"]) not in self.submitted.values():
                    self.error(1, f"the tier saw {key!r} for {f['request']!r}, never submitted")
        elif kind == "tier_call_finished":
            call = TierCall(f["keys"], f["request"])  # type: ignore[arg-type]
            self.act(ProbeGroup(tuple(f["verdicts"])), call, prop=9)  # type: ignore[arg-type]
        elif kind == "post":
            answered = self.state.answered
            if self.act(Post(), prop=3) and answered != f["results"]:
                self.error(3, f"posted {f['results']}, the spec answered {answered}")
        else:
            self.error(0, f"unknown event kind {kind!r}")

    def catch_up(self, events: Sequence[Event]) -> None:
        """Feed the events of ``events`` not fed yet (the recorder only appends)."""
        for index in range(self.fed, len(events)):
            self.index = index
            self.feed(events[index])
        self.fed = len(events)

    def finish(self) -> list[str]:
        if self.results:
            self.error(2, f"result events outside any scheduler action: {self.results}")
        return self.errors


def check_trace(events: Sequence[Event], every_state: bool = True) -> list[str]:
    """Every way ``events`` departs from the spec or breaks a PROTOCOL.md property."""
    check = TraceCheck(every_state)
    check.catch_up(events)
    return check.finish()


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
    assert check_trace(record(AsyncLookupManager, *scenario)) == []


def test_checker_catches_flush_without_revalidation() -> None:
    """The seed bug (a cleaned-up entry submitted) is reported as property 1."""
    errors = check_trace(record(FlushWithoutRevalidation, *SEED_BUG))
    assert any("property 1 :" in e for e in errors)


def test_checker_catches_results_applied_by_key() -> None:
    """A stale result applied to the key's newer probe is reported as property 2."""
    errors = check_trace(record(ResultsAppliedByKey, *LATE_RESULT))
    assert any("property 2 :" in e for e in errors)


def test_checker_catches_mark_miss_forcing_a_verdict() -> None:
    """mark_miss forcing a verdict on an IN_FLIGHT probe is reported (its lookup sees it)."""
    errors = check_trace(record(MarkMissForcesResolved, *FORCED_MISS))
    assert any("property 2 :" in e for e in errors)


def test_checker_catches_a_duplicated_post() -> None:
    """A result posted twice (a second verdict for one generation) is reported."""
    events = record(AsyncLookupManager, "lookup r1", "flush", "worker", "flush")
    post = next(i for i, e in enumerate(events) if e.kind == "post")
    errors = check_trace(events[: post + 1] + events[post:])
    assert any("property 3 :" in e for e in errors)


def test_checker_catches_a_tier_call_for_an_unsubmitted_key() -> None:
    """A tier call naming a key no flush submitted is reported."""
    events = record(AsyncLookupManager, "lookup r1", "flush", "worker")
    forged = Event("tier_call_started", "worker", {"keys": (b"zzz",), "request": "r1"})
    assert any("property 1 :" in e for e in check_trace([*events[:-1], forged]))


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


def as_spec_state(snap: Snapshot) -> State:
    """The reference's snapshot laid out as a spec State, for equality with the replay."""
    return State(
        probes=tuple(sorted(
            (k, Probe(p.generation, Phase[p.phase.name], p.verdict, p.requesters))
            for k, p in snap.probes.items()
        )),
        index=tuple(sorted(snap.index.items())),
        next_generation=snap.next_generation,
        batch=tuple(Entry(*e) for e in snap.batch),
        queue=tuple(tuple(Entry(*e) for e in batch) for batch in snap.queue),
        held=tuple(Entry(*e) for e in snap.held),
        answered=tuple(Result(*r) for r in snap.answered),
        posted=tuple(Result(*r) for r in snap.posted),
        drain_due=snap.drain_due,
        stopped=snap.closed,
    )


