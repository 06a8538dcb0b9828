"""Exhaustive bounded model checker of the async lookup spec.

Breadth-first search over every interleaving of scheduler and worker actions
for small bounds (``Bounds``): keys, requests, batch entries per step, queued
batches, posted results and the verdict alphabet.  The bounds are extra
enabling conditions: a step whose target would exceed one is not part of the
bounded model.  Every state and step property of ``asynclookup.spec.properties.ALWAYS`` is
checked on every reachable state and every step; an action that raises is a
violation too.  Progress (property 6) is checked once the fixpoint is reached,
as "from every reachable state a quiescent state is reachable without
shutdown" (shutdown would make every state trivially quiescent).  The
``SOMETIMES`` goals are reported, so that an empty search cannot pass.

The successor function is the spec's own: the enabling predicate and action
function of the transition table passed in (``asynclookup.spec.core.TRANSITIONS`` or a
broken variant from ``asynclookup.spec.variants``).  For speed, states are interned
encodings (``asynclookup.modelcheck._canon``), canonicalised by sound reductions, and every
function is memoised by the fields it reads (``asynclookup.modelcheck._memo``).
The visited set and the search graph (``asynclookup.modelcheck._visited``, compiled
when built) keep each state as one packed key, numbered in the order found, with
the action that reached it, how many states it reached first (so its parent is
found by counting) and one successor for the progress check; the compiled table
also keeps the action families' outcomes (computed here, on a miss) and walks
them itself, coming back here for new states whose checks it cannot settle.
With ``hash_compaction`` it stores 64-bit fingerprints instead (opt-in: a state may
be missed, with the probability ``CheckResult.missed_state_bound`` bounds).  Traces are
rebuilt at the end by replaying concrete steps from ``INITIAL``
(``asynclookup.modelcheck._counterexample``), so a counterexample is a real run of the table,
shortest because the search is breadth-first and the reductions preserve
distances.  The reductions default to ``default_reductions(table)``.

``CheckResult`` carries the search's figures: ``states``, ``transitions``,
``seconds`` (wall) and ``cpu_seconds``, ``states_per_second`` and
``states_per_cpu_second``, ``bytes_per_state`` (visited set and search graph)
and ``memo_bytes`` (the compiled memo, shared by all states).

This module holds the entry point (``check``, ``default_reductions``) and
re-exports the names a caller needs; ``asynclookup.modelcheck.bounds`` holds
what a search is asked and what it reports (``Bounds``, ``CheckResult``), and
``asynclookup.modelcheck._bfs`` the breadth-first search itself.

What it does not do: print (see ``asynclookup.modelcheck.report``), or check unbounded runs.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from asynclookup.modelcheck._bfs import ProgressFn, Table, run
from asynclookup.modelcheck._canon import Reductions
from asynclookup.modelcheck._counterexample import CRASH, PROGRESS, TraceStep, Violation
from asynclookup.modelcheck.bounds import MAX_NAMES, Bounds, CheckResult
from asynclookup.spec.core import TRANSITIONS as SPEC_TRANSITIONS

__all__ = [
    "CRASH", "MAX_NAMES", "PROGRESS", "Bounds", "CheckResult", "Reductions", "TraceStep",
    "Violation", "check", "default_reductions",
]


def default_reductions(table: Table) -> Reductions:
    """Every reduction for the spec's own table; for any other table, all but
    ``inert_stale``, whose soundness rests on the spec's handling of stale data."""
    return Reductions() if table is SPEC_TRANSITIONS else Reductions(inert_stale=False)


def check(
    bounds: Bounds = Bounds(),  # noqa: B008  (a frozen value, as when it was defined here)
    table: Table = SPEC_TRANSITIONS,
    *,
    reductions: Reductions | None = None,
    memoised: bool = True,
    max_states: int | None = None,
    max_seconds: float | None = None,
    on_progress: ProgressFn | None = None,
    keep_graph: bool = False,
    properties: Collection[str] | None = None,
    shortest: bool = True,
    hash_compaction: bool = False,
) -> CheckResult:
    """Search every interleaving within ``bounds`` of the actions of ``table``.

    ``reductions`` defaults to ``default_reductions(table)``.  ``properties``
    names the predicates to check (``PROGRESS`` for progress; default: all);
    an action that raises is always a violation.  A violation found with the
    persistent-set reduction is searched for again without it, within the
    same limits, so that the counterexample is a shortest one (``shortest``;
    ``CheckResult.research_states`` says how big that search was).
    ``hash_compaction`` stores a 64-bit fingerprint of each state instead of
    the state (``asynclookup.modelcheck._visited``): a state whose fingerprint
    equals a visited one's is missed, with the probability that
    ``CheckResult.missed_state_bound`` bounds; the default is exhaustive.
    """
    if reductions is None:
        reductions = default_reductions(table)
    names = frozenset(properties) if properties is not None else None
    if keep_graph and hash_compaction:
        raise ValueError("a kept graph needs every state: no hash compaction")
    result = run(max_states, max_seconds, on_progress, bounds, table, reductions, memoised,
                  keep_graph, names, hash_compaction)
    if result.violation is None or not result.reductions.persistent or not shortest:
        return result
    left = None if max_seconds is None else max(max_seconds - result.seconds, 0.001)
    again = run(max_states, left, None, bounds, table, replace(reductions, persistent=False),
                 memoised, False, names, hash_compaction)
    result.research_states = again.states
    if again.violation is not None:
        result.violation, result.shortest = again.violation, True
    else:  # a limit stopped the second search: keep the first one's trace
        result.shortest = False
    return result
