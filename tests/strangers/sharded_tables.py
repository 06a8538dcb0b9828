"""An async lookup manager with sharded tables, written from docs/protocol.md alone.

Written by an outside engineer from docs/protocol.md (plus docs/properties.md and the
oracle.md sections on the class shape the checker drives), before reading any of the
checker's code, its spec, its reference or its other strangers.

Style: the probe table is a fixed list of N plain dicts (``self._shards``), a key going to
shard ``zlib.crc32(key) % N``, each probe a mutable ``__slots__`` record; the request index
is sharded the same way by ``crc32`` of the request id (``self._index_shards``). The shard
lists are never shrunk or replaced. The step's batch is a dict request id -> list of
(key, generation, context), in insertion order. One worker thread is fed by a
``queue.Queue``; it posts each batch's results as one tuple onto a second ``queue.Queue``
that the scheduler drains with ``get_nowait``.

Decisions taken where the protocol leaves room (docs/protocol.md, "What the spec decides
where the protocol leaves room", and the sections named):

1. When a lookup drains ("The operations", ``lookup``): only the first lookup after a
   flush applies posted results (a ``_drain_due`` flag set by every flush, cleared by
   every application of posted results). Flush and drain_results always apply them.
2. Order of request groups ("The operations", ``probe_group``): the batch's insertion
   order of request ids, i.e. the order in which each request first added an entry to
   the step's batch. Each group is called with the context stored in its first entry
   (every entry of a group belongs to the same request id).
3. A failed tier call ("A tier that raises or answers short"): like the spec's
   ``ProbeGroup(None)``, every key of the call gets ``False`` when the call raises, when
   its answer is not iterable or raises while being consumed, when it has another length
   than the keys, or when any element is not exactly a ``bool``. The answer is consumed
   with ``islice`` up to len(keys) + 1 elements, so an endless iterable cannot hang the
   worker. Any ``BaseException`` from the tier is caught: nothing a tier does ends the
   worker ("Survival").
4. Cleanup and the batch ("Cleanup before flush"): cleanup does not touch the batch;
   entries it made stale are dropped by the flush's generation check.
5. Shutdown ("The operations", ``shutdown``): untaken batches are removed from the work
   queue, then a stop sentinel is queued, so the worker finishes only the batch in hand;
   the step's batch is dropped; the join is bounded (``SHUTDOWN_JOIN_SECONDS``); then
   posted results are applied. A second shutdown does nothing. Any other call after it
   raises ``ManagerClosedError``. Probes left IN_FLIGHT by dropped batches are kept, as
   the spec keeps them.
6. mark_present ("The operations", "mark_present over an in-flight probe"): keys are
   taken in the order given; a key without state is ignored; a state already ``True``
   is left alone; a state without requesters is deleted; otherwise the same record gets
   a new generation, verdict ``True``, phase RESOLVED.
7. A result whose generation matches but whose probe is not IN_FLIGHT is treated as
   stale too (it cannot happen if the rest is right; it is a belt-and-braces check).
8. Posting ("Who does what"): the worker posts one tuple per batch, after every group
   of that batch was probed, and takes the next batch only after posting.
"""

from __future__ import annotations

import enum
import itertools
import queue
import threading
import zlib
from collections.abc import Iterable, Sequence
from typing import Protocol

from asynclookup.reference import ManagerClosedError

SHUTDOWN_JOIN_SECONDS = 5.0


class RequestContext(Protocol):
    """What lookup is given: an object carrying the request id."""

    @property
    def req_id(self) -> str: ...


Entry = tuple[bytes, int, RequestContext]  # (key, generation, context)
Batch = dict[str, list[Entry]]  # request id -> its entries, in insertion order
Result = tuple[bytes, int, bool]  # (key, generation, verdict)


class Phase(enum.Enum):
    PENDING = "PENDING"
    IN_FLIGHT = "IN_FLIGHT"
    RESOLVED = "RESOLVED"


class Probe:
    """One existence check of one key (docs/protocol.md, "Vocabulary")."""

    __slots__ = ("generation", "phase", "requesters", "verdict")

    def __init__(self, generation: int, requester: str) -> None:
        self.generation: int = generation
        self.phase: Phase = Phase.PENDING
        self.verdict: bool | None = None
        self.requesters: set[str] = {requester}


class ShardedManager:
    """A vLLM-shaped async lookup manager whose probe table and index are sharded."""

    def __init__(self, tier_type: str = "memory", n_shards: int = 4) -> None:
        if n_shards < 1:
            raise ValueError("n_shards must be at least 1")
        self.tier_type = tier_type
        self._n_shards = n_shards
        self._shards: list[dict[bytes, Probe]] = [{} for _ in range(n_shards)]
        self._index_shards: list[dict[str, set[bytes]]] = [{} for _ in range(n_shards)]
        self._batch: Batch = {}
        self._generations = itertools.count()
        self._drain_due = False
        self._closed = False
        self._work: queue.Queue[Batch | None] = queue.Queue()
        self._results: queue.Queue[tuple[Result, ...]] = queue.Queue()
        self._worker = threading.Thread(
            target=self._run_worker, name="sharded-lookup-worker", daemon=True
        )
        self._worker.start()

    # ----------------------------------------------------------------- the tier

    def batch_lookup(self, keys: list[bytes], req_context: RequestContext) -> Iterable[object]:
        """The tier call, made on the worker thread; a deployment overrides it."""
        raise NotImplementedError("override batch_lookup with the secondary tier's call")

    # ------------------------------------------------------------ table helpers

    def _shard_of(self, key: bytes) -> dict[bytes, Probe]:
        return self._shards[zlib.crc32(key) % self._n_shards]

    def _index_of(self, req_id: str) -> dict[str, set[bytes]]:
        return self._index_shards[zlib.crc32(req_id.encode("utf-8")) % self._n_shards]

    def _check_open(self) -> None:
        if self._closed:
            raise ManagerClosedError("the manager was shut down")

    # -------------------------------------------------------- scheduler calls

    def lookup(self, key: bytes, req_context: RequestContext) -> bool | None:
        """Ask whether key is in the tier for this request; None until known."""
        self._check_open()
        if self._drain_due:
            self._apply_posted()
        req_id = req_context.req_id
        shard = self._shard_of(key)
        probe = shard.get(key)
        if probe is None:
            generation = next(self._generations)
            probe = Probe(generation, req_id)
            shard[key] = probe
            self._batch.setdefault(req_id, []).append((key, generation, req_context))
        else:
            probe.requesters.add(req_id)
        self._index_of(req_id).setdefault(req_id, set()).add(key)
        return probe.verdict if probe.phase is Phase.RESOLVED else None

    def flush(self) -> None:
        """End of a step: apply posted results, submit the live part of the batch."""
        self._check_open()
        self._apply_posted()
        submitted: Batch = {}
        for req_id, entries in self._batch.items():
            for key, generation, ctx in entries:
                probe = self._shard_of(key).get(key)
                if (
                    probe is None
                    or probe.generation != generation
                    or probe.phase is not Phase.PENDING
                ):
                    continue  # stale: cleaned up or superseded since it was batched
                probe.phase = Phase.IN_FLIGHT
                submitted.setdefault(req_id, []).append((key, generation, ctx))
        self._batch.clear()
        if submitted:
            self._work.put(submitted)
        self._drain_due = True

    def cleanup(self, req_id: str) -> None:
        """The request finished or was cancelled: forget it everywhere."""
        self._check_open()
        keys = self._index_of(req_id).pop(req_id, set())
        for key in keys:
            shard = self._shard_of(key)
            probe = shard.get(key)
            if probe is None:
                continue
            probe.requesters.discard(req_id)
            if not probe.requesters and probe.phase is not Phase.IN_FLIGHT:
                del shard[key]

    def mark_miss(self, keys: Sequence[bytes]) -> None:
        """A load failed: RESOLVED probes of these keys become False."""
        self._check_open()
        for key in keys:
            probe = self._shard_of(key).get(key)
            if probe is not None and probe.phase is Phase.RESOLVED:
                probe.verdict = False

    def mark_present(self, keys: Sequence[bytes]) -> None:
        """A store succeeded: newer than any probe of these keys."""
        self._check_open()
        for key in keys:
            shard = self._shard_of(key)
            probe = shard.get(key)
            if probe is None or (probe.phase is Phase.RESOLVED and probe.verdict is True):
                continue
            if not probe.requesters:
                del shard[key]
                continue
            probe.generation = next(self._generations)
            probe.phase = Phase.RESOLVED
            probe.verdict = True

    def drain_results(self) -> None:
        """Apply every result the worker has posted."""
        self._check_open()
        self._apply_posted()

    def shutdown(self) -> None:
        """Stop the worker after the batch in hand; idempotent."""
        if self._closed:
            return
        self._closed = True
        while True:  # batches the worker never took are dropped
            try:
                self._work.get_nowait()
            except queue.Empty:
                break
        self._batch.clear()
        self._work.put(None)
        self._worker.join(timeout=SHUTDOWN_JOIN_SECONDS)
        self._apply_posted()

    # ------------------------------------------------------ applying results

    def _apply_posted(self) -> None:
        self._drain_due = False
        while True:
            try:
                results = self._results.get_nowait()
            except queue.Empty:
                return
            for key, generation, verdict in results:
                self._apply_one(key, generation, verdict)

    def _apply_one(self, key: bytes, generation: int, verdict: bool) -> None:
        shard = self._shard_of(key)
        probe = shard.get(key)
        if probe is None or probe.generation != generation or probe.phase is not Phase.IN_FLIGHT:
            return  # stale: the probe was deleted or superseded
        if not probe.requesters:
            del shard[key]  # orphaned in flight: its own result deletes it
            return
        probe.verdict = verdict
        probe.phase = Phase.RESOLVED

    # ------------------------------------------------------------- the worker

    def _run_worker(self) -> None:
        while True:
            batch = self._work.get()
            if batch is None:
                return
            posted: list[Result] = []
            for entries in batch.values():
                keys = [key for key, _, _ in entries]
                verdicts = self._probe_group(keys, entries[0][2])
                posted.extend(
                    (key, generation, verdict)
                    for (key, generation, _), verdict in zip(entries, verdicts, strict=True)
                )
            self._results.put(tuple(posted))

    def _probe_group(self, keys: list[bytes], ctx: RequestContext) -> list[bool]:
        """One tier call; exactly one bool per key, False for all if the call failed."""
        failed = [False] * len(keys)
        try:
            answer = list(itertools.islice(iter(self.batch_lookup(keys, ctx)), len(keys) + 1))
        except BaseException:  # no tier behaviour may end the worker
            return failed
        if len(answer) != len(keys) or not all(type(v) is bool for v in answer):
            return failed
        return [v is True for v in answer]
