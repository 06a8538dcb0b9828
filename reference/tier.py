"""The tier boundary: what the worker calls, and the in-memory tier.

A tier answers ``batch_lookup(keys, request_context)`` on the worker thread with
one bool per key.  The manager does not trust the answer: ``asynclookup.reference.worker``
turns every misbehaviour (an exception, a wrong length, a non-bool, a lazy
iterable that raises) into misses.  ``store``, ``delete`` and ``contains`` are
what a real tier needs to be set up and tested; the manager never calls them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class RequestContext:
    """What the tier learns about the request a key is probed for."""

    req_id: str


@runtime_checkable
class Tier(Protocol):
    """A secondary storage tier, probed off the scheduler thread."""

    name: str

    def batch_lookup(
        self, keys: Sequence[bytes], request_context: RequestContext
    ) -> Iterable[bool]:
        """One existence verdict per key, in order.  Called on the worker thread."""
        ...

    def store(self, key: bytes, value: bytes = b"") -> None:
        """Make ``key`` present, atomically."""
        ...

    def delete(self, key: bytes) -> None:
        """Make ``key`` absent; deleting an absent key is not an error."""
        ...

    def contains(self, key: bytes) -> bool:
        """Whether ``key`` is present now."""
        ...


class InMemoryTier:
    """A dict behind a lock: the default tier of tests, fuzzing and benchmarks."""

    name = "memory"

    def __init__(self) -> None:
        self._blocks: dict[bytes, bytes] = {}
        self._lock = threading.Lock()

    def batch_lookup(
        self, keys: Sequence[bytes], request_context: RequestContext
    ) -> list[bool]:
        with self._lock:
            return [key in self._blocks for key in keys]

    def store(self, key: bytes, value: bytes = b"") -> None:
        with self._lock:
            self._blocks[key] = value

    def delete(self, key: bytes) -> None:
        with self._lock:
            self._blocks.pop(key, None)

    def contains(self, key: bytes) -> bool:
        with self._lock:
            return key in self._blocks

    def __repr__(self) -> str:
        return f"InMemoryTier({len(self._blocks)} blocks)"
