"""Model-checker results in words: text, JSON and Graphviz, in the protocol's vocabulary.

Actions print as the protocol names them (``lookup(k0, A)``, ``flush``,
``probe_group``...), with what they returned; states print as one line of
probes and pipeline.  Counterexamples print step by step from the initial
state, then, after a bad flush, what the worker does with what it was sent.

What it does not do: search, or decide exit codes (``asynclookup.cli`` does).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from asynclookup.modelcheck.search import Bounds, CheckResult, TraceStep, Violation
from asynclookup.spec.core import (
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
    ProbeGroup,
    Result,
    Shutdown,
    State,
    TakeBatch,
    TierCall,
)
from asynclookup.spec.properties import CRASH

DOT_LIMIT = 1000  # states; beyond this a drawing is unreadable

# The sometimes goals (asynclookup.spec.properties.SOMETIMES) whose state the bounds
# can rule out, and the least bound it needs: a probe with two requesters needs two
# requests.  Every other goal is reached with one key and one request
# (tests/test_modelcheck_cli.py pins both), so a goal missed at other bounds is
# reported as NOT reached: a search that stayed short of it.
GOAL_NEEDS: dict[str, tuple[str, int]] = {
    "joined_in_flight": ("requests", 2),
}


def goal_impossible(name: str, bounds: Bounds) -> str | None:
    """Why no run within ``bounds`` reaches the goal ``name`` ("needs --requests 2"), or None."""
    if name not in GOAL_NEEDS:
        return None
    field, least = GOAL_NEEDS[name]
    return f"needs --{field} {least}" if getattr(bounds, field) < least else None


def _goal_text(name: str, hit: bool, bounds: Bounds) -> str:
    """One goal of the ``sometimes:`` line."""
    if hit:
        return f"{name} reached"
    why = goal_impossible(name, bounds)
    return f"{name} impossible at these bounds ({why})" if why else f"{name} NOT reached"


def key_name(key: bytes) -> str:
    """A key as printed: its bytes decoded when they are text."""
    try:
        return key.decode("ascii")
    except UnicodeDecodeError:
        return repr(key)


def _entries(entries: Iterable[Entry]) -> str:
    return "[" + ", ".join(f"{key_name(e.key)}/{e.request} g{e.generation}" for e in entries) + "]"


def _results(results: Iterable[Result]) -> str:
    return "[" + ", ".join(f"{key_name(r.key)} g{r.generation} {r.verdict}" for r in results) + "]"


def action_text(action: Action, output: Output = None, before: State | None = None) -> str:
    """One step in the protocol's vocabulary: the action and what it gave back."""
    if isinstance(action, Lookup):
        return f"lookup({key_name(action.key)}, {action.request}) -> {output}"
    if isinstance(action, Flush) and isinstance(output, FlushOutput):
        submitted, dropped = _entries(output.submitted), _entries(output.dropped)
        return f"flush -> submitted {submitted}, dropped {dropped}"
    if isinstance(action, Cleanup):
        return f"cleanup({action.request})"
    if isinstance(action, MarkMiss | MarkPresent):
        name = "mark_miss" if isinstance(action, MarkMiss) else "mark_present"
        return f"{name}({', '.join(key_name(k) for k in action.keys)})"
    if isinstance(action, TakeBatch):
        held = _entries(before.queue[0]) if before is not None and before.queue else "[]"
        return f"take_batch -> holds {held}"
    if isinstance(action, ProbeGroup):
        answers = "failed" if action.answers is None else ", ".join(map(str, action.answers))
        if not isinstance(output, TierCall):
            return f"probe_group({answers})"
        keys = ", ".join(key_name(k) for k in output.keys)
        return f"probe_group({answers}) -> worker probes [{keys}] for {output.request}"
    if isinstance(action, Post):
        answered = _results(before.answered) if before is not None else "[]"
        return f"post -> posts {answered}"
    return _NAMES.get(type(action), type(action).__name__)


_NAMES = {Flush: "flush", Drain: "drain", Shutdown: "shutdown"}


def state_text(state: State) -> str:
    """A state on one line: probes, then whatever the batch and pipeline hold."""
    probes = ", ".join(
        f"{key_name(k)}: g{p.generation} {p.phase.name}"
        + (f" {p.verdict}" if p.verdict is not None else "")
        + f" [{' '.join(sorted(p.requesters))}]"
        for k, p in state.probes
    )
    parts = [f"probes {{{probes}}}", f"next g{state.next_generation}"]
    for name, value in (
        ("batch", state.batch), ("held", state.held),
    ):
        if value:
            parts.append(f"{name} {_entries(value)}")
    if state.queue:
        parts.append("queue [" + ", ".join(_entries(b) for b in state.queue) + "]")
    for name, results in (("answered", state.answered), ("posted", state.posted)):
        if results:
            parts.append(f"{name} {_results(results)}")
    parts += [flag for flag in ("drain_due", "stopped") if getattr(state, flag)]
    return "  ".join(parts)


def _trace_lines(steps: Iterable[TraceStep], before: State, first: int) -> list[str]:
    lines = []
    for n, step in enumerate(steps, first):
        lines.append(f"  {n:3d}. {action_text(step.action, step.output, before)}")
        lines.append(f"         {state_text(step.state)}")
        before = step.state
    return lines


def violation_lines(violation: Violation) -> list[str]:
    """The violated property and its shortest counterexample, step by step."""
    what = (
        f"{violation.title}: {violation.detail}"
        if violation.number == CRASH
        else f"{violation.title}, predicate {violation.predicate}: {violation.detail}"
    )
    lines = [f"VIOLATION of {what}"]
    if violation.also:
        lines.append(f"the same step also breaks: {', '.join(violation.also)}")
    steps = len(violation.trace)
    plural = "s" * (steps != 1)
    lines.append(f"shortest counterexample, {steps} step{plural} from the initial state:")
    initial = State()
    lines.append(f"         {state_text(initial)}")
    lines += _trace_lines(violation.trace, initial, 1)
    if violation.predicate.startswith("progress"):
        lines.append("  from this state no quiescent state is reachable (without shutdown)")
    else:
        lines[-2] += "   <- breaks it"
    if violation.then:
        lines.append("then the worker:")
        last = violation.trace[-1].state if violation.trace else initial
        lines += _trace_lines(violation.then, last, steps + 1)
    return lines


def text(result: CheckResult, variant: str | None, peak_mb: float) -> str:
    """The human-readable report of one search."""
    b = result.bounds
    rate = result.states / result.seconds if result.seconds > 0 else 0.0
    lines = [
        f"model-check: keys={b.keys} requests={b.requests} batch_entries={b.batch_entries} "
        f"queued_batches={b.queued_batches} posted_results={b.posted_results} "
        f"verdicts={','.join(str(v).lower() for v in b.verdicts)} table={variant or 'spec'}",
        f"reductions: {', '.join(result.reductions.names()) or 'none'}",
        f"states {result.states:,}  transitions {result.transitions:,}  depth {result.depth}  "
        f"fixpoint {'reached' if result.fixpoint else 'NOT reached'}  "
        f"{result.seconds:.1f} s ({rate:,.0f} states/s)  peak memory {peak_mb:,.0f} MB",
        _storage_line(result),
        "sometimes: " + ", ".join(
            _goal_text(name, hit, b) for name, hit in result.sometimes.items()
        ),
    ]
    if result.violation is not None:
        lines += _research_lines(result)
        lines += violation_lines(result.violation)
    elif result.fixpoint:
        lines.append(
            "verdict: every property holds in every reachable state and step, and a "
            "quiescent state is reachable from every state"
        )
    else:
        lines.append("verdict: INCOMPLETE (a limit stopped the search); no violation found so far")
    return "\n".join(lines)


def _storage_line(result: CheckResult) -> str:
    """How the states were stored: exhaustively or by fingerprint, bytes a state, kernel."""
    kept = f"{result.bytes_per_state:.0f} bytes a state, {result.visited_impl} kernel"
    if result.missed_state_bound is None:
        return f"storage: exhaustive ({result.key_bytes}-byte keys), {kept}"
    return (f"storage: HASH COMPACTION (64-bit fingerprints), {kept}; probability that a "
            f"state was missed at most {result.missed_state_bound:.1e} "
            f"(n^2/2^65, n = {result.states:,} states)")


def _research_lines(result: CheckResult) -> list[str]:
    """How the counterexample of a search with persistent sets was made shortest."""
    if not result.reductions.persistent:
        return []
    if result.shortest:
        return [f"counterexample: searched again without persistent sets "
                f"({result.research_states:,} states) for a shortest one"]
    return [f"counterexample: from the search with persistent sets, maybe not shortest "
            f"(a limit stopped the search without them at {result.research_states:,} states)"]


def judgement(result: CheckResult) -> str:
    """The search's judgement: holds, violation or incomplete (JSON key ``verdict``)."""
    if result.violation is not None:
        return "violation"
    return "holds" if result.fixpoint else "incomplete"


def _step_json(step: TraceStep, before: State) -> dict[str, str]:
    action = action_text(step.action, step.output, before)
    return {"action": action, "state": state_text(step.state)}


def _steps_json(steps: Iterable[TraceStep], before: State) -> list[dict[str, str]]:
    out = []
    for step in steps:
        out.append(_step_json(step, before))
        before = step.state
    return out


def as_json(result: CheckResult, variant: str | None, peak_mb: float) -> dict[str, Any]:
    """The report of one search as JSON-ready data."""
    b = result.bounds
    data: dict[str, Any] = {
        "bounds": {
            "keys": b.keys, "requests": b.requests, "batch_entries": b.batch_entries,
            "queued_batches": b.queued_batches, "posted_results": b.posted_results,
            "verdicts": list(b.verdicts),
        },
        "table": variant or "spec",
        "reductions": result.reductions.names(),
        "states": result.states,
        "transitions": result.transitions,
        "depth": result.depth,
        "fixpoint": result.fixpoint,
        "seconds": round(result.seconds, 3),
        "states_per_second": round(result.states / result.seconds) if result.seconds else 0,
        "peak_memory_mb": round(peak_mb, 1),
        "verdict": judgement(result),
        "sometimes": result.sometimes,
        "sometimes_impossible": {
            name: why for name in result.sometimes
            if not result.sometimes[name] and (why := goal_impossible(name, b))
        },
        "stuck_states": result.stuck,
        "research_states": result.research_states,
        "storage": {
            "hash_compaction": result.hash_compaction,
            "missed_state_bound": result.missed_state_bound,
            "bytes_per_state": round(result.bytes_per_state, 1),
            "key_bytes": result.key_bytes,
            "kernel": result.visited_impl,
        },
        "shortest": result.shortest,
        "violation": None,
    }
    v = result.violation
    if v is not None:
        last = v.trace[-1].state if v.trace else State()
        data["violation"] = {
            **v.as_json(), "predicate": v.predicate,
            "efficiency": v.kind == "efficiency", "also": list(v.also),
            "trace": _steps_json(v.trace, State()),
            "then": _steps_json(v.then, last),
        }
    return data


def dot(result: CheckResult) -> str:
    """The reachable graph as Graphviz source (for tiny bounds)."""
    if result.graph is None or result.states_list is None:
        raise ValueError("the search did not keep its graph")
    lines = ["digraph reachable {", '  node [shape=box, fontname="monospace", fontsize=9];']
    for n, state in enumerate(result.states_list):
        label = state_text(state).replace("  ", "\\n").replace('"', '\\"')
        style = ", style=bold" if n == 0 else ""
        lines.append(f'  s{n} [label="{label}"{style}];')
    for source, action, target in result.graph:
        if source != target:
            label = action_text(action).split(" -> ")[0]
            lines.append(f'  s{source} -> s{target} [label="{label}", fontsize=8];')
    lines.append("}")
    return "\n".join(lines) + "\n"
