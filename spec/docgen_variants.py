"""Three more broken variants, for the properties ``spec.variants`` has no bug for.

``spec.variants`` reproduces the bugs that real implementations shipped; they
break properties 1, 2, 3, 6, 7 and 8.  PROTOCOL.md names no shipped bug that
breaks only property 4, 5 or 9, yet docs/properties.md shows a counterexample
for every property, so this module adds one plausible mistake for each:

- ``cleanup-keeps-requester`` (4): cleanup drops the request from the index
  but leaves it in the requester set of a probe it shares with another request;
- ``cleanup-keeps-orphans`` (5): cleanup forgets the request but never deletes
  a probe, so probes without requesters pile up;
- ``wrong-request-context`` (9): the worker asks about one request's keys with
  the context of the last request of the batch (a late-binding loop variable).

Each is ``spec.core.TRANSITIONS`` with one entry swapped, like the variants of
``spec.variants``.  What it does not do: change the spec, or claim that any of
these bugs shipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from spec.core import (
    TRANSITIONS,
    Cleanup,
    ProbeGroup,
    Result,
    State,
    TierCall,
    Transition,
    group_of,
    keys_of,
    probe_of,
)
from spec.variants import Variant


def _table(kind: type, transition: Transition) -> Mapping[type, Transition]:
    table = dict(TRANSITIONS)
    table[kind] = transition
    return MappingProxyType(table)


def cleanup_keeping_requester(state: State, action: Cleanup) -> tuple[State, None]:
    """Delete the probes only ``request`` asked for; leave it in shared probes."""
    probes = state.probes
    for key in sorted(keys_of(state, action.request)):
        probe = probe_of(state, key)
        if probe is not None and probe.requesters == {action.request}:
            probes = tuple((k, p) for k, p in probes if k != key)
    index = tuple((r, ks) for r, ks in state.index if r != action.request)
    return state._replace(probes=probes, index=index), None


def cleanup_keeping_orphans(state: State, action: Cleanup) -> tuple[State, None]:
    """Forget ``request`` everywhere, but never delete a probe."""
    probes = tuple(
        (k, p._replace(requesters=p.requesters - {action.request})) for k, p in state.probes
    )
    index = tuple((r, ks) for r, ks in state.index if r != action.request)
    return state._replace(probes=probes, index=index), None


def probe_group_last_context(state: State, action: ProbeGroup) -> tuple[State, TierCall]:
    """The spec's tier call, made with the context of the batch's last entry."""
    group = group_of(state.held)
    answers = action.answers if action.answers is not None else (False,) * len(group)
    results = tuple(Result(e.key, e.generation, v) for e, v in zip(group, answers, strict=True))
    held = tuple(e for e in state.held if e.request != group[0].request)
    call = TierCall(tuple(e.key for e in group), state.held[-1].request)
    return state._replace(held=held, answered=state.answered + results), call


EXTRA_VARIANTS: Mapping[str, Variant] = MappingProxyType({
    v.name: v
    for v in (
        Variant(
            "cleanup-keeps-requester",
            "cleanup drops the request from the index but not from shared probes",
            (4,),
            _table(Cleanup, TRANSITIONS[Cleanup]._replace(apply=cleanup_keeping_requester)),
        ),
        Variant(
            "cleanup-keeps-orphans",
            "cleanup never deletes a probe, so probes without requesters leak",
            (5,),
            _table(Cleanup, TRANSITIONS[Cleanup]._replace(apply=cleanup_keeping_orphans)),
        ),
        Variant(
            "wrong-request-context",
            "the tier is asked with the context of the batch's last request",
            (9,),
            _table(ProbeGroup, TRANSITIONS[ProbeGroup]._replace(apply=probe_group_last_context)),
        ),
    )
})
