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

from asynclookup.conformance.driver import ASKED_AGAIN, Call, ConformanceError
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
    WorkerDied,
)
from asynclookup.observe.interface import Violation
from asynclookup.observe.observations import Answer
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
    why: list[str] = field(default_factory=list)  # what the spec allows here, and why
    failing: bool = False  # the call at which the class broke the property


@dataclass(frozen=True)
class Explored:
    """Every step of the regression test, what a dead worker breaks, and what a table of
    each role (probes, index, batch) left holding entries breaks."""

    steps: list[Step]
    dead_worker: str
    leaks: dict[str, str]


def memory_answer(plan: Plan, n: int) -> Answer:
    """The oracle's memory tier: ``plan`` for n keys, the plan's bits padded with False."""
    return plan.answer([plan.bits[i] if i < len(plan.bits) else False for i in range(n)])


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
        return [(None, [])]  # a wait for the worker, a hint: it judges nothing
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
    verdict = _judge(ended, [ShutdownSeen()], strict)
    if verdict is None or verdict == "unchecked":
        yield asked, ended if verdict is None else None
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
    calls = list(error.calls)
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
            verdict = _judge(nxt, seen, strict)
            if isinstance(verdict, Violation):
                if call.method in VERDICT_CALLS:
                    step.breaks.add(verdict.title)
                continue
            allowed.append(outcome)
            if verdict == "unchecked":
                step.unchecked.add(outcome)
                continue
            if isinstance(outcome, tuple):
                nxt.answered += len(outcome[1])
            if step.wait[key]:
                nxt.settled_at = nxt.answered
            children.append((outcome, nxt, nxt.checker.expects_empty()))
        step.allowed[key] = (
            set(allowed) if call.method in VERDICT_CALLS else frozenset(allowed)
        )
        if call.method == "answer" and step.owed[key]:
            step.breaks.add(_title_of(path.checker, Stalled("tier call", True)))
    step.branches = any(len(v) > 1 for v in step.allowed.values())
    return step, children


def _title_of(checker: Checker, obs: Observation) -> str:
    forked = copy.deepcopy(checker, {id(checker.table): checker.table})
    violation = forked.observe(obs)
    return violation.title if violation is not None else title_of(6)


# -- why: what the spec allows at a step, in words ---------------------------------------


def why(call: Call, before: Sequence[Sequence[State]], step: Step) -> list[str]:
    """Sentences saying what the spec allows at ``call`` and why, read from the spec states
    each path starts the call from (``before``)."""
    states = [s for group in before for s in group]
    method, args = call.method, call.args
    if method == "lookup":
        key, request = args[0], args[1]
        allowed = sorted({v for a in step.allowed.values() for v in a}, key=repr)
        said = [f"{_probe_text(states, key)}, so the protocol allows {_either(allowed)} "
                f"here.{_drain_text(states, key)}"]
        if not any(request in dict(s.probes)[key].requesters for s in states
                   if key in dict(s.probes)):
            said.append(f"{request!r} becomes a requester of {key!r}.")
        if step.branches:
            said.append("The verdict this class returns here decides what the later steps "
                        "allow (branches=True).")
        return said
    if method == "flush":
        live = sorted({e.key for s in states for e in s.batch if _live(s, e.key, e.generation)})
        if not live:
            return ["flush submits nothing live: no tier call is owed for it."]
        return [f"flush submits {_keys(live)} to the worker, which then owes a tier call for "
                "each request group (property 6)."]
    if method == "answer":
        return _answer_text(call, step)
    if method == "settle":
        if not any(step.wait.values()):
            return ["The worker owes no post here, so the test does not wait."]
        return ["The worker has been answered and owes a result for every key it asked "
                "about; the test gives it time to post them (a wait, not a check: the "
                "steps after it judge what shows)."]
    if method == "await_verdict":
        allowed = sorted({v for a in step.allowed.values() for v in a}, key=repr)
        return ["The tier answered and nothing more is owed, so the worker must post and "
                "the verdict show (property 6): the test re-asks drain_results() and the "
                f"lookup, bounded, and the protocol allows {_either(allowed)} then."]
    if method == "await_empty":
        return ["Every request is cleaned up once the worker posts what it owes: the test "
                "re-asks drain_results(), bounded, until the tables are empty "
                "(properties 4 and 5)."]
    if method == "cleanup":
        return [f"{args[0]!r} stops being a requester; a probe left without requesters is "
                "deleted unless it is IN_FLIGHT (its result deletes it later)."]
    if method == "mark_miss":
        return ["mark_miss turns RESOLVED verdicts of these keys into False; PENDING and "
                "IN_FLIGHT probes are left alone (their own verdict will land)."]
    if method == "mark_present":
        return ["mark_present gives each key's probe a new generation and verdict True "
                "(a probe nobody asks for is deleted), so older results become stale."]
    if method == "drain_results":
        return ["drain_results applies every posted result; a stale one is ignored."]
    return _shutdown_text(step)


def _answer_text(call: Call, step: Step) -> list[str]:
    plan = call.args[0] if call.args else Plan()
    asked = sorted({c for a in step.allowed.values() for c in a if c is not None}, key=repr)
    if not any(step.owed.values()):
        if not asked:
            return ["No tier call is owed here and none is allowed: the test checks that the "
                    "worker makes none."]
        return ["No tier call is owed here; if the worker makes one, it may be "
                + " or ".join(f"{list(k)!r} for {r!r}" for r, k in asked) + "."]
    shown = " or ".join(f"{list(k)!r} for {r!r}" for r, k in asked) or "nothing"
    answers = " or ".join(sorted({str(memory_answer(plan, len(k))) for _, k in asked}))
    return [f"A flushed batch is waiting, so the worker owes a tier call (property 6): it "
            f"may ask {shown}.",
            f"The test answers {PLAN_WORDS.get(plan.kind, plan.kind)} ({answers}); whatever "
            "the tier answers, the worker must survive it and give every key a verdict "
            "(False for any key not answered properly)."]


def _shutdown_text(step: Step) -> list[str]:
    sequences = {seq for a in step.allowed.values() for seq in a}
    said = ["shutdown stops the worker after the batch in hand; the test answers its tier "
            "calls at once."]
    if sequences != {()}:
        shown = " or ".join(
            "no tier call" if not seq else ", then ".join(f"{list(k)!r} for {r!r}"
                                                           for r, k in seq)
            for seq in sorted(sequences, key=repr))
        said.append(f"Meanwhile the protocol allows: {shown}.")
    return said


def _live(state: State, key: bytes, generation: int) -> bool:
    probe = dict(state.probes).get(key)
    return probe is not None and probe.generation == generation


def _probe_text(states: Sequence[State], key: bytes) -> str:
    """How the spec's probe of ``key`` stands, over the possible states."""
    seen: dict[str, None] = {}
    for state in states:
        probe = dict(state.probes).get(key)
        if probe is None:
            seen["has no probe yet: this lookup starts one (PENDING, no verdict)"] = None
        elif probe.verdict is None:
            article = "an" if probe.phase.name[0] in "AEIOU" else "a"
            seen[f"has {article} {probe.phase.name} probe (no verdict yet)"] = None
        else:
            seen[f"has a RESOLVED probe with verdict {probe.verdict!r}"] = None
    return f"{key!r} " + " or ".join(seen)


def _drain_text(states: Sequence[State], key: bytes) -> str:
    """What a lookup's drain does to ``key`` first, when results are posted for it."""
    fresh = sum(any(r.key == key and _live(s, key, r.generation) for r in s.posted)
                for s in states)
    stale = any(r.key == key and not _live(s, key, r.generation) for s in states
                for r in s.posted)
    if fresh == len(states):
        return " A result for it is posted: the lookup applies it first."
    if fresh:
        return (" Its result may be posted already (the lookup then applies it first and "
                "returns its verdict) or not yet (None).")
    if stale:
        return " A result posted for an older generation of it is stale: the lookup ignores it."
    return ""


def _either(values: Sequence[object]) -> str:
    return " or ".join(map(repr, values)) if values else "no verdict at all"


def _keys(keys: Sequence[bytes]) -> str:
    return ", ".join(map(repr, keys))
