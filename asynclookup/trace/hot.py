"""The check's inner loop: decoded blocks of lines into a ``TraceChecker``, common kinds inline.

Theory of operation
-------------------
``feed_blocks`` walks the decoded blocks of ``asynclookup.trace.reader.Blocks``.
For the kinds that make nearly all of a trace (the lookups, flushes, drains,
cleanups, tier calls, worker steps and result events without an error) an
inline handler tests the form as the general path (``reader.event_of``,
then ``TraceChecker.feed``) does (a line that fails a test, or any key not
yet seen, goes the general path, which accepts it or names the problem),
the loop keeps the ``seq`` order, and ``asynclookup.trace.take`` pairs,
steps the fast engine with raw values and keeps the bookkeeping.  A
``lookup_called`` followed by its ``lookup_returned`` is taken as one pair.
There are two sets of handlers: for the objects ``json.loads`` or orjson
decode, and for msgspec's typed ones (``asynclookup.trace.typed``, whose
types are already tested).  Every other line, and
these kinds whenever the checker is not in its common state (the old engine,
a stopped engine, a call that does not pair as it should), take the general
path.  tests/test_trace_hot.py checks that both give the same outcome on the
suite's traces and on mutants of their lines.

It judges nothing of its own: form is ``reader``'s and ``format``'s, the
protocol is the engine's.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import Any

from asynclookup.trace.format import TraceEvent, _decode
from asynclookup.trace.reader import (
    KEYS,
    Blocks,
    _out_of_order,
    bare_lists,
    event_of,
    fast_key,
)
from asynclookup.trace.take import (
    SLOW,
    Checker,
    count,
    take_called,
    take_finished,
    take_pair,
    take_returned,
    take_scheduler,
    take_started,
    take_worker,
)

PROGRESS_EVERY = 8192  # events between calls of a progress callback (about: once a block)


def feed_blocks(
    checker: Checker, blocks: Blocks, *, stops: Container[int] = (),
    progress: Callable[[int], None] | None = None,
) -> int | None:
    """Feed every line of ``blocks`` to ``checker`` until a violation (``checker.found``)
    or the end; raises TraceFormatError at the first malformed line.

    ``stops``: lines after which the check ends if it restarted there; returns
    that line, or None.  ``progress``: called with the events read so far.
    """
    if blocks.typed:
        return _feed_typed(checker, blocks, stops, progress)
    inline_of = INLINE
    seq, exact, events = blocks.seq, blocks.exact, 0
    for block in blocks:
        objs, lines = block.objs, block.lines
        line = block.first - 1
        paired = False  # the line was the lookup_returned of a pair taken with its call
        for i, obj in enumerate(lines if objs is None else objs):
            line += 1
            if paired:
                paired = False
                continue
            if objs is None:  # the block did not decode: this line alone, with its message
                obj = _decode(line, obj, block.last and i == len(lines) - 1)
            elif type(obj) is dict:
                s, thread, kind = obj.get("seq"), obj.get("thread"), obj.get("event")
                # so s >= 0, and ``kind`` can be looked up
                if type(s) is int and s > seq and type(thread) is str and type(kind) is str:
                    if kind == "lookup_called" and i + 1 < len(objs):
                        got = _pair(checker, obj, objs[i + 1], line, s, thread)
                        if got is not SLOW:
                            seq, paired = objs[i + 1]["seq"], True
                            if got is not None:
                                return None  # a violation
                            if line + 1 in stops and checker.last_restart == line + 1:
                                return line + 1
                            continue
                    inline = inline_of.get(kind)
                    if inline is not None:
                        got = inline(checker, obj, line, s, thread)
                        if got is not SLOW:
                            seq = s
                            if got is not None:
                                return None  # a violation
                            if line in stops and checker.last_restart == line:
                                return line
                            continue
            # the general path: every other line, and the above when a test failed
            seq = _general(checker, event_of(line, obj, lines[i], exact or objs is None), seq)
            if seq < 0:
                return None  # a violation
            if line in stops and checker.last_restart == line:
                return line
        events = _progressed(progress, events, len(lines))
    return None


def _feed_typed(
    checker: Checker, blocks: Blocks, stops: Container[int],
    progress: Callable[[int], None] | None,
) -> int | None:
    """``feed_blocks`` for blocks of msgspec's Structs (None: a line msgspec rejected)."""
    typed = TYPED
    seq, events = blocks.seq, 0
    for block in blocks:
        objs, lines = block.objs, block.lines
        assert objs is not None
        line = block.first - 1
        paired = False  # the line was the lookup_returned of a pair taken with its call
        for i, obj in enumerate(objs):
            line += 1
            if paired:
                paired = False
                continue
            if obj is not None and obj.seq > seq:
                if obj.kind == "lookup_called" and i + 1 < len(objs):
                    ret = objs[i + 1]
                    if (
                        ret is not None and ret.kind == "lookup_returned" and ret.seq > obj.seq
                        and ret.thread == obj.thread and ret.key == obj.key
                        and ret.request == obj.request
                    ):
                        got = _t_pair(checker, obj, ret, line)
                        if got is not SLOW:
                            seq, paired = ret.seq, True
                            if got is not None:
                                return None  # a violation
                            if line + 1 in stops and checker.last_restart == line + 1:
                                return line + 1
                            continue
                got = typed[obj.kind](checker, obj, line)
                if got is not SLOW:
                    seq = obj.seq
                    if got is not None:
                        return None  # a violation
                    if line in stops and checker.last_restart == line:
                        return line
                    continue
            # the general path, from the standard library's reading of the line
            raw = lines[i]
            obj = _decode(line, raw, block.last and i == len(lines) - 1)
            seq = _general(checker, event_of(line, obj, raw, True), seq)
            if seq < 0:
                return None  # a violation
            if line in stops and checker.last_restart == line:
                return line
        events = _progressed(progress, events, len(lines))
    return None


def _general(checker: Checker, event: TraceEvent, seq: int) -> int:
    """The general path for one event after the one numbered ``seq``: the event's number,
    or -1 when the checker found a violation (a ``seq`` is never negative)."""
    if event[1] <= seq:
        _out_of_order(event[0], event[1], seq)
    if checker.feed(event) is not None:
        return -1
    return event[1]


def _progressed(progress: Callable[[int], None] | None, events: int, more: int) -> int:
    """``events + more`` (the events fed so far, after a block of ``more``), telling
    ``progress`` when the sum passes a multiple of ``PROGRESS_EVERY`` (once a block)."""
    total = events + more
    if progress is not None and total // PROGRESS_EVERY > events // PROGRESS_EVERY:
        progress(total)
    return total


# -- the inline handlers: each takes (checker, object, line, seq, thread), with seq and
# thread already tested, and returns SLOW before changing anything when the general path
# must take the line, else None (taken) or what ``TraceChecker.judged`` returned (stop).

def _keys(value: object) -> tuple[bytes, ...] | None:
    """A list of hex keys already validated, as keys; None: let the general path judge."""
    if type(value) is not list:
        return None
    out = []
    for item in value:
        key = KEYS.get(item) if type(item) is str else None
        if key is None:
            return None
        out.append(key)
    return tuple(out)


# -- the handlers of decoded objects (json, orjson): the reader's tests of form, inline ---


def _pair(
    checker: Checker, obj: dict[str, Any], ret: object, line: int, s: int, thread: str,
) -> Any:
    """A lookup_called (``obj``, seq ``s``) and, on the next line, its lookup_returned
    (same thread, key text and request), both of the forms the handlers take: taken as
    they would take them (``_take_pair``); SLOW for anything else."""
    if type(ret) is not dict or len(obj) != 5 or len(ret) != 6:
        return SLOW
    key, request, verdict = obj.get("key"), obj.get("request"), ret.get("verdict", 0)
    k = KEYS.get(key) if type(key) is str else None
    s2 = ret.get("seq")
    if (
        k is None or type(request) is not str or ret.get("event") != "lookup_returned"
        or type(s2) is not int or s2 <= s or ret.get("thread") != thread
        or ret.get("key") != key or ret.get("request") != request
        or (verdict is not None and verdict is not True and verdict is not False)
    ):
        return SLOW
    return take_pair(checker, line, s2, thread, k, request, verdict)


def _lookup_called(checker: Checker, obj: dict[str, Any], line: int, s: int, thread: str) -> Any:
    key, request = obj.get("key"), obj.get("request")
    k = KEYS.get(key) if type(key) is str else None
    if len(obj) != 5 or k is None or type(request) is not str:
        return SLOW
    return take_called(checker, line, s, thread, k, request)


def _lookup_returned(checker: Checker, obj: dict[str, Any], line: int, s: int, thread: str
                     ) -> Any:
    key, request, verdict = obj.get("key"), obj.get("request"), obj.get("verdict", 0)
    k = KEYS.get(key) if type(key) is str else None
    if (
        len(obj) != 6 or k is None or type(request) is not str
        or (verdict is not None and verdict is not True and verdict is not False)
    ):
        return SLOW
    return take_returned(checker, line, s, thread, k, request, verdict)


def _result(checker: Checker, obj: dict[str, Any], line: int, s: int, thread: str) -> Any:
    """result_applied, result_stale, result_orphaned: form only."""
    kind = obj["event"]
    applied = kind == "result_applied"
    key, generation, verdict = obj.get("key"), obj.get("generation"), obj.get("verdict", 0)
    if (
        len(obj) != 5 + applied or type(key) is not str or key not in KEYS
        or type(generation) is not int or generation < 0
        or (applied and verdict is not True and verdict is not False)
    ):
        return SLOW
    count(checker, kind)
    return None


def _scheduler(checker: Checker, obj: dict[str, Any], line: int, s: int, thread: str) -> Any:
    """flush, drain and cleanup without an error."""
    kind = obj["event"]
    if kind == "cleanup":
        request = obj.get("request")
        if len(obj) != 4 or type(request) is not str:
            return SLOW
        return take_scheduler(checker, line, s, thread, kind, request, {"request": request})
    data = bare_lists(obj, kind)
    if data is None:
        return SLOW
    return take_scheduler(checker, line, s, thread, kind, None, data)


def _worker(checker: Checker, obj: dict[str, Any], line: int, s: int, thread: str) -> Any:
    """take_batch and post without an error."""
    kind = obj["event"]
    data = bare_lists(obj, kind)
    if data is None:
        return SLOW
    return take_worker(checker, line, s, thread, kind, data)


def _tier_started(checker: Checker, obj: dict[str, Any], line: int, s: int, thread: str
                  ) -> Any:
    keys, request = _keys(obj.get("keys")), obj.get("request")
    if len(obj) != 5 or keys is None or type(request) is not str:
        return SLOW
    return take_started(checker, line, s, thread, keys, request)


def _tier_finished(checker: Checker, obj: dict[str, Any], line: int, s: int, thread: str
                   ) -> Any:
    """tier_call_finished with a proper answer."""
    keys, request, answers = _keys(obj.get("keys")), obj.get("request"), obj.get("answers")
    if (
        len(obj) != 6 or keys is None or type(request) is not str or type(answers) is not list
        or not all(v is True or v is False for v in answers)
    ):
        return SLOW
    return take_finished(checker, line, s, thread, keys, request, tuple(answers))


Inline = Callable[[Checker, dict[str, Any], int, int, str], Any]
INLINE: dict[str, Inline] = {
    "lookup_called": _lookup_called, "lookup_returned": _lookup_returned,
    "result_applied": _result, "result_stale": _result, "result_orphaned": _result,
    "flush": _scheduler, "drain": _scheduler, "cleanup": _scheduler,
    "take_batch": _worker, "post": _worker,
    "tier_call_started": _tier_started, "tier_call_finished": _tier_finished,
}


# -- the handlers of msgspec's Structs (asynclookup.trace.typed): types already tested ---
#
# Each takes (checker, struct, line); what is left to test is that keys are hex (the
# cache of keys validated, then ``reader.fast_key``).


def _hex(value: str) -> bytes | None:
    return KEYS.get(value) or fast_key(value)


def _hex_all(values: list[str]) -> tuple[bytes, ...] | None:
    out = []
    for value in values:
        key = KEYS.get(value) or fast_key(value)
        if key is None:
            return None
        out.append(key)
    return tuple(out)


def _hex_triples(value: object) -> bool:
    """Whether the keys of typed entries or results (absent: not a list) are hex."""
    if type(value) is not list:
        return True
    keys = KEYS
    for item in value:  # noqa: SIM110  (a loop is faster than all() of a generator)
        if item[0] not in keys and fast_key(item[0]) is None:
            return False
    return True


def _t_called(checker: Checker, obj: Any, line: int) -> Any:
    key = obj.key
    k = KEYS.get(key) or fast_key(key)
    if k is None:
        return SLOW
    return take_called(checker, line, obj.seq, obj.thread, k, obj.request)


def _t_pair(checker: Checker, called: Any, ret: Any, line: int) -> Any:
    """A lookup_called on ``line`` and, next, its lookup_returned (same thread, key text and
    request): both taken as ``_t_called`` then ``_t_returned`` would."""
    key = called.key
    k = KEYS.get(key) or fast_key(key)
    if k is None:
        return SLOW
    return take_pair(checker, line, ret.seq, called.thread, k, called.request, ret.verdict)


def _t_returned(checker: Checker, obj: Any, line: int) -> Any:
    key = obj.key
    k = KEYS.get(key) or fast_key(key)
    if k is None:
        return SLOW
    return take_returned(checker, line, obj.seq, obj.thread, k, obj.request, obj.verdict)


def _t_result(checker: Checker, obj: Any, line: int) -> Any:
    key = obj.key
    if key not in KEYS and fast_key(key) is None:
        return SLOW
    counts, kind = checker.counts, obj.kind
    counts[kind] = counts.get(kind, 0) + 1
    return None


def _t_scheduler(checker: Checker, obj: Any, line: int) -> Any:
    kind = obj.kind
    if kind == "cleanup":
        return take_scheduler(checker, line, obj.seq, obj.thread, kind, obj.request, obj)
    if kind == "flush" and not (_hex_triples(obj.submitted) and _hex_triples(obj.dropped)):
        return SLOW
    return take_scheduler(checker, line, obj.seq, obj.thread, kind, None, obj)


def _t_worker(checker: Checker, obj: Any, line: int) -> Any:
    kind = obj.kind
    name = "entries" if kind == "take_batch" else "results"
    if not _hex_triples(getattr(obj, name)):
        return SLOW
    return take_worker(checker, line, obj.seq, obj.thread, kind, obj)


def _t_started(checker: Checker, obj: Any, line: int) -> Any:
    keys = _hex_all(obj.keys)
    if keys is None:
        return SLOW
    return take_started(checker, line, obj.seq, obj.thread, keys, obj.request)


def _t_finished(checker: Checker, obj: Any, line: int) -> Any:
    keys = _hex_all(obj.keys)
    if keys is None:
        return SLOW
    return take_finished(checker, line, obj.seq, obj.thread, keys, obj.request,
                          tuple(obj.answers))


Typed = Callable[[Checker, Any, int], Any]
TYPED: dict[str, Typed] = {
    "lookup_called": _t_called, "lookup_returned": _t_returned,
    "result_applied": _t_result, "result_stale": _t_result, "result_orphaned": _t_result,
    "flush": _t_scheduler, "drain": _t_scheduler, "cleanup": _t_scheduler,
    "take_batch": _t_worker, "post": _t_worker,
    "tier_call_started": _t_started, "tier_call_finished": _t_finished,
}
