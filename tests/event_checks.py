"""Checkers over the reference's observation events, reusable by any test.

``check_events`` replays a recorded trace through the spec (``spec.core``): each
event becomes the spec action of the same name, the reference's outputs (a
lookup's verdict, a flush's submitted and dropped entries, the batch the worker
took, each tier call's keys and context, the posted results, and which results
were applied, stale or orphaned) must equal the spec's, and every ``ALWAYS``
property of ``spec.properties`` must hold after every step.  The manager makes
the observer's call order a valid interleaving (see ``reference.events``), so a
trace of a correct run replays without a single mismatch.

How results are matched: ``flush``, ``drain`` and ``shutdown`` emit one
``result_*`` event per posted result just before their own event; a ``lookup``
emits its results between ``lookup_called`` and ``lookup_returned``.  The replay
computes, from the spec state, the list of results the action must apply, and
matches the events against it in order.

``check_tier_answers`` joins the worker's ``tier_call_finished`` events with a
``FaultyTier``'s call records: the verdicts the worker derived must be what
PROTOCOL.md's policy demands for the fault injected, and (given a ``History``
of the stores and deletes made meanwhile) each answer of the real tier must be
the key's state at some instant of the call.  Together with the replay this
says: every delivered verdict is the tier's answer at some instant while its
probe was in flight, or False for a failed call, or a mark_miss/mark_present
override.

These functions only read events; ``Watcher`` (an observer) and ``History``
collect what they read.  Each returns a list of violations (empty: conformant);
the replay stops at its first mismatch, since the states diverge after it.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

from reference.events import Event
from reference.faulty import CallRecord
from spec import core
from spec.properties import SOMETIMES, violated

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


class _Mismatch(Exception):
    """The trace left the spec: the message says where and how."""


class _Replay:
    """The spec state of a trace, advanced one event at a time."""

    def __init__(self) -> None:
        self.state = core.INITIAL
        self.owed: deque[Expected] = deque()  # results the current action must still emit
        self.early: list[Expected] = []  # results seen before their flush event
        self.lookup: tuple[bytes, str] | None = None  # an open lookup_called

    def step(self, action: core.Action) -> core.Output:
        before = self.state
        try:
            after, output = core.step(before, action)
        except core.ProtocolError as exc:
            raise _Mismatch(f"the spec does not allow {action!r} here: {exc}") from None
        broken = violated(before, action, after, output)
        if broken:
            names = ", ".join(f"{p.name} (property {p.number})" for p in broken)
            raise _Mismatch(f"{action!r} breaks {names}")
        self.state = after
        return output

    def settle(self, kind: str) -> None:
        """A scheduler action begins: the previous one must have emitted all it owed."""
        if self.owed:
            raise _Mismatch(f"{kind} came before the results still owed: {list(self.owed)}")
        if self.early and kind not in ("flush", "drain", "shutdown"):
            raise _Mismatch(f"results applied outside a drain point: {self.early}")
        if self.lookup is not None and kind != "lookup_returned":
            raise _Mismatch(f"{kind} inside an unfinished lookup {self.lookup}")

    def result(self, event: Event) -> None:
        f = event.fields
        got: Expected = (event.kind, _b(f["key"]), _i(f["generation"]), _v(f.get("verdict")))
        if self.owed:
            want = self.owed.popleft()
            if got != want:
                raise _Mismatch(f"lookup applied {got}, the spec applies {want}")
        elif self.lookup is not None:
            raise _Mismatch("a lookup applied results though no flush came since the last drain")
        else:
            self.early.append(got)

    def applied_before(self, kind: str) -> None:
        """flush, drain and shutdown emit their results first: they must be all posted ones."""
        early, self.early = self.early, []
        want = expected_results(self.state)
        if early != want:
            raise _Mismatch(f"{kind} applied {early}, the spec applies {want}")

    def handle(self, event: Event) -> None:
        kind, f = event.kind, event.fields
        if kind.startswith("result_"):
            self.result(event)
        elif kind in ("take_batch", "tier_call_started", "tier_call_finished", "post"):
            self.worker(event)
        elif kind == "lookup_called":
            self.settle(kind)
            self.lookup = (_b(f["key"]), str(f["request"]))
            if self.state.drain_due:
                self.owed.extend(expected_results(self.state))
        elif kind == "lookup_returned":
            self.settle(kind)
            if self.lookup != (f["key"], f["request"]):
                raise _Mismatch(f"lookup_returned without its lookup_called (open: {self.lookup})")
            self.lookup = None
            verdict = self.step(core.Lookup(_b(f["key"]), str(f["request"])))
            if verdict != f["verdict"]:
                raise _Mismatch(f"lookup returned {f['verdict']!r}, the spec says {verdict!r}")
        elif kind in ("flush", "drain", "shutdown"):
            self.settle(kind)
            self.applied_before(kind)
            if kind == "drain":
                self.step(core.Drain())
            elif kind == "shutdown":
                if f["joined"] is not True:
                    raise _Mismatch("shutdown did not join the worker")
                self.step(core.Shutdown())
            else:
                out = self.step(core.Flush())
                assert isinstance(out, core.FlushOutput)
                submitted = tuple(core.Entry(*e) for e in _seq(f["submitted"]))
                dropped = tuple(core.Entry(*e) for e in _seq(f["dropped"]))
                if submitted != out.submitted or sorted(dropped) != sorted(out.dropped):
                    raise _Mismatch(f"flush sent {submitted} dropping {dropped}; the spec: {out}")
        elif kind == "cleanup":
            self.settle(kind)
            self.step(core.Cleanup(str(f["request"])))
        elif kind in ("mark_miss", "mark_present"):
            self.settle(kind)
            keys = tuple(_b(k) for k in _seq(f["keys"]))
            self.step(core.MarkMiss(keys) if kind == "mark_miss" else core.MarkPresent(keys))
        else:
            raise _Mismatch(f"unknown event kind {kind!r}")

    def worker(self, event: Event) -> None:
        kind, f = event.kind, event.fields
        if kind == "take_batch":
            self.step(core.TakeBatch())
            took = tuple(core.Entry(*e) for e in _seq(f["entries"]))
            if took != self.state.held:
                raise _Mismatch(f"the worker took {took}, the spec takes {self.state.held}")
        elif kind == "tier_call_finished":
            answers = tuple(_seq(f["verdicts"]))
            if not all(type(v) is bool for v in answers):
                raise _Mismatch(f"the worker derived non-bool verdicts {answers}")
            call = self.step(core.ProbeGroup(answers))
            got = core.TierCall(tuple(_seq(f["keys"])), str(f["request"]))
            if got != call:
                raise _Mismatch(f"the tier was asked {got}, the spec asks {call}")
        elif kind == "post":
            results = tuple(core.Result(*r) for r in _seq(f["results"]))
            if results != self.state.answered:
                raise _Mismatch(f"posted {results}, the spec has {self.state.answered}")
            self.step(core.Post())


def _b(value: object) -> bytes:
    assert isinstance(value, bytes), value
    return value


def _i(value: object) -> int:
    assert isinstance(value, int), value
    return value


def _v(value: object) -> bool | None:
    assert value is None or isinstance(value, bool), value
    return value


def check_events(events: Sequence[Event]) -> list[str]:
    """Replay ``events`` through the spec; the first mismatch, or [] when conformant."""
    replay = _Replay()
    for i, event in enumerate(events):
        try:
            replay.handle(event)
        except _Mismatch as exc:
            return [f"event {i} {event!r}: {exc}"]
    if replay.owed or replay.early or replay.lookup is not None:
        return [
            f"the trace ends with results owed {list(replay.owed)}, unflushed "
            f"{replay.early}, open lookup {replay.lookup}"
        ]
    return []


def final_state(events: Sequence[Event]) -> core.State:
    """The spec state a conformant trace leads to (check it with ``check_events`` first)."""
    replay = _Replay()
    for event in events:
        replay.handle(event)
    return replay.state


def sometimes_reached(events: Sequence[Event]) -> set[str]:
    """The names of the spec's ``SOMETIMES`` states that a conformant trace passes through."""
    replay = _Replay()
    reached: set[str] = set()
    for event in events:
        replay.handle(event)
        reached.update(name for name, holds in SOMETIMES if holds(replay.state))
    return reached


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
