"""The check's inline loop for the commonest lines gives what the general path gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from asynclookup.trace import hot, reader
from tests.trace_corpus import (
    TRACES,
    general_summary,
    hidden,
    mutants,
    outcome_of,
    recorded,
    summary,
)


def _corpus(tmp_path: Path) -> list[Path]:
    long = recorded(tmp_path / "long.jsonl")
    paths = [*sorted(TRACES.glob("*.jsonl")), long, hidden(long, tmp_path / "hidden.jsonl")]
    for i, source in enumerate(list(paths)):
        paths += mutants(source, tmp_path, 16 if source.parent == tmp_path else 8, seed=100 + i)
    return paths


def test_the_inline_loop_and_the_general_path_agree(tmp_path: Path) -> None:
    """On the shipped traces, a long recorded one (worker steps recorded and hidden) and
    mutants of single lines, ``check_lines`` (inline loop) and feeding every event through
    ``TraceChecker.feed`` give the same result, counts, states, finding and error."""
    results = set()
    for path in _corpus(tmp_path):
        got = summary(outcome_of(path))
        assert got == general_summary(path), path.name
        results.add(got[0])
    assert results == {"conforming", "violation", "malformed"}


def test_the_comparison_sees_an_inline_path_that_trusts_a_bad_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An inline path that took a key it had not validated (planted: "zz" in the key cache)
    accepts a trace the general path rejects, and the comparison catches it."""
    source = recorded(tmp_path / "long.jsonl", steps=3)
    text = source.read_text()
    first = text.index('"key":"') + len('"key":"')
    end = text.index('"', first)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(text.replace(text[first - 7:end + 1], '"key":"zz"'))
    assert general_summary(bad)[0] == "malformed"
    planted = {**reader.KEYS, "zz": b"z"}
    monkeypatch.setattr(hot, "KEYS", planted)  # the inline loop's cache only
    assert summary(outcome_of(bad)) != general_summary(bad)
