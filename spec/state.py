"""The protocol's values: keys, probes, the whole State, actions and their outputs.

Everything here is an immutable value (NamedTuples and frozen dataclasses), so
a State hashes, compares and can be shared between runs; the model checker
stores millions of them.  Actions are data: each names who acts and the verb
(``Lookup`` is the scheduler's, ``TakeBatch`` the worker's); what an action
*does* is ``asynclookup.spec.core``.  The read-only table lookups that every
layer needs (``probe_of``, ``keys_of``, ``group_of``) live here too.

What it does not do: change a State, or judge one (``asynclookup.spec.properties``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple, TypeAlias

Key: TypeAlias = bytes
RequestId: TypeAlias = str
Generation: TypeAlias = int
Verdict: TypeAlias = bool | None


class Phase(enum.Enum):
    """Where a probe is in its life."""

    PENDING = "PENDING"  # in this step's batch, not yet sent
    IN_FLIGHT = "IN_FLIGHT"  # sent to the worker, no verdict applied
    RESOLVED = "RESOLVED"  # a verdict is applied

    def __repr__(self) -> str:
        return f"Phase.{self.name}"


class Probe(NamedTuple):
    """The lookup state of one key."""

    generation: Generation
    phase: Phase
    verdict: Verdict
    requesters: frozenset[RequestId]


class Entry(NamedTuple):
    """A batch entry: a key, the request it was batched with, its generation."""

    key: Key
    request: RequestId
    generation: Generation


class Result(NamedTuple):
    """A verdict computed by the worker for one generation of one key."""

    key: Key
    generation: Generation
    verdict: bool


class State(NamedTuple):
    """The whole protocol state: scheduler tables, worker pipeline, flags."""

    probes: tuple[tuple[Key, Probe], ...] = ()  # sorted by key
    # request -> keys.  The name shadows tuple.index on purpose: it is the protocol's
    # word, and State is never used as a sequence.
    index: tuple[tuple[RequestId, frozenset[Key]], ...] = ()  # type: ignore[assignment]
    next_generation: Generation = 0
    batch: tuple[Entry, ...] = ()  # this step's entries, not yet flushed
    queue: tuple[tuple[Entry, ...], ...] = ()  # flushed batches, not yet taken
    held: tuple[Entry, ...] = ()  # the worker's batch in hand, not yet probed
    answered: tuple[Result, ...] = ()  # probed by the worker, not yet posted
    posted: tuple[Result, ...] = ()  # posted, not yet applied
    drain_due: bool = False  # a flush happened and no drain since
    stopped: bool = False


INITIAL = State()


# -- table helpers (pure; every update builds new tuples) ---------------------


def probe_of(state: State, key: Key) -> Probe | None:
    """The probe of ``key``, or None when the key has no state."""
    for k, probe in state.probes:
        if k == key:
            return probe
    return None


def keys_of(state: State, request: RequestId) -> frozenset[Key]:
    """The keys ``request`` is a requester of."""
    for r, keys in state.index:
        if r == request:
            return keys
    return frozenset()


def group_of(held: tuple[Entry, ...]) -> tuple[Entry, ...]:
    """The worker's next tier call: the held entries of the first one's request."""
    if not held:
        return ()
    request = held[0].request
    return tuple(e for e in held if e.request == request)


# -- actions (data) ------------------------------------------------------------


@dataclass(frozen=True)
class Lookup:
    """Scheduler: is ``key`` in the tier?  Asked on behalf of ``request``."""

    key: Key
    request: RequestId


@dataclass(frozen=True)
class Flush:
    """Scheduler: end of step; submit the re-validated batch to the worker."""


@dataclass(frozen=True)
class Cleanup:
    """Scheduler: ``request`` finished or was cancelled."""

    request: RequestId


@dataclass(frozen=True)
class MarkMiss:
    """Scheduler: a load of these keys failed; resolved probes become False."""

    keys: tuple[Key, ...]


@dataclass(frozen=True)
class MarkPresent:
    """Scheduler: a store of these keys succeeded; newer than any probe."""

    keys: tuple[Key, ...]


@dataclass(frozen=True)
class Drain:
    """Scheduler: apply every posted result (``drain_results``)."""


@dataclass(frozen=True)
class Shutdown:
    """Scheduler: stop and join the worker, apply posted results. Idempotent."""


@dataclass(frozen=True)
class TakeBatch:
    """Worker: take the oldest submitted batch from the queue."""


@dataclass(frozen=True)
class ProbeGroup:
    """Worker: one tier call for the next request group of the held batch.

    ``answers`` holds one verdict per key of the group, in order; None means
    the tier failed (raised, answered the wrong length): every key gets False.
    """

    answers: tuple[bool, ...] | None


@dataclass(frozen=True, repr=False)
class Post:
    """Worker: post the answered results to the scheduler: all of them, or the first
    ``count`` (a worker may post a tier call's results one by one: the protocol does
    not say a group's results are posted together; see docs/protocol.md, "What the
    spec decides where the protocol leaves room", point 9).  The spec's own runs
    (the model checker's, the reference's) post all at once."""

    count: int | None = None

    def __repr__(self) -> str:
        return "Post()" if self.count is None else f"Post({self.count})"


Action: TypeAlias = (
    Lookup | Flush | Cleanup | MarkMiss | MarkPresent | Drain | Shutdown
    | TakeBatch | ProbeGroup | Post
)
SCHEDULER_ACTIONS = (Lookup, Flush, Cleanup, MarkMiss, MarkPresent, Drain, Shutdown)
WORKER_ACTIONS = (TakeBatch, ProbeGroup, Post)


class FlushOutput(NamedTuple):
    """What ``flush`` submitted to the worker and what it dropped as stale."""

    submitted: tuple[Entry, ...]
    dropped: tuple[Entry, ...]


class TierCall(NamedTuple):
    """One tier call made by ``ProbeGroup``: the keys and whose context."""

    keys: tuple[Key, ...]
    request: RequestId


Output: TypeAlias = Verdict | FlushOutput | TierCall
