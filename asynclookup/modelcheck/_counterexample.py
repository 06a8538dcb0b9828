"""Counterexamples of the model checker, replayed as concrete runs of the table.

The search finds a violation as a path of canonical states (each reached by
an action applied to a representative, up to the reductions).  ``Replay``
turns that path into a run from ``INITIAL``: at each step it tries every
action of the same kind (a permutation of keys or requests maps an action to
one of its own kind) and keeps the one whose successor has the recorded
canonical form.  So a counterexample is a real sequence of steps of the table
with real generations, and as short as the search's path: the search is
breadth-first and the reductions preserve distances.

What it does not do: search, or print (``asynclookup.modelcheck.report`` prints).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from asynclookup.modelcheck._canon import Ids
from asynclookup.spec.core import (
    INITIAL,
    Action,
    Flush,
    Output,
    Post,
    ProbeGroup,
    State,
    TakeBatch,
    Transition,
    group_of,
)
from asynclookup.spec.properties import ALWAYS, Finding, Predicate, violated

Table = Mapping[type, Transition]
CRASH = "action_raised"
PROGRESS = "progress_quiescence_reachable"
PROGRESS_DOC = "From every reachable state a quiescent state is reachable (without shutdown)."
_BY_NAME: dict[str, Predicate] = {p.name: p for p in ALWAYS}


class TraceStep(NamedTuple):
    """One concrete step of a counterexample: the action, its output, the state after."""

    action: Action
    output: Output
    state: State


@dataclass(frozen=True)
class Violation(Finding):
    """A broken property and the shortest trace from INITIAL that breaks it.

    ``number``: the property of docs/properties.md, 0 for an action that raised;
    ``detail``: the broken predicate's docstring (for a crash, the exception).
    """

    predicate: str  # the predicate broken; PROGRESS or CRASH for those two
    trace: tuple[TraceStep, ...]
    then: tuple[TraceStep, ...] = ()  # what the worker does next, after a bad flush
    also: tuple[str, ...] = ()  # other properties the last step breaks


class _Bounded(Protocol):
    def within(self, state: State) -> bool: ...


class Replay:
    """Replays paths of the search with the table's own steps."""

    def __init__(
        self,
        bounds: _Bounded,
        table: Table,
        universe: Sequence[Action],
        canonical_of: Callable[[State], Ids],
    ) -> None:
        self.bounds, self.table, self.universe = bounds, table, universe
        self.canonical_of = canonical_of

    def violation(
        self, name: str, path: Sequence[tuple[Ids, int]], last: tuple[Ids, int] | None
    ) -> Violation:
        """The violation ``name``: ``path`` from INITIAL, then the breaking step
        ``last`` (its target and action number) when a step broke it."""
        trace: list[TraceStep] = []
        state = INITIAL
        for target, number in path:
            step = self._concrete(state, number, target, None)
            trace.append(step)
            state = step.state
        if last is not None:
            trace.append(self._concrete(state, last[1], last[0], name))
        then: tuple[TraceStep, ...] = ()
        if trace and isinstance(trace[-1].action, Flush):
            then = worker_continues(trace[-1].state, self.table)
        also: tuple[str, ...] = ()
        if trace and not name.startswith(CRASH):
            before = trace[-2].state if len(trace) > 1 else INITIAL
            step = trace[-1]
            broken = violated(before, step.action, step.state, step.output)
            also = tuple(p.name for p in broken if p.name != name)
        prop = _BY_NAME.get(name)
        if prop is not None:
            doc = " ".join((getattr(prop.state or prop.step, "__doc__", "") or "").split())
            return Violation(prop.number, doc, name, tuple(trace), then, also)
        if name == PROGRESS:
            return Violation(6, PROGRESS_DOC, name, tuple(trace), then)
        return Violation(0, name, CRASH, tuple(trace), then)

    def _concrete(self, state: State, number: int, target: Ids, broken: str | None) -> TraceStep:
        """A step from ``state`` of the same kind as action ``number`` that reaches
        ``target`` (up to the reductions) and, if ``broken``, breaks that property."""
        kind = type(self.universe[number])
        transition = self.table[kind]
        for action in self.universe:
            if type(action) is not kind:
                continue
            try:
                if not transition.enabled(state, action):
                    continue
                after, output = transition.apply(state, action)
            except Exception:
                if broken is not None and broken.startswith(CRASH):
                    return TraceStep(action, None, state)
                continue
            if not self.bounds.within(after) or self.canonical_of(after) != target:
                continue
            prop = _BY_NAME.get(broken or "")
            if broken is None or (
                prop is not None and prop.step is not None
                and not prop.step(state, action, after, output)
            ):
                return TraceStep(action, output, after)
        raise AssertionError(f"no concrete {kind.__name__} step replays the search")


def worker_continues(state: State, table: Table, limit: int = 12) -> tuple[TraceStep, ...]:
    """The worker's next steps (answers all True) until it is idle: what a bad flush leads to."""
    steps: list[TraceStep] = []
    for _ in range(limit):
        group = group_of(state.held)
        for action in (TakeBatch(), ProbeGroup((True,) * len(group)), Post()):
            transition = table[type(action)]
            if transition.enabled(state, action):
                state, output = transition.apply(state, action)
                steps.append(TraceStep(action, output, state))
                break
        else:
            break
    return tuple(steps)
