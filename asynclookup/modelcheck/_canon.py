"""Interned, canonical encodings of spec States for the model checker.

A state is encoded as a tuple of small ints, one per ``State`` field: the id
of that field's value in a per-field intern table (equal ids, equal values).
Whole states share their field values, so the encoding is compact, and the
checker's memo tables key on these ids (see ``asynclookup.modelcheck._memo``).

Canonical form: two states that no action, no property and no future can tell
apart get the same encoding, so the reachable space is finite.
- Generations: only equality and order matter.  The live generations (those
  of the probes) and the counter are renumbered by rank, so a new generation
  still compares greater than every live one.  With ``collapse_stale``, every
  stale generation (a batch, queue or result entry whose key's probe has
  another generation, or none) becomes ``STALE``, which equals no live one:
  it can never become live again, because generations are drawn from a
  counter that only grows.  Without it, stale generations are ranked too.
- Symmetry: keys and requests are opaque names; the encoding is the least,
  over every permutation of keys (and of requests), of the renamed state.
- Inert stale data (``inert_stale``, with ``collapse_stale``): the spec's
  flush drops a stale batch entry whatever its key, request or place, and its
  drain ignores a stale result whatever its verdict.  So every stale batch
  entry becomes one placeholder, ``INERT_ENTRY``, kept after the live entries
  (the batch bound still counts it), and every stale result's verdict becomes
  False.  This is sound for a table that drops and ignores stale data as the
  spec does; a table that does not is exactly what properties 1 and 2 catch,
  and a broken apply would be hidden behind the placeholder, so the checker
  leaves this reduction off for every table but the spec's own.
- Results of different keys commute: applying one touches only its own key's
  probe, and ``post`` appends all answered results at once.  So with
  ``results_by_key`` the answered and the posted results are each sorted by
  key, keeping the order among one key's results.

What it does not do: decide anything about the protocol.  The soundness of
each reduction rests on the assumptions above, which the spec and every
variant in ``asynclookup.spec.variants`` keep; the tests check that the reduced and the
unreduced searches agree.
"""

from __future__ import annotations

import functools
import itertools
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from asynclookup.modelcheck._visited import kernel
from asynclookup.spec.core import Entry, Probe, Result, State

STALE = -1
INERT_ENTRY = Entry(b"", "", STALE)  # every stale batch entry, under ``inert_stale``
P_PROBES, P_INDEX, P_NEXT, P_BATCH, P_QUEUE, P_HELD, P_ANSWERED, P_POSTED = range(8)
N_FIELDS = len(State._fields)
GEN_FIELDS = frozenset((P_PROBES, P_NEXT, P_BATCH, P_QUEUE, P_HELD, P_ANSWERED, P_POSTED))
_ENTRY_FIELDS = (P_BATCH, P_QUEUE, P_HELD, P_ANSWERED, P_POSTED)

Ids = tuple[int, ...]
# One packed key per visited state, little-endian: 2 bytes per field id and 1
# for each flag (18 bytes), or, once an id has outgrown that (``wide``), 4 bytes
# per field id, 2 for the counter's (at most one live generation per key, plus
# the counter) and 1 for each flag (32 bytes).
NARROW = bytes((2, 2, 2, 2, 2, 2, 2, 2, 1, 1))
WIDE = bytes((4, 4, 2, 4, 4, 4, 4, 4, 1, 1))
_CODES = {1: "B", 2: "H", 4: "I"}


@functools.cache
def picks_of(fields: tuple[int, ...]) -> tuple[int, ...]:
    """Where each field of a step's target comes from in ``ids + new``, for a step
    that set ``fields`` to the ids in ``new``: ``f`` unchanged, else ``N_FIELDS + k``."""
    picks = list(range(N_FIELDS))
    for k, f in enumerate(fields):
        picks[f] = N_FIELDS + k
    return tuple(picks)


@functools.cache
def _getter(picks: tuple[int, ...]) -> Callable[[Ids], Ids]:
    return itemgetter(*picks)


def apply_picks(ids: Ids, new: Ids, picks: tuple[int, ...]) -> Ids:
    """The target of a step from ``ids`` (see ``picks_of``): one C call for the fields."""
    return _getter(picks)(ids + new)


def packer_of(layout: bytes) -> struct.Struct:
    """The struct that packs field ids by ``layout`` (bytes per field)."""
    return struct.Struct("<" + "".join(_CODES[n] for n in layout))


@dataclass(frozen=True)
class Reductions:
    """Which sound reductions the search applies (all on by default)."""

    collapse_stale: bool = True
    inert_stale: bool = True
    key_symmetry: bool = True
    request_symmetry: bool = True
    results_by_key: bool = True
    persistent: bool = True  # partial-order reduction: asynclookup.modelcheck._persistent

    @classmethod
    def none(cls) -> Reductions:
        """Generations renumbered by rank only: the unreduced search."""
        return cls(False, False, False, False, False, False)

    def names(self) -> list[str]:
        """The names of the reductions that are on, for reports."""
        flags = (
            ("stale-collapse", self.collapse_stale),
            ("inert-stale", self.inert_stale and self.collapse_stale),
            ("key-symmetry", self.key_symmetry),
            ("request-symmetry", self.request_symmetry),
            ("results-by-key", self.results_by_key),
            ("persistent-sets", self.persistent),
        )
        return [name for name, on in flags if on]


class Space:
    """Intern tables and the canonicaliser for one universe of keys and requests."""

    def __init__(
        self,
        keys: Sequence[bytes],
        requests: Sequence[str],
        reductions: Reductions,
        wide: bool = False,
    ) -> None:
        self.reductions = reductions
        self.layout = WIDE if wide else NARROW
        self.packer = packer_of(self.layout)  # the search calls its pack and unpack directly
        self._collapse = reductions.collapse_stale
        self._inert = reductions.collapse_stale and reductions.inert_stale
        key_perms = list(itertools.permutations(keys)) if reductions.key_symmetry else [keys]
        request_perms = (
            list(itertools.permutations(requests)) if reductions.request_symmetry else [requests]
        )
        self._perms = [
            (dict(zip(keys, kp, strict=True)), dict(zip(requests, rp, strict=True)))
            for kp in key_perms
            for rp in request_perms
        ]
        self.values: list[list[Any]] = [[] for _ in range(N_FIELDS)]
        self._ids: list[dict[Any, int]] = [{} for _ in range(N_FIELDS)]
        # field ids -> signature: what renaming generations depends on
        self._sig: dict[tuple[int, ...], int] = {}
        self._sig_of_content: dict[Any, int] = {}
        self._sig_ranks: list[tuple[dict[bytes, int], dict[int, int]]] = []
        # per signature, per field: value id -> ids of its renamed value's images
        # under every permutation (fields without generations share one table)
        self._plain: list[dict[int, tuple[int, ...]] | None] = [
            {} if f not in GEN_FIELDS else None for f in range(N_FIELDS)
        ]
        self._orbits: list[list[dict[int, tuple[int, ...]]]] = []
        # The compiled canonical(ids): min(zip(*orbits)) when every orbit table it
        # needs is filled (else None), for the stale-collapsed signatures it knows.
        self.quick: Callable[[Ids], Ids | None] | None = None
        if kernel is not None and self._collapse:
            self.quick = functools.partial(kernel.canonical, self._sig, self._orbits)
        self._permuters: list[Callable[[Any, dict[bytes, bytes], dict[str, str]], Any]] = [
            _perm_probes, _perm_index, _same, _perm_entries, _perm_queue,
            _perm_entries, self._perm_results, self._perm_results, _same, _same,
        ]

    # -- interning -------------------------------------------------------------

    def intern(self, field: int, value: Any) -> int:
        """The id of ``value`` in ``field``'s table (added if new)."""
        table = self._ids[field]
        vid = table.get(value)
        if vid is None:
            vid = table[value] = len(self.values[field])
            self.values[field].append(value)
        return vid

    def ids_of(self, state: State) -> Ids:
        """The (raw, not canonical) ids of ``state``'s fields."""
        return tuple(self.intern(f, v) for f, v in enumerate(tuple.__iter__(state)))

    def state_of(self, ids: Ids) -> State:
        """The State whose field ids are ``ids``."""
        return tuple.__new__(State, map(list.__getitem__, self.values, ids))

    @property
    def interned(self) -> int:
        """How many distinct field values are interned, over every field."""
        return sum(len(v) for v in self.values)

    # -- packed keys ---------------------------------------------------------------

    def pack(self, ids: Ids) -> bytes:
        """``ids`` as one key of ``layout`` (what the visited set stores); an id
        too big for it raises ``struct.error`` (the search then starts again wide)."""
        return self.packer.pack(*ids)

    def unpack(self, key: bytes) -> Ids:
        """The ids that ``pack`` made ``key`` of."""
        return self.packer.unpack(key)

    # -- canonical form ----------------------------------------------------------

    def tables(self) -> tuple[dict[tuple[int, ...], int], list[list[dict[int, tuple[int, ...]]]]]:
        """The signature and orbit tables that the compiled canonical form reads (they
        fill in place as the Python one meets new values); valid with stale collapse."""
        return self._sig, self._orbits

    def canonical(self, ids: Ids) -> Ids:
        """The canonical ids of the state with raw field ids ``ids``."""
        if self.quick is not None:
            found = self.quick(ids)
            if found is not None:
                return found
        return min(zip(*self.orbits(ids), strict=True))

    def canonical_of(self, state: State) -> Ids:
        """The canonical ids of ``state``."""
        return self.canonical(self.ids_of(state))

    def orbits(self, ids: Ids) -> list[tuple[int, ...]]:
        """Per field, the ids of its renamed value under every permutation."""
        sig = self._sig.get(ids[:3]) if self._collapse else None
        if sig is None:
            sig = self._signature(ids)
        tables = self._orbits[sig]
        orbits: list[tuple[int, ...] | None] = list(map(dict.get, tables, ids))
        if None in orbits:  # a value not seen under this signature yet
            orbits = [o or self._new_orbit(f, ids[f], sig) for f, o in enumerate(orbits)]
        return orbits  # type: ignore[return-value]

    def _new_orbit(self, f: int, vid: int, sig: int) -> tuple[int, ...]:
        value = self.values[f][vid]
        if f in GEN_FIELDS:
            value = self._rename(f, value, sig)
        permute = self._permuters[f]
        orbit = tuple(self.intern(f, permute(value, kp, rp)) for kp, rp in self._perms)
        self._orbits[sig][f][vid] = orbit
        return orbit

    # -- renaming generations ------------------------------------------------------

    def _signature(self, ids: Ids) -> int:
        """Number what renaming the generations of ``ids`` depends on: the live
        generation of each key and the counter (and, without stale collapse,
        every generation present).  States whose probes differ only in phase,
        verdict or requesters share a signature."""
        if self._collapse:
            key: tuple[int, ...] = ids[:3]  # probes, index (unused), counter
        else:
            key = (*ids[:3], *(ids[f] for f in _ENTRY_FIELDS))
        sig = self._sig.get(key)
        if sig is None:
            probes = self.values[P_PROBES][ids[P_PROBES]]
            counter = self.values[P_NEXT][ids[P_NEXT]]
            live = tuple((k, p.generation) for k, p in probes)
            present = frozenset(
                () if self.reductions.collapse_stale
                else (g for f in _ENTRY_FIELDS for g in _generations(f, self.values[f][ids[f]]))
            )
            content = (live, counter, present)
            sig = self._sig_of_content.get(content)
            if sig is None:
                gens = {*present, *(g for _, g in live), counter}
                rank = {g: i for i, g in enumerate(sorted(gens))}
                sig = self._sig_of_content[content] = len(self._sig_ranks)
                self._sig_ranks.append((dict(live), rank))
                self._orbits.append([{} if plain is None else plain for plain in self._plain])
            self._sig[key] = sig
        return sig

    def _rename(self, field: int, value: Any, sig: int) -> Any:
        live, rank = self._sig_ranks[sig]
        collapse = self.reductions.collapse_stale

        def gen(key: bytes, g: int) -> int:
            return rank[g] if not collapse or live.get(key) == g else STALE

        def entries(es: Iterable[Entry]) -> tuple[Entry, ...]:
            return tuple(Entry(e.key, e.request, gen(e.key, e.generation)) for e in es)

        def results(rs: Iterable[Result]) -> tuple[Result, ...]:
            return tuple(Result(r.key, gen(r.key, r.generation), r.verdict) for r in rs)

        if field == P_PROBES:
            return tuple((k, p._replace(generation=rank[p.generation])) for k, p in value)
        if field == P_NEXT:
            return rank[value]
        if field == P_QUEUE:
            return tuple(entries(b) for b in value)
        if field == P_BATCH and self._inert:
            live_entries = tuple(e for e in entries(value) if e.generation != STALE)
            return live_entries + (INERT_ENTRY,) * (len(value) - len(live_entries))
        if field in (P_BATCH, P_HELD):
            return entries(value)
        if self._inert:
            return tuple(
                r if r.generation != STALE else r._replace(verdict=False) for r in results(value)
            )
        return results(value)

    def _perm_results(self, value: Any, kp: dict[bytes, bytes], rp: dict[str, str]) -> Any:
        results = _rename_keys(value, kp)
        if self.reductions.results_by_key:
            return tuple(sorted(results, key=_result_key))
        return results


def _generations(field: int, value: Any) -> Iterable[int]:
    """The generations that a batch, queue, held, answered or posted value carries."""
    if field == P_QUEUE:
        return (e.generation for batch in value for e in batch)
    return (e.generation for e in value)


def _result_key(result: Result) -> bytes:
    return result.key


def _same(value: Any, kp: dict[bytes, bytes], rp: dict[str, str]) -> Any:
    return value


def _perm_probes(value: Any, kp: dict[bytes, bytes], rp: dict[str, str]) -> Any:
    probes: list[tuple[bytes, Probe]] = [
        (kp[k], p._replace(requesters=frozenset(rp[r] for r in p.requesters))) for k, p in value
    ]
    return tuple(sorted(probes, key=lambda kp_: kp_[0]))


def _perm_index(value: Any, kp: dict[bytes, bytes], rp: dict[str, str]) -> Any:
    index = [(rp[r], frozenset(kp[k] for k in ks)) for r, ks in value]
    return tuple(sorted(index, key=lambda rk: rk[0]))


def _perm_entries(value: Any, kp: dict[bytes, bytes], rp: dict[str, str]) -> Any:
    return tuple(
        Entry(kp[e.key], rp[e.request], e.generation) if e.key else INERT_ENTRY for e in value
    )


def _perm_queue(value: Any, kp: dict[bytes, bytes], rp: dict[str, str]) -> Any:
    return tuple(_perm_entries(b, kp, rp) for b in value)


def _rename_keys(value: Any, kp: dict[bytes, bytes]) -> tuple[Result, ...]:
    return tuple(Result(kp[r.key], r.generation, r.verdict) for r in value)
