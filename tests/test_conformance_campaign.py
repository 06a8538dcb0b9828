"""``asynclookup fuzz --workers N``: real worker processes, one report, a killed worker, progress.

Every run here starts real interpreters; the kill tests send SIGKILL to a real
worker process.  Waits are bounded reads of pipes and terminals (``select``),
never sleeps.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from asynclookup.cli import main
from asynclookup.conformance.campaign import (
    Campaign,
    Progress,
    parse_duration,
    parse_workers,
    render,
    run_campaign,
)
from asynclookup.conformance.machine import FuzzConfig

ROOT = Path(__file__).resolve().parent.parent
FLUSH = "tests.mutants_reference:FlushWithoutRevalidation"
CLI = [sys.executable, "-c", "import sys; from asynclookup.cli import main; sys.exit(main())"]


def fuzz(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run ``asynclookup fuzz`` in-process; the exit code, stdout and stderr."""
    code = main(["fuzz", *args])
    out, err = capsys.readouterr()
    return code, out, err


# -- one report over several workers ---------------------------------------------------


def test_two_workers_report_one_shrunk_counterexample_of_a_broken_variant(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--workers 2 on the seed bug exits 1 with one counterexample, shrunk, and one worker
    that found it; the other was stopped or found it too, and is not reported twice."""
    code, out, _ = fuzz(capsys, "--workers", "2", "--target", FLUSH, "--seed", "1",
                        "--examples", "3000", "--json")
    report = json.loads(out)
    assert code == 1 and report["result"] == "violation"
    assert report["violation"]["property"] == 1
    assert report["shrink"]["calls_after"] <= report["shrink"]["calls_before"]
    statuses = sorted(w["status"] for w in report["workers"])
    assert len(statuses) == 2 and "found" in statuses
    assert set(statuses) <= {"found", "stopped"}


def test_the_text_report_of_two_workers_has_one_violation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The text report prints the violation once and a line naming both workers' seeds."""
    code, out, err = fuzz(capsys, "--workers", "2", "--target", FLUSH, "--seed", "5",
                        "--examples", "3000")
    assert code == 1 and out.count("VIOLATION") == 1, err
    assert "2 workers (seeds 5, 6)" in out and "  1. " in out


def test_two_workers_on_the_reference_exit_0_with_the_combined_counts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """On the reference both workers run their share; examples and steps are their sums."""
    code, out, _ = fuzz(capsys, "--workers", "2", "--examples", "40", "--seed", "1", "--json")
    report = json.loads(out)
    workers = report["workers"]
    assert code == 0 and report["result"] == "clean"
    assert [w["status"] for w in workers] == ["done", "done"]
    assert [w["seed"] for w in workers] == [1, 2]
    assert all(w["examples"] > 0 for w in workers)
    assert report["examples"] == sum(w["examples"] for w in workers)
    assert report["steps"] == sum(w["steps"] for w in workers)
    assert report["lost_workers"] == []


def test_a_failure_two_workers_share_in_a_directory_replays_in_one_example(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """--workers 2 --db DIR leaves only failing examples in DIR: the worker that was
    stopped does not save the example it was cut off in (Hypothesis saves any
    BaseException's example but a KeyboardInterrupt's), so a one-example run replays
    the failure rather than the cut-off example."""
    db = str(tmp_path / "db")
    code, out, _ = fuzz(capsys, "--workers", "2", "--target", FLUSH, "--seed", "2",
                        "--examples", "3000", "--db", db, "--json")
    statuses = sorted(w["status"] for w in json.loads(out)["workers"])
    assert code == 1 and statuses == ["found", "stopped"], out
    # one file per example saved, and one listing the keys: the found example alone
    saved = [p for p in (tmp_path / "db").rglob("*") if p.is_file()]
    assert len(saved) == 2, saved
    replay = ["--target", FLUSH, "--examples", "1", "--seed", "3", "--json"]
    assert fuzz(capsys, *replay)[0] == 0  # one fresh example does not find it
    code, out, _ = fuzz(capsys, *replay, "--db", db)
    assert code == 1 and json.loads(out)["violation"]["property"] == 1, out


def test_duration_stops_every_worker(capsys: pytest.CaptureFixture[str]) -> None:
    """--duration without --examples runs until the time is up, then stops both workers."""
    code, out, _ = fuzz(capsys, "--workers", "2", "--duration", "2s", "--seed", "1", "--json")
    report = json.loads(out)
    assert code == 0 and [w["status"] for w in report["workers"]] == ["stopped", "stopped"]
    assert report["seconds"] >= 2.0


def test_duration_stops_a_single_process_run(capsys: pytest.CaptureFixture[str]) -> None:
    """--duration with one worker stops the in-process run and still reports it clean."""
    code, out, _ = fuzz(capsys, "--duration", "1s", "--seed", "1", "--json")
    report = json.loads(out)
    assert code == 0 and report["workers"][0]["status"] == "stopped"


def test_more_workers_than_examples_start_one_per_example() -> None:
    """Two examples over three workers start two workers, each with one example."""
    outcome = run_campaign(Campaign(FuzzConfig(), workers=3, examples=2, seed=4))
    assert [w.seed for w in outcome.workers] == [4, 5]
    assert outcome.error is None and all(w.status == "done" for w in outcome.workers)


# -- a worker killed with SIGKILL --------------------------------------------------------


def test_a_worker_killed_with_sigkill_is_reported_and_the_run_ends() -> None:
    """kill -9 of one worker mid-run: the run ends, names the dead worker and the signal,
    and still counts what both workers did."""
    killed: list[int] = []

    def kill_one(progress: Progress) -> None:
        if not killed and progress.steps > 0 and len(progress.pids) == 2:
            killed.append(progress.pids[1])
            os.kill(progress.pids[1], signal.SIGKILL)

    campaign = Campaign(FuzzConfig(), workers=2, examples=300, seed=1)
    outcome = run_campaign(campaign, progress=kill_one)
    lost = [w for w in outcome.workers if w.status == "lost"]
    assert killed and [w.pid for w in lost] == killed
    assert lost[0].exitcode == -signal.SIGKILL
    assert "was killed by SIGKILL" in outcome.lost[0]
    assert outcome.workers[0].status == "done" and outcome.error is None
    assert outcome.stats.examples == sum(w.examples for w in outcome.workers)


def _read_until(fd: int, pattern: str, deadline: float, seen: list[str]) -> bool:
    """Read the terminal ``fd`` into ``seen`` until ``pattern`` shows or the deadline."""
    while re.search(pattern, "".join(seen)) is None:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return False
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the other end closed: the process is gone
            return False
        if not chunk:
            return False
        seen.append(chunk.decode(errors="replace"))
    return True


def _workers_of(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux /proc)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(c) for c in children]


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_the_cli_shows_progress_on_a_terminal_and_reports_a_killed_worker() -> None:
    """On a terminal the live line counts 2/2 workers; after kill -9 of one it counts 1/2,
    the run ends with exit 3 (incomplete), and stderr names the killed worker."""
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        [*CLI, "fuzz", "--workers", "2", "--examples", "400", "--seed", "3"],
        stdout=subprocess.PIPE, stderr=secondary, stdin=subprocess.DEVNULL, cwd=ROOT,
    )
    os.close(secondary)
    seen: list[str] = []
    try:
        assert _read_until(primary, r"2/2 workers", time.monotonic() + 60, seen), seen[-3:]
        victim = _workers_of(proc.pid)[1]
        os.kill(victim, signal.SIGKILL)
        _read_until(primary, r"killed by SIGKILL", time.monotonic() + 120, seen)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(primary)
    err = "".join(seen)
    assert proc.returncode == 3
    assert "1/2 workers" in err and "examples |" in err and "steps/s" in err
    assert f"pid {victim}) was killed by SIGKILL" in err
    assert b"2 workers (seeds 3, 4)" in out and b"no violation" in out


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_quiet_turns_the_progress_line_off_on_a_terminal() -> None:
    """--quiet on a terminal: stderr stays empty, the report is on stdout."""
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        [*CLI, "fuzz", "--workers", "2", "--examples", "20", "--seed", "1", "--quiet"],
        stdout=subprocess.PIPE, stderr=secondary, stdin=subprocess.DEVNULL, cwd=ROOT,
    )
    os.close(secondary)
    try:
        out, _ = proc.communicate(timeout=120)
        seen: list[str] = []
        _read_until(primary, r"$^never", time.monotonic() + 1, seen)
    finally:
        os.close(primary)
    assert proc.returncode == 0 and b"no violation" in out
    assert "".join(seen) == ""


def test_no_progress_line_when_stderr_is_not_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Captured stderr (not a terminal) gets no progress line, and --json stdout parses."""
    code, out, err = fuzz(capsys, "--workers", "2", "--examples", "10", "--seed", "1", "--json")
    assert code == 0 and err == "" and json.loads(out)["result"] == "clean"


# -- arguments and the line's text --------------------------------------------------------


@pytest.mark.parametrize(("args", "where"), [
    (["--workers", "0"], "--workers"),
    (["--workers", "many"], "--workers"),
    (["--duration", "10q"], "--duration"),
    (["--duration", "0s"], "--duration"),
])
def test_bad_campaign_arguments_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], where: str
) -> None:
    """A bad --workers or --duration exits 2 with one line naming the option."""
    code, out, err = fuzz(capsys, *args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and where in err


def test_durations_read_as_seconds() -> None:
    """90, 90s, 10m, 1h30m and 1.5h are the seconds they say."""
    assert [parse_duration(t) for t in ("90", "90s", "10m", "1h30m", "1.5h")] == [
        90.0, 90.0, 600.0, 5400.0, 5400.0]


def test_auto_workers_is_the_usable_core_count() -> None:
    """--workers auto is one worker per core this process may run on."""
    assert parse_workers("auto") == len(os.sched_getaffinity(0))
    assert parse_workers("3") == 3


def test_the_live_line_reads_like_a_test_runner() -> None:
    """The live line shows the fraction done, examples of the total, steps, rate, workers
    alive and the clock."""
    line = render(Progress(84, 12345, 2, 2, 12.0, total=200))
    assert line == ("[ 42%] 84/200 examples | 12,345 steps | 1,029 steps/s | 2/2 workers | "
                    "0:00:12")
    timed = render(Progress(10, 100, 1, 2, 30.0, duration=600.0))
    assert timed.startswith("[  5%] 10 examples") and timed.endswith("0:00:30 of 0:10:00")


def test_flaky_generation_without_a_finding_exits_3_with_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """If Hypothesis stops a run as flaky with no finding (the oracle's own draws came to
    depend on timing), the command says so in one line and exits 3 (no verdict): never a
    traceback, never a pass."""
    from hypothesis.errors import FlakyStrategyDefinition

    from asynclookup.conformance import campaign_workers

    def flaky_run(*args: object, **kwargs: object) -> None:
        raise FlakyStrategyDefinition("Inconsistent data generation!")

    monkeypatch.setattr(campaign_workers, "run", flaky_run)
    why = (
        "no verdict: Hypothesis stopped the run (FlakyStrategyDefinition): the oracle drew "
        "differently on the same choices, a fault of the oracle, not of the class; please "
        "report it with the command line"
    )
    code, out, err = fuzz(capsys, "--examples", "1", "--seed", "1")
    assert code == 3 and out == ""
    assert err.splitlines() == [f"asynclookup fuzz: {why}"]
    code, out, err = fuzz(capsys, "--examples", "1", "--seed", "1", "--json")
    report = json.loads(out)  # --json still prints its one object
    assert code == 3 and report["result"] == "incomplete" and report["reason"] == why
    assert report["violation"] is None and report["workers"][0]["status"] == "error"


def test_a_lost_worker_reads_as_incomplete_in_the_json(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that lost a worker and found nothing exits 3; its JSON says ``incomplete``
    and why, as the other runs without a judgement do, not ``clean``."""
    from asynclookup.conformance import campaign
    from asynclookup.conformance.campaign_values import Outcome, WorkerReport
    from asynclookup.conformance.machine import Stats

    def one_lost(*args: object, **kwargs: object) -> Outcome:
        workers = [WorkerReport(0, 1, 10, 5, 100, "done"), WorkerReport(1, 2, 11, 3, 60, "lost",
                                                                       -signal.SIGKILL)]
        return Outcome(Stats(), 1.0, workers)

    monkeypatch.setattr(campaign, "run_campaign", one_lost)  # the command imports it late
    code, out, _ = fuzz(capsys, "--workers", "2", "--examples", "8", "--seed", "1", "--json")
    report = json.loads(out)
    assert code == 3 and report["result"] == "incomplete"
    assert "killed by SIGKILL" in report["reason"] and report["violation"] is None
