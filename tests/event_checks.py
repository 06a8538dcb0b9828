"""Checkers over the reference's observation events, reusable by any test.

``TraceCheck`` replays a recorded trace through the spec (``asynclookup.spec.core``), one
event at a time: each event becomes the spec action of the same name, and the
reference's outputs (a lookup's verdict, a flush's submitted and dropped
entries, the batch the worker took, each tier call's keys and context, the
posted results, and which results were applied, stale or orphaned) must equal
the spec's.  Every ``ALWAYS`` property of ``asynclookup.spec.properties`` is evaluated on
every step, step properties with the *reference's* output, so a reference that
disagrees with the spec is also reported by the property it breaks.  Without
the spec it checks that each generation is submitted at most once and receives
at most one verdict, that every key the tier saw was submitted by a flush, and
that the events nest as the manager emits them.  The manager makes the
observer's call order a valid interleaving (see ``asynclookup.reference.events``), so a
trace of a correct run replays without a single complaint.

How results are matched: ``flush``, ``drain`` and ``shutdown`` emit one
``result_*`` event per posted result just before their own event; a ``lookup``
emits its results between ``lookup_called`` and ``lookup_returned``.  At each
scheduler action the replay computes, from the spec state, the results the
action must apply, and compares the result events with them in order.

Three ways in: ``replay_events`` gives every complaint (each names the
property of docs/properties.md it breaks); ``check_events`` gives the first only, since
the states diverge after it; a ``TraceCheck`` fed as a run goes
(``catch_up``) lets a stepped test compare the whole state after every step,
with ``as_spec_state`` laying a reference snapshot out as a spec State.

``check_tier_answers`` joins the worker's ``tier_call_finished`` events with a
``FaultyTier``'s call records: the verdicts the worker derived must be what
the protocol's policy demands for the fault injected, and (given a ``History``
of the stores and deletes made meanwhile) each answer of the real tier must be
the key's state at some instant of the call.  Together with the replay this
says: every delivered verdict is the tier's answer at some instant while its
probe was in flight, or False for a failed call, or a mark_miss/mark_present
override.

These functions only read events; ``Watcher`` (an observer) and ``History``
collect what they read.  Each returns a list of complaints (empty: conformant).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

from asynclookup.reference.events import Event
from asynclookup.reference.faulty import CallRecord
from asynclookup.reference.manager import Snapshot
from asynclookup.spec import core
from asynclookup.spec.properties import ALWAYS, SOMETIMES
from asynclookup.trace.format import ACTIONS

Expected = tuple[str, bytes, int, bool | None]  # result kind, key, generation, verdict


class Watcher:
    """A thread-safe observer that keeps every event and can wait for the worker."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._events: list[Event] = []
        self._submitted = 0  # entries submitted by flushes
        self._posted = 0  # results posted by the worker

    def __call__(self, event: Event) -> None:
        with self._cond:
            self._events.append(event)
            if event.kind == "flush":
                self._submitted += len(_seq(event.fields["submitted"]))
            elif event.kind == "post":
                self._posted += len(_seq(event.fields["results"]))
                self._cond.notify_all()

    def wait_until_posted(self, timeout: float) -> bool:
        """Wait until every entry submitted so far has a posted result (False on timeout)."""
        with self._cond:
            target = self._submitted
            return self._cond.wait_for(lambda: self._posted >= target, timeout)

    @property
    def events(self) -> list[Event]:
        """A copy of the events so far, in the order the observer was called."""
        with self._cond:
            return list(self._events)


class History:
    """When each key was stored or deleted, so an answer can be placed in time.

    Operations on one key must not overlap (one writer per key at a time): each
    takes effect at some instant between its ``started_ns`` and ``finished_ns``.
    """

    def __init__(self, present_at_start: Sequence[bytes] = ()) -> None:
        self._lock = threading.Lock()
        self._initial = set(present_at_start)
        self._ops: dict[bytes, list[tuple[int, int, bool]]] = {}

    def record(self, key: bytes, present: bool, started_ns: int, finished_ns: int) -> None:
        """Note that a store (``present``) or delete of ``key`` ran in this interval."""
        with self._lock:
            ops = self._ops.setdefault(key, [])
            assert not ops or ops[-1][1] <= started_ns, f"overlapping writes of {key!r}"
            ops.append((started_ns, finished_ns, present))

    def possible(self, key: bytes, start_ns: int, end_ns: int) -> set[bool]:
        """The states ``key`` may have had at some instant of ``[start_ns, end_ns]``."""
        with self._lock:
            ops = list(self._ops.get(key, ()))
        states: set[bool] = set()
        value, since = key in self._initial, -math.inf
        for started, finished, present in ops:
            if since <= end_ns and finished >= start_ns:  # value may hold until `finished`
                states.add(value)
            value, since = present, started
        if since <= end_ns:
            states.add(value)
        return states


def _seq(value: object) -> Sequence[Any]:
    assert isinstance(value, tuple | list), value
    return value


def _b(value: object) -> bytes:
    assert isinstance(value, bytes), value
    return value


def _i(value: object) -> int:
    assert isinstance(value, int), value
    return value


def _v(value: object) -> bool | None:
    assert value is None or isinstance(value, bool), value
    return value


def _entries(value: object) -> tuple[core.Entry, ...]:
    return tuple(core.Entry(*e) for e in _seq(value))


def expected_results(state: core.State) -> list[Expected]:
    """The result events that applying ``state.posted`` must emit, in order."""
    out: list[Expected] = []
    for result in state.posted:
        probe = core.probe_of(state, result.key)
        if probe is None or probe.generation != result.generation:
            out.append(("result_stale", result.key, result.generation, None))
        elif not probe.requesters:
            out.append(("result_orphaned", result.key, result.generation, None))
        else:
            out.append(("result_applied", result.key, result.generation, result.verdict))
        state = core.apply_posted(state._replace(posted=(result,)))
    return out


def _same(claimed: object, output: core.Output) -> bool:
    """The reference's output is the spec's (a flush may list its dropped entries in
    any order)."""
    if isinstance(claimed, core.FlushOutput) and isinstance(output, core.FlushOutput):
        return claimed.submitted == output.submitted and sorted(claimed.dropped) == sorted(
            output.dropped
        )
    return claimed == output


_SPEC = object()  # "the reference claims no output of its own for this action"
DRAIN_POINTS = ("flush", "drain", "shutdown")


class TraceCheck:
    """The spec state of a trace, advanced one event at a time; every complaint kept.

    Each complaint names the event and the property of docs/properties.md it breaks
    (``property N :``); a malformed trace (an unknown event, a lookup that does
    not nest) names none.  After a complaint the replay goes on from the spec's
    own state, so later complaints may be consequences of the first.
    """

    def __init__(self, every_state: bool = True) -> None:
        self.every_state = every_state  # False: state invariants at flush and shutdown only
        self.state = core.INITIAL
        self.errors: list[str] = []
        self.results: list[Expected] = []  # result events of the scheduler action in progress
        self.lookup: tuple[bytes, str] | None = None  # an open lookup_called
        self.submitted: set[tuple[bytes, str]] = set()  # (key, request) of submitted entries
        self.generations: set[int] = set()  # generations submitted
        self.verdicts: set[int] = set()  # generations that received a verdict
        self.where = ""  # the event being fed, for messages
        self.fed = 0  # how many events were fed

    def error(self, prop: int, message: str) -> None:
        about = f"property {prop} : " if prop else ""
        self.errors.append(f"{self.where}: {about}{message}")

    def act(
        self, action: core.Action, claimed: object = _SPEC, prop: int = 0, said: str = ""
    ) -> bool:
        """Apply ``action`` to the spec state; check the reference's claimed output
        (``said`` introduces it in the complaint) and every ALWAYS property."""
        before = self.state
        try:
            after, output = core.step(before, action)
        except core.ProtocolError as exc:
            self.error(prop, f"the spec does not allow {action!r} here: {exc}")
            return False
        if claimed is not _SPEC and not _same(claimed, output):
            self.error(prop, f"{said} {claimed!r}; the spec: {output!r}")
        shown = output if claimed is _SPEC else claimed
        states = self.every_state or isinstance(action, core.Flush | core.Shutdown)
        for rule in ALWAYS:
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
        self, kind: str, action: core.Action, claimed: object = _SPEC, prop: int = 0,
        said: str = "",
    ) -> None:
        """A scheduler action: its result events must be the spec's, exactly."""
        if self.lookup is not None and kind != "lookup_returned":
            self.error(0, f"{kind} inside an unfinished lookup {self.lookup}")
        drains = kind in DRAIN_POINTS or (kind == "lookup_returned" and self.state.drain_due)
        expected = expected_results(self.state) if drains else []
        if self.results != expected:
            self.error(2, f"{kind} applied {self.results}, the spec applies {expected}")
        for result_kind, _, generation, _ in self.results:
            if result_kind == "result_applied":
                if generation in self.verdicts:
                    self.error(3, f"generation {generation} received a second verdict")
                self.verdicts.add(generation)
        self.results = []
        self.act(action, claimed, prop, said)

    def feed(self, event: Event) -> None:
        """Replay one event as the spec action that the trace format's table names for it."""
        kind, f = event.kind, event.fields
        if kind not in ACTIONS:
            self.error(0, f"unknown event kind {kind!r}")
            return
        action = ACTIONS[kind]
        if kind.startswith("result_"):
            self.results.append((kind, _b(f["key"]), _i(f["generation"]), _v(f.get("verdict"))))
        elif kind == "lookup_called":
            if self.lookup is not None:
                self.error(0, f"lookup_called inside an unfinished lookup {self.lookup}")
            if self.results:
                self.error(2, f"results applied outside a drain point: {self.results}")
            self.lookup = (_b(f["key"]), str(f["request"]))
        elif kind == "tier_call_started":
            for key in _seq(f["keys"]):
                if (key, f["request"]) not in self.submitted:
                    self.error(1, f"the tier saw {key!r} for {f['request']!r}, never submitted")
        elif action is core.Lookup:
            key, request = _b(f["key"]), str(f["request"])
            if self.lookup != (key, request):
                self.error(0, f"lookup_returned without its lookup_called (open: {self.lookup})")
            self.lookup = None
            self.scheduler(kind, core.Lookup(key, request), _v(f["verdict"]), 2, "lookup returned")
        elif action is core.Flush:
            claimed = core.FlushOutput(_entries(f["submitted"]), _entries(f["dropped"]))
            self.scheduler(kind, core.Flush(), claimed, 1, "flush sent")
            for key, request, generation in claimed.submitted:
                if generation in self.generations:
                    self.error(3, f"generation {generation} submitted twice")
                self.generations.add(generation)
                self.submitted.add((key, request))
        elif action is core.Drain:
            self.scheduler(kind, core.Drain())
        elif action is core.Shutdown:
            if f["joined"] is not True:
                self.error(7, "shutdown did not join the worker")
            self.scheduler(kind, core.Shutdown())
        elif action is core.Cleanup:
            self.scheduler(kind, core.Cleanup(str(f["request"])), prop=4)
        elif action is core.MarkMiss or action is core.MarkPresent:
            self.scheduler(kind, action(tuple(_b(k) for k in _seq(f["keys"]))))
        else:
            self.worker(event, action)

    def worker(self, event: Event, action: type[core.Action] | None) -> None:
        f = event.fields
        if action is core.TakeBatch:
            took = _entries(f["entries"])
            if self.act(core.TakeBatch(), prop=3) and took != self.state.held:
                self.error(3, f"the worker took {took}, the spec takes {self.state.held}")
        elif action is core.ProbeGroup:
            answers = tuple(_seq(f["verdicts"]))
            if not all(type(v) is bool for v in answers):
                self.error(7, f"the worker derived non-bool verdicts {answers}")
            call = core.TierCall(tuple(_seq(f["keys"])), str(f["request"]))
            self.act(core.ProbeGroup(answers), call, 9, "the tier was asked")
        elif action is core.Post:
            results = tuple(core.Result(*r) for r in _seq(f["results"]))
            answered = self.state.answered
            if self.act(core.Post(), prop=3) and results != answered:
                self.error(3, f"posted {results}, the spec has {answered}")
        else:
            self.error(0, f"event kind {event.kind!r} is not an action of the reference's trace")

    def catch_up(self, events: Sequence[Event], first_only: bool = False) -> None:
        """Feed the events of ``events`` not fed yet (a recorder only appends); with
        ``first_only``, stop after the first event that draws a complaint."""
        for index in range(self.fed, len(events)):
            if first_only and self.errors:
                return
            self.where = f"event #{index} {events[index]!r}"
            self.feed(events[index])
            self.fed = index + 1

    def finish(self) -> list[str]:
        """Every complaint, including the trace ending inside an action."""
        self.where = "the end of the trace"
        if self.results:
            self.error(2, f"result events outside any scheduler action: {self.results}")
        if self.lookup is not None:
            self.error(0, f"the trace ends inside lookup {self.lookup}")
        return self.errors


def replay_events(events: Sequence[Event], every_state: bool = True) -> list[str]:
    """Every way ``events`` departs from the spec or breaks a property."""
    check = TraceCheck(every_state)
    check.catch_up(events)
    return check.finish()


def check_events(events: Sequence[Event]) -> list[str]:
    """The first way ``events`` departs from the spec, or [] when conformant."""
    check = TraceCheck()
    check.catch_up(events, first_only=True)
    return (check.errors or check.finish())[:1]


def final_state(events: Sequence[Event]) -> core.State:
    """The spec state a conformant trace leads to (check it with ``check_events`` first)."""
    check = TraceCheck()
    check.catch_up(events)
    return check.state


def sometimes_reached(events: Sequence[Event]) -> set[str]:
    """The names of the spec's ``SOMETIMES`` states that a conformant trace passes through."""
    check = TraceCheck()
    reached: set[str] = set()
    for event in events:
        check.feed(event)
        reached.update(name for name, holds in SOMETIMES if holds(check.state))
    return reached


def as_spec_state(snap: Snapshot) -> core.State:
    """The reference's snapshot laid out as a spec State, for equality with the replay."""
    return core.State(
        probes=tuple(sorted(
            (k, core.Probe(p.generation, core.Phase[p.phase.name], p.verdict, p.requesters))
            for k, p in snap.probes.items()
        )),
        index=tuple(sorted(snap.index.items())),
        next_generation=snap.next_generation,
        batch=_entries(snap.batch),
        queue=tuple(_entries(batch) for batch in snap.queue),
        held=_entries(snap.held),
        answered=tuple(core.Result(*r) for r in snap.answered),
        posted=tuple(core.Result(*r) for r in snap.posted),
        drain_due=snap.drain_due,
        stopped=snap.closed,
    )


def check_tier_answers(
    events: Sequence[Event], calls: Sequence[CallRecord], history: History | None = None
) -> list[str]:
    """Every tier call's verdicts follow the worker policy and the tier's real state."""
    finished = [e for e in events if e.kind == "tier_call_finished"]
    problems: list[str] = []
    if len(finished) != len(calls):
        problems.append(f"{len(finished)} tier_call_finished events but {len(calls)} tier calls")
    for event, call in zip(finished, calls, strict=False):
        f = event.fields
        where = f"tier call {call.plan.index} ({call.plan.kind}, request {call.request!r})"
        if tuple(_seq(f["keys"])) != call.keys or f["request"] != call.request:
            problems.append(f"{where}: the event names keys {f['keys']!r} of {f['request']!r}")
            continue
        verdicts = tuple(_seq(f["verdicts"]))
        if verdicts != call.expected():
            problems.append(
                f"{where}: the worker derived {verdicts}, the policy demands {call.expected()}"
            )
        clean = call.inner is not None and call.plan.kind in ("none", "hang")
        if (f["failure"] is None) != clean:
            problems.append(f"{where}: failure {f['failure']!r} for a call that was {call}")
        if history is None or call.inner is None:
            continue
        for key, answer in zip(call.keys, call.inner, strict=True):
            states = history.possible(key, call.started_ns, call.finished_ns)
            if answer not in states:
                problems.append(
                    f"{where}: the tier answered {answer} for {key!r}, "
                    f"but the key was {sorted(states)} throughout the call"
                )
    return problems
