"""A conformance test case for your CI: one call, one ``unittest.TestCase`` class.

``conformance_test_case("mypkg.mod:MyManager", faults="all")`` returns the
TestCase class of the oracle's Hypothesis state machine (Hypothesis's
``Machine.TestCase`` convention) fuzzing that vLLM-shaped class in threaded
mode.  Assign it to a module-level name and pytest or unittest collects it::

    from spec.testcase import conformance_test_case

    TestMyManager = conformance_test_case("mypkg.mod:MyManager", faults="all")

``first_violation`` runs the same machine without shrinking and returns the
first ``ConformanceError`` (the mutant zoo's tests and bench/zoo.py use it).

The class is checked when the call is made (ValueError, one line, if it does
not fit).  It does not print a counterexample table or write replays: use
``asynclookup fuzz --impl`` for that.
"""

from __future__ import annotations

import unittest
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis.stateful import run_state_machine_as_test

from spec.oracle_driver import ConformanceError
from spec.oracle_machine import FuzzConfig, Stats, machine_class
from spec.vllm_adapter import PREFIX, load_impl


def conformance_test_case(
    impl: str | type[Any],
    *,
    faults: str = "all",
    examples: int = 100,
    steps: int = 30,
    seed: int | None = None,
    strict_efficiency: bool = False,
    shrink: bool = True,
) -> type[unittest.TestCase]:
    """The TestCase class fuzzing ``impl`` (``MODULE:CLASS`` or the class) as the options say.

    ``shrink=False`` reports the first failing sequence as found (threaded
    shrinking replays with bounded waits and can take a minute).
    """
    spec = impl if isinstance(impl, str) else f"{impl.__module__}:{impl.__qualname__}"
    load_impl(spec)  # fails now, in one line, if the class does not fit
    if faults not in ("none", "raise", "all"):
        raise ValueError(f"faults must be none, raise or all, got {faults!r}")
    config = FuzzConfig(
        target=PREFIX + spec, mode="threaded", faults=faults,
        strict_efficiency=strict_efficiency,
    )
    machine = machine_class(config)
    if seed is not None:
        machine._hypothesis_internal_use_seed = seed
    case: type[unittest.TestCase] = machine.TestCase
    case.settings = settings(  # type: ignore[attr-defined]
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        phases=(Phase.explicit, Phase.generate, *((Phase.shrink,) if shrink else ())),
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
        print_blob=False,
    )
    name = spec.rpartition(":")[2]
    case.__name__ = case.__qualname__ = f"Conformance{name}"
    return case


def first_violation(
    impl: str, *, seed: int, examples: int, faults: str = "all", steps: int = 30,
    strict_efficiency: bool = True, stats: Stats | None = None,
) -> ConformanceError | None:
    """Fuzz ``impl`` (``MODULE:CLASS``) unshrunk; the first violation found, or None."""
    load_impl(impl)
    config = FuzzConfig(
        target=PREFIX + impl, mode="threaded", faults=faults,
        strict_efficiency=strict_efficiency,
    )
    machine = machine_class(config, stats)
    machine._hypothesis_internal_use_seed = seed
    chosen = settings(
        max_examples=examples, stateful_step_count=steps, deadline=None, database=None,
        phases=(Phase.generate,), suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False, verbosity=Verbosity.quiet, print_blob=False,
    )
    try:
        run_state_machine_as_test(machine, settings=chosen)
    except ConformanceError as error:
        return error
    except BaseExceptionGroup as group:
        for exc in group.exceptions:
            if isinstance(exc, ConformanceError):
                return exc
        raise
    return None
