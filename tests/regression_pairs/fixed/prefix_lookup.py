"""A user's prefix-cache lookup manager in vLLM 0.34's shape (fixed twin).

Fixed: a tier that answers fewer values than keys no longer strands the keys
it left out: the short answer is padded with False (a miss), as docs/protocol.md
says: a key the tier did not answer properly gets False.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

PENDING, IN_FLIGHT, RESOLVED = "pending", "in_flight", "resolved"


class _State:
    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.phase = PENDING
        self.result: bool | None = None
        self.requests: set[str] = set()


class PrefixLookupManager:
    """Scheduler-thread API; one worker thread calls ``batch_lookup``."""

    def __init__(self, tier_type: str) -> None:
        self._lookup_state: dict[bytes, _State] = {}
        self._req_keys: dict[str, set[bytes]] = {}
        self._lookup_batch: list[tuple[bytes, Any, int]] = []
        self._generation = 0
        self._lookup_queue: queue.Queue[list[tuple[bytes, Any, int]] | None] = queue.Queue()
        self._pending_results: queue.Queue[list[tuple[bytes, int, bool]]] = queue.Queue()
        self._worker = threading.Thread(target=self._run, name=f"{tier_type}-lookup",
                                        daemon=True)
        self._worker.start()

    def batch_lookup(self, keys: list[bytes], req_context: Any) -> list[bool]:
        raise NotImplementedError("the deployment's tier")

    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        self.drain_results()
        state = self._lookup_state.get(key)
        if state is None:
            state = self._lookup_state[key] = _State(self._generation)
            self._lookup_batch.append((key, req_context, self._generation))
            self._generation += 1
        state.requests.add(req_context.req_id)
        self._req_keys.setdefault(req_context.req_id, set()).add(key)
        return state.result

    def flush(self) -> None:
        self.drain_results()
        batch, self._lookup_batch = self._lookup_batch, []
        live = []
        for key, ctx, generation in batch:
            state = self._lookup_state.get(key)
            if state is not None and state.generation == generation:
                state.phase = IN_FLIGHT
                live.append((key, ctx, generation))
        if live:
            self._lookup_queue.put(live)

    def drain_results(self) -> None:
        while True:
            try:
                results = self._pending_results.get_nowait()
            except queue.Empty:
                return
            for key, generation, verdict in results:
                state = self._lookup_state.get(key)
                if state is None or state.generation != generation:
                    continue
                if not state.requests:
                    del self._lookup_state[key]
                    continue
                state.result, state.phase = verdict, RESOLVED

    def cleanup(self, req_id: str) -> None:
        for key in self._req_keys.pop(req_id, set()):
            state = self._lookup_state[key]
            state.requests.discard(req_id)
            if not state.requests and state.phase != IN_FLIGHT:
                del self._lookup_state[key]

    def shutdown(self) -> None:
        self._lookup_queue.put(None)
        self._worker.join(timeout=10)
        self.drain_results()

    def _run(self) -> None:
        while (batch := self._lookup_queue.get()) is not None:
            by_request: dict[str, list[tuple[bytes, Any, int]]] = {}
            for entry in batch:
                by_request.setdefault(entry[1].req_id, []).append(entry)
            results = []
            for entries in by_request.values():
                keys = [key for key, _, _ in entries]
                try:
                    answer = [v is True for v in self.batch_lookup(keys, entries[0][1])]
                except Exception:
                    answer = [False] * len(keys)
                answer = (answer + [False] * len(keys))[: len(keys)]  # pad a short answer
                results += [(key, gen, hit) for (key, _, gen), hit in zip(entries, answer,
                                                                           strict=True)]
            self._pending_results.put(results)
