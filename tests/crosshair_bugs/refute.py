"""Ask CrossHair to refute one contract line of one function: the bugs-detected runner.

``crosshair check`` treats every ``post:`` line of a function as a condition of
its own and spends its full timeout on each line it cannot refute.  A broken
variant breaks one rule, so the non-vacuity test asks CrossHair about the line
that states that rule only, over the small-scope States of ``small_scope``, and
CrossHair stops at the first counterexample.  From the repository root::

    python -m tests.crosshair_bugs.refute MODULE FUNCTION 'CONTRACT EXPRESSION' [--timeout S]

prints CrossHair's counterexample and exits 1 when it found one, prints "no
counterexample" and exits 0 when it did not, and exits 2 on bad arguments.  It
uses CrossHair's Python API (``analyze_function``), which is less stable than its
command line; it checks nothing but the one condition it is given.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

import crosshair.core_and_libs  # noqa: F401  (loads CrossHair's symbolic builtins and patches)
from crosshair.core import ConditionCheckable, analyze_function
from crosshair.options import AnalysisKind, AnalysisOptionSet
from crosshair.statespace import MessageType

from tests.crosshair_bugs.small_scope import register


def refute(fn: Callable[..., object], expression: str, timeout: float) -> list[str] | None:
    """CrossHair's counterexamples to the ``post: expression`` line of ``fn``'s
    contract ([] when it found none), or None when ``fn`` has no such line."""
    options = AnalysisOptionSet(analysis_kind=[AnalysisKind.PEP316], per_condition_timeout=timeout)
    for checkable in analyze_function(fn, options):
        if not isinstance(checkable, ConditionCheckable):
            continue
        (condition,) = checkable.conditions.post
        if condition.expr_source.strip() == expression.strip():
            return [
                f"{m.filename}:{m.line}: error: {m.message}"
                for m in checkable.analyze()
                if m.state > MessageType.PRE_UNSAT
            ]
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m tests.crosshair_bugs.refute")
    parser.add_argument("module")
    parser.add_argument("function")
    parser.add_argument("expression")
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args(argv)
    try:
        fn = getattr(importlib.import_module(args.module), args.function)
    except (ImportError, AttributeError) as exc:
        print(f"refute: cannot load {args.module}.{args.function}: {exc}", file=sys.stderr)
        return 2
    register()
    messages = refute(fn, args.expression, args.timeout)
    if messages is None:
        print(f"refute: {args.function} has no line 'post: {args.expression}'", file=sys.stderr)
        return 2
    print("\n".join(messages) or f"no counterexample in {args.timeout}s per condition")
    return 1 if messages else 0


if __name__ == "__main__":
    sys.exit(main())
