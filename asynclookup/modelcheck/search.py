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

What it does not do: print (see ``asynclookup.modelcheck.report``), or check unbounded runs.
"""

from __future__ import annotations

import itertools
import struct
import time
from array import array
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from asynclookup.modelcheck._canon import (
    P_ANSWERED,
    P_HELD,
    Ids,
    Reductions,
    Space,
    apply_picks,
    picks_of,
)
from asynclookup.modelcheck._counterexample import CRASH, PROGRESS, Replay, TraceStep, Violation
from asynclookup.modelcheck._memo import MISS, Memo, MemoGroup, changed_fields, tracked_call
from asynclookup.modelcheck._persistent import ProbeFirst
from asynclookup.modelcheck._visited import (
    BAD,
    IMPLEMENTATION,
    PyWalk,
    TableLike,
    WalkLike,
    fingerprint,
    kernel,
    missed_state_bound,
)
from asynclookup.modelcheck._visited import Table as Visited
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
# changed and where the target's fields come from (``_canon.picks_of``), or
# None if it changed none, names of the step properties it breaks).
Outcome = tuple[int, Ids, tuple[int, ...] | None, tuple[str, ...]]


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
    result = _run(max_states, max_seconds, on_progress, bounds, table, reductions, memoised,
                  keep_graph, names, hash_compaction)
    if result.violation is None or not result.reductions.persistent or not shortest:
        return result
    left = None if max_seconds is None else max(max_seconds - result.seconds, 0.001)
    again = _run(max_states, left, None, bounds, table, replace(reductions, persistent=False),
                 memoised, False, names, hash_compaction)
    result.research_states = again.states
    if again.violation is not None:
        result.violation, result.shortest = again.violation, True
    else:  # a limit stopped the second search: keep the first one's trace
        result.shortest = False
    return result


def _run(
    max_states: int | None, max_seconds: float | None, on_progress: ProgressFn | None,
    bounds: Bounds, table: Table, reductions: Reductions, memoised: bool, keep: bool,
    names: frozenset[str] | None, compact: bool,
) -> CheckResult:
    """One search with 18-byte keys, or, if a field id outgrows 2 bytes, again
    from the start with 32-byte keys (the same search, in more memory)."""
    args = (bounds, table, reductions, memoised, keep, names, compact)
    try:
        return _Search(*args).run(max_states, max_seconds, on_progress)
    except (OverflowError, struct.error):
        return _Search(*args, wide=True).run(max_states, max_seconds, on_progress)


class _Search:
    def __init__(
        self,
        bounds: Bounds,
        table: Table,
        reductions: Reductions,
        memoised: bool,
        keep: bool,
        names: frozenset[str] | None,
        compact: bool = False,
        wide: bool = False,
    ) -> None:
        self.bounds, self.table, self.keep, self.compact = bounds, table, keep, compact
        self.step_props = tuple(p for p in _STEP_PROPS if names is None or p.name in names)
        self.progress = names is None or PROGRESS in names
        if keep:  # a drawing shows every transition: no partial-order reduction
            reductions = replace(reductions, persistent=False)
        self.space = Space(bounds.key_names, bounds.request_names, reductions, wide)
        self.universe = bounds.actions()
        self.result = CheckResult(bounds, reductions, hash_compaction=compact)
        self.memoised = memoised
        numbered = list(enumerate(self.universe))
        # Each family's outcomes: memoised by the compiled table (``compute`` on a
        # miss), else by Python's memos (``families``; ``_lists``).
        self.family_fns = [
            self._family([(n, a) for n, a in numbered if type(a) in kinds]) for kinds in FAMILIES
        ]
        self.families = [self._memo(fn, True) for fn in self.family_fns]
        self.all_families = self._group(self.families)
        self.every_family = (1 << len(FAMILIES)) - 1
        self.probe_family = FAMILIES.index((ProbeGroup,))
        self.no_edge = {n for n, a in numbered if isinstance(a, Shutdown)}
        # With hash compaction, the successor lists for the progress check.
        self.edges, self.edge_start = array("i"), array("I", [0])
        self.successor_set: set[int] = set()
        self._persistent = ProbeFirst(self.families[self.probe_family], self.space.values)
        self.invariants = [
            (p, self._memo(p.state))
            for p in _STATE_PROPS
            if p.state and (names is None or p.name in names)
        ]
        self.quiet = self._memo(quiescent)
        self.goals = [(name, self._memo(goal)) for name, goal in SOMETIMES]
        self.goals_left = list(self.goals)  # those not reached yet
        # The invariants and quiescence of a new state, looked up at once.
        on_admit = [m for _, m in self.invariants] + [self.quiet]
        group = MemoGroup(on_admit)
        self.admit_lookup: Callable[[Ids], list[Any]] = (
            group.lookup if memoised else lambda ids: [MISS] * len(on_admit)
        )
        self.admit_ready: Callable[[], bool] = lambda: group.ready or not memoised
        # The invariants called directly (once the memos have decided): (index, predicate).
        self.direct_checks: tuple[tuple[int, Callable[[State], Any]], ...] = ()
        # Hands admission over to the compiled walk, once (see ``_walker``).
        self.admit_in_kernel: Callable[[], None] | None = None

    def _group(self, memos: list[Memo[Any]]) -> Callable[[Ids, Callable[[], State]], list[Any]]:
        if self.memoised:
            return MemoGroup(memos)
        return lambda ids, build: [m(ids, build) for m in memos]

    def _memo(self, fn: Callable[[State], Any], always: bool = False) -> Memo[Any]:
        memo = Memo(fn, always)
        memo.direct = not self.memoised  # memoised=False: every function is called directly
        return memo

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
                changed = changed_fields(after, before)
                new = tuple(intern(f, v) for f, v in changed)
                picks = picks_of(tuple(f for f, _ in changed)) if changed else None
                found.append((number, new, picks, bad))
            return tuple(found)

        return outcomes

    # -- the breadth-first search ----------------------------------------------------

    def _walker(self, visited: TableLike, graph: list[tuple[int, Action, int]]) -> WalkLike:
        """The compiled table memoises the families' outcomes and walks its own
        states; a kept graph, fingerprints (which keep every state's successors),
        the functions called directly (``memoised=False``) and the pure-Python
        kernel take the Python walk over Python's memos."""
        space = self.space
        no_edge = bytes(n in self.no_edge for n in range(len(self.universe)))
        on_edge: Callable[[int, int, int], None] | None = None
        if self.keep:
            universe = self.universe

            def on_edge(i: int, number: int, j: int) -> None:
                graph.append((i, universe[number], j))

        elif self.compact:
            successors, no_edges = self.successor_set, self.no_edge

            def on_edge(i: int, number: int, j: int) -> None:
                if j != i and number not in no_edges:
                    successors.add(j)

        if (on_edge is None and self.memoised and kernel is not None
                and isinstance(visited, kernel.Table)):
            compiled: Any = visited
            self.admit_in_kernel = self._admit_in_kernel
            if space.quick is not None:
                compiled.set_canonical(*space.tables())
            compiled.set_search(len(FAMILIES), self._compute, space.canonical, no_edge)
            walker: WalkLike = compiled
            return walker
        return PyWalk(visited, space.canonical, no_edge, self._lists, on_edge)

    def _compute(self, family: int, ids: Ids) -> tuple[tuple[int, ...], tuple[Outcome, ...]]:
        """The outcomes of a family for the state of ``ids``, and the fields it read
        (for the compiled table's memo)."""
        return tracked_call(self.family_fns[family], self.space.state_of(ids))

    def _lists(self, ids: Ids, families: int) -> list[Any]:
        """The outcomes of the families whose bits are set, by Python's memos."""
        build = _Lazy(self.space.state_of, ids)
        if families == self.every_family:
            return self.all_families(ids, build)
        return [m(ids, build) for f, m in enumerate(self.families) if families >> f & 1]

    def run(
        self, max_states: int | None, max_seconds: float | None, on_progress: ProgressFn | None
    ) -> CheckResult:
        started, cpu = time.perf_counter(), time.process_time()
        space, result = self.space, self.result
        visited = self.visited = Visited(space.packer.size, self.compact, space.layout)
        graph: list[tuple[int, Action, int]] = []
        walker = self.walker = self._walker(visited, graph)
        first = space.canonical_of(INITIAL)
        visited.add_ids(first)
        # With hash compaction the visited set keeps fingerprints only, so the
        # frontier keeps the packed keys of the states not yet expanded, from ``base`` on,
        # and the successor lists are kept for the progress check.
        pending, base, compact = [space.pack(first)], 0, self.compact
        self.flags = bytearray()  # per state: _QUIESCENT, _STOPPED
        reached = {name: False for name, _ in self.goals}
        if self._admit(0, first, reached):
            return self._finish(started, cpu, reached)
        i, level_end, depth, reported = 0, 1, 0, 0.0
        every, probe = self.every_family, self.probe_family
        por = space.reductions.persistent
        no_answers, no_held = space.intern(P_ANSWERED, ()), space.intern(P_HELD, ())
        chooses, successor_set = self._persistent.chooses, self.successor_set
        state_of, unpack, pack = space.state_of, space.unpack, space.pack
        admit, ids_of = self._admit, visited.ids
        expand, resume, last_ids = walker.expand, walker.resume, walker.last_ids
        outcomes, outcomes_key = walker.outcomes, walker.outcomes_key
        persistent_by_key: dict[tuple[int, int], bool] = {}  # (outcomes' key, held): chosen
        while i < len(visited):
            if i == level_end:
                depth, level_end = depth + 1, len(visited)
                if compact:
                    del pending[: i - base]
                    base = i
            if i & 1023 == 0 and i:
                elapsed = time.perf_counter() - started
                if on_progress is not None and elapsed >= reported + 1.0:
                    on_progress(len(visited), depth, elapsed)
                    reported = elapsed
                if (max_states is not None and len(visited) >= max_states) or (
                    max_seconds is not None and elapsed >= max_seconds
                ):
                    break
            ids = unpack(pending[i - base]) if compact else ids_of(i)
            families = every  # or the probe steps alone, where they are a persistent set
            if por and ids[P_ANSWERED] == no_answers and ids[P_HELD] != no_held:
                key = outcomes_key(probe, ids)
                if key is None:
                    chosen: bool | None = chooses(ids, outcomes(probe, ids))
                else:  # the same outcomes from the same held: the same choice
                    chosen = persistent_by_key.get((key, ids[P_HELD]))
                    if chosen is None:
                        chosen = persistent_by_key[key, ids[P_HELD]] = chooses(
                            ids, outcomes(probe, ids))
                if chosen:
                    families = 1 << probe
            found = expand(i, ids, families)
            while found >= 0:  # a new state
                new_ids = last_ids()
                if compact:
                    pending.append(pack(new_ids))
                if admit(found, new_ids, reached):
                    result.depth, result.transitions = depth + 1, walker.transitions
                    return self._finish(started, cpu, reached)
                found = resume()
            if found == BAD:  # a step broke a step property (or the table raised)
                number, new, picks, bad = walker.outcome()
                target = ids if picks is None else apply_picks(ids, new, picks)
                result.depth, result.transitions = depth, walker.transitions
                self._violation_at_step(i, number, space.canonical(target), bad[0])
                return self._finish(started, cpu, reached)
            if compact:
                self.edges.extend(successor_set)
                self.edge_start.append(len(self.edges))
                successor_set.clear()
            i += 1
        result.depth, result.transitions = depth, walker.transitions
        result.fixpoint = i == len(visited)
        if self.keep:
            result.graph = graph
            result.states_list = [state_of(ids_of(k)) for k in range(len(visited))]
        if result.fixpoint and self.progress:
            self._check_progress()
        return self._finish(started, cpu, reached)

    def _admit(self, j: int, ids: Ids, reached: dict[str, bool]) -> bool:
        """Check the newly reached state ``j`` (field ids ``ids``); True if it breaks an
        invariant."""
        # Built at once: the invariants that read nearly every field are called directly.
        state = self.space.state_of(ids)
        found = self.admit_lookup(ids)  # per invariant, then quiescence: stored, or MISS
        for k, fn in self.direct_checks:
            found[k] = fn(state)
        if MISS in found or False in found[:-1]:  # after the memos have decided, seldom
            build = itertools.repeat(state).__next__
            for k, ((prop, memo), held) in enumerate(zip(self.invariants, found, strict=False)):
                if held is MISS:  # computed in order: a broken invariant stops the others
                    held = found[k] = memo(ids, build)
                if not held:
                    self._record(prop.name, self._path_to(j), None)
                    return True
            if found[-1] is MISS:
                found[-1] = self.quiet(ids, build)
            if self.direct_checks == () and self.admit_ready():
                self.direct_checks = tuple(
                    (k, prop.state) for k, (prop, memo) in enumerate(self.invariants)
                    if memo.direct and prop.state is not None
                )
        self.flags.append((_QUIESCENT if found[-1] else 0) | (_STOPPED if state.stopped else 0))
        if self.goals_left:
            build = itertools.repeat(state).__next__
            for name, memo in self.goals_left:
                if memo(ids, build):
                    reached[name] = True
            self.goals_left = [(n, m) for n, m in self.goals_left if not reached[n]]
        if not self.goals_left and self.admit_in_kernel is not None and self.admit_ready():
            self.admit_in_kernel()
        return False

    def _admit_in_kernel(self) -> None:
        """From now on the compiled walk admits the new states whose checks it can
        settle (stored memo results, direct predicate calls), as ``_admit`` would."""
        checks: list[tuple[Any, Any]] = [
            (None, prop.state) if memo.direct else (memo.store, None)
            for prop, memo in self.invariants
        ]
        checks.append((None, quiescent) if self.quiet.direct else (self.quiet.store, None))
        walker: Any = self.walker
        walker.set_admission(self.space.values, State, State._fields.index("stopped"), checks,
                             MISS, self.flags)
        self.admit_in_kernel = None

    def _finish(self, started: float, cpu: float, reached: dict[str, bool]) -> CheckResult:
        result = self.result
        result.states = len(self.visited)
        result.sometimes = reached
        result.seconds = time.perf_counter() - started
        result.cpu_seconds = time.process_time() - cpu
        result.visited_bytes = self.visited.nbytes
        result.key_bytes = self.space.packer.size
        result.stored_key_bytes = self.visited.stored_bytes
        arrays = (self.edges, self.edge_start)
        result.search_bytes = self.walker.graph_nbytes + len(self.flags)
        result.search_bytes += sum(a.buffer_info()[1] * a.itemsize for a in arrays)
        result.memo_bytes = getattr(self.walker, "memo_nbytes", 0)
        return result

    # -- progress ----------------------------------------------------------------

    def _check_progress(self) -> None:
        """Which states reach a quiescent state over non-shutdown steps.

        First along the one successor the walk kept per state (``settle``): a
        state whose chain of kept successors reaches a quiescent state does.
        The others (none at the spec's bounds but the states that are stuck)
        are decided from their full successor lists, recomputed (or, with
        fingerprints, kept), by sweeps over the states not yet marked, each
        marking a state one of whose successors is marked, until a sweep marks
        none (the least fixpoint).  After sweep k every state within k steps of
        a marked one is marked, so there are at most the longest such distance
        plus one sweeps.
        """
        flags = self.flags
        good = flags.translate(_QUIESCENT_BIT)
        others = self.walker.settle(good)
        successors = {s: self._successors(s) for s in others}
        left = others[::-1]
        while left:
            unmarked = []
            for s in left:
                if any(good[j] for j in successors[s]):
                    good[s] = 1
                else:
                    unmarked.append(s)
            if len(unmarked) == len(left):
                break
            left = unmarked
        stuck = [s for s in reversed(left) if not flags[s] & _STOPPED]
        self.result.stuck = len(stuck)
        if stuck:
            self._record(PROGRESS, self._path_to(stuck[0]), None)

    def _successors(self, s: int) -> list[int]:
        """The successors of state ``s`` that count for progress (not itself, not by
        shutdown): kept (with fingerprints), else the steps the search took, again."""
        if self.compact:
            return list(self.edges[self.edge_start[s]: self.edge_start[s + 1]])
        space, walker, probe = self.space, self.walker, self.probe_family
        ids = self.visited.ids(s)
        families = self.every_family
        if (space.reductions.persistent and ids[P_ANSWERED] == space.intern(P_ANSWERED, ())
                and ids[P_HELD] != space.intern(P_HELD, ())
                and self._persistent.chooses(ids, walker.outcomes(probe, ids))):
            families = 1 << probe
        return walker.successors(s, ids, families)

    # -- counterexamples -------------------------------------------------------------

    def _target(self, j: int) -> Ids:
        """What a replayed step must reach to be state ``j``: its canonical ids,
        or with hash compaction its fingerprint (as a 1-tuple)."""
        if self.compact:
            return (int.from_bytes(self.visited.key(j), "little"),)
        return self.visited.ids(j)

    def _path_to(self, j: int) -> list[tuple[Ids, int]]:
        """(target, action number) pairs leading from INITIAL to state ``j``."""
        return [(self._target(s), number) for s, number in self.walker.path(j)]

    def _violation_at_step(self, i: int, number: int, target: Ids, name: str) -> None:
        if self.compact:
            target = (fingerprint(self.space.pack(target)),)
        self._record(name, self._path_to(i), (target, number))

    def _record(self, name: str, path: list[tuple[Ids, int]], last: tuple[Ids, int] | None) -> None:
        canonical_of = self.space.canonical_of
        if self.compact:
            pack = self.space.pack

            def canonical_of(state: State) -> Ids:
                return (fingerprint(pack(self.space.canonical_of(state))),)

        replay = Replay(self.bounds, self.table, self.universe, canonical_of)
        self.result.violation = replay.violation(name, path, last)


_QUIESCENT, _STOPPED = 1, 2
_QUIESCENT_BIT = bytes(b & _QUIESCENT for b in range(256))


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
