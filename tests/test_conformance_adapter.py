"""The oracle's tier and the reference adapter (asynclookup.conformance.targets.adapter).

The tier must deliver exactly the fault each plan describes and record what it
answered; threaded calls must block until the oracle answers; the adapter must
load targets by path and recognise the reference's closed-manager error.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import pytest

from asynclookup.conformance.targets.adapter import OracleTier, Plan, ReferenceAdapter, TierFault
from asynclookup.conformance.targets.load import load_target
from asynclookup.observe.observations import Answer
from asynclookup.reference.tier import RequestContext

KEYS = [b"k0", b"k1", b"k2"]
CONTEXT = RequestContext("A")


def consume(result: Iterable[Any]) -> list[Any]:
    return list(result)


def test_a_proper_plan_answers_its_bits() -> None:
    """A proper plan answers one bool per key from its bits, padded with False."""
    tier = OracleTier()
    tier.queue_plans([Plan("proper", (True, False))])
    assert consume(tier.batch_lookup(KEYS, CONTEXT)) == [True, False, False]


def test_a_raise_plan_raises_at_the_call() -> None:
    """A raise plan makes batch_lookup raise before returning anything."""
    tier = OracleTier()
    tier.queue_plans([Plan("raise")])
    with pytest.raises(TierFault):
        tier.batch_lookup(KEYS, CONTEXT)


def test_a_lazy_raise_plan_yields_then_raises() -> None:
    """A lazy_raise plan returns a generator that yields some values, then raises."""
    tier = OracleTier()
    tier.queue_plans([Plan("lazy_raise", (True, True, True), size=2)])
    answer = iter(tier.batch_lookup(KEYS, CONTEXT))
    assert [next(answer), next(answer)] == [True, True]
    with pytest.raises(TierFault):
        next(answer)


def test_short_long_and_junk_plans_spoil_the_answer() -> None:
    """short drops values, long adds some, junk puts a non-bool in one position."""
    assert Plan("short", size=1).answer([True, True, True]).items == (True,)
    assert len(Plan("long").answer([True, True]).items) == 3
    assert Plan("junk", size=1).answer([True, True]).items == (True, 0)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_the_drawn_junk_plans_put_every_value_at_every_position(n: int) -> None:
    """Over the plans the machine draws (``machine.plans``), every non-bool of JUNK lands
    at every position of an n-key answer: a class may mishandle 1 and 1.0 (``== True``)
    or 1 and "yes" (``bool()``) or None (``is not False``) at any key."""
    from asynclookup.conformance.machine import _plan
    from asynclookup.conformance.targets.adapter import JUNK

    kinds = ("proper", "junk")
    seen = set()
    for number in range(len(kinds) * 8 * 4):  # the whole range plans() draws from
        plan = _plan(kinds, number)
        if plan.kind == "junk":
            items = plan.answer([False] * n).items
            seen |= {(i, repr(v)) for i, v in enumerate(items) if not isinstance(v, bool)}
    assert seen == {(i, repr(v)) for i in range(n) for v in JUNK}


def test_the_tier_logs_what_it_answered() -> None:
    """Every answered call is logged as a TierCallSeen with the keys, request and answer."""
    tier = OracleTier()
    tier.queue_plans([Plan("proper", (True,))])
    tier.batch_lookup(KEYS[:1], CONTEXT)
    (call,) = tier.take_log()
    assert (call.keys, call.request, call.answer) == ((b"k0",), "A", Answer((True,)))


def test_a_real_inner_tier_gives_the_proper_verdicts() -> None:
    """With a real tier inside, its contents decide the proper verdicts."""
    from asynclookup.reference.tier import InMemoryTier

    inner = InMemoryTier()
    inner.store(b"k1")
    tier = OracleTier(inner)
    assert consume(tier.batch_lookup(KEYS, CONTEXT)) == [False, True, False]


def test_a_threaded_call_waits_for_the_oracles_answer_and_its_release() -> None:
    """In threaded mode a call blocks until the oracle answers it, with its plan, and
    returns only once the oracle releases it (its next wait)."""
    tier = OracleTier(threaded=True)
    got: list[list[Any]] = []
    worker = threading.Thread(target=lambda: got.append(consume(tier.batch_lookup(KEYS, CONTEXT))))
    worker.start()
    pending = tier.next_call(timeout=5.0)
    assert pending is not None and not got
    tier.answer(pending, Plan("proper", (False, True, False)))
    worker.join(0.2)
    assert worker.is_alive() and not got  # held until the oracle's next wait
    assert tier.release() == 1
    worker.join(5.0)
    assert got == [[False, True, False]]


def test_auto_lets_no_call_block() -> None:
    """After auto() every call is answered at once, one already waiting included."""
    tier = OracleTier(threaded=True)
    done = threading.Event()

    def call() -> None:
        tier.batch_lookup(KEYS, CONTEXT)
        done.set()

    worker = threading.Thread(target=call)
    worker.start()
    tier.auto()
    worker.join(5.0)
    assert done.is_set()


def test_load_target_rejects_a_malformed_name() -> None:
    """A target that is not 'reference' or MODULE:ATTRIBUTE is a ValueError naming it."""
    with pytest.raises(ValueError, match="MODULE:ATTRIBUTE"):
        load_target("no-colon")


def test_the_adapter_recognises_the_closed_manager_error() -> None:
    """After shutdown the reference raises its closed-manager error, which the adapter names."""
    from asynclookup.reference import AsyncLookupManager

    adapter = ReferenceAdapter(AsyncLookupManager, OracleTier(), "stepped")
    adapter.shutdown()
    with pytest.raises(RuntimeError) as raised:
        adapter.flush()
    assert adapter.is_closed_error(raised.value)
