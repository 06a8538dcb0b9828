"""A manager in the shape of vLLM 0.34's ``async_lookup.py``, and three forks' bugs.

``ForkManager`` keeps what a fork of vLLM's module keeps: the tables
``_lookup_state`` (key -> ``LookupState``), ``_req_keys`` (request -> keys) and
``_lookup_batch``; a ``SimpleQueue`` of batches to one worker thread; a
``SimpleQueue`` of results, one list per request group, posted as each group is
answered; draining at the first lookup after a flush, at flush and at shutdown;
the phase asserts of flush and drain, and the enqueue-once assert (a probe
receives one verdict).  Unlike vLLM 0.34 it gives False to every key of a tier
call that did not answer properly (docs/protocol.md, "A tier that raises or
answers short"), so it conforms.

Each copy below changes one method, as a public fork did:

- ``MarkMissBeforeEnqueueOnce``: ``mark_miss`` forces False on an IN_FLIGHT
  probe too (it leaves only a PENDING one alone); that probe's own result then
  trips the enqueue-once assert in ``drain_results`` (property 3, exactly once).
- ``CleanupCancelsSharedProbe``: ``cleanup`` cancels the probe its request was
  batched with while its tier call is not yet made, and deletes it so that the
  requests left re-probe the key under their own context; the probe was another
  request's too, which now probes the key a second time (property 8, no
  redundant probe).
- ``PoolTakesNextBatchEarly``: four pool threads call the tier; the dispatcher
  hands a batch's groups to the pool and takes the next batch at once, so a
  group's verdict can be posted after the next batch's (property 6: one worker
  posts the batch in hand before it takes the next).

This module is this project's own code, written from docs/protocol.md and a
reading of vLLM's module; no fork's code is copied.
"""

from __future__ import annotations

import enum
import logging
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger(__name__)


class ReqContext(Protocol):
    @property
    def req_id(self) -> str: ...


class LookupPhase(enum.Enum):
    PENDING = enum.auto()  # in _lookup_batch, not submitted
    IN_FLIGHT = enum.auto()  # submitted to the worker, no verdict applied
    RESOLVED = enum.auto()  # a verdict is applied


@dataclass(slots=True)
class LookupState:
    generation: int
    phase: LookupPhase = LookupPhase.PENDING
    result: bool | None = None
    request_ids: set[str] = field(default_factory=set)


Entry = tuple[bytes, Any, int]  # key, request context, generation
Result = tuple[bytes, int, bool]  # key, generation, verdict
Group = tuple[Any, list[tuple[bytes, int]]]  # request context, (key, generation) of its keys


class ForkManager(ABC):
    """vLLM 0.34's manager as its forks start from, with a proper answer rule: correct."""

    def __init__(self, tier_type: str) -> None:
        self._tier_type = tier_type
        self._lookup_state: dict[bytes, LookupState] = {}
        self._req_keys: dict[str, set[bytes]] = {}
        self._next_generation = 0
        self._lookup_batch: list[Entry] = []
        self._lookup_queue: queue.SimpleQueue[list[Entry] | None] = queue.SimpleQueue()
        self._pending_results: queue.SimpleQueue[list[Result]] = queue.SimpleQueue()
        self._need_to_drain = False
        self._thread = threading.Thread(
            target=self._worker, name=f"fork_lookup_{tier_type}", daemon=True
        )
        self._thread.start()

    @abstractmethod
    def batch_lookup(self, keys: list[bytes], req_context: Any) -> Iterable[bool]:
        """One verdict per key; called on the worker thread."""

    # -- scheduler thread ------------------------------------------------------

    def lookup(self, key: bytes, req_context: ReqContext) -> bool | None:
        if self._need_to_drain:
            self.drain_results()
            self._need_to_drain = False
        req_id = req_context.req_id
        state = self._lookup_state.get(key)
        if state is None:
            state = LookupState(generation=self._next_generation)
            self._next_generation += 1
            self._lookup_state[key] = state
            self._lookup_batch.append((key, req_context, state.generation))
        state.request_ids.add(req_id)
        self._req_keys.setdefault(req_id, set()).add(key)
        return state.result

    def flush(self) -> None:
        self.drain_results()
        self._need_to_drain = True
        batch, self._lookup_batch = self._lookup_batch, []
        in_flight: list[Entry] = []
        for key, req_context, generation in batch:
            state = self._lookup_state.get(key)
            if state is None or state.generation != generation:
                continue  # cleaned up or superseded since it was batched
            assert state.phase is LookupPhase.PENDING
            state.phase = LookupPhase.IN_FLIGHT
            in_flight.append((key, req_context, generation))
        if in_flight:
            self._submit(in_flight)

    def _submit(self, batch: list[Entry]) -> None:
        self._lookup_queue.put(batch)

    def drain_results(self) -> None:
        while True:
            try:
                results = self._pending_results.get_nowait()
            except queue.Empty:
                return
            for key, generation, verdict in results:
                state = self._lookup_state.get(key)
                if state is None or state.generation != generation:
                    continue  # stale
                if not state.request_ids:
                    del self._lookup_state[key]  # an orphan's own result deletes it
                    continue
                assert state.phase is LookupPhase.IN_FLIGHT
                assert state.result is None, (
                    "cached key received a second lookup result; the enqueue-once "
                    "invariant is broken"
                )
                state.result = verdict
                state.phase = LookupPhase.RESOLVED

    def mark_miss(self, keys: Collection[bytes]) -> None:
        for key in keys:
            state = self._lookup_state.get(key)
            if state is not None and state.phase is LookupPhase.RESOLVED:
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
            state.phase = LookupPhase.RESOLVED

    def cleanup(self, req_id: str) -> None:
        for key in self._req_keys.pop(req_id, ()):
            state = self._lookup_state.get(key)
            if state is None:
                continue
            state.request_ids.discard(req_id)
            if not state.request_ids and state.phase is not LookupPhase.IN_FLIGHT:
                del self._lookup_state[key]

    def shutdown(self) -> None:
        self._lookup_queue.put(None)
        self._thread.join(timeout=10)
        self.drain_results()

    # -- worker thread ---------------------------------------------------------

    def _worker(self) -> None:
        while (batch := self._lookup_queue.get()) is not None:
            for group in self._groups(batch):
                self._pending_results.put(self._probe(group))

    def _groups(self, batch: list[Entry]) -> list[Group]:
        groups: dict[str, Group] = {}
        for key, req_context, generation in batch:
            groups.setdefault(req_context.req_id, (req_context, []))[1].append((key, generation))
        return list(groups.values())

    def _probe(self, group: Group) -> list[Result]:
        """One tier call; a key without a proper answer gets False."""
        req_context, entries = group
        keys = [key for key, _ in entries]
        try:
            hits = list(self.batch_lookup(keys, req_context))
        except Exception as exc:  # the tier is foreign code
            log.warning("batch_lookup failed on tier %s: %r", self._tier_type, exc)
            hits = []
        if len(hits) != len(keys):
            hits = [False] * len(keys)
        return [(key, gen, hit is True) for (key, gen), hit in zip(entries, hits, strict=True)]


class MarkMissBeforeEnqueueOnce(ForkManager):
    """A fork's mark_miss, half fixed: it leaves a PENDING probe alone (flush would trip
    on it) but forces False on an IN_FLIGHT one, whose own result then trips the
    enqueue-once assert in drain_results (property 3)."""

    def mark_miss(self, keys: Collection[bytes]) -> None:
        for key in keys:
            state = self._lookup_state.get(key)
            if state is not None and state.phase is not LookupPhase.PENDING:
                state.result = False


class CleanupCancelsSharedProbe(ForkManager):
    """A fork whose cleanup cancels the queued probe its request was batched with (that
    request's context is gone) and deletes it, so the requests left probe the key again
    under their own: a redundant probe of a key another request shared (property 8)."""

    def __init__(self, tier_type: str) -> None:
        self._cancel_lock = threading.Lock()
        self._queued: dict[tuple[bytes, int], str] = {}  # (key, generation) -> batched for
        super().__init__(tier_type)

    def _submit(self, batch: list[Entry]) -> None:
        with self._cancel_lock:
            self._queued.update({(key, gen): ctx.req_id for key, ctx, gen in batch})
        super()._submit(batch)

    def cleanup(self, req_id: str) -> None:
        for key in list(self._req_keys.get(req_id, ())):
            state = self._lookup_state.get(key)
            if state is None or state.phase is not LookupPhase.IN_FLIGHT:
                continue
            if len(state.request_ids) > 1 and self._cancel(key, state.generation, req_id):
                del self._lookup_state[key]  # the bug: the others shared this probe
        super().cleanup(req_id)

    def _cancel(self, key: bytes, generation: int, req_id: str) -> bool:
        """Cancel the (key, generation) entry batched for ``req_id``, if the worker has
        not started its group's tier call."""
        with self._cancel_lock:
            if self._queued.get((key, generation)) != req_id:
                return False
            del self._queued[key, generation]
            return True

    def _probe(self, group: Group) -> list[Result]:
        req_context, entries = group
        with self._cancel_lock:  # the entries not cancelled are probed now
            kept = [(k, g) for k, g in entries if self._queued.pop((k, g), None) is not None]
        return super()._probe((req_context, kept)) if kept else []

    def _worker(self) -> None:
        while (batch := self._lookup_queue.get()) is not None:
            for group in self._groups(batch):
                if results := self._probe(group):
                    self._pending_results.put(results)


class PoolTakesNextBatchEarly(ForkManager):
    """A fork whose tier calls run on four pool threads: the worker hands each group of a
    batch to the pool and takes the next batch without waiting for them, so a verdict
    can be posted after the next batch's (property 6)."""

    POOL = 4

    def __init__(self, tier_type: str) -> None:
        self._pool = ThreadPoolExecutor(self.POOL, thread_name_prefix=f"fork_pool_{tier_type}")
        super().__init__(tier_type)

    def _worker(self) -> None:
        while (batch := self._lookup_queue.get()) is not None:
            for group in self._groups(batch):
                self._pool.submit(self._probe_and_post, group)  # the bug: no join
        self._pool.shutdown(wait=True)  # shutdown: the groups in hand still post

    def _probe_and_post(self, group: Group) -> None:
        self._pending_results.put(self._probe(group))
