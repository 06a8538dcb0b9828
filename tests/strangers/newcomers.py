"""Three lookup managers written by an outsider from the protocol's prose.

These classes were written from docs/protocol.md by an outsider, before reading the oracle's
code (nor the spec's or the reference's): only the protocol, docs/properties.md and the class
shape that docs/oracle.md describes (a constructor taking the tier's name, the scheduler calls,
a `batch_lookup(keys, req_context)` that the worker calls). The one thing taken from the
package is the name of the closed-manager error the docs give, `ManagerClosedError`.

The three share the scheduler-side bookkeeping (`_ProbeBook`: the probe table, the request
index and the step's batch, kept by the one rule) and differ in how the worker is built:

- `SelfPipeManager`: one worker thread asleep in a `selectors.DefaultSelector` on the read
  end of an `os.pipe()`; batches go through a deque under a lock, results come back in an
  `OrderedDict` keyed by batch sequence number under an `RLock`, and every lookup applies
  results as soon as any are outstanding.
- `LifoBatchManager`: one worker thread fed by a `PriorityQueue` (batches in flush order, the
  shutdown sentinel ahead of them all); it posts each batch's results as one list on a
  `LifoQueue`, so the scheduler applies batches newest first, and it applies results only in
  `flush()`, at the first lookup after a flush, in `drain_results()` and at shutdown.
- `TwoWorkerBarrierManager`: two worker threads split each batch's request groups (every
  other group each) and meet at a `threading.Barrier` twice per batch: once to agree to take
  it, once to post its results together, so the batch in hand is posted before the next one
  is taken. Results go into a list swapped out under a lock.

The decisions taken where docs/protocol.md leaves room are listed at `_ProbeBook`.

After they were written, the oracle was run on them through its command line only
(`fuzz --faults all --strict-efficiency`, seeds 0-4).  It found one real bug, in
`SelfPipeManager`: `shutdown()` raised BrokenPipeError (property 7), reproducibly after
earlier managers in the same process.  Its worker closed the pipe's read end whenever it
ended, its shutdown the write end after a bounded join, so an end could be closed while the
other side still used it, or closed late under a number a newer manager's pipe had taken.
The last of the scheduler and the worker to be done now closes both ends, and the five
seeds pass.  Nothing else was
changed after that run.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import os
import queue
import selectors
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from asynclookup.reference import ManagerClosedError

__all__ = [
    "LifoBatchManager",
    "ManagerClosedError",
    "SelfPipeManager",
    "TwoWorkerBarrierManager",
]


class RequestContext(Protocol):
    """What the tier is handed: the protocol only promises a request id on it."""

    @property
    def req_id(self) -> str: ...


class Phase(enum.Enum):
    PENDING = "pending"  # in this step's batch, not sent
    IN_FLIGHT = "in_flight"  # sent to the worker, no verdict applied
    RESOLVED = "resolved"  # a verdict is applied


@dataclass(slots=True)
class ProbeState:
    generation: int
    phase: Phase
    verdict: bool | None = None
    requesters: set[str] = field(default_factory=set)


class BatchEntry(NamedTuple):
    key: bytes
    context: RequestContext
    generation: int


# A posted result: (key, generation, verdict).
Result = tuple[bytes, int, bool]

TierCall = Callable[[list[bytes], RequestContext], Iterable[object]]


# --------------------------------------------------------------------- the tier call


def request_groups(batch: list[BatchEntry]) -> list[list[BatchEntry]]:
    """The batch's entries grouped by request id, groups in order of first appearance."""
    groups: dict[str, list[BatchEntry]] = {}
    for entry in batch:
        groups.setdefault(entry.context.req_id, []).append(entry)
    return list(groups.values())


_END = object()  # marks the end of a tier's answer


def verdicts_per_position(tier: TierCall, group: list[BatchEntry]) -> list[Result]:
    """One tier call; each key keeps the proper bool the tier gave at its position, else False.

    Reads at most one element per key, so a too-long or endless answer is cut, and an
    exception at any point (the call itself, iter(), a lazy element) leaves the keys not yet
    answered at False.
    """
    verdicts = [False] * len(group)
    try:
        answer: Iterator[object] = iter(tier([entry.key for entry in group], group[0].context))
        for position in range(len(group)):
            value = next(answer, _END)
            if value is _END:
                break
            verdicts[position] = value if isinstance(value, bool) else False
    except BaseException:  # no tier behaviour may stop the worker
        pass
    return [(e.key, e.generation, v) for e, v in zip(group, verdicts, strict=True)]


def verdicts_all_or_nothing(tier: TierCall, group: list[BatchEntry]) -> list[Result]:
    """One tier call; any fault (raise, wrong length, a non-bool) gives False to every key."""
    count = len(group)
    try:
        answer = list(itertools.islice(tier([e.key for e in group], group[0].context), count + 1))
        if len(answer) != count or not all(isinstance(value, bool) for value in answer):
            answer = [False] * count
    except BaseException:  # no tier behaviour may stop the worker
        answer = [False] * count
    return [(e.key, e.generation, v is True) for e, v in zip(group, answer, strict=True)]


# --------------------------------------------------------------------- scheduler side


class _ProbeBook:
    """The scheduler thread's tables and every scheduler call of the protocol.

    Subclasses supply the worker: `_submit` hands it one flushed batch, `_take_posted`
    returns what it has posted so far, `_stop_workers` stops and joins it.

    Decisions where docs/protocol.md leaves room:

    - cleanup does not touch the step's batch: a cleaned-up PENDING probe's entry stays
      there, stale, and flush drops it (as the spec's cleanup, which changes only the probes
      and the index);
    - a key looked up twice by one request adds nothing;
    - mark_present on a key with no state, or whose state is already True, does nothing;
    - shutdown lets the worker finish the batch in hand, drops the batches it never took and
      the step's batch, applies what was posted, and leaves the probes of dropped batches
      IN_FLIGHT (no call can observe them: every call but shutdown then raises
      ManagerClosedError).
    """

    #: bound on joining the worker thread(s) at shutdown, seconds
    join_timeout: float = 10.0
    #: bound on one idle wait of a worker before it looks at its stop flag again, seconds
    idle_timeout: float = 1.0
    #: whether lookup applies posted results whenever any are outstanding (else only the
    #: first lookup after a flush does)
    lookup_drains_eagerly: bool = False

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        self._probes: dict[bytes, ProbeState] = {}
        self._by_request: dict[str, set[bytes]] = {}
        self._step_batch: list[BatchEntry] = []
        self._generations = itertools.count()
        self._drain_due = False
        self._closed = False

    # the tier: the worker calls it; a real manager (or the oracle) overrides it
    def batch_lookup(self, keys: list[bytes], req_context: RequestContext) -> Iterable[bool]:
        raise NotImplementedError(f"no tier for {self.tier_type!r}")

    # ------------------------------------------------------------ worker hooks

    def _submit(self, batch: list[BatchEntry]) -> None:
        raise NotImplementedError

    def _take_posted(self) -> list[Result]:
        raise NotImplementedError

    def _has_posted(self) -> bool:
        return True

    def _stop_workers(self, deadline: float) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------ scheduler calls

    def lookup(self, key: bytes, req_context: RequestContext) -> bool | None:
        self._check_open("lookup")
        if self._drain_due or (self.lookup_drains_eagerly and self._has_posted()):
            self._apply_posted()
        req_id = req_context.req_id
        state = self._probes.get(key)
        if state is None:
            state = ProbeState(next(self._generations), Phase.PENDING)
            self._probes[key] = state
            self._step_batch.append(BatchEntry(key, req_context, state.generation))
        state.requesters.add(req_id)
        self._by_request.setdefault(req_id, set()).add(key)
        return state.verdict if state.phase is Phase.RESOLVED else None

    def flush(self) -> None:
        self._check_open("flush")
        self._apply_posted()
        self._drain_due = True
        batch, self._step_batch = self._step_batch, []
        live: list[BatchEntry] = []
        for entry in batch:
            state = self._probes.get(entry.key)
            if state is not None and state.generation == entry.generation:
                state.phase = Phase.IN_FLIGHT
                live.append(entry)
            # otherwise stale (cleaned up or superseded): dropped
        if live:
            self._submit(live)

    def cleanup(self, req_id: str) -> None:
        self._check_open("cleanup")
        for key in self._by_request.pop(req_id, ()):
            state = self._probes.get(key)
            if state is None:
                continue
            state.requesters.discard(req_id)
            if not state.requesters and state.phase is not Phase.IN_FLIGHT:
                del self._probes[key]
            # an orphaned IN_FLIGHT probe stays: a later request may join it, and its own
            # result deletes it if it is still orphaned then

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        self._check_open("mark_miss")
        for key in keys:
            state = self._probes.get(key)
            if state is not None and state.phase is Phase.RESOLVED:
                state.verdict = False
            # PENDING and IN_FLIGHT probes are left alone: their own verdict will land

    def mark_present(self, keys: Iterable[bytes]) -> None:
        self._check_open("mark_present")
        for key in keys:
            state = self._probes.get(key)
            if state is None or state.verdict is True:
                continue
            if not state.requesters:
                del self._probes[key]
            else:
                self._probes[key] = ProbeState(
                    next(self._generations), Phase.RESOLVED, True, set(state.requesters)
                )

    def drain_results(self) -> None:
        self._check_open("drain_results")
        self._apply_posted()

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop_workers(time.monotonic() + self.join_timeout)
        self._apply_posted()
        self._step_batch.clear()

    # ------------------------------------------------------------ internals

    def _check_open(self, call: str) -> None:
        if self._closed:
            raise ManagerClosedError(call)

    def _apply_posted(self) -> None:
        self._drain_due = False
        for key, generation, verdict in self._take_posted():
            state = self._probes.get(key)
            if state is None or state.generation != generation:
                continue  # stale
            if not state.requesters:
                del self._probes[key]
            else:
                state.phase, state.verdict = Phase.RESOLVED, verdict


# --------------------------------------------------------------------- 1. self-pipe


class SelfPipeManager(_ProbeBook):
    """One worker asleep in a selector on a self-pipe; results in an OrderedDict by sequence.

    flush appends `(sequence, batch)` to a deque under a Lock and writes one byte to the
    pipe; the worker wakes, empties the pipe, and takes batches one at a time, posting each
    batch's results into `_posted[sequence]` under an RLock before it takes the next. Every
    lookup applies posted results when any are outstanding. A tier fault costs only the keys
    the tier did not answer properly.
    """

    lookup_drains_eagerly = True

    def __init__(self, tier_type: str) -> None:
        super().__init__(tier_type)
        self._inbox: deque[tuple[int, list[BatchEntry]]] = deque()
        self._inbox_lock = threading.Lock()
        self._stopping = False
        self._sequence = itertools.count()
        self._posted: OrderedDict[int, list[Result]] = OrderedDict()
        self._posted_lock = threading.RLock()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        # The scheduler (once shut down) and the worker (once ended): the last of the two
        # closes both ends, so that no end is closed while the other may still use it, nor
        # closed late under a number a newer pipe has taken.
        self._pipe_users = 2
        self._worker = threading.Thread(target=self._run, name="self-pipe-worker", daemon=True)
        self._worker.start()

    # scheduler side

    def _wake(self) -> None:
        # a full pipe holds wake-ups enough: the worker will wake
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_w, b"\x00")

    def _submit(self, batch: list[BatchEntry]) -> None:
        with self._inbox_lock:
            self._inbox.append((next(self._sequence), batch))
        self._wake()

    def _has_posted(self) -> bool:
        with self._posted_lock:
            return bool(self._posted)

    def _take_posted(self) -> list[Result]:
        taken: list[Result] = []
        with self._posted_lock:
            while self._posted:
                _, results = self._posted.popitem(last=False)
                taken.extend(results)
        return taken

    def _stop_workers(self, deadline: float) -> None:
        with self._inbox_lock:
            self._stopping = True
            self._inbox.clear()  # batches the worker never took are dropped
        self._wake()
        self._worker.join(max(0.0, deadline - time.monotonic()))
        self._release_pipe()

    def _release_pipe(self) -> None:
        with self._inbox_lock:
            self._pipe_users -= 1
            last = self._pipe_users == 0
        if last:
            os.close(self._wake_r)
            os.close(self._wake_w)

    # worker side

    def _next_batch(self) -> tuple[int, list[BatchEntry]] | str:
        """The oldest batch; "idle" if there is none yet; "stop" once stopping."""
        with self._inbox_lock:
            if self._stopping:
                return "stop"
            return self._inbox.popleft() if self._inbox else "idle"

    def _empty_pipe(self) -> None:
        """Reads every pending wake-up byte (the write end stays open while the worker runs)."""
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_r, 4096):
                pass

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        try:
            selector.register(self._wake_r, selectors.EVENT_READ)
            while True:
                item = self._next_batch()
                if isinstance(item, str):
                    if item == "stop":
                        return
                    selector.select(self.idle_timeout)  # a wake-up byte, or the bound
                    self._empty_pipe()
                    continue
                sequence, batch = item
                results: list[Result] = []
                for group in request_groups(batch):
                    results.extend(verdicts_per_position(self.batch_lookup, group))
                with self._posted_lock:
                    self._posted[sequence] = results
        finally:
            selector.close()
            self._release_pipe()


# --------------------------------------------------------------------- 2. LIFO results


_STOP_PRIORITY = -1  # the shutdown sentinel's place: ahead of every batch


class LifoBatchManager(_ProbeBook):
    """One worker; each batch's results posted whole on a LifoQueue, applied newest first.

    Batches reach the worker on a PriorityQueue ordered by flush sequence, so it takes the
    oldest; shutdown puts its sentinel at priority -1, ahead of every batch not yet taken, so
    those are dropped while the batch in hand is finished and posted. Applying batches newest
    first is safe because a result is applied only to the probe of its own generation, and no
    probe has more than one result. The scheduler applies results only in `flush()`, at the
    first lookup after a flush, in `drain_results()` and at shutdown. A faulty tier call gives
    False to every key of the call.
    """

    lookup_drains_eagerly = False

    def __init__(self, tier_type: str) -> None:
        super().__init__(tier_type)
        self._sequence = itertools.count()
        self._to_worker: queue.PriorityQueue[tuple[int, list[BatchEntry] | None]] = (
            queue.PriorityQueue()
        )
        self._results: queue.LifoQueue[list[Result]] = queue.LifoQueue()
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._run, name="lifo-batch-worker", daemon=True)
        self._worker.start()

    def _submit(self, batch: list[BatchEntry]) -> None:
        self._to_worker.put((next(self._sequence), batch))

    def _take_posted(self) -> list[Result]:
        taken: list[Result] = []
        while True:
            try:
                taken.extend(self._results.get_nowait())  # newest batch first
            except queue.Empty:
                return taken

    def _stop_workers(self, deadline: float) -> None:
        self._stop.set()
        self._to_worker.put((_STOP_PRIORITY, None))
        self._worker.join(max(0.0, deadline - time.monotonic()))
        while True:  # batches never taken
            try:
                self._to_worker.get_nowait()
            except queue.Empty:
                break

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                _, batch = self._to_worker.get(timeout=self.idle_timeout)
            except queue.Empty:
                continue
            if batch is None or self._stop.is_set():
                return
            results: list[Result] = []
            for group in request_groups(batch):
                results.extend(verdicts_all_or_nothing(self.batch_lookup, group))
            self._results.put(results)


# --------------------------------------------------------------------- 3. two workers


class TwoWorkerBarrierManager(_ProbeBook):
    """Two workers share each batch's tier calls and post its results together.

    flush puts the same batch on both workers' own queues. Per batch the two meet at one
    `threading.Barrier` twice: first to agree whether to take it (the barrier's action reads
    the stop flag once for both, so shutdown drops a batch for both or for neither), then,
    after worker i has made the tier calls of request groups i, i+2, ..., to post the batch's
    results as one extend of `_posted` (the barrier's action, under `_posted_lock`). Neither
    takes the next batch before that post. The scheduler swaps `_posted` for an empty list
    under the lock. A tier fault costs only the keys the tier did not answer properly.

    Every barrier wait is bounded by `barrier_timeout`. Should it run out (a tier call slower
    than that, or a worker gone), the barrier breaks: each worker posts its own share
    directly, one of them carries on alone with whole batches and the other ends.
    """

    workers = 2
    #: bound on one wait at the barrier, seconds: only a tier call this slow breaks it
    barrier_timeout: float = 300.0

    def __init__(self, tier_type: str) -> None:
        super().__init__(tier_type)
        self._inboxes: list[queue.Queue[list[BatchEntry] | None]] = [
            queue.Queue() for _ in range(self.workers)
        ]
        self._posted: list[Result] = []
        self._posted_lock = threading.Lock()
        self._stop = threading.Event()
        self._take_it = False  # written by the barrier's action, read by both after it
        self._shares: list[list[Result]] = [[] for _ in range(self.workers)]
        self._barrier = threading.Barrier(self.workers, action=self._at_barrier)
        self._phase = "take"  # which meeting the barrier's next action closes
        self._solo_lock = threading.Lock()
        self._solo: int | None = None  # the worker that carries on if the barrier breaks
        self._threads = [
            threading.Thread(target=self._run, args=(i,), name=f"barrier-worker-{i}", daemon=True)
            for i in range(self.workers)
        ]
        for thread in self._threads:
            thread.start()

    # scheduler side

    def _submit(self, batch: list[BatchEntry]) -> None:
        solo = self._solo
        for i, inbox in enumerate(self._inboxes):
            if solo is None or solo == i:
                inbox.put(batch)

    def _take_posted(self) -> list[Result]:
        with self._posted_lock:
            taken, self._posted = self._posted, []
        return taken

    def _stop_workers(self, deadline: float) -> None:
        self._stop.set()
        for inbox in self._inboxes:
            inbox.put(None)
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if any(thread.is_alive() for thread in self._threads):
            self._barrier.abort()  # frees a worker left waiting for a stuck partner
        for inbox in self._inboxes:  # drop what was never taken, keep the way out
            while True:
                try:
                    inbox.get_nowait()
                except queue.Empty:
                    break
            inbox.put(None)

    # worker side

    def _at_barrier(self) -> None:
        """Runs once per meeting, in one of the two workers, while the other waits."""
        if self._phase == "take":
            self._take_it = not self._stop.is_set()
            self._phase = "post"
        else:
            with self._posted_lock:
                for share in self._shares:
                    self._posted.extend(share)
            self._shares = [[] for _ in range(self.workers)]
            self._phase = "take"

    def _probe(self, groups: list[list[BatchEntry]]) -> list[Result]:
        results: list[Result] = []
        for group in groups:
            results.extend(verdicts_per_position(self.batch_lookup, group))
        return results

    def _run(self, me: int) -> None:
        inbox = self._inboxes[me]
        # Both inboxes get the same items in the same order (batches, then shutdown's None),
        # and the two workers move in step, so both hold the same item at each meeting.
        while (batch := self._get(inbox)) is not None:
            share: list[Result] | None = None
            try:
                self._barrier.wait(self.barrier_timeout)  # agree to take it
                if not self._take_it:
                    return  # shutdown came first: the batch is dropped by both
                share = self._probe(request_groups(batch)[me :: self.workers])
                self._shares[me] = share
                self._barrier.wait(self.barrier_timeout)  # post it together
            except threading.BrokenBarrierError:
                self._after_break(me, batch, share)
                return

    def _get(self, inbox: queue.Queue[list[BatchEntry] | None]) -> list[BatchEntry] | None:
        while True:
            try:
                return inbox.get(timeout=self.idle_timeout)
            except queue.Empty:
                continue

    def _post(self, results: list[Result]) -> None:
        with self._posted_lock:
            self._posted.extend(results)

    def _after_break(self, me: int, batch: list[BatchEntry], share: list[Result] | None) -> None:
        """The barrier broke: post what is owed; the first worker here goes on by itself."""
        with self._solo_lock:
            carry_on = self._solo is None and not self._stop.is_set()
            if carry_on:
                self._solo = me
        if share is not None:
            self._post(share)  # broke at the post meeting: each posts its own share
        elif carry_on:
            self._post(self._probe(request_groups(batch)))  # broke before anyone probed it
        if not carry_on:
            return
        inbox = self._inboxes[me]
        while (next_batch := self._get(inbox)) is not None and not self._stop.is_set():
            self._post(self._probe(request_groups(next_batch)))
