"""Benchmark: check-trace throughput and memory, and the recorders' overhead per call.

Three parts, each a subcommand (``all`` runs them in order):

- ``generate``: writes a long conforming trace by recording the reference in
  stepped mode (so ``worker_steps`` is true) on a loop of scheduler steps over
  16 keys and 4 requests, with cleanups, mark_miss, mark_present and drains,
  and the worker run after every flush.  ``--vllm`` records the correct
  vLLM-shaped class from tests/zoo instead (threaded, hidden worker steps).
- ``check``: runs ``python -m asynclookup.cli check-trace FILE`` in a child process and
  reports events/s and the child's peak RSS (``resource.getrusage``), for
  each of the given files, so that traces of growing length show whether
  memory grows with the trace.
- ``overhead``: the cost per call of recording, as CPU time of the calling
  thread (what the scheduler pays), median of ``--runs`` runs of ``--calls``
  calls: a lookup of a resolved key (two events recorded) and an empty flush
  (one event), with and without the recorder, for the reference (stepped,
  observer = ``TraceWriter.observer``) and the vLLM wrapper; and one
  ``TraceWriter.write`` alone.

Usage (from the repository root)::

    .venv/bin/python bench/trace.py all [--events 1000000] [--dir /tmp/traces]

This script measures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from asynclookup.reference.manager import AsyncLookupManager  # noqa: E402
from asynclookup.reference.tier import InMemoryTier, RequestContext  # noqa: E402
from asynclookup.reference.trace import TraceWriter, record_trace, record_vllm  # noqa: E402
from tests.zoo.vllm_shaped import BatchEntry, VllmShapedManager  # noqa: E402

KEYS = [b"key-%02d" % i for i in range(16)]
REQUESTS = [RequestContext(f"req-{i}") for i in range(4)]


def _step(manager: Any, i: int, run_worker: bool) -> None:
    """One scheduler step of the generator's loop (deterministic in ``i``)."""
    request = REQUESTS[i % 4]
    for j in range(4):
        manager.lookup(KEYS[(i * 5 + j) % 16], request)
    if i % 7 == 0:
        manager.mark_miss([KEYS[i % 16]])
    if i % 11 == 0:
        manager.mark_present([KEYS[(i + 3) % 16]])
    manager.flush()
    if run_worker:
        manager.worker.run_pending()
    elif isinstance(manager, Lockstep):
        manager.settle()
    if i % 3 == 0:
        manager.drain_results()
    manager.cleanup(REQUESTS[(i + 2) % 4].req_id)


class Lockstep(VllmShapedManager):
    """The correct vLLM-shaped class on a tier, and a wait until its worker posted.

    The wait stands for the model-execution window of an engine step, during
    which the worker works; without it the worker lags arbitrarily far behind
    (the GIL) and the checker has to consider every place of every hidden post.
    """

    def __init__(self, tier: InMemoryTier) -> None:
        self.tier = tier
        self.submitted = self.posts = 0
        self.posted = threading.Condition()
        super().__init__("memory")
        self._pending_results = _Counting(self)

    def batch_lookup(self, keys: list[bytes], req_context: Any) -> Any:
        return self.tier.batch_lookup(keys, req_context)

    def _revalidate(self, batch: list[BatchEntry]) -> list[BatchEntry]:
        kept = super()._revalidate(batch)
        self.submitted += bool(kept)
        return kept

    def settle(self) -> None:
        """Wait (bounded) until the worker posted every submitted batch.

        Not inside ``flush``: the recorder holds its lock across a recorded call,
        and the worker needs that lock to write its tier-call lines.
        """
        with self.posted:
            self.posted.wait_for(lambda: self.posts >= self.submitted, 5.0)


class _Counting(queue.SimpleQueue[Any]):
    def __init__(self, owner: Lockstep) -> None:
        self.owner = owner

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        super().put(item, block, timeout)
        with self.owner.posted:
            self.owner.posts += 1
            self.owner.posted.notify_all()


def generate(out: Path, events: int, vllm: bool) -> int:
    """Record a conforming trace of at least ``events`` events; returns the count."""
    tier = InMemoryTier()
    for key in KEYS[::3]:
        tier.store(key)
    if vllm:
        manager = Lockstep(tier)
        with record_vllm(manager, out) as recorder:
            i = 0
            while recorder.writer.events_written < events:
                _step(manager, i, run_worker=False)
                i += 1
            manager.shutdown()
            return recorder.writer.events_written
    counted = _Counter()
    with record_trace(out, tier, mode="stepped", observer=counted) as reference:
        i = 0
        while counted.n < events:
            _step(reference, i, run_worker=True)
            i += 1
    return counted.n + 1  # the shutdown


class _Counter:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self, event: object) -> None:
        self.n += 1


def check(path: Path) -> dict[str, float]:
    """Check ``path`` in a child process: wall seconds, events/s, peak RSS (MiB), exit code."""
    with path.open("rb") as f:
        lines = sum(1 for _ in f) - 1
    started = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "asynclookup.cli", "check-trace", str(path)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage
    child.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    return {
        "events": lines, "seconds": seconds, "events_per_s": lines / seconds,
        "peak_rss_mib": usage.ru_maxrss / 1024, "exit": child.returncode,
    }


def _per_call_ns(call: Any, n: int, runs: int) -> float:
    """Median over ``runs`` of the calling thread's CPU time per call, in ns."""
    samples = []
    for _ in range(runs):
        started = time.thread_time_ns()
        for _ in range(n):
            call()
        samples.append((time.thread_time_ns() - started) / n)
    return statistics.median(samples)


def overhead(calls: int, runs: int) -> list[str]:
    """Per-call cost of recording on the calling thread: a resolved lookup, a flush.

    The calling thread's CPU time (``time.thread_time_ns``) is what the
    scheduler pays; it is steadier than wall time on a shared machine.
    """
    rows = []
    tier = InMemoryTier()
    tier.store(b"k")
    request = RequestContext("r")
    with tempfile.TemporaryDirectory() as d:
        for name in ("reference (observer)", "vLLM wrapper"):
            figures: list[tuple[float, float]] = []
            for record in (False, True):
                path = Path(d) / f"{len(figures)}.jsonl"
                writer = TraceWriter(path, recorder="bench", worker_steps=True)
                if name.startswith("reference"):
                    manager: Any = AsyncLookupManager(
                        tier, mode="stepped", observer=writer.observer if record else None
                    )
                    recorder = None
                else:
                    manager = Lockstep(tier)
                    recorder = record_vllm(manager, path) if record else None
                if recorder is not None:
                    recorder.__enter__()
                manager.lookup(b"k", request)  # resolve k, so that lookups are the hot path
                manager.flush()
                if isinstance(manager, Lockstep):
                    manager.settle()
                else:
                    manager.worker.run_pending()
                manager.flush()
                lookup = _per_call_ns(lambda m=manager: m.lookup(b"k", request), calls, runs)
                flush = _per_call_ns(manager.flush, calls, runs)
                manager.shutdown()
                if recorder is not None:
                    recorder.__exit__(None, None, None)
                writer.close()
                figures.append((lookup, flush))
            (plain_lookup, plain_flush), (traced_lookup, traced_flush) = figures
            rows.append(
                f"| {name} | {plain_lookup / 1000:.2f} | {traced_lookup / 1000:.2f} | "
                f"{(traced_lookup - plain_lookup) / 1000:.2f} | {plain_flush / 1000:.2f} | "
                f"{traced_flush / 1000:.2f} | {(traced_flush - plain_flush) / 1000:.2f} |"
            )
    with tempfile.TemporaryDirectory() as d:
        writer = TraceWriter(Path(d) / "w.jsonl", recorder="bench", worker_steps=False)
        write = _per_call_ns(
            lambda: writer.write("lookup_returned", key="6b", request="r", verdict=True),
            calls, runs,
        )
        writer.close()
    rows.append(f"| TraceWriter.write alone (one event) | | {write / 1000:.2f} | | | | |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate")
    g.add_argument("out", type=Path)
    g.add_argument("--events", type=int, default=1_000_000)
    g.add_argument("--vllm", action="store_true")
    c = sub.add_parser("check")
    c.add_argument("files", type=Path, nargs="+")
    o = sub.add_parser("overhead")
    o.add_argument("--calls", type=int, default=20000)
    o.add_argument("--runs", type=int, default=7)
    a = sub.add_parser("all")
    a.add_argument("--events", type=int, default=1_000_000)
    a.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "asynclookup-traces")
    args = parser.parse_args()
    if args.command == "generate":
        started = time.perf_counter()
        n = generate(args.out, args.events, args.vllm)
        print(f"{args.out}: {n} events in {time.perf_counter() - started:.1f} s, "
              f"{os.path.getsize(args.out) / 2**20:.1f} MiB")
    elif args.command == "check":
        print("| trace | events | seconds | events/s | peak RSS (MiB) | exit |")
        print("|---|---:|---:|---:|---:|---:|")
        for path in args.files:  # one child each: RUSAGE_CHILDREN's max is per process tree
            figures = check(path)
            print(f"| {path.name} | {figures['events']:,.0f} | {figures['seconds']:.1f} | "
                  f"{figures['events_per_s']:,.0f} | {figures['peak_rss_mib']:.1f} | "
                  f"{figures['exit']:.0f} |", flush=True)
    elif args.command == "overhead":
        print("| recorder | lookup plain (us) | lookup recorded | overhead | "
              "flush plain (us) | flush recorded | overhead |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        print("\n".join(overhead(args.calls, args.runs)))
    else:
        args.dir.mkdir(parents=True, exist_ok=True)
        sizes = sorted({args.events // 10, args.events // 3, args.events})
        for n in sizes:
            generate(args.dir / f"reference-{n}.jsonl", n, vllm=False)
        generate(args.dir / f"vllm-{args.events // 10}.jsonl", args.events // 10, vllm=True)
        files = [args.dir / f"reference-{n}.jsonl" for n in sizes]
        files.append(args.dir / f"vllm-{args.events // 10}.jsonl")
        subprocess.run([sys.executable, __file__, "check", *map(str, files)], check=False)
        subprocess.run([sys.executable, __file__, "overhead"], check=False)


if __name__ == "__main__":
    main()
