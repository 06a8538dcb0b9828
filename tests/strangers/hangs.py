"""Three managers that hang in one call, for a checker's bounded-call test.

Style: thin subclasses of ``PerKeyQueueManager`` (``per_key_simplequeue``), which is correct
and whose worker thread is a daemon, so a process whose scheduler thread is stuck in one of
these calls can still exit.  Each class blocks forever on a ``threading.Event`` that nothing
ever sets: ``LookupHangs`` from its third ``lookup`` call on (construction and the first two
lookups work), ``FlushHangs`` from its second ``flush`` call on, ``ShutdownHangs`` in
``shutdown`` (before it stops the worker).
"""

from __future__ import annotations

import threading

from tests.strangers.per_key_simplequeue import PerKeyQueueManager, RequestContext


class LookupHangs(PerKeyQueueManager):
    """Correct, except that the third and every later lookup never returns."""

    def __init__(self, tier_type: str) -> None:
        super().__init__(tier_type)
        self._never = threading.Event()
        self._lookups = 0

    def lookup(self, key: bytes, req_context: RequestContext) -> bool | None:
        self._lookups += 1
        if self._lookups >= 3:
            self._never.wait()
        return super().lookup(key, req_context)


class FlushHangs(PerKeyQueueManager):
    """Correct, except that the second and every later flush never returns."""

    def __init__(self, tier_type: str) -> None:
        super().__init__(tier_type)
        self._never = threading.Event()
        self._flushes = 0

    def flush(self) -> None:
        self._flushes += 1
        if self._flushes >= 2:
            self._never.wait()
        super().flush()


class ShutdownHangs(PerKeyQueueManager):
    """Correct, except that shutdown never returns."""

    def __init__(self, tier_type: str) -> None:
        super().__init__(tier_type)
        self._never = threading.Event()

    def shutdown(self) -> None:
        self._never.wait()
        super().shutdown()
