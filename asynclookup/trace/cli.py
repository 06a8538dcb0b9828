"""``asynclookup check-trace``: check a trace and print its report, from the command line.

``register(subparsers)`` adds the subcommand (``asynclookup.cli`` calls it);
the check is ``asynclookup.trace.check``, the report's words and excerpt are
``asynclookup.trace.report``.  ``--jobs N`` checks in chunks in N processes,
``--chunk I/N`` checks one chunk for a job runner and ``--merge`` puts the
chunks' results together (``asynclookup.trace.split``); each gives the report
of one pass.  stderr gets the events/s and peak memory at the end and, on a
terminal, the live line (both off with ``--quiet``); stdout holds the report alone.

Exit codes (``asynclookup._cli``): 0 conforming, 1 violation, 2 malformed or
unreadable input or a bad option value (one line, never a traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from asynclookup._cli import EXIT_HOLDS, EXIT_USAGE, LiveLine, Parser, UsageError, run_command
from asynclookup.trace import split
from asynclookup.trace.check import Efficiency, Outcome, check_lines
from asynclookup.trace.format import TraceFormatError
from asynclookup.trace.reader import PARSERS
from asynclookup.trace.report import as_json, as_text, build_excerpt, throughput, write_excerpt

PROGRESS_SECONDS = 0.5  # between redraws of the live line on a terminal


def run(
    path: Path, *, as_json_output: bool = False, efficiency: Efficiency = "fail",
    excerpt_out: Path | None = None, stdout: IO[str] | None = None,
    stderr: IO[str] | None = None, jobs: int = 1, quiet: bool = True,
    merge_parts: Sequence[Path] = (), progress_seconds: float = PROGRESS_SECONDS,
    parser: str = "json",
) -> int:
    """Check ``path`` and print the report; returns the exit code.

    ``jobs``: check in chunks in that many processes (``asynclookup.trace.split``);
    ``merge_parts``: instead of checking, merge the results of ``--chunk`` runs.
    Unless ``quiet``: the throughput and peak memory at the end, and a progress
    line while checking when stderr is a terminal, on stderr.  ``parser``: the JSON
    parser (``asynclookup.trace.reader.PARSERS``; the same judgement with each).
    """
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    cpu = time.process_time()
    chunks = 1
    line = LiveLine.on(err, quiet=quiet, every=progress_seconds)

    def meter(events: int) -> None:
        if line is not None:
            rate = events / line.elapsed if line.elapsed > 0 else 0.0
            line.show(f"check-trace: {events:,} events read ({rate:,.0f} events/s)")
    try:
        if merge_parts:
            outcome = split.merge(path, [_load_part(p) for p in merge_parts])
            chunks = len(merge_parts)
        elif jobs > 1:
            outcome, chunks = split.parallel(path, jobs, efficiency, parser)
        else:
            with path.open("rb") as f:
                outcome = check_lines(f, efficiency=efficiency, parser=parser,
                                      progress=None if line is None else meter)
    except OSError as exc:
        outcome = Outcome("malformed", error=TraceFormatError(0, f"cannot read {path}: "
                                                                 f"{exc.strerror or exc}"))
    except split.PartError as exc:
        outcome = Outcome("malformed", error=TraceFormatError(0, f"cannot merge: {exc}"))
    if line is not None:
        line.clear()
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
        "(same judgement as one process; docs/trace-format.md, 'Checking in chunks')",
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
        "--parser", choices=PARSERS, default="json",
        help="the JSON parser: the standard library's (default), or from the 'fast' extra "
        "(pip install 'asynclookup[fast]') orjson or, fastest, msgspec's typed decoding; "
        "the judgement is the same",
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
        raise UsageError(f"check-trace: --jobs must be a whole number >= 1, got {args.jobs!r}")
    if args.chunk is not None:
        index, _, total = args.chunk.partition("/")
        i, n = _whole(index, 0), _whole(total, 1)
        if i is None or n is None or i >= n:
            raise UsageError(
                f"check-trace: --chunk must be I/N with 0 <= I < N, got {args.chunk!r}"
            )
        return run_chunk(args.file, i, n, args.efficiency, parser=args.parser)
    return run(
        args.file, as_json_output=args.json, efficiency=args.efficiency,
        excerpt_out=args.excerpt, jobs=jobs, quiet=args.quiet, merge_parts=args.merge or (),
        parser=args.parser,
    )


def run_chunk(
    path: Path, index: int, jobs: int, efficiency: Efficiency = "fail",
    stdout: IO[str] | None = None, stderr: IO[str] | None = None, parser: str = "json",
) -> int:
    """``--chunk I/N``: print chunk ``index``'s result as JSON; 0 when printed, 2 if the
    file cannot be read (the judgement is the merge's: a chunk's may not stand)."""
    out, err = stdout or sys.stdout, stderr or sys.stderr
    try:
        part = split.check_part(path, jobs, index, efficiency, parser=parser)
    except OSError as exc:
        err.write(f"{path}: cannot read {path}: {exc.strerror or exc}\n")
        return EXIT_USAGE
    json.dump(part, out)
    out.write("\n")
    return EXIT_HOLDS


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m asynclookup.trace.cli FILE``: the subcommand on its own."""
    parser = Parser(prog="asynclookup")
    register(parser.add_subparsers(dest="command", required=True, parser_class=Parser))
    return run_command(parser, ["check-trace", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
