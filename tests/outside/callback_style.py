"""An outside vLLM-shaped manager: slots records, a job queue, results posted by callback.

``CallbackManager`` is correct by docs/protocol.md.  Its style is not the
zoo's: probe records are a ``slots`` dataclass with string phases, the tables
are ``_states`` (key -> probe), ``_by_request`` (request id -> keys) and
``_pending`` (this step's batch), generations come from ``itertools.count``,
the worker iterates ``iter(queue.get, None)`` and hands each request group's
results to a callback as soon as that group is answered (per-group posting),
and tier answers are checked strictly (only a real ``bool`` counts).

Every other class here changes exactly one rule of it; its docstring says which
property of docs/properties.md the oracle must name and why.  Test data, not a library:
it has no observer, no health check and no tracing.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

log = logging.getLogger(__name__)

PENDING, IN_FLIGHT, RESOLVED = "pending", "in_flight", "resolved"


@dataclass(slots=True)
class Probe:
    """One existence check of one key: its generation, phase, verdict and requesters."""

    gen: int
    phase: str = PENDING
    verdict: bool | None = None
    waiting: set[str] = field(default_factory=set)


class Entry(NamedTuple):
    """A batch entry: the key, the request context it was batched with, its generation."""

    key: bytes
    ctx: Any
    gen: int


Result = tuple[bytes, int, bool]  # key, generation, verdict
Post = Callable[[list[Result]], None]


class CallbackManager:
    """Scheduler API plus one worker thread that posts each request group's results."""

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        self._states: dict[bytes, Probe] = {}
        self._by_request: dict[str, set[bytes]] = {}
        self._pending: list[Entry] = []
        self._gen = itertools.count()
        self._flushed = False  # the next lookup applies what was posted
        self._closed = False
        self._jobs: queue.Queue[list[Entry] | None] = queue.Queue()
        self._pending_results: queue.SimpleQueue[list[Result]] = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=self._serve, args=(self._deliver,), name=f"probe-{tier_type}", daemon=True
        )
        self._thread.start()

    def batch_lookup(self, keys: list[bytes], req_context: Any) -> Iterable[object]:
        """One verdict per key, from the tier; called on the worker thread."""
        raise NotImplementedError("a subclass talks to the tier")

    # -- scheduler thread ----------------------------------------------------------

    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        if self._flushed:
            self._flushed = False
            self.drain_results()
        probe = self._states.get(key)
        if probe is None:
            probe = self._states[key] = Probe(next(self._gen))
            self._pending.append(Entry(key, req_context, probe.gen))
        req_id: str = req_context.req_id
        probe.waiting.add(req_id)
        self._by_request.setdefault(req_id, set()).add(key)
        return probe.verdict

    def flush(self) -> None:
        self.drain_results()
        self._flushed = True
        batch = [entry for entry in self._pending if self._is_live(entry)]
        self._pending = []
        for entry in batch:
            self._states[entry.key].phase = IN_FLIGHT
        if batch:
            self._jobs.put(batch)

    def _is_live(self, entry: Entry) -> bool:
        """Whether the batched entry is still its key's current probe (same generation)."""
        probe = self._states.get(entry.key)
        return probe is not None and probe.gen == entry.gen

    def drain_results(self) -> None:
        while True:
            try:
                posted = self._pending_results.get_nowait()
            except queue.Empty:
                return
            for key, gen, verdict in posted:
                self._settle(key, gen, verdict)

    def _settle(self, key: bytes, gen: int, verdict: bool) -> None:
        probe = self._states.get(key)
        if probe is None or probe.gen != gen:
            return  # stale: cleaned up or superseded since it was submitted
        if not probe.waiting:
            del self._states[key]  # orphaned while in flight
            return
        probe.verdict = verdict
        probe.phase = RESOLVED

    def cleanup(self, req_id: str) -> None:
        for key in self._by_request.pop(req_id, set()):
            probe = self._states.get(key)
            if probe is None:
                continue
            probe.waiting.discard(req_id)
            if not probe.waiting and probe.phase != IN_FLIGHT:
                del self._states[key]

    def mark_miss(self, keys: Collection[bytes]) -> None:
        for key in keys:
            probe = self._states.get(key)
            if probe is not None and probe.phase == RESOLVED:
                probe.verdict = False

    def mark_present(self, keys: Collection[bytes]) -> None:
        for key in keys:
            probe = self._states.get(key)
            if probe is None or probe.verdict is True:
                continue
            if not probe.waiting:
                del self._states[key]
                continue
            probe.gen, probe.verdict, probe.phase = next(self._gen), True, RESOLVED

    def shutdown(self) -> None:
        if not self._closed:
            self._closed = True
            self._jobs.put(None)
        self._thread.join(timeout=10)
        self.drain_results()

    # -- worker thread -------------------------------------------------------------

    def _serve(self, post: Post) -> None:
        for batch in iter(self._jobs.get, None):
            for ctx, entries in self._groups(batch):
                post(self._probe_group(ctx, entries))

    @staticmethod
    def _groups(batch: list[Entry]) -> Iterator[tuple[Any, list[Entry]]]:
        """The batch's request groups, in order of first appearance."""
        by_id: dict[str, list[Entry]] = {}
        for entry in batch:
            by_id.setdefault(entry.ctx.req_id, []).append(entry)
        for entries in by_id.values():
            yield entries[0].ctx, entries

    def _probe_group(self, ctx: Any, entries: list[Entry]) -> list[Result]:
        verdicts = self._ask([entry.key for entry in entries], ctx)
        return [(e.key, e.gen, v) for e, v in zip(entries, verdicts, strict=True)]

    def _ask(self, keys: list[bytes], ctx: Any) -> list[bool]:
        """The tier's verdicts; any misbehaviour is a miss for the whole call."""
        try:
            answer = tuple(self.batch_lookup(keys, ctx))
        except Exception as exc:  # foreign code: survive anything
            log.warning("%s: tier raised on %d keys: %r", self.tier_type, len(keys), exc)
            return [False] * len(keys)
        if len(answer) != len(keys):
            log.warning("%s: %d answers for %d keys", self.tier_type, len(answer), len(keys))
            return [False] * len(keys)
        return [v if isinstance(v, bool) else False for v in answer]

    def _deliver(self, results: list[Result]) -> None:
        self._pending_results.put(results)


# -- one bug each -------------------------------------------------------------------


class StaleBesideLive(CallbackManager):
    """Flush keeps an entry while its request still waits on the key, whatever its generation.

    After ``lookup(k, A)``, ``cleanup(A)``, ``lookup(k, A)`` the step's batch
    holds A's dead entry of the first probe beside A's live entry of the
    second; both pass, and the tier is asked ``[k, k]`` for A.  Property 1
    (docs/properties.md: "the tier is asked only about probes that were live and
    PENDING, with the batched generation, at the flush that sent them"): the
    first entry's probe was deleted.  The context is A's both times, so it is
    not property 9.  The same rule also drops a live entry whose batching
    request was cleaned up while another request still waits on the key: that
    probe is never submitted, and the other request waits for ever (6, also
    expected).
    """

    def _is_live(self, entry: Entry) -> bool:
        probe = self._states.get(entry.key)
        return probe is not None and entry.ctx.req_id in probe.waiting


class RevalidateAnyState(CallbackManager):
    """Flush keeps an entry whenever its key has some state, of any generation.

    The seed's bug, half fixed: an entry cleaned up and re-created, or
    superseded by ``mark_present``, is still submitted.  Property 1: the tier
    is asked about a probe that is not live with the batched generation.
    """

    def _is_live(self, entry: Entry) -> bool:
        return entry.key in self._states


class ResultsByKeyOnly(CallbackManager):
    """A posted result is applied to whatever probe its key has now.

    A result of a probe superseded by ``mark_present`` (or deleted and
    re-created) lands on the key's newer probe.  Property 2 (docs/properties.md: a
    verdict returned by lookup is never "one computed for an older
    generation"); docs/properties.md lists the shipped bug under 2 and 3, since the
    newer probe may then receive two verdicts.
    """

    def _settle(self, key: bytes, gen: int, verdict: bool) -> None:
        probe = self._states.get(key)
        if probe is None:
            return
        if not probe.waiting:
            del self._states[key]
            return
        probe.verdict = verdict
        probe.phase = RESOLVED


class CleanupKeepsRequestIndex(CallbackManager):
    """Cleanup updates the probes but never removes the request from ``_by_request``.

    Property 4 (docs/properties.md: "after cleanup(r), nothing refers to r"): the
    index still maps r to its keys.  The probes' requester sets are right, so
    no verdict or tier call differs; the only evidence is the table, which a
    leak check sees once every request is cleaned up.  It is a bookkeeping
    error first (the index and the requester sets disagree), so 4, not 5:
    property 5 lists probe states, batch entries and queued items, not the
    index.
    """

    def cleanup(self, req_id: str) -> None:
        for key in self._by_request.get(req_id, set()):
            probe = self._states.get(key)
            if probe is None:
                continue
            probe.waiting.discard(req_id)
            if not probe.waiting and probe.phase != IN_FLIGHT:
                del self._states[key]


class ZipDropsShortAnswer(CallbackManager):
    """The worker pairs keys with answers by ``zip()``, as vLLM 0.34 did.

    A tier that answers too few values leaves the unpaired keys without any
    result: their probes stay IN_FLIGHT and their requesters get None for
    ever.  Property 6 (docs/properties.md: "a probe that has requesters is RESOLVED
    within one step after the worker finished it"); the shipped bug is listed
    under 6 and 5 (the stranded probe is also never freed).
    """

    def _probe_group(self, ctx: Any, entries: list[Entry]) -> list[Result]:
        try:
            answer = list(self.batch_lookup([e.key for e in entries], ctx))
        except Exception:
            answer = [False] * len(entries)
        return [
            (e.key, e.gen, v if isinstance(v, bool) else False)
            for e, v in zip(entries, answer)  # noqa: B905 - the bug: a short answer drops keys
        ]


class NonBoolPassedThrough(CallbackManager):
    """The worker takes a right-length answer as it is: a tier's ``1`` becomes the verdict.

    The tier-answer rule of docs/protocol.md: a tier that returns non-bool values
    "yields False for every key it did not answer properly".  The lead files
    that rule under property 7 (survival: "no tier behaviour (..., wrong
    type, ...) stops the worker or the scheduler"), and lookup returns ``1``.
    It delivers no stale result: not property 2.
    """

    def _ask(self, keys: list[bytes], ctx: Any) -> list[bool]:
        try:
            answer: list[Any] = list(self.batch_lookup(keys, ctx))
        except Exception:
            return [False] * len(keys)
        if len(answer) != len(keys):
            return [False] * len(keys)
        return answer


class CleanupDropsInFlight(CallbackManager):
    """Cleanup deletes a probe left without requesters even while it is IN_FLIGHT.

    A second request's lookup of the same key then makes a new probe and the
    key is probed twice.  Property 8 (docs/properties.md: "Cleanup deleted in-flight
    probes, so a second request re-probed the same key (property 8)"); an
    efficiency property, so the oracle must be run with strict efficiency.
    """

    def cleanup(self, req_id: str) -> None:
        for key in self._by_request.pop(req_id, set()):
            probe = self._states.get(key)
            if probe is None:
                continue
            probe.waiting.discard(req_id)
            if not probe.waiting:
                del self._states[key]


class PostsAfterNextTake(CallbackManager):
    """The worker holds a batch's results until it has taken the next batch.

    A pipelining "optimisation": results are posted only when another batch
    arrives (or at shutdown), so after one flush the verdicts never become
    visible.  Property 6 (the protocol: the worker posts results "always before
    it takes the next batch"; "a probe that has requesters is RESOLVED within
    one step after the worker finished it").
    """

    def _serve(self, post: Post) -> None:
        held: list[list[Result]] = []
        for batch in iter(self._jobs.get, None):
            for results in held:
                post(results)
            held = [self._probe_group(ctx, entries) for ctx, entries in self._groups(batch)]
        for results in held:
            post(results)
