"""An async lookup manager kept as an object graph of requests and probes.

Written from docs/protocol.md alone (plus the class shape described in
docs/oracle.md, "Walkthrough: your own implementation"), before reading the
checker's code.

Style: no tables of tuples. Each request is a ``Request`` object holding its
context and, per key, the shared ``Probe`` it joined; each ``Probe`` holds its
key, generation, phase, verdict and the set of ``Request`` objects asking for
it. The step's batch is a list of ``(Probe, Request)`` references. Batches go
to the worker through a bounded ``queue.Queue``; results come back through a
lock-protected ``deque`` of ``(key, generation, verdict)`` plus a
``threading.Event`` meaning "something was posted".

A probe object never changes its generation: ``mark_present`` gives a key a
new generation by replacing its probe with a new object. So a batch entry is
live exactly when its probe object is still the key's probe and still
PENDING, and a result is live exactly when the key's probe has the result's
generation (generations are unique, so that names one object).

Decisions where the protocol leaves room (docs/protocol.md):

1. When a lookup drains ("What the spec decides ...", point 1; "The
   operations", ``lookup``): every lookup applies whatever has been posted,
   not only the first one after a flush. "Any other lookup may do so too."
2. Order of request groups (point 2; ``probe_group``): groups are probed in
   the order their first entry entered the step's batch. A group is keyed by
   the request id ("Vocabulary": a request is a string id), and the tier is
   called with the context of the ``Request`` object of the group's first
   entry; a ``Request`` keeps the context of its first lookup.
3. A failed tier call (point 3; "A tier that raises or answers short"): a
   key keeps the tier's answer at its position when that answer is a real
   ``bool`` obtained before any failure; every other key gets ``False``.
   Anything the tier raises (any ``BaseException``) is caught, iteration of
   a lazy answer included, and at most ``len(keys)`` items are read.
4. Shutdown (point 4; "The operations", ``shutdown``): queued batches the
   worker never took are dropped, a stop sentinel is queued, the worker is
   joined for at most ``JOIN_TIMEOUT`` seconds (it finishes the batch in
   hand), posted results are applied and the step's batch is dropped. Then
   the tables are released, since no call may observe them any more. Every
   later call except ``shutdown`` raises ``ManagerClosedError``.
5. ``mark_present`` on a key with no state does nothing; on a probe already
   True it does nothing (point 5).
6. The batch queue is bounded (``max_queued_batches``, default 1024): when
   that many flushed batches wait for the worker, ``flush`` blocks until the
   worker takes one. The protocol's queue is unbounded; this is backpressure
   for a scheduler that runs far ahead of its tier.
7. Posting: the worker posts each request group's results as soon as that
   group's tier call is done (the protocol's ``post`` allows the batch's
   results to be posted in parts; the worker still takes the next batch only
   after posting everything of the one in hand).
"""

from __future__ import annotations

import collections
import enum
import itertools
import queue
import threading
from collections.abc import Iterable
from typing import Protocol

from asynclookup.reference import ManagerClosedError

Key = bytes
Verdict = bool | None
Result = tuple[Key, int, bool]
# What the worker gets: per request group, its context and its (key, generation)s.
Group = tuple["RequestContext", list[tuple[Key, int]]]
WorkerBatch = list[Group]

JOIN_TIMEOUT = 5.0


class RequestContext(Protocol):
    """The request context the engine passes to lookup and to the tier."""

    @property
    def req_id(self) -> str: ...


class Phase(enum.Enum):
    PENDING = "PENDING"
    IN_FLIGHT = "IN_FLIGHT"
    RESOLVED = "RESOLVED"


class Request:
    """A request that asked for keys and is not cleaned up yet."""

    __slots__ = ("context", "probes", "req_id")

    def __init__(self, req_id: str, context: RequestContext) -> None:
        self.req_id = req_id
        self.context = context
        self.probes: dict[Key, Probe] = {}

    def __repr__(self) -> str:
        return f"Request({self.req_id!r}, keys={list(self.probes)!r})"


class Probe:
    """One existence check of one key, of one generation (never changed)."""

    __slots__ = ("generation", "key", "phase", "requesters", "verdict")

    def __init__(self, key: Key, generation: int, phase: Phase,
                 verdict: Verdict = None) -> None:
        self.key = key
        self.generation = generation
        self.phase = phase
        self.verdict = verdict
        self.requesters: set[Request] = set()

    def __repr__(self) -> str:
        ids = sorted(r.req_id for r in self.requesters)
        return (f"Probe({self.key!r}, g{self.generation}, {self.phase.name}, "
                f"{self.verdict!r}, {ids!r})")


class RequestObjectManager:
    """Async lookup manager: the scheduler's side plus one worker thread."""

    def __init__(self, tier_type: str, max_queued_batches: int = 1024) -> None:
        self.tier_type = tier_type
        # Scheduler-thread state: the object graph.
        self._requests: dict[str, Request] = {}
        self._probes: dict[Key, Probe] = {}
        self._batch: list[tuple[Probe, Request]] = []
        self._generations = itertools.count()
        self._closed = False
        # Scheduler -> worker.
        self._submitted: queue.Queue[WorkerBatch | None] = queue.Queue(
            maxsize=max(1, max_queued_batches))
        # Worker -> scheduler.
        self._results_lock = threading.Lock()
        self._results: collections.deque[Result] = collections.deque()
        self._posted = threading.Event()
        self._worker = threading.Thread(
            target=self._work, name=f"request-objects-lookup-{tier_type}",
            daemon=True)
        self._worker.start()

    # ------------------------------------------------------------------ tier

    def batch_lookup(self, keys: list[Key], req_context: RequestContext) -> list[bool]:
        """The tier call, one per request group; a real engine overrides it."""
        raise NotImplementedError(f"no {self.tier_type!r} tier is wired in")

    # ------------------------------------------------------- scheduler calls

    def lookup(self, key: Key, req_context: RequestContext) -> Verdict:
        self._check_open("lookup")
        self._apply_posted()
        request = self._requests.get(req_context.req_id)
        if request is None:
            request = Request(req_context.req_id, req_context)
            self._requests[request.req_id] = request
        probe = self._probes.get(key)
        if probe is None:
            probe = Probe(key, next(self._generations), Phase.PENDING)
            self._probes[key] = probe
            self._batch.append((probe, request))
        probe.requesters.add(request)
        request.probes[key] = probe
        return probe.verdict if probe.phase is Phase.RESOLVED else None

    def flush(self) -> None:
        self._check_open("flush")
        self._apply_posted()
        batch, self._batch = self._batch, []
        groups: dict[str, Group] = {}
        for probe, request in batch:
            if not self._is_live_entry(probe):
                continue  # cleaned up or superseded since it was batched
            probe.phase = Phase.IN_FLIGHT
            group = groups.setdefault(request.req_id, (request.context, []))
            group[1].append((probe.key, probe.generation))
        if groups:
            self._submitted.put(list(groups.values()))

    def cleanup(self, req_id: str) -> None:
        self._check_open("cleanup")
        request = self._requests.pop(req_id, None)
        if request is None:
            return
        for key, probe in request.probes.items():
            probe.requesters.discard(request)
            if not probe.requesters and probe.phase is not Phase.IN_FLIGHT:
                self._forget(key, probe)
        request.probes.clear()

    def mark_miss(self, keys: Iterable[Key]) -> None:
        self._check_open("mark_miss")
        for key in keys:
            probe = self._probes.get(key)
            if probe is not None and probe.phase is Phase.RESOLVED:
                probe.verdict = False

    def mark_present(self, keys: Iterable[Key]) -> None:
        self._check_open("mark_present")
        for key in keys:
            old = self._probes.get(key)
            if old is None or old.verdict is True:
                continue
            if not old.requesters:
                self._forget(key, old)
                continue
            new = Probe(key, next(self._generations), Phase.RESOLVED, True)
            new.requesters = old.requesters
            old.requesters = set()
            for request in new.requesters:
                request.probes[key] = new
            self._probes[key] = new

    def drain_results(self) -> None:
        self._check_open("drain_results")
        self._apply_posted()

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        while True:  # batches the worker never took are dropped
            try:
                self._submitted.get_nowait()
            except queue.Empty:
                break
        self._submitted.put(None)  # only this thread puts: there is room now
        self._worker.join(timeout=JOIN_TIMEOUT)
        self._apply_posted()
        self._batch = []
        self._probes.clear()
        for request in self._requests.values():
            request.probes.clear()
        self._requests.clear()

    # -------------------------------------------------------------- helpers

    def _check_open(self, call: str) -> None:
        if self._closed:
            raise ManagerClosedError(call)

    def _is_live_entry(self, probe: Probe) -> bool:
        return self._probes.get(probe.key) is probe and probe.phase is Phase.PENDING

    def _forget(self, key: Key, probe: Probe) -> None:
        if self._probes.get(key) is probe:
            del self._probes[key]

    def _apply_posted(self) -> None:
        if not self._posted.is_set():
            return
        with self._results_lock:
            results = list(self._results)
            self._results.clear()
            self._posted.clear()
        for key, generation, verdict in results:
            probe = self._probes.get(key)
            if (probe is None or probe.generation != generation
                    or probe.phase is not Phase.IN_FLIGHT):
                continue  # stale: deleted or superseded since it was sent
            if not probe.requesters:
                self._forget(key, probe)
            else:
                probe.verdict = verdict
                probe.phase = Phase.RESOLVED

    # --------------------------------------------------------------- worker

    def _work(self) -> None:
        while True:
            batch = self._submitted.get()
            if batch is None:
                return
            for context, entries in batch:
                verdicts = self._probe_group([key for key, _ in entries], context)
                self._post([(key, generation, verdict)
                            for (key, generation), verdict in zip(entries, verdicts, strict=True)])

    def _probe_group(self, keys: list[Key], context: RequestContext) -> list[bool]:
        """One tier call; exactly one bool per key, whatever the tier does."""
        verdicts = [False] * len(keys)
        try:
            answer = self.batch_lookup(list(keys), context)
            for i, item in enumerate(itertools.islice(iter(answer), len(keys))):
                verdicts[i] = item if isinstance(item, bool) else False
        except BaseException:  # no tier behaviour may kill the worker
            pass  # keys not answered properly keep False
        return verdicts

    def _post(self, results: list[Result]) -> None:
        with self._results_lock:
            self._results.extend(results)
            self._posted.set()
