"""check-trace in chunks (--jobs, --chunk, --merge) gives the one-pass judgement; its stderr lines.

Also the end line (events/s, peak memory), the progress line and bad-input messages.
"""

from __future__ import annotations

import io
import json
import os
import pty
import select
from pathlib import Path

import pytest

from asynclookup.cli import main
from asynclookup.trace.check import ENGINES, Outcome, check_lines
from asynclookup.trace.cli import run, run_chunk
from asynclookup.trace.split import candidates, parallel, plan

TRACES = Path(__file__).parent / "traces"
SHIPPED = sorted(p.name for p in TRACES.glob("*.jsonl") if p.name != "conforming_small.jsonl")
HEADER = {"format": "asynclookup-trace", "version": 1, "recorder": "t", "worker_steps": False}
IDLE = {"event": "tables", "thread": "s", "keys": [], "requests": []}


def segment(key: str) -> list[dict[str, object]]:
    """A scheduler step that ends idle (every request cleaned up, its result seen applied),
    then the recorded quiescent point."""
    return [
        {"event": "lookup_called", "thread": "s", "key": key, "request": "a"},
        {"event": "lookup_returned", "thread": "s", "key": key, "request": "a", "verdict": None},
        {"event": "flush", "thread": "s"},
        {"event": "tier_call_started", "thread": "w", "keys": [key], "request": "a"},
        {"event": "tier_call_finished", "thread": "w", "keys": [key], "request": "a",
         "answers": [True]},
        {"event": "flush", "thread": "s"},
        {"event": "lookup_called", "thread": "s", "key": key, "request": "a"},
        {"event": "lookup_returned", "thread": "s", "key": key, "request": "a", "verdict": True},
        {"event": "cleanup", "thread": "s", "request": "a"},
        dict(IDLE),
    ]


def busy_marker(key: str) -> list[dict[str, object]]:
    """A recorded "nothing held" point that is not quiescent: the results of a probe that
    mark_present superseded may still be on their way."""
    return [
        {"event": "lookup_called", "thread": "s", "key": key, "request": "b"},
        {"event": "lookup_returned", "thread": "s", "key": key, "request": "b", "verdict": None},
        {"event": "flush", "thread": "s"},
        {"event": "cleanup", "thread": "s", "request": "b"},
        {"event": "mark_present", "thread": "s", "keys": [key]},
        dict(IDLE),
        {"event": "tier_call_started", "thread": "w", "keys": [key], "request": "b"},
        {"event": "tier_call_finished", "thread": "w", "keys": [key], "request": "b",
         "answers": [False]},
    ]


def write(path: Path, *parts: list[dict[str, object]]) -> Path:
    rows = [row for part in parts for row in part]
    text = json.dumps(HEADER) + "\n" + "".join(
        json.dumps({"seq": seq, **row}) + "\n" for seq, row in enumerate(rows)
    )
    path.write_text(text, encoding="utf-8")
    return path


def events_of(name: str) -> list[dict[str, object]]:
    lines = (TRACES / name).read_text(encoding="utf-8").splitlines()[1:]
    return [{k: v for k, v in json.loads(t).items() if k != "seq"} for t in lines]


def steps(n: int, busy_every: int = 0) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for i in range(n):
        out += segment(f"{i % 7:02x}")
        if busy_every and i % busy_every == 0:
            out += busy_marker("ff")
    return out


def judgement(outcome: Outcome) -> tuple[object, ...]:
    """What must not depend on the chunks: result, violation, counts, warnings, anchors."""
    found = outcome.found
    return (
        outcome.result, outcome.events, outcome.counts, outcome.unfinished, outcome.anchors,
        [(w.number, w.detail, w.event) for w in outcome.warnings],
        None if found is None else (found.number, found.detail, found.event),
        None if outcome.error is None else str(outcome.error),
    )


def one_pass(path: Path) -> Outcome:
    with path.open("rb") as f:
        return check_lines(f)


def report(path: Path, **kwargs: object) -> tuple[int, dict[str, object]]:
    out = io.StringIO()
    code = run(path, as_json_output=True, stdout=out, **kwargs)  # type: ignore[arg-type]
    rep = json.loads(out.getvalue())
    rep.pop("seconds")
    return code, rep


@pytest.mark.parametrize("name", SHIPPED)
def test_jobs_2_gives_the_one_pass_judgement_on_a_shipped_bug(name: str, tmp_path: Path) -> None:
    """A shipped bug after conforming steps with recorded quiescent points (some not
    quiescent): --jobs 2 finds the same violation (line, property, detail), counts and
    anchors as one pass, and the trace was really cut (about 0.2 s each)."""
    path = write(tmp_path / "t.jsonl", steps(30, busy_every=9), events_of(name), steps(5))
    assert len(plan(path, 2)) == 1
    one, (two, chunks) = one_pass(path), parallel(path, 2)
    assert judgement(one) == judgement(two) and chunks == 2
    assert one.result == "violation" and one.found is not None
    assert one.found.event.line > plan(path, 2)[0].line  # found in the second chunk


def test_a_bug_in_the_first_chunk_wins_over_one_in_the_second(tmp_path: Path) -> None:
    """With a violation in each chunk, the merged report names the first, as one pass does."""
    first, second = events_of(SHIPPED[0]), events_of(SHIPPED[1])
    path = write(tmp_path / "t.jsonl", steps(5), first, steps(60), second)
    assert len(plan(path, 2)) == 1
    one, (two, _) = one_pass(path), parallel(path, 2)
    assert judgement(one) == judgement(two)
    assert one.found is not None and one.found.event.line < 100


def test_a_marker_that_is_not_quiescent_is_checked_through(tmp_path: Path) -> None:
    """A cut at a recorded point that is not quiescent is not trusted: the chunk before
    checks on to the next quiescent one, and the conforming trace still conforms (a chunk
    started there alone would have rejected the tier call that follows)."""
    path = write(tmp_path / "t.jsonl", steps(30), busy_marker("ee"), steps(30))
    busy_line = 2 + 30 * 10 + 5
    assert busy_line in [c.line for c in candidates(path)]
    cuts = [c for c in candidates(path) if c.line == busy_line]
    assert cuts and run_chunk_alone(path, cuts[0].line) == 1
    for jobs in (2, 3, 8):
        assert judgement(parallel(path, jobs)[0]) == judgement(one_pass(path))
    assert one_pass(path).result == "conforming"


def run_chunk_alone(path: Path, after: int) -> int:
    """Check only what follows line ``after`` from a fresh start: the exit code."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    alone = path.with_name("alone.jsonl")
    alone.write_text(lines[0] + "".join(lines[after:]), encoding="utf-8")
    return run(alone, stdout=io.StringIO(), stderr=io.StringIO())


def test_chunks_run_one_by_one_merge_to_the_one_pass_report(tmp_path: Path) -> None:
    """--chunk I/N for each I (as a job runner would run them) and --merge give the one-pass
    report (excerpt included) and exit code (about 1 s)."""
    path = write(tmp_path / "t.jsonl", steps(20, busy_every=7), events_of(SHIPPED[2]))
    parts = []
    for i in range(4):
        out = io.StringIO()
        assert run_chunk(path, i, 4, stdout=out) == 0
        parts.append(tmp_path / f"part-{i}.json")
        parts[-1].write_text(out.getvalue(), encoding="utf-8")
    assert len(plan(path, 4)) == 3
    assert report(path, merge_parts=parts) == report(path)


def test_merge_refuses_parts_of_another_file_or_missing_ones(tmp_path: Path) -> None:
    """Merging a part of another file, without a needed chunk, or a part that cannot be read
    or is not one, exits 2 with one line naming the problem."""
    path = write(tmp_path / "t.jsonl", steps(40))
    other = write(tmp_path / "o.jsonl", steps(41))
    parts = []
    for i, source in enumerate((path, other)):
        out = io.StringIO()
        run_chunk(source, i, 2, stdout=out)
        parts.append(tmp_path / f"p{i}.json")
        parts[-1].write_text(out.getvalue(), encoding="utf-8")
    cases = ((parts, "bytes"), (parts[1:2], "bytes"), (parts[:1], "missing"),
             ([tmp_path / "absent.json"], "absent.json"), ([path], "not JSON"))
    for given, words in cases:
        err = io.StringIO()
        assert run(path, merge_parts=given, stdout=io.StringIO(), stderr=err) == 2
        assert err.getvalue().count("\n") == 1 and words in err.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    "argv", [["--jobs", "0"], ["--jobs", "two"], ["--chunk", "2/2"], ["--chunk", "1"],
             ["--chunk", "a/3"]],
)
def test_bad_jobs_or_chunk_exits_2_with_one_line(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad --jobs or --chunk value exits 2 with one line naming the option and the value."""
    path = write(tmp_path / "t.jsonl", steps(2))
    assert main(["check-trace", str(path), *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and argv[0] in captured.err and argv[1] in captured.err


def test_missing_file_with_jobs_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trace that cannot be read exits 2 with one line naming it, with --jobs too."""
    assert main(["check-trace", str(tmp_path / "absent.jsonl"), "--jobs", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "absent.jsonl" in err


def test_the_end_line_gives_events_per_second_and_peak_memory_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Unless --quiet, stderr gets one line with events/s and peak memory; stdout keeps the
    JSON report alone."""
    path = write(tmp_path / "t.jsonl", steps(3))
    assert main(["check-trace", str(path), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["events"] == 30
    assert captured.err.count("\n") == 1
    assert "events/s" in captured.err and "peak memory" in captured.err
    assert main(["check-trace", str(path), "--json", "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_a_terminal_gets_a_progress_line_that_is_cleared(tmp_path: Path) -> None:
    """On a real terminal (a pty), stderr shows the progress line while checking, then
    clears it; with quiet, nothing (about 0.5 s)."""
    path = write(tmp_path / "t.jsonl", steps(1000))  # 10,000 events: one progress point
    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as tty:
        assert run(path, stdout=io.StringIO(), stderr=tty, quiet=False,
                   progress_seconds=0.0) == 0
        shown = drain(master)
        assert run(path, stdout=io.StringIO(), stderr=tty, quiet=True) == 0
        assert drain(master) == ""
    os.close(master)
    assert "\rcheck-trace: 8,192 events read" in shown and "\x1b[K" in shown
    assert shown.rstrip().endswith("MiB")  # the end line follows the cleared progress line


def drain(fd: int) -> str:
    """Everything written to the pty so far (what is there now; no waiting for more)."""
    got = b""
    while select.select([fd], [], [], 0)[0]:
        got += os.read(fd, 65536)
    return got.decode()


def test_both_engines_restart_at_the_same_quiescent_points(tmp_path: Path) -> None:
    """The old engine and the fast one find the same quiescent points (so the same cuts
    hold) and the same judgement, on steps with recorded idle points, some not quiescent."""
    path = write(tmp_path / "t.jsonl", steps(12, busy_every=4), events_of(SHIPPED[3]))
    outcomes = []
    for engine in ENGINES:
        with path.open("rb") as f:
            outcomes.append(check_lines(f, engine=engine))
    fast, old = outcomes
    assert old.restarts == fast.restarts > 10
    assert judgement(old) == judgement(fast) and fast.result == "violation"
