"""Drive any vLLM-shaped lookup manager class through the conformance oracle.

A vLLM-shaped class is constructed with one argument (``tier_type: str``), has
an overridable ``batch_lookup(keys, req_context)`` that its own worker thread
(or pool of threads) calls, and the scheduler calls ``lookup(key,
req_context)``, ``flush()``, ``cleanup(req_id)``, ``drain_results()``,
``shutdown()`` and, optionally, ``mark_miss(keys)`` / ``mark_present(keys)``.
A class may differ from that in the small ways a ``asynclookup.conformance.targets.shape.Shape``
says (other method names, cleanup taking the context, verdicts of its own
vocabulary, tables of other names).  ``VllmAdapter`` subclasses such a class
so that ``batch_lookup`` is the oracle's ``OracleTier`` (which blocks each call
until the oracle answers it), and is the ``Target`` the oracle drives, in
threaded mode only.

What it adds to the black box:

- request contexts are objects with only a ``req_id`` attribute;
- ``supports`` leaves out what the class lacks (``mark_miss``,
  ``mark_present``) and calls after ``shutdown()`` (vLLM defines none), so the
  oracle generates none of them; should one come (a replay), the adapter
  answers it with its own closed-manager error and the IUT is not called;
- an exception raised by an IUT method, or one that escapes one of the IUT's
  threads (seen through ``threading.excepthook``, installed while an adapter
  lives and restored when the last one is shut down), is reported with the
  place it was raised, so the oracle names property 7 with the traceback;
  threads the IUT starts later (a pool that grows on demand) are watched too;
- a snapshot of the tables for the leak check (properties 4, 5), and a count of
  what the worker posts (for settles): the tables ``asynclookup.conformance.targets.tables``
  found by shape or the user named; with no results queue, a tier call's results
  count as posted once the thread that made it is idle again
  (``asynclookup.conformance.targets.threads.IdleWatch``).

It does not decide conformance: ``asynclookup.observe.engine`` does.
``load`` says what keeps a class from fitting, and which option would fit it
(the CLI's one-line exit 2).
"""

from __future__ import annotations

import logging
import sys
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence, Sized
from dataclasses import dataclass
from typing import Any, TypeVar

from asynclookup.conformance.targets.adapter import (
    OracleTier,
    Target,
    TargetFactory,
    import_user_module,
)
from asynclookup.conformance.targets.shape import (
    OPTIONAL,
    Shape,
    fit_problem,
    load_verdicts,
)
from asynclookup.conformance.targets.tables import TablesUsed, explore, readable, resolve
from asynclookup.conformance.targets.target import PREFIX, FuzzTarget
from asynclookup.conformance.targets.threads import (
    WATCHED,
    IdleWatch,
    acquire_hook,
    release_hook,
    where,
    wrap_queue,
)
from asynclookup.spec.errors import AsyncLookupError

T = TypeVar("T")
__all__ = ["PREFIX"]  # re-exported: conformance.regression imports it from here


class AdapterClosedError(AsyncLookupError, RuntimeError):
    """The adapter's answer to any call after ``shutdown()``: its own closed-manager error,
    raised without calling the IUT (vLLM defines none; the reference's is
    ``asynclookup.reference.ManagerClosedError``)."""


class IUTRaised(AsyncLookupError, RuntimeError):
    """An IUT method (or its worker thread) raised; the message says where."""


@dataclass(frozen=True)
class ReqContext:
    """A request context with nothing but the request's id."""

    req_id: str


# -- loading a class, with its shape ----------------------------------------------------


@dataclass(frozen=True)
class Impl:
    """A class to drive, how it differs from vLLM's shape, and the tables it keeps."""

    cls: type[Any]
    shape: Shape
    tables: TablesUsed
    verdicts: Callable[[Any], Any] | None

    @property
    def supports(self) -> frozenset[str]:
        """What the oracle may generate: the optional calls it has, none after shutdown."""
        return frozenset(
            m for m in OPTIONAL
            if (name := self.shape.name(m)) and callable(getattr(self.cls, name, None))
        )

    @property
    def lacks(self) -> frozenset[str]:
        """The calls vLLM's shape has that this class has not (``--method cleanup=none``)."""
        return frozenset({"cleanup"}) if self.shape.name("cleanup") is None else frozenset()


_LOADED: weakref.WeakKeyDictionary[type, dict[Shape, Impl]] = weakref.WeakKeyDictionary()


def impl_spec(
    impl: str, *, methods: str | Sequence[str] | Mapping[str, str] = (),
    cleanup_arg: str | None = None, verdicts: str | None = None,
    tables: str | Sequence[str] | Mapping[str, str] = (),
    args: str | Sequence[str] | Mapping[str, Any] = (),
    drain_before_lookup: bool = False,
) -> str:
    """``FuzzTarget.impl(...).impl_text()``: the target's text after ``impl:`` (kept for
    callers that still pass text; new code holds the ``FuzzTarget``)."""
    return FuzzTarget.impl(
        impl, methods=methods, cleanup_arg=cleanup_arg, verdicts=verdicts, tables=tables,
        args=args, drain_before_lookup=drain_before_lookup,
    ).impl_text()


def _impl_target(target: FuzzTarget | str) -> FuzzTarget:
    """``target``, or the target of the text after ``impl:`` (``MODULE:CLASS;options``)."""
    if isinstance(target, FuzzTarget):
        if not target.is_impl:
            raise ValueError(f"{target} is not a vLLM-shaped class (--impl)")
        return target
    return FuzzTarget.parse(target if target.startswith(PREFIX) else PREFIX + target)


def load(target: FuzzTarget | str) -> Impl:
    """The class of an ``impl`` target and its shape; ValueError (one line) saying what
    is missing, and which option would fit, if it does not fit."""
    target = _impl_target(target)
    shape, head = target.shape, target.path
    module_name, attribute = target.module, target.attribute
    try:
        module = import_user_module(module_name)
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"--impl {head}: cannot import {module_name}: {reason}") from None
    found = getattr(module, attribute, None)
    if found is None:
        raise ValueError(f"--impl {head}: module {module_name} has no {attribute}")
    problem = fit_problem(found, shape)
    if problem is not None:
        raise ValueError(f"--impl {head}: {problem}")
    cls: type[Any] = found
    known = _LOADED.setdefault(cls, {})
    if shape not in known:
        verdicts = load_verdicts(shape)
        tables = _find_tables(cls, shape)
        _check_answers(head, cls, shape, tables, verdicts)
        known[shape] = Impl(cls, shape, tables, verdicts)
    return known[shape]


def load_impl(target: FuzzTarget | str) -> type[Any]:
    """The class ``load`` loads (ValueError, one line, if it misfits)."""
    return load(target).cls


def tables_used(target: FuzzTarget | str) -> TablesUsed:
    """Which tables the adapter of ``target`` reads, and how each was chosen."""
    return load(target).tables


def impl_factory(target: FuzzTarget | str) -> TargetFactory:
    """A ``TargetFactory`` for an ``impl`` target (or ``MODULE:CLASS[;options]``)."""
    impl = load(target)
    # the IUT's warnings about the oracle's faulty tier answers are expected
    for klass in impl.cls.__mro__:
        if klass.__module__ not in ("builtins", "abc"):
            logging.getLogger(klass.__module__).setLevel(logging.ERROR)

    building: list[Callable[[], object]] = []  # the hook release of an adapter being built

    def factory(tier: OracleTier, mode: str) -> Target:
        return VllmAdapter(impl, tier, mode, building)

    def abandon() -> None:
        """The class's constructor never returned: release what its adapter holds."""
        while building:
            building.pop()()

    setattr(factory, "abandon", abandon)  # noqa: B010 (read with getattr by the driver)
    return factory


def _routed(cls: type[Any], shape: Shape, tier: Callable[[list[bytes], Any], Any]) -> type[Any]:
    """``cls`` with its tier method answering through ``tier``."""

    def batch_lookup(_self: Any, keys: Any, req_context: Any) -> Any:
        return tier(list(keys), req_context)

    name = shape.name("batch_lookup") or "batch_lookup"
    return type(f"Oracle{cls.__name__}", (cls,), {name: batch_lookup})


def _find_tables(cls: type[Any], shape: Shape) -> TablesUsed:
    """Search the tables of one throwaway instance (its worker's crashes kept quiet)."""
    crashes: list[str] = []
    acquire_hook()
    try:
        def build(answer: Callable[[Any], list[bool]]) -> Any:
            before = set(threading.enumerate())
            routed = _routed(cls, shape, lambda keys, _ctx: answer(keys))
            manager = routed("oracle", **shape.constructor_kwargs())
            for thread in set(threading.enumerate()) - before:
                WATCHED[thread] = crashes.append
            return manager

        return explore(build, shape, ReqContext)
    finally:
        release_hook()


def _check_answers(
    head: str, cls: type[Any], shape: Shape, tables: TablesUsed,
    verdicts: Callable[[Any], Any] | None,
) -> None:
    """Misfits only an instance shows: a constructor that raises, lookup's vocabulary,
    what cleanup takes."""
    if tables.build_error is not None:
        args = "".join(f", {k}={v}" for k, v in shape.args)
        hint = "" if shape.args else " (does it take more? give them with --impl-arg NAME=VALUE)"
        raise ValueError(f"--impl {head}: {cls.__name__}('oracle'{args}) raised "
                         f"{tables.build_error}{hint}")
    first = tables.first_verdict
    if verdicts is None and first is not None and not isinstance(first, bool):
        raise ValueError(
            f"--impl {head}: {cls.__name__}.{shape.name('lookup')} answered {first!r} for a key "
            f"never looked up (the spec's None): map its verdicts to True/False/None with "
            f"--verdicts MODULE:FUNC"
        )
    if verdicts is not None and first is not None:
        try:
            mapped = verdicts(first)
        except Exception as exc:
            raise ValueError(f"--verdicts {shape.verdicts}: raised {type(exc).__name__} on "
                             f"{first!r}, lookup's answer for a key never looked up") from None
        if mapped is not None:
            raise ValueError(f"--verdicts {shape.verdicts}: maps {first!r}, lookup's answer for "
                             f"a key never looked up, to {mapped!r}, not None")
    error = tables.cleanup_error
    if error is not None and not shape.passes_context and "req_id" in error:
        raise ValueError(
            f"--impl {head}: {cls.__name__}.{shape.name('cleanup')} raised {error} when given "
            f"a request id: try --cleanup-arg context"
        )


# -- the adapter ------------------------------------------------------------------------


class VllmAdapter:
    """A vLLM-shaped class as an oracle ``Target`` (threaded mode)."""

    def __init__(
        self, impl: Impl, tier: OracleTier, mode: str,
        building: list[Callable[[], object]] | None = None,
    ) -> None:
        if mode != "threaded":
            raise ValueError("a vLLM-shaped class runs its own worker: use threaded mode")
        self.mode = mode
        self.tier = tier
        self.impl = impl
        self.supports = impl.supports
        self.lacks = impl.lacks
        self.worker_crash: str | None = None
        self._reported_crash = False
        self._closed = False
        shape = impl.shape
        self._names = {m: shape.name(m) or m for m in (*OPTIONAL, "lookup", "flush", "cleanup",
                                                        "drain_results", "shutdown")}
        # no results queue to count (a dict, a list under a lock): a result counts as
        # posted once the thread that called the tier is idle again (threads.IdleWatch)
        self._idle = IdleWatch() if impl.tables.results is None else None
        routed = _routed(impl.cls, shape, self._tier_call)
        acquire_hook()
        self._release = weakref.finalize(self, release_hook)
        before = set(threading.enumerate())
        if building is not None:
            building.append(self._release)
        try:
            self.manager = routed("oracle", **shape.constructor_kwargs())
        except BaseException:
            self._release()
            raise
        finally:
            if building is not None and self._release in building:
                building.remove(self._release)
        self.threads: list[threading.Thread] = []  # started by the constructor: the worker(s)
        self._later: list[threading.Thread] = []  # started during a call (a pool growing)
        self._seen = before
        self._adopt(self.threads)
        self._posted = (
            wrap_queue(self.manager, impl.tables.results.path)
            if impl.tables.results is not None else None
        )
        if self._posted is None and self._idle is None:
            self._idle = IdleWatch()

    def _tier_call(self, keys: list[bytes], req_context: Any) -> Any:
        """The oracle's tier, as the IUT's thread calls it (watched when no queue is)."""
        watch = self._idle
        if watch is None:
            return self.tier.batch_lookup(keys, req_context)
        watch.entering()
        try:
            return self.tier.batch_lookup(keys, req_context)
        finally:
            watch.returned(len(keys))

    # -- scheduler calls ---------------------------------------------------------

    def lookup(self, key: bytes, request: str) -> bool | None:
        if self.impl.shape.drain_before_lookup:  # the scheduler's duty (--drain-before-lookup)
            self.drain_results()
        method = getattr(self.manager, self._names["lookup"])
        mapper = self.impl.verdicts
        if mapper is None:
            verdict: bool | None = self._call(lambda: method(key, ReqContext(request)))
            return verdict
        raw = self._call(lambda: method(key, ReqContext(request)))
        mapped: bool | None = self._call(lambda: mapper(raw))
        return mapped

    def flush(self) -> None:
        self._call(getattr(self.manager, self._names["flush"]))

    def cleanup(self, request: str) -> None:
        if "cleanup" in self.lacks:  # never generated; a replay's is the IUT's misuse
            raise NotImplementedError("the class has no cleanup (--method cleanup=none)")
        arg = ReqContext(request) if self.impl.shape.passes_context else request
        method = getattr(self.manager, self._names["cleanup"])
        self._call(lambda: method(arg))

    def mark_miss(self, keys: tuple[bytes, ...]) -> None:
        method = getattr(self.manager, self._names["mark_miss"])
        self._call(lambda: method(list(keys)))

    def mark_present(self, keys: tuple[bytes, ...]) -> None:
        method = getattr(self.manager, self._names["mark_present"])
        self._call(lambda: method(list(keys)))

    def drain_results(self) -> None:
        self._call(getattr(self.manager, self._names["drain_results"]))

    def shutdown(self) -> None:
        if self._closed:
            return  # idempotent, and the IUT is not called again
        try:
            self._call(getattr(self.manager, self._names["shutdown"]))
        finally:
            self._closed = True
            for thread in (*self.threads, *self._later):
                thread.join(timeout=5.0)
            self._release()

    def abandon(self) -> None:
        """Give up on the class (a call into it never returned): release the oracle's
        excepthook now, as shutdown would, and call nothing more."""
        self._closed = True
        self._release()

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

    @property
    def post_watch(self) -> str | None:
        """What ``wait_posted`` saw end its wait, for the report (None: it watches nothing).
        A thread gone idle is all it says then: not how many results were posted."""
        if self._posted is not None and self.impl.tables.results is not None:
            return f"the count on `{self.impl.tables.results.path}` reached them"
        if self._idle is not None:
            return "its thread went idle"
        return None

    def wait_posted(self, results: int, timeout: float) -> bool | None:
        posted, idle = self._posted, self._idle
        if posted is not None:
            with posted.changed:
                done = posted.changed.wait_for(
                    lambda: posted.sizes_put >= results or self.worker_crash is not None, timeout
                )
        elif idle is not None:
            with idle.changed:
                done = idle.changed.wait_for(
                    lambda: idle.settled >= results or self.worker_crash is not None, timeout
                )
        else:
            return None
        if self.worker_crash is not None:
            return False  # the driver reports the crash (take_crash), with its place
        return done

    def take_crash(self) -> str | None:
        """Where one of the IUT's threads died, the first time it is asked after the crash
        (the driver reports it as a dead worker, property 7, whatever the call showed)."""
        if self.worker_crash is None or self._reported_crash:
            return None
        self._reported_crash = True
        return self.worker_crash

    def crashed(self, where: str) -> None:
        """One of the IUT's threads died of ``where``: remember it, wake a ``wait_posted``."""
        if self.worker_crash is None:
            self.worker_crash = where
        if self._posted is not None:
            with self._posted.changed:
                self._posted.changed.notify_all()
        if self._idle is not None:
            self._idle.wake()

    def is_closed_error(self, exc: BaseException) -> bool:
        return isinstance(exc, AdapterClosedError)

    # -- plumbing ------------------------------------------------------------------------

    def _adopt(self, into: list[threading.Thread]) -> None:
        """Watch the threads started since the last look (``into``: the constructor's
        threads, whose liveness is the worker's, or ``_later``: watched for crashes only,
        so a pool's thread that ends normally is no dead worker)."""
        now = threading.enumerate()
        for thread in now:
            if thread not in self._seen and thread not in WATCHED and thread.is_alive():
                WATCHED[thread] = self.crashed
                into.append(thread)
        self._seen = set(now)
        self._thread_count = len(now)

    def _call(self, fn: Callable[[], T]) -> T:
        if self._closed:
            raise AdapterClosedError("the manager was shut down")
        if threading.active_count() != self._thread_count:  # threads came or went meanwhile
            self._seen = set(threading.enumerate())  # not the IUT's doing: not watched
            self._thread_count = len(self._seen)
        try:
            return fn()
        except Exception as exc:
            raise IUTRaised(where(exc, sys.exc_info()[2])) from exc
        finally:
            if threading.active_count() != self._thread_count:
                self._adopt(self._later)

    @property
    def table_roles(self) -> dict[str, str]:
        """Each snapshot table's role (``probes``, ``index``, ``batch``), by its path."""
        return {t.path: t.role for t in self.impl.tables.tables}

    @property
    def guessed_tables(self) -> frozenset[str]:
        """The snapshot tables found by shape, not named (the leak check counts one as
        held only while it mentions a key or request of the run)."""
        return frozenset(t.path for t in self.impl.tables.tables if not t.named)

    def snapshot(self) -> dict[str, Sized] | None:
        """The tables found by shape or named, for the leak check; None when there are none."""
        if not self.impl.tables.leak_check:
            return None
        return {t.path: readable(resolve(self.manager, t.path)) for t in self.impl.tables.tables}
