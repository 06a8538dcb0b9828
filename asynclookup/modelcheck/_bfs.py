"""The breadth-first search behind ``asynclookup.modelcheck.search.check``.

One search of one bounded model (``_Search``): the action families memoised
together, the admission of each new state (its invariants, quiescence and the
``SOMETIMES`` goals, handed to the compiled walk once the memos have decided),
the step that breaks a step property, the progress check at the fixpoint, and
the counterexample replayed from the path to the state that broke a property.
``run`` is one search, again with wide keys when a field id outgrows 2 bytes.
``search.py`` holds the theory of operation and the public entry point;
``bounds.py`` what a search is asked and what it reports.
"""

from __future__ import annotations

import itertools
import struct
import time
from array import array
from collections.abc import Callable, Mapping
from dataclasses import replace
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
from asynclookup.modelcheck._counterexample import CRASH, PROGRESS, Replay
from asynclookup.modelcheck._memo import MISS, Memo, MemoGroup, changed_fields, tracked_call
from asynclookup.modelcheck._persistent import ProbeFirst
from asynclookup.modelcheck._visited import (
    BAD,
    PyWalk,
    TableLike,
    WalkLike,
    fingerprint,
    kernel,
)
from asynclookup.modelcheck._visited import Table as Visited
from asynclookup.modelcheck.bounds import Bounds, CheckResult
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
from asynclookup.spec.properties import ALWAYS, SOMETIMES, quiescent

Table = Mapping[type, Transition]
ProgressFn = Callable[[int, int, float], None]

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

_STEP_PROPS = tuple(p for p in ALWAYS if p.step is not None)
_STATE_PROPS = tuple(p for p in ALWAYS if p.state is not None)

# An outcome of one enabled action: (action number, the ids of the fields it
# changed and where the target's fields come from (``_canon.picks_of``), or
# None if it changed none, names of the step properties it breaks).
Outcome = tuple[int, Ids, tuple[int, ...] | None, tuple[str, ...]]


def run(
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
