"""Observation-based conformance checking: which spec states can a black box be in?

Theory of operation
-------------------
An implementation under test (IUT) is a black box.  The oracle sees only the
calls it makes (``lookup`` with the verdict it returned, ``flush``, ``cleanup``,
``mark_miss``, ``mark_present``, ``drain_results``, ``shutdown``, and in stepped
mode the worker steps ``take_batch`` / ``probe_group`` / ``post`` with what they
returned) and every tier call the IUT's worker makes, with the answer the
oracle's tier gave.  Each of these is an *observation*, a frozen dataclass
named after the spec action it shows.

``Checker`` keeps the set of ``asynclookup.spec.core`` states consistent with every
observation so far.  Each observation maps every state to the successors that
explain it and keeps those; hidden steps fill the gaps:

- in threaded mode the worker's ``TakeBatchSeen`` and ``PostSeen`` are invisible, so
  after every observation the set is closed under them (a ``ProbeGroupSeen`` is
  never hidden: the oracle's tier sees every call);
- a ``lookup`` may drain even when no flush happened since the last drain, so
  each lookup is explained by the spec's lookup with or without a drain first;
- a faulty tier answer (an exception, a wrong length, a non-bool, a lazy
  iterable that raises) allows, per key, False or the proper bool the tier gave
  at that position, so both the strict and the lenient worker policy conform;
- the protocol does not fix the order of request groups within a batch, so a
  tier call may probe any group of the batch in hand;
- ``cleanup`` may also delete an orphaned IN_FLIGHT probe.  That breaks only
  property 8 (an efficiency property), so such states are kept but tagged; when
  only tagged states remain the checker records a property-8 *warning* and goes
  on checking safety;
- a tier call seen arrive (``TierCallWaiting``) keeps the states in which the
  worker holds that group, since one worker posts before it takes the next batch.
  The states it rules out are kept apart (``late``): they explain the IUT only if
  its worker took the next batch before posting the last, which breaks property 6.
  They only name findings: an observation no state explains but a late one is
  that property-6 breach, and while a late state explains what only a tagged one
  otherwise does, the property-8 warning waits until one of the two is ruled out.

When the set becomes empty the observation is excluded by the spec: the
checker returns a ``Violation`` naming the property of docs/properties.md (chosen by
``asynclookup.observe.classify``) and the last states that were still possible.

The observations themselves are in ``asynclookup.observe.observations`` (re-exported here).
This module drives no implementation and knows no threads: adapters and the
Hypothesis machine (``asynclookup.conformance.machine``) build observations and feed them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from asynclookup.observe.classify import (
    NO_VALUE,
    classify,
    efficiency_detail,
    observed,
    raised,
)
from asynclookup.observe.interface import ORACLE_BOUNDS, Notes, OracleLimitError, Violation
from asynclookup.observe.observations import (
    CLOSED,
    SCHEDULER_CALLS,
    WORKER_STEPS,
    Answer,
    CleanupSeen,
    DrainSeen,
    FlushSeen,
    Hung,
    Leftover,
    LookupSeen,
    MarkMissSeen,
    MarkPresentSeen,
    Observation,
    Overdue,
    PostSeen,
    ProbeGroupSeen,
    ShutdownSeen,
    Stalled,
    Tables,
    TakeBatchSeen,
    TierCallSeen,
    TierCallWaiting,
    WorkerDied,
    verdict_candidates,
)
from asynclookup.spec import core
from asynclookup.spec.core import INITIAL, Phase, State, Transition

__all__ = [
    "CLOSED",
    "SCHEDULER_CALLS",
    "WORKER_STEPS",
    "Answer",
    "Checker",
    "CleanupSeen",
    "DrainSeen",
    "FlushSeen",
    "Hung",
    "Leftover",
    "LookupSeen",
    "MarkMissSeen",
    "MarkPresentSeen",
    "Observation",
    "Overdue",
    "PostSeen",
    "ProbeGroupSeen",
    "ShutdownSeen",
    "Stalled",
    "Tables",
    "TakeBatchSeen",
    "TierCallSeen",
    "TierCallWaiting",
    "WorkerDied",
    "verdict_candidates",
]

# -- the checker -----------------------------------------------------------------

Successors = Callable[[State], Iterable[State]]


class Checker(Notes):
    """The set of spec states consistent with every observation so far (an
    ``asynclookup.observe.interface.Engine``).

    ``hidden_worker``: the worker's TakeBatchSeen and PostSeen are not observed
    (threaded mode).  ``max_states`` and ``tagged_kept``: the ``Bounds`` it
    keeps to.  ``table``: the spec's transitions (a broken table checks an
    implementation against a broken spec).
    """

    def __init__(
        self,
        *,
        hidden_worker: bool,
        max_states: int = ORACLE_BOUNDS.states,
        tagged_kept: int = ORACLE_BOUNDS.tagged,
        table: Mapping[type, Transition] = core.TRANSITIONS,
        posts_in_parts: bool = True,
    ) -> None:
        super().__init__()
        self.hidden_worker = hidden_worker
        # a hidden worker may post a tier call's results in parts (``core.posts``); the
        # trace checker's first pass holds them posted whole (see ``check_lines``)
        self.posts_in_parts = posts_in_parts
        self.max_states = max_states
        self.tagged_kept = tagged_kept
        self.table = table
        # state -> True when its history used an inefficient cleanup (property 8)
        self._states: dict[State, bool] = {INITIAL: False}
        self.history: list[Observation] = []
        self.violation: Violation | None = None
        self.warnings: list[Violation] = []
        self.stopped = False
        # States a TierCallWaiting ruled out, stepped alongside (see the module's text),
        # the call that ruled out the oldest of them, and a property-8 warning that
        # waits while a late state explains what only tagged ones otherwise do.
        self._late: dict[State, bool] = {}
        self._late_since: TierCallWaiting | None = None
        self._waste_waiting: Violation | None = None

    @property
    def states(self) -> tuple[State, ...]:
        """The possible states, efficient ones first."""
        return tuple(sorted(self._states, key=lambda s: self._states[s]))

    def efficient_states(self) -> tuple[State, ...]:
        """The possible states whose history kept property 8."""
        return tuple(s for s, tagged in self._states.items() if not tagged)

    def owed_tier_calls(self) -> int:
        """Tier calls every possible state still owes (groups queued or held)."""
        return min(_groups_owed(s) for s in self._states)

    def owed_requesters(self) -> list[tuple[bytes, str]]:
        """The (key, request) pairs such that, in every possible state, a tier call is
        owed for the key's current probe (a live entry queued or held) and the request
        is one of its requesters.  Asking such a request again is harmless
        (docs/protocol.md, point 7 of "What the spec decides"), and the spec answers
        it None: the driver asks before it judges a tier call that does not come, so
        a class that gave that probe a verdict anyway (a stale result applied by key,
        which also kept it from the tier) is judged by that verdict first."""
        common: set[tuple[bytes, str]] | None = None
        for s in self._states:
            pairs: set[tuple[bytes, str]] = set()
            for e in (*s.held, *(e for batch in s.queue for e in batch)):
                p = core.probe_of(s, e.key)
                if p is not None and p.generation == e.generation:
                    pairs.update((e.key, r) for r in p.requesters)
            common = pairs if common is None else common & pairs
        return sorted(common or ())

    def awaits_post(self, key: bytes) -> bool:
        """Whether ``key``'s verdict waits only on the hidden worker: in every possible
        state its current probe is IN_FLIGHT with its result posted, or answered and
        due to be posted (the worker holds no more of its batch).  Then a ``None``
        for it is explained only by a post not yet made or applied, which the
        driver settles by re-asking within a bound (``Overdue``)."""
        for s in self._states:
            p = core.probe_of(s, key)
            if p is None or p.phase is not Phase.IN_FLIGHT:
                return False
            pending = s.posted if s.held else s.posted + s.answered
            if not any(r.key == key and r.generation == p.generation for r in pending):
                return False
        return bool(self._states) and self.hidden_worker

    def empty_once_posted(self) -> bool:
        """Whether every possible state would hold nothing once the worker posted what it
        is due to post and the results were applied, though some holds something now:
        the leak check's quiescent point, but for posts the oracle cannot see."""
        if self.stopped or not self.hidden_worker or self.expects_empty():
            return False
        post, drain = self.table[core.Post], self.table[core.Drain]
        for s in self._states:
            if post_due(s) and post.enabled(s, core.Post()):
                s = post.apply(s, core.Post())[0]
            if drain.enabled(s, core.Drain()):
                s = drain.apply(s, core.Drain())[0]
            if _holds_anything(s):
                return False
        return True

    def expects_empty(self) -> bool:
        """Whether no possible state holds anything (property 5's quiescent point):
        no probe, index entry, batch entry, queued or held batch, or unapplied result."""
        return not self.stopped and not any(_holds_anything(s) for s in self._states)

    @property
    def size(self) -> int:
        """How many states are possible (without sorting them, unlike ``states``)."""
        return len(self._states)

    def tagged_states(self) -> dict[State, bool]:
        """A copy of the possible states in the checker's order, each -> its tag (True:
        explained only by a wasteful cleanup), for another engine to take over."""
        return dict(self._states)

    def resume(self, states: Mapping[State, bool], notes: Notes, *, stopped: bool) -> None:
        """Start from ``states`` (in order, with their tags, as ``tagged_states`` gives them),
        the classification notes ``notes`` and ``stopped``."""
        self._states = dict(states)
        self._late, self._late_since = {}, None
        self.stopped = stopped
        self.take_notes(notes)

    def restartable(self) -> bool:
        """Whether the possible states explain exactly what the initial state explains: one
        untagged state that holds nothing; or, when the worker's steps are hidden,
        states that hold no probe, index entry, batch entry, queued or held batch, at
        least one of them untagged (their results, if any, are all stale)."""
        hidden, states = self.hidden_worker, self._states
        if self.stopped or all(states.values()) or (not hidden and len(states) > 1):
            return False
        return all(
            not (s.probes or s.index or s.batch or s.queue or s.held)
            and (hidden or not (s.answered or s.posted))
            for s in states
        )

    def drain_due(self) -> bool:
        """Whether the first possible state (efficient ones first) has a drain due."""
        return self.states[0].drain_due

    def trim_history(self) -> None:
        """Forget the observations kept so far (a violation's index counts from here on)."""
        del self.history[:]

    def _trim_tagged(self, states: dict[State, bool]) -> None:
        """Keep at most ``tagged_kept`` tagged states while untagged ones exist.

        Every cleanup keeps a variant that also deleted orphaned IN_FLIGHT probes
        (tagged: it breaks only property 8), so a run with many such cleanups
        would double the set each time.  The untagged states alone decide
        safety; the tagged ones only let a property-8 finding be named as such.
        Those with the fewest probes are kept: the shipped inefficiency deletes
        every orphan at every cleanup.
        """
        tagged = [s for s, is_tagged in states.items() if is_tagged]
        if len(tagged) <= self.tagged_kept or len(tagged) == len(states):
            return
        tagged.sort(key=lambda s: len(s.probes))
        for state in tagged[self.tagged_kept:]:
            del states[state]

    def forget_stale_notes(self) -> None:
        """Drop the classification notes on keys and (key, generation) pairs no possible
        state holds (a long trace would otherwise grow them without bound)."""
        if not self._has_probe_notes():
            return
        live: set[tuple[bytes, int]] = set()
        for state in self._states:
            live.update((k, p.generation) for k, p in state.probes)
            live.update((e.key, e.generation) for e in state.batch + state.held)
            live.update((e.key, e.generation) for batch in state.queue for e in batch)
            live.update((r.key, r.generation) for r in state.answered + state.posted)
        self._keep_notes_on(live)

    def may(self, action: core.Action) -> bool:
        """Whether ``action`` is enabled in some possible state (for preconditions)."""
        return any(core.enabled(s, action, self.table) for s in self._states)

    def observe(self, obs: Observation) -> Violation | None:
        """Take one observation; return the violation if no state explains it.

        After a violation the checker is frozen: later observations are recorded
        and the first violation is returned again.
        """
        self.history.append(obs)
        if self.violation is not None:
            return self.violation
        before, late_before = self._states, self._late
        problem = self._usage(obs)
        after = {} if problem is not None else self._successors(obs)
        late = self._late_successors(obs, problem, before, after)
        if not after:
            if any(not t for t in late.values()):
                return self._late_violation(obs, before, late_before)

            number, detail = problem if problem is not None else classify(self, obs, before)
            likeliest = sorted(before, key=before.__getitem__)  # efficient states first
            self.violation = Violation(
                number, detail, len(self.history) - 1, obs, tuple(likeliest[:3])
            )
            return self.violation
        if len(after) > self.max_states:
            raise OracleLimitError(
                f"{len(after)} possible spec states after {obs!r} (bound {self.max_states})"
            )
        if all(after.values()) and not all(before.values()):

            efficient = {s: t for s, t in before.items() if not t}
            self._waste_waiting = Violation(
                8, efficiency_detail(self, obs, efficient), len(self.history) - 1,
                obs, tuple(efficient)[:3],
            )
        self._states = after
        # A state the spec reaches in order needs no late explanation.
        self._late = {s: t for s, t in late.items() if s not in after}
        if len(self._late) > self.max_states:
            self._late = {}  # too many to step: findings are named without them
        if not self._late:
            self._late_since = None
        if self._waste_waiting is not None and (
            isinstance(obs, ShutdownSeen) or all(self._late.values())
        ):
            # no late state explains the IUT (or it shut down undecided): the waste stands
            self.warnings.append(self._waste_waiting)
            self._waste_waiting = None
        return None

    def _successors(self, obs: Observation) -> dict[State, bool]:
        """The possible states' successors that explain ``obs``, trimmed and closed."""
        after = self._advance(obs)
        # Trim before closing under the hidden worker steps, so that every state kept
        # also has its successors (trimmed after, a tagged state's TakeBatch would go
        # with the states of as many probes that sort before it).
        self._trim_tagged(after)
        if after and self.hidden_worker:
            after = self._close(after, (core.TakeBatch(), core.Post()))
        return after

    def _late_successors(
        self, obs: Observation, problem: tuple[int | None, str] | None,
        before: dict[State, bool], after: dict[State, bool],
    ) -> dict[State, bool]:
        """The late states stepped by ``obs``, and those a ``TierCallWaiting`` rules out."""
        if isinstance(obs, TierCallWaiting):
            if len(after) < len(before):
                self._late_since = self._late_since if self._late else obs
                return {**self._late, **{s: t for s, t in before.items() if s not in after}}
            return self._late
        if not self._late or problem is not None:
            return {}
        kept, notes = self._states, self.copied_notes()
        self._states = self._late
        try:  # stepped on a copy of the notes: late states name nothing of the others
            return self._successors(obs)
        finally:
            self._states = kept
            self.take_notes(notes)

    def _late_violation(
        self, obs: Observation, before: dict[State, bool], late: dict[State, bool]
    ) -> Violation:
        """Property 6: only a worker that took its next batch before posting explains ``obs``
        (``before``: the states in order, which do not; ``late``: those that do)."""
        arrived = self._late_since
        call = "" if arrived is None else f" ({list(arrived.keys)!r} for {arrived.request!r})"
        seen = observed(obs)
        if seen is None:
            seen = classify(self, obs, before)[1]
        self.violation = Violation(
            6,
            f"{seen}: explained only if the worker had not yet posted the "
            f"verdicts it was given when its next tier call{call} came, although one worker "
            "posts the batch in hand before it takes the next (docs/protocol.md, "
            "\"The operations\", take_batch)",
            len(self.history) - 1, obs,
            tuple(sorted(late, key=late.__getitem__))[:3],
        )
        return self.violation

    # -- one observation ---------------------------------------------------------

    def _usage(self, obs: Observation) -> tuple[int | None, str] | None:
        """Errors and calls after shutdown, judged before any state is stepped."""
        error = getattr(obs, "error", None)
        if isinstance(obs, ShutdownSeen) and error is None:
            return None
        if self.stopped and not isinstance(obs, ShutdownSeen):
            if isinstance(obs, SCHEDULER_CALLS) and error != CLOSED:
                shown = "returned normally" if error is None else f"raised {error}"
                return None, f"a call after shutdown() {shown} instead of the closed-manager error"
            return None
        if error is not None:

            return raised(self, obs, error)
        return None

    def _advance(self, obs: Observation) -> dict[State, bool]:
        if self.stopped:  # a scheduler call raised the closed-manager error: no change
            return {} if isinstance(obs, TierCallSeen) else dict(self._states)
        if isinstance(obs, LookupSeen | FlushSeen | DrainSeen | ShutdownSeen):
            self._note_stale_results()
        if isinstance(obs, LookupSeen):
            return self._each(lambda s: self._lookups(s, obs))
        if isinstance(obs, CleanupSeen):
            self._note_cleanup(obs.request)
            return self._cleanup(obs.request)
        if isinstance(obs, FlushSeen):
            self._note_flush((e, core.probe_of(s, e.key)) for s in self._states for e in s.batch)
        if isinstance(obs, MarkMissSeen):
            for s in self._states:
                for key in obs.keys:
                    p = core.probe_of(s, key)
                    if p is not None and p.phase is not Phase.RESOLVED:
                        self.missed.add((key, p.generation))
            return self._each(self._stepper(core.MarkMiss(obs.keys)))
        if isinstance(obs, ShutdownSeen):
            hidden: tuple[core.Action, ...] = (core.Post(),)
            if self.hidden_worker:
                hidden = (core.TakeBatch(), core.Post())
            self.stopped = True
            return self._each(self._stepper(core.Shutdown()), self._close(self._states, hidden))
        if isinstance(obs, TierCallSeen):
            return self._each(lambda s: self._probes(s, obs))
        if isinstance(obs, TakeBatchSeen | PostSeen):
            action: core.Action = (
                core.TakeBatch() if isinstance(obs, TakeBatchSeen) else core.Post()
            )
            did = obs.took if isinstance(obs, TakeBatchSeen) else obs.posted
            if did:
                return self._each(self._stepper(action))
            return {s: t for s, t in self._states.items() if not core.enabled(s, action)}
        if isinstance(obs, ProbeGroupSeen):
            if obs.probed:
                return dict(self._states)  # its tier call was the observation before
            return {s: t for s, t in self._states.items() if not s.held}
        if isinstance(obs, TierCallWaiting):
            waiting = {s: t for s, t in self._states.items() if _holds_group(s, obs)}
            return waiting or dict(self._states)
        if isinstance(obs, Overdue):
            # The bound passed and re-asks saw no post: by the last re-ask's drain the
            # worker had not posted what it owed (a post after that drain would be one
            # made in the very last pause of the bound: it counts as late too).
            return {s: t for s, t in self._states.items() if not (post_due(s) or s.posted)}
        if isinstance(obs, Stalled):
            if self.owed_tier_calls() == 0:
                return dict(self._states)
            return {}
        if isinstance(obs, WorkerDied | Hung):
            return {}
        if isinstance(obs, Leftover):
            return {s: t for s, t in self._states.items() if _holds_anything(s)}
        if isinstance(obs, Tables):
            return {
                s: t for s, t in self._states.items()
                if frozenset(k for k, _ in s.probes) == obs.keys
                and frozenset(r for r, _ in s.index) == obs.requests
            }
        simple: Mapping[type, core.Action] = {
            FlushSeen: core.Flush(), DrainSeen: core.Drain(),
            MarkPresentSeen: core.MarkPresent(getattr(obs, "keys", ())),
        }
        return self._each(self._stepper(simple[type(obs)]))

    def _note_stale_results(self) -> None:
        """Remember the probes that a posted stale result names by key (classification)."""
        for s in self._states:
            for r in s.posted:
                p = core.probe_of(s, r.key)
                if p is not None and p.generation != r.generation:
                    self.stale.add((r.key, p.generation))

    def _stepper(self, action: core.Action) -> Successors:
        table = self.table

        def successors(state: State) -> Iterable[State]:
            transition = table[type(action)]
            if transition.enabled(state, action):
                yield transition.apply(state, action)[0]

        return successors

    def _each(
        self, successors: Successors, states: Mapping[State, bool] | None = None
    ) -> dict[State, bool]:
        """Map every state through ``successors``; an efficient path wins a tie."""
        out: dict[State, bool] = {}
        for state, tagged in (self._states if states is None else states).items():
            for nxt in successors(state):
                out[nxt] = out.get(nxt, True) and tagged
        return out

    def _close(
        self, states: Mapping[State, bool], hidden: tuple[core.Action, ...]
    ) -> dict[State, bool]:
        """``states`` plus everything reachable from them by ``hidden`` actions (a
        ``Post()`` among them stands for every post the state allows, ``core.posts``,
        when ``posts_in_parts``: a hidden worker may post what it answered in parts)."""
        out = dict(states)
        frontier = list(states.items())
        while frontier:
            state, tagged = frontier.pop()
            for hidden_action in hidden:
                actions: tuple[core.Action, ...] = (hidden_action,)
                if isinstance(hidden_action, core.Post) and self.posts_in_parts:
                    actions = core.posts(state)
                for action in actions:
                    transition = self.table[type(action)]
                    if not transition.enabled(state, action):
                        continue
                    nxt = transition.apply(state, action)[0]
                    if nxt not in out or (out[nxt] and not tagged):
                        out[nxt] = tagged
                        frontier.append((nxt, tagged))
        return out

    def _lookups(self, state: State, obs: LookupSeen) -> Iterable[State]:
        """The spec's lookup, also after an optional early drain; the verdict must match."""
        action = core.Lookup(obs.key, obs.request)
        starts = [state]
        if state.posted and not state.drain_due:
            starts.append(core.apply_posted(state))
        apply = self.table[core.Lookup]
        for start in starts:
            if apply.enabled(start, action):
                nxt, verdict = apply.apply(start, action)
                if verdict == obs.verdict and type(verdict) is type(obs.verdict):
                    yield nxt

    def _cleanup(self, request: str) -> dict[State, bool]:
        """The spec's cleanup, plus (tagged) one that also deletes orphaned IN_FLIGHT probes."""
        out: dict[State, bool] = {}
        transition = self.table[core.Cleanup]
        action = core.Cleanup(request)
        for state, tagged in self._states.items():
            if not transition.enabled(state, action):
                continue
            nxt = transition.apply(state, action)[0]
            out[nxt] = out.get(nxt, True) and tagged
            mine = core.keys_of(state, request)
            wasteful = nxt._replace(
                probes=tuple(
                    (k, p) for k, p in nxt.probes if p.requesters or k not in mine
                )
            )
            if wasteful != nxt:
                out.setdefault(wasteful, True)
        return out

    def _probes(self, state: State, obs: TierCallSeen) -> Iterable[State]:
        """ProbeGroupSeen for the held group that matches the call, for each allowed verdict."""
        requests = list(dict.fromkeys(e.request for e in state.held))
        if obs.request not in requests:
            return
        group = [e for e in state.held if e.request == obs.request]
        by_key = {e.key: e for e in group}
        if len(by_key) != len(group) or sorted(by_key) != sorted(obs.keys):
            return
        ordered = tuple(by_key[k] for k in obs.keys)
        rest = tuple(e for e in state.held if e.request != obs.request)
        start = state._replace(held=ordered + rest)
        proper = obs.answer.proper(len(ordered))
        if not proper:
            items = obs.answer.items
            for i, e in enumerate(ordered):
                self.faulty[e.key, e.generation] = items[i] if i < len(items) else NO_VALUE
        apply = self.table[core.ProbeGroup]
        for verdicts in verdict_candidates(obs.answer, len(ordered)):
            action = core.ProbeGroup(verdicts)
            if apply.enabled(start, action):
                yield apply.apply(start, action)[0]


def post_due(state: State) -> bool:
    """Whether the worker holds answered results and nothing more of its batch to probe:
    posting is all it may do next (one worker posts before it takes the next batch)."""
    return bool(state.answered) and not state.held


def _holds_group(state: State, obs: TierCallWaiting) -> bool:
    """Whether the worker holds, unprobed, exactly the group of ``obs``'s tier call."""
    keys = sorted(e.key for e in state.held if e.request == obs.request)
    return bool(keys) and keys == sorted(obs.keys)


def _holds_anything(state: State) -> bool:
    return bool(
        state.probes or state.index or state.batch or state.queue or state.held
        or state.answered or state.posted
    )


def _groups_owed(state: State) -> int:
    """Tier calls a state still owes: one per request group, queued or held."""
    queued = sum(len({e.request for e in batch}) for batch in state.queue)
    return queued + len({e.request for e in state.held})
