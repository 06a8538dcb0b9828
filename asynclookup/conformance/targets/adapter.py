"""The oracle's side of the black box: the adapter protocol, its tier, the reference adapter.

An implementation under test (IUT) is driven through a ``Target``: the seven
scheduler calls, the three worker steps in stepped mode, and two questions
(is the worker alive; wait until it has posted so many results); optionally,
which calls it lacks and a snapshot of its tables for the leak check.  The oracle
supplies the tier: ``OracleTier`` records every ``batch_lookup`` (keys,
request context) and answers it as a ``Plan`` says: a proper answer or one of
the faults of property 7 (docs/properties.md: an exception, too few or too many
results, a non-bool, a lazy iterable that raises part-way, a slow call).  The proper
verdicts come from the plan's bits, or from a real tier (filesystem, Redis)
that the oracle fills itself.

In stepped mode the tier answers at once with the plan queued for the call.
In threaded mode each call blocks the IUT's worker until the oracle answers
it (``next_call`` / ``answer``), so the oracle chooses when each tier call ends;
``auto`` answers every call at once (for shutdown, which joins the worker).

``ReferenceAdapter`` drives ``asynclookup.reference`` through its public API
only: the manager's methods, its worker's steps, an observer for the ``post``
events and ``snapshot()`` for the leak check.
"""

from __future__ import annotations

import importlib
import os
import queue
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from asynclookup.conformance.targets.bounded import patiently
from asynclookup.observe.observations import Answer, TierCallSeen
from asynclookup.reference.errors import ManagerClosedError
from asynclookup.reference.events import Event
from asynclookup.reference.tier import RequestContext
from asynclookup.spec.errors import AsyncLookupError

SLOW_SECONDS = 0.002  # how long a "slow" answer keeps the worker waiting
ANSWER_BOUND = 60.0  # a threaded tier call waits at most this long for the oracle
JUNK: tuple[object, ...] = (1, 0, None, "yes", 1.0)  # non-bool items a tier may give
PLAN_KINDS = ("proper", "raise", "short", "long", "junk", "lazy", "lazy_raise", "slow")
# The tier misbehaviours of property 7 (docs/properties.md), each a fault kind a
# user can name in ``--faults``: user's name -> the plan kind that produces it.
FAULT_KINDS: dict[str, str] = {
    "raise": "raise",  # batch_lookup raises
    "lazy-raise": "lazy_raise",  # a lazy iterable that raises part-way
    "short": "short",  # too few results
    "long": "long",  # too many results
    "non-bool": "junk",  # a value that is not a bool (1, 0, None, "yes", 1.0)
    "lazy": "lazy",  # a proper answer as a lazy iterable (a shape, not a fault)
    "slow": "slow",  # a proper answer, late
}


def parse_faults(text: str) -> tuple[str, ...]:
    """The fault kinds ``text`` names, in ``FAULT_KINDS`` order: ``none``, ``all`` or a
    comma list such as ``raise,short,slow``.  Raises ValueError naming a bad word."""
    words = [w.strip() for w in text.split(",")]
    if words == ["none"]:
        return ()
    if words == ["all"]:
        return tuple(FAULT_KINDS)
    unknown = [w for w in words if w not in FAULT_KINDS]
    if unknown or not words:
        raise ValueError(
            f"unknown fault kind {(unknown or [''])[0]!r}: want none, all, or a comma list of "
            + ", ".join(FAULT_KINDS)
        )
    return tuple(k for k in FAULT_KINDS if k in words)


def plan_kinds(faults: str) -> tuple[str, ...]:
    """The plan kinds a ``--faults`` text allows: always proper answers, plus its faults."""
    return ("proper", *(FAULT_KINDS[k] for k in parse_faults(faults)))


def faults_text(faults: str) -> str:
    """The canonical spelling of a ``--faults`` text (``none``, ``all`` or the list)."""
    kinds = parse_faults(faults)
    if not kinds:
        return "none"
    return "all" if kinds == tuple(FAULT_KINDS) else ",".join(kinds)


class TierFault(AsyncLookupError, RuntimeError):
    """What the oracle's tier raises when its plan says so."""


@dataclass(frozen=True)
class Plan:
    """How the oracle's tier answers one call, whatever its number of keys.

    ``bits``: the proper verdicts (padded with False; ignored when a real tier
    answers).  ``size`` picks the fault's detail: items kept (short), items
    added (long), the spoiled position and, with ``bits``, the value put there
    (junk), items yielded before raising (lazy_raise).
    """

    kind: str = "proper"
    bits: tuple[bool, ...] = ()
    size: int = 0

    def answer(self, proper: Sequence[bool]) -> Answer:
        """The answer this plan gives when the proper verdicts are ``proper``."""
        n, b = len(proper), tuple(proper)
        kind, size = self.kind, self.size
        if kind == "raise":
            return Answer(raises=True)
        if kind == "short" and n:
            return Answer(b[: size % n])
        if kind == "long":
            return Answer(b + (True,) * (1 + size % 2))
        if kind == "junk" and n:
            # the spoiled position from the size; the value from the size and the bits,
            # so that every value of JUNK lands at every position
            i = size % n
            bits = sum(1 << j for j, bit in enumerate(self.bits) if bit)
            value = JUNK[(size + 4 * bits) % len(JUNK)]
            return Answer((*b[:i], value, *b[i + 1:]))
        if kind == "lazy":
            return Answer(b, lazy=True)
        if kind == "lazy_raise":
            return Answer(b[: size % (n + 1)], raises=True, lazy=True)
        return Answer(b, slow=kind == "slow")


def deliver(answer: Answer) -> list[object] | Iterator[object]:
    """Turn an answer into what ``batch_lookup`` returns (or raise it).  Public: the
    regression files' harness answers with this code (``conformance.regression``)."""
    if answer.slow:
        threading.Event().wait(SLOW_SECONDS)  # a slow tier, not a synchronisation
    if answer.raises and not answer.lazy:
        raise TierFault("oracle tier: this call fails")
    if answer.lazy:
        return lazy_answer(answer)
    return list(answer.items)


def lazy_answer(answer: Answer) -> Iterator[object]:
    """An answer as a lazy iterable: its items, then its exception if it raises."""
    yield from answer.items
    if answer.raises:
        raise TierFault("oracle tier: this answer fails part-way")


@dataclass
class _Pending:
    """A threaded tier call waiting for the oracle's answer."""

    keys: tuple[bytes, ...]
    context: Any
    answered: threading.Event
    answer: Answer | None = None


class OracleTier:
    """A tier that records each call and answers it as the oracle's plan says.

    ``inner``: a real tier whose contents give the proper verdicts (None: the
    plans' bits do).  ``threaded``: calls block until ``answer`` (and the
    ``release`` after it) or ``auto``.
    """

    def __init__(self, inner: Any = None, *, threaded: bool = False) -> None:
        self.inner = inner
        self.threaded = threaded
        self.name = f"oracle({getattr(inner, 'name', 'memory')})"
        self._lock = threading.Lock()
        self._plans: deque[Plan] = deque()  # stepped, and auto in threaded mode
        self._auto = not threaded
        self._calls: queue.Queue[_Pending] = queue.Queue()
        self._arrived = threading.Condition(self._lock)  # a call was put on _calls
        self._log: list[TierCallSeen] = []
        self._held: list[_Pending] = []  # answered, not yet handed to the worker
        self.results_given = 0  # keys of every answered call, for wait_idle

    # -- the Tier protocol -------------------------------------------------------

    def batch_lookup(self, keys: Sequence[bytes], request_context: Any) -> Any:
        keys = tuple(keys)
        with self._lock:
            if not self._auto:
                pending = _Pending(keys, request_context, threading.Event())
                self._calls.put(pending)
                self._arrived.notify_all()
            else:
                pending = None
                answer = self._answer_now(keys, request_context, self._next_plan())
        if pending is not None:
            if not pending.answered.wait(ANSWER_BOUND) or pending.answer is None:
                raise TierFault("oracle tier: nobody answered this call")
            answer = pending.answer
        return deliver(answer)

    def store(self, key: bytes, value: bytes = b"") -> None:
        if self.inner is not None:
            self.inner.store(key, value)

    def delete(self, key: bytes) -> None:
        if self.inner is not None:
            self.inner.delete(key)

    def contains(self, key: bytes) -> bool:
        return bool(self.inner.contains(key)) if self.inner is not None else False

    # -- the oracle's controls ---------------------------------------------------

    def queue_plans(self, plans: Sequence[Plan]) -> None:
        """Answer the next calls answered at once with ``plans`` (then proper, all False)."""
        with self._lock:
            self._plans.extend(plans)

    def clear_plans(self) -> None:
        """Forget plans no call used."""
        with self._lock:
            self._plans.clear()

    def pending(self) -> bool:
        """Threaded: whether a call is waiting for an answer right now."""
        return not self._calls.empty()

    def next_call(self, timeout: float) -> _Pending | None:
        """Threaded: the oldest call waiting for an answer, or None after ``timeout``
        seconds of the process's time (``patiently``: a starved wait stretches).
        Held answers are released first (the worker cannot call again while held)."""
        self.release()
        return patiently(self._get_call, timeout)

    def _get_call(self, timeout: float) -> _Pending | None:
        try:
            return self._calls.get(timeout=timeout)
        except queue.Empty:
            return None

    def waiting(self, timeout: float) -> tuple[tuple[bytes, ...], str] | None:
        """Threaded: the keys and request of the oldest call waiting for an answer (it
        stays waiting), or None if none came within ``timeout``.  Held answers are
        not released: the caller releases them first if it means to."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: not self._calls.empty(), timeout):
                return None
            with self._calls.mutex:
                oldest = self._calls.queue[0]
        return oldest.keys, str(getattr(oldest.context, "req_id", oldest.context))

    def answer(self, pending: _Pending, plan: Plan) -> None:
        """Threaded: answer a waiting call as ``plan`` says.  The worker gets the answer
        (and may post its results) only at the oracle's next wait (``release``): so
        the scheduler calls made until then see the results not posted, whatever the
        threads' timing, and a counterexample replays the same way."""
        with self._lock:
            pending.answer = self._answer_now(pending.keys, pending.context, plan)
            self._held.append(pending)

    def release(self) -> int:
        """Threaded: hand every held answer to the worker thread waiting for it; how many."""
        with self._lock:
            held, self._held = self._held, []
        for pending in held:
            pending.answered.set()
        return len(held)

    def auto(self, plans: Sequence[Plan] = ()) -> None:
        """Threaded: from now on answer every call at once, waiting ones included."""
        self.release()
        with self._lock:
            self._plans.extend(plans)
            self._auto = True
            while True:
                try:
                    pending = self._calls.get_nowait()
                except queue.Empty:
                    break
                pending.answer = self._answer_now(pending.keys, pending.context, self._next_plan())
                pending.answered.set()

    def take_log(self) -> list[TierCallSeen]:
        """The calls answered since the last ``take_log``, in the order they were answered."""
        with self._lock:
            log, self._log = self._log, []
        return log

    def _next_plan(self) -> Plan:
        return self._plans.popleft() if self._plans else Plan()

    def _answer_now(self, keys: tuple[bytes, ...], context: Any, plan: Plan) -> Answer:
        """Decide and log the answer (the lock is held).

        With a real tier the proper verdicts are its own answer; if it fails,
        the call fails.
        """
        request = str(getattr(context, "req_id", context))
        if self.inner is None:
            answer = plan.answer([plan.bits[i] if i < len(plan.bits) else False
                                  for i in range(len(keys))])
        else:
            try:
                proper = [bool(v) for v in self.inner.batch_lookup(keys, context)]
            except Exception:
                answer = Answer(raises=True)
            else:
                answer = plan.answer(proper)
        self._log.append(TierCallSeen(keys, request, answer))
        self.results_given += len(keys)
        return answer


# -- the adapter protocol ----------------------------------------------------------


class Target(Protocol):
    """What the oracle needs from an implementation under test.

    Optional members, read with ``supports_of``, ``snapshot_of`` and ``getattr``:

    - ``supports``: the names in ``OPTIONAL_CALLS`` the IUT has (default: all).
      The oracle never generates a call an IUT lacks: ``mark_miss``,
      ``mark_present``, or any call after ``shutdown()`` (``after_shutdown``:
      the IUT raises its closed-manager error for them).
    - ``lacks``: the names in ``LACKABLE_CALLS`` the IUT has not (default:
      none): a class without ``cleanup()``.  The oracle never generates it, so
      what only a cleanup can show (properties 4 and 5, and the orphaned
      probes of properties 1 and 2) goes unchecked; the report says so.
    - ``snapshot()``: the IUT's tables by name (probe states, the request index,
      the step's batch, posted results), each a sized collection.  When an
      adapter offers it, the oracle checks property 5 (no leak) whenever no
      possible spec state holds anything: every table must then hold nothing.
    - ``table_roles``: the role (``probes``, ``index``, ``batch``, ``results``)
      of each table ``snapshot()`` names (a name absent from it is its own
      role): a leftover request ``index`` is property 4, anything else 5.
    - ``guessed_tables``: the names of the tables ``snapshot()`` gives that are
      a guess (found by their shape): one counts as held only while it still
      mentions a key or a request id of the run, never for being non-empty
      alone (default: none, every table must hold nothing: be empty, or hold only
      empty shards and ``None``s).
    - ``take_crash()``: where a thread of the IUT died of an uncaught
      exception, once (None: none did, or it was told already).  The driver
      asks after every call and reports a crash as a dead worker (property 7)
      before anything the call showed because of it.
    """

    mode: str  # "stepped" or "threaded"

    def lookup(self, key: bytes, request: str) -> bool | None: ...
    def flush(self) -> None: ...
    def cleanup(self, request: str) -> None: ...
    def mark_miss(self, keys: tuple[bytes, ...]) -> None: ...
    def mark_present(self, keys: tuple[bytes, ...]) -> None: ...
    def drain_results(self) -> None: ...
    def shutdown(self) -> None: ...

    def take_batch(self) -> bool:
        """Stepped mode: the worker step; True when it took a batch."""
        ...

    def probe_group(self) -> bool:
        """Stepped mode: the worker step; True when it called the tier."""
        ...

    def post(self) -> bool:
        """Stepped mode: the worker step; True when it posted results."""
        ...

    def worker_alive(self) -> bool: ...

    def wait_posted(self, results: int, timeout: float) -> bool | None:
        """Threaded: wait until ``results`` results were posted in all; None: cannot tell.

        A hint: it may shorten the oracle's wait for the worker, it never decides a
        verdict (what a lookup shows does).  A target may name what it watches in
        a ``post_watch`` attribute, what ended the wait (e.g. "the count on
        `_results` reached them"), which the report quotes when the hint fired.
        """
        ...

    def is_closed_error(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the IUT's error for a call after shutdown."""
        ...


TargetFactory = Callable[[OracleTier, str], Target]
OPTIONAL_CALLS = frozenset({"mark_miss", "mark_present", "after_shutdown"})
LACKABLE_CALLS = frozenset({"cleanup"})  # a target has them unless its ``lacks`` says not
GENERATED_ONLY_IF_HAD = OPTIONAL_CALLS | LACKABLE_CALLS


def supports_of(target: Target) -> frozenset[str]:
    """The calls of ``GENERATED_ONLY_IF_HAD`` that ``target`` has: the optional ones it
    says (all unless it says otherwise), and ``cleanup`` unless it ``lacks`` it."""
    optional = frozenset(getattr(target, "supports", OPTIONAL_CALLS)) & OPTIONAL_CALLS
    return optional | (LACKABLE_CALLS - frozenset(getattr(target, "lacks", ())))


def snapshot_of(target: Target) -> Mapping[str, Sized] | None:
    """``target``'s tables, or None when its adapter offers no snapshot."""
    snapshot = getattr(target, "snapshot", None)
    if snapshot is None:
        return None
    tables: Mapping[str, Sized] | None = snapshot()
    return tables


class ReferenceAdapter:
    """Drives ``asynclookup.reference.AsyncLookupManager`` (or a subclass) as a ``Target``.

    For ``wait_posted`` it observes the manager's ``post`` events, counting the
    results the worker posts; the observer is the manager's public hook (it
    makes each scheduler action atomic against the worker's hand-overs, which
    the spec's interleavings assume anyway).  The leak check reads
    ``snapshot()``.  Nothing private of the manager is read or replaced.
    """

    def __init__(self, manager_class: Any, tier: OracleTier, mode: str) -> None:
        self.mode = mode
        self._posted = 0
        self._changed = threading.Condition()
        self.manager = manager_class(tier, mode=mode, observer=self._observe)

    def _observe(self, event: Event) -> None:
        if event.kind == "post":
            results = event.fields.get("results", ())
            with self._changed:
                self._posted += len(results) if isinstance(results, Sized) else 0
                self._changed.notify_all()

    def lookup(self, key: bytes, request: str) -> bool | None:
        verdict: bool | None = self.manager.lookup(key, RequestContext(request))
        return verdict

    def flush(self) -> None:
        self.manager.flush()

    def cleanup(self, request: str) -> None:
        self.manager.cleanup(request)

    def mark_miss(self, keys: tuple[bytes, ...]) -> None:
        self.manager.mark_miss(keys)

    def mark_present(self, keys: tuple[bytes, ...]) -> None:
        self.manager.mark_present(keys)

    def drain_results(self) -> None:
        self.manager.drain_results()

    def shutdown(self) -> None:
        self.manager.shutdown(timeout=5.0)

    def take_batch(self) -> bool:
        return bool(self.manager.worker.take_batch())

    def probe_group(self) -> bool:
        return bool(self.manager.worker.probe_group())

    def post(self) -> bool:
        return bool(self.manager.worker.post())

    def worker_alive(self) -> bool:
        return bool(self.manager.health().alive) or bool(self.manager.closed)

    post_watch = "the reference reported them posted"

    def wait_posted(self, results: int, timeout: float) -> bool | None:
        with self._changed:
            return self._changed.wait_for(lambda: self._posted >= results, timeout)

    def is_closed_error(self, exc: BaseException) -> bool:
        return isinstance(exc, ManagerClosedError)

    table_roles: ClassVar[dict[str, str]] = {
        "probes": "probes", "index": "index", "batch": "batch", "posted": "results",
    }

    def snapshot(self) -> Mapping[str, Sized]:
        """The manager's tables, from its public ``snapshot()``: probes, index, batch, posted."""
        s = self.manager.snapshot()
        return {"probes": s.probes, "index": s.index, "batch": s.batch, "posted": s.posted}


def import_user_module(name: str) -> Any:
    """Import the user's module ``name``, from the current directory too.

    The ``asynclookup`` script's own directory heads ``sys.path``, not the
    directory it runs in; like ``python -m``, the oracle puts the current
    directory first so that ``--impl mypkg.lookup:MyManager`` finds the user's
    uninstalled code.
    """
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    return importlib.import_module(name)
