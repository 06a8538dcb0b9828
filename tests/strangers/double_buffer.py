"""A vLLM-shaped async lookup manager, written from docs/protocol.md alone.

Style: double buffering. ``lookup`` appends new batch entries to a *front*
buffer; ``flush`` swaps the front and back buffers under a lock, re-validates
the old front (now the back) into the submitted batch, hands it to the worker
and signals it with a ``threading.Semaphore``. The worker probes a batch's
request groups in REVERSE order of their first appearance in the batch,
collects every group's results and posts the whole batch's results at once,
as one list, after its last group. Probes are ``@dataclass(slots=True)``
objects in a plain dict; the request index is a ``collections.defaultdict(set)``.

Shape (docs/oracle.md, "Walkthrough: your own implementation"): constructed
with one ``tier_type`` string; an overridable ``batch_lookup(keys,
req_context)`` called by the manager's own worker thread; the scheduler calls
``lookup(key, req_context)``, ``flush()``, ``cleanup(req_id)``,
``drain_results()``, ``shutdown()``, ``mark_miss(keys)``, ``mark_present(keys)``.
A request is identified by ``req_context.req_id``.

Decisions where docs/protocol.md leaves room (section "What the spec decides
where the protocol leaves room", item N):

- item 1 (when a lookup drains): ``lookup`` applies posted results exactly
  when a flush happened since the last drain (a ``_drain_due`` flag), as the
  spec does. ``flush`` and ``shutdown`` always drain; ``cleanup``,
  ``mark_miss`` and ``mark_present`` never do (section "The operations").
- item 2 (order of request groups): the reverse of the order of each group's
  first entry in the batch in hand (this module's style). The group of a
  request is probed with the context of that request's first entry in the
  batch (property 9: the context the probe was batched with).
- item 3 (what a failed tier call yields): as the spec, every key of the call
  gets ``False`` when the call raises, its answer is not iterable, iterating
  it raises part-way, it has another length than the keys, or any element is
  not a ``bool``. The answer is read at most ``len(keys) + 1`` elements deep,
  so an endless lazy answer cannot hang the worker.
- item 4 (what shutdown drops): ``shutdown`` sets a stop flag and drops, under
  the lock, every submitted batch the worker has not taken, then wakes the
  worker; the worker finishes and posts the batch in hand and exits. Shutdown
  joins it (bounded wait), applies posted results, and drops the step's batch
  (the front buffer). Idempotent; any other call after it raises
  ``ManagerClosedError``.
- item 5 (mark_present): a key with no state, or whose state's verdict is
  already ``True``, is left alone (no new generation); a state without
  requesters is deleted; otherwise a new generation, verdict ``True``,
  RESOLVED.
- item 7 (asking again): a repeated ``lookup`` by a requester creates nothing.

Other choices: results are ``(key, generation, verdict)`` tuples posted as one
list per batch on a ``queue.Queue``. A result is applied only when its key's
state has the same generation and is IN_FLIGHT (section "The one rule");
otherwise it is stale and ignored. The probe table, request index and step's
buffers belong to the scheduler thread; the worker sees only the fresh
submitted-batch lists and the results queue.
"""

from __future__ import annotations

import collections
import enum
import itertools
import queue
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

__all__ = [
    "DoubleBufferManager",
    "FlushWithoutRevalidation",
    "ManagerClosedError",
    "ResultsAppliedByKey",
    "ZipTruncatesShortAnswer",
]

_JOIN_TIMEOUT_S = 30.0


class RequestContext(Protocol):
    """What the tier is given: it carries the request's id."""

    @property
    def req_id(self) -> str: ...


class ManagerClosedError(RuntimeError):
    """A call other than shutdown() after shutdown()."""


class Phase(enum.Enum):
    PENDING = "PENDING"
    IN_FLIGHT = "IN_FLIGHT"
    RESOLVED = "RESOLVED"


@dataclass(slots=True)
class Probe:
    generation: int
    phase: Phase = Phase.PENDING
    verdict: bool | None = None
    requesters: set[str] = field(default_factory=set)


# (key, request context, generation): one batch entry.
Entry = tuple[bytes, RequestContext, int]
# (key, generation, verdict): one result.
Result = tuple[bytes, int, bool]


class DoubleBufferManager:
    """The correct class: meant to conform to docs/protocol.md in every respect."""

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        # scheduler-thread tables
        self._probes: dict[bytes, Probe] = {}
        self._req_index: collections.defaultdict[str, set[bytes]] = collections.defaultdict(set)
        self._front: list[Entry] = []
        self._back: list[Entry] = []
        self._next_generation = 0
        self._drain_due = False
        self._closed = False
        # hand-off to the worker
        self._lock = threading.Lock()
        self._submitted: collections.deque[list[Entry]] = collections.deque()
        self._signal = threading.Semaphore(0)
        self._stopping = False
        # hand-back from the worker
        self._results: queue.Queue[list[Result]] = queue.Queue()
        self._worker = threading.Thread(
            target=self._worker_loop, name=f"double-buffer-lookup-{tier_type}", daemon=True
        )
        self._worker.start()

    # ------------------------------------------------------------------ tier
    def batch_lookup(self, keys: list[bytes], req_context: RequestContext) -> Iterable[object]:
        """One tier call for one request's keys. Override with the real tier."""
        raise NotImplementedError(f"no tier for {self.tier_type!r}")

    # ------------------------------------------------------------- scheduler
    def _check_open(self) -> None:
        if self._closed:
            raise ManagerClosedError("the lookup manager was shut down")

    def lookup(self, key: bytes, req_context: RequestContext) -> bool | None:
        self._check_open()
        if self._drain_due:
            self._drain()
        req_id = req_context.req_id
        probe = self._probes.get(key)
        if probe is None:
            generation = self._next_generation
            self._next_generation += 1
            probe = Probe(generation)
            self._probes[key] = probe
            self._front.append((key, req_context, generation))
        probe.requesters.add(req_id)
        self._req_index[req_id].add(key)
        return probe.verdict if probe.phase is Phase.RESOLVED else None

    def flush(self) -> None:
        self._check_open()
        self._drain()
        with self._lock:
            self._front, self._back = self._back, self._front
            batch = self._revalidate(self._back)
            self._back.clear()
            for key, _ctx, gen in batch:
                probe = self._probes.get(key)
                if probe is not None and probe.generation == gen:
                    probe.phase = Phase.IN_FLIGHT
            if batch:
                self._submitted.append(batch)
                self._signal.release()
        self._drain_due = True

    def _revalidate(self, entries: list[Entry]) -> list[Entry]:
        """The entries whose key still has a PENDING state of the same generation."""
        live: list[Entry] = []
        for key, ctx, gen in entries:
            probe = self._probes.get(key)
            if probe is not None and probe.generation == gen and probe.phase is Phase.PENDING:
                live.append((key, ctx, gen))
        return live

    def cleanup(self, req_id: str) -> None:
        self._check_open()
        for key in self._req_index.pop(req_id, set()):
            probe = self._probes.get(key)
            if probe is None:
                continue
            probe.requesters.discard(req_id)
            if not probe.requesters and probe.phase is not Phase.IN_FLIGHT:
                del self._probes[key]

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        self._check_open()
        for key in keys:
            probe = self._probes.get(key)
            if probe is not None and probe.phase is Phase.RESOLVED:
                probe.verdict = False

    def mark_present(self, keys: Iterable[bytes]) -> None:
        self._check_open()
        for key in keys:
            probe = self._probes.get(key)
            if probe is None or (probe.phase is Phase.RESOLVED and probe.verdict is True):
                continue
            if not probe.requesters:
                del self._probes[key]
                continue
            probe.generation = self._next_generation
            self._next_generation += 1
            probe.phase = Phase.RESOLVED
            probe.verdict = True

    def drain_results(self) -> None:
        self._check_open()
        self._drain()

    def _drain(self) -> None:
        self._drain_due = False
        while True:
            try:
                posted = self._results.get_nowait()
            except queue.Empty:
                return
            for key, gen, verdict in posted:
                self._apply_result(key, gen, verdict)

    def _apply_result(self, key: bytes, gen: int, verdict: bool) -> None:
        probe = self._probes.get(key)
        if probe is None or probe.generation != gen or probe.phase is not Phase.IN_FLIGHT:
            return  # stale
        if not probe.requesters:
            del self._probes[key]
            return
        probe.phase = Phase.RESOLVED
        probe.verdict = verdict

    def shutdown(self) -> None:
        if self._closed:
            return
        with self._lock:
            self._stopping = True
            self._submitted.clear()
            self._signal.release()
        self._worker.join(timeout=_JOIN_TIMEOUT_S)
        self._drain()
        self._front.clear()
        self._back.clear()
        self._closed = True

    # ---------------------------------------------------------------- worker
    def _worker_loop(self) -> None:
        while True:
            self._signal.acquire()
            with self._lock:
                if self._stopping:
                    return
                if not self._submitted:
                    continue
                batch = self._submitted.popleft()
            self._results.put(self._probe_batch(batch))

    def _probe_batch(self, batch: list[Entry]) -> list[Result]:
        groups: dict[str, tuple[RequestContext, list[tuple[bytes, int]]]] = {}
        for key, ctx, gen in batch:
            group = groups.setdefault(ctx.req_id, (ctx, []))
            group[1].append((key, gen))
        results: list[Result] = []
        for ctx, members in reversed(list(groups.values())):
            keys = [key for key, _gen in members]
            verdicts = self._probe_group(keys, ctx)
            results.extend(
                (key, gen, verdict)
                for (key, gen), verdict in zip(members, verdicts, strict=False)
            )
        return results

    def _probe_group(self, keys: list[bytes], ctx: RequestContext) -> list[bool]:
        """One tier call; a failed or malformed answer gives False to every key."""
        failed = [False] * len(keys)
        try:
            answer = self.batch_lookup(list(keys), ctx)
            got = list(itertools.islice(iter(answer), len(keys) + 1))
        except Exception:
            return failed
        if len(got) != len(keys) or not all(type(v) is bool for v in got):
            return failed
        return [bool(v) for v in got]


class FlushWithoutRevalidation(DoubleBufferManager):
    """Bug: flush submits the whole old front without re-validating it (vLLM #55075).

    Property 1 (no cleaned-up entry is submitted).
    """

    def _revalidate(self, entries: list[Entry]) -> list[Entry]:
        return list(entries)


class ResultsAppliedByKey(DoubleBufferManager):
    """Bug: posted results are applied by key, ignoring their generation (vLLM #54872).

    Property 2 (no cleaned-up entry is delivered); it also breaks 3.
    """

    def _apply_result(self, key: bytes, gen: int, verdict: bool) -> None:
        probe = self._probes.get(key)
        if probe is None:
            return
        if not probe.requesters:
            del self._probes[key]
            return
        probe.phase = Phase.RESOLVED
        probe.verdict = verdict


class ZipTruncatesShortAnswer(DoubleBufferManager):
    """Bug: the worker zip()s the keys with the tier's answer, so a short answer
    drops keys and strands their probes IN_FLIGHT forever.

    Property 7 (survival); the oracle may see it first as property 6 (progress).
    """

    def _probe_group(self, keys: list[bytes], ctx: RequestContext) -> list[bool]:
        try:
            answer = self.batch_lookup(list(keys), ctx)
            got = list(itertools.islice(iter(answer), len(keys) + 1))
        except Exception:
            return [False] * len(keys)
        return [v if type(v) is bool else False for _key, v in zip(keys, got, strict=False)]


# ------------------------------------------------- one-bug copies (added by an outsider)


class BufferCleanupKeepsOrphans(DoubleBufferManager):
    """Bug (cleanup-keeps-orphans): cleanup forgets the request but never deletes a
    probe left without requesters, so PENDING and RESOLVED orphans stay.

    Expected: property 5 (no leak): once every request is cleaned up the probe
    table still holds the key. Seen from outside it may show first as 1 (the orphaned
    PENDING probe is still live for this class's flush, so the tier is asked about a
    key the spec deleted) or 2 (a later request reads the orphan's old verdict).
    """

    def cleanup(self, req_id: str) -> None:
        self._check_open()
        for key in self._req_index.pop(req_id, set()):
            probe = self._probes.get(key)
            if probe is not None:
                probe.requesters.discard(req_id)  # the bug: the orphan is never deleted


class BufferLazyRaiseKillsWorker(DoubleBufferManager):
    """Bug (lazy-raise-kills-worker): the tier's lazy answer is consumed outside the
    try, so an answer that raises part-way escapes and kills the worker thread.

    Expected: property 7 (survival): "no tier behaviour (... lazy iterable that
    raises ...) stops the worker"; oracle.md reports a dead worker as 7. (The model
    checker's variant worker-never-posts names 6, progress: no verdict ever comes.)
    """

    def _probe_group(self, keys: list[bytes], ctx: RequestContext) -> list[bool]:
        failed = [False] * len(keys)
        try:
            answer = iter(self.batch_lookup(list(keys), ctx))
        except Exception:
            return failed
        got = list(itertools.islice(answer, len(keys) + 1))  # the bug: outside the try
        if len(got) != len(keys) or not all(type(v) is bool for v in got):
            return failed
        return [bool(v) for v in got]


class BufferWrongRequestContext(DoubleBufferManager):
    """Bug (wrong-request-context): every request group's tier call carries the
    context of the batch's last entry (a late-bound loop variable).

    Expected: property 9 (right context): a key is probed with another request's
    context as soon as a batch holds two requests.
    """

    def _probe_batch(self, batch: list[Entry]) -> list[Result]:
        groups: dict[str, list[tuple[bytes, int]]] = {}
        ctx: RequestContext | None = None
        for key, ctx, gen in batch:
            groups.setdefault(ctx.req_id, []).append((key, gen))
        assert ctx is not None
        results: list[Result] = []
        for members in reversed(list(groups.values())):
            keys = [key for key, _gen in members]
            verdicts = self._probe_group(keys, ctx)  # the bug: the last entry's context
            results.extend(
                (key, gen, verdict)
                for (key, gen), verdict in zip(members, verdicts, strict=False)
            )
        return results
