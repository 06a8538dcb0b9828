"""The check's inner loop: decoded blocks of lines into a ``TraceChecker``, the commonest inline.

Theory of operation
-------------------
``feed_blocks`` walks the decoded blocks of ``asynclookup.trace.reader.Blocks``.
Three kinds make most of any trace: ``lookup_called``, ``lookup_returned``
and (from recorders that write them) ``result_applied``.  For those the loop
does, in its own body, what the general path does through
``reader.event_of`` and ``TraceChecker.feed``: the same tests of form (a
line that fails one, or any key not yet seen, goes the general path, which
accepts or names the problem), the same ``seq`` order, the same pairing,
the same step of the fast engine and the same bookkeeping.  It builds an
event only where one is kept (an open lookup) or reported.  Every other
line, and these kinds whenever the checker is not in its common state (the
old engine, a stopped engine, a lookup that is not the open one of its
thread), takes the general path.  tests/test_trace_hot.py checks that both
give the same outcome on the suite's traces and on mutated ones.

It judges nothing of its own: form is ``reader``'s and ``format``'s, the
protocol is the engine's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Container
from typing import Any, Protocol

from asynclookup.observe.fast import FastChecker
from asynclookup.observe.interface import OracleLimitError, Violation
from asynclookup.trace.format import CheckLimitError, TraceEvent, _decode
from asynclookup.trace.reader import KEYS, NEW, Blocks, _out_of_order, event_of

PROGRESS_EVERY = 8192  # events between calls of a progress callback (about: once a block)
PRUNE_EVERY = 16384  # feeds between prunes of the engine's per-probe notes


class Checker(Protocol):
    """What the loop reads and updates of ``asynclookup.trace.check.TraceChecker``."""

    counts: Counter[str]
    open_lookups: dict[str, TraceEvent]
    fast: FastChecker | None
    peak_states: int
    fed: int  # observations fed since the last restart
    last_restart: int

    def feed(self, event: TraceEvent) -> Any:
        """The general path: any event (not None: a violation was found)."""
        ...

    def judged(self, event: TraceEvent, violation: Violation | None, warned: int) -> Any:
        """After the engine took ``event``: its violation or warning, or the bookkeeping."""
        ...


def feed_blocks(
    checker: Checker, blocks: Blocks, *, stops: Container[int] = (),
    progress: Callable[[int], None] | None = None,
) -> int | None:
    """Feed every line of ``blocks`` to ``checker`` until a violation (``checker.found``)
    or the end; raises TraceFormatError at the first malformed line.

    ``stops``: lines after which the check ends if it restarted there; returns
    that line, or None.  ``progress``: called with the events read so far.
    """
    counts, open_lookups, keys = checker.counts, checker.open_lookups, KEYS
    new = NEW
    seq, exact, events = blocks.seq, blocks.exact, 0
    for block in blocks:
        objs, lines = block.objs, block.lines
        line = block.first - 1
        for i, obj in enumerate(lines if objs is None else objs):
            line += 1
            if objs is None:  # the block did not decode: this line alone, with its message
                obj = _decode(line, obj, block.last and i == len(lines) - 1)
            elif type(obj) is dict:
                s, thread = obj.get("seq"), obj.get("thread")
                if type(s) is int and s > seq and type(thread) is str:  # so s >= 0
                    kind = obj.get("event")
                    if kind == "lookup_returned" and len(obj) == 6:
                        key, request = obj.get("key"), obj.get("request")
                        verdict = obj.get("verdict", 0)
                        k = keys.get(key) if type(key) is str else None
                        called = open_lookups.get(thread)
                        fast = checker.fast
                        if (
                            k is not None and type(request) is str and called is not None
                            and (verdict is None or verdict is True or verdict is False)
                            and fast is not None and not fast.stopped
                            and called[4]["key"] == k and called[4]["request"] == request
                        ):
                            del open_lookups[thread]
                            counts[kind] = counts.get(kind, 0) + 1
                            warned = len(fast.warnings)
                            try:
                                violation = fast.lookup(k, request, verdict)
                            except OracleLimitError as exc:
                                raise CheckLimitError(
                                    line, f"cannot check this trace: {exc}"
                                ) from None
                            seq = s
                            if violation is None and len(fast.warnings) == warned and fast.index:
                                size = len(fast.hyps)  # ``TraceChecker._after``, a request live
                                if size > checker.peak_states:
                                    checker.peak_states = size
                                checker.fed += 1
                                if checker.fed % PRUNE_EVERY == 0:
                                    fast.forget_stale_notes()
                                continue
                            event = new(TraceEvent, (line, s, kind, thread, {
                                "key": k, "request": request, "verdict": verdict}))
                            if checker.judged(event, violation, warned) is not None:
                                return None
                            continue
                    elif kind == "lookup_called" and len(obj) == 5:
                        key, request = obj.get("key"), obj.get("request")
                        k = keys.get(key) if type(key) is str else None
                        if k is not None and type(request) is str and thread not in open_lookups:
                            open_lookups[thread] = new(TraceEvent, (
                                line, s, kind, thread, {"key": k, "request": request}))
                            counts[kind] = counts.get(kind, 0) + 1
                            seq = s
                            continue
                    elif kind == "result_applied" and len(obj) == 6:
                        key, generation, verdict = (
                            obj.get("key"), obj.get("generation"), obj.get("verdict")
                        )
                        if (
                            type(key) is str and key in keys and type(generation) is int
                            and generation >= 0 and (verdict is True or verdict is False)
                        ):
                            counts[kind] = counts.get(kind, 0) + 1
                            seq = s
                            continue
            # the general path: every other line, and the above when a test failed
            event = event_of(line, obj, lines[i], exact or objs is None)
            if event[1] <= seq:
                _out_of_order(line, event[1], seq)
            seq = event[1]
            if checker.feed(event) is not None:
                return None
            if line in stops and checker.last_restart == line:
                return line
        if progress is not None and (events + len(lines)) // PROGRESS_EVERY > (
            events // PROGRESS_EVERY
        ):
            progress(events + len(lines))
        events += len(lines)
    return None
