"""Benchmark: check-trace throughput and memory, side by side with the previous engine.

Subcommands (``all`` runs generate, ratio, engines, jobs and overhead in order):

- ``generate``: writes a long conforming trace by recording the reference in
  stepped mode (so ``worker_steps`` is true) on a loop of scheduler steps over
  16 keys and 4 requests, with cleanups, mark_miss, mark_present and drains,
  the worker run after every flush, and every ``IDLE_EVERY`` steps an idle
  point (every request cleaned up, results drained, a ``tables`` event of
  empty tables: a place ``check-trace --jobs`` may cut).  ``--vllm`` records
  the correct vLLM-shaped class from tests/zoo instead (threaded, in lockstep
  with its worker, hidden worker steps).  Deterministic but for the worker
  thread's timing in the vLLM case, which the lockstep pins.
- ``engines``: for each trace, the check's CPU time (``time.process_time``
  around ``check_lines``, imports excluded) and peak RSS, in child processes,
  of the engine at commit ``PREVIOUS`` (extracted with ``git archive`` into a
  temporary directory; the checkout is untouched) and of this one,
  alternating, ``--runs`` times each: median events/s, ratio, peak RSS.
- ``ratio``: for each trace, in child processes, alternating ``--runs`` times:
  a bare pass of ``json.loads`` on each line (the floor of issue 23) and the
  check with each parser (``--parsers json,orjson,msgspec``): median lines/s and
  events/s of CPU time, the ratio of each check to the bare pass, peak RSS;
  ``--no-engine`` adds the check with the last parser and the fast engine's
  steps replaced by ones that do nothing (reading and dispatch alone: a ratio
  no engine can pass with that parser).
- ``jobs``: one pass and ``asynclookup.trace.split.parallel`` with 2 processes
  (what ``check-trace --jobs 2`` runs), in child processes, alternating
  ``--runs`` times: median wall time, and the CPU time of the longest chunk
  (the wall time when each process has a core of its own).
- ``check``: ``python -m asynclookup.cli check-trace FILE`` in a child
  process: events/s and the child's peak RSS, per file.
- ``overhead``: the cost per call of recording, as CPU time of the calling
  thread (what the scheduler pays), median of ``--runs`` runs of ``--calls``
  calls: a lookup of a resolved key (two events recorded) and an empty flush
  (one event), with and without the recorder, for the reference (stepped,
  observer = ``TraceWriter.observer``) and the vLLM wrapper; and one
  ``TraceWriter.write`` alone.

Usage (from the repository root)::

    .venv/bin/python bench/trace.py all [--events 1000000] [--dir /tmp/traces] [--runs 3]

This script measures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
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
from asynclookup.reference.trace import TraceWriter, record_vllm  # noqa: E402
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


IDLE_EVERY = 500  # steps between idle points (about 9,500 events)


def _idle(manager: Any, writer: TraceWriter, run_worker: bool) -> None:
    """An idle moment of the engine: every request finished, every result drained; the
    recorder writes what the tables hold (nothing), a quiescent point to cut at."""
    manager.flush()
    if run_worker:
        manager.worker.run_pending()
    else:
        manager.settle()
    manager.drain_results()
    for request in REQUESTS:
        manager.cleanup(request.req_id)
    writer.write("tables", keys=[], requests=[])


def generate(out: Path, events: int, vllm: bool) -> int:
    """Record a conforming trace of at least ``events`` events, with an idle point every
    ``IDLE_EVERY`` steps; returns the count.  Deterministic in the reference's case
    (stepped); the vLLM-shaped one is threaded, in lockstep, so the same up to the
    worker thread's name."""
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
                if i % IDLE_EVERY == 0:
                    _idle(manager, recorder.writer, run_worker=False)
            manager.shutdown()
            return recorder.writer.events_written
    with TraceWriter(
        out, recorder="asynclookup reference (observer)", worker_steps=True
    ) as writer:
        reference = AsyncLookupManager(tier, mode="stepped", observer=writer.observer)
        i = 0
        while writer.events_written < events:
            _step(reference, i, run_worker=True)
            i += 1
            if i % IDLE_EVERY == 0:
                _idle(reference, writer, run_worker=True)
        reference.shutdown()
        return writer.events_written


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


PREVIOUS = "c45d468"  # the commit whose engine the new one is measured against

# One check in a child process: the engine of the package under ``root``, the CPU time
# of the check alone (imports excluded), and the child's peak RSS.
_CHILD = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from asynclookup.trace.check import check_lines
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with open(sys.argv[2], "rb") as f:
    started = time.process_time()
    outcome = check_lines(f)
    cpu = time.process_time() - started
print(json.dumps({"events": outcome.events, "cpu": cpu, "result": outcome.result,
                  "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "import_rss_kib": base, "max_states": outcome.max_states}))
"""


def previous_tree(into: Path) -> Path:
    """The package as it was at ``PREVIOUS``, extracted under ``into`` (git state untouched)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", PREVIOUS, "asynclookup"],
        check=True, capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _child_check(root: Path, path: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(root), str(path)], cwd=root,
        check=True, capture_output=True, text=True,
    )
    figures: dict[str, Any] = json.loads(done.stdout)
    return figures


def engines(paths: list[Path], runs: int) -> list[str]:
    """The previous engine and this one on each trace, alternating, ``runs`` times each:
    median CPU events/s, the ratio, peak RSS; one markdown row per trace."""
    rows = []
    with tempfile.TemporaryDirectory() as d:
        old_root = previous_tree(Path(d))
        for path in paths:
            samples: dict[str, list[dict[str, Any]]] = {"previous": [], "new": []}
            for _ in range(runs):
                for name, root in (("previous", old_root), ("new", ROOT)):
                    samples[name].append(_child_check(root, path))
            rates = {
                name: statistics.median(s["events"] / s["cpu"] for s in got)
                for name, got in samples.items()
            }
            peaks = {name: max(s["rss_kib"] for s in got) / 1024 for name, got in samples.items()}
            base = min(s["import_rss_kib"] for s in samples["new"]) / 1024
            new = samples["new"][0]
            results = {s["result"] for got in samples.values() for s in got}
            rows.append(
                f"| {path.name} | {new['events']:,} | {rates['previous']:,.0f} | "
                f"{rates['new']:,.0f} | {rates['new'] / rates['previous']:.1f} | "
                f"{peaks['previous']:.1f} | {peaks['new']:.1f} ({base:.1f} after imports) | "
                f"{new['max_states']} | {'/'.join(sorted(results))} |"
            )
            print(rows[-1], flush=True)
    return rows


# One check in a child process with N processes: wall seconds, CPU seconds of each chunk.
_JOBS_CHILD = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from asynclookup.trace.check import check_lines
from asynclookup.trace.split import parallel
path, n = Path(sys.argv[2]), int(sys.argv[3])
started, cpu = time.perf_counter(), time.process_time()
if n == 1:
    with path.open("rb") as f:
        outcome, chunks = check_lines(f), 1
    outcome.chunk_cpu = [time.process_time() - cpu]
else:
    outcome, chunks = parallel(path, n)
print(json.dumps({"wall": time.perf_counter() - started, "chunk_cpu": outcome.chunk_cpu,
                  "chunks": chunks, "result": outcome.result, "events": outcome.events}))
"""


def jobs(path: Path, runs: int, counts: tuple[int, ...] = (1, 2)) -> list[str]:
    """One pass and ``parallel(path, N)`` in a child, alternating: median wall time, and the
    CPU time of the longest chunk (what the wall time is on free cores)."""
    rows = []
    got: dict[int, list[dict[str, Any]]] = {n: [] for n in counts}
    for _ in range(runs):
        for n in counts:
            done = subprocess.run(
                [sys.executable, "-c", _JOBS_CHILD, str(ROOT), str(path), str(n)],
                cwd=ROOT, check=True, capture_output=True, text=True,
            )
            got[n].append(json.loads(done.stdout))
    wall = {n: statistics.median(s["wall"] for s in got[n]) for n in counts}
    longest = {n: statistics.median(max(s["chunk_cpu"]) for s in got[n]) for n in counts}
    one = counts[0]
    for n in counts:
        sample = got[n][0]
        rows.append(
            f"| {path.name} | {n} | {sample['chunks']} | {wall[n]:.1f} | "
            f"{wall[one] / wall[n]:.2f} | {longest[n]:.1f} | {longest[one] / longest[n]:.2f} | "
            f"{sample['result']} |"
        )
        print(rows[-1], flush=True)
    return rows


# One pass in a child process: ``json.loads`` on each line (the floor the checker is
# measured against), or the check with a parser; CPU seconds and the child's peak RSS.
_RATIO_CHILD = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from asynclookup.trace.check import check_lines
what, path = sys.argv[2], sys.argv[3]
if what.startswith("noengine:"):  # the fast engine's steps do nothing: reading and dispatch alone
    from asynclookup.observe.fast import FastChecker
    live = {"": set()}  # a request always live, as in the trace: no quiescent point, no restart
    def nothing(self, *args, **kwargs):
        self.index = live
    for step in ("lookup", "flush", "drain", "cleanup", "take_batch", "post", "answered",
                 "tier_call", "mark_miss", "mark_present", "tables"):
        setattr(FastChecker, step, nothing)
    what = what[len("noengine:"):]
with open(path, "rb") as f:
    started = time.process_time()
    if what == "loads":
        n = 0
        for line in f:
            json.loads(line)
            n += 1
        result, events = "parsed", n - 1
    else:
        outcome = check_lines(f, parser=what)
        result, events = outcome.result, outcome.events
    cpu = time.process_time() - started
print(json.dumps({"events": events, "cpu": cpu, "result": result,
                  "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def ratio(
    paths: list[Path], runs: int, parsers: tuple[str, ...], no_engine: bool = False
) -> list[str]:
    """For each trace, in child processes, alternating ``runs`` times: a bare pass of
    ``json.loads`` on each line and the check with each parser.  Median lines/s and
    events/s (CPU time), the ratio of each check's median to the bare pass's, peak RSS.
    ``no_engine``: also the check with the last parser and the fast engine's steps replaced by
    ones that do nothing (the reading, the inline loop and the dispatch alone: the ratio
    no engine can pass on that file with that parser)."""
    rows = []
    for path in paths:
        extra = (f"noengine:{parsers[-1]}",) if no_engine else ()
        got: dict[str, list[dict[str, Any]]] = {w: [] for w in ("loads", *parsers, *extra)}
        for _ in range(runs):
            for what in got:
                done = subprocess.run(
                    [sys.executable, "-c", _RATIO_CHILD, str(ROOT), what, str(path)],
                    cwd=ROOT, check=True, capture_output=True, text=True,
                )
                got[what].append(json.loads(done.stdout))
        rate = {w: statistics.median(s["events"] / s["cpu"] for s in got[w]) for w in got}
        cells = [f"{rate['loads']:,.0f}"]
        for parser in parsers:
            peak = max(s["rss_kib"] for s in got[parser]) / 1024
            cells += [f"{rate[parser]:,.0f}", f"**{rate[parser] / rate['loads']:.2f}**",
                      f"{peak:.1f}"]
        for what in extra:
            cells += [f"{rate[what]:,.0f}", f"{rate[what] / rate['loads']:.2f}"]
        results = "/".join(sorted({s["result"] for p in parsers for s in got[p]}))
        rows.append(f"| {path.name} | {got['loads'][0]['events']:,} | {' | '.join(cells)} | "
                    f"{results} |")
        print(rows[-1], flush=True)
    return rows


def ratio_head(parsers: tuple[str, ...], no_engine: bool = False) -> str:
    cells = "".join(
        f" check, {p} (events/s) | ratio | peak RSS {p} (MiB) |" for p in parsers
    )
    more = f" no engine steps, {parsers[-1]} (events/s) | ratio |" if no_engine else ""
    aligned = "---:|---:|---:|" * len(parsers) + ("---:|---:|" if no_engine else "")
    return (f"| trace | events | json.loads per line (lines/s) |{cells}{more} result |\n"
            f"|---|---:|---:|{aligned}---|")


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


ENGINES_HEAD = (
    f"| trace | events | {PREVIOUS} engine (events/s) | this engine (events/s) | ratio | "
    f"peak RSS {PREVIOUS} (MiB) | peak RSS now (MiB) | max states now | result |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---|"
)
JOBS_HEAD = (
    "| trace | jobs | chunks | wall s (median) | speed-up | CPU s of the longest chunk "
    "(median) | speed-up on free cores | result |\n|---|---:|---:|---:|---:|---:|---:|---|"
)


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
    e = sub.add_parser("engines", help="the previous engine and this one, side by side")
    e.add_argument("files", type=Path, nargs="+")
    e.add_argument("--runs", type=int, default=3)
    r = sub.add_parser("ratio", help="the check against json.loads on each line, side by side")
    r.add_argument("files", type=Path, nargs="+")
    r.add_argument("--runs", type=int, default=5)
    r.add_argument("--parsers", default="json,orjson,msgspec",
                   help="comma-separated parsers to check with (default: all three)")
    r.add_argument("--no-engine", action="store_true",
                   help="also the check with the engine's steps doing nothing (last parser)")
    j = sub.add_parser("jobs", help="one pass and 2 processes: wall and CPU time")
    j.add_argument("file", type=Path)
    j.add_argument("--runs", type=int, default=3)
    a = sub.add_parser("all")
    a.add_argument("--events", type=int, default=1_000_000)
    a.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "asynclookup-traces")
    a.add_argument("--runs", type=int, default=3)
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
    elif args.command == "engines":
        print(ENGINES_HEAD)
        engines(args.files, args.runs)
    elif args.command == "ratio":
        parsers = tuple(args.parsers.split(","))
        print(ratio_head(parsers, args.no_engine))
        ratio(args.files, args.runs, parsers, args.no_engine)
    elif args.command == "jobs":
        print(JOBS_HEAD)
        jobs(args.file, args.runs)
    elif args.command == "overhead":
        print("| recorder | lookup plain (us) | lookup recorded | overhead | "
              "flush plain (us) | flush recorded | overhead |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        print("\n".join(overhead(args.calls, args.runs)))
    else:
        args.dir.mkdir(parents=True, exist_ok=True)
        reference = args.dir / f"reference-{args.events}.jsonl"
        vllm = args.dir / f"vllm-{args.events // 10}.jsonl"
        generate(reference, args.events, vllm=False)
        generate(vllm, args.events // 10, vllm=True)
        print(ratio_head(("json", "orjson", "msgspec")))
        ratio([reference, vllm], args.runs, ("json", "orjson", "msgspec"))
        print(ENGINES_HEAD)
        engines([reference, vllm], args.runs)
        print(JOBS_HEAD)
        jobs(reference, args.runs)
        subprocess.run([sys.executable, __file__, "overhead"], check=False)


if __name__ == "__main__":
    main()
