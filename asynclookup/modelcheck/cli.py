"""``asynclookup model-check``: the exhaustive bounded search of the spec, from the command line.

``register(subparsers)`` adds the subcommand (``asynclookup.cli`` calls it);
the search is ``asynclookup.modelcheck.search``, the words are
``asynclookup.modelcheck.report``.  Exit 0: every property holds at the
fixpoint; 1: a violation; 2: bad arguments; 3: a limit stopped the search first.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys

from asynclookup._cli import (
    EXIT_HOLDS,
    EXIT_INCOMPLETE,
    EXIT_VIOLATION,
    LiveLine,
    Subparsers,
    UsageError,
    positive_float,
    positive_int,
)
from asynclookup.modelcheck import report as _report
from asynclookup.modelcheck._canon import Reductions
from asynclookup.modelcheck.search import Bounds, CheckResult, check
from asynclookup.spec.core import TRANSITIONS
from asynclookup.spec.variants import VARIANTS

_REDUCTION_FLAGS = {
    "stale": "collapse_stale",
    "inert": "inert_stale",
    "keys": "key_symmetry",
    "requests": "request_symmetry",
    "results": "results_by_key",
    "por": "persistent",
}


def _verdicts(text: str) -> tuple[bool, ...]:
    names = {"true": True, "false": False}
    words = [w.strip().lower() for w in text.split(",")]
    if not words or any(w not in names for w in words) or len(set(words)) != len(words):
        raise argparse.ArgumentTypeError(f"want true, false or true,false: {text!r}")
    return tuple(names[w] for w in words)


def _reductions(text: str) -> Reductions:
    if text == "all":
        return Reductions()
    if text == "none":
        return Reductions.none()
    words = [w.strip() for w in text.split(",")]
    if "inert" in words and "stale" not in words:
        raise argparse.ArgumentTypeError("reduction 'inert' needs 'stale'")
    unknown = [w for w in words if w not in _REDUCTION_FLAGS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown reduction {unknown[0]!r} (want all, none or a list of "
            f"{', '.join(_REDUCTION_FLAGS)})"
        )
    return Reductions(**{flag: name in words for name, flag in _REDUCTION_FLAGS.items()})


def register(subparsers: Subparsers) -> None:
    """Add ``model-check``: the exhaustive bounded search of the spec."""
    p = subparsers.add_parser(
        "model-check",
        help="exhaustive bounded model check of the spec",
        description="Breadth-first search over every interleaving of scheduler and worker "
        "actions within the bounds; every property checked in every state and step.",
    )
    p.add_argument("--keys", type=positive_int, default=1, help="block keys (default 1)")
    p.add_argument("--requests", type=positive_int, default=2, help="requests (default 2)")
    p.add_argument("--batch-entries", type=positive_int, default=2, metavar="N",
                   help="entries in one step's batch (default 2)")
    p.add_argument("--queued-batches", type=positive_int, default=2, metavar="N",
                   help="batches submitted and not yet taken (default 2)")
    p.add_argument("--posted-results", type=positive_int, default=2, metavar="N",
                   help="results posted and not yet applied (default 2)")
    p.add_argument("--verdicts", type=_verdicts, default=(True, False),
                   help="the tier's verdict alphabet (default true,false)")
    p.add_argument("--variant", choices=sorted(VARIANTS),
                   help="check a broken variant of the spec instead of the spec")
    p.add_argument("--reductions", type=_reductions, default=None,
                   help="all, none, or a list of stale,inert,keys,requests,results,por "
                   "(default: all for the spec, all but inert for a variant; por is the "
                   "partial-order reduction, off with --dot)")
    p.add_argument("--max-states", type=positive_int, metavar="N",
                   help="stop after N distinct states")
    p.add_argument("--max-seconds", type=positive_float, metavar="S",
                   help="stop after S seconds")
    p.add_argument("--hash-compaction", action="store_true",
                   help="store a 64-bit fingerprint of each state instead of the state "
                   "(bug hunting: less memory, but a state may be missed; the report "
                   "prints the bound on that probability). Default: exhaustive")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--dot", metavar="FILE",
                   help=f"write the reachable graph as Graphviz "
                   f"(at most {_report.DOT_LIMIT} states)")
    p.set_defaults(run=run_model_check)


def _progress_text(states: int, depth: int, elapsed: float) -> str:
    rate = states / elapsed if elapsed > 0 else 0.0
    return f"  {states:,} states  depth {depth}  {rate:,.0f} states/s  {elapsed:.0f} s "


def run_model_check(args: argparse.Namespace) -> int:
    """Run one search and print its report; the exit code says the judgement."""
    try:
        bounds = Bounds(
            keys=args.keys, requests=args.requests, batch_entries=args.batch_entries,
            queued_batches=args.queued_batches, posted_results=args.posted_results,
            verdicts=args.verdicts,
        )
    except ValueError as exc:
        raise UsageError(f"asynclookup model-check: {exc}") from None
    if args.dot is not None and not os.access(os.path.dirname(args.dot) or ".", os.W_OK):
        raise UsageError(f"asynclookup model-check: --dot: cannot write {args.dot!r}")
    if args.dot is not None and args.hash_compaction:
        raise UsageError("asynclookup model-check: --dot needs every state: "
                         "drop --hash-compaction")
    table = VARIANTS[args.variant].table if args.variant else TRANSITIONS
    line = LiveLine.on(sys.stderr)

    def progress(states: int, depth: int, elapsed: float) -> None:
        if line is not None:
            line.show(_progress_text(states, depth, elapsed))

    result = check(
        bounds, table, reductions=args.reductions, max_states=args.max_states,
        max_seconds=args.max_seconds, on_progress=None if line is None else progress,
        keep_graph=args.dot is not None, hash_compaction=args.hash_compaction,
    )
    if line is not None:
        line.clear()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if args.json:
        print(json.dumps(_report.as_json(result, args.variant, peak_mb)))
    else:
        print(_report.text(result, args.variant, peak_mb))
    if args.dot is not None:
        if result.states > _report.DOT_LIMIT:
            raise UsageError(
                f"asynclookup model-check: --dot: {result.states} states is too many to draw "
                f"(at most {_report.DOT_LIMIT}); use smaller bounds"
            )
        with open(args.dot, "w", encoding="utf-8") as out:
            out.write(_report.dot(result))
    return _exit_code(result)


def _exit_code(result: CheckResult) -> int:
    if result.violation is not None:
        return EXIT_VIOLATION
    return EXIT_HOLDS if result.fixpoint else EXIT_INCOMPLETE
