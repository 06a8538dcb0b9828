"""A user's lookup manager whose cleanup takes the request context (buggy twin).

``cleanup(req_context)`` is given the same object ``lookup`` was, as some
copies of vLLM's manager do: the oracle drives it with ``--cleanup-arg
context``.  Probe states are small lists ``[generation, phase, verdict,
requests]``.  The bug is vLLM 0.34's: zip() over the keys and a short answer
leaves the keys it drops without a result, IN_FLIGHT forever.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

GEN, PHASE, VERDICT, REQUESTS = range(4)


class ContextReleaseManager:
    """Scheduler-thread API; one worker thread calls ``batch_lookup``."""

    def __init__(self, tier_type: str) -> None:
        self.states: dict[bytes, list[Any]] = {}
        self.by_request: dict[str, list[bytes]] = {}
        self.batch: list[tuple[bytes, Any, int]] = []
        self.counter = 0
        self.requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.results: queue.Queue[list[tuple[bytes, int, bool]]] = queue.Queue()
        self.worker = threading.Thread(target=self._serve, name=f"{tier_type}-worker",
                                       daemon=True)
        self.worker.start()

    def batch_lookup(self, keys: list[bytes], req_context: Any) -> list[bool]:
        raise NotImplementedError("the deployment's tier")

    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        self.drain_results()
        state = self.states.get(key)
        if state is None:
            state = self.states[key] = [self.counter, "pending", None, []]
            self.batch.append((key, req_context, self.counter))
            self.counter += 1
        if req_context.req_id not in state[REQUESTS]:
            state[REQUESTS].append(req_context.req_id)
        keys = self.by_request.setdefault(req_context.req_id, [])
        if key not in keys:
            keys.append(key)
        verdict: bool | None = state[VERDICT]
        return verdict

    def flush(self) -> None:
        self.drain_results()
        sent = []
        for key, ctx, gen in self.batch:
            state = self.states.get(key)
            if state is not None and state[GEN] == gen:
                state[PHASE] = "in_flight"
                sent.append((key, ctx, gen))
        self.batch = []
        if sent:
            self.requests.put(sent)

    def drain_results(self) -> None:
        while not self.results.empty():
            for key, gen, verdict in self.results.get_nowait():
                state = self.states.get(key)
                if state is None or state[GEN] != gen:
                    continue
                if state[REQUESTS]:
                    state[VERDICT], state[PHASE] = verdict, "resolved"
                else:
                    del self.states[key]

    def cleanup(self, req_context: Any) -> None:
        req_id = req_context.req_id
        for key in self.by_request.pop(req_id, []):
            state = self.states[key]
            state[REQUESTS].remove(req_id)
            if not state[REQUESTS] and state[PHASE] != "in_flight":
                del self.states[key]

    def shutdown(self) -> None:
        self.requests.put(None)
        self.worker.join(timeout=10)
        self.drain_results()

    def _serve(self) -> None:
        for batch in iter(self.requests.get, None):
            posted = []
            for req_id in dict.fromkeys(ctx.req_id for _, ctx, _ in batch):
                group = [(k, c, g) for k, c, g in batch if c.req_id == req_id]
                try:
                    got = [v is True for v in self.batch_lookup([k for k, _, _ in group],
                                                                group[0][1])]
                except Exception:
                    got = [False] * len(group)
                # zip() stops at the shorter list: a key left out gets no result
                posted += [(k, g, v) for (k, _, g), v in zip(group, got)]  # noqa: B905
            self.results.put(posted)
