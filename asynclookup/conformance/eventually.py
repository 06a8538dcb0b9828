"""The oracle's bounded *eventually*: waiting for what its hidden worker owes.

In threaded mode the oracle cannot see the implementation's worker post.  It
knows only what the spec owes: a tier call (the oracle's tier sees it come), or
results posted (a later lookup or drain shows them, or the tables empty).  The
methods here are the waits for those, and each ends in an observation, never in
a guess:

- ``settle`` lets the worker post what it was answered.  The target's hint
  (``wait_posted``: a results queue counted, its thread gone idle) may shorten
  the wait; it decides nothing.
- ``await_verdict`` and ``await_empty`` re-ask (``drain_results()``, a repeat
  ``lookup``, both harmless: docs/protocol.md, "Asking again is harmless") with
  growing pauses until what the spec owes shows, for at most ``wait_bound``
  seconds; only a symptom that persists to the bound is judged (``Overdue``).
- ``_judge_leftovers`` asks about a leftover's key once more before calling
  it a leak, so that a stuck probe is named for what it breaks.

``Eventually`` is a mixin of ``asynclookup.conformance.driver.Driver``, the one
class that uses it; ``_Driving`` says what it uses of the driver.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from asynclookup.conformance.counterexample import Call, _shown, lookup_text, reask_text
from asynclookup.conformance.targets.adapter import OracleTier, Plan, Target
from asynclookup.conformance.targets.bounded import Patience
from asynclookup.observe.engine import (
    Checker,
    DrainSeen,
    Leftover,
    LookupSeen,
    Observation,
    Overdue,
    TierCallWaiting,
)
from asynclookup.observe.interface import Violation

T = TypeVar("T")
PROPER = Plan()  # a proper answer, all False
WAIT_BOUND = 3.0  # seconds the oracle waits for a tier call or a post in threaded mode
# Re-asks for a post the oracle cannot see: the pause between two starts at the first
# figure and doubles up to the second.  A pause is not a synchronisation: each re-ask
# is an observation, and only the bound (``wait_bound``) decides that a post is late.
REASK_PAUSES = (0.0005, 0.05)
# How long a settle lets the target's hint (``wait_posted``) hold the oracle: a worker
# posts within microseconds of its answer; one that does not is judged by the re-asks.
HINT_BOUND = 0.05
# How long the leak check's asking again (``_judge_leftovers``) waits for the tier call
# its flush owes.  By then the tables have stayed non-empty for the whole bound where
# the spec is empty: the class is already non-conforming, and this wait only names
# the property (6 if the call never comes, else what it shows, else 4 or 5).  A
# worker that is alive makes that call within milliseconds, even on a loaded machine
# (docs/benchmarks.md, "How long a correct class takes").
NAMING_WAIT = 0.5
ASKED_AGAIN = "asked-again"  # the request that asks again about a leftover's key


class _Driving(Protocol):
    """What the waits use of ``Driver``: its state, its calls and its plumbing."""

    mode: str
    wait_bound: float
    failed: bool
    leak_check: bool
    tier: OracleTier
    checker: Checker
    target: Target
    calls: list[Call]
    _posted_expected: int
    _settled_at: int
    _asking_again: bool
    _asked_early: set[bytes]
    leftover_key: bytes | None
    _pause: threading.Event

    def lookup(self, key: bytes, request: str) -> None: ...
    def flush(self) -> None: ...
    def cleanup(self, request: str) -> None: ...
    def await_empty(self, first: str = ...) -> None: ...
    def answer(self, plan: Plan = ..., bound: float | None = ...) -> None: ...
    def probe_group(self, plan: Plan = ..., post: bool = ...) -> None: ...
    def _call(self, fn: Callable[[], T], what: str) -> tuple[T | None, str | None]: ...
    def _record(
        self, text: str, call: tuple[str, tuple[object, ...]],
        observations: Sequence[Observation], first: Sequence[Observation] = ...,
    ) -> None: ...
    def _observe(
        self, record: Call, observations: Sequence[Observation],
        first: Sequence[Observation] = ...,
    ) -> None: ...
    def _leftovers(self) -> Leftover | None: ...
    def _feed(self, seen: Sequence[Observation]) -> None: ...
    def _fail(self, violation: Violation) -> None: ...
    # the mixin's own, called through ``self``
    def unsettled(self) -> bool: ...
    def _judge_leftovers(self) -> None: ...
    def _answer_unowed(self, within: float = ...) -> bool: ...
    def _reask(
        self, record: Call, reask: Callable[[], bool], key: bytes | None, request: str | None
    ) -> None: ...


class Eventually:
    """The driver's waits for what the hidden worker owes (see the module's text)."""

    leftover_key: bytes | None  # a held key await_empty leaves to ask_about_leftover

    def settle(self: _Driving) -> None:
        """Give the worker time to post what it was answered: a wait the target's hint
        may shorten (a results queue counted, its thread gone idle).  It judges
        nothing: whether a verdict shows is judged by the lookups after it, which
        re-ask within a bound (``await_verdict``).  Recorded with what was seen."""
        if self.failed:
            return
        released = self.tier.release()
        hint_bound = min(self.wait_bound, HINT_BOUND)
        if self.checker.owed_tier_calls() > 0:
            # A worker that posts per group may post what it was given.  Its next tier
            # call, if it comes within the hint's bound, is a fact: the worker holds
            # that group's batch, so it posted every batch before it (TierCallWaiting).
            # The call stays waiting for an ``answer``; none coming decides nothing.
            waiting = self.tier.waiting(hint_bound)
            if released or waiting is not None:
                seen = "" if waiting is None else (
                    f" -> its next tier call came: {list(waiting[0])!r} for {waiting[1]!r}"
                )
                self._record(f"let the worker have its answers (tier calls still owed){seen}",
                             ("settle", ()),
                             [] if waiting is None else [TierCallWaiting(*waiting)])
            return
        if not self.unsettled():
            return
        expected = self._posted_expected
        done = self.target.wait_posted(expected, hint_bound)
        self._settled_at = expected
        if not done and self._answer_unowed():
            return  # the worker was stuck in a tier call the spec excludes: judged as such
        watch = getattr(self.target, "post_watch", None)
        results = "1 result" if expected == 1 else f"{expected} results"
        if done is None or watch is None:
            seen = "no way to see it post (the lookups judge)"
        elif done:
            seen = f"{results} owed, {watch}"
        else:
            seen = f"not seen in {hint_bound:g} s (the lookups judge)"
        self._record(f"let the worker post -> {seen}", ("settle", ()), [])

    def await_verdict(self: _Driving, key: bytes, request: str) -> None:
        """If ``key``'s verdict waits only on a post the oracle cannot see, re-ask until
        it shows: ``drain_results()`` and a repeat ``lookup(key, request)``, both
        harmless (docs/protocol.md, "Asking again is harmless"), with growing pauses,
        for at most ``wait_bound`` seconds after the last settle.  Only a ``None``
        that persists to the bound is judged (``Overdue``): a wrong hint can make this
        wait longer, never make a correct class fail.  Recorded as one call, only when
        it re-asked; each re-ask is judged as it comes."""
        if self.failed or self.unsettled() or not self.checker.awaits_post(key):
            return
        asked = reask_text(key, request)
        record = Call(f"{asked} until the verdict shows", "await_verdict", (key, request))
        self.calls.append(record)

        def reask() -> bool:
            _, error = self._call(self.target.drain_results, "drain_results()")
            self._observe(record, [DrainSeen(error)])
            verdict, error = self._call(
                lambda: self.target.lookup(key, request), lookup_text(key, request)
            )
            record.text = f"{asked} -> {_shown(verdict, error)}"
            self._observe(record, [LookupSeen(key, request, verdict, error)])
            return error is not None or verdict is not None or not self.checker.awaits_post(key)

        self._reask(record, reask, key, request)

    def await_empty(self: _Driving, first: str = "") -> None:
        """The leak check where only unseen posts stand between the spec and quiescence:
        if the IUT's tables are not empty, re-ask ``drain_results()`` until they are,
        for at most ``wait_bound`` seconds; if they never are, the post is ``Overdue``
        and the tables are judged (property 4 or 5).  Recorded only when it re-asked.

        When the hint says every result is posted and the first re-ask leaves a probe
        the class holds (no request kept indexed: that is property 4 whatever the key
        shows), the wait ends there and the key is left to ``ask_about_leftover``, so
        that a stale verdict kept for it is seen at once rather than after the bound;
        the call is then recorded as ``await_empty("first")``, which a replay repeats
        as that one re-ask (the asking and the bounded wait after it are calls of
        their own).  A wrong hint costs the calls of the asking, never a verdict."""
        if (
            self.failed or not self.leak_check or self.unsettled()
            or not self.checker.empty_once_posted() or self._leftovers() is None
        ):
            return
        record = Call("re-ask drain_results() until the tables are empty", "await_empty", ())
        self.calls.append(record)
        early = [first == "first" or (
            not self._asking_again
            and bool(self.target.wait_posted(self._posted_expected, 0.0)))]

        def reask() -> bool:
            _, error = self._call(self.target.drain_results, "drain_results()")
            self._observe(record, [DrainSeen(error)])
            left = self._leftovers()
            record.text = (
                "re-ask drain_results() until the tables are empty -> "
                + ("they are" if left is None else "they are not")
            )
            done = error is not None or left is None or not self.checker.empty_once_posted()
            if early[0] and not done and left is not None and "index" not in left.roles:
                fresh = sorted(left.held - self._asked_early)
                if fresh:
                    self.leftover_key = fresh[0]
                    self._asked_early.add(fresh[0])
                    record.args = ("first",)
                    record.text += f" (the worker posted, by the hint: {fresh[0]!r} is asked about)"
                    return True
            early[0] = False
            return done

        self._reask(record, reask, None, None)
        if not self.failed and record.args != ("first",) and self.checker.expects_empty():
            self._judge_leftovers()

    def ask_about_leftover(self: _Driving) -> None:
        """If the last ``await_empty`` left a held key to ask about (``leftover_key``): a
        new request looks it up and is cleaned up, each call judged on every possible
        state (a stale verdict kept for the key is property 2 at once), then the leak
        check waits as it always does, bounded (``await_empty``)."""
        key = self.leftover_key
        self.leftover_key = None
        if key is None or self.failed:
            return
        self.lookup(key, ASKED_AGAIN)
        if not self.failed:
            self.cleanup(ASKED_AGAIN)
        self.await_empty()

    def _judge_leftovers(self: _Driving) -> None:
        """Feed the IUT's non-empty tables at a quiescent point (``Leftover``).

        When they hold a probe of a key, the class is asked once more what it does with
        that key, as a new request would (``lookup``, ``flush``, the worker's tier call),
        before the leftover is called a leak: a probe stuck in flight never makes that
        tier call (property 6, progress, whether or not anyone still waited for it), an
        orphan kept with its verdict delivers that stale verdict (property 2), a kept
        PENDING orphan is submitted for its cleaned-up request (property 1).  Only if
        none shows is it a leak (4 or 5), judged on the states of the quiescent point.
        Threaded, a tier call the worker makes first (within ``HINT_BOUND``: a worker
        calls within microseconds of a flush, and only the name rests on this wait; the
        spec owes none here) is answered and judged before any of that."""
        left = self._leftovers()
        if left is None:
            return
        if not left.held or self._asking_again:
            self._feed([left])
            return
        if self.mode == "threaded" and self._answer_unowed(HINT_BOUND):
            # the spec owes no tier call here: one the worker makes anyway is judged
            # first, for what it shows (a stale entry submitted, say), before the
            # leftover it may hold up
            left = None if self.failed else self._leftovers()
            if left is None:
                return
        quiescent = copy.deepcopy(self.checker, {id(self.checker.table): self.checker.table})
        self._asking_again = True
        try:
            self.lookup(min(left.held), ASKED_AGAIN)
            self.flush()
            if self.mode == "threaded":
                self.answer(PROPER, NAMING_WAIT)  # only the name rests on this wait
            else:
                self.probe_group(PROPER, post=True)
        finally:
            self._asking_again = False
        if self.failed:
            return
        violation = quiescent.observe(left)
        if violation is not None:
            self._fail(violation)

    def _reask(
        self: _Driving, record: Call, reask: Callable[[], bool], key: bytes | None,
        request: str | None,
    ) -> None:
        """Call ``reask`` until it says the wait is over or ``wait_bound`` passed; then,
        unless a tier call the spec does not owe explains the wait (it is answered and
        judged), the post is ``Overdue``."""
        self.tier.release()  # a wait: the worker gets its held answers
        patience = Patience(self.wait_bound)  # a starved wait stretches (bounded.py)
        pause, longest = REASK_PAUSES
        while not self.failed:
            if reask():
                return
            if not patience.left():
                break
            patience.wait(self._pause.wait, pause)
            pause = min(2 * pause, longest)
        if self.failed or self._answer_unowed():
            return
        record.text += f" (re-asked for {self.wait_bound:g} s)"
        alive = self.target.worker_alive()
        self._observe(record, [Overdue(alive, key, request)])

    def _answer_unowed(self: _Driving, within: float = 0.0) -> bool:
        """A tier call the spec does not owe is waiting (or comes ``within`` seconds):
        answer it and record it, so the engine judges the call itself (a stale entry
        submitted, say) rather than the post it held up.  Whether one was there."""
        pending = self.tier.next_call(within)
        if pending is None:
            return False
        self.tier.answer(pending, PROPER)
        self._record("answer the worker's tier call", ("answer", (PROPER,)), [])
        return True

    def unsettled(self: _Driving) -> bool:
        """Whether results were answered since the last ``settle``."""
        return self._posted_expected > self._settled_at
