"""Regression tests in the implementation's own words: a counterexample as a pytest module
that needs neither asynclookup nor Hypothesis.

``regression_file(error)`` turns the shrunk ``ConformanceError`` of a vLLM-shaped
class (``--impl MODULE:CLASS``, threaded, the oracle's own memory tier) into a
pytest module that imports only that class, pytest and the standard library.
The module subclasses the class so that ``batch_lookup`` answers from a script:
each tier call of the worker is held on a ``threading.Event`` until the test
answers it with the plan the oracle used (an exception, too few or too many
values, a non-bool, a lazy iterable that raises, ...).  It makes the shrunk
calls in order and, after each, asserts what the spec allows there: the
verdicts a lookup may return, the tier calls the worker may make, that the
worker posts what it owes, stays alive, and that the class's tables are
empty when nothing is live.  Every wait is bounded.

What the spec allows is worked out here, when the file is written: the calls
are replayed on ``asynclookup.conformance.engine.Checker``s, one per *path*,
and every outcome the spec allows at a step (each verdict, each tier call)
forks the path.  A step whose allowance depends on the outcome of an earlier
one says so (``ByPath`` in the file), so a conforming class passes whatever
allowed outcomes it takes, and the step that failed fails on the buggy class.

What it does not do: judge anything at run time (the written file has no
spec), drive adapters or the reference (``unsupported`` names why), or read
more of the class than the oracle does (vLLM's ``_pending_results`` queue, to
count posted results, and its three tables for the leak check).
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from asynclookup.conformance.adapter import Plan
from asynclookup.conformance.driver import Call, ConformanceError
from asynclookup.conformance.engine import (
    Checker,
    CleanupSeen,
    DrainSeen,
    FlushSeen,
    Leftover,
    LookupSeen,
    MarkMissSeen,
    MarkPresentSeen,
    Observation,
    Settled,
    ShutdownSeen,
    Stalled,
    TierCallSeen,
    Violation,
    WorkerDied,
)
from asynclookup.conformance.vllm import PREFIX, tables_used
from asynclookup.spec.properties import title_of

MAX_PATHS = 64  # paths followed at one step; a run that forks more is refused
MAX_SHUTDOWN_CALLS = 8  # tier calls a shutdown may make in one explored sequence
Outcome = Any  # a verdict, a (request, keys) tier call, None, or a tuple of tier calls


class RegressionError(ValueError):
    """This counterexample cannot be written as a regression test; the message says why."""


def unsupported(config: dict[str, Any]) -> str | None:
    """Why a run with ``config`` cannot have a regression file (None: it can)."""
    target = str(config.get("target", "reference"))
    if not target.startswith(PREFIX):
        return (f"--regression-out needs --impl MODULE:CLASS (a vLLM-shaped class); "
                f"{target!r} is not one (use --replay-out)")
    if config.get("tier", "memory") != "memory":
        return (f"--regression-out needs --tier memory (the file is its own tier), "
                f"not {config['tier']}")
    return None


# -- following the spec along every allowed path ----------------------------------------


@dataclass
class _Path:
    """One way the run may go: the checker that followed it and what the test counts."""

    checker: Checker
    outcomes: tuple[Outcome, ...] = ()  # the outcomes of the branching steps so far
    answered: int = 0  # keys of the tier calls answered (what the worker must post)
    settled_at: int = 0


@dataclass
class _Step:
    """What the file asserts at one call, for each path that reaches it."""

    call: Call
    allowed: dict[tuple[Outcome, ...], Any] = field(default_factory=dict)
    owed: dict[tuple[Outcome, ...], bool] = field(default_factory=dict)
    wait: dict[tuple[Outcome, ...], bool] = field(default_factory=dict)
    empty: dict[tuple[Outcome, ...], bool] = field(default_factory=dict)  # by the path after
    unchecked: set[Outcome] = field(default_factory=set)  # property 8 warned: no more checks
    breaks: set[str] = field(default_factory=set)
    branches: bool = False


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


def _answer(plan: Plan, n: int) -> Any:
    """The oracle's memory tier: ``plan`` for n keys, the plan's bits padded with False."""
    return plan.answer([plan.bits[i] if i < len(plan.bits) else False for i in range(n)])


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


def _outcomes(path: _Path, call: Call, strict: bool) -> list[tuple[Outcome, list[Observation]]]:
    """Each outcome ``call`` could have on ``path``, with the observations it makes."""
    method, args = call.method, call.args
    if method == "lookup":
        return [(v, [LookupSeen(args[0], args[1], v)]) for v in (None, False, True)]
    if method == "answer":
        plan = args[0] if args else Plan()
        out: list[tuple[Outcome, list[Observation]]] = [
            ((r, keys), [TierCallSeen(keys, r, _answer(plan, len(keys)))])
            for r, keys in _tier_calls(path.checker)
        ]
        if path.checker.owed_tier_calls() == 0:
            out.append((None, []))
        return out
    if method == "settle":
        return [(None, [Settled()] if _settles(path) else [])]
    seen = _seen_of(call)
    if seen is None:
        raise RegressionError(f"cannot write {call.text!r} as a regression step")
    return [(None, [seen])]


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
        verdict = _judge(nxt, [TierCallSeen(keys, request, _answer(plan, len(keys)))], strict)
        if verdict is None:
            nxt.answered += len(keys)
            yield from _shutdowns(nxt, plans, strict, (*asked, (request, keys)))


def _explore(error: ConformanceError) -> tuple[list[_Step], dict[str, str]]:
    """Follow every allowed path through the calls (and the closing shutdown)."""
    strict = bool(error.config.get("strict_efficiency", False))
    start = Checker(hidden_worker=True)
    titles = {"DEAD_WORKER": _title_of(start, WorkerDied("its thread is gone"))}
    titles["LEAK"] = _title_of(start, Leftover("a table"))
    calls = list(error.calls)
    if not calls or calls[-1].method != "shutdown":
        calls.append(Call("shutdown(), as the oracle ends every run", "shutdown", ()))
    paths, steps = [_Path(start)], []
    for number, call in enumerate(calls, 1):
        step = _Step(call)
        children: list[tuple[Outcome, _Path, bool]] = []  # outcome, path after, empty after
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
            for outcome, seen in _outcomes(path, call, strict):
                nxt = _fork(path)
                verdict = _judge(nxt, seen, strict)
                if isinstance(verdict, Violation):
                    if call.method == "lookup":
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
            step.allowed[key] = set(allowed) if call.method == "lookup" else frozenset(allowed)
            if call.method == "answer" and step.owed[key]:
                step.breaks.add(_title_of(path.checker, Stalled("tier call", True)))
            if step.wait[key]:
                step.breaks.add(_title_of(path.checker, Stalled("post", True)))
        step.branches = any(len(v) > 1 for v in step.allowed.values())
        paths = []
        for outcome, after, empty in children:
            if step.branches:
                after.outcomes = (*after.outcomes, outcome)
            step.empty[after.outcomes] = empty
            paths.append(after)
        if len(paths) > MAX_PATHS:
            raise RegressionError(
                f"the spec allows more than {MAX_PATHS} ways through these calls"
            )
        if number == len(error.calls):  # the failing step names what the class broke
            step.breaks = {f"{error.violation.title}: {error.violation.detail}"}
        steps.append(step)
        if not paths:
            break
    return steps, titles


def _title_of(checker: Checker, obs: Observation) -> str:
    forked = copy.deepcopy(checker, {id(checker.table): checker.table})
    violation = forked.observe(obs)
    return violation.title if violation is not None else title_of(6)


# -- writing the module ---------------------------------------------------------------------


def _lit(value: Any) -> str:
    """A Python literal, sets and dicts in a stable order."""
    if isinstance(value, set | frozenset):
        if not value:
            return "set()" if isinstance(value, set) else "frozenset()"
        items = ", ".join(sorted((_lit(v) for v in value), key=lambda s: (len(s), s)))
        return "{" + items + "}" if isinstance(value, set) else "frozenset({" + items + "})"
    if isinstance(value, tuple):
        inner = ", ".join(_lit(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(_lit(v) for v in value) + "]"
    if isinstance(value, Plan):
        parts = [repr(value.kind)]
        if value.bits:
            parts.append(f"bits={value.bits!r}")
        if value.size:
            parts.append(f"size={value.size!r}")
        return f"Plan({', '.join(parts)})"
    return repr(value)


def _by_path(values: dict[tuple[Outcome, ...], Any], default: Any) -> str | None:
    """One literal when every path agrees (None when that is ``default``), else a ByPath."""
    distinct = {_lit(v) for v in values.values()}
    if len(distinct) <= 1:
        shown = distinct.pop() if distinct else _lit(default)
        return None if shown == _lit(default) else shown
    rows = ", ".join(f"{_lit(k)}: {_lit(v)}" for k, v in values.items())
    return f"ByPath({{{rows}}})"


def _render(step: _Step) -> list[str]:
    call, args = step.call, step.call.args
    method = call.method
    head: list[str] = []
    if method == "lookup":
        head = [_lit(args[0]), _lit(args[1])]
    elif method in ("cleanup",):
        head = [_lit(args[0])]
    elif method in ("mark_miss", "mark_present"):
        head = [_lit(list(args[0]))]
    elif method == "answer":
        head = [_lit(args[0] if args else Plan())]
    elif method == "shutdown" and args and args[0]:
        head = [_lit(list(args[0]))]
    options = {
        "allowed": _by_path(step.allowed, None) if method in ("lookup", "answer", "shutdown")
        else None,
        "owed": _by_path(step.owed, False) if method == "answer" else None,
        "wait": _by_path(step.wait, False) if method == "settle" else None,
        "empty": _by_path(step.empty, False),
        "unchecked": _lit(step.unchecked) if step.unchecked else None,
        "branches": "True" if step.branches else None,
        "breaks": repr("; or ".join(sorted(step.breaks))) if step.breaks else None,
    }
    if method == "shutdown" and not (args and args[0]) and options["allowed"] is not None:
        head = ["[]"]
    parts = head + [f"{k}={v}" for k, v in options.items() if v is not None]
    name = "shutdown" if method == "shutdown" else method
    return [f"run.{name}({', '.join(parts)})"]


def _test_name(cls: str, number: int | None) -> str:
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", cls).lower()
    return f"test_{snake}_keeps_property_{number}" if number else f"test_{snake}_conforms"


def regression_file(error: ConformanceError, command: str | None = None) -> str:
    """The pytest module reproducing ``error`` in the class's own words (see the module doc).

    ``command``: how to regenerate it, shown in its docstring.  Raises RegressionError
    when the run's target cannot have one (``unsupported``) or forks too many ways.
    """
    problem = unsupported(error.config)
    if problem is not None:
        raise RegressionError(problem)
    spec = str(error.config["target"])[len(PREFIX):]
    if ";" in spec:
        raise RegressionError("--regression-out does not yet write classes of another shape "
                              "(--method, --cleanup-arg, --verdicts, --tables)")
    module, _, cls = spec.partition(":")
    used = tables_used(spec)
    steps, titles = _explore(error)
    body: list[str] = []
    for number, step in enumerate(steps, 1):
        body.append(f"# {number}. {step.call.text}")
        body.extend(f"#      {note}" for note in step.call.notes)
        body.extend(_render(step))
    shown = [f"    {n}. {c.text}" for n, c in enumerate(error.calls, 1)]
    for n, c in enumerate(error.calls, 1):
        shown[n - 1] += "".join(f"\n           {note}" for note in c.notes)
    faults = error.config.get("faults", "all")
    command = command or (
        f"asynclookup fuzz --impl {spec} --faults {faults} --regression-out FILE"
    )
    return _TEMPLATE.format(
        cls=cls, module=module, title=error.violation.title,
        detail=_doc_safe(error.violation.detail), n=len(error.calls),
        counterexample=_doc_safe("\n".join(shown)), command=_doc_safe(command),
        test=_test_name(cls, error.violation.number),
        body="\n".join(f"        {line}" for line in body),
        dead=titles["DEAD_WORKER"], leak=titles["LEAK"],
        tables=tuple(t.path for t in used.tables) if used.leak_check else (),
        results=used.results.path if used.results is not None else None,
        harness=_HARNESS,
    )


def _doc_safe(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"""', "'''")


_TEMPLATE = '''"""Regression test: {cls} breaks {title}.

Found by asynclookup fuzz, the conformance oracle of the async lookup protocol:
{detail}

The run that shows it, shrunk to {n} calls, as the oracle printed it:

{counterexample}

This test makes the same calls on a subclass of {cls} whose batch_lookup
answers from a script: each tier call of the worker is held until the test
answers it, so the test decides when every tier call ends.  After each call it
asserts what the protocol allows there, worked out from asynclookup's spec when
this file was written.  It fails while {cls} breaks the property and passes
once it is fixed.  It imports only {cls}, pytest and the standard library,
and every wait is bounded: commit it with the class's own tests, unchanged.

Regenerate it (that needs asynclookup; this file does not):

    {command}
"""

from __future__ import annotations

import queue
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, NoReturn

import pytest

from {module} import {cls}

WAIT = 3.0  # seconds: the longest wait for a tier call or a post the protocol owes
UNOWED_WAIT = 0.5  # seconds to wait for a tier call the protocol does not owe
RESULTS = {results!r}  # the worker's result queue, counted to wait for posts
TABLES = {tables!r}  # all empty when nothing is live
DEAD_WORKER = {dead!r}  # what a dead worker breaks
LEAK = {leak!r}  # what a table left holding entries breaks


def {test}() -> None:
    """{cls} keeps {title} on the calls that broke it."""
    with Run({cls}) as run:
{body}
{harness}'''

_HARNESS = '''

# -- the harness: a scripted tier, bounded waits, the checks after each call --------------

JUNK: tuple[object, ...] = (1, 0, None, "yes", 1.0)  # the non-bool values a tier may give


class TierFault(RuntimeError):
    """What the scripted tier raises when its plan says so."""


@dataclass(frozen=True)
class Context:
    """A request context: the manager reads only its req_id."""

    req_id: str


@dataclass(frozen=True)
class Plan:
    """How the scripted tier answers one call, whatever keys it is asked about.

    proper: one bool per key (bits, padded with False); raise: batch_lookup raises;
    short: only the first size % n values; long: one or two True values too many;
    junk: a non-bool at position size % n; lazy: the values as a generator;
    lazy_raise: a generator that yields the first size % (n + 1) values, then raises;
    slow: proper (the test holds every call until it answers it anyway).
    """

    kind: str = "proper"
    bits: tuple[bool, ...] = ()
    size: int = 0

    def values(self, n: int) -> tuple[tuple[object, ...], bool]:
        """The values given for n keys, and whether the call then raises."""
        b = tuple(self.bits[i] if i < len(self.bits) else False for i in range(n))
        if self.kind == "raise":
            return (), True
        if self.kind == "short" and n:
            return b[: self.size % n], False
        if self.kind == "long":
            return b + (True,) * (1 + self.size % 2), False
        if self.kind == "junk" and n:
            i = self.size % n
            return (*b[:i], JUNK[self.size % len(JUNK)], *b[i + 1:]), False
        if self.kind == "lazy_raise":
            return b[: self.size % (n + 1)], True
        return b, False

    def deliver(self, n: int) -> Any:
        """What batch_lookup returns for n keys, or raises."""
        values, raises = self.values(n)
        if self.kind in ("lazy", "lazy_raise"):
            return _lazily(values, raises)
        if raises:
            raise TierFault("scripted tier: this call fails")
        return list(values)


def _lazily(values: tuple[object, ...], raises: bool) -> Iterator[object]:
    yield from values
    if raises:
        raise TierFault("scripted tier: this answer fails part-way")


@dataclass
class TierCall:
    """One batch_lookup call of the worker, held until the test answers it."""

    request: str
    keys: tuple[bytes, ...]
    answered: threading.Event
    plan: Plan | None = None


class ScriptedTier:
    """The manager's batch_lookup: each call waits for ``answer``; after ``auto``, calls
    are answered at once (the plans given, then all False)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waiting: queue.Queue[TierCall] = queue.Queue()
        self.auto_plans: list[Plan] | None = None
        self.auto_asked: list[tuple[str, tuple[bytes, ...]]] = []
        self.keys_answered = 0

    def batch_lookup(self, keys: Any, req_context: Any) -> Any:
        request = str(getattr(req_context, "req_id", req_context))
        call = TierCall(request, tuple(keys), threading.Event())
        with self.lock:
            if self.auto_plans is None:
                self.waiting.put(call)
            else:
                self._give(call, self.auto_plans.pop(0) if self.auto_plans else Plan())
        if not call.answered.wait(4 * WAIT) or call.plan is None:
            raise TierFault("scripted tier: the test never answered this call")
        return call.plan.deliver(len(call.keys))

    def next_call(self, timeout: float) -> TierCall | None:
        try:
            return self.waiting.get(timeout=timeout)
        except queue.Empty:
            return None

    def answer(self, call: TierCall, plan: Plan) -> None:
        with self.lock:
            self._give(call, plan)

    def auto(self, plans: list[Plan]) -> None:
        with self.lock:
            self.auto_plans, self.auto_asked = list(plans), []
            while not self.waiting.empty():
                self._give(self.waiting.get_nowait(), self.auto_plans.pop(0)
                           if self.auto_plans else Plan())

    def _give(self, call: TierCall, plan: Plan) -> None:  # the lock is held
        if self.auto_plans is not None:
            self.auto_asked.append((call.request, call.keys))
        call.plan = plan
        self.keys_answered += len(call.keys)
        call.answered.set()


class CountingQueue:
    """Wraps the worker's result queue: counts the results put and wakes ``Run.settle``."""

    def __init__(self, inner: Any, changed: threading.Condition) -> None:
        self.inner, self.changed, self.results = inner, changed, 0

    def put(self, item: Any, *args: Any, **kwargs: Any) -> None:
        self.inner.put(item, *args, **kwargs)
        with self.changed:
            if item is not None:
                self.results += len(item) if hasattr(item, "__len__") else 1
            self.changed.notify_all()

    def put_nowait(self, item: Any) -> None:
        self.put(item)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class ByPath(dict[tuple[object, ...], Any]):
    """An allowance that depends on what earlier steps marked branches=True gave:
    their outcomes in order -> the allowance."""


def _either(allowed: Any) -> str:
    return " or ".join(sorted(map(repr, allowed))) if allowed else "nothing"


class Run:
    """The class under test with the scripted tier, and the checks after each call."""

    def __init__(self, cls: type[Any]) -> None:
        self.tier = ScriptedTier()
        self.changed = threading.Condition()
        self.crash: str | None = None
        self.path: tuple[object, ...] = ()
        self.step, self.text = 0, ""
        self.stopped = self.unchecked = False
        tier = self.tier

        def batch_lookup(_self: Any, keys: Any, req_context: Any) -> Any:
            return tier.batch_lookup(keys, req_context)

        scripted = type(f"Scripted{cls.__name__}", (cls,), {"batch_lookup": batch_lookup})
        self._hook = threading.excepthook
        threading.excepthook = self._excepthook
        before = set(threading.enumerate())
        self.manager = scripted("regression")
        self.threads = [t for t in threading.enumerate() if t not in before]
        owner, _, name = ("." + (RESULTS or "")).rpartition(".")
        holder = _resolve(self.manager, owner[1:]) if owner else self.manager
        inner = getattr(holder, name, None) if RESULTS else None
        self.posted: CountingQueue | None = None
        if hasattr(inner, "put") and hasattr(inner, "get_nowait"):
            self.posted = CountingQueue(inner, self.changed)
            setattr(holder, name, self.posted)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if not self.stopped:
                self.tier.auto([])
                self._bounded(self.manager.shutdown, "shutdown()", fail=False)
        finally:
            threading.excepthook = self._hook

    # -- the calls ------------------------------------------------------------------

    def lookup(self, key: bytes, request: str, allowed: Any, *, empty: Any = False,
               branches: bool = False, unchecked: Any = (), breaks: str | None = None) -> None:
        """lookup(key, request); its verdict must be one the protocol allows."""
        self._begin(f"lookup({key!r}, {request!r})")
        verdict = self.manager.lookup(key, Context(request))
        allowed = self._pick(allowed)
        if not self.unchecked and not any(verdict is v for v in allowed):
            self._fail(f"returned {verdict!r}; the protocol allows {_either(allowed)} here",
                       breaks)
        self._after(verdict, branches, unchecked, empty)

    def flush(self, *, empty: Any = False) -> None:
        self._scheduler("flush()", self.manager.flush, empty)

    def cleanup(self, request: str, *, empty: Any = False) -> None:
        self._scheduler(f"cleanup({request!r})", lambda: self.manager.cleanup(request), empty)

    def mark_miss(self, keys: list[bytes], *, empty: Any = False) -> None:
        self._scheduler(f"mark_miss({keys!r})", lambda: self.manager.mark_miss(keys), empty)

    def mark_present(self, keys: list[bytes], *, empty: Any = False) -> None:
        self._scheduler(f"mark_present({keys!r})", lambda: self.manager.mark_present(keys),
                        empty)

    def drain_results(self, *, empty: Any = False) -> None:
        self._scheduler("drain_results()", self.manager.drain_results, empty)

    def answer(self, plan: Plan, allowed: Any, *, owed: Any = False, empty: Any = False,
               branches: bool = False, unchecked: Any = (), breaks: str | None = None) -> None:
        """Answer the worker's next tier call as ``plan`` says; allowed: the (request, keys)
        calls it may make; owed: whether it must make one."""
        self._begin("answer the worker's next tier call")
        owed, allowed = self._pick(owed), self._pick(allowed)
        call = self.tier.next_call(WAIT if owed else UNOWED_WAIT)
        if call is None:
            if owed and not self.unchecked:
                self._fail(f"the worker made no tier call within {WAIT} s, yet the protocol "
                           "owes one", breaks)
            self._after(None, branches, unchecked, False, check=False)
            return
        self.tier.answer(call, plan)
        asked = (call.request, call.keys)
        if not self.unchecked and asked not in allowed:
            shown = _either(allowed) if allowed else "no tier call"
            self._fail(f"the worker asked the tier about {list(call.keys)!r} for "
                       f"{call.request!r}; the protocol allows {shown} here", breaks)
        self._after(asked, branches, unchecked, empty)

    def settle(self, *, wait: Any = False, empty: Any = False, breaks: str | None = None) -> None:
        """Wait (bounded) until the worker has posted a result for every key it was
        answered for."""
        self._begin("wait until the worker has posted its results")
        if self._pick(wait) and not self.unchecked:
            posted = self.posted
            if posted is None:
                self._fail(f"cannot count what the worker posts: the class has no {RESULTS}",
                           None)
            expected = self.tier.keys_answered
            with self.changed:
                self.changed.wait_for(
                    lambda: posted.results >= expected or self.crash is not None, WAIT
                )
            if posted.results < expected:
                self._fail(f"the worker posted {posted.results} of the {expected} results "
                           f"it owes within {WAIT} s{self._crashed()}", breaks)
        self._after(None, False, (), empty)

    def shutdown(self, plans: list[Plan], allowed: Any, *, branches: bool = False,
                 unchecked: Any = (), breaks: str | None = None) -> None:
        """shutdown(), its tier calls answered at once (``plans``, then all False);
        allowed: the sequences of (request, keys) tier calls it may make meanwhile."""
        self._begin("shutdown()")
        self.tier.auto(plans)
        self._bounded(self.manager.shutdown, "shutdown()")
        self.stopped = True
        asked = tuple(self.tier.auto_asked)
        allowed = self._pick(allowed)
        if not self.unchecked and asked not in allowed:
            self._fail(f"while shutting down, the worker asked the tier {list(asked)!r}; the "
                       f"protocol allows {_either(allowed)}", breaks)
        self._after(asked, branches, unchecked, False)

    # -- plumbing -------------------------------------------------------------------

    def _begin(self, text: str) -> None:
        self.step += 1
        self.text = f"step {self.step}, {text}"

    def _scheduler(self, text: str, fn: Callable[[], object], empty: Any) -> None:
        self._begin(text)
        fn()
        self._after(None, False, (), empty)

    def _pick(self, value: Any) -> Any:
        if not isinstance(value, ByPath):
            return value
        if self.path not in value:
            self._fail(f"no allowance for the outcomes {self.path!r} so far", None)
        return value[self.path]

    def _after(self, outcome: object, branches: bool, unchecked: Any, empty: Any,
               check: bool = True) -> None:
        if branches:
            self.path = (*self.path, outcome)
        if outcome in unchecked:
            self.unchecked = True  # only property 8 broke: the oracle stops checking too
        if self.unchecked or not check:
            return
        dead = [t.name for t in self.threads if not t.is_alive()]
        if dead and not self.stopped:
            self._fail(f"the worker thread {dead[0]!r} died{self._crashed()}", DEAD_WORKER)
        if self._pick(empty) and TABLES:
            full = {t: _sized(_resolve(self.manager, t)) for t in TABLES}
            full = {t: table for t, table in full.items() if len(table)}
            if full:
                self._fail(f"nothing is live, yet the tables hold {full!r}", LEAK)

    def _fail(self, what: str, breaks: str | None) -> NoReturn:
        because = f"\\nthat breaks {breaks}" if breaks else ""
        pytest.fail(f"{self.text}: {what}{because}", pytrace=False)

    def _crashed(self) -> str:
        return f" (it raised {self.crash})" if self.crash else ""

    def _bounded(self, fn: Callable[[], object], text: str, fail: bool = True) -> None:
        raised: list[BaseException] = []

        def call() -> None:
            try:
                fn()
            except BaseException as exc:  # re-raised on the test's thread
                raised.append(exc)

        thread = threading.Thread(target=call, name="regression-call", daemon=True)
        thread.start()
        thread.join(4 * WAIT)
        if thread.is_alive() and fail:
            self._fail(f"{text} did not return within {4 * WAIT} s", None)
        if raised and fail:
            raise raised[0]

    def _excepthook(self, args: threading.ExceptHookArgs) -> None:
        if args.thread in self.threads and args.exc_value is not None:
            self.crash = _where(args.exc_value, args.exc_traceback)
            with self.changed:
                self.changed.notify_all()
        self._hook(args)


def _resolve(manager: Any, path: str) -> Any:
    for part in path.split("."):
        manager = getattr(manager, part)
    return manager


def _sized(table: Any) -> Any:
    """A table as a sized collection (a queue.Queue as the list of its items)."""
    return table if hasattr(table, "__len__") else list(getattr(table, "queue", ()))


def _where(exc: BaseException, tb: TracebackType | None) -> str:
    frames = traceback.extract_tb(tb)
    place = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}: {exc}{place}"
'''
