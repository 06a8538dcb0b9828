"""The model checker's partial-order reduction (persistent sets) finds what the full search finds.

The reduced search expands only the worker's probe steps where the worker
holds a batch and has answered nothing (``asynclookup.modelcheck._persistent``).
These tests check, on every broken variant, that every property the full
search finds broken the reduced search finds broken too, that a probe step
which does not move its pairs from ``held`` to ``answered`` turns the reduction
off there, and that the report's counterexample is the full search's shortest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest

from asynclookup.modelcheck import report as _report
from asynclookup.modelcheck._canon import P_ANSWERED, P_HELD, Reductions, Space
from asynclookup.modelcheck._persistent import ProbeFirst
from asynclookup.modelcheck.search import PROGRESS, Bounds, check, default_reductions
from asynclookup.spec.core import (
    TRANSITIONS,
    Entry,
    ProbeGroup,
    Result,
    State,
    TierCall,
    Transition,
    probe_group,
)
from asynclookup.spec.properties import ALWAYS
from asynclookup.spec.variants import VARIANTS

NAMES = (*(p.name for p in ALWAYS), PROGRESS)
ONE_KEY = Bounds(1, 2, batch_entries=1, queued_batches=1, posted_results=1)
TWO_KEYS = Bounds(2, 1, batch_entries=2, queued_batches=1, posted_results=2, verdicts=(False,))
TWO_BY_TWO = Bounds(2, 2, batch_entries=2, queued_batches=1, posted_results=2, verdicts=(False,))
# The two variants whose bug needs two keys in one batch, at the smallest bounds that show it.
BOUNDS = {"tier-short-answer": TWO_KEYS, "wrong-request-context": TWO_BY_TWO}
CAP = 3000  # states: the full searches of the 2-key bounds stop here when they find nothing
Table = Mapping[type, Transition]


def _off(table: Table) -> Reductions:
    return replace(default_reductions(table), persistent=False)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_reduced_search_finds_every_violation_of_the_full_search(name: str) -> None:
    """For each predicate (and progress) checked alone, a violation the full search finds
    is found by the reduced search too, with the same predicate."""
    table, bounds = VARIANTS[name].table, BOUNDS.get(name, ONE_KEY)
    cap = CAP if name in BOUNDS else None
    found = []
    for prop in NAMES:
        full = check(bounds, table, reductions=_off(table), properties=[prop], max_states=cap)
        if full.violation is None:
            continue
        reduced = check(bounds, table, properties=[prop], shortest=False)
        assert reduced.violation is not None, prop
        assert reduced.violation.predicate == prop
        found.append(prop)
    assert found, "the variant breaks nothing within these bounds"


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_report_gives_the_full_searchs_shortest_counterexample(name: str) -> None:
    """With persistent sets on, the reported violation is the full search's, step for step."""
    table, bounds = VARIANTS[name].table, BOUNDS.get(name, ONE_KEY)
    reduced, full = check(bounds, table), check(bounds, table, reductions=_off(table))
    assert reduced.reductions.persistent and reduced.shortest and reduced.research_states
    assert reduced.violation == full.violation
    assert "searched again without persistent sets" in _report.text(reduced, name, 0.0)


def test_reduced_search_of_the_spec_judges_as_the_full_one() -> None:
    """On the spec the reduced search holds, reaches the full one's goals, and is smaller."""
    for bounds in (ONE_KEY, TWO_KEYS, Bounds(1, 2)):
        reduced, full = check(bounds), check(bounds, reductions=_off(TRANSITIONS))
        assert reduced.holds and full.holds and reduced.stuck == 0
        assert reduced.sometimes == full.sometimes
        assert reduced.states < full.states and reduced.transitions < full.transitions


def _probe_group_inventing(state: State, action: ProbeGroup) -> tuple[State, TierCall]:
    """The spec's probe step, plus a second copy of the group's first result."""
    after, call = probe_group(state, action)
    return after._replace(answered=after.answered + after.answered[:1]), call


def test_a_probe_step_that_invents_results_is_expanded_in_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A planted probe step that duplicates a result gets no reduction: the reduced search
    visits every state of the full one, and would not without the guard."""
    table: Table = {
        **TRANSITIONS, ProbeGroup: TRANSITIONS[ProbeGroup]._replace(apply=_probe_group_inventing)
    }
    names = ["generations_unique_inv"]  # holds: both searches run to their fixpoint
    full = check(ONE_KEY, table, reductions=_off(table), properties=names)
    reduced = check(ONE_KEY, table, properties=names)
    assert full.fixpoint and reduced.fixpoint and reduced.states == full.states
    monkeypatch.setattr(ProbeFirst, "moves_pairs", lambda self, *ids: True)
    assert check(ONE_KEY, table, properties=names).states < full.states


def test_moves_pairs_accepts_only_a_move_from_held_to_answered() -> None:
    """moves_pairs is true for the spec's probe step and false for one that drops a result."""
    space = Space((b"k0", b"k1"), ("A",), Reductions())
    held = (Entry(b"k0", "A", 0), Entry(b"k1", "A", 1))
    answers = (Result(b"k0", 0, True), Result(b"k1", 1, False))
    ids = [space.intern(P_HELD, held), space.intern(P_HELD, ())]
    moved, dropped = (space.intern(P_ANSWERED, a) for a in (answers, answers[:1]))
    chooser = ProbeFirst(lambda ids, build: (), space.values)
    assert chooser.moves_pairs(ids[0], ids[1], moved)
    assert not chooser.moves_pairs(ids[0], ids[1], dropped)
    assert not chooser.moves_pairs(ids[0], ids[0], space.intern(P_ANSWERED, ()))


def test_a_kept_graph_is_the_full_graph() -> None:
    """--dot (keep_graph) turns the reduction off, so a drawing shows every transition."""
    kept = check(ONE_KEY, keep_graph=True)
    assert not kept.reductions.persistent
    assert kept.states == check(ONE_KEY, reductions=_off(TRANSITIONS)).states


def test_packed_keys_round_trip() -> None:
    """A state's packed key unpacks to its canonical ids."""
    space = Space((b"k0",), ("A", "B"), Reductions())
    ids = space.canonical_of(State(drain_due=True))
    assert space.unpack(space.pack(ids)) == ids and len(space.pack(ids)) == 18
