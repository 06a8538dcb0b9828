"""Copies of vLLM's manager whose ``lookup`` answers in a vocabulary of its own.

``EnumVerdicts`` answers a ``Verdict`` enum (``to_bool`` maps it for
``--verdicts``); ``IntVerdicts`` answers -1 (not known), 0 (absent) or 1
(present), mapped by ``int_to_bool``.  ``EnumVerdictsUnvalidated`` has the
seed's bug: its flush submits every batched entry whose key has a state, even
one cleaned up and looked up again since (property 1); ``IntVerdictsUnvalidated``
has it too.
"""

from __future__ import annotations

import enum
from typing import Any

from tests.shapes.core import Entry
from tests.shapes.own_names import OwnNames


class Verdict(enum.Enum):
    UNKNOWN = "unknown"
    PRESENT = "present"
    ABSENT = "absent"


def to_bool(verdict: Verdict) -> bool | None:
    """EnumVerdicts' answers as the protocol's verdicts."""
    return {Verdict.UNKNOWN: None, Verdict.PRESENT: True, Verdict.ABSENT: False}[verdict]


def int_to_bool(verdict: int) -> bool | None:
    """IntVerdicts' answers as the protocol's verdicts."""
    return None if verdict < 0 else verdict == 1


class EnumVerdicts(OwnNames):
    """lookup answers Verdict.UNKNOWN / PRESENT / ABSENT."""

    def lookup(self, key: bytes, req_context: Any) -> Verdict:  # type: ignore[override]
        verdict = self._lookup(key, req_context)
        return Verdict.UNKNOWN if verdict is None else (
            Verdict.PRESENT if verdict else Verdict.ABSENT)


class IntVerdicts(OwnNames):
    """lookup answers -1 / 0 / 1."""

    def lookup(self, key: bytes, req_context: Any) -> int:  # type: ignore[override]
        verdict = self._lookup(key, req_context)
        return -1 if verdict is None else int(verdict)


class EnumVerdictsUnvalidated(EnumVerdicts):
    """Bug (property 1): flush keeps an entry whose key has any state."""

    def _live(self, entry: Entry) -> bool:
        return entry[0] in self._states


class IntVerdictsUnvalidated(IntVerdicts):
    """Bug (property 1): as EnumVerdictsUnvalidated, answering ints."""

    _live = EnumVerdictsUnvalidated._live
