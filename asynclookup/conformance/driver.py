"""The oracle's driver: one call to the IUT, its observations, the checker's judgement.

``Driver`` owns an implementation under test (through an
``asynclookup.conformance.targets.adapter.Target``), the ``OracleTier`` it probes and an
``asynclookup.observe.engine.Checker``.  Each method makes
one call in the protocol's vocabulary (``lookup``, ``flush``, ..., the worker
steps in stepped mode, ``answer`` / ``settle`` in threaded mode), turns what
happened into observations, feeds them to the checker and raises
``ConformanceError`` at the first violation.  (``catch_up`` is the one
composite: the answers and the settle it makes are numbered one by one.)
When the target offers a snapshot of its tables, the driver also checks
property 5 after every call at which the spec holds nothing.  It keeps the
numbered calls, so a failure prints as a readable counterexample and as a
replay: a pytest file that calls the same ``Driver`` methods without
Hypothesis.

The Hypothesis machine (``asynclookup.conformance.machine``) and replay files are its two
users; it chooses nothing itself.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from asynclookup.conformance.targets.adapter import (
    OracleTier,
    Plan,
    Target,
    TargetFactory,
    snapshot_of,
    supports_of,
)
from asynclookup.conformance.targets.load import load_target
from asynclookup.observe.engine import (
    CLOSED,
    Checker,
    CleanupSeen,
    DrainSeen,
    FlushSeen,
    Leftover,
    LookupSeen,
    MarkMissSeen,
    MarkPresentSeen,
    Observation,
    PostSeen,
    ProbeGroupSeen,
    Settled,
    ShutdownSeen,
    Stalled,
    TakeBatchSeen,
    WorkerDied,
)
from asynclookup.observe.interface import Violation
from asynclookup.spec import core
from asynclookup.spec.errors import AsyncLookupError

T = TypeVar("T")
PROPER = Plan()  # a proper answer, all False
WAIT_BOUND = 3.0  # seconds the oracle waits for a tier call or a post in threaded mode
UNOWED_WAIT = 0.05  # seconds a replay waits for a tier call the spec does not owe
PARTIAL_WAIT = 0.05  # seconds a replay's settle waits for a per-group post (calls owed)
CATCH_UP_CALLS = 8  # tier calls one catch_up answers at most


@dataclass
class Call:
    """One numbered call of a run: how it reads, the Driver method that replays it,
    and what the tier was asked meanwhile."""

    text: str
    method: str
    args: tuple[Any, ...]
    notes: list[str] = field(default_factory=list)

    @property
    def source(self) -> str:
        """The Python call that replays it on a ``Driver``."""
        shown = [repr(a) for a in self.args]
        if self.method == "probe_group" and len(shown) == 2:
            shown[1] = f"post={shown[1]}"
        return f"{self.method}({', '.join(shown)})"


@dataclass
class ShrinkReport:
    """What the shrinker did, for the report: a long counterexample says why it is long."""

    calls_before: int
    calls_after: int = 0
    tried: int = 0  # candidate replays run
    reproduced: int = 0  # candidates that broke the same property (and were no larger)
    stopped: str = ""  # why it stopped
    note: str = ""  # e.g. that the run it started from was not reproducible

    def line(self) -> str:
        """One line for the text report."""
        return (
            f"shrunk from {self.calls_before} to {self.calls_after} calls: "
            f"{self.tried} candidates tried, {self.reproduced} reproduced; {self.stopped}"
            + (f"; {self.note}" if self.note else "")
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "calls_before": self.calls_before, "calls_after": self.calls_after,
            "tried": self.tried, "reproduced": self.reproduced, "stopped": self.stopped,
            "note": self.note or None,
        }


class ConformanceError(AsyncLookupError, AssertionError):
    """The IUT did something no spec state explains (or, strict, broke property 8)."""

    def __init__(self, violation: Violation, calls: Sequence[Call], config: dict[str, Any]):
        self.violation = violation
        self.calls = list(calls)
        self.config = config
        self.shrink_report: ShrinkReport | None = None  # set by conformance.replay.shrink
        self.reproducible = True  # False: Hypothesis's own replay of the run went otherwise
        super().__init__(format_counterexample(violation, calls))

    def not_reproducible(self, why: str) -> None:
        """Say in the report that Hypothesis's replay of this run did not repeat it."""
        self.reproducible = False
        self.args = (f"{self.args[0]}\n  {NOT_REPRODUCIBLE} ({why})",)


NOT_REPRODUCIBLE = (
    "this run was not reproducible: Hypothesis's replay of it went otherwise (the worker's "
    "timing), so this is the first failure the run saw"
)


def format_counterexample(violation: Violation, calls: Sequence[Call]) -> str:
    """The violated property, the numbered calls and the last possible spec states."""
    lines = [f"{violation.title}: {violation.detail}"]
    for number, call in enumerate(calls, 1):
        lines.append(f"  {number}. {call.text}")
        lines.extend(f"       {note}" for note in call.notes)
    lines.append("  last spec states still possible:")
    lines.extend(f"    {core.describe(s)}" for s in violation.states[:2])
    if not violation.states:
        lines.append("    (none recorded)")
    return "\n".join(lines)


def make_inner_tier(tier: str, url: str | None = None) -> Any:
    """A real tier for ``--tier fs|redis`` (None for ``memory``: the oracle's bits)."""
    if tier == "memory":
        return None
    if tier == "fs":
        from asynclookup.reference.fs_tier import FilesystemTier

        root = tempfile.mkdtemp(prefix="asynclookup-fuzz-")
        return FilesystemTier(root, sync=False)
    if tier == "redis":
        from asynclookup.reference.redis_tier import DEFAULT_URL, RedisTier

        prefix = f"asynclookup:fuzz:{os.getpid()}:".encode()
        return RedisTier(url or DEFAULT_URL, prefix=prefix)
    raise ValueError(f"unknown tier {tier!r}")


def dispose_inner_tier(inner: Any, keys: Sequence[bytes] = ()) -> None:
    """Remove what a real tier left behind: the fs root, or ``keys`` from redis."""
    if inner is None:
        return
    root = getattr(inner, "root", None)
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)
        return
    for key in keys:
        inner.delete(key)
    close = getattr(inner, "close", None)
    if close is not None:
        close()


class Driver:
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
        self.owns_inner = False  # close() disposes of the real tier
        self.failed = False  # a ConformanceError was raised: nothing is checked after it
        self.on_error: Callable[[ConformanceError], None] | None = None  # told before raising
        self.target: Target = factory(self.tier, mode)
        self.supports = supports_of(self.target)  # the optional calls it has
        self.leak_check = snapshot_of(self.target) is not None

    @classmethod
    def open(
        cls, target: str = "reference", *, tier: str = "memory", **options: Any
    ) -> Driver:
        """A driver for the target named ``reference`` or ``module:attribute``."""
        driver = cls(
            load_target(target), inner=make_inner_tier(tier),
            config={"target": target, "tier": tier}, **options,
        )
        driver.owns_inner = True
        return driver

    # -- scheduler calls -----------------------------------------------------------

    def lookup(self, key: bytes, request: str) -> None:
        """``lookup(key, request)``; the checker judges the verdict."""
        verdict, error = self._call(lambda: self.target.lookup(key, request))
        self._record(
            f"lookup({key!r}, {request!r}) -> {_shown(verdict, error)}",
            ("lookup", (key, request)), [LookupSeen(key, request, verdict, error)],
        )

    def flush(self) -> None:
        """``flush()``."""
        _, error = self._call(self.target.flush)
        self._record(f"flush(){_raised(error)}", ("flush", ()), [FlushSeen(error)])

    def cleanup(self, request: str) -> None:
        """``cleanup(request)``."""
        _, error = self._call(lambda: self.target.cleanup(request))
        self._record(
            f"cleanup({request!r}){_raised(error)}", ("cleanup", (request,)),
            [CleanupSeen(request, error)],
        )

    def mark_miss(self, keys: Sequence[bytes]) -> None:
        """``mark_miss(keys)``."""
        keys = tuple(keys)
        _, error = self._call(lambda: self.target.mark_miss(keys))
        self._record(
            f"mark_miss({list(keys)!r}){_raised(error)}", ("mark_miss", (list(keys),)),
            [MarkMissSeen(keys, error)],
        )

    def mark_present(self, keys: Sequence[bytes]) -> None:
        """``mark_present(keys)``."""
        keys = tuple(keys)
        _, error = self._call(lambda: self.target.mark_present(keys))
        self._record(
            f"mark_present({list(keys)!r}){_raised(error)}", ("mark_present", (list(keys),)),
            [MarkPresentSeen(keys, error)],
        )

    def drain_results(self) -> None:
        """``drain_results()``."""
        _, error = self._call(self.target.drain_results)
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
        _, error = self._call(self.target.shutdown)
        self.tier.clear_plans()
        self._record(
            f"shutdown(){_raised(error)}", ("shutdown", (list(plans),) if plans else ()),
            [ShutdownSeen(error)],
        )

    # -- worker steps (stepped mode) ----------------------------------------------

    def take_batch(self) -> None:
        """Worker step ``take_batch()``."""
        took, error = self._call(self.target.take_batch)
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
            took, error = self._call(self.target.take_batch)
            text = f"take_batch() -> {_shown(took, error)}, "
            seen.append(TakeBatchSeen(bool(took), error))
            if error is not None or not took:
                self._record(text[:-2], ("probe_group", (plan, post)), seen)
                return
        self.tier.queue_plans([plan])
        probed, error = self._call(self.target.probe_group)
        self.tier.clear_plans()
        text += f"probe_group() -> {_shown(probed, error)}"
        after: list[Observation] = [ProbeGroupSeen(bool(probed), error)]
        if post and error is None:
            posted, error = self._call(self.target.post)
            text += f", post() -> {_shown(posted, error)}"
            after.append(PostSeen(bool(posted), error))
        self._record(text, ("probe_group", (plan, post)), after, first=seen)

    def post(self) -> None:
        """Worker step ``post()``."""
        posted, error = self._call(self.target.post)
        self._record(
            f"post() -> {_shown(posted, error)}", ("post", ()), [PostSeen(bool(posted), error)]
        )

    # -- the tier and the worker (threaded mode) ------------------------------------

    def answer(self, plan: Plan = PROPER) -> None:
        """Answer the worker's next tier call as ``plan`` says (waits, bounded).

        When the spec owes no tier call, a call may still be waiting (one the
        spec excludes): it is answered if it is there (a replay waits a little
        for it); if not, nothing happened and nothing is recorded.
        """
        owed = self.checker.owed_tier_calls() > 0 or self.failed
        unowed_wait = UNOWED_WAIT if self.patient else 0.0
        pending = self.tier.next_call(self.wait_bound if owed else unowed_wait)
        if pending is None and not owed:
            return
        if pending is None:
            self._record(
                "wait for the worker's next tier call -> none came", ("answer", (plan,)),
                [Stalled("tier call", self.target.worker_alive())],
            )
            return
        self.tier.answer(pending, plan)
        self._record("answer the worker's tier call", ("answer", (plan,)), [])

    def catch_up(self, plans: Sequence[Plan] = ()) -> None:
        """Answer every tier call the spec owes (``plans`` in turn, then proper
        answers), at most ``CATCH_UP_CALLS`` of them, then ``settle``."""
        for n in range(CATCH_UP_CALLS):
            if self.failed or self.checker.owed_tier_calls() == 0:
                break
            self.answer(plans[n] if n < len(plans) else PROPER)
        self.settle()

    def settle(self) -> None:
        """Wait (bounded) until the worker has posted a result for every key it probed.

        Only meaningful once every owed tier call is answered; before that (a
        replay whose answers were shrunk away) the call only records that.
        """
        owed = self.checker.owed_tier_calls() > 0
        if not self.failed and (owed or not self.unsettled()):
            if owed and self.unsettled() and self.patient:
                self._settle_partly()
            return  # tier calls are still owed, or nothing new to wait for
        expected = self._posted_expected
        done = self.target.wait_posted(expected, self.wait_bound)
        self._settled_at = expected
        if done is None:
            return
        if not done and self._answer_unowed():
            return  # the worker was stuck in a tier call the spec excludes: judged as such
        self._record(
            f"wait until the worker posted {expected} results -> "
            f"{'done' if done else 'not within the bound'}",
            ("settle", ()),
            [Settled() if done else Stalled("post", self.target.worker_alive())],
        )

    def _settle_partly(self) -> None:
        """A replay's settle while tier calls are still owed: a worker that posts per
        request group may have posted what it was answered so far; wait briefly for
        that and, if it did, record it (pinning when the post happened).  A worker that
        posts per batch has not: nothing is recorded, nothing is judged."""
        expected = self._posted_expected
        if self.target.wait_posted(expected, PARTIAL_WAIT):
            self._settled_at = expected
            self._record(
                f"wait until the worker posted {expected} results -> done", ("settle", ()),
                [Settled()],
            )

    def _answer_unowed(self) -> bool:
        """A tier call the spec does not owe is waiting: answer it and record it, so the
        engine judges the call itself (a stale entry submitted, say) rather than the
        post it held up.  Whether one was there."""
        pending = self.tier.next_call(0.0)
        if pending is None:
            return False
        self.tier.answer(pending, PROPER)
        self._record("answer the worker's tier call", ("answer", (PROPER,)), [])
        return True

    def unsettled(self) -> bool:
        """Whether results were answered since the last ``settle``."""
        return self._posted_expected > self._settled_at

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
        """Shut the IUT down if the run did not (checked unless a violation was found)."""
        try:
            if self.checker.stopped:
                return
            if self.failed:
                if self.mode == "threaded":
                    self.tier.auto()
                self._call(self.target.shutdown)
                return
            self.shutdown()
        finally:
            if self.owns_inner:
                self.owns_inner = False
                dispose_inner_tier(self.tier.inner)

    # -- plumbing ------------------------------------------------------------------

    def _call(self, fn: Callable[[], T]) -> tuple[T | None, str | None]:
        try:
            return fn(), None
        except Exception as exc:
            if self.target.is_closed_error(exc):
                return None, CLOSED
            return None, f"{type(exc).__name__}: {exc}"

    def _record(
        self, text: str, call: tuple[str, tuple[Any, ...]], observations: Sequence[Observation],
        first: Sequence[Observation] = (),
    ) -> None:
        """Number the call, feed its observations to the checker.

        Order: ``first``, the tier calls made meanwhile, then ``observations``.
        """
        record = Call(text, call[0], call[1])
        self.calls.append(record)
        seen: list[Observation] = list(first)
        for tier_call in self.tier.take_log():
            record.notes.append(
                f"tier asked {list(tier_call.keys)!r} for {tier_call.request!r}: "
                f"{tier_call.answer}"
            )
            self._posted_expected += len(tier_call.keys)
            seen.append(tier_call)
        crash = self._take_crash()
        if crash is not None:
            # a thread of the IUT died during this call: that is the finding (property 7),
            # whatever the call returned because of it (a None, a stall, a short shutdown)
            record.notes.append(f"the worker thread died: {crash}")
            seen.append(WorkerDied(crash))
        seen.extend(observations)
        stalled = any(isinstance(obs, Stalled) for obs in observations)
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
            self._feed(self._leftovers())

    def _take_crash(self) -> str | None:
        """Where the IUT's worker died, once, if its adapter can tell (``take_crash``)."""
        take = getattr(self.target, "take_crash", None)
        crash: str | None = take() if take is not None else None
        return crash

    def _leftovers(self) -> list[Observation]:
        """A ``Leftover`` naming the IUT's non-empty tables and their roles, if any (the
        target's ``table_roles`` maps a table's name to its role; else the name is)."""
        tables = snapshot_of(self.target) or {}
        roles: dict[str, str] = dict(getattr(self.target, "table_roles", None) or {})
        full = [name for name, table in tables.items() if len(table)]
        left = [f"{name}={_listed(tables[name])}" for name in full]
        if not left:
            return []
        return [Leftover("; ".join(left), frozenset(roles.get(name, name) for name in full))]

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


def _shown(value: object, error: str | None) -> str:
    if error is None:
        return repr(value)
    return "raised the closed-manager error" if error == CLOSED else f"raised {error}"


def _raised(error: str | None) -> str:
    return "" if error is None else f" -> {_shown(None, error)}"
