"""Reading a trace fast: blocks of lines decoded at once, the common shapes validated inline.

Theory of operation
-------------------
``asynclookup.trace.format`` judges one line at a time and names the first
problem; that is exact but slow.  This module reads the same file by blocks of
``BLOCK`` lines: a block is decoded with one call of the parser (the
standard library's ``json.loads`` by default, or ``orjson.loads`` when asked
for and installed: the ``fast`` extra; msgspec, the extra's other parser,
decodes each line into a typed Struct, ``asynclookup.trace.typed``), and
each object is validated by a
test unrolled for its kind, which accepts only what ``format.parse_event``
accepts and builds the same ``TraceEvent`` (tests/test_trace_format.py
compares the two on random objects).  Anything else takes the exact path:

- a block that does not decode as a whole (a line that is not JSON, not
  UTF-8, empty, truncated) is read again line by line with ``format``'s own
  decoder, so the first bad line is named as it would be alone;
- an object the unrolled test does not accept is judged by
  ``format.parse_event``; with a parser other than the standard library's,
  the object is first decoded again from its line by ``json.loads`` (orjson
  reads an integer beyond 64 bits as a float, for one), so a judgement never
  depends on the parser (tests/test_trace_reader.py checks each on the
  suite's traces).

``Blocks`` reads the header and then gives the decoded blocks, for the
checker's own loop (``asynclookup.trace.hot``), which takes the commonest
lines straight from the decoded objects and hands every other one to
``event_of``; ``read_trace`` yields the events one by one.  Either holds one
block at a time, so a file of any length streams.  It knows nothing of the
protocol.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any, NamedTuple

from asynclookup.trace.format import (
    EVENTS,
    Header,
    TraceEvent,
    TraceFormatError,
    _decode,
    _json_type,
    _key,
    parse_event,
    parse_header,
)

BLOCK = 2048  # lines decoded by one call of the parser
# ``tuple.__new__`` builds a TraceEvent without the named tuple's own ``__new__`` (half the cost)
New = Callable[[type[TraceEvent], tuple[Any, ...]], TraceEvent]
NEW: New = tuple.__new__
# the standard library's (the default), or the fast extra's: orjson, or msgspec's typed
# decoding (``asynclookup.trace.typed``)
PARSERS = ("json", "orjson", "msgspec")

Loads = Callable[[bytes], Any]


def loader(parser: str) -> Callable[[list[bytes], bool], list[Any] | None]:
    """How ``parser`` (one of ``PARSERS``) decodes a block of lines (and whether the file
    ends with it): a list of objects, or None (decode line by line); a one-line
    TraceFormatError when the parser is not installed."""
    if parser == "json":
        return lambda block, last: _decode_block(block, last, json.loads)
    extra = "orjson" if parser == "orjson" else "msgspec" if parser == "msgspec" else None
    if extra is None:
        raise TraceFormatError(0, f"unknown parser {parser!r}: one of {', '.join(PARSERS)}")
    try:  # an optional extra: imported only when asked for
        if parser == "orjson":
            import orjson

            loads: Loads = orjson.loads
            return lambda block, last: _decode_block(block, last, loads)
        from asynclookup.trace import typed
    except ImportError:
        raise TraceFormatError(
            0, f"parser {parser!r} is not installed (pip install 'asynclookup[fast]')"
        ) from None
    return lambda block, last: typed.decode_block(block)


class Block(NamedTuple):
    """A block of up to ``BLOCK`` lines: each decoded (``objs``; None: the block did not
    decode as a whole, so each line is decoded alone with ``format``'s messages), the raw
    lines, the number of the first, and whether the file ends with this block."""

    objs: list[Any] | None
    lines: list[bytes]
    first: int
    last: bool


class Blocks:
    """A trace's lines read by blocks: ``header`` (None when resuming), ``line`` and ``seq``
    of the event before the first block; iterating gives each ``Block``.

    The header is read at construction (a TraceFormatError for line 1).
    ``resume=(line, seq)``: the lines are a file's tail that starts after
    ``line``, whose event had ``seq`` (no header is read), for checking a chunk
    of a file (``asynclookup.trace.split``).
    """

    def __init__(
        self, lines: Iterable[bytes], *, resume: tuple[int, int] | None = None,
        parser: str = "json",
    ) -> None:
        self._decode = loader(parser)
        self.exact = parser == "json"  # objects are the standard library's own
        self.typed = parser == "msgspec"  # objects are asynclookup.trace.typed's Structs
        self._source = iter(lines)
        self._first: list[bytes] = []
        self.header: Header | None = None
        if resume is None:
            raw = next(self._source, None)
            if raw is None:
                raise TraceFormatError(0, "empty file: a trace starts with its header line")
            following = next(self._source, None)
            self.header = parse_header(_decode(1, raw, following is None))
            self.line, self.seq = 1, -1
            self._first = [following] if following is not None else []
        else:
            self.line, self.seq = resume

    def __iter__(self) -> Iterator[Block]:
        source, line = self._source, self.line + 1
        block = self._first + list(islice(source, BLOCK - len(self._first)))
        while block:
            ahead = list(islice(source, BLOCK))
            yield Block(self._decode(block, not ahead), block, line, not ahead)
            line += len(block)
            block = ahead

    def events(self, block: Block) -> Iterator[TraceEvent]:
        """The events of ``block`` in order, each as ``format.parse_event`` would build it;
        the first problem raises (after the events before it), as does a ``seq`` that
        does not follow the last one given (``self.seq``, updated)."""
        exact, objs = self.exact, block.objs
        for i, raw in enumerate(block.lines):
            line = block.first + i
            if objs is None or self.typed:  # line by line, by json.loads, as the exact judge
                end = block.last and i == len(block.lines) - 1
                event = event_of(line, _decode(line, raw, end), raw, True)
            else:
                event = event_of(line, objs[i], raw, exact)
            if event[1] <= self.seq:
                _out_of_order(line, event[1], self.seq)
            self.seq = event[1]
            yield event


def event_of(line: int, obj: object, raw: bytes, exact: bool) -> TraceEvent:
    """Line ``line`` (``raw``, decoded as ``obj``) as an event, or the TraceFormatError
    saying what is wrong; ``exact``: ``obj`` came from ``json.loads`` (else the line is
    decoded again by it before the exact judgement)."""
    if type(obj) is dict:
        kind = obj.get("event")
        unrolled = _HOT.get(kind) if type(kind) is str else None
        event = unrolled(line, obj, NEW) if unrolled else _fast_event(line, obj)
        if event is not None:
            return event
    return _full_event(line, obj if exact else json.loads(raw))


def read_trace(
    lines: Iterable[bytes], *, resume: tuple[int, int] | None = None, parser: str = "json",
) -> Iterator[Header | TraceEvent]:
    """Parse a trace from its raw lines (each ending with ``\\n`` but perhaps the last).

    Yields the header (unless ``resume``: see ``Blocks``), then each event;
    raises TraceFormatError at the first problem.
    """
    blocks = Blocks(lines, resume=resume, parser=parser)
    if blocks.header is not None:
        yield blocks.header
    for block in blocks:
        yield from blocks.events(block)


def _full_event(line_no: int, obj: object) -> TraceEvent:
    if type(obj) is not dict:
        raise TraceFormatError(line_no, f"not a JSON object but {_json_type(obj)}")
    return parse_event(line_no, obj)


def _out_of_order(line_no: int, seq: int, last_seq: int) -> None:
    raise TraceFormatError(
        line_no,
        f"sequence numbers out of order: seq {seq} follows seq {last_seq} "
        f"(line {line_no - 1}); seq must strictly increase",
    )


def _decode_block(block: list[bytes], last: bool, loads: Loads) -> list[Any] | None:
    """Every line of ``block`` as JSON in one call, or None: decode line by line instead."""
    if last and not block[-1].endswith(b"\n"):
        return None  # a truncated last line needs its own message
    try:
        objs = loads(b"[" + b",".join(block) + b"]")
    except ValueError:
        return None
    if len(objs) != len(block):  # a line held two values, or none
        return None
    return objs  # type: ignore[no-any-return]


# -- the fast test of one object ---------------------------------------------------------

KEYS: dict[str, bytes] = {}  # hex text -> key, for keys already validated
_KEYS_KEPT = 1 << 16


def fast_key(value: object) -> bytes | None:
    if type(value) is not str:
        return None
    key = KEYS.get(value)
    if key is None:
        key = _key(value)
        if key is not None:
            if len(KEYS) >= _KEYS_KEPT:
                KEYS.clear()
            KEYS[value] = key
    return key


def _fast_keys(value: object) -> tuple[bytes, ...] | None:
    if type(value) is not list:
        return None
    keys = KEYS
    out = []
    for item in value:
        key = keys.get(item) if type(item) is str else None
        if key is None:
            key = fast_key(item)
            if key is None:
                return None
        out.append(key)
    return tuple(out)


def valid_triples(value: object, entries: bool) -> bool:
    """Whether ``value`` is a list of entries ``[key, request, generation]`` (or results
    ``[key, generation, verdict]``); kept as parsed (the checker does not read them)."""
    if type(value) is not list:
        return False
    keys = KEYS
    for item in value:
        if type(item) is not list or len(item) != 3:
            return False
        key, middle, last = item
        if entries:
            if type(middle) is not str or type(last) is not int or last < 0:
                return False
        elif type(middle) is not int or middle < 0 or (last is not True and last is not False):
            return False
        if type(key) is not str or (key not in keys and fast_key(key) is None):
            return False
    return True


_BAD = object()  # a value the fast path does not accept


def _fast_str(value: object) -> object:
    return value if type(value) is str else _BAD


def _fast_verdict(value: object) -> object:
    return value if value is None or value is True or value is False else _BAD


def _fast_bool(value: object) -> object:
    return value if value is True or value is False else _BAD


def _fast_int(value: object) -> object:
    return value if type(value) is int and value >= 0 else _BAD


def _fast_answers(value: object) -> object:
    if type(value) is not list or not all(v is True or v is False for v in value):
        return _BAD
    return tuple(value)


def _fast_entries(value: object) -> object:
    return value if valid_triples(value, entries=True) else _BAD


def _fast_results(value: object) -> object:
    return value if valid_triples(value, entries=False) else _BAD


def _fast_one_key(value: object) -> object:
    key = fast_key(value)
    return _BAD if key is None else key


def _fast_many_keys(value: object) -> object:
    keys = _fast_keys(value)
    return _BAD if keys is None else keys


def _fast_never(value: object) -> object:
    return _BAD  # error, failure, reason, requests: only the full path judges them


_FAST_TYPES = {
    "key": _fast_one_key, "keys": _fast_many_keys, "str": _fast_str,
    "verdict": _fast_verdict, "bool": _fast_bool, "int": _fast_int,
    "answers": _fast_answers, "entries": _fast_entries, "results": _fast_results,
}
# kind -> (name, converter, required) of each field, for ``_fast_event``
_PLANS: dict[str, tuple[tuple[str, Any, bool], ...]] = {
    kind: tuple((f.name, _FAST_TYPES.get(f.type, _fast_never), f.required) for f in fields)
    for kind, fields in EVENTS.items()
}
_PLANS["result_applied"] = tuple(
    (name, _fast_bool if name == "verdict" else conv, required)
    for name, conv, required in _PLANS["result_applied"]
)


def _fast_event(line_no: int, obj: dict[str, Any]) -> TraceEvent | None:
    """``obj`` as an event when it has a valid shape the fast test knows; None: let
    ``parse_event`` judge.  Accepts only what ``parse_event`` accepts, and builds the
    same values (tests/test_trace_format.py compares the two on random objects)."""
    kind = obj.get("event")
    if type(kind) is not str:
        return None
    unrolled = _HOT.get(kind)
    if unrolled is not None:
        return unrolled(line_no, obj, NEW)
    plan = _PLANS.get(kind)
    seq, thread = obj.get("seq"), obj.get("thread")
    if plan is None or type(seq) is not int or seq < 0 or type(thread) is not str:
        return None
    data: dict[str, Any] = {}
    for name, convert, required in plan:
        if name in obj:
            value = convert(obj[name])
            if value is _BAD:
                return None
            data[name] = value
        elif required:
            return None
    if len(data) + 3 != len(obj):
        return None  # an unknown field
    if kind == "tier_call_finished":
        answers = data.get("answers")
        if answers is None or len(answers) != len(data["keys"]):
            return None
    return TraceEvent(line_no, seq, kind, thread, data)


# The commonest kinds, unrolled: each takes (line, object, tuple.__new__) and returns the
# event or None; ``len(obj)`` counts the fields, so an unknown one is never let through.


def _lookup_called(line: int, obj: dict[str, Any], new: New) -> TraceEvent | None:
    seq, thread, key, request = obj.get("seq"), obj.get("thread"), obj.get("key"), obj.get(
        "request")
    if (
        len(obj) != 5 or type(seq) is not int or seq < 0 or type(thread) is not str
        or type(request) is not str or type(key) is not str
    ):
        return None
    k = KEYS.get(key) or fast_key(key)
    if k is None:
        return None
    return new(TraceEvent, (line, seq, "lookup_called", thread, {"key": k, "request": request}))


def _lookup_returned(line: int, obj: dict[str, Any], new: New) -> TraceEvent | None:
    seq, thread, key, request = obj.get("seq"), obj.get("thread"), obj.get("key"), obj.get(
        "request")
    verdict = obj.get("verdict", 0)
    if (
        len(obj) != 6 or type(seq) is not int or seq < 0 or type(thread) is not str
        or type(request) is not str or type(key) is not str
        or (verdict is not None and verdict is not True and verdict is not False)
    ):
        return None
    k = KEYS.get(key) or fast_key(key)
    if k is None:
        return None
    return new(TraceEvent, (
        line, seq, "lookup_returned", thread, {"key": k, "request": request, "verdict": verdict}
    ))


def _result(line: int, obj: dict[str, Any], new: New) -> TraceEvent | None:
    """result_applied (with its verdict), result_stale, result_orphaned."""
    seq, thread, key, generation = obj.get("seq"), obj.get("thread"), obj.get("key"), obj.get(
        "generation")
    kind = obj["event"]
    applied = kind == "result_applied"
    if (
        len(obj) != 5 + applied or type(seq) is not int or seq < 0 or type(thread) is not str
        or type(key) is not str or type(generation) is not int or generation < 0
    ):
        return None
    k = KEYS.get(key) or fast_key(key)
    if k is None:
        return None
    if not applied:
        return new(TraceEvent, (line, seq, kind, thread, {"key": k, "generation": generation}))
    verdict = obj.get("verdict")
    if verdict is not True and verdict is not False:
        return None
    return new(TraceEvent, (
        line, seq, kind, thread, {"key": k, "generation": generation, "verdict": verdict}
    ))


def _request_only(line: int, obj: dict[str, Any], new: New) -> TraceEvent | None:
    """cleanup without an error."""
    seq, thread, request = obj.get("seq"), obj.get("thread"), obj.get("request")
    if (
        len(obj) != 4 or type(seq) is not int or seq < 0 or type(thread) is not str
        or type(request) is not str
    ):
        return None
    return new(TraceEvent, (line, seq, obj["event"], thread, {"request": request}))


def _keys_only(line: int, obj: dict[str, Any], new: New) -> TraceEvent | None:
    """mark_miss and mark_present without an error."""
    seq, thread = obj.get("seq"), obj.get("thread")
    if len(obj) != 4 or type(seq) is not int or seq < 0 or type(thread) is not str:
        return None
    keys = _fast_keys(obj.get("keys"))
    if keys is None:
        return None
    return new(TraceEvent, (line, seq, obj["event"], thread, {"keys": keys}))


# kind -> its optional fields the fast test takes, each with its test
_LISTS: dict[str, tuple[tuple[str, bool], ...]] = {
    "flush": (("submitted", True), ("dropped", True)),
    "take_batch": (("entries", True),),
    "post": (("results", False),),
    "drain": (),
}


def _bare(line: int, obj: dict[str, Any], new: New) -> TraceEvent | None:
    """flush, take_batch, post, drain without an error: their lists validated, kept as parsed."""
    seq, thread = obj.get("seq"), obj.get("thread")
    if type(seq) is not int or seq < 0 or type(thread) is not str:
        return None
    kind = obj["event"]
    data = bare_lists(obj, kind)
    if data is None:
        return None
    return new(TraceEvent, (line, seq, kind, thread, data))


def bare_lists(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The fields of a flush, drain, take_batch or post without an error, validated and
    kept as parsed; None when one is malformed or another field is there (the general
    path judges it)."""
    data: dict[str, Any] = {}
    for name, entries in _LISTS[kind]:
        value = obj.get(name)
        if value is not None:
            if not valid_triples(value, entries):
                return None
            data[name] = value
    return data if len(obj) == 3 + len(data) else None


def _tier_call(line: int, obj: dict[str, Any], new: New) -> TraceEvent | None:
    """tier_call_started, and tier_call_finished with proper answers."""
    seq, thread, request = obj.get("seq"), obj.get("thread"), obj.get("request")
    kind = obj["event"]
    finished = kind == "tier_call_finished"
    if (
        len(obj) != 5 + finished or type(seq) is not int or seq < 0 or type(thread) is not str
        or type(request) is not str
    ):
        return None
    keys = _fast_keys(obj.get("keys"))
    if keys is None:
        return None
    if not finished:
        return new(TraceEvent, (line, seq, kind, thread, {"keys": keys, "request": request}))
    answers = obj.get("answers")
    if type(answers) is not list or len(answers) != len(keys) or not all(
        v is True or v is False for v in answers
    ):
        return None
    return new(TraceEvent, (
        line, seq, kind, thread, {"keys": keys, "request": request, "answers": tuple(answers)}
    ))


_Unrolled = Callable[[int, dict[str, Any], New], "TraceEvent | None"]
_HOT: dict[str, _Unrolled] = {
    "lookup_called": _lookup_called, "lookup_returned": _lookup_returned,
    "result_applied": _result, "result_stale": _result, "result_orphaned": _result,
    "cleanup": _request_only, "mark_miss": _keys_only, "mark_present": _keys_only,
    "flush": _bare, "take_batch": _bare, "post": _bare, "drain": _bare,
    "tier_call_started": _tier_call, "tier_call_finished": _tier_call,
}
