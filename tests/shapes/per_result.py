"""A worker that posts each result of a tier call on its own, a little apart: correct.

The protocol does not say that a tier call's results are posted together
(docs/protocol.md, "What the spec decides where the protocol leaves room",
point 9): a worker may hand each result over as it goes.  ``OnePerPost`` does,
into a deque under a lock (no queue the oracle can count, so a settle watches
the worker thread go idle), and between two posts it waits 2 ms on an event
that nothing sets (slow work after each result; nothing is synchronised by
it).  The oracle once judged such a class wrong: once a lookup showed the
first result it held the whole call posted, so the next key's ``None`` was a
verdict that never came (property 6).  ``OnePerPostDropsLast`` never posts a
call's last result: that verdict never comes (property 6).
"""

from __future__ import annotations

import collections
import threading

from tests.shapes.core import Group
from tests.shapes.own_names import OwnNames

Result = tuple[bytes, int, bool]


class OnePerPost(OwnNames):
    """``OwnNames`` whose worker posts each result on its own, 2 ms apart."""

    PAUSE = 0.002  # seconds between two posts of one call's results

    def __init__(self, tier_type: str) -> None:
        self._posted: collections.deque[Result] = collections.deque()
        self._posted_lock = threading.Lock()
        self._never = threading.Event()
        super().__init__(tier_type)

    def _dispatch(self) -> None:
        while (batch := self._inbox.get()) is not None:
            groups: dict[str, Group] = {}
            for key, ctx, gen in batch:
                groups.setdefault(ctx.req_id, (ctx, []))[1].append((key, gen))
            for group in groups.values():
                self._post(self._probe(group))

    def _post(self, results: list[Result]) -> None:
        for i, result in enumerate(results):
            if i:
                self._never.wait(self.PAUSE)
            with self._posted_lock:
                self._posted.append(result)

    def _drain(self) -> None:
        self._drain_due = False
        with self._posted_lock:
            results = list(self._posted)
            self._posted.clear()
        for key, generation, verdict in results:
            self._apply(key, generation, verdict)


class OnePerPostDropsLast(OnePerPost):
    """Never posts the last result of a call of more than one key: property 6."""

    def _post(self, results: list[Result]) -> None:
        super()._post(results[:-1] if len(results) > 1 else results)
