"""Drains on every lookup; requesters are derived from the request index, never stored.

Style: one source of truth.  A probe is a ``typing.NamedTuple`` of ``(generation, phase,
verdict)`` only; who asked for a key is not stored on the probe at all but computed from
the request -> keys index when needed, so the two can never disagree.  Results come back
through a ``heapq`` min-heap ordered by generation, guarded by a ``threading.Lock``; every
``lookup`` pops everything on the heap before it answers (the protocol allows a lookup to
apply results at any time).  One raw worker thread reads batches from a ``queue.Queue``.
Answers are handled laxly, per element.
"""

from __future__ import annotations

import heapq
import queue
import threading
from collections.abc import Iterable
from typing import NamedTuple, Protocol


class RequestContext(Protocol):
    @property
    def req_id(self) -> str: ...


class Probe(NamedTuple):
    generation: int
    phase: str  # "pending" | "in flight" | "resolved"
    verdict: bool | None


class Entry(NamedTuple):
    key: bytes
    context: RequestContext
    generation: int


class EagerManager:
    join_timeout = 10.0

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        self._probes: dict[bytes, Probe] = {}
        self._index: dict[str, set[bytes]] = {}
        self._batch: list[Entry] = []
        self._counter = 0
        self._closed = False
        self._heap: list[tuple[int, bytes, bool]] = []
        self._heap_lock = threading.Lock()
        self._queue: queue.Queue[list[Entry] | None] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, name="eager-worker", daemon=True)
        self._thread.start()

    def batch_lookup(self, keys: list[bytes], req_context: RequestContext) -> Iterable[bool]:
        raise NotImplementedError(self.tier_type)

    def _new_generation(self) -> int:
        self._counter += 1
        return self._counter

    def _has_requesters(self, key: bytes) -> bool:
        return any(key in keys for keys in self._index.values())

    # ------------------------------------------------------------ scheduler

    def lookup(self, key: bytes, req_context: RequestContext) -> bool | None:
        self._pop_results()
        probe = self._probes.get(key)
        if probe is None:
            probe = self._probes[key] = Probe(self._new_generation(), "pending", None)
            self._batch.append(Entry(key, req_context, probe.generation))
        self._index.setdefault(req_context.req_id, set()).add(key)
        return probe.verdict if probe.phase == "resolved" else None

    def flush(self) -> None:
        self._pop_results()
        submitted = []
        for entry in self._batch:
            probe = self._probes.get(entry.key)
            if probe is not None and probe.generation == entry.generation:
                self._probes[entry.key] = probe._replace(phase="in flight")
                submitted.append(entry)
        self._batch = []
        if submitted:
            self._queue.put(submitted)

    def cleanup(self, req_id: str) -> None:
        for key in self._index.pop(req_id, set()):
            probe = self._probes.get(key)
            if probe is not None and probe.phase != "in flight" and not self._has_requesters(key):
                del self._probes[key]

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            probe = self._probes.get(key)
            if probe is not None and self._miss_applies(probe):
                self._probes[key] = probe._replace(phase="resolved", verdict=False)

    def _miss_applies(self, probe: Probe) -> bool:
        return probe.phase == "resolved"

    def mark_present(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            probe = self._probes.get(key)
            if probe is None or probe.verdict is True:
                continue
            if self._has_requesters(key):
                self._probes[key] = Probe(self._new_generation(), "resolved", True)
            else:
                del self._probes[key]

    def drain_results(self) -> None:
        self._pop_results()

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._queue.put(None)
        self._thread.join(self.join_timeout)
        self._pop_results()
        self._batch = []

    def _pop_results(self) -> None:
        with self._heap_lock:
            results = [heapq.heappop(self._heap) for _ in range(len(self._heap))]
        for generation, key, verdict in results:
            probe = self._probes.get(key)
            if probe is None or probe.generation != generation:
                continue
            if self._has_requesters(key):
                self._probes[key] = Probe(generation, "resolved", verdict)
            else:
                del self._probes[key]

    # ------------------------------------------------------------ worker

    def _work(self) -> None:
        while True:
            batch = self._queue.get()
            if batch is None or self._stop.is_set():
                return
            groups: dict[str, list[Entry]] = {}
            for entry in batch:
                groups.setdefault(entry.context.req_id, []).append(entry)
            for entries in groups.values():
                verdicts = self._verdicts([e.key for e in entries], entries[0].context)
                with self._heap_lock:
                    for entry, verdict in zip(entries, verdicts, strict=False):
                        heapq.heappush(self._heap, (entry.generation, entry.key, verdict))

    def _verdicts(self, keys: list[bytes], context: RequestContext) -> list[bool]:
        verdicts = [False] * len(keys)
        try:
            answers: Iterable[object] = self.batch_lookup(list(keys), context)
            for position, answer in enumerate(answers):
                if position >= len(keys):
                    break
                verdicts[position] = answer is True
        except Exception:
            pass  # the positions not reached keep False
        return verdicts


# ------------------------------------------------------------------ one-bug copies


class EagerMissForcesResolved(EagerManager):
    """BUG (property 3): mark_miss resolves PENDING and IN_FLIGHT probes to False as well."""

    def _miss_applies(self, probe: Probe) -> bool:
        return True


class EagerZipTruncates(EagerManager):
    """BUG (property 6): zip() over keys and answers; keys a short answer missed stay IN_FLIGHT."""

    def _verdicts(self, keys: list[bytes], context: RequestContext) -> list[bool]:
        try:
            answers: Iterable[object] = self.batch_lookup(list(keys), context)
            return [answer is True for _, answer in zip(keys, answers, strict=False)]
        except Exception:
            return [False] * len(keys)
