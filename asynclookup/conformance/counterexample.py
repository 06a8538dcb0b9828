"""The oracle's findings: the numbered calls of a run, the error that reports them, how they read.

A run of the driver (``asynclookup.conformance.driver.Driver``) numbers each call
it makes as a ``Call``: how it reads, the ``Driver`` method and arguments that
replay it, and the notes on what the tier was asked meanwhile.  At the first
violation it raises ``ConformanceError``, which carries the violation, the calls
and the run's configuration, and prints as ``format_counterexample`` writes it;
the shrinker (``asynclookup.conformance.replay``) adds its ``ShrinkReport``.
The small text helpers say how a call's return, error or hang reads in those
lines.  The CLI, the replay and regression writers, the campaign and the pytest
plugin read these values; none of them needs the driver to do so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from asynclookup.conformance.targets.bounded import CallHung
from asynclookup.observe.engine import CLOSED
from asynclookup.observe.interface import Violation
from asynclookup.spec import core
from asynclookup.spec.errors import AsyncLookupError

HUNG = "<did not return>"  # the error of a call that did not return within the bound


@dataclass
class Call:
    """One numbered call of a run: how it reads, the Driver method that replays it,
    and what the tier was asked meanwhile."""

    text: str
    method: str
    args: tuple[Any, ...]
    notes: list[str] = field(default_factory=list)

    @property
    def source(self) -> str:
        """The Python call that replays it on a ``Driver``."""
        shown = [repr(a) for a in self.args]
        if self.method == "probe_group" and len(shown) == 2:
            shown[1] = f"post={shown[1]}"
        return f"{self.method}({', '.join(shown)})"


def lookup_text(key: bytes, request: str) -> str:
    """How a lookup reads in a counterexample, before what came back (`` -> ...``)."""
    return f"lookup({key!r}, {request!r})"


def reask_text(key: bytes, request: str) -> str:
    """How a re-ask (``Driver.await_verdict``) reads, before what came back."""
    return f"re-ask drain_results() and {lookup_text(key, request)}"


@dataclass
class ShrinkReport:
    """What the shrinker did, for the report: a long counterexample says why it is long."""

    calls_before: int
    calls_after: int = 0
    tried: int = 0  # candidate replays run
    reproduced: int = 0  # candidates that broke the same property (and were no larger)
    stopped: str = ""  # why it stopped
    note: str = ""  # e.g. that the run it started from was not reproducible

    def line(self) -> str:
        """One line for the text report."""
        return (
            f"shrunk from {self.calls_before} to {self.calls_after} calls: "
            f"{self.tried} candidates tried, {self.reproduced} reproduced; {self.stopped}"
            + (f"; {self.note}" if self.note else "")
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "calls_before": self.calls_before, "calls_after": self.calls_after,
            "tried": self.tried, "reproduced": self.reproduced, "stopped": self.stopped,
            "note": self.note or None,
        }


class ConformanceError(AsyncLookupError, AssertionError):
    """The IUT did something no spec state explains (or, strict, broke property 8)."""

    def __init__(self, violation: Violation, calls: Sequence[Call], config: dict[str, Any]):
        self.violation = violation
        self.calls = list(calls)
        self.config = config
        self.shrink_report: ShrinkReport | None = None  # set by conformance.replay.shrink
        self.reproducible = True  # False: a replay of the run went otherwise
        self.notes: list[str] = []  # lines added to the report after the run (``note``)
        super().__init__(format_counterexample(violation, calls))

    def note(self, line: str) -> None:
        """Add a line to the report (how the oracle settled the finding's name, say)."""
        self.notes.append(line)
        self.args = (f"{self.args[0]}\n  {line}",)

    def not_reproducible(self, why: str) -> None:
        """Say in the report that a replay of this run (Hypothesis's in stepped mode, the
        shrinker's at the full wait bound in threaded mode) did not repeat it."""
        self.reproducible = False
        self.args = (f"{self.args[0]}\n  {NOT_REPRODUCIBLE} ({why})",)


NOT_REPRODUCIBLE = (
    "this run was not reproducible: a replay of it went otherwise (the worker's "
    "timing), so this is the first failure the run saw"
)


def format_counterexample(violation: Violation, calls: Sequence[Call]) -> str:
    """The violated property, the numbered calls and the last possible spec states."""
    lines = [f"{violation.title}: {violation.detail}"]
    for number, call in enumerate(calls, 1):
        lines.append(f"  {number}. {call.text}")
        lines.extend(f"       {note}" for note in call.notes)
    lines.append("  last spec states still possible:")
    lines.extend(f"    {core.describe(s)}" for s in violation.states[:2])
    if not violation.states:
        lines.append("    (none recorded)")
    return "\n".join(lines)


def _shown(value: object, error: str | None) -> str:
    if error is None:
        return repr(value)
    if error == HUNG:
        return "did not return"
    return "raised the closed-manager error" if error == CLOSED else f"raised {error}"


def _stack_notes(hung: CallHung) -> list[str]:
    """The report's lines for a call that did not return: how long, and every stack."""
    notes = [f"{hung.call} did not return within {hung.seconds:.1f} s; where each thread was:"]
    for name, stack in hung.stacks:
        notes.append(f"  thread {name!r}:")
        notes.extend(f"    {line}" for line in stack.splitlines())
    return notes


def _raised(error: str | None) -> str:
    return "" if error is None else f" -> {_shown(None, error)}"
