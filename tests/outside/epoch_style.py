"""An outside vLLM-shaped manager: epochs, one re-entrant lock, a results deque, list records.

``EpochManager`` is correct by docs/protocol.md.  Its style is neither the
zoo's nor the other outside styles': every table and the worker's hand-overs
are guarded by ONE ``threading.RLock`` (the worker waits on a condition built
on it), a probe is a mutable list ``[epoch, stage, verdict, owners]`` with
integer stages, the tables are ``_inflight`` (key -> record), ``_owners``
(request id -> list of keys, in lookup order) and ``_work`` (this step's
batch, as ``(epoch, key, context)`` triples), batches wait in a deque and the
worker appends each result, one ``(epoch, key, verdict)`` triple at a time, to
a ``collections.deque`` that the scheduler drains with ``popleft`` (no queue
object anywhere).  Every lookup drains.  Tier answers are checked strictly
inside the worker's ``try``: any value that is not exactly a ``bool`` raises
a ``TypeError``, which turns the whole call into misses.

This module was written after the oracle's fixes for issue 15 and was not used
to tune them: it is the held-out measure of docs/benchmarks.md's "Outside
implementations".  Every other class changes exactly one rule of the base; its
docstring says which property of docs/properties.md the oracle must name and why.  Test
data, not a library.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Collection, Iterable
from typing import Any

log = logging.getLogger(__name__)

WAITING, FLYING, SETTLED = 0, 1, 2  # a record's stage
EPOCH, STAGE, VERDICT, OWNERS = range(4)  # a record's fields
Triple = tuple[int, bytes, Any]  # epoch, key, request context


class EpochManager:
    """Scheduler API plus one worker thread, all under one re-entrant lock."""

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        self._mu = threading.RLock()
        self._wake = threading.Condition(self._mu)
        self._epoch = 0
        self._inflight: dict[bytes, list[Any]] = {}
        self._owners: dict[str, list[bytes]] = {}
        self._work: list[Triple] = []
        self._batches: deque[list[Triple]] = deque()
        self._done: deque[tuple[int, bytes, bool]] = deque()
        self._stop = False
        self._worker = threading.Thread(target=self._run, name="epoch-worker", daemon=True)
        self._worker.start()

    def batch_lookup(self, keys: list[bytes], req_context: Any) -> Iterable[object]:
        """The tier's verdicts for ``keys``; called on the worker thread."""
        raise NotImplementedError("a subclass talks to the tier")

    def _next_epoch(self) -> int:
        self._epoch += 1
        return self._epoch

    # -- scheduler thread ----------------------------------------------------------

    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        with self._mu:
            self._drain()
            rid: str = req_context.req_id
            record = self._inflight.get(key)
            if record is None:
                record = self._inflight[key] = [self._next_epoch(), WAITING, None, set()]
                self._work.append((record[EPOCH], key, req_context))
            record[OWNERS].add(rid)
            keys = self._owners.setdefault(rid, [])
            if key not in keys:
                keys.append(key)
            verdict: bool | None = record[VERDICT]
            return verdict

    def flush(self) -> None:
        with self._mu:
            self._drain()
            work, self._work = self._work, []
            batch = self._submittable(work)
            for _, key, _ in batch:
                if (record := self._inflight.get(key)) is not None:
                    record[STAGE] = FLYING
            if batch:
                self._batches.append(batch)
                self._wake.notify()

    def _submittable(self, work: list[Triple]) -> list[Triple]:
        """The entries still current: their key's record has the batched epoch."""
        return [t for t in work if (r := self._inflight.get(t[1])) and r[EPOCH] == t[0]]

    def drain_results(self) -> None:
        with self._mu:
            self._drain()

    def _drain(self) -> None:
        while self._done:
            epoch, key, verdict = self._done.popleft()
            self._land(epoch, key, verdict)

    def _land(self, epoch: int, key: bytes, verdict: bool) -> None:
        record = self._inflight.get(key)
        if record is None or record[EPOCH] != epoch:
            return  # stale
        if not record[OWNERS]:
            del self._inflight[key]  # nobody is waiting any more
            return
        if record[STAGE] != FLYING:
            raise RuntimeError(f"{key!r}: a second verdict for epoch {epoch}")
        record[STAGE], record[VERDICT] = SETTLED, verdict

    def cleanup(self, req_id: str) -> None:
        with self._mu:
            for key in self._owners.pop(req_id, []):
                self._release(key, req_id)

    def _release(self, key: bytes, req_id: str) -> None:
        record = self._inflight.get(key)
        if record is None:
            return
        record[OWNERS].discard(req_id)
        if not record[OWNERS] and record[STAGE] != FLYING:
            del self._inflight[key]

    def mark_miss(self, keys: Collection[bytes]) -> None:
        with self._mu:
            for key in keys:
                record = self._inflight.get(key)
                if record is not None and record[STAGE] == SETTLED:
                    record[VERDICT] = False

    def mark_present(self, keys: Collection[bytes]) -> None:
        with self._mu:
            for key in keys:
                record = self._inflight.get(key)
                if record is None or record[VERDICT] is True:
                    continue
                if not record[OWNERS]:
                    del self._inflight[key]
                    continue
                record[EPOCH], record[STAGE], record[VERDICT] = self._next_epoch(), SETTLED, True

    def shutdown(self) -> None:
        with self._mu:
            self._stop = True
            self._wake.notify_all()
        self._worker.join(timeout=10)
        with self._mu:
            self._drain()

    # -- worker thread -------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._mu:
                while not self._batches and not self._stop:
                    self._wake.wait()
                if not self._batches:
                    return
                batch = self._batches.popleft()
            results = self._probe_batch(batch)
            with self._mu:
                self._done.extend(results)

    def _probe_batch(self, batch: list[Triple]) -> list[tuple[int, bytes, bool]]:
        """One tier call per request, in order of the requests' first entries."""
        requests: dict[str, list[Triple]] = {}
        for triple in batch:
            requests.setdefault(triple[2].req_id, []).append(triple)
        out: list[tuple[int, bytes, bool]] = []
        for triples in requests.values():
            out.extend(self._probe_request(triples))
        return out

    def _probe_request(self, triples: list[Triple]) -> list[tuple[int, bytes, bool]]:
        keys = [key for _, key, _ in triples]
        verdicts = self._ask(keys, triples[0][2])
        return [(epoch, key, v) for (epoch, key, _), v in zip(triples, verdicts, strict=True)]

    def _ask(self, keys: list[bytes], ctx: Any) -> list[bool]:
        try:
            answer = list(self.batch_lookup(keys, ctx))
            if len(answer) != len(keys):
                raise ValueError(f"{len(answer)} answers for {len(keys)} keys")
            return [self._checked(v) for v in answer]
        except Exception as exc:  # the tier is foreign code: misses, and go on
            log.warning("%s: %r", self.tier_type, exc)
            return [False] * len(keys)

    @staticmethod
    def _checked(value: object) -> bool:
        if type(value) is not bool:
            raise TypeError(f"the tier answered {value!r}, not a bool")
        return value


# -- one bug each -------------------------------------------------------------------


class EpochFlushUnchecked(EpochManager):
    """Flush submits the whole step's work, current or not: the seed's bug.

    An entry whose request was cleaned up (its record deleted), or whose key
    ``mark_present`` gave a new epoch, is still sent to the tier.  Property 1
    (docs/properties.md: "Flush sent the whole batch without re-validation (property
    1: the seed)").
    """

    def _submittable(self, work: list[Triple]) -> list[Triple]:
        return list(work)


class EpochLandsByKey(EpochManager):
    """A drained result lands on its key's record whatever that record's epoch.

    A result of an epoch that ``mark_present`` replaced (or a deleted and
    re-created record) overrides the newer verdict.  Property 2 (docs/properties.md:
    "Results applied by key only ... (properties 2, 3)"): the newer record may
    also be handed a second verdict, which its once-only check rejects (3).
    """

    def _land(self, epoch: int, key: bytes, verdict: bool) -> None:
        record = self._inflight.get(key)
        if record is None:
            return
        if not record[OWNERS]:
            del self._inflight[key]
            return
        if record[STAGE] != FLYING:
            raise RuntimeError(f"{key!r}: a second verdict for epoch {record[EPOCH]}")
        record[STAGE], record[VERDICT] = SETTLED, verdict


class EpochMissSettlesAll(EpochManager):
    """mark_miss settles every record of its keys to False, waiting and flying ones too.

    The record's own result then finds it SETTLED, and ``_land`` raises inside
    the lookup, flush or drain that applies it.  Property 3 (docs/properties.md:
    "mark_miss forced PENDING/IN_FLIGHT probes to RESOLVED; the next flush or
    drain hit an assertion and stopped the step (property 3)").
    """

    def mark_miss(self, keys: Collection[bytes]) -> None:
        with self._mu:
            for key in keys:
                record = self._inflight.get(key)
                if record is not None:
                    record[STAGE], record[VERDICT] = SETTLED, False


class EpochOwnersKept(EpochManager):
    """Cleanup releases the request's records but leaves its entry in ``_owners``.

    Property 4 (docs/properties.md: "after cleanup(r), nothing refers to r"): nothing
    the class returns differs, only its request index, which the leak check
    sees once every request is cleaned up.
    """

    def cleanup(self, req_id: str) -> None:
        with self._mu:
            for key in self._owners.get(req_id, []):
                self._release(key, req_id)


class EpochZipShort(EpochManager):
    """The worker pairs keys with the tier's answer by ``zip()``, unchecked for length.

    A short answer leaves the unpaired keys without a result: their records stay
    FLYING and their requesters get None for ever.  Property 6 (docs/properties.md:
    "zip() over keys and results silently dropped keys ... (6, 5)").
    """

    def _probe_request(self, triples: list[Triple]) -> list[tuple[int, bytes, bool]]:
        try:
            answer = list(self.batch_lookup([key for _, key, _ in triples], triples[0][2]))
        except Exception:
            answer = [False] * len(triples)
        return [
            (epoch, key, v is True)
            for (epoch, key, _), v in zip(triples, answer)  # noqa: B905 - the bug
        ]


class EpochTypeCheckEscapes(EpochManager):
    """The strict type check runs after the ``try``: a non-bool answer kills the worker.

    ``TypeError`` escapes the worker thread, so every later batch waits for
    ever.  Property 7 (docs/properties.md: "no tier behaviour (exception, wrong
    length, wrong type, ...) stops the worker or the scheduler").
    """

    def _ask(self, keys: list[bytes], ctx: Any) -> list[bool]:
        try:
            answer = list(self.batch_lookup(keys, ctx))
        except Exception:
            return [False] * len(keys)
        if len(answer) != len(keys):
            return [False] * len(keys)
        return [self._checked(v) for v in answer]  # the bug: outside the try


class EpochReleasesFlying(EpochManager):
    """Cleanup deletes a record left without owners even while it is FLYING.

    A later lookup of the key makes a new record and probes the key again while
    the first probe is still in the tier.  Property 8 (docs/properties.md: "Cleanup
    deleted in-flight probes, so a second request re-probed the same key
    (property 8)"): the oracle must run with strict efficiency.
    """

    def _release(self, key: bytes, req_id: str) -> None:
        record = self._inflight.get(key)
        if record is None:
            return
        record[OWNERS].discard(req_id)
        if not record[OWNERS]:
            del self._inflight[key]


class EpochOneCallPerBatch(EpochManager):
    """The worker asks the tier once per batch, with the first entry's request context.

    Property 9 (docs/properties.md: "every key is probed with the request context
    that was batched with its probe, in a tier call that holds only that
    request's keys").
    """

    def _probe_batch(self, batch: list[Triple]) -> list[tuple[int, bytes, bool]]:
        return self._probe_request(batch)
