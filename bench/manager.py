"""Benchmark: the reference manager's hot path and one scheduler step.

Two figures, each in stepped and threaded mode, no observer:

- resolved lookup (ns/op): ``lookup(key, request)`` of a key already RESOLVED
  for that request, the call a scheduler repeats every step for every waiting
  block.  Timed over ``--ops`` calls with ``time.perf_counter_ns``; the loop's
  own cost is included (it is printed apart).  A second row cycles through
  1,000 resolved keys so that the table does not sit in one cache line.
- step (us/step): ``drain_results()``, 1,000 lookups of new keys (8 requests
  of 125 keys), ``flush()``.  Stepped mode also runs the worker inside the
  step (``worker.run_pending()`` and a second drain), so the figure is the
  whole protocol's cost on one thread.  Threaded mode times the scheduler
  side while the worker thread runs concurrently, twice: back to back (the
  worker competes with the timed code for the GIL) and with a model-execution
  window between steps (``--window-ms``, untimed: the scheduler sleeps as an
  engine's does during the forward pass, which is when the worker works).
  After each timed step the step's requests are cleaned up, untimed, so the
  tables stay the same size.

Each figure is the median of ``--runs`` runs of the wall clock
(``time.perf_counter_ns``), with its range, and the median CPU time of the
calling thread (``time.thread_time_ns``), which a busy machine inflates less.
The tier is ``InMemoryTier``.  Usage (from the repository root)::

    .venv/bin/python bench/manager.py [--ops 1000000] [--steps 200] [--runs 7]
                                        [--window-ms 2]

This script measures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Literal, NoReturn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asynclookup.reference import AsyncLookupManager, InMemoryTier, RequestContext

Mode = Literal["stepped", "threaded"]
MODES: tuple[Mode, ...] = ("stepped", "threaded")
STEP_KEYS, STEP_REQUESTS = 1000, 8


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"bench/manager.py: {message}\n")


def resolved_manager(mode: Mode, keys: list[bytes], request: RequestContext) -> AsyncLookupManager:
    """A manager in which every key of ``keys`` is RESOLVED for ``request``.

    The keys are resolved by ``mark_present`` (a store), so no set-up waits on
    the worker thread; the probe it leaves is the same as a worker verdict's.
    """
    m = AsyncLookupManager(InMemoryTier(), mode=mode)
    for key in keys:
        m.lookup(key, request)
    m.mark_present(keys)
    m.flush()  # drops the superseded batch entries: the worker gets nothing
    assert all(m.lookup(key, request) is True for key in keys)
    return m


Timing = tuple[float, float]  # (wall clock, this thread's CPU time), per op or per step


def time_lookups(
    m: AsyncLookupManager, keys: list[bytes], request: RequestContext, ops: int
) -> Timing:
    """ns per lookup over ``ops`` calls cycling through ``keys``."""
    lookup = m.lookup
    sequence = keys * max(1, ops // len(keys))
    cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
    for key in sequence:
        lookup(key, request)
    wall, cpu = time.perf_counter_ns() - wall, time.thread_time_ns() - cpu
    return wall / len(sequence), cpu / len(sequence)


def time_empty_loop(ops: int) -> Timing:
    """ns per iteration of the same loop with no call in it."""
    sequence = [b"block"] * ops
    cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
    for _key in sequence:
        pass
    wall, cpu = time.perf_counter_ns() - wall, time.thread_time_ns() - cpu
    return wall / len(sequence), cpu / len(sequence)


def time_steps(mode: Mode, steps: int, window_ms: float = 0.0) -> Timing:
    """us per step: drain + 1,000 new-key lookups + flush (+ the worker when stepped).

    ``window_ms`` > 0 adds, untimed, a model-execution window after each step:
    the scheduler thread sleeps, as an engine's does while the GPU runs the
    forward pass, and the worker thread gets the GIL to itself meanwhile.
    """
    m = AsyncLookupManager(InMemoryTier(), mode=mode)
    per_request = STEP_KEYS // STEP_REQUESTS
    wall_total = cpu_total = 0
    for step in range(steps):
        requests = [RequestContext(f"s{step}-r{i}") for i in range(STEP_REQUESTS)]
        keys = [f"s{step}-k{i}".encode() for i in range(STEP_KEYS)]
        cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
        m.drain_results()  # the last step's results, as a scheduler step starts
        for i, key in enumerate(keys):
            m.lookup(key, requests[i // per_request])
        m.flush()
        if mode == "stepped":
            m.worker.run_pending()
            m.drain_results()
        wall_total += time.perf_counter_ns() - wall
        cpu_total += time.thread_time_ns() - cpu
        for request in requests:  # untimed: keep the tables the same size
            m.cleanup(request.req_id)
        if window_ms:
            time.sleep(window_ms / 1000)  # simulated forward pass, not synchronisation
    m.shutdown()
    return wall_total / steps / 1000, cpu_total / steps / 1000


def summarise(name: str, unit: str, runs: list[Timing]) -> str:
    """One markdown table row: median wall time, its range, median CPU time."""
    walls, cpus = [w for w, _ in runs], [c for _, c in runs]
    return (
        f"| {name} | {statistics.median(walls):,.0f} {unit} | "
        f"{min(walls):,.0f} to {max(walls):,.0f} | {statistics.median(cpus):,.0f} {unit} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--ops", type=int, default=1_000_000, help="lookups per run")
    parser.add_argument("--steps", type=int, default=200, help="steps per run")
    parser.add_argument("--runs", type=int, default=7, help="runs per figure (median)")
    parser.add_argument(
        "--window-ms", type=float, default=2.0,
        help="simulated forward pass between threaded steps (default 2 ms)",
    )
    args = parser.parse_args(argv)
    for name in ("ops", "steps", "runs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if not args.window_ms > 0:
        parser.error(f"--window-ms must be positive, got {args.window_ms}")
    runs: int = args.runs

    request = RequestContext("bench")
    one_key = [b"block-resolved"]
    many_keys = [f"block-{i}".encode() for i in range(1000)]
    print(f"python {sys.version.split()[0]}, median of {runs} runs (min to max)\n")
    print("| figure | wall, median | wall, range | CPU of the calling thread, median |")
    print("|---|---|---|---|")
    empty = [time_empty_loop(args.ops) for _ in range(runs)]
    print(summarise("empty loop (included below)", "ns/op", empty))
    for mode in MODES:
        for label, keys in (("1 key", one_key), ("1,000 keys round robin", many_keys)):
            m = resolved_manager(mode, keys, request)
            times = [time_lookups(m, keys, request, args.ops) for _ in range(runs)]
            m.shutdown()
            print(summarise(f"resolved lookup, {mode}, {label}", "ns/op", times))
    for mode, window in (("stepped", 0.0), ("threaded", 0.0), ("threaded", args.window_ms)):
        times = [time_steps(mode, args.steps, window) for _ in range(runs)]
        label = f"step of 1,000 new keys, {mode}"
        if mode == "threaded":
            label += f", {window:g} ms model window" if window else ", back to back"
        print(summarise(label, "us/step", times))
    return 0


if __name__ == "__main__":
    sys.exit(main())
