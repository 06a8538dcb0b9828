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


@pytest.mark.parametrize("shrink_budget", [0.0, 2.0])
def test_a_failure_hypothesis_cannot_replay_is_reported_as_not_reproducible(
    shrink_budget: float,
) -> None:
    """The run raises the first ConformanceError it saw, marked not reproducible, in the
    text and (when shrunk) in the shrink report."""
    _lies_left[0] = 1
    stats = Stats()
    config = FuzzConfig(target=FuzzTarget.parse(f"{__name__}:FirstInstanceLies"))
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
