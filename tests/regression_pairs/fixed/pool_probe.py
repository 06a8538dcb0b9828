"""A user's lookup manager whose tier calls run on a pool of threads (fixed twin).

The constructor takes the pool's size (``n_lookup_threads``, as some copies of
vLLM's manager do: the oracle passes it with ``--impl-arg``).  A dispatcher
thread takes each batch, hands its per-request groups to the pool, posts each
group's results as soon as it has them, and takes the next batch only once
every group of the last one is posted (so, seen from outside, the pool is the
protocol's one worker).  Fixed: a short answer is padded with False (a miss), as docs/protocol.md
says a key the tier did not answer properly gets.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from typing import Any

Entry = tuple[bytes, Any, int]  # key, request context, generation


@dataclass
class Slot:
    generation: int
    in_flight: bool = False
    verdict: bool | None = None
    owners: set[str] = field(default_factory=set)


class PoolProbeManager:
    """Scheduler-thread API; a dispatcher and ``n_lookup_threads`` pool threads."""

    def __init__(self, tier_type: str, *, n_lookup_threads: int) -> None:
        self.slots: dict[bytes, Slot] = {}
        self.keys_of: dict[str, set[bytes]] = {}
        self.step_batch: list[Entry] = []
        self.generation = 0
        self.batches: queue.Queue[list[Entry] | None] = queue.Queue()
        self.groups: queue.Queue[tuple[list[Entry], threading.Semaphore] | None] = (
            queue.Queue())
        self.posted: queue.Queue[list[tuple[bytes, int, bool]]] = queue.Queue()
        self.pool = [threading.Thread(target=self._probe_groups, name=f"pool-{i}",
                                      daemon=True) for i in range(n_lookup_threads)]
        self.dispatcher = threading.Thread(target=self._dispatch,
                                           name=f"{tier_type}-dispatch", daemon=True)
        for thread in (*self.pool, self.dispatcher):
            thread.start()

    def batch_lookup(self, keys: list[bytes], req_context: Any) -> list[bool]:
        raise NotImplementedError("the deployment's tier")

    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        self.drain_results()
        slot = self.slots.get(key)
        if slot is None:
            slot = self.slots[key] = Slot(self.generation)
            self.step_batch.append((key, req_context, self.generation))
            self.generation += 1
        slot.owners.add(req_context.req_id)
        self.keys_of.setdefault(req_context.req_id, set()).add(key)
        return slot.verdict

    def flush(self) -> None:
        self.drain_results()
        live = [e for e in self.step_batch
                if (s := self.slots.get(e[0])) is not None and s.generation == e[2]]
        self.step_batch = []
        for key, _, _ in live:
            self.slots[key].in_flight = True
        if live:
            self.batches.put(live)

    def drain_results(self) -> None:
        while True:
            try:
                results = self.posted.get_nowait()
            except queue.Empty:
                return
            for key, generation, verdict in results:
                slot = self.slots.get(key)
                if slot is None or slot.generation != generation:
                    continue
                if slot.owners:
                    slot.verdict, slot.in_flight = verdict, False
                else:
                    del self.slots[key]

    def cleanup(self, req_id: str) -> None:
        for key in self.keys_of.pop(req_id, set()):
            slot = self.slots[key]
            slot.owners.discard(req_id)
            if not slot.owners and not slot.in_flight:
                del self.slots[key]

    def shutdown(self) -> None:
        self.batches.put(None)
        self.dispatcher.join(timeout=10)
        for _ in self.pool:
            self.groups.put(None)
        for thread in self.pool:
            thread.join(timeout=10)
        self.drain_results()

    def _dispatch(self) -> None:
        while (batch := self.batches.get()) is not None:
            by_request: dict[str, list[Entry]] = {}
            for entry in batch:
                by_request.setdefault(entry[1].req_id, []).append(entry)
            finished = threading.Semaphore(0)
            for group in by_request.values():
                self.groups.put((group, finished))
            for _ in by_request:  # the next batch only once every group is posted
                finished.acquire()

    def _probe_groups(self) -> None:
        while (item := self.groups.get()) is not None:
            group, finished = item
            try:
                keys = [key for key, _, _ in group]
                try:
                    answer = [v is True for v in self.batch_lookup(keys, group[0][1])]
                except Exception:
                    answer = [False] * len(keys)
                answer = (answer + [False] * len(keys))[: len(keys)]  # pad a short one
                self.posted.put([(k, g, v) for (k, _, g), v in zip(group, answer,
                                                                   strict=True)])
            finally:
                finished.release()
