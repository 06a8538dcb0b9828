"""Traces for comparing two ways of reading and checking: the shipped ones, a long recorded one,
and mutants of each line that test the readers' edges (shared by test_trace_reader/_hot)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

from asynclookup.reference.manager import AsyncLookupManager
from asynclookup.reference.tier import InMemoryTier, RequestContext
from asynclookup.reference.trace import TraceWriter
from asynclookup.trace.check import Outcome, TraceChecker, check_lines, judged_by_parts
from asynclookup.trace.format import Header, TraceFormatError
from asynclookup.trace.reader import read_trace

TRACES = Path(__file__).parent / "traces"
KEYS = [b"key-%d" % i for i in range(6)]


def recorded(path: Path, steps: int = 700) -> Path:
    """A conforming trace of the reference in stepped mode (worker steps recorded), long
    enough for several blocks: lookups, flushes, the worker, drains, cleanups, marks."""
    tier = InMemoryTier()
    tier.store(KEYS[0])
    tier.store(KEYS[3])
    requests = [RequestContext(f"r{i}") for i in range(3)]
    with TraceWriter(path, recorder="corpus", worker_steps=True) as writer:
        manager = AsyncLookupManager(tier, mode="stepped", observer=writer.observer)
        for i in range(steps):
            for j in range(3):
                manager.lookup(KEYS[(i + j) % 6], requests[i % 3])
            if i % 5 == 0:
                manager.mark_miss([KEYS[i % 6]])
            if i % 7 == 0:
                manager.mark_present([KEYS[(i + 2) % 6]])
            manager.flush()
            manager.worker.run_pending()
            if i % 2:
                manager.drain_results()
            manager.cleanup(requests[(i + 1) % 3].req_id)
        manager.shutdown()
    return path


def hidden(source: Path, path: Path) -> Path:
    """``source`` with its worker steps dropped and the header saying so."""
    lines = source.read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    header["worker_steps"] = False
    kept = [ln for ln in lines[1:] if '"take_batch"' not in ln and '"post"' not in ln]
    path.write_text(json.dumps(header) + "\n" + "".join(kept))
    return path


ODD = [
    "99999999999999999999999", "1e400", "NaN", "-1", "1.0", "true", "null", '"zz"',
    '"\\ud800"', '"6B65792D30"', '[]', '{}', '"6b65792d39"',
]


def mutants(source: Path, into: Path, count: int, seed: int) -> Iterator[Path]:
    """``count`` copies of ``source``, each with one line changed: a value swapped for an odd
    one, a field dropped or duplicated, the line cut short or emptied."""
    rng = random.Random(seed)
    lines = source.read_bytes().splitlines(keepends=True)
    for n in range(count):
        i = rng.randrange(1, len(lines))
        text = lines[i].decode()
        roll = rng.random()
        if roll < 0.6:
            obj = json.loads(text)
            name = rng.choice(sorted(obj))
            start = text.index(f'"{name}":') + len(name) + 3
            end = start + len(json.dumps(obj[name], separators=(",", ":")))
            text = text[:start] + rng.choice(ODD) + text[end:]
        elif roll < 0.7:
            text = text.replace('"thread":', '"thread":"x","thread":', 1)
        elif roll < 0.8:
            text = text[: rng.randrange(len(text))] + ("\n" if i < len(lines) - 1 else "")
        elif roll < 0.9:
            text = "\n"
        else:
            text = text.replace('"seq":', '"extra":1,"seq":', 1)
        path = into / f"{source.stem}-{n}.jsonl"
        path.write_bytes(b"".join(lines[:i]) + text.encode() + b"".join(lines[i + 1:]))
        yield path


def outcome_of(path: Path, parser: str = "json") -> Outcome:
    with path.open("rb") as f:
        return check_lines(f, parser=parser)


def summary(outcome: Outcome) -> tuple[object, ...]:
    """What a report says: result, counts, states, the finding or the error, the warnings."""
    found = outcome.found
    error = outcome.error
    return (
        outcome.result, outcome.events, outcome.counts, outcome.max_states, outcome.unfinished,
        None if found is None else (found.number, found.detail, found.event.line),
        None if error is None else (error.line, error.message),
        [(w.number, w.detail, w.event.line) for w in outcome.warnings],
    )


def general_summary(path: Path) -> tuple[object, ...]:
    """``summary`` of a check that feeds every event through ``TraceChecker.feed`` (no inline
    path): the events one by one from ``read_trace``; first holding each tier call's
    results posted together, then, where that finds something, with posts in parts
    (as ``check_lines`` does)."""
    outcome = _fed(path, posts_in_parts=False)
    if judged_by_parts(outcome):
        outcome = _fed(path, posts_in_parts=True)
    return summary(outcome)


def _fed(path: Path, *, posts_in_parts: bool) -> Outcome:
    outcome = Outcome("conforming")
    checker = None
    with path.open("rb") as f:
        try:
            for item in read_trace(f):
                if isinstance(item, Header):
                    checker = TraceChecker(item, posts_in_parts=posts_in_parts)
                    outcome.header = item
                    continue
                assert checker is not None
                if checker.feed(item) is not None:
                    break
        except TraceFormatError as exc:
            outcome.result, outcome.error = "malformed", exc
    if checker is not None:
        outcome.events = sum(checker.counts.values())
        outcome.counts = dict(checker.counts)
        outcome.warnings = checker.warnings
        outcome.max_states = checker.peak_states
        outcome.unfinished = len(checker.open_lookups) + len(checker.open_calls)
        if checker.found is not None and outcome.error is None:
            outcome.result, outcome.found = "violation", checker.found
    return outcome
