"""Name a worker that skips owed tier calls: a cancelled probe (8) or a batch taken early (6).

One worker calls the tier for the groups of the batch in hand (in any order),
posts, and only then takes the next batch (docs/protocol.md, ``take_batch``).
When the implementation's tier calls leave owed groups behind, the checker
finds no state that explains them, and ``asynclookup.observe.classify`` asks
this module what the skip was:

- every entry skipped is one whose request is no longer a requester of its
  probe (cleaned up), or was cleaned up while it was in flight and asked again
  since (the engines note what was flushed at each cleanup: ``Notes.cleaned``),
  or a stale one: the implementation's cleanup cancelled a
  probe still in flight.  Cleanup must keep an IN_FLIGHT probe (property 8,
  ``in_flight_probes_survive_cleanup``), and the requests left probe the key
  again.  The same skip seen as a stall (the cancelled call never comes), as a
  shutdown that returns without it, as a request probing again a key whose
  probe it shares, or as that request's lookup returning None where the probe it
  shared has since been given a verdict (mark_present), is named the same way.
  Not so an entry whose request was cleaned up before the flush that submitted it
  (the engines note those at the flush): no cleanup came while it was in flight,
  so a worker that never probes it is late (6), and one that probes it under a
  sharer's context breaks property 9;
- the same holds for a call that leaves out part of its request's group when
  every entry it leaves out (and every one owed before its batch) was batched
  for a request since cleaned up and its probe is shared by requests still
  live: cleanup cancelled those probes (8), as a fork's cleanup that cancels
  the queued probe its request was batched with does;
- a skipped entry is live: the call is a group of a later batch, so the worker
  took that batch before probing and posting the one in hand (a pool that does
  not wait for a batch's groups).  One worker posts first, so a verdict of the
  batch in hand is late: property 6, as docs/oracle.md ("A pool of worker
  threads") says.

It reads spec states and one observation; like the classifier, it only names
a finding, never decides one.  A pool that skips ahead just when the skipped
group's request was cleaned up is named 8 too: the call alone cannot tell the
two apart (docs/oracle.md, "Known limits").
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from asynclookup.observe.observations import TierCallSeen
from asynclookup.spec import core
from asynclookup.spec.core import Entry, State

Orphaned = Collection[tuple[bytes, str, int]]  # entries a flush submitted after their cleanup
Cleaned = Mapping[str, int]  # request -> below it, its entries were in flight at a cleanup


def cancellable(
    state: State, entry: Entry, orphaned: Orphaned = (), cleaned: Cleaned | None = None
) -> bool:
    """Whether ``entry`` is one a cleanup of its request could have cancelled: its
    request is not a requester of the entry's probe any more, or the entry is stale,
    or its request was cleaned up while it was in flight (``cleaned``) and asked
    again since; not one whose request was cleaned up before the flush that
    submitted it (in ``orphaned``): no cleanup came while that probe was in flight."""
    if (entry.key, entry.request, entry.generation) in orphaned:
        return False
    if cleaned is not None and cleaned.get(entry.request, 0) > entry.generation:
        return True
    p = core.probe_of(state, entry.key)
    return p is None or p.generation != entry.generation or entry.request not in p.requesters


def cleaned_up(state: State, entry: Entry, orphaned: Orphaned = ()) -> bool:
    """Whether ``entry``'s request was cleaned up while its probe is the key's live one:
    a request that shares that probe is left, and only a cancelling cleanup makes it
    probe the key again.  (A stale entry alone is no such sign: a lookup manager that
    sends a stale probe under another request's context breaks property 9.)"""
    if (entry.key, entry.request, entry.generation) in orphaned:
        return False  # cleaned up before its flush: not while in flight
    p = core.probe_of(state, entry.key)
    return p is not None and p.generation == entry.generation and (
        entry.request not in p.requesters)


def _shared(
    state: State, entry: Entry, orphaned: Orphaned = (), cleaned: Cleaned | None = None
) -> bool:
    """``cleaned_up``, and the probe still has requesters: the cleanup of the request it
    was batched for left it to others, so cancelling it was the cleanup's doing (a probe
    left without requesters that a call leaves out is named by the call, 9).  (Not
    ``cleaned``: a request that asked again shares its probe, and a call without it is
    short of a live request's key.)"""
    p = core.probe_of(state, entry.key)
    return cleaned_up(state, entry, orphaned) and p is not None and bool(p.requesters)


def request_groups(batch: tuple[Entry, ...]) -> dict[str, frozenset[bytes]]:
    """Each request's group of ``batch``: request -> its keys."""
    groups: dict[str, set[bytes]] = {}
    for e in batch:
        groups.setdefault(e.request, set()).add(e.key)
    return {request: frozenset(keys) for request, keys in groups.items()}


def skipped(state: State, obs: TierCallSeen) -> tuple[Entry, ...] | None:
    """If ``obs`` is exactly one request's group of a queued batch (not the first the
    worker owes), the entries owed before that batch, which it skipped; else None."""
    call = frozenset(obs.keys)
    if len(call) != len(obs.keys):
        return None
    before = list(state.held)
    for batch in state.queue:
        if before and request_groups(batch).get(obs.request) == call:
            return tuple(before)
        before.extend(batch)
    return None


def cut(state: State, obs: TierCallSeen) -> tuple[Entry, ...] | None:
    """If ``obs`` is part of its request's group of an owed batch (the one in hand, or
    a later one), the entries it leaves out: the rest of that group, and every entry
    owed before that batch; else None.  (An exact group of a later batch is
    ``skipped``'s.)"""
    call = frozenset(obs.keys)
    if not call or len(call) != len(obs.keys):
        return None
    before: list[Entry] = []
    for batch in (state.held, *state.queue):
        group = [e for e in batch if e.request == obs.request]
        if call < frozenset(e.key for e in group):
            return (*before, *(e for e in group if e.key not in call))
        before.extend(batch)
    return None


def reprobed(
    state: State, obs: TierCallSeen, orphaned: Orphaned = ()
) -> tuple[Entry, ...] | None:
    """If ``obs`` probes, for its request, keys whose owed probe it shares but that were
    batched for a request since cleaned up (the rest of the call owed to it), those
    entries: the call is a second probe of them; else None (``cleaned_up``)."""
    owed = list(state.held) + [e for batch in state.queue for e in batch]
    others: list[Entry] = []
    for key in obs.keys:
        mine = [e for e in owed if e.key == key]
        if any(e.request == obs.request for e in mine):
            continue
        p = core.probe_of(state, key)
        if not mine or p is None or obs.request not in p.requesters:
            return None
        if not all(cleaned_up(state, e, orphaned) for e in mine):
            return None  # merely stale (mark_miss, mark_present): no cleanup to blame
        others.extend(mine)
    return tuple(others) or None


def name_skip(
    states: list[State], obs: TierCallSeen, call: str, orphaned: Orphaned = (),
    cleaned: Cleaned | None = None,
) -> tuple[int, str] | None:
    """The property a tier call that skipped owed groups breaks, and why; None when the
    call is no skip (``classify`` names it otherwise)."""
    for state in states:
        cancelled = reprobed(state, obs, orphaned)
        if cancelled is not None:
            return 8, (
                f"{call}: {obs.request!r} shares the in-flight probe of "
                f"{_shown(cancelled)}, which was batched for a request since cleaned up; "
                "probing it again means cleanup cancelled that probe, which it must keep "
                "(in_flight_probes_survive_cleanup)"
            )
    # a later batch's group, or a group cut short: what it left behind was cancelled
    ways = (
        (skipped, cancellable, "a group of a later batch, and never ", ""),
        (cut, _shared, f"{obs.request!r}'s group without ",
         " although other requests share them"),
    )
    for find, may_cancel, what, shared in ways:
        for state in states:
            left = find(state, obs)
            if left is not None and all(may_cancel(state, e, orphaned, cleaned) for e in left):
                return 8, (
                    f"{call}, {what}{_shown(left)}: their requests were "
                    "cleaned up while the probes were in flight, and cleanup cancelled "
                    f"them{shared}, which it must not (in_flight_probes_survive_cleanup)"
                )
    for state in states:
        left = skipped(state, obs)
        if left is not None:
            return 6, (
                f"{call}, a group of a later batch, while {_shown(left)} of an earlier "
                "one is still owed: the worker took the next batch before probing and "
                "posting the one in hand, so that batch's verdicts come late"
            )
    return None


def name_stall(
    states: list[State], waiting_for: str, orphaned: Orphaned = (),
    cleaned: Cleaned | None = None,
) -> tuple[int, str] | None:
    """A tier call that never came, when every call owed is of probes whose requests were
    cleaned up while they were in flight: cleanup cancelled them (8); else None."""
    for state in states:
        owed = list(state.held) + [e for batch in state.queue for e in batch]
        if owed and all(cancellable(state, e, orphaned, cleaned) for e in owed):
            return 8, (
                f"no {waiting_for} came for {_shown(tuple(owed))}, whose requests were "
                "cleaned up while the probes were in flight: cleanup cancelled them, "
                "which it must not (in_flight_probes_survive_cleanup)"
            )
    return None


def name_short_shutdown(
    states: list[State], orphaned: Orphaned = (), cleaned: Cleaned | None = None
) -> tuple[int, str] | None:
    """A shutdown that returned without probing the batch in hand, when every entry of it
    is of a probe whose request was cleaned up while it was in flight: cleanup
    cancelled them (8); else None."""
    for state in states:
        in_hand = state.held or (state.queue[0] if state.queue else ())
        if in_hand and all(cancellable(state, e, orphaned, cleaned) for e in in_hand):
            return 8, (
                f"shutdown() returned without probing {_shown(tuple(in_hand))}, whose "
                "requests were cleaned up while the probes were in flight: cleanup "
                "cancelled them, which it must not (in_flight_probes_survive_cleanup)"
            )
    return None


def name_lost_verdict(states: list[State], key: bytes, request: str) -> tuple[int, str] | None:
    """A ``None`` where ``key``'s probe is resolved (``request`` shares it, or joins it with
    this lookup), when an older entry of the key, batched for a request since cleaned up,
    is still owed: the IUT's cleanup cancelled that in-flight probe and deleted the state
    the others shared, so the verdict since given to it (by mark_present) was lost (8);
    else None."""
    for state in states:
        p = core.probe_of(state, key)
        if p is None or p.verdict is None:
            continue
        owed = list(state.held) + [e for batch in state.queue for e in batch]
        old = tuple(e for e in owed if e.key == key and e.generation != p.generation
                    and e.request not in p.requesters)
        if old:
            how = "shares" if request in p.requesters else "joins"
            return 8, (
                f"lookup({key!r}, {request!r}) returned None although {request!r} {how} the "
                f"key's probe g{p.generation} (resolved {p.verdict!r}); {_shown(old)} is still "
                "owed: cleanup cancelled that in-flight probe, deleting the state the others "
                "shared, which it must keep (in_flight_probes_survive_cleanup)"
            )
    return None


def _shown(entries: tuple[Entry, ...]) -> str:
    return ", ".join(f"{e.key!r} (batched for {e.request!r}, g{e.generation})" for e in entries)
