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

from asynclookup.conformance.counterexample import ConformanceError
from asynclookup.conformance.machine import FuzzConfig, Stats, run
from asynclookup.conformance.replay import SHRINK_BUDGET
from asynclookup.conformance.targets.adapter import faults_text
from asynclookup.conformance.targets.target import FuzzTarget
from asynclookup.conformance.targets.vllm import load_impl


def conformance_test_case(
    impl: str | type[Any] | FuzzTarget,
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
    impl_args: Mapping[str, Any] | Sequence[str] = (),
    drain_before_lookup: bool = False,
) -> type[unittest.TestCase]:
    """The TestCase class fuzzing ``impl`` (``MODULE:CLASS`` or the class) as the options say.

    The oracle's own shrinker runs (``shrink=False`` reports the first failing
    sequence as found): it replays calls without Hypothesis and pins the worker's
    timing, which Hypothesis's shrinker cannot do for a threaded run.  ``methods``,
    ``cleanup_arg``, ``verdicts`` and ``tables`` say the class's shape as ``--method``,
    ``--cleanup-arg``, ``--verdicts`` and ``--tables`` do (e.g.
    ``methods={"mark_miss": "invalidate"}``, ``tables="probes=_states"``);
    ``impl_args`` the constructor's keyword arguments as ``--impl-arg`` does (a mapping
    of values, ``{"n_lookup_threads": 1}``, or ``NAME=LITERAL`` words), and
    ``drain_before_lookup`` is ``--drain-before-lookup``.
    """
    target = impl_target(
        impl, methods=methods, cleanup_arg=cleanup_arg, verdicts=verdicts, tables=tables,
        impl_args=impl_args, drain_before_lookup=drain_before_lookup,
    )
    load_impl(target)  # fails now, in one line, if the class does not fit
    faults = faults_text(faults)

    def test_conforms_to_the_spec(self: unittest.TestCase) -> None:
        """The oracle finds no call sequence the spec excludes."""
        check_conformance(
            target, faults=faults, examples=examples, steps=steps, seed=seed,
            strict_efficiency=strict_efficiency, shrink=shrink,
        )  # raises the ConformanceError, an AssertionError: the test fails with it

    name = f"Conformance{target.attribute.rpartition('.')[2]}"  # the class, not its options
    case = type(name, (unittest.TestCase,), {
        "test_conforms_to_the_spec": test_conforms_to_the_spec,
        "__module__": __name__,
        "__qualname__": name,
    })
    return case


def check_conformance(
    target: FuzzTarget,
    *,
    faults: str = "all",
    examples: int = 100,
    steps: int = 30,
    seed: int | None = None,
    strict_efficiency: bool = False,
    shrink: bool = True,
    stats: Stats | None = None,
) -> Stats:
    """Fuzz the vLLM-shaped ``target`` as ``conformance_test_case``'s test does (and the
    pytest plugin, ``asynclookup.conformance.pytest_plugin``); the run's stats, or raise
    the (shrunk) ``ConformanceError``, an AssertionError.  ValueError (one line) if the
    class does not fit or ``faults`` names no fault kind."""
    load_impl(target)
    config = FuzzConfig(
        target=target, mode="threaded", faults=faults_text(faults),
        strict_efficiency=strict_efficiency,
    )
    return run(config, examples=examples, steps=steps, seed=seed, stats=stats,
               shrink_budget=SHRINK_BUDGET if shrink else 0.0)


def impl_target(
    impl: str | type[Any] | FuzzTarget,
    *,
    methods: str | Sequence[str] | Mapping[str, str] = (),
    cleanup_arg: str | None = None,
    verdicts: str | None = None,
    tables: str | Sequence[str] | Mapping[str, str] = (),
    impl_args: Mapping[str, Any] | Sequence[str] = (),
    drain_before_lookup: bool = False,
) -> FuzzTarget:
    """The ``FuzzTarget`` of a vLLM-shaped class (``MODULE:CLASS``, the class, or a target)
    with the shape options as the CLI takes them; ValueError (one line) for a bad one."""
    if isinstance(impl, FuzzTarget):
        path = impl.impl_text()
    elif isinstance(impl, str):
        path = impl
    else:
        path = f"{impl.__module__}:{impl.__qualname__}"
    return FuzzTarget.impl(
        path, methods=methods, cleanup_arg=cleanup_arg, verdicts=verdicts, tables=tables,
        args=impl_args, drain_before_lookup=drain_before_lookup,
    )


def first_violation(
    impl: str | FuzzTarget, *, seed: int, examples: int, faults: str = "all", steps: int = 30,
    strict_efficiency: bool = True, stats: Stats | None = None,
) -> ConformanceError | None:
    """Fuzz ``impl`` (``MODULE:CLASS[;options]`` or its target) unshrunk; the first
    violation found, or None."""
    target = impl_target(impl)
    load_impl(target)
    config = FuzzConfig(
        target=target, mode="threaded", faults=faults,
        strict_efficiency=strict_efficiency,
    )
    try:
        run(config, examples=examples, seed=seed, steps=steps, stats=stats, shrink_budget=0.0)
    except ConformanceError as error:
        return error
    return None
