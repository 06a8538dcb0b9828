"""A copy of vLLM's manager whose scheduler must call ``drain_results()`` before lookups.

``NeedsDrain.lookup`` never applies posted results: vLLM's scheduler drains
at the start of every step, so this class leaves it to the scheduler (its
flush applies them, as docs/protocol.md says).  The protocol's first lookup
after a flush applies posted results, so without ``--drain-before-lookup``
the oracle judges it (property 6: a verdict posted, proven by the worker's
next tier call, that the lookup does not show); with it, it conforms.
``NeedsDrainAppliesByKey`` applies a posted result by key, not by generation
(property 2).
"""

from __future__ import annotations

from typing import Any

from tests.shapes.no_cleanup import NoCleanupAppliesByKey
from tests.shapes.own_names import OwnNames


class NeedsDrain(OwnNames):
    """lookup() reads the tables as the last drain left them."""

    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        self._drain_due = False  # the scheduler drains (drain_results), never lookup
        return self._lookup(key, req_context)


class NeedsDrainAppliesByKey(NeedsDrain):
    """Bug (property 2): a posted result lands on the key's probe whatever its generation."""

    _apply = NoCleanupAppliesByKey._apply
