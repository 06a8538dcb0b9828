"""A lookup service of another shape than vLLM's, for the adapter walkthrough of docs/oracle.md.

``StepLookupService`` keeps the protocol (docs/protocol.md) behind an API of its
own: the tier is a function given to the constructor, ``probe(keys,
request_id)``; the scheduler calls are ``query(request_id, key)``,
``end_step()``, ``release(request_id)``, ``collect()`` and ``close()``; it has
no ``mark_miss`` or ``mark_present``; after ``close()`` every call raises
``ServiceClosed``.  Its worker posts one item per request group.  No
``asynclookup.conformance.targets.vllm`` fits it, so docs/oracle.md writes a ``Target`` for it.

``ForgetfulService`` is the same service with one bug: ``release`` leaves the
request in its index (a leak, property 5).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

Probe = Callable[[Sequence[bytes], str], Sequence[object]]


class ServiceClosed(RuntimeError):
    """A call after ``close()``."""


@dataclass
class _Probe:
    generation: int
    verdict: bool | None = None
    in_flight: bool = False
    requesters: set[str] = field(default_factory=set)


class StepLookupService:
    """Asks ``probe`` off the caller's thread whether keys exist; one step at a time."""

    def __init__(self, probe: Probe) -> None:
        self._probe = probe
        self._probes: dict[bytes, _Probe] = {}
        self._requests: dict[str, set[bytes]] = {}
        self._step: list[tuple[bytes, str, int]] = []  # key, request id, generation
        self._generation = 0
        self._collect_due = False
        self._closed = False
        self._submitted: queue.SimpleQueue[list[tuple[bytes, str, int]] | None] = (
            queue.SimpleQueue()
        )
        self._inbox: queue.SimpleQueue[list[tuple[bytes, int, bool]]] = queue.SimpleQueue()
        self._worker = threading.Thread(target=self._run, name="step-lookup", daemon=True)
        self._worker.start()

    def query(self, request_id: str, key: bytes) -> bool | None:
        """The verdict on ``key`` for ``request_id`` (None until known)."""
        self._check_open()
        if self._collect_due:
            self.collect()
        probe = self._probes.get(key)
        if probe is None:
            probe = self._probes[key] = _Probe(self._generation)
            self._generation += 1
            self._step.append((key, request_id, probe.generation))
        probe.requesters.add(request_id)
        self._requests.setdefault(request_id, set()).add(key)
        return probe.verdict

    def end_step(self) -> None:
        """Collect results, then send this step's still-current queries to the worker."""
        self._check_open()
        self.collect()
        self._collect_due = True
        step, self._step = self._step, []
        current = [
            (key, request_id, generation) for key, request_id, generation in step
            if (p := self._probes.get(key)) is not None and p.generation == generation
        ]
        for key, _, _ in current:
            self._probes[key].in_flight = True
        if current:
            self._submitted.put(current)

    def release(self, request_id: str) -> None:
        """``request_id`` is finished: forget it."""
        self._check_open()
        for key in self._forget(request_id):
            probe = self._probes.get(key)
            if probe is None:
                continue
            probe.requesters.discard(request_id)
            if not probe.requesters and not probe.in_flight:
                del self._probes[key]

    def _forget(self, request_id: str) -> set[bytes]:
        return self._requests.pop(request_id, set())

    def collect(self) -> None:
        """Apply every result the worker has posted."""
        self._check_open()
        self._collect_due = False
        while True:
            try:
                results = self._inbox.get_nowait()
            except queue.Empty:
                return
            for key, generation, verdict in results:
                probe = self._probes.get(key)
                if probe is None or probe.generation != generation:
                    continue
                if not probe.requesters:
                    del self._probes[key]
                    continue
                probe.verdict, probe.in_flight = verdict, False

    def close(self) -> None:
        """Stop the worker after the batch in hand, then apply its results."""
        if self._closed:
            return
        self._submitted.put(None)
        self._worker.join(timeout=10)
        self.collect()
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise ServiceClosed("the service is closed")

    def _run(self) -> None:
        while (batch := self._submitted.get()) is not None:
            groups: dict[str, list[tuple[bytes, int]]] = {}
            for key, request_id, generation in batch:
                groups.setdefault(request_id, []).append((key, generation))
            for request_id, entries in groups.items():
                verdicts = self._ask([key for key, _ in entries], request_id)
                self._inbox.put([(k, g, v) for (k, g), v in zip(entries, verdicts, strict=True)])

    def _ask(self, keys: list[bytes], request_id: str) -> list[bool]:
        """The tier's verdicts, or all False when it misbehaves in any way."""
        try:
            answer = list(self._probe(keys, request_id))
        except Exception as exc:
            log.warning("probe of %d keys failed: %r", len(keys), exc)
            return [False] * len(keys)
        if len(answer) != len(keys):
            return [False] * len(keys)
        return [v if isinstance(v, bool) else False for v in answer]


class ForgetfulService(StepLookupService):
    """The bug: ``release`` drops the request from its probes but not from its index."""

    def _forget(self, request_id: str) -> set[bytes]:
        return set(self._requests.get(request_id, set()))
