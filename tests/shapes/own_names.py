"""vLLM's calls with tables of other names: ``_states``, ``_by_request``, ``_pending``, ``_done``.

``OwnNames`` is correct; ``OwnNamesKeepsIndex`` leaks: its cleanup leaves the
request in the index (nothing it returns is wrong, so only the leak check,
with its tables found by shape, can see it).  ``HexKeyed`` keeps its keys as
hex strings, so no table holds the key's bytes and none is found by shape:
its tables must be named (``--tables``); ``HexKeyedKeepsIndex`` leaks the same
way as ``OwnNamesKeepsIndex``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tests.shapes.core import ShapeCore


class OwnNames(ShapeCore):
    """vLLM's scheduler calls over ShapeCore's own table names."""

    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        return self._lookup(key, req_context)

    def flush(self) -> None:
        self._flush()

    def cleanup(self, req_id: str) -> None:
        self._cleanup(req_id)

    def drain_results(self) -> None:
        self._drain()

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        self._mark_miss(keys)

    def mark_present(self, keys: Iterable[bytes]) -> None:
        self._mark_present(keys)

    def shutdown(self) -> None:
        self._shutdown()


class OwnNamesKeepsIndex(OwnNames):
    """Bug (property 5): cleanup forgets the request's probes but keeps its index entry."""

    def cleanup(self, req_id: str) -> None:
        for key in self._by_request.get(req_id, set()):
            if key in self._states and req_id in self._states[key].requesters:
                self._forget(key, req_id)


class HexKeyed(OwnNames):
    """Keeps each key as the ASCII of ``key.hex()`` in its tables; correct."""

    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        return self._lookup(key.hex().encode("ascii"), req_context)

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        self._mark_miss([k.hex().encode("ascii") for k in keys])

    def mark_present(self, keys: Iterable[bytes]) -> None:
        self._mark_present([k.hex().encode("ascii") for k in keys])

    def _probe(self, group: Any) -> list[tuple[bytes, int, bool]]:
        ctx, entries = group
        raw = [(bytes.fromhex(k.decode("ascii")), g) for k, g in entries]
        return [(k.hex().encode("ascii"), g, v)
                for (k, g, v) in super()._probe((ctx, raw))]


class HexKeyedKeepsIndex(HexKeyed):
    """Bug (property 5): as OwnNamesKeepsIndex, in HexKeyed's tables."""

    cleanup = OwnNamesKeepsIndex.cleanup
