"""A user's hit cache: an IntEnum phase per key, a worker loop over ``iter(get, None)``,
mark_miss and mark_present (buggy twin).

The bug: mark_miss forces a False verdict on every probe of its keys, PENDING
and IN_FLIGHT ones too, which then receive a second verdict from the worker.
"""

from __future__ import annotations

import enum
import queue
import threading
from collections.abc import Iterable
from typing import Any


class Phase(enum.IntEnum):
    PENDING = 0
    IN_FLIGHT = 1
    RESOLVED = 2


class HitCacheManager:
    """vLLM's calls and tables; results posted per request group."""

    def __init__(self, tier_type: str) -> None:
        # key -> [generation, phase, verdict, requesters]
        self._lookup_state: dict[bytes, list[Any]] = {}
        self._req_keys: dict[str, set[bytes]] = {}
        self._lookup_batch: list[tuple[bytes, Any, int]] = []
        self._next = 0
        self._submitted: queue.Queue[list[tuple[bytes, Any, int]] | None] = queue.Queue()
        self._pending_results: queue.Queue[list[tuple[bytes, int, bool]]] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name=f"hits-{tier_type}",
                                        daemon=True)
        self._thread.start()

    def batch_lookup(self, keys: list[bytes], req_context: Any) -> Iterable[bool]:
        raise NotImplementedError("the deployment's tier")

    def _generation(self) -> int:
        self._next += 1
        return self._next

    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        self.drain_results()
        entry = self._lookup_state.get(key)
        if entry is None:
            entry = self._lookup_state[key] = [self._generation(), Phase.PENDING, None, set()]
            self._lookup_batch.append((key, req_context, entry[0]))
        entry[3].add(req_context.req_id)
        self._req_keys.setdefault(req_context.req_id, set()).add(key)
        verdict: bool | None = entry[2]
        return verdict

    def flush(self) -> None:
        self.drain_results()
        batch, self._lookup_batch = self._lookup_batch, []
        batch = [e for e in batch if self._lookup_state.get(e[0], [None])[0] == e[2]]
        for key, _, _ in batch:
            self._lookup_state[key][1] = Phase.IN_FLIGHT
        if batch:
            self._submitted.put(batch)

    def drain_results(self) -> None:
        while not self._pending_results.empty():
            for key, generation, verdict in self._pending_results.get_nowait():
                entry = self._lookup_state.get(key)
                if entry is None or entry[0] != generation:
                    continue
                if not entry[3]:
                    del self._lookup_state[key]
                else:
                    entry[1:3] = [Phase.RESOLVED, verdict]

    def cleanup(self, req_id: str) -> None:
        for key in self._req_keys.pop(req_id, ()):
            entry = self._lookup_state[key]
            entry[3].discard(req_id)
            if not entry[3] and entry[1] is not Phase.IN_FLIGHT:
                del self._lookup_state[key]

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            entry = self._lookup_state.get(key)
            if entry is not None:
                entry[1:3] = [Phase.RESOLVED, False]

    def mark_present(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            entry = self._lookup_state.get(key)
            if entry is None or entry[2] is True:
                continue
            if not entry[3]:
                del self._lookup_state[key]
            else:
                entry[0:3] = [self._generation(), Phase.RESOLVED, True]

    def shutdown(self) -> None:
        self._submitted.put(None)
        self._thread.join(timeout=10)
        self.drain_results()

    def _loop(self) -> None:
        for batch in iter(self._submitted.get, None):
            groups: dict[str, list[tuple[bytes, Any, int]]] = {}
            for item in batch:
                groups.setdefault(item[1].req_id, []).append(item)
            for items in groups.values():
                keys = [key for key, _, _ in items]
                try:
                    answer = [v if type(v) is bool else False
                              for v in self.batch_lookup(keys, items[0][1])]
                except Exception:
                    answer = []
                if len(answer) != len(keys):
                    answer = [False] * len(keys)
                self._pending_results.put([(k, g, v) for (k, _, g), v in zip(items, answer,
                                                                            strict=True)])
