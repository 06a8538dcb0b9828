"""Every call into a class is bounded: a call that never returns is a finding, not a hang.

Each class below is the zoo's correct vLLM-shaped manager with one call that
blocks for ever (on an Event nobody sets).  The oracle must report which call,
after how long and where each thread stood, and end the run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from asynclookup.conformance.counterexample import ConformanceError
from asynclookup.conformance.replay import open_replay
from asynclookup.conformance.targets.bounded import CALL_BOUND, STRETCH, Patience, patiently
from tests.zoo.vllm_shaped import VllmShapedManager

NEVER = threading.Event()  # never set
BOUND = 0.5  # the call bound these tests use (seconds)


class LookupNeverReturns(VllmShapedManager):
    """lookup() blocks for ever the second time a key is asked about."""

    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        if key in self._lookup_state:
            NEVER.wait()
        return super().lookup(key, req_context)


class FlushNeverReturns(VllmShapedManager):
    """flush() blocks for ever."""

    def flush(self) -> None:
        NEVER.wait()


class ShutdownNeverReturns(VllmShapedManager):
    """shutdown() blocks for ever."""

    def shutdown(self) -> None:
        NEVER.wait()


class ConstructorNeverReturns(VllmShapedManager):
    """The constructor blocks for ever."""

    def __init__(self, tier_type: str) -> None:
        NEVER.wait()


def _run(cls: str, calls: list[tuple[str, tuple[Any, ...]]]) -> ConformanceError:
    started = time.monotonic()
    with pytest.raises(ConformanceError) as caught:
        driver = open_replay(
            f"impl:{__name__}:{cls}", mode="threaded", call_bound=BOUND, construct_bound=BOUND
        )
        try:
            for method, args in calls:
                getattr(driver, method)(*args)
        finally:
            driver.close()
    # the search for the class's tables has its own bound (CALL_BOUND); the calls, BOUND
    assert time.monotonic() - started < CALL_BOUND + 10 * BOUND + 3
    return caught.value


@pytest.mark.parametrize(
    ("cls", "calls", "what"),
    [
        ("LookupNeverReturns", [("lookup", (b"k0", "A")), ("lookup", (b"k0", "A"))],
         "lookup(b'k0', 'A')"),
        ("FlushNeverReturns", [("lookup", (b"k0", "A")), ("flush", ())], "flush()"),
        ("ShutdownNeverReturns", [("lookup", (b"k0", "A")), ("shutdown", ())], "shutdown()"),
    ],
)
def test_a_call_that_never_returns_is_property_6_naming_it(
    cls: str, calls: list[tuple[str, tuple[Any, ...]]], what: str
) -> None:
    """The report names the call, the bound, and where each thread stood."""
    error = _run(cls, calls)
    assert error.violation.number == 6
    assert f"{what} did not return within" in error.violation.detail
    text = str(error)
    assert "-> did not return" in text
    assert "thread 'asynclookup-scheduler'" in text
    assert "NEVER.wait()" in text  # the line of the class it is stuck at


def test_a_constructor_that_never_returns_is_a_finding() -> None:
    """A constructor that does not return is reported like any other call."""
    error = _run("ConstructorNeverReturns", [])
    assert error.violation.number == 6
    assert "the constructor did not return within" in error.violation.detail
    assert error.calls[0].method == "construct"


# -- a bound that counts the time the process could run -------------------------------------


def _late_by(seconds: float) -> Callable[[float], None]:
    """A wait that returns ``seconds`` later than asked (as a starved waiter's would)."""
    never = threading.Event()

    def wait(asked: float) -> None:
        never.wait(asked + seconds)

    return wait


def test_a_slice_that_ends_late_stretches_the_bound_by_its_lateness() -> None:
    patience = Patience(0.1)
    patience.wait(_late_by(0.3))
    assert patience.waited() > 0.3
    assert patience.lateness > 0.25
    assert patience.left() > 0.0  # wall time passed the bound; the process's time did not


def test_a_starved_wait_still_ends_at_its_stretch() -> None:
    patience = Patience(0.1)
    slices = 0
    while patience.left() and slices < 100:
        patience.wait(_late_by(0.5))
        slices += 1
    assert not patience.left() and slices < 100
    assert patience.lateness > STRETCH * 0.1  # uncapped, the bound would not be over
    assert patience.waited() >= STRETCH * 0.1


def test_a_wait_for_what_never_comes_gives_none_after_the_bound() -> None:
    never = threading.Event()
    started = time.monotonic()
    assert patiently(lambda s: never.wait(s) or None, 0.1) is None
    assert time.monotonic() - started >= 0.1


def test_a_patient_wait_gives_what_came() -> None:
    calls = iter([None, None, "call"])
    assert patiently(lambda s: next(calls), 10.0) == "call"
