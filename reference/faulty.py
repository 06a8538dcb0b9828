"""FaultyTier: wraps a tier and makes its probes misbehave, reproducibly from a seed.

Only ``batch_lookup`` misbehaves; ``store``, ``delete``, ``contains`` and
``load`` pass straight through.  Call ``i`` (counted from 0 on this wrapper) gets
a ``FaultPlan`` that is a pure function of ``(seed, i)`` (``plan_for``), so a
run's faults do not depend on timing and a failing seed replays.  A plan is one
fault kind plus a latency:

- ``none``: the inner tier's answer, unchanged;
- ``hang``: block for ``hang_seconds`` (bounded; ``release()`` cuts it short),
  then the inner answer;
- ``raise``: raise ``InjectedFault`` without asking the inner tier;
- ``short`` / ``long``: the inner answer with ``detail`` items dropped / added;
- ``non_bool``: ``detail`` items replaced by truthy or falsy non-bools;
- ``lazy_raise``: a generator that yields ``detail`` inner answers, then raises.

Each call leaves a ``CallRecord``: the keys, the plan, the inner answer and when
the inner tier was asked (``time.monotonic_ns``).  ``CallRecord.expected()`` is
the verdict list that the worker policy (docs/protocol.md, "A tier that raises or
answers short") must derive from that call, so
a checker can compare it with what the manager delivered.

Latency and hangs wait on an ``Event`` rather than sleeping, so ``release()``
ends every wait at once (tests call it before shutting a manager down).  This
module does not decide what a bad answer means: the worker does.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from asynclookup.reference.tier import RequestContext, Tier

KINDS = ("none", "hang", "raise", "short", "long", "non_bool", "lazy_raise")
_NON_BOOLS: tuple[object, ...] = (1, 0, "yes", None, 1.0, b"", [True])

Latency = float | tuple[float, float] | Callable[[random.Random], float]


class InjectedFault(RuntimeError):
    """The exception a FaultyTier raises on purpose."""


@dataclass(frozen=True)
class Faults:
    """How often each fault happens (per call; the rates are exclusive) and how slow.

    ``latency``: seconds added to every call: a number, a ``(low, high)``
    uniform range, or a function drawing from the call's ``random.Random``.
    """

    latency: Latency = 0.0
    hang_rate: float = 0.0
    hang_seconds: float = 0.05
    raise_rate: float = 0.0
    short_rate: float = 0.0
    long_rate: float = 0.0
    non_bool_rate: float = 0.0
    lazy_raise_rate: float = 0.0

    def __post_init__(self) -> None:
        rates = self.rates()
        if any(r < 0 for r in rates.values()) or sum(rates.values()) > 1.0:
            raise ValueError(f"Faults: rates must be >= 0 and sum to at most 1, got {rates}")
        if self.hang_seconds < 0:
            raise ValueError(f"Faults: hang_seconds must be >= 0, got {self.hang_seconds}")
        if isinstance(self.latency, tuple) and not 0 <= self.latency[0] <= self.latency[1]:
            raise ValueError(f"Faults: latency range must be 0 <= low <= high, got {self.latency}")
        if isinstance(self.latency, int | float) and self.latency < 0:
            raise ValueError(f"Faults: latency must be >= 0, got {self.latency}")

    def rates(self) -> dict[str, float]:
        """The rate of each fault kind other than ``none``."""
        return {
            "hang": self.hang_rate,
            "raise": self.raise_rate,
            "short": self.short_rate,
            "long": self.long_rate,
            "non_bool": self.non_bool_rate,
            "lazy_raise": self.lazy_raise_rate,
        }


@dataclass(frozen=True)
class FaultPlan:
    """What call ``index`` will do: a fault kind, its size, and a latency in seconds.

    ``detail``: items dropped (short), added (long), replaced (non_bool) or
    yielded before raising (lazy_raise), capped by the call's key count.
    """

    index: int
    kind: str
    latency: float
    detail: int


@dataclass(frozen=True)
class CallRecord:
    """One ``batch_lookup`` call as it happened."""

    plan: FaultPlan
    keys: tuple[bytes, ...]
    request: str
    inner: tuple[bool, ...] | None  # the inner tier's answer; None: not asked or it raised
    inner_error: str | None  # what the inner tier raised, if it did
    started_ns: int  # just before the inner tier was asked (or the fault raised)
    finished_ns: int  # just after it answered
    bad_positions: tuple[int, ...] = field(default=())  # non_bool: the replaced items

    def expected(self) -> tuple[bool, ...]:
        """The verdicts the protocol's worker policy derives from this call's answer."""
        n = len(self.keys)
        kind = self.plan.kind
        if self.inner is None or kind in ("raise", "short", "long", "lazy_raise"):
            return (False,) * n
        if kind == "non_bool":
            bad = set(self.bad_positions)
            return tuple(False if i in bad else v for i, v in enumerate(self.inner))
        return self.inner


class FaultyTier:
    """A tier wrapper that injects the faults of ``faults``, reproducibly from ``seed``."""

    def __init__(self, inner: Tier, faults: Faults, *, seed: int = 0) -> None:
        self.inner = inner
        self.faults = faults
        self.seed = seed
        self.name = f"faulty({inner.name})"
        self._lock = threading.Lock()
        self._next_index = 0
        self._records: list[CallRecord] = []
        self._released = threading.Event()

    def plan_for(self, index: int) -> FaultPlan:
        """The plan of call ``index``: a pure function of the seed and the index."""
        rng = random.Random(f"{self.seed}:{index}")
        roll = rng.random()
        kind = "none"
        for candidate, rate in self.faults.rates().items():
            if roll < rate:
                kind = candidate
                break
            roll -= rate
        latency = self.faults.latency
        if isinstance(latency, tuple):
            seconds = rng.uniform(*latency)
        elif callable(latency):
            seconds = max(0.0, float(latency(rng)))
        else:
            seconds = float(latency)
        return FaultPlan(index, kind, seconds, rng.randint(1, 8))

    def batch_lookup(
        self, keys: Sequence[bytes], request_context: RequestContext
    ) -> Iterable[Any]:
        """The inner tier's answer, spoiled as this call's plan says."""
        with self._lock:
            index = self._next_index
            self._next_index += 1
        plan = self.plan_for(index)
        keys = tuple(keys)
        if plan.latency > 0:
            self._released.wait(plan.latency)
        if plan.kind == "hang":
            self._released.wait(self.faults.hang_seconds)
        started = time.monotonic_ns()
        if plan.kind == "raise":
            self._record(plan, keys, request_context, None, "InjectedFault", started)
            raise InjectedFault(f"{self.name}: call {index} raises on purpose")
        try:
            inner = tuple(self.inner.batch_lookup(keys, request_context))
        except Exception as exc:
            self._record(plan, keys, request_context, None, repr(exc), started)
            raise
        return self._spoil(plan, keys, request_context, inner, started)

    def _spoil(
        self,
        plan: FaultPlan,
        keys: tuple[bytes, ...],
        context: RequestContext,
        inner: tuple[bool, ...],
        started: int,
    ) -> Iterable[Any]:
        n = len(inner)
        if plan.kind == "short" and n:
            self._record(plan, keys, context, inner, None, started)
            return list(inner[: n - min(plan.detail, n)])
        if plan.kind == "long":
            self._record(plan, keys, context, inner, None, started)
            return [*inner, *([True] * plan.detail)]
        if plan.kind == "non_bool" and n:
            rng = random.Random(f"{self.seed}:{plan.index}:positions")
            bad = tuple(sorted(rng.sample(range(n), min(plan.detail, n))))
            self._record(plan, keys, context, inner, None, started, bad)
            spoiled: list[object] = list(inner)
            for i in bad:
                spoiled[i] = _NON_BOOLS[i % len(_NON_BOOLS)]
            return spoiled
        if plan.kind == "lazy_raise":
            self._record(plan, keys, context, inner, None, started)
            return self._lazy(inner[: min(plan.detail, n)], plan.index)
        # none, hang, or a short/non_bool plan on an empty batch: nothing to spoil
        plain = plan if n or plan.kind in ("none", "hang") else FaultPlan(
            plan.index, "none", plan.latency, plan.detail
        )
        self._record(plain, keys, context, inner, None, started)
        return list(inner)

    def _lazy(self, head: tuple[bool, ...], index: int) -> Iterator[bool]:
        yield from head
        raise InjectedFault(f"{self.name}: call {index} raises part-way through its answer")

    def _record(
        self,
        plan: FaultPlan,
        keys: tuple[bytes, ...],
        context: RequestContext,
        inner: tuple[bool, ...] | None,
        error: str | None,
        started: int,
        bad: tuple[int, ...] = (),
    ) -> None:
        record = CallRecord(
            plan, keys, context.req_id, inner, error, started, time.monotonic_ns(), bad
        )
        with self._lock:
            self._records.append(record)

    @property
    def calls(self) -> list[CallRecord]:
        """Every finished call so far, in the order the calls began."""
        with self._lock:
            return sorted(self._records, key=lambda r: r.plan.index)

    def release(self) -> None:
        """End every latency and hang wait now and from now on."""
        self._released.set()

    # -- pass-through ------------------------------------------------------------

    def store(self, key: bytes, value: bytes = b"") -> None:
        self.inner.store(key, value)

    def delete(self, key: bytes) -> None:
        self.inner.delete(key)

    def contains(self, key: bytes) -> bool:
        return self.inner.contains(key)

    def __repr__(self) -> str:
        return f"FaultyTier({self.inner!r}, {self.faults!r}, seed={self.seed})"
