"""The small predicates that the PEP 316 contracts of ``asynclookup.spec.core`` read.

Each action of ``asynclookup.spec.core`` states what it guarantees in ``pre:`` and ``post:``
lines of its docstring; CrossHair evaluates those lines in ``asynclookup.spec.core``'s
globals, so ``asynclookup.spec.core`` imports every name below that a contract uses.
``well_formed`` is the frame of every contract: the invariants every action
needs and keeps.  The rest read a probe's fields, or compare the state before
an action with the state after it.

Each is pure: it reads States and returns a value.  What it does not do:
define the protocol (``asynclookup.spec.core``) or name the properties of
docs/properties.md (``asynclookup.spec.properties``).  Nothing but the contracts and the tests should need
these.
"""

from __future__ import annotations

from asynclookup.spec import properties
from asynclookup.spec.state import (
    Entry,
    Generation,
    Key,
    Phase,
    Probe,
    RequestId,
    Result,
    State,
    Verdict,
    probe_of,
)

_probe = probe_of


def well_formed(state: State) -> bool:
    """Every action needs and keeps this: sorted tables, no work left after
    shutdown, and every state invariant of ``asynclookup.spec.properties``."""
    return (
        tables_sorted(state)
        and (not state.stopped or idle(state))
        and properties.phases_match_pipeline_inv(state)
        and properties.generations_unique_inv(state)
        and properties.requesters_match_index_inv(state)
        and properties.no_orphaned_probes_inv(state)
    )


def tables_sorted(state: State) -> bool:
    """``probes`` and ``index`` are maps: strictly increasing keys, so no repeats."""
    keys = [k for k, _ in state.probes]
    requests = [r for r, _ in state.index]
    return all(keys[i] < keys[i + 1] for i in range(len(keys) - 1)) and all(
        requests[i] < requests[i + 1] for i in range(len(requests) - 1)
    )


def idle(state: State) -> bool:
    """Nothing is batched, queued, held, answered or posted, and no drain is due."""
    return not (
        state.batch or state.queue or state.held or state.answered or state.posted
        or state.drain_due
    )


def generation_of(state: State, key: Key) -> Generation | None:
    """The generation of ``key``'s probe, or None when the key has no state."""
    probe = _probe(state, key)
    return None if probe is None else probe.generation


def phase_of(state: State, key: Key) -> Phase | None:
    """The phase of ``key``'s probe, or None when the key has no state."""
    probe = _probe(state, key)
    return None if probe is None else probe.phase


def verdict_of(state: State, key: Key) -> Verdict:
    """The verdict of ``key``'s probe, or None when the key has no state."""
    probe = _probe(state, key)
    return None if probe is None else probe.verdict


def requesters_of(state: State, key: Key) -> frozenset[RequestId]:
    """The requesters of ``key``'s probe (empty when the key has no state)."""
    probe = _probe(state, key)
    return frozenset() if probe is None else probe.requesters


def has_result(state: State, key: Key, generation: Generation) -> bool:
    """A result for this generation of ``key`` is posted."""
    return any(r.key == key and r.generation == generation for r in state.posted)


def keeps_generation(before: State, after: State, key: Key) -> bool:
    """If ``key`` had a probe in ``before``, ``after`` has a probe of that generation."""
    old = generation_of(before, key)
    return old is None or generation_of(after, key) == old


def changes_only(before: State, after: State, *fields: str) -> bool:
    """``after`` equals ``before`` in every field of State not named in ``fields``."""
    return after._replace(**{f: getattr(before, f) for f in fields}) == before


def changed(before: State, after: State) -> tuple[tuple[Key, Probe], ...]:
    """The probes of ``after`` that ``before`` does not hold as they are (new or updated)."""
    return tuple((k, p) for k, p in after.probes if _probe(before, k) != p)


def removed(before: State, after: State) -> tuple[tuple[Key, Probe], ...]:
    """The probes of ``before`` whose key has no state in ``after``."""
    return tuple((k, p) for k, p in before.probes if _probe(after, k) is None)


def verdicts_from_results(before: State, after: State) -> bool:
    """Every probe changed from ``before`` to ``after`` holds the verdict of a
    result posted in ``before`` for its own generation."""
    return all(
        (k, p.generation, p.verdict) in before.posted for k, p in changed(before, after)
    )


def batched(before: State, after: State) -> tuple[Entry, ...]:
    """The entries appended to the batch from ``before`` to ``after``."""
    return after.batch[len(before.batch):]


def new_results(before: State, after: State) -> tuple[Result, ...]:
    """The results the worker answered from ``before`` to ``after``."""
    return after.answered[len(before.answered):]


