"""A lookup manager keyed by request context objects, written from docs/protocol.md alone.

Written by an outsider from docs/protocol.md, docs/properties.md and the
"Walkthrough" / "Shapes near vLLM's" sections of docs/oracle.md (the class shape:
``ContextKeyedManager(tier_type)``, an overridable ``batch_lookup(keys, req_context)``
called by the manager's own worker thread, and ``lookup``, ``flush``, ``cleanup(req_id)``,
``drain_results``, ``shutdown``, ``mark_miss``, ``mark_present`` on the scheduler thread).

Style (``context_keyed``): requests are tracked by their context objects, not their id
strings, wherever the protocol allows.  The request index ``_by_context`` is a dict keyed by
the request context object the lookup received, valued by the list of keys that context
looked up, in lookup order; ``cleanup(req_id)`` finds every context whose ``req_id``
matches.  A probe's requesters are context objects too.  Probes live in a
``collections.OrderedDict`` keyed by the key and moved to the end on every lookup (LRU
order, never evicting).  The worker is one ``threading.Thread``: batches reach it through a
``queue.Queue`` and it posts each request group's results through a ``queue.SimpleQueue``,
which the scheduler empties with ``get_nowait`` until ``queue.Empty``.

Decisions where the protocol leaves room (docs/protocol.md, "What the spec decides where
the protocol leaves room"):

- item 1 (when a lookup drains): like the spec, ``lookup`` applies posted results exactly
  when a flush happened since the last drain (``_drain_due``); ``flush`` and
  ``drain_results`` always apply them.
- item 2 (order of request groups): the worker probes the groups in the order of each
  group's first entry in the batch in hand.  A group is the entries batched with one
  context object (the style: contexts, not ids, are the request's identity; a request
  always passes the same context in the oracle's vLLM shape).
- item 3 (a failed tier call): the tier's answer is materialised inside the ``try`` (at most
  ``len(keys) + 1`` elements, so a lazy answer that raises, or never ends, cannot escape or
  hang the worker).  If the call raised or the answer's length is wrong, every key of the
  call gets ``False`` (the spec's choice).  With the right length, each element that is a
  real ``bool`` is kept and any other element gives ``False`` for its key (the reference's
  choice for non-bool elements).  Any exception, ``BaseException`` included, is caught:
  "no tier behaviour stops the worker" (docs/properties.md, property 7).
- item 4 (what shutdown drops): ``shutdown`` sets a stop event and wakes the worker; the
  worker finishes the batch in hand, and a batch it takes after the stop is set is dropped,
  as are the batches still queued and the step's batch.  ``shutdown`` joins the worker
  (a bounded join, ``join_timeout`` seconds) and applies posted results.  It is idempotent;
  any other call after it raises ``ManagerClosedError``.
- item 5 (mark_present on a probe already True): nothing happens; a key with no state is
  left alone too; a state without requesters (an orphaned IN_FLIGHT probe) is deleted.
- item 7 (asking again): a second lookup by a context already in the key's requesters
  changes nothing (the key is not appended twice to the context's list).

Other choices: a result is applied only to a probe of its own generation that is
IN_FLIGHT; ``mark_present`` also applies to a PENDING probe (new generation, RESOLVED
True), which makes its batch entry stale so ``flush`` drops it.  The default
``batch_lookup`` raises ``NotImplementedError`` (every key then gets ``False``); a user
overrides it, as the oracle does.

No finding of the oracle changed this class (see the report for the runs).
"""

from __future__ import annotations

import collections
import enum
import itertools
import queue
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

Key = bytes


class RequestContext(Protocol):
    """What the manager needs of a request context: its request id."""

    @property
    def req_id(self) -> str: ...


class ManagerClosedError(RuntimeError):
    """A call other than ``shutdown`` was made after ``shutdown``."""


class Phase(enum.Enum):
    PENDING = "pending"
    IN_FLIGHT = "in_flight"
    RESOLVED = "resolved"


@dataclass
class Probe:
    """One existence check of one key."""

    generation: int
    phase: Phase = Phase.PENDING
    verdict: bool | None = None
    requesters: set[RequestContext] = field(default_factory=set)


# (key, request context, generation): one entry of the step's batch.
Entry = tuple[Key, RequestContext, int]
# (key, generation, verdict): one result the worker posts.
Result = tuple[Key, int, bool]


class _Stop:
    """The sentinel that wakes the worker at shutdown."""


_STOP = _Stop()


class ContextKeyedManager:
    """Async lookup manager (docs/protocol.md) with context-keyed request tracking."""

    join_timeout: float = 30.0

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        # Scheduler-thread tables.
        self._probes: collections.OrderedDict[Key, Probe] = collections.OrderedDict()
        self._by_context: dict[RequestContext, list[Key]] = {}
        self._batch: list[Entry] = []
        self._next_generation = 0
        self._drain_due = False
        self._closed = False
        # The two queues between the threads.
        self._submitted: queue.Queue[list[Entry] | _Stop] = queue.Queue()
        self._posted: queue.SimpleQueue[list[Result]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._worker = threading.Thread(
            target=self._worker_loop, name=f"lookup-worker-{tier_type}", daemon=True
        )
        self._worker.start()

    # ------------------------------------------------------------------ the tier

    def batch_lookup(self, keys: list[Key], req_context: RequestContext) -> Iterable[object]:
        """The tier call: one verdict per key.  Override it."""
        raise NotImplementedError(f"no tier call for tier type {self.tier_type!r}")

    # ------------------------------------------------------------- scheduler side

    def _check_open(self) -> None:
        if self._closed:
            raise ManagerClosedError("the lookup manager was shut down")

    def _new_generation(self) -> int:
        generation = self._next_generation
        self._next_generation += 1
        return generation

    def _apply_result(self, key: Key, generation: int, verdict: bool) -> None:
        probe = self._probes.get(key)
        if probe is None or probe.generation != generation or probe.phase is not Phase.IN_FLIGHT:
            return  # stale: deleted, superseded, or not the probe it was made for
        if not probe.requesters:
            del self._probes[key]
            return
        probe.verdict = verdict
        probe.phase = Phase.RESOLVED

    def _apply_posted(self) -> None:
        while True:
            try:
                results = self._posted.get_nowait()
            except queue.Empty:
                break
            for key, generation, verdict in results:
                self._apply_result(key, generation, verdict)
        self._drain_due = False

    def lookup(self, key: Key, req_context: RequestContext) -> bool | None:
        self._check_open()
        if self._drain_due:
            self._apply_posted()
        probe = self._probes.get(key)
        if probe is None:
            generation = self._new_generation()
            probe = Probe(generation=generation)
            self._probes[key] = probe
            self._batch.append((key, req_context, generation))
        else:
            self._probes.move_to_end(key)
        probe.requesters.add(req_context)
        keys = self._by_context.setdefault(req_context, [])
        if key not in keys:
            keys.append(key)
        return probe.verdict if probe.phase is Phase.RESOLVED else None

    def _live_entries(self, batch: list[Entry]) -> list[Entry]:
        live: list[Entry] = []
        for key, ctx, generation in batch:
            probe = self._probes.get(key)
            if (
                probe is not None
                and probe.generation == generation
                and probe.phase is Phase.PENDING
            ):
                live.append((key, ctx, generation))
        return live

    def flush(self) -> None:
        self._check_open()
        self._apply_posted()
        batch, self._batch = self._batch, []
        live = self._live_entries(batch)
        for key, _ctx, generation in live:
            probe = self._probes.get(key)
            if probe is not None and probe.generation == generation:
                probe.phase = Phase.IN_FLIGHT
        if live:
            self._submitted.put(live)
        self._drain_due = True

    def cleanup(self, req_id: str) -> None:
        self._check_open()
        contexts = [ctx for ctx in self._by_context if ctx.req_id == req_id]
        for ctx in contexts:
            for key in self._by_context.pop(ctx):
                probe = self._probes.get(key)
                if probe is None:
                    continue
                probe.requesters.discard(ctx)
                if not probe.requesters and probe.phase is not Phase.IN_FLIGHT:
                    del self._probes[key]

    def mark_miss(self, keys: Sequence[Key]) -> None:
        self._check_open()
        for key in keys:
            probe = self._probes.get(key)
            if probe is not None and probe.phase is Phase.RESOLVED:
                probe.verdict = False

    def mark_present(self, keys: Sequence[Key]) -> None:
        self._check_open()
        for key in keys:
            probe = self._probes.get(key)
            if probe is None or probe.verdict is True:
                continue
            if not probe.requesters:
                del self._probes[key]
                continue
            probe.generation = self._new_generation()
            probe.verdict = True
            probe.phase = Phase.RESOLVED

    def drain_results(self) -> None:
        self._check_open()
        self._apply_posted()

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._submitted.put(_STOP)
        self._worker.join(timeout=self.join_timeout)
        self._apply_posted()
        self._batch.clear()
        while True:
            try:
                self._submitted.get_nowait()
            except queue.Empty:
                break

    # ---------------------------------------------------------------- worker side

    def _worker_loop(self) -> None:
        while True:
            batch = self._submitted.get()
            if isinstance(batch, _Stop) or self._stop.is_set():
                return
            groups: dict[RequestContext, list[tuple[Key, int]]] = {}
            for key, ctx, generation in batch:
                groups.setdefault(ctx, []).append((key, generation))
            for ctx, group in groups.items():
                self._posted.put(self._probe_group(group, ctx))

    def _probe_group(self, group: list[tuple[Key, int]], ctx: RequestContext) -> list[Result]:
        keys = [key for key, _ in group]
        try:
            answer = list(itertools.islice(iter(self.batch_lookup(keys, ctx)), len(keys) + 1))
        except BaseException:  # no tier behaviour may stop the worker
            answer = []
        if len(answer) != len(keys):
            return [(key, generation, False) for key, generation in group]
        return [
            (key, generation, verdict if isinstance(verdict, bool) else False)
            for (key, generation), verdict in zip(group, answer, strict=True)
        ]


# ---------------------------------------------------------------------- one-bug copies


class FlushSubmitsCleanedUp(ContextKeyedManager):
    """Bug: flush submits the whole batch without re-validating it (vLLM #55075).

    Property 1 (no cleaned-up entry is submitted): an entry whose probe was cleaned up or
    superseded by mark_present still reaches the tier.
    """

    def _live_entries(self, batch: list[Entry]) -> list[Entry]:
        return list(batch)


class MarkMissForcesResolved(ContextKeyedManager):
    """Bug: mark_miss forces PENDING and IN_FLIGHT probes to RESOLVED False.

    Property 3 (exactly once), per docs/properties.md the oracle sees the forced False;
    the model checker names property 2 first for the same bug.
    """

    def mark_miss(self, keys: Sequence[Key]) -> None:
        self._check_open()
        for key in keys:
            probe = self._probes.get(key)
            if probe is not None:
                probe.verdict = False
                probe.phase = Phase.RESOLVED


class ZipTruncates(ContextKeyedManager):
    """Bug: zip() over keys and a short tier answer drops keys, stranding them IN_FLIGHT.

    Property 7 (survival); the oracle, which cannot see stranded probes, may name 6
    (progress): their verdict never comes.
    """

    def _probe_group(self, group: list[tuple[Key, int]], ctx: RequestContext) -> list[Result]:
        keys = [key for key, _ in group]
        try:
            answer = list(self.batch_lookup(keys, ctx))
        except BaseException:
            answer = [False] * len(keys)
        return [
            (key, generation, verdict if isinstance(verdict, bool) else False)
            for (key, generation), verdict in zip(group, answer, strict=False)  # the bug
        ]


# ------------------------------------------------- one-bug copies (added by an outsider)


class KeyedCleanupKeepsOrphans(ContextKeyedManager):
    """Bug (cleanup-keeps-orphans): cleanup forgets the request but never deletes a
    probe left without requesters, so PENDING and RESOLVED orphans stay.

    Expected: property 5 (no leak): once every request is cleaned up the probe
    table still holds the key. Seen from outside it may show first as 1 (the orphaned
    PENDING probe is still live for this class's flush) or 2 (a later request reads
    the orphan's old verdict).
    """

    def cleanup(self, req_id: str) -> None:
        self._check_open()
        contexts = [ctx for ctx in self._by_context if ctx.req_id == req_id]
        for ctx in contexts:
            for key in self._by_context.pop(ctx):
                probe = self._probes.get(key)
                if probe is not None:
                    probe.requesters.discard(ctx)  # the bug: the orphan is never deleted


class KeyedLazyRaiseKillsWorker(ContextKeyedManager):
    """Bug (lazy-raise-kills-worker): the tier's lazy answer is consumed outside the
    try, so an answer that raises part-way escapes and kills the worker thread.

    Expected: property 7 (survival): "no tier behaviour (... lazy iterable that
    raises ...) stops the worker"; oracle.md reports a dead worker as 7. (The model
    checker's variant worker-never-posts names 6, progress.)
    """

    def _probe_group(self, group: list[tuple[Key, int]], ctx: RequestContext) -> list[Result]:
        keys = [key for key, _ in group]
        try:
            lazy = iter(self.batch_lookup(keys, ctx))
        except BaseException:
            lazy = iter(())
        answer = list(itertools.islice(lazy, len(keys) + 1))  # the bug: outside the try
        if len(answer) != len(keys):
            return [(key, generation, False) for key, generation in group]
        return [
            (key, generation, verdict if isinstance(verdict, bool) else False)
            for (key, generation), verdict in zip(group, answer, strict=True)
        ]


class KeyedWrongRequestContext(ContextKeyedManager):
    """Bug (wrong-request-context): every request group's tier call carries the
    context of the batch's last entry (a late-bound loop variable).

    Expected: property 9 (right context): a key is probed with another request's
    context as soon as a batch holds two requests.
    """

    def _worker_loop(self) -> None:
        while True:
            batch = self._submitted.get()
            if isinstance(batch, _Stop) or self._stop.is_set():
                return
            groups: dict[RequestContext, list[tuple[Key, int]]] = {}
            for key, ctx, generation in batch:
                groups.setdefault(ctx, []).append((key, generation))
            for group in groups.values():
                self._posted.put(self._probe_group(group, ctx))  # the bug: last ctx
