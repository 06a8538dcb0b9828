"""Fuzzing campaigns that outgrow one process: N workers, one example database, one report.

``run_campaign(Campaign(config, workers=4, duration=600, db="redis://..."))`` runs
the oracle's machine (``asynclookup.conformance.machine.run``) in ``workers``
processes at once, each with its own seed (``seed``, ``seed + 1``, ...), all
sharing the example database ``db`` (a directory or a ``redis://`` URL, as
``--db`` takes), and returns one ``Outcome``:

- the first violation any worker finds stops the others; it is shrunk once,
  here in the parent, and reported once (the workers run unshrunk, so
  Hypothesis saves the failing example to the shared database as found);
- the counts add up over the workers: ``--examples`` is the campaign's total,
  split among them; ``duration`` stops every worker at the same deadline
  (with both, whichever comes first);
- a worker that dies (``kill -9``, the OOM killer) is noticed when its pipe
  closes: the run goes on with the others and the outcome names the dead
  worker, its seed, the signal and what it had done; the CLI then exits 3
  (incomplete) unless another worker found a violation (1).

One worker runs in this process, as ``asynclookup fuzz`` always did.  Several
are fresh interpreters (``python -c WORKER_CODE``: no fork of a process that
has threads, and no re-import of the caller's ``__main__``) with two pipes
each, ``multiprocessing.connection`` on both ends: the job and then ``stop``
go in; counts every ``REPORT_EVERY`` seconds, and one last message, come out.
``render`` writes the text of the live line (``asynclookup._cli.LiveLine``) from those counts.

It does not judge or shrink by itself (``machine`` and ``replay`` do), print a
report (``asynclookup.conformance.cli`` does), or restart a dead worker.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing.connection
import os
import random
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from typing import Any

from hypothesis.control import current_build_context
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase
from hypothesis.errors import InvalidArgument

from asynclookup._cli import parse_duration, parse_workers
from asynclookup.conformance.driver import ConformanceError
from asynclookup.conformance.machine import FuzzConfig, Stats, conformance_error_in, run
from asynclookup.conformance.replay import shrink
from asynclookup.observe.interface import OracleLimitError

REDIS_KEY_PREFIX = b"asynclookup-fuzz:"  # the keys of --db redis://... (HypoFuzz's too)
REPORT_EVERY = 0.2  # seconds between two progress messages of a worker
STOP_GRACE = 15.0  # seconds a stopped worker has to end before it is killed
UNBOUNDED = 10**9  # max_examples of a run that only a duration stops


class _Stopped(KeyboardInterrupt):
    """Raised inside a run when the campaign says stop.

    A KeyboardInterrupt, because that is the one exception Hypothesis lets
    through without saving the example it cut short: any other BaseException
    is saved to the database as a failure, and a stopped worker would leave in
    the shared database an example that does not fail, ahead of the one that
    does (a later ``--examples 1`` run replays only the first).
    """


def _may_stop() -> bool:
    """Not while Hypothesis replays a failure it found (its final run): that one counts,
    and a replay cut short would read to Hypothesis as flaky data generation."""
    try:
        return not current_build_context().is_final
    except InvalidArgument:  # no test is running
        return True


def _was_stopped(exc: BaseException) -> bool:
    """Whether ``exc`` is, or was raised while handling, a ``_Stopped``."""
    seen: set[int] = set()
    found: BaseException | None = exc
    while found is not None and id(found) not in seen:
        if isinstance(found, _Stopped):
            return True
        seen.add(id(found))
        found = found.__cause__ or found.__context__
    return False


def open_database(where: str) -> ExampleDatabase:
    """The example database ``where`` names (a directory or a Redis URL), unchecked."""
    if where.startswith(("redis://", "rediss://", "unix://")):
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase

        client = redis.Redis.from_url(where, socket_timeout=5.0, socket_connect_timeout=2.0)
        return RedisExampleDatabase(client, key_prefix=REDIS_KEY_PREFIX)
    return DirectoryBasedExampleDatabase(where)


@dataclass(frozen=True)
class Campaign:
    """What to run: the configuration, over how many workers, for how long."""

    config: FuzzConfig
    workers: int = 1
    examples: int | None = 200  # the total over all workers (None: only duration stops)
    duration: float | None = None  # seconds
    seed: int | None = None  # worker i uses seed + i (None: a random base, reported)
    db: str | None = None  # --db: a directory or a redis:// URL
    steps: int = 50
    shrink_budget: float = 20.0

    def seeds(self) -> list[int | None]:
        """Each worker's seed; one worker keeps ``seed`` as it is (None: Hypothesis picks)."""
        if self.workers == 1:
            return [self.seed]
        base = self.seed if self.seed is not None else random.SystemRandom().randrange(2**31)
        return [base + i for i in range(self.workers)]

    def shares(self) -> list[int]:
        """Each worker's examples: the total split as evenly as it goes."""
        if self.examples is None:
            return [UNBOUNDED] * self.workers
        whole, extra = divmod(self.examples, self.workers)
        return [whole + (i < extra) for i in range(self.workers)]


@dataclass
class Progress:
    """The campaign so far, for the live line."""

    examples: int
    steps: int
    alive: int
    workers: int
    elapsed: float
    pids: tuple[int, ...] = ()  # the worker processes still running (none in-process)
    total: int | None = None  # examples asked for, if a count bounds the run
    duration: float | None = None

    @property
    def rate(self) -> float:
        return self.steps / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def fraction(self) -> float | None:
        """How far it is, by examples or by time, whichever is further (None: unknown)."""
        parts = []
        if self.total:
            parts.append(self.examples / self.total)
        if self.duration:
            parts.append(self.elapsed / self.duration)
        return min(1.0, max(parts)) if parts else None


@dataclass
class WorkerReport:
    """One worker: its seed and process, what it did, and how it ended."""

    index: int
    seed: int | None
    pid: int | None = None
    examples: int = 0
    steps: int = 0
    status: str = "running"  # done | stopped | found | limit | error | lost
    exitcode: int | None = None

    def lost_line(self) -> str:
        """One line saying how this worker died and what it had done."""
        code = self.exitcode
        how = (f"was killed by {signal.Signals(-code).name}" if code is not None and code < 0
               else f"exited with code {code} without a report")
        return (f"worker {self.index} (seed {self.seed}, pid {self.pid}) {how} after "
                f"{self.examples:,} examples, {self.steps:,} steps; the other workers went on")


@dataclass
class Outcome:
    """What a campaign found, with its combined counts (``stats``) and each worker."""

    stats: Stats
    seconds: float
    workers: list[WorkerReport]
    error: ConformanceError | None = None
    limit: str | None = None  # the oracle's bound was exceeded (OracleLimitError)
    failure: str | None = None  # a worker's traceback: it crashed inside the oracle

    @property
    def lost(self) -> list[str]:
        return [w.lost_line() for w in self.workers if w.status == "lost"]

    def summary(self) -> str:
        """One line on the workers, for the text report (empty for one worker)."""
        if len(self.workers) == 1:
            return ""
        seeds = ", ".join(str(w.seed) for w in self.workers)
        counts = " + ".join(f"{w.examples:,}" for w in self.workers)
        return f"  {len(self.workers)} workers (seeds {seeds}): {counts} examples"

    def as_json(self) -> dict[str, Any]:
        """The campaign's part of ``--json``: each worker and the ones lost."""
        return {
            "workers": [
                {"seed": w.seed, "pid": w.pid, "examples": w.examples, "steps": w.steps,
                 "status": w.status} for w in self.workers
            ],
            "lost_workers": self.lost,
        }


def run_campaign(
    campaign: Campaign,
    *,
    database: ExampleDatabase | None = None,
    progress: Callable[[Progress], None] | None = None,
) -> Outcome:
    """Run the campaign; never raises a finding, it is in the outcome.

    ``database`` is the opened ``campaign.db`` for the one-worker case (workers
    open their own from ``campaign.db``); ``progress`` is called often, from
    this thread.
    """
    if campaign.examples is not None and campaign.workers > campaign.examples:
        campaign = replace(campaign, workers=campaign.examples)  # none without a share
    if campaign.workers == 1:
        return _in_process(campaign, database, progress)
    return _Pool(campaign, progress).run()


def _in_process(
    campaign: Campaign, database: ExampleDatabase | None,
    progress: Callable[[Progress], None] | None,
) -> Outcome:
    started = time.monotonic()
    deadline = started + campaign.duration if campaign.duration else None
    worker = WorkerReport(0, campaign.seeds()[0], status="done")

    last = [0.0]

    def on_step(stats: Stats) -> None:
        now = time.monotonic()
        if now - last[0] < REPORT_EVERY / 4:
            return
        last[0] = now
        if deadline is not None and now >= deadline and _may_stop():
            raise _Stopped
        if progress is not None:
            progress(Progress(stats.examples, stats.steps, 1, 1, now - started,
                              total=campaign.examples, duration=campaign.duration))

    stats = Stats(on_step=on_step if progress is not None or deadline is not None else None)
    outcome = Outcome(stats, 0.0, [worker])
    try:
        run(campaign.config, examples=campaign.shares()[0], seed=worker.seed,
            database=database, steps=campaign.steps, stats=stats,
            shrink_budget=campaign.shrink_budget)
    except _Stopped:
        worker.status = "stopped"
    except ConformanceError as found:
        outcome.error, worker.status = found, "found"
    except OracleLimitError as exc:
        outcome.limit, worker.status = str(exc), "limit"
    except BaseExceptionGroup as group:  # threaded: Hypothesis reports a flaky failure
        outcome.error = conformance_error_in(group)
        if outcome.error is None:
            raise
        worker.status = "found"
    except Exception as exc:
        if not _was_stopped(exc):
            raise
        worker.status = "stopped"
    stats.on_step = None
    worker.examples, worker.steps = stats.examples, stats.steps
    outcome.seconds = time.monotonic() - started
    return outcome


# -- several processes ---------------------------------------------------------------


@dataclass(frozen=True)
class _Job:
    """What one worker process runs (pickled to it, with the parent's ``sys.path``)."""

    config: FuzzConfig
    examples: int
    seed: int | None
    db: str | None
    steps: int
    path: tuple[str, ...]


WORKER_CODE = "from asynclookup.conformance.campaign import worker_main; worker_main()"


def worker_main() -> None:
    """A worker process: ``python -c WORKER_CODE IN_FD OUT_FD``.  It reads its job from
    IN_FD, runs it unshrunk, sends counts on OUT_FD, and ends with one message on
    how the run ended; a ``stop`` on IN_FD ends the run at its next report."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the parent stops the workers
    inbox = Connection(int(sys.argv[1]), writable=False)
    outbox = Connection(int(sys.argv[2]), readable=False)
    job = inbox.recv()
    assert isinstance(job, _Job)
    sys.path[:] = list(job.path)
    last = [0.0]

    def on_step(stats: Stats) -> None:
        now = time.monotonic()
        if now - last[0] >= REPORT_EVERY:
            last[0] = now
            outbox.send(("progress", stats.examples, stats.steps))
            if inbox.poll() and _may_stop():
                raise _Stopped

    stats = Stats(on_step=on_step)
    end: tuple[Any, ...]
    try:
        database = open_database(job.db) if job.db is not None else None
        run(job.config, examples=job.examples, seed=job.seed, database=database,
            steps=job.steps, stats=stats, shrink_budget=0.0)
        end = ("done",)
    except _Stopped:
        end = ("stopped",)
    except ConformanceError as found:
        end = ("found", found.violation, found.calls, found.config)
    except OracleLimitError as exc:
        end = ("limit", str(exc))
    except BaseException as exc:
        end = ("stopped",) if _was_stopped(exc) else ("error", traceback.format_exc())
    counts = {"examples": stats.examples, "steps": stats.steps, "warnings": stats.warnings,
              "leak_check": stats.leak_check, "not_generated": stats.not_generated}
    outbox.send((*end, counts))
    outbox.close()


class _Pool:
    """The parent's side: start the workers, read their pipes, stop them, add up."""

    def __init__(self, campaign: Campaign, progress: Callable[[Progress], None] | None):
        self.campaign = campaign
        self.progress = progress
        self.reports = [WorkerReport(i, s) for i, s in enumerate(campaign.seeds())]
        self.procs: list[subprocess.Popen[bytes]] = []
        self.inboxes: list[Connection] = []  # parent -> worker: the job, then ``stop``
        self.conns: dict[Connection, WorkerReport] = {}  # worker -> parent, while open
        self.ends: dict[int, tuple[Any, ...]] = {}
        self.stopped = False
        self.found: tuple[Any, ...] | None = None
        self.found_after: float | None = None
        self.started = time.monotonic()

    def run(self) -> Outcome:
        stats = Stats(started=self.started)
        outcome = Outcome(stats, 0.0, self.reports)
        try:
            self._start()
            self._watch(outcome)
        finally:
            self._stop()
            self._reap()
        for report in self.reports:
            counts = self.ends.get(report.index, (None,))[-1]
            if isinstance(counts, dict):
                stats.warnings.extend(counts["warnings"])
                if stats.leak_check is None:
                    stats.leak_check = counts["leak_check"]
                    stats.not_generated = counts["not_generated"]
        stats.examples = sum(r.examples for r in self.reports)
        stats.steps = sum(r.steps for r in self.reports)
        if self.found is not None:
            stats.found_after = self.found_after
            _, violation, calls, config = self.found[:4]
            outcome.error = ConformanceError(violation, calls, config)
            if self.campaign.shrink_budget > 0:
                quiet = logging.root.manager.disable  # the IUT's warnings, as in machine.run
                logging.disable(logging.WARNING)
                try:
                    outcome.error = shrink(outcome.error, self.campaign.shrink_budget)
                finally:
                    logging.disable(quiet)
        outcome.seconds = time.monotonic() - self.started
        return outcome

    def _start(self) -> None:
        c = self.campaign
        path = tuple(os.path.abspath(p) if p else os.getcwd() for p in sys.path)
        for report, examples in zip(self.reports, c.shares(), strict=True):
            job_read, job_write = os.pipe()
            out_read, out_write = os.pipe()
            proc = subprocess.Popen(
                [sys.executable, "-c", WORKER_CODE, str(job_read), str(out_write)],
                pass_fds=(job_read, out_write), stdin=subprocess.DEVNULL,
            )
            os.close(job_read)
            os.close(out_write)  # the worker holds the only write end: EOF means it is gone
            inbox = Connection(job_write, readable=False)
            inbox.send(_Job(c.config, examples, report.seed, c.db, c.steps, path))
            report.pid = proc.pid
            self.procs.append(proc)
            self.inboxes.append(inbox)
            self.conns[Connection(out_read, writable=False)] = report

    def _stop(self) -> None:
        """Tell every worker to stop at its next report (once)."""
        if self.stopped:
            return
        self.stopped = True
        for inbox in self.inboxes:
            with contextlib.suppress(OSError):  # a dead worker's pipe is broken
                inbox.send("stop")

    def _watch(self, outcome: Outcome) -> None:
        """Read messages until every pipe is closed; stop all at the deadline or a finding."""
        c = self.campaign
        deadline = self.started + c.duration if c.duration else None
        while self.conns:
            timeout = 0.25 if deadline is None else max(0.0, min(0.25, deadline - _now()))
            for conn in multiprocessing.connection.wait(list(self.conns), timeout):
                assert isinstance(conn, Connection)
                self._read(conn, outcome)
            if deadline is not None and _now() >= deadline:
                self._stop()
            if self.progress is not None:
                alive = [r for r in self.reports if r.status == "running"]
                self.progress(Progress(
                    sum(r.examples for r in self.reports), sum(r.steps for r in self.reports),
                    len(alive), len(self.reports), _now() - self.started,
                    tuple(r.pid for r in alive if r.pid is not None), c.examples, c.duration,
                ))

    def _read(self, conn: Connection, outcome: Outcome) -> None:
        report = self.conns[conn]
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the worker is gone; did it say how it ended?
            del self.conns[conn]
            conn.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                report.exitcode = self.procs[report.index].wait(STOP_GRACE)
            if report.index not in self.ends:
                report.status = "lost"
            return
        kind = message[0]
        if kind == "progress":
            report.examples, report.steps = message[1], message[2]
            return
        counts = message[-1]
        report.examples, report.steps = counts["examples"], counts["steps"]
        report.status = kind
        self.ends[report.index] = message
        if kind == "found" and self.found is None:
            self.found, self.found_after = message, _now() - self.started
            self._stop()
        elif kind == "limit" and outcome.limit is None:
            outcome.limit = message[1]
            self._stop()
        elif kind == "error" and outcome.failure is None:
            outcome.failure = f"worker {report.index} (seed {report.seed}) failed:\n{message[1]}"
            self._stop()

    def _reap(self) -> None:
        """Every worker ends: within the grace after the stop, or killed."""
        deadline = _now() + STOP_GRACE
        for proc in self.procs:
            try:
                proc.wait(max(0.0, deadline - _now()))
            except subprocess.TimeoutExpired:
                logging.getLogger(__name__).warning("killing worker pid %s", proc.pid)
                proc.kill()
                proc.wait(STOP_GRACE)
        for conn in [*self.conns, *self.inboxes]:
            conn.close()


def _now() -> float:
    return time.monotonic()


# -- the live line -------------------------------------------------------------------


def render(p: Progress) -> str:
    """The text of the live line for ``p``."""
    fraction = p.fraction
    head = f"[{fraction:4.0%}] " if fraction is not None else ""
    examples = f"{p.examples:,}/{p.total:,}" if p.total else f"{p.examples:,}"
    clock = _clock(p.elapsed) + (f" of {_clock(p.duration)}" if p.duration else "")
    return (f"{head}{examples} examples | {p.steps:,} steps | {p.rate:,.0f} steps/s | "
            f"{p.alive}/{p.workers} workers | {clock}")


def _clock(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


__all__ = [
    "Campaign", "Outcome", "Progress", "WorkerReport",
    "open_database", "parse_duration", "parse_workers", "render", "run_campaign",
]
