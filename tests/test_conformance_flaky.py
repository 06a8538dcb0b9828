"""A run that Hypothesis cannot reproduce still ends in a judgement, never in a Flaky* error.

Threaded runs depend on the worker's timing, so Hypothesis's replay of a failing
example may fail otherwise or not at all (``FlakyFailure``,
``FlakyStrategyDefinition``).  ``machine.run`` then reports the first
violation the run saw and says it was not reproducible.  The planted target
here is deterministic about it: only the first manager it builds lies, so the
failure Hypothesis found does not repeat when it replays the example.  Cost:
well under a second.
"""

from __future__ import annotations

from typing import Any

import pytest

from asynclookup.conformance.counterexample import NOT_REPRODUCIBLE, ConformanceError
from asynclookup.conformance.machine import FuzzConfig, Stats, run
from asynclookup.conformance.targets.target import FuzzTarget
from asynclookup.reference import AsyncLookupManager

_lies_left = [1]  # how many lies the planted target has left to tell, in all


class FirstInstanceLies(AsyncLookupManager):
    """The first lookup that would answer None, in the whole process, answers True; every
    other call conforms."""

    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        verdict = super().lookup(key, req_context)
        if verdict is None and _lies_left[0]:
            _lies_left[0] -= 1
            return True
        return verdict


@pytest.mark.parametrize(("mode", "shrink_budget"),
                         [("stepped", 0.0), ("stepped", 2.0), ("threaded", 2.0)])
def test_a_failure_hypothesis_cannot_replay_is_reported_as_not_reproducible(
    mode: str, shrink_budget: float,
) -> None:
    """The run raises the first ConformanceError it saw, marked not reproducible, in the
    text and (when shrunk) in the shrink report.  Stepped, Hypothesis's replay finds it
    out; threaded, the shrinker's replay of the run's own calls (a threaded run is not
    replayed by Hypothesis)."""
    _lies_left[0] = 1
    stats = Stats()
    config = FuzzConfig(target=FuzzTarget.parse(f"{__name__}:FirstInstanceLies"), mode=mode)
    with pytest.raises(ConformanceError) as caught:
        run(config, examples=20, seed=0, stats=stats, shrink_budget=shrink_budget)
    error = caught.value
    assert error.violation.number == 2, str(error)
    assert stats.first_error is not None
    if shrink_budget:
        assert error.shrink_report is not None and NOT_REPRODUCIBLE in error.shrink_report.line()
        assert error.shrink_report.as_json()["note"] == NOT_REPRODUCIBLE
    else:
        assert not error.reproducible and NOT_REPRODUCIBLE in str(error)


def test_the_cli_report_says_the_run_was_not_reproducible(
    capsys: pytest.CaptureFixture[str], tmp_path: Any,
) -> None:
    """``asynclookup fuzz`` says so in its text (once) and in its JSON (``reproducible``)."""
    import json

    from asynclookup.cli import main

    args = ["fuzz", "--target", f"{__name__}:FirstInstanceLies", "--examples", "20",
            "--seed", "0", "--replay-out", str(tmp_path / "replay.py")]
    _lies_left[0] = 1
    assert main(args) == 1
    assert capsys.readouterr().out.count(NOT_REPRODUCIBLE) == 1
    _lies_left[0] = 1
    assert main([*args, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["reproducible"] is False


_built = [0, 0]  # managers AlwaysLies built in all, and when the first lie was told


class AlwaysLies(AsyncLookupManager):
    """Every lookup that would answer None answers True (property 2 at the first one)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _built[0] += 1
        super().__init__(*args, **kwargs)

    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        verdict = super().lookup(key, req_context)
        if verdict is None and not _built[1]:
            _built[1] = _built[0]
        return True if verdict is None else verdict


def test_a_threaded_run_ends_at_its_first_violation_unreplayed(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Threaded, the first violation ends the run: Hypothesis does not build the IUT
    again to replay the example (which, for a run ending in a bounded wait, paid the
    bound twice), yet it saves the example, so ``--db`` replays it first next time.
    (The oracle's own replays that settle a finding's name build IUTs of their own,
    after the run: left out here, this test counts what Hypothesis builds.)"""
    from hypothesis.database import DirectoryBasedExampleDatabase

    from asynclookup.conformance import machine

    monkeypatch.setattr(machine, "settled_and_shrunk", lambda error, budget: error)
    db = DirectoryBasedExampleDatabase(str(tmp_path / "db"))
    config = FuzzConfig(target=FuzzTarget.parse(f"{__name__}:AlwaysLies"), mode="threaded")
    for attempt in range(2):
        _built[:] = [0, 0]
        with pytest.raises(ConformanceError) as caught:
            run(config, examples=20, seed=0, shrink_budget=0.0, database=db)
        assert caught.value.violation.number == 2, str(caught.value)
        assert caught.value.reproducible
        assert _built[0] == _built[1], _built  # no manager built after the first lie
        if attempt:
            assert _built[1] == 1, _built  # the saved example is the first one run
    assert any(db.fetch(key) for key in _saved_keys(tmp_path / "db"))


def _saved_keys(root: Any) -> list[bytes]:
    """The keys a DirectoryBasedExampleDatabase holds (its directory names, hashed)."""
    from pathlib import Path

    return [bytes.fromhex(p.name) for p in Path(root).iterdir() if p.is_dir()
            and all(c in "0123456789abcdef" for c in p.name)] or [b""]
