"""Mermaid diagrams of the protocol, drawn from runs of the spec itself.

- ``sequence(name)``: a sequence diagram of one race of ``SCENARIOS``.  Each
  scenario is a list of spec actions; it is run through ``asynclookup.spec.core.step`` and
  every step is checked against ``asynclookup.spec.properties.violated``, so a diagram
  shows what the spec does, never what a writer believed it does.
- ``probe_states()``: the state diagram of one probe, read off every
  transition the model checker reaches for one key and two requests: each
  arrow is a change of the key's phase, verdict or generation, labelled with
  the actions that make it.

What it does not do: read or write files (``docgen.generate`` does), or decide
anything about the protocol.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from asynclookup.modelcheck.report import key_name
from asynclookup.modelcheck.search import Bounds, check
from asynclookup.spec.core import (
    TRANSITIONS,
    Action,
    Cleanup,
    Drain,
    Entry,
    Flush,
    FlushOutput,
    Lookup,
    MarkMiss,
    MarkPresent,
    Output,
    Post,
    Probe,
    ProbeGroup,
    Result,
    Shutdown,
    State,
    TakeBatch,
    TierCall,
    apply_posted,
    probe_of,
    step,
)
from asynclookup.spec.properties import violated


class DiagramError(Exception):
    """A scenario is not a run of the spec, or breaks one of its properties."""


@dataclass(frozen=True)
class Scenario:
    """A race, told as the spec actions that play it."""

    title: str
    actions: tuple[Action, ...]


K0, K1 = b"k0", b"k1"

SCENARIOS: Mapping[str, Scenario] = MappingProxyType({
    "cleanup-before-flush": Scenario(
        "A is cancelled before the flush; B asks for the same key in the same step",
        (
            Lookup(K0, "A"), Cleanup("A"), Lookup(K0, "B"), Flush(),
            TakeBatch(), ProbeGroup((True,)), Post(), Flush(), Lookup(K0, "B"),
        ),
    ),
    "cleanup-in-flight": Scenario(
        "A is cancelled while its probe is in flight; B then asks for the same key",
        (
            Lookup(K0, "A"), Flush(), TakeBatch(), Cleanup("A"), Lookup(K0, "B"),
            ProbeGroup((True,)), Post(), Flush(), Lookup(K0, "B"),
        ),
    ),
    "mark-miss-pending": Scenario(
        "a load of k0 fails while a new probe of k0 is still pending",
        (
            Lookup(K0, "A"), MarkMiss((K0,)), Flush(), TakeBatch(), ProbeGroup((True,)),
            Post(), Flush(), Lookup(K0, "A"), MarkMiss((K0,)), Lookup(K0, "A"),
        ),
    ),
    "mark-present-in-flight": Scenario(
        "a store of k0 succeeds while the probe of k0 is in flight",
        (
            Lookup(K0, "A"), Flush(), TakeBatch(), MarkPresent((K0,)), ProbeGroup((False,)),
            Post(), Drain(), Lookup(K0, "A"),
        ),
    ),
    "tier-fails": Scenario(
        "the tier raises, or answers too few results, for a call of two keys",
        (
            Lookup(K0, "A"), Lookup(K1, "A"), Flush(), TakeBatch(), ProbeGroup(None),
            Post(), Drain(), Lookup(K0, "A"), Lookup(K1, "A"),
        ),
    ),
})


# -- sequence diagrams -----------------------------------------------------------


def run(actions: Iterable[Action]) -> list[tuple[State, Action, State, Output]]:
    """Play ``actions`` from the initial state; every step must keep every property."""
    state = State()
    steps = []
    for n, action in enumerate(actions, 1):
        try:
            after, output = step(state, action)
        except Exception as exc:
            raise DiagramError(f"step {n} {action!r}: {type(exc).__name__}: {exc}") from None
        broken = violated(state, action, after, output)
        if broken:
            names = ", ".join(p.name for p in broken)
            raise DiagramError(f"step {n} {action!r} breaks {names}")
        steps.append((state, action, after, output))
        state = after
    return steps


def _entries(entries: Iterable[Entry]) -> str:
    return "[" + ", ".join(f"{key_name(e.key)}/{e.request} g{e.generation}" for e in entries) + "]"


def _results(results: Iterable[Result]) -> str:
    return "[" + ", ".join(f"{key_name(r.key)} g{r.generation} {r.verdict}" for r in results) + "]"


def _probe(key: bytes, probe: Probe) -> str:
    verdict = "" if probe.verdict is None else f" {probe.verdict}"
    requesters = " ".join(sorted(probe.requesters)) or "no requesters"
    return f"{key_name(key)} g{probe.generation} {probe.phase.name}{verdict} ({requesters})"


def _probes(state: State) -> str:
    return "<br/>".join(_probe(k, p) for k, p in state.probes) or "no probe state"


def _applied(before: State, after: State) -> list[str]:
    """What applying the posted results of ``before`` did, one line per result."""
    if not before.posted or after.posted:
        return []
    lines = []
    for r in before.posted:
        probe = probe_of(before, r.key)
        shown = f"{key_name(r.key)} g{r.generation} {r.verdict}"
        if probe is None or probe.generation != r.generation:
            lines.append(f"ignores stale result {shown}")
        elif probe_of(after, r.key) is None:
            lines.append(f"result {shown} has no requesters: forgets {key_name(r.key)}")
        else:
            lines.append(f"applies result {shown}")
    return lines


def _scheduler_call(action: Action) -> str:
    if isinstance(action, Lookup):
        return f"lookup({key_name(action.key)}, {action.request})"
    if isinstance(action, Cleanup):
        return f"cleanup({action.request})"
    if isinstance(action, MarkMiss | MarkPresent):
        verb = "mark_miss" if isinstance(action, MarkMiss) else "mark_present"
        return f"{verb}({', '.join(key_name(k) for k in action.keys)})"
    return {Flush: "flush", Drain: "drain_results", Shutdown: "shutdown"}[type(action)]


def _sequence_lines(before: State, action: Action, after: State, output: Output) -> list[str]:
    lines: list[str] = []
    if isinstance(action, TakeBatch):
        return [f"Note over W: take_batch: holds {_entries(after.held)}"]
    if isinstance(action, ProbeGroup):
        assert isinstance(output, TierCall)
        keys = ", ".join(key_name(k) for k in output.keys)
        lines.append(f"W->>T: batch_lookup([{keys}], context {output.request})")
        if action.answers is None:
            lines.append("T--xW: raises, or answers too few results")
            lines.append("Note over W: every key of the call gets False")
        else:
            lines.append(f"T-->>W: [{', '.join(map(str, action.answers))}]")
        return lines
    if isinstance(action, Post):
        return [f"W-)M: post {_results(before.answered)}"]
    lines.append(f"S->>M: {_scheduler_call(action)}")
    lines += [f"Note over M: {line}" for line in _applied(before, after)]
    if isinstance(action, Flush):
        assert isinstance(output, FlushOutput)
        if output.dropped:
            lines.append(f"Note over M: drops {_entries(output.dropped)}: not live any more")
        if output.submitted:
            lines.append(f"M-)W: submits {_entries(output.submitted)}")
        else:
            lines.append("Note over M: nothing left to submit")
    if isinstance(action, Lookup):
        lines.append(f"M-->>S: {output}")
    if after.probes != before.probes:
        lines.append(f"Note right of M: {_probes(after)}")
    return lines


def sequence(name: str) -> str:
    """The Mermaid sequence diagram of scenario ``name``."""
    scenario = SCENARIOS[name]
    lines = [
        "sequenceDiagram",
        "    participant S as scheduler",
        "    participant M as manager (scheduler thread)",
        "    participant W as worker thread",
        "    participant T as tier",
    ]
    for before, action, after, output in run(scenario.actions):
        lines += ["    " + line for line in _sequence_lines(before, action, after, output)]
    return "\n".join(lines)


# -- the state diagram of one probe ------------------------------------------------

NONE = "[*]"
_VERBS = {
    Lookup: "lookup", Flush: "flush", Cleanup: "cleanup", MarkMiss: "mark_miss",
    MarkPresent: "mark_present", Drain: "drain", Shutdown: "shutdown",
}
_ORDER = tuple(_VERBS.values())


def _stages(before: State, action: Action) -> list[tuple[State, State, bool]]:
    """``action`` as (from, to, applies results) stages: the actions that apply
    posted results do that first, then their own work."""
    drains = isinstance(action, Flush | Drain | Shutdown) or (
        isinstance(action, Lookup) and before.drain_due
    )
    after, _ = TRANSITIONS[type(action)].apply(before, action)
    if not drains:
        return [(before, after, False)]
    middle = apply_posted(before)
    return [(before, middle, True), (middle, after, False)]


def _cause(old: Probe | None, new: Probe | None, applies_results: bool) -> str:
    if applies_results:
        return "its result, no requesters left" if new is None else "its result applied"
    if new is None:
        return "no requesters left"
    if old is not None and new.generation != old.generation:
        return "new generation, True"
    if old is not None and new.verdict != old.verdict:
        return f"verdict {new.verdict}"
    return ""


PROBE_BOUNDS = Bounds(keys=1, requests=2)


def probe_transitions(bounds: Bounds = PROBE_BOUNDS) -> dict[tuple[str, str, str], set[str]]:
    """(from, to, cause) -> the actions that move one key's probe that way."""
    result = check(bounds, keep_graph=True)
    if not result.holds or result.graph is None or result.states_list is None:
        raise DiagramError("the spec's own search did not reach its fixpoint cleanly")
    found: dict[tuple[str, str, str], set[str]] = {}
    states = result.states_list
    (key,) = bounds.key_names
    for source, action, _target in result.graph:
        for before, after, applies_results in _stages(states[source], action):
            old, new = probe_of(before, key), probe_of(after, key)
            if old == new or (old is not None and new is not None and old[:3] == new[:3]):
                continue  # untouched, or only its requesters changed
            start = NONE if old is None else old.phase.name
            end = NONE if new is None else new.phase.name
            cause = _cause(old, new, applies_results)
            found.setdefault((start, end, cause), set()).add(_VERBS[type(action)])
    return found


def probe_states() -> str:
    """The Mermaid state diagram of one probe, from the spec's reachable transitions."""
    lines = ["stateDiagram-v2"]
    for (start, end, cause), verbs in sorted(probe_transitions().items(), key=_arrow_order):
        names = "/".join(v for v in _ORDER if v in verbs)
        label = f"{names} ({cause})" if cause else names
        lines.append(f"    {start} --> {end}: {label}")
    return "\n".join(lines)


_PHASE_ORDER = {NONE: 0, "PENDING": 1, "IN_FLIGHT": 2, "RESOLVED": 3}


def _arrow_order(item: tuple[tuple[str, str, str], set[str]]) -> tuple[int, int, str]:
    (start, end, cause), _ = item
    return (_PHASE_ORDER[start], _PHASE_ORDER[end] or 9, cause)
