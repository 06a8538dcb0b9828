"""Watching a black box's threads: their uncaught exceptions, and what they post.

``acquire_hook`` / ``release_hook`` scope the oracle's ``threading.excepthook``:
the first user installs it, the last one puts back the hook it replaced (unless
someone replaced it since), so an IUT thread's uncaught exception reaches the
callback its adapter registered in ``WATCHED`` while the adapter lives, and the
process's own hook is untouched before and after.  ``CountingQueue`` counts
what an IUT's worker posts on its results queue (``watch_puts``), so that an adapter can wait,
bounded, until so many results were posted.  Both are hints that shorten the
oracle's wait for a post, never evidence a judgement rests on.  ``IdleWatch`` is the fallback
for an IUT whose results store is no queue (a dict, a list under a lock): it
counts the results of a tier call as posted once the thread that made the call
is idle again, blocked in its next wait.

It knows no protocol: ``asynclookup.conformance.targets.vllm`` uses both.
"""

from __future__ import annotations

import os
import queue
import select
import sys
import threading
import traceback
import weakref
from collections.abc import Callable, Mapping
from types import FrameType, TracebackType
from typing import Any

from asynclookup.conformance.targets.tables import resolve, watch_puts

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


def results_in(item: object) -> int:
    """How many results one item put on a results queue holds, whatever its shape.

    One result is a ``(key, generation, verdict)`` triple (a tuple or list whose
    first element is the key, as bytes); a mapping holds one result per entry (a
    dict per batch); another list, tuple or set holds the results of its items (a
    list per group or per batch); ``None`` is a sentinel (0); an object of the
    class's own holds the results of its fields that are such collections (a
    record per group, its results in one field), or is one result itself when
    none of its fields is (a result object).  A hint for a wait, never a
    judgement: a miscount only makes the wait end early or run to its bound.
    """
    if item is None:
        return 0
    if isinstance(item, tuple | list) and item and isinstance(item[0], bytes):
        return 1
    if isinstance(item, Mapping):
        return len(item)
    if isinstance(item, tuple | list | set | frozenset):
        return sum(results_in(x) for x in item)
    held = [v for v in _fields(item) if _holds_results(v)]
    return sum(results_in(v) for v in held) if held else 1


def _holds_results(value: object) -> bool:
    return isinstance(value, tuple | list | set | frozenset | Mapping)


def _fields(item: object) -> list[object]:
    """The values of an object's fields (its ``__dict__``, or its ``__slots__``)."""
    fields = getattr(item, "__dict__", None)
    if isinstance(fields, dict):
        return list(fields.values())
    slots = getattr(type(item), "__slots__", ())
    names = (slots,) if isinstance(slots, str) else tuple(slots)
    return [getattr(item, name) for name in names if hasattr(item, name)]


class CountingQueue:
    """Counts the results put on a queue (``results_in`` each item) and wakes waiters."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.sizes_put = 0

    def counted(self, item: Any) -> None:
        with self.changed:
            self.sizes_put += results_in(item)
            self.changed.notify_all()


def wrap_queue(manager: Any, path: str) -> CountingQueue | None:
    """Count the results put on the queue at ``path`` of ``manager`` (``watch_puts``)."""
    owner_path, _, name = path.rpartition(".")
    owner = resolve(manager, owner_path) if owner_path else manager
    counting = CountingQueue()
    return counting if watch_puts(owner, name, counting.counted) is not None else None


# -- when no results queue is found: the tier-calling thread going idle ----------------

_WAIT_CODE = threading.Condition.wait.__code__  # Queue.get, Event.wait, Semaphore, ... wait here


_SELECTORS = tuple(
    kind for kind in (getattr(select, name, None) for name in ("epoll", "poll", "kqueue"))
    if isinstance(kind, type)
)


def _blocks(arg: object) -> bool:
    """Whether a C function called blocks the thread (it has no Python frame): a
    ``SimpleQueue.get``, or a selector's wait (an asyncio event loop between events)."""
    name, owner = getattr(arg, "__name__", ""), getattr(arg, "__self__", None)
    if name == "get" and isinstance(owner, queue.SimpleQueue):
        return True
    return name in ("poll", "control", "select") and (
        isinstance(owner, _SELECTORS) or owner is select
    )


class IdleWatch:
    """Counts the results of tier calls whose calling thread has since gone idle.

    The IUT's ``batch_lookup`` routing calls ``entering()`` when a tier call
    starts and ``returned(keys)`` when it returns (both on the IUT's thread).
    From the return on, a profile function on that thread only (``sys.setprofile``)
    waits for the thread's next blocking wait: a ``threading.Condition.wait``
    (which ``queue.Queue.get``, ``Event.wait``, ``Semaphore.acquire`` and
    ``wait_for`` all reach), a ``SimpleQueue.get``, a selector's wait (an
    asyncio loop between events), or the end of the thread (a next tier call is
    not idle: a worker posting per batch asks the tier for the batch's next
    group first).  Then the keys it returned count as posted: a worker that
    waits for its next batch has usually posted what it had (docs/protocol.md:
    results are posted "always before it takes the next batch").  Usually: a
    thread that hands its results to another to post (a pool's dispatcher, a
    loop's callback) is idle before the post.  So this only ends the oracle's
    wait; whether the verdict shows is judged by the lookups after it, which
    re-ask until a bound (``Driver.await_verdict``).
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
