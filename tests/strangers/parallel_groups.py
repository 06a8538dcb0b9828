"""A lookup manager written from docs/protocol.md alone, by an outsider.

Style ("parallel groups"): one dispatcher thread takes the flushed batches in
order. For the batch in hand it probes the per-request groups in parallel on a
``concurrent.futures.ThreadPoolExecutor(max_workers=3)`` (``submit`` +
``as_completed``), waits until every group of the batch is answered, posts the
whole batch's results at once (one list on a ``queue.SimpleQueue``), and only
then takes the next batch. That keeps what docs/protocol.md asks of the worker
as a whole ("Who does what", ``take_batch``: it takes the next batch only after
posting everything of the last; ``probe_group``: one tier call per request
group). Probes are ``collections.namedtuple`` records, replaced (never mutated)
in a dict on every change; the request index is a ``dict[str, frozenset[bytes]]``
that is itself replaced by a new dict on every change, never mutated. The
scheduler drains the results queue with ``get_nowait`` until ``queue.Empty``.

Decisions where the protocol leaves room (docs/protocol.md, "What the spec
decides where the protocol leaves room"):

- item 1 (when a lookup drains): ``lookup`` applies posted results exactly
  when a flush happened since the last drain (``flush`` and ``drain_results``
  set / clear that flag), as the spec does.
- item 2 (order of request groups): the groups of a batch are sent to the pool
  in the order of their first entry in the batch; since they run concurrently,
  the tier may see them in any order. The batch's results are posted together,
  in the order the groups finished.
- item 3 (failed tier call): each key gets the proper bool the tier gave at its
  position; a key the tier did not answer properly (the call raised before it,
  the answer was short, or the element is not a bool) gets ``False``. Extra
  elements of a long answer are ignored and never consumed (an endless lazy
  answer cannot hang the worker). The answer is consumed inside the ``try``.
- item 4 (what shutdown drops): ``shutdown`` lets the dispatcher finish the
  batch in hand (it is joined, with a generous bound), drops the step's batch
  and every queued batch it never took, then applies posted results. It is
  idempotent; any other call after it raises ``RuntimeError``.
- item 5 (mark_present on a True probe): does nothing; with no requesters the
  state is deleted, otherwise a new generation, RESOLVED, ``True``.
- item 7: a repeated lookup by a requester changes nothing but the drain.

Other choices: batch entries are ``(key, req_context, generation)``; a group is
keyed by the request id (``req_context.req_id``) and called with the context of
its first entry. ``cleanup`` takes the request id and touches only the probes
and the index (flush re-validates the batch by generation and phase). Results
are ``(key, generation, verdict)``; a result whose key has no state or a state
of another generation is ignored; one for a probe without requesters deletes it.
"""

from __future__ import annotations

import collections
import itertools
import queue
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from typing import Any, NamedTuple

PENDING = "PENDING"
IN_FLIGHT = "IN_FLIGHT"
RESOLVED = "RESOLVED"

Probe = collections.namedtuple("Probe", ["generation", "phase", "verdict", "requesters"])

Entry = tuple[bytes, Any, int]  # (key, request context, generation)
Result = tuple[bytes, int, bool]  # (key, generation, verdict)


class Group(NamedTuple):
    context: Any
    keys: tuple[bytes, ...]
    generations: tuple[int, ...]


_STOP = object()
_JOIN_BOUND_S = 60.0


def _req_id(req_context: Any) -> str:
    return str(req_context.req_id)


class ParallelGroupsManager:
    """Async lookup manager: dispatcher thread + a 3-thread pool per batch."""

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        # scheduler-thread tables
        self._lookup_state: dict[bytes, Probe] = {}
        self._req_keys: dict[str, frozenset[bytes]] = {}
        self._lookup_batch: list[Entry] = []
        self._generations = itertools.count()
        self._drain_due = False
        self._closed = False
        # the two queues between the threads
        self._submitted: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._results: queue.SimpleQueue[list[Result]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._dispatcher = threading.Thread(
            target=self._dispatch, name="parallel-groups-dispatcher", daemon=True
        )
        self._dispatcher.start()

    # ------------------------------------------------------------------ tier
    def batch_lookup(self, keys: Sequence[bytes], req_context: Any) -> Iterable[object]:
        """The tier call; a subclass (or the oracle) replaces it."""
        raise NotImplementedError(f"no tier for {self.tier_type!r}")

    # ------------------------------------------------------------- scheduler
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the lookup manager is shut down")

    def _set_requesters(self, key: bytes, probe: Probe, requesters: frozenset[str]) -> None:
        self._lookup_state[key] = probe._replace(requesters=requesters)

    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        self._check_open()
        if self._drain_due:
            self._apply_posted()
        req = _req_id(req_context)
        probe = self._lookup_state.get(key)
        if probe is None:
            gen = next(self._generations)
            probe = Probe(gen, PENDING, None, frozenset({req}))
            self._lookup_state[key] = probe
            self._lookup_batch.append((key, req_context, gen))
        elif req not in probe.requesters:
            probe = probe._replace(requesters=probe.requesters | {req})
            self._lookup_state[key] = probe
        keys = self._req_keys.get(req, frozenset())
        if key not in keys:
            self._req_keys = {**self._req_keys, req: keys | {key}}
        verdict: bool | None = probe.verdict if probe.phase == RESOLVED else None
        return verdict

    def _revalidate(self, batch: list[Entry]) -> list[Entry]:
        """The entries whose key still has a PENDING state of the same generation."""
        live: list[Entry] = []
        for key, ctx, gen in batch:
            probe = self._lookup_state.get(key)
            if probe is not None and probe.generation == gen and probe.phase == PENDING:
                live.append((key, ctx, gen))
        return live

    def flush(self) -> None:
        self._check_open()
        self._apply_posted()
        batch, self._lookup_batch = self._lookup_batch, []
        submit = self._revalidate(batch)
        for key, _ctx, _gen in submit:
            probe = self._lookup_state.get(key)
            if probe is not None and probe.phase == PENDING:
                self._lookup_state[key] = probe._replace(phase=IN_FLIGHT)
        if submit:
            self._submitted.put(submit)
        self._drain_due = True

    def cleanup(self, req_id: str) -> None:
        self._check_open()
        req = str(req_id)
        keys = self._req_keys.get(req)
        if keys is None:
            return
        self._req_keys = {r: ks for r, ks in self._req_keys.items() if r != req}
        for key in keys:
            probe = self._lookup_state.get(key)
            if probe is None or req not in probe.requesters:
                continue
            left = probe.requesters - {req}
            if not left and probe.phase != IN_FLIGHT:
                del self._lookup_state[key]
            else:
                self._set_requesters(key, probe, left)

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        self._check_open()
        for key in keys:
            probe = self._lookup_state.get(key)
            if probe is not None and probe.phase == RESOLVED:
                self._lookup_state[key] = probe._replace(verdict=False)

    def mark_present(self, keys: Iterable[bytes]) -> None:
        self._check_open()
        for key in keys:
            probe = self._lookup_state.get(key)
            if probe is None or (probe.phase == RESOLVED and probe.verdict is True):
                continue
            if not probe.requesters:
                del self._lookup_state[key]
            else:
                self._lookup_state[key] = Probe(
                    next(self._generations), RESOLVED, True, probe.requesters
                )

    def drain_results(self) -> None:
        self._check_open()
        self._apply_posted()

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._submitted.put(_STOP)
        self._dispatcher.join(_JOIN_BOUND_S)
        self._lookup_batch = []
        while True:  # batches the dispatcher never took
            try:
                self._submitted.get_nowait()
            except queue.Empty:
                break
        self._apply_posted()

    def _apply_posted(self) -> None:
        self._drain_due = False
        while True:
            try:
                posted = self._results.get_nowait()
            except queue.Empty:
                return
            for key, gen, verdict in posted:
                self._apply_result(key, gen, verdict)

    def _apply_result(self, key: bytes, gen: int, verdict: bool) -> None:
        probe = self._lookup_state.get(key)
        if probe is None or probe.generation != gen or probe.phase != IN_FLIGHT:
            return  # stale
        if not probe.requesters:
            del self._lookup_state[key]
        else:
            self._lookup_state[key] = probe._replace(phase=RESOLVED, verdict=verdict)

    # ---------------------------------------------------------------- worker
    def _dispatch(self) -> None:
        with ThreadPoolExecutor(max_workers=3, thread_name_prefix="parallel-groups") as pool:
            while True:
                item = self._submitted.get()
                if item is _STOP or self._stop.is_set():
                    return
                assert isinstance(item, list)
                self._results.put(self._probe_batch(pool, item))

    @staticmethod
    def _groups(batch: list[Entry]) -> list[Group]:
        by_req: dict[str, tuple[Any, list[bytes], list[int]]] = {}
        for key, ctx, gen in batch:
            _ctx, keys, gens = by_req.setdefault(_req_id(ctx), (ctx, [], []))
            keys.append(key)
            gens.append(gen)
        return [Group(ctx, tuple(keys), tuple(gens)) for ctx, keys, gens in by_req.values()]

    def _probe_batch(self, pool: ThreadPoolExecutor, batch: list[Entry]) -> list[Result]:
        futures: dict[Future[list[Result]], Group] = {
            pool.submit(self._probe_group, group): group for group in self._groups(batch)
        }
        results: list[Result] = []
        for fut in as_completed(futures):
            try:
                results.extend(fut.result())
            except BaseException:
                group = futures[fut]
                pairs = zip(group.keys, group.generations, strict=True)
                results.extend((k, g, False) for k, g in pairs)
        return results

    def _probe_group(self, group: Group) -> list[Result]:
        answers: list[bool] = []
        try:
            answer = self.batch_lookup(list(group.keys), group.context)
            if len(group.keys) > 0:
                for value in answer:
                    answers.append(value if isinstance(value, bool) else False)
                    if len(answers) == len(group.keys):
                        break
        except BaseException:
            pass
        answers.extend([False] * (len(group.keys) - len(answers)))
        return list(zip(group.keys, group.generations, answers, strict=True))


# ---------------------------------------------------------------------------
# One-bug copies


class FlushWithoutRevalidation(ParallelGroupsManager):
    """flush submits the whole batch without re-validating it (vLLM #55075).

    Property 1 (no cleaned-up entry is submitted).
    """

    def _revalidate(self, batch: list[Entry]) -> list[Entry]:
        return list(batch)


class AppliesResultsByKey(ParallelGroupsManager):
    """Posted results are applied by key, without the generation check (vLLM #54872).

    Property 2 (no cleaned-up entry is delivered); 3 may be named too.
    """

    def _apply_result(self, key: bytes, gen: int, verdict: bool) -> None:
        probe = self._lookup_state.get(key)
        if probe is None:
            return
        if not probe.requesters:
            del self._lookup_state[key]
        else:
            self._lookup_state[key] = probe._replace(phase=RESOLVED, verdict=verdict)


class ZipsShortAnswers(ParallelGroupsManager):
    """zip() over the group's keys and the tier's answer: a short answer drops keys.

    Those probes stay IN_FLIGHT forever. Property 7 (survival); the oracle may
    see it first as property 6 (a verdict that never comes).
    """

    def _probe_group(self, group: Group) -> list[Result]:
        try:
            answer = list(self.batch_lookup(list(group.keys), group.context))
        except BaseException:
            answer = [False] * len(group.keys)
        return [
            (key, gen, value if isinstance(value, bool) else False)
            # the bug: a short answer drops the last keys
            for key, gen, value in zip(group.keys, group.generations, answer, strict=False)
        ]
