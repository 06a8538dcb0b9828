"""Drains exactly where the protocol requires it, and nowhere else; ``match`` on an IntEnum.

Style: a state machine written with structural pattern matching.  Probes are slotted
dataclasses whose ``phase`` is an ``IntEnum``; every decision on a probe is a ``match``
statement over its class pattern (``case Probe(phase=Phase.RESOLVED)``).  Results are
applied ONLY in ``flush``, ``drain_results`` and ``shutdown``, plus the one lookup the
protocol names: the first ``lookup`` after a flush with no drain in between (a
``flushed_since_drain`` flag); every other lookup leaves posted results where they are.
One raw worker thread; the work queue and the result queue are both ``queue.Queue``,
results posted as one list per batch.  Tier faults are handled strictly.
"""

from __future__ import annotations

import enum
import itertools
import queue
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol


class RequestContext(Protocol):
    @property
    def req_id(self) -> str: ...


class Phase(enum.IntEnum):
    PENDING = 1
    IN_FLIGHT = 2
    RESOLVED = 3


@dataclass(slots=True)
class Probe:
    generation: int
    phase: Phase
    verdict: bool | None = None
    requesters: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class Pending:
    key: bytes
    context: RequestContext
    generation: int


Posted = list[tuple[bytes, int, bool]]


class MinimalDrainManager:
    join_timeout = 10.0
    lookup_drains_after_flush = True

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        self.probes: dict[bytes, Probe] = {}
        self.requests: dict[str, set[bytes]] = {}
        self.step_batch: list[Pending] = []
        self.flushed_since_drain = False
        self._generations: Iterator[int] = itertools.count()
        self._stopped = False
        self._to_worker: queue.Queue[list[Pending] | None] = queue.Queue()
        self._from_worker: queue.Queue[Posted] = queue.Queue()
        self._stop_flag = threading.Event()
        self._thread = threading.Thread(target=self._worker, name="minimal-drain", daemon=True)
        self._thread.start()

    def batch_lookup(self, keys: list[bytes], req_context: RequestContext) -> Iterable[bool]:
        raise NotImplementedError(self.tier_type)

    # ------------------------------------------------------------ scheduler

    def lookup(self, key: bytes, req_context: RequestContext) -> bool | None:
        if self.flushed_since_drain and self.lookup_drains_after_flush:
            self._apply_posted()
        match self.probes.get(key):
            case None:
                probe = Probe(next(self._generations), Phase.PENDING)
                self.probes[key] = probe
                self.step_batch.append(Pending(key, req_context, probe.generation))
            case Probe() as probe:
                pass
        probe.requesters.add(req_context.req_id)
        self.requests.setdefault(req_context.req_id, set()).add(key)
        match probe:
            case Probe(phase=Phase.RESOLVED, verdict=verdict):
                return verdict
            case _:
                return None

    def flush(self) -> None:
        self._apply_posted()
        self.flushed_since_drain = True
        batch, self.step_batch = self.step_batch, []
        out: list[Pending] = []
        for entry in batch:
            match self.probes.get(entry.key):
                case Probe(generation=g) as probe if g == entry.generation:
                    probe.phase = Phase.IN_FLIGHT
                    out.append(entry)
                case _:
                    pass  # stale: cleaned up or superseded
        if out:
            self._to_worker.put(out)

    def cleanup(self, req_id: str) -> None:
        for key in self.requests.pop(req_id, set()):
            match self.probes.get(key):
                case None:
                    continue
                case probe:
                    probe.requesters.discard(req_id)
                    match probe:
                        case Probe(phase=Phase.IN_FLIGHT):
                            pass  # orphaned in flight: its own result deletes it
                        case Probe(requesters=who) if not who:
                            del self.probes[key]

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            match self.probes.get(key):
                case Probe() as probe:
                    self._miss(probe)
                case None:
                    pass

    def _miss(self, probe: Probe) -> None:
        match probe:
            case Probe(phase=Phase.RESOLVED):
                probe.verdict = False
            case _:
                pass  # PENDING or IN_FLIGHT: its own verdict will land

    def mark_present(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            match self.probes.get(key):
                case None | Probe(verdict=True):
                    pass
                case Probe(requesters=who) if not who:
                    del self.probes[key]
                case Probe(requesters=who):
                    self.probes[key] = Probe(next(self._generations), Phase.RESOLVED, True, who)

    def drain_results(self) -> None:
        self._apply_posted()

    def shutdown(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._stop_flag.set()
        self._to_worker.put(None)
        self._thread.join(self.join_timeout)
        self._apply_posted()
        self.step_batch = []

    def _apply_posted(self) -> None:
        self.flushed_since_drain = False
        while True:
            try:
                posted = self._from_worker.get_nowait()
            except queue.Empty:
                return
            for key, generation, verdict in posted:
                match self.probes.get(key):
                    case Probe(generation=g, requesters=who) as probe if g == generation:
                        if who:
                            probe.phase, probe.verdict = Phase.RESOLVED, verdict
                        else:
                            del self.probes[key]
                    case _:
                        pass  # stale

    # ------------------------------------------------------------ worker

    def _worker(self) -> None:
        while (batch := self._to_worker.get()) is not None and not self._stop_flag.is_set():
            groups: dict[str, list[Pending]] = {}
            for entry in batch:
                groups.setdefault(entry.context.req_id, []).append(entry)
            posted: Posted = []
            for entries in groups.values():
                keys = [e.key for e in entries]
                verdicts = self._call_tier(keys, entries[0].context)
                posted.extend(
                    (e.key, e.generation, v) for e, v in zip(entries, verdicts, strict=True)
                )
            self._from_worker.put(posted)

    def _call_tier(self, keys: list[bytes], context: RequestContext) -> list[bool]:
        try:
            answer = self._consume(self.batch_lookup(list(keys), context), len(keys))
        except Exception:
            return [False] * len(keys)
        return answer

    @staticmethod
    def _consume(raw: Iterable[object], count: int) -> list[bool]:
        """Reads at most count+1 elements; raises ValueError on any fault."""
        answer = list(itertools.islice(raw, count + 1))
        if len(answer) != count:
            raise ValueError(f"tier answered {len(answer)} results for {count} keys")
        verdicts: list[bool] = []
        for value in answer:
            match value:
                case bool():
                    verdicts.append(value)
                case _:
                    raise ValueError(f"tier answered {value!r}, not a bool")
        return verdicts


# ------------------------------------------------------------------ one-bug copies


class MissOverridesInFlight(MinimalDrainManager):
    """BUG (property 3): mark_miss resolves any probe to False, PENDING and IN_FLIGHT too."""

    def _miss(self, probe: Probe) -> None:
        probe.phase, probe.verdict = Phase.RESOLVED, False


class LazyIterableKillsWorker(MinimalDrainManager):
    """BUG (property 7): only the call is guarded; consuming a lazy answer that raises
    part-way kills the worker thread."""

    def _call_tier(self, keys: list[bytes], context: RequestContext) -> list[bool]:
        try:
            raw = self.batch_lookup(list(keys), context)
        except Exception:
            return [False] * len(keys)
        try:
            return self._consume(list(raw), len(keys))
        except ValueError:
            return [False] * len(keys)


class DrainsOnlyInFlush(MinimalDrainManager):
    """BUG (property 6): lookup never applies results, not even the first lookup after a flush."""

    lookup_drains_after_flush = False
