"""A vLLM-shaped async lookup manager whose worker thread comes and goes.

Written by an outsider from docs/protocol.md alone (plus the sections of
docs/oracle.md that describe the vLLM shape the oracle drives: constructor
``(tier_type)``, overridable ``batch_lookup(keys, req_context)``, and
``lookup``, ``flush``, ``cleanup(req_id)``, ``drain_results``, ``shutdown``,
``mark_miss``, ``mark_present``).

Style: a transient worker.  No thread runs while there is nothing to probe.
``flush`` puts its batch into an inbox and, if no worker is alive (checked
under ``_lock``), starts a fresh worker thread.  The worker takes batches one
at a time and exits as soon as the inbox is empty, deciding that under the
same ``_lock``, so a batch submitted concurrently is either seen by the
exiting worker or finds no worker and starts a new one: none is stranded.
Probes are small lists ``[generation, phase, verdict, requesters]`` in the
dict ``_lookup_state``; generations come from ``itertools.count()``.  The
worker posts ``(key, generation, verdict)`` results into the list
``_results``, which the scheduler swaps out under ``_results_lock``.

Decisions where the protocol leaves room (docs/protocol.md, "What the spec
decides where the protocol leaves room"):

- item 1 (when a lookup drains): ``lookup`` applies posted results exactly
  when a flush happened since the last drain (the spec's ``drain_due``).
- item 2 (order of request groups): groups are probed in the order of their
  first entry in the batch (as the spec's ``group_of``).  A group is keyed by
  the request id; its tier call carries the context object of that request's
  first entry in the batch.
- item 3 (what a failed tier call yields): as the spec's ``ProbeGroup(None)``:
  unless the tier returns exactly one ``bool`` per key (the answer is consumed
  inside the ``try``, at most ``len(keys) + 1`` elements), every key of the
  call gets ``False``.
- item 4 (what shutdown drops): shutdown drops the step's batch and every
  batch the worker has not taken, waits (bounded, ``shutdown_timeout``) for a
  running worker to finish the batch in hand, then applies posted results.
  It is idempotent; any other call after it raises ``ManagerClosedError``.
- item 5 (mark_present on a probe already True): does nothing; on a probe
  without requesters it deletes the state.
- item 7: a repeated lookup by a requester creates nothing.
- Not numbered in the protocol: the worker posts each request group's results
  as soon as that group's tier call is done (one worker, one batch at a time,
  so it never takes the next batch before posting all of the last).

The three one-bug copies at the bottom each override one method.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Iterable
from typing import Any

PENDING = "PENDING"
IN_FLIGHT = "IN_FLIGHT"
RESOLVED = "RESOLVED"

# Indices into a probe list [generation, phase, verdict, requesters].
GEN = 0
PHASE = 1
VERDICT = 2
REQUESTERS = 3

Probe = list[Any]
Entry = tuple[bytes, Any, int]  # (key, request context, generation)
Result = tuple[bytes, int, bool]  # (key, generation, verdict)


class ManagerClosedError(RuntimeError):
    """A call other than shutdown() after shutdown()."""


class TransientWorkerManager:
    """Async lookup manager; its worker thread lives only while there is work."""

    shutdown_timeout: float = 10.0

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        self._generations = itertools.count()
        # Scheduler-thread tables.
        self._lookup_state: dict[bytes, Probe] = {}
        self._req_keys: dict[str, set[bytes]] = {}
        self._lookup_batch: list[Entry] = []
        self._drain_due = False
        self._closed = False
        # Shared with the worker under _lock: the inbox and who is working it.
        self._lock = threading.Lock()
        self._inbox: deque[list[Entry]] = deque()
        self._worker: threading.Thread | None = None
        # Posted results, swapped out by the scheduler under _results_lock.
        self._results_lock = threading.Lock()
        self._results: list[Result] = []

    # ------------------------------------------------------------------ tier
    def batch_lookup(self, keys: list[bytes], req_context: Any) -> Iterable[object]:
        """The tier call; a subclass (or the oracle) overrides it."""
        raise NotImplementedError(f"no tier of type {self.tier_type!r}")

    # ------------------------------------------------------------- scheduler
    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        self._check_open()
        if self._drain_due:
            self._apply_posted()
        req_id: str = req_context.req_id
        probe = self._lookup_state.get(key)
        if probe is None:
            generation = next(self._generations)
            probe = [generation, PENDING, None, set()]
            self._lookup_state[key] = probe
            self._lookup_batch.append((key, req_context, generation))
        probe[REQUESTERS].add(req_id)
        self._req_keys.setdefault(req_id, set()).add(key)
        if probe[PHASE] != RESOLVED:
            return None
        verdict: bool = probe[VERDICT]
        return verdict

    def flush(self) -> None:
        self._check_open()
        self._apply_posted()
        batch, self._lookup_batch = self._lookup_batch, []
        submitted = self._live_entries(batch)
        for key, _context, generation in submitted:
            probe = self._lookup_state.get(key)
            if probe is not None and probe[GEN] == generation:
                probe[PHASE] = IN_FLIGHT
        self._drain_due = True
        if submitted:
            self._submit(submitted)

    def cleanup(self, req_id: str) -> None:
        self._check_open()
        for key in self._req_keys.pop(req_id, set()):
            probe = self._lookup_state.get(key)
            if probe is None:
                continue
            probe[REQUESTERS].discard(req_id)
            if not probe[REQUESTERS] and probe[PHASE] != IN_FLIGHT:
                del self._lookup_state[key]

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        self._check_open()
        for key in keys:
            probe = self._lookup_state.get(key)
            if probe is not None and probe[PHASE] == RESOLVED:
                probe[VERDICT] = False

    def mark_present(self, keys: Iterable[bytes]) -> None:
        self._check_open()
        for key in keys:
            probe = self._lookup_state.get(key)
            if probe is None or probe[VERDICT] is True:
                continue
            if not probe[REQUESTERS]:
                del self._lookup_state[key]
                continue
            probe[GEN] = next(self._generations)
            probe[PHASE] = RESOLVED
            probe[VERDICT] = True

    def drain_results(self) -> None:
        self._check_open()
        self._apply_posted()

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._lookup_batch = []
        with self._lock:
            self._inbox.clear()  # batches the worker never took are dropped
            worker = self._worker
        if worker is not None:
            worker.join(self.shutdown_timeout)  # it finishes the batch in hand
        self._apply_posted()

    # -------------------------------------------------------- scheduler help
    def _check_open(self) -> None:
        if self._closed:
            raise ManagerClosedError("the lookup manager is shut down")

    def _live_entries(self, batch: list[Entry]) -> list[Entry]:
        """The one rule at flush: keep entries whose key has a state of their generation."""
        live: list[Entry] = []
        for entry in batch:
            probe = self._lookup_state.get(entry[0])
            if probe is not None and probe[GEN] == entry[2]:
                live.append(entry)
        return live

    def _apply_posted(self) -> None:
        with self._results_lock:
            posted, self._results = self._results, []
        for key, generation, verdict in posted:
            self._apply_result(key, generation, verdict)
        self._drain_due = False

    def _apply_result(self, key: bytes, generation: int, verdict: bool) -> None:
        probe = self._lookup_state.get(key)
        if probe is None or probe[GEN] != generation:
            return  # stale
        if not probe[REQUESTERS]:
            del self._lookup_state[key]
            return
        probe[VERDICT] = verdict
        probe[PHASE] = RESOLVED

    def _submit(self, batch: list[Entry]) -> None:
        with self._lock:
            self._inbox.append(batch)
            if self._worker is None:
                worker = threading.Thread(
                    target=self._work, name="transient-lookup-worker", daemon=True
                )
                self._worker = worker
                worker.start()

    # ---------------------------------------------------------------- worker
    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._inbox:
                    self._worker = None
                    return
                batch = self._inbox.popleft()
            for req_context, keys, generations in self._groups(batch):
                results = self._probe_group(keys, generations, req_context)
                with self._results_lock:
                    self._results.extend(results)

    @staticmethod
    def _groups(batch: list[Entry]) -> list[tuple[Any, list[bytes], list[int]]]:
        groups: dict[str, tuple[Any, list[bytes], list[int]]] = {}
        for key, req_context, generation in batch:
            group = groups.get(req_context.req_id)
            if group is None:
                group = (req_context, [], [])
                groups[req_context.req_id] = group
            group[1].append(key)
            group[2].append(generation)
        return list(groups.values())

    def _probe_group(
        self, keys: list[bytes], generations: list[int], req_context: Any
    ) -> list[Result]:
        verdicts = [False] * len(keys)
        try:
            answer = self.batch_lookup(list(keys), req_context)
            got = list(itertools.islice(iter(answer), len(keys) + 1))
            if len(got) == len(keys) and all(isinstance(v, bool) for v in got):
                verdicts = [v is True for v in got]
        except Exception:  # any tier failure means False
            verdicts = [False] * len(keys)
        return list(zip(keys, generations, verdicts, strict=True))


# ---------------------------------------------------------------------------
# One-bug copies.


class SubmitsStaleEntries(TransientWorkerManager):
    """flush submits its batch without re-validating it (the seed bug, vLLM #55075).

    An entry whose probe was cleaned up or superseded by mark_present still
    reaches the tier.  I believe this is property 1 (no cleaned-up entry is
    submitted).
    """

    def _live_entries(self, batch: list[Entry]) -> list[Entry]:
        return list(batch)


class AppliesResultsByKey(TransientWorkerManager):
    """Results are applied by key, without the generation check (vLLM #54872).

    A late result of an old generation overwrites mark_present's True, or
    lands on a newer probe of the key.  I believe this is property 2 (no
    cleaned-up entry is delivered).
    """

    def _apply_result(self, key: bytes, generation: int, verdict: bool) -> None:
        probe = self._lookup_state.get(key)
        if probe is None:
            return
        if not probe[REQUESTERS]:
            del self._lookup_state[key]
            return
        probe[VERDICT] = verdict
        probe[PHASE] = RESOLVED


class ZipsShortAnswer(TransientWorkerManager):
    """The worker zips the keys with the tier's answer.

    A short answer silently drops the keys it did not cover: their probes stay
    IN_FLIGHT forever.  I believe this is property 7 (survival; predicate
    tier_answers_every_key), with property 6 (progress) broken too.
    """

    def _probe_group(
        self, keys: list[bytes], generations: list[int], req_context: Any
    ) -> list[Result]:
        try:
            answer = list(self.batch_lookup(list(keys), req_context))
        except Exception:
            return [(key, gen, False) for key, gen in zip(keys, generations, strict=True)]
        return [
            (key, gen, v is True)
            for key, gen, v in zip(keys, generations, answer)  # noqa: B905 - the bug
        ]


# ---------------------------------------------------------------------------
# One-bug copies added by a second outsider.


class TransientCleanupKeepsRequester(TransientWorkerManager):
    """Bug (cleanup-keeps-requester): cleanup drops the request from
    ``_req_keys`` but leaves it among the requesters of a probe it shares with
    another request (a probe it alone asked for is handled correctly).

    Expected from outside: property 4 (bookkeeping). Why: once every request
    is cleaned up, the shared probe still names the cleaned-up request (and is
    never orphaned, so never deleted), which the leak check reads as "its
    probes still naming a cleaned-up request".
    """

    def cleanup(self, req_id: str) -> None:
        self._check_open()
        for key in self._req_keys.pop(req_id, set()):
            probe = self._lookup_state.get(key)
            if probe is None:
                continue
            if probe[REQUESTERS] - {req_id}:
                continue  # the bug: a shared probe keeps the request
            probe[REQUESTERS].discard(req_id)
            if not probe[REQUESTERS] and probe[PHASE] != IN_FLIGHT:
                del self._lookup_state[key]


class TransientCleanupKeepsOrphans(TransientWorkerManager):
    """Bug (cleanup-keeps-orphans): cleanup forgets the request but never
    deletes a probe left without requesters: PENDING and RESOLVED orphans stay.

    Expected from outside: property 5 (no leak). Why: after every request is
    cleaned up and every result applied, ``_lookup_state`` still holds the
    key. (A kept PENDING orphan is also still submitted at the next flush,
    which from outside looks like property 1.)
    """

    def cleanup(self, req_id: str) -> None:
        self._check_open()
        for key in self._req_keys.pop(req_id, set()):
            probe = self._lookup_state.get(key)
            if probe is None:
                continue
            probe[REQUESTERS].discard(req_id)
            # the bug: an orphaned probe is never deleted here


class TransientLazyRaiseKillsWorker(TransientWorkerManager):
    """Bug (lazy-raise-kills-worker): the tier call is inside the try, but its
    answer is consumed outside it, so a lazy answer that raises part-way (or a
    non-iterable answer) raises in the worker thread and kills it; the dead
    worker is never cleared from ``_worker``, so no worker is started again.

    Expected from outside: property 7 (survival). Why: docs/oracle.md reports
    a worker thread that died of an uncaught exception as property 7 (the
    model checker's variant worker-never-posts names 6, progress).
    """

    def _probe_group(
        self, keys: list[bytes], generations: list[int], req_context: Any
    ) -> list[Result]:
        verdicts = [False] * len(keys)
        try:
            answer = self.batch_lookup(list(keys), req_context)
        except Exception:
            answer = verdicts
        # the bug: a lazy answer raising here is outside the try
        got = list(itertools.islice(iter(answer), len(keys) + 1))
        if len(got) == len(keys) and all(isinstance(v, bool) for v in got):
            verdicts = [v is True for v in got]
        return list(zip(keys, generations, verdicts, strict=True))


class TransientWrongRequestContext(TransientWorkerManager):
    """Bug (wrong-request-context): the groups are right, but every group's
    tier call carries the context of the batch's last entry (a late-bound loop
    variable).

    Expected from outside: property 9 (right context). Why: the oracle's tier
    sees a call for one request's keys carrying another request's context.
    """

    @staticmethod
    def _groups(batch: list[Entry]) -> list[tuple[Any, list[bytes], list[int]]]:
        keys_of: dict[str, tuple[list[bytes], list[int]]] = {}
        req_context: Any = None
        for key, req_context, generation in batch:
            keys, gens = keys_of.setdefault(req_context.req_id, ([], []))
            keys.append(key)
            gens.append(generation)
        # the bug: req_context is the loop variable's last value
        return [(req_context, keys, gens) for keys, gens in keys_of.values()]
