"""The model checker's visited set: packed state keys numbered in the order they were added.

``Table(width, layout=sizes)`` holds keys of exactly ``width`` bytes (a state's packed
canonical encoding, ``asynclookup.modelcheck._canon``: ``sizes`` are the bytes
of each field id, little-endian):

- ``add(key)`` returns the key's index if it is there already, else adds it
  and returns ``-1 - index`` (so one call both looks up and inserts);
- ``find(key)`` returns its index or -1;
- ``find_ids(ids)`` and ``add_ids(ids)`` do the same for a tuple of field ids,
  packed by the layout (``add_ids`` returns the packed key too);
- ``key(i)`` returns the stored bytes of index ``i``; ``len(table)`` counts them;
- ``nbytes`` is what the table allocated (for the bytes-per-state figure).

``Table(width, compact=True)`` is hash compaction: it stores each key's
64-bit ``fingerprint`` instead of the key (``key(i)`` returns the 8-byte
fingerprint), so two states with the same fingerprint count as one and the
second is never explored.  For n states the probability that any state is
missed that way is at most n²/2⁶⁵ (``missed_state_bound``); the search offers
it only as an opt-in.

Two implementations give the same indices for the same calls: the compiled
``asynclookup.modelcheck._cvisited`` (about width + 6 bytes a state: keys back to
back in one buffer, an open-addressing array of uint32 slots), built by
``pip install`` when a C compiler is there, and ``PyTable`` here (a dict and a
list: about 140 bytes a state), used when the extension is not built or
``ASYNCLOOKUP_PURE_PYTHON=1`` is set.  ``IMPLEMENTATION`` says which one
``Table`` is.

What it does not do: know what a key means.
"""

from __future__ import annotations

import importlib
import os
import struct
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Protocol

__all__ = ["IMPLEMENTATION", "PyTable", "Table", "fingerprint", "missed_state_bound"]

FINGERPRINT_BITS = 64
_MASK = (1 << 64) - 1
_MIX1, _MIX2, _MIX3 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def _mix64(h: int) -> int:
    h ^= h >> 30
    h = (h * _MIX2) & _MASK
    h ^= h >> 27
    h = (h * _MIX3) & _MASK
    return h ^ (h >> 31)


def fingerprint(key: bytes) -> int:
    """The 64-bit fingerprint of ``key``: its 8-byte little-endian words (the
    last zero-padded) folded as ``h = mix64(h ^ word) * MIX1`` from
    ``h = len(key)``, then mixed once more (the compiled table computes the same)."""
    h = len(key)
    padded = key + b"\0" * (-len(key) % 8)
    for (word,) in struct.iter_unpack("<Q", padded):
        h = (_mix64(h ^ word) * _MIX1) & _MASK
    return _mix64(h)


def missed_state_bound(states: int, bits: int = FINGERPRINT_BITS) -> float:
    """An upper bound on the probability that hash compaction missed a state:
    the probability that any two of ``states`` uniformly random ``bits``-bit
    fingerprints collide, at most n(n-1)/2 / 2^bits < n²/2^(bits+1)."""
    return min(1.0, states * states / 2.0 ** (bits + 1))


class TableLike(Protocol):
    """What the search needs of a visited set (both implementations have it)."""

    def add(self, key: bytes, /) -> int: ...
    def find(self, key: bytes, /) -> int: ...
    def add_ids(self, ids: tuple[int, ...], /) -> tuple[int, bytes]: ...
    def find_ids(self, ids: tuple[int, ...], /) -> int: ...
    def key(self, index: int, /) -> bytes: ...
    def __len__(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def compact(self) -> bool: ...


_CODES = {1: "B", 2: "H", 4: "I", 8: "Q"}


class PyTable:
    """The pure-Python visited set: a dict from stored key to index, and a list of keys."""

    __slots__ = ("_compact", "_index", "_keys", "_packer", "_width")

    def __init__(self, width: int, compact: bool = False, layout: bytes = b"") -> None:
        if width < 1:
            raise ValueError("width must be at least 1")
        if layout and sum(layout) != width:
            raise ValueError("the layout's sizes do not add up to width")
        self._width, self._compact = width, compact
        self._packer = struct.Struct("<" + "".join(_CODES[n] for n in layout))
        self._index: dict[bytes, int] = {}
        self._keys: list[bytes] = []

    def find_ids(self, ids: tuple[int, ...]) -> int:
        """``find`` of ``ids`` packed by the layout."""
        return self.find(self._packer.pack(*ids))

    def add_ids(self, ids: tuple[int, ...]) -> tuple[int, bytes]:
        """``add`` of ``ids`` packed by the layout: its result and the packed key."""
        key = self._packer.pack(*ids)
        return self.add(key), key

    def _stored(self, key: bytes) -> bytes:
        if len(key) != self._width:
            raise ValueError(f"key of {len(key)} bytes, want {self._width}")
        return fingerprint(key).to_bytes(8, "little") if self._compact else key

    def add(self, key: bytes) -> int:
        stored = self._stored(key)
        index = self._index.get(stored)
        if index is not None:
            return index
        index = self._index[stored] = len(self._keys)
        self._keys.append(stored)
        return -1 - index

    def find(self, key: bytes) -> int:
        return self._index.get(self._stored(key), -1)

    def key(self, index: int) -> bytes:
        if not 0 <= index < len(self._keys):
            raise IndexError("no state of that index")
        return self._keys[index]

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def nbytes(self) -> int:
        """The dict, the list and the key objects (not the small ints shared by CPython)."""
        keys = sum(map(sys.getsizeof, self._keys))
        indices = sum(sys.getsizeof(i) for i in range(257, len(self._keys)))
        return sys.getsizeof(self._index) + sys.getsizeof(self._keys) + keys + indices

    @property
    def compact(self) -> bool:
        return self._compact


def _compiled() -> ModuleType | None:
    if os.environ.get("ASYNCLOOKUP_PURE_PYTHON"):
        return None
    try:
        return importlib.import_module("asynclookup.modelcheck._cvisited")
    except ImportError:
        return None


# The compiled kernel (Table, canonical, memo_find, fingerprint), or None.
kernel = _compiled()
Table: Callable[[int, bool, bytes], TableLike] = kernel.Table if kernel is not None else PyTable
IMPLEMENTATION = "compiled" if kernel is not None else "pure-python"
