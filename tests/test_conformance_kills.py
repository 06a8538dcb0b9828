"""Proof of power: the oracle kills each broken variant of the reference.

Each variant in ``tests.mutants_reference`` breaks one rule of docs/protocol.md.
The fuzzer (stepped, in-memory tier, every fault, a fixed seed) must find it,
name the property the variant breaks, and shrink the counterexample to at most
eight numbered calls.  Property 8 is an efficiency property, so its variant is
fuzzed with strict efficiency, as ``--strict-efficiency`` does.
"""

from __future__ import annotations

import pytest

from asynclookup.conformance.counterexample import ConformanceError
from asynclookup.conformance.machine import FuzzConfig, run
from asynclookup.conformance.targets.target import FuzzTarget
from tests.mutants_reference import VARIANTS

# A seed per variant that finds it early with the machine as it is; any seed
# finds every variant given enough examples (docs/benchmarks.md has the medians).
SEEDS = {
    "FlushWithoutRevalidation": 3,
    "DrainWithoutGenerationCheck": 11,
    "CleanupDropsInFlight": 14,
    "MarkMissOnPending": 1,
    "WorkerDiesOnLazyRaise": 1,
    "ZipTruncatesShortAnswers": 9,
}
MAX_CALLS = 8


def kill(variant: str) -> ConformanceError:
    """The shrunk counterexample the fuzzer finds against ``variant``."""
    config = FuzzConfig(
        target=FuzzTarget.parse(f"tests.mutants_reference:{variant}"),
        strict_efficiency=VARIANTS[variant] == 8,
    )
    with pytest.raises(ConformanceError) as raised:
        run(config, examples=3000, seed=SEEDS[variant], steps=50)
    return raised.value


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_each_variant_is_killed_with_its_property(variant: str) -> None:
    """The fuzzer kills the variant and names the property it breaks."""
    error = kill(variant)
    assert error.violation.number == VARIANTS[variant], str(error)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_each_counterexample_shrinks_to_at_most_eight_calls(variant: str) -> None:
    """After shrinking, the counterexample has at most eight numbered calls."""
    error = kill(variant)
    assert len(error.calls) <= MAX_CALLS, str(error)
