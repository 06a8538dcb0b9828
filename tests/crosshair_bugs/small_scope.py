"""Small-scope symbolic States for CrossHair: two keys, two requests, shaped like the spec's.

CrossHair left to itself builds a ``State`` from arbitrary symbolic tuples of
bytes, strings and frozensets; almost none of them satisfy ``well_formed``, so
its search dies in failed preconditions before it reaches an action's body.
``register()`` tells CrossHair to build States (and the actions that name keys
or requests) from a few symbolic choices instead: which of the keys ``b"a"``
and ``b"b"`` have a probe, each probe's phase, generation and requesters, which
request each entry was batched with, where each IN_FLIGHT entry sits in the
worker pipeline, and optional extra batch entries and results that may be
stale.  The index is derived from the requesters.  Generations and the counter
stay symbolic; the contracts' ``pre: well_formed(state)`` still filters.

This is a bound, not a proof: states with three keys, two entries of one key in
one place, or batches in other orders are not built.  Used only through
``plugin.py`` (``crosshair check --extra_plugin tests/crosshair_bugs/plugin.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from crosshair import SymbolicFactory, register_type

from spec.core import (
    Cleanup,
    Entry,
    Key,
    Lookup,
    MarkMiss,
    MarkPresent,
    Phase,
    Probe,
    RequestId,
    Result,
    State,
)

KEYS: tuple[Key, ...] = (b"a", b"b")
REQUESTS: tuple[RequestId, ...] = ("r", "s")
# Each key's probe draws from its own generations, so they differ by construction;
# extra entries and results draw from all of them, so they may or may not be stale.
GENERATIONS: dict[Key, tuple[int, ...]] = {b"a": (0, 2), b"b": (1, 3)}
NEXT_GENERATION = 4
ALL_GENERATIONS = tuple(range(NEXT_GENERATION))
SUBSETS: tuple[frozenset[RequestId], ...] = (
    frozenset(), frozenset({"r"}), frozenset({"s"}), frozenset(REQUESTS)
)
# Where an IN_FLIGHT entry can sit: queued, held by the worker, answered, posted.
PLACES = ("queue", "held", "answered", "posted")

_T = TypeVar("_T")


def choose(p: SymbolicFactory, options: Sequence[_T], name: str) -> _T:
    """One of ``options``, picked by a chain of symbolic booleans."""
    for option in options[:-1]:
        if p(bool, f"_{name}_is_{option!r}"):
            return option
    return options[-1]


def some_keys(p: SymbolicFactory, name: str) -> tuple[Key, ...]:
    """A sub-sequence of KEYS, for mark_miss and mark_present."""
    return tuple(k for k in KEYS if p(bool, f"_{name}_{k.decode()}"))


def state(p: SymbolicFactory) -> State:
    """A State over KEYS and REQUESTS whose phases agree with the pipeline by construction."""
    probes: list[tuple[Key, Probe]] = []
    batch: list[Entry] = []
    places: dict[str, list[Entry]] = {place: [] for place in PLACES}
    for key in KEYS:
        k = key.decode()
        if not p(bool, f"_has_{k}"):
            continue
        generation = choose(p, GENERATIONS[key], f"generation_{k}")
        phase = choose(p, tuple(Phase), f"phase_{k}")
        # Only an IN_FLIGHT probe may be orphaned (no_orphaned_probes_inv).
        requesters = choose(p, SUBSETS if phase is Phase.IN_FLIGHT else SUBSETS[1:], f"asked_{k}")
        verdict = p(bool, f"_verdict_{k}") if phase is Phase.RESOLVED else None
        entry = Entry(key, choose(p, REQUESTS, f"batched_with_{k}"), generation)
        if phase is Phase.PENDING:
            batch.append(entry)
        elif phase is Phase.IN_FLIGHT:
            places[choose(p, PLACES, f"place_{k}")].append(entry)
        probes.append((key, Probe(generation, phase, verdict, requesters)))
    if p(bool, "_extra_entry"):  # perhaps stale: cleaned up or superseded since batched
        batch.append(Entry(choose(p, KEYS, "extra_key"), choose(p, REQUESTS, "extra_request"),
                           choose(p, ALL_GENERATIONS, "extra_generation")))
    for place in ("held", "posted"):
        if p(bool, f"_extra_in_{place}"):  # a result or held entry nobody waits for
            extra = Entry(choose(p, KEYS, f"{place}_key"), choose(p, REQUESTS, f"{place}_req"),
                          choose(p, ALL_GENERATIONS, f"{place}_generation"))
            places[place].append(extra)
    index = []
    for request in REQUESTS:
        keys = frozenset(k for k, probe in probes if request in probe.requesters)
        if keys:
            index.append((request, keys))
    if p(bool, "_stopped"):  # shutdown dropped the batch and the queue, applied results
        return State(tuple(probes), tuple(index), NEXT_GENERATION, stopped=True)
    return State(
        probes=tuple(probes),
        index=tuple(index),
        next_generation=NEXT_GENERATION,
        batch=tuple(batch),
        queue=(tuple(places["queue"]),) if places["queue"] else (),
        held=tuple(places["held"]),
        answered=tuple(_result(p, e) for e in places["answered"]),
        posted=tuple(_result(p, e) for e in places["posted"]),
        drain_due=p(bool, "_drain_due"),
    )


def _result(p: SymbolicFactory, entry: Entry) -> Result:
    return Result(entry.key, entry.generation, p(bool, f"_says_{entry.key.decode()}"))


def register() -> None:
    """Make CrossHair build States and key- or request-naming actions as above."""
    register_type(State, state)
    register_type(Lookup, lambda p: Lookup(choose(p, KEYS, "key"), choose(p, REQUESTS, "req")))
    register_type(Cleanup, lambda p: Cleanup(choose(p, REQUESTS, "req")))
    register_type(MarkMiss, lambda p: MarkMiss(some_keys(p, "miss")))
    register_type(MarkPresent, lambda p: MarkPresent(some_keys(p, "present")))
