"""What the ``asynclookup`` subcommands share: exit codes, the usage error, argument types.

Each argument type raises ``argparse.ArgumentTypeError`` with the message
printed on the one line of a bad-argument exit; nothing here parses a command
line.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Any

from asynclookup.spec.errors import AsyncLookupError

# Shared by every subcommand: 0 clean, 1 a violation, 2 bad input, 3 a limit stopped it.
EXIT_HOLDS, EXIT_VIOLATION, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3

Subparsers = Any  # argparse's _SubParsersAction, which is private


class UsageError(AsyncLookupError):
    """Bad command-line input; its message is the one line printed."""


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
