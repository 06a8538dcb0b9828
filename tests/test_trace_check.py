"""check-trace on hand-written traces: the shipped bugs, the report, the excerpt, bounded memory."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from asynclookup.observe.engine import Checker
from asynclookup.trace.check import TRIM_EVERY, TraceChecker, check_lines
from asynclookup.trace.cli import run
from asynclookup.trace.format import Header, TraceEvent
from asynclookup.trace.reader import read_trace

TRACES = Path(__file__).parent / "traces"
HEADER = {"format": "asynclookup-trace", "version": 1, "recorder": "t", "worker_steps": False}

# hand-written trace of each bug docs/properties.md says shipped -> the property it breaks
SHIPPED: dict[str, int] = {
    "seed_flush_without_revalidation.jsonl": 1,
    "results_applied_by_key.jsonl": 2,
    "mark_miss_forces_resolved.jsonl": 3,
    "lazy_iterable_kills_worker.jsonl": 7,
    "zip_truncates_short_answers.jsonl": 6,
    "cleanup_deletes_in_flight.jsonl": 8,
}


class Writer:
    """Builds a trace in memory, numbering the events."""

    def __init__(self, worker_steps: bool = False) -> None:
        self.rows: list[dict[str, object]] = [dict(HEADER, worker_steps=worker_steps)]

    def add(self, event: str, thread: str = "s", **fields: object) -> Writer:
        self.rows.append({"seq": len(self.rows) - 1, "event": event, "thread": thread, **fields})
        return self

    def lookup(self, key: str, request: str, verdict: bool | None) -> Writer:
        self.add("lookup_called", key=key, request=request)
        return self.add("lookup_returned", key=key, request=request, verdict=verdict)

    def call(self, keys: list[str], request: str, answers: list[bool]) -> Writer:
        self.add("tier_call_started", "w", keys=keys, request=request)
        return self.add("tier_call_finished", "w", keys=keys, request=request, answers=answers)

    def data(self) -> bytes:
        return "".join(json.dumps(r) + "\n" for r in self.rows).encode()

    def save(self, path: Path) -> Path:
        path.write_bytes(self.data())
        return path


def report(path: Path, **kwargs: object) -> tuple[int, dict[str, object]]:
    out = io.StringIO()
    code = run(path, as_json_output=True, stdout=out, **kwargs)  # type: ignore[arg-type]
    return code, json.loads(out.getvalue())


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_hand_written_shipped_bug_is_rejected_with_its_property(name: str) -> None:
    """Each shipped bug of docs/properties.md, written as a trace, exits 1 naming its property."""
    code, rep = report(TRACES / name)
    assert code == 1
    violation = rep["violation"]
    assert isinstance(violation, dict) and violation["property"] == SHIPPED[name]


def test_hand_written_conforming_trace_exits_0_with_counts() -> None:
    """A conforming hand-written trace exits 0 and counts its events by kind."""
    code, rep = report(TRACES / "conforming_small.jsonl")
    assert code == 0 and rep["result"] == "conforming"
    assert rep["events"] == 10 and rep["counts"] == {
        "lookup_called": 2, "lookup_returned": 2, "flush": 2, "tier_call_started": 1,
        "tier_call_finished": 1, "cleanup": 1, "shutdown": 1,
    }


def test_violation_report_names_line_seq_property_and_explains() -> None:
    """The text report gives the violating line, its seq, the property and a plain sentence."""
    out = io.StringIO()
    assert run(TRACES / "seed_flush_without_revalidation.jsonl", stdout=out) == 1
    text = out.getvalue()
    assert "VIOLATION at line 7 (seq 5)" in text
    assert "property 1 (no cleaned-up entry is submitted)" in text
    assert "re-validate" in text


def test_excerpt_keeps_the_story_of_the_violating_key() -> None:
    """The excerpt of the seed bug keeps the lookup, cleanup, flush and tier call of its key."""
    _, rep = report(TRACES / "seed_flush_without_revalidation.jsonl")
    excerpt = rep["violation"]["excerpt"]  # type: ignore[index]
    assert [row["line"] for row in excerpt["lines"]] == [2, 3, 4, 5, 6, 7]


def test_excerpt_drops_events_of_unrelated_requests(tmp_path: Path) -> None:
    """Events of other keys and requests that the violation does not need are left out."""
    w = Writer().lookup("6b39", "r9", None).lookup("6b31", "r1", None)
    w.add("cleanup", request="r9").add("cleanup", request="r1").add("flush")
    w.call(["6b31"], "r1", [True])
    code, rep = report(w.save(tmp_path / "t.jsonl"))
    assert code == 1
    kept = [row["line"] for row in rep["violation"]["excerpt"]["lines"]]  # type: ignore[index]
    assert kept == [4, 5, 7, 8, 9, 10]


def test_excerpt_file_is_a_trace_that_shows_the_same_violation(tmp_path: Path) -> None:
    """--excerpt writes the excerpt as a trace of its own, rejected with the same property."""
    out = tmp_path / "excerpt.jsonl"
    run(TRACES / "results_applied_by_key.jsonl", excerpt_out=out, stdout=io.StringIO())
    code, rep = report(out)
    assert code == 1 and rep["violation"]["property"] == 2  # type: ignore[index]


def test_efficiency_warn_mode_reports_property_8_and_exits_0() -> None:
    """With --efficiency warn a redundant probe is a warning and the trace conforms."""
    code, rep = report(TRACES / "cleanup_deletes_in_flight.jsonl", efficiency="warn")
    assert code == 0
    warnings = rep["warnings"]
    assert isinstance(warnings, list) and warnings[0]["property"] == 8


def test_call_after_shutdown_that_succeeds_is_a_usage_error(tmp_path: Path) -> None:
    """A scheduler call after shutdown that does not fail closed is reported as usage."""
    w = Writer().add("shutdown").add("flush")
    code, rep = report(w.save(tmp_path / "t.jsonl"))
    assert code == 1 and rep["violation"]["kind"] == "usage"  # type: ignore[index]


def test_call_after_shutdown_failing_closed_conforms(tmp_path: Path) -> None:
    """A call after shutdown recorded with the error "closed" conforms."""
    w = Writer().add("shutdown").add("flush", error="closed")
    assert report(w.save(tmp_path / "t.jsonl"))[0] == 0


def test_recorded_worker_steps_are_checked(tmp_path: Path) -> None:
    """With worker_steps true, a post the spec does not allow is a violation."""
    w = Writer(worker_steps=True).add("post", "w", results=[])
    code, rep = report(w.save(tmp_path / "t.jsonl"))
    assert code == 1 and rep["violation"]["event"] == "post"  # type: ignore[index]


def test_unrecorded_worker_steps_are_inferred(tmp_path: Path) -> None:
    """With worker_steps false, a stray post line is informational and the trace conforms."""
    w = Writer(worker_steps=False).add("post", "w", results=[])
    assert report(w.save(tmp_path / "t.jsonl"))[0] == 0


def test_tables_with_a_leftover_request_break_bookkeeping(tmp_path: Path) -> None:
    """A tables event still indexing a cleaned-up request breaks property 4."""
    w = Writer().lookup("6b31", "r1", None).add("cleanup", request="r1")
    w.add("tables", keys=[], requests=["r1"])
    code, rep = report(w.save(tmp_path / "t.jsonl"))
    assert code == 1 and rep["violation"]["property"] == 4  # type: ignore[index]


def test_tables_with_a_leftover_key_break_no_leak(tmp_path: Path) -> None:
    """A tables event holding state for a key the spec deleted breaks property 5."""
    w = Writer().lookup("6b31", "r1", None).add("cleanup", request="r1")
    w.add("tables", keys=["6b31"], requests=[])
    code, rep = report(w.save(tmp_path / "t.jsonl"))
    assert code == 1 and rep["violation"]["property"] == 5  # type: ignore[index]


def test_faulty_answer_allows_all_misses(tmp_path: Path) -> None:
    """After a raising tier call the key's verdict may be False."""
    w = Writer().lookup("6b31", "r1", None).add("flush")
    w.add("tier_call_started", "w", keys=["6b31"], request="r1")
    w.add("tier_call_finished", "w", keys=["6b31"], request="r1",
          failure={"kind": "raised", "error": "OSError: x"})
    w.lookup("6b32", "r2", None).add("flush").call(["6b32"], "r2", [False]).add("flush")
    w.lookup("6b31", "r1", False)
    assert report(w.save(tmp_path / "t.jsonl"))[0] == 0


def test_faulty_answer_never_allows_a_made_up_true(tmp_path: Path) -> None:
    """After a raising tier call that yielded nothing the key's verdict may not be True."""
    w = Writer().lookup("6b31", "r1", None).add("flush")
    w.add("tier_call_started", "w", keys=["6b31"], request="r1")
    w.add("tier_call_finished", "w", keys=["6b31"], request="r1",
          failure={"kind": "raised", "error": "OSError: x"})
    w.lookup("6b32", "r2", None).add("flush").call(["6b32"], "r2", [False]).add("flush")
    w.lookup("6b31", "r1", True)
    assert report(w.save(tmp_path / "t.jsonl"))[0] == 1


def test_unfinished_calls_at_the_end_are_counted(tmp_path: Path) -> None:
    """A trace that stops inside a lookup conforms and reports the call as unfinished."""
    w = Writer().add("lookup_called", key="6b31", request="r1")
    code, rep = report(w.save(tmp_path / "t.jsonl"))
    assert code == 0 and rep["unfinished_calls"] == 1


def test_engine_history_stays_bounded_on_a_long_trace() -> None:
    """The checker trims the old engine's history, so it does not grow with the trace."""
    checker = TraceChecker(Header("t", False, {}), engine="old")
    line = 2
    for i in range(3 * TRIM_EVERY):
        key = b"%d" % (i % 7)
        for kind, data in (
            ("lookup_called", {"key": key, "request": "r"}),
            ("lookup_returned", {"key": key, "request": "r", "verdict": None}),
            ("cleanup", {"request": "r"}),
        ):
            assert checker.feed(TraceEvent(line, line, kind, "s", data)) is None
            line += 1
    engine = checker.engine
    assert isinstance(engine, Checker)
    assert len(engine.history) < TRIM_EVERY


def test_check_lines_streams_from_a_generator() -> None:
    """check_lines consumes lines one at a time from any iterable."""
    w = Writer().lookup("6b31", "r1", None).add("cleanup", request="r1")
    rows = iter(w.data().splitlines(keepends=True))
    outcome = check_lines(rows)
    assert outcome.result == "conforming" and outcome.events == 3


def test_parsed_hand_traces_are_well_formed() -> None:
    """Every hand-written trace shipped in tests/traces parses completely."""
    for path in TRACES.glob("*.jsonl"):
        with path.open("rb") as f:
            assert sum(1 for _ in read_trace(f)) >= 2


def test_command_line_runs_the_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    """``asynclookup check-trace FILE --json`` checks the file and returns the exit code."""
    from asynclookup.cli import main

    path = TRACES / "mark_miss_forces_resolved.jsonl"
    assert main(["check-trace", str(path), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["violation"]["property"] == 3


def seed_bug(w: Writer) -> Writer:
    """Append the seed bug: a cleaned-up entry is submitted."""
    w.lookup("6b31", "r1", None).add("cleanup", request="r1").add("flush")
    return w.call(["6b31"], "r1", [True])


def test_long_trace_excerpt_starts_at_a_recent_quiescent_point(tmp_path: Path) -> None:
    """After a long conforming stretch, the excerpt starts near the violation and is minimised."""
    w = Writer()
    for i in range(300):
        w.lookup("6b39", f"q{i}", None).add("cleanup", request=f"q{i}")
    _, rep = report(seed_bug(w).save(tmp_path / "t.jsonl"))
    excerpt = rep["violation"]["excerpt"]  # type: ignore[index]
    assert excerpt["complete"] and excerpt["first_line"] > 500
    assert [row["line"] for row in excerpt["lines"]][-2:] == [906, 907]


def test_excerpt_too_long_to_minimise_shows_its_tail(tmp_path: Path) -> None:
    """With no quiescent point in reach, the excerpt is a line range and its last lines."""
    w = Writer()
    for i in range(450):
        w.lookup("6b39", f"q{i}", None)  # never cleaned up: never quiescent
    _, rep = report(seed_bug(w).save(tmp_path / "t.jsonl"))
    excerpt = rep["violation"]["excerpt"]  # type: ignore[index]
    assert not excerpt["complete"] and excerpt["first_line"] == 2
    assert len(excerpt["lines"]) == 20 and excerpt["lines"][-1]["line"] == excerpt["last_line"]


def _posted_one_by_one() -> Writer:
    """A hidden worker that posted the first result of a call, then (after a drain) the
    second: k0's verdict shows while k1's is still None."""
    return (
        Writer().lookup("6b30", "A", None).lookup("6b31", "A", None).add("flush")
        .call(["6b30", "6b31"], "A", [False, True]).add("drain")
        .lookup("6b30", "A", False).lookup("6b31", "A", None).add("drain")
        .lookup("6b31", "A", True).add("cleanup", request="A")
    )


def test_a_worker_that_posts_a_calls_results_one_by_one_conforms(tmp_path: Path) -> None:
    """A trace whose tier call's results show one at a time conforms: the first pass,
    which holds a call's results posted together, finds a violation, and the check
    again from the start with posts in parts is the one reported (docs/trace-format.md,
    "Posts in parts"); a pipe, read once, is checked with parts from the start."""
    data = _posted_one_by_one().data()
    held_together = check_lines(io.BytesIO(data), posts_in_parts=False)
    assert held_together.result == "violation" and held_together.found is not None
    assert held_together.found.number == 6
    assert check_lines(io.BytesIO(data)).result == "conforming"
    assert check_lines(iter(data.splitlines(keepends=True))).result == "conforming"
    code, shown = report(_posted_one_by_one().save(tmp_path / "parts.jsonl"), jobs=2)
    assert code == 0 and shown["result"] == "conforming", shown


def test_a_violation_is_found_again_with_posts_in_parts() -> None:
    """A verdict no post explains is reported from the second pass alike."""
    data = (
        Writer().lookup("6b30", "A", None).add("flush").call(["6b30"], "A", [False])
        .add("drain").lookup("6b30", "A", True).data()
    )
    outcome = check_lines(io.BytesIO(data))
    assert outcome.result == "violation" and outcome.found is not None
    assert outcome.found.number == 2
