"""Evidence for docs/comparison.md: what a plain Hypothesis stateful test catches.

``plain_machine`` is the stateful test a careful engineer writes without a
spec: it drives a manager in stepped mode with every call of the protocol,
lets its own tier misbehave, and checks what the manager *returns*: no call
raises, a lookup gives None or a bool, and after settling (flush, run the
worker until idle, flush) every live request's lookup gives the tier's
content, or False for a key whose tier call the test made fail.  It knows
nothing of generations, phases or what the tier was asked.

Finding an interleaving is a search problem; noticing a bug once it happens
is a checking problem.  These tests separate the two: each broken variant of
the reference (``tests/mutants_reference.py``) is driven through the exact
interleaving that triggers it (``SCRIPTS``), and the tests pin whether the
plain checks notice.  They miss the seed bug, the redundant-probe bug and the
forced mark_miss: none of them changes a verdict the test can know.  Random
runs against the correct reference pin that the plain checks raise no false
alarm.  See docs/comparison.md.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

from asynclookup.reference import AsyncLookupManager, RequestContext
from tests import mutants_reference

KEYS = (b"k0", b"k1")
REQUESTS = ("A", "B")
FAULTS = ("raise", "short", "lazy_raise")
SETTINGS = settings(
    max_examples=100,
    stateful_step_count=30,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


class PlainTier:
    """An in-memory tier whose next call can be made to fail."""

    name = "plain"

    def __init__(self) -> None:
        self.present: set[bytes] = set()
        self.next_fault: str | None = None
        self.failed_keys: set[bytes] = set()

    def batch_lookup(self, keys: Sequence[bytes], request_context: Any) -> Any:
        fault, self.next_fault = self.next_fault, None
        answers = [k in self.present for k in keys]
        if fault is not None:
            self.failed_keys.update(keys)
        if fault == "raise":
            raise OSError("tier down")
        if fault == "short":
            return answers[:-1]
        if fault == "lazy_raise":
            return _lazy_raise(answers)
        return answers

    def store(self, key: bytes, value: bytes = b"") -> None:
        self.present.add(key)

    def delete(self, key: bytes) -> None:
        self.present.discard(key)

    def contains(self, key: bytes) -> bool:
        return key in self.present


def _lazy_raise(answers: list[bool]) -> Iterator[bool]:
    yield from answers[:1]
    raise OSError("tier stream broke")


def plain_machine(manager_class: type[AsyncLookupManager]) -> type[RuleBasedStateMachine]:
    """A plain stateful test of ``manager_class``: outputs only, no spec."""

    class Plain(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.tier = PlainTier()
            self.manager = manager_class(self.tier, mode="stepped")
            self.live: dict[str, set[bytes]] = {}

        @rule(key=st.sampled_from(KEYS), request=st.sampled_from(REQUESTS))
        def lookup(self, key: bytes, request: str) -> None:
            verdict = self.manager.lookup(key, RequestContext(request))
            assert verdict in (None, True, False)
            self.live.setdefault(request, set()).add(key)

        @rule()
        def flush(self) -> None:
            self.manager.flush()

        @rule(request=st.sampled_from(REQUESTS))
        def cleanup(self, request: str) -> None:
            self.manager.cleanup(request)
            self.live.pop(request, None)

        @rule(key=st.sampled_from(KEYS))
        def store(self, key: bytes) -> None:
            self.tier.store(key)
            self.manager.mark_present([key])

        @rule(key=st.sampled_from(KEYS))
        def load_fails(self, key: bytes) -> None:
            if key not in self.tier.present:  # only a key the tier really lacks
                self.manager.mark_miss([key])

        @rule()
        def drain(self) -> None:
            self.manager.drain_results()

        @rule()
        def worker_step(self) -> None:
            worker = self.manager.worker
            worker.take_batch() or worker.probe_group() or worker.post()

        @rule(fault=st.sampled_from(FAULTS))
        def tier_fails_next_call(self, fault: str) -> None:
            self.tier.next_fault = fault

        @rule()
        def settle(self) -> None:
            self.tier.next_fault = None
            self.manager.flush()
            worker = self.manager.worker
            for _ in range(100):
                if not (worker.take_batch() or worker.probe_group() or worker.post()):
                    break
            self.manager.flush()
            for request, keys in sorted(self.live.items()):
                for key in sorted(keys):
                    verdict = self.manager.lookup(key, RequestContext(request))
                    present = key in self.tier.present
                    assert verdict is not None, f"{key!r} for {request} never resolved"
                    assert verdict == present or (
                        verdict is False and key in self.tier.failed_keys
                    ), f"{key!r} for {request}: {verdict}, tier says {present}"

        def teardown(self) -> None:
            try:
                self.settle()
            finally:
                self.manager.shutdown(timeout=5.0)

    Plain.__name__ = f"Plain{manager_class.__name__}"
    return Plain


def no_false_alarm_on(manager_class: type[AsyncLookupManager]) -> bool:
    """Whether random runs of the plain test pass ``manager_class``."""
    try:
        run_state_machine_as_test(plain_machine(manager_class), settings=SETTINGS)
    except Exception:
        return False
    return True


Script = tuple[tuple[str, dict[str, Any]], ...]

A_K0 = {"key": b"k0", "request": "A"}
# The worker's next step: take_batch, probe_group or post, whichever it can do.
TAKE: tuple[str, dict[str, Any]] = ("worker_step", {})

# The interleaving that triggers each broken variant, as calls of the plain test.
SCRIPTS: dict[str, Script] = {
    "FlushWithoutRevalidation": (
        ("lookup", A_K0), ("cleanup", {"request": "A"}), ("flush", {}), TAKE, TAKE, TAKE,
    ),
    "DrainWithoutGenerationCheck": (
        ("lookup", A_K0), ("flush", {}), TAKE, TAKE, ("store", {"key": b"k0"}), TAKE,
    ),
    "CleanupDropsInFlight": (
        ("lookup", A_K0), ("flush", {}), TAKE, ("cleanup", {"request": "A"}),
        ("lookup", {"key": b"k0", "request": "B"}), ("flush", {}), TAKE, TAKE,
    ),
    "MarkMissOnPending": (
        ("lookup", A_K0), ("load_fails", {"key": b"k0"}), ("flush", {}), TAKE, TAKE, TAKE,
    ),
    "WorkerDiesOnLazyRaise": (
        ("lookup", A_K0), ("flush", {}), ("tier_fails_next_call", {"fault": "lazy_raise"}),
        TAKE, TAKE,
    ),
    "ZipTruncatesShortAnswers": (
        ("lookup", A_K0), ("flush", {}), ("tier_fails_next_call", {"fault": "short"}),
        TAKE, TAKE,
    ),
}


def plain_checks_fail(manager_class: type[AsyncLookupManager], script: Script) -> bool:
    """Whether the plain test's checks fail on ``script`` (then settle) for ``manager_class``."""
    machine = plain_machine(manager_class)()
    try:
        for rule_name, arguments in script:
            getattr(machine, rule_name)(**arguments)
        machine.teardown()
    except Exception:
        return True
    return False


def _mutant(name: str) -> type[AsyncLookupManager]:
    found: type[AsyncLookupManager] = getattr(mutants_reference, name)
    return found


CAUGHT = ("DrainWithoutGenerationCheck", "WorkerDiesOnLazyRaise", "ZipTruncatesShortAnswers")
MISSED = ("FlushWithoutRevalidation", "CleanupDropsInFlight", "MarkMissOnPending")


def test_every_broken_variant_has_a_script() -> None:
    """Each broken variant of the reference is either caught or missed by the plain test."""
    assert set(SCRIPTS) == set(mutants_reference.VARIANTS) == {*CAUGHT, *MISSED}


def test_random_plain_runs_raise_no_false_alarm_on_the_reference() -> None:
    """Random runs of the plain test pass the correct reference: its checks are sound."""
    assert no_false_alarm_on(AsyncLookupManager)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_the_reference_passes_each_script(name: str) -> None:
    """The correct reference passes the plain checks on every triggering interleaving."""
    assert not plain_checks_fail(AsyncLookupManager, SCRIPTS[name])


@pytest.mark.parametrize("name", CAUGHT)
def test_plain_checks_catch_bugs_that_change_an_output(name: str) -> None:
    """On its triggering interleaving, a bug that changes a verdict or crashes is caught."""
    assert plain_checks_fail(_mutant(name), SCRIPTS[name])


@pytest.mark.parametrize("name", MISSED)
def test_plain_checks_miss_bugs_that_change_no_output(name: str) -> None:
    """Even on its triggering interleaving, a bug no returned verdict shows is missed."""
    assert not plain_checks_fail(_mutant(name), SCRIPTS[name])
