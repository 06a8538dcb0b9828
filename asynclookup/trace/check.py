"""Offline trace checking: stream a recorded trace through the oracle's observation engine.

Theory of operation
-------------------
``asynclookup.trace.format`` turns each line into a ``TraceEvent``; ``TraceChecker``
pairs the two-line events (``lookup_called``/``lookup_returned`` and
``tier_call_started``/``tier_call_finished``, per thread), maps each event to
the ``asynclookup.observe.engine`` observation of the same spec action and feeds it to
``asynclookup.observe.engine.Checker``: the set of spec states consistent with the trace so
far.  Events the engine has no use for (``tier_call_started``, the
``result_*`` events, and ``take_batch``/``post`` when the header says the
worker steps are not all recorded) are checked for form only.  The first
observation that no spec state explains is the violation; property 8 (an
efficiency property) stops the check too unless efficiency is ``warn``.

Memory does not grow with the trace: one block of lines is held at a time, the
engine's history is trimmed as it goes, and the engine's per-probe notes are
pruned to the probes that still exist.  ``TraceChecker`` also remembers the
recent *quiescent* points (the only possible state is the initial one, up to
the generation counter), from which ``asynclookup.trace.report`` re-reads the
file to build the shortest excerpt that shows a violation.  At a quiescent
point where the possible states explain exactly what the initial state
explains (``TraceChecker.quiescent``), the check restarts from a fresh engine:
what follows is judged independently of what came before, which is what lets
``asynclookup.trace.split`` check a trace in chunks with the judgement of one pass.

Either engine is reached through ``asynclookup.observe.interface.Engine`` only.
The fast one (``asynclookup.observe.fast``, the default) also gets the hot kinds
of event as raw values; ``engine="old"`` feeds the exact engine itself
(tests/test_observe_fast.py compares the two).  Both keep to
``asynclookup.observe.interface.TRACE_BOUNDS``.

This module judges; it prints nothing (``asynclookup.trace.cli`` does).
"""

from __future__ import annotations

import io
import time
from collections import Counter, deque
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from asynclookup._cli import EXIT_HOLDS, EXIT_USAGE, EXIT_VIOLATION
from asynclookup.observe.engine import Checker
from asynclookup.observe.fast import FastChecker
from asynclookup.observe.interface import TRACE_BOUNDS, Engine, OracleLimitError, Violation
from asynclookup.observe.observations import (
    Answer,
    CleanupSeen,
    DrainSeen,
    FlushSeen,
    LookupSeen,
    MarkMissSeen,
    MarkPresentSeen,
    Observation,
    PostSeen,
    ShutdownSeen,
    Tables,
    TakeBatchSeen,
    TierCallSeen,
    WorkerDied,
)
from asynclookup.spec import core
from asynclookup.spec.properties import Finding
from asynclookup.trace.format import (
    ACTIONS,
    INTERNAL_EVENTS,
    SCHEDULER_EVENTS,
    Header,
    TraceEvent,
    TraceFormatError,
)
from asynclookup.trace.format import CheckLimitError as CheckLimitError  # its public home
from asynclookup.trace.hot import feed_blocks
from asynclookup.trace.reader import Blocks
from asynclookup.trace.take import PRUNE_EVERY

Efficiency = Literal["fail", "warn"]
EngineName = Literal["fast", "old"]
ENGINES: tuple[EngineName, ...] = ("fast", "old")
TRIM_EVERY = 1024  # feeds between trims of the engine's history
ANCHORS_KEPT = 4096  # recent quiescent points remembered for excerpts

@dataclass(frozen=True)
class Found(Finding):
    """A property broken at one event (``number`` None: a usage error)."""

    event: TraceEvent


class TraceChecker:
    """Feeds events, in file order, to the observation engine; remembers what it needs."""

    def __init__(
        self, header: Header, *, efficiency: Efficiency = "fail",
        max_states: int = TRACE_BOUNDS.states, engine: EngineName = "fast",
        posts_in_parts: bool = True,
    ) -> None:
        self.header = header
        self.efficiency = efficiency
        self._limits = (max_states, engine)
        self.posts_in_parts = posts_in_parts  # see ``check_lines``
        self.fast: FastChecker | None = None
        self.engine: Engine = self._new_engine()
        self.open_lookups: dict[str, TraceEvent] = {}  # thread -> its lookup_called
        self.open_calls: dict[str, TraceEvent] = {}  # thread -> its tier_call_started
        self.counts: Counter[str] = Counter()
        self.warnings: list[Found] = []
        self.found: Found | None = None
        self.peak_states = 1  # the most states possible at once so far
        # Recent quiescent points: (line, flush line to replay first or None).  After
        # such a line the check restarts from INITIAL (after that flush when a
        # drain is due), so an excerpt can begin there.
        self.anchors: deque[tuple[int, int | None]] = deque(maxlen=ANCHORS_KEPT)
        self.restarts = 0  # quiescent points the check restarted from
        self.last_restart = 0  # the line of the last of them
        self.last_flush: int | None = None
        self.fed = 0
        self._handlers: dict[str, Callable[[TraceEvent, FastChecker], Any]] = {
            "lookup_returned": self._lookup_returned, "tier_call_finished": self._tier_call,
            "flush": self._flush, "cleanup": self._cleanup, "drain": self._drain,
            "mark_miss": self._mark_miss, "mark_present": self._mark_present,
            "take_batch": self._worker_step, "post": self._worker_step,
        }
        # kind -> what ``feed`` calls; ``_general`` for the others
        self._on: dict[str, Callable[[TraceEvent], Found | None]] = {
            kind: self._internal for kind in INTERNAL_EVENTS
        }
        self._on.update(lookup_called=self._called, tier_call_started=self._started)
        if engine == "fast":
            self._on.update((kind, self._hot) for kind in self._handlers)

    def _new_engine(self) -> Engine:
        """A fresh engine (at the start, and at each quiescent point)."""
        max_states, engine = self._limits
        hidden = not self.header.worker_steps
        tagged = TRACE_BOUNDS.tagged
        parts = self.posts_in_parts
        if engine == "fast":
            self.fast = FastChecker(hidden_worker=hidden, max_states=max_states,
                                    tagged_kept=tagged, posts_in_parts=parts)
            return self.fast
        return Checker(hidden_worker=hidden, max_states=max_states, tagged_kept=tagged,
                       posts_in_parts=parts)

    def feed(self, event: TraceEvent) -> Found | None:
        """Take one event; return the first blocking violation (then the checker is done).

        Raises TraceFormatError for a pairing error, CheckLimitError when the
        engine's state bound is exceeded.
        """
        if self.found is not None:
            return self.found
        kind = event[2]
        counts = self.counts
        counts[kind] = counts.get(kind, 0) + 1
        return self._on.get(kind, self._general)(event)

    # The commonest kinds, decided before the general path when they can be: the result_*
    # events no engine sees (form only), the opening halves of the two-line events when
    # nothing is open, and the fast engine's steps called with raw values.

    def _internal(self, event: TraceEvent) -> None:
        return None

    def _called(self, event: TraceEvent) -> Found | None:
        if event[3] in self.open_lookups:
            return self._general(event)  # a second open lookup: the pairing error
        self.open_lookups[event[3]] = event
        return None

    def _started(self, event: TraceEvent) -> Found | None:
        if event[3] in self.open_calls:
            return self._general(event)
        self.open_calls[event[3]] = event
        return None

    def _hot(self, event: TraceEvent) -> Found | None:
        """A kind the fast engine steps with raw values (``_handlers``)."""
        fast = self.fast
        if fast is None or fast.stopped or "error" in event[4]:
            return self._general(event)
        warned = len(fast.warnings)
        try:
            violation = self._handlers[event[2]](event, fast)
        except OracleLimitError as exc:
            raise CheckLimitError(event.line, f"cannot check this trace: {exc}") from None
        if violation is False:
            return None
        return self.judged(event, violation, warned)

    def _general(self, event: TraceEvent) -> Found | None:
        """Any event, through the one mapping of events to observations."""
        kind = event.kind
        if kind in INTERNAL_EVENTS:
            return None
        if kind == "lookup_called" and event.thread not in self.open_lookups:
            self.open_lookups[event.thread] = event
            return None
        if kind == "tier_call_started" and event.thread not in self.open_calls:
            self.open_calls[event.thread] = event
            return None
        warned = len(self.engine.warnings)
        try:
            obs = self._observation(event)
            if obs is None:
                return None
            violation = self.engine.observe(obs)
        except OracleLimitError as exc:
            raise CheckLimitError(event.line, f"cannot check this trace: {exc}") from None
        return self.judged(event, violation, warned)

    def judged(self, event: TraceEvent, violation: Violation | None, warned: int) -> Found | None:
        """After the engine took ``event``: its violation, a new warning, or the bookkeeping."""
        if violation is not None:
            self.found = Found(violation.number, violation.detail, event)
            return self.found
        if len(self.engine.warnings) > warned:
            warning = self.engine.warnings[-1]  # property 8
            found = Found(warning.number, warning.detail, event)
            if self.efficiency == "fail":
                self.found = found
                return found
            self.warnings.append(found)
        self._after(event)
        return None

    # -- events to observations ------------------------------------------------------

    def _observation(self, event: TraceEvent) -> Observation | None:
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
            return LookupSeen(
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
            return TierCallSeen(data["keys"], data["request"], _answer(data))
        if kind in INTERNAL_EVENTS:
            return None
        if ACTIONS[kind] in (core.TakeBatch, core.Post):
            if not self.header.worker_steps:
                return None
            return TakeBatchSeen(True) if kind == "take_batch" else PostSeen(True)
        if kind == "worker_died":
            return WorkerDied(data.get("reason") or "")
        if kind == "tables":
            return Tables(frozenset(data["keys"]), frozenset(data["requests"]))
        error = data.get("error")
        action = ACTIONS[kind]  # the spec action this event records
        if action is core.Flush:
            self.last_flush = event.line
            return FlushSeen(error)
        if action is core.Cleanup:
            return CleanupSeen(data["request"], error)
        if action is core.MarkMiss:
            return MarkMissSeen(data["keys"], error)
        if action is core.MarkPresent:
            return MarkPresentSeen(data["keys"], error)
        if action is core.Drain:
            return DrainSeen(error)
        assert action is core.Shutdown, kind
        return ShutdownSeen(error)

    # The hot kinds of the fast engine: the engine's steps called with raw values, after
    # the same pairing checks as ``_observation``; False: not fed to an engine.

    def _lookup_returned(self, event: TraceEvent, fast: FastChecker) -> Violation | None:
        data = event.data
        called = self.open_lookups.pop(event.thread, None)
        if called is None or called.data["key"] != data["key"] or (
            called.data["request"] != data["request"]
        ):
            if called is not None:
                self.open_lookups[event.thread] = called
            self._observation(event)  # raises the pairing error
        return fast.lookup(data["key"], data["request"], data["verdict"])

    def _tier_call(self, event: TraceEvent, fast: FastChecker) -> Violation | None:
        data = event.data
        started = self.open_calls.pop(event.thread, None)
        if started is None or started.data["keys"] != data["keys"] or (
            started.data["request"] != data["request"]
        ):
            if started is not None:
                self.open_calls[event.thread] = started
            self._observation(event)  # raises the pairing error
        answers = data.get("answers")
        if answers is not None:
            return fast.answered(data["keys"], data["request"], answers)
        return fast.tier_call(data["keys"], data["request"], _answer(data))

    def _scheduler(self, event: TraceEvent) -> None:
        if self.open_lookups and event.thread in self.open_lookups:
            self._observation(event)  # raises the pairing error

    def _flush(self, event: TraceEvent, fast: FastChecker) -> Violation | None:
        if self.open_lookups:
            self._scheduler(event)
        self.last_flush = event.line
        return fast.flush()

    def _cleanup(self, event: TraceEvent, fast: FastChecker) -> Violation | None:
        if self.open_lookups:
            self._scheduler(event)
        return fast.cleanup(event.data["request"])

    def _drain(self, event: TraceEvent, fast: FastChecker) -> Violation | None:
        self._scheduler(event)
        return fast.drain()

    def _mark_miss(self, event: TraceEvent, fast: FastChecker) -> Violation | None:
        self._scheduler(event)
        return fast.mark_miss(event.data["keys"])

    def _mark_present(self, event: TraceEvent, fast: FastChecker) -> Violation | None:
        self._scheduler(event)
        return fast.mark_present(event.data["keys"])

    def _worker_step(self, event: TraceEvent, fast: FastChecker) -> Violation | bool | None:
        if not self.header.worker_steps:
            return False  # hidden-mode worker steps: form only
        return fast.take_batch() if event.kind == "take_batch" else fast.post()

    # -- bookkeeping after an explained observation -------------------------------------

    def _after(self, event: TraceEvent) -> None:
        fast = self.fast
        if fast is not None and fast.index:  # a request is live: no quiescent point
            size = len(fast.hyps)
            if size > self.peak_states:
                self.peak_states = size
            self.fed += 1
            if self.fed % PRUNE_EVERY == 0:  # (this engine keeps no history to trim)
                fast.forget_stale_notes()
            return
        engine = self.engine
        size = engine.size
        if size > self.peak_states:
            self.peak_states = size
        self.fed += 1
        if self.fast is not None and self.fast.index:
            pass  # a request is live: no quiescent point (the common case, decided quickly)
        # a quiescent point: the one possible state is INITIAL up to the generation
        # counter and a due drain of nothing
        elif (
            size == 1 and not self.open_lookups and not self.open_calls
            and engine.expects_empty()
        ):
            self.anchors.append((event.line, self.last_flush if self.drain_due() else None))
        if (self.fast is None or not self.fast.index) and self.quiescent():
            if not self.anchors or self.anchors[-1][0] != event.line:
                self.anchors.append((event.line, None))
            self._restart(event.line)
            return
        if self.fed % TRIM_EVERY == 0:
            engine.trim_history()
        if self.fed % PRUNE_EVERY == 0:
            engine.forget_stale_notes()

    def _restart(self, line: int) -> None:
        """Start again from a fresh engine: the check from a quiescent point on depends on
        nothing before it (not the generation counter, not the notes kept for naming
        a property), so a chunk of the trace that starts there is judged alike."""
        self.engine = self._new_engine()
        self.fed = 0
        self.restarts += 1
        self.last_restart = line

    def drain_due(self) -> bool:
        """Whether the (first) possible state has a drain due."""
        return self.engine.drain_due()

    def quiescent(self) -> bool:
        """Whether the check stands at a quiescent point, where it restarts from a fresh
        engine: no call open, and the possible states explain exactly what the initial
        state explains.  That is one untagged state that holds nothing; or, when the
        worker's steps are hidden, states that hold no probe, index entry, batch entry,
        queued or held batch, at least one of them untagged (their results, if any,
        are all stale: applied to nothing, posted whenever, observed never)."""
        if self.open_lookups or self.open_calls or self.found is not None:
            return False
        return self.engine.restartable()


def _answer(data: dict[str, Any]) -> Answer:
    """The engine's ``Answer`` for a tier_call_finished line."""
    answers = data.get("answers")
    if answers is not None:
        return Answer(tuple(answers))
    failure = data["failure"]
    items = failure["items"] or ()
    raises = failure["kind"] == "raised"
    return Answer(tuple(items), raises=raises, lazy=raises and bool(items))


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
    restarts: int = 0  # quiescent points the check restarted from
    stopped_at: int | None = None  # the line after which a chunk's check ended (see check_items)
    chunk_cpu: list[float] = field(default_factory=list)  # CPU seconds of each chunk's check

    @property
    def exit_code(self) -> int:
        return {"conforming": EXIT_HOLDS, "violation": EXIT_VIOLATION,
                "malformed": EXIT_USAGE}[self.result]


def check_lines(
    lines: Iterable[bytes], *, efficiency: Efficiency = "fail", engine: EngineName = "fast",
    progress: Callable[[int], None] | None = None, parser: str = "json",
    stops: Container[int] = (), posts_in_parts: bool | None = None,
) -> Outcome:
    """Check a trace given as raw lines; never raises for bad input (it is ``malformed``).

    ``progress``: called with the number of events read so far, about every
    ``asynclookup.trace.hot.PROGRESS_EVERY`` events.  ``parser``: the JSON parser
    that decodes the lines (``asynclookup.trace.reader.PARSERS``; the judgement is the
    same with each).  ``stops``: as for ``check_items``.

    ``posts_in_parts``: whether a hidden worker may post a tier call's results in
    parts (``asynclookup.spec.core.posts``; docs/protocol.md, "What the spec decides
    where the protocol leaves room", point 9).  The judgement always allows it, but
    that keeps several times more possible states, so by default (None) a file that
    can be read again is first checked holding each call's results posted together:
    a trace that passes so passes with parts too (those states are a subset), and
    anything else (a violation, a warning, a bound reached) is checked again from
    the start with parts, whose outcome is the one given.
    """
    if posts_in_parts is None:
        again = isinstance(lines, io.IOBase) and _at_start(lines)
        outcome = check_lines(lines, efficiency=efficiency, engine=engine, progress=progress,
                              parser=parser, stops=stops, posts_in_parts=not again)
        if not again or not judged_by_parts(outcome):
            return outcome
        assert isinstance(lines, io.IOBase)
        lines.seek(0)
        first = outcome.seconds
        outcome = check_lines(lines, efficiency=efficiency, engine=engine, progress=progress,
                              parser=parser, stops=stops, posts_in_parts=True)
        outcome.seconds += first
        return outcome
    started = time.perf_counter()
    try:
        blocks = Blocks(lines, parser=parser)
    except TraceFormatError as exc:
        return Outcome("malformed", error=exc, seconds=time.perf_counter() - started)
    return check_items(
        blocks, efficiency=efficiency, engine=engine, progress=progress, stops=stops,
        posts_in_parts=posts_in_parts,
    )


def _at_start(f: io.IOBase) -> bool:
    """Whether the file ``f`` is at its start and can be read again from there."""
    try:
        return f.seekable() and f.tell() == 0
    except (OSError, ValueError):
        return False


def judged_by_parts(outcome: Outcome) -> bool:
    """Whether a check that held each tier call's results posted together may be judged
    otherwise when the worker may post them in parts: only with hidden worker steps,
    and only when it found something (a violation, a warning, or its bound reached)."""
    if outcome.header is None or outcome.header.worker_steps:
        return False
    if outcome.result == "malformed":
        return isinstance(outcome.error, CheckLimitError)
    return outcome.result == "violation" or bool(outcome.warnings)


def check_items(
    blocks: Blocks, *, header: Header | None = None, efficiency: Efficiency = "fail",
    engine: EngineName = "fast", progress: Callable[[int], None] | None = None,
    stops: Container[int] = (), posts_in_parts: bool = True,
) -> Outcome:
    """Check a trace read by ``blocks`` (``header``: when ``blocks`` resumes a file's tail).

    ``stops``: lines after which the check ends if it restarted there (a quiescent
    point: what follows is judged alike by a fresh check); ``Outcome.stopped_at``
    says where it ended so.  ``posts_in_parts``: as for ``check_lines`` (here it is
    never checked twice).
    """
    started = time.perf_counter()
    header = header or blocks.header
    assert header is not None, "a file's tail needs the file's header"
    outcome = Outcome("conforming", header=header)
    checker = TraceChecker(header, efficiency=efficiency, engine=engine,
                           posts_in_parts=posts_in_parts)
    try:
        outcome.stopped_at = feed_blocks(checker, blocks, stops=stops, progress=progress)
    except TraceFormatError as exc:
        outcome.result, outcome.error = "malformed", exc
    outcome.events = sum(checker.counts.values())
    outcome.counts = dict(checker.counts)
    outcome.warnings = checker.warnings
    outcome.max_states = checker.peak_states
    outcome.unfinished = len(checker.open_lookups) + len(checker.open_calls)
    outcome.anchors = list(checker.anchors)
    outcome.restarts = checker.restarts
    if checker.found is not None and outcome.error is None:
        outcome.result, outcome.found = "violation", checker.found
    outcome.seconds = time.perf_counter() - started
    return outcome


def first_found(
    header: Header, events: Iterable[TraceEvent], *, efficiency: Efficiency = "fail",
    engine: EngineName = "fast",
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
