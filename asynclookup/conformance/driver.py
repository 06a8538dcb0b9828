"""The oracle's driver: one call to the IUT, its observations, the checker's judgement.

``Driver`` owns an implementation under test (through an
``asynclookup.conformance.targets.adapter.Target``), the ``OracleTier`` it probes and an
``asynclookup.observe.engine.Checker``.  Each method makes
one call in the protocol's vocabulary (``lookup``, ``flush``, ..., the worker
steps in stepped mode, ``answer`` / ``settle`` in threaded mode), turns what
happened into observations, feeds them to the checker and raises
``ConformanceError`` (``asynclookup.conformance.counterexample``) at the first
violation.  (``catch_up`` is the one
composite: the answers and the settle it makes are numbered one by one.)
When the target offers a snapshot of its tables, the driver also checks
property 5 after every call at which the spec holds nothing.  Its waits for
what a hidden worker owes (settle, re-asks, the leak check's asking again) are
the mixin ``asynclookup.conformance.eventually.Eventually``.  It keeps the
numbered calls, so a failure prints as a readable counterexample and as a
replay: a pytest file that calls the same ``Driver`` methods without
Hypothesis.

The Hypothesis machine (``asynclookup.conformance.machine``) and replay files are its two
users; it chooses nothing itself.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from asynclookup.conformance.counterexample import (
    HUNG,
    Call,
    ConformanceError,
    _raised,
    _shown,
    _stack_notes,
    lookup_text,
)
from asynclookup.conformance.eventually import PROPER, WAIT_BOUND, Eventually
from asynclookup.conformance.targets.adapter import (
    OracleTier,
    Plan,
    Target,
    TargetFactory,
    snapshot_of,
    supports_of,
)
from asynclookup.conformance.targets.bounded import (
    CALL_BOUND,
    CONSTRUCT_BOUND,
    CallHung,
    SchedulerThread,
)
from asynclookup.conformance.targets.inner_tier import dispose_inner_tier, make_inner_tier
from asynclookup.conformance.targets.load import load_target
from asynclookup.conformance.targets.tables import (
    holds_anything,
    mentions_any,
    probe_keys,
    requests_named,
)
from asynclookup.conformance.targets.target import REFERENCE, FuzzTarget
from asynclookup.observe.engine import (
    CLOSED,
    Checker,
    CleanupSeen,
    DrainSeen,
    FlushSeen,
    Hung,
    Leftover,
    LookupSeen,
    MarkMissSeen,
    MarkPresentSeen,
    Observation,
    Overdue,
    PostSeen,
    ProbeGroupSeen,
    ShutdownSeen,
    Stalled,
    TakeBatchSeen,
    WorkerDied,
)
from asynclookup.observe.interface import Violation

T = TypeVar("T")
UNOWED_WAIT = 0.05  # seconds a replay waits for a tier call the spec does not owe
CATCH_UP_CALLS = 8  # tier calls one catch_up answers at most
ASK_BEFORE_STALLED = 4  # requests of owed probes asked again before a missing call is judged

class Driver(Eventually):
    """Drives one IUT through the oracle, checking every observation."""

    def __init__(
        self,
        factory: TargetFactory,
        *,
        mode: str = "stepped",
        inner: Any = None,
        strict_efficiency: bool = False,
        config: dict[str, Any] | None = None,
        patient: bool = False,
        wait_bound: float = WAIT_BOUND,
        call_bound: float = CALL_BOUND,
        construct_bound: float = CONSTRUCT_BOUND,
    ) -> None:
        self.mode = mode
        self.patient = patient  # replays wait a little for tier calls nobody owes
        self.wait_bound = wait_bound  # for a tier call or a post the spec owes (threaded)
        self.strict_efficiency = strict_efficiency
        self.config = dict(config or {}, mode=mode, strict_efficiency=strict_efficiency)
        self.tier = OracleTier(inner, threaded=mode == "threaded")
        self.checker = Checker(hidden_worker=mode == "threaded")
        self.calls: list[Call] = []
        self._posted_expected = 0  # results the worker owes in all (threaded)
        self._settled_at = 0
        self._requests: set[str] = set()  # every request id the run used
        self._keys: set[bytes] = set()  # every key the run named
        self._asking_again = False  # a leftover's key is being asked again
        self._asked_early: set[bytes] = set()  # keys await_empty had asked about early
        self.leftover_key: bytes | None = None  # one for ask_about_leftover
        self._closed = False
        self.owns_inner = False  # close() disposes of the real tier
        self.failed = False  # a ConformanceError was raised: nothing is checked after it
        self.on_error: Callable[[ConformanceError], None] | None = None  # told before raising
        # every call into the IUT runs on this thread, bounded (``bounded``)
        self._scheduler = SchedulerThread(call_bound)
        # a driver dropped without close() (a machine's example ends) lets its thread go
        weakref.finalize(self, self._scheduler.close)
        self._hung: CallHung | None = None  # the call that did not return, once reported
        self._oracle_threads = set(threading.enumerate())  # the IUT's are the others
        self._pause = threading.Event()  # never set: re-asks wait on it, bounded
        self.target: Target = self._construct(factory, construct_bound)
        self.supports = supports_of(self.target)  # the optional calls it has
        self.leak_check = snapshot_of(self.target) is not None

    @classmethod
    def open(
        cls, target: FuzzTarget | str = REFERENCE, *, tier: str = "memory", **options: Any
    ) -> Driver:
        """A driver for ``target`` (or the target its text names: a replay file's)."""
        target = FuzzTarget.of(target)
        driver = cls(
            load_target(target), inner=make_inner_tier(tier),
            config={"target": target, "tier": tier}, **options,
        )
        driver.owns_inner = True
        return driver

    def construct(self) -> None:
        """Nothing: the class was constructed when this driver was made.  A replay step
        that stands for the constructor (a counterexample where it did not return)."""

    # -- scheduler calls -----------------------------------------------------------

    def lookup(self, key: bytes, request: str) -> None:
        """``lookup(key, request)``; the checker judges the verdict."""
        self._requests.add(request)
        self._keys.add(key)
        asked = lookup_text(key, request)
        verdict, error = self._call(lambda: self.target.lookup(key, request), asked)
        self._record(
            f"{asked} -> {_shown(verdict, error)}",
            ("lookup", (key, request)), [LookupSeen(key, request, verdict, error)],
        )

    def flush(self) -> None:
        """``flush()``."""
        _, error = self._call(self.target.flush, "flush()")
        self._record(f"flush(){_raised(error)}", ("flush", ()), [FlushSeen(error)])

    def cleanup(self, request: str) -> None:
        """``cleanup(request)``."""
        _, error = self._call(lambda: self.target.cleanup(request), f"cleanup({request!r})")
        self._record(
            f"cleanup({request!r}){_raised(error)}", ("cleanup", (request,)),
            [CleanupSeen(request, error)],
        )

    def mark_miss(self, keys: Sequence[bytes]) -> None:
        """``mark_miss(keys)``."""
        keys = tuple(keys)
        self._keys.update(keys)
        _, error = self._call(lambda: self.target.mark_miss(keys), f"mark_miss({list(keys)!r})")
        self._record(
            f"mark_miss({list(keys)!r}){_raised(error)}", ("mark_miss", (list(keys),)),
            [MarkMissSeen(keys, error)],
        )

    def mark_present(self, keys: Sequence[bytes]) -> None:
        """``mark_present(keys)``."""
        keys = tuple(keys)
        self._keys.update(keys)
        _, error = self._call(
            lambda: self.target.mark_present(keys), f"mark_present({list(keys)!r})"
        )
        self._record(
            f"mark_present({list(keys)!r}){_raised(error)}", ("mark_present", (list(keys),)),
            [MarkPresentSeen(keys, error)],
        )

    def drain_results(self) -> None:
        """``drain_results()``."""
        _, error = self._call(self.target.drain_results, "drain_results()")
        self._record(
            f"drain_results(){_raised(error)}", ("drain_results", ()), [DrainSeen(error)]
        )

    def shutdown(self, plans: Sequence[Plan] = ()) -> None:
        """``shutdown()``; tier calls it causes are answered with ``plans``, then all False."""
        plans = tuple(plans)
        if self.mode == "threaded":
            self.tier.auto(plans)
        else:
            self.tier.queue_plans(plans)
        _, error = self._call(self.target.shutdown, "shutdown()")
        self.tier.clear_plans()
        self._record(
            f"shutdown(){_raised(error)}", ("shutdown", (list(plans),) if plans else ()),
            [ShutdownSeen(error)],
        )

    # -- worker steps (stepped mode) ----------------------------------------------

    def take_batch(self) -> None:
        """Worker step ``take_batch()``."""
        took, error = self._call(self.target.take_batch, "take_batch()")
        self._record(
            f"take_batch() -> {_shown(took, error)}", ("take_batch", ()),
            [TakeBatchSeen(bool(took), error)],
        )

    def probe_group(self, plan: Plan = PROPER, post: bool = False) -> None:
        """Worker move: ``take_batch()`` when it holds nothing, ``probe_group()``, and
        ``post()`` when ``post`` is set (one numbered call; each return is observed).

        The tier call is answered as ``plan`` says.
        """
        text, seen = "", list[Observation]()
        if not any(s.held for s in self.checker.states):
            took, error = self._call(self.target.take_batch, "take_batch()")
            text = f"take_batch() -> {_shown(took, error)}, "
            seen.append(TakeBatchSeen(bool(took), error))
            if error is not None or not took:
                self._record(text[:-2], ("probe_group", (plan, post)), seen)
                return
        self.tier.queue_plans([plan])
        probed, error = self._call(self.target.probe_group, "probe_group()")
        self.tier.clear_plans()
        text += f"probe_group() -> {_shown(probed, error)}"
        after: list[Observation] = [ProbeGroupSeen(bool(probed), error)]
        if post and error is None:
            posted, error = self._call(self.target.post, "post()")
            text += f", post() -> {_shown(posted, error)}"
            after.append(PostSeen(bool(posted), error))
        self._record(text, ("probe_group", (plan, post)), after, first=seen)

    def post(self) -> None:
        """Worker step ``post()``."""
        posted, error = self._call(self.target.post, "post()")
        self._record(
            f"post() -> {_shown(posted, error)}", ("post", ()), [PostSeen(bool(posted), error)]
        )

    # -- the tier and the worker (threaded mode) ------------------------------------

    def answer(self, plan: Plan = PROPER, bound: float | None = None) -> None:
        """Answer the worker's next tier call as ``plan`` says (waits, bounded: by
        ``bound`` if given and shorter, else ``wait_bound``).

        When the spec owes no tier call, a call may still be waiting (one the
        spec excludes): it is answered if it is there (a replay waits a little
        for it); if not, nothing happened and nothing is recorded.  When an owed
        call does not come within the bound, its probes' requests ask again
        first (``_asked_owed``), then the wait is judged (``Stalled``).
        """
        owed = self.checker.owed_tier_calls() > 0 or self.failed
        unowed_wait = UNOWED_WAIT if self.patient else 0.0
        owed_wait = self.wait_bound if bound is None else min(bound, self.wait_bound)
        pending = self.tier.next_call(owed_wait if owed else unowed_wait)
        if pending is None and not owed:
            return
        if pending is None:
            text = f"wait for the worker's next tier call -> none came in {owed_wait:g} s"
            record = Call(text, "answer", (plan,))
            self.calls.append(record)
            if self._asked_owed(record):
                pending = self.tier.next_call(0.0)  # it came while they asked
            if pending is None:
                self._observe(record, [Stalled("tier call", self.target.worker_alive())])
                return
            self.tier.answer(pending, plan)
            record.text += "; then it came, and was answered"
            self._observe(record, [])
            return
        self.tier.answer(pending, plan)
        self._record("answer the worker's tier call", ("answer", (plan,)), [])

    def _asked_owed(self, record: Call) -> bool:
        """Before a tier call that did not come is judged, the requests of the probes it
        is owed for ask again (``Checker.owed_requesters``; harmless), each judged: a
        verdict the class gave such a probe anyway (a stale result applied by key,
        which also kept the probe from the tier) is the finding, not the missing call.
        Shown in ``record`` (the wait's own call); True if any asked."""
        asks = [] if self.failed else self.checker.owed_requesters()[:ASK_BEFORE_STALLED]
        waited, shown = record.text, []
        for key, request in asks:
            asked = lookup_text(key, request)
            verdict, error = self._call(functools.partial(self.target.lookup, key, request), asked)
            shown.append(f"{asked} -> {_shown(verdict, error)}")
            record.text = f"{waited}; then its requests asked again: {', '.join(shown)}"
            self._observe(record, [LookupSeen(key, request, verdict, error)])
        return bool(shown)

    def catch_up(self, plans: Sequence[Plan] = ()) -> None:
        """Answer every tier call the spec owes (``plans`` in turn, then proper
        answers), at most ``CATCH_UP_CALLS`` of them, then ``settle``."""
        for n in range(CATCH_UP_CALLS):
            if self.failed or self.checker.owed_tier_calls() == 0:
                break
            self.answer(plans[n] if n < len(plans) else PROPER)
        self.settle()

    def store(self, key: bytes, present: bool) -> None:
        """Put ``key`` into the real tier, or take it out (``--tier fs|redis``)."""
        if present:
            self.tier.store(key)
        else:
            self.tier.delete(key)
        verb = "store" if present else "delete"
        self._record(f"tier.{verb}({key!r})", ("store", (key, present)), [])

    # -- the end -------------------------------------------------------------------

    def close(self) -> None:
        """Shut the IUT down if the run did not (checked unless a violation was found).
        Idempotent: a close whose own shutdown found the violation is not repeated (the
        scheduler thread is gone by then; a second call would wait out its bound)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._scheduler.hung is not None or self.checker.stopped:
                return  # stuck in a call that never returned, or shut down already
            if self.failed:
                if self.mode == "threaded":
                    self.tier.auto()
                self._call(self.target.shutdown, "shutdown()")
                return
            self.shutdown()
        finally:
            if self._scheduler.hung is not None:
                abandon = getattr(getattr(self, "target", None), "abandon", None)
                if abandon is not None:
                    abandon()  # release what the adapter holds; call nothing more
            self._scheduler.close()
            if self.owns_inner:
                self.owns_inner = False
                dispose_inner_tier(self.tier.inner)

    # -- plumbing ------------------------------------------------------------------

    def _construct(self, factory: TargetFactory, construct_bound: float) -> Target:
        """The target, built on the scheduler thread; a constructor that does not return
        is a finding like any other call that does not."""
        try:
            # the constructor gets a bound of its own (threads start, a first GC runs): a
            # shrink candidate's short bound applies to the calls after it
            bound, self._scheduler.bound = self._scheduler.bound, max(
                self._scheduler.bound, construct_bound
            )
            try:
                target: Target = self._scheduler.call(
                    lambda: factory(self.tier, self.mode), "the constructor", self._iut_threads
                )
            finally:
                self._scheduler.bound = bound
        except CallHung as hung:
            self.calls.append(Call(f"construct the class -> {_shown(None, HUNG)}", "construct", ()))
            self._hung = hung
            abandon = getattr(factory, "abandon", None)
            if abandon is not None:
                abandon()  # let go of what the target's adapter holds (an excepthook)
            self.calls[-1].notes.extend(_stack_notes(hung))
            self._feed([Hung(hung.call, hung.seconds)])
            raise AssertionError("unreachable: a hung constructor is a violation") from None
        return target

    def _call(self, fn: Callable[[], T], what: str) -> tuple[T | None, str | None]:
        """``fn()`` on the scheduler thread, bounded: its value, or the error it raised
        (``CLOSED`` for the closed-manager error, ``HUNG`` if it did not return)."""
        try:
            return self._scheduler.call(fn, what, self._iut_threads), None
        except CallHung as hung:
            self._hung = hung
            return None, HUNG
        except Exception as exc:
            if self.target.is_closed_error(exc):
                return None, CLOSED
            return None, f"{type(exc).__name__}: {exc}"

    def _iut_threads(self) -> list[threading.Thread]:
        """The threads started since this driver was made: the IUT's (for a hang report)."""
        return [t for t in threading.enumerate() if t not in self._oracle_threads]

    def _record(
        self, text: str, call: tuple[str, tuple[Any, ...]], observations: Sequence[Observation],
        first: Sequence[Observation] = (),
    ) -> None:
        """Number the call, feed its observations to the checker (``_observe``)."""
        record = Call(text, call[0], call[1])
        self.calls.append(record)
        self._observe(record, observations, first)

    def _observe(
        self, record: Call, observations: Sequence[Observation],
        first: Sequence[Observation] = (),
    ) -> None:
        """Feed what ``record``'s call showed to the checker.

        Order: ``first``, the tier calls made meanwhile, then ``observations``.  A
        call that did not return stands for all of them: it is the finding.
        """
        seen: list[Observation] = list(first)
        for tier_call in self.tier.take_log():
            record.notes.append(
                f"tier asked {list(tier_call.keys)!r} for {tier_call.request!r}: "
                f"{tier_call.answer}"
            )
            self._posted_expected += len(tier_call.keys)
            self._requests.add(tier_call.request)
            seen.append(tier_call)
        hung, self._hung = self._hung, None
        if hung is not None:
            record.notes.extend(_stack_notes(hung))
            if not self.failed:
                self._feed([*seen, Hung(hung.call, hung.seconds)])
            return
        crash = self._take_crash()
        if crash is not None:
            # a thread of the IUT died during this call: that is the finding (property 7),
            # whatever the call returned because of it (a None, a stall, a short shutdown)
            record.notes.append(f"the worker thread died: {crash}")
            seen.append(WorkerDied(crash))
        seen.extend(observations)
        stalled = any(isinstance(obs, Stalled | Overdue) for obs in observations)
        if (
            self.mode == "threaded" and not stalled and not self.checker.stopped
            and not any(isinstance(obs, ShutdownSeen) for obs in observations)
            and not self.target.worker_alive()
        ):
            seen.append(WorkerDied("its thread is gone"))
        if self.failed:
            return
        self._feed(seen)
        if self.leak_check and not self.failed and self.checker.expects_empty():
            self._judge_leftovers()

    def _take_crash(self) -> str | None:
        """Where the IUT's worker died, once, if its adapter can tell (``take_crash``)."""
        take = getattr(self.target, "take_crash", None)
        crash: str | None = take() if take is not None else None
        return crash

    def _leftovers(self) -> Leftover | None:
        """A ``Leftover`` naming the IUT's tables that hold anything, and their roles, if any
        (the target's ``table_roles`` maps a table's name to its role; else the name is).
        A table holds nothing when it is empty or holds only empty shards and None
        (``holds_anything``).

        A table the target only guessed (``guessed_tables``: found by its shape) counts
        as held only while it mentions a key or a request id of the run, which is what
        made it look like a table: a guess never condemns by itself (a slot array that
        keeps a freed slot's None is not a leak)."""
        tables = snapshot_of(self.target) or {}
        roles: dict[str, str] = dict(getattr(self.target, "table_roles", None) or {})
        guessed = frozenset(getattr(self.target, "guessed_tables", None) or ())
        full = [
            name for name, table in tables.items()
            if holds_anything(table) and (
                name not in guessed or mentions_any(table, self._keys, self._requests)
            )
        ]
        left = [f"{name}={_listed(tables[name])}" for name in full]
        if not left:
            return None
        probes = [tables[name] for name in full if roles.get(name, name) == "probes"]
        held = {key for table in probes for key in probe_keys(table)}
        return Leftover(
            "; ".join(left), frozenset(roles.get(name, name) for name in full),
            frozenset(held),
            frozenset().union(*(requests_named(t, self._requests) for t in probes)),
        )

    def _feed(self, seen: Sequence[Observation]) -> None:
        for obs in seen:
            violation = self.checker.observe(obs)
            if violation is None and self.strict_efficiency and self.checker.warnings:
                violation = self.checker.warnings[0]
            if violation is None:
                continue
            self.failed = True
            if violation.kind == "efficiency" and not self.strict_efficiency:
                # Property 8 only warns; with no state left to check against,
                # this IUT goes unchecked from here on.
                if violation not in self.checker.warnings:
                    self.checker.warnings.append(violation)
                return
            self._fail(violation)

    def _fail(self, violation: Violation) -> None:
        """Raise the ConformanceError of ``violation`` (telling ``on_error`` first)."""
        self.failed = True
        error = ConformanceError(violation, self.calls, self.config)
        if self.on_error is not None:
            self.on_error(error)
        raise error


def _listed(table: object) -> str:
    """A table as a dict or a list (its own repr may hide its items)."""
    if isinstance(table, dict):
        return repr(dict(table))
    try:
        return repr(list(table))  # type: ignore[call-overload]
    except (TypeError, RuntimeError):  # not iterable, or changed while read
        return repr(table)
