"""The machinery the shape classes share: a correct lookup manager with no public API.

``ShapeCore`` keeps the protocol in private methods (``_lookup``, ``_flush``,
``_cleanup``, ``_drain``, ``_mark_miss``, ``_mark_present``, ``_shutdown``)
and its tables under names of its own: ``_states`` (key -> probe),
``_by_request`` (request id -> keys), ``_pending`` (the step's batch) and
``_done`` (the results queue).  Each shape module gives it the public names
and argument types of one copy of vLLM's manager, so that the classes differ
only where their shape does.  ``POOL`` worker threads call the tier: with more
than one, a dispatcher thread splits each batch into per-request groups, hands
them to the pool and waits for all of them (fork-join) before it takes the
next batch; each group's results are posted as soon as its thread has them.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

Entry = tuple[bytes, Any, int]  # key, request context, generation
Group = tuple[Any, list[tuple[bytes, int]]]  # context, (key, generation) of its keys


@dataclass
class Probe:
    generation: int
    in_flight: bool = False
    verdict: bool | None = None
    requesters: set[str] = field(default_factory=set)


class Countdown:
    """A batch's groups still being probed by the pool."""

    def __init__(self, n: int) -> None:
        self._left = n
        self._changed = threading.Condition()

    def done(self) -> None:
        with self._changed:
            self._left -= 1
            self._changed.notify_all()

    def wait(self) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self._left <= 0)


class ShapeCore:
    """A correct manager by docs/protocol.md; subclasses give it a public shape."""

    POOL = 1  # threads that call the tier (1: the dispatcher calls it itself)

    def __init__(self, tier_type: str) -> None:
        self._tier_type = tier_type
        self._states: dict[bytes, Probe] = {}
        self._by_request: dict[str, set[bytes]] = {}
        self._pending: list[Entry] = []
        self._generations = itertools.count()
        self._inbox: queue.SimpleQueue[list[Entry] | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[list[tuple[bytes, int, bool]]] = queue.SimpleQueue()
        self._work: queue.SimpleQueue[tuple[Group, Countdown] | None] = queue.SimpleQueue()
        self._drain_due = False
        self._threads = [threading.Thread(target=self._dispatch, daemon=True)]
        if self.POOL > 1:
            self._threads += [
                threading.Thread(target=self._serve, daemon=True) for _ in range(self.POOL)
            ]
        for thread in self._threads:
            thread.start()

    def batch_lookup(self, keys: list[bytes], req_context: Any) -> Iterable[bool]:
        raise NotImplementedError("the tier: the oracle replaces it")

    # -- scheduler thread --------------------------------------------------------

    def _lookup(self, key: bytes, req_context: Any) -> bool | None:
        if self._drain_due:
            self._drain()
        probe = self._states.get(key)
        if probe is None:
            probe = self._states[key] = Probe(next(self._generations))
            self._pending.append((key, req_context, probe.generation))
        probe.requesters.add(req_context.req_id)
        self._by_request.setdefault(req_context.req_id, set()).add(key)
        return probe.verdict

    def _flush(self) -> None:
        self._drain()
        self._drain_due = True
        batch, self._pending = self._pending, []
        live = [e for e in batch if self._live(e)]
        for key, _, _ in live:
            self._states[key].in_flight = True
        if live:
            self._inbox.put(live)

    def _live(self, entry: Entry) -> bool:
        probe = self._states.get(entry[0])
        return probe is not None and probe.generation == entry[2]

    def _drain(self) -> None:
        self._drain_due = False
        while True:
            try:
                results = self._done.get_nowait()
            except queue.Empty:
                return
            for key, generation, verdict in results:
                self._apply(key, generation, verdict)

    def _apply(self, key: bytes, generation: int, verdict: bool) -> None:
        probe = self._states.get(key)
        if probe is None or probe.generation != generation:
            return  # stale
        if not probe.requesters:
            del self._states[key]
            return
        probe.verdict, probe.in_flight = verdict, False

    def _cleanup(self, req_id: str) -> None:
        for key in self._by_request.pop(req_id, set()):
            self._forget(key, req_id)

    def _forget(self, key: bytes, req_id: str) -> None:
        probe = self._states[key]
        probe.requesters.discard(req_id)
        if not probe.requesters and not probe.in_flight:
            del self._states[key]

    def _mark_miss(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            probe = self._states.get(key)
            if probe is not None and probe.verdict is not None and not probe.in_flight:
                probe.verdict = False

    def _mark_present(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            probe = self._states.get(key)
            if probe is None or probe.verdict is True:
                continue
            if not probe.requesters:
                del self._states[key]
                continue
            probe.generation = next(self._generations)
            probe.verdict, probe.in_flight = True, False

    def _shutdown(self) -> None:
        self._inbox.put(None)
        for thread in self._threads:
            thread.join(timeout=10)
        self._drain()

    # -- worker threads -------------------------------------------------------------

    def _dispatch(self) -> None:
        while (batch := self._inbox.get()) is not None:
            groups: dict[str, Group] = {}
            for key, ctx, gen in batch:
                groups.setdefault(ctx.req_id, (ctx, []))[1].append((key, gen))
            if self.POOL == 1:
                for group in groups.values():
                    self._done.put(self._probe(group))
                continue
            left = Countdown(len(groups))
            for group in groups.values():
                self._work.put((group, left))
            self._join(left)
        for _ in range(self.POOL if self.POOL > 1 else 0):
            self._work.put(None)

    def _join(self, left: Countdown) -> None:
        """The pool's one-worker rule: the next batch only once every group is posted."""
        left.wait()

    def _serve(self) -> None:
        while (item := self._work.get()) is not None:
            group, left = item
            self._done.put(self._probe(group))
            left.done()

    def _probe(self, group: Group) -> list[tuple[bytes, int, bool]]:
        """One tier call; every misbehaviour of the tier becomes misses for the call."""
        ctx, entries = group
        keys = [key for key, _ in entries]
        try:
            answer = list(self.batch_lookup(keys, ctx))
        except Exception as exc:  # the tier is foreign code
            log.warning("tier %s failed: %r", self._tier_type, exc)
            answer = []
        if len(answer) != len(keys):
            answer = [False] * len(keys)
        return [(k, g, v is True) for (k, g), v in zip(entries, answer, strict=True)]
