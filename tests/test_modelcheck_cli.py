"""The ``asynclookup model-check`` command line: output, exit codes, JSON, DOT."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from asynclookup import cli
from asynclookup._cli import Subparsers
from asynclookup.modelcheck import report
from asynclookup.modelcheck.search import Bounds

TINY = ["--keys", "1", "--requests", "1", "--batch-entries", "1", "--queued-batches", "1",
        "--posted-results", "1"]


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["model-check", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_spec_holds_exits_0_and_reports_the_search(capsys: pytest.CaptureFixture[str]) -> None:
    """A correct search exits 0 and prints states, transitions, depth, fixpoint, time, verdict."""
    code, out, _ = _run(capsys, *TINY)
    assert code == 0
    for word in ("states 140", "transitions", "depth 16", "fixpoint reached", " s (",
                 "peak memory", "verdict: every property holds"):
        assert word in out


def test_reductions_without_por_search_the_unreduced_count(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--reductions without por leaves out the partial-order reduction: 154 states, not 140."""
    code, out, _ = _run(capsys, *TINY, "--reductions", "stale,inert,keys,requests,results")
    assert code == 0 and "states 154" in out and "persistent-sets" not in out


def test_json_is_one_machine_readable_object(capsys: pytest.CaptureFixture[str]) -> None:
    """--json prints one JSON object with the sizes, the judgement and the goals."""
    code, out, _ = _run(capsys, *TINY, "--json")
    data = json.loads(out)
    assert code == 0 and data["verdict"] == "holds" and data["fixpoint"] is True
    assert data["states"] == 140 and data["depth"] == 16 and data["violation"] is None
    assert set(data) >= {"transitions", "seconds", "peak_memory_mb", "sometimes", "bounds"}


def test_a_goal_the_bounds_rule_out_is_impossible_not_missed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With one request, joining another request's probe is impossible at these bounds,
    and the report says so (text and JSON) instead of NOT reached."""
    code, out, _ = _run(capsys, *TINY)
    (line,) = [line for line in out.splitlines() if line.startswith("sometimes: ")]
    assert code == 0 and "NOT reached" not in line
    assert "joined_in_flight impossible at these bounds (needs --requests 2)" in line
    code, out, _ = _run(capsys, *TINY, "--json")
    assert json.loads(out)["sometimes_impossible"] == {"joined_in_flight": "needs --requests 2"}


def test_every_other_goal_is_reached_at_the_smallest_bounds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Only the goals of report.GOAL_NEEDS can be ruled out by the bounds: every other
    sometimes goal is reached with one key, one request and room for one of each."""
    code, out, _ = _run(capsys, *TINY, "--json")
    missed = {name for name, hit in json.loads(out)["sometimes"].items() if not hit}
    assert code == 0 and missed == set(report.GOAL_NEEDS)


def test_a_goal_missed_where_the_bounds_allow_it_is_not_reached() -> None:
    """A goal the bounds allow but the search did not reach (a limit stopped it) is
    reported as NOT reached: only the bounds make a goal impossible."""
    assert report._goal_text("joined_in_flight", False, Bounds(keys=1, requests=2)) == (
        "joined_in_flight NOT reached"
    )
    assert report._goal_text("resolved_present", False, Bounds(keys=1, requests=1)) == (
        "resolved_present NOT reached"
    )


def test_seed_variant_exits_1_with_the_seed_trace(capsys: pytest.CaptureFixture[str]) -> None:
    """The seed bug prints lookup(k0, A) -> cleanup(A) -> flush -> worker probes k0, exit 1."""
    code, out, _ = _run(capsys, "--keys", "1", "--requests", "1",
                        "--variant", "flush-no-revalidate")
    assert code == 1
    order = ["property 1 (no cleaned-up entry is submitted), predicate "
             "flush_submits_only_live_entries", "1. lookup(k0, A)",
             "2. cleanup(A)", "3. flush", "worker probes [k0] for A"]
    positions = [out.index(s) for s in order]
    assert positions == sorted(positions)


def test_json_violation_carries_the_trace(capsys: pytest.CaptureFixture[str]) -> None:
    """A violation in --json names the property and lists the steps in protocol words."""
    code, out, _ = _run(capsys, "--keys", "1", "--requests", "1", "--json",
                        "--variant", "flush-no-revalidate")
    violation = json.loads(out)["violation"]
    assert code == 1 and violation["property"] == 1
    assert violation["predicate"] == "flush_submits_only_live_entries"
    assert [s["action"].split(" ")[0] for s in violation["trace"]] == [
        "lookup(k0,", "cleanup(A)", "flush"
    ]


def test_the_report_says_how_states_were_stored(capsys: pytest.CaptureFixture[str]) -> None:
    """By default the search is exhaustive, and the report says so, with bytes a state."""
    code, out, _ = _run(capsys, *TINY)
    assert code == 0 and "storage: exhaustive (18-byte keys)" in out and "bytes a state" in out
    assert "HASH COMPACTION" not in out


def test_hash_compaction_prints_the_missed_state_bound(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--hash-compaction finds the same 140 states here and prints the n^2/2^65 bound."""
    code, out, _ = _run(capsys, *TINY, "--hash-compaction")
    assert code == 0 and "states 140" in out
    assert "HASH COMPACTION (64-bit fingerprints)" in out
    assert f"missed at most {140**2 / 2**65:.1e}" in out


def test_hash_compaction_still_catches_the_seed_bug(capsys: pytest.CaptureFixture[str]) -> None:
    """The seed variant under --hash-compaction: exit 1, property 1, the 3-step trace."""
    code, out, _ = _run(capsys, "--keys", "1", "--requests", "1", "--hash-compaction",
                        "--variant", "flush-no-revalidate")
    assert code == 1 and "HASH COMPACTION" in out and "probability that a state" in out
    assert "property 1 (no cleaned-up entry is submitted)" in out
    assert "shortest counterexample, 3 steps" in out


def test_json_says_how_states_were_stored(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, *TINY, "--json", "--hash-compaction")
    storage = json.loads(out)["storage"]
    assert code == 0 and storage["hash_compaction"] is True
    assert storage["missed_state_bound"] == 140**2 / 2**65 and storage["bytes_per_state"] > 0


def test_state_limit_exits_3_incomplete(capsys: pytest.CaptureFixture[str]) -> None:
    """A search stopped by --max-states exits 3 and says it is incomplete."""
    code, out, _ = _run(capsys, "--keys", "2", "--requests", "1", "--max-states", "500")
    assert code == 3 and "INCOMPLETE" in out and "fixpoint NOT reached" in out


@pytest.mark.parametrize(
    ("args", "word"),
    [
        (["--keys", "0"], "--keys"),
        (["--keys", "5"], "keys"),
        (["--requests", "x"], "--requests"),
        (["--verdicts", "maybe"], "--verdicts"),
        (["--variant", "nope"], "--variant"),
        (["--reductions", "magic"], "--reductions"),
        (["--batch-entries", "3", "--posted-results", "2"], "posted_results"),
        (["--max-seconds", "-1"], "--max-seconds"),
        (["--bogus"], "--bogus"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], word: str
) -> None:
    """Bad input exits 2 with one line on stderr that names what was wrong."""
    code, out, err = _run(capsys, *args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and word in err


def test_missing_subcommand_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """Running with no subcommand exits 2 with one line."""
    assert cli.main([]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_dot_writes_the_reachable_graph(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--dot writes a Graphviz digraph with one node per reachable state."""
    target = tmp_path / "graph.dot"
    code, _, _ = _run(capsys, *TINY, "--dot", str(target))
    text = target.read_text()
    assert code == 0 and text.startswith("digraph")
    assert text.count("[label=\"probes") == 154 and "lookup(k0, A)" in text


def test_dot_refuses_hash_compaction(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A drawing needs every state: --dot with --hash-compaction exits 2 with one line."""
    target = tmp_path / "graph.dot"
    code, out, err = _run(capsys, *TINY, "--hash-compaction", "--dot", str(target))
    assert code == 2 and out == "" and not target.exists()
    assert len(err.strip().splitlines()) == 1 and "--hash-compaction" in err


def test_dot_refuses_a_large_graph(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--dot on bounds too large to draw exits 2 with one line and writes nothing."""
    target = tmp_path / "graph.dot"
    code, _, err = _run(capsys, "--keys", "1", "--requests", "2", "--dot", str(target))
    assert code == 2 and "--dot" in err and not target.exists()


def test_a_registration_function_adds_a_subcommand(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Adding a subcommand takes one registration function in REGISTRATIONS."""

    def register_hello(subparsers: Subparsers) -> None:
        p = subparsers.add_parser("hello")
        p.set_defaults(run=lambda args: 7)

    monkeypatch.setattr(cli, "REGISTRATIONS", [*cli.REGISTRATIONS, register_hello])
    assert cli.main(["hello"]) == 7


def test_module_entry_point_runs_as_a_process() -> None:
    """``python -m asynclookup.cli`` runs the command and returns its exit code, no traceback."""
    done = subprocess.run(
        [sys.executable, "-m", "asynclookup.cli", "model-check", "--keys", "0"],
        capture_output=True, text=True, timeout=60, check=False,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
