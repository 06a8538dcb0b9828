"""Broken variants of the reference: each breaks one rule of docs/protocol.md.

Each class is ``reference.AsyncLookupManager`` with one method overridden (or
its worker replaced by one with one method overridden), written the way a real
implementation got it wrong.  ``VARIANTS`` maps each class name to the
property of docs/properties.md the oracle must name when it kills it.  The oracle loads
them by path, e.g. ``--target tests.mutants_reference:FlushWithoutRevalidation``,
so replay files can import them too.

Only the oracle's tests use these; the reference itself is never edited.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from asynclookup.reference.events import Observer
from asynclookup.reference.manager import IN_FLIGHT, RESOLVED, AsyncLookupManager
from asynclookup.reference.tier import Tier
from asynclookup.reference.worker import Worker


class FlushWithoutRevalidation(AsyncLookupManager):
    """The seed bug (vLLM #55075): flush submits its whole batch, stale entries too."""

    def flush(self) -> None:
        self._check_open("flush")
        self._apply_posted()
        batch, self._batch = self._batch, []
        for key, _, generation in batch:
            probe = self._probes.get(key)
            if probe is not None and probe.generation == generation:
                probe.phase = IN_FLIGHT
        self._drain_due = True
        if batch:
            self._batches.put(batch)


class DrainWithoutGenerationCheck(AsyncLookupManager):
    """vLLM #54872: results are applied by key, whatever generation they were made for."""

    def _apply_posted(self) -> None:
        while self._posted:
            for key, _, verdict in self._posted.popleft():
                probe = self._probes.get(key)
                if probe is None:
                    continue
                if not probe.requesters:
                    del self._probes[key]
                else:
                    probe.phase = RESOLVED
                    probe.verdict = verdict
        self._drain_due = False


class CleanupDropsInFlight(AsyncLookupManager):
    """Cleanup deletes orphaned IN_FLIGHT probes, so a later request probes the key again."""

    def cleanup(self, request_id: str) -> None:
        self._check_open("cleanup")
        for key in self._index.pop(request_id, set()):
            probe = self._probes[key]
            probe.requesters.discard(request_id)
            if not probe.requesters:
                del self._probes[key]


class MarkMissOnPending(AsyncLookupManager):
    """mark_miss forces PENDING and IN_FLIGHT probes to a False verdict as well."""

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        self._check_open("mark_miss")
        for key in tuple(keys):
            probe = self._probes.get(key)
            if probe is not None:
                probe.phase = RESOLVED
                probe.verdict = False


class _LazyIterableKills(Worker):
    """Consumes the tier's answer outside its try block."""

    def probe_group(self) -> bool:
        if not self._groups:
            return False
        context, entries = self._groups[0]
        keys = [entry[0] for entry in entries]
        try:
            answer = self._tier.batch_lookup(keys, context)
        except Exception:
            answer = [False] * len(keys)
        verdicts = [v is True for v in answer]  # a raising generator escapes here
        if len(verdicts) != len(keys):
            verdicts = [False] * len(keys)
        self._groups.popleft()
        self._answered.extend(
            (entry[0], entry[2], v) for entry, v in zip(entries, verdicts, strict=True)
        )
        return True


class _ZipTruncates(Worker):
    """Pairs keys with answers by zip(), which drops the keys a short answer left out."""

    def probe_group(self) -> bool:
        if not self._groups:
            return False
        context, entries = self._groups[0]
        keys = [entry[0] for entry in entries]
        try:
            verdicts = [v is True for v in self._tier.batch_lookup(keys, context)]
        except Exception:
            verdicts = [False] * len(keys)
        self._groups.popleft()
        self._answered.extend(
            (entry[0], entry[2], v) for entry, v in zip(entries, verdicts)  # noqa: B905
        )
        return True


class _WithWorker(AsyncLookupManager):
    """The reference with its worker replaced by ``worker_class``."""

    worker_class: type[Worker] = Worker

    def __init__(
        self,
        tier: Tier,
        *,
        mode: Literal["threaded", "stepped"] = "threaded",
        observer: Observer | None = None,
    ) -> None:
        super().__init__(tier, mode="stepped", observer=observer)
        self.mode = mode
        self.worker = self.worker_class(
            tier, self._batches, self._posted, observer=observer, guard=self._guard
        )
        if mode == "threaded":
            self.worker.start(name="asynclookup-broken-worker")


class WorkerDiesOnLazyRaise(_WithWorker):
    """A tier's lazy iterable that raises part-way kills the worker."""

    worker_class = _LazyIterableKills


class ZipTruncatesShortAnswers(_WithWorker):
    """A short tier answer leaves the unanswered keys IN_FLIGHT forever."""

    worker_class = _ZipTruncates


VARIANTS: dict[str, int] = {
    "FlushWithoutRevalidation": 1,
    "DrainWithoutGenerationCheck": 2,
    "CleanupDropsInFlight": 8,
    "MarkMissOnPending": 3,
    "WorkerDiesOnLazyRaise": 7,
    "ZipTruncatesShortAnswers": 6,
}
