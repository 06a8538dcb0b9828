"""A user's lookup manager without cleanup() (fixed twin).

It never forgets a request: a probe keeps its verdict until ``mark_present``
or ``mark_miss`` changes it, and the class has no ``cleanup`` at all (the
oracle drives it with ``--method cleanup=none`` and never generates one).
Fixed: a short answer is padded with False (a miss), as docs/protocol.md
says a key the tier did not answer properly gets.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, NamedTuple


class Known(NamedTuple):
    generation: int
    in_flight: bool
    verdict: bool | None


class NoCleanupManager:
    """Scheduler-thread API without cleanup; one worker thread."""

    def __init__(self, tier_type: str) -> None:
        self._known: dict[bytes, Known] = {}
        self._batch: list[tuple[bytes, Any, int]] = []
        self._gen = 0
        self._submitted: queue.Queue[list[tuple[bytes, Any, int]] | None] = queue.Queue()
        self._answers: queue.Queue[list[tuple[bytes, int, bool]]] = queue.Queue()
        self._worker = threading.Thread(target=self._loop, name=f"{tier_type}-probe",
                                        daemon=True)
        self._worker.start()

    def batch_lookup(self, keys: list[bytes], req_context: Any) -> list[bool]:
        raise NotImplementedError("the deployment's tier")

    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        self.drain_results()
        known = self._known.get(key)
        if known is None:
            known = self._known[key] = Known(self._gen, False, None)
            self._batch.append((key, req_context, self._gen))
            self._gen += 1
        return known.verdict

    def flush(self) -> None:
        self.drain_results()
        sent = [(k, c, g) for k, c, g in self._batch
                if (n := self._known.get(k)) is not None and n.generation == g]
        self._batch = []
        for key, _, _ in sent:
            self._known[key] = self._known[key]._replace(in_flight=True)
        if sent:
            self._submitted.put(sent)

    def drain_results(self) -> None:
        while True:
            try:
                answers = self._answers.get_nowait()
            except queue.Empty:
                return
            for key, gen, verdict in answers:
                known = self._known.get(key)
                if known is not None and known.generation == gen:
                    self._known[key] = Known(gen, False, verdict)

    def mark_present(self, keys: list[bytes]) -> None:
        for key in keys:
            known = self._known.get(key)
            if known is not None and known.verdict is not True:
                self._known[key] = Known(self._gen, False, True)
                self._gen += 1

    def shutdown(self) -> None:
        self._submitted.put(None)
        self._worker.join(timeout=10)
        self.drain_results()

    def _loop(self) -> None:
        while (batch := self._submitted.get()) is not None:
            out = []
            for req_id in dict.fromkeys(c.req_id for _, c, _ in batch):
                group = [(k, c, g) for k, c, g in batch if c.req_id == req_id]
                try:
                    got = [v is True for v in self.batch_lookup([k for k, _, _ in group],
                                                                group[0][1])]
                except Exception:
                    got = [False] * len(group)
                got = (got + [False] * len(group))[: len(group)]  # pad a short answer
                out += [(k, g, v) for (k, _, g), v in zip(group, got, strict=True)]
            self._answers.put(out)
