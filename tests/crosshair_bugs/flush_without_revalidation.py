"""flush that submits its whole batch without re-validating it (the seed bug, vLLM #55075).

An entry whose request was cleaned up, or whose probe was superseded by
mark_present, reaches the tier.  The contract line that refutes it:
``all(generation_of(state, e.key) == e.generation for e in __return__[1].submitted)``.
Not part of the spec: only ``tests/test_spec_crosshair.py`` and the Hypothesis
planted-bug test use it.
"""

from __future__ import annotations

from asynclookup.spec.core import (  # noqa: F401  (well_formed, generation_of: read by the contract)
    Entry,
    Flush,
    FlushOutput,
    Phase,
    State,
    _set_probe,
    apply_posted,
    flush_enabled,
    generation_of,
    probe_of,
    well_formed,
)


def flush(state: State, action: Flush) -> tuple[State, FlushOutput]:
    """Apply posted results, then submit the live part of the batch as one item.

    pre: well_formed(state)
    pre: flush_enabled(state, action)
    post: well_formed(__return__[0])
    post: __return__[0].batch == ()
    post: __return__[0].posted == ()
    post: __return__[0].drain_due
    post: all(generation_of(state, e.key) == e.generation for e in __return__[1].submitted)
    post: all(generation_of(state, e.key) != e.generation for e in __return__[1].dropped)
    post: len(__return__[1].submitted) + len(__return__[1].dropped) == len(state.batch)
    post: __return__[0].queue[: len(state.queue)] == state.queue
    post: __return__[0].queue[len(state.queue):] in ((), (__return__[1].submitted,))
    post: len(__return__[0].queue) == len(state.queue) + bool(__return__[1].submitted)
    """
    state = apply_posted(state)
    submitted: list[Entry] = []
    probes = state.probes
    for entry in state.batch:
        submitted.append(entry)  # BUG: no check that the key still has this generation
        probe = probe_of(state, entry.key)
        if probe is not None and probe.generation == entry.generation:
            probes = _set_probe(probes, entry.key, probe._replace(phase=Phase.IN_FLIGHT))
    queue = (*state.queue, tuple(submitted)) if submitted else state.queue
    state = state._replace(probes=probes, batch=(), queue=queue, drain_due=True)
    return state, FlushOutput(tuple(submitted), ())
