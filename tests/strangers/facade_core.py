"""A vLLM-shaped async lookup manager, written from docs/protocol.md alone.

Style ("facade_core"): the class the oracle drives, ``FacadeLookupManager``, is
a thin facade. Its protocol methods (``lookup``, ``flush``, ``cleanup``,
``mark_miss``, ``mark_present``, ``drain_results``, ``shutdown``) are not
written out: a loop at class creation (``_forward_to_core``) installs one
forwarder per name with ``setattr``, and each forwards to the ``_Core`` held
in ``self._core``. The core owns every table: probes as
``types.SimpleNamespace`` records (key -> probe), the request index as
``dict[str, list[bytes]]`` (kept free of duplicates by hand), the step's
batch as a list of ``(key, request id, request context, generation)``. The
worker is a ``threading.Thread`` running the plain function ``_worker_loop``,
which is handed the core's inbox (a ``queue.Queue`` of batches) and outbox (a
``collections.deque`` guarded by a ``threading.Lock``); it posts one tuple of
``(key, generation, verdict)`` tuples per batch. The facade names its core
class in the class attribute ``core_class`` so that a subclass can swap it:
the one-bug copies at the end of the module do exactly that.

Synchronisation uses only a queue, a lock, an event and a thread join: no
sleeps.

Decisions where the protocol leaves room (docs/protocol.md, "What the spec
decides where the protocol leaves room"):

- item 1 (when a lookup drains): ``lookup`` applies posted results exactly
  when a flush happened since the last drain (``drain_due``), as the spec
  does; ``drain_results``, ``flush`` and ``shutdown`` clear that flag.
- item 2 (order of request groups): the worker probes the groups of a batch in
  the order in which each request first appears in the batch; the tier is
  called with the request context of the group's first entry (the context
  that was batched with the probe, property 9).
- item 3 (what a failed tier call yields): a tier call that raises (an
  ``Exception``, while calling it or while consuming its answer), or whose
  answer does not have exactly one element per key, gives ``False`` to every
  key of the call. An answer of the right length keeps each element that is a
  ``bool`` and gives ``False`` to each that is not. The answer is consumed
  inside the ``try`` and at most ``len(keys) + 1`` elements are read, so an
  endless iterable cannot hang the worker.
- item 4 (what shutdown drops): shutdown sets a stop event and wakes the
  worker; the worker finishes and posts the batch in hand and then exits
  without taking another. Shutdown joins it, drops every batch left in the
  inbox and the step's batch, and applies posted results. It is idempotent;
  every other call after it raises ``ManagerClosedError``. Probes of dropped
  batches stay IN_FLIGHT (nothing can resolve them any more); no table is
  cleared beyond what the spec drops.
- item 5 (mark_present): on a probe already ``True`` it does nothing; on a
  probe without requesters it deletes the state; otherwise it gives the key a
  new generation, verdict ``True``, phase RESOLVED.
- item 7 (asking again): a repeated lookup by a request that already asks for
  the key only joins (a no-op) and may drain as item 1 says.

Other choices: ``cleanup`` takes the request id (vLLM's shape); the request id
is ``req_context.req_id``; a drained result whose generation matches but whose
probe is not IN_FLIGHT is ignored as well (it cannot happen in this class); the
worker thread is a daemon so a manager never shut down cannot block exit.
"""

from __future__ import annotations

import collections
import functools
import itertools
import queue
import threading
import types
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

PENDING = "PENDING"
IN_FLIGHT = "IN_FLIGHT"
RESOLVED = "RESOLVED"

Entry = tuple[bytes, str, Any, int]  # key, request id, request context, generation
Result = tuple[bytes, int, bool]  # key, generation, verdict
Batch = tuple[Entry, ...]
Posted = tuple[Result, ...]
Tier = Callable[[list[bytes], Any], Any]


class ManagerClosedError(RuntimeError):
    """A call other than ``shutdown()`` was made after ``shutdown()``."""


def _answer_group(tier: Tier, keys: list[bytes], req_context: Any) -> list[bool]:
    """One tier call for one request group; every key gets exactly one verdict."""
    try:
        answer = tier(list(keys), req_context)
        got = list(itertools.islice(answer, len(keys) + 1))
    except Exception:
        return [False] * len(keys)
    if len(got) != len(keys):
        return [False] * len(keys)
    return [value if isinstance(value, bool) else False for value in got]


def _worker_loop(
    inbox: queue.Queue[Batch | None],
    outbox: collections.deque[Posted],
    outbox_lock: threading.Lock,
    stop: threading.Event,
    tier: Tier,
    answer_group: Callable[[Tier, list[bytes], Any], list[bool]] = _answer_group,
) -> None:
    """The worker: take one batch, probe it group by group, post it, repeat."""
    while True:
        batch = inbox.get()
        if batch is None or stop.is_set():
            return
        groups: dict[str, list[Entry]] = {}
        for entry in batch:
            groups.setdefault(entry[1], []).append(entry)
        results: list[Result] = []
        for entries in groups.values():
            keys = [entry[0] for entry in entries]
            verdicts = answer_group(tier, keys, entries[0][2])
            results.extend(
                (entry[0], entry[3], verdict)
                for entry, verdict in zip(entries, verdicts, strict=True)
            )
        with outbox_lock:
            outbox.append(tuple(results))


class _Core:
    """Every table of the manager, touched only by the scheduler thread."""

    # how the worker turns one group's tier call into verdicts (a copy may swap it)
    answer_group: Callable[[Tier, list[bytes], Any], list[bool]] = staticmethod(_answer_group)

    def __init__(self, tier: Tier) -> None:
        self.probes: dict[bytes, types.SimpleNamespace] = {}
        self.index: dict[str, list[bytes]] = {}
        self.batch: list[Entry] = []
        self.next_generation = 0
        self.drain_due = False
        self.closed = False
        self.inbox: queue.Queue[Batch | None] = queue.Queue()
        self.outbox: collections.deque[Posted] = collections.deque()
        self.outbox_lock = threading.Lock()
        self.stop = threading.Event()
        self.worker = threading.Thread(
            target=_worker_loop,
            args=(self.inbox, self.outbox, self.outbox_lock, self.stop, tier,
                  type(self).answer_group),
            name="facade-core-lookup-worker",
            daemon=True,
        )
        self.worker.start()

    # -- helpers ---------------------------------------------------------

    def _check_open(self) -> None:
        if self.closed:
            raise ManagerClosedError("the lookup manager is shut down")

    def _new_generation(self) -> int:
        generation = self.next_generation
        self.next_generation += 1
        return generation

    def _forget(self, key: bytes) -> None:
        del self.probes[key]

    def _apply_posted(self) -> None:
        with self.outbox_lock:
            posted = list(self.outbox)
            self.outbox.clear()
        self.drain_due = False
        for results in posted:
            for key, generation, verdict in results:
                probe = self.probes.get(key)
                if probe is None or probe.generation != generation:
                    continue  # stale: its probe was deleted or superseded
                if probe.phase != IN_FLIGHT:
                    continue
                if not probe.requesters:
                    self._forget(key)
                    continue
                probe.phase = RESOLVED
                probe.verdict = verdict

    # -- the protocol ----------------------------------------------------

    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        self._check_open()
        if self.drain_due:
            self._apply_posted()
        req_id: str = req_context.req_id
        probe = self.probes.get(key)
        if probe is None:
            probe = types.SimpleNamespace(
                generation=self._new_generation(),
                phase=PENDING,
                verdict=None,
                requesters=[],
            )
            self.probes[key] = probe
            self.batch.append((key, req_id, req_context, probe.generation))
        if req_id not in probe.requesters:
            probe.requesters.append(req_id)
        keys = self.index.setdefault(req_id, [])
        if key not in keys:
            keys.append(key)
        return probe.verdict if probe.phase == RESOLVED else None

    def flush(self) -> None:
        self._check_open()
        self._apply_posted()
        live: list[Entry] = []
        for entry in self.batch:
            key, _req_id, _ctx, generation = entry
            probe = self.probes.get(key)
            if probe is not None and probe.generation == generation and probe.phase == PENDING:
                probe.phase = IN_FLIGHT
                live.append(entry)
        self.batch = []
        if live:
            self.inbox.put(tuple(live))
        self.drain_due = True

    def cleanup(self, req_id: str) -> None:
        self._check_open()
        for key in self.index.pop(req_id, []):
            probe = self.probes.get(key)
            if probe is None or req_id not in probe.requesters:
                continue
            probe.requesters.remove(req_id)
            if not probe.requesters and probe.phase != IN_FLIGHT:
                self._forget(key)

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        self._check_open()
        for key in keys:
            probe = self.probes.get(key)
            if probe is not None and probe.phase == RESOLVED:
                probe.verdict = False

    def mark_present(self, keys: Iterable[bytes]) -> None:
        self._check_open()
        for key in keys:
            probe = self.probes.get(key)
            if probe is None or probe.verdict is True:
                continue
            if not probe.requesters:
                self._forget(key)
                continue
            probe.generation = self._new_generation()
            probe.phase = RESOLVED
            probe.verdict = True

    def drain_results(self) -> None:
        self._check_open()
        self._apply_posted()

    def shutdown(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.stop.set()
        self.inbox.put(None)
        self.worker.join()
        while True:
            try:
                self.inbox.get_nowait()
            except queue.Empty:
                break
        self.batch = []
        self._apply_posted()


_PROTOCOL = (
    "lookup",
    "flush",
    "cleanup",
    "mark_miss",
    "mark_present",
    "drain_results",
    "shutdown",
)


def _forwarder(name: str) -> Callable[..., Any]:
    """A method that calls ``self._core.<name>`` with the same arguments."""

    @functools.wraps(getattr(_Core, name))
    def forward(self: FacadeLookupManager, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._core, name)(*args, **kwargs)

    forward.__qualname__ = f"FacadeLookupManager.{name}"
    return forward


def _forward_to_core(cls: type[FacadeLookupManager]) -> type[FacadeLookupManager]:
    for name in _PROTOCOL:
        setattr(cls, name, _forwarder(name))
    return cls


@_forward_to_core
class FacadeLookupManager:
    """vLLM's shape: ``FacadeLookupManager(tier_type)``; override ``batch_lookup``.

    The protocol methods are installed by ``_forward_to_core``; the
    annotations below only tell type checkers what they are.
    """

    core_class: ClassVar[type[_Core]] = _Core

    lookup: Callable[[bytes, Any], bool | None]
    flush: Callable[[], None]
    cleanup: Callable[[str], None]
    mark_miss: Callable[[Iterable[bytes]], None]
    mark_present: Callable[[Iterable[bytes]], None]
    drain_results: Callable[[], None]
    shutdown: Callable[[], None]

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        self._core = self.core_class(self._call_tier)

    def _call_tier(self, keys: list[bytes], req_context: Any) -> Any:
        # looked up at call time, so a subclass's or an instance's batch_lookup wins
        return self.batch_lookup(keys, req_context)

    def batch_lookup(self, keys: list[bytes], req_context: Any) -> list[bool]:
        """The tier call, made on the worker thread; a real tier overrides it."""
        raise NotImplementedError(f"no tier for tier_type {self.tier_type!r}")


# -- one-bug copies ------------------------------------------------------------


class _CoreFlushNoRevalidate(_Core):
    def flush(self) -> None:
        self._check_open()
        self._apply_posted()
        live = list(self.batch)  # the bug: no check against the live state and generation
        for key, _req_id, _ctx, _generation in live:
            probe = self.probes.get(key)
            if probe is not None and probe.phase == PENDING:
                probe.phase = IN_FLIGHT
        self.batch = []
        if live:
            self.inbox.put(tuple(live))
        self.drain_due = True


class FlushNoRevalidate(FacadeLookupManager):
    """Flush submits the whole batch without re-validating it (vLLM #55075).

    A cleaned-up or superseded entry still reaches the tier. I expect
    property 1 (no cleaned-up entry is submitted).
    """

    core_class = _CoreFlushNoRevalidate


class _CoreMarkMissForces(_Core):
    def mark_miss(self, keys: Iterable[bytes]) -> None:
        self._check_open()
        for key in keys:
            probe = self.probes.get(key)
            if probe is not None:  # the bug: PENDING and IN_FLIGHT probes are forced too
                probe.phase = RESOLVED
                probe.verdict = False


class MarkMissForcesResolved(FacadeLookupManager):
    """mark_miss forces PENDING / IN_FLIGHT probes to RESOLVED False.

    I expect property 3 (exactly once) by its statement; properties.md says
    the checker reports property 2 first for this bug, so either may be named.
    """

    core_class = _CoreMarkMissForces


class _CoreCleanupDeletesInFlight(_Core):
    def cleanup(self, req_id: str) -> None:
        self._check_open()
        for key in self.index.pop(req_id, []):
            probe = self.probes.get(key)
            if probe is None or req_id not in probe.requesters:
                continue
            probe.requesters.remove(req_id)
            if not probe.requesters:  # the bug: an IN_FLIGHT probe is deleted too
                self._forget(key)


class CleanupDeletesInFlight(FacadeLookupManager):
    """Cleanup deletes an orphaned IN_FLIGHT probe, so a later request re-probes.

    I expect property 8 (no redundant probe), reported as a finding under
    ``--strict-efficiency``.
    """

    core_class = _CoreCleanupDeletesInFlight


class _CoreCleanupKeepsRequester(_Core):
    def cleanup(self, req_id: str) -> None:
        self._check_open()
        for key in self.index.pop(req_id, []):
            probe = self.probes.get(key)
            if probe is None or req_id not in probe.requesters:
                continue
            if len(probe.requesters) > 1:
                continue  # the bug: a shared probe keeps the cleaned-up request
            probe.requesters.remove(req_id)
            if not probe.requesters and probe.phase != IN_FLIGHT:
                self._forget(key)


class FacadeCleanupKeepsRequester(FacadeLookupManager):
    """Cleanup drops the request from the index but leaves it among the requesters of a
    probe it shares with another request, so that probe is never deleted.

    I expect property 4 (bookkeeping): once every request is cleaned up, the class's
    probes still name a cleaned-up request.
    """

    core_class = _CoreCleanupKeepsRequester


class _CoreCleanupKeepsOrphans(_Core):
    def cleanup(self, req_id: str) -> None:
        self._check_open()
        for key in self.index.pop(req_id, []):
            probe = self.probes.get(key)
            if probe is None or req_id not in probe.requesters:
                continue
            probe.requesters.remove(req_id)
            # the bug: a probe left without requesters is never deleted


class FacadeCleanupKeepsOrphans(FacadeLookupManager):
    """Cleanup forgets the request but never deletes a probe left without requesters
    (PENDING or RESOLVED orphans stay).

    I expect property 5 (no leak): after every request is cleaned up and every result
    drained, the class's probe table still holds the key.
    """

    core_class = _CoreCleanupKeepsOrphans


def _answer_group_consumed_outside_try(
    tier: Tier, keys: list[bytes], req_context: Any
) -> list[bool]:
    """As ``_answer_group``, but the answer is consumed outside the ``try``."""
    try:
        answer = tier(list(keys), req_context)
    except Exception:
        return [False] * len(keys)
    got = list(itertools.islice(answer, len(keys) + 1))  # the bug: outside the try
    if len(got) != len(keys):
        return [False] * len(keys)
    return [value if isinstance(value, bool) else False for value in got]


class _CoreLazyRaiseKillsWorker(_Core):
    answer_group = staticmethod(_answer_group_consumed_outside_try)


class FacadeLazyRaiseKillsWorker(FacadeLookupManager):
    """The worker calls the tier inside its try but consumes the (lazy) answer outside
    it, so an answer that raises part-way kills the worker thread.

    I expect property 7 (survival): a tier behaviour kills the worker thread with an
    uncaught exception (properties.md's model checker names 6, progress, for this bug:
    no verdict comes after it).
    """

    core_class = _CoreLazyRaiseKillsWorker


class _CoreLookupNeverDrains(_Core):
    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        self._check_open()
        # the bug: no _apply_posted() here, even when drain_due is set
        req_id: str = req_context.req_id
        probe = self.probes.get(key)
        if probe is None:
            probe = types.SimpleNamespace(
                generation=self._new_generation(),
                phase=PENDING,
                verdict=None,
                requesters=[],
            )
            self.probes[key] = probe
            self.batch.append((key, req_id, req_context, probe.generation))
        if req_id not in probe.requesters:
            probe.requesters.append(req_id)
        keys = self.index.setdefault(req_id, [])
        if key not in keys:
            keys.append(key)
        return probe.verdict if probe.phase == RESOLVED else None


class FacadeLookupNeverDrains(FacadeLookupManager):
    """lookup never applies posted results, not even the first lookup after a flush;
    only flush, drain_results and shutdown do.

    I expect property 6 (progress, ``results_applied_within_a_step``): the worker's next
    tier call proves it posted, yet the first lookup after the flush returns None.
    """

    core_class = _CoreLookupNeverDrains
