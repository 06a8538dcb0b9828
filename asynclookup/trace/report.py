"""``asynclookup check-trace``: check a trace, shrink the excerpt that shows a violation, report.

The check itself is ``asynclookup.trace.check``.  On a violation this module re-reads
the file (nothing of the trace was kept in memory) from the last quiescent
point before the violating line, so the excerpt starts from a state that
replays from scratch, and then shrinks it greedily: it drops each event, or
pair of events, whose removal keeps the same property broken at the same last
event (docs/trace-format.md, "The excerpt").  Excerpts longer than
``MINIMISE_LIMIT`` events are reported as a line range with their last lines,
unminimised, so memory stays bounded.

``--jobs N`` checks in chunks in N processes, ``--chunk I/N`` checks one chunk
for a job runner and ``--merge`` puts the chunks' results together
(``asynclookup.trace.split``); each gives the report of one pass.  stderr gets
the events/s and peak memory at the end and, on a terminal, a progress line
(both off with ``--quiet``); stdout holds the report alone.

Exit codes: 0 conforming, 1 violation, 2 malformed or unreadable input or a
bad option value (one line, never a traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from asynclookup.trace import split
from asynclookup.trace.check import Efficiency, Found, Outcome, check_lines, first_found
from asynclookup.trace.format import (
    INTERNAL_EVENTS,
    Header,
    TraceEvent,
    TraceFormatError,
    parse_event,
)

MINIMISE_LIMIT = 400  # events: longer excerpts are shown, not minimised
MINIMISE_BUDGET = 200_000  # events fed to the engine, in total, while minimising
SHOWN_TAIL = 20  # lines shown of an excerpt too long to minimise
PROGRESS_SECONDS = 0.5  # between progress lines on a terminal


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


# -- the command --------------------------------------------------------------------


def run(
    path: Path, *, as_json_output: bool = False, efficiency: Efficiency = "fail",
    excerpt_out: Path | None = None, stdout: IO[str] | None = None,
    stderr: IO[str] | None = None, jobs: int = 1, quiet: bool = True,
    merge_parts: Sequence[Path] = (), progress_seconds: float = PROGRESS_SECONDS,
) -> int:
    """Check ``path`` and print the report; returns the exit code.

    ``jobs``: check in chunks in that many processes (``asynclookup.trace.split``);
    ``merge_parts``: instead of checking, merge the results of ``--chunk`` runs.
    Unless ``quiet``: the throughput and peak memory at the end, and a progress
    line while checking when stderr is a terminal, on stderr.
    """
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    cpu = time.process_time()
    chunks = 1
    meter = None if quiet or not err.isatty() else Progress(err, progress_seconds)
    try:
        if merge_parts:
            outcome = split.merge(path, [_load_part(p) for p in merge_parts])
            chunks = len(merge_parts)
        elif jobs > 1:
            outcome, chunks = split.parallel(path, jobs, efficiency)
        else:
            with path.open("rb") as f:
                outcome = check_lines(f, efficiency=efficiency, progress=meter)
    except OSError as exc:
        outcome = Outcome("malformed", error=TraceFormatError(0, f"cannot read {path}: "
                                                                 f"{exc.strerror or exc}"))
    except split.PartError as exc:
        outcome = Outcome("malformed", error=TraceFormatError(0, f"cannot merge: {exc}"))
    if meter is not None:
        meter.clear()
    excerpt = None
    if outcome.found is not None:
        try:
            excerpt = build_excerpt(path, outcome, efficiency)
            if excerpt_out is not None and excerpt.complete:
                with path.open("rb") as f:
                    write_excerpt(excerpt_out, f.readline().decode("utf-8"), excerpt)
        except (OSError, UnicodeDecodeError, TraceFormatError) as exc:  # changed under us
            outcome.error = TraceFormatError(0, f"cannot re-read {path}: {exc}")
            outcome.result = "malformed"
    if as_json_output:
        json.dump(as_json(path, outcome, excerpt), out, indent=2)
        out.write("\n")
    elif outcome.error is not None:
        err.write(f"{path}: {outcome.error}\n")
    else:
        out.write(as_text(path, outcome, excerpt))
    if not quiet and outcome.error is None:
        err.write(throughput(outcome, chunks, time.process_time() - cpu) + "\n")
    return outcome.exit_code




class Progress:
    """The progress line on a terminal: events read and events/s, rewritten in place."""

    def __init__(self, stream: IO[str], every: float) -> None:
        self.stream = stream
        self.every = every
        self.started = self.last = time.perf_counter()
        self.shown = False

    def __call__(self, events: int) -> None:
        now = time.perf_counter()
        if now - self.last < self.every:
            return
        self.last = now
        rate = events / (now - self.started)
        self.stream.write(f"\rcheck-trace: {events:,} events read ({rate:,.0f} events/s)")
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


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


def _load_part(path: Path) -> dict[str, Any]:
    try:
        part = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise split.PartError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise split.PartError(f"{path} is not JSON: {exc}") from None
    if type(part) is not dict:
        raise split.PartError(f"{path} is not a chunk result")
    return part


def register(subparsers: Any) -> None:
    """Add ``check-trace`` to an argparse subparsers object (``asynclookup.cli`` calls this)."""
    parser = subparsers.add_parser(
        "check-trace",
        help="check a recorded JSON Lines trace against the spec",
        description="Check a recorded trace (docs/trace-format.md) against the spec. "
        "Exit 0: conforming; 1: a violation (the first violating event, the property, "
        "the shortest excerpt that shows it); 2: malformed input.",
    )
    parser.add_argument("file", type=Path, help="the trace file (JSON Lines)")
    parser.add_argument("--json", action="store_true", help="print a JSON report")
    parser.add_argument(
        "--efficiency", choices=("fail", "warn"), default="fail",
        help="property 8 (no redundant probe): a violation (default) or a warning",
    )
    parser.add_argument(
        "--excerpt", type=Path, metavar="OUT",
        help="on a violation, also write the excerpt as a trace of its own to OUT",
    )
    parser.add_argument(
        "--jobs", default="1", metavar="N",
        help="check in up to N processes, cut at the trace's recorded quiescent points "
        "(same verdict as one process; docs/trace-format.md, 'Checking in chunks')",
    )
    parser.add_argument(
        "--chunk", metavar="I/N",
        help="check only chunk I (0-based) of N and print its result as JSON, for a job "
        "runner; then --merge the results",
    )
    parser.add_argument(
        "--merge", nargs="+", type=Path, metavar="PART",
        help="merge the results of --chunk I/N for every I into the report of one pass",
    )
    parser.add_argument(
        "--quiet", action="store_true",
        help="no events/s, peak memory or progress line on stderr",
    )
    parser.set_defaults(run=_command)


def _whole(text: str, least: int) -> int | None:
    return int(text) if text.isdigit() and int(text) >= least else None


def _command(args: argparse.Namespace) -> int:
    jobs = _whole(args.jobs, 1)
    if jobs is None:
        sys.stderr.write(f"check-trace: --jobs must be a whole number >= 1, got {args.jobs!r}\n")
        return 2
    if args.chunk is not None:
        index, _, total = args.chunk.partition("/")
        i, n = _whole(index, 0), _whole(total, 1)
        if i is None or n is None or i >= n:
            sys.stderr.write(
                f"check-trace: --chunk must be I/N with 0 <= I < N, got {args.chunk!r}\n"
            )
            return 2
        return run_chunk(args.file, i, n, args.efficiency)
    return run(
        args.file, as_json_output=args.json, efficiency=args.efficiency,
        excerpt_out=args.excerpt, jobs=jobs, quiet=args.quiet, merge_parts=args.merge or (),
    )


def run_chunk(
    path: Path, index: int, jobs: int, efficiency: Efficiency = "fail",
    stdout: IO[str] | None = None, stderr: IO[str] | None = None,
) -> int:
    """``--chunk I/N``: print chunk ``index``'s result as JSON; 0 when printed, 2 if the
    file cannot be read (the verdict is the merge's: a chunk's may not stand)."""
    out, err = stdout or sys.stdout, stderr or sys.stderr
    try:
        part = split.check_part(path, jobs, index, efficiency)
    except OSError as exc:
        err.write(f"{path}: cannot read {path}: {exc.strerror or exc}\n")
        return 2
    json.dump(part, out)
    out.write("\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m asynclookup.trace.report FILE``: the subcommand on its own."""
    parser = argparse.ArgumentParser(prog="asynclookup")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["check-trace", *(sys.argv[1:] if argv is None else argv)])
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
