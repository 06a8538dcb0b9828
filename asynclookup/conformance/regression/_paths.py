"""What the spec allows at each call of a counterexample, along every path it may take
(``asynclookup.conformance.regression.writer``'s first half).

``explore(error)`` replays the shrunk calls on ``engine.Checker``s, one per
*path*: every outcome the spec allows at a step (each verdict of a lookup,
each tier call the worker may make) forks the path.  For each call it records,
by path, what the regression file asserts there (``Step``), and a sentence or
two saying what the spec allows and why (``Step.why``), read from the spec
states the step starts from.

It does not write anything (``_text`` does), and it judges only what
the oracle's driver judges: the observations each call makes.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from asynclookup.conformance.counterexample import Call, ConformanceError
from asynclookup.conformance.eventually import ASKED_AGAIN
from asynclookup.conformance.regression.harness import WAIT, memory_answer
from asynclookup.conformance.targets.adapter import Plan
from asynclookup.observe.engine import (
    Checker,
    CleanupSeen,
    DrainSeen,
    FlushSeen,
    Leftover,
    LookupSeen,
    MarkMissSeen,
    MarkPresentSeen,
    Observation,
    Overdue,
    ShutdownSeen,
    Stalled,
    TierCallSeen,
    TierCallWaiting,
    WorkerDied,
)
from asynclookup.observe.interface import Violation
from asynclookup.spec.errors import AsyncLookupError
from asynclookup.spec.properties import title_of
from asynclookup.spec.state import State

VERDICT_CALLS = ("lookup", "await_verdict")  # the steps whose outcome is a verdict
MAX_PATHS = 64  # paths followed at one step; a run that forks more is refused
MAX_SHUTDOWN_CALLS = 8  # tier calls a shutdown may make in one explored sequence
Outcome = Any  # a verdict, a (request, keys) tier call, None, or a tuple of tier calls
ByPath = dict[tuple[Outcome, ...], Any]  # the outcomes of the branching steps -> a value


PLAN_WORDS = {  # what a plan of each kind makes the tier do, in words
    "proper": "properly", "raise": "with an exception", "short": "with too few values",
    "long": "with too many values", "junk": "with a value that is not a bool",
    "lazy": "with a lazy iterable", "lazy_raise": "with a lazy iterable that raises part-way",
    "slow": "properly, but late",
}


class RegressionError(AsyncLookupError, ValueError):
    """This counterexample cannot be written as a regression test; the message says why."""


@dataclass
class _Path:
    """One way the run may go: the checker that followed it and what the test counts."""

    checker: Checker
    outcomes: tuple[Outcome, ...] = ()  # the outcomes of the branching steps so far
    answered: int = 0  # keys of the tier calls answered (what the worker must post)
    settled_at: int = 0


@dataclass
class Step:
    """What the file asserts at one call, for each path that reaches it."""

    call: Call
    allowed: ByPath = field(default_factory=dict)
    owed: ByPath = field(default_factory=dict)
    wait: ByPath = field(default_factory=dict)
    empty: ByPath = field(default_factory=dict)  # by the path after the call
    unchecked: set[Outcome] = field(default_factory=set)  # property 8 warned: no more checks
    breaks: set[str] = field(default_factory=set)
    branches: bool = False
    why: str = ""  # what the spec allows here, and why, in one line
    failing: bool = False  # the call at which the class broke the property
    asks: Outcome = None  # the (request, keys) tier call the recorded run answered here


@dataclass(frozen=True)
class Explored:
    """Every step of the regression test, what a dead worker breaks, and what a table of
    each role (probes, index, batch) left holding entries breaks."""

    steps: list[Step]
    dead_worker: str
    leaks: dict[str, str]


def _fork(path: _Path) -> _Path:
    checker = copy.deepcopy(path.checker, {id(path.checker.table): path.checker.table})
    return _Path(checker, path.outcomes, path.answered, path.settled_at)


def _judge(path: _Path, seen: Sequence[Observation], strict: bool) -> Violation | str | None:
    """Feed ``seen`` as the driver does: the violation, None, or "unchecked" (property 8
    warned without --strict-efficiency, so the oracle stops checking that run)."""
    for obs in seen:
        violation = path.checker.observe(obs)
        if violation is None and strict and path.checker.warnings:
            violation = path.checker.warnings[0]
        if violation is not None:
            return "unchecked" if violation.kind == "efficiency" and not strict else violation
    return None


def _tier_calls(checker: Checker) -> list[tuple[str, tuple[bytes, ...]]]:
    """Every (request, keys in some order) a held batch of a possible state lets the worker ask."""
    found: dict[tuple[str, tuple[bytes, ...]], None] = {}
    for state in checker.states:
        for request in dict.fromkeys(e.request for e in state.held):
            keys = [e.key for e in state.held if e.request == request]
            for order in itertools.permutations(keys):
                found[request, order] = None
    return list(found)


def _seen_of(call: Call) -> Observation | None:
    """The observation of a scheduler call that returned (None for the other calls)."""
    method, args = call.method, call.args
    if method == "flush":
        return FlushSeen()
    if method == "cleanup":
        return CleanupSeen(args[0])
    if method == "mark_miss":
        return MarkMissSeen(tuple(args[0]))
    if method == "mark_present":
        return MarkPresentSeen(tuple(args[0]))
    if method == "drain_results":
        return DrainSeen()
    return None


def _outcomes(path: _Path, call: Call) -> list[tuple[Outcome, list[Observation]]]:
    """Each outcome ``call`` could have on ``path``, with the observations it makes."""
    method, args = call.method, call.args
    if method == "lookup":
        return [(v, [LookupSeen(args[0], args[1], v)]) for v in (None, False, True)]
    if method == "answer":
        plan = args[0] if args else Plan()
        out: list[tuple[Outcome, list[Observation]]] = [
            ((r, keys), [TierCallSeen(keys, r, memory_answer(plan, len(keys)))])
            for r, keys in _tier_calls(path.checker)
        ]
        if path.checker.owed_tier_calls() == 0:
            out.append((None, []))
        return out
    if method == "settle":
        # a wait for the worker: it judges nothing, but a tier call it owes that arrives
        # proves the posts before it (TierCallWaiting); only calls that narrow are told
        # apart, any other arrival (or none) is the outcome None
        settled: list[tuple[Outcome, list[Observation]]] = [(None, [])]
        settled.extend((call, [TierCallWaiting(call[1], call[0])]) for call in _arrivals(path))
        return settled
    if method == "await_verdict":
        key, request = args[0], args[1]
        return [
            (v, [DrainSeen(), LookupSeen(key, request, v), *([_late(key, request)] if v is None
                                                            else [])])
            for v in (None, False, True)
        ]
    if method == "await_empty":
        return [(None, [DrainSeen(), _late(None, None)])]
    seen = _seen_of(call)
    if seen is None:
        raise RegressionError(f"cannot write {call.text!r} as a regression step")
    return [(None, [seen])]


def _arrivals(path: _Path) -> list[tuple[str, tuple[bytes, ...]]]:
    """The owed tier calls whose arrival, seen at a settle, narrows ``path``'s states."""
    if path.checker.owed_tier_calls() == 0:
        return []
    narrowing = []
    for request, keys in _tier_calls(path.checker):
        if tuple(sorted(keys)) != keys:
            continue  # one order of the keys stands for all: arrival is matched unordered
        nxt = _fork(path)
        nxt.checker.observe(TierCallWaiting(keys, request))
        if len(nxt.checker.states) < len(path.checker.states):
            narrowing.append((request, keys))
    return narrowing


def _late(key: bytes | None, request: str | None) -> Overdue:
    """What the re-asks of an ``await_*`` step conclude when the bound passes unseen."""
    return Overdue(True, key, request)


def _settles(path: _Path) -> bool:
    """Whether the driver's settle waits here: no tier call owed, results answered since."""
    return path.checker.owed_tier_calls() == 0 and path.answered > path.settled_at


def _shutdowns(
    path: _Path, plans: Sequence[Plan], strict: bool, asked: tuple[Outcome, ...] = ()
) -> Iterable[tuple[tuple[Outcome, ...], _Path | None]]:
    """The tier-call sequences a shutdown may make (each auto-answered), with the path after
    (None: property 8 warned there, unchecked from then on)."""
    ended = _fork(path)
    judgement = _judge(ended, [ShutdownSeen()], strict)
    if judgement is None or judgement == "unchecked":
        yield asked, ended if judgement is None else None
    if len(asked) >= MAX_SHUTDOWN_CALLS:
        return
    plan = plans[len(asked)] if len(asked) < len(plans) else Plan()
    for request, keys in _tier_calls(path.checker):
        nxt = _fork(path)
        answer = memory_answer(plan, len(keys))
        verdict = _judge(nxt, [TierCallSeen(keys, request, answer)], strict)
        if verdict is None:
            nxt.answered += len(keys)
            yield from _shutdowns(nxt, plans, strict, (*asked, (request, keys)))


def explore(error: ConformanceError) -> Explored:
    """Follow every allowed path through the calls (and the closing shutdown)."""
    strict = bool(error.config.get("strict_efficiency", False))
    start = Checker(hidden_worker=True)
    dead = _title_of(start, WorkerDied("its thread is gone"))
    leaks = {role: _title_of(start, Leftover("a table", frozenset({role})))
             for role in ("probes", "index", "batch")}
    # an await_empty that ended at its first re-ask to ask about a held key judged
    # nothing: it was one drain_results(), and the file makes it one
    calls = [Call(c.text, "drain_results", ()) if c.method == "await_empty" and c.args
             else c for c in error.calls]
    if not calls or calls[-1].method != "shutdown":
        calls.append(Call("shutdown(), as every run ends", "shutdown", ()))
    paths, steps = [_Path(start)], []
    for number, call in enumerate(calls, 1):
        step, children = _step(call, paths, strict)
        step.why = why(call, [p.checker.states for p in paths], step)
        # Where the oracle asked about a leftover's key again (the next call), it judged
        # the tables only after that: the file does the same.
        asks_again = number < len(calls) and calls[number].args[1:2] == (ASKED_AGAIN,)
        paths = []
        for outcome, after, empty in children:
            if step.branches:
                after.outcomes = (*after.outcomes, outcome)
            step.empty[after.outcomes] = empty and not asks_again
            paths.append(after)
        if len(paths) > MAX_PATHS:
            raise RegressionError(
                f"the spec allows more than {MAX_PATHS} ways through these calls"
            )
        if number == len(error.calls):  # the failing step names what the class broke
            step.breaks = {f"{error.violation.title}: {error.violation.detail}"}
            step.failing = True
        steps.append(step)
        if not paths:
            break
    return Explored(steps, dead, leaks)


def _step(
    call: Call, paths: list[_Path], strict: bool
) -> tuple[Step, list[tuple[Outcome, _Path, bool]]]:
    """What the file asserts at ``call`` on each path, and the paths after it (with the
    outcome that led there and whether nothing is live there)."""
    step = Step(call)
    children: list[tuple[Outcome, _Path, bool]] = []
    for path in paths:
        key = path.outcomes
        allowed: list[Outcome] = []
        if call.method == "shutdown":
            plans = list(call.args[0]) if call.args else []
            for asked, after in _shutdowns(path, plans, strict):
                allowed.append(asked)
                if after is None:
                    step.unchecked.add(asked)
                else:
                    children.append((asked, after, False))
            step.allowed[key] = frozenset(allowed)
            continue
        step.owed[key] = path.checker.owed_tier_calls() > 0
        step.wait[key] = call.method == "settle" and _settles(path)
        for outcome, seen in _outcomes(path, call):
            nxt = _fork(path)
            judgement = _judge(nxt, seen, strict)
            if isinstance(judgement, Violation):
                if call.method in VERDICT_CALLS:
                    step.breaks.add(judgement.title)
                continue
            allowed.append(outcome)
            if judgement == "unchecked":
                step.unchecked.add(outcome)
                continue
            if isinstance(outcome, tuple) and call.method == "answer":
                nxt.answered += len(outcome[1])
            if step.wait[key]:
                nxt.settled_at = nxt.answered
            children.append((outcome, nxt, nxt.checker.expects_empty()))
        if call.method == "settle":  # the arrivals told apart (None: any other, or none)
            allowed = [o for o in allowed if o is not None]
        step.allowed[key] = (
            set(allowed) if call.method in VERDICT_CALLS else frozenset(allowed)
        )
        if call.method == "answer":  # the tier call the recorded run answered here
            step.asks = next((o for o in allowed if o is not None and any(
                note.startswith(f"tier asked {list(o[1])!r} for {o[0]!r}:")
                for note in call.notes)), step.asks)
        if call.method == "answer" and step.owed[key]:
            step.breaks.add(_title_of(path.checker, Stalled("tier call", True)))
    step.branches = any(
        len(v) > (0 if call.method == "settle" else 1) for v in step.allowed.values())
    return step, children


def _title_of(checker: Checker, obs: Observation) -> str:
    forked = copy.deepcopy(checker, {id(checker.table): checker.table})
    violation = forked.observe(obs)
    return violation.title if violation is not None else title_of(6)


# -- why: what the spec allows at a step, in one line ------------------------------------


def why(call: Call, before: Sequence[Sequence[State]], step: Step) -> str:
    """One line saying what the spec allows at ``call`` and why, read from the spec states
    each path starts the call from (``before``)."""
    states = [s for group in before for s in group]
    method, args = call.method, call.args
    if method == "lookup":
        allowed = sorted({v for a in step.allowed.values() for v in a}, key=repr)
        said = f"{_probe_text(states, args[0])}: the protocol allows {_either(allowed)}"
        return said + (" (what it returns decides the later steps)" if step.branches else "")
    if method == "flush":
        live = sorted({e.key for s in states for e in s.batch if _live(s, e.key, e.generation)})
        if not live:
            return "flush submits nothing live: no tier call is owed for it"
        return f"flush submits {_keys(live)}: the worker owes a tier call per request"
    if method == "answer":
        return _answer_text(call, step)
    if method == "settle":
        if step.branches:
            return ("the worker gets its answers; the tier call it owes next, if it comes, "
                    "proves it posted every batch before (one worker posts before it takes "
                    "the next batch)")
        if not any(step.wait.values()):
            return "the worker owes no post here: nothing to wait for"
        return "the worker was answered: wait until it posts (a wait, not a check)"
    if method == "await_verdict":
        allowed = sorted({v for a in step.allowed.values() for v in a}, key=repr)
        return (f"nothing more is owed, so {args[0]!r} must show its verdict "
                f"({_either(allowed)}) within {WAIT:g} s of re-asking")
    if method == "await_empty":
        return ("every request is cleaned up: once the worker posts, the tables must be "
                "empty (properties 4, 5)")
    if method == "cleanup":
        return f"{args[0]!r} stops asking: its probes go, unless IN_FLIGHT"
    if method == "mark_miss":
        return "RESOLVED verdicts of these keys become False; the others are left alone"
    if method == "mark_present":
        return "each key gets a new generation, verdict True: older results are stale"
    if method == "drain_results":
        return "drain_results applies every posted result; a stale one is ignored"
    return _shutdown_text(step)


def _answer_text(call: Call, step: Step) -> str:
    plan = call.args[0] if call.args else Plan()
    asked = sorted({c for a in step.allowed.values() for c in a if c is not None}, key=repr)
    shown = " or ".join(f"{list(k)!r} for {r!r}" for r, k in asked) or "none"
    if not any(step.owed.values()):
        return f"no tier call is owed here; one that comes may be {shown}"
    answers = " or ".join(sorted({str(memory_answer(plan, len(k))) for _, k in asked}))
    return (f"the worker owes a tier call ({shown}); the tier {answers} "
            f"({PLAN_WORDS.get(plan.kind, plan.kind)})")


def _shutdown_text(step: Step) -> str:
    sequences = {seq for a in step.allowed.values() for seq in a}
    said = "the worker stops after its batch in hand; tier calls answered at once"
    if sequences == {()}:
        return said
    shown = " or ".join(
        "no tier call" if not seq else ", then ".join(f"{list(k)!r} for {r!r}"
                                                       for r, k in seq)
        for seq in sorted(sequences, key=repr))
    return f"{said}; it may ask {shown}"


def _live(state: State, key: bytes, generation: int) -> bool:
    probe = dict(state.probes).get(key)
    return probe is not None and probe.generation == generation


def _probe_text(states: Sequence[State], key: bytes) -> str:
    """How the spec's probe of ``key`` stands, over the possible states, and what a
    lookup's drain does to it first."""
    seen: dict[str, set[bool]] = {}  # how it stands -> whether its result is posted
    for state in states:
        probe = dict(state.probes).get(key)
        if probe is None:
            shown = "has no probe yet (this lookup starts one)"
        elif probe.verdict is None:
            shown = f"is {probe.phase.name}"
        else:
            shown = f"is RESOLVED {probe.verdict!r}"
        seen.setdefault(shown, set()).add(any(
            r.key == key and _live(state, key, r.generation) for r in state.posted))
    posted = {True: ", its result posted", False: "", None: ", its result maybe posted"}
    return f"{key!r} " + " or ".join(
        shown + posted[next(iter(p)) if len(p) == 1 else None] for shown, p in seen.items())


def _either(values: Sequence[object]) -> str:
    return " or ".join(map(repr, values)) if values else "no verdict at all"


def _keys(keys: Sequence[bytes]) -> str:
    return ", ".join(map(repr, keys))
