"""A user's KV-probe manager: slots records, a generation counter, its own table names
(fixed twin).

Fixed: a posted result is applied only to the probe of the generation it was
computed for; a result of an older generation (the probe was superseded by
mark_present, or cleaned up and started again) is stale and ignored.
"""

from __future__ import annotations

import itertools
import queue
import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Probe:
    generation: int
    in_flight: bool = False
    verdict: bool | None = None
    requesters: set[str] = field(default_factory=set)


class KvProbeManager:
    """lookup / flush / cleanup / mark_present / drain_results / shutdown on the
    scheduler thread; ``batch_lookup`` on the worker thread."""

    def __init__(self, tier_type: str) -> None:
        self._probes: dict[bytes, Probe] = {}
        self._by_request: dict[str, set[bytes]] = {}
        self._batch: list[tuple[bytes, Any, int]] = []
        self._generations = itertools.count()
        self._jobs: queue.SimpleQueue[list[tuple[bytes, Any, int]] | None] = queue.SimpleQueue()
        self._results: queue.SimpleQueue[list[tuple[bytes, int, bool]]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name=f"kv-probe-{tier_type}",
                                        daemon=True)
        self._thread.start()

    def batch_lookup(self, keys: list[bytes], req_context: Any) -> list[bool]:
        raise NotImplementedError("the deployment's tier")

    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        self.drain_results()
        probe = self._probes.get(key)
        if probe is None:
            probe = self._probes[key] = Probe(next(self._generations))
            self._batch.append((key, req_context, probe.generation))
        probe.requesters.add(req_context.req_id)
        self._by_request.setdefault(req_context.req_id, set()).add(key)
        return probe.verdict

    def flush(self) -> None:
        self.drain_results()
        submitted = []
        for key, ctx, generation in self._batch:
            probe = self._probes.get(key)
            if probe is not None and probe.generation == generation:
                probe.in_flight = True
                submitted.append((key, ctx, generation))
        self._batch = []
        if submitted:
            self._jobs.put(submitted)

    def drain_results(self) -> None:
        while True:
            try:
                posted = self._results.get_nowait()
            except queue.Empty:
                return
            for key, generation, verdict in posted:
                self._apply(key, generation, verdict)

    def _apply(self, key: bytes, generation: int, verdict: bool) -> None:
        probe = self._probes.get(key)
        if probe is None or probe.generation != generation:
            return  # stale: computed for a probe that is gone or superseded
        if not probe.requesters:
            del self._probes[key]
            return
        probe.verdict, probe.in_flight = verdict, False

    def cleanup(self, req_id: str) -> None:
        for key in self._by_request.pop(req_id, set()):
            probe = self._probes[key]
            probe.requesters.discard(req_id)
            if not probe.requesters and not probe.in_flight:
                del self._probes[key]

    def mark_present(self, keys: list[bytes]) -> None:
        for key in keys:
            probe = self._probes.get(key)
            if probe is None or probe.verdict is True:
                continue
            if not probe.requesters:
                del self._probes[key]
                continue
            probe.generation = next(self._generations)
            probe.verdict, probe.in_flight = True, False

    def shutdown(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=10)
        self.drain_results()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            groups: dict[str, list[tuple[bytes, Any, int]]] = {}
            for entry in job:
                groups.setdefault(entry[1].req_id, []).append(entry)
            posted = []
            for entries in groups.values():
                keys = [key for key, _, _ in entries]
                try:
                    answer = list(self.batch_lookup(keys, entries[0][1]))
                except Exception:
                    answer = []
                if len(answer) != len(keys):
                    answer = [False] * len(keys)
                posted += [(key, gen, v is True) for (key, _, gen), v in zip(entries, answer,
                                                                            strict=True)]
            self._results.put(posted)
