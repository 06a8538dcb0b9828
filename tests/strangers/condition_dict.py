"""One ``threading.Condition`` guards both mailboxes; each batch is posted as a dict.

Style: ``__slots__`` records and a single monitor.  Probes are ``_Probe`` objects with
``__slots__`` and phases as module-level string constants; batch entries are
``typing.NamedTuple`` rows.  The scheduler and the worker share exactly one
``threading.Condition``: flush appends a batch to ``_todo`` and notifies; the worker waits
on the same condition for work or for the halt flag, probes the batch one request group at
a time, and posts the whole batch at once as a ``dict`` mapping ``(key, generation)`` to the
verdict, appended to ``_done`` under the condition.  Draining follows the spec's rule
(``flush``, ``drain_results``, ``shutdown``, and the first ``lookup`` after a flush).
Answers are handled laxly: a non-bool element is ``False``, the other bools of the call
are kept, unanswered keys get ``False``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import NamedTuple, Protocol


class RequestContext(Protocol):
    @property
    def req_id(self) -> str: ...


WAITING = "waiting"  # PENDING: in this step's batch
SENT = "sent"  # IN_FLIGHT
KNOWN = "known"  # RESOLVED


class _Probe:
    __slots__ = ("askers", "generation", "state", "verdict")

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.state = WAITING
        self.verdict: bool | None = None
        self.askers: set[str] = set()


class Row(NamedTuple):
    key: bytes
    context: RequestContext
    generation: int


BatchAnswers = dict[tuple[bytes, int], bool]


class ConditionManager:
    join_timeout = 10.0

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        self._probes: dict[bytes, _Probe] = {}
        self._requests: dict[str, set[bytes]] = {}
        self._step: list[Row] = []
        self._counter = 0
        self._flushed_since_drain = False
        self._finished = False
        self._cv = threading.Condition()
        self._todo: list[list[Row]] = []
        self._done: list[BatchAnswers] = []
        self._halting = False
        self._worker = threading.Thread(target=self._worker_main, name="cv-worker", daemon=True)
        self._worker.start()

    def batch_lookup(self, keys: list[bytes], req_context: RequestContext) -> Iterable[bool]:
        raise NotImplementedError(self.tier_type)

    # -------------------------------------------------------------- scheduler

    def _fresh_generation(self) -> int:
        self._counter += 1
        return self._counter

    def lookup(self, key: bytes, req_context: RequestContext) -> bool | None:
        if self._flushed_since_drain:
            self._absorb()
        probe = self._probes.get(key)
        if probe is None:
            probe = self._probes[key] = _Probe(self._fresh_generation())
            self._step.append(Row(key, req_context, probe.generation))
        probe.askers.add(req_context.req_id)
        self._requests.setdefault(req_context.req_id, set()).add(key)
        return probe.verdict if probe.state == KNOWN else None

    def flush(self) -> None:
        self._absorb()
        rows, self._step = self._step, []
        keep: list[Row] = []
        for row in rows:
            probe = self._probes.get(row.key)
            if probe is not None and probe.generation == row.generation:
                probe.state = SENT
                keep.append(row)
        self._flushed_since_drain = True
        if keep:
            with self._cv:
                self._todo.append(keep)
                self._cv.notify_all()

    def cleanup(self, req_id: str) -> None:
        for key in self._requests.pop(req_id, ()):
            probe = self._probes.get(key)
            if probe is None:
                continue
            probe.askers.discard(req_id)
            if not probe.askers and probe.state != SENT:
                del self._probes[key]

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            probe = self._probes.get(key)
            if probe is not None and probe.state == KNOWN:
                probe.verdict = False

    def mark_present(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            probe = self._probes.get(key)
            if probe is None or probe.verdict is True:
                continue
            if not probe.askers:
                del self._probes[key]
                continue
            fresh = _Probe(self._fresh_generation())
            fresh.state, fresh.verdict, fresh.askers = KNOWN, True, probe.askers
            self._probes[key] = fresh

    def drain_results(self) -> None:
        self._absorb()

    def shutdown(self) -> None:
        if self._finished:
            return
        self._finished = True
        with self._cv:
            self._halting = True
            self._cv.notify_all()
        self._worker.join(self.join_timeout)
        self._absorb()
        self._step.clear()

    def _absorb(self) -> None:
        self._flushed_since_drain = False
        with self._cv:
            done, self._done = self._done, []
        for answers in done:
            for (key, generation), verdict in answers.items():
                probe = self._probes.get(key)
                if probe is None or not self._fresh(probe, generation):
                    continue
                if probe.askers:
                    probe.state, probe.verdict = KNOWN, verdict
                else:
                    del self._probes[key]

    def _fresh(self, probe: _Probe, generation: int) -> bool:
        return probe.generation == generation

    # -------------------------------------------------------------- worker

    def _worker_main(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: bool(self._todo) or self._halting)
                if self._halting:
                    return  # batches never taken are dropped
                batch = self._todo.pop(0)
            answers: BatchAnswers = {}
            by_request: dict[str, list[Row]] = {}
            for row in batch:
                by_request.setdefault(row.context.req_id, []).append(row)
            for group in by_request.values():
                verdicts = self._answers([row.key for row in group], group[0].context)
                for row, verdict in zip(group, verdicts, strict=False):
                    answers[row.key, row.generation] = verdict
            with self._cv:
                self._done.append(answers)
                self._cv.notify_all()

    def _answers(self, keys: list[bytes], context: RequestContext) -> list[bool]:
        got: list[bool] = []
        try:
            raw: Iterable[object] = self.batch_lookup(list(keys), context)
            iterator = iter(raw)
            while len(got) < len(keys):
                value = next(iterator)  # StopIteration: a short answer
                got.append(value if isinstance(value, bool) else False)
        except Exception:  # raised, short, not iterable, raised part-way
            pass
        return got + [False] * (len(keys) - len(got))


# ------------------------------------------------------------------ one-bug copies


class GenerationBlindResults(ConditionManager):
    """BUG (property 2): a posted verdict lands on the key's probe whatever its generation."""

    def _fresh(self, probe: _Probe, generation: int) -> bool:
        return True


class ZipsShortAnswers(ConditionManager):
    """BUG (property 6): zip() over keys and answers; a short answer strands keys IN_FLIGHT."""

    def _answers(self, keys: list[bytes], context: RequestContext) -> list[bool]:
        try:
            raw: Iterable[object] = self.batch_lookup(list(keys), context)
            return [v if isinstance(v, bool) else False for _, v in zip(keys, raw, strict=False)]
        except Exception:
            return [False] * len(keys)
