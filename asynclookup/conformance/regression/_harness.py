"""The harness of every regression file: a scripted tier, bounded waits, the checks after
each call (``asynclookup.conformance.regression.writer``'s third part).

``harness()`` is the text appended to each generated module, below its test.
It is text, not code this package runs: the generated file must need nothing
but the standard library and pytest.  The tier's answers are not written out
here a second time: ``harness()`` copies in the source of the oracle's own
``Answer``, ``Plan``, ``_deliver`` and ``_lazy`` (``conformance.targets.adapter`` and
``observe.observations``) and of ``memory_answer``, so a scripted answer
is, by construction, the answer the oracle gave (tests/test_conformance_regression.py
pins that every plan kind answers alike in both); and of
``threads.CountingQueue``, the wrapper that counts what the worker posts.
Those must stay standard-library-only code: the test that runs a generated
file outside this project fails if one of them starts needing more.

What the harness does not do: decide what is allowed (the generated test's
arguments say that, worked out by ``regression._paths``), or read more of the
class than the oracle did (the results queue, to count posts, and the tables
of the leak check, both named by the generated module's constants).
"""

from __future__ import annotations

import inspect

from asynclookup.conformance.regression._paths import memory_answer
from asynclookup.conformance.targets import adapter, threads
from asynclookup.observe import observations

_MARK = "# @ORACLE-CODE@\n"


def oracle_code() -> str:
    """The oracle's own code the harness runs, as standalone source text: how a plan
    becomes a tier answer, and the wrapper that counts what the worker posts."""
    sources = [inspect.getsource(x) for x in (
        observations.Answer, adapter.Plan, adapter._deliver, adapter._lazy, memory_answer,
        threads.results_in, threads.CountingQueue)]
    return "\n\n\n".join(part.rstrip("\n") for part in [
        "# -- the oracle's own code, copied in when this file was written: how a plan becomes\n"
        "# the tier's answer (Answer, Plan, _deliver, _lazy, memory_answer), and the wrapper\n"
        "# that counts the results the worker posts (results_in, CountingQueue) --------------",
        f"JUNK: tuple[object, ...] = {adapter.JUNK!r}  # the non-bool values a tier may give\n"
        f"SLOW_SECONDS = {adapter.SLOW_SECONDS!r}  # how long a slow answer keeps the worker",
        'class TierFault(RuntimeError):\n    """What the scripted tier raises when its plan '
        'says so."""',
        *sources,
    ]) + "\n"


def harness() -> str:
    """The harness text, with the oracle's code in place."""
    return HARNESS.replace(_MARK, oracle_code(), 1)


HARNESS = '''

# -- the harness: a scripted tier, bounded waits, the checks after each call --------------

# @ORACLE-CODE@


@dataclass(frozen=True)
class Context:
    """A request context: the manager reads only its req_id."""

    req_id: str


@dataclass
class TierCall:
    """One batch_lookup call of the worker, held until the test answers it."""

    request: str
    keys: tuple[bytes, ...]
    answered: threading.Event
    plan: Plan | None = None


class ScriptedTier:
    """The manager's batch_lookup: each call waits for ``answer`` and the ``release`` after
    it (the test's next wait), as the oracle's tier did; after ``auto``, calls are
    answered at once (the plans given, then all False)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waiting: queue.Queue[TierCall] = queue.Queue()
        self.auto_plans: list[Plan] | None = None
        self.auto_asked: list[tuple[str, tuple[bytes, ...]]] = []
        self.keys_answered = 0
        self.held: list[TierCall] = []  # answered, not yet handed to the worker

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
        return _deliver(memory_answer(call.plan, len(call.keys)))

    def next_call(self, timeout: float) -> TierCall | None:
        self.release()
        try:
            return self.waiting.get(timeout=timeout)
        except queue.Empty:
            return None

    def answer(self, call: TierCall, plan: Plan) -> None:
        with self.lock:
            self._give(call, plan, hold=True)

    def release(self) -> None:
        with self.lock:
            held, self.held = self.held, []
        for call in held:
            call.answered.set()

    def auto(self, plans: list[Plan]) -> None:
        self.release()
        with self.lock:
            self.auto_plans, self.auto_asked = list(plans), []
            while not self.waiting.empty():
                self._give(self.waiting.get_nowait(), self.auto_plans.pop(0)
                           if self.auto_plans else Plan())

    def _give(self, call: TierCall, plan: Plan, hold: bool = False) -> None:  # lock held
        if self.auto_plans is not None:
            self.auto_asked.append((call.request, call.keys))
        call.plan = plan
        self.keys_answered += len(call.keys)
        if hold:
            self.held.append(call)
        else:
            call.answered.set()


class ByPath(dict[tuple[object, ...], Any]):
    """An allowance that depends on what earlier steps marked branches=True gave:
    their outcomes in order -> the allowance."""


def _either(allowed: Any) -> str:
    return " or ".join(sorted(map(repr, allowed))) if allowed else "nothing"


class Run:
    """The class under test with the scripted tier, and the checks after each call."""

    def __init__(self, cls: type[Any]) -> None:
        self.tier = ScriptedTier()
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
            self.posted = CountingQueue(inner)
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
        verdict = self._bounded(lambda: self.manager.lookup(key, Context(request)),
                                f"lookup({key!r}, {request!r})")
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

    def settle(self, *, wait: Any = False, empty: Any = False) -> None:
        """Give the worker time to post what it was answered (a wait, not a check)."""
        self._begin("let the worker post its results")
        self.tier.release()
        posted = self.posted
        if self._pick(wait) and posted is not None:
            expected = self.tier.keys_answered
            with posted.changed:
                posted.changed.wait_for(
                    lambda: posted.sizes_put >= expected or self.crash is not None, WAIT
                )
        self._after(None, False, (), empty)

    def await_verdict(self, key: bytes, request: str, allowed: Any, *, empty: Any = False,
                      branches: bool = False, unchecked: Any = (),
                      breaks: str | None = None) -> None:
        """Re-ask drain_results() and lookup(key, request) until a verdict shows (bounded);
        what shows must be one the protocol allows."""
        self._begin(f"re-ask drain_results() and lookup({key!r}, {request!r})")
        self.tier.release()
        deadline, pause = time.monotonic() + WAIT, 0.0005
        while True:
            self.manager.drain_results()
            verdict = self.manager.lookup(key, Context(request))
            if verdict is not None or time.monotonic() >= deadline or self.crash:
                break
            threading.Event().wait(pause)  # between two re-asks; each is a check
            pause = min(2 * pause, 0.05)
        allowed = self._pick(allowed)
        if not self.unchecked and not any(verdict is v for v in allowed):
            late = f" after {WAIT} s of re-asking{self._crashed()}" if verdict is None else ""
            self._fail(f"returned {verdict!r}{late}; the protocol allows {_either(allowed)} "
                       "here", breaks)
        self._after(verdict, branches, unchecked, empty)

    def await_empty(self, *, empty: Any = False) -> None:
        """Re-ask drain_results() until the tables are empty (bounded); then check them."""
        self._begin("re-ask drain_results() until the tables are empty")
        self.tier.release()
        deadline, pause = time.monotonic() + WAIT, 0.0005
        while TABLES and time.monotonic() < deadline:
            self.manager.drain_results()
            if not any(len(_sized(_resolve(self.manager, t))) for t in TABLES):
                break
            threading.Event().wait(pause)  # between two re-asks; each is a check
            pause = min(2 * pause, 0.05)
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
        self._bounded(fn, text)
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
            if full:  # a request index left holding a request (property 4) names it first
                broken = sorted({TABLES[t] for t in full})[0]
                self._fail(f"nothing is live, yet the tables hold {full!r}", broken)

    def _fail(self, what: str, breaks: str | None) -> NoReturn:
        because = f"\\nthat breaks {breaks}" if breaks else ""
        pytest.fail(f"{self.text}: {what}{because}", pytrace=False)

    def _crashed(self) -> str:
        return f" (it raised {self.crash})" if self.crash else ""

    def _bounded(self, fn: Callable[[], Any], text: str, fail: bool = True) -> Any:
        """fn() on a thread of its own, waited for at most 4 * WAIT seconds."""
        raised: list[BaseException] = []
        value: list[Any] = []

        def call() -> None:
            try:
                value.append(fn())
            except BaseException as exc:  # re-raised on the test's thread
                raised.append(exc)

        thread = threading.Thread(target=call, name="regression-call", daemon=True)
        thread.start()
        thread.join(4 * WAIT)
        if thread.is_alive() and fail:
            self._fail(f"{text} did not return within {4 * WAIT} s", PROGRESS)
        if raised and fail:
            raise raised[0]
        return value[0] if value else None

    def _excepthook(self, args: threading.ExceptHookArgs) -> None:
        if args.thread in self.threads and args.exc_value is not None:
            self.crash = _where(args.exc_value, args.exc_traceback)
            if self.posted is not None:
                with self.posted.changed:
                    self.posted.changed.notify_all()
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
