"""The ``asynclookup`` command line: one subcommand per tool.

Each subcommand is one registration function in ``REGISTRATIONS``: it adds
its parser to the subparsers and sets ``run`` (args -> exit code) as a
default.  Exit codes are shared (``asynclookup._cli``): 0 every property holds,
1 a violation was found, 2 bad arguments (one line on stderr saying which), 3 a
limit stopped the search before its fixpoint with no violation found.

What it does not do: check anything itself.  Each checker's package owns its
subcommand (``asynclookup.modelcheck.cli``, ``asynclookup.conformance.cli``,
``asynclookup.trace.cli``); this module only puts them under one parser.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from asynclookup._cli import Parser, Subparsers, run_command
from asynclookup.conformance.cli import register as register_fuzz
from asynclookup.modelcheck.cli import register as register_model_check
from asynclookup.trace.cli import register as register_check_trace

Register = Callable[[Subparsers], None]

REGISTRATIONS: list[Register] = [register_model_check, register_check_trace, register_fuzz]


def parser() -> argparse.ArgumentParser:
    """The ``asynclookup`` parser with every registered subcommand."""
    top = Parser(prog="asynclookup", description=__doc__.splitlines()[0].replace("``", ""))
    subparsers = top.add_subparsers(dest="command", required=True, parser_class=Parser)
    for register in REGISTRATIONS:
        register(subparsers)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``asynclookup``; returns the exit code."""
    return run_command(parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
