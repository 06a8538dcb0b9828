"""Taking a line whose form was tested: the pairing, the fast engine's step, the bookkeeping.

Theory of operation
-------------------
The check's inner loop (``asynclookup.trace.hot``) tests the form of the
commonest lines itself, from the decoded objects or from msgspec's typed
ones; then it hands the raw values here.  Each ``take_*`` does what
``asynclookup.trace.check.TraceChecker.feed`` does for that kind on its
general path: the same pairing of the two-line events, the same step of the
fast engine with raw values, the same counts and bookkeeping
(``_settle``, ``TraceChecker.judged`` when anything is to report), building an
event only where one is kept (an open call) or reported.  When the checker is
not in its common state (the old engine, a stopped engine, a call that does
not pair as it should) it returns ``SLOW`` before changing anything, and the
loop gives the line to the general path.

``Checker`` is what this reads and updates of a ``TraceChecker``.  It judges
nothing of its own: form is the loop's and ``format``'s, the protocol the
engine's.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Protocol

from asynclookup.observe.fast import FastChecker
from asynclookup.observe.interface import OracleLimitError, Violation
from asynclookup.trace.format import CheckLimitError, Header, TraceEvent
from asynclookup.trace.reader import NEW

PRUNE_EVERY = 16384  # feeds between prunes of the engine's per-probe notes


class Checker(Protocol):
    """What the loop reads and updates of ``asynclookup.trace.check.TraceChecker``."""

    header: Header
    counts: Counter[str]
    open_lookups: dict[str, TraceEvent]  # thread -> its lookup_called
    open_calls: dict[str, TraceEvent]  # thread -> its tier_call_started
    fast: FastChecker | None
    peak_states: int
    fed: int  # observations fed since the last restart
    last_restart: int
    last_flush: int | None

    def feed(self, event: TraceEvent) -> Any:
        """The general path: any event (not None: a violation was found)."""
        ...

    def judged(self, event: TraceEvent, violation: Violation | None, warned: int) -> Any:
        """After the engine took ``event``: its violation or warning, or the bookkeeping."""
        ...


SLOW = object()  # what a ``take_*`` returns when the general path must take the line


def count(checker: Checker, kind: str) -> None:
    counts = checker.counts
    counts[kind] = counts.get(kind, 0) + 1




def _engine(checker: Checker, thread: str, scheduler: bool) -> FastChecker | None:
    """The fast engine when it steps raw values; None when the general path must decide
    (the old engine, a stopped engine, or a scheduler call inside an open lookup)."""
    fast = checker.fast
    if fast is None or fast.stopped or (scheduler and thread in checker.open_lookups):
        return None
    return fast


def _settle(
    checker: Checker, fast: FastChecker, warned: int, violation: Violation | None,
    line: int, s: int, kind: str, thread: str, data: Any,
) -> Any:
    """``TraceChecker.judged`` after a step: the common case (a request live, nothing
    found, no warning) here; anything else through it, with the event built (``data``:
    its fields, or the typed event they are read from)."""
    if violation is None and len(fast.warnings) == warned and fast.index:
        size = len(fast.hyps)
        if size > checker.peak_states:
            checker.peak_states = size
        checker.fed += 1
        if checker.fed % PRUNE_EVERY == 0:  # (this engine keeps no history to trim)
            fast.forget_stale_notes()
        return None
    event = NEW(TraceEvent, (line, s, kind, thread, _fields(kind, data)))
    return checker.judged(event, violation, warned)


_TYPED_LISTS = {"flush": ("submitted", "dropped"), "drain": (), "take_batch": ("entries",),
                "post": ("results",)}


def _fields(kind: str, data: Any) -> dict[str, Any]:
    """An event's fields: ``data`` itself, or read from a typed event (its lists as
    ``json.loads`` gives them: lists of lists)."""
    if type(data) is dict:
        return data
    if kind == "cleanup":
        return {"request": data.request}
    return {
        name: [list(item) for item in getattr(data, name)]
        for name in _TYPED_LISTS[kind] if type(getattr(data, name)) is list
    }


def _limit(line: int, exc: OracleLimitError) -> CheckLimitError:
    return CheckLimitError(line, f"cannot check this trace: {exc}")


# -- taking a line whose form was tested: pairing, the engine's step, bookkeeping --------
#
# Shared by the handlers of decoded objects and of msgspec's Structs; each returns SLOW
# before changing anything when the checker is not in its common state.



def take_called(checker: Checker, line: int, s: int, thread: str, k: bytes, request: str
                 ) -> Any:
    if thread in checker.open_lookups:
        return SLOW
    checker.open_lookups[thread] = NEW(
        TraceEvent, (line, s, "lookup_called", thread, {"key": k, "request": request})
    )
    counts = checker.counts
    counts["lookup_called"] = counts.get("lookup_called", 0) + 1
    return None


def take_pair(
    checker: Checker, line: int, s: int, thread: str, k: bytes, request: str, verdict: object,
) -> Any:
    """A lookup_called on ``line`` and its lookup_returned (``s``) on the next: both taken
    as ``_take_called`` then ``_take_returned`` would, without keeping the open call."""
    fast = checker.fast
    if thread in checker.open_lookups or fast is None or fast.stopped:
        return SLOW
    counts = checker.counts
    counts["lookup_called"] = counts.get("lookup_called", 0) + 1
    return _returned(checker, fast, line + 1, s, thread, k, request, verdict)


def take_returned(
    checker: Checker, line: int, s: int, thread: str, k: bytes, request: str, verdict: object,
) -> Any:
    opened = checker.open_lookups
    called = opened.get(thread)
    fast = checker.fast  # ``_engine``, inline: this is the commonest step
    if (
        called is None or fast is None or fast.stopped
        or called[4]["key"] != k or called[4]["request"] != request
    ):
        return SLOW
    del opened[thread]
    return _returned(checker, fast, line, s, thread, k, request, verdict)


def _returned(
    checker: Checker, fast: FastChecker, line: int, s: int, thread: str, k: bytes,
    request: str, verdict: object,
) -> Any:
    """A lookup_returned on ``line`` whose call is taken: counted, stepped, settled."""
    counts = checker.counts
    counts["lookup_returned"] = counts.get("lookup_returned", 0) + 1
    warned = len(fast.warnings)
    try:
        violation = fast.lookup(k, request, verdict)
    except OracleLimitError as exc:
        raise _limit(line, exc) from None
    if violation is None and len(fast.warnings) == warned and fast.index:
        size = len(fast.hyps)  # ``_settle``, inline: this is the commonest step
        if size > checker.peak_states:
            checker.peak_states = size
        checker.fed += 1
        if checker.fed % PRUNE_EVERY == 0:
            fast.forget_stale_notes()
        return None
    return checker.judged(NEW(TraceEvent, (
        line, s, "lookup_returned", thread, {"key": k, "request": request, "verdict": verdict}
    )), violation, warned)


def take_scheduler(
    checker: Checker, line: int, s: int, thread: str, kind: str, request: str | None,
    data: Any,
) -> Any:
    """flush, drain, cleanup (``request``)."""
    fast = _engine(checker, thread, scheduler=True)
    if fast is None:
        return SLOW
    counts = checker.counts
    counts[kind] = counts.get(kind, 0) + 1
    warned = len(fast.warnings)
    try:
        if kind == "flush":
            checker.last_flush = line
            violation = fast.flush()
        elif kind == "drain":
            violation = fast.drain()
        else:
            assert request is not None
            violation = fast.cleanup(request)
    except OracleLimitError as exc:
        raise _limit(line, exc) from None
    return _settle(checker, fast, warned, violation, line, s, kind, thread, data)


def take_worker(checker: Checker, line: int, s: int, thread: str, kind: str, data: Any
                 ) -> Any:
    """take_batch and post (form only when the worker steps are hidden)."""
    fast = _engine(checker, thread, scheduler=False)
    if fast is None:
        return SLOW
    counts = checker.counts
    counts[kind] = counts.get(kind, 0) + 1
    if not checker.header.worker_steps:
        return None
    warned = len(fast.warnings)
    try:
        violation = fast.take_batch() if kind == "take_batch" else fast.post()
    except OracleLimitError as exc:
        raise _limit(line, exc) from None
    return _settle(checker, fast, warned, violation, line, s, kind, thread, data)


def take_started(
    checker: Checker, line: int, s: int, thread: str, keys: tuple[bytes, ...], request: str,
) -> Any:
    if thread in checker.open_calls:
        return SLOW
    checker.open_calls[thread] = NEW(
        TraceEvent, (line, s, "tier_call_started", thread, {"keys": keys, "request": request})
    )
    count(checker, "tier_call_started")
    return None


def take_finished(
    checker: Checker, line: int, s: int, thread: str, keys: tuple[bytes, ...], request: str,
    values: tuple[bool, ...],
) -> Any:
    """tier_call_finished with a proper answer."""
    started = checker.open_calls.get(thread)
    fast = _engine(checker, thread, scheduler=False)
    if (
        started is None or fast is None or len(values) != len(keys)
        or started[4]["keys"] != keys or started[4]["request"] != request
    ):
        return SLOW
    del checker.open_calls[thread]
    count(checker, "tier_call_finished")
    warned = len(fast.warnings)
    try:
        violation = fast.answered(keys, request, values)
    except OracleLimitError as exc:
        raise _limit(line, exc) from None
    return _settle(checker, fast, warned, violation, line, s, "tier_call_finished", thread,
                   {"keys": keys, "request": request, "answers": values})
