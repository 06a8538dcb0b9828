"""Per-key posting on a ``queue.SimpleQueue``; a ``Phase`` enum and a mutable dataclass per probe.

Style: object per probe.  Each probe is a ``@dataclass`` whose ``phase`` is an ``enum.Enum``
member; batch entries are frozen dataclasses.  One raw worker thread takes batches from a
``queue.Queue`` (``None`` wakes it at shutdown) and, for each request group, posts ONE
``(key, generation, verdict)`` tuple PER KEY on a ``queue.SimpleQueue``.  ``lookup`` drains
whenever results are outstanding (a counter of keys submitted but not yet taken off the
queue), which covers "the first lookup after a flush".  Tier faults are handled strictly:
any fault in a call (raise, short, long, a non-bool anywhere) gives ``False`` to every key
of that call.
"""

from __future__ import annotations

import enum
import itertools
import queue
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol


class RequestContext(Protocol):
    """What the scheduler passes to ``lookup``: only ``req_id`` is read."""

    @property
    def req_id(self) -> str: ...


class Phase(enum.Enum):
    PENDING = enum.auto()
    IN_FLIGHT = enum.auto()
    RESOLVED = enum.auto()


@dataclass
class Probe:
    generation: int
    phase: Phase = Phase.PENDING
    verdict: bool | None = None
    requesters: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Entry:
    key: bytes
    context: RequestContext
    generation: int


class PerKeyQueueManager:
    """The async lookup manager: scheduler-thread tables, one worker thread."""

    join_timeout = 10.0

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        self._probes: dict[bytes, Probe] = {}
        self._keys_by_request: dict[str, set[bytes]] = {}
        self._batch: list[Entry] = []
        self._generations = itertools.count()
        self._outstanding = 0
        self._closed = False
        self._inbox: queue.Queue[list[Entry] | None] = queue.Queue()
        self._outbox: queue.SimpleQueue[tuple[bytes, int, bool]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._worker = threading.Thread(
            target=self._run, name=f"{type(self).__name__}-worker", daemon=True
        )
        self._worker.start()

    def batch_lookup(self, keys: list[bytes], req_context: RequestContext) -> Iterable[bool]:
        raise NotImplementedError(f"tier {self.tier_type!r}: override batch_lookup")

    # ---------------------------------------------------------------- scheduler thread

    def lookup(self, key: bytes, req_context: RequestContext) -> bool | None:
        if self._outstanding:
            self._drain()
        req_id = req_context.req_id
        probe = self._probes.get(key)
        if probe is None:
            probe = Probe(next(self._generations))
            self._probes[key] = probe
            self._batch.append(Entry(key, req_context, probe.generation))
        probe.requesters.add(req_id)
        self._keys_by_request.setdefault(req_id, set()).add(key)
        return probe.verdict if probe.phase is Phase.RESOLVED else None

    def flush(self) -> None:
        self._drain()
        batch, self._batch = self._batch, []
        live = [entry for entry in batch if self._still_live(entry)]
        if not live:
            return
        for entry in live:
            probe = self._probes.get(entry.key)
            if probe is not None and probe.generation == entry.generation:
                probe.phase = Phase.IN_FLIGHT
        self._outstanding += len(live)
        self._inbox.put(live)

    def _still_live(self, entry: Entry) -> bool:
        probe = self._probes.get(entry.key)
        return probe is not None and probe.generation == entry.generation

    def cleanup(self, req_id: str) -> None:
        for key in self._keys_by_request.pop(req_id, set()):
            probe = self._probes.get(key)
            if probe is None:
                continue
            probe.requesters.discard(req_id)
            if not probe.requesters and self._may_delete(probe):
                del self._probes[key]

    def _may_delete(self, probe: Probe) -> bool:
        return probe.phase is not Phase.IN_FLIGHT

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            probe = self._probes.get(key)
            if probe is not None and probe.phase is Phase.RESOLVED:
                probe.verdict = False

    def mark_present(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            probe = self._probes.get(key)
            if probe is None or probe.verdict is True:
                continue
            if probe.requesters:
                self._probes[key] = Probe(
                    next(self._generations), Phase.RESOLVED, True, probe.requesters
                )
            else:
                del self._probes[key]

    def drain_results(self) -> None:
        self._drain()

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._inbox.put(None)
        self._worker.join(self.join_timeout)
        self._drain()
        self._batch.clear()

    def _drain(self) -> None:
        while True:
            try:
                key, generation, verdict = self._outbox.get_nowait()
            except queue.Empty:
                return
            self._outstanding -= 1
            probe = self._probes.get(key)
            if probe is None or probe.generation != generation:
                continue  # stale
            if probe.requesters:
                probe.phase, probe.verdict = Phase.RESOLVED, verdict
            else:
                del self._probes[key]

    # ---------------------------------------------------------------- worker thread

    def _run(self) -> None:
        while True:
            batch = self._inbox.get()
            if batch is None or self._stop.is_set():
                return
            for context, entries in self._by_request(batch):
                verdicts = self._ask([entry.key for entry in entries], context)
                for entry, verdict in zip(entries, verdicts, strict=True):
                    self._outbox.put((entry.key, entry.generation, verdict))

    @staticmethod
    def _by_request(batch: Sequence[Entry]) -> list[tuple[RequestContext, list[Entry]]]:
        groups: dict[str, tuple[RequestContext, list[Entry]]] = {}
        for entry in batch:
            groups.setdefault(entry.context.req_id, (entry.context, []))[1].append(entry)
        return list(groups.values())

    def _ask(self, keys: list[bytes], context: RequestContext) -> list[bool]:
        failed = [False] * len(keys)
        try:
            answer: list[object] = list(
                itertools.islice(self.batch_lookup(list(keys), context), len(keys) + 1)
            )
        except Exception:
            return failed
        if len(answer) != len(keys) or any(type(value) is not bool for value in answer):
            return failed
        return [value is True for value in answer]


# ------------------------------------------------------------------ one-bug copies


class FlushSubmitsWholeBatch(PerKeyQueueManager):
    """BUG (property 1): flush does not re-validate; every batch entry reaches the tier."""

    def _still_live(self, entry: Entry) -> bool:
        return True


class CleanupLeavesPendingOrphans(PerKeyQueueManager):
    """BUG (property 5): cleanup deletes only RESOLVED probes, so a PENDING orphan stays."""

    def _may_delete(self, probe: Probe) -> bool:
        return probe.phase is Phase.RESOLVED


class ConsumesAnswerOutsideTry(PerKeyQueueManager):
    """BUG (property 7): the tier's iterable is consumed outside the try; a lazy raise kills
    the worker thread."""

    def _ask(self, keys: list[bytes], context: RequestContext) -> list[bool]:
        try:
            raw = self.batch_lookup(list(keys), context)
        except Exception:
            return [False] * len(keys)
        answer: list[object] = list(itertools.islice(raw, len(keys) + 1))
        if len(answer) != len(keys) or any(type(value) is not bool for value in answer):
            return [False] * len(keys)
        return [value is True for value in answer]
