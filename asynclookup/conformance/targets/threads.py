"""Watching a black box's threads: their uncaught exceptions, and what they post.

``acquire_hook`` / ``release_hook`` scope the oracle's ``threading.excepthook``:
the first user installs it, the last one puts back the hook it replaced (unless
someone replaced it since), so an IUT thread's uncaught exception reaches the
callback its adapter registered in ``WATCHED`` while the adapter lives, and the
process's own hook is untouched before and after.  ``CountingQueue`` wraps the
queue an IUT's worker posts its results on, so that an adapter can wait,
bounded, until so many results were posted.  ``IdleWatch`` is the fallback
for an IUT whose results store is no queue (a dict, a list under a lock): it
counts the results of a tier call as posted once the thread that made the call
is idle again, blocked in its next wait.

It knows no protocol: ``asynclookup.conformance.targets.vllm`` uses both.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import traceback
import weakref
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

from asynclookup.conformance.targets.tables import resolve

_OURS = os.path.dirname(os.path.abspath(__file__)) + os.sep  # the oracle's own frames


def where(exc: BaseException, tb: TracebackType | None) -> str:
    """``Type: message`` and the innermost frame of the IUT's code, on one line.

    Frames of the oracle itself (its tier raising a planned fault, its routing of
    ``batch_lookup``) are skipped: the place to show is the IUT's line that let
    the exception through.
    """
    frames = traceback.extract_tb(tb)
    theirs = [f for f in frames if not os.path.abspath(f.filename).startswith(_OURS)]
    frame = (theirs or frames)[-1] if frames else None
    place = f" at {frame.filename}:{frame.lineno} in {frame.name}" if frame else ""
    return f"{type(exc).__name__}: {exc}{place}"


# -- uncaught exceptions on IUT threads, while an adapter lives ----------------------

WATCHED: weakref.WeakKeyDictionary[threading.Thread, Callable[[str], None]] = (
    weakref.WeakKeyDictionary()
)
_previous_hook: Callable[[threading.ExceptHookArgs], Any] | None = None
_hook_users = 0
_hook_lock = threading.Lock()


def _excepthook(args: threading.ExceptHookArgs) -> None:
    crashed = WATCHED.get(args.thread) if args.thread is not None else None
    if crashed is not None and args.exc_value is not None:
        crashed(where(args.exc_value, args.exc_traceback))
        return
    if _previous_hook is not None:
        _previous_hook(args)


def acquire_hook() -> None:
    """Install the hook for one more user (the first one saves the hook it replaces)."""
    global _previous_hook, _hook_users
    with _hook_lock:
        if _hook_users == 0 and threading.excepthook is not _excepthook:
            _previous_hook = threading.excepthook
            threading.excepthook = _excepthook
        _hook_users += 1


def release_hook() -> None:
    """One user fewer; the last one puts the saved hook back (unless another replaced ours)."""
    global _hook_users
    with _hook_lock:
        _hook_users -= 1
        if _hook_users == 0 and threading.excepthook is _excepthook:
            threading.excepthook = _previous_hook or threading.__excepthook__


def hook_users() -> int:
    """How many adapters (and table searches) hold the hook now (for tests)."""
    return _hook_users


# -- counting what the IUT's worker posts (for wait_posted) ---------------------------


class CountingQueue:
    """Wraps a queue: counts the results put (the sizes of the items) and wakes waiters."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.changed = threading.Condition()
        self.sizes_put = 0

    def put(self, item: Any, *args: Any, **kwargs: Any) -> None:
        self._inner.put(item, *args, **kwargs)
        with self.changed:
            if item is not None:
                self.sizes_put += len(item) if hasattr(item, "__len__") else 1
            self.changed.notify_all()

    def put_nowait(self, item: Any) -> None:
        self.put(item)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def wrap_queue(manager: Any, path: str) -> CountingQueue | None:
    owner_path, _, name = path.rpartition(".")
    owner = resolve(manager, owner_path) if owner_path else manager
    inner = getattr(owner, name, None)
    if inner is None or not (hasattr(inner, "put") and hasattr(inner, "get_nowait")):
        return None
    counting = CountingQueue(inner)
    setattr(owner, name, counting)
    return counting


# -- when no results queue is found: the tier-calling thread going idle ----------------

_WAIT_CODE = threading.Condition.wait.__code__  # Queue.get, Event.wait, Semaphore, ... wait here


def _blocks(arg: object) -> bool:
    """Whether a C function called is a blocking ``SimpleQueue.get`` (it has no Python frame)."""
    return getattr(arg, "__name__", "") == "get" and isinstance(
        getattr(arg, "__self__", None), queue.SimpleQueue
    )


class IdleWatch:
    """Counts the results of tier calls whose calling thread has since gone idle.

    The IUT's ``batch_lookup`` routing calls ``entering()`` when a tier call
    starts and ``returned(keys)`` when it returns (both on the IUT's thread).
    From the return on, a profile function on that thread only (``sys.setprofile``)
    waits for the thread's next blocking wait: a ``threading.Condition.wait``
    (which ``queue.Queue.get``, ``Event.wait``, ``Semaphore.acquire`` and
    ``wait_for`` all reach), a ``SimpleQueue.get``, or the end of the thread
    (a next tier call is not idle: a worker posting per batch asks the tier
    for the batch's next group first).  Then the keys it returned count as
    posted: a worker that waits for its next batch has posted what it had
    (PROTOCOL.md: results are posted "always before it takes the next batch"),
    and one that has not will not post until it is woken, which the oracle
    reports.  No polling and no sleeping: the thread itself says so.
    It assumes the thread that called the tier posts its results (a pool whose
    dispatcher posts for its threads needs a results queue).
    """

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.settled = 0  # results of tier calls whose thread went idle since
        self._owed: dict[int, int] = {}  # thread ident -> keys returned, not yet idle

    def entering(self) -> None:
        """On the IUT's thread, as it calls the tier: stop watching while the tier call
        waits for its answer (what the thread returned before is still owed: a worker
        that posts per batch asks the tier for the next group first)."""
        if sys.getprofile() == self._profile:
            sys.setprofile(None)

    def returned(self, keys: int) -> None:
        """On the IUT's thread, as a tier call returns ``keys`` results (or raises)."""
        ident = threading.get_ident()
        with self.changed:
            self._owed[ident] = self._owed.get(ident, 0) + keys
        sys.setprofile(self._profile)

    def _profile(self, frame: FrameType, event: str, arg: object) -> None:
        if (
            (event == "call" and frame.f_code is _WAIT_CODE)
            or (event == "c_call" and _blocks(arg))
            or (event == "return" and frame.f_back is None)  # the thread ends
        ):
            sys.setprofile(None)
            self._idle(threading.get_ident())

    def _idle(self, ident: int) -> None:
        with self.changed:
            owed = self._owed.pop(ident, 0)
            if owed:
                self.settled += owed
                self.changed.notify_all()

    def wake(self) -> None:
        """Wake every waiter (a thread crashed)."""
        with self.changed:
            self.changed.notify_all()
