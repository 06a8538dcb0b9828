"""A lookup manager written from docs/protocol.md alone, in the ``sorted_bisect`` style.

Written by an outsider from docs/protocol.md, docs/properties.md and the sections of
docs/oracle.md that describe a vLLM-shaped class (constructor ``(tier_type)``, an
overridable ``batch_lookup(keys, req_context)`` called on the manager's own worker
thread; ``lookup``, ``flush``, ``cleanup(req_id)``, ``drain_results``, ``shutdown``,
``mark_miss``, ``mark_present``), without reading the oracle, the spec or any other
implementation.

Style: no dict for the probe table.  The probe keys live in a sorted ``list[bytes]``
searched with ``bisect``; each probe field (generation, phase, verdict, requesters) is a
parallel list, inserted into and deleted from at the bisected position.  The request
index is a sorted list of ``(request_id, key)`` pairs, also bisected.  Posted results are
pushed on a ``heapq`` keyed by a posting sequence number and popped in that order when
applied.  The worker waits with ``threading.Condition.wait_for(predicate, timeout)`` in a
loop.  Real threads; no sleep is used for synchronisation.

Decisions where the protocol leaves room (docs/protocol.md, "What the spec decides where
the protocol leaves room"):

- item 1 (when a lookup drains): as the spec, ``lookup`` applies posted results exactly
  when a flush happened since the last drain (a ``_drain_due`` flag set by every
  ``flush``, cleared by every drain).
- item 2 (order of request groups): groups are probed in the order of each request's
  first entry in the batch in hand.  The keys of one request id form one group; the
  context passed to the tier is the one batched with the group's first entry (I assume
  one context object per request id).
- item 3 (what a failed tier call yields): as the spec, a call that raises, or whose
  answer (materialised inside the ``try``) is not exactly ``len(keys)`` bools, gives
  ``False`` to every key of the call.
- item 4 (what shutdown drops): shutdown lets the worker finish and post the batch in
  hand, then drops the step's batch and every submitted batch the worker never took,
  joins the worker and applies posted results.  Idempotent.  Any other call after it
  raises ``ManagerClosedError``.  The join is bounded (``_JOIN_BOUND_S``): a tier that
  never returns cannot hang the scheduler for ever; whatever was posted by then is
  applied.
- item 5 (mark_present on a probe already True): nothing happens, no new generation.
  A probe without requesters is deleted.
- item 7 (asking again): a second lookup of a key by one of its requesters only (maybe)
  drains, then returns the verdict; nothing else changes.
- Results are posted per request group, as soon as the group's tier call returns
  (docs/oracle.md, "A pool of worker threads": "post each group's results as soon as
  it has them"); the next batch is taken only after every group is posted.
- A result is applied only to a probe of its own generation that is IN_FLIGHT (defensive:
  a probe's own generation is never PENDING or RESOLVED when its result lands).

Found by the oracle: nothing in this class.  A first version of ``flush`` marked the
submitted probes IN_FLIGHT through ``self._phases[self._find(key)]`` without checking the
index, which is safe only because ``_live_entries`` filters; the one-bug copy
``SortedBisectSubmitsStale`` (which skips the filter) then crashed in flush (the oracle
said property 7, IndexError) or marked an unrelated probe (index -1).  ``flush`` now
checks the index and generation, so the copy plants only the seed's bug.

One-bug copies, each overriding one method:

- ``SortedBisectSubmitsStale``: flush submits the batch without re-validating it
  (property 1).
- ``SortedBisectAppliesByKey``: results applied by key, without the generation check
  (property 2).
- ``SortedBisectZipTruncates``: the worker zips the keys with a short tier answer
  (property 7; the oracle names 6).
"""

from __future__ import annotations

import heapq
import threading
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any, Final

PENDING: Final = 0
IN_FLIGHT: Final = 1
RESOLVED: Final = 2

# A batch entry: (key, request context, generation).
Entry = tuple[bytes, Any, int]
# A posted result on the heap: (posting sequence number, key, generation, verdict).
Posted = tuple[int, bytes, int, bool]


class ManagerClosedError(RuntimeError):
    """A call after shutdown() (a usage error, docs/protocol.md, "The operations")."""


class SortedBisectManager:
    """Async lookup manager: sorted key list + parallel field lists, heap of results."""

    _WAIT_S: Final = 0.5
    _JOIN_BOUND_S: Final = 60.0

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        # Probe table (scheduler thread only): sorted keys and one parallel list per field.
        self._keys: list[bytes] = []
        self._gens: list[int] = []
        self._phases: list[int] = []
        self._verdicts: list[bool | None] = []
        self._requesters: list[list[str]] = []  # each sorted
        # Request index (scheduler thread only): sorted (request_id, key) pairs.
        self._index: list[tuple[str, bytes]] = []
        # The step's batch (scheduler thread only).
        self._batch: list[Entry] = []
        self._next_gen = 0
        self._drain_due = False
        self._closed = False
        # Shared with the worker, guarded by _cv.
        self._cv = threading.Condition()
        self._submitted: deque[list[Entry]] = deque()
        self._posted: list[Posted] = []
        self._post_seq = 0
        self._stopping = False
        self._worker = threading.Thread(
            target=self._worker_main, name="sorted-bisect-lookup", daemon=True
        )
        self._worker.start()

    # ------------------------------------------------------------------ the tier
    def batch_lookup(self, keys: list[bytes], req_context: Any) -> Iterable[bool]:
        """The tier call; a subclass (or the oracle) replaces it."""
        raise NotImplementedError("batch_lookup is the tier call: override it")

    # ---------------------------------------------------------- probe table ops
    def _find(self, key: bytes) -> int:
        i = bisect_left(self._keys, key)
        if i < len(self._keys) and self._keys[i] == key:
            return i
        return -1

    def _new_probe(self, key: bytes) -> int:
        gen = self._next_gen
        self._next_gen += 1
        i = bisect_left(self._keys, key)
        self._keys.insert(i, key)
        self._gens.insert(i, gen)
        self._phases.insert(i, PENDING)
        self._verdicts.insert(i, None)
        self._requesters.insert(i, [])
        return i

    def _delete_probe(self, i: int) -> None:
        del self._keys[i]
        del self._gens[i]
        del self._phases[i]
        del self._verdicts[i]
        del self._requesters[i]

    def _check_open(self) -> None:
        if self._closed:
            raise ManagerClosedError("the manager is shut down")

    # --------------------------------------------------------------- scheduler
    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        self._check_open()
        if self._drain_due:
            self._drain()
        req_id: str = req_context.req_id
        i = self._find(key)
        if i < 0:
            i = self._new_probe(key)
            self._batch.append((key, req_context, self._gens[i]))
        reqs = self._requesters[i]
        j = bisect_left(reqs, req_id)
        if j == len(reqs) or reqs[j] != req_id:
            reqs.insert(j, req_id)
            insort(self._index, (req_id, key))
        if self._phases[i] == RESOLVED:
            return self._verdicts[i]
        return None

    def _live_entries(self, batch: list[Entry]) -> list[Entry]:
        """The entries whose key still has a state of the same generation."""
        live: list[Entry] = []
        for entry in batch:
            i = self._find(entry[0])
            if i >= 0 and self._gens[i] == entry[2] and self._phases[i] == PENDING:
                live.append(entry)
        return live

    def flush(self) -> None:
        self._check_open()
        self._drain()
        batch, self._batch = self._batch, []
        live = self._live_entries(batch)
        self._drain_due = True
        if not live:
            return
        for key, _ctx, gen in live:
            i = self._find(key)
            if i >= 0 and self._gens[i] == gen:  # always, once _live_entries filtered
                self._phases[i] = IN_FLIGHT
        with self._cv:
            self._submitted.append(live)
            self._cv.notify_all()

    def cleanup(self, req_id: str) -> None:
        self._check_open()
        lo = bisect_left(self._index, (req_id, b""))
        hi = lo
        while hi < len(self._index) and self._index[hi][0] == req_id:
            hi += 1
        keys = [key for _rid, key in self._index[lo:hi]]
        del self._index[lo:hi]
        for key in keys:
            i = self._find(key)
            if i < 0:
                continue
            reqs = self._requesters[i]
            j = bisect_left(reqs, req_id)
            if j < len(reqs) and reqs[j] == req_id:
                del reqs[j]
            if not reqs and self._phases[i] != IN_FLIGHT:
                self._delete_probe(i)

    def mark_miss(self, keys: Sequence[bytes]) -> None:
        self._check_open()
        for key in keys:
            i = self._find(key)
            if i >= 0 and self._phases[i] == RESOLVED:
                self._verdicts[i] = False

    def mark_present(self, keys: Sequence[bytes]) -> None:
        self._check_open()
        for key in keys:
            i = self._find(key)
            if i < 0 or self._verdicts[i] is True:
                continue
            if not self._requesters[i]:
                self._delete_probe(i)
                continue
            self._gens[i] = self._next_gen
            self._next_gen += 1
            self._verdicts[i] = True
            self._phases[i] = RESOLVED

    def drain_results(self) -> None:
        self._check_open()
        self._drain()

    def shutdown(self) -> None:
        if self._closed:
            return
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        self._worker.join(timeout=self._JOIN_BOUND_S)
        with self._cv:
            self._submitted.clear()
        self._batch = []
        self._drain()
        self._closed = True

    # ---------------------------------------------------------------- results
    def _drain(self) -> None:
        self._drain_due = False
        with self._cv:
            posted = self._posted
            self._posted = []
        while posted:
            _seq, key, gen, verdict = heapq.heappop(posted)
            self._apply_one(key, gen, verdict)

    def _apply_one(self, key: bytes, gen: int, verdict: bool) -> None:
        i = self._find(key)
        if i < 0 or self._gens[i] != gen or self._phases[i] != IN_FLIGHT:
            return  # stale
        if not self._requesters[i]:
            self._delete_probe(i)
            return
        self._verdicts[i] = verdict
        self._phases[i] = RESOLVED

    # ------------------------------------------------------------------ worker
    def _has_work_or_stop(self) -> bool:
        return self._stopping or bool(self._submitted)

    def _answers(self, keys: list[bytes], req_context: Any) -> list[bool]:
        """One tier call; exactly one verdict per key, False where it failed."""
        try:
            answer = list(self.batch_lookup(list(keys), req_context))
        except Exception:
            return [False] * len(keys)
        if len(answer) != len(keys) or not all(isinstance(v, bool) for v in answer):
            return [False] * len(keys)
        return answer

    @staticmethod
    def _groups(batch: list[Entry]) -> list[tuple[Any, list[bytes], list[int]]]:
        order: list[str] = []
        groups: dict[str, tuple[Any, list[bytes], list[int]]] = {}
        for key, ctx, gen in batch:
            rid: str = ctx.req_id
            if rid not in groups:
                order.append(rid)
                groups[rid] = (ctx, [], [])
            groups[rid][1].append(key)
            groups[rid][2].append(gen)
        return [groups[rid] for rid in order]

    def _worker_main(self) -> None:
        while True:
            with self._cv:
                while not self._cv.wait_for(self._has_work_or_stop, timeout=self._WAIT_S):
                    pass
                if self._stopping:
                    return
                batch = self._submitted.popleft()
            for ctx, keys, gens in self._groups(batch):
                verdicts = self._answers(keys, ctx)
                with self._cv:
                    for key, gen, verdict in zip(keys, gens, verdicts, strict=False):
                        heapq.heappush(self._posted, (self._post_seq, key, gen, verdict))
                        self._post_seq += 1
                    self._cv.notify_all()


class SortedBisectSubmitsStale(SortedBisectManager):
    """Bug: flush submits the whole batch without re-validating it (the seed, vLLM #55075).

    An entry whose probe was cleaned up or superseded by mark_present still reaches the
    tier.  Property 1 (no cleaned-up entry is submitted).
    """

    def _live_entries(self, batch: list[Entry]) -> list[Entry]:
        return list(batch)


class SortedBisectAppliesByKey(SortedBisectManager):
    """Bug: results applied by key alone, without the generation check (vLLM #54872).

    A stale result (for example False computed before a mark_present) overwrites the
    newer verdict.  Property 2 (no cleaned-up entry is delivered).
    """

    def _apply_one(self, key: bytes, gen: int, verdict: bool) -> None:
        i = self._find(key)
        if i < 0:
            return
        if not self._requesters[i]:
            self._delete_probe(i)
            return
        self._verdicts[i] = verdict
        self._phases[i] = RESOLVED


class SortedBisectZipTruncates(SortedBisectManager):
    """Bug: the worker zips the call's keys with the tier's answer, so a short answer
    leaves the unanswered probes IN_FLIGHT forever.  Property 7 (survival); it breaks
    progress (6) too, which is what the oracle named on seeds 0..4.
    """

    def _answers(self, keys: list[bytes], req_context: Any) -> list[bool]:
        try:
            answer = list(self.batch_lookup(list(keys), req_context))
        except Exception:
            return [False] * len(keys)
        return [
            v if isinstance(v, bool) else False for _k, v in zip(keys, answer, strict=False)
        ]


class SortedCleanupKeepsRequester(SortedBisectManager):
    """Bug (cleanup-keeps-requester): cleanup drops the request from the index, but a probe
    it shares with another request (more than one requester listed) keeps it among its
    requesters.  Such a probe then never loses its last requester, so it is never deleted.

    Expected: property 4 (bookkeeping).  From outside: once every request is cleaned up the
    class still holds the shared key with a cleaned-up request among its requesters
    (the leak check's "probes still naming a cleaned-up request").
    """

    def cleanup(self, req_id: str) -> None:
        self._check_open()
        lo = bisect_left(self._index, (req_id, b""))
        hi = lo
        while hi < len(self._index) and self._index[hi][0] == req_id:
            hi += 1
        keys = [key for _rid, key in self._index[lo:hi]]
        del self._index[lo:hi]
        for key in keys:
            i = self._find(key)
            if i < 0:
                continue
            reqs = self._requesters[i]
            if len(reqs) > 1:
                continue  # the bug: a shared probe keeps the cleaned-up request
            j = bisect_left(reqs, req_id)
            if j < len(reqs) and reqs[j] == req_id:
                del reqs[j]
            if not reqs and self._phases[i] != IN_FLIGHT:
                self._delete_probe(i)


class SortedCleanupKeepsOrphans(SortedBisectManager):
    """Bug (cleanup-keeps-orphans): cleanup forgets the request everywhere but never
    deletes a probe left without requesters (a PENDING or RESOLVED orphan stays).

    Expected: property 5 (no leak).  From outside: after every request is cleaned up and
    every result drained, the class's probe table still holds the key.
    """

    def cleanup(self, req_id: str) -> None:
        self._check_open()
        lo = bisect_left(self._index, (req_id, b""))
        hi = lo
        while hi < len(self._index) and self._index[hi][0] == req_id:
            hi += 1
        keys = [key for _rid, key in self._index[lo:hi]]
        del self._index[lo:hi]
        for key in keys:
            i = self._find(key)
            if i < 0:
                continue
            reqs = self._requesters[i]
            j = bisect_left(reqs, req_id)
            if j < len(reqs) and reqs[j] == req_id:
                del reqs[j]
            # the bug: a probe left without requesters is never deleted


class SortedLazyRaiseKillsWorker(SortedBisectManager):
    """Bug (lazy-raise-kills-worker): the worker calls the tier inside its try but
    consumes the answer outside it, so a lazy answer that raises part-way escapes and
    kills the worker thread.

    Expected: property 7 (survival).  From outside: the worker thread dies of an uncaught
    exception on a tier answer ("no tier behaviour ... stops the worker"); after that no
    verdict ever comes (progress, 6, is what properties.md's model checker names).
    """

    def _answers(self, keys: list[bytes], req_context: Any) -> list[bool]:
        try:
            lazy = self.batch_lookup(list(keys), req_context)
        except Exception:
            return [False] * len(keys)
        answer = list(lazy)  # the bug: consumed outside the try
        if len(answer) != len(keys) or not all(isinstance(v, bool) for v in answer):
            return [False] * len(keys)
        return answer


class SortedLookupNeverDrains(SortedBisectManager):
    """Bug (lookup-never-drains): lookup never applies posted results, not even the first
    lookup after a flush; only flush and drain_results do.

    Expected: property 6 (progress, ``results_applied_within_a_step``).  From outside: the
    worker has posted (its next tier call proves it) yet the first lookup after the flush
    still returns None.
    """

    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        self._check_open()
        # the bug: no drain here, even when a flush happened since the last one
        req_id: str = req_context.req_id
        i = self._find(key)
        if i < 0:
            i = self._new_probe(key)
            self._batch.append((key, req_context, self._gens[i]))
        reqs = self._requesters[i]
        j = bisect_left(reqs, req_id)
        if j == len(reqs) or reqs[j] != req_id:
            reqs.insert(j, req_id)
            insort(self._index, (req_id, key))
        if self._phases[i] == RESOLVED:
            return self._verdicts[i]
        return None
