"""The bounded model checker: pinned state counts, goals, variants, reductions, traces."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest

from asynclookup.modelcheck import report as _report
from asynclookup.modelcheck._canon import Reductions, Space
from asynclookup.modelcheck._memo import Memo, changed_fields, track
from asynclookup.modelcheck.search import (
    CRASH,
    PROGRESS,
    Bounds,
    CheckResult,
    check,
    default_reductions,
)
from asynclookup.spec.core import (
    INITIAL,
    TRANSITIONS,
    Cleanup,
    Drain,
    Flush,
    Lookup,
    ProbeGroup,
    State,
    TierCall,
    Transition,
    step,
)
from asynclookup.spec.variants import VARIANTS

SMALL = Bounds(keys=1, requests=2, batch_entries=1, queued_batches=1, posted_results=1)
SMALL_2K = Bounds(2, 1, batch_entries=1, queued_batches=1, posted_results=1, verdicts=(True,))
NO_POR = replace(Reductions(), persistent=False)  # every reduction but the partial-order one
GOALS = ("resolved_present", "orphan_in_flight", "stale_entry_in_batch", "stale_result_posted")


@pytest.fixture(scope="module")
def one_key_two_requests() -> CheckResult:
    return check(Bounds(keys=1, requests=2), reductions=NO_POR)


@pytest.fixture(scope="module")
def two_keys_one_request() -> CheckResult:
    return check(Bounds(keys=2, requests=1), reductions=NO_POR)


def _depths(result: CheckResult) -> list[int]:
    """The breadth-first distance of every state of a kept graph from INITIAL."""
    assert result.graph is not None
    successors: dict[int, list[int]] = {}
    for source, _, target in result.graph:
        successors.setdefault(source, []).append(target)
    depth, frontier = {0: 0}, [0]
    while frontier:
        following = []
        for source in frontier:
            for target in successors.get(source, []):
                if target not in depth:
                    depth[target] = depth[source] + 1
                    following.append(target)
        frontier = following
    return [depth[n] for n in range(result.states)]


def _classes(result: CheckResult, space: Space) -> dict[tuple[int, ...], int]:
    """Each canonical class (under ``space``) of the states found, with its distance."""
    assert result.states_list is not None
    classes: dict[tuple[int, ...], int] = {}
    for state, depth in zip(result.states_list, _depths(result), strict=True):
        key = space.canonical_of(state)
        classes[key] = min(classes.get(key, depth), depth)
    return classes


def _agree(bounds: Bounds, less: Reductions, more: Reductions) -> None:
    """The search with ``more`` reductions visits exactly the quotient of the other,
    each class at the distance of its nearest member."""
    small, big = (check(bounds, reductions=r, keep_graph=True) for r in (more, less))
    space = Space(bounds.key_names, bounds.request_names, more)
    assert small.holds and big.holds and small.sometimes == big.sometimes
    assert small.states < big.states
    assert _classes(big, space) == _classes(small, space)


# -- the correct spec -------------------------------------------------------------


def test_one_key_two_requests_pinned(one_key_two_requests: CheckResult) -> None:
    """1 key x 2 requests reaches its fixpoint with every property holding, 1,282 states."""
    r = one_key_two_requests
    assert r.holds and r.stuck == 0
    assert (r.states, r.transitions, r.depth) == (1282, 12108, 26)


def test_two_keys_one_request_pinned(two_keys_one_request: CheckResult) -> None:
    """2 keys x 1 request reaches its fixpoint with every property holding, 26,193 states."""
    r = two_keys_one_request
    assert r.holds and r.stuck == 0
    assert (r.states, r.transitions, r.depth) == (26193, 281432, 29)


def test_persistent_sets_pinned() -> None:
    """With the partial-order reduction (the default) 1x2 has 1,090 states and 2x1 21,749."""
    found = [check(Bounds(keys=k, requests=r)) for k, r in ((1, 2), (2, 1))]
    assert all(r.holds and r.stuck == 0 and r.reductions.persistent for r in found)
    assert [(r.states, r.transitions, r.depth) for r in found] == [
        (1090, 7570, 26), (21749, 174386, 29)
    ]


def test_one_key_two_requests_reaches_every_goal(one_key_two_requests: CheckResult) -> None:
    """Every SOMETIMES goal is reached with two requests, so the search is not vacuous."""
    assert all(one_key_two_requests.sometimes.values())
    assert set(one_key_two_requests.sometimes) == {*GOALS, "joined_in_flight"}


def test_two_keys_one_request_goals(two_keys_one_request: CheckResult) -> None:
    """With one request every goal but joining another request's probe is reached."""
    reached = {name for name, hit in two_keys_one_request.sometimes.items() if hit}
    assert reached == set(GOALS)


def test_max_states_stops_before_fixpoint() -> None:
    """A state limit stops the search: no fixpoint, no violation, no progress verdict."""
    r = check(Bounds(keys=2, requests=1), max_states=2000)
    assert not r.fixpoint and r.violation is None and not r.holds
    assert 2000 <= r.states < 6000


def test_bounds_reject_a_post_that_cannot_fit() -> None:
    """Bounds whose posted results cannot hold one group's results are refused."""
    with pytest.raises(ValueError, match="posted_results"):
        Bounds(batch_entries=2, posted_results=1)


# -- broken variants: the checker finds each, with a shortest trace -------------


def test_seed_bug_shortest_trace() -> None:
    """Flush without re-validation: lookup(K, A) -> cleanup(A) -> flush -> worker probes K."""
    v = check(Bounds(keys=1, requests=1), VARIANTS["flush-no-revalidate"].table).violation
    assert v is not None and v.number == 1
    assert [s.action for s in v.trace] == [Lookup(b"k0", "A"), Cleanup("A"), Flush()]
    calls = [s.output for s in v.then if isinstance(s.action, ProbeGroup)]
    assert calls == [TierCall((b"k0",), "A")]


def test_stale_result_bug_shortest_trace() -> None:
    """Results applied by key: a late result lands on a re-created probe in 7 steps."""
    v = check(Bounds(keys=1, requests=1), VARIANTS["drain-no-generation-check"].table).violation
    assert v is not None and v.number == 2
    assert len(v.trace) == 7


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_variant_is_found(name: str) -> None:
    """Every broken variant breaks one of the properties it is known to break."""
    variant = VARIANTS[name]
    bounds = {  # these two need two keys in one batch
        "tier-short-answer": Bounds(keys=2, requests=1),
        "wrong-request-context": Bounds(keys=2, requests=2),
    }.get(name, Bounds(1, 2))
    v = check(bounds, variant.table).violation
    assert v is not None and v.number in variant.breaks


def test_progress_violation_names_a_stuck_state() -> None:
    """A worker that never posts is reported as a progress violation with stuck states."""
    r = check(SMALL, VARIANTS["worker-never-posts"].table)
    assert r.violation is not None and r.violation.property == PROGRESS
    assert r.fixpoint and r.stuck > 0


def test_an_action_that_raises_is_a_violation() -> None:
    """An action function that raises is reported, with the trace that reaches it."""

    def drain_raising(state: State, action: Drain) -> tuple[State, None]:
        raise RuntimeError("planted")

    table: Mapping[type, Transition] = {
        **TRANSITIONS, Drain: TRANSITIONS[Drain]._replace(apply=drain_raising)
    }
    v = check(SMALL, table).violation
    assert v is not None and v.property == CRASH and "planted" in v.doc
    assert [s.action for s in v.trace] == [Drain()]


def test_counterexample_replays_through_step() -> None:
    """Each step of a counterexample is a real step of the variant's table from INITIAL."""
    table = VARIANTS["drain-no-generation-check"].table
    v = check(Bounds(keys=2, requests=1), table).violation
    assert v is not None
    state = INITIAL
    for s in v.trace:
        assert step(state, s.action, table) == (s.state, s.output)
        state = s.state


def test_counterexample_prints_in_protocol_words() -> None:
    """The printed seed counterexample reads lookup, cleanup, flush, then the worker probes."""
    v = check(Bounds(keys=1, requests=1), VARIANTS["flush-no-revalidate"].table).violation
    assert v is not None
    text = "\n".join(_report.violation_lines(v))
    order = ["lookup(k0, A)", "cleanup(A)", "flush -> submitted [k0/A g0]",
             "worker probes [k0] for A"]
    positions = [text.index(s) for s in order]
    assert positions == sorted(positions)


# -- the reductions are sound: reduced and unreduced searches agree -------------


COLLAPSE_ONLY = replace(Reductions.none(), collapse_stale=True)


def test_stale_collapse_agrees() -> None:
    """Collapsing stale generations visits exactly the quotient of the ranked search."""
    _agree(SMALL_2K, Reductions.none(), COLLAPSE_ONLY)


def test_inert_stale_agrees() -> None:
    """Placeholders for inert stale data visit exactly the quotient of the search without."""
    _agree(SMALL_2K, COLLAPSE_ONLY, replace(COLLAPSE_ONLY, inert_stale=True))


def test_key_symmetry_agrees() -> None:
    """Key symmetry visits exactly the quotient of the search without it."""
    _agree(SMALL_2K, COLLAPSE_ONLY, replace(COLLAPSE_ONLY, key_symmetry=True))


def test_request_symmetry_agrees() -> None:
    """Request symmetry visits exactly the quotient of the search without it."""
    _agree(SMALL, COLLAPSE_ONLY, replace(COLLAPSE_ONLY, request_symmetry=True))


def test_results_by_key_agrees() -> None:
    """Sorting results by key visits exactly the quotient of the search without it."""
    bounds = Bounds(2, 1, batch_entries=2, queued_batches=1, posted_results=2, verdicts=(True,))
    _agree(bounds, replace(Reductions(), results_by_key=False), Reductions())


def test_variants_do_not_get_the_inert_reduction() -> None:
    """Only the spec's own table is searched with inert stale placeholders by default."""
    assert default_reductions(TRANSITIONS).inert_stale
    assert not default_reductions(VARIANTS["drain-no-generation-check"].table).inert_stale


@pytest.mark.parametrize("name", ["flush-no-revalidate", "drain-no-generation-check"])
def test_reductions_keep_shortest_counterexamples(name: str) -> None:
    """A variant's counterexample has the same property and length with or without reductions."""
    table = VARIANTS[name].table
    found = [check(SMALL, table, reductions=r).violation for r in (Reductions.none(), None)]
    assert found[0] is not None and found[1] is not None
    assert (found[0].property, len(found[0].trace)) == (found[1].property, len(found[1].trace))


def test_memo_agrees_with_direct_evaluation() -> None:
    """The memoised search makes exactly the search that calls every function directly."""
    a, b = (check(SMALL_2K, memoised=m) for m in (True, False))
    assert (a.states, a.transitions, a.depth, a.sometimes) == (
        b.states, b.transitions, b.depth, b.sometimes
    )


# -- the memo's read tracking ------------------------------------------------------


def _ids(**ids: int) -> tuple[int, ...]:
    return tuple(ids.get(name, 0) for name in State._fields)


def test_tracked_state_logs_attribute_reads() -> None:
    """Reading a field of a tracked state logs that field and nothing else."""
    tracked, log = track(INITIAL)
    _ = tracked.batch, tracked.stopped
    assert log == {State._fields.index("batch"), State._fields.index("stopped")}


def test_tracked_state_logs_everything_when_iterated() -> None:
    """Treating a tracked state as a tuple counts as reading every field."""
    tracked, log = track(INITIAL)
    _ = tuple(tracked)
    assert log == set(range(len(State._fields)))


def test_replace_keeps_copies_apart_from_computed_fields() -> None:
    """A successor built by _replace reports only its replaced fields as changed."""
    tracked, log = track(INITIAL)
    after = tracked._replace(batch=(), drain_due=True)
    assert changed_fields(after) == ((3, ()), (8, True))
    assert log == set()


def test_memo_reuses_a_result_when_read_fields_agree() -> None:
    """A second state that agrees on the fields read is answered from the memo."""
    memo = Memo(lambda s: s.drain_due)
    assert memo(_ids(), lambda: INITIAL) is False
    assert memo(_ids(batch=1), lambda: pytest.fail("rebuilt")) is False
    assert (memo.hits, memo.misses) == (1, 1)


def test_memo_recomputes_when_a_read_field_differs() -> None:
    """A state that differs in a field the function read is computed afresh."""
    memo = Memo(lambda s: s.drain_due)
    memo(_ids(), lambda: INITIAL)
    assert memo(_ids(drain_due=1), lambda: INITIAL._replace(drain_due=True)) is True
    assert memo.misses == 2
