"""Every call into an implementation under test, bounded in time.

The oracle calls the IUT's scheduler methods (and its constructor, and in
stepped mode its worker steps) from one thread of its own, the *scheduler
thread*, and waits for each call at most ``bound`` seconds.  A call that has
not returned by then is a finding, not a hang of the oracle: ``CallHung``
says which call, after how long, and where each of the IUT's threads stood
(their stacks), and the scheduler thread is abandoned (it is a daemon, so the
process can still exit; nothing is called on that IUT again).

One thread for every call keeps what the IUT sees the same as a plain
scheduler's: every call comes from the same thread, one at a time.  Waits are
``threading.Event.wait`` with a timeout: nothing here sleeps.

A wait whose end is a finding (a call that does not return, a tier call or a post
the spec owes) counts only the time this process could run (``Patience``): it
waits in slices, and a slice that ends later than it asked (the waiting thread
itself was kept from running: a loaded machine, a paused VM) adds that lateness
to the bound.  A starved machine then lengthens the wait instead of condemning a
class for the machine's load; the bound stretches at most ``STRETCH`` times, so
it stays a bound.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from asynclookup.spec.errors import AsyncLookupError

T = TypeVar("T")

CALL_BOUND = 10.0  # seconds one call into the IUT may take before it is reported as hung
# A constructor starts threads and may meet the process's first full garbage collection
# on a loaded machine: it gets longer before it is reported.
CONSTRUCT_BOUND = 30.0
STACK_FRAMES = 6  # innermost frames shown of each thread's stack
SLICE = 0.05  # seconds of one slice of a patient wait
LATE = 0.01  # a slice that ends later than asked by more than this was starved
STRETCH = 4.0  # a starved wait lasts at most this many times its bound


class CallHung(AsyncLookupError, RuntimeError):
    """A call into the IUT did not return within the bound.

    ``call``: the call as the report reads it; ``seconds``: how long the oracle
    waited; ``stacks``: each watched thread's name and its innermost frames.
    """

    def __init__(self, call: str, seconds: float, stacks: list[tuple[str, str]]) -> None:
        self.call = call
        self.seconds = seconds
        self.stacks = stacks
        super().__init__(f"{call} did not return within {seconds:.1f} s")


class Patience:
    """A bound of ``seconds`` that stretches by how late the waiter's own wakes were."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started = time.monotonic()
        self.lateness = 0.0  # seconds the waiter was kept from running after a slice

    def left(self) -> float:
        """Seconds left of the bound (0.0 once it has passed)."""
        stretched = min(self.seconds + self.lateness, STRETCH * self.seconds)
        return max(0.0, self.started + stretched - time.monotonic())

    def waited(self) -> float:
        """Seconds since the wait began (wall time, lateness included)."""
        return time.monotonic() - self.started

    def wait(self, wait: Callable[[float], T], longest: float = SLICE) -> T:
        """``wait(s)`` for ``s`` at most ``longest`` and what is left; its lateness counted."""
        asked = min(longest, self.left())
        start = time.monotonic()
        got = wait(asked)
        late = time.monotonic() - start - asked - LATE
        if late > 0:
            self.lateness += late
        return got

    def until(self, wait: Callable[[float], T | None]) -> T | None:
        """``wait(s)`` slice after slice until it gives something other than None, or the
        bound runs out (then None)."""
        while True:
            got = self.wait(wait)
            if got is not None or not self.left():
                return got


def patiently(wait: Callable[[float], T | None], seconds: float) -> T | None:
    """``Patience(seconds).until(wait)``: a patient wait of its own."""
    return Patience(seconds).until(wait)


class _Job:
    __slots__ = ("done", "error", "fn", "value")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class SchedulerThread:
    """Runs calls one at a time on a daemon thread; each waited for at most ``bound`` s."""

    def __init__(self, bound: float = CALL_BOUND, name: str = "asynclookup-scheduler") -> None:
        self.bound = bound
        self.hung: CallHung | None = None  # once a call hung, nothing more is run
        self._closed = False
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    @property
    def thread(self) -> threading.Thread:
        """The thread the IUT's calls run on (not one of the IUT's own)."""
        return self._thread

    def call(
        self, fn: Callable[[], T], what: str, watched: Callable[[], Iterable[threading.Thread]]
    ) -> T:
        """``fn()`` on the scheduler thread: its value, or its exception re-raised here.

        ``what`` names the call in a ``CallHung``; ``watched`` gives the threads
        whose stacks the report shows (the scheduler thread's comes first).
        """
        if self.hung is not None:
            raise self.hung
        job = _Job(fn)
        patience = Patience(self.bound)
        self._jobs.put(job)
        if not patience.until(lambda s: job.done.wait(s) or None):
            seconds = patience.waited()
            threads = [self._thread, *(t for t in watched() if t is not self._thread)]
            self.hung = CallHung(what, seconds, stacks_of(threads))
            raise self.hung
        if job.error is not None:
            raise job.error
        value: T = job.value
        return value

    def close(self) -> None:
        """Let the thread end (unless a call hung: then it never will, and it is a daemon).
        Idempotent; it does not wait for the thread when called from it."""
        if self.hung is None and not self._closed:
            self._closed = True
            self._jobs.put(None)
            if threading.current_thread() is not self._thread:
                self._thread.join(self.bound)

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                job.value = job.fn()
            except BaseException as exc:  # re-raised on the caller's thread
                job.error = exc
            finally:
                job.done.set()


def stacks_of(threads: Iterable[threading.Thread]) -> list[tuple[str, str]]:
    """Each live thread's name and its innermost ``STACK_FRAMES`` frames, as text."""
    frames = sys._current_frames()
    out: list[tuple[str, str]] = []
    for thread in threads:
        frame = frames.get(thread.ident) if thread.ident is not None else None
        if frame is None:
            continue
        summary = traceback.extract_stack(frame)[-STACK_FRAMES:]
        lines = [
            f"{entry.filename}:{entry.lineno} in {entry.name}"
            + (f": {entry.line.strip()}" if entry.line else "")
            for entry in summary
        ]
        out.append((thread.name, "\n".join(lines)))
    return out
