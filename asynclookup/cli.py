"""The ``asynclookup`` command line: one subcommand per tool.

Each subcommand is one registration function in ``REGISTRATIONS``: it adds
its parser to the subparsers and sets ``run`` (args -> exit code) as a
default.  Exit codes are shared: 0 every property holds, 1 a violation was
found, 2 bad arguments (one line on stderr saying which), 3 a limit stopped
the search before its fixpoint with no violation found.

What it does not do: check anything itself.  Each checker's package owns its
subcommand (``asynclookup.modelcheck.cli``, ``asynclookup.conformance.cli``,
``asynclookup.trace.report``); this module only puts them under one parser.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from asynclookup._args import EXIT_USAGE, Subparsers, UsageError
from asynclookup.conformance.cli import register as register_fuzz
from asynclookup.modelcheck.cli import register as register_model_check
from asynclookup.trace.report import register as register_check_trace

Register = Callable[[Subparsers], None]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


# -- the entry point -------------------------------------------------------------

REGISTRATIONS: list[Register] = [register_model_check, register_check_trace, register_fuzz]


def parser() -> argparse.ArgumentParser:
    """The ``asynclookup`` parser with every registered subcommand."""
    top = _Parser(prog="asynclookup", description=__doc__.splitlines()[0])
    subparsers = top.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for register in REGISTRATIONS:
        register(subparsers)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``asynclookup``; returns the exit code."""
    try:
        args = parser().parse_args(argv)
        code: int = args.run(args)
        return code
    except UsageError as exc:
        print(str(exc).splitlines()[0], file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help and --version print and exit 0
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
