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
function is memoised by the fields it reads (``asynclookup.modelcheck._memo``).  Traces are
rebuilt at the end by replaying concrete steps from ``INITIAL``
(``asynclookup.modelcheck._counterexample``), so a counterexample is a real run of the table,
shortest because the search is breadth-first and the reductions preserve
distances.  The reductions default to ``default_reductions(table)``.

What it does not do: print (see ``asynclookup.modelcheck.report``), or check unbounded runs.
"""

from __future__ import annotations

import functools
import itertools
import time
from array import array
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from operator import itemgetter
from typing import Any

from asynclookup.modelcheck._canon import N_FIELDS, P_ANSWERED, P_HELD, Ids, Reductions, Space
from asynclookup.modelcheck._counterexample import CRASH, PROGRESS, Replay, TraceStep, Violation
from asynclookup.modelcheck._memo import Memo, changed_fields
from asynclookup.modelcheck._persistent import ProbeFirst
from asynclookup.spec.core import (
    INITIAL,
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
    Transition,
)
from asynclookup.spec.core import TRANSITIONS as SPEC_TRANSITIONS
from asynclookup.spec.properties import ALWAYS, SOMETIMES, quiescent

__all__ = [
    "CRASH", "PROGRESS", "Bounds", "CheckResult", "Reductions", "TraceStep", "Violation",
    "check", "default_reductions",
]

Table = Mapping[type, Transition]
ProgressFn = Callable[[int, int, float], None]
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

    @property
    def holds(self) -> bool:
        """Every property holds: fixpoint reached and nothing violated."""
        return self.fixpoint and self.violation is None


# Actions memoised together (one lookup per state): actions that read much the
# same fields of the state, so that their union is still shared by many states.
FAMILIES: tuple[tuple[type, ...], ...] = (
    (Lookup, Cleanup, MarkMiss, MarkPresent),
    (Flush,),
    (Drain,),
    (Shutdown,),
    (TakeBatch,),
    (ProbeGroup,),
    (Post,),
)


def default_reductions(table: Table) -> Reductions:
    """Every reduction for the spec's own table; for any other table, all but
    ``inert_stale``, whose soundness rests on the spec's handling of stale data."""
    return Reductions() if table is SPEC_TRANSITIONS else Reductions(inert_stale=False)


_STEP_PROPS = tuple(p for p in ALWAYS if p.step is not None)
_STATE_PROPS = tuple(p for p in ALWAYS if p.state is not None)

# An outcome of one enabled action: (action number, the ids of the fields it
# changed and the patch that puts them in place, or None if it changed none,
# names of the step properties it breaks).
Patch = Callable[[Ids], Ids]
Outcome = tuple[int, Ids, Patch | None, tuple[str, ...]]


@functools.cache
def _patch(fields: tuple[int, ...]) -> Patch:
    """``patch(ids + new)`` is ``ids`` with ``fields`` set to the ids in ``new``:
    one C call per transition instead of a loop over the changed fields."""
    picks = list(range(N_FIELDS))
    for k, f in enumerate(fields):
        picks[f] = N_FIELDS + k
    return itemgetter(*picks)


def check(
    bounds: Bounds = Bounds(),
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
) -> CheckResult:
    """Search every interleaving within ``bounds`` of the actions of ``table``.

    ``reductions`` defaults to ``default_reductions(table)``.  ``properties``
    names the predicates to check (``PROGRESS`` for progress; default: all);
    an action that raises is always a violation.  A violation found with the
    persistent-set reduction is searched for again without it, within the
    same limits, so that the counterexample is a shortest one (``shortest``;
    ``CheckResult.research_states`` says how big that search was).
    """
    if reductions is None:
        reductions = default_reductions(table)
    names = frozenset(properties) if properties is not None else None
    result = _Search(bounds, table, reductions, memoised, keep_graph, names).run(
        max_states, max_seconds, on_progress
    )
    if result.violation is None or not result.reductions.persistent or not shortest:
        return result
    left = None if max_seconds is None else max(max_seconds - result.seconds, 0.001)
    again = _Search(
        bounds, table, replace(reductions, persistent=False), memoised, False, names
    ).run(max_states, left, None)
    result.research_states = again.states
    if again.violation is not None:
        result.violation, result.shortest = again.violation, True
    else:  # a limit stopped the second search: keep the first one's trace
        result.shortest = False
    return result


class _Search:
    def __init__(
        self,
        bounds: Bounds,
        table: Table,
        reductions: Reductions,
        memoised: bool,
        keep: bool,
        names: frozenset[str] | None,
    ) -> None:
        self.bounds, self.table, self.keep = bounds, table, keep
        self.step_props = tuple(p for p in _STEP_PROPS if names is None or p.name in names)
        self.progress = names is None or PROGRESS in names
        if keep:  # a drawing shows every transition: no partial-order reduction
            reductions = replace(reductions, persistent=False)
        self.space = Space(bounds.key_names, bounds.request_names, reductions)
        self.universe = bounds.actions()
        self.result = CheckResult(bounds, reductions)
        self.memoised = memoised
        numbered = list(enumerate(self.universe))
        self.families = [
            self._memo(self._family([(n, a) for n, a in numbered if type(a) in kinds]))
            for kinds in FAMILIES
        ]
        self.no_edge = {n for n, a in numbered if isinstance(a, Shutdown)}
        self._persistent = ProbeFirst(self.families[FAMILIES.index((ProbeGroup,))],
                                      self.space.values)
        self.invariants = [
            (p, self._memo(p.state))
            for p in _STATE_PROPS
            if p.state and (names is None or p.name in names)
        ]
        self.quiet = self._memo(quiescent)
        self.goals = [(name, self._memo(goal)) for name, goal in SOMETIMES]

    def _memo(self, fn: Callable[[State], Any]) -> Callable[[Ids, Callable[[], State]], Any]:
        if self.memoised:
            return Memo(fn)
        return lambda ids, build: fn(build())

    def _family(self, actions: list[tuple[int, Action]]) -> Callable[[State], tuple[Outcome, ...]]:
        """One memoisable function: every outcome of the actions of one type."""
        table, bounds, intern = self.table, self.bounds, self.space.intern
        step_props = self.step_props

        def outcomes(before: State) -> tuple[Outcome, ...]:
            found: list[Outcome] = []
            for number, action in actions:
                transition = table[type(action)]
                try:
                    if not transition.enabled(before, action):
                        continue
                    after, output = transition.apply(before, action)
                    # Untracked: a field copied from ``before`` is within bounds already.
                    if not bounds.within(State._make(tuple.__iter__(after))):
                        continue
                    bad = tuple(
                        p.name for p in step_props
                        if p.step is not None and not p.step(before, action, after, output)
                    )
                except Exception as exc:  # a crash of the table is itself a violation
                    found.append((number, (), None, (f"{CRASH}: {type(exc).__name__}: {exc}",)))
                    continue
                changed = changed_fields(after)
                new = tuple(intern(f, v) for f, v in changed)
                patch = _patch(tuple(f for f, _ in changed)) if changed else None
                found.append((number, new, patch, bad))
            return tuple(found)

        return outcomes

    # -- the breadth-first search ----------------------------------------------------

    def run(
        self, max_states: int | None, max_seconds: float | None, on_progress: ProgressFn | None
    ) -> CheckResult:
        started = time.perf_counter()
        space, result = self.space, self.result
        init = space.canonical_of(INITIAL)
        pack, unpack = space.packer.pack, space.packer.unpack
        self.keys: list[bytes] = [pack(*init)]
        index: dict[bytes, int] = {self.keys[0]: 0}
        self.parent, self.via = array("i", [-1]), array("i", [-1])
        self.quiescent = bytearray()
        self.edges, self.edge_start = array("i"), array("q", [0])
        reached = {name: False for name, _ in self.goals}
        graph: list[tuple[int, Action, int]] = []
        if self._admit(0, reached):
            return self._finish(started, reached)
        i, level_end, depth, transitions, reported = 0, 1, 0, 0, 0.0
        families, no_edge = self.families, self.no_edge
        por = space.reductions.persistent
        no_answers, no_held = space.intern(P_ANSWERED, ()), space.intern(P_HELD, ())
        persistent = self._persistent
        keys, state_of, keep = self.keys, space.state_of, self.keep
        find, canonical = index.get, space.canonical
        while i < len(keys):
            if i == level_end:
                depth, level_end = depth + 1, len(keys)
            if i & 1023 == 0 and i:
                elapsed = time.perf_counter() - started
                if on_progress is not None and elapsed >= reported + 1.0:
                    on_progress(len(keys), depth, elapsed)
                    reported = elapsed
                if (max_states is not None and len(keys) >= max_states) or (
                    max_seconds is not None and elapsed >= max_seconds
                ):
                    break
            ids = unpack(keys[i])
            build = _Lazy(state_of, ids)
            successors: set[int] = set()
            chosen = None
            if por and ids[P_ANSWERED] == no_answers and ids[P_HELD] != no_held:
                chosen = persistent(ids, build)
            for outcomes in chosen or (family(ids, build) for family in families):
                for number, new, patch, bad in outcomes:
                    transitions += 1
                    if patch is not None:
                        target = patch(ids + new)
                        # A visited encoding is canonical already (canonical is idempotent).
                        j = find(pack(*target))
                        if j is None:
                            target = canonical(target)
                            j = find(pack(*target))
                    else:
                        target, j = ids, i
                    if bad:
                        result.depth, result.transitions = depth, transitions
                        self._violation_at_step(i, number, target, bad[0])
                        return self._finish(started, reached)
                    if j is None:
                        j = len(keys)
                        packed = pack(*target)
                        index[packed] = j
                        keys.append(packed)
                        self.parent.append(i)
                        self.via.append(number)
                        if self._admit(j, reached):
                            result.depth, result.transitions = depth + 1, transitions
                            return self._finish(started, reached)
                    if keep:
                        graph.append((i, self.universe[number], j))
                    if j != i and number not in no_edge:
                        successors.add(j)
            self.edges.extend(successors)
            self.edge_start.append(len(self.edges))
            i += 1
        result.depth, result.transitions = depth, transitions
        result.fixpoint = i == len(keys)
        if self.keep:
            result.graph = graph
            result.states_list = [state_of(unpack(k)) for k in keys]
        if result.fixpoint and self.progress:
            self._check_progress()
        return self._finish(started, reached)

    def _admit(self, j: int, reached: dict[str, bool]) -> bool:
        """Check a newly reached state; True if it breaks an invariant."""
        ids = self.space.unpack(self.keys[j])
        build = _Lazy(self.space.state_of, ids)
        for prop, memo in self.invariants:
            if not memo(ids, build):
                self._record(prop.name, self._path_to(j), None)
                return True
        self.quiescent.append(1 if self.quiet(ids, build) else 0)
        for name, memo in self.goals:
            if not reached[name] and memo(ids, build):
                reached[name] = True
        return False

    def _finish(self, started: float, reached: dict[str, bool]) -> CheckResult:
        result = self.result
        result.states = len(self.keys)
        result.sometimes = reached
        result.seconds = time.perf_counter() - started
        return result

    # -- progress ----------------------------------------------------------------

    def _check_progress(self) -> None:
        """Which states reach a quiescent state over non-shutdown steps: sweeps over
        the states not yet marked, each marking a state one of whose successors
        is marked, until a sweep marks none (the least fixpoint).

        After sweep k every state within k steps of quiescence is marked, so
        there are at most the longest such distance plus one sweeps; a sweep
        stops at a state's first marked successor and needs no reverse graph.
        """
        edges, start, good = self.edges, self.edge_start, bytearray(self.quiescent)
        left = array("i", (s for s in range(len(self.keys) - 1, -1, -1) if not good[s]))
        while left:
            unmarked = array("i")
            for s in left:
                for e in range(start[s], start[s + 1]):
                    if good[edges[e]]:
                        good[s] = 1
                        break
                else:
                    unmarked.append(s)
            if len(unmarked) == len(left):
                break
            left = unmarked
        state_of, keys = self.space.state_of, self.keys
        unpack = self.space.unpack
        stuck = [s for s in reversed(left) if not state_of(unpack(keys[s])).stopped]
        self.result.stuck = len(stuck)
        if stuck:
            self._record(PROGRESS, self._path_to(stuck[0]), None)

    # -- counterexamples -------------------------------------------------------------

    def _path_to(self, j: int) -> list[tuple[Ids, int]]:
        """(state ids, action number) pairs leading from INITIAL to state ``j``."""
        path = []
        while self.parent[j] >= 0:
            path.append((self.space.unpack(self.keys[j]), self.via[j]))
            j = self.parent[j]
        return path[::-1]

    def _violation_at_step(self, i: int, number: int, target: Ids, name: str) -> None:
        self._record(name, self._path_to(i), (target, number))

    def _record(self, name: str, path: list[tuple[Ids, int]], last: tuple[Ids, int] | None) -> None:
        replay = Replay(self.bounds, self.table, self.universe, self.space.canonical_of)
        self.result.violation = replay.violation(name, path, last)


class _Lazy:
    """The State of some ids, built at most once and only if asked for."""

    __slots__ = ("ids", "state", "state_of")

    def __init__(self, state_of: Callable[[Ids], State], ids: Ids) -> None:
        self.state_of, self.ids = state_of, ids
        self.state: State | None = None

    def __call__(self) -> State:
        if self.state is None:
            self.state = self.state_of(self.ids)
        return self.state
