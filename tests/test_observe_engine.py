"""The observation checker (asynclookup.observe.engine) on hand-written observation sequences.

Each test feeds a few observations, as an implementation under test would
produce them, and pins whether the checker accepts them and, when it does not,
which property of docs/properties.md it names.  Every rejection here is a planted bug.
"""

from __future__ import annotations

import pytest

from asynclookup.observe.classify import opening
from asynclookup.observe.engine import (
    CLOSED,
    Answer,
    Checker,
    CleanupSeen,
    DrainSeen,
    FlushSeen,
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
    TakeBatchSeen,
    TierCallSeen,
    TierCallWaiting,
    WorkerDied,
    verdict_candidates,
)
from asynclookup.observe.interface import OracleLimitError, Violation
from asynclookup.spec import core

K0, K1 = b"k0", b"k1"
TRUE, FALSE = Answer((True,)), Answer((False,))


def feed(observations: list[Observation], *, threaded: bool = False) -> Checker:
    """A checker that has taken ``observations``; fails the test on a violation."""
    checker = Checker(hidden_worker=threaded)
    for obs in observations:
        violation = checker.observe(obs)
        assert violation is None, f"{violation.title}: {violation.detail}"
    return checker


def first_violation(observations: list[Observation], *, threaded: bool = False) -> Violation:
    """The violation the observations lead to (the test fails if there is none)."""
    checker = Checker(hidden_worker=threaded)
    for obs in observations:
        violation = checker.observe(obs)
        if violation is not None:
            return violation
    raise AssertionError("the checker accepted every observation")


def probed(key: bytes, request: str, answer: Answer) -> list[Observation]:
    """One stepped worker move that takes a batch and probes ``key`` for ``request``."""
    return [TakeBatchSeen(True), TierCallSeen((key,), request, answer), ProbeGroupSeen(True)]


# -- what conforms -------------------------------------------------------------------

# lookup, flush, probe, post, then the first lookup after a flush delivers the verdict
ROUND_TRIP: list[Observation] = [
    LookupSeen(K0, "A", None), FlushSeen(), TakeBatchSeen(True), TierCallSeen((K0,), "A", TRUE),
    ProbeGroupSeen(True), PostSeen(True), FlushSeen(), LookupSeen(K0, "A", True),
]


def test_a_lookup_round_trip_conforms() -> None:
    """LookupSeen, flush, probe, post, then the first lookup after a flush delivers the verdict."""
    checker = feed(
        [LookupSeen(K0, "A", None), FlushSeen(), *probed(K0, "A", TRUE), PostSeen(True),
         FlushSeen(), LookupSeen(K0, "A", True)]
    )
    assert len(checker.states) == 1


def test_an_early_drain_in_lookup_is_allowed() -> None:
    """A lookup may apply posted results even when no flush happened since the last drain."""
    base: list[Observation] = [
        LookupSeen(K0, "A", None), FlushSeen(), LookupSeen(K1, "A", None),  # this lookup drained
        *probed(K0, "A", TRUE), PostSeen(True),
    ]
    feed([*base, LookupSeen(K0, "A", True)])
    feed([*base, LookupSeen(K0, "A", None)])


def test_request_groups_may_be_probed_in_any_order() -> None:
    """The worker may probe the second request's group of a batch first."""
    feed(
        [LookupSeen(K0, "A", None), LookupSeen(K1, "B", None), FlushSeen(), TakeBatchSeen(True),
         TierCallSeen((K1,), "B", TRUE), ProbeGroupSeen(True), TierCallSeen((K0,), "A", FALSE),
         ProbeGroupSeen(True), PostSeen(True), FlushSeen(), LookupSeen(K0, "A", False),
         LookupSeen(K1, "B", True)]
    )


def test_threaded_mode_hides_take_batch_and_post() -> None:
    """In threaded mode a verdict may or may not be visible before the worker settles."""
    base: list[Observation] = [
        LookupSeen(K0, "A", None), FlushSeen(), TierCallSeen((K0,), "A", TRUE)
    ]
    feed([*base, FlushSeen(), LookupSeen(K0, "A", True)], threaded=True)
    feed([*base, FlushSeen(), LookupSeen(K0, "A", None)], threaded=True)


def test_a_faulty_answer_allows_false_or_the_bool_given() -> None:
    """A short answer gives each key False, or the proper bool the tier gave for it."""
    assert set(verdict_candidates(Answer((True,)), 2)) == {(False, False), (True, False)}


def test_a_non_bool_value_gives_false_for_its_key() -> None:
    """A non-bool value (here 1) never counts as True."""
    assert set(verdict_candidates(Answer((1, True)), 2)) == {(False, False), (False, True)}


def test_a_proper_answer_allows_exactly_its_values() -> None:
    """n bools and no exception: the verdicts are exactly those bools."""
    assert verdict_candidates(Answer((True, False)), 2) == ((True, False),)


def test_calls_after_shutdown_raising_the_closed_error_conform() -> None:
    """After shutdown every call raises the closed-manager error; shutdown stays idempotent."""
    feed([ShutdownSeen(), LookupSeen(K0, "A", None, CLOSED), FlushSeen(CLOSED), ShutdownSeen()])


def test_a_none_that_an_unseen_post_explains_is_not_judged() -> None:
    """Threaded: the worker may not have posted yet, so None after its tier call conforms."""
    feed(
        [LookupSeen(K0, "A", None), FlushSeen(), TierCallSeen((K0,), "A", TRUE), FlushSeen(),
         LookupSeen(K0, "A", None), DrainSeen(), LookupSeen(K0, "A", None)],
        threaded=True,
    )


def test_awaits_post_when_only_an_unseen_post_explains_a_none() -> None:
    """The checker says so when a None is explained only by a post not yet made."""
    checker = feed(
        [LookupSeen(K0, "A", None), FlushSeen(), TierCallSeen((K0,), "A", TRUE), DrainSeen(),
         LookupSeen(K0, "A", None)],
        threaded=True,
    )
    assert checker.awaits_post(K0)
    assert not checker.awaits_post(K1)


def test_overdue_post_after_the_bound_is_property_6() -> None:
    """Re-asks that saw no post for the whole bound exclude the unposted states: property 6."""
    base: list[Observation] = [
        LookupSeen(K0, "A", None), FlushSeen(), TierCallSeen((K0,), "A", TRUE), DrainSeen(),
        LookupSeen(K0, "A", None),
    ]
    violation = first_violation([*base, Overdue(True, K0, "A")], threaded=True)
    assert violation.number == 6
    assert "after re-asking" in violation.detail


def test_overdue_with_a_batch_still_being_probed_is_no_violation() -> None:
    """A worker that posts per batch owes no post while a group of its batch is unprobed."""
    feed(
        [LookupSeen(K0, "A", None), LookupSeen(K1, "B", None), FlushSeen(),
         TierCallSeen((K0,), "A", TRUE), DrainSeen(), LookupSeen(K0, "A", None),
         Overdue(True, K0, "A")],
        threaded=True,
    )


# -- planted bugs -------------------------------------------------------------------


def test_probing_a_cleaned_up_entry_is_property_1() -> None:
    """A tier call for an entry cleaned up before the flush breaks property 1."""
    violation = first_violation(
        [LookupSeen(K0, "A", None), CleanupSeen("A"), FlushSeen(), TakeBatchSeen(True),
         TierCallSeen((K0,), "A", FALSE)]
    )
    assert violation.number == 1


def test_probing_a_stale_duplicate_is_property_1() -> None:
    """A call holding a key twice (a stale entry beside the live one) breaks property 1."""
    violation = first_violation(
        [LookupSeen(K0, "A", None), CleanupSeen("A"), LookupSeen(K0, "A", None), FlushSeen(),
         TakeBatchSeen(True), TierCallSeen((K0, K0), "A", Answer((False, False)))]
    )
    assert violation.number == 1


def test_a_stale_verdict_is_property_2() -> None:
    """A verdict from an old generation, after mark_present, breaks property 2."""
    violation = first_violation(
        [LookupSeen(K0, "A", None), FlushSeen(), MarkPresentSeen((K0,)), *probed(K0, "A", FALSE),
         PostSeen(True), LookupSeen(K0, "A", False)]
    )
    assert violation.number == 2


def test_mark_miss_forcing_a_pending_probe_is_property_3() -> None:
    """A False verdict on a PENDING probe that mark_miss named breaks property 3."""
    violation = first_violation([LookupSeen(K0, "A", None), MarkMissSeen((K0,)),
                                 LookupSeen(K0, "A", False)])
    assert violation.number == 3


def test_a_missing_verdict_is_property_6() -> None:
    """None where the drained verdict must be visible breaks property 6."""
    violation = first_violation(
        [LookupSeen(K0, "A", None), FlushSeen(), *probed(K0, "A", TRUE), PostSeen(True),
         FlushSeen(),
         LookupSeen(K0, "A", None)]
    )
    assert violation.number == 6


def test_a_post_that_posts_nothing_is_property_6() -> None:
    """A worker that answered but posts nothing (zip truncation) breaks property 6."""
    violation = first_violation([LookupSeen(K0, "A", None), FlushSeen(), *probed(K0, "A", Answer()),
                                 PostSeen(False)])
    assert violation.number == 6


def test_a_worker_step_that_raises_is_property_7() -> None:
    """A worker step that lets the tier's exception escape breaks property 7."""
    violation = first_violation(
        [LookupSeen(K0, "A", None), FlushSeen(), TakeBatchSeen(True),
         TierCallSeen((K0,), "A", Answer(raises=True, lazy=True)),
             ProbeGroupSeen(False, "TierFault")]
    )
    assert violation.number == 7


def test_a_dead_worker_is_property_7() -> None:
    """A worker thread that died before shutdown breaks property 7."""
    violation = first_violation([LookupSeen(K0, "A", None), FlushSeen(),
                                 WorkerDied()], threaded=True)
    assert violation.number == 7


def test_raising_on_a_stale_result_for_a_resolved_probe_is_property_3() -> None:
    """An IUT that raises while a drain is due to apply a stale result to a key whose
    current probe has its verdict (applied by key: a second verdict) breaks property 3."""
    violation = first_violation(
        [LookupSeen(K0, "A", None), FlushSeen(), *probed(K0, "A", FALSE), PostSeen(True),
         MarkPresentSeen((K0,)), DrainSeen("AssertionError: a second verdict")]
    )
    assert violation.number == 3 and "stale result" in violation.detail


def test_raising_on_a_result_mark_miss_forced_is_property_3() -> None:
    """An IUT that raises while a drain is due to apply the result of a probe that
    mark_miss named while it was in flight breaks property 3 (the shipped bug)."""
    violation = first_violation(
        [LookupSeen(K0, "A", None), FlushSeen(), MarkMissSeen((K0,)), *probed(K0, "A", FALSE),
         PostSeen(True), DrainSeen("AssertionError: a second verdict")]
    )
    assert violation.number == 3 and "mark_miss" in violation.detail


def test_an_orphans_verdict_delivered_to_a_new_requester_is_property_2() -> None:
    """A lookup returning the verdict of an orphaned probe's result, which should
    have deleted the probe, breaks property 2 (and is not blamed on mark_miss)."""
    violation = first_violation(
        [LookupSeen(K0, "A", None), FlushSeen(), MarkMissSeen((K0,)), TakeBatchSeen(True),
         TierCallSeen((K0,), "A", FALSE), ProbeGroupSeen(True), CleanupSeen("A"), PostSeen(True),
         LookupSeen(K0, "B", False)]
    )
    assert violation.number == 2 and "orphaned probe" in violation.detail


def test_raising_with_nothing_due_is_property_7() -> None:
    """An IUT that raises from a drain with nothing to apply breaks property 7."""
    violation = first_violation([LookupSeen(K0, "A", None), DrainSeen("KeyError: k0")])
    assert violation.number == 7


def _orphans_cleaned_up(n: int, tagged_kept: int) -> Checker:
    """A checker that saw ``n`` requests each cleaned up while its probe was in flight."""
    checker = Checker(hidden_worker=False, tagged_kept=tagged_kept)
    pairs = [(f"k{i}".encode(), f"R{i}") for i in range(n)]
    seen: list[Observation] = [LookupSeen(k, r, None) for k, r in pairs]
    seen += [FlushSeen(), TakeBatchSeen(True)]
    seen += [o for k, r in pairs for o in (TierCallSeen((k,), r, FALSE), ProbeGroupSeen(True))]
    seen += [CleanupSeen(r) for _, r in pairs]
    for obs in seen:
        assert checker.observe(obs) is None
    return checker


def test_wasteful_cleanup_variants_are_bounded() -> None:
    """Six in-flight orphans would give 64 tagged variants; the checker keeps at most
    ``tagged_kept`` of them beside the efficient state."""
    assert _orphans_cleaned_up(6, tagged_kept=1000).size == 64
    assert _orphans_cleaned_up(6, tagged_kept=4).size == 5


def test_tables_left_when_the_spec_holds_nothing_are_property_5() -> None:
    """A snapshot with entries after the last request's cleanup, all drained, breaks property 5."""
    checker = feed([*ROUND_TRIP, CleanupSeen("A")])
    assert checker.expects_empty()
    violation = first_violation([*ROUND_TRIP, CleanupSeen("A"), Leftover("_req_keys={'A': ...}")])
    assert violation.number == 5  # no role known: a leftover
    violation = first_violation([*ROUND_TRIP, CleanupSeen("A"),
                                 Leftover("_states={b'k0': ...}", frozenset({"probes"}))])
    assert violation.number == 5


def test_request_index_left_when_the_spec_holds_nothing_is_property_4() -> None:
    """A leftover request index (its role known) breaks property 4: after cleanup(A) nothing
    refers to A, even when a probe state is left too."""
    for roles in ({"index"}, {"index", "probes"}):
        violation = first_violation([*ROUND_TRIP, CleanupSeen("A"),
                                     Leftover("_req_keys={'A': ...}", frozenset(roles))])
        assert violation.number == 4 and "request index" in violation.detail


def test_tables_held_while_the_spec_holds_something_are_allowed() -> None:
    """A snapshot with entries is no leak while a request still holds its probe."""
    checker = feed([*ROUND_TRIP, Leftover("_lookup_state={b'k0': ...}")])
    assert not checker.expects_empty()


def test_a_tier_call_that_never_comes_is_property_6() -> None:
    """An owed tier call that does not come within the bound, worker alive, breaks property 6."""
    violation = first_violation([LookupSeen(K0, "A", None), FlushSeen(), Stalled("tier call",
                                 True)],
                                threaded=True)
    assert violation.number == 6


def test_probing_with_another_requests_context_is_property_9() -> None:
    """A key probed with the context of a request that joined it, not the batched one, is 9."""
    violation = first_violation(
        [LookupSeen(K0, "A", None), LookupSeen(K0, "B", None), FlushSeen(), TakeBatchSeen(True),
         TierCallSeen((K0,), "B", FALSE)]
    )
    assert violation.number == 9


def test_a_call_after_shutdown_that_returns_is_a_usage_violation() -> None:
    """A call after shutdown must raise the closed-manager error; returning is a usage error."""
    violation = first_violation([ShutdownSeen(), FlushSeen()])
    assert (violation.number, violation.kind) == (None, "usage")


def test_an_exception_before_shutdown_is_property_7() -> None:
    """A scheduler call that raises while the spec's action is enabled breaks property 7."""
    violation = first_violation([LookupSeen(K0, "A", None, "AssertionError: enqueue once")])
    assert violation.number == 7


def test_a_violation_keeps_the_last_possible_states() -> None:
    """The report shows the spec states that were possible just before the observation."""
    violation = first_violation([LookupSeen(K0, "A", None), LookupSeen(K0, "A", True)])
    assert violation.index == 1 and violation.states[0].batch != ()


# -- efficiency and limits ------------------------------------------------------------


def test_reprobing_after_cleanup_of_an_in_flight_probe_is_a_warning() -> None:
    """A second probe of a key whose in-flight probe was cleaned up is a property-8 warning."""
    checker = feed(
        [LookupSeen(K0, "A", None), FlushSeen(), CleanupSeen("A"), LookupSeen(K0, "B", None),
         FlushSeen(),
         *probed(K0, "A", FALSE), PostSeen(True), *probed(K0, "B", FALSE)]
    )
    assert [w.number for w in checker.warnings] == [8]


def test_the_efficient_behaviour_raises_no_warning() -> None:
    """Joining the orphaned in-flight probe instead of probing again keeps property 8."""
    checker = feed(
        [LookupSeen(K0, "A", None), FlushSeen(), CleanupSeen("A"), LookupSeen(K0, "B", None),
         FlushSeen(),
         *probed(K0, "A", TRUE), PostSeen(True), FlushSeen(), LookupSeen(K0, "B", True)]
    )
    assert checker.warnings == []


def test_too_many_possible_states_raise_the_limit_error() -> None:
    """When the possible states outgrow the bound, the checker says it cannot judge."""
    checker = Checker(hidden_worker=True, max_states=2)
    start: list[Observation] = [LookupSeen(K0, "A", None), LookupSeen(K1, "B", None), FlushSeen(),
        FlushSeen()]
    for obs in start:
        checker.observe(obs)
    with pytest.raises(OracleLimitError):
        checker.observe(TierCallSeen((K0,), "A", Answer((True,), raises=True, lazy=True)))
        checker.observe(TierCallSeen((K1,), "B", Answer((True,), raises=True, lazy=True)))
        checker.observe(DrainSeen())


def test_probing_for_a_cleaned_up_request_is_property_1_not_9() -> None:
    """A key re-asked by another request, probed for the cleaned-up one, breaks property 1."""
    violation = first_violation(
        [LookupSeen(K0, "A", None), CleanupSeen("A"), LookupSeen(K0, "B", None), FlushSeen(),
         TakeBatchSeen(True),
         TierCallSeen((K0,), "A", FALSE)]
    )
    assert violation.number == 1


# -- the tier-answer rule: a non-bool answer yields False (property 7) --------------


@pytest.mark.parametrize("junk", [1, "yes", 1.0])
def test_non_bool_answer_passed_through_names_the_tier_answer_rule(junk: object) -> None:
    """A lookup that returns the tier's non-bool value itself breaks the tier-answer rule (7)."""
    violation = first_violation(
        [LookupSeen(K0, "A", None), FlushSeen(), TierCallSeen((K0,), "A", Answer((junk,))),
         FlushSeen(), LookupSeen(K0, "A", junk)],  # type: ignore[arg-type]
        threaded=True,
    )
    assert violation.number == 7
    assert "passed the tier's non-bool value through" in violation.detail
    assert "tier-answer rule" in violation.detail


@pytest.mark.parametrize("junk", [1, "yes", 1.0])
def test_non_bool_answer_coerced_with_bool_names_the_tier_answer_rule(junk: object) -> None:
    """A lookup that returns bool() of the tier's non-bool value breaks the tier-answer rule."""
    violation = first_violation(
        [LookupSeen(K0, "A", None), FlushSeen(), TierCallSeen((K0,), "A", Answer((junk,))),
         FlushSeen(), LookupSeen(K0, "A", True)],
        threaded=True,
    )
    assert violation.number == 7
    assert "coerced it with bool() to True" in violation.detail


def test_non_bool_answer_read_as_false_is_accepted() -> None:
    """A lookup that reads the tier's non-bool value as False keeps the rule."""
    feed(
        [LookupSeen(K0, "A", None), FlushSeen(), TierCallSeen((K0,), "A", Answer((1,))),
         FlushSeen(), LookupSeen(K0, "A", False)],
        threaded=True,
    )


# -- a tier call seen arrive, and the states it rules out (late) ------------------------------


def _k1_arrives_after_k0_answered() -> list[Observation]:
    """A's k0 answered; B's k1 flushed; B's k1 call arrives: one worker posted k0 first."""
    return [
        LookupSeen(K0, "A", None), FlushSeen(), TierCallSeen((K0,), "A", FALSE),
        LookupSeen(K1, "B", None), FlushSeen(), TierCallWaiting((K1,), "B"),
    ]


def test_a_none_only_a_late_post_explains_is_property_6_by_the_order_it_broke() -> None:
    """k0's post is proven by k1's call; a lookup that still gets None for k0 is explained
    only if the worker took k1's batch before posting k0's: property 6, and the report
    says which call came first."""
    violation = first_violation(
        [*_k1_arrives_after_k0_answered(), LookupSeen(K0, "C", None)], threaded=True
    )
    assert violation.number == 6
    assert "next tier call ([b'k1'] for 'B')" in violation.detail
    assert "before it takes the next" in violation.detail


def test_a_late_finding_names_a_key_whose_bytes_hold_a_semicolon_whole() -> None:
    """Block hashes are arbitrary bytes: a key whose repr holds '; ' stays whole in the
    finding (the detail names what was seen without cutting the classifier's words)."""
    key = b"k0; spec allows"
    observations: list[Observation] = [
        LookupSeen(key, "A", None), FlushSeen(), TierCallSeen((key,), "A", FALSE),
        LookupSeen(K1, "B", None), FlushSeen(), TierCallWaiting((K1,), "B"),
        LookupSeen(key, "C", None),
    ]
    violation = first_violation(observations, threaded=True)
    assert violation.number == 6
    assert violation.detail.startswith(
        "lookup(b'k0; spec allows', 'C') returned None: explained only if the worker"
    ), violation.detail


def test_a_findings_opening_words_keep_a_key_whose_bytes_hold_a_colon_whole() -> None:
    """``opening`` (a finding renamed by a replay keeps the detail's opening words) cuts
    after what was seen, not inside a key whose bytes hold ': '."""
    key = b"a: b"
    violation = first_violation([LookupSeen(key, "A", True)])
    assert violation.detail.startswith("lookup(b'a: b', 'A') returned True; "), violation.detail
    words = opening(violation.detail, violation.observation)
    assert words.startswith("lookup(b'a: b', 'A') returned True; the spec allows None")
    assert ": " not in words.removeprefix("lookup(b'a: b', 'A')")


def test_a_new_requester_that_finds_a_shared_probe_gone_is_property_8() -> None:
    """A cleaned up, C shared k0's in-flight probe, mark_present resolved it True; B's
    lookup gets None, as from a fresh probe: the cleanup cancelled the shared probe and
    deleted it (8, in_flight_probes_survive_cleanup), whether the asker shared the probe
    or joins it now."""
    violation = first_violation([
        LookupSeen(K0, "A", None), FlushSeen(), LookupSeen(K0, "C", None), CleanupSeen("A"),
        MarkPresentSeen((K0,)), LookupSeen(K0, "B", None),
    ], threaded=True)
    assert violation.number == 8, violation.detail
    assert violation.detail.startswith(
        "lookup(b'k0', 'B') returned None although 'B' joins the key's probe g1 (resolved True)"
    ), violation.detail


def test_without_the_arrival_the_same_none_is_a_post_not_yet_made() -> None:
    observations = _k1_arrives_after_k0_answered()
    feed([*observations[:-1], LookupSeen(K0, "C", None)], threaded=True)


def _waste_or_late() -> Checker:
    """cleanup('A') leaves k0's in-flight probe to B; A's k0 is answered and A's k1 call
    arrives; lookup(k0, 'A') gets None: explained by a cleanup that deleted the probe
    (tagged, property 8) or by a post not yet made when k1's call came (late, 6)."""
    return feed([
        LookupSeen(K0, "A", None), FlushSeen(), CleanupSeen("A"), LookupSeen(K0, "B", None),
        LookupSeen(K1, "A", None), FlushSeen(), TierCallSeen((K0,), "A", FALSE),
        TierCallWaiting((K1,), "A"), LookupSeen(K0, "A", None),
    ], threaded=True)


def test_waste_or_a_late_post_waits_and_the_late_post_showing_is_property_6() -> None:
    checker = _waste_or_late()
    assert checker.warnings == [] and checker.violation is None
    assert checker.observe(DrainSeen()) is None
    violation = checker.observe(LookupSeen(K0, "A", False))  # the probe was not deleted
    assert violation is not None and violation.number == 6, violation
    assert checker.warnings == []


def test_waste_or_a_late_post_waits_and_the_key_probed_again_is_property_8() -> None:
    checker = _waste_or_late()
    assert checker.observe(TierCallSeen((K1,), "A", FALSE)) is None
    assert checker.observe(TierCallSeen((K0,), "B", FALSE)) is None  # a second probe of k0
    assert [w.number for w in checker.warnings] == [8]
    assert checker.warnings[0].observation == LookupSeen(K0, "A", None)  # where it showed


def test_a_hidden_worker_may_post_a_calls_results_one_by_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A drain between two posts of one tier call's results applies the first alone, so
    the first key's verdict shows while the second is still None (docs/protocol.md,
    "What the spec decides where the protocol leaves room", point 9).  With a post of
    everything answered as the only hidden post, that None was property 6: a verdict
    never delivered, though it was only not posted yet."""
    seen: list[Observation] = [
        LookupSeen(K0, "A", None), LookupSeen(K1, "A", None), FlushSeen(),
        TierCallSeen((K0, K1), "A", Answer((False, True))), DrainSeen(),
        LookupSeen(K0, "A", False), LookupSeen(K1, "A", None),
        DrainSeen(), LookupSeen(K1, "A", True),
    ]
    feed(seen, threaded=True)
    monkeypatch.setattr(core, "posts", lambda state: (core.Post(),) if state.answered else ())
    assert first_violation(seen, threaded=True).number == 6
