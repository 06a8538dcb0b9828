"""An outside vLLM-shaped manager: immutable records, a condition-variable worker, a results dict.

``ConditionManager`` is correct by docs/protocol.md.  Its style is not
the zoo's: a probe is an immutable ``NamedTuple`` replaced on every change, the
tables are ``_probes`` (key -> record), ``_keys_of`` (request id -> keys) and
``_step`` (this step's batch), the worker waits on a ``threading.Condition``
over a deque of jobs, groups a batch with ``itertools.groupby``, and posts a
whole batch's results at once into a lock-protected dict keyed by (key,
generation), which a drain swaps out.  Every lookup drains (docs/protocol.md allows
it), and tier answers are checked laxly: only ``True`` is present.  Its
apply step keeps vLLM's "a probe receives one verdict" assertion.

Every other class here changes exactly one rule of it; its docstring says which
property of docs/properties.md the oracle must name and why.  Test data, not a library.
"""

from __future__ import annotations

import enum
import itertools
import logging
import threading
from collections import deque
from collections.abc import Collection, Iterable, Iterator
from typing import Any, NamedTuple

log = logging.getLogger(__name__)


class Phase(enum.Enum):
    PENDING = "pending"
    IN_FLIGHT = "in flight"
    RESOLVED = "resolved"


class Record(NamedTuple):
    """A probe, as a value: replaced, never mutated."""

    gen: int
    phase: Phase
    verdict: bool | None
    requesters: frozenset[str]


Job = tuple[bytes, Any, int]  # key, request context, generation


class ConditionManager:
    """Scheduler API plus one worker thread woken through a condition variable."""

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        self._probes: dict[bytes, Record] = {}
        self._keys_of: dict[str, set[bytes]] = {}
        self._step: list[Job] = []
        self._counter = 0
        self._cv = threading.Condition()
        self._jobs: deque[list[Job]] = deque()
        self._stopping = False
        self._results_lock = threading.Lock()
        self._arrived: dict[tuple[bytes, int], bool] = {}
        self._worker = threading.Thread(target=self._loop, name=f"cv-{tier_type}", daemon=True)
        self._worker.start()

    def batch_lookup(self, keys: list[bytes], req_context: Any) -> Iterable[object]:
        """One verdict per key, from the tier; called on the worker thread."""
        raise NotImplementedError("a subclass talks to the tier")

    def _fresh_generation(self) -> int:
        self._counter += 1
        return self._counter

    # -- scheduler thread ----------------------------------------------------------

    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        self.drain_results()
        req_id: str = req_context.req_id
        record = self._probes.get(key)
        if record is None:
            record = Record(self._fresh_generation(), Phase.PENDING, None, frozenset())
            self._step.append((key, req_context, record.gen))
        self._probes[key] = record._replace(requesters=record.requesters | {req_id})
        self._keys_of.setdefault(req_id, set()).add(key)
        return record.verdict

    def flush(self) -> None:
        self.drain_results()
        step, self._step = self._step, []
        kept = [job for job in step if self._current(job)]
        for key, _, _ in kept:
            self._probes[key] = self._probes[key]._replace(phase=Phase.IN_FLIGHT)
        if kept:
            with self._cv:
                self._jobs.append(kept)
                self._cv.notify()

    def _current(self, job: Job) -> bool:
        key, _, gen = job
        record = self._probes.get(key)
        return record is not None and record.gen == gen

    def drain_results(self) -> None:
        with self._results_lock:
            arrived, self._arrived = self._arrived, {}
        for (key, gen), verdict in arrived.items():
            self._apply(key, gen, verdict)

    def _apply(self, key: bytes, gen: int, verdict: bool) -> None:
        record = self._probes.get(key)
        if record is None or record.gen != gen:
            return  # stale
        if not record.requesters:
            del self._probes[key]  # orphaned in flight: nobody wants it any more
            return
        assert record.phase is Phase.IN_FLIGHT, f"second verdict for {key!r}"
        self._probes[key] = record._replace(phase=Phase.RESOLVED, verdict=verdict)

    def cleanup(self, req_id: str) -> None:
        for key in self._keys_of.pop(req_id, set()):
            record = self._probes.get(key)
            if record is None:
                continue
            left = record.requesters - {req_id}
            if left or record.phase is Phase.IN_FLIGHT:
                self._probes[key] = record._replace(requesters=left)
            else:
                del self._probes[key]

    def mark_miss(self, keys: Collection[bytes]) -> None:
        for key in keys:
            record = self._probes.get(key)
            if record is not None and record.phase is Phase.RESOLVED:
                self._probes[key] = record._replace(verdict=False)

    def mark_present(self, keys: Collection[bytes]) -> None:
        for key in keys:
            record = self._probes.get(key)
            if record is None or record.verdict is True:
                continue
            if not record.requesters:
                del self._probes[key]
            else:
                self._probes[key] = record._replace(
                    gen=self._fresh_generation(), phase=Phase.RESOLVED, verdict=True
                )

    def shutdown(self) -> None:
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        self._worker.join(timeout=10)
        self.drain_results()

    # -- worker thread -------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: bool(self._jobs) or self._stopping)
                if not self._jobs:
                    return  # stopping, and every queued batch is done
                batch = self._jobs.popleft()
            self._post(self._results_of(batch))

    def _results_of(self, batch: list[Job]) -> dict[tuple[bytes, int], bool]:
        ordered = sorted(batch, key=lambda job: str(job[1].req_id))
        groups = itertools.groupby(ordered, key=lambda job: str(job[1].req_id))
        return dict(
            itertools.chain.from_iterable(self._answer(list(group)) for _, group in groups)
        )

    def _answer(self, group: list[Job]) -> Iterator[tuple[tuple[bytes, int], bool]]:
        """One request group's results: one tier call with that request's context."""
        verdicts = self._verdicts([key for key, _, _ in group], group[0][1])
        for (key, _, gen), verdict in zip(group, verdicts, strict=True):
            yield (key, gen), verdict

    def _verdicts(self, keys: list[bytes], ctx: Any) -> list[bool]:
        """The tier's verdicts; any misbehaviour is a miss for every key."""
        try:
            got = list(itertools.islice(self.batch_lookup(keys, ctx), len(keys) + 1))
        except Exception as exc:  # foreign code: survive anything
            log.warning("%s: tier raised: %r", self.tier_type, exc)
            return [False] * len(keys)
        if len(got) != len(keys):
            return [False] * len(keys)
        return [v is True for v in got]

    def _post(self, results: dict[tuple[bytes, int], bool]) -> None:
        with self._results_lock:
            self._arrived.update(results)


# -- one bug each -------------------------------------------------------------------


class MarkMissOnceAssert(ConditionManager):
    """mark_miss resolves every probe of its keys, PENDING and IN_FLIGHT ones too.

    The probe's own result then reaches ``_apply``, whose once-only assertion
    trips inside the next lookup, flush or drain.  Property 3 (docs/properties.md:
    "mark_miss forced PENDING/IN_FLIGHT probes to RESOLVED; the next flush or
    drain hit an assertion and stopped the step (property 3)").
    """

    def mark_miss(self, keys: Collection[bytes]) -> None:
        for key in keys:
            record = self._probes.get(key)
            if record is not None:
                self._probes[key] = record._replace(phase=Phase.RESOLVED, verdict=False)


class OrphanStateKept(ConditionManager):
    """A result for a probe whose requesters are all cleaned up is applied, not deleted.

    The record stays in ``_probes`` for ever.  Property 5 (the protocol: "a
    result for a probe with no requesters left deletes that state"; "once
    every request is cleaned up and every result is drained, no probe state
    ... remains").  From outside it can also show as property 2: a later
    request of the key is handed the deleted probe's verdict instead of a new
    probe (2: never a verdict "computed ... for a probe that was deleted").
    """

    def _apply(self, key: bytes, gen: int, verdict: bool) -> None:
        record = self._probes.get(key)
        if record is None or record.gen != gen:
            return
        assert record.phase is Phase.IN_FLIGHT, f"second verdict for {key!r}"
        self._probes[key] = record._replace(phase=Phase.RESOLVED, verdict=verdict)


class LazyOutsideTry(ConditionManager):
    """The worker iterates the tier's answer after the try block.

    A lazy iterable that raises part-way raises outside the ``try``, killing
    the worker thread; every later probe stays unanswered.  Property 7
    (docs/properties.md: "no tier behaviour (... lazy iterable that raises ...)
    stops the worker"); the shipped bug is listed under 7 and 6.
    """

    def _verdicts(self, keys: list[bytes], ctx: Any) -> list[bool]:
        try:
            got = self.batch_lookup(keys, ctx)
        except Exception:
            return [False] * len(keys)
        verdicts = [v is True for v in got]  # the bug: a raising generator escapes here
        if len(verdicts) != len(keys):
            return [False] * len(keys)
        return verdicts


class NonBoolCoerced(ConditionManager):
    """The worker coerces each tier answer with ``bool()``: a tier's ``1`` or ``"yes"`` is True.

    The tier-answer rule of docs/protocol.md: non-bool values "yield False for every key
    it did not answer properly".  The lead files that rule under property 7;
    the verdict is the key's own probe's, so it is not property 2.
    """

    def _verdicts(self, keys: list[bytes], ctx: Any) -> list[bool]:
        try:
            got = list(itertools.islice(self.batch_lookup(keys, ctx), len(keys) + 1))
        except Exception:
            return [False] * len(keys)
        if len(got) != len(keys):
            return [False] * len(keys)
        return [bool(v) for v in got]


class OneContextPerBatch(ConditionManager):
    """The worker asks the tier once per batch, with the first entry's request context.

    Property 9 (docs/properties.md: "every key is probed with the request context
    that was batched with its probe, in a tier call that holds only that
    request's keys").
    """

    def _results_of(self, batch: list[Job]) -> dict[tuple[bytes, int], bool]:
        return dict(self._answer(batch))
