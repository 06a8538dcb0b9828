"""The bounded model checker: pinned state counts, goals, variants, reductions, traces."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import replace

import pytest

from asynclookup.modelcheck import _canon, _memo, _visited
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

# one xdist worker runs this module, and its fixtures are session-scoped: built once
# (a module fixture is torn down whenever another module's test runs between)
pytestmark = pytest.mark.xdist_group("modelcheck_search")

SMALL = Bounds(keys=1, requests=2, batch_entries=1, queued_batches=1, posted_results=1)
SMALL_2K = Bounds(2, 1, batch_entries=1, queued_batches=1, posted_results=1, verdicts=(True,))
NO_POR = replace(Reductions(), persistent=False)  # every reduction but the partial-order one
GOALS = ("resolved_present", "orphan_in_flight", "stale_entry_in_batch", "stale_result_posted")


@pytest.fixture(scope="session")  # built once: see pytestmark
def one_key_two_requests() -> CheckResult:
    return check(Bounds(keys=1, requests=2), reductions=NO_POR)


@pytest.fixture(scope="session")  # built once: see pytestmark
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


@pytest.mark.slow
def test_two_keys_two_requests_pinned() -> None:
    """2 keys x 2 requests: 978,188 states, 9,384,226 transitions, depth 32, every property
    holding (~25 s and ~70 MB with the compiled kernel)."""
    r = check(Bounds(keys=2, requests=2))
    assert r.holds and r.stuck == 0 and all(r.sometimes.values())
    assert (r.states, r.transitions, r.depth) == (978188, 9384226, 32)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("ASYNCLOOKUP_MODEL_CHECK_2X3"),
                    reason="~2 minutes and ~330 MB: set ASYNCLOOKUP_MODEL_CHECK_2X3=1")
def test_two_keys_three_requests_pinned() -> None:
    """2 keys x 3 requests (issue 23's bound): 9,109,003 states, 100,655,079 transitions,
    depth 34, every property holding."""
    r = check(Bounds(keys=2, requests=3))
    assert r.holds and r.stuck == 0 and all(r.sometimes.values())
    assert (r.states, r.transitions, r.depth) == (9109003, 100655079, 34)


def test_one_key_two_requests_reaches_every_goal(one_key_two_requests: CheckResult) -> None:
    """Every SOMETIMES goal is reached with two requests, so the search is not vacuous."""
    assert all(one_key_two_requests.sometimes.values())
    assert set(one_key_two_requests.sometimes) == {*GOALS, "joined_in_flight"}


def test_two_keys_one_request_goals(two_keys_one_request: CheckResult) -> None:
    """With one request every goal but joining another request's probe is reached."""
    reached = {name for name, hit in two_keys_one_request.sometimes.items() if hit}
    assert reached == set(GOALS)


def test_max_states_stops_before_fixpoint() -> None:
    """A state limit stops the search: no fixpoint, no violation, no progress judgement."""
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
    assert r.violation is not None and r.violation.predicate == PROGRESS
    assert r.fixpoint and r.stuck > 0


def test_an_action_that_raises_is_a_violation() -> None:
    """An action function that raises is reported, with the trace that reaches it."""

    def drain_raising(state: State, action: Drain) -> tuple[State, None]:
        raise RuntimeError("planted")

    table: Mapping[type, Transition] = {
        **TRANSITIONS, Drain: TRANSITIONS[Drain]._replace(apply=drain_raising)
    }
    v = check(SMALL, table).violation
    assert v is not None and v.predicate == CRASH and "planted" in v.detail
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
    assert (found[0].predicate, len(found[0].trace)) == (found[1].predicate, len(found[1].trace))


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


def test_a_full_memo_computes_directly_and_keeps_nothing_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past Memo.LIMIT results a miss is computed directly: same answers, no new entry."""
    monkeypatch.setattr(Memo, "LIMIT", 1)
    memo = Memo(lambda s: s.drain_due)
    assert memo(_ids(), lambda: INITIAL) is False
    assert memo(_ids(drain_due=1), lambda: INITIAL._replace(drain_due=True)) is True
    assert memo.stored == 1 and memo(_ids(), lambda: pytest.fail("rebuilt")) is False
    assert memo(_ids(drain_due=1), lambda: INITIAL._replace(drain_due=True)) is True
    assert memo.misses == 3


def test_memo_recomputes_when_a_read_field_differs() -> None:
    """A state that differs in a field the function read is computed afresh."""
    memo = Memo(lambda s: s.drain_due)
    memo(_ids(), lambda: INITIAL)
    assert memo(_ids(drain_due=1), lambda: INITIAL._replace(drain_due=True)) is True
    assert memo.misses == 2


# -- storage and kernels: compiled and pure Python agree, keys widen, fingerprints ----------

compiled_only = pytest.mark.skipif(
    _visited.kernel is None, reason="the compiled kernel is not built (pure-Python run)"
)


def test_the_compiled_kernel_is_built_unless_turned_off() -> None:
    """``pip install`` (the README's ``make test``) builds the kernel where a C compiler is;
    ASYNCLOOKUP_PURE_PYTHON=1 is the one way to run without it."""
    if os.environ.get("ASYNCLOOKUP_PURE_PYTHON"):
        assert _visited.kernel is None and _visited.IMPLEMENTATION == "pure-python"
    else:
        assert _visited.kernel is not None and _visited.IMPLEMENTATION == "compiled"


@compiled_only
@pytest.mark.parametrize("compact", [False, True])
def test_compiled_and_pure_tables_number_keys_alike(compact: bool) -> None:
    """Same keys in, same indices, found keys and stored bytes out (3,000 keys; ~0.1 s)."""
    assert _visited.kernel is not None
    rnd = random.Random(7)
    for width in (1, 7, 8, 9, 18):
        keys = [bytes(rnd.randrange(3) for _ in range(width)) for _ in range(600)]
        c, p = _visited.kernel.Table(width, compact), _visited.PyTable(width, compact)
        assert [c.add(k) for k in keys] == [p.add(k) for k in keys]
        assert [c.find(k) for k in keys] == [p.find(k) for k in keys]
        assert len(c) == len(p) and [c.key(i) for i in range(len(c))] == [
            p.key(i) for i in range(len(p))]
        assert all(_visited.kernel.fingerprint(k) == _visited.fingerprint(k) for k in keys)


@compiled_only
def test_compiled_packing_is_the_structs() -> None:
    """add_ids packs ids as the Space's struct does, and refuses an id that does not fit."""
    assert _visited.kernel is not None
    layout = _canon.NARROW
    c = _visited.kernel.Table(sum(layout), False, layout)
    ids = (1, 2, 3, 65535, 5, 6, 7, 8, 1, 0)
    assert c.add_ids(ids) == (-1, _canon.packer_of(layout).pack(*ids))
    assert c.find_ids(ids) == 0
    with pytest.raises(OverflowError):
        c.add_ids((65536, 2, 3, 4, 5, 6, 7, 8, 1, 0))


@compiled_only
def test_compiled_kernel_survives_misuse() -> None:
    """Calls that used to read freed or unowned memory raise or behave instead (~1 ms):
    last_key of a table without a layout (its width past the 256-byte buffer), a Table
    never initialised, a failed re-init, and memo getters that empty the pattern lists."""
    kernel = _visited.kernel
    assert kernel is not None
    with pytest.raises(TypeError):
        kernel.Table(4000).last_key()
    with pytest.raises(RuntimeError):
        kernel.Table.__new__(kernel.Table).find(b"")
    table = kernel.Table(3, False, b"\x01\x01\x01")
    with pytest.raises(ValueError):
        table.__init__(3, False, b"\x02\x09")
    assert table.add_ids((1, 1, 1)) == (-1, b"\x01\x01\x01")  # the old layout still packs

    patterns: list[object] = []
    lists: list[list[object]] = []

    def emptying(ids: tuple[int, ...]) -> tuple[int, ...]:
        patterns.clear()
        lists.clear()
        return ids

    # The pattern tuples and their dicts are held by the lists alone.
    patterns += [(tuple, {}), (emptying, {(1,): "hit"})]  # a miss, then a hit
    assert kernel.memo_find(patterns, (1,), None) == "hit" and patterns == []
    lists += [[(emptying, {})], [(emptying, {})]]
    with pytest.raises(RuntimeError):
        kernel.memo_each(lists, (1,), None)


@compiled_only
def test_compiled_canonical_is_the_least_renaming() -> None:
    """The compiled canonical form is min(zip(*orbits)) on every state of a search's graph."""
    space = Space((b"k0", b"k1"), ("A",), Reductions())
    states = check(SMALL_2K, keep_graph=True).states_list
    assert states is not None and len(states) > 50
    for state in states:
        ids = space.ids_of(state)
        slow = min(zip(*space.orbits(ids), strict=True))
        assert space.quick is not None and space.quick(ids) in (None, slow)
        assert space.canonical(ids) == slow


def test_memo_lookup_moves_the_pattern_that_hits_up() -> None:
    """memo_find (pure and compiled) returns the first pattern's result and moves it up."""
    finds = [_memo.memo_find] + ([_visited.kernel.memo_find] if _visited.kernel else [])
    for find in finds:
        by_first: dict[object, str] = {(1,): "first"}
        by_both: dict[object, str] = {(1, 2): "both"}
        patterns: list[object] = [
            (lambda ids: (ids[0] + 10,), {}, (0,)),
            (lambda ids: (ids[0],), by_first, (0,)),
            (lambda ids: (ids[0], ids[1]), by_both, (0, 1)),
        ]
        assert find(patterns, (1, 2), None) == "first"
        assert patterns[0][1] is by_first  # type: ignore[index]
        assert find(patterns, (5, 5), "missing") == "missing"


def test_pure_python_kernel_gives_the_same_search() -> None:
    """With ASYNCLOOKUP_PURE_PYTHON=1 (a fresh process, ~3 s) the searches of 1x2 and 2x1
    give the same counts as the compiled kernel, and the seed bug is still found."""
    code = (
        "import json\n"
        "from asynclookup.modelcheck.search import Bounds, check\n"
        "from asynclookup.spec.variants import VARIANTS\n"
        "out = [(r.visited_impl, r.states, r.transitions, r.depth, r.holds) for r in "
        "(check(Bounds(1, 2)), check(Bounds(2, 1)))]\n"
        "v = check(Bounds(1, 1), VARIANTS['flush-no-revalidate'].table).violation\n"
        "print(json.dumps([out, v.predicate, len(v.trace)]))\n"
    )
    env = {**os.environ, "ASYNCLOOKUP_PURE_PYTHON": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    pure, prop, steps = json.loads(done.stdout)
    here = [[r.visited_impl, r.states, r.transitions, r.depth, r.holds]
            for r in (check(Bounds(1, 2)), check(Bounds(2, 1)))]
    assert [p[0] for p in pure] == ["pure-python"] * 2
    assert [p[1:] for p in pure] == [h[1:] for h in here]
    v = check(Bounds(1, 1), VARIANTS["flush-no-revalidate"].table).violation
    assert v is not None and (prop, steps) == (v.predicate, len(v.trace))


def test_keys_widen_when_an_id_outgrows_the_narrow_layout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A field id too big for the narrow key restarts the search with 32-byte keys:
    same states and transitions (1-byte fields forced; 5,000 states, ~1 s)."""
    bounds = Bounds(keys=2, requests=2)
    narrow = check(bounds, max_states=5000)
    monkeypatch.setattr(_canon, "NARROW", bytes((1,) * 10))
    wide = check(bounds, max_states=5000)
    assert narrow.key_bytes == 18 and wide.key_bytes == 32
    assert (wide.states, wide.transitions) == (narrow.states, narrow.transitions)


def test_stored_bytes_per_state_are_measured() -> None:
    """The search reports what it stored per state: visited set, parents, edges, flags."""
    r = check(Bounds(keys=2, requests=1))
    assert r.visited_bytes > 0 and r.search_bytes > 0
    assert r.bytes_per_state == (r.visited_bytes + r.search_bytes) / r.states


# -- hash compaction: opt-in, and it still catches the bugs ----------------------------


def test_hash_compaction_visits_the_same_states_here() -> None:
    """With 64-bit fingerprints, 2x1 (21,749 states) has no collision: the same search."""
    full, compact = check(Bounds(2, 1)), check(Bounds(2, 1), hash_compaction=True)
    assert compact.hash_compaction and not full.hash_compaction
    assert (compact.states, compact.transitions, compact.depth, compact.holds) == (
        full.states, full.transitions, full.depth, full.holds)
    assert full.missed_state_bound is None
    assert compact.missed_state_bound == compact.states**2 / 2**65


@pytest.mark.parametrize("name", ["flush-no-revalidate", "drain-no-generation-check",
                                  "worker-never-posts"])
def test_hash_compaction_catches_broken_variants(name: str) -> None:
    """A broken variant is caught with fingerprints, same property and trace as exhaustive."""
    bounds = SMALL if name == "worker-never-posts" else Bounds(keys=1, requests=1)
    table = VARIANTS[name].table
    full, compact = check(bounds, table), check(bounds, table, hash_compaction=True)
    assert full.violation is not None and compact.violation is not None
    assert compact.violation.predicate == full.violation.predicate
    assert compact.violation.trace == full.violation.trace


def test_hash_compaction_cannot_keep_a_graph() -> None:
    with pytest.raises(ValueError, match="hash compaction"):
        check(SMALL, keep_graph=True, hash_compaction=True)
