"""The report of ``asynclookup check-trace``: the excerpt that shows a violation, text and JSON.

The check itself is ``asynclookup.trace.check``; the command is
``asynclookup.trace.cli``.  On a violation this module re-reads
the file (nothing of the trace was kept in memory) from the last quiescent
point before the violating line, so the excerpt starts from a state that
replays from scratch, and then shrinks it greedily: it drops each event, or
pair of events, whose removal keeps the same property broken at the same last
event (docs/trace-format.md, "The excerpt").  Excerpts longer than
``MINIMISE_LIMIT`` events are reported as a line range with their last lines,
unminimised, so memory stays bounded.

It prints nothing itself: it returns the report's text, its JSON, and the
line of throughput and peak memory the command prints on stderr.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asynclookup.trace import split
from asynclookup.trace.check import Efficiency, Found, Outcome, first_found
from asynclookup.trace.format import (
    INTERNAL_EVENTS,
    Header,
    TraceEvent,
    parse_event,
)

MINIMISE_LIMIT = 400  # events: longer excerpts are shown, not minimised
MINIMISE_BUDGET = 200_000  # events fed to the engine, in total, while minimising
SHOWN_TAIL = 20  # lines shown of an excerpt too long to minimise


@dataclass
class Excerpt:
    """The events that show a violation: ``lines`` (line number, text), minimised or not."""

    first_line: int  # the first event line of the unminimised excerpt
    last_line: int
    total: int  # events in the unminimised excerpt
    lines: list[tuple[int, str]]  # what is shown: all of it, or its tail when too long
    minimised: bool
    complete: bool  # ``lines`` is a whole trace body (re-checkable with the header)


def _numbered(path: Path) -> Iterator[tuple[int, bytes]]:
    with path.open("rb") as f:
        yield from enumerate(f, start=1)


def window(outcome: Outcome) -> tuple[int, int | None]:
    """Where the excerpt starts: (first event line, a flush line to replay before it).

    From the start of the trace when the violation is within ``MINIMISE_LIMIT``
    events of it; else from the earliest quiescent point that close; else from
    the last quiescent point (too long to minimise, then).
    """
    assert outcome.found is not None
    last = outcome.found.event.line
    if last - 1 <= MINIMISE_LIMIT or not outcome.anchors:
        return 2, None
    for line, flush in outcome.anchors:
        if last - line <= MINIMISE_LIMIT:
            return line + 1, flush
    line, flush = outcome.anchors[-1]
    return line + 1, flush


def build_excerpt(path: Path, outcome: Outcome, efficiency: Efficiency) -> Excerpt:
    """Re-read ``path`` up to the violating line and shrink what shows the violation."""
    assert outcome.found is not None and outcome.header is not None
    last = outcome.found.event.line
    start, flush = window(outcome)
    wanted = {flush} if flush is not None else set()
    total = last - start + 1 + len(wanted)
    if total > MINIMISE_LIMIT:
        tail: deque[tuple[int, str]] = deque(maxlen=SHOWN_TAIL)
        for n, raw in _numbered(path):
            if n >= start:
                tail.append((n, raw.decode("utf-8").rstrip("\n")))
            if n >= last:
                break
        return Excerpt(start, last, total, list(tail), minimised=False, complete=False)
    texts: dict[int, str] = {}
    for n, raw in _numbered(path):
        if n >= start or n in wanted:
            texts[n] = raw.decode("utf-8").rstrip("\n")
        if n >= last:
            break
    events = [parse_event(n, json.loads(texts[n])) for n in sorted(texts)]
    kept = minimise(outcome.header, events, outcome.found, efficiency)
    shown = [(e.line, texts[e.line]) for e in kept]
    return Excerpt(start, last, total, shown, minimised=len(kept) < total, complete=True)


GLOBAL_EVENTS = frozenset({"flush", "drain", "shutdown", "worker_died", "take_batch", "post"})


def _units(events: list[TraceEvent]) -> list[list[TraceEvent]]:
    """Events grouped so that removing a group keeps the pairs whole; internal ones dropped."""
    units: list[list[TraceEvent]] = []
    open_at: dict[tuple[str, str], list[TraceEvent]] = {}
    for event in events:
        if event.kind in INTERNAL_EVENTS:
            continue  # never fed to the engine: irrelevant to any violation
        pair = {"lookup_returned": "lookup", "tier_call_finished": "tier"}.get(event.kind)
        opening = {"lookup_called": "lookup", "tier_call_started": "tier"}.get(event.kind)
        if pair is not None and (event.thread, pair) in open_at:
            open_at.pop((event.thread, pair)).append(event)
            continue
        unit = [event]
        units.append(unit)
        if opening is not None:
            open_at[(event.thread, opening)] = unit
    return units


def _keys(event: TraceEvent) -> tuple[bytes, ...]:
    data = event.data
    return (data["key"],) if "key" in data else tuple(data.get("keys", ()))


def involved(events: list[TraceEvent], found: Found) -> tuple[set[bytes], set[str]]:
    """The keys and requests a violation is about: its own, and the requests of those keys."""
    event = found.event
    keys = set(_keys(event))
    if event.kind == "worker_died":  # the keys of that worker's last tier call
        calls = [e for e in events if e.kind == "tier_call_finished" and e.thread == event.thread]
        keys = set(_keys(calls[-1])) if calls else set()
    requests = {event.data["request"]} if "request" in event.data else set()
    if event.kind == "cleanup":
        keys |= {k for e in events if e.data.get("request") in requests for k in _keys(e)}
    if event.kind in ("flush", "drain", "shutdown"):
        keys = {k for e in events for k in _keys(e)}
    requests |= {
        e.data["request"] for e in events if "request" in e.data and keys & set(_keys(e))
    }
    return keys, requests


def minimise(
    header: Header, events: list[TraceEvent], found: Found, efficiency: Efficiency
) -> list[TraceEvent]:
    """A subsequence of ``events`` whose first violation is still ``found``'s, at its end.

    Only units unrelated to the violation (no involved key or request, not a
    flush, drain, shutdown or worker step; any ``tables`` snapshot) may go,
    each only if the violation stays: chunks of them first (halves, quarters,
    ...), then one at a time, until ``MINIMISE_BUDGET`` engine steps are
    spent.  What stays tells the story of the keys involved.
    """
    units = _units(events)
    if not units or units[-1][-1].line != found.event.line:
        return events
    keys, requests = involved(events, found)

    def related(unit: list[TraceEvent]) -> bool:
        if unit[0].kind == "tables":
            return False  # a snapshot narrows the states: never part of the story itself
        return any(
            e.kind in GLOBAL_EVENTS or keys & set(_keys(e)) or e.data.get("request") in requests
            for e in unit
        )

    spent = 0

    def flatten(candidate: list[list[TraceEvent]]) -> list[TraceEvent]:
        lines = {e.line for unit in candidate for e in unit}
        return [e for e in events if e.line in lines]  # file order, pairs interleaved

    def shows(candidate: list[list[TraceEvent]]) -> bool:
        nonlocal spent
        flat = flatten(candidate)
        spent += len(flat)
        got = first_found(header, flat, efficiency=efficiency)
        return (
            got is not None and got.event.line == found.event.line
            and got.number == found.number
        )

    if not shows(units):
        return events  # the excerpt does not replay alone: show it whole
    body, fixed = units[:-1], units[-1]
    size = max(1, len(body) // 2)
    while size >= 1 and spent < MINIMISE_BUDGET:
        i = 0
        while i < len(body) and spent < MINIMISE_BUDGET:
            chunk = body[i:i + size]
            candidate = body[:i] + body[i + size:]
            if not any(related(u) for u in chunk) and shows([*candidate, fixed]):
                body = candidate
            else:
                i += size
        size //= 2
    return flatten([*body, fixed])


# -- reporting ----------------------------------------------------------------------


def _summary(outcome: Outcome) -> str:
    counts = ", ".join(f"{n} {kind}" for kind, n in sorted(outcome.counts.items()))
    return f"{outcome.events} events ({counts or 'none'})"


def as_json(path: Path, outcome: Outcome, excerpt: Excerpt | None) -> dict[str, Any]:
    """The machine-readable report of ``check-trace --json``."""
    out: dict[str, Any] = {
        "file": str(path), "result": outcome.result, "exit": outcome.exit_code,
        "events": outcome.events, "counts": outcome.counts,
        "seconds": round(outcome.seconds, 3), "max_states": outcome.max_states,
        "unfinished_calls": outcome.unfinished,
        "warnings": [_found_json(w) for w in outcome.warnings],
    }
    if outcome.header is not None:
        out["recorder"] = outcome.header.recorder
        out["worker_steps"] = outcome.header.worker_steps
    if outcome.error is not None:
        out["error"] = {"line": outcome.error.line, "message": outcome.error.message}
    if outcome.found is not None:
        out["violation"] = _found_json(outcome.found)
        if excerpt is not None:
            out["violation"]["excerpt"] = {
                "first_line": excerpt.first_line, "last_line": excerpt.last_line,
                "events": excerpt.total, "minimised": excerpt.minimised,
                "complete": excerpt.complete,
                "lines": [{"line": n, "text": t} for n, t in excerpt.lines],
            }
    return out


def _found_json(found: Found) -> dict[str, Any]:
    e = found.event
    return {
        "line": e.line, "seq": e.seq, "event": e.kind, "thread": e.thread,
        **found.as_json(), "explanation": found.explanation,
    }


def as_text(path: Path, outcome: Outcome, excerpt: Excerpt | None) -> str:
    """The human-readable report (exit 0 and 1; exit 2 is one line on stderr)."""
    rate = outcome.events / outcome.seconds if outcome.seconds > 0 else 0.0
    timing = f"checked in {outcome.seconds:.2f} s ({rate:,.0f} events/s)"
    if outcome.found is None:
        lines = [
            f"{path}: conforms: {_summary(outcome)}",
            f"  recorder {outcome.header.recorder!r}; worker steps "  # type: ignore[union-attr]
            f"{'recorded' if outcome.header.worker_steps else 'inferred'};"  # type: ignore[union-attr]
            f" at most {outcome.max_states} possible spec states at once;"
            f" {outcome.unfinished} calls unfinished at the end; {timing}",
        ]
        lines += [
            f"  warning: line {w.event.line}: {w.title}: {w.detail}" for w in outcome.warnings
        ]
        return "\n".join(lines) + "\n"
    f, e = outcome.found, outcome.found.event
    lines = [
        f"{path}: VIOLATION at line {e.line} (seq {e.seq}): {e.kind} on thread {e.thread!r}",
        f"  breaks {f.title} [{f.kind}]",
        f"  why: {f.detail}",
        f"  meaning: {f.explanation}",
        f"  read {_summary(outcome)}; {timing}",
    ]
    if excerpt is not None:
        if excerpt.complete:
            how = "minimised" if excerpt.minimised else "not shrinkable"
            lines.append(
                f"  shortest excerpt that shows it ({len(excerpt.lines)} of {excerpt.total} "
                f"events from line {excerpt.first_line}, {how}; original line numbers):"
            )
        else:
            lines.append(
                f"  the excerpt from line {excerpt.first_line} to {excerpt.last_line} "
                f"({excerpt.total} events) shows it; too long to minimise, its last "
                f"{len(excerpt.lines)} lines:"
            )
        lines += [f"    line {n}: {text}" for n, text in excerpt.lines]
    return "\n".join(lines) + "\n"


def write_excerpt(out: Path, header_line: str, excerpt: Excerpt) -> None:
    """The excerpt as a trace of its own (header + kept lines), checkable by itself."""
    with out.open("w", encoding="utf-8", newline="\n") as f:
        f.write(header_line.rstrip("\n") + "\n")
        for _, text in excerpt.lines:
            f.write(text + "\n")


def throughput(outcome: Outcome, chunks: int, cpu: float) -> str:
    """The line printed on stderr at the end: events/s and peak memory."""
    rate = outcome.events / outcome.seconds if outcome.seconds > 0 else 0.0
    how = f" in {chunks} chunks" if chunks > 1 else ""
    return (
        f"check-trace: {outcome.events:,} events{how} in {outcome.seconds:.2f} s "
        f"({rate:,.0f} events/s; CPU {cpu:.2f} s in this process); "
        f"peak memory {split.peak_rss_kib() / 1024:.1f} MiB"
        + (" (the largest process)" if chunks > 1 else "")
    )
