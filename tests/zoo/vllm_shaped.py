"""A correct vLLM-shaped async lookup manager, the baseline of the mutant zoo.

It keeps vLLM's attribute names (``_lookup_state``, ``_req_keys``,
``_lookup_batch``) so that the oracle's leak check can read its tables, and
splits each protocol step into a small overridable method so that a mutant
changes exactly one rule.  It is deliberately plain: no observer, no health
check; ``reference/`` is the production-grade implementation.
"""

from __future__ import annotations

import enum
import logging
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger(__name__)


class HasReqId(Protocol):
    @property
    def req_id(self) -> str: ...


class Phase(enum.Enum):
    PENDING = 1
    IN_FLIGHT = 2
    RESOLVED = 3


@dataclass
class ProbeState:
    generation: int
    phase: Phase = Phase.PENDING
    result: bool | None = None
    request_ids: set[str] = field(default_factory=set)


BatchEntry = tuple[bytes, Any, int]  # key, req_context, generation
ResultEntry = tuple[bytes, int, bool]  # key, generation, verdict


class VllmShapedManager(ABC):
    """Scheduler-thread API plus one worker thread; correct by docs/protocol.md."""

    def __init__(self, tier_type: str) -> None:
        self._tier_type = tier_type
        self._lookup_state: dict[bytes, ProbeState] = {}
        self._req_keys: dict[str, set[bytes]] = {}
        self._lookup_batch: list[BatchEntry] = []
        self._next_generation = 0
        self._lookup_queue: queue.SimpleQueue[list[BatchEntry] | None] = queue.SimpleQueue()
        self._pending_results: queue.SimpleQueue[list[ResultEntry]] = queue.SimpleQueue()
        self._need_to_drain = False
        self._thread = threading.Thread(
            target=self._worker, name=f"lookup-{tier_type}", daemon=True
        )
        self._thread.start()

    @abstractmethod
    def batch_lookup(self, keys: list[bytes], req_context: Any) -> Iterable[bool]:
        """One verdict per key; called on the worker thread."""

    # -- scheduler thread ------------------------------------------------------

    def lookup(self, key: bytes, req_context: HasReqId) -> bool | None:
        if self._need_to_drain:
            self.drain_results()
        state = self._lookup_state.get(key)
        if state is None:
            state = self._new_probe(key, req_context)
        state.request_ids.add(req_context.req_id)
        self._req_keys.setdefault(req_context.req_id, set()).add(key)
        return state.result

    def _new_probe(self, key: bytes, req_context: HasReqId) -> ProbeState:
        state = ProbeState(self._next_generation)
        self._next_generation += 1
        self._lookup_state[key] = state
        self._lookup_batch.append((key, req_context, state.generation))
        return state

    def flush(self) -> None:
        self.drain_results()
        self._need_to_drain = True
        batch, self._lookup_batch = self._lookup_batch, []
        submitted = self._revalidate(batch)
        for key, _, _ in submitted:
            self._lookup_state[key].phase = Phase.IN_FLIGHT
        if submitted:
            self._lookup_queue.put(submitted)

    def _revalidate(self, batch: list[BatchEntry]) -> list[BatchEntry]:
        return [
            (key, ctx, gen)
            for key, ctx, gen in batch
            if (state := self._lookup_state.get(key)) is not None and state.generation == gen
        ]

    def drain_results(self) -> None:
        self._need_to_drain = False
        while True:
            try:
                results = self._pending_results.get_nowait()
            except queue.Empty:
                return
            for key, generation, verdict in results:
                self._apply_result(key, generation, verdict)

    def _apply_result(self, key: bytes, generation: int, verdict: bool) -> None:
        state = self._lookup_state.get(key)
        if state is None or state.generation != generation:
            return  # stale
        if not state.request_ids:
            del self._lookup_state[key]  # orphan
            return
        assert state.phase is Phase.IN_FLIGHT, "a probe received a second verdict"
        state.result = verdict
        state.phase = Phase.RESOLVED

    def cleanup(self, req_id: str) -> None:
        for key in self._req_keys.pop(req_id, ()):
            state = self._lookup_state[key]
            state.request_ids.discard(req_id)
            if not state.request_ids and state.phase is not Phase.IN_FLIGHT:
                del self._lookup_state[key]

    def mark_miss(self, keys: Collection[bytes]) -> None:
        for key in keys:
            state = self._lookup_state.get(key)
            if state is not None and state.phase is Phase.RESOLVED:
                state.result = False

    def mark_present(self, keys: Collection[bytes]) -> None:
        for key in keys:
            state = self._lookup_state.get(key)
            if state is None or state.result is True:
                continue
            if not state.request_ids:
                del self._lookup_state[key]
                continue
            state.generation = self._next_generation
            self._next_generation += 1
            state.result = True
            state.phase = Phase.RESOLVED

    def shutdown(self) -> None:
        self._lookup_queue.put(None)
        self._thread.join(timeout=10)
        self.drain_results()

    # -- worker thread ---------------------------------------------------------

    def _worker(self) -> None:
        while (batch := self._lookup_queue.get()) is not None:
            groups: dict[str, tuple[Any, list[tuple[bytes, int]]]] = {}
            for key, ctx, gen in batch:
                groups.setdefault(ctx.req_id, (ctx, []))[1].append((key, gen))
            results: list[ResultEntry] = []
            for ctx, entries in groups.values():
                keys = [key for key, _ in entries]
                verdicts = self._probe(keys, ctx)
                results.extend(self._pair(entries, verdicts))
            self._pending_results.put(results)

    def _probe(self, keys: list[bytes], ctx: Any) -> list[bool]:
        """Call the tier; every misbehaviour becomes misses for the whole call."""
        try:
            answer = list(self.batch_lookup(keys, ctx))
        except Exception as exc:  # the tier is foreign code: survive anything
            log.warning("tier %s failed on %d keys: %r", self._tier_type, len(keys), exc)
            return [False] * len(keys)
        if len(answer) != len(keys):
            log.warning("tier %s answered %d of %d keys", self._tier_type, len(answer), len(keys))
            return [False] * len(keys)
        return [v if isinstance(v, bool) else False for v in answer]

    def _pair(self, entries: list[tuple[bytes, int]], verdicts: list[bool]) -> list[ResultEntry]:
        return [(key, gen, v) for (key, gen), v in zip(entries, verdicts, strict=True)]
