"""drain that applies results by key only, without the generation check (vLLM #54872).

A late result for a cleaned-up probe lands on a newer probe of the same key, or
deletes it.  The contract lines that refute it: ``verdicts_from_results(...)``
and ``all(has_result(state, k, p.generation) for k, p in removed(...))``.
Not part of the spec: only ``tests/test_spec_crosshair.py`` uses it.
"""

from __future__ import annotations

from asynclookup.spec.core import (  # noqa: F401  (the helpers are read by the contract)
    Drain,
    Phase,
    State,
    _set_probe,
    changes_only,
    drain_enabled,
    has_result,
    probe_of,
    removed,
    verdicts_from_results,
    well_formed,
)


def _apply_by_key(state: State) -> State:
    """Apply every posted result to whatever probe its key has now (the bug)."""
    probes = state.probes
    for result in state.posted:
        probe = probe_of(state._replace(probes=probes), result.key)
        if probe is None:
            continue  # BUG: a probe of another generation is not treated as stale
        if not probe.requesters:
            probes = _set_probe(probes, result.key, None)
        else:
            resolved = probe._replace(phase=Phase.RESOLVED, verdict=result.verdict)
            probes = _set_probe(probes, result.key, resolved)
    return state._replace(probes=probes, posted=(), drain_due=False)


def drain(state: State, action: Drain) -> tuple[State, None]:
    """Apply every posted result (``drain_results``).

    pre: well_formed(state)
    pre: drain_enabled(state, action)
    post: well_formed(__return__[0])
    post: changes_only(state, __return__[0], "probes", "posted", "drain_due")
    post: __return__[0].posted == ()
    post: verdicts_from_results(state, __return__[0])
    post: all(has_result(state, k, p.generation) for k, p in removed(state, __return__[0]))
    post: all(not p.requesters for _, p in removed(state, __return__[0]))
    """
    return _apply_by_key(state), None
