"""Offline trace checking: stream a recorded trace through the oracle's observation engine.

Theory of operation
-------------------
``asynclookup.trace.format`` turns each line into a ``TraceEvent``; ``TraceChecker``
pairs the two-line events (``lookup_called``/``lookup_returned`` and
``tier_call_started``/``tier_call_finished``, per thread), maps each event to
the ``asynclookup.conformance.engine`` observation of the same spec action and feeds it to
``asynclookup.conformance.engine.Checker``: the set of spec states consistent with the trace so
far.  Events the engine has no use for (``tier_call_started``, the
``result_*`` events, and ``take_batch``/``post`` when the header says the
worker steps are not all recorded) are checked for form only.  The first
observation that no spec state explains is the violation; property 8 (an
efficiency property) stops the check too unless efficiency is ``warn``.

Memory does not grow with the trace: one line is held at a time, the engine's
history is trimmed as it goes, and the engine's per-probe notes are pruned to
the probes that still exist.  ``TraceChecker`` also remembers the last
*quiescent* point (the only possible state is the initial one, up to the
generation counter), from which ``asynclookup.trace.report`` re-reads the file to
build the shortest excerpt that shows a violation.

This module judges; it prints nothing (``asynclookup.trace.report`` does).
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from asynclookup.conformance import engine as observe
from asynclookup.spec import core
from asynclookup.spec.properties import explanation_of, kind_of, title_of
from asynclookup.trace.fast import FastChecker
from asynclookup.trace.format import (
    ACTIONS,
    INTERNAL_EVENTS,
    SCHEDULER_EVENTS,
    Header,
    TraceEvent,
    TraceFormatError,
    read_trace,
)

Efficiency = Literal["fail", "warn"]
Engine = Literal["fast", "old"]
ENGINES: tuple[Engine, ...] = ("fast", "old")
TRIM_EVERY = 1024  # feeds between trims of the engine's history
PRUNE_EVERY = 16384  # feeds between prunes of the engine's per-probe notes
ANCHORS_KEPT = 4096  # recent quiescent points remembered for excerpts
TAGGED_KEPT = 4  # states explained only by a wasteful cleanup, kept beside efficient ones

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
        return kind_of(self.number)

    @property
    def title(self) -> str:
        return title_of(self.number)

    @property
    def explanation(self) -> str:
        return explanation_of(self.number)


class TraceChecker:
    """Feeds events, in file order, to the observation engine; remembers what it needs."""

    def __init__(
        self, header: Header, *, efficiency: Efficiency = "fail",
        max_states: int = observe.MAX_STATES, engine: Engine = "fast",
    ) -> None:
        self.header = header
        self.efficiency = efficiency
        hidden = not header.worker_steps
        self.fast = FastChecker(
            hidden_worker=hidden, max_states=max_states, tagged_kept=TAGGED_KEPT
        ) if engine == "fast" else None
        self.engine: observe.Checker | FastChecker = self.fast or observe.Checker(
            hidden_worker=hidden, max_states=max_states, tagged_kept=TAGGED_KEPT
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
        warned = len(self.engine.warnings)
        try:
            if self.fast is not None:
                violation = self._fast_feed(event, self.fast)
                if violation is False:
                    return None
            else:
                obs = self._observation(event)
                if obs is None:
                    return None
                violation = self.engine.observe(obs)
        except observe.OracleLimitError as exc:
            raise CheckLimitError(event.line, f"cannot check this trace: {exc}") from None
        if violation is not None:
            assert not isinstance(violation, bool)
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
            return observe.LookupSeen(
                data["key"], data["request"], data["verdict"], data.get("error")
            )
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
            return observe.TierCallSeen(data["keys"], data["request"], _answer(data))
        if kind in INTERNAL_EVENTS:
            return None
        if ACTIONS[kind] in (core.TakeBatch, core.Post):
            if not self.header.worker_steps:
                return None
            return observe.TakeBatchSeen(True) if kind == "take_batch" else observe.PostSeen(True)
        if kind == "worker_died":
            return observe.WorkerDied(data.get("reason") or "")
        if kind == "tables":
            return observe.Tables(frozenset(data["keys"]), frozenset(data["requests"]))
        error = data.get("error")
        action = ACTIONS[kind]  # the spec action this event records
        if action is core.Flush:
            self._last_flush = event.line
            return observe.FlushSeen(error)
        if action is core.Cleanup:
            return observe.CleanupSeen(data["request"], error)
        if action is core.MarkMiss:
            return observe.MarkMissSeen(data["keys"], error)
        if action is core.MarkPresent:
            return observe.MarkPresentSeen(data["keys"], error)
        if action is core.Drain:
            return observe.DrainSeen(error)
        assert action is core.Shutdown, kind
        return observe.ShutdownSeen(error)

    def _fast_feed(self, event: TraceEvent, fast: FastChecker) -> observe.Violation | bool | None:
        """The fast engine's step for ``event``; False: the event is not fed to an engine.

        The hot kinds call the engine's steps with raw values, after the same
        pairing checks as ``_observation``; the rest go through
        ``_observation`` (the one mapping of events to observations).
        """
        kind, data = event.kind, event.data
        if kind == "lookup_called" or kind == "tier_call_started":
            self._observation(event)
            return False
        if fast.stopped or data.get("error") is not None or kind not in self._RAW:
            obs = self._observation(event)
            return False if obs is None else fast.observe(obs)
        if kind == "lookup_returned":
            called = self.open_lookups.get(event.thread)
            if called is None or called.data["key"] != data["key"] or (
                called.data["request"] != data["request"]
            ):
                self._observation(event)  # raises the pairing error
            del self.open_lookups[event.thread]
            return fast.lookup(data["key"], data["request"], data["verdict"])
        if kind == "tier_call_finished":
            self._observation(event)  # the pairing check
            return fast.tier_call(data["keys"], data["request"], _answer(data))
        if event.thread in self.open_lookups and kind in SCHEDULER_EVENTS:
            self._observation(event)  # raises the pairing error
        if kind == "flush":
            self._last_flush = event.line
            return fast.flush()
        if kind == "cleanup":
            return fast.cleanup(data["request"])
        if kind == "drain":
            return fast.drain()
        if kind == "mark_miss":
            return fast.mark_miss(data["keys"])
        if kind == "mark_present":
            return fast.mark_present(data["keys"])
        if kind in INTERNAL_EVENTS or not self.header.worker_steps:
            return False  # result_* events, hidden-mode worker steps: form only
        return fast.take_batch() if kind == "take_batch" else fast.post()

    _RAW = frozenset({
        "lookup_returned", "tier_call_finished", "flush", "cleanup", "drain", "mark_miss",
        "mark_present", "take_batch", "post", *INTERNAL_EVENTS,
    })

    # -- bookkeeping after an explained observation -------------------------------------

    def _after(self, event: TraceEvent) -> None:
        engine = self.engine
        size = engine.size
        if size > self.max_states:
            self.max_states = size
        # a quiescent point: the one possible state is INITIAL up to the generation
        # counter and a due drain of nothing
        if (
            size == 1 and not self.open_lookups and not self.open_calls
            and engine.expects_empty()
        ):
            self.anchors.append((event.line, self._last_flush if self.drain_due() else None))
        self._fed += 1
        if self._fed % TRIM_EVERY == 0 and isinstance(engine, observe.Checker):
            del engine.history[:]
        if self._fed % PRUNE_EVERY == 0:
            engine.forget_stale_notes()


    def drain_due(self) -> bool:
        """Whether the (first) possible state has a drain due."""
        if self.fast is not None:
            return self.fast.drain_due()
        return self.engine.states[0].drain_due

    def quiescent(self) -> bool:
        """Whether the check stands at a quiescent point: one untagged possible state that
        holds nothing, no call open (a chunk of the trace may start here)."""
        engine = self.engine
        return (
            engine.size == 1 and not self.open_lookups and not self.open_calls
            and engine.expects_empty() and self.found is None
            and not any(self._tags())
        )

    def _tags(self) -> list[bool]:
        if self.fast is not None:
            return self.fast.tags
        assert isinstance(self.engine, observe.Checker)
        efficient = self.engine.efficient_states()
        return [s not in efficient for s in self.engine.states]


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


def check_lines(
    lines: Iterable[bytes], *, efficiency: Efficiency = "fail", engine: Engine = "fast"
) -> Outcome:
    """Check a trace given as raw lines; never raises for bad input (it is ``malformed``)."""
    started = time.perf_counter()
    outcome = Outcome("conforming")
    checker: TraceChecker | None = None
    try:
        for item in read_trace(lines):
            if isinstance(item, Header):
                outcome.header = item
                checker = TraceChecker(item, efficiency=efficiency, engine=engine)
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
    header: Header, events: Iterable[TraceEvent], *, efficiency: Efficiency = "fail",
    engine: Engine = "fast",
) -> Found | None:
    """The first blocking violation in ``events`` (None: none, or they are not well formed)."""
    checker = TraceChecker(header, efficiency=efficiency, engine=engine)
    try:
        for event in events:
            if checker.feed(event) is not None:
                return checker.found
    except TraceFormatError:
        return None
    return None
