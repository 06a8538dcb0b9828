"""cleanup that deletes an orphaned IN_FLIGHT probe (the redundant-probe bug).

The next request for the key creates a second probe while the first is still
with the worker (property 8).  The contract line that refutes it:
``not any(p.phase is Phase.IN_FLIGHT for _, p in removed(state, __return__[0]))``.
Not part of the spec: only ``tests/test_spec_crosshair.py`` uses it.
"""

from __future__ import annotations

from asynclookup.spec.core import (  # noqa: F401  (the helpers are read by the contract)
    Cleanup,
    Phase,
    State,
    _set_keys,
    _set_probe,
    changed,
    changes_only,
    cleanup_enabled,
    keys_of,
    probe_of,
    removed,
    well_formed,
)


def cleanup(state: State, action: Cleanup) -> tuple[State, None]:
    """Forget ``request``; delete probes left without requesters unless in flight.

    An orphaned IN_FLIGHT probe stays so that a later request joins it instead
    of probing the key a second time; its own result deletes it.

    pre: well_formed(state)
    pre: cleanup_enabled(state, action)
    post: well_formed(__return__[0])
    post: changes_only(state, __return__[0], "probes", "index")
    post: keys_of(__return__[0], action.request) == frozenset()
    post: all(action.request not in p.requesters for _, p in __return__[0].probes)
    post: all(k in keys_of(state, action.request) for k, _ in changed(state, __return__[0]))
    post: all(p.requesters <= {action.request} for _, p in removed(state, __return__[0]))
    post: not any(p.phase is Phase.IN_FLIGHT for _, p in removed(state, __return__[0]))
    """
    probes = state.probes
    for key in sorted(keys_of(state, action.request)):
        probe = probe_of(state, key)
        if probe is None:
            continue
        requesters = probe.requesters - {action.request}
        if not requesters:  # BUG: an IN_FLIGHT probe is deleted too
            probes = _set_probe(probes, key, None)
        else:
            probes = _set_probe(probes, key, probe._replace(requesters=requesters))
    index = _set_keys(state.index, action.request, frozenset())
    return state._replace(probes=probes, index=index), None
