"""mark_miss that forces PENDING and IN_FLIGHT probes to RESOLVED False (a shipped bug).

The probe's own entry is still in the batch or with the worker; the next flush or
drain hit an "enqueue once" assertion and stopped the step (property 3).  The
contract lines that refute it: ``all(phase_of(state, k) is Phase.RESOLVED ...)``
and ``well_formed(__return__[0])``.
Not part of the spec: only ``tests/test_spec_crosshair.py`` uses it.
"""

from __future__ import annotations

from asynclookup.spec.core import (  # noqa: F401  (the helpers are read by the contract)
    MarkMiss,
    Phase,
    State,
    _set_probe,
    changed,
    changes_only,
    generation_of,
    mark_miss_enabled,
    phase_of,
    probe_of,
    removed,
    verdict_of,
    well_formed,
)


def mark_miss(state: State, action: MarkMiss) -> tuple[State, None]:
    """A load failed: RESOLVED probes of these keys get False; others are left.

    pre: well_formed(state)
    pre: mark_miss_enabled(state, action)
    post: well_formed(__return__[0])
    post: changes_only(state, __return__[0], "probes")
    post: removed(state, __return__[0]) == ()
    post: all(k in action.keys for k, _ in changed(state, __return__[0]))
    post: all(phase_of(state, k) is Phase.RESOLVED for k, _ in changed(state, __return__[0]))
    post: all(p.phase is Phase.RESOLVED for _, p in changed(state, __return__[0]))
    post: all(p.generation == generation_of(state, k) for k, p in changed(state, __return__[0]))
    post: all(verdict_of(__return__[0], k) is not True for k in action.keys)
    """
    probes = state.probes
    for key in action.keys:
        probe = probe_of(state._replace(probes=probes), key)
        if probe is not None:  # BUG: PENDING and IN_FLIGHT probes are resolved too
            resolved = probe._replace(phase=Phase.RESOLVED, verdict=False)
            probes = _set_probe(probes, key, resolved)
    return state._replace(probes=probes), None
