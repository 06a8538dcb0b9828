"""A copy of vLLM's manager whose ``mark_miss`` is called ``invalidate``.

``Invalidating`` is correct and fits with ``--method mark_miss=invalidate``;
``InvalidatingForcesResolved`` has a shipped bug under the new name: its
``invalidate`` forces PENDING and IN_FLIGHT probes to a False verdict, so
their own verdict lands a second time (property 3).
"""

from __future__ import annotations

from collections.abc import Iterable

from tests.shapes.own_names import OwnNames


class Invalidating(OwnNames):
    """mark_miss is ``invalidate``; there is no ``mark_miss``."""

    mark_miss = None  # type: ignore[assignment]  # not callable: the class has none

    def invalidate(self, keys: Iterable[bytes]) -> None:
        self._mark_miss(keys)


class InvalidatingForcesResolved(Invalidating):
    """Bug (property 3): invalidate resolves probes whose verdict is still to come."""

    def invalidate(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            probe = self._states.get(key)
            if probe is not None:
                probe.verdict, probe.in_flight = False, False

    def _apply(self, key: bytes, generation: int, verdict: bool) -> None:
        probe = self._states.get(key)
        if probe is not None and probe.generation == generation and probe.requesters:
            assert probe.verdict is None, "a probe received a second verdict"
        super()._apply(key, generation, verdict)
