"""The trace format (JSON Lines, version 1): its table of events and the exact judge of a line.

Theory of operation
-------------------
A trace is a UTF-8 text file of JSON objects, one per line.  Line 1 is the
header: ``{"format": "asynclookup-trace", "version": 1, "recorder": ...,
"worker_steps": ...}``.  Every other line is one event: ``seq`` (a number that
strictly increases down the file), ``event`` (its kind, named after the spec's
actions), ``thread`` (the name of the thread that emitted it) and the fields of
its kind.  Keys are bytes written as hex strings; verdicts are ``true``,
``false`` or ``null``.  docs/trace-format.md is the prose version of this module.

``EVENTS`` is the single table of kinds and fields: the parser validates each
line against it and ``asynclookup.trace.schema`` derives asynclookup/trace/trace.schema.json from
it, so the two cannot drift (a test compares them).  ``parse_header`` and
``parse_event`` judge one decoded line: a ``Header`` or ``TraceEvent``, or a
``TraceFormatError`` with the line number and one sentence saying what is
wrong.  Reading a whole file fast (by blocks, the common shapes tested
inline, this module's judgement for everything else) is
``asynclookup.trace.reader``.  Fields that no checker reads (the entries of a
flush and of a worker's batch, a worker's posted results) are validated and
kept as parsed.

This module checks form only (and the pairing of ``*_called``/``*_started``
lines, which ``asynclookup.trace.check`` does); it knows nothing of the protocol's
rules and never imports the oracle.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

from asynclookup.spec import core
from asynclookup.spec.errors import AsyncLookupError

FORMAT = "asynclookup-trace"
VERSION = 1
_HEX = re.compile(r"(?:[0-9a-fA-F]{2})*")
FAILURE_KINDS = ("raised", "short", "long", "non_bool")


class TraceFormatError(AsyncLookupError, ValueError):
    """The input is not a well-formed trace: ``line`` (1-based, 0: the whole file) and why."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}" if line else message)
        self.line = line
        self.message = message


class CheckLimitError(TraceFormatError):
    """The engine's bound on possible states was exceeded: this trace cannot be judged."""


class Field(NamedTuple):
    """One field of an event kind: its name, its type (a key of ``TYPES``), whether required."""

    name: str
    type: str
    required: bool = True


def _opt(name: str, type_: str) -> Field:
    return Field(name, type_, required=False)


ERROR = _opt("error", "error")  # the call raised: its text, or "closed" (see the docs)

# kind -> its fields, besides seq, event and thread.  Scheduler calls first, then
# the worker's tier calls, then the optional internal events.
EVENTS: dict[str, tuple[Field, ...]] = {
    "lookup_called": (Field("key", "key"), Field("request", "str")),
    "lookup_returned": (
        Field("key", "key"), Field("request", "str"), Field("verdict", "verdict"), ERROR,
    ),
    "flush": (ERROR, _opt("submitted", "entries"), _opt("dropped", "entries")),
    "cleanup": (Field("request", "str"), ERROR),
    "mark_miss": (Field("keys", "keys"), ERROR),
    "mark_present": (Field("keys", "keys"), ERROR),
    "drain": (ERROR,),
    "shutdown": (ERROR, _opt("joined", "bool")),
    "tier_call_started": (Field("keys", "keys"), Field("request", "str")),
    "tier_call_finished": (
        Field("keys", "keys"), Field("request", "str"),
        _opt("answers", "answers"), _opt("failure", "failure"),
    ),
    "take_batch": (_opt("entries", "entries"),),
    "post": (_opt("results", "results"),),
    "result_applied": (Field("key", "key"), Field("generation", "int"), Field("verdict", "bool")),
    "result_stale": (Field("key", "key"), Field("generation", "int")),
    "result_orphaned": (Field("key", "key"), Field("generation", "int")),
    "worker_died": (_opt("reason", "str"),),
    "tables": (Field("keys", "keys"), Field("requests", "strs")),
}
# kind -> the spec action it records, by the action's own name; None for an event
# that is not an action of its own (a call's start, or the optional internal events).
# The one event -> action table: the trace checker and the tests' event replay read it.
ACTIONS: dict[str, type[core.Action] | None] = {
    "lookup_called": None,
    "lookup_returned": core.Lookup,
    "flush": core.Flush,
    "cleanup": core.Cleanup,
    "mark_miss": core.MarkMiss,
    "mark_present": core.MarkPresent,
    "drain": core.Drain,
    "shutdown": core.Shutdown,
    "tier_call_started": None,
    "tier_call_finished": core.ProbeGroup,
    "take_batch": core.TakeBatch,
    "post": core.Post,
    "result_applied": None,
    "result_stale": None,
    "result_orphaned": None,
    "worker_died": None,
    "tables": None,
}
SCHEDULER_EVENTS = frozenset(
    {"lookup_called", "lookup_returned", "flush", "cleanup", "mark_miss", "mark_present",
     "drain", "shutdown"}
)
WORKER_EVENTS = frozenset({"tier_call_started", "tier_call_finished", "take_batch", "post"})
INTERNAL_EVENTS = frozenset({"result_applied", "result_stale", "result_orphaned"})
# ``tables`` and ``worker_died`` are internal too, but the checker uses them.

# type name -> what the docs and error messages call it
TYPES: dict[str, str] = {
    "key": "a key: a hex string of even length",
    "keys": "a list of keys (hex strings)",
    "str": "a string",
    "strs": "a list of strings",
    "int": "an integer >= 0",
    "bool": "true or false",
    "verdict": "true, false or null",
    "error": "a string or null",
    "answers": "a list of true/false, one per key",
    "failure": 'an object {"kind": ..., "error"?: string, "items"?: [...]}',
    "entries": "a list of [key, request, generation] triples",
    "results": "a list of [key, generation, verdict] triples",
}


class Header(NamedTuple):
    """Line 1: who recorded the trace and whether it records every worker step."""

    recorder: str
    worker_steps: bool
    meta: dict[str, Any]


class TraceEvent(NamedTuple):
    """One parsed event line; keys in ``data`` are bytes, everything else as in JSON."""

    line: int
    seq: int
    kind: str
    thread: str
    data: dict[str, Any]


# -- values -------------------------------------------------------------------


def _key(value: object) -> bytes | None:
    if type(value) is str and _HEX.fullmatch(value):
        return bytes.fromhex(value)
    return None


def _keys(value: object) -> tuple[bytes, ...] | None:
    if type(value) is not list:
        return None
    out = []
    for item in value:
        key = _key(item)
        if key is None:
            return None
        out.append(key)
    return tuple(out)


def _is_int(value: object) -> bool:
    return type(value) is int and value >= 0


def _triples(value: object, middle: str) -> bool:
    """Whether ``value`` is a list of entries ``[key, request, generation]`` (``middle``
    "entries") or results ``[key, generation, verdict]``."""
    if type(value) is not list:
        return False
    for item in value:
        if type(item) is not list or len(item) != 3 or _key(item[0]) is None:
            return False
        fits = (
            (type(item[1]) is str and _is_int(item[2]))
            if middle == "entries"
            else (_is_int(item[1]) and type(item[2]) is bool)
        )
        if not fits:
            return False
    return True


def _convert(type_: str, value: object) -> tuple[bool, Any]:
    """(ok, the value as the checker uses it)."""
    if type_ == "key":
        key = _key(value)
        return key is not None, key
    if type_ == "keys":
        keys = _keys(value)
        return keys is not None, keys
    if type_ == "str":
        return type(value) is str, value
    if type_ == "strs":
        if type(value) is not list or not all(type(v) is str for v in value):
            return False, None
        return True, frozenset(value)
    if type_ == "int":
        return _is_int(value), value
    if type_ == "bool":
        return type(value) is bool, value
    if type_ == "verdict":
        return value is None or type(value) is bool, value
    if type_ == "error":
        return value is None or type(value) is str, value
    if type_ == "answers":
        ok = type(value) is list and all(type(v) is bool for v in value)
        return ok, tuple(value) if ok else None  # type: ignore[arg-type]
    if type_ == "failure":
        return type(value) is dict, value
    return _triples(value, type_), value  # kept as parsed: the checker does not read them


def _failure(line: int, value: dict[str, Any], n: int) -> dict[str, Any]:
    """Validate a tier-call failure object against the call's key count ``n``."""
    extra = sorted(set(value) - {"kind", "error", "items"})
    if extra:
        raise TraceFormatError(line, f"field 'failure' has an unknown member {extra[0]!r}")
    kind = value.get("kind")
    if kind not in FAILURE_KINDS:
        shown = "missing" if kind is None else repr(kind)
        raise TraceFormatError(
            line, f"field 'failure' needs 'kind', one of {', '.join(FAILURE_KINDS)}; got {shown}"
        )
    error = value.get("error")
    if "error" in value and type(error) is not str:
        raise TraceFormatError(line, "member 'error' of field 'failure' must be a string")
    if "items" not in value:
        return {"kind": kind, "error": error, "items": None}
    items = value["items"]
    if type(items) is not list or not all(type(v) in (bool, str) for v in items):
        raise TraceFormatError(
            line,
            "member 'items' of field 'failure' must be a list of true/false or strings "
            "(a non-bool value's printable form)",
        )
    wrong = {
        "short": len(items) >= n,
        "long": len(items) <= n,
        "non_bool": len(items) != n or all(type(v) is bool for v in items),
    }.get(kind, False)
    if wrong:
        rule = {
            "short": f"fewer than {n}",
            "long": f"more than {n}",
            "non_bool": f"exactly {n}, at least one of them a string",
        }[kind]
        raise TraceFormatError(
            line,
            f"failure of kind {kind!r} for {n} keys needs {rule} items, got {len(items)}",
        )
    return {"kind": kind, "error": error, "items": tuple(items)}


# -- lines --------------------------------------------------------------------


def _decode(line_no: int, raw: bytes, last: bool) -> dict[str, Any]:
    """One line's bytes as a JSON object, or the error saying what is wrong."""
    if last and not raw.endswith(b"\n"):
        try:
            text = raw.decode("utf-8")
            obj = json.loads(text)
        except (UnicodeDecodeError, ValueError):
            raise TraceFormatError(
                line_no, "truncated line: the file ends in the middle of an event"
            ) from None
    else:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TraceFormatError(
                line_no, f"not UTF-8: byte 0x{raw[exc.start]:02x} at column {exc.start + 1}"
            ) from None
        if not text.strip():
            raise TraceFormatError(line_no, "empty line: every line must hold one JSON object")
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise TraceFormatError(line_no, f"not JSON: {exc}") from None
    if type(obj) is not dict:
        raise TraceFormatError(line_no, f"not a JSON object but {_json_type(obj)}")
    return obj


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def parse_header(obj: dict[str, Any]) -> Header:
    """Line 1 as a ``Header``, or a TraceFormatError for line 1."""
    if obj.get("format") != FORMAT:
        if "seq" in obj or "event" in obj:
            raise TraceFormatError(1, f"missing header: line 1 is an event, not {{\"format\": "
                                      f"\"{FORMAT}\", \"version\": {VERSION}, ...}}")
        raise TraceFormatError(1, f"not a trace header: 'format' must be {FORMAT!r}")
    version = obj.get("version")
    if version != VERSION or type(version) is not int:
        raise TraceFormatError(
            1, f"unsupported version {version!r}: this checker reads version {VERSION}"
        )
    recorder, steps, meta = obj.get("recorder"), obj.get("worker_steps"), obj.get("meta", {})
    if type(recorder) is not str or not recorder:
        raise TraceFormatError(1, "header field 'recorder' must be a non-empty string")
    if type(steps) is not bool:
        raise TraceFormatError(1, "header field 'worker_steps' must be true or false")
    if type(meta) is not dict:
        raise TraceFormatError(1, "header field 'meta' must be an object")
    extra = sorted(set(obj) - {"format", "version", "recorder", "worker_steps", "meta"})
    if extra:
        raise TraceFormatError(
            1, f"unknown header field {extra[0]!r} (free-form data goes in 'meta')"
        )
    return Header(recorder, steps, meta)


def read_header(raw: bytes) -> Header:
    """A file's first line (its bytes) as a ``Header``, or a TraceFormatError for line 1."""
    return parse_header(_decode(1, raw, not raw.endswith(b"\n")))


def parse_event(line_no: int, obj: dict[str, Any]) -> TraceEvent:
    """One event object as a ``TraceEvent``, or the TraceFormatError naming the problem."""
    kind = obj.get("event")
    if type(kind) is not str:
        if kind is None:
            raise TraceFormatError(line_no, "missing field 'event'")
        raise TraceFormatError(line_no, "field 'event' must be a string")
    fields = EVENTS.get(kind)
    if fields is None:
        raise TraceFormatError(line_no, f"unknown event {kind!r}")
    seq, thread = obj.get("seq"), obj.get("thread")
    if seq is None:
        raise TraceFormatError(line_no, f"event {kind!r} is missing field 'seq'")
    if not _is_int(seq):
        raise TraceFormatError(line_no, f"field 'seq' must be {TYPES['int']}, got {seq!r}")
    if type(thread) is not str:
        if thread is None:
            raise TraceFormatError(line_no, f"event {kind!r} is missing field 'thread'")
        raise TraceFormatError(line_no, f"field 'thread' must be a string, got {thread!r}")
    data: dict[str, Any] = {}
    for field in fields:
        if field.name not in obj:
            if field.required:
                raise TraceFormatError(line_no, f"event {kind!r} is missing field {field.name!r}")
            continue
        ok, value = _convert(field.type, obj[field.name])
        if not ok:
            raise TraceFormatError(
                line_no,
                f"field {field.name!r} of event {kind!r} must be {TYPES[field.type]}, "
                f"got {_json_type(obj[field.name])}",
            )
        data[field.name] = value
    if len(obj) - 3 > len(data):
        known = {"seq", "event", "thread"} | {f.name for f in fields}
        extra = sorted(set(obj) - known)
        raise TraceFormatError(line_no, f"event {kind!r} has an unknown field {extra[0]!r}")
    if kind == "tier_call_finished":
        _check_answer(line_no, data)
    return TraceEvent(line_no, seq, kind, thread, data)


def _check_answer(line_no: int, data: dict[str, Any]) -> None:
    answers, failure = data.get("answers"), data.get("failure")
    n = len(data["keys"])
    if (answers is None) == (failure is None):
        raise TraceFormatError(
            line_no, "event 'tier_call_finished' needs exactly one of 'answers' and 'failure'"
        )
    if answers is not None and len(answers) != n:
        raise TraceFormatError(
            line_no,
            f"field 'answers' has {len(answers)} values for {n} keys "
            "(a wrong length is a failure of kind 'short' or 'long')",
        )
    if failure is not None:
        data["failure"] = _failure(line_no, failure, n)
