"""A copy of vLLM's manager whose ``cleanup`` takes the request context, not its id.

``ContextCleanup`` is correct and fits with ``--cleanup-arg context``;
``ContextCleanupKeepsOrphans`` forgets the request but never deletes a probe
left without requesters, so the next flush submits a cleaned-up entry
(property 1).
"""

from __future__ import annotations

from typing import Any

from tests.shapes.own_names import OwnNames


class ContextCleanup(OwnNames):
    """cleanup(req_context): the request is ``req_context.req_id``."""

    def cleanup(self, req_context: Any) -> None:  # type: ignore[override]
        self._cleanup(req_context.req_id)


class ContextCleanupKeepsOrphans(ContextCleanup):
    """Bug (property 1): an orphaned PENDING probe stays, and the flush submits it."""

    def cleanup(self, req_context: Any) -> None:  # type: ignore[override]
        for key in self._by_request.pop(req_context.req_id, set()):
            self._states[key].requesters.discard(req_context.req_id)
