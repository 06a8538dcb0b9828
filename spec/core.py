"""The async lookup protocol as a pure, executable state machine.

Theory of operation
-------------------
A scheduler thread asks, for block keys, "is this block in the slow tier?".
Each question is a *probe*, identified by a *generation* drawn from a counter
that never repeats.  A probe is PENDING while it sits in the step's batch,
IN_FLIGHT once ``flush`` has handed the batch to the worker, and RESOLVED once a
verdict is applied.  The worker takes one batch at a time, asks the tier once
per request group, and posts ``(key, generation, verdict)`` results; the
scheduler applies posted results only inside ``lookup``, ``flush``, ``drain``
and ``shutdown``.

Every result and every batch entry carries the generation it was made for.
The one rule that makes the protocol safe is: *an entry or a result whose key
has no state, or a state of another generation, is stale and is ignored*.
``flush`` re-validates its batch (the seed bug, vLLM #55075), ``drain``
re-validates results (vLLM #54872).

This module knows nothing of threads, queues, clocks or I/O.  A ``State`` is an
immutable value; each action is a frozen dataclass; each action has one pure
function ``name(state, action) -> (state, output)`` and an enabling predicate
``name_enabled(state, action)``.  ``step`` dispatches through a table, so the
model checker and the tests can swap one action's function for a broken one.
A disabled action raises ``ProtocolError``; nothing is silently ignored.

Contracts (PEP 316, checked by CrossHair) say what each action guarantees; the
predicates they read live in ``asynclookup.spec._contracts``, and the named properties of
docs/properties.md in ``asynclookup.spec.properties``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeAlias

# The PEP 316 contracts of the actions below read these predicates.  CrossHair
# evaluates a contract in this module's globals, so they are imported here (and
# re-exported: the tests and the generated actions of tests/crosshair_bugs use them).
from asynclookup.spec._contracts import batched as batched
from asynclookup.spec._contracts import changed as changed
from asynclookup.spec._contracts import changes_only as changes_only
from asynclookup.spec._contracts import generation_of as generation_of
from asynclookup.spec._contracts import has_result as has_result
from asynclookup.spec._contracts import idle as idle
from asynclookup.spec._contracts import keeps_generation as keeps_generation
from asynclookup.spec._contracts import new_results as new_results
from asynclookup.spec._contracts import phase_of as phase_of
from asynclookup.spec._contracts import removed as removed
from asynclookup.spec._contracts import requesters_of as requesters_of
from asynclookup.spec._contracts import verdict_of as verdict_of
from asynclookup.spec._contracts import verdicts_from_results as verdicts_from_results
from asynclookup.spec._contracts import well_formed as well_formed

# The protocol's values, re-exported: the tests and docs name them as core.X.
from asynclookup.spec.errors import ProtocolError as ProtocolError
from asynclookup.spec.state import Action as Action
from asynclookup.spec.state import Cleanup as Cleanup
from asynclookup.spec.state import Drain as Drain
from asynclookup.spec.state import Entry as Entry
from asynclookup.spec.state import Flush as Flush
from asynclookup.spec.state import FlushOutput as FlushOutput
from asynclookup.spec.state import Generation as Generation
from asynclookup.spec.state import INITIAL as INITIAL
from asynclookup.spec.state import Key as Key
from asynclookup.spec.state import Lookup as Lookup
from asynclookup.spec.state import MarkMiss as MarkMiss
from asynclookup.spec.state import MarkPresent as MarkPresent
from asynclookup.spec.state import Output as Output
from asynclookup.spec.state import Phase as Phase
from asynclookup.spec.state import Post as Post
from asynclookup.spec.state import Probe as Probe
from asynclookup.spec.state import ProbeGroup as ProbeGroup
from asynclookup.spec.state import RequestId as RequestId
from asynclookup.spec.state import Result as Result
from asynclookup.spec.state import SCHEDULER_ACTIONS as SCHEDULER_ACTIONS
from asynclookup.spec.state import Shutdown as Shutdown
from asynclookup.spec.state import State as State
from asynclookup.spec.state import TakeBatch as TakeBatch
from asynclookup.spec.state import TierCall as TierCall
from asynclookup.spec.state import Verdict as Verdict
from asynclookup.spec.state import WORKER_ACTIONS as WORKER_ACTIONS
from asynclookup.spec.state import group_of as group_of
from asynclookup.spec.state import keys_of as keys_of
from asynclookup.spec.state import probe_of as probe_of


# -- table updates (pure; every update builds new tuples) ---------------------


def _set_probe(
    probes: tuple[tuple[Key, Probe], ...], key: Key, probe: Probe | None
) -> tuple[tuple[Key, Probe], ...]:
    rest = [(k, p) for k, p in probes if k != key]
    if probe is not None:
        rest.append((key, probe))
        rest.sort(key=lambda kp: kp[0])
    return tuple(rest)


def _set_keys(
    index: tuple[tuple[RequestId, frozenset[Key]], ...],
    request: RequestId,
    keys: frozenset[Key],
) -> tuple[tuple[RequestId, frozenset[Key]], ...]:
    rest = [(r, ks) for r, ks in index if r != request]
    if keys:
        rest.append((request, keys))
        rest.sort(key=lambda rk: rk[0])
    return tuple(rest)


# -- applying results: shared by lookup, flush, drain and shutdown -------------


def apply_posted(state: State) -> State:
    """Apply every posted result; the only place a verdict from the worker lands.

    post: __return__.posted == ()
    post: not __return__.drain_due
    post: changes_only(state, __return__, "probes", "posted", "drain_due")
    """
    probes = state.probes
    for result in state.posted:
        probe = probe_of(state._replace(probes=probes), result.key)
        if probe is None or probe.generation != result.generation:
            continue  # stale: cleaned up, superseded or re-created since
        if not probe.requesters:
            probes = _set_probe(probes, result.key, None)  # orphan: forget it
        else:
            resolved = probe._replace(phase=Phase.RESOLVED, verdict=result.verdict)
            probes = _set_probe(probes, result.key, resolved)
    return state._replace(probes=probes, posted=(), drain_due=False)


# -- scheduler actions ---------------------------------------------------------


def lookup_enabled(state: State, action: Lookup) -> bool:
    return not state.stopped and isinstance(action.key, bytes)


def lookup(state: State, action: Lookup) -> tuple[State, Verdict]:
    """Drain if a flush happened since the last drain; join or create a probe.

    pre: well_formed(state)
    pre: lookup_enabled(state, action)
    post: well_formed(__return__[0])
    post: action.request in requesters_of(__return__[0], action.key)
    post: __return__[1] == verdict_of(__return__[0], action.key)
    post: __return__[0].posted == () or not state.drain_due
    post: state.drain_due or keeps_generation(state, __return__[0], action.key)
    post: __return__[0].batch[: len(state.batch)] == state.batch
    post: all(e[:2] == (action.key, action.request) for e in batched(state, __return__[0]))
    post: all(e.generation == state.next_generation for e in batched(state, __return__[0]))
    post: __return__[0].next_generation <= state.next_generation + 1
    post: batched(state, __return__[0]) or __return__[0].next_generation == state.next_generation
    """
    if state.drain_due:
        state = apply_posted(state)
    key, request = action.key, action.request
    probe = probe_of(state, key)
    batch, next_generation = state.batch, state.next_generation
    if probe is None:
        probe = Probe(next_generation, Phase.PENDING, None, frozenset())
        batch = (*batch, Entry(key, request, next_generation))
        next_generation += 1
    probe = probe._replace(requesters=probe.requesters | {request})
    state = state._replace(
        probes=_set_probe(state.probes, key, probe),
        index=_set_keys(state.index, request, keys_of(state, request) | {key}),
        batch=batch,
        next_generation=next_generation,
    )
    return state, probe.verdict


def flush_enabled(state: State, action: Flush) -> bool:
    return not state.stopped


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
    dropped: list[Entry] = []
    probes = state.probes
    for entry in state.batch:
        probe = probe_of(state, entry.key)
        if probe is None or probe.generation != entry.generation:
            dropped.append(entry)  # cleaned up or superseded since it was batched
            continue
        submitted.append(entry)
        probes = _set_probe(probes, entry.key, probe._replace(phase=Phase.IN_FLIGHT))
    queue = (*state.queue, tuple(submitted)) if submitted else state.queue
    state = state._replace(probes=probes, batch=(), queue=queue, drain_due=True)
    return state, FlushOutput(tuple(submitted), tuple(dropped))


def cleanup_enabled(state: State, action: Cleanup) -> bool:
    return not state.stopped


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
        assert probe is not None, "index names a key without state"
        requesters = probe.requesters - {action.request}
        if not requesters and probe.phase is not Phase.IN_FLIGHT:
            probes = _set_probe(probes, key, None)
        else:
            probes = _set_probe(probes, key, probe._replace(requesters=requesters))
    index = _set_keys(state.index, action.request, frozenset())
    return state._replace(probes=probes, index=index), None


def mark_miss_enabled(state: State, action: MarkMiss) -> bool:
    return not state.stopped


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
        if probe is not None and probe.phase is Phase.RESOLVED:
            probes = _set_probe(probes, key, probe._replace(verdict=False))
    return state._replace(probes=probes), None


def mark_present_enabled(state: State, action: MarkPresent) -> bool:
    return not state.stopped


def mark_present(state: State, action: MarkPresent) -> tuple[State, None]:
    """A store succeeded: newer than any probe, so old generations become stale.

    pre: well_formed(state)
    pre: mark_present_enabled(state, action)
    post: well_formed(__return__[0])
    post: changes_only(state, __return__[0], "probes", "next_generation")
    post: all(p.verdict is True for k, p in __return__[0].probes if k in action.keys)
    post: all(k in action.keys for k, _ in changed(state, __return__[0]))
    post: all(k in action.keys for k, _ in removed(state, __return__[0]))
    post: all(verdict_of(state, k) is not True for k, _ in changed(state, __return__[0]))
    post: all(p.generation >= state.next_generation for _, p in changed(state, __return__[0]))
    post: all(not p.requesters for _, p in removed(state, __return__[0]))
    """
    probes, next_generation = state.probes, state.next_generation
    for key in action.keys:
        probe = probe_of(state._replace(probes=probes), key)
        if probe is None or probe.verdict is True:
            continue
        if not probe.requesters:
            probes = _set_probe(probes, key, None)
        else:
            fresh = Probe(next_generation, Phase.RESOLVED, True, probe.requesters)
            probes = _set_probe(probes, key, fresh)
            next_generation += 1
    return state._replace(probes=probes, next_generation=next_generation), None


def drain_enabled(state: State, action: Drain) -> bool:
    return not state.stopped


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
    return apply_posted(state), None


def shutdown_enabled(state: State, action: Shutdown) -> bool:
    """Shutdown joins the worker: it completes once the batch in hand is posted."""
    return state.stopped or (not state.held and not state.answered)


def shutdown(state: State, action: Shutdown) -> tuple[State, None]:
    """Stop: batches never taken are dropped, posted results applied. Idempotent.

    pre: well_formed(state)
    pre: shutdown_enabled(state, action)
    post: well_formed(__return__[0])
    post: __return__[0].stopped
    post: idle(__return__[0])
    post: __return__[0].index == state.index
    post: not state.stopped or __return__[0] == state
    post: verdicts_from_results(state, __return__[0])
    """
    if state.stopped:
        return state, None
    state = apply_posted(state)
    return state._replace(batch=(), queue=(), stopped=True), None


# -- worker actions ------------------------------------------------------------


def take_batch_enabled(state: State, action: TakeBatch) -> bool:
    """The worker takes a batch only after posting everything of the last one."""
    return not state.held and not state.answered and bool(state.queue)


def take_batch(state: State, action: TakeBatch) -> tuple[State, None]:
    """Take the oldest submitted batch; the worker holds one batch at a time.

    pre: well_formed(state)
    pre: take_batch_enabled(state, action)
    post: well_formed(__return__[0])
    post: changes_only(state, __return__[0], "queue", "held")
    post: __return__[0].held == state.queue[0]
    post: __return__[0].queue == state.queue[1:]
    """
    return state._replace(held=state.queue[0], queue=state.queue[1:]), None


def probe_group_enabled(state: State, action: ProbeGroup) -> bool:
    group = group_of(state.held)
    return bool(group) and (action.answers is None or len(action.answers) == len(group))


def probe_group(state: State, action: ProbeGroup) -> tuple[State, TierCall]:
    """Ask the tier about one request's keys, with that request's context.

    pre: well_formed(state)
    pre: probe_group_enabled(state, action)
    post: well_formed(__return__[0])
    post: changes_only(state, __return__[0], "held", "answered")
    post: __return__[1].keys == tuple(e.key for e in group_of(state.held))
    post: all(e.request == __return__[1].request for e in group_of(state.held))
    post: all(e.request != __return__[1].request for e in __return__[0].held)
    post: tuple(r.key for r in new_results(state, __return__[0])) == __return__[1].keys
    post: action.answers in (None, tuple(r.verdict for r in new_results(state, __return__[0])))
    post: action.answers is not None or not any(v for _, _, v in new_results(state, __return__[0]))
    """
    group = group_of(state.held)
    answers = action.answers if action.answers is not None else (False,) * len(group)
    results = tuple(Result(e.key, e.generation, v) for e, v in zip(group, answers, strict=True))
    held = tuple(e for e in state.held if e.request != group[0].request)
    call = TierCall(tuple(e.key for e in group), group[0].request)
    return state._replace(held=held, answered=state.answered + results), call


def post_enabled(state: State, action: Post) -> bool:
    if action.count is None:
        return bool(state.answered)
    return 0 < action.count <= len(state.answered)


def post(state: State, action: Post) -> tuple[State, None]:
    """Post the answered results to the scheduler, in the order answered: all of them,
    or the first ``action.count``.

    pre: well_formed(state)
    pre: post_enabled(state, action)
    post: well_formed(__return__[0])
    post: changes_only(state, __return__[0], "answered", "posted")
    post: __return__[0].posted + __return__[0].answered == state.posted + state.answered
    post: len(__return__[0].posted) > len(state.posted)
    post: action.count is not None or __return__[0].answered == ()
    """
    n = len(state.answered) if action.count is None else action.count
    return state._replace(
        answered=state.answered[n:], posted=state.posted + state.answered[:n]
    ), None


def posts(state: State) -> tuple[Post, ...]:
    """The posts a hidden worker may make in ``state``: everything answered, or the
    first ``n`` results for each shorter ``n`` (a worker that posts them one by one).
    The checkers close their sets of possible states under these, in this order."""
    if not state.answered:
        return ()
    return (Post(), *(Post(n) for n in range(1, len(state.answered))))


# -- dispatch ------------------------------------------------------------------

# Action functions take their own action type; the table is keyed by that type.
ActionFn: TypeAlias = Callable[[State, Any], tuple[State, Output]]
EnabledFn: TypeAlias = Callable[[State, Any], bool]


class Transition(NamedTuple):
    """An action's enabling predicate and its function."""

    enabled: EnabledFn
    apply: ActionFn


TRANSITIONS: Mapping[type, Transition] = {
    Lookup: Transition(lookup_enabled, lookup),
    Flush: Transition(flush_enabled, flush),
    Cleanup: Transition(cleanup_enabled, cleanup),
    MarkMiss: Transition(mark_miss_enabled, mark_miss),
    MarkPresent: Transition(mark_present_enabled, mark_present),
    Drain: Transition(drain_enabled, drain),
    Shutdown: Transition(shutdown_enabled, shutdown),
    TakeBatch: Transition(take_batch_enabled, take_batch),
    ProbeGroup: Transition(probe_group_enabled, probe_group),
    Post: Transition(post_enabled, post),
}


def enabled(state: State, action: Action, table: Mapping[type, Transition] = TRANSITIONS) -> bool:
    """Whether ``action`` may happen in ``state``."""
    return table[type(action)].enabled(state, action)


def step(
    state: State, action: Action, table: Mapping[type, Transition] = TRANSITIONS
) -> tuple[State, Output]:
    """Apply ``action``; raise ProtocolError (state untouched) if it is disabled."""
    transition = table[type(action)]
    if not transition.enabled(state, action):
        raise ProtocolError(f"{action!r} is not enabled: {describe(state)}")
    return transition.apply(state, action)


def describe(state: State) -> str:
    """A one-line summary of ``state`` for error messages and traces."""
    probes = ", ".join(
        f"{k!r}: g{p.generation} {p.phase.name} {p.verdict} {sorted(p.requesters)}"
        for k, p in state.probes
    )
    return (
        f"probes {{{probes}}} batch={len(state.batch)} queue={len(state.queue)} "
        f"held={len(state.held)} answered={len(state.answered)} "
        f"posted={len(state.posted)} drain_due={state.drain_due} stopped={state.stopped}"
    )
