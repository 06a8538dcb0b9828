"""A fuzzing campaign's workers: how a run is stopped, one worker in this process, N in others.

A run is stopped from inside, at its next step, by raising ``_Stopped`` (a
``KeyboardInterrupt``, which Hypothesis lets through without saving the
example it cut short), never while Hypothesis replays a failure it found.
``run_in_process`` is the one worker of ``asynclookup fuzz`` without
``--workers``, in this process.  ``Pool`` is the parent's side of several:
fresh interpreters (``python -c WORKER_CODE``: no fork of a process that has
threads, and no re-import of the caller's ``__main__``) with two pipes each,
``multiprocessing.connection`` on both ends: the job and then ``stop`` go in;
counts every ``REPORT_EVERY`` seconds, and one last message, come out
(``worker_main`` is the worker's side).  ``asynclookup.conformance.campaign``
chooses between them; ``campaign_values`` holds what they report.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing.connection
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from hypothesis.control import current_build_context
from hypothesis.database import ExampleDatabase
from hypothesis.errors import Flaky, InvalidArgument

from asynclookup.conformance.campaign_values import (
    Campaign,
    Outcome,
    Progress,
    WorkerReport,
    open_database,
)
from asynclookup.conformance.counterexample import ConformanceError
from asynclookup.conformance.machine import FuzzConfig, Stats, conformance_error_in, run
from asynclookup.conformance.replay import settled_and_shrunk
from asynclookup.observe.interface import OracleLimitError

__all__ = ["WORKER_CODE", "Pool", "run_in_process", "worker_main"]

REPORT_EVERY = 0.2  # seconds between two progress messages of a worker
STOP_GRACE = 15.0  # seconds a stopped worker has to end before it is killed


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


def _flaky(exc: Flaky) -> str:
    """One line for a run Hypothesis stopped as flaky without any finding: the oracle's
    own fault (its choice of rules came to depend on the IUT's timing), no verdict."""
    return (
        f"no verdict: Hypothesis stopped the run ({type(exc).__name__}): the oracle drew "
        "differently on the same choices, a fault of the oracle, not of the class; "
        "please report it with the command line"
    )


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


def run_in_process(
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
    except Flaky as exc:  # threaded: a flaky failure, or flaky generation (the oracle's fault)
        outcome.error = conformance_error_in(exc)
        if outcome.error is not None:
            worker.status = "found"
        elif _was_stopped(exc):
            worker.status = "stopped"
        else:
            outcome.failure, worker.status = _flaky(exc), "error"
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


WORKER_CODE = "from asynclookup.conformance.campaign_workers import worker_main; worker_main()"


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
    except Flaky as exc:
        flaky_found = conformance_error_in(exc)
        if flaky_found is not None:
            end = ("found", flaky_found.violation, flaky_found.calls, flaky_found.config)
        else:
            end = ("stopped",) if _was_stopped(exc) else ("error", _flaky(exc))
    except BaseException as exc:
        end = ("stopped",) if _was_stopped(exc) else ("error", traceback.format_exc())
    counts = {"examples": stats.examples, "steps": stats.steps, "warnings": stats.warnings,
              "leak_check": stats.leak_check, "not_generated": stats.not_generated}
    outbox.send((*end, counts))
    outbox.close()


class Pool:
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
            quiet = logging.root.manager.disable  # the IUT's warnings, as in machine.run
            logging.disable(logging.WARNING)
            try:
                outcome.error = settled_and_shrunk(outcome.error, self.campaign.shrink_budget)
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
