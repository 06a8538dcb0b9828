"""Broken vLLM-shaped managers: each overrides one rule of ``VllmShapedManager``.

The first six are the bugs docs/properties.md says real implementations shipped; the
rest are plausible mistakes of our own.  ``MUTANTS`` maps each class to the
property of docs/properties.md the oracle must report when it kills it.
"""

from __future__ import annotations

import queue
from collections.abc import Collection
from typing import Any

from tests.zoo.vllm_shaped import BatchEntry, HasReqId, Phase, ProbeState, VllmShapedManager


class FlushWithoutRevalidation(VllmShapedManager):
    """Shipped (the seed, vLLM #55075): flush submits cleaned-up entries too."""

    def _revalidate(self, batch: list[BatchEntry]) -> list[BatchEntry]:
        return [e for e in batch if e[0] in self._lookup_state]  # any state will do


class ResultsAppliedByKey(VllmShapedManager):
    """Shipped (vLLM #54872): results matched by key only, not by generation."""

    def _apply_result(self, key: bytes, generation: int, verdict: bool) -> None:
        state = self._lookup_state.get(key)
        if state is None:
            return
        if not state.request_ids:
            del self._lookup_state[key]
            return
        state.result = verdict
        state.phase = Phase.RESOLVED


class MarkMissForcesResolved(VllmShapedManager):
    """Shipped: mark_miss resolves PENDING and IN_FLIGHT probes too."""

    def mark_miss(self, keys: Collection[bytes]) -> None:
        for key in keys:
            state = self._lookup_state.get(key)
            if state is not None:
                state.result = False
                state.phase = Phase.RESOLVED


class LazyIterableKillsWorker(VllmShapedManager):
    """Shipped: the tier's iterable is consumed outside the try block."""

    def _probe(self, keys: list[bytes], ctx: Any) -> list[bool]:
        try:
            answer = self.batch_lookup(keys, ctx)
        except Exception:
            return [False] * len(keys)
        return [bool(v) for v in answer]  # a raising generator escapes here


class ZipTruncatesShortAnswers(VllmShapedManager):
    """Shipped: zip() silently drops keys the tier did not answer."""

    def _probe(self, keys: list[bytes], ctx: Any) -> list[bool]:
        try:
            return [v is True for v in self.batch_lookup(keys, ctx)][: len(keys)]
        except Exception:
            return [False] * len(keys)

    def _pair(
        self, entries: list[tuple[bytes, int]], verdicts: list[bool]
    ) -> list[tuple[bytes, int, bool]]:
        return [(key, gen, v) for (key, gen), v in zip(entries, verdicts)]  # noqa: B905


class CleanupDeletesInFlight(VllmShapedManager):
    """Shipped: cleanup deletes in-flight probes, so the key is probed again."""

    def cleanup(self, req_id: str) -> None:
        for key in self._req_keys.pop(req_id, ()):
            state = self._lookup_state[key]
            state.request_ids.discard(req_id)
            if not state.request_ids:
                del self._lookup_state[key]


class CleanupKeepsIndex(VllmShapedManager):
    """Ours: cleanup forgets the requester but leaves the request index behind."""

    def cleanup(self, req_id: str) -> None:
        for key in self._req_keys.get(req_id, set()):
            state = self._lookup_state.get(key)
            if state is None:
                continue
            state.request_ids.discard(req_id)
            if not state.request_ids and state.phase is not Phase.IN_FLIGHT:
                del self._lookup_state[key]


class MarkPresentKeepsGeneration(VllmShapedManager):
    """Ours: mark_present overrides the verdict without a new generation, so the
    in-flight result of the old probe later overwrites it."""

    def mark_present(self, keys: Collection[bytes]) -> None:
        for key in keys:
            state = self._lookup_state.get(key)
            if state is not None:
                state.result = True
                state.phase = Phase.RESOLVED

    def _apply_result(self, key: bytes, generation: int, verdict: bool) -> None:
        state = self._lookup_state.get(key)
        if state is None or state.generation != generation:
            return
        if not state.request_ids:
            del self._lookup_state[key]
            return
        state.result = verdict
        state.phase = Phase.RESOLVED


class LookupNeverDrains(VllmShapedManager):
    """Ours: lookup never drains, so a verdict posted after a flush waits a step."""

    def lookup(self, key: bytes, req_context: HasReqId) -> bool | None:
        state = self._lookup_state.get(key)
        if state is None:
            state = self._new_probe(key, req_context)
        state.request_ids.add(req_context.req_id)
        self._req_keys.setdefault(req_context.req_id, set()).add(key)
        return state.result


class OneContextPerBatch(VllmShapedManager):
    """Ours: the worker probes the whole batch with its first entry's context."""

    def _worker(self) -> None:
        while (batch := self._lookup_queue.get()) is not None:
            ctx = batch[0][1]
            entries = [(key, gen) for key, _, gen in batch]
            verdicts = self._probe([key for key, _ in entries], ctx)
            self._pending_results.put(self._pair(entries, verdicts))


class OrphanResultResurrects(VllmShapedManager):
    """Ours: a result for an orphaned probe is applied instead of deleting it."""

    def _apply_result(self, key: bytes, generation: int, verdict: bool) -> None:
        state = self._lookup_state.get(key)
        if state is None or state.generation != generation:
            return
        state.result = verdict
        state.phase = Phase.RESOLVED


class GenerationFromTableSize(VllmShapedManager):
    """Ours: generations are derived from the table size, so they are reused."""

    def _new_probe(self, key: bytes, req_context: HasReqId) -> ProbeState:
        state = ProbeState(len(self._lookup_state))
        self._lookup_state[key] = state
        self._lookup_batch.append((key, req_context, state.generation))
        return state


class DrainStopsAtFirstBatch(VllmShapedManager):
    """Ours: drain applies only the first posted item and leaves the rest queued."""

    def drain_results(self) -> None:
        self._need_to_drain = False
        try:
            results = self._pending_results.get_nowait()
        except queue.Empty:
            return
        for key, generation, verdict in results:
            self._apply_result(key, generation, verdict)



# mutant class name -> the property of docs/properties.md the oracle must name when it kills
# it; the names are what `asynclookup fuzz --impl tests.zoo.mutants:NAME` takes.
MUTANTS: dict[str, int] = {
    "FlushWithoutRevalidation": 1,
    "ResultsAppliedByKey": 2,
    "MarkMissForcesResolved": 3,
    "LazyIterableKillsWorker": 7,
    "ZipTruncatesShortAnswers": 6,
    "CleanupDeletesInFlight": 8,
    "CleanupKeepsIndex": 4,
    "MarkPresentKeepsGeneration": 2,
    "LookupNeverDrains": 6,
    "OneContextPerBatch": 9,
    "OrphanResultResurrects": 5,
    "GenerationFromTableSize": 2,
    "DrainStopsAtFirstBatch": 6,
}
