"""The fast trace engine against the old one: same states, notes and verdicts on every event."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from asynclookup.conformance import engine as oracle
from asynclookup.trace.check import TraceChecker, check_lines
from asynclookup.trace.fast import FastChecker

TRACES = Path(__file__).parent / "traces"
KEYS = (b"a", b"b", b"c")
REQUESTS = ("r1", "r2")
NOTES = ("faulty", "missed", "dropped", "stale", "ever_dropped", "flush_dropped")


def _random_observation(rng: random.Random, hidden: bool) -> oracle.Observation:
    key, request = rng.choice(KEYS), rng.choice(REQUESTS)
    roll = rng.random()
    if roll < 0.35:
        return oracle.LookupSeen(key, request, rng.choice((None, None, True, False)))
    if roll < 0.5:
        return oracle.FlushSeen()
    if roll < 0.6:
        return oracle.CleanupSeen(request)
    if roll < 0.65:
        return oracle.MarkMissSeen((key,))
    if roll < 0.7:
        return oracle.MarkPresentSeen((key,))
    if roll < 0.75:
        return oracle.DrainSeen()
    if not hidden and roll < 0.82:
        return oracle.TakeBatchSeen(True)
    if not hidden and roll < 0.88:
        return oracle.PostSeen(True)
    keys = tuple(rng.sample(KEYS, rng.randint(1, 2)))
    answer = oracle.Answer(tuple(rng.choice((True, False)) for _ in keys))
    if rng.random() < 0.2:
        answer = oracle.Answer((True,), raises=True, lazy=True)
    return oracle.TierCallSeen(keys, request, answer)


def _agree(old: oracle.Checker, fast: FastChecker) -> bool:
    same = list(old._states.items()) == list(fast.export().items())
    return same and all(getattr(old, n) == getattr(fast, n) for n in NOTES)


@pytest.mark.parametrize("hidden", [True, False])
def test_random_traces_get_the_same_states_and_verdicts(hidden: bool) -> None:
    """On random observation sequences both engines keep equal state sets, notes, verdicts."""
    violations = 0
    for seed in range(150):
        rng = random.Random(seed)
        old = oracle.Checker(hidden_worker=hidden, tagged_kept=4)
        fast = FastChecker(hidden_worker=hidden, tagged_kept=4)
        for _ in range(40):
            obs = _random_observation(rng, hidden)
            v_old, v_fast = old.observe(obs), fast.observe(obs)
            assert (v_old is None) == (v_fast is None), (seed, obs)
            assert len(old.warnings) == len(fast.warnings), (seed, obs)
            if v_old is not None and v_fast is not None:
                assert (v_old.number, v_old.detail) == (v_fast.number, v_fast.detail)
                violations += 1
                break
            assert _agree(old, fast), (seed, obs)
    assert violations > 10  # the random traces also reach violations, so verdicts are compared


def test_the_comparison_sees_a_planted_difference() -> None:
    """A fast engine whose shared table is tampered with no longer agrees with the old one."""
    old = oracle.Checker(hidden_worker=True, tagged_kept=4)
    fast = FastChecker(hidden_worker=True, tagged_kept=4)
    obs = oracle.LookupSeen(b"a", "r1", None)
    old.observe(obs)
    fast.observe(obs)
    assert _agree(old, fast)
    generation, phase, _verdict, requesters = fast.base[b"a"]
    fast.base[b"a"] = (generation, phase, True, requesters)
    assert not _agree(old, fast)


@pytest.mark.parametrize("path", sorted(TRACES.glob("*.jsonl")), ids=lambda p: p.stem)
def test_shipped_traces_get_the_same_outcome_from_both_engines(path: Path) -> None:
    """Every shipped trace: the same result, property, detail and line from either engine."""
    outcomes = []
    for engine in ("old", "fast"):
        with path.open("rb") as f:
            outcomes.append(check_lines(f, engine=engine))
    old, fast = outcomes
    assert old.result == fast.result
    if old.found is not None and fast.found is not None:
        assert (old.found.number, old.found.detail, old.found.event.line) == (
            fast.found.number, fast.found.detail, fast.found.event.line
        )


def test_the_old_engine_stays_selectable() -> None:
    """engine="old" runs the conformance engine itself, engine="fast" the factorised one."""
    from asynclookup.trace.format import Header

    assert isinstance(TraceChecker(Header("t", True, {}), engine="old").engine, oracle.Checker)
    assert isinstance(TraceChecker(Header("t", True, {})).engine, FastChecker)
