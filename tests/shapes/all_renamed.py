"""A copy of vLLM's manager that calls every protocol call otherwise, its tier call too.

``AllRenamed`` is correct; it fits only with every name given:
``--method batch_lookup=probe_batch,lookup=query,flush=end_step,cleanup=release,``
``drain_results=collect,shutdown=close,mark_miss=invalidate,mark_present=mark_stored``,
which is the hint the oracle prints when none is given.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tests.shapes.core import Group, ShapeCore

EVERY_NAME = ("batch_lookup=probe_batch,lookup=query,flush=end_step,cleanup=release,"
              "drain_results=collect,shutdown=close,mark_miss=invalidate,"
              "mark_present=mark_stored")


class AllRenamed(ShapeCore):
    """Every call under a name copies of the manager use."""

    batch_lookup = None  # type: ignore[assignment]  # not callable: its tier is probe_batch

    def probe_batch(self, keys: list[bytes], req_context: Any) -> Iterable[bool]:
        raise NotImplementedError("the tier: the oracle replaces it")

    def _probe(self, group: Group) -> list[tuple[bytes, int, bool]]:
        self.batch_lookup = self.probe_batch  # ShapeCore's worker calls batch_lookup
        return super()._probe(group)

    def query(self, key: bytes, req_context: Any) -> bool | None:
        return self._lookup(key, req_context)

    def end_step(self) -> None:
        self._flush()

    def release(self, req_id: str) -> None:
        self._cleanup(req_id)

    def collect(self) -> None:
        self._drain()

    def invalidate(self, keys: Iterable[bytes]) -> None:
        self._mark_miss(keys)

    def mark_stored(self, keys: Iterable[bytes]) -> None:
        self._mark_present(keys)

    def close(self) -> None:
        self._shutdown()
