"""A user's lookup manager whose calls have names of its own (fixed twin).

It says ``query`` for lookup, ``end_step`` for flush, ``release`` for cleanup,
``collect`` for drain_results, ``close`` for shutdown, ``invalidate`` for
mark_miss and ``tier_lookup`` for the tier call: the oracle drives it with
``--method``.  Fixed: a short answer is padded with False (a miss), as docs/protocol.md
says a key the tier did not answer properly gets.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Probe:
    generation: int
    verdict: bool | None = None
    sent: bool = False
    askers: set[str] = field(default_factory=set)


class RenamedProbeManager:
    """Scheduler-thread API under names of its own; one worker thread."""

    def __init__(self, tier_type: str) -> None:
        self._probes: dict[bytes, Probe] = {}
        self._asked: dict[str, set[bytes]] = {}
        self._step: list[tuple[bytes, Any, int]] = []
        self._next_generation = 0
        self._todo: queue.Queue[list[tuple[bytes, Any, int]] | None] = queue.Queue()
        self._done: queue.Queue[list[tuple[bytes, int, bool]]] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name=f"probe-{tier_type}",
                                        daemon=True)
        self._thread.start()

    def tier_lookup(self, keys: list[bytes], req_context: Any) -> list[bool]:
        raise NotImplementedError("the deployment's tier")

    def query(self, key: bytes, req_context: Any) -> bool | None:
        self.collect()
        probe = self._probes.get(key)
        if probe is None:
            probe = self._probes[key] = Probe(self._next_generation)
            self._step.append((key, req_context, self._next_generation))
            self._next_generation += 1
        probe.askers.add(req_context.req_id)
        self._asked.setdefault(req_context.req_id, set()).add(key)
        return probe.verdict

    def end_step(self) -> None:
        self.collect()
        step, self._step = self._step, []
        live = [e for e in step
                if (p := self._probes.get(e[0])) is not None and p.generation == e[2]]
        for key, _, _ in live:
            self._probes[key].sent = True
        if live:
            self._todo.put(live)

    def collect(self) -> None:
        while True:
            try:
                done = self._done.get_nowait()
            except queue.Empty:
                return
            for key, generation, verdict in done:
                probe = self._probes.get(key)
                if probe is None or probe.generation != generation:
                    continue
                if probe.askers:
                    probe.verdict, probe.sent = verdict, False
                else:
                    del self._probes[key]

    def invalidate(self, keys: list[bytes]) -> None:
        for key in keys:
            probe = self._probes.get(key)
            if probe is not None and probe.verdict is not None:
                probe.verdict = False

    def release(self, req_id: str) -> None:
        for key in self._asked.pop(req_id, set()):
            probe = self._probes[key]
            probe.askers.discard(req_id)
            if not probe.askers and not probe.sent:
                del self._probes[key]

    def close(self) -> None:
        self._todo.put(None)
        self._thread.join(timeout=10)
        self.collect()

    def _work(self) -> None:
        while (batch := self._todo.get()) is not None:
            groups: dict[str, list[tuple[bytes, Any, int]]] = {}
            for entry in batch:
                groups.setdefault(entry[1].req_id, []).append(entry)
            done = []
            for entries in groups.values():
                keys = [key for key, _, _ in entries]
                try:
                    answer = [v is True for v in self.tier_lookup(keys, entries[0][1])]
                except Exception:
                    answer = [False] * len(keys)
                answer = (answer + [False] * len(keys))[: len(keys)]  # pad a short one
                done += [(k, g, v) for (k, _, g), v in zip(entries, answer, strict=True)]
            self._done.put(done)
