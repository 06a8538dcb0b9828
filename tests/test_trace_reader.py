"""The JSON parser is a choice of speed only: orjson and msgspec (the ``fast`` extra) give the
standard library's verdicts."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

import asynclookup.trace as trace_package
from asynclookup.trace import hot, reader
from asynclookup.trace.cli import run
from asynclookup.trace.format import TraceEvent
from tests.trace_corpus import TRACES, hidden, mutants, outcome_of, recorded, summary

pytest.importorskip("orjson")  # dev dependencies: CI has them
pytest.importorskip("msgspec")
FAST = ("orjson", "msgspec")


def _corpus(tmp_path: Path) -> list[Path]:
    long = recorded(tmp_path / "long.jsonl")
    paths = [*sorted(TRACES.glob("*.jsonl")), long, hidden(long, tmp_path / "hidden.jsonl")]
    for i, source in enumerate(list(paths)):
        paths += mutants(source, tmp_path, 12 if source.parent == tmp_path else 6, seed=i)
    return paths


@pytest.mark.parametrize("parser", FAST)
def test_a_fast_parser_gives_the_standard_librarys_verdicts(tmp_path: Path, parser: str) -> None:
    """On the shipped traces, a long recorded one (worker steps recorded and hidden) and
    mutants of each line (odd numbers, bad hex, NaN, lone surrogates, duplicate or extra
    fields, cut lines), the parser gives the stdlib's result, counts, finding and error."""
    kinds = set()
    for path in _corpus(tmp_path):
        stdlib, fast = outcome_of(path), outcome_of(path, parser=parser)
        assert summary(fast) == summary(stdlib), path.name
        kinds.add(stdlib.result)
    assert kinds == {"conforming", "violation", "malformed"}


def test_the_comparison_sees_a_typed_handler_that_trusts_a_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A msgspec handler that took a lookup's key without testing it is hex (planted) accepts
    a line the standard library's path rejects: the comparison catches it."""
    source = recorded(tmp_path / "long.jsonl", steps=3)
    text = source.read_text()
    at = text.index('"key":"') + len('"key":"')
    path = tmp_path / "bad.jsonl"
    path.write_text(text[:at] + "zz" + text[text.index('"', at):])
    assert outcome_of(path).result == "malformed"
    assert summary(outcome_of(path, parser="msgspec")) == summary(outcome_of(path))

    def trusting(checker: Any, obj: Any, line: int) -> Any:
        checker.open_lookups[obj.thread] = TraceEvent(
            line, obj.seq, "lookup_called", obj.thread,
            {"key": obj.key.encode(), "request": obj.request},
        )
        checker.counts["lookup_called"] = checker.counts.get("lookup_called", 0) + 1
        return None

    monkeypatch.setitem(hot.TYPED, "lookup_called", trusting)
    assert summary(outcome_of(path, parser="msgspec")) != summary(outcome_of(path))


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


@pytest.mark.parametrize("parser", FAST)
def test_a_missing_parser_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], parser: str
) -> None:
    """--parser orjson or msgspec without the extra installed exits 2 with one line."""
    monkeypatch.setitem(sys.modules, parser, None)
    monkeypatch.delitem(sys.modules, "asynclookup.trace.typed", raising=False)
    monkeypatch.delattr(trace_package, "typed", raising=False)  # imported again: it fails
    code = run(TRACES / "conforming_small.jsonl", parser=parser)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "pip install 'asynclookup[fast]'" in err[0]
