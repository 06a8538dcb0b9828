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

One departure from the engine, which never changes a judgement: states equal
up to their generation numbers are kept once (``_identity``).  No event names
a generation to the checker and the spec compares generations only for
equality, drawing new ones above all others, so such states explain the same
futures; the engine keeps each, and on a trace with hidden worker steps every
ambiguous drain or ``mark_present`` lets their counters drift apart, so its set
grows with the trace.  New generations are drawn from the highest counter of
all the states (``_floor``), so states that branched still agree on the
generations of later probes, and cheap exact comparison (``concrete``) finds
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
the notes and the judgements after every event (the states up to generations
on long runs where the engine keeps duplicates).

The storage of the set and its upkeep (merging, trimming, closing, handing
over) are ``asynclookup.observe.states``; the lookup and cleanup that leave
the worker alone when its steps are hidden are ``asynclookup.observe.apart``;
this module holds the steps: which successors each observation gives, in
place where one state remains.

It drives no implementation and checks against the spec's own transitions only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from asynclookup.observe import engine as oracle
from asynclookup.observe.apart import Apart
from asynclookup.observe.classify import NO_VALUE
from asynclookup.observe.interface import Violation
from asynclookup.observe.observations import verdict_candidates
from asynclookup.observe.states import (
    IN_FLIGHT,
    PENDING,
    RESOLVED,
    H,
    P,
    post_step,
    take_step,
)


class FastChecker(Apart):
    """The engine's set of possible states, factorised per key (see the module docstring);
    an ``asynclookup.observe.interface.Engine``.

    ``hidden_worker``, ``max_states`` and ``tagged_kept`` mean what they mean for
    ``asynclookup.observe.engine.Checker``.
    """

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
        hyps = self.hyps  # ``_solo``, inline: this is the commonest step
        h = hyps[0] if len(hyps) == 1 and not (self.hidden_worker or self.stopped) else None
        if h is not None and h[0]:
            h = None
        if h is not None and h[6] and h[7] and _explains(self.base, h[6], key, verdict):
            self._note_stale_results()  # a drain is due: apply what was posted first
            self._apply_in_place(h[6])
            h = self.hyps[0] = ({}, *h[1:6], (), False)
        if h is not None and not h[6]:  # one state, nothing posted: no early drain to consider
            base = self.base
            p = base.get(key)
            if p is None and verdict is None:
                gen = h[1] if h[1] > self._floor else self._floor
                only = _ALONE.get(request)
                if only is None:
                    if len(_ALONE) >= _ALONE_KEPT:
                        _ALONE.clear()  # so memory stays flat with ever new request ids
                    only = _ALONE[request] = frozenset((request,))
                base[key] = (gen, PENDING, None, only)
                self.hyps[0] = ({}, gen + 1, h[2] + ((key, request, gen),), h[3], h[4], h[5],
                                h[6], False)
                self._floor = gen + 1
                keys = self.index.get(request)
                if keys is None:
                    self.index[request] = {key}
                else:
                    keys.add(key)
                return None
            if p is not None and p[2] is verdict:
                if request not in p[3]:
                    base[key] = (p[0], p[1], p[2], p[3] | {request})
                    self.index.setdefault(request, set()).add(key)
                if h[7]:
                    self.hyps[0] = (*h[:7], False)
                return None
            # not explained: the general path below finds and names the violation
        if self.hidden_worker and self._lookup_apart(key, request, verdict):
            return None
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
            # before the posted results are applied, as the engine does
            self._note_flush((e, base.get(e[0])) for e in h[2])
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
        self._note_flush(self._batched())
        alike = self._submitted_alike()
        out = [(self._flush(h, alike), tag) for h, tag in zip(self.hyps, self.tags, strict=True)]
        return self._commit(out, obs, oracle.FlushSeen, lambda: self._submit_in_base(alike))

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
        self._note_cleanup(request)
        if self._solo() is not None and self._cleanup_in_place(request):
            return None
        if self.hidden_worker and self._cleanup_apart(request):
            return None
        mine = sorted(self.index.get(request, ()))
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
        if h is not None and (nxt := take_step(h)) is not None:
            self.hyps[0] = nxt
            return None
        out = [
            (nxt, tag) for h, tag in zip(self.hyps, self.tags, strict=True)
            if (nxt := take_step(h)) is not None
        ]
        return self._commit(out, obs, lambda: oracle.TakeBatchSeen(True))

    def post(self, obs: Any = None) -> Violation | None:
        """The worker posted its answered results (recorded worker steps)."""
        h = self._solo()
        if h is not None and (nxt := post_step(h)) is not None:
            self.hyps[0] = nxt
            return None
        out = [
            (nxt, tag) for h, tag in zip(self.hyps, self.tags, strict=True)
            if (nxt := post_step(h)) is not None
        ]
        return self._commit(out, obs, lambda: oracle.PostSeen(True))

    def answered(self, keys: tuple[bytes, ...], request: str, items: tuple[bool, ...]
                 ) -> Violation | None:
        """A tier call of the worker that got a proper answer (one bool per key, in order):
        ``tier_call`` with ``Answer(items)``, the one state's held group stepped in place
        when it is exactly the call's."""
        h = self._solo()
        if h is not None:
            held, n = h[4], len(keys)
            if len(held) == n and len(set(keys)) == n:  # the common case: in the call's order
                out = []
                for e, k, v in zip(held, keys, items, strict=True):
                    if e[0] != k or e[1] != request:
                        break
                    out.append((k, e[2], v))
                else:
                    self.hyps[0] = (h[0], h[1], h[2], h[3], (), h[5] + tuple(out), h[6], h[7])
                    return None
            if len(held) == n and all(e[1] == request for e in held):
                gens = {e[0]: e[2] for e in held}
                if len(gens) == n and all(k in gens for k in keys):  # so no key twice
                    results = tuple(
                        (k, gens[k], v) for k, v in zip(keys, items, strict=True)
                    )
                    self.hyps[0] = (h[0], h[1], h[2], h[3], (), h[5] + results, h[6], h[7])
                    return None
        return self.tier_call(keys, request, oracle.Answer(items))

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
                    (k, by_key[k][2], v) for k, v in zip(keys, answer.items, strict=True)
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
                items = answer.items
                for i, e in enumerate(ordered):
                    self.faulty[e[0], e[2]] = items[i] if i < len(items) else NO_VALUE
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

    # -- the spec's actions on one possible state ---------------------------------------

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

    def _batched(self) -> Iterator[tuple[tuple[Any, ...], P | None]]:
        """Each batch entry of each possible state with its key's probe there (what
        ``_note_flush`` takes), given once for all the states that see them alike:
        the first state's batch, none of its keys in their overlay."""
        hyps, base = self.hyps, self.base
        batch = hyps[0][2]
        keys = {e[0] for e in batch}
        alike_given = False
        for h in hyps:
            overlay = h[0]
            if h[2] == batch and keys.isdisjoint(overlay):
                if not alike_given:
                    alike_given = True
                    yield from ((e, base.get(e[0])) for e in batch)
                continue
            get = self._get
            yield from ((e, get(overlay, e[0])) for e in h[2])

    def _submitted_alike(self) -> frozenset[tuple[bytes, int]]:
        """The probes (key, generation) a flush submits alike in every possible state, from
        ``base``: every state has the same batch, with a live entry of the probe, and holds
        the key in ``base`` (in no overlay, named by no posted result the flush applies
        first).
        ``_flush`` leaves them out of the overlays and ``_submit_in_base`` marks them
        IN_FLIGHT in ``base``, which the general path would do in every overlay and
        ``_promote`` would move back."""
        hyps, base = self.hyps, self.base
        batch = hyps[0][2]
        alike = {}
        for e in batch:
            p = base.get(e[0])
            if p is not None and p[0] == e[2]:
                alike[e[0]] = e[2]
        for h in hyps:
            if not alike:
                break
            if h[2] != batch:
                return frozenset()
            for k in h[0]:
                alike.pop(k, None)
            for r in h[6]:
                alike.pop(r[0], None)
        return frozenset(alike.items())

    def _submit_in_base(self, probes: frozenset[tuple[bytes, int]]) -> None:
        base = self.base
        for key, _ in probes:
            p = base[key]
            base[key] = (p[0], IN_FLIGHT, p[2], p[3])

    def _flush(self, h: H, alike: frozenset[tuple[bytes, int]] = frozenset()) -> H:
        """The spec's flush of state ``h``, but the keys of ``alike`` (see
        ``_submitted_alike``) are left as ``base`` holds them."""
        h = self._apply_posted(h)
        overlay = nxt = h[0]  # copied before the first change only, so states that
        submitted = []  # change nothing here keep sharing theirs
        for entry in h[2]:
            if (entry[0], entry[2]) in alike:
                submitted.append(entry)
                continue
            p = self._get(overlay, entry[0])
            if p is None or p[0] != entry[2]:
                continue
            submitted.append(entry)
            if nxt is overlay:
                nxt = dict(overlay)
            self._put(nxt, entry[0], (p[0], IN_FLIGHT, p[2], p[3]))
        if not submitted:
            queue = h[3]
        else:  # the batch itself when all of it goes, shared by the states that share it
            queue = (*h[3], h[2] if len(submitted) == len(h[2]) else tuple(submitted))
        return (nxt, h[1], (), queue, h[4], h[5], h[6], True)


# -- helpers on possible states --------------------------------------------------------

_ALONE: dict[str, frozenset[str]] = {}  # request -> the requesters of a probe it alone asked for
_ALONE_KEPT = 1 << 12


def _explains(base: dict[bytes, P], posted: tuple[Any, ...], key: bytes, verdict: object) -> bool:
    """Whether the one state ``base`` with ``posted`` applied answers a lookup of ``key``
    with ``verdict`` (``_apply_posted`` on that key alone)."""
    p: P | None = base.get(key)
    for k, generation, value in posted:
        if k == key and p is not None and p[0] == generation:
            p = (p[0], RESOLVED, value, p[3]) if p[3] else None
    return verdict is (None if p is None else p[2])
