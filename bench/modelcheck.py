"""Benchmark of the bounded model checker: states, transitions, time, memory.

Runs ``asynclookup.modelcheck.search.check`` for a list of bounds (in a fresh process per
run, so that peak memory is per run), each repeated, and prints a Markdown
table with medians, for docs/benchmarks.md.  The "naive" row is the same
search with every reduction and the memo off: the plain breadth-first search
that the issue measured, run on the same machine, to calibrate the others; the
"no-inert" rows are the reductions that broken variants get; the "no-por"
rows leave out the partial-order reduction (persistent sets), so they give
the state count without it.

The "-pure" rows run with ``ASYNCLOOKUP_PURE_PYTHON=1`` (the pure-Python
kernel, not the compiled one); the "-hc" rows store 64-bit fingerprints
(``--hash-compaction``).  The bytes-per-state column is what the search stored
per distinct state (visited set and search graph; not the memo tables, whose
compiled part is the "memo MB" column); CPU is the search process's, peak MB
its maximum RSS.  ``--bounds KxR`` runs keys x requests with the default other
bounds (``--bounds 2x3`` is the "2x3" row).

``--old TREE`` runs each configuration in another tree too (an older commit
extracted with ``git archive``), at the same time as this tree's run, one
process per core, so that old and new are measured under the same load; a
configuration the old tree has no flag for runs in this tree only.

    .venv/bin/python bench/modelcheck.py                 # the default set
    .venv/bin/python bench/modelcheck.py --runs 3 2x2    # one configuration
    .venv/bin/python bench/modelcheck.py --runs 1 --bounds 2x3
    mkdir /tmp/mc_prev && git archive c45d468 | tar -x -C /tmp/mc_prev
    .venv/bin/python bench/modelcheck.py --runs 1 --old /tmp/mc_prev 2x2 2x2-no-por

What it does not do: assert anything (speed is not tested), or run in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

CONFIGS: dict[str, list[str]] = {
    "1x2": ["--keys", "1", "--requests", "2"],
    "2x1": ["--keys", "2", "--requests", "1"],
    "1x2-naive": ["--keys", "1", "--requests", "2", "--naive"],
    "1x2-no-inert": ["--keys", "1", "--requests", "2", "--no-inert"],
    "2x1-no-inert": ["--keys", "2", "--requests", "1", "--no-inert"],
    "2x2": ["--keys", "2", "--requests", "2"],
    "2x2-no-por": ["--keys", "2", "--requests", "2", "--no-por"],
    "2x2-pure": ["--keys", "2", "--requests", "2", "--pure"],
    "2x2-hc": ["--keys", "2", "--requests", "2", "--hash-compaction"],
    "1x2-no-por": ["--keys", "1", "--requests", "2", "--no-por"],
    "2x1-no-por": ["--keys", "2", "--requests", "1", "--no-por"],
    "2x3-1M": ["--keys", "2", "--requests", "3", "--max-states", "1000000"],
    "2x3": ["--keys", "2", "--requests", "3"],
}
# Flags an older tree may not have: with them, a configuration runs in this tree only.
NEW_ONLY = ("--hash-compaction", "--pure")

_CHILD = """
import json, resource, sys, time
from asynclookup.modelcheck.search import Bounds, Reductions, check
args = json.loads(sys.argv[1])
naive = args.pop("naive", False)
reductions = Reductions(inert_stale=not args.pop("no_inert", False))
if args.pop("no_por", False):  # a tree older than the partial-order reduction has none
    reductions = Reductions(inert_stale=reductions.inert_stale, persistent=False)
limits = {k: args.pop(k) for k in ("max_states", "max_seconds", "hash_compaction")
          if k in args}
cpu = time.process_time()
r = check(Bounds(**args), reductions=Reductions.none() if naive else reductions,
          memoised=not naive, **limits)
cpu = time.process_time() - cpu
print(json.dumps({
    "states": r.states, "transitions": r.transitions, "depth": r.depth,
    "fixpoint": r.fixpoint, "holds": r.holds, "seconds": r.seconds, "cpu": cpu,
    "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "bytes_per_state": getattr(r, "bytes_per_state", None),
    "memo_mb": getattr(r, "memo_bytes", 0) / 1e6,
    "kernel": getattr(r, "visited_impl", "pure-python"),
    "missed": getattr(r, "missed_state_bound", None),
}))
"""


def _child_args(flags: list[str]) -> dict[str, object]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int)
    parser.add_argument("--requests", type=int)
    parser.add_argument("--max-seconds", type=float)
    parser.add_argument("--max-states", type=int)
    parser.add_argument("--naive", action="store_true")
    parser.add_argument("--no-inert", action="store_true")
    parser.add_argument("--no-por", action="store_true")
    parser.add_argument("--hash-compaction", action="store_true")
    parser.add_argument("--pure", action="store_true")
    ns = parser.parse_args(flags)
    return {k: v for k, v in vars(ns).items() if v not in (None, False)}


def _start(flags: list[str], tree: Path) -> subprocess.Popen[str]:
    """One search in a fresh interpreter run in ``tree`` (which it imports from)."""
    args = _child_args(flags)
    env = dict(os.environ)
    env.pop("ASYNCLOOKUP_PURE_PYTHON", None)
    if args.pop("pure", False):
        env["ASYNCLOOKUP_PURE_PYTHON"] = "1"
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, json.dumps(args)],
        cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )


def _figures(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"bench/modelcheck.py: a search failed:\n{err}")
    figures: dict[str, Any] = json.loads(out)
    return figures


def run_once(flags: list[str], old: Path | None = None) -> tuple[dict[str, Any], ...]:
    """One search of this tree (and of ``old`` at the same time); their figures."""
    processes = [_start(flags, ROOT)]
    if old is not None and "--no-por" not in flags and not any(f in flags for f in NEW_ONLY):
        processes.append(_start(flags, old))
    return tuple(_figures(p) for p in processes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", metavar="CONFIG",
                        help=f"one of {', '.join(CONFIGS)} (default: all, unless --bounds)")
    parser.add_argument("--bounds", action="append", default=[], metavar="KxR",
                        type=_bounds, help="keys x requests, other bounds the defaults")
    parser.add_argument("--runs", type=int, default=3, help="repetitions (medians reported)")
    parser.add_argument("--old", type=Path, metavar="TREE",
                        help="also run each configuration in this checkout, side by side")
    args = parser.parse_args(argv)
    unknown = [name for name in args.configs if name not in CONFIGS]
    if unknown:
        parser.error(f"unknown configuration {unknown[0]!r}: choose from {', '.join(CONFIGS)}")
    configs = {name: CONFIGS[name] for name in args.configs or ([] if args.bounds else CONFIGS)}
    configs.update((f"{k}x{r}", ["--keys", str(k), "--requests", str(r)]) for k, r in args.bounds)
    if args.old is not None and not (args.old / "asynclookup" / "modelcheck").is_dir():
        parser.error(f"--old: {args.old} is not a checkout of this repository")
    print("| bounds | tree | kernel | runs | states | transitions | depth | fixpoint | holds "
          "| wall s | CPU s | states/s (CPU) | peak MB | bytes/state | memo MB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, flags in configs.items():
        pairs = [run_once(flags, args.old) for _ in range(args.runs)]
        for column, tree in enumerate(("new", "old")):
            runs = [pair[column] for pair in pairs if len(pair) > column]
            if runs:
                print(_row(name, tree if args.old else "this", runs), flush=True)
    return 0


def _bounds(text: str) -> tuple[int, int]:
    """``KxR``: keys and requests."""
    keys, sep, requests = text.lower().partition("x")
    if not sep or not keys.isdigit() or not requests.isdigit():
        raise argparse.ArgumentTypeError(f"want KxR (keys x requests), got {text!r}")
    return int(keys), int(requests)


def _row(name: str, tree: str, runs: list[dict[str, Any]]) -> str:
    first = runs[0]

    def median(key: str) -> float:
        return float(statistics.median(r[key] for r in runs))

    per_state = first.get("bytes_per_state")
    missed = first.get("missed")
    return (
        f"| {name} | {tree} | {first.get('kernel', '-')} | {len(runs)} "
        f"| {first['states']:,} | {first['transitions']:,} | {first['depth']} "
        f"| {bool(first['fixpoint'])} | {bool(first['holds'])} | {median('seconds'):.1f} "
        f"| {median('cpu'):.1f} | {median('states') / median('cpu'):,.0f} "
        f"| {median('peak_mb'):,.0f} | {'-' if per_state is None else f'{per_state:.0f}'} "
        f"| {first.get('memo_mb', 0):,.0f} |"
        + ("" if missed is None else f" P(missed state) <= {missed:.1e}")
    )


if __name__ == "__main__":
    sys.exit(main())
