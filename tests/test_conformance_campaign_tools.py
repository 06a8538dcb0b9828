"""pytest-xdist and HypoFuzz, run for real on the oracle's test cases (bounded).

``tests/campaign_targets.py`` holds the reference's machine and the seed bug's
(``FlushWithoutRevalidation``, property 1) as Hypothesis ``TestCase`` classes.

- ``pytest -n 2`` spreads the reference's and ``MarkMissOnPending``'s (property
  3; found within 25 examples on each of 20 seeds tried, so 60 examples do not
  flake) over two xdist workers sharing one directory database; the reference
  passes, the bug fails naming property 3, and a plain
  ``asynclookup fuzz --db DIR`` then replays the failure in its first example.
  (No ``--hypothesis-seed``: with it, Hypothesis saves nothing.)
- ``hypothesis fuzz`` (HypoFuzz) fuzzes the seed bug's test case with a
  ``RedisExampleDatabase`` on a loopback redis-server of the test's own.
  HypoFuzz has no time or example limit of its own ("runs forever unless
  stopped"), so the test is the bound: it listens on the database's change
  channel, stops HypoFuzz once the failure is saved (or fails after
  ``HYPOFUZZ_DEADLINE`` seconds), and a plain ``asynclookup fuzz --db redis://``
  run replays that failure in its first example.

HypoFuzz 25.11.1, the newest release, crashes while shrinking under Hypothesis
6.157.1 and newer, so it lives in a venv of its own with Hypothesis pinned
(``make hypofuzz-env``: ``.venv-hypofuzz``, the ``hypofuzz`` extra of
pyproject.toml).  Locally, without that venv, the test is skipped with one line;
under ``CI=true`` it fails, since CI must run it.

Cost: about 10 s for the xdist test and 10-20 s for the HypoFuzz test here.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from asynclookup.cli import main
from tests.campaign_targets import QUICK_BUG, SEEDED_BUG
from tests.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent
TARGETS = "tests/campaign_targets.py"
HYPOFUZZ = ROOT / ".venv-hypofuzz" / "bin" / "hypothesis"
HYPOFUZZ_DEADLINE = 60.0  # seconds for HypoFuzz to find, shrink and save the seed bug
CHANNEL = "hypothesis-changes"  # RedisExampleDatabase's default change channel


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("ASYNCLOOKUP_FUZZ_DB", None)
    env.update(extra)
    return env


def _replays_at_once(
    capsys: pytest.CaptureFixture[str], db: str, target: str,
) -> dict[str, object]:
    """``asynclookup fuzz --db`` on ``target`` with one example: the JSON report.

    One generated example on this seed does not find the bug (checked first,
    without the database), so a violation means the database's failure was
    replayed.
    """
    args = ["fuzz", "--target", target, "--examples", "1", "--seed", "3", "--json"]
    assert main(args) == 0, "one fresh example already finds the bug: pick another seed"
    capsys.readouterr()
    code = main([*args, "--db", db])
    report: dict[str, object] = json.loads(capsys.readouterr().out)
    assert code == 1 and report["result"] == "violation", report
    return report


def test_pytest_xdist_runs_the_test_cases_on_two_workers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """pytest -n 2: the reference passes, the planted bug fails with property 3 on the
    other worker, and the failure it saved replays in ``asynclookup fuzz --db DIR``."""
    db = tmp_path / "db"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "-v", "-rA",
         "-o", "addopts=", f"{TARGETS}::TestReference", f"{TARGETS}::TestMarkMissOnPending"],
        cwd=ROOT, env=_env(ASYNCLOOKUP_FUZZ_DB=str(db), ASYNCLOOKUP_FUZZ_EXAMPLES="60"),
        capture_output=True, text=True, timeout=120,
    )
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "created: 2/2 workers" in out, out
    assert f"PASSED {TARGETS}::TestReference::runTest" in out, out
    assert f"FAILED {TARGETS}::TestMarkMissOnPending::runTest" in out, out
    assert "property 3 (" in out, out
    workers = {line.split("]")[0] for line in out.splitlines() if line.startswith("[gw")}
    assert workers == {"[gw0", "[gw1"}, out
    report = _replays_at_once(capsys, str(db), QUICK_BUG)
    assert report["violation"]["property"] == 3  # type: ignore[index]


def _hypofuzz_or_skip() -> Path:
    if HYPOFUZZ.exists():
        return HYPOFUZZ
    reason = f"{HYPOFUZZ.relative_to(ROOT)} is missing (make hypofuzz-env)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}: CI=true requires the HypoFuzz test to run", pytrace=False)
    pytest.skip(f"HypoFuzz test skipped: {reason}")


def _wait_for_failure(pubsub: object, deadline: float) -> bytes | None:
    """The key of the first failure HypoFuzz saves in Hypothesis's layout, or None.

    HypoFuzz saves its own records under keys holding ``hypofuzz``; a failure
    it saves where Hypothesis's reuse phase reads it: under ``<test key>`` once
    shrunk, ``<test key>.secondary`` as found.  The test case turns shrinking
    off (as ``asynclookup fuzz`` does), so it is the second.
    """
    while (left := deadline - time.monotonic()) > 0:
        message = pubsub.get_message(timeout=left)  # type: ignore[attr-defined]
        if message is None or message.get("type") != "message":
            continue
        event, (key, _value) = json.loads(message["data"])
        raw = base64.b64decode(key)
        if event == "save" and b"hypofuzz" not in raw:
            return raw
    return None


def test_hypofuzz_finds_the_seed_bug_and_a_plain_run_replays_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fresh_redis_server: RedisServer,
) -> None:
    """A bounded HypoFuzz run finds the seed bug and leaves it in a shared
    RedisExampleDatabase; ``asynclookup fuzz --db redis://`` fails on it at once."""
    import redis

    hypofuzz = _hypofuzz_or_skip()
    url = fresh_redis_server.url
    client = redis.Redis.from_url(url)
    pubsub = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call, unused-ignore]
    pubsub.subscribe(CHANNEL)
    log = (tmp_path / "hypofuzz.log").open("w")
    fuzzer = subprocess.Popen(
        [str(hypofuzz), "fuzz", "-n", "1", "--no-dashboard", "--",
         "-p", "no:cacheprovider", "-o", "addopts=",
         f"{TARGETS}::TestFlushWithoutRevalidation"],
        cwd=ROOT, env=_env(ASYNCLOOKUP_FUZZ_DB=url), stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,  # HypoFuzz forks its workers: stop the whole group
    )
    try:
        key = _wait_for_failure(pubsub, time.monotonic() + HYPOFUZZ_DEADLINE)
    finally:
        if fuzzer.poll() is None:
            os.killpg(fuzzer.pid, signal.SIGTERM)
        try:
            fuzzer.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(fuzzer.pid, signal.SIGKILL)
            fuzzer.wait(timeout=20)
        log.close()
        pubsub.close()
        client.close()
    tail = "\n".join((tmp_path / "hypofuzz.log").read_text().splitlines()[-30:])
    assert key is not None, f"HypoFuzz saved no failure in {HYPOFUZZ_DEADLINE:.0f} s:\n{tail}"
    report = _replays_at_once(capsys, url, SEEDED_BUG)
    # HypoFuzz's example is its own: on some the seed bug first shows as a held-up post
    # (property 6) rather than the stale entry's submission (1), as on one seed in
    # docs/benchmarks.md's kill table; either way it is the saved failure, replayed
    assert report["violation"]["property"] in (1, 6)  # type: ignore[index]
    assert report["examples"] in (1, 2), report  # the replayed example (and the fresh one)
