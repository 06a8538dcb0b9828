"""The model checker's visited set: packed state keys numbered in the order they were added.

``Table(width, layout=sizes)`` holds keys of exactly ``width`` bytes (a state's packed
canonical encoding, ``asynclookup.modelcheck._canon``: ``sizes`` are the bytes
of each field id, little-endian):

- ``add(key)`` returns the key's index if it is there already, else adds it
  and returns ``-1 - index`` (so one call both looks up and inserts);
- ``find(key)`` returns its index or -1;
- ``find_ids(ids)`` and ``add_ids(ids)`` do the same for a tuple of field ids,
  packed by the layout (``add_ids`` returns the packed key too);
- ``key(i)`` returns the key of index ``i`` (packed by the layout, or as
  stored), ``ids(i)`` its field ids; ``len(table)`` counts them;
- ``nbytes`` is what the table allocated (for the bytes-per-state figure),
  ``stored_bytes`` what it stores per key now.

``Table(width, compact=True)`` is hash compaction: it stores each key's
64-bit ``fingerprint`` instead of the key (``key(i)`` returns the 8-byte
fingerprint, ``ids`` is refused), so two states with the same fingerprint
count as one and the second is never explored.  For n states the probability
that any state is missed that way is at most n²/2⁶⁵ (``missed_state_bound``);
the search offers it only as an opt-in.

The search graph (``WalkLike``): the breadth-first search expands state ``i``
by walking the outcomes of its enabled actions (``expand(i, ids, families)``:
the outcomes of the action families whose bits are set, each a tuple of
``(action number, new field ids, picks, broken step properties)``, see
``asynclookup.modelcheck._bfs``).  The walk adds each
target that is not visited, by its canonical ids, and returns at each new
state (its index: the search checks it, then calls ``resume()``), at a step
that breaks a step property (``BAD``; ``outcome()`` is that step) and at the
end (``DONE``).  It keeps, per state, the action that first reached it, how
many states were first reached from it (``path(j)`` finds parents by
counting: state 0's children come first, then state 1's...), and one
successor for the progress check: the least one if it is below the state,
else the greatest.  ``settle(good)`` follows those successors from every
state and marks the states whose chain reaches a quiescent one; the search
decides the few others from their full ``successors(...)``.  That is 8 bytes
a state instead of the successor lists (about 24 at 2x2).  The families'
outcomes come from ``outcomes(family, ids)``: the compiled table memoises
them itself (computing a missing one by the search's ``compute``), ``PyWalk``
asks the search's Python memos (``lists``); the compiled table can also admit
a new state itself (``set_admission``: its invariants and quiescence from
Python's memos and predicates), coming back to the search only for what it
cannot settle.

Two implementations give the same indices, transitions, paths and marks for
the same calls: the compiled ``asynclookup.modelcheck._cvisited.Table`` (a
table and a walk in one: keys bit-packed, each field as wide as its largest id,
back to back in one buffer; an open-addressing array of uint32 slots; about 24
bytes a state at 2x3), built by ``pip install`` when a C compiler is there,
and ``PyTable`` with ``PyWalk`` here (a dict and a list: about 150 bytes a
state), used when the extension is not built or ``ASYNCLOOKUP_PURE_PYTHON=1``
is set; the search also walks a compiled table with ``PyWalk`` for what the
compiled walk does not do (a kept graph, hash compaction, functions called
directly).  ``IMPLEMENTATION`` says which ``Table`` is.

What it does not do: know what a key or an action means.
"""

from __future__ import annotations

import bisect
import functools
import importlib
import itertools
import os
import struct
import sys
from array import array
from collections.abc import Callable, Generator, Iterable, Sequence
from operator import itemgetter
from types import ModuleType
from typing import Any, Protocol

__all__ = [
    "BAD", "DONE", "IMPLEMENTATION", "PyTable", "PyWalk", "Table", "fingerprint",
    "missed_state_bound",
]

FINGERPRINT_BITS = 64
_MASK = (1 << 64) - 1
_MIX1, _MIX2, _MIX3 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
DONE, BAD = -1, -2  # what expand() and resume() return besides a new state's index

Ids = tuple[int, ...]
Outcome = tuple[int, Ids, "tuple[int, ...] | None", tuple[str, ...]]


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
    def add_ids(self, ids: Ids, /) -> tuple[int, bytes]: ...
    def find_ids(self, ids: Ids, /) -> int: ...
    def key(self, index: int, /) -> bytes: ...
    def ids(self, index: int, /) -> Ids: ...
    def __len__(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def stored_bytes(self) -> int: ...
    @property
    def compact(self) -> bool: ...


class WalkLike(Protocol):
    """What the search needs of a search graph (``PyWalk``, or the compiled Table)."""

    def outcomes(self, family: int, ids: Ids, /) -> Any: ...
    def outcomes_key(self, family: int, ids: Ids, /) -> int | None: ...
    def expand(self, index: int, ids: Ids, families: int, /) -> int: ...
    def resume(self) -> int: ...
    def outcome(self) -> Any: ...
    def last_ids(self) -> Ids: ...
    def successors(self, index: int, ids: Ids, families: int, /) -> list[int]: ...
    def path(self, index: int, /) -> list[tuple[int, int]]: ...
    def settle(self, good: bytearray, /) -> list[int]: ...
    @property
    def transitions(self) -> int: ...
    @property
    def graph_nbytes(self) -> int: ...


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

    def find_ids(self, ids: Ids) -> int:
        """``find`` of ``ids`` packed by the layout."""
        return self.find(self._packer.pack(*ids))

    def add_ids(self, ids: Ids) -> tuple[int, bytes]:
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

    def ids(self, index: int) -> Ids:
        """The field ids of the key of ``index`` (a table with a layout, no fingerprints)."""
        if self._compact or not self._packer.size:
            raise TypeError("only a table with a layout and no fingerprints gives ids back")
        ids: Ids = self._packer.unpack(self.key(index))
        return ids

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def nbytes(self) -> int:
        """The dict, the list and the key objects (not the small ints shared by CPython)."""
        keys = sum(map(sys.getsizeof, self._keys))
        indices = sum(sys.getsizeof(i) for i in range(257, len(self._keys)))
        return sys.getsizeof(self._index) + sys.getsizeof(self._keys) + keys + indices

    @property
    def stored_bytes(self) -> int:
        return 8 if self._compact else self._width

    @property
    def compact(self) -> bool:
        return self._compact


@functools.cache
def _getter(picks: tuple[int, ...]) -> Callable[[Ids], Ids]:
    return itemgetter(*picks)


class PyWalk:
    """The search graph over any table, in Python: what the compiled Table does in
    ``outcomes``, ``expand``, ``resume``, ``successors``, ``path`` and ``settle`` (see
    the module's docstring), with the families' outcomes from ``lists(ids, families)``
    (the search's Python memos: a list of tuples of outcomes, one per family whose bit
    is set, in family order).  It also hands each step to ``on_edge(i, action number,
    j)`` if given (the search keeps a drawing's graph, or with fingerprints the
    successor lists)."""

    def __init__(
        self,
        table: TableLike,
        canonical: Callable[[Ids], Ids],
        no_edge: bytes,
        lists: Callable[[Ids, int], list[Any]],
        on_edge: Callable[[int, int, int], None] | None = None,
    ) -> None:
        self._table, self._canonical, self._no_edge = table, canonical, no_edge
        self._lists, self._on_edge = lists, on_edge
        self.via, self.children, self.next = array("H"), array("H"), array("i")
        self.transitions = 0
        self._walk: Generator[int, None, None] | None = None
        self._outcome: Outcome | None = None
        self._last: Ids | None = None

    def _cover(self, count: int) -> None:
        """Per-state entries up to ``count`` states (the table may have grown without us)."""
        more = count - len(self.via)
        if more > 0:
            self.via.extend(itertools.repeat(0, more))
            self.children.extend(itertools.repeat(0, more))
            self.next.extend(itertools.repeat(-1, more))

    def _edge(self, number: int) -> bool:
        return number >= len(self._no_edge) or not self._no_edge[number]

    def outcomes(self, family: int, ids: Ids) -> Any:
        return self._lists(ids, 1 << family)[0]

    def outcomes_key(self, family: int, ids: Ids) -> int | None:
        """None: Python's memos do not number their results."""
        return None

    def expand(self, index: int, ids: Ids, families: int) -> int:
        if not 0 <= index < len(self._table):
            raise IndexError("no state of that index")
        self._cover(len(self._table))
        self._walk = self._walking(index, ids, self._lists(ids, families))
        return next(self._walk)

    def resume(self) -> int:
        if self._walk is None:
            raise RuntimeError("no expansion in progress")
        return next(self._walk)

    def _walking(self, i: int, ids: Ids, lists: Iterable[Sequence[Outcome]]
                 ) -> Generator[int, None, None]:
        table, canonical, on_edge = self._table, self._canonical, self._on_edge
        low, high = sys.maxsize, -1
        for outcomes in lists:
            for outcome in outcomes:
                number, new, picks, bad = outcome
                self.transitions += 1
                if bad:
                    self._outcome = outcome
                    while True:  # resume() gives it again
                        yield BAD
                added = False
                if picks is None:
                    j = i
                else:
                    target = _getter(picks)(ids + new)
                    j = table.find_ids(target)
                    if j < 0:  # a visited key is canonical already
                        canon = canonical(target)
                        j = table.add_ids(canon)[0]
                        if j < 0:
                            j, added = -1 - j, True
                            self._cover(j + 1)
                            self._last = canon
                            self.via[j] = number
                            self.children[i] += 1
                if j != i and self._edge(number):
                    low, high = min(low, j), max(high, j)
                if on_edge is not None:
                    on_edge(i, number, j)
                if added:
                    yield j
        self.next[i] = low if low < i else high
        self._walk = None
        yield DONE

    def outcome(self) -> Outcome:
        if self._walk is None or self._outcome is None:
            raise RuntimeError("no outcome at the cursor")
        return self._outcome

    def last_ids(self) -> Ids:
        if self._last is None:
            raise LookupError("expand() has added no state yet")
        return self._last

    def successors(self, index: int, ids: Ids, families: int) -> list[int]:
        found: list[int] = []
        for outcomes in self._lists(ids, families):
            for number, new, picks, bad in outcomes:
                if bad or picks is None or not self._edge(number):
                    continue
                target = _getter(picks)(ids + new)
                j = self._table.find_ids(target)
                if j < 0:
                    j = self._table.find_ids(self._canonical(target))
                    if j < 0:
                        raise RuntimeError("a successor of a visited state is not visited")
                if j != index and j not in found:
                    found.append(j)
        return found

    def path(self, index: int) -> list[tuple[int, int]]:
        if not 0 <= index < len(self._table):
            raise IndexError("no state of that index")
        self._cover(len(self._table))
        first = list(itertools.accumulate(self.children, initial=1))  # each one's first child
        path = []
        while index > 0:
            parent = bisect.bisect_right(first, index) - 1
            if parent >= index:
                raise RuntimeError("no parent recorded for that state")
            path.append((index, self.via[index]))
            index = parent
        return path[::-1]

    def settle(self, good: bytearray) -> list[int]:
        if len(good) != len(self._table) or any(b > 1 for b in good):
            raise ValueError("settle(good): 0 or 1 per state")
        self._cover(len(self._table))
        on_chain, bad, nxt = 2, 3, self.next
        for s in range(len(good)):
            j = s
            while j >= 0 and not good[j]:
                good[j] = on_chain
                j = nxt[j]
            end = 1 if j >= 0 and good[j] == 1 else bad
            j = s
            while j >= 0 and good[j] == on_chain:
                good[j] = end
                j = nxt[j]
        others = [s for s, mark in enumerate(good) if mark != 1]
        for s in others:
            good[s] = 0
        return others

    @property
    def graph_nbytes(self) -> int:
        return sum(a.buffer_info()[1] * a.itemsize for a in (self.via, self.children, self.next))


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
