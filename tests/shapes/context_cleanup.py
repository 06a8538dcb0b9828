"""A copy of vLLM's manager whose ``cleanup`` takes the request context, not its id.

``ContextCleanup`` is correct and fits with ``--cleanup-arg context``;
``ContextCleanupKeepsOrphans`` forgets the request but never deletes a probe
left without requesters: the next flush submits a cleaned-up entry (property
1), a later request receives the orphan's verdict (2), or the orphan is left
behind (5).
"""

from __future__ import annotations

from typing import Any

from tests.shapes.own_names import OwnNames


class ContextCleanup(OwnNames):
    """cleanup(req_context): the request is ``req_context.req_id``."""

    def cleanup(self, req_context: Any) -> None:
        self._cleanup(req_context.req_id)


class ContextCleanupKeepsOrphans(ContextCleanup):
    """Bug (property 1, 2 or 5): an orphaned probe stays."""

    def cleanup(self, req_context: Any) -> None:
        for key in self._by_request.pop(req_context.req_id, set()):
            self._states[key].requesters.discard(req_context.req_id)
