"""A ``concurrent.futures`` pool: one future per request group, collected by the scheduler.

Style: behaviour-rich records.  A ``Probe`` class with ``__slots__`` carries its own small
methods (``join``, ``leave``, ``resolve``, ``orphaned``); phases are an ``IntEnum``; the
request index is a ``defaultdict(set)``.  A dispatcher thread takes one batch at a time
from a ``queue.Queue``, submits one future per request group to a 3-thread
``ThreadPoolExecutor``, hands the ``(entries, future)`` pairs to the scheduler under a lock,
and waits for every future of the batch before it takes the next one (so from outside the
pool behaves like one worker: groups of one batch may run concurrently, batches never
overlap).  A done future is a posted group; the scheduler collects the done ones when it
drains, per the spec's rule.  Answers are handled laxly, per element.
"""

from __future__ import annotations

import concurrent.futures
import enum
import queue
import threading
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import NamedTuple, Protocol


class RequestContext(Protocol):
    @property
    def req_id(self) -> str: ...


class Phase(enum.IntEnum):
    PENDING = 0
    IN_FLIGHT = 1
    RESOLVED = 2


class Probe:
    __slots__ = ("generation", "phase", "requesters", "verdict")

    def __init__(self, generation: int, requesters: Iterable[str] = ()) -> None:
        self.generation = generation
        self.phase = Phase.PENDING
        self.verdict: bool | None = None
        self.requesters = set(requesters)

    def join(self, req_id: str) -> None:
        self.requesters.add(req_id)

    def leave(self, req_id: str) -> None:
        self.requesters.discard(req_id)

    def resolve(self, verdict: bool) -> None:
        self.phase, self.verdict = Phase.RESOLVED, verdict

    @property
    def orphaned(self) -> bool:
        return not self.requesters

    def answer(self) -> bool | None:
        return self.verdict if self.phase is Phase.RESOLVED else None


class Entry(NamedTuple):
    key: bytes
    context: RequestContext
    generation: int


Pair = tuple[list[Entry], "concurrent.futures.Future[list[bool]]"]


class FuturesPoolManager:
    pool_size = 3
    join_timeout = 10.0

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        self._probes: dict[bytes, Probe] = {}
        self._index: defaultdict[str, set[bytes]] = defaultdict(set)
        self._batch: list[Entry] = []
        self._generation = 0
        self._drain_due = False
        self._closed = False
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.pool_size, thread_name_prefix="futures-lookup"
        )
        self._batches: queue.Queue[list[Entry] | None] = queue.Queue()
        self._handoff: list[Pair] = []
        self._handoff_lock = threading.Lock()
        self._every_future: list[concurrent.futures.Future[list[bool]]] = []
        self._stopping = threading.Event()
        self._dispatcher = threading.Thread(
            target=self._dispatch, name="futures-dispatcher", daemon=True
        )
        self._dispatcher.start()

    def batch_lookup(self, keys: list[bytes], req_context: RequestContext) -> Iterable[bool]:
        raise NotImplementedError(self.tier_type)

    def _next_generation(self) -> int:
        self._generation += 1
        return self._generation

    # ------------------------------------------------------------ scheduler

    def lookup(self, key: bytes, req_context: RequestContext) -> bool | None:
        if self._drain_due:
            self._collect()
        probe = self._probes.get(key)
        if probe is None:
            probe = self._probes[key] = Probe(self._next_generation())
            self._batch.append(Entry(key, req_context, probe.generation))
        probe.join(req_context.req_id)
        self._index[req_context.req_id].add(key)
        return probe.answer()

    def flush(self) -> None:
        self._collect()
        outgoing = [e for e in self._batch if self._is_live(e)]
        self._batch = []
        self._drain_due = True
        for entry in outgoing:
            self._probes[entry.key].phase = Phase.IN_FLIGHT
        if outgoing:
            self._batches.put(outgoing)

    def _is_live(self, entry: Entry) -> bool:
        probe = self._probes.get(entry.key)
        return probe is not None and probe.generation == entry.generation

    def cleanup(self, req_id: str) -> None:
        for key in self._index.pop(req_id, set()):
            probe = self._probes.get(key)
            if probe is None:
                continue
            probe.leave(req_id)
            if probe.orphaned and self._drop_when_orphaned(probe):
                del self._probes[key]

    def _drop_when_orphaned(self, probe: Probe) -> bool:
        return probe.phase is not Phase.IN_FLIGHT

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            probe = self._probes.get(key)
            if probe is not None and self._missable(probe):
                probe.resolve(False)

    def _missable(self, probe: Probe) -> bool:
        return probe.phase is Phase.RESOLVED

    def mark_present(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            probe = self._probes.get(key)
            if probe is None or probe.verdict is True:
                continue
            if probe.orphaned:
                del self._probes[key]
                continue
            renewed = Probe(self._next_generation(), probe.requesters)
            renewed.resolve(True)
            self._probes[key] = renewed

    def drain_results(self) -> None:
        self._collect()

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stopping.set()
        self._batches.put(None)
        self._dispatcher.join(self.join_timeout)
        with self._handoff_lock:
            every_future = list(self._every_future)
        _, not_done = concurrent.futures.wait(every_future, timeout=self.join_timeout)
        self._pool.shutdown(wait=not not_done, cancel_futures=True)
        self._collect()
        self._batch.clear()

    def _collect(self) -> None:
        self._drain_due = False
        ready: list[Pair] = []
        waiting: list[Pair] = []
        with self._handoff_lock:
            for pair in self._handoff:  # one done() per future: it may finish meanwhile
                (ready if pair[1].done() else waiting).append(pair)
            self._handoff = waiting
        for entries, future in ready:
            try:
                verdicts = future.result()
            except BaseException:
                verdicts = [False] * len(entries)
            for entry, verdict in zip(entries, verdicts, strict=True):
                self._apply(entry.key, entry.generation, verdict)

    def _apply(self, key: bytes, generation: int, verdict: bool) -> None:
        probe = self._probes.get(key)
        if probe is None or probe.generation != generation:
            return
        if probe.orphaned:
            del self._probes[key]
        else:
            probe.resolve(verdict)

    # ------------------------------------------------------------ dispatcher + pool

    def _dispatch(self) -> None:
        while True:
            batch = self._batches.get()
            if batch is None or self._stopping.is_set():
                return
            futures: list[concurrent.futures.Future[list[bool]]] = []
            for context, entries in self._per_request(batch):
                keys = [e.key for e in entries]
                # Submitted and handed over under one lock: the scheduler never finds a
                # finished group that it cannot see yet.
                with self._handoff_lock:
                    future = self._pool.submit(self._probe_group, keys, context)
                    self._handoff.append((entries, future))
                    self._every_future.append(future)
                futures.append(future)
            concurrent.futures.wait(futures)  # the whole batch is posted before the next
            with self._handoff_lock:
                self._every_future = [f for f in self._every_future if not f.done()]

    @staticmethod
    def _per_request(batch: Sequence[Entry]) -> list[tuple[RequestContext, list[Entry]]]:
        grouped: dict[str, list[Entry]] = defaultdict(list)
        for entry in batch:
            grouped[entry.context.req_id].append(entry)
        return [(entries[0].context, entries) for entries in grouped.values()]

    def _probe_group(self, keys: list[bytes], context: RequestContext) -> list[bool]:
        out: list[bool] = []
        try:
            for value in self.batch_lookup(list(keys), context):
                if len(out) == len(keys):
                    break
                out.append(value if isinstance(value, bool) else False)
        except Exception:
            pass
        return out + [False] * (len(keys) - len(out))


# ------------------------------------------------------------------ one-bug copies


class MissForcesResolved(FuturesPoolManager):
    """BUG (property 3): mark_miss forces PENDING and IN_FLIGHT probes to RESOLVED False."""

    def _missable(self, probe: Probe) -> bool:
        return True


class CleanupCancelsInFlight(FuturesPoolManager):
    """BUG (property 8): cleanup deletes an orphaned IN_FLIGHT probe, so the key is probed again."""

    def _drop_when_orphaned(self, probe: Probe) -> bool:
        return True
