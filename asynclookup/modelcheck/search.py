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
The visited set stores each state as one packed key (``asynclookup.modelcheck._visited``,
compiled when built), with parent numbers and successor lists as arrays; with
``hash_compaction`` it stores 64-bit fingerprints instead (opt-in: a state may
be missed, with the probability ``CheckResult.missed_state_bound`` bounds).  Traces are
rebuilt at the end by replaying concrete steps from ``INITIAL``
(``asynclookup.modelcheck._counterexample``), so a counterexample is a real run of the table,
shortest because the search is breadth-first and the reductions preserve
distances.  The reductions default to ``default_reductions(table)``.

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
from asynclookup.modelcheck._memo import MISS, Memo, MemoGroup, changed_fields
from asynclookup.modelcheck._persistent import ProbeFirst
from asynclookup.modelcheck._visited import (
    IMPLEMENTATION,
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
    search_bytes: int = 0  # bytes of the other per-state arrays (parents, edges, flags)
    visited_impl: str = IMPLEMENTATION  # compiled or pure-python
    key_bytes: int = 0  # bytes of a packed state key (18, or 32 once an id outgrew 2 bytes)

    @property
    def bytes_per_state(self) -> float:
        """What the search stored per distinct state: visited set, parents, edges, flags."""
        return (self.visited_bytes + self.search_bytes) / self.states if self.states else 0.0

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
        self.families = [
            self._memo(self._family([(n, a) for n, a in numbered if type(a) in kinds]), True)
            for kinds in FAMILIES
        ]
        self.all_families = self._group(self.families)
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
        self.goals_left = list(self.goals)  # those not reached yet
        # The invariants and quiescence of a new state, looked up at once.
        on_admit = [m for _, m in self.invariants] + [self.quiet]
        self.admit_lookup: Callable[[Ids], list[Any]] = (
            MemoGroup(on_admit).lookup if memoised  # type: ignore[arg-type]
            else lambda ids: [MISS] * len(on_admit)
        )

    def _group(
        self, memos: list[Callable[[Ids, Callable[[], State]], Any]]
    ) -> Callable[[Ids, Callable[[], State]], list[Any]]:
        if self.memoised:
            return MemoGroup(memos)  # type: ignore[arg-type]
        return lambda ids, build: [m(ids, build) for m in memos]

    def _memo(
        self, fn: Callable[[State], Any], always: bool = False
    ) -> Callable[[Ids, Callable[[], State]], Any]:
        if self.memoised:
            return Memo(fn, always)
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
                picks = picks_of(tuple(f for f, _ in changed)) if changed else None
                found.append((number, new, picks, bad))
            return tuple(found)

        return outcomes

    # -- the breadth-first search ----------------------------------------------------

    def run(
        self, max_states: int | None, max_seconds: float | None, on_progress: ProgressFn | None
    ) -> CheckResult:
        started = time.perf_counter()
        space, result = self.space, self.result
        pack, unpack = space.packer.pack, space.packer.unpack
        visited = self.visited = Visited(space.packer.size, self.compact, space.layout)
        first = pack(*space.canonical_of(INITIAL))
        visited.add(first)
        # Keys not yet expanded, from index ``base`` on: with hash compaction the
        # visited set keeps fingerprints only, so the frontier keeps the states.
        pending, base, compact = [first], 0, self.compact
        self.parent, self.via = array("i", [-1]), array("H", [0])
        self.flags = bytearray()  # per state: _QUIESCENT, _STOPPED
        self.edges, self.edge_start = array("i"), array("I", [0])
        reached = {name: False for name, _ in self.goals}
        graph: list[tuple[int, Action, int]] = []
        if self._admit(0, first, reached):
            return self._finish(started, reached)
        i, level_end, depth, transitions, reported = 0, 1, 0, 0, 0.0
        families, no_edge = self.all_families, self.no_edge
        por = space.reductions.persistent
        no_answers, no_held = space.intern(P_ANSWERED, ()), space.intern(P_HELD, ())
        persistent = self._persistent
        state_of, keep = space.state_of, self.keep
        canonical, admit = space.canonical, self._admit
        add_ids, find_ids, key_of = visited.add_ids, visited.find_ids, visited.key
        reach: Any = None  # the compiled Table.reach and last_key, if built
        last_key: Any = None
        if kernel is not None and isinstance(visited, kernel.Table) and space.quick is not None:
            compiled: Any = visited
            compiled.set_canonical(*space.tables())
            reach, last_key = compiled.reach, compiled.last_key
        parent_of, via_of = self.parent.append, self.via.append
        edges, edge_start = self.edges.extend, self.edge_start.append
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
            ids = unpack(pending[i - base] if compact else key_of(i))
            build = _Lazy(state_of, ids)
            successors: set[int] = set()
            chosen = None
            if por and ids[P_ANSWERED] == no_answers and ids[P_HELD] != no_held:
                chosen = persistent(ids, build)
            for outcomes in chosen or families(ids, build):
                for number, new, picks, bad in outcomes:
                    transitions += 1
                    if bad:
                        target = ids if picks is None else apply_picks(ids, new, picks)
                        result.depth, result.transitions = depth, transitions
                        self._violation_at_step(i, number, canonical(target), bad[0])
                        return self._finish(started, reached)
                    if picks is None:
                        j = i
                    elif reach is not None:  # the compiled kernel: one call
                        found = reach(ids, new, picks)
                        if found is None:  # an orbit not met yet: Python fills it in
                            j, packed = add_ids(canonical(apply_picks(ids, new, picks)))
                        else:
                            j = found
                            if j < 0:
                                packed = last_key()
                    else:
                        target = apply_picks(ids, new, picks)
                        # A visited encoding is canonical already (canonical is idempotent).
                        j = find_ids(target)
                        if j < 0:
                            j, packed = add_ids(canonical(target))
                    if j < 0:  # a new state
                        j = -1 - j
                        if compact:
                            pending.append(packed)
                        parent_of(i)
                        via_of(number)
                        if admit(j, packed, reached):
                            result.depth, result.transitions = depth + 1, transitions
                            return self._finish(started, reached)
                    if keep:
                        graph.append((i, self.universe[number], j))
                    if j != i and number not in no_edge:
                        successors.add(j)
            edges(successors)
            edge_start(len(self.edges))
            i += 1
        result.depth, result.transitions = depth, transitions
        result.fixpoint = i == len(visited)
        if self.keep:
            result.graph = graph
            result.states_list = [state_of(unpack(key_of(k))) for k in range(len(visited))]
        if result.fixpoint and self.progress:
            self._check_progress()
        return self._finish(started, reached)

    def _admit(self, j: int, packed: bytes, reached: dict[str, bool]) -> bool:
        """Check the newly reached state ``j`` (key ``packed``); True if it breaks an invariant."""
        ids = self.space.unpack(packed)
        build = _Lazy(self.space.state_of, ids)
        found = self.admit_lookup(ids)
        for (prop, memo), held in zip(self.invariants, found, strict=False):
            if held is MISS:  # computed in order: a broken invariant stops the others
                held = memo(ids, build)
            if not held:
                self._record(prop.name, self._path_to(j), None)
                return True
        quiet = found[-1]
        if quiet is MISS:
            quiet = self.quiet(ids, build)
        stopped = self.space.values[_P_STOPPED][ids[_P_STOPPED]]
        self.flags.append((_QUIESCENT if quiet else 0) | (_STOPPED if stopped else 0))
        if self.goals_left:
            for name, memo in self.goals_left:
                if memo(ids, build):
                    reached[name] = True
            self.goals_left = [(n, m) for n, m in self.goals_left if not reached[n]]
        return False

    def _finish(self, started: float, reached: dict[str, bool]) -> CheckResult:
        result = self.result
        result.states = len(self.visited)
        result.sometimes = reached
        result.seconds = time.perf_counter() - started
        result.visited_bytes = self.visited.nbytes
        result.key_bytes = self.space.packer.size
        arrays = (self.parent, self.via, self.edges, self.edge_start)
        result.search_bytes = sum(a.buffer_info()[1] * a.itemsize for a in arrays)
        result.search_bytes += len(self.flags)
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
        edges, start, flags = self.edges, self.edge_start, self.flags
        good = flags.translate(_QUIESCENT_BIT)
        left = array("i", (s for s in range(len(flags) - 1, -1, -1) if not good[s]))
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
        stuck = [s for s in reversed(left) if not flags[s] & _STOPPED]
        self.result.stuck = len(stuck)
        if stuck:
            self._record(PROGRESS, self._path_to(stuck[0]), None)

    # -- counterexamples -------------------------------------------------------------

    def _target(self, j: int) -> Ids:
        """What a replayed step must reach to be state ``j``: its canonical ids,
        or with hash compaction its fingerprint (as a 1-tuple)."""
        key = self.visited.key(j)
        if self.compact:
            return (int.from_bytes(key, "little"),)
        return self.space.unpack(key)

    def _path_to(self, j: int) -> list[tuple[Ids, int]]:
        """(target, action number) pairs leading from INITIAL to state ``j``."""
        path = []
        while self.parent[j] >= 0:
            path.append((self._target(j), self.via[j]))
            j = self.parent[j]
        return path[::-1]

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


_P_STOPPED = State._fields.index("stopped")
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
