"""Observer events: what the manager and its worker report while they act.

An observer is any callable taking an ``Event``.  The manager calls it, when one
is given, once per event; with no observer nothing is built and nothing is
called.  Event kinds are named after the spec's actions (``lookup``, ``flush``,
``take_batch``, ``probe_group`` as ``tier_call_started``/``tier_call_finished``,
``post``, ...), so a trace reads like a run of the spec.

``Event.thread`` is the *role* that acted, ``"scheduler"`` or ``"worker"``, not
the OS thread: in stepped mode the test thread plays both roles.

Ordering: with an observer set, the manager makes each scheduler action and
each worker hand-over (``take_batch``, ``post``) atomic with respect to the
other thread, so the order in which the observer is called is a valid
interleaving of the spec's actions.  The observer runs on both threads and must
be thread-safe and must not raise; ``EventRecorder`` is such an observer.

This module only describes events; it does not decide when they happen.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

SCHEDULER = "scheduler"
WORKER = "worker"

# kind -> the fields it carries (keys are bytes, requests are request ids,
# entries are (key, request, generation), results are (key, generation, verdict)).
KINDS: dict[str, tuple[str, ...]] = {
    "lookup_called": ("key", "request"),
    "lookup_returned": ("key", "request", "verdict"),
    "flush": ("submitted", "dropped"),
    "cleanup": ("request",),
    "mark_miss": ("keys",),
    "mark_present": ("keys",),
    "drain": (),
    "shutdown": ("joined",),
    "take_batch": ("entries",),
    "tier_call_started": ("keys", "request"),
    "tier_call_finished": ("keys", "request", "verdicts", "failure"),
    "post": ("results",),
    "result_applied": ("key", "generation", "verdict"),
    "result_stale": ("key", "generation"),
    "result_orphaned": ("key", "generation"),
}


@dataclass(frozen=True)
class Event:
    """One thing the manager or its worker did, with the data it acted on."""

    kind: str
    thread: str  # the role: SCHEDULER or WORKER
    fields: dict[str, object]

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={v!r}" for k, v in self.fields.items())
        return f"Event({self.kind!r}, {self.thread!r}, {{{body}}})"


Observer: TypeAlias = Callable[[Event], None]


class EventRecorder:
    """A thread-safe observer that keeps every event, in the order it was called."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[Event] = []

    def __call__(self, event: Event) -> None:
        with self._lock:
            self._events.append(event)

    @property
    def events(self) -> list[Event]:
        """A copy of the events so far."""
        with self._lock:
            return list(self._events)

    def kinds(self) -> list[str]:
        """The kinds of the events so far, in order."""
        return [e.kind for e in self.events]

    def of_kind(self, kind: str) -> list[Event]:
        """The events of one kind, in order."""
        return [e for e in self.events if e.kind == kind]

    def clear(self) -> None:
        """Forget the events so far."""
        with self._lock:
            self._events.clear()
