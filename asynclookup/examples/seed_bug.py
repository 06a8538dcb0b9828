"""A vLLM-shaped lookup manager with the seed bug, and its fixed twin.

Point the oracle at either, with nothing but the package installed::

    asynclookup fuzz --impl asynclookup.examples.seed_bug:BuggyManager --seed 1  # exit 1
    asynclookup fuzz --impl asynclookup.examples.seed_bug:FixedManager --seed 1  # exit 0

``FixedManager`` keeps the protocol (docs/protocol.md) in vLLM's shape: it is
built with a ``tier_type`` string; its own worker thread calls
``batch_lookup(keys, req_context)``, which the oracle overrides with its tier;
the scheduler calls ``lookup``, ``flush``, ``cleanup``, ``drain_results`` and
``shutdown``.  ``BuggyManager`` changes one rule, the seed bug of the project
(vLLM #55075): its flush re-validates a batch entry by key only.  So when a
request is cleaned up and another request asks about the same key before the
step ends, the flush still hands the worker the old entry, and the tier is
asked about the key for a request that is gone: property 1, "no cleaned-up
entry is submitted" (docs/properties.md).

What it leaves out, to stay short: ``mark_miss``, ``mark_present``, logging and
a health check.  ``asynclookup.reference`` is the production-grade manager.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol


class HasReqId(Protocol):
    """A request context: the scheduler's object for one request."""

    @property
    def req_id(self) -> str: ...


Entry = tuple[bytes, HasReqId, int]  # key, the context it was batched with, generation
Result = tuple[bytes, int, bool]  # key, generation, verdict


@dataclass
class Probe:
    """One key's lookup: its generation, its verdict once known, and who wants it."""

    generation: int
    verdict: bool | None = None  # None: not known yet
    in_flight: bool = False  # handed to the worker, its result not applied yet
    requesters: set[str] = field(default_factory=set)


class FixedManager:
    """Scheduler-thread calls plus one worker thread; correct by docs/protocol.md."""

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        self._lookup_state: dict[bytes, Probe] = {}  # key -> its probe
        self._req_keys: dict[str, set[bytes]] = {}  # request id -> the keys it asked about
        self._lookup_batch: list[Entry] = []  # this step's new probes
        self._next_generation = 0
        self._need_to_drain = False  # a flush happened since the last drain
        self._lookup_queue: queue.SimpleQueue[list[Entry] | None] = queue.SimpleQueue()
        self._pending_results: queue.SimpleQueue[list[Result]] = queue.SimpleQueue()
        self._worker = threading.Thread(target=self._work, name=f"lookup-{tier_type}", daemon=True)
        self._worker.start()

    def batch_lookup(self, keys: list[bytes], req_context: HasReqId) -> Iterable[bool]:
        """The tier, called on the worker thread: one verdict per key (here: none stored)."""
        return [False] * len(keys)

    # -- the scheduler thread ----------------------------------------------------------

    def lookup(self, key: bytes, req_context: HasReqId) -> bool | None:
        """The key's verdict, or None while it is not known; a new key is batched."""
        if self._need_to_drain:
            self.drain_results()  # the first lookup after a flush applies posted results
        probe = self._lookup_state.get(key)
        if probe is None:
            probe = self._lookup_state[key] = Probe(self._next_generation)
            self._next_generation += 1
            self._lookup_batch.append((key, req_context, probe.generation))
        probe.requesters.add(req_context.req_id)
        self._req_keys.setdefault(req_context.req_id, set()).add(key)
        return probe.verdict

    def flush(self) -> None:
        """The end of a scheduler step: hand the worker the batch entries still wanted."""
        self.drain_results()
        self._need_to_drain = True
        batch, self._lookup_batch = self._lookup_batch, []
        submitted = self._still_wanted(batch)
        for key, _, _ in submitted:
            self._lookup_state[key].in_flight = True
        if submitted:
            self._lookup_queue.put(submitted)

    def _still_wanted(self, batch: list[Entry]) -> list[Entry]:
        """The entries whose probe is still the one they were batched for."""
        return [
            (key, context, generation)
            for key, context, generation in batch
            if (probe := self._lookup_state.get(key)) is not None
            and probe.generation == generation
        ]

    def drain_results(self) -> None:
        """Apply every result the worker posted; a result for an older generation is stale."""
        self._need_to_drain = False
        while True:
            try:
                results = self._pending_results.get_nowait()
            except queue.Empty:
                return
            for key, generation, verdict in results:
                probe = self._lookup_state.get(key)
                if probe is None or probe.generation != generation:
                    continue  # stale: the probe it was computed for is gone
                if probe.requesters:
                    probe.verdict, probe.in_flight = verdict, False
                else:
                    del self._lookup_state[key]  # every requester left while it was in flight

    def cleanup(self, req_id: str) -> None:
        """The request finished or was cancelled: it stops being a requester anywhere."""
        for key in self._req_keys.pop(req_id, ()):
            probe = self._lookup_state[key]
            probe.requesters.discard(req_id)
            if not probe.requesters and not probe.in_flight:
                del self._lookup_state[key]  # an in-flight probe stays until its result

    def shutdown(self) -> None:
        """Stop the worker once it has posted its batch in hand; apply what it posted."""
        self._lookup_queue.put(None)
        self._worker.join()
        self.drain_results()

    # -- the worker thread -------------------------------------------------------------

    def _work(self) -> None:
        """Take each batch, ask the tier once per request, post every key's verdict."""
        while (batch := self._lookup_queue.get()) is not None:
            by_request: dict[str, tuple[HasReqId, list[tuple[bytes, int]]]] = {}
            for key, context, generation in batch:
                by_request.setdefault(context.req_id, (context, []))[1].append((key, generation))
            results: list[Result] = []
            for context, entries in by_request.values():
                verdicts = self._ask_tier([key for key, _ in entries], context)
                results += [(key, gen, v) for (key, gen), v in zip(entries, verdicts, strict=True)]
            self._pending_results.put(results)

    def _ask_tier(self, keys: list[bytes], context: HasReqId) -> list[bool]:
        """One tier call; a key the tier did not answer properly is a miss (False)."""
        try:
            answer = list(self.batch_lookup(keys, context))
        except Exception:  # the tier is foreign code: the worker survives anything
            return [False] * len(keys)
        if len(answer) != len(keys):
            return [False] * len(keys)
        return [v if isinstance(v, bool) else False for v in answer]


class BuggyManager(FixedManager):
    """The seed bug (vLLM #55075): flush re-validates a batch entry by key only."""

    def _still_wanted(self, batch: list[Entry]) -> list[Entry]:
        """Every entry whose key has a probe, even one re-created since it was batched."""
        return [entry for entry in batch if entry[0] in self._lookup_state]
