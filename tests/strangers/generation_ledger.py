"""Probes are filed by generation in a ledger; a key only points at its current generation.

Style: generation-first bookkeeping.  ``_ledger`` maps a generation number to a mutable
``_Rec`` (key, stage, verdict, requesters) and ``_current`` maps a key to its live
generation, so "is this entry or result stale?" is literally ``_current.get(key) != gen``,
and superseding a probe is filing a new ledger record and repointing the key.  Stages are
a ``StrEnum``; generations come from ``itertools.count`` with an odd start and step.  The
worker thread is an iterator loop, ``for batch in iter(inbox.get, None)``, and posts one
tuple of results per request group on a ``queue.Queue``.  Draining follows the spec's rule.
Answers are handled laxly, per element.
"""

from __future__ import annotations

import enum
import itertools
import queue
import threading
from collections.abc import Iterable
from typing import Protocol


class RequestContext(Protocol):
    @property
    def req_id(self) -> str: ...


class Stage(enum.StrEnum):
    QUEUED = "queued"  # PENDING
    ASKED = "asked"  # IN_FLIGHT
    ANSWERED = "answered"  # RESOLVED


class _Rec:
    def __init__(self, key: bytes, stage: Stage, requesters: set[str]) -> None:
        self.key = key
        self.stage = stage
        self.verdict: bool | None = None
        self.requesters = requesters


Work = tuple[tuple[bytes, RequestContext, int], ...]
Answered = tuple[tuple[bytes, int, bool], ...]


class GenerationLedgerManager:
    join_timeout = 10.0

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        self._ledger: dict[int, _Rec] = {}
        self._current: dict[bytes, int] = {}
        self._requests: dict[str, set[bytes]] = {}
        self._batch: list[tuple[bytes, RequestContext, int]] = []
        self._numbers = itertools.count(7, 3)
        self._flushed = False
        self._off = False
        self._inbox: queue.Queue[Work | None] = queue.Queue()
        self._outbox: queue.Queue[Answered] = queue.Queue()
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._worker, name="ledger-worker", daemon=True)
        self._thread.start()

    def batch_lookup(self, keys: list[bytes], req_context: RequestContext) -> Iterable[bool]:
        raise NotImplementedError(self.tier_type)

    # ------------------------------------------------------------ ledger helpers

    def _file(self, key: bytes, stage: Stage, requesters: set[str]) -> int:
        gen = next(self._numbers)
        old = self._current.get(key)
        if old is not None:
            del self._ledger[old]
        self._ledger[gen] = _Rec(key, stage, requesters)
        self._current[key] = gen
        return gen

    def _drop(self, key: bytes) -> None:
        gen = self._current.pop(key, None)
        if gen is not None:
            del self._ledger[gen]

    def _rec(self, key: bytes) -> _Rec | None:
        gen = self._current.get(key)
        return None if gen is None else self._ledger[gen]

    # ------------------------------------------------------------ scheduler

    def lookup(self, key: bytes, req_context: RequestContext) -> bool | None:
        if self._flushed:
            self._settle()
        rid = req_context.req_id
        rec = self._rec(key)
        if rec is None:
            gen = self._file(key, Stage.QUEUED, set())
            self._batch.append((key, req_context, gen))
            rec = self._ledger[gen]
        rec.requesters.add(rid)
        self._requests.setdefault(rid, set()).add(key)
        return rec.verdict if rec.stage is Stage.ANSWERED else None

    def flush(self) -> None:
        self._settle()
        self._flushed = True
        work = tuple(e for e in self._batch if self._current.get(e[0]) == e[2])
        self._batch = []
        for _, _, gen in work:
            self._ledger[gen].stage = Stage.ASKED
        if work:
            self._inbox.put(work)

    def cleanup(self, req_id: str) -> None:
        for key in self._requests.pop(req_id, set()):
            rec = self._rec(key)
            if rec is None:
                continue
            rec.requesters.discard(req_id)
            if self._should_delete(rec):
                self._drop(key)

    def _should_delete(self, rec: _Rec) -> bool:
        return not rec.requesters and rec.stage is not Stage.ASKED

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            rec = self._rec(key)
            if rec is not None and rec.stage is Stage.ANSWERED:
                rec.verdict = False

    def mark_present(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            rec = self._rec(key)
            if rec is None or rec.verdict is True:
                continue
            if not rec.requesters:
                self._drop(key)
                continue
            gen = self._file(key, Stage.ANSWERED, rec.requesters)
            self._ledger[gen].verdict = True

    def drain_results(self) -> None:
        self._settle()

    def shutdown(self) -> None:
        if self._off:
            return
        self._off = True
        self._halt.set()
        self._inbox.put(None)
        self._thread.join(self.join_timeout)
        self._settle()
        self._batch = []

    def _settle(self) -> None:
        self._flushed = False
        while not self._outbox.empty():
            for key, gen, verdict in self._outbox.get_nowait():
                if self._current.get(key) != gen:
                    continue  # stale: that generation is gone
                rec = self._ledger[gen]
                if rec.requesters:
                    rec.stage, rec.verdict = Stage.ANSWERED, verdict
                else:
                    self._drop(key)

    # ------------------------------------------------------------ worker

    def _worker(self) -> None:
        for work in iter(self._inbox.get, None):
            if self._halt.is_set():
                break
            requests: dict[str, list[tuple[bytes, RequestContext, int]]] = {}
            for entry in work:
                requests.setdefault(entry[1].req_id, []).append(entry)
            for entries in requests.values():
                verdicts = self._probe([k for k, _, _ in entries], entries[0][1])
                self._outbox.put(
                    tuple((k, g, v) for (k, _, g), v in zip(entries, verdicts, strict=True))
                )

    def _probe(self, keys: list[bytes], context: RequestContext) -> list[bool]:
        verdicts: list[bool] = []
        try:
            it = iter(self.batch_lookup(list(keys), context))
            for _ in keys:
                value: object = next(it)
                verdicts.append(value if isinstance(value, bool) else False)
        except Exception:
            pass
        return verdicts + [False] * (len(keys) - len(verdicts))


# ------------------------------------------------------------------ one-bug copies


class LedgerNeverForgets(GenerationLedgerManager):
    """BUG (property 5): cleanup forgets the request but never deletes a probe, so probes
    without requesters pile up (and an orphaned PENDING one is still flushed)."""

    def _should_delete(self, rec: _Rec) -> bool:
        return False


class LedgerLazyOutsideTry(GenerationLedgerManager):
    """BUG (property 7): the answer is iterated after the try; a lazy raise kills the worker."""

    def _probe(self, keys: list[bytes], context: RequestContext) -> list[bool]:
        try:
            answer = self.batch_lookup(list(keys), context)
        except Exception:
            return [False] * len(keys)
        verdicts = [
            v if isinstance(v, bool) else False for v in itertools.islice(answer, len(keys))
        ]
        return verdicts + [False] * (len(keys) - len(verdicts))
