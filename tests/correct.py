"""Every correct class in tests/, each with the options that say its shape.

Issue 21's promise is that the oracle never condemns a correct class: these are
all the correct classes this project holds (the zoos, the outside and stranger
classes, the shapes, the regression pairs' fixed twins, the forks' base), as
``FuzzTarget`` values a run can fuzz.  ``tests/test_conformance_correct.py``
runs each with every fault on one seed in CI; ``bench/outside.py --zoo tests
--correct`` runs the full table of docs/benchmarks.md (five seeds, and each
single fault kind on two).  The reference itself is fuzzed by every other test.
"""

from __future__ import annotations

from typing import Any

from asynclookup.conformance.targets.target import FuzzTarget
from tests.forks import CORRECT as FORKS
from tests.outside import OUTSIDE
from tests.regression_pairs import PAIRS
from tests.shapes.all_renamed import EVERY_NAME
from tests.strangers import CORRECT as STRANGERS

_SHAPES = "tests.shapes."
_TO_BOOL = "tests.shapes.verdicts:"

# (class, its shape's options as FuzzTarget.impl takes them)
_SHAPED: tuple[tuple[str, dict[str, Any]], ...] = (
    ("own_names:OwnNames", {}),
    ("own_names:HexKeyed", {}),
    ("renamed:Invalidating", {"methods": "mark_miss=invalidate"}),
    ("context_cleanup:ContextCleanup", {"cleanup_arg": "context"}),
    ("verdicts:EnumVerdicts", {"verdicts": _TO_BOOL + "to_bool"}),
    ("verdicts:IntVerdicts", {"verdicts": _TO_BOOL + "int_to_bool"}),
    ("pool:Pooled", {}),
    ("no_cleanup:NoCleanup", {"methods": "cleanup=none"}),
    ("sized:SizedPool", {"args": {"n_lookup_threads": 1}}),
    ("drained:NeedsDrain", {"drain_before_lookup": True}),
    ("per_result:OnePerPost", {}),
    ("all_renamed:AllRenamed", {"methods": EVERY_NAME}),
)

_OPTION = {"--method": "methods", "--cleanup-arg": "cleanup_arg", "--impl-arg": "args"}


def _pair_options(argv: tuple[str, ...]) -> dict[str, Any]:
    """A regression pair's fuzz options (``--method X``, ...) as keyword arguments."""
    return {_OPTION[flag]: value for flag, value in zip(argv[::2], argv[1::2], strict=True)}


def _every() -> dict[str, FuzzTarget]:
    every: dict[str, FuzzTarget] = {}

    def add(path: str, **options: Any) -> None:
        every[path.rpartition(".")[2]] = FuzzTarget.impl(path, **options)

    add("tests.zoo.vllm_shaped:VllmShapedManager")
    for path, number in OUTSIDE.items():
        if number is None:
            add(path)
    for path in STRANGERS:
        add(path)
    for path, options in _SHAPED:
        add(_SHAPES + path, **options)
    for pair in PAIRS:
        add(f"tests.regression_pairs.fixed.{pair.impl}", **_pair_options(pair.options))
    for path in FORKS:
        add(path)
    return every


# "module:Class" (the last dotted part of the path) -> the target
CORRECT: dict[str, FuzzTarget] = _every()
