"""What every engine of possible states offers: one interface, its bounds, its notes, its finding.

Two engines keep the set of spec states consistent with what was observed:
``asynclookup.observe.engine.Checker`` (each state a whole ``State``: exact,
and what the oracle uses) and ``asynclookup.observe.fast.FastChecker`` (the same
set stored per key: what the trace checker uses by default, handing rare
cases to the exact one).  Both follow ``Engine`` below, so a caller reads
neither's insides: it feeds observations, asks the questions of the
interface, hands one engine's states to another with ``resume`` and lets an
engine drop what it no longer needs with ``trim_history``.

``Bounds`` names each bound an engine keeps, once; ``Notes`` is the evidence
an engine gathers beside its states to name the property an unexplained
observation breaks (``asynclookup.observe.classify`` reads it; it never
decides a judgement).

It imports the spec and the observations only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from asynclookup.observe.observations import Observation
from asynclookup.spec.core import State
from asynclookup.spec.errors import AsyncLookupError
from asynclookup.spec.properties import Finding


@dataclass(frozen=True)
class Bounds:
    """What an engine keeps at most; each field bounds one thing."""

    # possible spec states; beyond it the engine raises ``OracleLimitError``
    states: int = 10_000
    # states explained only by a wasteful cleanup (tagged: they break property 8 only),
    # kept beside the efficient ones; they only let a property-8 finding be named so
    tagged: int = 16


ORACLE_BOUNDS = Bounds()
# A trace runs for millions of events with a hidden worker; fewer tagged states make
# every event cheaper, and the untagged ones alone decide safety.
TRACE_BOUNDS = Bounds(tagged=4)


class OracleLimitError(AsyncLookupError, RuntimeError):
    """The set of possible states outgrew its bound: the oracle cannot judge this run."""


@dataclass(frozen=True)
class Violation(Finding):
    """An observation that no spec state explains, and the property that excludes it.

    ``number``: the property of docs/properties.md (None: a usage error, a call after
    shutdown that did not raise the closed-manager error).  ``states``: a few of
    the spec states that were still possible just before ``observation``.
    """

    index: int  # the observation's position in the checker's history
    observation: Observation
    states: tuple[State, ...]


# a batch entry (key, request, generation) and its key's probe in one possible state
# (generation, phase, verdict, requesters), or None: what a flush's notes are made of
Batched = tuple[tuple[bytes, str, int], tuple[int, object, object, frozenset[str]] | None]


class Notes:
    """The classification notes an engine keeps as its own attributes (a base class).

    Context for naming a property, never for deciding one: (key, generation) of
    probes answered by a faulty tier call (with the value the tier gave at the
    key's position, ``classify.NO_VALUE`` for none) and of unresolved probes a
    mark_miss named; whether the last flush, or any, dropped stale entries in
    some state, and which (key, request) entries; probes a stale result could hit;
    the (key, request, generation) entries a flush submitted although their request
    had been cleaned up before it (so no cleanup cancelled them in flight); and for
    each request, the generations every flush before its last cleanup had submitted
    (below the number kept: its entries of a lower generation were in flight at
    that cleanup, even if the request asked again since).
    """

    def __init__(self) -> None:
        self.faulty: dict[tuple[bytes, int], object] = {}
        self.missed: set[tuple[bytes, int]] = set()
        self.flush_dropped = False  # the last flush dropped stale entries in some state
        self.dropped: set[tuple[bytes, str]] = set()  # (key, request) of entries dropped so far
        self.ever_dropped = False  # some flush did
        self.stale: set[tuple[bytes, int]] = set()  # a probe that a stale result could hit
        self.orphaned: set[tuple[bytes, str, int]] = set()  # submitted after their cleanup
        self.cleaned: dict[str, int] = {}  # request -> flushed_below at its last cleanup
        self.flushed_below = 0  # every entry of a lower generation was flushed

    def take_notes(self, other: Notes) -> None:
        """Hold ``other``'s notes (the same containers: one engine takes over another)."""
        self.faulty, self.missed, self.stale = other.faulty, other.missed, other.stale
        self.flush_dropped, self.ever_dropped = other.flush_dropped, other.ever_dropped
        self.dropped, self.orphaned = other.dropped, other.orphaned
        self.cleaned, self.flushed_below = other.cleaned, other.flushed_below

    def copied_notes(self) -> Notes:
        """The notes in containers of their own (``take_notes`` of it holds a copy)."""
        copy = Notes()
        copy.take_notes(self)
        copy.faulty, copy.missed, copy.stale = dict(self.faulty), set(self.missed), set(self.stale)
        copy.dropped, copy.orphaned = set(self.dropped), set(self.orphaned)
        copy.cleaned = dict(self.cleaned)
        return copy

    def _note_cleanup(self, request: str) -> None:
        """``request`` cleaned up: its entries flushed so far were in flight then."""
        self.cleaned[request] = self.flushed_below

    def _note_flush(self, batched: Iterable[Batched]) -> None:
        """A flush of these batch entries, each with its key's probe in its state (maybe
        none; a core ``Entry`` and ``Probe``, or the fast engine's tuples of them): it
        drops as stale the (key, request) of those whose probe is gone or newer, and
        submits the (key, request, generation) of those whose request was cleaned up."""
        dropped: set[tuple[bytes, str]] = set()
        orphaned: set[tuple[bytes, str, int]] = set()
        below = self.flushed_below
        for e, p in batched:  # e: key, request, generation; p: generation, .., requesters
            if e[2] >= below:
                below = e[2] + 1
            if p is None or p[0] != e[2]:
                dropped.add((e[0], e[1]))
            elif e[1] not in p[3]:
                orphaned.add((e[0], e[1], e[2]))
        self.flushed_below = below
        self.flush_dropped = bool(dropped)
        self.dropped |= dropped
        self.orphaned |= orphaned
        self.ever_dropped = self.ever_dropped or self.flush_dropped

    def _has_probe_notes(self) -> bool:
        return bool(self.faulty or self.missed or self.dropped or self.orphaned or self.cleaned)

    def _keep_notes_on(self, live: set[tuple[bytes, int]]) -> None:
        """Drop the notes on (key, generation) pairs, and keys, outside ``live``."""
        self.faulty = {kg: v for kg, v in self.faulty.items() if kg in live}
        self.missed &= live
        keys = {key for key, _ in live}
        self.dropped = {(key, request) for key, request in self.dropped if key in keys}
        self.orphaned = {e for e in self.orphaned if (e[0], e[2]) in live}
        lowest = min((g for _, g in live), default=None)  # no live entry is older
        self.cleaned = {
            r: g for r, g in self.cleaned.items() if lowest is not None and g > lowest
        }


class Engine(Protocol):
    """What the trace checker, the oracle and one engine taking over another read."""

    hidden_worker: bool
    max_states: int
    tagged_kept: int
    violation: Violation | None
    warnings: list[Violation]
    stopped: bool

    @property
    def size(self) -> int:
        """How many states are possible."""
        ...

    def observe(self, obs: Observation) -> Violation | None:
        """Take one observation; the violation if no possible state explains it."""
        ...

    def tagged_states(self) -> dict[State, bool]:
        """The possible states in the engine's order, each -> tagged (wasteful cleanup)."""
        ...

    def resume(self, states: Mapping[State, bool], notes: Notes, *, stopped: bool) -> None:
        """Start from ``states`` (as ``tagged_states`` gives them), ``notes`` and ``stopped``."""
        ...

    def expects_empty(self) -> bool:
        """Whether no possible state holds anything (property 5's quiescent point)."""
        ...

    def restartable(self) -> bool:
        """Whether the set explains exactly what the initial state explains."""
        ...

    def drain_due(self) -> bool:
        """Whether the first possible state has a drain due."""
        ...

    def forget_stale_notes(self) -> None:
        """Drop the notes on probes no possible state holds."""
        ...

    def trim_history(self) -> None:
        """Forget the observations kept so far (a long run would otherwise grow them)."""
        ...
