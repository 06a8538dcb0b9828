"""Small-scope States for CrossHair: two keys, two requests, shaped like the spec's.

CrossHair left to itself builds a ``State`` from arbitrary symbolic tuples of
bytes, strings and frozensets; almost none of them satisfy ``well_formed``, so
its search dies in failed preconditions before it reaches an action's body.
``register()`` makes CrossHair build States, and the actions that name keys,
requests or answers, from a few symbolic choices instead: whether ``b"b"`` has
a probe (``b"a"`` always has one), each probe's phase, requesters and verdict,
the request each entry was batched with, where each IN_FLIGHT entry sits in
the worker pipeline, and optional extra entries and results that may be stale.
Once the choices are made the State is concrete; the index is derived from the
requesters, and the contracts' ``pre: well_formed(state)`` still filters.

CrossHair leans to the False branch of a fresh decision, so each choice puts
its richer option on that side (``b"b"`` has a probe unless ``no_probe_b``).

This is a bound, not a proof: states with three keys, two entries of one key in
one place, in-flight entries in other places, or larger batches are not built.
Used only through ``plugin.py`` (``--extra_plugin tests/crosshair_bugs/plugin.py``)
and by the tests of ``tests/test_spec_crosshair.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from crosshair import SymbolicFactory, register_type

from asynclookup.spec.core import (
    Cleanup,
    Entry,
    Key,
    Lookup,
    MarkMiss,
    MarkPresent,
    Phase,
    Probe,
    ProbeGroup,
    RequestId,
    Result,
    State,
)

KEYS: tuple[Key, ...] = (b"a", b"b")
REQUESTS: tuple[RequestId, ...] = ("r", "s")
# The probe of KEYS[i] has generation i; extra entries and results take any
# generation below the counter, so they may be live or stale.
NEXT_GENERATION = 4
ALL_GENERATIONS = tuple(range(NEXT_GENERATION))
SUBSETS: tuple[frozenset[RequestId], ...] = (
    frozenset(), frozenset({"r"}), frozenset({"s"}), frozenset(REQUESTS)
)
# IN_FLIGHT comes last, so that half of the probes are in flight.
PHASES = (Phase.PENDING, Phase.RESOLVED, Phase.IN_FLIGHT)
# A tier's answers for a group of one or two keys, or None: the tier failed.
ANSWERS: tuple[tuple[bool, ...] | None, ...] = (None, (True,), (False,), (True, False))
# Where an IN_FLIGHT entry sits: KEYS[0]'s is queued or posted, KEYS[1]'s held
# or answered, so every worker action has a state that enables it.
PLACES: dict[Key, tuple[str, str]] = {b"a": ("queue", "posted"), b"b": ("held", "answered")}

_T = TypeVar("_T")


def choose(p: SymbolicFactory, options: Sequence[_T], name: str) -> _T:
    """One of ``options``, picked by a balanced tree of symbolic booleans."""
    if len(options) == 1:
        return options[0]
    half = (len(options) + 1) // 2
    if p(bool, f"_{name}_{len(options)}"):
        return choose(p, options[:half], name)
    return choose(p, options[half:], name)


def flag(p: SymbolicFactory, name: str) -> bool:
    """A concrete bool chosen symbolically, so no symbolic value hides in a State."""
    return bool(p(bool, f"_{name}"))


def some_keys(p: SymbolicFactory, name: str) -> tuple[Key, ...]:
    """A sub-sequence of KEYS, for mark_miss and mark_present."""
    return tuple(k for k in KEYS if p(bool, f"_{name}_{k.decode()}"))


def state(p: SymbolicFactory) -> State:
    """A State over KEYS and REQUESTS whose phases agree with the pipeline by construction."""
    probes: list[tuple[Key, Probe]] = []
    batch: list[Entry] = []
    places: dict[str, list[Entry]] = {"queue": [], "held": [], "answered": [], "posted": []}
    for generation, key in enumerate(KEYS):
        k = key.decode()
        if generation and flag(p, f"no_probe_{k}"):  # KEYS[0] always has a probe
            continue
        phase = choose(p, PHASES, f"phase_{k}")
        # Only an IN_FLIGHT probe may be orphaned (no_orphaned_probes_inv).
        requesters = choose(p, SUBSETS if phase is Phase.IN_FLIGHT else SUBSETS[1:], f"asked_{k}")
        verdict = flag(p, f"verdict_{k}") if phase is Phase.RESOLVED else None
        entry = Entry(key, choose(p, REQUESTS, f"batched_with_{k}"), generation)
        if phase is Phase.PENDING:
            batch.append(entry)
        elif phase is Phase.IN_FLIGHT:
            first, second = PLACES[key]
            places[second if flag(p, f"{k}_{second}") else first].append(entry)
        probes.append((key, Probe(generation, phase, verdict, requesters)))
    for place in ("batch", "held", "posted"):  # perhaps stale: nobody may wait for it
        if flag(p, f"extra_{place}"):
            extra = Entry(choose(p, KEYS, f"{place}_key"), choose(p, REQUESTS, f"{place}_req"),
                          choose(p, ALL_GENERATIONS, f"{place}_generation"))
            (batch if place == "batch" else places[place]).append(extra)
    index = []
    for request in REQUESTS:
        keys = frozenset(k for k, probe in probes if request in probe.requesters)
        if keys:
            index.append((request, keys))
    # Only shutdown is enabled once stopped: spend one path in eight on such states.
    if all(flag(p, f"stopped_{i}") for i in range(3)):
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
        drain_due=flag(p, "drain_due"),
    )


def _result(p: SymbolicFactory, entry: Entry) -> Result:
    return Result(entry.key, entry.generation, flag(p, f"says_{entry.key.decode()}"))


def register() -> None:
    """Make CrossHair build States and key- or request-naming actions as above."""
    register_type(State, state)
    register_type(Lookup, lambda p: Lookup(choose(p, KEYS, "key"), choose(p, REQUESTS, "req")))
    register_type(Cleanup, lambda p: Cleanup(choose(p, REQUESTS, "req")))
    register_type(MarkMiss, lambda p: MarkMiss(some_keys(p, "miss")))
    register_type(MarkPresent, lambda p: MarkPresent(some_keys(p, "present")))
    register_type(ProbeGroup, lambda p: ProbeGroup(choose(p, ANSWERS, "answers")))
