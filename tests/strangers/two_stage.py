"""An async lookup manager written from docs/protocol.md alone (style: ``two_stage``).

Style: the worker is two threads in series.  A *fetcher* thread takes submitted
batches from the flush queue and splits each into request groups; a *prober*
thread calls the tier for each group and posts its results.  They hand over
through a bounded ``queue.Queue(maxsize=1)``.  After the last group of a batch
the fetcher hands over an end-of-batch marker carrying a fresh
``threading.Event`` and waits for the prober to set it; the prober sets it only
once every group of the batch is posted, so the pair, seen as one worker, posts
everything of a batch before it takes the next ("Who does what", ``take_batch``:
"takes the next only after posting everything of the last").  Probes are plain
tuples ``(generation, phase, verdict, frozenset_of_requesters)`` replaced on
every change in a dict; posted results go into a ``list`` guarded by a
``threading.Lock`` and swapped out by the scheduler.

Decisions where docs/protocol.md leaves room ("What the spec decides where the
protocol leaves room"):

- item 1 (when a lookup drains): ``lookup`` applies posted results exactly when
  a flush happened since the last drain (``_drain_due``), as the spec does.
- item 2 (order of request groups): groups are probed in the order their
  request first appears in the batch.
- item 3 (a failed tier call): any failure of a call (it raises, the answer is
  not iterable, iterating it raises, it has too few or too many elements, or
  any element is not a ``bool``) gives ``False`` to every key of that call,
  like the spec's ``ProbeGroup(None)``.  The answer is consumed inside the
  ``try`` and at most ``len(keys) + 1`` elements are read, so an endless lazy
  answer cannot hang the prober.  Any ``BaseException`` of the tier is caught.
- item 4 (what shutdown drops): shutdown lets the pair finish the batch in hand
  (the fetcher checks the stop flag only right after taking a batch, so a batch
  taken after the stop is dropped untouched, as if never taken), joins both
  threads within one shared 10 s deadline (a tier that never returns cannot be
  stopped; the threads are daemons), applies posted results, then drops the step's batch
  and every queued batch.  Probe states are left as they are.  Shutdown is
  idempotent; any other call after it raises ``ManagerClosedError``.
- item 5 (mark_present on a probe already True): does nothing; on a state with
  no requesters it deletes the state.
- item 7: a repeated lookup by an existing requester changes nothing.

Other choices: the request context is any object with a ``req_id`` attribute;
the index and requester sets use that id, and a batch entry keeps the context
object it was batched with, which the tier call for its group carries.  A
group is the entries of one ``req_id``; its call uses the context of the
group's first entry.  ``cleanup`` never touches the step's batch (the spec's
cleanup changes only probes and index); ``flush`` drops the stale entries.
``flush`` always marks a drain as due, even when it submits nothing.

No finding of the oracle led to a change of this class.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any, Final

PENDING: Final = "PENDING"
IN_FLIGHT: Final = "IN_FLIGHT"
RESOLVED: Final = "RESOLVED"

# (generation, phase, verdict, requesters): replaced, never mutated.
Probe = tuple[int, str, bool | None, frozenset[str]]
# (key, request context, generation)
Entry = tuple[bytes, Any, int]
# (key, generation, verdict)
Result = tuple[bytes, int, bool]
# a request group: (request context, [(key, generation), ...])
Group = tuple[Any, list[tuple[bytes, int]]]


class ManagerClosedError(RuntimeError):
    """A call other than shutdown() was made after shutdown()."""


class _EndOfBatch:
    """The fetcher's marker after a batch's last group; the prober sets ``done``."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


class _Stop:
    """Tells the prober to end."""


_STOP: Final = _Stop()
_JOIN_BOUND_S: Final = 10.0
_ACK_POLL_S: Final = 0.5


class TwoStageManager:
    """A vLLM-shaped async lookup manager whose worker is a fetcher and a prober."""

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        # scheduler-thread tables
        self._lookup_state: dict[bytes, Probe] = {}
        self._req_keys: dict[str, set[bytes]] = {}
        self._lookup_batch: list[Entry] = []
        self._next_generation = 0
        self._drain_due = False
        self._closed = False
        # scheduler -> fetcher
        self._flush_queue: queue.Queue[list[Entry] | None] = queue.Queue()
        # fetcher -> prober
        self._handoff: queue.Queue[Group | _EndOfBatch | _Stop] = queue.Queue(maxsize=1)
        # prober -> scheduler
        self._posted: list[Result] = []
        self._posted_lock = threading.Lock()
        self._stop = threading.Event()
        self._prober = threading.Thread(
            target=self._prober_loop, name=f"two-stage-prober-{tier_type}", daemon=True
        )
        self._fetcher = threading.Thread(
            target=self._fetcher_loop, name=f"two-stage-fetcher-{tier_type}", daemon=True
        )
        self._prober.start()
        self._fetcher.start()

    # ------------------------------------------------------------------ tier

    def batch_lookup(self, keys: Sequence[bytes], req_context: Any) -> Iterable[Any]:
        """The tier call; a subclass (or the oracle) provides it."""
        raise NotImplementedError(f"no tier for {self.tier_type!r}")

    # ------------------------------------------------------------- scheduler

    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        self._check_open()
        if self._drain_due:
            self._apply_posted()
        req_id: str = req_context.req_id
        state = self._lookup_state.get(key)
        if state is None:
            generation = self._next_generation
            self._next_generation += 1
            state = (generation, PENDING, None, frozenset((req_id,)))
            self._lookup_state[key] = state
            self._lookup_batch.append((key, req_context, generation))
        elif req_id not in state[3]:
            state = (state[0], state[1], state[2], state[3] | {req_id})
            self._lookup_state[key] = state
        self._req_keys.setdefault(req_id, set()).add(key)
        return state[2] if state[1] == RESOLVED else None

    def flush(self) -> None:
        self._check_open()
        self._apply_posted()
        batch, self._lookup_batch = self._lookup_batch, []
        live = self._revalidate(batch)
        for key, _ctx, _generation in live:
            generation, _phase, verdict, requesters = self._lookup_state[key]
            self._lookup_state[key] = (generation, IN_FLIGHT, verdict, requesters)
        if live:
            self._flush_queue.put(live)
        self._drain_due = True

    def _revalidate(self, batch: list[Entry]) -> list[Entry]:
        """The entries whose key still has a PENDING state of the same generation."""
        live: list[Entry] = []
        for entry in batch:
            state = self._lookup_state.get(entry[0])
            if state is not None and state[0] == entry[2] and state[1] == PENDING:
                live.append(entry)
        return live

    def cleanup(self, req_id: str) -> None:
        self._check_open()
        for key in self._req_keys.pop(req_id, set()):
            state = self._lookup_state.get(key)
            if state is None or req_id not in state[3]:
                continue
            requesters = state[3] - {req_id}
            if not requesters and state[1] != IN_FLIGHT:
                del self._lookup_state[key]
            else:
                self._lookup_state[key] = (state[0], state[1], state[2], requesters)

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        self._check_open()
        for key in keys:
            state = self._lookup_state.get(key)
            if state is not None and state[1] == RESOLVED:
                self._lookup_state[key] = (state[0], RESOLVED, False, state[3])

    def mark_present(self, keys: Iterable[bytes]) -> None:
        self._check_open()
        for key in keys:
            state = self._lookup_state.get(key)
            if state is None or state[2] is True:
                continue
            if not state[3]:
                del self._lookup_state[key]
            else:
                generation = self._next_generation
                self._next_generation += 1
                self._lookup_state[key] = (generation, RESOLVED, True, state[3])

    def drain_results(self) -> None:
        self._check_open()
        self._apply_posted()

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._flush_queue.put(None)
        # the fetcher ends on the None (or drops a batch it takes after the stop) and
        # hands the prober its stop behind the last group it handed over
        deadline = time.monotonic() + _JOIN_BOUND_S
        self._fetcher.join(max(0.0, deadline - time.monotonic()))
        self._prober.join(max(0.0, deadline - time.monotonic()))
        self._apply_posted()
        self._lookup_batch = []
        while True:
            try:
                self._flush_queue.get_nowait()
            except queue.Empty:
                break

    def _check_open(self) -> None:
        if self._closed:
            raise ManagerClosedError("the manager is shut down")

    def _apply_posted(self) -> None:
        with self._posted_lock:
            posted, self._posted = self._posted, []
        self._drain_due = False
        for key, generation, verdict in posted:
            state = self._lookup_state.get(key)
            if state is None or state[0] != generation or state[1] != IN_FLIGHT:
                continue  # stale
            if not state[3]:
                del self._lookup_state[key]
            else:
                self._lookup_state[key] = (generation, RESOLVED, verdict, state[3])

    # ---------------------------------------------------------------- worker

    def _fetcher_loop(self) -> None:
        while True:
            batch = self._flush_queue.get()
            if batch is None or self._stop.is_set():
                break
            groups: dict[str, Group] = {}
            for key, ctx, generation in batch:
                req_id: str = ctx.req_id
                if req_id not in groups:
                    groups[req_id] = (ctx, [])
                groups[req_id][1].append((key, generation))
            for group in groups.values():
                self._handoff.put(group)
            end = _EndOfBatch()
            self._handoff.put(end)
            # the next batch is taken only once everything of this one is posted
            while not end.done.wait(_ACK_POLL_S):
                if not self._prober.is_alive():
                    return
        self._handoff.put(_STOP)

    def _prober_loop(self) -> None:
        while True:
            item = self._handoff.get()
            if isinstance(item, _Stop):
                return
            if isinstance(item, _EndOfBatch):
                item.done.set()
                continue
            ctx, entries = item
            results = self._probe_group(ctx, entries)
            with self._posted_lock:
                self._posted.extend(results)

    def _probe_group(self, ctx: Any, entries: list[tuple[bytes, int]]) -> list[Result]:
        """One tier call for one request's keys; every key gets exactly one result."""
        keys = [key for key, _generation in entries]
        verdicts = [False] * len(keys)
        try:
            answer = self.batch_lookup(keys, ctx)
            got = list(itertools.islice(iter(answer), len(keys) + 1))
            if len(got) == len(keys) and all(type(v) is bool for v in got):
                verdicts = [bool(v) for v in got]
        except BaseException:  # any tier failure is "absent, or the tier failed"
            verdicts = [False] * len(keys)
        return [(key, gen, v) for (key, gen), v in zip(entries, verdicts, strict=True)]


class FlushWithoutRevalidation(TwoStageManager):
    """Bug: flush submits the whole batch, cleaned-up and superseded entries too.

    The seed bug (vLLM #55075); property 1 (no cleaned-up entry is submitted).
    """

    def _revalidate(self, batch: list[Entry]) -> list[Entry]:
        return [entry for entry in batch if entry[0] in self._lookup_state]


class ResultsAppliedByKey(TwoStageManager):
    """Bug: posted results are applied by key alone, without the generation check.

    vLLM #54872; property 2 (no cleaned-up entry is delivered), also 3.
    """

    def _apply_posted(self) -> None:
        with self._posted_lock:
            posted, self._posted = self._posted, []
        self._drain_due = False
        for key, _generation, verdict in posted:
            state = self._lookup_state.get(key)
            if state is None:
                continue
            if not state[3]:
                del self._lookup_state[key]
            else:
                self._lookup_state[key] = (state[0], RESOLVED, verdict, state[3])


class ZipShortAnswer(TwoStageManager):
    """Bug: the prober zip()s the keys with the tier's answer, so a short answer drops keys.

    Those probes stay IN_FLIGHT forever.  Property 7 (survival), which the
    oracle may show as property 6 (progress).
    """

    def _probe_group(self, ctx: Any, entries: list[tuple[bytes, int]]) -> list[Result]:
        keys = [key for key, _generation in entries]
        try:
            answer = list(self.batch_lookup(keys, ctx))
        except BaseException:
            answer = [False] * len(keys)
        return [
            (key, gen, v is True) for (key, gen), v in zip(entries, answer, strict=False)
        ]


# ------------------------------------------------- one-bug copies (added by an outsider)


class StageCleanupKeepsOrphans(TwoStageManager):
    """Bug (cleanup-keeps-orphans): cleanup forgets the request but never deletes a
    probe left without requesters, so PENDING and RESOLVED orphans stay.

    Expected: property 5 (no leak): once every request is cleaned up the probe
    table still holds the key. Seen from outside it may show first as 1 (the orphaned
    PENDING probe is still live for this class's flush) or 2 (a later request reads
    the orphan's old verdict).
    """

    def cleanup(self, req_id: str) -> None:
        self._check_open()
        for key in self._req_keys.pop(req_id, set()):
            state = self._lookup_state.get(key)
            if state is None or req_id not in state[3]:
                continue
            # the bug: the state is kept even when no requester is left
            self._lookup_state[key] = (state[0], state[1], state[2], state[3] - {req_id})


class StageLazyRaiseKillsWorker(TwoStageManager):
    """Bug (lazy-raise-kills-worker): the tier's lazy answer is consumed outside the
    try, so an answer that raises part-way escapes and kills the prober thread.

    Expected: property 7 (survival): "no tier behaviour (... lazy iterable that
    raises ...) stops the worker"; oracle.md reports a dead worker as 7. (The model
    checker's variant worker-never-posts names 6, progress.)
    """

    def _probe_group(self, ctx: Any, entries: list[tuple[bytes, int]]) -> list[Result]:
        keys = [key for key, _generation in entries]
        verdicts = [False] * len(keys)
        try:
            lazy = iter(self.batch_lookup(keys, ctx))
        except BaseException:
            lazy = iter(())
        got = list(itertools.islice(lazy, len(keys) + 1))  # the bug: outside the try
        if len(got) == len(keys) and all(type(v) is bool for v in got):
            verdicts = [bool(v) for v in got]
        return [(key, gen, v) for (key, gen), v in zip(entries, verdicts, strict=True)]


class StageWrongRequestContext(TwoStageManager):
    """Bug (wrong-request-context): the fetcher hands every request group over with
    the context of the batch's last entry (a late-bound loop variable).

    Expected: property 9 (right context): a key is probed with another request's
    context as soon as a batch holds two requests.
    """

    def _fetcher_loop(self) -> None:
        while True:
            batch = self._flush_queue.get()
            if batch is None or self._stop.is_set():
                break
            members: dict[str, list[tuple[bytes, int]]] = {}
            ctx: Any = None
            for key, ctx, generation in batch:
                members.setdefault(ctx.req_id, []).append((key, generation))
            for group in members.values():
                self._handoff.put((ctx, group))  # the bug: the last entry's context
            end = _EndOfBatch()
            self._handoff.put(end)
            while not end.done.wait(_ACK_POLL_S):
                if not self._prober.is_alive():
                    return
        self._handoff.put(_STOP)
