"""The trace checker's fast engine: the oracle's set of possible states, stored per key.

Theory of operation
-------------------
``asynclookup.observe.engine.Checker`` (the *old engine* here) keeps the set
of spec States consistent with a trace so far, each a whole ``State`` value that
every observation rebuilds, sorts and hashes: an event costs (possible states)
x (keys held).  ``FastChecker`` keeps the same set, in the same order and with
the same tags, factorised:

- the request -> keys index is one table: only ``lookup`` and ``cleanup`` change
  it, whatever the worker did, so every possible state holds the same index;
- the probes are one shared table ``base`` plus, per possible state, an
  *overlay* of the keys on which that state differs from ``base`` (canonical:
  an overlay never repeats ``base``'s value, so two states are equal exactly
  when their overlays and pipelines are);
- the worker pipeline (batch, queue, held, answered, posted), ``drain_due`` and
  the generation counter are per state, as plain tuples.

An event steps only the keys it names.  When one state remains its overlay
folds into ``base`` and the deterministic steps update ``base`` in place, so a
trace that records the worker's steps costs one dict update per key named;
where the trace leaves the worker's moves ambiguous (hidden
``take_batch``/``post``) the joint search runs over overlays and pipelines
only, and a key on which every state agrees again moves back to ``base``.

One departure from the engine, which never changes a verdict: states equal
up to their generation numbers are kept once (``_identity``).  No event names
a generation to the checker and the spec compares generations only for
equality, drawing new ones above all others, so such states explain the same
futures; the engine keeps each, and on a trace with hidden worker steps every
ambiguous drain or ``mark_present`` lets their counters drift apart, so its set
grows with the trace.  New generations are drawn from the highest counter of
all the states (``_floor``), so states that branched still agree on the
generations of later probes, and cheap exact comparison (``_concrete``) finds
most equal pairs; the full comparison runs once more than ``MERGE_AT`` states
remain.

The rules are the engine's, applied in the engine's order (lookups with and
without an early drain, the tagged wasteful cleanup, the closure under hidden
worker steps, the trimming of tagged states), with the same classification
notes.  What it does not judge itself it hands to an old engine seeded with
exactly its states and notes, and takes the states back: an observation no
state explains (so a violation's property and detail are the engine's own),
the first set whose every state is tagged (the property-8 warning), a call that
raised, ``shutdown`` and everything after it, a dead worker.  tests/
test_observe_fast.py steps random traces through both and compares the sets,
the notes and the verdicts after every event (the states up to generations
on long runs where the engine keeps duplicates).

It drives no implementation and checks against the spec's own transitions only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeAlias

from asynclookup.observe import engine as oracle
from asynclookup.observe.classify import NO_VALUE
from asynclookup.observe.interface import ORACLE_BOUNDS, Notes, OracleLimitError, Violation
from asynclookup.observe.observations import verdict_candidates
from asynclookup.spec.core import Entry, Phase, Probe, Result, State

PENDING, IN_FLIGHT, RESOLVED = 0, 1, 2
PHASES = (Phase.PENDING, Phase.IN_FLIGHT, Phase.RESOLVED)
_CODE = {phase: i for i, phase in enumerate(PHASES)}
MERGE_AT = 8  # states beyond which states equal up to generations are merged too
PROMOTE_SLACK = 4  # overlay entries tolerated beyond the last sweep before agreed keys move to base

P: TypeAlias = tuple[int, int, "bool | None", frozenset[str]]  # generation, phase, verdict, reqs
Overlay: TypeAlias = dict[bytes, "P | None"]  # None: the state holds no probe of the key
# One possible state: overlay, next generation, batch, queue, held, answered, posted, drain_due.
# Entries are (key, request, generation), results (key, generation, verdict), as in the spec.
H: TypeAlias = tuple[Overlay, int, tuple[Any, ...], tuple[Any, ...], tuple[Any, ...],
                     tuple[Any, ...], tuple[Any, ...], bool]
Identity: TypeAlias = Callable[[H], tuple[Any, ...]]


class FastChecker(Notes):
    """The engine's set of possible states, factorised per key (see the module docstring);
    an ``asynclookup.observe.interface.Engine``.

    ``hidden_worker``, ``max_states`` and ``tagged_kept`` mean what they mean for
    ``asynclookup.observe.engine.Checker``.
    """

    def __init__(
        self, *, hidden_worker: bool, max_states: int = ORACLE_BOUNDS.states,
        tagged_kept: int = ORACLE_BOUNDS.tagged,
    ) -> None:
        super().__init__()
        self.hidden_worker = hidden_worker
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

    # -- observations ------------------------------------------------------------------

    def observe(self, obs: oracle.Observation) -> Violation | None:
        """Take one observation object (as ``Checker.observe``); dispatches to the steps below."""
        if self.violation is not None:
            return self.violation
        error = getattr(obs, "error", None)
        if error is not None or self.stopped:
            return self._delegate(obs)
        if isinstance(obs, oracle.LookupSeen):
            return self.lookup(obs.key, obs.request, obs.verdict, obs)
        if isinstance(obs, oracle.FlushSeen):
            return self.flush(obs)
        if isinstance(obs, oracle.CleanupSeen):
            return self.cleanup(obs.request, obs)
        if isinstance(obs, oracle.MarkMissSeen):
            return self.mark_miss(obs.keys, obs)
        if isinstance(obs, oracle.MarkPresentSeen):
            return self.mark_present(obs.keys, obs)
        if isinstance(obs, oracle.DrainSeen):
            return self.drain(obs)
        if isinstance(obs, oracle.TierCallSeen):
            return self.tier_call(obs.keys, obs.request, obs.answer, obs)
        if isinstance(obs, oracle.TakeBatchSeen) and obs.took:
            return self.take_batch(obs)
        if isinstance(obs, oracle.PostSeen) and obs.posted:
            return self.post(obs)
        if isinstance(obs, oracle.Tables):
            return self.tables(obs.keys, obs.requests, obs)
        return self._delegate(obs)

    def lookup(
        self, key: bytes, request: str, verdict: object, obs: Any = None
    ) -> Violation | None:
        """``lookup(key, request)`` returned ``verdict``, with or without an early drain."""
        h = self._solo()
        if h is not None and h[6] and h[7] and _explains(self.base, h[6], key, verdict):
            self._note_stale_results()  # a drain is due: apply what was posted first
            self._apply_in_place(h[6])
            h = self.hyps[0] = ({}, *h[1:6], (), False)
        if h is not None and not h[6]:  # one state, nothing posted: no early drain to consider
            base = self.base
            p = base.get(key)
            if p is None and verdict is None:
                gen = max(h[1], self._floor)
                base[key] = (gen, PENDING, None, frozenset((request,)))
                self.hyps[0] = ({}, gen + 1, (*h[2], (key, request, gen)), *h[3:7], False)
                self._floor = gen + 1
                self.index.setdefault(request, set()).add(key)
                return None
            if p is not None and p[2] is verdict:
                if request not in p[3]:
                    base[key] = (p[0], p[1], p[2], p[3] | {request})
                    self.index.setdefault(request, set()).add(key)
                if h[7]:
                    self.hyps[0] = (*h[:7], False)
                return None
            # not explained: the general path below finds and names the violation
        self._note_stale_results()
        out: list[tuple[H, bool]] = []
        for h, tag in zip(self.hyps, self.tags, strict=True):
            starts = [h]
            if h[6] and not h[7]:
                starts.append(self._apply_posted(h))
            for start in starts:
                nxt, got = self._lookup(start, key, request)
                if got is verdict:
                    out.append((nxt, tag))
        return self._commit(
            out, obs, lambda: oracle.LookupSeen(key, request, verdict),  # type: ignore[arg-type]
            lambda: self.index.setdefault(request, set()).add(key),
        )

    def flush(self, obs: Any = None) -> Violation | None:
        """``flush()`` returned: apply posted results, submit the live part of the batch."""
        h = self._solo()
        if h is not None:  # one state: a flush is always enabled, so step it in place
            base = self.base
            if h[6]:
                self._note_stale_results()
            self._note_flush({  # before the posted results are applied, as the engine does
                (e[0], e[1]) for e in h[2] if (p := base.get(e[0])) is None or p[0] != e[2]
            })
            if h[6]:
                self._apply_in_place(h[6])
            submitted = []
            for entry in h[2]:
                p = base.get(entry[0])
                if p is not None and p[0] == entry[2]:
                    submitted.append(entry)
                    base[entry[0]] = (p[0], IN_FLIGHT, p[2], p[3])
            queue = (*h[3], tuple(submitted)) if submitted else h[3]
            self.hyps[0] = ({}, h[1], (), queue, h[4], h[5], (), True)
            return None
        self._note_stale_results()
        get = self._get
        self._note_flush({
            (e[0], e[1]) for h in self.hyps for e in h[2]
            if (p := get(h[0], e[0])) is None or p[0] != e[2]
        })
        out = [(self._flush(h), tag) for h, tag in zip(self.hyps, self.tags, strict=True)]
        return self._commit(out, obs, oracle.FlushSeen)

    def drain(self, obs: Any = None) -> Violation | None:
        """``drain_results()`` returned: apply every posted result."""
        self._note_stale_results()
        h = self._solo()
        if h is not None:
            self._apply_in_place(h[6])
            self.hyps[0] = ({}, *h[1:6], (), False)
            return None
        out = [(self._apply_posted(h), tag) for h, tag in zip(self.hyps, self.tags, strict=True)]
        return self._commit(out, obs, oracle.DrainSeen)

    def cleanup(self, request: str, obs: Any = None) -> Violation | None:
        """``cleanup(request)``: the spec's, plus (tagged) one that also deletes orphans."""
        mine = sorted(self.index.get(request, ()))
        if self._solo() is not None and self._cleanup_in_place(request, mine):
            return None
        out: list[tuple[H, bool]] = []
        for h, tag in zip(self.hyps, self.tags, strict=True):
            overlay = h[0]
            nxt = dict(overlay)
            orphans = []
            for key in mine:
                p = self._get(overlay, key)
                assert p is not None, "index names a key without state"
                requesters = p[3] - {request}
                if not requesters and p[1] != IN_FLIGHT:
                    self._put(nxt, key, None)
                else:
                    self._put(nxt, key, (p[0], p[1], p[2], requesters))
                    if not requesters:
                        orphans.append(key)
            out.append(((nxt, *h[1:]), tag))
            if orphans:
                wasteful = dict(nxt)
                for key in orphans:
                    self._put(wasteful, key, None)
                out.append(((wasteful, *h[1:]), True))
        return self._commit(
            out, obs, lambda: oracle.CleanupSeen(request), lambda: self.index.pop(request, None),
            setdefault=True,
        )

    def mark_miss(self, keys: tuple[bytes, ...], obs: Any = None) -> Violation | None:
        """``mark_miss(keys)``: resolved probes of these keys become False."""
        for h in self.hyps:
            for key in keys:
                p = self._get(h[0], key)
                if p is not None and p[1] != RESOLVED:
                    self.missed.add((key, p[0]))
        out: list[tuple[H, bool]] = []
        for h, tag in zip(self.hyps, self.tags, strict=True):
            nxt = dict(h[0])
            for key in keys:
                p = self._get(nxt, key)
                if p is not None and p[1] == RESOLVED:
                    self._put(nxt, key, (p[0], RESOLVED, False, p[3]))
            out.append(((nxt, *h[1:]), tag))
        return self._commit(out, obs, lambda: oracle.MarkMissSeen(keys))

    def mark_present(self, keys: tuple[bytes, ...], obs: Any = None) -> Violation | None:
        """``mark_present(keys)``: a new RESOLVED True generation, or forget an orphan."""
        out: list[tuple[H, bool]] = []
        for h, tag in zip(self.hyps, self.tags, strict=True):
            nxt, gen = dict(h[0]), max(h[1], self._floor)
            for key in keys:
                p = self._get(nxt, key)
                if p is None or p[2] is True:
                    continue
                if not p[3]:
                    self._put(nxt, key, None)
                else:
                    self._put(nxt, key, (gen, RESOLVED, True, p[3]))
                    gen += 1
            out.append(((nxt, gen, *h[2:]), tag))
        return self._commit(out, obs, lambda: oracle.MarkPresentSeen(keys))

    def take_batch(self, obs: Any = None) -> Violation | None:
        """The worker took a batch (recorded worker steps)."""
        h = self._solo()
        if h is not None and (nxt := _take(h)) is not None:
            self.hyps[0] = nxt
            return None
        out = [
            (nxt, tag) for h, tag in zip(self.hyps, self.tags, strict=True)
            if (nxt := _take(h)) is not None
        ]
        return self._commit(out, obs, lambda: oracle.TakeBatchSeen(True))

    def post(self, obs: Any = None) -> Violation | None:
        """The worker posted its answered results (recorded worker steps)."""
        h = self._solo()
        if h is not None and (nxt := _post(h)) is not None:
            self.hyps[0] = nxt
            return None
        out = [
            (nxt, tag) for h, tag in zip(self.hyps, self.tags, strict=True)
            if (nxt := _post(h)) is not None
        ]
        return self._commit(out, obs, lambda: oracle.PostSeen(True))

    def answered(self, keys: tuple[bytes, ...], request: str, values: tuple[bool, ...]
                 ) -> Violation | None:
        """A tier call of the worker that got a proper answer (one bool per key, in order):
        ``tier_call`` with ``Answer(values)``, the one state's held group stepped in place
        when it is exactly the call's."""
        h = self._solo()
        if h is not None:
            held, n = h[4], len(keys)
            if len(held) == n and all(e[1] == request for e in held):
                gens = {e[0]: e[2] for e in held}
                if len(gens) == n and all(k in gens for k in keys):  # so no key twice
                    results = tuple(
                        (k, gens[k], v) for k, v in zip(keys, values, strict=True)
                    )
                    self.hyps[0] = (h[0], h[1], h[2], h[3], (), h[5] + results, h[6], h[7])
                    return None
        return self.tier_call(keys, request, oracle.Answer(values))

    def tier_call(
        self, keys: tuple[bytes, ...], request: str, answer: oracle.Answer, obs: Any = None
    ) -> Violation | None:
        """A tier call of the worker: the held group of ``request``, per allowed verdict."""
        wanted = sorted(keys)
        n = len(keys)
        proper = answer.proper(n)
        h = self._solo()
        if h is not None and proper:  # one state, one verdict per key: step it in place
            held = h[4]
            by_key = {e[0]: e for e in held if e[1] == request}
            if by_key and sorted(by_key) == wanted and sum(e[1] == request for e in held) == n:
                results = tuple(
                    (k, by_key[k][2], v) for k, v in zip(keys, answer.values, strict=True)
                )
                rest = tuple(e for e in held if e[1] != request)
                self.hyps[0] = (h[0], h[1], h[2], h[3], rest, h[5] + results, h[6], h[7])
                return None
        out: list[tuple[H, bool]] = []
        candidates = verdict_candidates(answer, n)
        for h, tag in zip(self.hyps, self.tags, strict=True):
            held = h[4]
            group = [e for e in held if e[1] == request]
            if not group:
                continue
            by_key = {e[0]: e for e in group}
            if len(by_key) != len(group) or sorted(by_key) != wanted:
                continue
            ordered = [by_key[k] for k in keys]
            if not proper:
                values = answer.values
                for i, e in enumerate(ordered):
                    self.faulty[e[0], e[2]] = values[i] if i < len(values) else NO_VALUE
            rest = tuple(e for e in held if e[1] != request)
            for verdicts in candidates:
                results = tuple((e[0], e[2], v) for e, v in zip(ordered, verdicts, strict=True))
                out.append(((h[0], h[1], h[2], h[3], rest, h[5] + results, h[6], h[7]), tag))
        return self._commit(
            out, obs, lambda: oracle.TierCallSeen(keys, request, answer)
        )

    def tables(
        self, keys: frozenset[bytes], requests: frozenset[str], obs: Any = None
    ) -> Violation | None:
        """A ``tables`` snapshot: keep the states whose probe keys and index match."""
        out: list[tuple[H, bool]] = []
        if frozenset(self.index) == requests:
            base_keys = set(self.base)
            for h, tag in zip(self.hyps, self.tags, strict=True):
                held = set(base_keys)
                for k, p in h[0].items():
                    if p is None:
                        held.discard(k)
                    else:
                        held.add(k)
                if held == keys:
                    out.append((h, tag))
        return self._commit(out, obs, lambda: oracle.Tables(keys, requests))

    # -- one possible state, stepped in place --------------------------------------------

    def _solo(self) -> H | None:
        """The one possible state, when there is one and it lives in ``base`` alone (the
        common case of recorded worker steps): a deterministic step can then update
        ``base`` in place instead of building a successor."""
        if len(self.hyps) != 1 or self.hidden_worker or self.stopped:
            return None
        h = self.hyps[0]
        return None if h[0] else h

    def _apply_in_place(self, posted: tuple[Any, ...]) -> None:
        """``_apply_posted`` on ``base`` itself."""
        base = self.base
        for key, generation, verdict in posted:
            p = base.get(key)
            if p is None or p[0] != generation:
                continue
            if not p[3]:
                del base[key]
            else:
                base[key] = (p[0], RESOLVED, verdict, p[3])

    def _cleanup_in_place(self, request: str, mine: list[bytes]) -> bool:
        """The spec's cleanup on ``base`` itself, unless it leaves an orphaned IN_FLIGHT probe
        (then the wasteful variant is possible too: False, nothing done)."""
        base = self.base
        for key in mine:
            p = base[key]
            if p[1] == IN_FLIGHT and not p[3] - {request}:
                return False
        for key in mine:
            p = base[key]
            requesters = p[3] - {request}
            if requesters or p[1] == IN_FLIGHT:
                base[key] = (p[0], p[1], p[2], requesters)
            else:
                del base[key]
        self.index.pop(request, None)
        return True

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
        nxt = dict(h[0])
        for key, generation, verdict in h[6]:
            p = self._get(nxt, key)
            if p is None or p[0] != generation:
                continue
            if not p[3]:
                self._put(nxt, key, None)
            else:
                self._put(nxt, key, (p[0], RESOLVED, verdict, p[3]))
        return (nxt, h[1], h[2], h[3], h[4], h[5], (), False)

    def _lookup(self, h: H, key: bytes, request: str) -> tuple[H, bool | None]:
        if h[7]:
            h = self._apply_posted(h)
        overlay, gen, batch = h[0], max(h[1], self._floor), h[2]
        p = self._get(overlay, key)
        if p is None:
            p = (gen, PENDING, None, frozenset((request,)))
            batch = (*batch, (key, request, gen))
            gen += 1
        elif request in p[3]:
            return h, p[2]
        else:
            p = (p[0], p[1], p[2], p[3] | {request})
        nxt = dict(overlay)
        self._put(nxt, key, p)
        return (nxt, gen, batch, h[3], h[4], h[5], h[6], h[7]), p[2]

    def _flush(self, h: H) -> H:
        h = self._apply_posted(h)
        overlay = h[0]
        nxt = dict(overlay)
        submitted = []
        for entry in h[2]:
            p = self._get(overlay, entry[0])
            if p is None or p[0] != entry[2]:
                continue
            submitted.append(entry)
            self._put(nxt, entry[0], (p[0], IN_FLIGHT, p[2], p[3]))
        queue = (*h[3], tuple(submitted)) if submitted else h[3]
        return (nxt, h[1], (), queue, h[4], h[5], h[6], True)

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
            pairs = self._trim_tagged(self._merge(out, setdefault, _concrete))  # before closing,
            if self.hidden_worker and pairs:  # as the engine does
                pairs = self._close(pairs, _concrete)
            if len(pairs) > MERGE_AT:
                pairs = self._merge(pairs, False, self._identity)
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

    def _promote(self) -> None:
        """Move the keys on which every possible state agrees from the overlays to ``base``."""
        first = self.hyps[0][0]
        overlays = [h[0] for h in self.hyps]
        agreed = [
            k for k, p in first.items()
            if all(k in o and o[k] == p for o in overlays)
        ]
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
        ids: dict[tuple[Any, ...], int] = {}  # identity -> place in hyps
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
        return list(zip(hyps, tags, strict=True))

    def _close(self, pairs: list[tuple[H, bool]], identity: Identity) -> list[tuple[H, bool]]:
        """``pairs`` plus every state reachable by hidden take_batch and post (the engine's
        ``_close``: depth first, an efficient path wins), over identities."""
        ids = {identity(h): i for i, (h, _) in enumerate(pairs)}
        hyps = [h for h, _ in pairs]
        tags = [t for _, t in pairs]
        frontier = list(pairs)
        while frontier:
            h, tag = frontier.pop()
            for step in (_take, _post):
                nxt = step(h)
                if nxt is None:
                    continue
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


def seeded_engine(fast: FastChecker) -> oracle.Checker:
    """An old engine holding exactly ``fast``'s possible states (in order, tagged) and notes."""
    old = oracle.Checker(
        hidden_worker=fast.hidden_worker, max_states=fast.max_states,
        tagged_kept=fast.tagged_kept,
    )
    old.resume(fast.tagged_states(), fast, stopped=fast.stopped)
    return old


# -- helpers on possible states --------------------------------------------------------


def _concrete(h: H) -> tuple[Any, ...]:
    """State ``h`` but its next generation: equal ones explain the same futures."""
    return (frozenset(h[0].items()), h[2], h[3], h[4], h[5], h[6], h[7])


def _explains(base: dict[bytes, P], posted: tuple[Any, ...], key: bytes, verdict: object) -> bool:
    """Whether the one state ``base`` with ``posted`` applied answers a lookup of ``key``
    with ``verdict`` (``_apply_posted`` on that key alone)."""
    p: P | None = base.get(key)
    for k, generation, value in posted:
        if k == key and p is not None and p[0] == generation:
            p = (p[0], RESOLVED, value, p[3]) if p[3] else None
    return verdict is (None if p is None else p[2])


def _take(h: H) -> H | None:
    if h[4] or h[5] or not h[3]:
        return None
    return (h[0], h[1], h[2], h[3][1:], h[3][0], h[5], h[6], h[7])


def _post(h: H) -> H | None:
    if not h[5]:
        return None
    return (h[0], h[1], h[2], h[3], h[4], (), h[6] + h[5], h[7])
