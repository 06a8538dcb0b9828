"""The JSON parser is a choice of speed only: orjson (the ``fast`` extra), the stdlib's verdicts."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

from asynclookup.trace import reader
from asynclookup.trace.cli import run
from tests.trace_corpus import TRACES, hidden, mutants, outcome_of, recorded, summary

pytest.importorskip("orjson")  # a dev dependency: CI has it


def _corpus(tmp_path: Path) -> list[Path]:
    long = recorded(tmp_path / "long.jsonl")
    paths = [*sorted(TRACES.glob("*.jsonl")), long, hidden(long, tmp_path / "hidden.jsonl")]
    for i, source in enumerate(list(paths)):
        paths += mutants(source, tmp_path, 12 if source.parent == tmp_path else 6, seed=i)
    return paths


def test_orjson_gives_the_standard_librarys_verdicts(tmp_path: Path) -> None:
    """On the shipped traces, a long recorded one (worker steps recorded and hidden) and
    mutants of each line (odd numbers, bad hex, NaN, lone surrogates, duplicate or extra
    fields, cut lines), both parsers give the same result, counts, finding and error."""
    kinds = set()
    for path in _corpus(tmp_path):
        stdlib, fast = outcome_of(path), outcome_of(path, parser="orjson")
        assert summary(fast) == summary(stdlib), path.name
        kinds.add(stdlib.result)
    assert kinds == {"conforming", "violation", "malformed"}


def test_the_comparison_sees_a_parser_taken_at_its_word(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without re-reading with the stdlib what orjson's objects fail, a seq beyond 64 bits
    (a float to orjson, an integer to JSON) would be malformed: the comparison catches it."""
    source = recorded(tmp_path / "long.jsonl", steps=5)
    lines = source.read_text().splitlines(keepends=True)
    lines[-1] = re.sub(r'"seq":\d+', '"seq":99999999999999999999999', lines[-1])
    path = tmp_path / "big.jsonl"
    path.write_text("".join(lines))
    assert outcome_of(path).result == "conforming"
    assert summary(outcome_of(path, parser="orjson")) == summary(outcome_of(path))
    init = reader.Blocks.__init__

    def taken_at_its_word(self: reader.Blocks, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.exact = True  # the parser's objects judged as they are

    monkeypatch.setattr(reader.Blocks, "__init__", taken_at_its_word)
    assert outcome_of(path, parser="orjson").result == "malformed"


def test_a_missing_orjson_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--parser orjson without the extra installed exits 2 with one line saying so."""
    monkeypatch.setitem(sys.modules, "orjson", None)
    code = run(TRACES / "conforming_small.jsonl", parser="orjson")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "pip install 'asynclookup[fast]'" in err[0]
