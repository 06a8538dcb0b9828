"""A fuzzing campaign's values: what to run, and what it reports while and after it runs.

``Campaign`` is what to run (the configuration, over how many workers, for how
long, and each worker's seed and share of the examples); ``Progress`` the
counts so far, and ``render`` the text of the live line
(``asynclookup._cli.LiveLine``) from them; ``WorkerReport`` one worker's seed,
process, counts and end; ``Outcome`` what the campaign found.
``open_database`` opens the example database ``--db`` names.  Plain values:
``asynclookup.conformance.campaign`` runs a campaign, and
``asynclookup.conformance.campaign_workers`` its workers.
"""

from __future__ import annotations

import random
import signal
from dataclasses import dataclass
from typing import Any

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from asynclookup.conformance.counterexample import ConformanceError
from asynclookup.conformance.machine import FuzzConfig, Stats
from asynclookup.conformance.replay import SHRINK_BUDGET

__all__ = ["Campaign", "Outcome", "Progress", "WorkerReport", "open_database", "render"]

REDIS_KEY_PREFIX = b"asynclookup-fuzz:"  # the keys of --db redis://... (HypoFuzz's too)
UNBOUNDED = 10**9  # max_examples of a run that only a duration stops


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
    shrink_budget: float = SHRINK_BUDGET

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
