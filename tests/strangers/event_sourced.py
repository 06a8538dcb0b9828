"""An event-sourced async lookup manager, written from docs/protocol.md alone.

Written by an outsider from docs/protocol.md (and the vLLM-shaped calling
convention of docs/oracle.md, "Walkthrough" and "Shapes near vLLM's"), without
reading the spec, the reference or any other implementation.

Style: event sourcing.  Every change the scheduler side makes is an immutable
event record (a frozen dataclass: ``ProbeCreated``, ``RequesterAdded``,
``RequesterRemoved``, ``ProbeDeleted``, ``BatchSubmitted``, ``BatchDropped``,
``ResultApplied``, ``VerdictMissed``, ``ProbeSuperseded``) appended to an
append-only log owned by the scheduler thread.  The probe table
(``_probes``), the request index (``_index``) and the step's batch
(``_batch``) are materialised views, and ``_apply(event)`` is the only place
they change.  The log is compacted as soon as its events are folded, so it is
empty between calls and memory stays flat.  The worker consumes submitted
batches through its own absolute cursor into a separate, lock-protected list
of ``BatchSubmitted`` events (``_submitted``), woken by a
``threading.Condition``; its consumed prefix is cut off as it goes.  It hands
results back as ``GroupAnswered`` records (one per tier call, holding
``ResultPosted`` events) on a ``queue.Queue`` (``_results``).  Real threads;
no sleeps: only a condition wait, queue operations and a bounded join.

Decisions where the protocol leaves room (docs/protocol.md, "What the spec
decides where the protocol leaves room"):

- item 1 (when a lookup drains): ``lookup`` applies posted results exactly
  when a flush happened since the last drain (a ``_drain_due`` flag set by
  ``flush`` and cleared by every drain).
- item 2 (order of request groups): groups are probed in the order of their
  first entry in the batch.
- item 3 (what a failed tier call yields): a tier that raises, whose lazy
  iterable raises part-way, or whose answer has the wrong length gives
  ``False`` to every key of the call; an answer of the right length gives
  ``False`` to each non-bool element and keeps the proper bools.
- item 4 (what shutdown drops): ``shutdown`` sets a stop flag under the
  condition; the worker finishes the batch in hand (it never takes a batch
  after seeing the flag), is joined (a bounded join, 30 s), then every batch
  it never took and the step's batch are dropped, and every posted result is
  applied.  My own addition, where the protocol says nothing: an IN_FLIGHT
  probe without requesters whose batch was dropped is deleted, since the
  result that would delete it can never come.  Shutdown is idempotent; any
  other call after it raises ``ManagerClosedError``.
- item 5 (mark_present on a True probe): does nothing (no new generation);
  on a state without requesters it deletes the state.
- item 7 (asking again): a repeated ``lookup`` by a requester emits no event
  other than what a drain emits.

Other choices: a result for a probe of its generation that has no requesters
left deletes the probe (``ProbeDeleted``); a stale result emits no event.
Batch entries that went stale before a flush stay in the step's batch (cleanup
does not touch the batch) and are dropped by the flush's re-validation.
"""

from __future__ import annotations

import enum
import queue
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

__all__ = [
    "CleanupDeletesInFlight",
    "EventSourcedManager",
    "FlushWithoutRevalidation",
    "ManagerClosedError",
    "ZipTruncatesShortAnswer",
]


class ReqContext(Protocol):
    """What the manager needs of a request context: its id."""

    @property
    def req_id(self) -> str: ...


class ManagerClosedError(RuntimeError):
    """A call after shutdown()."""


class Phase(enum.Enum):
    PENDING = "PENDING"
    IN_FLIGHT = "IN_FLIGHT"
    RESOLVED = "RESOLVED"


@dataclass(frozen=True)
class BatchEntry:
    """One entry of a step's batch: (key, request context, generation)."""

    key: bytes
    context: ReqContext
    generation: int

    @property
    def request(self) -> str:
        return self.context.req_id


@dataclass(frozen=True)
class ProbeView:
    """The materialised state of one key's probe."""

    generation: int
    phase: Phase
    verdict: bool | None
    requesters: frozenset[str]


# --------------------------------------------------------------------- events


@dataclass(frozen=True)
class ProbeCreated:
    key: bytes
    generation: int
    context: ReqContext


@dataclass(frozen=True)
class RequesterAdded:
    key: bytes
    request: str


@dataclass(frozen=True)
class RequesterRemoved:
    key: bytes
    request: str


@dataclass(frozen=True)
class ProbeDeleted:
    key: bytes


@dataclass(frozen=True)
class BatchSubmitted:
    entries: tuple[BatchEntry, ...]


@dataclass(frozen=True)
class BatchDropped:
    """The step's batch is discarded without submitting anything."""


@dataclass(frozen=True)
class ResultApplied:
    key: bytes
    generation: int
    verdict: bool


@dataclass(frozen=True)
class VerdictMissed:
    key: bytes


@dataclass(frozen=True)
class ProbeSuperseded:
    key: bytes
    generation: int


Event = (
    ProbeCreated
    | RequesterAdded
    | RequesterRemoved
    | ProbeDeleted
    | BatchSubmitted
    | BatchDropped
    | ResultApplied
    | VerdictMissed
    | ProbeSuperseded
)


@dataclass(frozen=True)
class ResultPosted:
    """A worker's verdict for one probe: (key, generation, verdict)."""

    key: bytes
    generation: int
    verdict: bool


@dataclass(frozen=True)
class GroupAnswered:
    """The results of one tier call, posted together."""

    results: tuple[ResultPosted, ...]


# -------------------------------------------------------------------- manager


class EventSourcedManager:
    """A lookup manager whose tables are views folded from an event log."""

    _JOIN_TIMEOUT = 30.0

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        # scheduler side: the log and the views folded from it
        self._log: list[Event] = []
        self._folded = 0  # events of _log already folded (compacted away)
        self._events_total = 0
        self._probes: dict[bytes, ProbeView] = {}
        self._index: dict[str, dict[bytes, None]] = {}
        self._batch: list[BatchEntry] = []
        self._next_generation = 0
        self._drain_due = False
        self._closed = False
        # worker side: submitted batches, behind a condition
        self._cond = threading.Condition(threading.Lock())
        self._submitted: list[BatchSubmitted] = []
        self._submitted_base = 0  # absolute position of _submitted[0]
        self._stopping = False
        # results channel, worker -> scheduler
        self._results: queue.Queue[GroupAnswered] = queue.Queue()
        self._worker = threading.Thread(
            target=self._worker_loop, name="event-sourced-lookup", daemon=True
        )
        self._worker.start()

    # ------------------------------------------------------------ the tier

    def batch_lookup(self, keys: list[bytes], req_context: ReqContext) -> Iterable[object]:
        """The tier call; a subclass (or the oracle) provides it."""
        raise NotImplementedError(f"no tier for {self.tier_type!r}")

    # ------------------------------------------------------ the event log

    def _emit(self, event: Event) -> None:
        """Append an event to the log and fold everything not yet folded."""
        self._log.append(event)
        self._events_total += 1
        while self._folded < len(self._log):
            self._apply(self._log[self._folded])
            self._folded += 1
        # compaction: a folded event is no longer needed
        del self._log[: self._folded]
        self._folded = 0

    def _apply(self, event: Event) -> None:
        """Fold one event into the views: the only place they change."""
        match event:
            case ProbeCreated(key, generation, context):
                request = context.req_id
                self._probes[key] = ProbeView(
                    generation, Phase.PENDING, None, frozenset((request,))
                )
                self._index.setdefault(request, {})[key] = None
                self._batch.append(BatchEntry(key, context, generation))
            case RequesterAdded(key, request):
                view = self._probes[key]
                self._probes[key] = replace(view, requesters=view.requesters | {request})
                self._index.setdefault(request, {})[key] = None
            case RequesterRemoved(key, request):
                view = self._probes[key]
                self._probes[key] = replace(view, requesters=view.requesters - {request})
                keys = self._index.get(request)
                if keys is not None:
                    keys.pop(key, None)
                    if not keys:
                        del self._index[request]
            case ProbeDeleted(key):
                del self._probes[key]
            case BatchSubmitted(entries):
                for entry in entries:
                    sent = self._probes.get(entry.key)
                    if sent is not None and sent.generation == entry.generation:
                        self._probes[entry.key] = replace(sent, phase=Phase.IN_FLIGHT)
                self._batch.clear()
            case BatchDropped():
                self._batch.clear()
            case ResultApplied(key, generation, verdict):
                self._probes[key] = replace(
                    self._probes[key], generation=generation, phase=Phase.RESOLVED,
                    verdict=verdict,
                )
            case VerdictMissed(key):
                self._probes[key] = replace(self._probes[key], verdict=False)
            case ProbeSuperseded(key, generation):
                self._probes[key] = replace(
                    self._probes[key], generation=generation, phase=Phase.RESOLVED,
                    verdict=True,
                )

    def _new_generation(self) -> int:
        generation = self._next_generation
        self._next_generation += 1
        return generation

    # ------------------------------------------------- scheduler helpers

    def _check_open(self) -> None:
        if self._closed:
            raise ManagerClosedError("the lookup manager is shut down")

    def _classify_result(self, result: ResultPosted) -> Event | None:
        """The event a posted result becomes (None: stale, ignored)."""
        view = self._probes.get(result.key)
        if view is None or view.generation != result.generation:
            return None
        if not view.requesters:
            return ProbeDeleted(result.key)
        return ResultApplied(result.key, result.generation, result.verdict)

    def _drain(self) -> None:
        self._drain_due = False
        while True:
            try:
                record = self._results.get_nowait()
            except queue.Empty:
                return
            for result in record.results:
                event = self._classify_result(result)
                if event is not None:
                    self._emit(event)

    def _revalidate(self, batch: Sequence[BatchEntry]) -> list[BatchEntry]:
        """The entries whose key still has a state of the same generation."""
        live: list[BatchEntry] = []
        for entry in batch:
            view = self._probes.get(entry.key)
            if view is not None and view.generation == entry.generation:
                live.append(entry)
        return live

    def _should_delete_on_cleanup(self, view: ProbeView) -> bool:
        """A probe left without requesters goes, unless it is in flight."""
        return not view.requesters and view.phase is not Phase.IN_FLIGHT

    # ------------------------------------------------- scheduler calls

    def lookup(self, key: bytes, req_context: ReqContext) -> bool | None:
        self._check_open()
        if self._drain_due:
            self._drain()
        request = req_context.req_id
        current = self._probes.get(key)
        if current is None:
            self._emit(ProbeCreated(key, self._new_generation(), req_context))
        elif request not in current.requesters:
            self._emit(RequesterAdded(key, request))
        return self._probes[key].verdict

    def flush(self) -> None:
        self._check_open()
        self._drain()
        if not self._batch:
            self._drain_due = True
            return
        live = self._revalidate(self._batch)
        if not live:
            self._emit(BatchDropped())
        else:
            submitted = BatchSubmitted(tuple(live))
            self._emit(submitted)
            with self._cond:
                self._submitted.append(submitted)
                self._cond.notify_all()
        self._drain_due = True

    def cleanup(self, req_id: str) -> None:
        self._check_open()
        for key in list(self._index.get(req_id, ())):
            self._emit(RequesterRemoved(key, req_id))
            if self._should_delete_on_cleanup(self._probes[key]):
                self._emit(ProbeDeleted(key))

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        self._check_open()
        for key in keys:
            view = self._probes.get(key)
            if view is not None and view.phase is Phase.RESOLVED:
                self._emit(VerdictMissed(key))

    def mark_present(self, keys: Iterable[bytes]) -> None:
        self._check_open()
        for key in keys:
            state = self._probes.get(key)
            if state is None or state.verdict is True:
                continue
            if not state.requesters:
                self._emit(ProbeDeleted(key))
            else:
                self._emit(ProbeSuperseded(key, self._new_generation()))

    def drain_results(self) -> None:
        self._check_open()
        self._drain()

    def shutdown(self) -> None:
        if self._closed:
            return
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._worker.join(self._JOIN_TIMEOUT)
        with self._cond:
            dropped = self._submitted[:]
            self._submitted_base += len(self._submitted)
            self._submitted.clear()
        self._drain()
        if self._batch:
            self._emit(BatchDropped())
        for batch in dropped:
            for entry in batch.entries:
                view = self._probes.get(entry.key)
                if (
                    view is not None
                    and view.generation == entry.generation
                    and view.phase is Phase.IN_FLIGHT
                    and not view.requesters
                ):
                    self._emit(ProbeDeleted(entry.key))
        self._closed = True

    # ------------------------------------------------------------ worker

    def _worker_loop(self) -> None:
        cursor = 0  # absolute position of the next submitted batch to take
        while True:
            with self._cond:
                while (
                    cursor - self._submitted_base >= len(self._submitted)
                    and not self._stopping
                ):
                    self._cond.wait()
                if self._stopping:
                    return
                batch = self._submitted[cursor - self._submitted_base]
                cursor += 1
                # compaction: the worker's consumed prefix is no longer needed
                consumed = cursor - self._submitted_base
                del self._submitted[:consumed]
                self._submitted_base += consumed
            self._probe_batch(batch)

    def _probe_batch(self, batch: BatchSubmitted) -> None:
        groups: dict[str, list[BatchEntry]] = {}
        for entry in batch.entries:
            groups.setdefault(entry.request, []).append(entry)
        for entries in groups.values():
            verdicts = self._probe_group([e.key for e in entries], entries[0].context)
            results = tuple(
                ResultPosted(entries[i].key, entries[i].generation, verdict)
                for i, verdict in enumerate(verdicts)
            )
            self._results.put(GroupAnswered(results))

    def _probe_group(self, keys: list[bytes], context: ReqContext) -> list[bool]:
        try:
            answer = self.batch_lookup(list(keys), context)
            return self._verdicts(keys, answer)
        except Exception:
            return [False] * len(keys)

    def _verdicts(self, keys: Sequence[bytes], answer: Iterable[object]) -> list[bool]:
        """One verdict per key (called inside the worker's try)."""
        values = list(answer)
        if len(values) != len(keys):
            return [False] * len(keys)
        return [value if isinstance(value, bool) else False for value in values]


# ------------------------------------------------------- one-bug copies


class FlushWithoutRevalidation(EventSourcedManager):
    """Bug: flush submits the step's batch as it is, without re-validation.

    A batch entry whose probe was cleaned up (or superseded by mark_present)
    before the flush still reaches the tier: the seed bug, vLLM #55075.
    docs/properties.md names it property 1 (no cleaned-up entry is submitted).
    """

    def _revalidate(self, batch: Sequence[BatchEntry]) -> list[BatchEntry]:
        return list(batch)


class ZipTruncatesShortAnswer(EventSourcedManager):
    """Bug: the worker zips the keys with the tier's answer.

    A short answer silently drops the last keys' results, so their probes stay
    IN_FLIGHT forever.  docs/properties.md names it property 7 (survival;
    predicate tier_answers_every_key), with property 6 (progress) and 5 (no
    leak) also broken by it.
    """

    def _verdicts(self, keys: Sequence[bytes], answer: Iterable[object]) -> list[bool]:
        return [
            value if isinstance(value, bool) else False
            for _key, value in zip(keys, answer)  # noqa: B905 - the planted bug
        ]


class CleanupDeletesInFlight(EventSourcedManager):
    """Bug: cleanup deletes a probe left without requesters even in flight.

    A later request for the key then probes it a second time while the first
    probe's result is still on its way.  docs/properties.md names it
    property 8 (no redundant probe, efficiency; predicate
    in_flight_probes_survive_cleanup), vLLM #55823.
    """

    def _should_delete_on_cleanup(self, view: ProbeView) -> bool:
        return not view.requesters
