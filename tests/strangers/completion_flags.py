"""An async lookup manager whose worker answers through completion flags.

Written from docs/protocol.md alone (with the class shape described in
docs/oracle.md, "Walkthrough: your own implementation" and "Shapes near
vLLM's"), before reading any of the checker's code.

The style: there is no results queue. Each flush that submits something makes
one ``Ticket`` (its entries, a ``threading.Event`` named ``done`` and a results
list the worker fills), appends it to the scheduler's list of outstanding
tickets and hands it to one lazily started worker thread through a deque and a
``threading.Condition``. The scheduler applies results by scanning its
outstanding tickets in flush order and consuming those whose ``done`` is set.

Decisions taken where docs/protocol.md leaves room (section titles cited):

1. When a lookup applies results ("What the spec decides where the protocol
   leaves room", point 1; "The operations", ``lookup``): a lookup applies the
   done tickets only when a flush happened since the last application (a
   ``_drain_due`` flag set by ``flush``, cleared by every application).
   ``flush``, ``drain_results`` and ``shutdown`` always apply them.
2. Which done tickets are consumed ("The operations", ``take_batch``: the
   worker takes the oldest batch and takes the next only after posting
   everything of the last): the scan stops at the first ticket that is not
   done. With one worker taking tickets in flush order, ``done`` flags are set
   in flush order, so stopping there loses nothing and applies results in the
   order they were posted.
3. Posting ("Who does what", ``post``): the worker posts a ticket's results all
   at once, by setting ``done`` after every request group of the ticket has
   been probed, never per group.
4. The order of request groups (point 2 of the same section): groups are
   probed in the order their request first appears among the ticket's entries;
   a group's context is the context batched with its first entry.
5. What a failed tier call yields (point 3; "A tier that raises or answers
   short"): if the call raises, the answer is not iterable or raises
   part-way, has another length than the keys, or holds a non-bool, every key
   of that call gets ``False`` (the spec's choice, not the reference's
   per-element one). At most ``len(keys) + 1`` elements are read, so an
   endless iterable cannot hang the worker. Any exception (``BaseException``)
   from the tier is caught: no tier behaviour stops the worker (property 7).
6. Shutdown ("The operations", ``shutdown``; point 4): it sets a stop flag
   under the condition; the worker finishes the ticket in hand and takes no
   other. The worker is joined with a bounded timeout, the done tickets are
   applied, tickets it never took and the step's batch are dropped, and then
   every table is released (no call may read them any more). A second
   shutdown does nothing; any other call after it raises
   ``ManagerClosedError``.
7. ``mark_present`` on a probe whose verdict is already True does nothing
   (point 5); on a probe without requesters it deletes the state.
8. An empty flush submits nothing, starts no worker, but still counts as a
   flush for decision 1 ("The operations", ``flush``).

The tier call is ``batch_lookup(keys, req_context)``; this class's own version
raises ``NotImplementedError`` (so every key gets ``False``): a subclass, or the
oracle, supplies the tier. ``tier_type`` is only recorded.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from enum import Enum
from typing import Protocol

from asynclookup.reference import ManagerClosedError

_WAIT_SECONDS = 0.1  # the worker's idle wait, re-checked in a loop
_JOIN_SECONDS = 5.0  # the bound on joining the worker at shutdown


class RequestContext(Protocol):
    """What the manager needs of a request context: its request id."""

    @property
    def req_id(self) -> str: ...


Entry = tuple[bytes, RequestContext, int]  # (key, context, generation)
Result = tuple[bytes, int, bool]  # (key, generation, verdict)


class Phase(Enum):
    PENDING = "pending"
    IN_FLIGHT = "in_flight"
    RESOLVED = "resolved"


class Probe:
    """The mutable record of one key's probe (the key is the table's key)."""

    __slots__ = ("generation", "phase", "requesters", "verdict")

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.phase = Phase.PENDING
        self.verdict: bool | None = None
        self.requesters: set[str] = set()


class Ticket:
    """One flushed batch: its entries, the worker's results, a done flag."""

    __slots__ = ("done", "entries", "results")

    def __init__(self, entries: list[Entry]) -> None:
        self.entries = entries
        self.results: list[Result] = []
        self.done = threading.Event()


class CompletionFlagManager:
    """Async lookup manager: one worker thread, one completion flag per flush."""

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        self._generations = itertools.count()
        self._probes: dict[bytes, Probe] = {}
        self._by_request: dict[str, set[bytes]] = {}
        self._batch: list[Entry] = []
        self._outstanding: list[Ticket] = []
        self._drain_due = False
        self._closed = False
        # Shared with the worker; guarded by _cond.
        self._cond = threading.Condition()
        self._inbox: deque[Ticket] = deque()
        self._stopping = False
        self._worker: threading.Thread | None = None

    # ------------------------------------------------------------------ tier

    def batch_lookup(self, keys: list[bytes], req_context: RequestContext) -> Iterable[object]:
        """The tier call, one request's keys at a time: a subclass supplies it."""
        raise NotImplementedError(f"no tier for {self.tier_type!r}: override batch_lookup")

    # ------------------------------------------------------- scheduler calls

    def lookup(self, key: bytes, req_context: RequestContext) -> bool | None:
        self._check_open()
        if self._drain_due:
            self._apply_done_tickets()
        probe = self._probes.get(key)
        if probe is None:
            probe = Probe(next(self._generations))
            self._probes[key] = probe
            self._batch.append((key, req_context, probe.generation))
        req_id = req_context.req_id
        probe.requesters.add(req_id)
        self._by_request.setdefault(req_id, set()).add(key)
        return probe.verdict if probe.phase is Phase.RESOLVED else None

    def flush(self) -> None:
        self._check_open()
        self._apply_done_tickets()
        live: list[Entry] = []
        for key, ctx, generation in self._batch:
            probe = self._probes.get(key)
            if (
                probe is not None
                and probe.generation == generation
                and probe.phase is Phase.PENDING
            ):
                probe.phase = Phase.IN_FLIGHT
                live.append((key, ctx, generation))
        self._batch = []
        self._drain_due = True
        if live:
            ticket = Ticket(live)
            self._outstanding.append(ticket)
            self._submit(ticket)

    def cleanup(self, req_id: str) -> None:
        self._check_open()
        for key in self._by_request.pop(req_id, set()):
            probe = self._probes.get(key)
            if probe is None:
                continue
            probe.requesters.discard(req_id)
            if not probe.requesters and probe.phase is not Phase.IN_FLIGHT:
                del self._probes[key]

    def mark_miss(self, keys: Sequence[bytes]) -> None:
        self._check_open()
        for key in keys:
            probe = self._probes.get(key)
            if probe is not None and probe.phase is Phase.RESOLVED:
                probe.verdict = False

    def mark_present(self, keys: Sequence[bytes]) -> None:
        self._check_open()
        for key in keys:
            probe = self._probes.get(key)
            if probe is None or probe.verdict is True:
                continue
            if not probe.requesters:
                del self._probes[key]
                continue
            probe.generation = next(self._generations)
            probe.phase = Phase.RESOLVED
            probe.verdict = True

    def drain_results(self) -> None:
        self._check_open()
        self._apply_done_tickets()

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        worker = self._worker
        if worker is not None:
            worker.join(timeout=_JOIN_SECONDS)
        self._apply_done_tickets()
        with self._cond:
            self._inbox.clear()
        self._outstanding = []
        self._batch = []
        self._probes = {}
        self._by_request = {}

    # --------------------------------------------------- scheduler internals

    def _check_open(self) -> None:
        if self._closed:
            raise ManagerClosedError("the lookup manager was shut down")

    def _apply_done_tickets(self) -> None:
        """Consume done tickets in flush order, up to the first not done."""
        self._drain_due = False
        consumed = 0
        for ticket in self._outstanding:
            if not ticket.done.is_set():
                break
            consumed += 1
            for key, generation, verdict in ticket.results:
                self._apply(key, generation, verdict)
        if consumed:
            del self._outstanding[:consumed]

    def _apply(self, key: bytes, generation: int, verdict: bool) -> None:
        probe = self._probes.get(key)
        if probe is None or probe.generation != generation:
            return  # stale: deleted or superseded since it was submitted
        if probe.phase is not Phase.IN_FLIGHT:
            return
        if not probe.requesters:
            del self._probes[key]
            return
        probe.phase = Phase.RESOLVED
        probe.verdict = verdict

    def _submit(self, ticket: Ticket) -> None:
        with self._cond:
            self._inbox.append(ticket)
            if self._worker is None:
                self._worker = threading.Thread(
                    target=self._run_worker, name="completion-flags-worker", daemon=True
                )
                self._worker.start()
            self._cond.notify()

    # ---------------------------------------------------------------- worker

    def _run_worker(self) -> None:
        while True:
            with self._cond:
                while not self._inbox and not self._stopping:
                    self._cond.wait(timeout=_WAIT_SECONDS)
                if self._stopping:
                    return  # tickets never taken are dropped by shutdown
                ticket = self._inbox.popleft()
            self._answer(ticket)

    def _answer(self, ticket: Ticket) -> None:
        groups: dict[str, tuple[RequestContext, list[bytes], list[int]]] = {}
        for key, ctx, generation in ticket.entries:
            group = groups.setdefault(ctx.req_id, (ctx, [], []))
            group[1].append(key)
            group[2].append(generation)
        results: list[Result] = []
        for ctx, keys, generations in groups.values():
            verdicts = self._ask_tier(keys, ctx)
            results.extend(zip(keys, generations, verdicts, strict=True))
        ticket.results = results
        ticket.done.set()

    def _ask_tier(self, keys: list[bytes], ctx: RequestContext) -> list[bool]:
        """One tier call; any failure gives False to every key of the call."""
        failed = [False] * len(keys)
        try:
            answer = self.batch_lookup(list(keys), ctx)
            got = list(itertools.islice(iter(answer), len(keys) + 1))
        except BaseException:
            return failed
        verdicts = [v for v in got if isinstance(v, bool)]
        if len(got) != len(keys) or len(verdicts) != len(keys):
            return failed
        return verdicts
