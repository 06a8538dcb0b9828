"""Copies of vLLM's manager whose tier calls run on a pool of worker threads.

``Pooled`` has a dispatcher and three pool threads: each batch's per-request
groups are probed concurrently and posted as each finishes, and the next batch
is taken only once every group of the last one is posted (the pool, seen from
outside, is the spec's one worker).  ``PooledWithoutJoin`` takes the next
batch at once, so two batches are in the tier together, which the spec's one
worker never does.  ``PooledZipTruncates`` pairs keys with a short answer by
``zip``, so the keys it drops stay IN_FLIGHT forever (property 6).
``PooledDiesOnRaise`` lets a raising tier kill a pool thread (property 7).
"""

from __future__ import annotations

from typing import Any

from tests.shapes.core import Countdown, Group
from tests.shapes.own_names import OwnNames


class Pooled(OwnNames):
    """Three threads call the tier; fork-join per batch."""

    POOL = 3


class PooledWithoutJoin(Pooled):
    """Bug: the dispatcher does not wait for a batch's groups before the next batch."""

    def _join(self, left: Countdown) -> None:
        pass


class PooledZipTruncates(Pooled):
    """Bug (property 6): a short answer leaves the keys it does not cover unanswered."""

    def _probe(self, group: Group) -> list[tuple[bytes, int, bool]]:
        ctx, entries = group
        try:
            answer: list[Any] = list(self.batch_lookup([k for k, _ in entries], ctx))
        except Exception:
            answer = [False] * len(entries)
        return [(k, g, v is True) for (k, g), v in zip(entries, answer)]  # noqa: B905


class PooledDiesOnRaise(Pooled):
    """Bug (property 7): a pool thread calls the tier outside any try, so a raising tier
    kills that thread (its batch still counts as done: the others go on)."""

    def _serve(self) -> None:
        while (item := self._work.get()) is not None:
            (ctx, entries), left = item
            try:
                answer = list(self.batch_lookup([k for k, _ in entries], ctx))
            finally:
                left.done()
            if len(answer) != len(entries):
                answer = [False] * len(entries)
            self._done.put([(k, g, v is True) for (k, g), v in zip(entries, answer, strict=True)])
