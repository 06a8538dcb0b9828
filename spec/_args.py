"""Argument types shared by the ``asynclookup`` subcommands.

Each raises ``argparse.ArgumentTypeError`` with the message printed on the
one line of a bad-argument exit; nothing here parses a command line.
"""

from __future__ import annotations

import argparse


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
