"""What the conformance oracle observes of a black box, as data.

An observation is a frozen dataclass named after the spec action it shows:
the seven scheduler calls with what they returned (or the error they raised),
the worker's tier calls with the oracle's ``Answer``, and in stepped mode the
worker steps with what they returned.  Threaded mode adds ``TierCallWaiting`` (a
tier call seen arrive), ``Stalled``, ``Overdue`` and ``WorkerDied``: what bounded
waits for the worker found, and
``Hung``: a call into the IUT that did not return.
``Leftover`` and ``Tables`` are the looks inside: what an adapter's snapshot
of the IUT's tables held when the spec says they must be empty (property 5),
and which keys and requests a trace's tables event says the IUT holds.

``verdict_candidates`` says which verdicts a conforming worker may derive from
a tier answer.  This module only describes; ``asynclookup.observe.engine`` judges.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

CLOSED = "closed"  # an adapter's name for the IUT's closed-manager error


# -- what the oracle's tier answered ---------------------------------------------


@dataclass(frozen=True)
class Answer:
    """What the oracle's tier did on one call: the items it gave and how it ended.

    ``lazy``: a generator rather than a list; ``raises``: raised, after yielding
    ``items`` when lazy (a plain call that raises yields nothing).
    """

    items: tuple[object, ...] = ()
    raises: bool = False
    lazy: bool = False
    slow: bool = False

    def proper(self, n: int) -> bool:
        """Whether this is a well-formed answer for ``n`` keys: n bools, no exception."""
        return (
            not self.raises and len(self.items) == n
            and all(type(v) is bool for v in self.items)
        )

    def __str__(self) -> str:
        shown = "[" + ", ".join(map(repr, self.items)) + "]"
        if self.raises:
            text = f"yielded {shown} then raised" if self.lazy else "raised"
        else:
            text = f"{'yielded' if self.lazy else 'answered'} {shown}"
        return text + (" slowly" if self.slow else "")


def verdict_candidates(answer: Answer, n: int) -> tuple[tuple[bool, ...], ...]:
    """The verdict tuples a conforming worker may derive from ``answer`` for n keys.

    A proper answer gives exactly its items.  Otherwise each key gets False, or
    the bool the tier gave at its position when it gave one (lenient policy).
    """
    if answer.proper(n):
        return (tuple(bool(v) for v in answer.items),)
    options = [
        (False, True)
        if i < len(answer.items) and answer.items[i] is True
        else (False,)
        for i in range(n)
    ]
    return tuple(itertools.product(*options))


# -- observations --------------------------------------------------------------


@dataclass(frozen=True)
class LookupSeen:
    """``lookup(key, request)`` returned ``verdict`` (or raised ``error``)."""

    key: bytes
    request: str
    verdict: bool | None
    error: str | None = None


@dataclass(frozen=True)
class FlushSeen:
    """``flush()`` returned (or raised ``error``)."""

    error: str | None = None


@dataclass(frozen=True)
class CleanupSeen:
    """``cleanup(request)`` returned (or raised ``error``)."""

    request: str
    error: str | None = None


@dataclass(frozen=True)
class MarkMissSeen:
    """``mark_miss(keys)`` returned (or raised ``error``)."""

    keys: tuple[bytes, ...]
    error: str | None = None


@dataclass(frozen=True)
class MarkPresentSeen:
    """``mark_present(keys)`` returned (or raised ``error``)."""

    keys: tuple[bytes, ...]
    error: str | None = None


@dataclass(frozen=True)
class DrainSeen:
    """``drain_results()`` returned (or raised ``error``)."""

    error: str | None = None


@dataclass(frozen=True)
class ShutdownSeen:
    """``shutdown()`` returned (or raised ``error``)."""

    error: str | None = None


@dataclass(frozen=True)
class TierCallSeen:
    """The IUT's worker called the tier with ``keys`` for ``request``; it got ``answer``."""

    keys: tuple[bytes, ...]
    request: str
    answer: Answer


@dataclass(frozen=True)
class TakeBatchSeen:
    """Stepped mode: the worker step ``take_batch()`` returned ``took``."""

    took: bool
    error: str | None = None


@dataclass(frozen=True)
class ProbeGroupSeen:
    """Stepped mode: ``probe_group()`` returned ``probed`` (its tier call is a TierCallSeen)."""

    probed: bool
    error: str | None = None


@dataclass(frozen=True)
class PostSeen:
    """Stepped mode: the worker step ``post()`` returned ``posted``."""

    posted: bool
    error: str | None = None


@dataclass(frozen=True)
class Stalled:
    """Threaded mode: a tier call the spec owes did not come within the bound.

    ``waiting_for`` is always ``"tier call"``: a tier call is the one worker
    step the oracle sees happen, so waiting for one is waiting for a fact.
    """

    waiting_for: str
    worker_alive: bool


@dataclass(frozen=True)
class TierCallWaiting:
    """Threaded mode: a tier call reached the oracle's tier and waits, unanswered.

    A fact, seen when it happens: the worker holds the batch of that group, so it
    posted everything of the batch before (one worker posts before it takes the next
    batch: docs/protocol.md, ``take_batch``).  The states keep only those in which
    the worker holds that group unprobed, when some do; when none does, nothing is
    narrowed, and the call is judged when it is answered (``TierCallSeen``).
    """

    keys: tuple[bytes, ...]
    request: str


@dataclass(frozen=True)
class Overdue:
    """Threaded mode: the worker did not post what it had answered, within the bound.

    The oracle cannot see a black box's worker post.  It reports this only after
    a bounded *eventually*: every tier call the spec owed was answered, and for
    the whole wait bound re-asks (``drain_results()`` and a repeat ``lookup`` of
    ``key`` by ``request``, which the protocol makes harmless) kept showing no
    post.  From then on the states in which the worker still holds answered
    results it owes a post of, or posted them only after the last re-ask's
    drain, are excluded.  ``key``/``request``: None when the re-asks read the
    IUT's tables.
    """

    worker_alive: bool
    key: bytes | None = None
    request: str | None = None


@dataclass(frozen=True)
class Hung:
    """A call into the IUT did not return within the bound (``seconds``)."""

    call: str
    seconds: float


@dataclass(frozen=True)
class WorkerDied:
    """The IUT's worker is no longer running, before any shutdown."""

    reason: str = ""


@dataclass(frozen=True)
class Tables:
    """The IUT's keys with a probe state and its indexed requests (a trace's ``tables``)."""

    keys: frozenset[bytes]
    requests: frozenset[str]


@dataclass(frozen=True)
class Leftover:
    """The IUT's tables (an adapter's snapshot) hold entries: ``tables`` names them.

    The oracle takes a snapshot only when no possible spec state holds a probe,
    an index entry, a batch entry, a queued batch or an unapplied result.
    ``roles``: the role of each non-empty table, where the adapter knows it
    (``probes``, ``index``, ``batch``, ``results``): an ``index`` left holding a
    request breaks property 4, anything else property 5.
    """

    tables: str
    roles: frozenset[str] = frozenset()
    # keys the probe tables still hold (the oracle asks the class about one of them
    # once more, as a new request, before it calls the leftover a leak)
    held: frozenset[bytes] = frozenset()
    # request ids the probe tables still mention, every request being cleaned up
    requests: frozenset[str] = frozenset()


Observation = (
    LookupSeen | FlushSeen | CleanupSeen | MarkMissSeen | MarkPresentSeen | DrainSeen | ShutdownSeen
    | TierCallSeen | TakeBatchSeen | ProbeGroupSeen | PostSeen
    | TierCallWaiting | Stalled | Overdue | Hung | WorkerDied | Leftover
    | Tables
)
SCHEDULER_CALLS = (
    LookupSeen, FlushSeen, CleanupSeen, MarkMissSeen, MarkPresentSeen, DrainSeen, ShutdownSeen
)
WORKER_STEPS = (TakeBatchSeen, ProbeGroupSeen, PostSeen)
