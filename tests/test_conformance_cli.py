"""``asynclookup fuzz``: exit codes, output, replay files and the shared example database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from asynclookup.cli import main
from tests.redis_server import RedisServer

FLUSH = "tests.mutants_reference:FlushWithoutRevalidation"
DRAIN = "tests.mutants_reference:DrainWithoutGenerationCheck"
SIZED = ["--impl", "tests.shapes.sized:SizedPool"]  # its constructor takes n_lookup_threads
OWN = "tests.shapes.own_names:OwnNames"


def fuzz(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run ``asynclookup fuzz`` in-process; the exit code, stdout and stderr."""
    code = main(["fuzz", *args])
    out, err = capsys.readouterr()
    return code, out, err


def shared_failure(capsys: pytest.CaptureFixture[str], db: str) -> tuple[int, int]:
    """Examples run by a first run that finds a failure and by a second run, other seed,
    sharing the database ``db``; both must report the violation."""
    counts = []
    for seed in ("11", "99"):
        code, out, _ = fuzz(capsys, "--target", DRAIN, "--seed", seed, "--examples", "3000",
                            "--db", db, "--json")
        assert code == 1
        counts.append(json.loads(out)["examples"])
    return counts[0], counts[1]


def test_a_clean_run_exits_0_and_prints_the_rate(capsys: pytest.CaptureFixture[str]) -> None:
    """No violation: exit 0, and the steps per second are printed."""
    code, out, _ = fuzz(capsys, "--examples", "10", "--seed", "1")
    assert code == 0 and "steps/s" in out and "no violation" in out


def test_a_violation_exits_1_with_numbered_calls(capsys: pytest.CaptureFixture[str]) -> None:
    """A violation: exit 1, the property and the counterexample as numbered calls."""
    code, out, _ = fuzz(capsys, "--target", FLUSH, "--seed", "1", "--examples", "3000")
    assert code == 1 and "property 1 (no cleaned-up entry is submitted)" in out
    assert "  1. lookup(" in out


def test_a_shrink_budget_of_0_reports_the_sequence_as_found(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--shrink-budget 0: the violation as found, longer than the shrunk one, and no
    shrink line; the default budget shrinks it."""
    found: dict[str, int] = {}
    for budget in ("0", "20"):
        code, out, _ = fuzz(capsys, "--target", FLUSH, "--seed", "1", "--examples", "3000",
                            "--shrink-budget", budget, "--json")
        report = json.loads(out)
        assert code == 1 and report["violation"]["property"] == 1
        assert (report["shrink"] is None) == (budget == "0"), report["shrink"]
        found[budget] = len(report["violation"]["calls"])
    assert found["0"] > found["20"], found


def test_json_keeps_stdout_one_object(capsys: pytest.CaptureFixture[str]) -> None:
    """--json prints exactly one JSON object with the result and the violated property."""
    code, out, _ = fuzz(capsys, "--target", FLUSH, "--seed", "1", "--examples", "3000", "--json")
    report = json.loads(out)
    assert code == 1 and report["result"] == "violation"
    assert report["violation"]["property"] == 1


def test_replay_out_writes_a_pytest_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--replay-out writes a test module that replays the counterexample."""
    path = tmp_path / "test_kill.py"
    fuzz(capsys, "--target", FLUSH, "--seed", "1", "--examples", "3000", "--replay-out", str(path))
    assert "def test_replay() -> None:" in path.read_text()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--examples", "0"], "--examples"),
        (["--mode", "parallel"], "--mode"),
        (["--faults", "some"], "--faults"),
        (["--target", "no.such.module:X"], "--target"),
        (["--replay-out", "/no/such/dir/x.py"], "--replay-out"),
        (["--db", "redis://127.0.0.1:1/0"], "--db"),
        (["--tier", "redis", "--redis-url", "redis://127.0.0.1:1/0"], "--tier redis"),
        # the options of --impl (docs/oracle.md, "Shapes near vLLM's")
        (["--impl-arg", "n=1"], "--impl-arg is an option of --impl"),
        (["--drain-before-lookup"], "--drain-before-lookup is an option of --impl"),
        ([*SIZED, "--impl-arg", "n_lookup_threads=x"],
         "x is not a Python literal (a string is quoted: n_lookup_threads='x')"),
        ([*SIZED, "--impl-arg", "n_lookup_threads"], "'n_lookup_threads' is not NAME=VALUE"),
        ([*SIZED, "--impl-arg", "tier_type='x'"], "'tier_type' is not a keyword argument"),
        ([*SIZED, "--impl-arg", "n_lookup_threads=1", "--impl-arg", "n_lookup_threads=2"],
         "--impl-arg: n_lookup_threads given twice"),
        ([*SIZED, "--impl-arg", "n_lookup_threads=float('nan')"], "is not a Python literal"),
        (SIZED, "give --impl-arg n_lookup_threads=VALUE"),
        ([*SIZED, "--impl-arg", "n_lookup_threads=0"], "SizedPool('oracle', n_lookup_threads=0) "
         "raised ValueError: n_lookup_threads must be a positive int, not 0"),
        (["--impl", "tests.shapes.no_cleanup:NoCleanup"],
         "has no method cleanup (or --method cleanup=none if it has no such call)"),
        (["--impl", "tests.shapes.no_cleanup:NoCleanup", "--method", "cleanup=none",
          "--cleanup-arg", "context"], "--cleanup-arg: the class has no cleanup"),
        (["--impl", OWN, "--method", "flush=none"], "flush is required, it cannot be none"),
        (["--shrink-budget", "soon"], "--shrink-budget: 'soon' is not a number of seconds"),
        (["--shrink-budget", "-1"], "--shrink-budget: '-1': want a finite number of seconds"),
        (["--shrink-budget", "nan"], "--shrink-budget: 'nan': want a finite number of seconds"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    """Bad input exits 2 with one line on stderr naming the argument, no traceback."""
    code, out, err = fuzz(capsys, *args)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and says in err


def fuzz_in(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``asynclookup fuzz`` in a new process whose working directory is ``where``
    (Hypothesis fixes its storage directory from the working directory at import)."""
    command = [sys.executable, "-c", "from asynclookup.cli import main; raise SystemExit(main())"]
    return subprocess.run([*command, "fuzz", *args], cwd=where, capture_output=True,
                          text=True, timeout=300)


def test_a_run_writes_nothing_in_the_working_directory_but_the_cache(tmp_path: Path) -> None:
    """Without --db, --replay-out or --regression-out, a run leaves at most Hypothesis's
    cache (.hypothesis/) in its working directory, as fuzz --help says."""
    done = fuzz_in(tmp_path, "--examples", "5", "--seed", "1")
    assert done.returncode == 0, done.stderr
    assert set(os.listdir(tmp_path)) <= {".hypothesis"}
    assert not (tmp_path / ".hypothesis" / "examples").exists()


def test_a_run_from_a_directory_it_cannot_write_works(tmp_path: Path) -> None:
    """From a read-only directory where .hypothesis/ cannot be made (a file has its name,
    so even root cannot), the run is clean, says nothing on stderr and writes nothing."""
    (tmp_path / ".hypothesis").write_text("not a directory\n")
    tmp_path.chmod(0o555)
    try:
        done = fuzz_in(tmp_path, "--examples", "5", "--seed", "1")
    finally:
        tmp_path.chmod(0o755)
    assert done.returncode == 0 and "no violation" in done.stdout
    assert done.stderr == ""
    assert os.listdir(tmp_path) == [".hypothesis"] and (tmp_path / ".hypothesis").is_file()


def test_a_directory_database_shares_a_counterexample(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A second run with the same --db directory fails at once on the saved example
    (68 examples to find it, then 2: the saved one and Hypothesis's final replay)."""
    assert shared_failure(capsys, str(tmp_path / "examples")) == (68, 2)


@pytest.mark.redis
def test_a_redis_database_shares_a_counterexample(
    capsys: pytest.CaptureFixture[str], redis_server: RedisServer
) -> None:
    """Two runs sharing a --db on a loopback redis-server: the second replays the failure."""
    assert shared_failure(capsys, redis_server.url) == (68, 2)
