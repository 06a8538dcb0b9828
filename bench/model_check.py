"""Benchmark of the bounded model checker: states, transitions, time, memory.

Runs ``asynclookup.modelcheck.search.check`` for a list of bounds (in a fresh process per
run, so that peak memory is per run), each repeated, and prints a Markdown
table with medians, for docs/benchmarks.md.  The "naive" row is the same
search with every reduction and the memo off: the plain breadth-first search
that the issue measured, run on the same machine, to calibrate the others; the
"no-inert" rows are the reductions that broken variants get; the "no-por"
rows leave out the partial-order reduction (persistent sets), so they give
the state count without it.

``--old TREE`` runs each configuration in another checkout too (a
``git worktree`` of an older commit), at the same time as this tree's run,
one process per core, so that old and new are measured under the same load.

    .venv/bin/python bench/model_check.py                 # the default set
    .venv/bin/python bench/model_check.py --runs 3 2x2    # one configuration
    git worktree add /tmp/mc_old d7933ad
    .venv/bin/python bench/model_check.py --runs 1 --old /tmp/mc_old 2x2 2x2-no-por

What it does not do: assert anything (speed is not tested), or run in CI.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CONFIGS: dict[str, list[str]] = {
    "1x2": ["--keys", "1", "--requests", "2"],
    "2x1": ["--keys", "2", "--requests", "1"],
    "1x2-naive": ["--keys", "1", "--requests", "2", "--naive"],
    "1x2-no-inert": ["--keys", "1", "--requests", "2", "--no-inert"],
    "2x1-no-inert": ["--keys", "2", "--requests", "1", "--no-inert"],
    "2x2": ["--keys", "2", "--requests", "2"],
    "2x2-no-por": ["--keys", "2", "--requests", "2", "--no-por"],
    "1x2-no-por": ["--keys", "1", "--requests", "2", "--no-por"],
    "2x1-no-por": ["--keys", "2", "--requests", "1", "--no-por"],
    "2x3-1M": ["--keys", "2", "--requests", "3", "--max-states", "1000000"],
}

_CHILD = """
import json, resource, sys, time
from asynclookup.modelcheck.search import Bounds, Reductions, check
args = json.loads(sys.argv[1])
naive = args.pop("naive", False)
reductions = Reductions(inert_stale=not args.pop("no_inert", False))
if args.pop("no_por", False):  # a tree older than the partial-order reduction has none
    reductions = Reductions(inert_stale=reductions.inert_stale, persistent=False)
limits = {k: args.pop(k) for k in ("max_states", "max_seconds") if k in args}
cpu = time.process_time()
r = check(Bounds(**args), reductions=Reductions.none() if naive else reductions,
          memoised=not naive, **limits)
cpu = time.process_time() - cpu
print(json.dumps({
    "states": r.states, "transitions": r.transitions, "depth": r.depth,
    "fixpoint": r.fixpoint, "holds": r.holds, "seconds": r.seconds, "cpu": cpu,
    "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
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
    ns = parser.parse_args(flags)
    return {k: v for k, v in vars(ns).items() if v not in (None, False)}


def _start(flags: list[str], tree: Path) -> subprocess.Popen[str]:
    """One search in a fresh interpreter run in ``tree`` (which it imports from)."""
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, json.dumps(_child_args(flags))],
        cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _figures(process: subprocess.Popen[str]) -> dict[str, float]:
    out, err = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"bench/model_check.py: a search failed:\n{err}")
    figures: dict[str, float] = json.loads(out)
    return figures


def run_once(flags: list[str], old: Path | None = None) -> tuple[dict[str, float], ...]:
    """One search of this tree (and of ``old`` at the same time); their figures."""
    processes = [_start(flags, ROOT)]
    if old is not None and "--no-por" not in flags:
        processes.append(_start(flags, old))
    return tuple(_figures(p) for p in processes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--runs", type=int, default=3, help="repetitions (medians reported)")
    parser.add_argument("--old", type=Path, metavar="TREE",
                        help="also run each configuration in this checkout, side by side")
    args = parser.parse_args(argv)
    if args.old is not None and not (args.old / "asynclookup" / "modelcheck").is_dir():
        parser.error(f"--old: {args.old} is not a checkout of this repository")
    print("| bounds | tree | runs | states | transitions | depth | fixpoint | holds | wall s "
          "| CPU s | states/s (CPU) | peak MB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.configs:
        pairs = [run_once(CONFIGS[name], args.old) for _ in range(args.runs)]
        for column, tree in enumerate(("new", "old")):
            runs = [pair[column] for pair in pairs if len(pair) > column]
            if runs:
                print(_row(name, tree if args.old else "this", runs), flush=True)
    return 0


def _row(name: str, tree: str, runs: list[dict[str, float]]) -> str:
    first = runs[0]

    def median(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    return (
        f"| {name} | {tree} | {len(runs)} | {first['states']:,} | {first['transitions']:,} "
        f"| {first['depth']} "
        f"| {bool(first['fixpoint'])} | {bool(first['holds'])} | {median('seconds'):.1f} "
        f"| {median('cpu'):.1f} | {median('states') / median('cpu'):,.0f} "
        f"| {median('peak_mb'):,.0f} |"
    )


if __name__ == "__main__":
    sys.exit(main())
