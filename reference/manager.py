"""AsyncLookupManager: the scheduler side of the async lookup protocol, threaded.

Theory of operation
-------------------
This is ``spec/core.py`` written for production: the same actions under the
same names, the same generation rule, mutable dicts instead of tuples.  A
*probe* is the lookup state of one key: a generation (from a counter that never
repeats), a phase (PENDING, IN_FLIGHT, RESOLVED), a verdict and its requesters.
``lookup`` creates a PENDING probe and appends ``(key, context, generation)``
to this step's batch; ``flush`` re-validates the batch against the live probes
and submits the survivors as one item to the worker; the worker posts
``(key, generation, verdict)`` results; results are applied only inside
``lookup`` (the first after a flush), ``flush``, ``drain_results`` and
``shutdown``, and only to a probe of the same generation.  The hot path, a
``lookup`` repeated by the same request with no drain due, changes nothing: it
reads the verdict in one probe-table lookup and one membership test.

Who owns what (docs/reference.md has the full picture): every public method
except ``health`` belongs to the scheduler thread, which alone reads and writes
the probe table, the request index, the batch and the flags.  The worker
(``asynclookup.reference.worker``) owns the batch in hand and its answered results.  Two
containers cross threads: the batch queue (scheduler to worker) and the posted
deque (worker to scheduler).  With no observer there is no lock at all; with an
observer, a lock makes every scheduler action atomic against the worker's
hand-overs, so the event order is a valid interleaving of spec actions.

This module does not import ``spec``; it does not talk to the tier (the worker
does) and it never blocks except in ``shutdown``.
"""

from __future__ import annotations

import enum
import logging
import queue
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from types import MappingProxyType, TracebackType
from typing import Literal, NamedTuple

from asynclookup.reference.errors import ManagerClosedError
from asynclookup.reference.events import SCHEDULER, Event, Observer
from asynclookup.reference.tier import RequestContext, Tier
from asynclookup.reference.worker import Batch, Entry, Result, Worker, WorkerHealth

log = logging.getLogger(__name__)


class Phase(enum.Enum):
    """Where a probe is in its life."""

    PENDING = "PENDING"  # in this step's batch, not yet sent
    IN_FLIGHT = "IN_FLIGHT"  # sent to the worker, no verdict applied
    RESOLVED = "RESOLVED"  # a verdict is applied

    def __repr__(self) -> str:
        return f"Phase.{self.name}"


PENDING, IN_FLIGHT, RESOLVED = Phase.PENDING, Phase.IN_FLIGHT, Phase.RESOLVED


class Probe:
    """The lookup state of one key: the spec's ``Probe``, updated in place."""

    __slots__ = ("generation", "phase", "requesters", "verdict")

    def __init__(
        self, generation: int, phase: Phase, verdict: bool | None, requesters: set[str]
    ) -> None:
        self.generation = generation
        self.phase = phase
        self.verdict = verdict
        self.requesters = requesters

    def __repr__(self) -> str:
        return (
            f"Probe(g{self.generation} {self.phase.name} {self.verdict} "
            f"{sorted(self.requesters)})"
        )


# ``_answerable`` while a drain is due and after shutdown: a lookup finds nothing here.
NO_PROBES: Mapping[bytes, Probe] = MappingProxyType({})

EntryView = tuple[bytes, str, int]  # (key, request id, generation), as the spec's Entry


class ProbeView(NamedTuple):
    """A frozen copy of one probe."""

    generation: int
    phase: Phase
    verdict: bool | None
    requesters: frozenset[str]


@dataclass(frozen=True)
class Snapshot:
    """A frozen copy of the whole state, laid out like the spec's ``State``.

    Exact in stepped mode, or in threaded mode while the worker is idle; while
    the threaded worker runs, its fields are a moment's view.
    """

    probes: dict[bytes, ProbeView]
    index: dict[str, frozenset[bytes]]
    next_generation: int
    batch: tuple[EntryView, ...]
    queue: tuple[tuple[EntryView, ...], ...]
    held: tuple[EntryView, ...]
    answered: tuple[Result, ...]
    posted: tuple[Result, ...]
    drain_due: bool
    closed: bool


def _views(entries: Iterable[Entry]) -> tuple[EntryView, ...]:
    return tuple((key, context.req_id, generation) for key, context, generation in entries)


def _bytes_keys(action: str, keys: Iterable[bytes]) -> tuple[bytes, ...]:
    """``keys`` as a tuple, or a TypeError naming the argument."""
    if isinstance(keys, bytes | bytearray | str):
        raise TypeError(
            f"{action}: keys must be an iterable of bytes keys, not a single "
            f"{type(keys).__name__} (wrap one key in a list)"
        )
    try:
        keys = tuple(keys)
    except TypeError:
        raise TypeError(
            f"{action}: keys must be an iterable of bytes, got {type(keys).__name__}"
        ) from None
    for i, key in enumerate(keys):
        if not isinstance(key, bytes):
            raise TypeError(f"{action}: keys[{i}] must be bytes, got {type(key).__name__}")
    return keys


class AsyncLookupManager:
    """Answers "is this key in the tier?" without blocking the scheduler thread."""

    def __init__(
        self,
        tier: Tier,
        *,
        mode: Literal["threaded", "stepped"] = "threaded",
        observer: Observer | None = None,
    ) -> None:
        if mode not in ("threaded", "stepped"):
            raise ValueError(f"mode must be 'threaded' or 'stepped', got {mode!r}")
        self.mode = mode
        # -- scheduler-owned state (the spec's State, minus the worker's part)
        self._probes: dict[bytes, Probe] = {}  # key -> its probe
        self._index: dict[str, set[bytes]] = {}  # request -> keys it is a requester of
        self._next_generation = 0
        self._batch: list[Entry] = []  # this step's entries, not yet flushed
        # The probes a lookup may answer from as they stand: the probe table, or
        # NO_PROBES while a drain is due and after shutdown (this is the spec's
        # drain_due: see _drain_due).
        self._answerable: Mapping[bytes, Probe] = self._probes
        self._closed = False
        # -- the two containers that cross threads
        self._batches: queue.Queue[Batch | None] = queue.Queue()  # flushed, not taken
        self._posted: deque[tuple[Result, ...]] = deque()  # posted, not applied
        # -- observation: a lock only when someone watches
        self._observer = observer
        self._guard: AbstractContextManager[object] = (
            threading.RLock() if observer is not None else nullcontext()
        )
        self.worker = Worker(
            tier, self._batches, self._posted, observer=observer, guard=self._guard
        )
        if observer is not None:
            # The observed lookup shadows the class's for this instance only, so an
            # unobserved manager pays nothing for observation on its hot path.
            self.lookup = self._observed_lookup  # type: ignore[method-assign]
        if mode == "threaded":
            self.worker.start(name=f"asynclookup-worker[{self.worker.tier_name}]")

    # -- lookup: the hot path ------------------------------------------------------

    def lookup(self, key: bytes, request: RequestContext) -> bool | None:
        """Lookup: the verdict of ``key``'s probe, None until known; ``request`` joins it."""
        try:  # asked again, no drain due: nothing to apply or record, only the verdict
            probe = self._answerable.get(key)
            if probe is not None and request.req_id in probe.requesters:
                return probe.verdict
        except (TypeError, AttributeError):
            pass  # misuse (an unhashable key, a request without req_id): refused below
        # The spec's lookup.  Misuse is refused before any state changes (the path
        # above changes none, so it needs no check).
        if self._closed or not isinstance(key, bytes) or not isinstance(request, RequestContext):
            self._check_lookup(key, request)  # raises the error that names the misuse
        if self._answerable is NO_PROBES:  # drain due (closed was refused above):
            self._apply_posted()  # the first lookup after a flush applies posted results
            probe = self._probes.get(key)  # otherwise the probe found above is the live one
        req_id = request.req_id
        if probe is None:  # no state: a new probe, PENDING, in this step's batch
            generation = self._next_generation
            self._next_generation = generation + 1
            self._probes[key] = probe = Probe(generation, PENDING, None, {req_id})
            self._batch.append((key, request, generation))
        elif req_id in probe.requesters:
            return probe.verdict  # asked again (after a drain): nothing new to record
        else:
            probe.requesters.add(req_id)  # joins the probe; never a second probe
        keys = self._index.get(req_id)
        if keys is None:
            self._index[req_id] = {key}
        else:
            keys.add(key)
        return probe.verdict

    def _observed_lookup(self, key: bytes, request: RequestContext) -> bool | None:
        """``lookup`` with its two events, atomic against the worker's hand-overs."""
        with self._guard:
            self._check_lookup(key, request)
            self._emit("lookup_called", key=key, request=request.req_id)
            verdict = type(self).lookup(self, key, request)
            self._emit("lookup_returned", key=key, request=request.req_id, verdict=verdict)
        return verdict

    def _check_lookup(self, key: object, request: object) -> None:
        if self._closed:
            raise ManagerClosedError("lookup")
        if not isinstance(key, bytes):
            raise TypeError(f"lookup: key must be bytes, got {type(key).__name__}")
        if not isinstance(request, RequestContext):
            raise TypeError(
                f"lookup: request must be a RequestContext, got {type(request).__name__}"
            )

    # -- the other scheduler actions -------------------------------------------------

    def flush(self) -> None:
        """Flush: apply posted results, then submit the live part of the batch as one item."""
        with self._guard:
            self._check_open("flush")
            self._apply_posted()
            batch, self._batch = self._batch, []
            submitted: Batch = []
            dropped: Batch = []
            probes = self._probes
            for entry in batch:
                probe = probes.get(entry[0])
                if probe is None or probe.generation != entry[2]:
                    dropped.append(entry)  # cleaned up or superseded since it was batched
                    continue
                probe.phase = IN_FLIGHT
                submitted.append(entry)
            self._drain_due = True
            if self._observer is not None:  # before the worker can see the batch
                self._emit("flush", submitted=_views(submitted), dropped=_views(dropped))
            if submitted:  # an empty batch submits nothing
                self._batches.put(submitted)

    def cleanup(self, request_id: str) -> None:
        """Cleanup: forget ``request_id``; delete probes it leaves orphaned unless in flight.

        An unknown (or already cleaned-up) request is a no-op.
        """
        with self._guard:
            self._check_open("cleanup")
            if not isinstance(request_id, str):
                raise TypeError(
                    f"cleanup: request_id must be str, got {type(request_id).__name__}"
                )
            if self._observer is not None:
                self._emit("cleanup", request=request_id)
            keys = self._index.pop(request_id, None)
            if keys is None:
                return
            probes = self._probes
            for key in keys:
                probe = probes[key]
                probe.requesters.discard(request_id)
                if not probe.requesters and probe.phase is not IN_FLIGHT:
                    # A PENDING probe's batch entry stays behind: flush drops it.
                    del probes[key]
                # An orphaned IN_FLIGHT probe stays so that a later request joins
                # it; its own result deletes it (see _apply_posted).

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        """MarkMiss: a load failed; RESOLVED probes of ``keys`` get False, others are left."""
        with self._guard:
            self._check_open("mark_miss")
            keys = _bytes_keys("mark_miss", keys)
            if self._observer is not None:
                self._emit("mark_miss", keys=keys)
            probes = self._probes
            for key in keys:
                probe = probes.get(key)
                if probe is not None and probe.phase is RESOLVED:
                    probe.verdict = False
                # PENDING / IN_FLIGHT: their own verdict will land; forcing one here
                # would give the probe two verdicts.

    def mark_present(self, keys: Iterable[bytes]) -> None:
        """MarkPresent: a store succeeded, newer than any probe: old generations go stale."""
        with self._guard:
            self._check_open("mark_present")
            keys = _bytes_keys("mark_present", keys)
            if self._observer is not None:
                self._emit("mark_present", keys=keys)
            probes = self._probes
            for key in keys:
                probe = probes.get(key)
                if probe is None or probe.verdict is True:
                    continue
                if not probe.requesters:
                    del probes[key]  # nobody is asking: forget it
                    continue
                # A new generation: a pending batch entry or an in-flight result
                # of the old one is now stale.
                probe.generation = self._next_generation
                self._next_generation += 1
                probe.phase = RESOLVED
                probe.verdict = True

    def drain_results(self) -> None:
        """Drain: apply every result posted so far."""
        with self._guard:
            self._check_open("drain_results")
            self._apply_posted()
            if self._observer is not None:
                self._emit("drain")  # after the results it applied, like flush

    def shutdown(self, timeout: float = 10.0) -> None:
        """Shutdown: stop the worker after its batch in hand, join it, apply posted results.

        Idempotent.  Threaded mode joins for at most ``timeout`` seconds; a worker
        stuck in a tier call past it is abandoned (it is a daemon thread) with a
        warning naming the call, and the manager is closed all the same.
        """
        if self._closed:
            return
        if timeout < 0:
            raise ValueError(f"shutdown: timeout must be >= 0, got {timeout}")
        joined = self.worker.stop(timeout)
        with self._guard:
            if not joined:
                health = self.worker.health()
                log.warning(
                    "shutdown: the worker did not stop within %s s; abandoning it in %s "
                    "(running for %s s); its results will never be applied",
                    timeout, health.current_call or "a tier call",
                    "?" if health.busy_for_seconds is None else f"{health.busy_for_seconds:.1f}",
                )
            self._apply_posted()
            if self._observer is not None:
                self._emit("shutdown", joined=joined)
            self._batch.clear()
            while True:  # batches never taken are dropped (and the stop signal)
                try:
                    self._batches.get_nowait()
                except queue.Empty:
                    break
            self._closed = True
            self._answerable = NO_PROBES  # so every lookup takes the checked way: refused

    # -- applying results: shared by lookup, flush, drain_results and shutdown -------

    def _apply_posted(self) -> None:
        """Apply every posted result; the only place a verdict from the worker lands."""
        posted, probes, observer = self._posted, self._probes, self._observer
        while posted:
            for key, generation, verdict in posted.popleft():
                probe = probes.get(key)
                if probe is None or probe.generation != generation:
                    # stale: cleaned up, superseded or re-created since it was sent
                    if observer is not None:
                        self._emit("result_stale", key=key, generation=generation)
                elif not probe.requesters:
                    del probes[key]  # orphaned in flight: nobody wants it now
                    if observer is not None:
                        self._emit("result_orphaned", key=key, generation=generation)
                else:
                    probe.phase = RESOLVED
                    probe.verdict = verdict
                    if observer is not None:
                        self._emit(
                            "result_applied", key=key, generation=generation, verdict=verdict
                        )
        self._drain_due = False

    @property
    def _drain_due(self) -> bool:
        """The spec's drain_due: a flush happened and no drain since.

        Kept as ``_answerable`` being NO_PROBES, so that a lookup asked again tests
        no flag: while a drain is due it finds nothing there and takes the full way.
        """
        return self._answerable is NO_PROBES and not self._closed

    @_drain_due.setter
    def _drain_due(self, due: bool) -> None:
        self._answerable = NO_PROBES if due else self._probes

    # -- what others may read ----------------------------------------------------------

    def health(self) -> WorkerHealth:
        """The worker's health; callable from any thread, also after shutdown."""
        return self.worker.health()

    def snapshot(self) -> Snapshot:
        """A frozen copy of the state for tests and the oracle (see ``Snapshot``)."""
        with self._guard:  # atomic against the worker's hand-overs when observed
            with self._batches.mutex:
                queued = tuple(_views(b) for b in self._batches.queue if b is not None)
            return Snapshot(
                probes={
                    k: ProbeView(p.generation, p.phase, p.verdict, frozenset(p.requesters))
                    for k, p in self._probes.items()
                },
                index={r: frozenset(keys) for r, keys in self._index.items()},
                next_generation=self._next_generation,
                batch=_views(self._batch),
                queue=queued,
                held=_views(self.worker.held),
                answered=self.worker.answered,
                posted=tuple(r for results in self._posted.copy() for r in results),
                drain_due=self._drain_due,
                closed=self._closed,
            )

    @property
    def closed(self) -> bool:
        """Whether ``shutdown()`` has run."""
        return self._closed

    def __enter__(self) -> AsyncLookupManager:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return (
            f"AsyncLookupManager(tier={self.worker.tier_name!r}, mode={self.mode!r}, "
            f"probes={len(self._probes)}, requests={len(self._index)}, "
            f"closed={self._closed})"
        )

    def _check_open(self, action: str) -> None:
        if self._closed:
            raise ManagerClosedError(action)

    def _emit(self, kind: str, **fields: object) -> None:
        assert self._observer is not None
        self._observer(Event(kind, SCHEDULER, fields))
