"""Partial-order reduction for the model checker: the worker's probe step as a persistent set.

In a state where the worker holds a batch and has answered nothing yet
(``held`` non-empty, ``answered`` empty), the search expands only the enabled
``ProbeGroup`` steps (one per answer vector) instead of every enabled action.
That set is *persistent*: along any run from the state that avoids it, every
action is independent of it.

- The scheduler's actions (lookup, flush, cleanup, mark_miss, mark_present,
  drain) neither read nor write ``held`` or ``answered``; ``ProbeGroup`` reads
  and writes only those two fields.  So each scheduler action and each probe
  step commute, and neither enables or disables the other.
- ``shutdown`` reads ``held`` (it waits for the worker), but it is disabled
  while the worker holds a batch, and no scheduler action changes ``held``.
- ``take_batch`` needs ``held`` empty and ``post`` needs ``answered``
  non-empty: both stay disabled until a probe step happens.

The reduced search checks every property that the full search checks:

- *State invariants*: the invariants read ``held`` and ``answered`` only
  through the multiset of their (key, generation) pairs, and a probe step
  moves exactly one group's pairs from ``held`` to ``answered``.  ``check``
  verifies this move on every reduced expansion (``ProbeFirst.moves_pairs``)
  and expands the state in full where it does not hold (a broken probe step
  that drops or invents results), so an invariant has the same value before
  and after every reduced probe step.
- *Step properties*: every step property of a scheduler action reads neither
  field, and every step property of a probe step reads only ``held``,
  ``answered`` and the output, which postponing scheduler actions leaves as
  they are.
- *Progress* (a quiescent state is reachable from every state): a quiescent
  state holds no batch, so any run from the state to one contains a probe
  step, which commutes to the front.
- *Ignoring* (the cycle proviso): a probe step always shrinks ``held``, so
  no cycle of the reduced graph consists of probe steps only, and no action
  is postponed for ever.

docs/spec.md ("Partial-order reduction") gives the argument in full, and the
tests check it on every broken variant.  The reduction changes distances, so
a counterexample found with it is searched again without it
(``asynclookup.modelcheck.search.check``), so that the report shows a shortest one.

What it does not do: reduce anything else; the other candidate sets (take_batch,
post) are not persistent, for the reasons docs/spec.md gives.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from asynclookup.modelcheck._canon import P_ANSWERED, P_HELD, Ids, apply_picks

# (action number, new field ids, picks, broken step properties): see search.Outcome.
Outcome = tuple[int, Ids, tuple[int, ...] | None, tuple[str, ...]]
Outcomes = tuple[Outcome, ...]


class ProbeFirst:
    """Chooses the probe steps alone where they form a persistent set."""

    __slots__ = ("_moves", "_probe", "_values")

    def __init__(
        self,
        probe: Callable[[Ids, Callable[[], Any]], Outcomes],
        values: Sequence[list[Any]],
    ) -> None:
        self._probe = probe
        self._values = values
        self._moves: dict[tuple[int, int, int], bool] = {}

    def __call__(self, ids: Ids, build: Callable[[], Any]) -> list[Outcomes] | None:
        """The probe outcomes of a state that holds a batch and has answered nothing,
        if they form a persistent set; None to expand every action."""
        outcomes = self._probe(ids, build)
        return [outcomes] if self.chooses(ids, outcomes) else None

    def chooses(self, ids: Ids, outcomes: Outcomes) -> bool:
        """Whether the probe ``outcomes`` of a state that holds a batch and has
        answered nothing form a persistent set (else every action is expanded)."""
        if not outcomes:
            return False
        for _, new, picks, bad in outcomes:
            if bad:
                continue  # the search reports this step as a violation
            if picks is None:
                return False  # a probe step that changes nothing: not the protocol's
            after = apply_picks(ids, new, picks)
            if not self.moves_pairs(ids[P_HELD], after[P_HELD], after[P_ANSWERED]):
                return False
        return True

    def moves_pairs(self, held: int, held_after: int, answered_after: int) -> bool:
        """Whether a probe step from ``held`` (nothing answered) to ``held_after``
        and ``answered_after`` (value ids) keeps the multiset of (key, generation)
        pairs and shrinks ``held``."""
        key = (held, held_after, answered_after)
        known = self._moves.get(key)
        if known is None:
            before = self._values[P_HELD][held]
            after_held = self._values[P_HELD][held_after]
            after_answered = self._values[P_ANSWERED][answered_after]
            pairs = Counter((e.key, e.generation) for e in before)
            moved = Counter((e.key, e.generation) for e in after_held)
            moved.update((r.key, r.generation) for r in after_answered)
            known = self._moves[key] = pairs == moved and len(after_held) < len(before)
        return known
