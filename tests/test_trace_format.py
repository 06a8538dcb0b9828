"""The trace format: malformed input exits 2 naming its line; the schema matches the parser."""

from __future__ import annotations

import copy
import io
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from asynclookup.trace import reader as reader_module
from asynclookup.trace.cli import run
from asynclookup.trace.format import (
    EVENTS,
    Header,
    TraceEvent,
    TraceFormatError,
    parse_event,
)
from asynclookup.trace.reader import _fast_event, read_trace
from asynclookup.trace.schema import build_schema, schema_text

HEADER = (
    '{"format": "asynclookup-trace", "version": 1, "recorder": "test", "worker_steps": false}'
)
CALLED = '{"seq": 0, "event": "lookup_called", "thread": "s", "key": "6b31", "request": "r1"}'
RETURNED = (
    '{"seq": 1, "event": "lookup_returned", "thread": "s", "key": "6b31", "request": "r1", '
    '"verdict": null}'
)
STARTED = (
    '{"seq": 2, "event": "tier_call_started", "thread": "w", "keys": ["6b31"], "request": "r1"}'
)


def finished(answer: str, seq: int = 3) -> str:
    """A tier_call_finished line for the call of ``STARTED`` with ``answer`` spliced in."""
    return (
        f'{{"seq": {seq}, "event": "tier_call_finished", "thread": "w", "keys": ["6b31"], '
        f'"request": "r1", {answer}}}'
    )


def check_bytes(tmp_path: Path, data: bytes) -> tuple[int, str, str]:
    """Run check-trace on ``data``: (exit code, stdout, stderr)."""
    path = tmp_path / "t.jsonl"
    path.write_bytes(data)
    out, err = io.StringIO(), io.StringIO()
    code = run(path, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def lines(*texts: str) -> bytes:
    return "".join(t + "\n" for t in texts).encode()


MALFORMED: dict[str, tuple[bytes, int, str]] = {
    # case -> (file contents, the line named, words the message must hold)
    "truncated line": (lines(HEADER, CALLED) + RETURNED[:40].encode(), 3, "truncated"),
    "not JSON": (lines(HEADER, CALLED, "{seq: 1}"), 3, "not JSON"),
    "not an object": (lines(HEADER, "[1, 2]"), 2, "not a JSON object"),
    "unknown event": (
        lines(HEADER, '{"seq": 0, "event": "lookup", "thread": "s"}'), 2, "unknown event 'lookup'",
    ),
    "missing field": (
        lines(HEADER, '{"seq": 0, "event": "cleanup", "thread": "s"}'), 2,
        "missing field 'request'",
    ),
    "missing seq": (
        lines(HEADER, '{"event": "flush", "thread": "s"}'), 2, "missing field 'seq'",
    ),
    "wrong type": (
        lines(HEADER, CALLED, RETURNED.replace("null", '"yes"')), 3,
        "'verdict' of event 'lookup_returned' must be true, false or null",
    ),
    "key not hex": (
        lines(HEADER, CALLED.replace("6b31", "k1")), 2, "field 'key'",
    ),
    "seq out of order": (
        lines(HEADER, CALLED, RETURNED.replace('"seq": 1', '"seq": 0')), 3,
        "sequence numbers out of order",
    ),
    "unsupported version": (
        lines(HEADER.replace('"version": 1', '"version": 2'), CALLED), 1, "unsupported version 2",
    ),
    "not UTF-8": (lines(HEADER) + b'{"seq": 0, "event": "cleanup", "thread": "\xff"}\n', 2,
                  "not UTF-8"),
    "missing header": (lines(CALLED, RETURNED), 1, "missing header"),
    "empty line": (lines(HEADER, CALLED, "", RETURNED), 3, "empty line"),
    "unknown field": (
        lines(HEADER, '{"seq": 0, "event": "flush", "thread": "s", "verdcit": true}'), 2,
        "unknown field 'verdcit'",
    ),
    "answers of the wrong length": (
        lines(HEADER, STARTED, finished('"answers": [true, false]')), 3, "2 values for 1 keys",
    ),
    "answers and failure both": (
        lines(HEADER, STARTED, finished('"answers": [true], "failure": {"kind": "short"}')), 3,
        "exactly one of",
    ),
    "unknown failure kind": (
        lines(HEADER, STARTED, finished('"failure": {"kind": "timeout"}')), 3, "'kind'",
    ),
    "short failure with too many items": (
        lines(HEADER, STARTED, finished('"failure": {"kind": "short", "items": [true]}')), 3,
        "fewer than 1",
    ),
    "returned without called": (lines(HEADER, RETURNED), 2, "without a matching lookup_called"),
    "finished without started": (
        lines(HEADER, finished('"answers": [true]')), 2, "without a matching tier_call_started",
    ),
    "call inside a lookup": (
        lines(HEADER, CALLED, '{"seq": 1, "event": "flush", "thread": "s"}'), 3,
        "inside the lookup called on line 2",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_input_exits_2_naming_the_line(case: str, tmp_path: Path) -> None:
    """Each kind of malformed input exits 2 with one line naming the line and the problem."""
    data, line, words = MALFORMED[case]
    code, out, err = check_bytes(tmp_path, data)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"line {line}: " in err and words in err, err


def test_empty_file_exits_2(tmp_path: Path) -> None:
    """An empty file is malformed: it has no header."""
    code, _, err = check_bytes(tmp_path, b"")
    assert code == 2 and "empty file" in err


def test_missing_file_exits_2(tmp_path: Path) -> None:
    """A file that cannot be read exits 2 with one line, not a traceback."""
    out, err = io.StringIO(), io.StringIO()
    assert run(tmp_path / "absent.jsonl", stdout=out, stderr=err) == 2
    assert "cannot read" in err.getvalue() and err.getvalue().count("\n") == 1


def test_malformed_json_report_names_the_line(tmp_path: Path) -> None:
    """With --json, malformed input is a JSON report with the line and the message."""
    path = tmp_path / "t.jsonl"
    path.write_bytes(lines(HEADER, "{oops"))
    out = io.StringIO()
    assert run(path, as_json_output=True, stdout=out) == 2
    report = json.loads(out.getvalue())
    assert report["result"] == "malformed" and report["error"]["line"] == 2


def test_last_line_without_newline_is_accepted_when_whole() -> None:
    """A complete last event without its final newline still parses."""
    parsed = list(read_trace(io.BytesIO(lines(HEADER) + CALLED.encode())))
    assert isinstance(parsed[1], TraceEvent) and parsed[1].data["key"] == b"k1"


def test_header_parses_recorder_and_worker_steps() -> None:
    """The header gives the recorder's name and whether worker steps are recorded."""
    (header,) = read_trace(io.BytesIO(lines(HEADER)))
    assert header == Header("test", False, {})


def test_keys_are_decoded_from_hex() -> None:
    """Keys are hex strings in the file and bytes in parsed events."""
    parsed = list(read_trace(io.BytesIO(lines(HEADER, STARTED))))
    assert isinstance(parsed[1], TraceEvent) and parsed[1].data["keys"] == (b"k1",)


def test_failure_items_keep_non_bools_as_strings() -> None:
    """A non-bool item of a failure stays a string beside the bools."""
    text = finished('"failure": {"kind": "non_bool", "items": ["1"]}', seq=3)
    parsed = list(read_trace(io.BytesIO(lines(HEADER, STARTED, text))))
    assert isinstance(parsed[2], TraceEvent)
    assert parsed[2].data["failure"] == {"kind": "non_bool", "error": None, "items": ("1",)}


def test_shipped_schema_is_the_one_built_from_the_table() -> None:
    """asynclookup/trace/trace.schema.json is exactly what build_schema derives from EVENTS."""
    shipped = Path(__file__).parent.parent / "asynclookup" / "trace" / "trace.schema.json"
    assert shipped.read_text(encoding="utf-8") == schema_text()


def test_schema_names_every_event_and_its_required_fields() -> None:
    """Each event kind of the table has a schema whose required list holds its required fields."""
    defs = build_schema()["$defs"]
    for kind, fields in EVENTS.items():
        required = defs[f"event_{kind}"]["required"]
        assert set(required) == {"seq", "event", "thread"} | {f.name for f in fields if f.required}


def test_format_error_carries_line_and_message() -> None:
    """TraceFormatError keeps the line number and the bare message apart."""
    error = TraceFormatError(7, "not JSON")
    assert (error.line, error.message, str(error)) == (7, "not JSON", "line 7: not JSON")


# One valid object of every kind, with its optional fields (what recorders write).
VALID: list[dict[str, object]] = [
    {"event": "lookup_called", "key": "6b31", "request": "r1"},
    {"event": "lookup_returned", "key": "6b31", "request": "r1", "verdict": None},
    {"event": "lookup_returned", "key": "", "request": "r1", "verdict": True, "error": None},
    {"event": "flush", "submitted": [["6b31", "r1", 0]], "dropped": []},
    {"event": "flush"},
    {"event": "cleanup", "request": "r1"},
    {"event": "mark_miss", "keys": ["6b31", "6b32"]},
    {"event": "mark_present", "keys": []},
    {"event": "drain"},
    {"event": "shutdown", "joined": True},
    {"event": "tier_call_started", "keys": ["6b31"], "request": "r1"},
    {"event": "tier_call_finished", "keys": ["6b31"], "request": "r1", "answers": [True]},
    {"event": "take_batch", "entries": [["6b31", "r1", 3]]},
    {"event": "post", "results": [["6b31", 3, False]]},
    {"event": "result_applied", "key": "6b31", "generation": 3, "verdict": True},
    {"event": "result_stale", "key": "6b31", "generation": 3},
    {"event": "result_orphaned", "key": "6b31", "generation": 0},
    {"event": "worker_died"},
    {"event": "tables", "keys": [], "requests": ["r1"]},
]
FULL_PATH_ONLY = {"error", "failure", "reason", "requests"}  # fields the fast path defers
ODD_VALUES: list[object] = [
    None, True, False, 0, -1, 7, 1.5, "", "6b", "6b3", "zz", "r1", [], ["6b31"], [1], [["6b31"]],
    [["6b31", "r1", -1]], [["6b31", 2, True]], [["6b31", "r1", 2]], {}, {"kind": "short"},
]


def _mutants(rng: random.Random) -> Iterator[dict[str, object]]:
    for template in VALID:
        for _ in range(60):
            obj: dict[str, object] = {"seq": 5, "thread": "t", **copy.deepcopy(template)}
            for _ in range(rng.randint(0, 2)):
                name = rng.choice([*obj, "extra", "seq", "thread", "event"])
                roll = rng.random()
                if roll < 0.2:
                    obj.pop(name, None)
                elif roll < 0.3:
                    obj["event"] = rng.choice([v["event"] for v in VALID])
                else:
                    obj[name] = copy.deepcopy(rng.choice(ODD_VALUES))
            yield obj


def test_fast_parser_accepts_only_what_the_full_parser_accepts() -> None:
    """On valid objects and random mutants of every kind, the fast path either defers
    (None) or builds exactly the event ``parse_event`` builds; every valid object but
    those with a field only the full path reads is taken by the fast path (0.2 s)."""
    for template in VALID:
        obj = {"seq": 5, "thread": "t", **template}
        fast = _fast_event(9, copy.deepcopy(obj))
        full = parse_event(9, copy.deepcopy(obj))
        assert fast == full or (fast is None and obj.keys() & FULL_PATH_ONLY), obj
    deferred = 0
    for obj in _mutants(random.Random(5)):
        fast = _fast_event(9, copy.deepcopy(obj))
        try:
            judged: TraceEvent | None = parse_event(9, copy.deepcopy(obj))
        except TraceFormatError:
            judged = None
        assert fast is None or fast == judged, obj
        deferred += fast is None and judged is not None
    assert deferred > 0  # some valid mutants take the full path: both paths are exercised


def test_the_parser_comparison_sees_a_planted_difference(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fast path that accepted a verdict the full parser rejects fails the comparison."""
    obj = {"seq": 5, "thread": "t", "event": "result_applied", "key": "6b", "generation": 1,
           "verdict": None}
    monkeypatch.setitem(reader_module._HOT, "result_applied", _lenient_applied)
    with pytest.raises(TraceFormatError):
        parse_event(9, dict(obj))
    assert _fast_event(9, dict(obj)) is not None  # so the comparison above would catch it


def _lenient_applied(line_no: int, obj: dict[str, Any], new: Any) -> TraceEvent:
    return TraceEvent(line_no, 5, "result_applied", "t", {"key": b"k", "generation": 1,
                                                          "verdict": None})
