"""An async lookup manager written from docs/protocol.md alone, by an outsider.

Style ("mixin_layers"): the manager is composed by multiple inheritance from small
mixin classes, each owning one concern and its own attributes:

- ``ProbeTableMixin``: the probes (key -> state) and the generation counter;
  ``mark_miss`` and ``mark_present``, and how one result is applied;
- ``ResultInboxMixin``: what the worker posts (a ``queue.Queue`` of
  ``(key, generation, verdict)``) and what the scheduler applies; ``drain_results``;
- ``WorkerMixin``: the worker thread and the tier calls (``batch_lookup``); the
  thread waits on a ``threading.Event`` that ``flush`` sets and clears it itself;
  the submitted batches sit in a lock-protected list;
- ``BatchMixin``: the step's batch; ``flush`` (re-validate, then submit) and
  ``shutdown`` (which also drops the step's batch);
- ``RequestIndexMixin``: the request -> keys index; ``lookup`` and ``cleanup``,
  the two calls that name a request.

Plus one more small mixin, ``ClosableMixin``, that owns only the "shut down" flag
(every other call after ``shutdown()`` is a usage error: ``ManagerClosedError``).
The final class only lists its bases and wires them with cooperative
``super().__init__(**kwargs)``.  Mixins call each other only through small abstract
hook methods declared (``abc.abstractmethod``) on the mixin that needs them.  A
declaration shadows an implementation that comes later in the MRO, so the final
class lists every provider before the mixins that need it: the hooks form a DAG
(Closable <- ProbeTable <- ResultInbox <- Worker <- Batch <- RequestIndex).  That is
why ``lookup``/``cleanup`` live on the request index (they need the probe table and
the batch) and ``shutdown`` on the batch (it needs the worker and the inbox), and
why the closed flag got a mixin of its own (the worker needs the inbox's ``post``,
so the inbox cannot ask the worker whether the manager is closed).

Threads: the scheduler thread owns every table.  The worker thread touches only
the submitted-batches list (under its lock), the wake event, the request contexts
it was handed and the result queue.  No sleep is used for synchronisation.

Decisions where the protocol leaves room (docs/protocol.md, "What the spec decides
where the protocol leaves room"):

- item 1 (when a lookup drains): ``lookup`` applies posted results exactly when a
  flush happened since the last drain (a ``_drain_due`` flag), as the spec does.
- item 2 (order of request groups): the worker probes the groups of the batch in
  the order their first entry appears in it; one tier call per request group, with
  the context that was batched with the entry (the context of the request whose
  lookup created the probe, also when that request was cleaned up and another
  joined: "Cleanup while the probe is in flight", and property 9).  It posts each
  group's results as soon as that group's tier call returns, and takes the next
  batch only once every group of the batch in hand is posted.
- item 3 (what a failed tier call yields): a call that raises, whose answer is not
  iterable or raises while it is consumed (consumed inside the try), whose answer
  has another length than the keys, or which holds any element that is not a bool,
  gives ``False`` to every key of that call (the spec's choice).  At most
  ``len(keys) + 1`` elements of a lazy answer are read.
- item 4 (what shutdown drops): ``shutdown`` stops the worker (it finishes the
  batch in hand), drops the batches it never took and the step's batch, joins it,
  then applies posted results.  It keeps the probe table as it is.  A second
  ``shutdown`` does nothing; any other call after it raises ``ManagerClosedError``.
- item 5: ``mark_present`` on a probe whose verdict is already ``True`` does
  nothing; on a state with no requesters (an orphaned IN_FLIGHT probe) it deletes
  the state; otherwise a new generation, RESOLVED, ``True``.
- item 7: a repeated ``lookup`` by a requester only (maybe) applies posted results.

Other choices: requests are identified by ``req_context.req_id`` (``cleanup`` takes
the id); a result of the right generation is applied only to an IN_FLIGHT probe
(defensive: no other phase can carry that generation); ``flush`` always marks a
drain as due, even when it submits nothing.

The three one-bug copies at the end each override one method.
"""

from __future__ import annotations

import itertools
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple, Protocol


class ReqContext(Protocol):
    """What the manager needs of a request context: its request id."""

    @property
    def req_id(self) -> str: ...


class ManagerClosedError(RuntimeError):
    """A call other than ``shutdown()`` was made after ``shutdown()``."""


class Phase(Enum):
    PENDING = "PENDING"
    IN_FLIGHT = "IN_FLIGHT"
    RESOLVED = "RESOLVED"


@dataclass
class ProbeState:
    generation: int
    phase: Phase = Phase.PENDING
    verdict: bool | None = None
    requesters: set[str] = field(default_factory=set)


class Entry(NamedTuple):
    """One batch entry: the key, the context it was batched with, its generation."""

    key: bytes
    context: ReqContext
    generation: int


Result = tuple[bytes, int, bool]


# --------------------------------------------------------------------------- closed flag


class ClosableMixin:
    """Owns the "shut down" flag."""

    def __init__(self, **kwargs: Any) -> None:
        self._closed = False
        super().__init__(**kwargs)

    def _check_open(self) -> None:
        if self._closed:
            raise ManagerClosedError("the lookup manager was shut down")

    def _close(self) -> bool:
        """Mark the manager closed; False if it already was."""
        if self._closed:
            return False
        self._closed = True
        return True


# --------------------------------------------------------------------------- probe table


class ProbeTableMixin(ABC):
    """Owns the probes (key -> state) and the per-manager generation counter."""

    def __init__(self, **kwargs: Any) -> None:
        self._lookup_state: dict[bytes, ProbeState] = {}
        self._next_generation = 0
        super().__init__(**kwargs)

    @abstractmethod
    def _check_open(self) -> None:
        """Raise if the manager was shut down."""

    def _new_generation(self) -> int:
        generation = self._next_generation
        self._next_generation += 1
        return generation

    def _join_probe(self, key: bytes, req_id: str) -> tuple[bool | None, int | None]:
        """Make `req_id` a requester of the key's probe, creating a PENDING one if none.

        Returns the probe's verdict (None until RESOLVED) and the new probe's
        generation if one was created (None if the request joined a probe)."""
        state = self._lookup_state.get(key)
        if state is None:
            state = ProbeState(generation=self._new_generation(), requesters={req_id})
            self._lookup_state[key] = state
            return None, state.generation
        state.requesters.add(req_id)
        return (state.verdict if state.phase is Phase.RESOLVED else None), None

    def _drop_requester(self, key: bytes, req_id: str) -> None:
        """`req_id` is no longer a requester; delete a probe left without any,
        unless it is IN_FLIGHT (its own result deletes it)."""
        state = self._lookup_state.get(key)
        if state is None:
            return
        state.requesters.discard(req_id)
        if not state.requesters and state.phase is not Phase.IN_FLIGHT:
            del self._lookup_state[key]

    def _is_live_pending(self, key: bytes, generation: int) -> bool:
        state = self._lookup_state.get(key)
        return (
            state is not None
            and state.generation == generation
            and state.phase is Phase.PENDING
        )

    def _set_in_flight(self, key: bytes, generation: int) -> None:
        state = self._lookup_state.get(key)
        if state is not None and state.generation == generation:
            state.phase = Phase.IN_FLIGHT

    def _apply_result(self, key: bytes, generation: int, verdict: bool) -> None:
        """Apply one posted result; a stale one (no state, other generation) is ignored."""
        state = self._lookup_state.get(key)
        if state is None or state.generation != generation:
            return
        if state.phase is not Phase.IN_FLIGHT:
            return
        if not state.requesters:
            del self._lookup_state[key]
            return
        state.verdict = verdict
        state.phase = Phase.RESOLVED

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        """A load failed: every RESOLVED probe of these keys gets False."""
        self._check_open()
        for key in keys:
            state = self._lookup_state.get(key)
            if state is not None and state.phase is Phase.RESOLVED:
                state.verdict = False

    def mark_present(self, keys: Iterable[bytes]) -> None:
        """A store succeeded: new generation, RESOLVED True (or delete an orphan)."""
        self._check_open()
        for key in keys:
            state = self._lookup_state.get(key)
            if state is None or state.verdict is True:
                continue
            if not state.requesters:
                del self._lookup_state[key]
                continue
            state.generation = self._new_generation()
            state.phase = Phase.RESOLVED
            state.verdict = True


# --------------------------------------------------------------------------- result inbox


class ResultInboxMixin(ABC):
    """Owns what the worker posts and whether a drain is due."""

    def __init__(self, **kwargs: Any) -> None:
        self._results: queue.Queue[Result] = queue.Queue()
        self._drain_due = False
        super().__init__(**kwargs)

    @abstractmethod
    def _check_open(self) -> None:
        """Raise if the manager was shut down."""

    @abstractmethod
    def _apply_result(self, key: bytes, generation: int, verdict: bool) -> None:
        """Apply one posted result to the probe table."""

    def _post(self, results: list[Result]) -> None:
        """Worker thread: post the answered results of one tier call."""
        for result in results:
            self._results.put(result)

    def _apply_posted(self) -> None:
        while True:
            try:
                key, generation, verdict = self._results.get_nowait()
            except queue.Empty:
                return
            self._apply_result(key, generation, verdict)

    def _note_flushed(self) -> None:
        self._drain_due = True

    def _drain_if_due(self) -> None:
        if self._drain_due:
            self._apply_posted()
            self._drain_due = False

    def drain_results(self) -> None:
        """Apply every posted result."""
        self._check_open()
        self._apply_posted()
        self._drain_due = False


# --------------------------------------------------------------------------- worker


class WorkerMixin(ABC):
    """Owns the worker thread, its wake event, the submitted batches and the tier calls."""

    def __init__(self, *, tier_type: str, **kwargs: Any) -> None:
        self.tier_type = tier_type
        self._wake = threading.Event()
        self._submitted_lock = threading.Lock()
        self._submitted: list[list[Entry]] = []
        self._stopping = False
        super().__init__(**kwargs)
        # Started last: the mixins after this one in the MRO are built by now.
        self._worker = threading.Thread(
            target=self._worker_main, name=f"lookup-worker-{tier_type}", daemon=True
        )
        self._worker.start()

    @abstractmethod
    def _post(self, results: list[Result]) -> None:
        """Hand answered results to the scheduler."""

    def batch_lookup(self, keys: list[bytes], req_context: ReqContext) -> Iterable[object]:
        """The tier call: one verdict per key.  Override it (the oracle does)."""
        raise NotImplementedError("the tier call; a subclass provides it")

    def _submit(self, entries: list[Entry]) -> None:
        """Scheduler thread: hand one flushed batch to the worker."""
        with self._submitted_lock:
            self._submitted.append(entries)
        self._wake.set()

    def _stop_worker(self) -> None:
        """Scheduler thread: the worker finishes the batch in hand; the rest is dropped."""
        with self._submitted_lock:
            self._stopping = True
            self._submitted.clear()
        self._wake.set()
        self._worker.join()

    def _take_batch(self) -> list[Entry] | None:
        with self._submitted_lock:
            if self._stopping or not self._submitted:
                return None
            return self._submitted.pop(0)

    def _worker_main(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            while (batch := self._take_batch()) is not None:
                self._probe_batch(batch)
            with self._submitted_lock:
                if self._stopping:
                    return

    def _probe_batch(self, batch: list[Entry]) -> None:
        groups: dict[str, list[Entry]] = {}
        for entry in batch:
            groups.setdefault(entry.context.req_id, []).append(entry)
        for group in groups.values():
            self._post(self._answer_group(group))

    def _answer_group(self, group: list[Entry]) -> list[Result]:
        """One tier call for one request's entries; every key gets exactly one verdict."""
        keys = [entry.key for entry in group]
        verdicts = [False] * len(keys)
        try:
            answer = self.batch_lookup(list(keys), group[0].context)
            got = list(itertools.islice(iter(answer), len(keys) + 1))
            if len(got) == len(keys) and all(isinstance(v, bool) for v in got):
                verdicts = [bool(v) for v in got]
        except Exception:
            pass  # the tier failed: every key of the call gets False
        return [(e.key, e.generation, v) for e, v in zip(group, verdicts, strict=True)]


# --------------------------------------------------------------------------- step batch


class BatchMixin(ABC):
    """Owns the step's batch: what flush re-validates and submits."""

    def __init__(self, **kwargs: Any) -> None:
        self._lookup_batch: list[Entry] = []
        super().__init__(**kwargs)

    @abstractmethod
    def _check_open(self) -> None:
        """Raise if the manager was shut down."""

    @abstractmethod
    def _close(self) -> bool:
        """Mark the manager closed; False if it already was."""

    @abstractmethod
    def _is_live_pending(self, key: bytes, generation: int) -> bool:
        """Does the key still have a PENDING state of this generation?"""

    @abstractmethod
    def _set_in_flight(self, key: bytes, generation: int) -> None:
        """The probe of this key and generation was submitted."""

    @abstractmethod
    def _apply_posted(self) -> None:
        """Apply every posted result."""

    @abstractmethod
    def _note_flushed(self) -> None:
        """A flush happened: the next lookup drains."""

    @abstractmethod
    def _submit(self, entries: list[Entry]) -> None:
        """Hand one batch to the worker."""

    @abstractmethod
    def _stop_worker(self) -> None:
        """Stop and join the worker, dropping the batches it never took."""

    def _enqueue_entry(self, key: bytes, context: ReqContext, generation: int) -> None:
        self._lookup_batch.append(Entry(key, context, generation))

    def _revalidate(self, entries: list[Entry]) -> list[Entry]:
        """The entries whose key still has a PENDING state of the same generation."""
        return [e for e in entries if self._is_live_pending(e.key, e.generation)]

    def flush(self) -> None:
        """End of a step: apply posted results, submit the live entries of the batch."""
        self._check_open()
        self._apply_posted()
        entries = list(self._lookup_batch)
        self._lookup_batch.clear()
        live = self._revalidate(entries)
        for entry in live:
            self._set_in_flight(entry.key, entry.generation)
        if live:
            self._submit(live)
        self._note_flushed()

    def shutdown(self) -> None:
        """Stop the worker, drop what was never taken, apply posted results.  Idempotent."""
        if not self._close():
            return
        self._stop_worker()
        self._lookup_batch.clear()
        self._apply_posted()


# --------------------------------------------------------------------------- request index


class RequestIndexMixin(ABC):
    """Owns the request -> keys index: lookup and cleanup."""

    def __init__(self, **kwargs: Any) -> None:
        self._req_keys: dict[str, set[bytes]] = {}
        super().__init__(**kwargs)

    @abstractmethod
    def _check_open(self) -> None:
        """Raise if the manager was shut down."""

    @abstractmethod
    def _drain_if_due(self) -> None:
        """Apply posted results if a flush happened since the last drain."""

    @abstractmethod
    def _join_probe(self, key: bytes, req_id: str) -> tuple[bool | None, int | None]:
        """Join or create the key's probe: (verdict, new generation or None)."""

    @abstractmethod
    def _drop_requester(self, key: bytes, req_id: str) -> None:
        """The request stops being a requester of the key's probe."""

    @abstractmethod
    def _enqueue_entry(self, key: bytes, context: ReqContext, generation: int) -> None:
        """Append a new probe's entry to the step's batch."""

    def lookup(self, key: bytes, req_context: ReqContext) -> bool | None:
        """Is the key in the tier?  None until its probe is RESOLVED."""
        self._check_open()
        self._drain_if_due()
        req_id = req_context.req_id
        verdict, new_generation = self._join_probe(key, req_id)
        self._req_keys.setdefault(req_id, set()).add(key)
        if new_generation is not None:
            self._enqueue_entry(key, req_context, new_generation)
        return verdict

    def cleanup(self, req_id: str) -> None:
        """The request finished or was cancelled: forget it everywhere."""
        self._check_open()
        for key in self._req_keys.pop(req_id, set()):
            self._drop_requester(key, req_id)


# --------------------------------------------------------------------------- the manager


class MixinLayersManager(
    ClosableMixin,
    ProbeTableMixin,
    ResultInboxMixin,
    WorkerMixin,
    BatchMixin,
    RequestIndexMixin,
):
    """The async lookup manager: providers listed before the mixins whose hooks they fill."""

    def __init__(self, tier_type: str) -> None:
        super().__init__(tier_type=tier_type)


# --------------------------------------------------------------------------- one-bug copies


class FlushSubmitsWholeBatch(MixinLayersManager):
    """Bug: flush submits the whole batch without re-validating it (vLLM #55075's seed).

    Property 1 of docs/properties.md (no cleaned-up entry is submitted): an entry
    whose probe was cleaned up (or superseded by mark_present) still reaches the tier.
    """

    def _revalidate(self, entries: list[Entry]) -> list[Entry]:
        return list(entries)


class ResultsAppliedByKey(MixinLayersManager):
    """Bug: a posted result is applied by key alone, ignoring its generation (vLLM #54872).

    Property 2 of docs/properties.md (no cleaned-up entry is delivered), and 3
    (exactly once): a stale result overwrites mark_present's True, or gives a newer
    probe a verdict that is not its own.
    """

    def _apply_result(self, key: bytes, generation: int, verdict: bool) -> None:
        state = self._lookup_state.get(key)
        if state is None:
            return
        if not state.requesters:
            del self._lookup_state[key]
            return
        state.verdict = verdict
        state.phase = Phase.RESOLVED


class ZipTruncatesShortAnswer(MixinLayersManager):
    """Bug: the worker zip()s the keys with the tier's answer, unchecked.

    Property 7 of docs/properties.md (survival; the oracle may see it as 6,
    progress): a short answer drops keys, whose probes stay IN_FLIGHT forever.
    """

    def _answer_group(self, group: list[Entry]) -> list[Result]:
        try:
            answer = list(self.batch_lookup([e.key for e in group], group[0].context))
        except Exception:
            answer = [False] * len(group)
        return [(e.key, e.generation, v is True) for e, v in zip(group, answer)]  # noqa: B905
