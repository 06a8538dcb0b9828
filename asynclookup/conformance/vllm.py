"""Drive any vLLM-shaped lookup manager class through the conformance oracle.

A vLLM-shaped class is constructed with one argument (``tier_type: str``), has
an overridable ``batch_lookup(keys, req_context)`` that its own worker thread
calls, and the scheduler calls ``lookup(key, req_context)``, ``flush()``,
``cleanup(req_id)``, ``drain_results()``, ``shutdown()`` and, optionally,
``mark_miss(keys)`` / ``mark_present(keys)``.  ``VllmAdapter`` subclasses such
a class so that ``batch_lookup`` is the oracle's ``OracleTier`` (which blocks
each call until the oracle answers it), and is the ``Target`` the oracle
drives, in threaded mode only.

What it adds to the black box:

- request contexts are objects with only a ``req_id`` attribute;
- ``supports`` leaves out what the class lacks (``mark_miss``,
  ``mark_present``) and calls after ``shutdown()`` (vLLM defines none), so the
  oracle generates none of them; should one come (a replay), the adapter
  answers it with its own closed-manager error and the IUT is not called;
- an exception raised by an IUT method, or one that escapes the IUT's worker
  thread (seen through ``threading.excepthook``), is reported with the
  place it was raised, so the oracle names property 7 with the traceback;
- a snapshot of the tables for the leak check (property 5): vLLM's own
  ``_lookup_state``, ``_req_keys`` and ``_lookup_batch``, when the class has
  all three (the oracle checks them whenever the spec holds nothing).

It does not decide conformance: ``asynclookup.conformance.engine`` does.  ``shape_problem``
names what keeps a class from fitting (the CLI's one-line exit 2).
"""

from __future__ import annotations

import inspect
import logging
import sys
import threading
import traceback
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from asynclookup.conformance.adapter import OracleTier, Target, TargetFactory, import_user_module

T = TypeVar("T")
REQUIRED = ("batch_lookup", "lookup", "flush", "cleanup", "drain_results", "shutdown")
OPTIONAL = ("mark_miss", "mark_present")
LEAK_TABLES = ("_lookup_state", "_req_keys", "_lookup_batch")
PREFIX = "impl:"  # how ``conformance.targets.load_target`` recognises a vLLM-shaped class


class ManagerClosed(RuntimeError):
    """The adapter's answer to any call after ``shutdown()``."""


class IUTRaised(RuntimeError):
    """An IUT method (or its worker thread) raised; the message says where."""


@dataclass(frozen=True)
class ReqContext:
    """A request context with nothing but the request's id."""

    req_id: str


def _where(exc: BaseException, tb: TracebackType | None) -> str:
    """``Type: message`` and the innermost frame, on one line."""
    frames = traceback.extract_tb(tb)
    place = f" at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
    return f"{type(exc).__name__}: {exc}{place}"


# -- uncaught exceptions on IUT worker threads ---------------------------------------

_WATCHED: weakref.WeakKeyDictionary[threading.Thread, VllmAdapter] = weakref.WeakKeyDictionary()
_previous_hook: Callable[[threading.ExceptHookArgs], Any] | None = None
_hook_lock = threading.Lock()


def _excepthook(args: threading.ExceptHookArgs) -> None:
    adapter = _WATCHED.get(args.thread) if args.thread is not None else None
    if adapter is not None and args.exc_value is not None:
        adapter.worker_crash = _where(args.exc_value, args.exc_traceback)
        adapter.wake()
        return
    if _previous_hook is not None:
        _previous_hook(args)


def _install_hook() -> None:
    global _previous_hook
    with _hook_lock:
        if threading.excepthook is not _excepthook:
            _previous_hook = threading.excepthook
            threading.excepthook = _excepthook


# -- counting what the IUT's worker posts (for wait_posted) ---------------------------


class _CountingQueue:
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


def _wrap_queue(manager: Any, name: str) -> _CountingQueue | None:
    inner = getattr(manager, name, None)
    if inner is None or not (hasattr(inner, "put") and hasattr(inner, "get_nowait")):
        return None
    counting = _CountingQueue(inner)
    setattr(manager, name, counting)
    return counting


# -- the shape check ------------------------------------------------------------------


def shape_problem(cls: object) -> str | None:
    """What keeps ``cls`` from being driven as a vLLM-shaped class (None: it fits)."""
    if not isinstance(cls, type):
        return f"{cls!r} is not a class"
    missing = [name for name in REQUIRED if not callable(getattr(cls, name, None))]
    if missing:
        return f"{cls.__name__} has no {', '.join(missing)} method"
    try:
        inspect.signature(cls).bind("oracle")
    except TypeError:
        return f"{cls.__name__} cannot be constructed with one argument (tier_type: str)"
    except ValueError:
        pass  # no signature to read: try it when the oracle builds one
    return None


def load_impl(spec: str) -> type[Any]:
    """The class named ``MODULE:CLASS``; ValueError (one line) if it is missing or misfits."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"--impl must be MODULE:CLASS, got {spec!r}")
    try:
        module = import_user_module(module_name)
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"--impl {spec}: cannot import {module_name}: {reason}") from None
    found = getattr(module, attribute, None)
    if found is None:
        raise ValueError(f"--impl {spec}: module {module_name} has no {attribute}")
    problem = shape_problem(found)
    if problem is not None:
        raise ValueError(f"--impl {spec}: {problem}")
    cls: type[Any] = found
    return cls


def impl_factory(spec: str) -> TargetFactory:
    """A ``TargetFactory`` for the vLLM-shaped class ``MODULE:CLASS``."""
    cls = load_impl(spec)
    # the IUT's warnings about the oracle's faulty tier answers are expected
    for klass in cls.__mro__:
        if klass.__module__ not in ("builtins", "abc"):
            logging.getLogger(klass.__module__).setLevel(logging.ERROR)

    def factory(tier: OracleTier, mode: str) -> Target:
        return VllmAdapter(cls, tier, mode)

    return factory


def missing_optional(cls: type[Any]) -> tuple[str, ...]:
    """The optional calls (mark_miss, mark_present) ``cls`` does not have."""
    return tuple(name for name in OPTIONAL if not callable(getattr(cls, name, None)))


def supported_calls(cls: type[Any]) -> frozenset[str]:
    """What the oracle may generate for ``cls``: its optional calls, none after shutdown."""
    return frozenset(OPTIONAL) - set(missing_optional(cls))


# -- the adapter ------------------------------------------------------------------------


class VllmAdapter:
    """A vLLM-shaped class as an oracle ``Target`` (threaded mode)."""

    def __init__(self, cls: type[Any], tier: OracleTier, mode: str) -> None:
        if mode != "threaded":
            raise ValueError("a vLLM-shaped class runs its own worker: use threaded mode")
        self.mode = mode
        self.tier = tier
        self.supports = supported_calls(cls)
        self.worker_crash: str | None = None
        self._reported_crash = False
        self._closed = False

        def batch_lookup(_self: Any, keys: Any, req_context: Any) -> Any:
            return tier.batch_lookup(list(keys), req_context)

        routed = type(f"Oracle{cls.__name__}", (cls,), {"batch_lookup": batch_lookup})
        _install_hook()
        before = set(threading.enumerate())
        self.manager = routed("oracle")
        self.threads = [t for t in threading.enumerate() if t not in before]
        for thread in self.threads:
            _WATCHED[thread] = self
        self._tables = all(hasattr(self.manager, t) for t in LEAK_TABLES)
        self._posted = _wrap_queue(self.manager, "_pending_results")

    # -- scheduler calls ---------------------------------------------------------

    def lookup(self, key: bytes, request: str) -> bool | None:
        verdict: bool | None = self._call(lambda: self.manager.lookup(key, ReqContext(request)))
        return verdict

    def flush(self) -> None:
        self._call(self.manager.flush)

    def cleanup(self, request: str) -> None:
        self._call(lambda: self.manager.cleanup(request))

    def mark_miss(self, keys: tuple[bytes, ...]) -> None:
        self._call(lambda: self.manager.mark_miss(list(keys)))

    def mark_present(self, keys: tuple[bytes, ...]) -> None:
        self._call(lambda: self.manager.mark_present(list(keys)))

    def drain_results(self) -> None:
        self._call(self.manager.drain_results)

    def shutdown(self) -> None:
        if self._closed:
            return  # idempotent, and the IUT is not called again
        try:
            self._call(self.manager.shutdown)
        finally:
            self._closed = True
            for thread in self.threads:
                thread.join(timeout=5.0)

    # -- stepped mode: not available ---------------------------------------------------

    def take_batch(self) -> bool:
        raise NotImplementedError("a vLLM-shaped class has no stepped worker")

    def probe_group(self) -> bool:
        raise NotImplementedError("a vLLM-shaped class has no stepped worker")

    def post(self) -> bool:
        raise NotImplementedError("a vLLM-shaped class has no stepped worker")

    # -- the worker ------------------------------------------------------------------------

    def worker_alive(self) -> bool:
        if self._closed:
            return True
        if self.worker_crash is not None and not self._reported_crash:
            return True  # the next scheduler call reports the crash, with its place
        return all(t.is_alive() for t in self.threads)

    def wait_posted(self, results: int, timeout: float) -> bool | None:
        posted = self._posted
        if posted is None:
            return None
        with posted.changed:
            done = posted.changed.wait_for(
                lambda: posted.sizes_put >= results or self.worker_crash is not None, timeout
            )
        if self.worker_crash is not None:
            self._reported_crash = True  # the oracle sees a stall and a dead worker
            return False
        return done

    def wake(self) -> None:
        """Wake a ``wait_posted`` (the worker thread died)."""
        if self._posted is not None:
            with self._posted.changed:
                self._posted.changed.notify_all()

    def is_closed_error(self, exc: BaseException) -> bool:
        return isinstance(exc, ManagerClosed)

    # -- plumbing ------------------------------------------------------------------------

    def _call(self, fn: Callable[[], T]) -> T:
        if self._closed:
            raise ManagerClosed("the manager was shut down")
        if self.worker_crash is not None and not self._reported_crash:
            self._reported_crash = True
            raise IUTRaised(f"the worker thread died: {self.worker_crash}")
        try:
            return fn()
        except Exception as exc:
            raise IUTRaised(_where(exc, sys.exc_info()[2])) from exc

    def snapshot(self) -> dict[str, Any] | None:
        """vLLM's tables, for the leak check; None when the class lacks one of them."""
        if not self._tables:
            return None
        return {name: getattr(self.manager, name) for name in LEAK_TABLES}
