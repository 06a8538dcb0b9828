"""A conformance test case for your CI: one call, one ``unittest.TestCase`` class.

``conformance_test_case("mypkg.mod:MyManager", faults="all")`` (or a comma list of
fault kinds, as ``--faults`` takes) returns a
TestCase class (after Hypothesis's ``Machine.TestCase`` convention) whose one
test fuzzes that vLLM-shaped class in threaded mode with the oracle's state
machine, as ``asynclookup fuzz --impl`` does, and fails with the shrunk,
numbered counterexample.  Assign it to a module-level name and pytest or
unittest collects it::

    from asynclookup.conformance.testcase import conformance_test_case

    TestMyManager = conformance_test_case("mypkg.mod:MyManager", faults="all")

``first_violation`` runs the same machine without shrinking and returns the
first ``ConformanceError`` (the mutant zoo's tests and bench/zoo.py use it).

The class is checked when the call is made (ValueError, one line, if it does
not fit).  It writes no replay file: use ``asynclookup fuzz --impl`` for that.
"""

from __future__ import annotations

import unittest
from collections.abc import Mapping, Sequence
from typing import Any

from asynclookup.conformance.driver import ConformanceError
from asynclookup.conformance.machine import FuzzConfig, Stats, run
from asynclookup.conformance.targets.adapter import faults_text
from asynclookup.conformance.targets.vllm import PREFIX, impl_spec, load_impl

SHRINK_SECONDS = 20.0  # the shrinker's budget when ``shrink`` is on


def conformance_test_case(
    impl: str | type[Any],
    *,
    faults: str = "all",
    examples: int = 100,
    steps: int = 30,
    seed: int | None = None,
    strict_efficiency: bool = False,
    shrink: bool = True,
    methods: str | Sequence[str] | Mapping[str, str] = (),
    cleanup_arg: str | None = None,
    verdicts: str | None = None,
    tables: str | Sequence[str] | Mapping[str, str] = (),
) -> type[unittest.TestCase]:
    """The TestCase class fuzzing ``impl`` (``MODULE:CLASS`` or the class) as the options say.

    The oracle's own shrinker runs (``shrink=False`` reports the first failing
    sequence as found): it replays calls without Hypothesis and pins the worker's
    timing, which Hypothesis's shrinker cannot do for a threaded run.  ``methods``,
    ``cleanup_arg``, ``verdicts`` and ``tables`` say the class's shape as ``--method``,
    ``--cleanup-arg``, ``--verdicts`` and ``--tables`` do (e.g.
    ``methods={"mark_miss": "invalidate"}``, ``tables="probes=_states"``).
    """
    spec = impl if isinstance(impl, str) else f"{impl.__module__}:{impl.__qualname__}"
    spec = impl_spec(spec, methods=methods, cleanup_arg=cleanup_arg, verdicts=verdicts,
                     tables=tables)
    load_impl(spec)  # fails now, in one line, if the class does not fit
    config = FuzzConfig(
        target=PREFIX + spec, mode="threaded", faults=faults_text(faults),
        strict_efficiency=strict_efficiency,
    )

    def test_conforms_to_the_spec(self: unittest.TestCase) -> None:
        """The oracle finds no call sequence the spec excludes."""
        run(
            config, examples=examples, steps=steps, seed=seed,
            shrink_budget=SHRINK_SECONDS if shrink else 0.0,
        )  # raises the ConformanceError, an AssertionError: the test fails with it

    name = f"Conformance{spec.split(';')[0].rpartition(':')[2]}"  # the class, not its options
    case = type(name, (unittest.TestCase,), {
        "test_conforms_to_the_spec": test_conforms_to_the_spec,
        "__module__": __name__,
        "__qualname__": name,
    })
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
    try:
        run(config, examples=examples, seed=seed, steps=steps, stats=stats, shrink_budget=0.0)
    except ConformanceError as error:
        return error
    return None
