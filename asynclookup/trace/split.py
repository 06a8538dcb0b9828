"""A long trace checked in chunks, in several processes, with the judgement of one pass.

Theory of operation
-------------------
``asynclookup.trace.check`` restarts from a fresh engine at every *quiescent
point* (one possible state, holding nothing, no call open): what the check
says after such a point depends on nothing before it.  So a trace can be cut
there and its chunks checked independently.  Finding those points needs the
check itself, so the cut is made where the trace *records* a candidate: a
``tables`` event whose ``keys`` and ``requests`` are both empty (the
implementation said it holds no lookup state).  ``plan`` finds them by a
byte search (no JSON decoding but of the candidate lines) and picks, for N
jobs, the first candidate after each N-th of the file.

Chunk ``i`` is checked from a fresh engine from the line after its candidate
(chunk 0 from the start).  When its check reaches the next chunk's candidate
it stops there if it restarted there (the candidate was a quiescent point);
otherwise the candidate was not quiescent (results still in flight, say) and
it checks on, through the next chunk, to the next candidate where it does
restart, or to the end.  ``merge`` then walks from chunk 0: a chunk's judgement
stands, and the walk goes on with the chunk its check stopped at; chunks
whose start was not confirmed quiescent are skipped (their lines were
checked by the chunk before).  So the merged answer is the one pass's:
the same first violation, property and line, the same counts.

A chunk's result (``Part``) is plain JSON, so each chunk can run as its own
process under any job runner (``check-trace FILE --chunk I/N``), and
``check-trace FILE --merge PART...`` prints the one-pass report.  ``parallel``
does both in a process pool (``--jobs N``).
"""

from __future__ import annotations

import json
import resource
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asynclookup.spec.errors import AsyncLookupError
from asynclookup.trace.check import (
    Efficiency,
    Found,
    Outcome,
    check_items,
    check_lines,
    judged_by_parts,
)
from asynclookup.trace.format import (
    Header,
    TraceFormatError,
    parse_event,
    read_header,
)
from asynclookup.trace.reader import Blocks

MARK = b'"tables"'  # every candidate line holds this
READ_BYTES = 1 << 20


@dataclass(frozen=True)
class Cut:
    """A candidate quiescent point: the marker's line, its seq, the offset of the next line."""

    line: int
    seq: int
    offset: int


def candidates(path: Path) -> list[Cut]:
    """Every ``tables`` event with empty ``keys`` and ``requests``, in file order.

    Reads the file in blocks of ``READ_BYTES`` and decodes only the lines that
    hold ``MARK``, so the scan costs a fraction of the check and no memory.
    """
    cuts: list[Cut] = []
    line, offset, rest = 1, 0, b""  # the line number and file offset of ``rest``'s start
    with path.open("rb") as f:
        while block := f.read(READ_BYTES):
            data = rest + block
            whole = data.rfind(b"\n") + 1  # data[:whole] holds complete lines
            at, counted = data.find(MARK, 0, whole), 0
            while at != -1:
                start = data.rfind(b"\n", 0, at) + 1
                end = data.find(b"\n", at) + 1
                line += data.count(b"\n", counted, start)
                counted = start
                try:
                    obj = json.loads(data[start:end])
                except ValueError:
                    obj = None
                if (
                    line > 1 and type(obj) is dict and obj.get("event") == "tables"
                    and obj.get("keys") == [] and obj.get("requests") == []
                    and type(obj.get("seq")) is int
                ):
                    cuts.append(Cut(line, obj["seq"], offset + end))
                at = data.find(MARK, end, whole)
            line += data.count(b"\n", counted, whole)
            offset += whole
            rest = data[whole:]
    return cuts


def plan(path: Path, jobs: int) -> list[Cut]:
    """Where chunks 1.. of ``jobs`` start: the first candidate after each ``jobs``-th of
    the file (fewer cuts when candidates are few; none: one chunk)."""
    size = path.stat().st_size
    cuts = candidates(path)
    chosen: list[Cut] = []
    for k in range(1, jobs):
        target = size * k // jobs
        later = [c for c in cuts if c.offset >= target and (not chosen or c.line > chosen[-1].line)]
        if later:
            chosen.append(later[0])
    return chosen


# -- one chunk --------------------------------------------------------------------------


def check_part(
    path: Path, jobs: int, index: int, efficiency: Efficiency = "fail",
    cuts: list[Cut] | None = None, parser: str = "json", posts_in_parts: bool = True,
) -> dict[str, Any]:
    """Check chunk ``index`` of ``plan(path, jobs)`` (``cuts``: that plan, when known;
    ``parser``, ``posts_in_parts``: as for ``check_lines``; ``parallel`` checks every
    chunk again with posts in parts when those held together find something); its
    result as JSON-ready data."""
    started = time.process_time()
    if cuts is None:
        cuts = plan(path, jobs)
    if not 0 <= index <= len(cuts):
        return _part(path, jobs, index, cuts, None, started, skipped=True)
    stops = {c.line: i + 1 for i, c in enumerate(cuts) if i + 1 > index}
    with path.open("rb") as f:
        if index == 0:
            outcome = check_lines(f, efficiency=efficiency, stops=stops, parser=parser,
                                  posts_in_parts=posts_in_parts)
        else:
            try:
                header = read_header(f.readline())
            except TraceFormatError as exc:
                outcome = Outcome("malformed", error=exc)
            else:
                cut = cuts[index - 1]
                f.seek(cut.offset)
                outcome = check_items(
                    Blocks(f, resume=(cut.line, cut.seq), parser=parser), header=header,
                    efficiency=efficiency, stops=stops, posts_in_parts=posts_in_parts,
                )
    return _part(path, jobs, index, cuts, outcome, started, stops=stops)


def _part(
    path: Path, jobs: int, index: int, cuts: list[Cut], outcome: Outcome | None,
    started: float, *, skipped: bool = False, stops: dict[int, int] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "format": "asynclookup-trace-part", "file": str(path), "bytes": path.stat().st_size,
        "jobs": jobs, "chunk": index, "chunks": len(cuts) + 1,
        "cuts": [[c.line, c.seq, c.offset] for c in cuts], "skipped": skipped,
    }
    if outcome is None:
        return out
    out.update({
        "result": outcome.result, "events": outcome.events, "counts": outcome.counts,
        "max_states": outcome.max_states, "unfinished": outcome.unfinished,
        "anchors": outcome.anchors, "restarts": outcome.restarts,
        "next": None if outcome.stopped_at is None else (stops or {})[outcome.stopped_at],
        "warnings": [_found(w) for w in outcome.warnings],
        "found": None if outcome.found is None else _found(outcome.found),
        "error": None if outcome.error is None else [outcome.error.line, outcome.error.message],
        "header": None if outcome.header is None else list(outcome.header),
        "cpu_seconds": time.process_time() - started,
        "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    })
    return out


def _found(found: Found) -> dict[str, Any]:
    e = found.event
    text = json.dumps({"seq": e.seq, "event": e.kind, "thread": e.thread, **_plain(e.data)})
    return {"number": found.number, "detail": found.detail, "line": e.line, "event": text}


def _plain(data: dict[str, Any]) -> dict[str, Any]:
    """An event's data as JSON again (keys back to hex)."""
    out: dict[str, Any] = {}
    for name, value in data.items():
        if isinstance(value, bytes):
            value = value.hex()
        elif name == "keys":
            value = [k.hex() for k in value]
        elif name in ("submitted", "dropped", "entries", "results"):
            value = [[t[0].hex(), t[1], t[2]] for t in value]
        elif isinstance(value, frozenset):
            value = sorted(value)
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, dict):  # a failure
            value = {k: list(v) if isinstance(v, tuple) else v
                     for k, v in value.items() if v is not None}
        out[name] = value
    return out


# -- merging ----------------------------------------------------------------------------


class PartError(AsyncLookupError, ValueError):
    """Chunk results that do not belong together (or to this file)."""


def merge(path: Path, parts: Sequence[dict[str, Any]]) -> Outcome:
    """The one-pass outcome from the chunks' results (see the module docstring); its
    ``seconds`` are the CPU seconds of the chunks used."""
    by_chunk: dict[int, dict[str, Any]] = {}
    size = path.stat().st_size
    for part in parts:
        if part.get("format") != "asynclookup-trace-part":
            raise PartError("not a chunk result of check-trace --chunk")
        if part["bytes"] != size:
            raise PartError(
                f"chunk {part['chunk']} was checked on a file of {part['bytes']} bytes, "
                f"this one has {size}"
            )
        by_chunk[part["chunk"]] = part
    first = next(iter(by_chunk.values()), None)
    if first is None:
        raise PartError("no chunk results given")
    if any(p["cuts"] != first["cuts"] for p in by_chunk.values()):
        raise PartError("the chunk results come from different plans (--chunk I/N with other N)")
    outcome = Outcome("conforming")
    counts: dict[str, int] = {}
    index: int | None = 0
    while index is not None:
        if index not in by_chunk:
            raise PartError(f"the result of chunk {index}/{first['chunks']} is missing")
        part = by_chunk[index]
        if part["skipped"]:
            raise PartError(f"chunk {index} has no part in a plan of {first['chunks']} chunks")
        outcome.events += part["events"]
        for kind, n in part["counts"].items():
            counts[kind] = counts.get(kind, 0) + n
        outcome.max_states = max(outcome.max_states, part["max_states"])
        outcome.restarts += part["restarts"]
        outcome.warnings += [_unfound(w) for w in part["warnings"]]
        outcome.anchors = (outcome.anchors + [tuple(a) for a in part["anchors"]])[-4096:]
        if part["header"] is not None and outcome.header is None:
            outcome.header = Header(*part["header"])
        outcome.unfinished = part["unfinished"]
        outcome.seconds += part["cpu_seconds"]  # parallel() replaces it with the wall time
        if part["error"] is not None:
            outcome.result = "malformed"
            outcome.error = TraceFormatError(*part["error"])
            break
        if part["found"] is not None:
            outcome.result, outcome.found = "violation", _unfound(part["found"])
            break
        index = part["next"]
    outcome.counts = counts
    return outcome


def _unfound(data: dict[str, Any]) -> Found:
    event = parse_event(data["line"], json.loads(data["event"]))
    return Found(data["number"], data["detail"], event)


# -- in a process pool --------------------------------------------------------------------


def _run_part(args: tuple[Path, int, int, Efficiency, list[Cut], str, bool]
              ) -> dict[str, Any]:
    return check_part(*args)


def parallel(
    path: Path, jobs: int, efficiency: Efficiency = "fail", parser: str = "json",
) -> tuple[Outcome, int]:
    """Check ``path`` in up to ``jobs`` processes (this one takes chunk 0); (the one-pass
    outcome, chunks used).  The chunks hold each tier call's results posted together
    first, and are checked again with posts in parts when that finds something (as
    ``check_lines`` does).

    Peak memory: the largest of this process and its workers (``Outcome`` has
    no field for it; see ``peak_rss_kib``).
    """
    started = time.perf_counter()
    cuts = plan(path, jobs)
    if not cuts:
        with path.open("rb") as f:
            outcome = check_lines(f, efficiency=efficiency, parser=parser)
        return outcome, 1
    outcome = _in_chunks(path, jobs, efficiency, parser, cuts, posts_in_parts=False)
    if judged_by_parts(outcome):
        outcome = _in_chunks(path, jobs, efficiency, parser, cuts, posts_in_parts=True)
    outcome.seconds = time.perf_counter() - started
    return outcome, len(cuts) + 1


def _in_chunks(
    path: Path, jobs: int, efficiency: Efficiency, parser: str, cuts: list[Cut], *,
    posts_in_parts: bool,
) -> Outcome:
    chunks = len(cuts) + 1
    with ProcessPoolExecutor(max_workers=chunks - 1) as pool:  # chunk 0 runs here
        later = pool.map(_run_part, [
            (path, jobs, i, efficiency, cuts, parser, posts_in_parts) for i in range(1, chunks)
        ])
        parts = [check_part(path, jobs, 0, efficiency, cuts, parser, posts_in_parts), *later]
    outcome = merge(path, parts)
    outcome.chunk_cpu = [part.get("cpu_seconds", 0.0) for part in parts]
    return outcome


def peak_rss_kib() -> int:
    """The peak resident memory of this process or of its largest finished child (KiB)."""
    return max(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
    )
