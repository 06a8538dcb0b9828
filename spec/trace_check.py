"""Offline trace checking: stream a recorded trace through the oracle's observation engine.

Theory of operation
-------------------
``spec.trace_format`` turns each line into a ``TraceEvent``; ``TraceChecker``
pairs the two-line events (``lookup_called``/``lookup_returned`` and
``tier_call_started``/``tier_call_finished``, per thread), maps each event to
the ``spec.observe`` observation of the same spec action and feeds it to
``spec.observe.Checker``: the set of spec states consistent with the trace so
far.  Events the engine has no use for (``tier_call_started``, the
``result_*`` events, and ``take_batch``/``post`` when the header says the
worker steps are not all recorded) are checked for form only.  The first
observation that no spec state explains is the violation; property 8 (an
efficiency property) stops the check too unless efficiency is ``warn``.

Memory does not grow with the trace: one line is held at a time, the engine's
history is trimmed as it goes, and the engine's per-probe notes are pruned to
the probes that still exist.  ``TraceChecker`` also remembers the last
*quiescent* point (the only possible state is the initial one, up to the
generation counter), from which ``spec.trace_report`` re-reads the file to
build the shortest excerpt that shows a violation.

This module judges; it prints nothing (``spec.trace_report`` does).
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from spec import observe
from spec.trace_format import (
    INTERNAL_EVENTS,
    SCHEDULER_EVENTS,
    Header,
    TraceEvent,
    TraceFormatError,
    read_trace,
)

Efficiency = Literal["fail", "warn"]
TRIM_EVERY = 1024  # feeds between trims of the engine's history
PRUNE_EVERY = 16384  # feeds between prunes of the engine's per-probe notes
ANCHORS_KEPT = 4096  # recent quiescent points remembered for excerpts
TAGGED_KEPT = 4  # states explained only by a wasteful cleanup, kept beside efficient ones

# A plain sentence per PROTOCOL.md property: what the implementation did wrong.
EXPLANATIONS: dict[int, str] = {
    1: "The tier was asked about a probe that was no longer live when the flush sent it: "
       "flush must re-validate each batch entry against the key's current state and "
       "generation, and drop entries cleaned up or superseded since they were batched.",
    2: "lookup returned a verdict that is not the verdict of the key's current probe: a "
       "result computed for an older generation, or for a probe that was deleted, was "
       "delivered.  Results must be matched by key AND generation.",
    3: "A probe was submitted or given a verdict more than once, or given one it could not "
       "have yet: each probe is submitted at most once and receives at most one verdict "
       "(mark_miss must leave PENDING and IN_FLIGHT probes alone).",
    4: "The request index and the probes' requester sets disagree: after cleanup(r) nothing "
       "may refer to r.",
    5: "Lookup state leaked: once every request is cleaned up and every result drained, no "
       "probe state, batch entry or queued item may remain.",
    6: "A verdict the worker computed was not delivered in time: a probe with requesters "
       "must be RESOLVED within one step after the worker finished it, and the next lookup "
       "must return its verdict.",
    7: "A tier misbehaviour (an exception, a wrong length, a non-bool, a lazy iterable that "
       "raises, slowness) stopped the worker or the scheduler, or its verdicts were derived "
       "wrongly: every key the tier did not answer properly counts as a miss.",
    8: "A key was probed a second time while a probe of it was PENDING or IN_FLIGHT (an "
       "efficiency property): cleanup must keep an orphaned IN_FLIGHT probe so that a later "
       "request joins it.",
    9: "A key was probed in a tier call that held another request's keys or context: each "
       "tier call holds exactly one request's group, with the context it was batched with.",
}
USAGE_EXPLANATION = (
    "A call after shutdown() must fail with the closed-manager error (written as the error "
    '"closed" in the trace); this one did not.'
)


class CheckLimitError(TraceFormatError):
    """The engine's bound on possible states was exceeded: this trace cannot be judged."""


@dataclass(frozen=True)
class Found:
    """A property broken at one event."""

    number: int | None  # the PROTOCOL.md property; None: a usage error
    detail: str  # the engine's diagnosis, one line
    event: TraceEvent

    @property
    def kind(self) -> str:
        return observe.property_kind(self.number)

    @property
    def title(self) -> str:
        return observe.property_title(self.number)

    @property
    def explanation(self) -> str:
        return USAGE_EXPLANATION if self.number is None else EXPLANATIONS[self.number]


class TraceChecker:
    """Feeds events, in file order, to the observation engine; remembers what it needs."""

    def __init__(
        self, header: Header, *, efficiency: Efficiency = "fail",
        max_states: int = observe.MAX_STATES,
    ) -> None:
        self.header = header
        self.efficiency = efficiency
        self.engine = observe.Checker(
            hidden_worker=not header.worker_steps, max_states=max_states, tagged_kept=TAGGED_KEPT
        )
        self.open_lookups: dict[str, TraceEvent] = {}  # thread -> its lookup_called
        self.open_calls: dict[str, TraceEvent] = {}  # thread -> its tier_call_started
        self.counts: Counter[str] = Counter()
        self.warnings: list[Found] = []
        self.found: Found | None = None
        self.max_states = 1
        # Recent quiescent points: (line, flush line to replay first or None).  After
        # such a line the check may restart from INITIAL (after that flush when a
        # drain is due), so an excerpt can begin there.
        self.anchors: deque[tuple[int, int | None]] = deque(maxlen=ANCHORS_KEPT)
        self._last_flush: int | None = None
        self._fed = 0

    def feed(self, event: TraceEvent) -> Found | None:
        """Take one event; return the first blocking violation (then the checker is done).

        Raises TraceFormatError for a pairing error, CheckLimitError when the
        engine's state bound is exceeded.
        """
        if self.found is not None:
            return self.found
        self.counts[event.kind] += 1
        obs = self._observation(event)
        if obs is None:
            return None
        warned = len(self.engine.warnings)
        try:
            violation = self.engine.observe(obs)
        except observe.OracleLimitError as exc:
            raise CheckLimitError(event.line, f"cannot check this trace: {exc}") from None
        if violation is not None:
            self.found = Found(violation.number, violation.detail, event)
            return self.found
        if len(self.engine.warnings) > warned:
            found = Found(8, self.engine.warnings[-1].detail, event)
            if self.efficiency == "fail":
                self.found = found
                return found
            self.warnings.append(found)
        self._after(event)
        return None

    # -- events to observations ------------------------------------------------------

    def _observation(self, event: TraceEvent) -> observe.Observation | None:
        kind, data, thread = event.kind, event.data, event.thread
        if kind in SCHEDULER_EVENTS and thread in self.open_lookups and kind != "lookup_returned":
            raise TraceFormatError(
                event.line,
                f"{kind} on thread {thread!r} inside the lookup called on line "
                f"{self.open_lookups[thread].line}, "
                "which has not returned (one scheduler call at a time per thread)",
            )
        if kind == "lookup_called":
            self.open_lookups[thread] = event
            return None
        if kind == "lookup_returned":
            called = self.open_lookups.pop(thread, None)
            if called is None or (called.data["key"], called.data["request"]) != (
                data["key"], data["request"]
            ):
                raise TraceFormatError(
                    event.line,
                    "lookup_returned without a matching lookup_called "
                    f"(same thread {thread!r}, key and request) before it",
                )
            return observe.Lookup(data["key"], data["request"], data["verdict"], data.get("error"))
        if kind == "tier_call_started":
            if thread in self.open_calls:
                raise TraceFormatError(
                    event.line,
                    f"tier_call_started on thread {thread!r} while the tier call started on "
                    f"line {self.open_calls[thread].line} has not finished",
                )
            self.open_calls[thread] = event
            return None
        if kind == "tier_call_finished":
            started = self.open_calls.pop(thread, None)
            if started is None or (started.data["keys"], started.data["request"]) != (
                data["keys"], data["request"]
            ):
                raise TraceFormatError(
                    event.line,
                    "tier_call_finished without a matching tier_call_started "
                    f"(same thread {thread!r}, keys and request) before it",
                )
            return observe.TierCall(data["keys"], data["request"], _answer(data))
        if kind in INTERNAL_EVENTS:
            return None
        if kind in ("take_batch", "post"):
            if not self.header.worker_steps:
                return None
            return observe.TakeBatch(True) if kind == "take_batch" else observe.Post(True)
        if kind == "worker_died":
            return observe.WorkerDied(data.get("reason") or "")
        if kind == "tables":
            return observe.Tables(frozenset(data["keys"]), frozenset(data["requests"]))
        error = data.get("error")
        if kind == "flush":
            self._last_flush = event.line
            return observe.Flush(error)
        if kind == "cleanup":
            return observe.Cleanup(data["request"], error)
        if kind == "mark_miss":
            return observe.MarkMiss(data["keys"], error)
        if kind == "mark_present":
            return observe.MarkPresent(data["keys"], error)
        if kind == "drain":
            return observe.DrainResults(error)
        assert kind == "shutdown", kind
        return observe.Shutdown(error)

    # -- bookkeeping after an explained observation -------------------------------------

    def _after(self, event: TraceEvent) -> None:
        engine = self.engine
        self.max_states = max(self.max_states, engine.size)
        # a quiescent point: the one possible state is INITIAL up to the generation
        # counter and a due drain of nothing
        if (
            engine.size == 1 and engine.expects_empty()
            and not self.open_lookups and not self.open_calls
        ):
            (state,) = engine.states
            self.anchors.append((event.line, self._last_flush if state.drain_due else None))
        self._fed += 1
        if self._fed % TRIM_EVERY == 0:
            del engine.history[:]
        if self._fed % PRUNE_EVERY == 0:
            engine.forget_stale_notes()


def _answer(data: dict[str, Any]) -> observe.Answer:
    """The engine's ``Answer`` for a tier_call_finished line."""
    answers = data.get("answers")
    if answers is not None:
        return observe.Answer(tuple(answers))
    failure = data["failure"]
    items = failure["items"] or ()
    raises = failure["kind"] == "raised"
    return observe.Answer(tuple(items), raises=raises, lazy=raises and bool(items))


@dataclass
class Outcome:
    """The result of checking one trace."""

    result: Literal["conforming", "violation", "malformed"]
    header: Header | None = None
    events: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    found: Found | None = None
    error: TraceFormatError | None = None
    warnings: list[Found] = field(default_factory=list)
    max_states: int = 0
    unfinished: int = 0  # lookups and tier calls started but not finished at the end
    seconds: float = 0.0
    anchors: list[tuple[int, int | None]] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return {"conforming": 0, "violation": 1, "malformed": 2}[self.result]


def check_lines(lines: Iterable[bytes], *, efficiency: Efficiency = "fail") -> Outcome:
    """Check a trace given as raw lines; never raises for bad input (it is ``malformed``)."""
    started = time.perf_counter()
    outcome = Outcome("conforming")
    checker: TraceChecker | None = None
    try:
        for item in read_trace(lines):
            if isinstance(item, Header):
                outcome.header = item
                checker = TraceChecker(item, efficiency=efficiency)
                continue
            assert checker is not None
            outcome.events += 1
            if checker.feed(item) is not None:
                break
    except TraceFormatError as exc:
        outcome.result, outcome.error = "malformed", exc
    if checker is not None:
        outcome.counts = dict(checker.counts)
        outcome.warnings = checker.warnings
        outcome.max_states = checker.max_states
        outcome.unfinished = len(checker.open_lookups) + len(checker.open_calls)
        if checker.found is not None and outcome.error is None:
            outcome.result, outcome.found = "violation", checker.found
            outcome.anchors = list(checker.anchors)
    outcome.seconds = time.perf_counter() - started
    return outcome


def first_found(
    header: Header, events: Iterable[TraceEvent], *, efficiency: Efficiency = "fail"
) -> Found | None:
    """The first blocking violation in ``events`` (None: none, or they are not well formed)."""
    checker = TraceChecker(header, efficiency=efficiency)
    try:
        for event in events:
            if checker.feed(event) is not None:
                return checker.found
    except TraceFormatError:
        return None
    return None
