"""The worker: takes a flushed batch, asks the tier once per request, posts results.

One code path, two drivers.  ``take_batch``, ``probe_group`` and ``post`` are
the spec's three worker actions, each a separate method.  In stepped mode a
test (or the oracle) calls them one at a time and so chooses the interleaving
with the scheduler; in threaded mode ``run`` calls the very same methods in a
loop on a daemon thread.  There is no second copy of the logic.

What crosses threads: exactly two containers.  The *batch queue*
(``queue.Queue``) carries flushed batches from the scheduler to the worker,
plus one ``None`` that wakes the worker at shutdown; the *posted deque*
(``collections.deque``, whose ``append``/``popleft`` are thread-safe) carries
tuples of ``(key, generation, verdict)`` back.  Everything else here (the batch
in hand, grouped by request, and the answered-but-unposted results) belongs to
the worker alone.  The worker never reads the manager's probe tables: whether a
result is stale is decided by the scheduler when it applies it.

The tier boundary (``ask_tier``) never lets the tier kill the worker: an
exception, too few or too many results, a lazy iterable that raises part-way
give False for every key of the call; a non-bool element gives False for that
key only.  Each bad call logs one warning naming the tier and the failure.  A
tier call that hangs cannot be pre-empted in Python; ``health()`` reports how
long the current call has run so that an operator can see it.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import NamedTuple, TypeAlias

from asynclookup.reference.events import WORKER, Event, Observer
from asynclookup.reference.tier import RequestContext, Tier

log = logging.getLogger(__name__)

Entry: TypeAlias = tuple[bytes, RequestContext, int]  # key, its batched context, generation
Result: TypeAlias = tuple[bytes, int, bool]  # key, generation, verdict
Batch: TypeAlias = list[Entry]
Group: TypeAlias = tuple[RequestContext, list[Entry]]  # one tier call: a context and its entries

_BOOL_ONLY = frozenset({bool})


class TierAnswer(NamedTuple):
    """A tier call's verdicts, one per key, and what went wrong (None: nothing)."""

    verdicts: list[bool]
    failure: str | None


def ask_tier(tier: Tier, keys: Sequence[bytes], context: RequestContext) -> TierAnswer:
    """Call ``tier.batch_lookup`` once and sanitise the answer: never raises an Exception.

    BaseExceptions that are not Exceptions (KeyboardInterrupt, SystemExit) pass:
    they are requests to stop the process, not tier answers.
    """
    n = len(keys)
    try:
        # Consume the answer inside the try: a lazy iterable that raises part-way
        # is a failed call.  At most one surplus item is read, so an endless
        # iterable is "too many" rather than a hang.
        got = list(itertools.islice(tier.batch_lookup(keys, context), n + 1))
    except Exception as exc:
        return TierAnswer([False] * n, f"raised {type(exc).__name__}: {exc}")
    if len(got) != n:
        counted = f"more than {n}" if len(got) > n else str(len(got))
        return TierAnswer([False] * n, f"returned {counted} results for {n} keys")
    if set(map(type, got)) <= _BOOL_ONLY:
        return TierAnswer(got, None)
    bad = [i for i, v in enumerate(got) if type(v) is not bool]
    type_names = ", ".join(sorted({type(got[i]).__name__ for i in bad}))
    shown = ", ".join(map(str, bad[:5])) + (", ..." if len(bad) > 5 else "")
    verdicts = [v if type(v) is bool else False for v in got]
    return TierAnswer(verdicts, f"returned non-bool values ({type_names}) at positions {shown}")


class WorkerHealth(NamedTuple):
    """What an operator can see of the worker, from any thread."""

    alive: bool  # threaded: the thread runs; stepped: not shut down
    busy_for_seconds: float | None  # how long the current tier call has run; None: no call
    batches_done: int  # batches taken and fully posted
    current_call: str | None  # e.g. "memory.batch_lookup(3 keys, request 'r1')"
    queued_batches: int  # flushed batches not taken yet


class Worker:
    """The worker side of the protocol: take_batch, probe_group, post."""

    def __init__(
        self,
        tier: Tier,
        batches: queue.Queue[Batch | None],
        posted: deque[tuple[Result, ...]],
        *,
        observer: Observer | None,
        guard: AbstractContextManager[object],
    ) -> None:
        self._tier = tier
        self._tier_name = str(getattr(tier, "name", type(tier).__name__))
        self._batches = batches  # scheduler -> worker
        self._posted = posted  # worker -> scheduler
        self._observer = observer
        self._guard = guard  # the manager's trace lock when observed, else a no-op
        self._in_hand: Batch = []  # the batch taken last, in flush order
        self._groups: deque[Group] = deque()  # its unprobed part, one group per request
        self._answered: list[Result] = []  # probed, not yet posted
        self._stopping = threading.Event()
        self._current: tuple[float, str, int] | None = None  # start, request, key count
        self._batches_done = 0
        self._thread: threading.Thread | None = None

    # -- the three worker actions (both drivers call only these) --------------

    def take_batch(self, wait: bool = False) -> bool:
        """TakeBatch: take the oldest flushed batch, once the last one is fully posted.

        Returns False when the worker still holds something, the queue is empty
        (``wait=False``) or the worker is stopping.  ``wait=True`` blocks until a
        batch or the stop signal arrives (the thread driver).
        """
        if self._groups or self._answered or self._stopping.is_set():
            return False
        try:
            batch = self._batches.get(block=wait)
        except queue.Empty:
            return False
        if batch is None:  # the stop signal
            return False
        with self._guard:
            if self._stopping.is_set():
                return False  # shutdown began before it was in hand: dropped
            groups: dict[str, Group] = {}
            for entry in batch:  # group by request, in order of first appearance
                request = entry[1].req_id
                group = groups.get(request)
                if group is None:
                    groups[request] = (entry[1], [entry])
                else:
                    group[1].append(entry)
            self._in_hand = batch
            self._groups = deque(groups.values())
            if self._observer is not None:
                entries = tuple((k, c.req_id, g) for k, c, g in batch)
                self._emit("take_batch", entries=entries)
        return True

    def probe_group(self) -> bool:
        """ProbeGroup: one tier call for the next request group of the batch in hand."""
        if not self._groups:
            return False
        context, entries = self._groups[0]
        keys = [entry[0] for entry in entries]
        if self._observer is not None:
            self._emit("tier_call_started", keys=tuple(keys), request=context.req_id)
        self._current = (time.monotonic(), context.req_id, len(keys))
        try:
            answer = ask_tier(self._tier, keys, context)
        finally:
            self._current = None
        self._groups.popleft()
        if not self._groups:
            self._in_hand = []
        if answer.failure is not None:
            log.warning(
                "tier %r: batch_lookup of %d keys for request %r %s; they count as misses",
                self._tier_name, len(keys), context.req_id, answer.failure,
            )
        self._answered += [
            (entry[0], entry[2], verdict)
            for entry, verdict in zip(entries, answer.verdicts, strict=True)
        ]
        if self._observer is not None:
            self._emit(
                "tier_call_finished", keys=tuple(keys), request=context.req_id,
                verdicts=tuple(answer.verdicts), failure=answer.failure,
            )
        return True

    def post(self) -> bool:
        """Post: hand every answered result to the scheduler as one item."""
        if not self._answered:
            return False
        results = tuple(self._answered)
        self._answered = []
        with self._guard:
            if self._observer is not None:
                self._emit("post", results=results)  # before it becomes visible
            self._posted.append(results)
        if not self._groups:
            self._batches_done += 1
        return True

    @property
    def idle(self) -> bool:
        """The worker holds no batch and has nothing answered but unposted."""
        return not self._groups and not self._answered

    # -- drivers -----------------------------------------------------------------

    def run(self) -> None:
        """The thread driver: the same three actions in a loop until stopped."""
        while self.take_batch(wait=True):
            while self.probe_group():
                self.post()

    def run_pending(self) -> int:
        """Stepped driver shortcut: finish the batch in hand, then every queued one.

        Posts after each tier call, like the thread driver.  Returns the number
        of tier calls made.  Not for a threaded worker (its thread drives it).
        """
        if self._thread is not None:
            raise RuntimeError("run_pending: this worker is driven by its own thread")
        calls = 0
        while True:
            while self.probe_group():
                calls += 1
                self.post()
            self.post()
            if not self.take_batch():
                return calls

    def start(self, name: str) -> None:
        """Run the thread driver on a daemon thread (threaded mode)."""
        self._thread = threading.Thread(target=self.run, name=name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float) -> bool:
        """Stop after the batch in hand; True when the worker finished within ``timeout``.

        Threaded: signal, wake and join the thread.  Stepped: the caller's thread
        finishes the batch in hand (no bound applies: it runs the tier calls).
        """
        self._stopping.set()
        if self._thread is None:
            while self.probe_group():
                pass
            self.post()
            return True
        self._batches.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- what others may read ----------------------------------------------------

    def health(self) -> WorkerHealth:
        """Whether the worker lives and how long its current tier call has run."""
        current = self._current
        thread = self._thread
        alive = thread.is_alive() if thread is not None else not self._stopping.is_set()
        busy = call = None
        if current is not None:
            started, request, n = current
            busy = time.monotonic() - started
            call = f"{self._tier_name}.batch_lookup({n} keys, request {request!r})"
        return WorkerHealth(alive, busy, self._batches_done, call, self._batches.qsize())

    @property
    def thread(self) -> threading.Thread | None:
        """The daemon thread that drives this worker; None in stepped mode."""
        return self._thread

    @property
    def stop_requested(self) -> threading.Event:
        """Set when shutdown begins; a cooperative tier or a test may wait on it."""
        return self._stopping

    @property
    def held(self) -> tuple[Entry, ...]:
        """The unprobed entries of the batch in hand, in flush order (as the spec's held)."""
        waiting = {context.req_id for context, _ in self._groups}
        return tuple(entry for entry in self._in_hand if entry[1].req_id in waiting)

    @property
    def answered(self) -> tuple[Result, ...]:
        """Results probed but not yet posted."""
        return tuple(self._answered)

    @property
    def tier_name(self) -> str:
        """The tier's name, as warnings and health reports spell it."""
        return self._tier_name

    def _emit(self, kind: str, **fields: object) -> None:
        assert self._observer is not None
        self._observer(Event(kind, WORKER, fields))
