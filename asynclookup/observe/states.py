"""The fast engine's set of possible states, factorised per key: its storage and its upkeep.

Theory of operation
-------------------
``StateSet`` holds what ``asynclookup.observe.fast.FastChecker`` (see its
docstring for the whole design) knows: the request -> keys index, one shared
probe table ``base`` and, per possible state, an *overlay* of the keys on
which it differs from ``base`` (canonical: an overlay never repeats
``base``'s value) plus its worker pipeline, ``drain_due`` and generation
counter as plain tuples; each state's tag (explained only by a wasteful
cleanup).  Here is the upkeep every step shares, applied in the engine's
order: ``_commit`` makes a list of successors the set (merging states equal
up to their generations, trimming the tagged ones, closing under hidden
``take_batch``/``post``, moving agreed keys back to ``base``), or hands the
observation to an exact engine seeded with these states (``_delegate``);
and the views the trace checker reads (``size``, ``restartable``,
``tagged_states``...).  Which successors an observation has is
``fast``'s.

It checks against the spec's own transitions only, and drives nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeAlias

from asynclookup.observe import engine as oracle
from asynclookup.observe.interface import ORACLE_BOUNDS, Notes, OracleLimitError, Violation
from asynclookup.spec.core import Entry, Phase, Probe, Result, State

PENDING, IN_FLIGHT, RESOLVED = 0, 1, 2
PHASES = (Phase.PENDING, Phase.IN_FLIGHT, Phase.RESOLVED)
_CODE = {phase: i for i, phase in enumerate(PHASES)}
MERGE_AT = 8  # states beyond which states equal up to generations are merged too
PROMOTE_SLACK = 2  # overlay entries tolerated beyond the last sweep before agreed keys move to base

P: TypeAlias = tuple[int, int, "bool | None", frozenset[str]]  # generation, phase, verdict, reqs
Overlay: TypeAlias = dict[bytes, "P | None"]  # None: the state holds no probe of the key
# One possible state: overlay, next generation, batch, queue, held, answered, posted, drain_due.
# Entries are (key, request, generation), results (key, generation, verdict), as in the spec.
H: TypeAlias = tuple[Overlay, int, tuple[Any, ...], tuple[Any, ...], tuple[Any, ...],
                     tuple[Any, ...], tuple[Any, ...], bool]
Identity: TypeAlias = Callable[[H], tuple[Any, ...]]

_ABSENT = ("absent",)  # what ``dict.get`` gives for a key an overlay does not hold


class StateSet(Notes):
    """A set of possible spec states, factorised per key (see the module docstring).

    ``hidden_worker``, ``max_states`` and ``tagged_kept`` mean what they mean for
    ``asynclookup.observe.engine.Checker``.
    """

    def __init__(
        self, *, hidden_worker: bool, max_states: int = ORACLE_BOUNDS.states,
        tagged_kept: int = ORACLE_BOUNDS.tagged, posts_in_parts: bool = True,
    ) -> None:
        super().__init__()
        self.hidden_worker = hidden_worker
        self.posts_in_parts = posts_in_parts
        self.max_states = max_states
        self.tagged_kept = tagged_kept
        self.base: dict[bytes, P] = {}
        self.index: dict[str, set[bytes]] = {}
        self.hyps: list[H] = [({}, 0, (), (), (), (), (), False)]
        self.tags: list[bool] = [False]
        self._promote_at = PROMOTE_SLACK  # overlay size that triggers a promotion sweep
        self._floor = 0  # the highest next generation of any possible state
        self.violation: Violation | None = None
        self.warnings: list[Violation] = []
        self.stopped = False

    # -- what the trace checker reads ------------------------------------------------

    @property
    def size(self) -> int:
        """How many states are possible."""
        return len(self.hyps)

    def expects_empty(self) -> bool:
        """Whether no possible state holds anything (as ``Checker.expects_empty``)."""
        if self.stopped or self.index:
            return False
        for h in self.hyps:
            if h[2] or h[3] or h[4] or h[5] or h[6] or self._count(h[0]):
                return False
        return True

    def restartable(self) -> bool:
        """Whether the set explains exactly what the initial state explains (see
        ``asynclookup.trace.check.TraceChecker.quiescent``)."""
        if self.stopped or self.index or all(self.tags):
            return False
        if not self.hidden_worker:
            if len(self.hyps) > 1:
                return False
            h = self.hyps[0]
            return not (h[2] or h[3] or h[4] or h[5] or h[6] or self._count(h[0]))
        return not any(h[2] or h[3] or h[4] or self._count(h[0]) for h in self.hyps)

    def drain_due(self) -> bool:
        """Whether the first possible state has a drain due (for a quiescent anchor)."""
        return self.hyps[0][7]

    @property
    def states(self) -> tuple[State, ...]:
        """The possible states as spec States, efficient ones first (as ``Checker.states``)."""
        pairs = self.tagged_states()
        return tuple(sorted(pairs, key=lambda s: pairs[s]))

    def tagged_states(self) -> dict[State, bool]:
        """The possible states as the engine keeps them: spec State -> tagged, in order."""
        index = tuple(sorted((r, frozenset(ks)) for r, ks in self.index.items()))
        out: dict[State, bool] = {}
        for h, tag in zip(self.hyps, self.tags, strict=True):
            table = dict(self.base)
            for k, p in h[0].items():
                if p is None:
                    del table[k]
                else:
                    table[k] = p
            probes = tuple(
                (k, Probe(p[0], PHASES[p[1]], p[2], p[3])) for k, p in sorted(table.items())
            )
            out[State(
                probes=probes, index=index, next_generation=h[1],
                batch=tuple(Entry._make(e) for e in h[2]),
                queue=tuple(tuple(Entry._make(e) for e in b) for b in h[3]),
                held=tuple(Entry._make(e) for e in h[4]),
                answered=tuple(Result._make(r) for r in h[5]),
                posted=tuple(Result._make(r) for r in h[6]),
                drain_due=h[7], stopped=self.stopped,
            )] = tag
        return out

    export = tagged_states  # the name tests/test_observe_fast.py compares the engines by

    def trim_history(self) -> None:
        """Nothing to do: this engine keeps no observations."""

    def forget_stale_notes(self) -> None:
        """Drop notes on probes no possible state holds (as ``Checker.forget_stale_notes``)."""
        if not self._has_probe_notes():
            return
        live: set[tuple[bytes, int]] = {(k, p[0]) for k, p in self.base.items()}
        for h in self.hyps:
            live.update((k, p[0]) for k, p in h[0].items() if p is not None)
            live.update((e[0], e[2]) for e in h[2] + h[4])
            live.update((e[0], e[2]) for b in h[3] for e in b)
            live.update((r[0], r[1]) for r in h[5] + h[6])
        self._keep_notes_on(live)

    # -- the spec's actions on one possible state ----------------------------------------

    def _get(self, overlay: Overlay, key: bytes) -> P | None:
        if key in overlay:
            return overlay[key]
        return self.base.get(key)

    def _put(self, overlay: Overlay, key: bytes, p: P | None) -> None:
        """Set ``key`` in an overlay being built, keeping it canonical."""
        if p == self.base.get(key):
            overlay.pop(key, None)
        else:
            overlay[key] = p

    def _count(self, overlay: Overlay) -> int:
        """How many probes a state with this overlay holds."""
        base = self.base
        n = len(base)
        for k, p in overlay.items():
            n += (p is not None) - (k in base)
        return n

    def _apply_posted(self, h: H) -> H:
        if not h[6]:
            return (h[0], h[1], h[2], h[3], h[4], h[5], (), False)
        base, nxt = self.base, dict(h[0])
        for key, generation, verdict in h[6]:  # ``_get`` and ``_put``, inline
            p = nxt[key] if key in nxt else base.get(key)
            if p is None or p[0] != generation:
                continue
            q = (p[0], RESOLVED, verdict, p[3]) if p[3] else None
            if q == base.get(key):
                nxt.pop(key, None)
            else:
                nxt[key] = q
        return (nxt, h[1], h[2], h[3], h[4], h[5], (), False)

    # -- the set -------------------------------------------------------------------------

    def _note_stale_results(self) -> None:
        for h in self.hyps:
            for key, generation, _ in h[6]:
                p = self._get(h[0], key)
                if p is not None and p[0] != generation:
                    self.stale.add((key, p[0]))

    def _commit(
        self, out: list[tuple[H, bool]], obs: Any, build: Any, change: Any = None,
        setdefault: bool = False,
    ) -> Violation | None:
        """Make ``out`` (successors in the engine's order) the set, or hand over to the engine."""
        if len(out) == 1 and not self.hidden_worker and (not out[0][1] or all(self.tags)):
            # the common case of recorded worker steps: one state stays one (no warning due)
            (h, tag), = out
            if change is not None:
                change()
            self._floor = h[1]
            if h[0]:
                self._fold(h[0])
                h = ({}, *h[1:])
            self.hyps, self.tags = [h], [tag]
            return None
        if len(out) > 1 or self.hidden_worker:
            pairs = self._settle(out, setdefault, close=self.hidden_worker)
        else:
            pairs = out
        if not pairs:
            return self._delegate(obs or build())
        if len(pairs) > self.max_states:
            raise OracleLimitError(
                f"{len(pairs)} possible spec states after {obs or build()!r} "
                f"(bound {self.max_states})"
            )
        if all(t for _, t in pairs) and not all(self.tags):
            return self._delegate(obs or build())
        if change is not None:
            change()  # the index: the same in every state
        self._floor = max(h[1] for h, _ in pairs)
        if len(pairs) == 1:
            (h, tag), = pairs
            self._fold(h[0])
            self.hyps, self.tags = [({}, *h[1:])], [tag]
        else:
            self.hyps, self.tags = [h for h, _ in pairs], [t for _, t in pairs]
            if len(self.hyps[0][0]) > self._promote_at:
                self._promote()
        return None

    def _settle(
        self, out: Iterable[tuple[H, bool]], setdefault: bool, *, close: bool
    ) -> list[tuple[H, bool]]:
        """The set ``out`` makes: merged (``_merge``), the tagged trimmed, closed under hidden
        worker steps when ``close`` (``_close``; trimming comes first, as the engine does),
        and merged up to generations beyond ``MERGE_AT`` states.  Each state's identity is
        computed once."""
        ident = concrete_cached()
        hyps, tags, ids = _merged(out, setdefault, ident)
        pairs = list(zip(hyps, tags, strict=True))
        if self.tagged_kept < tags.count(True) < len(hyps):
            pairs = self._trim_tagged(pairs)
            ids = {ident(h): i for i, (h, _) in enumerate(pairs)}
        if close and pairs:
            pairs = self._close(pairs, ident, ids)
        if len(pairs) > MERGE_AT:
            pairs = self._merge(pairs, False, self._identity)
        return pairs

    def _promote(self) -> None:
        """Move the keys on which every possible state agrees from the overlays to ``base``."""
        first = self.hyps[0][0]
        overlays = list({id(h[0]): h[0] for h in self.hyps[1:] if h[0] is not first}.values())
        agreed = [
            k for k, p in first.items()
            if all(o.get(k, _ABSENT) == p for o in overlays)
        ]
        overlays.append(first)
        for k in agreed:
            p = first[k]
            for o in overlays:
                o.pop(k, None)  # overlays may be shared between states: all agree on k
            if p is None:
                del self.base[k]
            else:
                self.base[k] = p
        self._promote_at = len(first) + PROMOTE_SLACK

    def _fold(self, overlay: Overlay) -> None:
        base = self.base
        for k, p in overlay.items():
            if p is None:
                del base[k]
            else:
                base[k] = p

    def _trim_tagged(self, pairs: list[tuple[H, bool]]) -> list[tuple[H, bool]]:
        tagged = [i for i, (_, t) in enumerate(pairs) if t]
        if len(tagged) <= self.tagged_kept or len(tagged) == len(pairs):
            return pairs
        tagged.sort(key=lambda i: self._count(pairs[i][0][0]))
        gone = set(tagged[self.tagged_kept:])
        return [pair for i, pair in enumerate(pairs) if i not in gone]

    # -- merging equivalent states -------------------------------------------------------

    def _identity(self, h: H) -> tuple[Any, ...]:
        """What the future of state ``h`` depends on: its probes without their generations,
        and for each batch entry and result whether it is of its key's current probe.

        The spec compares generations only for equality and draws new ones from a
        counter above all of them, and no event of a trace names a generation to
        the checker, so two states with the same identity explain the same
        futures: only the first of them is kept (the old engine keeps both).
        """
        base, overlay = self.base, h[0]
        probes: list[tuple[Any, ...]] = []
        for k, p in overlay.items():
            b = base.get(k)
            if p is None:
                probes.append((k,))
            elif b is None or p[1] != b[1] or p[2] is not b[2] or p[3] != b[3]:
                probes.append((k, p[1], p[2], p[3]))
        fresh = frozenset(probes)

        def live(key: bytes, generation: int) -> bool:
            p = overlay[key] if key in overlay else base.get(key)
            return p is not None and p[0] == generation

        batch = tuple((e[0], e[1], live(e[0], e[2])) for e in h[2])
        queue = tuple(tuple((e[0], e[1], live(e[0], e[2])) for e in b) for b in h[3])
        held = tuple((e[0], e[1], live(e[0], e[2])) for e in h[4])
        answered = tuple((r[0], live(r[0], r[1]), r[2]) for r in h[5])
        posted = tuple((r[0], live(r[0], r[1]), r[2]) for r in h[6])
        return (fresh, batch, queue, held, answered, posted, h[7])

    def _merge(
        self, out: Iterable[tuple[H, bool]], setdefault: bool, identity: Identity
    ) -> list[tuple[H, bool]]:
        """The engine's ``out[nxt] = out.get(nxt, True) and tagged`` over identities (the
        first state of an identity stays, in its place; ``setdefault`` for the wasteful
        cleanup variants, which the engine adds with ``out.setdefault``)."""
        hyps, tags, _ = _merged(out, setdefault, identity)
        return list(zip(hyps, tags, strict=True))

    def _close(
        self, pairs: list[tuple[H, bool]], identity: Identity,
        ids: dict[tuple[Any, ...], int] | None = None,
    ) -> list[tuple[H, bool]]:
        """``pairs`` plus every state reachable by hidden take_batch and post (the engine's
        ``_close``: depth first, an efficient path wins), over identities (``ids``: the
        identity of each of ``pairs`` -> its place, when already known)."""
        if ids is None:
            ids = {identity(h): i for i, (h, _) in enumerate(pairs)}
        hyps = [h for h, _ in pairs]
        tags = [t for _, t in pairs]
        frontier = list(pairs)
        while frontier:
            h, tag = frontier.pop()
            for nxt in _hidden_steps(h, self.posts_in_parts):
                ident = identity(nxt)
                i = ids.get(ident)
                if i is None:
                    ids[ident] = len(hyps)
                    hyps.append(nxt)
                    tags.append(tag)
                    frontier.append((nxt, tag))
                elif tags[i] and not tag:
                    tags[i] = tag
                    frontier.append((nxt, tag))
        return list(zip(hyps, tags, strict=True))

    # -- handing over to the engine --------------------------------------------------------

    def _delegate(self, obs: oracle.Observation) -> Violation | None:
        """Let an old engine seeded with these states and notes judge ``obs``; take its states."""
        old = seeded_engine(self)
        violation = old.observe(obs)
        self.warnings.extend(old.warnings)
        if violation is not None:
            self.violation = violation
            return violation
        self.resume(old.tagged_states(), old, stopped=old.stopped)
        return None

    def resume(self, states: Mapping[State, bool], notes: Notes, *, stopped: bool) -> None:
        """Start from ``states`` (as ``tagged_states`` gives them: all share one index),
        ``notes`` and ``stopped``; the states are factorised against the first."""
        pairs = list(states.items())
        first = pairs[0][0]
        self.base = {k: (p.generation, _CODE[p.phase], p.verdict, p.requesters)
                     for k, p in first.probes}
        self.index = {r: set(ks) for r, ks in first.index}
        self.stopped = stopped
        self.hyps, self.tags = [], []
        for state, tag in pairs:
            table = {k: (p.generation, _CODE[p.phase], p.verdict, p.requesters)
                     for k, p in state.probes}
            overlay: Overlay = {k: None for k in self.base if k not in table}
            overlay.update((k, p) for k, p in table.items() if self.base.get(k) != p)
            self.hyps.append((
                overlay, state.next_generation, tuple(map(tuple, state.batch)),
                tuple(tuple(map(tuple, b)) for b in state.queue), tuple(map(tuple, state.held)),
                tuple(map(tuple, state.answered)), tuple(map(tuple, state.posted)),
                state.drain_due,
            ))
            self.tags.append(tag)
        self.take_notes(notes)


def seeded_engine(fast: StateSet) -> oracle.Checker:
    """An old engine holding exactly ``fast``'s possible states (in order, tagged) and notes."""
    old = oracle.Checker(
        hidden_worker=fast.hidden_worker, max_states=fast.max_states,
        tagged_kept=fast.tagged_kept, posts_in_parts=fast.posts_in_parts,
    )
    old.resume(fast.tagged_states(), fast, stopped=fast.stopped)
    return old


# -- helpers on possible states --------------------------------------------------------


def concrete(h: H) -> tuple[Any, ...]:
    """State ``h`` but its next generation: equal ones explain the same futures."""
    return (frozenset(h[0].items()), h[2], h[3], h[4], h[5], h[6], h[7])


def concrete_cached() -> Identity:
    """``concrete``, each overlay frozen once: for one commit, while no overlay changes
    (states stepped by hidden worker steps share their overlay).  The cache holds each
    overlay, so no other can take its ``id`` meanwhile."""
    frozen: dict[int, tuple[Overlay, frozenset[tuple[bytes, P | None]]]] = {}

    def identity(h: H) -> tuple[Any, ...]:
        overlay = h[0]
        got = frozen.get(id(overlay))
        if got is None:
            got = frozen[id(overlay)] = (overlay, frozenset(overlay.items()))
        return (got[1], h[2], h[3], h[4], h[5], h[6], h[7])

    return identity


def _merged(
    out: Iterable[tuple[H, bool]], setdefault: bool, identity: Identity
) -> tuple[list[H], list[bool], dict[tuple[Any, ...], int]]:
    """``StateSet._merge``'s states and tags, and each identity's place among them."""
    ids: dict[tuple[Any, ...], int] = {}
    hyps: list[H] = []
    tags: list[bool] = []
    for h, tag in out:
        ident = identity(h)
        i = ids.get(ident)
        if i is None:
            ids[ident] = len(hyps)
            hyps.append(h)
            tags.append(tag)
        elif not (setdefault and tag):
            tags[i] = tags[i] and tag
    return hyps, tags, ids


def take_step(h: H) -> H | None:
    if h[4] or h[5] or not h[3]:
        return None
    return (h[0], h[1], h[2], h[3][1:], h[3][0], h[5], h[6], h[7])


def post_step(h: H) -> H | None:
    if not h[5]:
        return None
    return (h[0], h[1], h[2], h[3], h[4], (), h[6] + h[5], h[7])


def _hidden_steps(h: H, in_parts: bool) -> list[H]:
    """The states one hidden worker step leads to from ``h``, in the engine's order
    (``Checker._close``): take the next batch, post everything answered, and when
    ``in_parts``, post the first n answered results for each shorter n
    (``asynclookup.spec.core.posts``)."""
    out = [nxt for nxt in (take_step(h), post_step(h)) if nxt is not None]
    answered = h[5]
    for n in range(1, len(answered) if in_parts else 0):
        out.append((h[0], h[1], h[2], h[3], h[4], answered[n:], h[6] + answered[:n], h[7]))
    return out
