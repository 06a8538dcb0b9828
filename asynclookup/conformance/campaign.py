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

This module holds the entry point (``run_campaign``) and re-exports the public
names; ``asynclookup.conformance.campaign_values`` holds what a campaign is and
reports (``Campaign``, ``Progress``, ``WorkerReport``, ``Outcome``, ``render``,
``open_database``), and ``asynclookup.conformance.campaign_workers`` its
workers (the stop signal, the one in this process, the pool of processes).

It does not judge or shrink by itself (``machine`` and ``replay`` do), print a
report (``asynclookup.conformance.cli`` does), or restart a dead worker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from hypothesis.database import ExampleDatabase

from asynclookup._cli import parse_duration, parse_workers
from asynclookup.conformance.campaign_values import (
    Campaign,
    Outcome,
    Progress,
    WorkerReport,
    open_database,
    render,
)
from asynclookup.conformance.campaign_workers import Pool, run_in_process

__all__ = [
    "Campaign", "Outcome", "Progress", "WorkerReport",
    "open_database", "parse_duration", "parse_workers", "render", "run_campaign",
]


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
        return run_in_process(campaign, database, progress)
    return Pool(campaign, progress).run()
