"""What a search of the model checker is asked, and what it reports.

``Bounds`` is the bounded model: how many keys, requests, batch entries,
queued batches and posted results, which verdicts, and so the finite action
universe.  ``CheckResult`` is what one search found: its size and time, the
first violation, the ``SOMETIMES`` goals reached, and the figures of what it
stored.  Plain values: the search itself is ``asynclookup.modelcheck._bfs``,
its entry point ``asynclookup.modelcheck.search.check``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from asynclookup.modelcheck._canon import Reductions
from asynclookup.modelcheck._counterexample import Violation
from asynclookup.modelcheck._visited import IMPLEMENTATION, missed_state_bound
from asynclookup.spec.core import (
    Action,
    Cleanup,
    Drain,
    Flush,
    Lookup,
    MarkMiss,
    MarkPresent,
    Post,
    ProbeGroup,
    Shutdown,
    State,
    TakeBatch,
)

__all__ = ["MAX_NAMES", "Bounds", "CheckResult"]

MAX_NAMES = 4


@dataclass(frozen=True)
class Bounds:
    """The bounds of one search; keys are b"k0".., requests "A".."""

    keys: int = 1
    requests: int = 2
    batch_entries: int = 2
    queued_batches: int = 2
    posted_results: int = 2
    verdicts: tuple[bool, ...] = (True, False)

    def __post_init__(self) -> None:
        for name in ("keys", "requests"):
            if not 1 <= getattr(self, name) <= MAX_NAMES:
                raise ValueError(f"{name} must be between 1 and {MAX_NAMES}")
        for name in ("batch_entries", "queued_batches", "posted_results"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.posted_results < self.batch_entries:
            # A post appends a whole group's results: a smaller bound strands the worker.
            raise ValueError("posted_results must be at least batch_entries")
        if not self.verdicts or len(set(self.verdicts)) != len(self.verdicts):
            raise ValueError("verdicts must be a non-empty set of booleans")

    @property
    def key_names(self) -> tuple[bytes, ...]:
        return tuple(b"k%d" % i for i in range(self.keys))

    @property
    def request_names(self) -> tuple[str, ...]:
        return tuple("ABCD"[: self.requests])

    def actions(self) -> tuple[Action, ...]:
        """The finite action universe: single-key marks, every answer vector.

        A failed tier call (``ProbeGroup(None)``) has the same successor as all
        False answers, so it is not enumerated apart.
        """
        keys, requests = self.key_names, self.request_names
        answers = [
            ProbeGroup(a)
            for n in range(1, self.batch_entries + 1)
            for a in itertools.product(self.verdicts, repeat=n)
        ]
        return (
            *(Lookup(k, r) for k in keys for r in requests),
            Flush(),
            *(Cleanup(r) for r in requests),
            *(MarkMiss((k,)) for k in keys),
            *(MarkPresent((k,)) for k in keys),
            Drain(),
            Shutdown(),
            TakeBatch(),
            *answers,
            Post(),
        )

    def within(self, state: State) -> bool:
        """Whether ``state`` is inside the bounded model."""
        return (
            len(state.batch) <= self.batch_entries
            and len(state.queue) <= self.queued_batches
            and len(state.posted) <= self.posted_results
        )


@dataclass
class CheckResult:
    """What a search found: sizes, time, the first violation, the goals reached."""

    bounds: Bounds
    reductions: Reductions
    states: int = 0
    transitions: int = 0
    depth: int = 0
    fixpoint: bool = False
    seconds: float = 0.0
    violation: Violation | None = None
    sometimes: dict[str, bool] = field(default_factory=dict)
    stuck: int = 0  # states from which no quiescent state is reachable
    research_states: int = 0  # states of the search without persistent sets, if one ran
    shortest: bool = True  # False: the trace is from the reduced search, maybe not shortest
    graph: list[tuple[int, Action, int]] | None = None  # labelled edges, if kept
    states_list: list[State] | None = None  # representatives, if kept
    hash_compaction: bool = False  # 64-bit fingerprints stored instead of states
    visited_bytes: int = 0  # bytes the visited set allocated
    search_bytes: int = 0  # bytes of the per-state arrays (action, children, successor, flags)
    visited_impl: str = IMPLEMENTATION  # compiled or pure-python
    key_bytes: int = 0  # bytes of a packed state key (18, or 32 once an id outgrew 2 bytes)
    stored_key_bytes: int = 0  # bytes the visited set stores per key (compiled: bit-packed ids)
    memo_bytes: int = 0  # bytes of the compiled memo of the families' outcomes (not per state)
    cpu_seconds: float = 0.0  # CPU time of the search (this process's, all threads)

    @property
    def bytes_per_state(self) -> float:
        """What the search stored per distinct state: visited set, its search graph, flags."""
        return (self.visited_bytes + self.search_bytes) / self.states if self.states else 0.0

    @property
    def states_per_second(self) -> float:
        """Distinct states per second of wall-clock time."""
        return self.states / self.seconds if self.seconds > 0 else 0.0

    @property
    def states_per_cpu_second(self) -> float:
        """Distinct states per second of CPU time."""
        return self.states / self.cpu_seconds if self.cpu_seconds > 0 else 0.0

    @property
    def missed_state_bound(self) -> float | None:
        """With hash compaction, the bound on the probability that a state was missed."""
        return missed_state_bound(self.states) if self.hash_compaction else None

    @property
    def holds(self) -> bool:
        """Every property holds: fixpoint reached and nothing violated."""
        return self.fixpoint and self.violation is None
