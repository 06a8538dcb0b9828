"""A copy of vLLM's manager with no ``cleanup()``: requests are never released.

``NoCleanup`` is correct for a scheduler that never cancels a request; it fits
with ``--method cleanup=none``, and the oracle then never generates a cleanup
(and says which properties it cannot check without one).
``NoCleanupAppliesByKey`` applies a posted result by key, not by generation,
so a result made stale by ``mark_present`` overwrites its newer verdict
(property 2), a bug a run without cleanups can still reach.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tests.shapes.core import ShapeCore


class NoCleanup(ShapeCore):
    """vLLM's calls, but no cleanup."""

    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        return self._lookup(key, req_context)

    def flush(self) -> None:
        self._flush()

    def drain_results(self) -> None:
        self._drain()

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        self._mark_miss(keys)

    def mark_present(self, keys: Iterable[bytes]) -> None:
        self._mark_present(keys)

    def shutdown(self) -> None:
        self._shutdown()


class NoCleanupAppliesByKey(NoCleanup):
    """Bug (property 2): a posted result lands on the key's probe whatever its generation."""

    def _apply(self, key: bytes, generation: int, verdict: bool) -> None:
        probe = self._states.get(key)
        if probe is not None:
            probe.verdict, probe.in_flight = verdict, False
