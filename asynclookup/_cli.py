"""The floor every ``asynclookup`` subcommand stands on: one of each shared thing.

- the exit codes (one table, ``EXIT_*``), the same for every command;
- ``UsageError``: bad command-line input, whatever command; its message is the
  one line printed, and ``run_command`` turns it into exit 2;
- ``LiveLine``: the one live progress line on a terminal's stderr;
- the argument types; each raises ``argparse.ArgumentTypeError`` with the
  message printed on the one line of a bad-argument exit.

It checks nothing and knows no command: each checker's ``cli`` module does.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import sys
import time
from collections.abc import Sequence
from typing import IO, Any, NoReturn

from asynclookup.spec.errors import AsyncLookupError

# Shared by every subcommand: 0 clean (every property holds; a trace conforms),
# 1 a violation, 2 bad input (arguments, a malformed trace), 3 a limit stopped it first.
EXIT_HOLDS, EXIT_VIOLATION, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3

Subparsers = Any  # argparse's _SubParsersAction, which is private


class UsageError(AsyncLookupError):
    """Bad command-line input; its message is the one line printed."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are ``UsageError`` (one line, exit 2), not an exit."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def run_command(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    """Parse ``argv`` and run the subcommand it names (its ``run`` default); the exit code.

    A ``UsageError`` prints its first line on stderr and exits 2.
    """
    try:
        args = parser.parse_args(argv)
        code: int = args.run(args)
        return code
    except UsageError as exc:
        print(str(exc).splitlines()[0], file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help and --version print and exit 0
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE


class LiveLine:
    """The live progress line of every command on a terminal, redrawn in place at most
    every ``every`` seconds (cut to the terminal's width) and erased before the report."""

    def __init__(self, stream: IO[str], every: float = 0.25) -> None:
        self.stream = stream
        self.every = every
        self.started = time.monotonic()
        self.last = -math.inf
        self.shown = False

    @classmethod
    def on(cls, stream: IO[str], *, quiet: bool = False, every: float = 0.25) -> LiveLine | None:
        """A line on ``stream`` when it is a terminal and not ``quiet``; None otherwise."""
        return None if quiet or not stream.isatty() else cls(stream, every)

    @property
    def elapsed(self) -> float:
        """Seconds since the line was made."""
        return time.monotonic() - self.started

    def show(self, text: str) -> None:
        """Draw ``text``, unless the line was drawn less than ``every`` seconds ago."""
        now = time.monotonic()
        if now - self.last < self.every:
            return
        self.last = now
        width = shutil.get_terminal_size((100, 24)).columns - 1
        self.stream.write("\r" + text[:width] + "\033[K")
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        """Erase the line (before the report is printed)."""
        if self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.shown = False


def integer(text: str) -> int:
    """Any whole number (a seed)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def positive_int(text: str) -> int:
    """A whole number of at least 1 (a count or a bound)."""
    value = integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def positive_float(text: str) -> float:
    """A number greater than 0 (a time limit)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?")


def parse_workers(text: str) -> int:
    """``N`` (at least 1) or ``auto`` (the cores this process may use)."""
    if text == "auto":
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
            os.cpu_count() or 1)
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"want a number of at least 1 or auto, got {text!r}")
    return int(text)


def parse_duration(text: str) -> float:
    """Seconds in ``90``, ``90s``, ``10m``, ``1h30m`` or ``1.5h``; ValueError otherwise."""
    m = DURATION.fullmatch(text.strip())
    if m is None or not text.strip() or not any(m.groups()):
        raise ValueError(f"want a time such as 90s, 10m or 1h30m, got {text!r}")
    hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total <= 0:
        raise ValueError(f"must be longer than 0 s, got {text!r}")
    return total
