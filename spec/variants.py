"""Broken variants of the spec, as tables: the bugs that shipped, and three of ours.

Each variant is ``asynclookup.spec.core.TRANSITIONS`` with one or more entries swapped for
a broken action function, so that the model checker (``asynclookup model-check
--variant NAME``), the oracle, the CrossHair tests and the docs can show that
they catch it.  A broken way of applying results (``apply_posted``) is not an
entry of the table: it is built into every action that applies results
(``lookup``, ``flush``, ``drain``, ``shutdown``) by applying the posted results
the broken way first and then running the spec's own action, which then finds
nothing left to apply.

The shipped bugs break properties 1, 2, 3, 6, 7 and 8.  No known shipped bug
breaks only property 4, 5 or 9, so three plausible mistakes of
our own (``shipped=False``) cover them, and docs/properties.md shows a
counterexample for every property.

What it does not do: change the spec, claim that the three of ours shipped, or
model a tier's misbehaviour that the spec already absorbs (``ProbeGroup(None)``
is the spec's failed tier call).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TypeVar

from asynclookup.spec.core import (
    TRANSITIONS,
    Cleanup,
    Drain,
    Flush,
    FlushOutput,
    Key,
    Lookup,
    MarkMiss,
    Phase,
    Post,
    Probe,
    ProbeGroup,
    Result,
    Shutdown,
    State,
    TierCall,
    Transition,
    apply_posted,
    flush,
    group_of,
    keys_of,
    lookup,
    probe_of,
    shutdown,
)

A = TypeVar("A")
Out = TypeVar("Out")


@dataclass(frozen=True)
class Variant:
    """A named broken table, the bug it reproduces and the properties it breaks."""

    name: str
    bug: str
    breaks: tuple[int, ...]  # property numbers of docs/properties.md
    table: Mapping[type, Transition]
    shipped: bool = True  # False: a plausible mistake of ours, for a property no bug breaks


def _with_probe(state: State, key: Key, probe: Probe | None) -> tuple[tuple[Key, Probe], ...]:
    rest = [(k, p) for k, p in state.probes if k != key]
    if probe is not None:
        rest.append((key, probe))
    return tuple(sorted(rest, key=lambda kp: kp[0]))


def _swap(**entries: Transition) -> Mapping[type, Transition]:
    by_name = {kind.__name__: kind for kind in TRANSITIONS}
    table = dict(TRANSITIONS)
    for name, transition in entries.items():
        table[by_name[name]] = transition
    return MappingProxyType(table)


# -- flush without re-validation (the seed bug, property 1) ---------------------


def flush_without_revalidation(state: State, action: Flush) -> tuple[State, FlushOutput]:
    """Submit the whole batch, including entries cleaned up or superseded since."""
    state = apply_posted(state)
    for entry in state.batch:
        probe = probe_of(state, entry.key)
        if probe is not None and probe.generation == entry.generation:
            state = state._replace(
                probes=_with_probe(state, entry.key, probe._replace(phase=Phase.IN_FLIGHT))
            )
    queue = (*state.queue, state.batch) if state.batch else state.queue
    submitted = state.batch
    return state._replace(batch=(), queue=queue, drain_due=True), FlushOutput(submitted, ())


# -- results applied by key only (the stale-result bug, properties 2 and 3) -----


def apply_posted_by_key(state: State) -> State:
    """Apply every posted result to its key's probe, whatever the generation."""
    for result in state.posted:
        probe = probe_of(state, result.key)
        if probe is None:
            continue
        if not probe.requesters:
            state = state._replace(probes=_with_probe(state, result.key, None))
        else:
            resolved = probe._replace(phase=Phase.RESOLVED, verdict=result.verdict)
            state = state._replace(probes=_with_probe(state, result.key, resolved))
    return state._replace(posted=(), drain_due=False)


def _applying_by_key(
    action_fn: Callable[[State, A], tuple[State, Out]], when: Callable[[State], bool]
) -> Callable[[State, A], tuple[State, Out]]:
    """``action_fn``, but posted results are first applied by key when ``when`` holds."""

    def broken(state: State, action: A) -> tuple[State, Out]:
        if when(state):
            state = apply_posted_by_key(state)
        return action_fn(state, action)

    broken.__name__ = f"{action_fn.__name__}_applying_by_key"
    return broken


def drain_applying_by_key(state: State, action: Drain) -> tuple[State, None]:
    """The spec's drain, which does nothing but apply the posted results, applying
    them by key.  A function of its own, not ``_applying_by_key(drain, ...)``, so
    that CrossHair, which checks the contract of every contracted function called,
    reports the broken drain on its own contract lines, not on the spec drain's
    precondition (tests/crosshair_bugs/broken.py)."""
    return apply_posted_by_key(state), None


def _always(state: State) -> bool:
    return True


def _drain_due(state: State) -> bool:
    return state.drain_due


def _running(state: State) -> bool:
    return not state.stopped


# -- cleanup deletes in-flight probes (the redundant-probe bug, property 8) -----


def cleanup_deleting_in_flight(state: State, action: Cleanup) -> tuple[State, None]:
    """Forget the request and delete every probe it leaves without requesters."""
    for key in sorted(keys_of(state, action.request)):
        probe = probe_of(state, key)
        if probe is None:
            continue
        requesters = probe.requesters - {action.request}
        kept = probe._replace(requesters=requesters) if requesters else None
        state = state._replace(probes=_with_probe(state, key, kept))
    index = tuple((r, ks) for r, ks in state.index if r != action.request)
    return state._replace(index=index), None


# -- mark_miss forces pending / in-flight probes (property 3) -------------------


def mark_miss_forcing(state: State, action: MarkMiss) -> tuple[State, None]:
    """Every probe of these keys becomes RESOLVED False, whatever its phase."""
    for key in action.keys:
        probe = probe_of(state, key)
        if probe is not None:
            forced = probe._replace(phase=Phase.RESOLVED, verdict=False)
            state = state._replace(probes=_with_probe(state, key, forced))
    return state, None


# -- the worker dies after a tier call (the raising lazy iterable, property 6) --


def post_never_enabled(state: State, action: Post) -> bool:
    """The worker died inside its tier call: it never posts again."""
    return False


# -- zip() truncation on a short answer (properties 7 and 6) --------------------


def probe_group_short_enabled(state: State, action: ProbeGroup) -> bool:
    """Any non-empty answer no longer than the group is accepted."""
    group = group_of(state.held)
    return bool(group) and action.answers is not None and 0 < len(action.answers) <= len(group)


def probe_group_zipping(state: State, action: ProbeGroup) -> tuple[State, TierCall]:
    """zip() the group with the answers: keys past a short answer get no result."""
    group = group_of(state.held)
    answers = action.answers or ()
    results = tuple(Result(e.key, e.generation, v) for e, v in zip(group, answers, strict=False))
    held = tuple(e for e in state.held if e.request != group[0].request)
    call = TierCall(tuple(e.key for e in group), group[0].request)
    return state._replace(held=held, answered=state.answered + results), call


# -- three of ours: properties 4, 5, 9, which no shipped bug breaks on its own -


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


VARIANTS: Mapping[str, Variant] = MappingProxyType({
    v.name: v
    for v in (
        Variant(
            "flush-no-revalidate",
            "flush submits the whole batch without re-validating it (vLLM #55075)",
            (1,),
            _swap(Flush=TRANSITIONS[Flush]._replace(apply=flush_without_revalidation)),
        ),
        Variant(
            "drain-no-generation-check",
            "posted results are applied by key, ignoring their generation (vLLM #54872)",
            (2, 3),
            _swap(
                Lookup=TRANSITIONS[Lookup]._replace(apply=_applying_by_key(lookup, _drain_due)),
                Flush=TRANSITIONS[Flush]._replace(apply=_applying_by_key(flush, _always)),
                Drain=TRANSITIONS[Drain]._replace(apply=drain_applying_by_key),
                Shutdown=TRANSITIONS[Shutdown]._replace(
                    apply=_applying_by_key(shutdown, _running)
                ),
            ),
        ),
        Variant(
            "cleanup-deletes-in-flight",
            "cleanup deletes in-flight probes, so a later request probes the key again",
            (8,),
            _swap(Cleanup=TRANSITIONS[Cleanup]._replace(apply=cleanup_deleting_in_flight)),
        ),
        Variant(
            "mark-miss-forces-resolved",
            "mark_miss forces PENDING and IN_FLIGHT probes to RESOLVED False",
            (3, 2),
            _swap(MarkMiss=TRANSITIONS[MarkMiss]._replace(apply=mark_miss_forcing)),
        ),
        Variant(
            "worker-never-posts",
            "a raising lazy iterable kills the worker inside its tier call",
            (6,),
            _swap(Post=TRANSITIONS[Post]._replace(enabled=post_never_enabled)),
        ),
        Variant(
            "tier-short-answer",
            "zip() over keys and a short answer drops keys, stranding them IN_FLIGHT",
            (7, 6),
            _swap(
                ProbeGroup=Transition(probe_group_short_enabled, probe_group_zipping),
            ),
        ),
        Variant(
            "cleanup-keeps-requester",
            "cleanup drops the request from the index but not from shared probes",
            (4,),
            _swap(Cleanup=TRANSITIONS[Cleanup]._replace(apply=cleanup_keeping_requester)),
            shipped=False,
        ),
        Variant(
            "cleanup-keeps-orphans",
            "cleanup never deletes a probe, so probes without requesters leak",
            (5,),
            _swap(Cleanup=TRANSITIONS[Cleanup]._replace(apply=cleanup_keeping_orphans)),
            shipped=False,
        ),
        Variant(
            "wrong-request-context",
            "the tier is asked with the context of the batch's last request",
            (9,),
            _swap(ProbeGroup=TRANSITIONS[ProbeGroup]._replace(apply=probe_group_last_context)),
            shipped=False,
        ),
    )
})
