"""Functional core, imperative shell; ``collections.deque`` mailboxes with an Event and a Lock.

Style: every protocol rule is a module-level pure function that takes the tables and
returns new ones (``assoc``/``dissoc`` on dicts, ``functools.reduce`` over results,
``itertools.groupby`` for request groups); the manager class is a thin shell that only
holds the current tables and the two mailboxes.  Probes are ``typing.NamedTuple`` values.
Work goes to the worker on a ``deque`` plus a ``threading.Event`` that wakes it; results
come back on a ``deque`` guarded by a ``threading.Lock``, one extend per request group.
Draining follows the spec's rule.  Tier faults are handled strictly: any fault gives
``False`` to every key of the call.
"""

from __future__ import annotations

import collections
import functools
import itertools
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple, Protocol, TypeVar


class RequestContext(Protocol):
    @property
    def req_id(self) -> str: ...


class P(NamedTuple):
    """One probe: its generation, phase, verdict and requesters."""

    generation: int
    phase: str
    verdict: bool | None
    requesters: frozenset[str]


class Ask(NamedTuple):
    """One batch entry."""

    key: bytes
    context: RequestContext
    generation: int


Probes = Mapping[bytes, P]
Index = Mapping[str, frozenset[bytes]]
Result = tuple[bytes, int, bool]
Group = tuple[RequestContext, list[Ask]]

K = TypeVar("K")
V = TypeVar("V")


# ---------------------------------------------------------------- pure functions


def assoc(mapping: Mapping[K, V], key: K, value: V) -> dict[K, V]:
    return {**mapping, key: value}


def dissoc(mapping: Mapping[K, V], key: K) -> dict[K, V]:
    return {k: v for k, v in mapping.items() if k != key}


def live_entry(probes: Probes, index: Index, entry: Ask) -> bool:
    """The seed fix: the entry's key still has a state of the entry's generation."""
    probe = probes.get(entry.key)
    return probe is not None and probe.generation == entry.generation


def request_still_known(probes: Probes, index: Index, entry: Ask) -> bool:
    """Keeps an entry while its request is not cleaned up (ignores generations)."""
    return entry.context.req_id in index and entry.key in probes


def joined(
    probes: Probes, key: bytes, rid: str, fresh: Callable[[], int]
) -> tuple[Probes, P, bool]:
    probe = probes.get(key)
    created = probe is None
    if probe is None:
        probe = P(fresh(), "PENDING", None, frozenset())
    probe = probe._replace(requesters=probe.requesters | {rid})
    return assoc(probes, key, probe), probe, created


def released(probes: Probes, key: bytes, rid: str) -> Probes:
    probe = probes.get(key)
    if probe is None:
        return probes
    rest = probe.requesters - {rid}
    if not rest and probe.phase != "IN_FLIGHT":
        return dissoc(probes, key)
    return assoc(probes, key, probe._replace(requesters=rest))


def sent(probes: Probes, entries: Iterable[Ask]) -> Probes:
    return functools.reduce(
        lambda acc, e: assoc(acc, e.key, acc[e.key]._replace(phase="IN_FLIGHT")),
        (e for e in entries if e.key in probes and probes[e.key].generation == e.generation),
        probes,
    )


def apply_result(probes: Probes, result: Result) -> Probes:
    key, generation, verdict = result
    probe = probes.get(key)
    if probe is None or probe.generation != generation:
        return probes
    if not probe.requesters:
        return dissoc(probes, key)
    return assoc(probes, key, probe._replace(phase="RESOLVED", verdict=verdict))


def missed(probes: Probes, key: bytes) -> Probes:
    probe = probes.get(key)
    if probe is None or probe.phase != "RESOLVED":
        return probes
    return assoc(probes, key, probe._replace(verdict=False))


def presented(probes: Probes, key: bytes, fresh: Callable[[], int]) -> Probes:
    probe = probes.get(key)
    if probe is None or probe.verdict is True:
        return probes
    if not probe.requesters:
        return dissoc(probes, key)
    return assoc(probes, key, P(fresh(), "RESOLVED", True, probe.requesters))


def groups_by_request(batch: Sequence[Ask]) -> list[Group]:
    first_seen = {e.context.req_id: i for i, e in reversed(list(enumerate(batch)))}
    ordered = sorted(batch, key=lambda e: first_seen[e.context.req_id])
    return [
        (entries[0].context, entries)
        for entries in (
            list(g) for _, g in itertools.groupby(ordered, key=lambda e: e.context.req_id)
        )
    ]


def groups_by_shard(batch: Sequence[Ask]) -> list[Group]:
    """Groups by the key's first byte (a shard), asking each shard with its first context."""
    shards: dict[bytes, list[Ask]] = {}
    for entry in batch:
        shards.setdefault(entry.key[:1], []).append(entry)
    return [(entries[0].context, entries) for entries in shards.values()]


def strict_answers(count: int, call: Callable[[], Iterable[object]]) -> list[bool]:
    try:
        answers = tuple(itertools.islice(call(), count + 1))
    except Exception:
        return [False] * count
    ok = len(answers) == count and all(type(a) is bool for a in answers)
    return [a is True for a in answers] if ok else [False] * count


# ---------------------------------------------------------------- imperative shell


class DequeEventManager:
    join_timeout = 10.0

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        self._probes: Probes = {}
        self._index: Index = {}
        self._batch: tuple[Ask, ...] = ()
        self._due = False
        self._done = False
        self._counter = itertools.count()
        self._work: collections.deque[tuple[Ask, ...]] = collections.deque()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._results: collections.deque[Result] = collections.deque()
        self._results_lock = threading.Lock()
        self._worker = threading.Thread(target=self._loop, name="deque-worker", daemon=True)
        self._worker.start()

    def batch_lookup(self, keys: list[bytes], req_context: RequestContext) -> Iterable[bool]:
        raise NotImplementedError(self.tier_type)

    def _fresh(self) -> int:
        return next(self._counter)

    # the two rules a copy may swap
    def _admit(self, entry: Ask) -> bool:
        return live_entry(self._probes, self._index, entry)

    def _split(self, batch: Sequence[Ask]) -> list[Group]:
        return groups_by_request(batch)

    # -------------------------------------------------------------- scheduler

    def lookup(self, key: bytes, req_context: RequestContext) -> bool | None:
        if self._due:
            self._drain()
        rid = req_context.req_id
        self._probes, probe, created = joined(self._probes, key, rid, self._fresh)
        if created:
            self._batch = (*self._batch, Ask(key, req_context, probe.generation))
        self._index = assoc(self._index, rid, self._index.get(rid, frozenset()) | {key})
        return probe.verdict if probe.phase == "RESOLVED" else None

    def flush(self) -> None:
        self._drain()
        live = tuple(filter(self._admit, self._batch))
        self._batch = ()
        self._probes = sent(self._probes, live)
        self._due = True
        if live:
            self._work.append(live)
            self._wake.set()

    def cleanup(self, req_id: str) -> None:
        keys = self._index.get(req_id, frozenset())
        self._probes = functools.reduce(lambda acc, k: released(acc, k, req_id), keys, self._probes)
        self._index = dissoc(self._index, req_id)

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        self._probes = functools.reduce(missed, keys, self._probes)

    def mark_present(self, keys: Iterable[bytes]) -> None:
        self._probes = functools.reduce(
            lambda acc, k: presented(acc, k, self._fresh), keys, self._probes
        )

    def drain_results(self) -> None:
        self._drain()

    def shutdown(self) -> None:
        if self._done:
            return
        self._done = True
        self._stopping.set()
        self._wake.set()
        self._worker.join(self.join_timeout)
        self._drain()
        self._batch = ()

    def _drain(self) -> None:
        self._due = False
        with self._results_lock:
            taken = list(self._results)
            self._results.clear()
        self._probes = functools.reduce(apply_result, taken, self._probes)

    # -------------------------------------------------------------- worker

    def _loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            while self._work:
                if self._stopping.is_set():
                    return
                batch = self._work.popleft()
                for context, entries in self._split(batch):
                    keys = [e.key for e in entries]
                    verdicts = strict_answers(
                        len(keys), functools.partial(self.batch_lookup, keys, context)
                    )
                    with self._results_lock:
                        self._results.extend(
                            (e.key, e.generation, v) for e, v in zip(entries, verdicts, strict=True)
                        )
            if self._stopping.is_set():
                return


# ------------------------------------------------------------------ one-bug copies


class AdmitsWhileRequestKnown(DequeEventManager):
    """BUG (property 1): flush also keeps an entry while its request is not cleaned up, so
    an entry superseded by mark_present is still submitted.

    (It keeps every live entry as well: a first version kept only entries whose request
    was not cleaned up, and so also dropped a live entry whose probe another request had
    joined, a second bug, property 6, that the oracle rightly found first on some seeds.)
    """

    def _admit(self, entry: Ask) -> bool:
        return super()._admit(entry) or request_still_known(self._probes, self._index, entry)


class ShardedTierCalls(DequeEventManager):
    """BUG (property 9): one tier call per key shard, mixing requests' keys under one context."""

    def _split(self, batch: Sequence[Ask]) -> list[Group]:
        return groups_by_shard(batch)
