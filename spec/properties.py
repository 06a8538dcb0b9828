"""The nine properties of docs/properties.md: the one registry, and their named predicates.

``PROPERTIES`` is the registry every checker prints from: each property of
docs/properties.md by number, with its title, what an implementation that breaks
it did wrong, the shipped bug it exists because of, and the predicates that state
it.
``title_of`` and ``kind_of`` also name the two findings that are not a
numbered property: an action of the spec that raised (number 0, the model
checker's) and a usage error (None: a call after shutdown that did not fail).
``Finding`` is what every checker reports: a number and a detail, which each
checker extends with its own evidence.

The predicates come in two kinds, after stateright: ``ALWAYS`` holds of every reachable state
(``*_inv`` predicates over one ``State``) or of every step (predicates over
``before, action, after, output``); ``SOMETIMES`` names states that a search
must reach, so that an empty or truncated search cannot pass.  Each predicate's
docstring says what it prevents: the bug that a real implementation shipped.
Progress (property 6) is also checked as "from every reachable state a
quiescent state is reachable" by the model checker, which is not a predicate.

This module only reads states; it never builds one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import TypeAlias

from asynclookup.spec.state import (
    Action,
    Cleanup,
    Entry,
    Flush,
    FlushOutput,
    Lookup,
    MarkMiss,
    MarkPresent,
    Output,
    Phase,
    ProbeGroup,
    State,
    TierCall,
    group_of,
    keys_of,
    probe_of,
)

StatePredicate: TypeAlias = Callable[[State], bool]
StepPredicate: TypeAlias = Callable[[State, Action, State, Output], bool]


@dataclass(frozen=True)
class Predicate:
    """A named predicate, the property of docs/properties.md it states, and its kind."""

    name: str
    number: int  # the property's number in docs/properties.md
    state: StatePredicate | None = None
    step: StepPredicate | None = None
    efficiency: bool = False  # property 8: reported apart from safety

    @property
    def doc(self) -> str:
        fn = self.state or self.step
        return (fn.__doc__ or "").strip().splitlines()[0] if fn else ""


# What the invariants read of an Entry or a Result (both have these fields).
_KEY_GENERATION = attrgetter("key", "generation")
_GENERATION = attrgetter("generation")


def _pipeline(state: State) -> list[tuple[bytes, int]]:
    """Every (key, generation) that the worker side still holds, with repeats."""
    carried = chain(*state.queue, state.held, state.answered, state.posted)
    return list(map(_KEY_GENERATION, carried))


# -- state invariants ----------------------------------------------------------


def phases_match_pipeline_inv(state: State) -> bool:
    """A probe is where its phase says, once: PENDING in the batch, IN_FLIGHT in the
    worker pipeline, RESOLVED nowhere (prevents "enqueue once" assertion crashes
    and probes stranded IN_FLIGHT forever)."""
    if state.stopped:
        return True  # shutdown drops the queue; nothing can be observed after it
    # Expected (batch, pipeline) counts: (1, 0) PENDING, (0, 1) IN_FLIGHT, (0, 0) RESOLVED.
    in_batch = list(map(_KEY_GENERATION, state.batch))
    in_pipeline = _pipeline(state)
    for key, probe in state.probes:
        kg = (key, probe.generation)
        pending = probe.phase is Phase.PENDING
        in_flight = probe.phase is Phase.IN_FLIGHT
        if in_batch.count(kg) != pending or in_pipeline.count(kg) != in_flight:
            return False
        if (probe.verdict is None) != (pending or in_flight):
            return False
    return True


def generations_unique_inv(state: State) -> bool:
    """Generations are never reused: each probe's is distinct and below the
    counter, so a stale entry can never be mistaken for a live one."""
    generations = [p.generation for _, p in state.probes]
    if len(set(generations)) != len(generations):
        return False
    everywhere = chain(state.batch, *state.queue, state.held, state.answered, state.posted)
    generations += map(_GENERATION, everywhere)
    return not generations or max(generations) < state.next_generation


def requesters_match_index_inv(state: State) -> bool:
    """The request -> keys index and the probes' requester sets agree (prevents
    cleanup missing a key, or a probe kept alive by a forgotten request)."""
    for request, keys in state.index:
        if not keys:
            return False
        for key in keys:
            probe = probe_of(state, key)
            if probe is None or request not in probe.requesters:
                return False
    return all(
        key in keys_of(state, request)
        for key, probe in state.probes
        for request in probe.requesters
    )


def no_orphaned_probes_inv(state: State) -> bool:
    """A probe without requesters exists only while IN_FLIGHT (prevents leaked
    lookup state once every request is cleaned up and results are drained)."""
    if state.stopped:
        return True
    return all(p.requesters or p.phase is Phase.IN_FLIGHT for _, p in state.probes)


# -- step properties -----------------------------------------------------------


def flush_submits_only_live_entries(
    before: State, action: Action, after: State, output: Output
) -> bool:
    """Flush submits exactly the batch entries whose key has a PENDING state of the
    same generation (the seed bug: a cleaned-up entry was still submitted)."""
    if not isinstance(action, Flush):
        return True
    assert isinstance(output, FlushOutput)

    def live(entry: Entry) -> bool:
        probe = probe_of(before, entry.key)
        return (
            probe is not None
            and probe.generation == entry.generation
            and probe.phase is Phase.PENDING
        )

    return output.submitted == tuple(e for e in before.batch if live(e)) and set(
        output.dropped
    ) == {e for e in before.batch if not live(e)}


def verdicts_come_from_own_generation(
    before: State, action: Action, after: State, output: Output
) -> bool:
    """A verdict lands only from a result of the probe's own generation or from
    mark_miss / mark_present (prevents a late result for a cleaned-up request
    being applied to a new request's probe of the same key)."""
    for key, probe in after.probes:
        if probe.phase is not Phase.RESOLVED:
            continue
        old = probe_of(before, key)
        if old is not None and old.generation == probe.generation and old.phase is Phase.RESOLVED:
            changed = old.verdict != probe.verdict
            if changed and not (
                isinstance(action, MarkMiss) and key in action.keys and probe.verdict is False
            ):
                return False
            continue
        overridden = (
            isinstance(action, MarkPresent)
            and key in action.keys
            and probe.verdict is True
            and probe.generation >= before.next_generation
        )
        landed = (key, probe.generation, probe.verdict) in before.posted
        if not (overridden or landed):
            return False
    if isinstance(action, Lookup):
        looked_up = probe_of(after, action.key)
        return looked_up is not None and output == looked_up.verdict
    return True


def results_applied_within_a_step(
    before: State, action: Action, after: State, output: Output
) -> bool:
    """Flush, and the first lookup after a flush, leave no posted result unapplied
    (a verdict is visible at the latest one step after the worker posted it)."""
    if isinstance(action, Flush) or (isinstance(action, Lookup) and before.drain_due):
        return after.posted == ()
    return True


def tier_answers_every_key(
    before: State, action: Action, after: State, output: Output
) -> bool:
    """Every key of a tier call gets exactly one result of its own generation
    (prevents zip() truncation stranding probes IN_FLIGHT on a short answer)."""
    if not isinstance(action, ProbeGroup):
        return True
    group = group_of(before.held)
    new = after.answered[len(before.answered):]
    return [(r.key, r.generation) for r in new] == [(e.key, e.generation) for e in group] and (
        action.answers is not None or not any(r.verdict for r in new)
    )


def tier_call_holds_one_request(
    before: State, action: Action, after: State, output: Output
) -> bool:
    """A tier call holds only one request's keys, with the context they were batched
    with (prevents probing a key under another request's context)."""
    if not isinstance(action, ProbeGroup):
        return True
    assert isinstance(output, TierCall)
    group = group_of(before.held)
    return output.keys == tuple(e.key for e in group) and all(
        e.request == output.request for e in group
    )


def cleanup_forgets_request(
    before: State, action: Action, after: State, output: Output
) -> bool:
    """After cleanup(r), nothing refers to r (prevents a cancelled request keeping
    probes alive or receiving verdicts)."""
    if not isinstance(action, Cleanup):
        return True
    return not keys_of(after, action.request) and all(
        action.request not in p.requesters for _, p in after.probes
    )


def in_flight_probes_survive_cleanup(
    before: State, action: Action, after: State, output: Output
) -> bool:
    """Cleanup never deletes an IN_FLIGHT probe, so a later request joins it rather
    than probing the key again (efficiency: the redundant-probe bug)."""
    if not isinstance(action, Cleanup):
        return True
    return all(
        probe_of(after, key) is not None
        and probe_of(after, key).generation == probe.generation  # type: ignore[union-attr]
        for key, probe in before.probes
        if probe.phase is Phase.IN_FLIGHT
    )


ALWAYS: tuple[Predicate, ...] = (
    Predicate("flush_submits_only_live_entries", 1, step=flush_submits_only_live_entries),
    Predicate("verdicts_come_from_own_generation", 2, step=verdicts_come_from_own_generation),
    Predicate("phases_match_pipeline_inv", 3, state=phases_match_pipeline_inv),
    Predicate("generations_unique_inv", 3, state=generations_unique_inv),
    Predicate("requesters_match_index_inv", 4, state=requesters_match_index_inv),
    Predicate("cleanup_forgets_request", 4, step=cleanup_forgets_request),
    Predicate("no_orphaned_probes_inv", 5, state=no_orphaned_probes_inv),
    Predicate("results_applied_within_a_step", 6, step=results_applied_within_a_step),
    Predicate("tier_answers_every_key", 7, step=tier_answers_every_key),
    Predicate(
        "in_flight_probes_survive_cleanup",
        8,
        step=in_flight_probes_survive_cleanup,
        efficiency=True,
    ),
    Predicate("tier_call_holds_one_request", 9, step=tier_call_holds_one_request),
)


@dataclass(frozen=True)
class Property:
    """One property of docs/properties.md: number, title, what breaking it means, its bug."""

    number: int
    title: str  # its name in docs/properties.md, e.g. "no cleaned-up entry is submitted"
    explanation: str  # what an implementation that breaks it did wrong, in plain words
    bug: str  # the shipped bug it exists because of

    @property
    def kind(self) -> str:
        """``safety``; ``progress`` for property 6 (a verdict owed that never came: an
        "eventually", not an "always"); ``efficiency`` for property 8 (reported apart)."""
        return {6: "progress", 8: "efficiency"}.get(self.number, "safety")

    @property
    def heading(self) -> str:
        """E.g. ``property 1 (no cleaned-up entry is submitted)``."""
        return f"property {self.number} ({self.title})"

    @property
    def predicates(self) -> tuple[Predicate, ...]:
        """The predicates of ``ALWAYS`` that state it (property 6 is also a search goal)."""
        return tuple(p for p in ALWAYS if p.number == self.number)


PROPERTIES: Mapping[int, Property] = {p.number: p for p in (
    Property(
        1, "no cleaned-up entry is submitted",
        "The tier was asked about a probe that was no longer live when the flush sent it: "
        "flush must re-validate each batch entry against the key's current state and "
        "generation, and drop entries cleaned up or superseded since they were batched.",
        "Flush sent the whole batch without re-validation (the seed bug).",
    ),
    Property(
        2, "no cleaned-up entry is delivered",
        "lookup returned a verdict that is not the verdict of the key's current probe: a "
        "result computed for an older generation, or for a probe that was deleted, was "
        "delivered.  Results must be matched by key AND generation.",
        "Results applied by key only: a late result for a cleaned-up request landed on a "
        "new request's probe of the same key.",
    ),
    Property(
        3, "exactly once",
        "A probe was submitted or given a verdict more than once, or given one it could not "
        "have yet: each probe is submitted at most once and receives at most one verdict "
        "(mark_miss must leave PENDING and IN_FLIGHT probes alone).",
        "mark_miss forced PENDING / IN_FLIGHT probes to RESOLVED, and the probe's own "
        "result then tripped an enqueue-once assertion.",
    ),
    Property(
        4, "bookkeeping",
        "The request index and the probes' requester sets disagree: after cleanup(r) nothing "
        "may refer to r.",
        "Cleanup forgot a request in one table and kept it in the other.",
    ),
    Property(
        5, "no leak",
        "Lookup state leaked: once every request is cleaned up and every result drained, no "
        "probe state, batch entry or queued item may remain.",
        "zip() over keys and results dropped keys when a tier answered too few: their "
        "probes stayed IN_FLIGHT forever.",
    ),
    Property(
        6, "progress",
        "A verdict the worker computed was not delivered in time: a probe with requesters "
        "must be RESOLVED within one step after the worker finished it, and the next lookup "
        "must return its verdict.",
        "One raising tier killed the worker, and every later lookup returned None forever.",
    ),
    Property(
        7, "survival",
        "A tier misbehaviour (an exception, a wrong length, a non-bool, a lazy iterable that "
        "raises, slowness) stopped the worker or the scheduler, or its verdicts were derived "
        "wrongly: every key the tier did not answer properly counts as a miss.",
        "The worker consumed a tier's lazy iterable outside its try block and died.",
    ),
    Property(
        8, "no redundant probe",
        "A key was probed a second time while a probe of it was PENDING or IN_FLIGHT (an "
        "efficiency property): cleanup must keep an orphaned IN_FLIGHT probe so that a later "
        "request joins it.",
        "Cleanup deleted in-flight probes, so a second request re-probed the same key.",
    ),
    Property(
        9, "right context",
        "A key was probed in a tier call that held another request's keys or context: each "
        "tier call holds exactly one request's group, with the context it was batched with.",
        "A worker asked the tier about a whole batch with the first request's context.",
    ),
)}

CRASH = 0  # the model checker's number for an action of the spec that raised
USAGE_EXPLANATION = (
    "A call after shutdown() must fail with the closed-manager error; this one did not."
)


def title_of(number: int | None) -> str:
    """The heading every checker prints: ``property 1 (no cleaned-up entry is submitted)``."""
    if number is None:
        return "usage error (a call after shutdown)"
    if number == CRASH:
        return "an action of the spec raised"
    return PROPERTIES[number].heading


def kind_of(number: int | None) -> str:
    """``safety``, ``progress`` (property 6), ``efficiency`` (property 8), ``usage`` (None)
    or ``crash`` (0)."""
    if number is None:
        return "usage"
    if number == CRASH:
        return "crash"
    return PROPERTIES[number].kind


def explanation_of(number: int | None) -> str:
    """What breaking it means, in plain words (the usage error's too)."""
    if number is None:
        return USAGE_EXPLANATION
    if number == CRASH:
        return "An action of the spec raised instead of returning: the table is broken."
    return PROPERTIES[number].explanation


@dataclass(frozen=True)
class Finding:
    """A broken property as every checker reports it, and writes it in ``--json``.

    ``number``: the property of docs/properties.md (None: a usage error; ``CRASH``: an
    action of the spec raised).  ``detail``: the checker's one-line diagnosis.
    Each checker extends it with its own evidence: the model checker's trace
    and predicate, the oracle's observation and states, the trace checker's event.
    """

    number: int | None
    detail: str

    @property
    def title(self) -> str:
        """E.g. ``property 1 (no cleaned-up entry is submitted)``."""
        return title_of(self.number)

    @property
    def kind(self) -> str:
        """``safety``, ``progress`` (property 6), ``efficiency`` (property 8), ``usage`` or
        ``crash``."""
        return kind_of(self.number)

    @property
    def explanation(self) -> str:
        """What breaking it means, in plain words."""
        return explanation_of(self.number)

    def as_json(self) -> dict[str, object]:
        """The fields every command's ``--json`` writes for a finding (docs/json.md)."""
        return {"property": self.number, "title": self.title, "kind": self.kind,
                "detail": self.detail}


def quiescent(state: State) -> bool:
    """Nothing is asked, queued or owed: the state that progress must reach."""
    return state.stopped or not (
        state.index or state.batch or state.queue or state.held
        or state.answered or state.posted
    )


# -- sometimes: states a search must reach -------------------------------------


def _resolved_present(state: State) -> bool:
    """A requester holds a probe resolved True."""
    return any(p.verdict is True and p.requesters for _, p in state.probes)


def _orphan_in_flight(state: State) -> bool:
    """A probe is IN_FLIGHT with no requesters left (cleanup while in flight)."""
    return any(p.phase is Phase.IN_FLIGHT and not p.requesters for _, p in state.probes)


def _stale_entry_in_batch(state: State) -> bool:
    """The batch holds an entry that the next flush must drop."""
    return any(
        (p := probe_of(state, e.key)) is None or p.generation != e.generation
        for e in state.batch
    )


def _stale_result_posted(state: State) -> bool:
    """A posted result that the next drain must ignore."""
    return any(
        (p := probe_of(state, r.key)) is None or p.generation != r.generation
        for r in state.posted
    )


def _joined_in_flight(state: State) -> bool:
    """A request has joined an IN_FLIGHT probe that was orphaned earlier or shared."""
    return any(p.phase is Phase.IN_FLIGHT and len(p.requesters) > 1 for _, p in state.probes)


SOMETIMES: tuple[tuple[str, StatePredicate], ...] = (
    ("resolved_present", _resolved_present),
    ("orphan_in_flight", _orphan_in_flight),
    ("stale_entry_in_batch", _stale_entry_in_batch),
    ("stale_result_posted", _stale_result_posted),
    ("joined_in_flight", _joined_in_flight),
)


def violated(
    before: State, action: Action, after: State, output: Output
) -> list[Predicate]:
    """The properties that the step ``before --action--> after`` breaks."""
    return [
        prop
        for prop in ALWAYS
        if (prop.state is not None and not prop.state(after))
        or (prop.step is not None and not prop.step(before, action, after, output))
    ]
