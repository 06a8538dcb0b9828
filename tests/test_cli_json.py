"""The finding every command's ``--json`` writes: the same fields, from one type (docs/json.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from asynclookup import cli

TRACES = Path(__file__).parent / "traces"
FINDING = ("property", "title", "kind", "detail")
SEED = {"property": 1, "title": "property 1 (no cleaned-up entry is submitted)",
        "kind": "safety"}


def _violation(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    code = cli.main(list(argv))
    report = json.loads(capsys.readouterr().out)
    assert code == 1, report
    violation = report["violation"]
    assert isinstance(violation, dict)
    return violation


def _same_finding(violation: dict[str, object]) -> None:
    assert all(field in violation for field in FINDING), violation
    assert {k: violation[k] for k in SEED} == SEED
    assert isinstance(violation["detail"], str) and violation["detail"]


def test_model_check_writes_the_finding_and_its_predicate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """model-check --json writes property, title, kind, detail, and the broken predicate."""
    violation = _violation(capsys, "model-check", "--keys", "1", "--requests", "1",
                           "--variant", "flush-no-revalidate", "--json")
    _same_finding(violation)
    assert violation["predicate"] == "flush_submits_only_live_entries"


def test_fuzz_writes_the_finding(capsys: pytest.CaptureFixture[str]) -> None:
    """fuzz --json writes property, title, kind and detail for the seed bug."""
    violation = _violation(capsys, "fuzz", "--target",
                           "tests.mutants_reference:FlushWithoutRevalidation",
                           "--seed", "1", "--examples", "3000", "--json")
    _same_finding(violation)
    assert "predicate" not in violation


def test_check_trace_writes_the_finding(capsys: pytest.CaptureFixture[str]) -> None:
    """check-trace --json writes property, title, kind and detail for the seed bug."""
    violation = _violation(capsys, "check-trace",
                           str(TRACES / "seed_flush_without_revalidation.jsonl"), "--json")
    _same_finding(violation)


def test_a_usage_error_has_a_null_property(
    capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    """A call after shutdown that does not fail closed: property null, kind usage."""
    rows = [{"format": "asynclookup-trace", "version": 1, "recorder": "t", "worker_steps": True},
            {"seq": 1, "event": "shutdown", "thread": "s"},
            {"seq": 2, "event": "flush", "thread": "s"}]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    violation = _violation(capsys, "check-trace", str(path), "--json")
    assert violation["property"] is None and violation["kind"] == "usage"
    assert violation["title"] == "usage error (a call after shutdown)"


def test_property_6_is_a_progress_finding(capsys: pytest.CaptureFixture[str]) -> None:
    """A verdict owed that never came is kind ``progress``, not ``safety``: the one
    property judged after a bounded "eventually" (docs/json.md)."""
    violation = _violation(capsys, "model-check", "--keys", "1", "--requests", "1",
                           "--variant", "worker-never-posts", "--json")
    assert (violation["property"], violation["kind"]) == (6, "progress"), violation
