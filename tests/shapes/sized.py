"""A copy of vLLM's manager whose constructor takes its pool size: ``n_lookup_threads``.

``SizedPool(tier_type, n_lookup_threads)`` runs that many threads that call
the tier (1: the dispatcher calls it itself; more: a fork-join pool, as
``tests.shapes.pool.Pooled``).  It has no default, so it fits only with
``--impl-arg n_lookup_threads=N``.  ``SizedPoolZipTruncates`` pairs keys
with a short answer by ``zip``: the keys it drops stay IN_FLIGHT (property 6).
"""

from __future__ import annotations

from tests.shapes.core import Group
from tests.shapes.own_names import OwnNames
from tests.shapes.pool import PooledZipTruncates


class SizedPool(OwnNames):
    """OwnNames with its pool size a constructor argument."""

    def __init__(self, tier_type: str, n_lookup_threads: int) -> None:
        if not isinstance(n_lookup_threads, int) or n_lookup_threads < 1:
            raise ValueError(f"n_lookup_threads must be a positive int, not {n_lookup_threads!r}")
        self.POOL = n_lookup_threads
        super().__init__(tier_type)


class SizedPoolZipTruncates(SizedPool):
    """Bug (property 6): a short answer leaves the keys it does not cover unanswered."""

    def _probe(self, group: Group) -> list[tuple[bytes, int, bool]]:
        return PooledZipTruncates._probe(self, group)  # type: ignore[arg-type]
