"""A lookup manager written from docs/protocol.md alone, by an outsider.

Style ("pipe_selector"): the worker thread sleeps in a
``selectors.DefaultSelector`` on the read end of an ``os.pipe()``.  ``flush``
appends the batch to a lock-protected ``collections.deque`` and writes one
byte (``b"w"``) to the pipe to wake it; ``shutdown`` writes a distinct byte
(``b"q"``) and the worker exits when it reads it.  Results come back through a
second deque under the same lock.  Probes are small mutable objects with
``__slots__``.  The worker closes its selector when it ends; ``shutdown``
closes both pipe ends after joining it, so no file descriptor is left open.

The shape is vLLM's (docs/oracle.md, "Walkthrough: your own implementation"):
``PipeSelectorManager(tier_type)``, an overridable ``batch_lookup(keys,
req_context)`` called on the worker thread, and ``lookup(key, req_context)``,
``flush()``, ``cleanup(req_id)``, ``drain_results()``, ``shutdown()``,
``mark_miss(keys)``, ``mark_present(keys)`` on the scheduler thread.  The
tables are vLLM's names: ``_lookup_state`` (key -> probe), ``_req_keys``
(request id -> keys) and ``_lookup_batch`` (the step's ``(key, context,
generation)`` entries).

Decisions where docs/protocol.md leaves room ("What the spec decides where the
protocol leaves room"):

1. Item 1 (when a lookup drains): as the spec, ``lookup`` applies posted
   results exactly when a flush happened since the last drain (``_drain_due``);
   every drain (from lookup, flush, ``drain_results`` or shutdown) clears it.
2. Item 2 (order of request groups): the worker probes the groups in the
   order of each request's first entry in the batch, one tier call per
   request, with the context of that request's first entry (the context
   the probe was batched with, even if that request was since cleaned up
   and another joined: protocol.md, "Cleanup while the probe is in flight").
   Each group's results are posted as soon as the group is answered.
3. Item 3 (what a failed tier call yields): per key, like the reference: the
   element at the key's position is kept when it is exactly a ``bool``; a
   non-bool element, a missing element (short answer), an extra element's
   absence of meaning, or an exception (raised by the call or part-way
   through a lazy answer, which is consumed inside the ``try``) gives
   ``False``.  At most ``len(keys) + 1`` elements are read, so an endless
   lazy answer cannot hang the worker; a too-long answer keeps the first
   ``len(keys)`` proper bools.
4. Item 4 (what shutdown drops): ``shutdown`` sets a stop flag under the lock
   and writes ``b"q"``; the worker checks the flag before taking each batch,
   so it finishes the batch in hand, posts it, and never takes another.
   Shutdown then joins the worker (an unbounded join: the protocol says it
   joins, and the worker's only blocking call is the tier's), applies the
   posted results, and drops the step's batch and the queued batches.
   Shutdown is idempotent; any other call after it raises ``RuntimeError``.
5. Item 5 (mark_present on a True probe) does nothing; on a key without
   requesters it deletes the state; a key with no state is left alone (no
   state is created).
6. Not in the list: ``mark_miss`` and ``mark_present`` never drain (the
   table says so).  An empty flush submits nothing and writes no byte, but
   still sets ``_drain_due``.  The wake byte is written on a non-blocking
   write end: a full pipe already guarantees a wake-up, so ``BlockingIOError``
   is ignored (and the worker also checks the stop flag on every wake, so a
   lost ``b"q"`` cannot keep it alive).  A tier exception of any kind
   (``BaseException``) is caught on the worker thread: nothing the tier does
   may stop the worker (property 7).

The three one-bug copies at the end each override one method.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import selectors
import threading
from collections.abc import Iterable, Sequence
from typing import Protocol

__all__ = [
    "CleanupDeletesInFlight",
    "PipeSelectorManager",
    "ResultsAppliedByKey",
    "ZipTruncatesShortAnswer",
]

PENDING = 0
IN_FLIGHT = 1
RESOLVED = 2

_WAKE = b"w"
_STOP = b"q"


class ReqContext(Protocol):
    """What the manager needs of vLLM's request context: its id."""

    @property
    def req_id(self) -> str: ...


class _Probe:
    """One existence check of one key (protocol.md, "Vocabulary")."""

    __slots__ = ("generation", "phase", "requesters", "verdict")

    def __init__(self, generation: int, requester: str) -> None:
        self.generation = generation
        self.phase = PENDING
        self.verdict: bool | None = None
        self.requesters: set[str] = {requester}


Entry = tuple[bytes, ReqContext, int]
Result = tuple[bytes, int, bool]


class PipeSelectorManager:
    """An async lookup manager conforming to docs/protocol.md (vLLM's shape)."""

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        # scheduler-thread tables
        self._lookup_state: dict[bytes, _Probe] = {}
        self._req_keys: dict[str, set[bytes]] = {}
        self._lookup_batch: list[Entry] = []
        self._next_generation = 0
        self._drain_due = False
        self._closed = False
        # shared with the worker, under _lock
        self._lock = threading.Lock()
        self._work: collections.deque[list[Entry]] = collections.deque()
        self._results: collections.deque[Result] = collections.deque()
        self._stopping = False
        # the wake-up pipe
        self._rfd, self._wfd = os.pipe()
        os.set_blocking(self._rfd, False)
        os.set_blocking(self._wfd, False)
        self._worker = threading.Thread(
            target=self._run_worker, name=f"pipe-selector-lookup-{tier_type}", daemon=True
        )
        self._worker.start()

    # ------------------------------------------------------------------ tier
    def batch_lookup(self, keys: Sequence[bytes], req_context: ReqContext) -> Iterable[object]:
        """The tier call: one verdict per key. Overridden by a real tier."""
        raise NotImplementedError("override batch_lookup with the secondary tier's call")

    # ------------------------------------------------------------- scheduler
    def lookup(self, key: bytes, req_context: ReqContext) -> bool | None:
        self._check_open()
        if self._drain_due:
            self._apply_posted()
        req_id = req_context.req_id
        probe = self._lookup_state.get(key)
        if probe is None:
            generation = self._next_generation
            self._next_generation += 1
            probe = _Probe(generation, req_id)
            self._lookup_state[key] = probe
            self._lookup_batch.append((key, req_context, generation))
        else:
            probe.requesters.add(req_id)
        self._req_keys.setdefault(req_id, set()).add(key)
        return probe.verdict if probe.phase == RESOLVED else None

    def flush(self) -> None:
        self._check_open()
        self._apply_posted()
        batch, self._lookup_batch = self._lookup_batch, []
        live = self._live_entries(batch)
        self._drain_due = True
        if not live:
            return
        for key, _ctx, _generation in live:
            probe = self._lookup_state.get(key)
            if probe is not None:
                probe.phase = IN_FLIGHT
        with self._lock:
            self._work.append(live)
        self._poke(_WAKE)

    def cleanup(self, req_id: str) -> None:
        self._check_open()
        for key in self._req_keys.pop(req_id, set()):
            probe = self._lookup_state.get(key)
            if probe is None:
                continue
            probe.requesters.discard(req_id)
            if not probe.requesters and probe.phase != IN_FLIGHT:
                del self._lookup_state[key]

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        self._check_open()
        for key in keys:
            probe = self._lookup_state.get(key)
            if probe is not None and probe.phase == RESOLVED:
                probe.verdict = False

    def mark_present(self, keys: Iterable[bytes]) -> None:
        self._check_open()
        for key in keys:
            probe = self._lookup_state.get(key)
            if probe is None or probe.verdict is True:
                continue
            if not probe.requesters:
                del self._lookup_state[key]
                continue
            probe.generation = self._next_generation
            self._next_generation += 1
            probe.phase = RESOLVED
            probe.verdict = True

    def drain_results(self) -> None:
        self._check_open()
        self._apply_posted()

    def shutdown(self) -> None:
        if self._closed:
            return
        with self._lock:
            self._stopping = True
        self._poke(_STOP)
        self._worker.join()
        self._closed = True
        self._apply_posted()
        self._lookup_batch.clear()
        with self._lock:
            self._work.clear()
        os.close(self._wfd)
        os.close(self._rfd)

    # --------------------------------------------------------------- helpers
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the lookup manager is shut down")

    def _poke(self, byte: bytes) -> None:
        # a full pipe already wakes the worker, which checks the stop flag too
        with contextlib.suppress(BlockingIOError):
            os.write(self._wfd, byte)

    def _live_entries(self, batch: list[Entry]) -> list[Entry]:
        """The entries whose key still has a probe of the same generation."""
        live: list[Entry] = []
        for entry in batch:
            probe = self._lookup_state.get(entry[0])
            if probe is not None and probe.generation == entry[2] and probe.phase == PENDING:
                live.append(entry)
        return live

    def _apply_posted(self) -> None:
        with self._lock:
            posted = list(self._results)
            self._results.clear()
        self._drain_due = False
        for key, generation, verdict in posted:
            self._apply_result(key, generation, verdict)

    def _apply_result(self, key: bytes, generation: int, verdict: bool) -> None:
        probe = self._lookup_state.get(key)
        if probe is None or probe.generation != generation or probe.phase != IN_FLIGHT:
            return  # stale
        if not probe.requesters:
            del self._lookup_state[key]
            return
        probe.verdict = verdict
        probe.phase = RESOLVED

    # ---------------------------------------------------------------- worker
    def _run_worker(self) -> None:
        selector = selectors.DefaultSelector()
        try:
            selector.register(self._rfd, selectors.EVENT_READ)
            while True:
                selector.select()
                try:
                    data = os.read(self._rfd, 4096)
                except BlockingIOError:
                    data = b""
                if _STOP in data:
                    return
                while True:
                    with self._lock:
                        if self._stopping or not self._work:
                            stop = self._stopping
                            break
                        batch = self._work.popleft()
                    self._probe_batch(batch)
                if stop:
                    return
        finally:
            selector.close()

    def _probe_batch(self, batch: list[Entry]) -> None:
        groups: dict[str, tuple[ReqContext, list[Entry]]] = {}
        for entry in batch:
            ctx = entry[1]
            groups.setdefault(ctx.req_id, (ctx, []))[1].append(entry)
        for ctx, entries in groups.values():
            results = self._probe_group(entries, ctx)
            with self._lock:
                self._results.extend(results)

    def _probe_group(self, entries: list[Entry], ctx: ReqContext) -> list[Result]:
        keys = [key for key, _c, _g in entries]
        answers: list[object] = []
        try:
            # consumed inside the try: a lazy answer may raise part-way
            for answer in itertools.islice(self.batch_lookup(keys, ctx), len(keys) + 1):
                answers.append(answer)
        except BaseException:
            pass  # the tier may not stop the worker: unanswered keys get False
        verdicts: list[bool] = []
        for i in range(len(keys)):
            answer = answers[i] if i < len(answers) else False
            verdicts.append(answer if type(answer) is bool else False)
        return [
            (key, gen, verdict)
            for (key, _c, gen), verdict in zip(entries, verdicts, strict=True)
        ]


class ResultsAppliedByKey(PipeSelectorManager):
    """One bug: posted results are applied by key, without the generation check.

    vLLM #54872's bug.  A result of an old generation (its probe superseded by
    mark_present) overwrites the new probe's verdict.  docs/properties.md names
    it property 2 (no cleaned-up entry is delivered), also 3 (exactly once).
    """

    def _apply_result(self, key: bytes, generation: int, verdict: bool) -> None:
        probe = self._lookup_state.get(key)
        if probe is None:
            return
        if not probe.requesters:
            del self._lookup_state[key]
            return
        probe.verdict = verdict
        probe.phase = RESOLVED


class CleanupDeletesInFlight(PipeSelectorManager):
    """One bug: cleanup deletes a probe left without requesters even when IN_FLIGHT.

    A later request for the key then probes it again.  docs/properties.md names
    it property 8 (no redundant probe, efficiency): reported as a failure only
    with --strict-efficiency.
    """

    def cleanup(self, req_id: str) -> None:
        self._check_open()
        for key in self._req_keys.pop(req_id, set()):
            probe = self._lookup_state.get(key)
            if probe is None:
                continue
            probe.requesters.discard(req_id)
            if not probe.requesters:
                del self._lookup_state[key]


class ZipTruncatesShortAnswer(PipeSelectorManager):
    """One bug: the worker zip()s the keys with the tier's answer.

    A short answer (or a raising call) drops keys, so their probes stay
    IN_FLIGHT forever.  docs/properties.md names it property 7 (survival,
    ``tier_answers_every_key``); the oracle is said to see it first as a verdict
    that never comes (property 6).
    """

    def _probe_group(self, entries: list[Entry], ctx: ReqContext) -> list[Result]:
        keys = [key for key, _c, _g in entries]
        try:
            answers = list(self.batch_lookup(keys, ctx))
        except Exception:
            answers = []
        return [
            (key, gen, answer if type(answer) is bool else False)
            for (key, _c, gen), answer in zip(entries, answers)  # noqa: B905 - the bug
        ]
