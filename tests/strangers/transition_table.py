"""An async lookup manager written from docs/protocol.md alone, by an outsider.

Style: an h11-like table-driven state machine. A probe's phase is a plain int
(ABSENT, PENDING, IN_FLIGHT, RESOLVED). Every scheduler-side change of a probe
goes through one transition table, ``TRANSITIONS: dict[tuple[int, str], int]``
mapping (phase, event name) to the next phase; a pair missing from the table
raises ``IllegalTransition``. The worker is a ``threading.Thread`` subclass
with its own ``run()``: flushed batches reach it through one ``queue.Queue``,
and it answers through a second ``queue.Queue`` of per-request-group records,
which the scheduler empties (``get_nowait`` until ``Empty``) whenever the
protocol says results are applied. No enums; records use ``__slots__``.

Shape (docs/oracle.md, "Walkthrough: your own implementation"): constructed
with one ``tier_type`` string; an overridable ``batch_lookup(keys,
req_context)`` that the worker thread calls; the scheduler calls
``lookup(key, req_context)``, ``flush()``, ``cleanup(req_id)``,
``drain_results()``, ``shutdown()``, ``mark_miss(keys)`` and
``mark_present(keys)``. A request is identified by ``req_context.req_id``.

Decisions where docs/protocol.md leaves room (section "What the spec decides
where the protocol leaves room", items 1-7):

1. When a lookup drains (item 1): exactly when a flush happened since the last
   drain (a ``_drain_due`` flag, set by every flush, cleared by every drain).
2. Order of request groups (item 2): the worker groups the batch in hand by
   request id, in order of each request's first entry, one tier call per group,
   with the context of that request's first entry in the batch (the context the
   entries were batched with, property 9). Each group's results are posted as
   one record as soon as the group is answered; the next batch is taken only
   after every group of the one in hand is posted ("The operations",
   ``take_batch``).
3. A failed tier call (item 3): per key, the proper bool the tier gave at that
   position (an element that ``is True`` or ``is False``), else ``False``. The
   answer is consumed inside the ``try`` and only ``len(keys)`` elements are
   read, so a raising call, a raising lazy iterable, a short, long or
   non-iterable answer, or a non-bool element never stops the worker; a key
   not properly answered gets ``False``.
4. Shutdown (item 4, and "The operations", ``shutdown``): sets a stop event and
   wakes the worker; the worker finishes the batch in hand and exits at its
   next take, so queued batches are never probed (they are also emptied from
   the queue after the join); the step's batch is dropped; posted results are
   applied. The join is bounded (60 s) so shutdown itself cannot hang forever
   on a tier that never returns. Idempotent; every other call after it raises
   ``ManagerClosedError``.
5. mark_present on a probe already RESOLVED True does nothing (item 5); on a
   state without requesters (only an orphaned IN_FLIGHT probe) it deletes the
   state; otherwise new generation, RESOLVED, True.
6. A repeated lookup by a request that is already a requester changes nothing
   but may drain (item 7): it fires the "join" event, which keeps the phase.
7. Flush re-validates by generation ("The one rule"): an entry is submitted
   only if its key still has a state of the entry's generation; the flush then
   fires "flush" on it, which the table allows only from PENDING (so a state
   of the same generation that is not PENDING would raise rather than be sent
   twice). An empty selection submits nothing.
8. The tables belong to the scheduler thread ("Who does what"); they take no
   lock. The worker sees only the immutable batch tuples and the two queues.

Found by my own plain self-check (not by the oracle): the worker first kept
its stop event in ``self._stop``, which shadows ``threading.Thread._stop`` and
made ``join()`` raise; renamed ``_stop_event``. The oracle found nothing on the
correct class (seeds 0-4, --faults all --strict-efficiency, 300 examples).

Three one-bug copies follow the correct class, each overriding one method or
one class attribute.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable, Iterable
from typing import ClassVar, Protocol

# Phases of a probe: plain ints. ABSENT means "the key has no state".
ABSENT = 0
PENDING = 1
IN_FLIGHT = 2
RESOLVED = 3

PHASE_NAMES = {ABSENT: "ABSENT", PENDING: "PENDING", IN_FLIGHT: "IN_FLIGHT", RESOLVED: "RESOLVED"}

_JOIN_BOUND_S = 60.0


class IllegalTransition(RuntimeError):
    """A (phase, event) pair the transition table does not allow."""


class ManagerClosedError(RuntimeError):
    """A call other than shutdown() after shutdown()."""


class ReqContext(Protocol):
    """What the manager needs of a request context: its request id."""

    @property
    def req_id(self) -> str: ...


Entry = tuple[bytes, ReqContext, int]  # (key, context batched with, generation)
Result = tuple[bytes, int, bool]  # (key, generation, verdict)


class _Probe:
    """The state of one key: generation, phase, verdict, requesters."""

    __slots__ = ("generation", "phase", "requesters", "verdict")

    def __init__(self, generation: int, phase: int) -> None:
        self.generation = generation
        self.phase = phase
        self.verdict: bool | None = None
        self.requesters: set[str] = set()


class _GroupRecord:
    """What the worker posts for one request group: its results."""

    __slots__ = ("results",)

    def __init__(self, results: tuple[Result, ...]) -> None:
        self.results = results


class _LookupWorker(threading.Thread):
    """The worker: take_batch, one probe_group per request group, post."""

    def __init__(
        self,
        probe_group: Callable[[list[bytes], ReqContext], list[bool]],
        inbox: queue.Queue[tuple[Entry, ...] | None],
        outbox: queue.Queue[_GroupRecord],
        stop: threading.Event,
    ) -> None:
        super().__init__(name="transition-table-lookup-worker", daemon=True)
        self._probe_group = probe_group
        self._inbox = inbox
        self._outbox = outbox
        self._stop_event = stop

    def run(self) -> None:
        while True:
            batch = self._inbox.get()
            if batch is None or self._stop_event.is_set():
                return  # stopped: a batch taken now is dropped unprobed
            groups: dict[str, tuple[ReqContext, list[tuple[bytes, int]]]] = {}
            for key, ctx, generation in batch:
                groups.setdefault(ctx.req_id, (ctx, []))[1].append((key, generation))
            for ctx, members in groups.values():
                verdicts = self._probe_group([key for key, _ in members], ctx)
                # _probe_group owes one verdict per key; the zip trusts it
                results = tuple(
                    (key, generation, verdict)
                    for (key, generation), verdict in zip(members, verdicts, strict=False)
                )
                self._outbox.put(_GroupRecord(results))


class TransitionTableManager:
    """Async lookup manager; every probe change goes through TRANSITIONS."""

    TRANSITIONS: ClassVar[dict[tuple[int, str], int]] = {
        # a lookup of a key with no state creates a PENDING probe
        (ABSENT, "lookup"): PENDING,
        # a lookup of a key with a state joins it (requesters only)
        (PENDING, "join"): PENDING,
        (IN_FLIGHT, "join"): IN_FLIGHT,
        (RESOLVED, "join"): RESOLVED,
        # flush submits a live PENDING probe, once
        (PENDING, "flush"): IN_FLIGHT,
        # the probe's own result, with requesters / without
        (IN_FLIGHT, "result"): RESOLVED,
        (IN_FLIGHT, "result_orphaned"): ABSENT,
        # cleanup left the probe without requesters: deleted unless in flight
        (PENDING, "cleanup_orphaned"): ABSENT,
        (IN_FLIGHT, "cleanup_orphaned"): IN_FLIGHT,
        (RESOLVED, "cleanup_orphaned"): ABSENT,
        # mark_miss moves only RESOLVED probes (to verdict False)
        (PENDING, "mark_miss"): PENDING,
        (IN_FLIGHT, "mark_miss"): IN_FLIGHT,
        (RESOLVED, "mark_miss"): RESOLVED,
        # mark_present: new generation, True; or deleted when orphaned
        (PENDING, "mark_present"): RESOLVED,
        (IN_FLIGHT, "mark_present"): RESOLVED,
        (RESOLVED, "mark_present"): RESOLVED,
        (IN_FLIGHT, "mark_present_orphaned"): ABSENT,
    }

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        self._probes: dict[bytes, _Probe] = {}
        self._by_request: dict[str, set[bytes]] = {}
        self._batch: list[Entry] = []
        self._next_generation = 0
        self._drain_due = False
        self._closed = False
        self._stop_event = threading.Event()
        self._inbox: queue.Queue[tuple[Entry, ...] | None] = queue.Queue()
        self._results: queue.Queue[_GroupRecord] = queue.Queue()
        self._worker = _LookupWorker(
            self._probe_group, self._inbox, self._results, self._stop_event
        )
        self._worker.start()

    # -- the tier (the oracle, or a real tier, overrides this) -------------

    def batch_lookup(self, keys: list[bytes], req_context: ReqContext) -> Iterable[bool]:
        raise NotImplementedError("subclass and call the secondary tier here")

    # -- the state machine --------------------------------------------------

    def _fire(self, phase: int, event: str) -> int:
        try:
            return self.TRANSITIONS[(phase, event)]
        except KeyError:
            raise IllegalTransition(
                f"event {event!r} is not allowed in phase {PHASE_NAMES.get(phase, phase)}"
            ) from None

    def _move(self, key: bytes, state: _Probe, event: str) -> int:
        nxt = self._fire(state.phase, event)
        if nxt == ABSENT:
            del self._probes[key]
        state.phase = nxt
        return nxt

    def _new_generation(self) -> int:
        generation = self._next_generation
        self._next_generation += 1
        return generation

    def _check_open(self) -> None:
        if self._closed:
            raise ManagerClosedError("the lookup manager is shut down")

    # -- worker side ----------------------------------------------------------

    def _probe_group(self, keys: list[bytes], req_context: ReqContext) -> list[bool]:
        """One tier call for one request's keys; never raises, one verdict per key."""
        verdicts = [False] * len(keys)
        try:
            answer = self.batch_lookup(list(keys), req_context)
            for i, value in enumerate(itertools.islice(answer, len(keys))):
                verdicts[i] = value is True
        except Exception:  # any tier failure: "absent" for the keys not answered
            pass
        return verdicts

    # -- scheduler side -------------------------------------------------------

    def _apply_posted(self) -> None:
        self._drain_due = False
        while True:
            try:
                record = self._results.get_nowait()
            except queue.Empty:
                return
            for key, generation, verdict in record.results:
                self._apply_result(key, generation, verdict)

    def _apply_result(self, key: bytes, generation: int, verdict: bool) -> None:
        state = self._probes.get(key)
        if state is None or state.generation != generation:
            return  # stale: deleted or superseded
        if not state.requesters:
            self._move(key, state, "result_orphaned")
            return
        self._move(key, state, "result")
        state.verdict = verdict

    def _submittable(self, batch: list[Entry]) -> list[Entry]:
        """The entries whose key still has a state of the entry's generation."""
        submit: list[Entry] = []
        for entry in batch:
            state = self._probes.get(entry[0])
            if state is not None and state.generation == entry[2]:
                submit.append(entry)
        return submit

    def lookup(self, key: bytes, req_context: ReqContext) -> bool | None:
        self._check_open()
        if self._drain_due:
            self._apply_posted()
        req_id = req_context.req_id
        state = self._probes.get(key)
        if state is None:
            state = _Probe(self._new_generation(), self._fire(ABSENT, "lookup"))
            self._probes[key] = state
            self._batch.append((key, req_context, state.generation))
        else:
            self._move(key, state, "join")
        state.requesters.add(req_id)
        self._by_request.setdefault(req_id, set()).add(key)
        return state.verdict if state.phase == RESOLVED else None

    def flush(self) -> None:
        self._check_open()
        self._apply_posted()
        batch, self._batch = self._batch, []
        submit = self._submittable(batch)
        for key, _ctx, generation in submit:
            state = self._probes.get(key)
            # only the entry's own probe moves (a stale entry moves nothing)
            if state is not None and state.generation == generation:
                self._move(key, state, "flush")
        if submit:
            self._inbox.put(tuple(submit))
        self._drain_due = True

    def cleanup(self, req_id: str) -> None:
        self._check_open()
        for key in self._by_request.pop(req_id, set()):
            state = self._probes.get(key)
            if state is None:
                continue
            state.requesters.discard(req_id)
            if not state.requesters:
                self._move(key, state, "cleanup_orphaned")

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        self._check_open()
        for key in keys:
            state = self._probes.get(key)
            if state is None:
                continue
            if self._move(key, state, "mark_miss") == RESOLVED:
                state.verdict = False

    def mark_present(self, keys: Iterable[bytes]) -> None:
        self._check_open()
        for key in keys:
            state = self._probes.get(key)
            if state is None or (state.phase == RESOLVED and state.verdict is True):
                continue
            if not state.requesters:
                self._move(key, state, "mark_present_orphaned")
                continue
            self._move(key, state, "mark_present")
            state.generation = self._new_generation()
            state.verdict = True

    def drain_results(self) -> None:
        self._check_open()
        self._apply_posted()

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop_event.set()
        self._inbox.put(None)
        self._worker.join(timeout=_JOIN_BOUND_S)
        while True:  # batches the worker never took are dropped
            try:
                self._inbox.get_nowait()
            except queue.Empty:
                break
        self._batch.clear()
        self._apply_posted()


# -- one-bug copies ------------------------------------------------------------


class FlushSubmitsStale(TransitionTableManager):
    """Bug: flush submits the whole batch without re-validating it (vLLM #55075).

    A cleaned-up or superseded entry still reaches the tier. Property 1
    (no cleaned-up entry is submitted).
    """

    def _submittable(self, batch: list[Entry]) -> list[Entry]:
        return list(batch)


class CleanupDeletesInFlight(TransitionTableManager):
    """Bug: cleanup deletes an orphaned IN_FLIGHT probe, so a later request
    probes the key again instead of joining it.

    Property 8 (no redundant probe, efficiency).
    """

    TRANSITIONS: ClassVar[dict[tuple[int, str], int]] = {
        **TransitionTableManager.TRANSITIONS,
        (IN_FLIGHT, "cleanup_orphaned"): ABSENT,
    }


class ZipTruncates(TransitionTableManager):
    """Bug: the tier's answer is zipped with the keys, so a short answer
    silently drops keys, which stay IN_FLIGHT forever.

    Property 7 (survival; predicate tier_answers_every_key), and 6 (progress).
    The oracle, seeing a black box, names 6 (the verdict is never posted).
    """

    def _probe_group(self, keys: list[bytes], req_context: ReqContext) -> list[bool]:
        try:
            answer = list(self.batch_lookup(list(keys), req_context))
        except Exception:
            return [False] * len(keys)
        return [value is True for _key, value in zip(keys, answer, strict=False)]


# -- one-bug copies added by a second outsider ----------------------------------


class TableCleanupKeepsRequester(TransitionTableManager):
    """Bug (cleanup-keeps-requester): cleanup drops the request from the index
    but leaves it among the requesters of a probe it shares with another
    request (a probe it alone asked for is handled as in the correct class).

    Expected from outside: property 4 (bookkeeping). Why: once every request
    is cleaned up, the shared probe still names the cleaned-up request (and is
    never orphaned, so never deleted), which the leak check reads as "its
    probes still naming a cleaned-up request".
    """

    def cleanup(self, req_id: str) -> None:
        self._check_open()
        for key in self._by_request.pop(req_id, set()):
            state = self._probes.get(key)
            if state is None:
                continue
            if state.requesters - {req_id}:
                continue  # the bug: a shared probe keeps the request
            state.requesters.discard(req_id)
            if not state.requesters:
                self._move(key, state, "cleanup_orphaned")


class TableCleanupKeepsOrphans(TransitionTableManager):
    """Bug (cleanup-keeps-orphans): cleanup forgets the request but never
    deletes a probe left without requesters: PENDING and RESOLVED orphans stay
    (the table's "cleanup_orphaned" event keeps every phase).

    Expected from outside: property 5 (no leak). Why: after every request is
    cleaned up and every result applied, the probe table still holds the key.
    (A kept PENDING orphan is also still submitted at the next flush, which
    from outside looks like property 1.)
    """

    TRANSITIONS: ClassVar[dict[tuple[int, str], int]] = {
        **TransitionTableManager.TRANSITIONS,
        (PENDING, "cleanup_orphaned"): PENDING,
        (RESOLVED, "cleanup_orphaned"): RESOLVED,
    }


class TableLazyRaiseKillsWorker(TransitionTableManager):
    """Bug (lazy-raise-kills-worker): the tier call is inside the try, but its
    answer is consumed outside it, so a lazy answer that raises part-way (or a
    non-iterable answer) raises in the worker thread and kills it.

    Expected from outside: property 7 (survival). Why: docs/oracle.md reports
    a worker thread that died of an uncaught exception as property 7 (the
    model checker's variant worker-never-posts names 6, progress).
    """

    def _probe_group(self, keys: list[bytes], req_context: ReqContext) -> list[bool]:
        verdicts = [False] * len(keys)
        try:
            answer: Iterable[bool] = self.batch_lookup(list(keys), req_context)
        except Exception:
            return verdicts
        # the bug: a lazy answer raising here is outside the try
        for i, value in enumerate(itertools.islice(answer, len(keys))):
            verdicts[i] = value is True
        return verdicts


class TableWrongRequestContext(TransitionTableManager):
    """Bug (wrong-request-context): the worker keeps the context of its first
    tier call and makes every later tier call with it, so a later request
    group is probed with another request's context (groups are still right).

    Expected from outside: property 9 (right context). Why: the oracle's tier
    sees a call for one request's keys carrying another request's context.
    """

    _tier_context: ReqContext | None = None

    def _probe_group(self, keys: list[bytes], req_context: ReqContext) -> list[bool]:
        if self._tier_context is None:
            self._tier_context = req_context
        # the bug: the remembered context, not the group's own
        return super()._probe_group(keys, self._tier_context)
