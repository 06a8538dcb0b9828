"""The harness of the regression tests ``asynclookup fuzz --regression-out`` writes.

It is written beside them as ``asynclookup_regression.py``, one for every test of
that directory, and needs only the standard library there: the oracle's code it
imports below (how a plan becomes the tier's answer, what counts the worker's
posts, the properties' titles) is written in as source.

A test makes a ``Run`` of a ``Shape`` (the class, its constructor's arguments, its
names for the protocol's calls, the tables it names) and makes the calls of the
counterexample on it, each with what the protocol allows there.  The class's
``batch_lookup`` is a scripted tier: each tier call waits until the test answers
it, and gets the answer only at the test's next step, so the steps in between see
the results not yet posted, on every run.  Of several tier calls waiting at once
(a pool), the test answers the one the recorded run answered.

It decides nothing (the test's arguments say what is allowed), reads no attribute
of the class that its ``Shape`` does not name, and every wait ends.  A failure
names the step, what the class did, what the tier answered for the key, and the
property broken, with its section of docs/properties.md (asynclookup's docs).
"""

from __future__ import annotations

import contextlib  # noqa: F401 (for watch_puts, written in below)
import inspect  # noqa: F401 (for watch_puts, written in below)
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # Self is Python 3.11's; annotations are never evaluated here
    from typing import Self

# -- BEGIN ORACLE CODE: the writer puts its source here (standard library only)
from asynclookup.conformance.targets.adapter import (
    JUNK,
    SLOW_SECONDS,
    Plan,
    TierFault,
    deliver,
    lazy_answer,
)
from asynclookup.conformance.targets.tables import resolve, watch_puts
from asynclookup.conformance.targets.threads import CountingQueue, results_in
from asynclookup.observe.observations import Answer
from asynclookup.spec.properties import PROPERTIES, kind_of, title_of


def _anchor(number: int) -> str:
    """The anchor of property ``number``'s section of docs/properties.md."""
    name = PROPERTIES[number].title
    name += " efficiency" if kind_of(number) == "efficiency" else ""
    kept = "".join(c for c in name.lower() if c.isalnum() or c in "- ")
    return f"{number}-" + "-".join(kept.split())


# property number -> its title, the anchor of its section of docs/properties.md
TITLES: dict[int, tuple[str, str]] = {n: (title_of(n), _anchor(n)) for n in PROPERTIES}
# -- END ORACLE CODE

__all__ = ["JUNK", "SLOW_SECONDS", "ByPath", "Plan", "Run", "Shape", "lazy_answer",
           "memory_answer", "results_in"]

WAIT = 3.0  # seconds: the longest wait for a tier call or a post the protocol owes
UNOWED_WAIT = 0.5  # seconds to wait for a tier call the protocol does not owe
CALL_WAIT = 4 * WAIT  # seconds a call into the class may take
PROGRESS, SURVIVAL = 6, 7  # what a call that never returns, a dead worker break
Asked = tuple[str, tuple[bytes, ...]]  # (request, keys) of one tier call


def memory_answer(plan: Plan, n: int) -> Answer:
    """The oracle's memory tier: ``plan`` for n keys, its bits padded with False."""
    return plan.answer([plan.bits[i] if i < len(plan.bits) else False
                        for i in range(n)])


@dataclass(frozen=True)
class Shape:
    """How the class under test is built and called.  ``methods``: a protocol
    call -> the class's name for it.  ``tables``: attribute path -> the property
    an entry left there breaks when nothing is live.  ``results``: the queue the
    worker posts to, counted so that a settle knows when the posts are in."""

    cls: type[Any]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    methods: Mapping[str, str] = field(default_factory=dict)
    cleanup_context: bool = False  # cleanup takes the request context, not its id
    verdicts: Callable[[Any], Any] | None = None  # lookup's answers -> True/False/None
    drain_before_lookup: bool = False
    tables: Mapping[str, int] = field(default_factory=dict)
    results: str | None = None

    def name(self, call: str) -> str:
        return self.methods.get(call, call)


class ByPath(dict[tuple[object, ...], Any]):
    """An allowance that depends on what the earlier steps marked branches=True
    gave: their outcomes in order -> the allowance."""


@dataclass(frozen=True)
class Context:
    """A request context: the class reads only its req_id."""

    req_id: str


@dataclass
class TierCall:
    """One batch_lookup call of the worker, held until the test answers it."""

    request: str
    keys: tuple[bytes, ...]
    given: threading.Event = field(default_factory=threading.Event)
    answer: Answer | None = None


class ScriptedTier:
    """The class's batch_lookup: each call waits for ``hold`` and the ``release``
    after it (the test's next step); after ``auto``, calls are answered at once."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.waiting: list[TierCall] = []
        self.held: list[TierCall] = []  # answered, not yet handed to the worker
        self.auto_plans: list[Plan] | None = None
        self.auto_asked: list[Asked] = []
        self.keys_answered = 0

    def batch_lookup(self, keys: Sequence[bytes], req_context: Any) -> Any:
        call = TierCall(str(getattr(req_context, "req_id", req_context)), tuple(keys))
        with self.changed:
            if self.auto_plans is None:
                self.waiting.append(call)
                self.changed.notify_all()
            else:
                self._auto_answer(call)
        if not call.given.wait(CALL_WAIT) or call.answer is None:
            raise TierFault("scripted tier: the test never answered this call")
        return deliver(call.answer)

    def take(self, prefer: Asked | None, timeout: float) -> TierCall | None:
        """The call ``prefer`` names once it waits (within ``timeout``); failing that,
        the oldest call waiting, if any."""
        self.release()

        def chosen() -> list[TierCall]:
            return [c for c in self.waiting if (c.request, c.keys) == prefer]

        with self.changed:
            self.changed.wait_for(
                lambda: chosen() or (prefer is None and self.waiting), timeout)
            found = chosen() or self.waiting[:1]
            if found:
                self.waiting.remove(found[0])
            return found[0] if found else None

    def arrived(self, timeout: float) -> Asked | None:
        """The oldest call waiting for an answer (it stays waiting), once one waits
        (within ``timeout``)."""
        with self.changed:
            if not self.changed.wait_for(lambda: self.waiting, timeout):
                return None
            return self.waiting[0].request, self.waiting[0].keys

    def hold(self, call: TierCall, plan: Plan) -> None:
        with self.changed:
            call.answer = memory_answer(plan, len(call.keys))
            self.keys_answered += len(call.keys)
            self.held.append(call)

    def release(self) -> None:
        with self.changed:
            held, self.held = self.held, []
        for call in held:
            call.given.set()

    def auto(self, plans: Sequence[Plan]) -> None:
        self.release()
        with self.changed:
            self.auto_plans, self.auto_asked = list(plans), []
            for call in self.waiting:
                self._auto_answer(call)
            self.waiting = []

    def _auto_answer(self, call: TierCall) -> None:  # the lock is held
        assert self.auto_plans is not None
        self.auto_asked.append((call.request, call.keys))
        plan = self.auto_plans.pop(0) if self.auto_plans else Plan()
        call.answer = memory_answer(plan, len(call.keys))
        self.keys_answered += len(call.keys)
        call.given.set()


def _either(allowed: Any) -> str:
    return " or ".join(sorted(map(repr, allowed))) if allowed else "nothing"


def _calls(allowed: Any) -> str:
    """Tier calls, each ``(request, keys)``, as ``[keys] for 'request'``."""
    shown = sorted(f"{list(keys)!r} for {request!r}" for request, keys in allowed)
    return " or ".join(shown) if shown else "no tier call"


class Run:
    """The class under test with the scripted tier, and the checks after each call.

    Each call's arguments: ``allowed`` (what the protocol allows), ``empty`` (no
    table may hold anything after it), ``branches`` (its outcome decides what
    the later steps allow), ``unchecked`` (outcomes after which the oracle
    stopped checking: property 8 warned) and ``breaks`` (the property a
    different outcome breaks)."""

    def __init__(self, shape: Shape) -> None:
        self.shape, self.tier = shape, ScriptedTier()
        self.path: tuple[object, ...] = ()
        self.step, self.text = 0, ""
        self.stopped = self.unchecked = False
        self.asked: list[tuple[int, TierCall]] = []  # every tier call answered, by step
        tier = self.tier

        def batch_lookup(_self: Any, keys: Sequence[bytes], req_context: Any) -> Any:
            return tier.batch_lookup(keys, req_context)

        scripted = type(f"Scripted{shape.cls.__name__}", (shape.cls,),
                        {shape.name("batch_lookup"): batch_lookup})
        self.caller = Caller()
        before = set(threading.enumerate())
        built, self.manager, raised = self.caller.call(
            lambda: scripted("regression", **shape.kwargs))
        if not built or raised is not None:
            raise AssertionError(f"{shape.cls.__name__}(...) did not build: {raised}")
        self.threads = [t for t in threading.enumerate() if t not in before]
        self.posted: CountingQueue | None = None
        if shape.results:
            owner, _, name = shape.results.rpartition(".")
            holder = resolve(self.manager, owner) if owner else self.manager
            counting = CountingQueue()
            if watch_puts(holder, name, counting.counted) is not None:
                self.posted = counting

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.stopped:
            self.tier.auto([])
            self._call(self._method("shutdown"), "shutdown()", judge=False)

    # -- the calls ---------------------------------------------------------------

    def lookup(self, key: bytes, request: str, allowed: Any, *, empty: Any = False,
               branches: bool = False, unchecked: Any = (), breaks: int = 0) -> None:
        __tracebackhide__ = True
        text = self._begin(f"{self.shape.name('lookup')}({key!r}, {request!r})")
        verdict = self._call(lambda: self._lookup(key, request), text)
        self._verdict(verdict, key, allowed, breaks, "")
        self._after(verdict, branches, unchecked, empty)

    def flush(self, *, empty: Any = False) -> None:
        __tracebackhide__ = True
        self._scheduler("flush", (), empty)

    def cleanup(self, request: str, *, empty: Any = False) -> None:
        __tracebackhide__ = True
        arg = Context(request) if self.shape.cleanup_context else request
        self._scheduler("cleanup", (arg,), empty)

    def mark_miss(self, keys: list[bytes], *, empty: Any = False) -> None:
        __tracebackhide__ = True
        self._scheduler("mark_miss", (keys,), empty)

    def mark_present(self, keys: list[bytes], *, empty: Any = False) -> None:
        __tracebackhide__ = True
        self._scheduler("mark_present", (keys,), empty)

    def drain_results(self, *, empty: Any = False) -> None:
        __tracebackhide__ = True
        self._scheduler("drain_results", (), empty)

    def answer(self, plan: Plan, allowed: Any, *, asks: Asked | None = None,
               owed: Any = False, empty: Any = False, branches: bool = False,
               unchecked: Any = (), breaks: int = 0) -> None:
        """Answer the worker's tier call ``asks`` (else the oldest waiting) as ``plan``
        says; ``allowed``: the (request, keys) calls it may make; ``owed``: whether
        the protocol owes one."""
        __tracebackhide__ = True
        self._begin("the worker's tier call")
        owed, allowed = self._pick(owed), self._pick(allowed)
        call = self.tier.take(asks, WAIT if owed else UNOWED_WAIT)
        if call is None:
            if owed and not self.unchecked:
                told = "".join(
                    f"\n{key!r} never got a verdict: the tier "
                    + ("; ".join(self._asked_about(key)) or "was never asked about it")
                    for key in sorted({k for _, keys in allowed for k in keys}))
                self._fail(f"no tier call came within {WAIT} s, yet the protocol owes "
                           f"one ({_calls(allowed)}){told}", breaks)
            self._after(None, branches, unchecked, False, check=False)
            return
        self.tier.hold(call, plan)
        self.asked.append((self.step, call))
        outcome = (call.request, call.keys)
        if not self.unchecked and outcome not in allowed:
            self._fail(f"the worker asked the tier about {list(call.keys)!r} for "
                       f"{call.request!r}; the protocol allows {_calls(allowed)}",
                       breaks)
        self._after(outcome, branches, unchecked, empty)

    def settle(self, *, wait: Any = False, empty: Any = False,
               allowed: Any = frozenset(), branches: bool = False) -> None:
        """Hand the worker its answers; with ``wait``, until it posted them (bounded):
        a wait, not a check (the steps after it judge what shows).  ``allowed``: owed
        tier calls whose arrival (bounded wait; left unanswered) proves the posts before
        it; which one arrived, if any, is the outcome (any other: None)."""
        __tracebackhide__ = True
        self._begin("let the worker post")
        self.tier.release()
        posted, expected = self.posted, self.tier.keys_answered
        if self._pick(wait) and posted is not None:
            with posted.changed:
                posted.changed.wait_for(lambda: posted.sizes_put >= expected, WAIT)
        calls, outcome = self._pick(allowed), None
        if calls:
            came = self.tier.arrived(WAIT)
            outcome = next((c for c in calls if came is not None and c[0] == came[0]
                            and sorted(c[1]) == sorted(came[1])), None)
        self._after(outcome, branches, (), empty)

    def await_verdict(self, key: bytes, request: str, allowed: Any, *,
                      empty: Any = False, branches: bool = False,
                      unchecked: Any = (), breaks: int = 0) -> None:
        """Re-ask drain_results() and lookup(key, request) until a verdict shows
        (bounded); it must be one the protocol allows."""
        __tracebackhide__ = True
        text = self._begin(f"{self.shape.name('lookup')}({key!r}, {request!r})")
        drain = self.shape.name("drain_results")
        got: list[Any] = [None]

        def shows() -> bool:
            got[0] = self._lookup(key, request)
            return got[0] is not None

        self._re_ask(shows, text)
        verdict = got[0]
        late = "" if verdict is not None else (
            f" after re-asking (and {drain}()) for {WAIT} s")
        self._verdict(verdict, key, allowed, breaks, late)
        self._after(verdict, branches, unchecked, empty)

    def await_empty(self, *, empty: Any = False) -> None:
        """Re-ask drain_results() until the tables are empty (bounded); then check."""
        __tracebackhide__ = True
        text = self._begin(f"{self.shape.name('drain_results')}(), re-asked")
        if self.shape.tables:
            self._re_ask(lambda: not self._full(), text)
        self._after(None, False, (), empty)

    def shutdown(self, plans: list[Plan], allowed: Any, *, branches: bool = False,
                 unchecked: Any = (), breaks: int = 0) -> None:
        """shutdown(), its tier calls answered at once (``plans``, then all False);
        ``allowed``: the sequences of (request, keys) tier calls it may make."""
        __tracebackhide__ = True
        text = self._begin(f"{self.shape.name('shutdown')}()")
        self.tier.auto(plans)
        self._call(self._method("shutdown"), text)
        self.stopped = True
        asked, allowed = tuple(self.tier.auto_asked), self._pick(allowed)
        if not self.unchecked and asked not in allowed:
            self._fail(f"while shutting down, the worker asked the tier {list(asked)!r}"
                       f"; the protocol allows {_either(allowed)}", breaks)
        self._after(asked, branches, unchecked, False)

    # -- plumbing ----------------------------------------------------------------

    def _begin(self, text: str) -> str:
        self.step += 1
        self.text = f"step {self.step}, {text}"
        return text

    def _method(self, call: str) -> Callable[..., Any]:
        method: Callable[..., Any] = getattr(self.manager, self.shape.name(call))
        return method

    def _lookup(self, key: bytes, request: str) -> Any:
        if self.shape.drain_before_lookup:
            self._method("drain_results")()
        raw = self._method("lookup")(key, Context(request))
        return raw if self.shape.verdicts is None else self.shape.verdicts(raw)

    def _re_ask(self, done: Callable[[], bool], text: str) -> bool:
        """drain_results(), then ``done()``, until it holds or WAIT passes."""
        __tracebackhide__ = True
        self.tier.release()
        deadline, pause = time.monotonic() + WAIT, 0.0005
        while True:
            self._call(self._method("drain_results"), text)
            if self._call(done, text):
                return True
            if time.monotonic() >= deadline or self._dead():
                return False
            threading.Event().wait(pause)  # between two re-asks; each one checks
            pause = min(2 * pause, 0.05)

    def _scheduler(self, call: str, args: tuple[Any, ...], empty: Any) -> None:
        __tracebackhide__ = True
        shown = ", ".join(repr(getattr(a, "req_id", a)) for a in args)
        text = self._begin(f"{self.shape.name(call)}({shown})")
        self._call(lambda: self._method(call)(*args), text)
        self._after(None, False, (), empty)

    def _verdict(self, verdict: Any, key: bytes, allowed: Any, breaks: int,
                 late: str) -> None:
        __tracebackhide__ = True
        allowed = self._pick(allowed)
        if self.unchecked or any(verdict is v for v in allowed):
            return
        told = "; ".join(self._asked_about(key)) or f"never asked about {key!r}"
        why = f"{key!r} never got a verdict: " if verdict is None else ""
        self._fail(f"returned {verdict!r}{late}; the protocol allows "
                   f"{_either(allowed)} here.\n{why}the tier {told}", breaks)

    def _asked_about(self, key: bytes) -> Iterator[str]:
        """Each tier call that asked about ``key``: its keys, request, step, answer."""
        for number, call in self.asked:
            if key in call.keys:
                yield (f"was asked {list(call.keys)!r} for {call.request!r} at step "
                       f"{number} and {call.answer}")

    def _pick(self, value: Any) -> Any:
        __tracebackhide__ = True
        if not isinstance(value, ByPath):
            return value
        if self.path not in value:
            self._fail(f"no allowance for the outcomes {self.path!r} so far", 0)
        return value[self.path]

    def _after(self, outcome: object, branches: bool, unchecked: Any, empty: Any,
               check: bool = True) -> None:
        __tracebackhide__ = True
        if branches:
            self.path = (*self.path, outcome)
        if outcome in unchecked:
            self.unchecked = True  # property 8 warned: the oracle stopped checking
        if self.unchecked or not check:
            return
        dead = self._dead()
        if dead:
            self._fail(f"the worker thread {dead!r} died (pytest's warnings show "
                       "its traceback)", SURVIVAL)
        full = self._full() if self._pick(empty) else {}
        if full:  # a request index left holding a request (property 4) first
            self._fail(f"nothing is live, yet the tables hold {full!r}",
                       min(self.shape.tables[t] for t in full))

    def _dead(self) -> str:
        """The name of a worker thread that died before shutdown, or ''."""
        dead = [t.name for t in self.threads if not t.is_alive()]
        return dead[0] if dead and not self.stopped else ""

    def _full(self) -> dict[str, Any]:
        tables = {t: _sized(resolve(self.manager, t)) for t in self.shape.tables}
        return {t: table for t, table in tables.items() if len(table)}

    def _fail(self, what: str, breaks: int, cause: BaseException | None = None) -> None:
        __tracebackhide__ = True
        title, anchor = TITLES.get(breaks, ("", ""))
        link = f"\nThat breaks {title}: docs/properties.md#{anchor}" if title else ""
        raise AssertionError(f"{self.text}: {what}{link}") from cause

    def _call(self, fn: Callable[[], Any], text: str, judge: bool = True) -> Any:
        """fn() on the test's scheduler thread, waited for at most CALL_WAIT seconds."""
        __tracebackhide__ = True
        done, value, exc = self.caller.call(fn)
        if judge and not done:
            self._fail(f"{text} did not return within {CALL_WAIT} s", PROGRESS)
        if judge and exc is not None:
            self._fail(f"{text} raised {type(exc).__name__}: {exc}", SURVIVAL, exc)
        return value


class Caller:
    """The one thread that makes every call into the class, as the oracle's did: a
    call that never returns holds only it, and the test reports it."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="regression-scheduler",
                         daemon=True).start()

    def _serve(self) -> None:
        while True:
            self.jobs.get()()

    def call(self, fn: Callable[[], Any]) -> tuple[bool, Any, BaseException | None]:
        """Whether fn() returned within CALL_WAIT, what it returned, what it raised."""
        out: list[Any] = [None, None]
        finished = threading.Event()

        def job() -> None:
            try:
                out[0] = fn()
            except BaseException as exc:  # noqa: BLE001 (raised on the test's thread)
                out[1] = exc
            finished.set()

        self.jobs.put(job)
        return finished.wait(CALL_WAIT), out[0], out[1]

def _sized(table: Any) -> Any:
    """A table as a sized collection (a queue.Queue as the list of its items)."""
    return table if hasattr(table, "__len__") else list(getattr(table, "queue", ()))
