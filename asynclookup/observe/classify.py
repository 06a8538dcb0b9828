"""Name the property (docs/properties.md) that excludes an observation.

When ``asynclookup.observe.engine.Checker`` finds that no possible spec state explains an
observation, ``classify`` looks at the states that were possible just before
it and says which rule the implementation broke, in the protocol's words:

- a lookup verdict no state allows: None where every state has a verdict is
  progress (6); a verdict where the probe is still unresolved is a delivered
  stale or forced verdict (2), or exactly-once (3) when a mark_miss named that
  very probe while it was unresolved; a wrong bool from a faulty tier call is
  survival (7);
- a tier call that leaves out of its request's group only keys whose earlier tier
  call was faulty: their old probes are still in flight in the class, stranded (6);
- a tier call no state owes: a key the request already shares a probe of is a
  redundant probe (8), unless that probe was never in flight at a cleanup and the
  request's own entry for the key was stale at a flush (that entry submitted: 1);
  a key with no live submitted probe is a cleaned-up entry submitted (1); a call
  that skips owed groups is a probe cleanup cancelled (8) or a batch taken early
  (6) (``asynclookup.observe.skips``); owed keys in the wrong grouping or context
  are right context (9), also where the request's stale entry shares the keys, if
  the call is exactly another request's group and the request has its own;
- a worker step the spec does not allow, a stall or a dead worker: progress (6),
  exactly once (3) or survival (7); a stall, or a shutdown that returns, on calls
  a cleanup cancelled: 8;
- tables left in the IUT where the spec holds nothing: bookkeeping (4) when the
  request index still holds a request, otherwise no leak (5).

It only reads states and observations; the choice is a diagnosis for the
report, not part of the acceptance check.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Protocol

from asynclookup.observe import skips
from asynclookup.observe.observations import (
    DrainSeen,
    FlushSeen,
    Hung,
    Leftover,
    LookupSeen,
    Observation,
    Overdue,
    PostSeen,
    ProbeGroupSeen,
    ShutdownSeen,
    Stalled,
    Tables,
    TakeBatchSeen,
    TierCallSeen,
    WorkerDied,
)
from asynclookup.spec import core
from asynclookup.spec.core import Phase, State

FORCED_BY_MARK_MISS = (
    "mark_miss forced a verdict on a PENDING/IN_FLIGHT probe, which would receive a "
    "second one from the worker"
)
NO_VALUE = object()  # in ``Checker.faulty``: the faulty tier call gave no value for the key

TIER_ANSWER_RULE = (
    "the tier-answer rule (docs/protocol.md, 'A tier that raises or answers short': "
    "a tier that raises, answers too few or too many results, or non-bool values "
    "yields False for every key it did not answer properly)"
)


class Checker(Protocol):
    """What the classifier reads of the engine's ``Checker``: the evidence of the run so far.

    A protocol, not the class itself, so that the engine imports the classifier
    and not the reverse.
    """

    @property
    def states(self) -> tuple[State, ...]: ...

    @property
    def stopped(self) -> bool: ...

    @property
    def flush_dropped(self) -> bool: ...

    @property
    def ever_dropped(self) -> bool: ...

    @property
    def faulty(self) -> Mapping[tuple[bytes, int], object]: ...

    @property
    def missed(self) -> Collection[tuple[bytes, int]]: ...

    @property
    def stale(self) -> Collection[tuple[bytes, int]]: ...

    @property
    def dropped(self) -> Collection[tuple[bytes, str]]: ...

    @property
    def orphaned(self) -> Collection[tuple[bytes, str, int]]: ...

    @property
    def cleaned(self) -> Mapping[str, int]: ...


def classify(
    checker: Checker, obs: Observation, before: Mapping[State, bool]
) -> tuple[int, str]:
    """The property number that excludes ``obs`` from ``before``, and why, in one line."""
    states = list(before)
    if isinstance(obs, LookupSeen):
        return _lookup(checker, obs, states)
    if isinstance(obs, TierCallSeen):
        return _tier_call(checker, obs, states)
    if isinstance(obs, TakeBatchSeen):
        if obs.took and checker.flush_dropped:
            return 1, (
                "take_batch() took a batch although the last flush had only stale "
                "entries to drop: they were submitted"
            )
        if obs.took:
            return 3, "take_batch() took a batch although no flushed batch was waiting"
        return 6, "take_batch() took nothing although a flushed batch was waiting"
    if isinstance(obs, ProbeGroupSeen):
        return 6, "probe_group() probed nothing although the worker holds a batch"
    if isinstance(obs, PostSeen):
        if obs.posted:
            return 3, "post() posted although the worker had nothing answered"
        return 6, "post() posted nothing although the worker had answered results"
    if isinstance(obs, Overdue):
        if obs.key is not None and obs.request is not None:
            # a None that is the tier's own None passed through is the tier-answer rule
            seen = LookupSeen(obs.key, obs.request, None)
            probes = [p for s in states if (p := core.probe_of(s, obs.key)) is not None]
            said = f"lookup({obs.key!r}, {obs.request!r}) kept returning None"
            rule = _tier_answer_rule(checker, seen, probes, said)
            if rule is not None:
                return rule
        return _overdue(obs, states)
    if isinstance(obs, Stalled):
        if not obs.worker_alive:
            return 7, f"the worker died: no {obs.waiting_for} came and its thread is gone"
        cancelled = skips.name_stall(states, obs.waiting_for, checker.orphaned, checker.cleaned)
        if cancelled is not None:
            return cancelled
        return 6, f"no {obs.waiting_for} came within the bound although the spec owes one"
    if isinstance(obs, Hung):
        return 6, f"{obs.call} did not return within {obs.seconds:.1f} s"
    if isinstance(obs, Tables):
        if not any(frozenset(r for r, _ in s.index) == obs.requests for s in states):
            shown = sorted(r for r, _ in states[0].index)
            return 4, (
                f"the request index holds {sorted(obs.requests)}; the spec's holds {shown} "
                "(a cleaned-up request is still indexed, or a live one is missing)"
            )
        shown_keys = sorted(k for k, _ in states[0].probes)
        return 5, (
            f"lookup state is held for keys {sorted(obs.keys)}; the spec holds "
            f"{shown_keys} (a probe that should be gone was kept, or the reverse)"
        )
    if isinstance(obs, Leftover):
        if "index" in obs.roles:
            return 4, (
                "with every request cleaned up and every result drained, the request index "
                f"still holds {obs.tables}: after cleanup(r), nothing may refer to r"
            )
        if obs.requests:
            named = ", ".join(repr(r) for r in sorted(obs.requests))
            return 4, (
                f"with every request cleaned up, the IUT's probes still refer to {named} "
                f"({obs.tables}): after cleanup(r), nothing may refer to r"
            )
        return 5, (
            "with every request cleaned up and every result drained, the IUT still "
            f"holds {obs.tables}"
        )
    if isinstance(obs, WorkerDied):
        return 7, f"the worker died before shutdown{': ' + obs.reason if obs.reason else ''}"
    if isinstance(obs, ShutdownSeen):
        cancelled = skips.name_short_shutdown(states, checker.orphaned, checker.cleaned)
        if cancelled is not None:
            return cancelled
        return 6, "shutdown() returned although the batch in hand was not probed and posted" + (
            _STALE_HINT if checker.ever_dropped else ""
        )
    return 2, f"{type(obs).__name__} is not explained by any possible spec state"


def raised(checker: Checker, obs: Observation, error: str) -> tuple[int, str]:
    """An exception from a call the spec allows: survival (7), unless the call was
    due to apply a result that would be its probe's second verdict if applied by
    key (the shipped bugs' assertions): exactly once (3).  That is a result whose
    probe a mark_miss named while unresolved, or a stale result (an older
    generation) for a key whose current probe has a verdict.  A probe mark_miss
    named while unresolved in some state still counts when the spec explained its
    verdict since by an early drain only (the IUT drains later, and its own result
    then trips the IUT's enqueue-once assert)."""
    name = "shutdown()" if isinstance(obs, ShutdownSeen) else "the IUT"
    detail = f"{name} raised {error}" + (
        "" if isinstance(obs, ShutdownSeen) else " although the spec's action is enabled"
    )
    worker_died = "worker thread died" in error  # the crash is the worker's, not the call's
    if isinstance(obs, LookupSeen | FlushSeen | DrainSeen | ShutdownSeen) and not worker_died:
        for state in checker.states:
            # what the call applies; shutdown also finishes the worker's pipeline
            due = [(r.key, r.generation) for r in state.posted]
            if isinstance(obs, ShutdownSeen):
                due += [(r.key, r.generation) for r in state.answered]
                due += [(e.key, e.generation) for e in _owed(state)]
            for key, generation in due:
                if (key, generation) in checker.missed:
                    return 3, (
                        f"{detail}; it was to apply {key!r}'s result (g{generation}), "
                        "whose probe mark_miss named while unresolved: a second verdict"
                    )
                p = core.probe_of(state, key)
                if p is not None and p.generation != generation and p.verdict is not None:
                    return 3, (
                        f"{detail}; it was to apply a stale result (g{generation}) for "
                        f"{key!r}, whose current probe g{p.generation} has its verdict: "
                        "applied by key, it is a second verdict"
                    )
        for state in checker.states:
            # a stale result for a key whose newer probe has no verdict yet: applied by
            # key (or matched by a reused generation), it gives that probe a verdict,
            # and the probe's own result is then its second one
            for key, generation in [(r.key, r.generation) for r in state.posted]:
                p = core.probe_of(state, key)
                if p is not None and p.generation != generation:
                    return 3, (
                        f"{detail}; it was to apply a stale result (g{generation}) for "
                        f"{key!r}, whose current probe is g{p.generation}: applied by key "
                        "(or matched by a reused generation), the probe gets two verdicts"
                    )
        for key, generation in sorted(checker.missed):
            if any(
                (p := core.probe_of(state, key)) is not None and p.generation == generation
                and p.phase is Phase.RESOLVED
                for state in checker.states
            ):
                # the spec has the result applied, by an early drain the IUT need not
                # have made: the IUT applies it now, after mark_miss forced a verdict
                return 3, (
                    f"{detail}; mark_miss named {key!r}'s probe g{generation} while it was "
                    "unresolved (its verdict since is explained only by an early drain): "
                    "the probe's own result, applied now, is its second verdict"
                )
    return 7, detail


def efficiency_detail(checker: Checker, obs: Observation, efficient: Mapping[State, bool]) -> str:
    """Why only states with an inefficient cleanup explain ``obs``."""
    if isinstance(obs, Tables):
        return "only explained if cleanup deleted an orphaned IN_FLIGHT probe (the tables lack it)"
    _, why = classify(checker, obs, efficient)
    return (
        "only explained if cleanup deleted an orphaned IN_FLIGHT probe, so that the "
        f"key is probed a second time ({why})"
    )


_STALE_HINT = (
    "; a flush dropped stale entries earlier: one submitted anyway, probed in a live "
    "entry's place, looks like this (property 1)"
)


def _verdicts(state: State, obs: LookupSeen) -> set[bool | None]:
    """What the spec's lookup may return in ``state`` (with or without an early drain)."""
    action = core.Lookup(obs.key, obs.request)
    out: set[bool | None] = set()
    for start in (state, core.apply_posted(state)):
        if core.lookup_enabled(start, action):
            out.add(core.lookup(start, action)[1])
    return out


def observed(obs: Observation) -> str | None:
    """What ``obs`` showed, in the words a detail of ``classify`` opens with (None: a kind
    whose details open otherwise)."""
    if isinstance(obs, LookupSeen):
        return f"lookup({obs.key!r}, {obs.request!r}) returned {obs.verdict!r}"
    if isinstance(obs, TierCallSeen):
        return _probed(obs)
    if isinstance(obs, Overdue):
        if obs.key is not None:
            return (
                f"lookup({obs.key!r}, {obs.request!r}) still returned None after re-asking "
                "(drain_results() and the lookup) for the whole bound"
            )
        return "the tables still held it after re-asking drain_results() for the whole bound"
    return None


def opening(detail: str, obs: Observation) -> str:
    """``detail`` (of a finding at ``obs``) up to the first ': ' after what ``obs`` showed:
    its opening words, which name what was seen (a key's bytes may hold ': ' too)."""
    seen = observed(obs)
    skip = len(seen) if seen is not None and detail.startswith(seen) else 0
    head, colon, _ = detail[skip:].partition(": ")
    return detail[:skip] + head if colon else detail


def _probed(obs: TierCallSeen) -> str:
    return f"the worker probed {list(obs.keys)!r} for {obs.request!r}"


def _overdue(obs: Overdue, states: list[State]) -> tuple[int, str]:
    """A post that did not come: what the worker held, and how long it was waited for."""
    if not obs.worker_alive:
        return 7, "the worker died: it never posted what the tier answered, its thread is gone"
    held = sorted(
        {(r.key, r.verdict) for s in states for r in s.posted + s.answered}, key=repr
    )
    answered = ", ".join(f"{key!r}: {verdict!r}" for key, verdict in held) or "every call"
    return 6, (
        f"{observed(obs)}: its verdict ({answered}) was due, with no tier call owed, yet the "
        "worker never posted it"
    )


def _lookup(checker: Checker, obs: LookupSeen, states: list[State]) -> tuple[int, str]:
    allowed: set[bool | None] = set()
    for state in states:
        allowed |= _verdicts(state, obs)
    shown = ", ".join(sorted(map(repr, allowed)))
    said = f"{observed(obs)}; the spec allows {shown}"
    probes = [p for s in states if (p := core.probe_of(s, obs.key)) is not None]
    faulty = any((obs.key, p.generation) in checker.faulty for p in probes)
    tier_answer = _tier_answer_rule(checker, obs, probes, said)
    if tier_answer is not None:
        return tier_answer
    if obs.verdict is None:
        lost = skips.name_lost_verdict(states, obs.key, obs.request)
        if lost is not None:
            return lost
        note = " (its tier call was faulty)" if faulty else ""
        note += _STALE_HINT if checker.ever_dropped and not faulty else ""
        return 6, f"{said}: a verdict the worker computed was not delivered{note}"
    if type(obs.verdict) is not bool:
        return 2, f"{said}: a verdict must be True, False or None"
    unresolved = [p for p in probes if p.phase is not Phase.RESOLVED]
    stale = any((obs.key, p.generation) in checker.stale for p in probes)
    if stale:
        return 2, f"{said}: a stale result (of an older generation) was applied by key"
    # an orphan's posted result delivered: only where this lookup drains (else no drain
    # since the post could have applied it, and a False is mark_miss's, below)
    orphaned = any(
        s.drain_due and r.key == obs.key and (p := core.probe_of(s, r.key)) is not None
        and p.generation == r.generation and not p.requesters
        for s in states for r in s.posted
    )
    if orphaned:
        return 2, (
            f"{said}: the verdict of an orphaned probe (every requester cleaned up), which "
            "the spec deletes (by its own result, or at the cleanup once resolved), was "
            "delivered to a new requester"
        )
    if unresolved and None in allowed:
        if obs.verdict is False and any(
            (obs.key, p.generation) in checker.missed for p in unresolved
        ):
            return 3, f"{said}: {FORCED_BY_MARK_MISS}"
        return 2, f"{said}: the key's current probe has no verdict yet (a stale result?)"
    if faulty:
        return 7, f"{said}: the verdict was derived wrongly from a faulty tier answer"
    return 2, f"{said}: not the verdict of the key's current probe"


def _tier_answer_rule(
    checker: Checker, obs: LookupSeen, probes: list[core.Probe], said: str
) -> tuple[int, str] | None:
    """Property 7, when the verdict is what the key's faulty tier answer gave, passed
    through or coerced with bool(), instead of False."""
    for p in probes:
        given = checker.faulty.get((obs.key, p.generation), NO_VALUE)
        if given is NO_VALUE or type(given) is bool:
            continue
        if obs.verdict is None and given is not None:
            continue  # no verdict yet is no verdict derived from the answer: not this rule
        if type(obs.verdict) is type(given) and obs.verdict == given:
            how = "passed the tier's non-bool value through as the verdict"
        elif type(obs.verdict) is not bool:
            how = "returned a non-bool verdict"
        elif obs.verdict is bool(given):
            how = f"coerced it with bool() to {obs.verdict!r}"
        else:
            continue
        return 7, (
            f"{said}: the tier answered {given!r} for {obs.key!r}, not a bool, and the IUT "
            f"{how}; by {TIER_ANSWER_RULE} the verdict is False"
        )
    if type(obs.verdict) is not bool and obs.verdict is not None:
        return 7, (
            f"{said}: a verdict must be True, False or None; a non-bool tier answer yields "
            f"False by {TIER_ANSWER_RULE}"
        )
    return None


def _owed(state: State) -> list[core.Entry]:
    """The entries the worker still has to probe: held first, then queued."""
    return list(state.held) + [e for batch in state.queue for e in batch]


def _another_owed_group(states: list[State], obs: TierCallSeen) -> bool:
    """Whether, in some state, ``obs``'s keys are exactly another request's group of the
    batch in hand while ``obs.request`` has a group of its own there: grouped as the
    protocol says, asked with the wrong context.  A stale entry of ``obs.request``'s,
    submitted anyway, would have come in its own group, beside its live keys.  (The
    whole batch in one call, in its order, is no such sign: a stale entry of the
    request's that shares its key with another request's live one looks the same.)"""
    call = frozenset(obs.keys)
    for state in states:
        groups = skips.request_groups(state.held)
        if obs.request in groups and any(
            request != obs.request and keys == call for request, keys in groups.items()
        ):
            return True
    return False


def _stranded_keys(
    checker: Checker, obs: TierCallSeen, states: list[State]
) -> frozenset[bytes]:
    """The keys ``obs`` leaves out of its request's group of the batch in hand (in some
    state, the call holds only part of that group, nothing else), when every one of
    them had an earlier probe whose tier call was faulty: a class that did not settle
    that probe still holds it in flight and so does not submit the key again."""
    call = frozenset(obs.keys)
    for state in states:
        first = state.held or (state.queue[0] if state.queue else ())
        group = skips.request_groups(first).get(obs.request, frozenset())
        left_out = group - call
        if not call < group:
            continue
        if all(any(k == key for k, _ in checker.faulty) for key in left_out):
            return left_out
    return frozenset()


def _stale_submitted(call: str, request: str, key: bytes) -> str:
    return (
        f"{call}: {request!r}'s entry for {key!r} was stale at a flush "
        "(cleaned up or superseded), so it must have been dropped"
    )


def _tier_call(checker: Checker, obs: TierCallSeen, states: list[State]) -> tuple[int, str]:
    call = _probed(obs)
    if checker.stopped:
        return 1, f"{call} after shutdown(): nothing is live after shutdown"
    for key in obs.keys:
        owed_anywhere = any(e.key == key for s in states for e in _owed(s))
        if owed_anywhere:
            continue
        shared = [
            p for s in states
            if (p := core.probe_of(s, key)) is not None and obs.request in p.requesters
            and p.phase is not Phase.RESOLVED
        ]
        if shared:
            p = shared[0]
            # a second probe needs the first in flight at a cleanup, which deleted it;
            # without one, this request's stale entry for the key was submitted (1)
            cleaned_in_flight = p.phase is Phase.IN_FLIGHT and any(
                below > p.generation for below in checker.cleaned.values())
            if (key, obs.request) in checker.dropped and not cleaned_in_flight:
                return 1, _stale_submitted(call, obs.request, key)
            return 8, (
                f"{call}: {obs.request!r} already shares {key!r}'s probe "
                f"(g{p.generation} {p.phase.name}); probing it again is redundant"
            )
        return 1, (
            f"{call}: {key!r} has no live probe that a flush submitted "
            "(cleaned up, superseded or never flushed)"
        )
    repeated = sorted({k for k in obs.keys if obs.keys.count(k) > 1})
    if repeated:
        return 1, (
            f"{call}: {repeated[0]!r} appears twice in one call, so a stale batch entry "
            "was submitted beside the live one"
        )
    if not any((key, obs.request) in checker.dropped for key in obs.keys):
        skip = skips.name_skip(states, obs, call, checker.orphaned, checker.cleaned)
        if skip is not None:
            return skip
    # another request's group asked with this request's context is 9, even where this
    # request's entry for those keys was stale: submitted anyway, that entry would have
    # come in this request's own group, beside its live keys
    whole = _another_owed_group(states, obs)
    for state in states:
        for key in obs.keys:
            mine = [e for e in _owed(state) if e.key == key]
            if not mine or any(e.request == obs.request for e in mine):
                continue
            if (key, obs.request) in checker.dropped and not whole:
                return 1, _stale_submitted(call, obs.request, key)
            return 9, (
                f"{call}: {key!r} was batched for {mine[0].request!r}, "
                "so it must be probed with that request's context"
            )
    stranded = _stranded_keys(checker, obs, states)
    if stranded:
        return 6, (
            f"{call}, leaving out {sorted(stranded)!r} of that request's group: an "
            "earlier tier call answered it faultily, and the class still holds that "
            "probe in flight, stranded, where the tier-answer rule (docs/protocol.md, "
            "'A tier that raises or answers short') settles it with False"
        )
    if all((key, obs.request) in checker.dropped for key in obs.keys):
        # not a group of the batch in hand, and every key of it is one this request's
        # entry for was stale at a flush: that stale entry was submitted anyway
        return 1, (
            f"{call}: {obs.request!r}'s entries for these keys were stale at a flush "
            "(cleaned up or superseded), so they must have been dropped; the call is "
            "not a group of the batch in hand, but the stale entries submitted anyway"
        )
    return 9, f"{call}: a tier call must hold exactly one request's group of the batch in hand"
