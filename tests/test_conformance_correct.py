"""No false alarms: every correct class in tests/ passes the oracle (issue 21).

``tests/correct.py`` lists them all, each with the options that say its shape.
Most are fuzzed with every fault by the test file of their zoo; this file
fuzzes the rest the same way (every fault, strict efficiency, seed 1), and
checks that the list misses none of the zoos.  The five-seed table, and each
single fault kind on two seeds, is in docs/benchmarks.md ("Correct classes").
"""

from __future__ import annotations

import pytest

from asynclookup.conformance.testcase import first_violation
from tests.correct import CORRECT

# modules whose correct classes another test file already fuzzes with every fault
ELSEWHERE = {
    "tests.zoo.vllm_shaped": "test_conformance_zoo.py",
    "tests.outside.callback_style": "test_conformance_outside.py",
    "tests.outside.condition_style": "test_conformance_outside.py",
    "tests.outside.epoch_style": "test_conformance_outside.py",
    "tests.forks.vllm_fork": "test_conformance_forks.py",
}
ELSEWHERE_PACKAGES = {
    "tests.strangers.": "test_conformance_strangers.py",
}
# the shapes test fuzzes these (test_correct_class_of_each_shape_passes)
SHAPES_FUZZED = {
    "renamed:Invalidating", "context_cleanup:ContextCleanup", "verdicts:EnumVerdicts",
    "verdicts:IntVerdicts", "pool:Pooled", "no_cleanup:NoCleanup", "sized:SizedPool",
    "drained:NeedsDrain", "per_result:OnePerPost",
}


def _fuzzed_elsewhere(name: str) -> bool:
    module = CORRECT[name].module
    return (module in ELSEWHERE or module.startswith(tuple(ELSEWHERE_PACKAGES))
            or (module.startswith("tests.shapes.") and name in SHAPES_FUZZED))


HERE = sorted(name for name in CORRECT if not _fuzzed_elsewhere(name))


def test_every_zoo_is_listed() -> None:
    """The list holds a correct class of every zoo, and no name twice."""
    modules = {target.module.rsplit(".", 1)[0] for target in CORRECT.values()}
    assert modules >= {"tests.zoo", "tests.outside", "tests.strangers", "tests.shapes",
                       "tests.regression_pairs.fixed", "tests.forks"}
    assert len(CORRECT) == len({str(target) for target in CORRECT.values()})


@pytest.mark.parametrize("name", HERE)
def test_correct_class_passes_with_every_fault(name: str) -> None:
    """A correct class not fuzzed elsewhere passes: every fault, strict efficiency."""
    error = first_violation(CORRECT[name], seed=1, examples=60, faults="all")
    assert error is None, f"{name}: a false alarm\n{error}"
