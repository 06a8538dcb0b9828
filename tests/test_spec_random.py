"""Random enabled action sequences over small universes keep every ALWAYS property.

The driver draws, at each step, one action among those *enabled* in the current
state (over two keys and three requests), so no run is thrown away by
``assume()``; after every step it asks ``asynclookup.spec.properties.violated`` and the
contracts' ``well_formed``.  The same driver over a broken table
(``asynclookup.spec.variants``) must report the broken property: a test that cannot fail
proves nothing.  A small exhaustive search adds that every state reachable in a
few steps is ``well_formed``, so the CrossHair contracts' precondition never
excludes a state the protocol can reach.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from asynclookup.spec.core import (
    INITIAL,
    TRANSITIONS,
    Action,
    Cleanup,
    Drain,
    Flush,
    Lookup,
    MarkMiss,
    MarkPresent,
    Post,
    ProbeGroup,
    Shutdown,
    State,
    TakeBatch,
    Transition,
    enabled,
    group_of,
    step,
    well_formed,
)
from asynclookup.spec.properties import violated
from asynclookup.spec.variants import VARIANTS

KEYS = (b"k0", b"k1")
REQUESTS = ("A", "B", "C")
KEY_SETS = tuple(
    keys for n in range(1, len(KEYS) + 1) for keys in itertools.combinations(KEYS, n)
)
MAX_STEPS = 40


def candidates(state: State) -> list[Action]:
    """Every action over KEYS and REQUESTS that a table might enable in ``state``.

    Answers of every length up to the held group's are offered, so that a broken
    table that accepts a short answer can take one; the spec's table enables
    only the right length.
    """
    actions: list[Action] = [Lookup(k, r) for k in KEYS for r in REQUESTS]
    actions += [Cleanup(r) for r in REQUESTS]
    actions += [MarkMiss(keys) for keys in KEY_SETS] + [MarkPresent(keys) for keys in KEY_SETS]
    actions += [Flush(), Drain(), Shutdown(), TakeBatch(), Post(), ProbeGroup(None)]
    size = len(group_of(state.held))
    actions += [
        ProbeGroup(answers)
        for n in range(1, size + 1)
        for answers in itertools.product((True, False), repeat=n)
    ]
    return actions


def drive(data: st.DataObject, table: Mapping[type, Transition]) -> None:
    """Run up to MAX_STEPS enabled actions of ``table``; fail on the first broken property."""
    state = INITIAL
    for _ in range(data.draw(st.integers(0, MAX_STEPS), label="steps")):
        choices = [a for a in candidates(state) if enabled(state, a, table)]
        action = data.draw(st.sampled_from(choices), label="action")
        after, output = step(state, action, table)
        broken = [prop.name for prop in violated(state, action, after, output)]
        assert not broken, f"{action!r} breaks {broken}"
        assert well_formed(after), f"{action!r} leaves a state that is not well_formed"
        state = after


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_runs_keep_every_property(data: st.DataObject) -> None:
    """Every random run of enabled spec actions keeps every ALWAYS property and well_formed."""
    drive(data, TRANSITIONS)


def catches(variant: str) -> str:
    """The failure message of the driver over ``variant``'s table (derandomised)."""

    @settings(max_examples=500, deadline=None, database=None, derandomize=True,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(st.data())
    def broken(data: st.DataObject) -> None:
        drive(data, VARIANTS[variant].table)

    with pytest.raises(AssertionError) as failure:
        broken()
    return str(failure.value)


def test_random_runs_catch_the_seed_bug() -> None:
    """The driver reports property 1 when flush does not re-validate its batch."""
    assert "flush_submits_only_live_entries" in catches("flush-no-revalidate")


def test_random_runs_catch_the_stale_result_bug() -> None:
    """The driver reports property 2 when results are applied by key only."""
    assert "verdicts_come_from_own_generation" in catches("drain-no-generation-check")


def test_property_8_is_a_step_property_of_cleanup() -> None:
    """(g) A state alone cannot tell a redundant probe from one that mark_present superseded:
    the spec's own runs hold an old generation in flight beside a new probe, so property 8
    is checked on cleanup steps instead."""
    before = INITIAL
    for action in (Lookup(KEYS[0], "A"), Flush(), MarkPresent((KEYS[0],))):
        after, output = step(before, action)
        assert violated(before, action, after, output) == []
        before = after
    assert before.queue[0][0].generation == 0 and before.probes[0][1].generation == 1
    assert "in_flight_probes_survive_cleanup" in catches("cleanup-deletes-in-flight")


def reachable(depth: int, keys: tuple[bytes, ...], requests: tuple[str, ...]) -> set[State]:
    """Every state the spec reaches from INITIAL in at most ``depth`` steps."""
    actions: list[Action] = [Lookup(k, r) for k in keys for r in requests]
    actions += [Cleanup(r) for r in requests] + [MarkMiss(keys), MarkPresent(keys)]
    actions += [Flush(), Drain(), Shutdown(), TakeBatch(), Post(), ProbeGroup(None)]
    actions += [ProbeGroup((True,))]
    seen, frontier = {INITIAL}, {INITIAL}
    for _ in range(depth):
        frontier = {
            step(state, action)[0]
            for state in frontier
            for action in actions
            if enabled(state, action)
        } - seen
        seen |= frontier
    return seen


def test_every_reachable_state_is_well_formed() -> None:
    """Every state within 6 steps (two keys, two requests) meets the contracts' precondition."""
    states = reachable(6, KEYS, REQUESTS[:2])
    assert len(states) > 5000
    assert all(well_formed(state) for state in states)


def test_well_formed_rejects_a_malformed_state() -> None:
    """well_formed is false for an unsorted probe table and for work left after shutdown."""
    state = step(step(INITIAL, Lookup(KEYS[1], "A"))[0], Lookup(KEYS[0], "A"))[0]
    assert well_formed(state)
    assert not well_formed(state._replace(probes=state.probes[::-1]))
    assert not well_formed(state._replace(stopped=True))
