"""Steps of the fast engine that leave the worker alone, when the worker's steps are hidden.

Theory of operation
-------------------
With hidden worker steps the fast engine (``asynclookup.observe.fast``) keeps
several possible states, and its general step of an observation steps each,
then merges, trims and closes the set under hidden ``take_batch`` and
``post`` (``asynclookup.observe.states.StateSet._commit``).  Two common
observations need none of that when what they touch is *apart*, held alike
by every state in the shared table ``base`` and in no state's overlay:

- a lookup of such a key (``_lookup_apart``) changes every start alike, so
  it commutes with the merging, trimming and closing, and with the early
  drain a lookup may do: the result is the lookup applied to what that
  machinery makes of the starts, computed once and kept while the set stays
  closed under the early drain;
- a cleanup of a request whose keys are all apart, leaving no orphaned
  IN_FLIGHT probe (``_cleanup_apart``), changes ``base`` alone.

Each falls back to the general step (returns False, having changed
nothing) wherever the argument does not hold.  tests/test_observe_fast.py
compares the resulting states, their order, tags and notes with the exact
engine's after every observation, and catches a planted shortcut of each.
"""

from __future__ import annotations

from asynclookup.observe.interface import ORACLE_BOUNDS
from asynclookup.observe.states import (
    IN_FLIGHT,
    MERGE_AT,
    PENDING,
    H,
    P,
    StateSet,
)


class Apart(StateSet):
    """A ``StateSet`` with the lookup and cleanup that leave the worker alone."""

    def __init__(
        self, *, hidden_worker: bool, max_states: int = ORACLE_BOUNDS.states,
        tagged_kept: int = ORACLE_BOUNDS.tagged, posts_in_parts: bool = True,
    ) -> None:
        super().__init__(
            hidden_worker=hidden_worker, max_states=max_states, tagged_kept=tagged_kept,
            posts_in_parts=posts_in_parts,
        )
        # the set (this very list) that a lookup's early drain cannot change: see
        # ``_lookup_apart``
        self._drain_closed: list[H] | None = None
        # the set (this very list) whose stale results are noted, for ``base`` as it is:
        # a lookup of a key no posted result names leaves the notes as they were
        self._stale_noted: list[H] | None = None

    def _lookup_apart(self, key: bytes, request: str, verdict: object) -> bool:
        """The general lookup's result, built directly when ``key`` is apart: True, done.

        The general path steps each state, and each state's early-drained variant
        (a due drain applied first), by the lookup ``L``, then merges, trims and
        closes under hidden worker steps.  When none of those starts holds ``key``
        in its overlay, ``L`` changes them all alike (``base`` at ``key``, the
        batch, the generation counter), nothing that machinery looks at, so it
        commutes with it: the result is ``L`` of the machinery's set of the
        starts (``_predrained``), which is the set itself once found so (then ``L``
        keeps it so, and the starts need not be computed again).
        """
        hyps = self.hyps
        if self.stopped or (len(hyps) == 1 and hyps[0][0]):
            return False
        base = self.base
        p = base.get(key)
        if verdict is not (None if p is None else p[2]):
            return False
        pairs: list[tuple[H, bool]] | None = None
        if self._drain_closed is hyps:  # then the starts are these states and their drains
            for h in hyps:
                if key in h[0] or any(r[0] == key for r in h[6]):
                    return False
        else:
            starts = self._starts()
            if any(key in h[0] for h, _ in starts):
                return False
            pairs = self._predrained(starts)
            if (
                len(pairs) < 2 or len(pairs) > self.max_states
                or (all(t for _, t in pairs) and not all(self.tags))
            ):
                return False  # the general path decides (fold, bound, warning)
            if pairs == list(zip(hyps, self.tags, strict=True)):
                self._drain_closed, pairs = hyps, None
        if self._stale_noted is not hyps:
            self._note_stale_results()
        closed = pairs is None  # then the result is closed under the early drain too
        if pairs is not None:
            hyps = [h for h, _ in pairs]
            self.tags = [t for _, t in pairs]
        floor = self._floor
        if p is None:
            base[key] = (floor, PENDING, None, frozenset((request,)))
            entry = (key, request, floor)
            hyps = [(h[0], floor + 1, (*h[2], entry), *h[3:]) for h in hyps]
            self._floor = floor + 1
        elif request not in p[3]:
            base[key] = (p[0], p[1], p[2], p[3] | {request})
            hyps = [(h[0], max(h[1], floor), *h[2:]) for h in hyps]
        self.index.setdefault(request, set()).add(key)
        self.hyps = hyps
        self._drain_closed = hyps if closed else None
        if closed and all(r[0] != key for h in hyps for r in h[6]):
            self._stale_noted = hyps
        if len(hyps) > 1 and len(hyps[0][0]) > self._promote_at:
            self._promote()
            self._drain_closed = None
        return True

    def _cleanup_apart(self, request: str) -> bool:
        """The general cleanup's result, built directly when the request's keys are in no
        overlay and none is left an orphaned IN_FLIGHT probe: True, done.

        Then the cleanup changes ``base`` alone, alike for every state and without a
        wasteful variant, and the general path's merging (by exact state: no two
        become equal), trimming (when nothing is to trim), closing (cleanup enables no
        worker step) and promotion keep the set as it is; the merge up to generations
        (beyond ``MERGE_AT`` states), which could make two states equal, is left to
        the general path.
        """
        hyps = self.hyps
        if self.stopped or len(hyps) > MERGE_AT or (len(hyps) == 1 and hyps[0][0]):
            return False
        tagged = self.tags.count(True)
        if self.tagged_kept < tagged < len(hyps):
            return False  # the general path trims tagged states
        keys = self.index.get(request, ())
        for h in hyps:
            overlay = h[0]
            for key in keys:
                if key in overlay:
                    return False
        if not self._cleanup_in_place(request):
            return False
        self._floor = max(h[1] for h in hyps)
        self._drain_closed = None  # the early drain of a result for a deleted probe changed
        if len(hyps) > 1 and len(hyps[0][0]) > self._promote_at:
            self._promote()
        return True

    def _cleanup_in_place(self, request: str) -> bool:
        """The spec's cleanup on ``base`` itself (``_cleanup_apart``, and the fast engine's
        one possible state): True, done; False, nothing done, when a key of the request
        is not in ``base`` or the cleanup leaves an orphaned IN_FLIGHT probe (then the
        wasteful variant is possible too)."""
        base = self.base
        done: list[tuple[bytes, P | None]] = []
        for key in self.index.get(request, ()):
            p = base.get(key)
            if p is None:
                return False
            requesters = p[3] - {request}
            if requesters:
                done.append((key, (p[0], p[1], p[2], requesters)))
            elif p[1] == IN_FLIGHT:
                return False  # an orphan: the wasteful variant is possible too
            else:
                done.append((key, None))
        for key, q in done:
            if q is None:
                del base[key]
            else:
                base[key] = q
        self.index.pop(request, None)
        return True

    def _starts(self) -> list[tuple[H, bool]]:
        """What a lookup starts from: each state (a due drain applied), and the early-
        drained variant of each that has posted results and no drain due."""
        out: list[tuple[H, bool]] = []
        for h, tag in zip(self.hyps, self.tags, strict=True):
            if h[7]:
                out.append((self._apply_posted(h), tag))
                continue
            out.append((h, tag))
            if h[6]:
                out.append((self._apply_posted(h), tag))
        return out

    def _predrained(self, starts: list[tuple[H, bool]]) -> list[tuple[H, bool]]:
        """The machinery of ``_commit`` (merge, trim, close under hidden worker steps, the
        merge up to generations) applied to ``starts``."""
        return self._settle(starts, False, close=True)
