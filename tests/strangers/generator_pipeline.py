"""An async lookup manager whose worker is a pipeline of generators.

Written from docs/protocol.md alone (plus the class shape described in
docs/oracle.md, "Walkthrough: your own implementation" and "Shapes near
vLLM's"), before reading the checker's code.

Style: the worker thread's body is ``sink(probe_groups(split(source())))``.
``source`` yields the batches ``flush`` puts on a ``queue.Queue`` until a stop
sentinel; ``split`` cuts each batch into request groups; ``probe_groups`` makes
one tier call per group and yields ``(group, verdicts)``; ``sink`` posts each
group's results, as soon as the group is answered, onto a ``collections.deque``
and then bumps an ``int`` count of posted groups. The scheduler keeps its own
count of applied groups: the two differ exactly when something is posted and
not applied, so no lock is needed. Probes are ``typing.NamedTuple`` records,
replaced (never mutated) at each change; generations come from a plain int.

Because the generators are lazy, the source asks the queue for the next batch
only after the sink has posted every group of the last one: "it holds one
batch at a time and takes the next only after posting everything of the last"
(docs/protocol.md, "The operations", ``take_batch``) falls out of the shape.

Decisions where docs/protocol.md leaves room (section titles in quotes):

1. When a lookup drains ("What the spec decides where the protocol leaves
   room", point 1): every ``lookup`` applies posted results first, not only the
   first one after a flush. With the two counters this check is free.
2. The order of request groups (same section, point 2): groups are probed in
   the order in which each request id first appears in the batch, keys of a
   group in batch order. A group's context is the context of its first entry;
   entries are grouped by ``req_id`` ("Who does what": a context carries the
   request id).
3. What a failed tier call yields (same section, point 3; "A tier that raises
   or answers short"): the answer is read inside the ``try``, at most
   ``len(keys) + 1`` elements. If the call or the iteration raises, or the
   answer has the wrong length, every key of the call gets ``False``. If the
   length is right, each element that is a ``bool`` is kept and any other
   element gives ``False`` for its key only.
4. What shutdown drops (same section, point 4; "The operations", ``shutdown``):
   shutdown sets a stop flag and puts the sentinel. The worker checks the flag
   after each ``get``; a batch it gets once the flag is set is dropped before
   any tier call, as are batches still queued and the step's batch. The join
   is bounded (``JOIN_TIMEOUT`` seconds); posted results are then applied.
   Shutdown is idempotent; any other call afterwards raises
   ``ManagerClosedError``.
5. ``mark_present`` (same section, point 5): a state already ``True`` is left
   alone; a state without requesters (an orphaned IN_FLIGHT probe) is deleted;
   otherwise a new generation, RESOLVED ``True``. A key with no state: nothing.
6. ``drain_results()`` returns how many results it applied, that is how many
   non-stale results resolved or deleted a probe; stale results are dropped
   and not counted.
7. ``batch_lookup`` of the class itself raises ``NotImplementedError`` (which
   the worker turns into ``False`` verdicts): the tier is meant to be supplied
   by overriding it, as the oracle does.
"""

from __future__ import annotations

import collections
import enum
import itertools
import queue
import threading
from collections.abc import Iterable, Iterator
from typing import NamedTuple, Protocol

from asynclookup.reference import ManagerClosedError

JOIN_TIMEOUT = 5.0  # seconds shutdown waits for the worker to finish its batch


class RequestContext(Protocol):
    """What ``lookup`` needs of a request context: its request id."""

    @property
    def req_id(self) -> str: ...


class Phase(enum.Enum):
    PENDING = "PENDING"
    IN_FLIGHT = "IN_FLIGHT"
    RESOLVED = "RESOLVED"


class Probe(NamedTuple):
    """One existence check of one key; replaced, never mutated."""

    generation: int
    phase: Phase
    verdict: bool | None
    requesters: frozenset[str]


class Entry(NamedTuple):
    """A batch entry: the key, the context it was batched with, its generation."""

    key: bytes
    context: RequestContext
    generation: int


class Group(NamedTuple):
    """The entries of one request in one batch: one tier call."""

    context: RequestContext
    entries: tuple[Entry, ...]


Result = tuple[bytes, int, bool]  # (key, generation, verdict)
Batch = tuple[Entry, ...]


class PipelineManager:
    """Async lookup manager (docs/protocol.md) with a generator-pipeline worker."""

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        # scheduler-thread tables
        self._probes: dict[bytes, Probe] = {}
        self._index: dict[str, set[bytes]] = {}
        self._batch: list[Entry] = []
        self._next_generation = 0
        self._applied_groups = 0
        self._closed = False
        # the two channels between the threads
        self._inbox: queue.Queue[Batch | None] = queue.Queue()  # None: stop sentinel
        self._results: collections.deque[tuple[Result, ...]] = collections.deque()
        self._posted_groups = 0  # written by the worker only
        self._stop = threading.Event()
        self._worker = threading.Thread(
            target=self._run_worker, name=f"pipeline-lookup-{tier_type}", daemon=True
        )
        self._worker.start()

    # ------------------------------------------------------------------ tier
    def batch_lookup(self, keys: list[bytes], req_context: RequestContext) -> Iterable[bool]:
        """The tier call; override it (the oracle does)."""
        raise NotImplementedError(f"no tier for {self.tier_type!r}: override batch_lookup")

    # ------------------------------------------------------------ worker side
    def _run_worker(self) -> None:
        self._sink(self._probe_groups(self._split(self._source())))

    def _source(self) -> Iterator[Batch]:
        """take_batch: yields the flushed batches until the stop sentinel or flag."""
        while True:
            batch = self._inbox.get()
            if batch is None or self._stop.is_set():
                return
            yield batch

    @staticmethod
    def _split(batches: Iterable[Batch]) -> Iterator[Group]:
        """Cuts each batch into request groups, in order of first appearance."""
        for batch in batches:
            groups: dict[str, list[Entry]] = {}
            for entry in batch:
                groups.setdefault(entry.context.req_id, []).append(entry)
            for entries in groups.values():
                yield Group(entries[0].context, tuple(entries))

    def _probe_groups(self, groups: Iterable[Group]) -> Iterator[tuple[Group, list[bool]]]:
        """probe_group: one tier call per group; a failure gives False (decision 3)."""
        for group in groups:
            keys = [entry.key for entry in group.entries]
            yield group, self._ask_tier(keys, group.context)

    def _ask_tier(self, keys: list[bytes], context: RequestContext) -> list[bool]:
        failed = [False] * len(keys)
        try:
            answer = list(itertools.islice(iter(self.batch_lookup(keys, context)), len(keys) + 1))
        except Exception:
            return failed
        if len(answer) != len(keys):
            return failed
        return [value if isinstance(value, bool) else False for value in answer]

    def _sink(self, answered: Iterable[tuple[Group, list[bool]]]) -> None:
        """post: one deque item per group, then the posted-groups count."""
        for group, verdicts in answered:
            results = tuple(
                (entry.key, entry.generation, verdict)
                for entry, verdict in zip(group.entries, verdicts, strict=True)
            )
            self._results.append(results)
            self._posted_groups += 1

    # --------------------------------------------------------- scheduler side
    def _check_open(self, call: str) -> None:
        if self._closed:
            raise ManagerClosedError(call)

    def _new_generation(self) -> int:
        generation = self._next_generation
        self._next_generation += 1
        return generation

    def _apply_posted(self) -> int:
        """Applies every posted group; stale results are dropped (the one rule)."""
        applied = 0
        while self._applied_groups < self._posted_groups:
            group = self._results.popleft()
            self._applied_groups += 1
            for key, generation, verdict in group:
                probe = self._probes.get(key)
                if (
                    probe is None
                    or probe.generation != generation
                    or probe.phase is not Phase.IN_FLIGHT
                ):
                    continue  # stale
                if probe.requesters:
                    self._probes[key] = probe._replace(phase=Phase.RESOLVED, verdict=verdict)
                else:
                    del self._probes[key]  # orphaned in-flight probe: its result deletes it
                applied += 1
        return applied

    def lookup(self, key: bytes, req_context: RequestContext) -> bool | None:
        self._check_open("lookup")
        self._apply_posted()  # decision 1: every lookup drains
        req_id = req_context.req_id
        probe = self._probes.get(key)
        if probe is None:
            generation = self._new_generation()
            probe = Probe(generation, Phase.PENDING, None, frozenset((req_id,)))
            self._batch.append(Entry(key, req_context, generation))
            self._probes[key] = probe
        elif req_id not in probe.requesters:
            probe = probe._replace(requesters=probe.requesters | {req_id})
            self._probes[key] = probe
        self._index.setdefault(req_id, set()).add(key)
        return probe.verdict if probe.phase is Phase.RESOLVED else None

    def flush(self) -> None:
        self._check_open("flush")
        self._apply_posted()
        submitted: list[Entry] = []
        for entry in self._batch:
            probe = self._probes.get(entry.key)
            if (
                probe is not None
                and probe.generation == entry.generation
                and probe.phase is Phase.PENDING
            ):
                self._probes[entry.key] = probe._replace(phase=Phase.IN_FLIGHT)
                submitted.append(entry)
        self._batch.clear()
        if submitted:
            self._inbox.put(tuple(submitted))

    def cleanup(self, req_id: str) -> None:
        self._check_open("cleanup")
        for key in self._index.pop(req_id, set()):
            probe = self._probes.get(key)
            if probe is None or req_id not in probe.requesters:
                continue
            remaining = probe.requesters - {req_id}
            if not remaining and probe.phase is not Phase.IN_FLIGHT:
                del self._probes[key]
            else:
                self._probes[key] = probe._replace(requesters=remaining)

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        self._check_open("mark_miss")
        for key in keys:
            probe = self._probes.get(key)
            if probe is not None and probe.phase is Phase.RESOLVED:
                self._probes[key] = probe._replace(verdict=False)

    def mark_present(self, keys: Iterable[bytes]) -> None:
        self._check_open("mark_present")
        for key in keys:
            probe = self._probes.get(key)
            if probe is None or probe.verdict is True:
                continue
            if not probe.requesters:
                del self._probes[key]
            else:
                self._probes[key] = probe._replace(
                    generation=self._new_generation(), phase=Phase.RESOLVED, verdict=True
                )

    def drain_results(self) -> int:
        self._check_open("drain_results")
        return self._apply_posted()

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._inbox.put(None)
        self._worker.join(timeout=JOIN_TIMEOUT)
        while True:  # batches the worker never took are dropped
            try:
                self._inbox.get_nowait()
            except queue.Empty:
                break
        self._batch.clear()
        self._apply_posted()
