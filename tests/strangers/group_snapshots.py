"""Immutable snapshots swapped into one attribute; one posted list per request group.

Style: copy-on-write.  All scheduler tables live in one frozen ``Tables`` dataclass (probe
views, request index, batch, generation counter, drain flag) held in ``self._tables``.
Every operation computes a whole new ``Tables`` with ``dataclasses.replace`` and swaps it
in with a single assignment, so no operation can leave the tables half-updated.  One raw
worker thread takes batches from a ``queue.Queue`` and posts one ``list`` of
``(key, generation, verdict)`` per request group on another ``queue.Queue``.  Draining
follows the spec's ``drain_due`` flag.  Tier faults are handled strictly: any fault in a
call gives ``False`` to every key of the call.
"""

from __future__ import annotations

import functools
import itertools
import queue
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Literal, Protocol, TypeVar


class RequestContext(Protocol):
    @property
    def req_id(self) -> str: ...


PhaseName = Literal["PENDING", "IN_FLIGHT", "RESOLVED"]


@dataclass(frozen=True)
class ProbeView:
    generation: int
    phase: PhaseName
    verdict: bool | None
    requesters: frozenset[str]


@dataclass(frozen=True)
class Entry:
    key: bytes
    context: RequestContext
    generation: int


@dataclass(frozen=True)
class Tables:
    probes: Mapping[bytes, ProbeView]
    index: Mapping[str, frozenset[bytes]]
    batch: tuple[Entry, ...]
    next_generation: int
    drain_due: bool


K = TypeVar("K")
V = TypeVar("V")


def _frozen(mapping: dict[K, V]) -> Mapping[K, V]:
    return MappingProxyType(mapping)


EMPTY = Tables(_frozen({}), _frozen({}), (), 0, False)
Posted = list[tuple[bytes, int, bool]]


def strict_verdicts(count: int, call: Callable[[], Iterable[object]]) -> list[bool]:
    """All ``count`` answers as bools, or ``False`` for all when anything about the call is off."""
    try:
        answer = list(itertools.islice(call(), count + 1))
    except Exception:
        return [False] * count
    if len(answer) == count and all(isinstance(value, bool) for value in answer):
        return [value is True for value in answer]
    return [False] * count


class SnapshotManager:
    join_timeout = 10.0
    drain_in_lookup = True

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        self._tables = EMPTY
        self._inbox: queue.Queue[tuple[Entry, ...] | None] = queue.Queue()
        self._posted: queue.Queue[Posted] = queue.Queue()
        self._halt = threading.Event()
        self._shut = False
        self._thread = threading.Thread(target=self._serve, name="snapshot-worker", daemon=True)
        self._thread.start()

    def batch_lookup(self, keys: list[bytes], req_context: RequestContext) -> Iterable[bool]:
        raise NotImplementedError(self.tier_type)

    # -------------------------------------------------------------- scheduler thread

    def lookup(self, key: bytes, req_context: RequestContext) -> bool | None:
        if self._tables.drain_due and self.drain_in_lookup:
            self._apply_posted()
        t = self._tables
        rid = req_context.req_id
        view = t.probes.get(key)
        if view is None:
            view = ProbeView(t.next_generation, "PENDING", None, frozenset())
            t = replace(
                t,
                next_generation=t.next_generation + 1,
                batch=(*t.batch, Entry(key, req_context, view.generation)),
            )
        view = replace(view, requesters=view.requesters | {rid})
        self._tables = replace(
            t,
            probes=_frozen({**t.probes, key: view}),
            index=_frozen({**t.index, rid: t.index.get(rid, frozenset()) | {key}}),
        )
        return view.verdict if view.phase == "RESOLVED" else None

    def flush(self) -> None:
        self._apply_posted()
        t = self._tables
        live = tuple(entry for entry in t.batch if self._admit(t, entry))
        probes = dict(t.probes)
        for entry in live:
            view = probes.get(entry.key)
            if view is not None and view.generation == entry.generation:
                probes[entry.key] = replace(view, phase="IN_FLIGHT")
        self._tables = replace(t, probes=_frozen(probes), batch=(), drain_due=True)
        if live:
            self._inbox.put(live)

    @staticmethod
    def _admit(t: Tables, entry: Entry) -> bool:
        view = t.probes.get(entry.key)
        return view is not None and view.generation == entry.generation

    def cleanup(self, req_id: str) -> None:
        t = self._tables
        probes = dict(t.probes)
        for key in t.index.get(req_id, frozenset()):
            view = probes.get(key)
            if view is None:
                continue
            rest = view.requesters - {req_id}
            if rest or not self._forgettable(view):
                probes[key] = replace(view, requesters=rest)
            else:
                del probes[key]
        index = {rid: keys for rid, keys in t.index.items() if rid != req_id}
        self._tables = replace(t, probes=_frozen(probes), index=_frozen(index))

    @staticmethod
    def _forgettable(view: ProbeView) -> bool:
        return view.phase != "IN_FLIGHT"

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        t = self._tables
        probes = dict(t.probes)
        for key in keys:
            view = probes.get(key)
            if view is not None and view.phase == "RESOLVED":
                probes[key] = replace(view, verdict=False)
        self._tables = replace(t, probes=_frozen(probes))

    def mark_present(self, keys: Iterable[bytes]) -> None:
        t = self._tables
        probes = dict(t.probes)
        counter = t.next_generation
        for key in keys:
            view = probes.get(key)
            if view is None or view.verdict is True:
                continue
            if view.requesters:
                probes[key] = ProbeView(counter, "RESOLVED", True, view.requesters)
                counter += 1
            else:
                del probes[key]
        self._tables = replace(t, probes=_frozen(probes), next_generation=counter)

    def drain_results(self) -> None:
        self._apply_posted()

    def shutdown(self) -> None:
        if self._shut:
            return
        self._shut = True
        self._halt.set()
        self._inbox.put(None)
        self._thread.join(self.join_timeout)
        self._apply_posted()
        self._tables = replace(self._tables, batch=())

    def _apply_posted(self) -> None:
        t = self._tables
        probes = dict(t.probes)
        while True:
            try:
                group = self._posted.get_nowait()
            except queue.Empty:
                break
            for key, generation, verdict in group:
                view = probes.get(key)
                if view is None or view.generation != generation:
                    continue
                if view.requesters:
                    probes[key] = replace(view, phase="RESOLVED", verdict=verdict)
                else:
                    del probes[key]
        self._tables = replace(t, probes=_frozen(probes), drain_due=False)

    # -------------------------------------------------------------- worker thread

    def _serve(self) -> None:
        while (batch := self._inbox.get()) is not None:
            if self._halt.is_set():
                break
            order: list[str] = []
            groups: dict[str, list[Entry]] = {}
            for entry in batch:
                rid = entry.context.req_id
                if rid not in groups:
                    order.append(rid)
                    groups[rid] = []
                groups[rid].append(entry)
            for rid in order:
                entries = groups[rid]
                keys = [entry.key for entry in entries]
                context = entries[0].context
                verdicts = strict_verdicts(
                    len(keys), functools.partial(self.batch_lookup, list(keys), context)
                )
                self._posted.put(
                    [(e.key, e.generation, v) for e, v in zip(entries, verdicts, strict=True)]
                )


# ------------------------------------------------------------------ one-bug copies


class RevalidatesByKeyOnly(SnapshotManager):
    """BUG (property 1): flush keeps an entry whenever its key has some state, even a newer one."""

    @staticmethod
    def _admit(t: Tables, entry: Entry) -> bool:
        return entry.key in t.probes


class CleanupDropsInFlight(SnapshotManager):
    """BUG (property 8): cleanup deletes an orphaned IN_FLIGHT probe, so the key is probed again."""

    @staticmethod
    def _forgettable(view: ProbeView) -> bool:
        return True


class SnapshotDrainsOnlyInFlush(SnapshotManager):
    """BUG (property 6): lookup never applies posted results (only flush/drain/shutdown do)."""

    drain_in_lookup = False
