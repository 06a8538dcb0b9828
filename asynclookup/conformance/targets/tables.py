"""Find a vLLM-shaped class's tables by their shape, for the leak check and the settles.

The leak check (properties 4, 5) reads three tables of the class: its probe
states, its request index and the step's batch; the settles count what its
worker posts on its results queue.  vLLM calls them ``_lookup_state``,
``_req_keys``, ``_lookup_batch`` and ``_pending_results``; copies of it call
them otherwise.  ``explore`` builds one throwaway instance of the class (its
``batch_lookup`` answering False) and asks it one question: after
``lookup(K, R)`` and no flush,

- a mapping keyed by the key ``K`` is a probe table;
- a mapping keyed by the request ``R`` (its id or its context) whose value
  mentions ``K`` is a request index;
- any other collection holding an entry that mentions ``K`` is a batch;
- a list of mappings is one table in shards, a probe table or an index by
  its shards;

then, after ``flush()``, an "index" that no longer mentions ``K`` is the
batch grouped by request (a flush empties a batch, an index holds until
cleanup); after a drain, a "batch" that is no mapping and still mentions ``K``
is the probe table when what holds ``K`` is ``K`` itself (a list of keys beside
lists of their fields), the index when it names ``R`` too (a list of
(request, key) pairs); and the queue the worker puts on once the tier has
answered (none was put on before: not the flush's queue, not a pool's
hand-over queue) is the results queue; a worker that posts a batch's results
only when it takes the next one is given a second flush.  A results store
that is not a queue (``put`` / ``get_nowait``) is not counted: none is found,
and one named (``--tables results=_jobs``, a dict) is taken as said but not
counted (the only thing the oracle would do with it is count its puts): the
settles fall back to watching the worker thread go idle, and the coverage line
says so.  Attributes are searched one level deep (``_book.states``).  A role
the user names (``--tables probes=_states``) is taken as named, and only
checked to exist.

It judges nothing: a table found here is only read by the driver's leak
check, which wants every table to hold nothing (``holds_anything``) when the
spec holds nothing, and counts one found by shape, a guess, as held only while
it mentions a key or a request of the run (``mentions_any``).
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import queue
import threading
from collections.abc import Callable, Iterable, Mapping, Sized
from dataclasses import dataclass, field
from typing import Any

from asynclookup.conformance.targets.bounded import CALL_BOUND, CallHung, SchedulerThread
from asynclookup.conformance.targets.shape import ROLES, Shape

KEY = b"asynclookup-shape-probe-key"
REQUEST = "asynclookup-shape-probe-request"
TIER_WAIT = 2.0  # seconds the exploration waits for the throwaway worker's tier call
POST_WAIT = 1.0  # then for its post on a results queue
DEPTH = 4  # how deep an entry is searched for the key


@dataclass(frozen=True)
class Table:
    """One table the oracle reads: its role, its attribute path, how it was chosen."""

    role: str  # probes, index, batch or results
    path: str  # an attribute of the manager, or of one of its attributes (a.b)
    named: bool  # named with --tables (else found by shape)


@dataclass(frozen=True)
class TablesUsed:
    """What ``explore`` found, and what it could not."""

    tables: tuple[Table, ...] = ()  # probes, index, batch: the leak check's tables
    results: Table | None = None  # counted for settles (not a leak table)
    reason: str | None = None  # why a role has no table, when it has none
    uncounted: str | None = None  # a results table named that is no queue: why not counted
    first_verdict: object = None  # what lookup answered for a key never looked up
    cleanup_error: str | None = None  # what cleanup raised, if it did
    build_error: str | None = None  # what the constructor raised, if it did

    def post_watch(self) -> str:
        """One phrase: how a settle sees the worker post (always a hint, never a judgement)."""
        if self.results is not None:
            return f"posts counted on `{self.results.path}` (a hint for settles)"
        if self.uncounted is not None:
            return (f"results {self.uncounted}: not counted, a settle watches the worker "
                    "thread go idle (a hint)")
        return "no results queue found: a settle watches the worker thread go idle (a hint)"

    @property
    def leak_check(self) -> bool:
        return bool(self.tables)

    def describe(self) -> str:
        """One phrase: the tables and how each was chosen, or why there are none."""
        if not self.tables:
            return f"OFF ({self.reason})"
        named = [f"{t.role}={t.path}" for t in self.tables if t.named]
        found = [f"{t.role}={t.path}" for t in self.tables if not t.named]
        parts = ([f"named {', '.join(named)}"] if named else []) + (
            [f"found by shape {', '.join(found)}"] if found else [])
        absent = [r for r in ROLES[:3] if r not in {t.role for t in self.tables}]
        text = f"on ({'; '.join(parts)}"
        if absent:
            text += f"; no {', '.join(absent)} table"
        return text + ")"

    def as_json(self) -> dict[str, Any]:
        """Each role's attribute and how it was chosen (null: none), and the reason."""
        by_role: dict[str, Any] = {role: None for role in ROLES}
        for t in (*self.tables, *([self.results] if self.results else [])):
            by_role[t.role] = {"attribute": t.path, "how": "named" if t.named else "shape"}
        return {**by_role, "reason": self.reason}


def resolve(manager: Any, path: str) -> Any:
    """The object at ``path`` (``a`` or ``a.b``) on ``manager``; AttributeError if none.
    A path ending in ``()`` names a method of no arguments that returns the table (a
    class whose tables are no Python collections: rows in a database, say)."""
    called = path.endswith("()")
    found = manager
    for part in path.removesuffix("()").split("."):
        found = getattr(found, part)
    return found() if called else found


def readable(table: Any) -> Sized:
    """A table as a sized collection (a ``queue.Queue`` as the list of its items)."""
    if isinstance(table, Sized):
        return table
    inner = getattr(table, "queue", None)  # queue.Queue keeps its items in a deque
    if isinstance(inner, Sized) and isinstance(inner, Iterable):
        return list(inner)
    raise TypeError(f"{type(table).__name__} is not a collection")


@dataclass
class _Stub:
    """The throwaway instance's tier: answers False, tells when it was called, and
    notes how many puts each watched queue had by then (a pool's hand-over queue has
    its put before the tier call, the results queue only after it)."""

    called: threading.Event = field(default_factory=threading.Event)
    counters: dict[str, _PutCounter] = field(default_factory=dict)
    puts_before: dict[str, int] = field(default_factory=dict)

    def answer(self, keys: Any) -> list[bool]:
        if not self.called.is_set():
            self.puts_before = {path: c.puts for path, c in self.counters.items()}
            self.called.set()
        return [False] * len(list(keys))


class _PutCounter:
    """Counts the puts on a queue of the throwaway instance (``watch_puts``), waking a
    shared condition."""

    def __init__(self, changed: threading.Condition) -> None:
        self._changed = changed
        self.puts = 0
        self.undo: Callable[[], None] = lambda: None

    def counted(self, item: Any) -> None:
        with self._changed:
            self.puts += 1
            self._changed.notify_all()


def is_queue(value: object) -> bool:
    """Whether ``value`` looks like a thread-safe queue (put and get_nowait)."""
    return callable(getattr(value, "put", None)) and callable(getattr(value, "get_nowait", None))


def watch_puts(
    owner: Any, name: str, on_put: Callable[[Any], None]
) -> Callable[[], None] | None:
    """Call ``on_put(item)`` after every put on the queue ``owner.<name>``, whoever
    holds it; None when that attribute is no queue (``put`` and ``get_nowait``).
    Returns the undo.

    The queue object itself is watched, not only the attribute: a worker that was
    handed the queue in its constructor (a thread's own reference) puts on it too.
    So its ``put`` and ``put_nowait`` are shadowed on the instance, each calling the
    class's method and then ``on_put`` once (a ``put_nowait`` that goes through
    ``put``, as ``queue.Queue``'s does, counts once); a coroutine ``put`` (an
    asyncio queue's) is left alone.  A queue with no instance dictionary
    (``queue.SimpleQueue``) is replaced in the attribute by a forwarding stand-in
    instead, which sees only the puts made through the attribute.
    """
    inner = getattr(owner, name, None)
    if inner is None or not (hasattr(inner, "put") and hasattr(inner, "get_nowait")):
        return None
    inside = threading.local()

    def watched(method: Callable[..., Any]) -> Callable[..., Any]:
        def put(item: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(inside, "put", False):
                return method(item, *args, **kwargs)
            inside.put = True
            try:
                done = method(item, *args, **kwargs)
            finally:
                inside.put = False
            on_put(item)
            return done
        return put

    shadowed: list[str] = []
    try:
        for method in ("put", "put_nowait"):
            found = getattr(type(inner), method, None)
            if callable(found) and not inspect.iscoroutinefunction(found):
                setattr(inner, method, watched(found.__get__(inner)))
                shadowed.append(method)
    except (AttributeError, TypeError):
        for method in shadowed:
            delattr(inner, method)
        wrapper = _Forwarding(inner, watched(inner.put))
        setattr(owner, name, wrapper)
        return lambda: setattr(owner, name, inner)

    def undo() -> None:
        for method in shadowed:
            with contextlib.suppress(AttributeError):
                delattr(inner, method)

    return undo


class _Forwarding:
    """Stands in for a queue that cannot be watched in place: ``put`` and ``put_nowait``
    go through ``put`` (watched), anything else to the queue."""

    def __init__(self, inner: Any, put: Callable[..., Any]) -> None:
        self._inner = inner
        self.put = put

    def put_nowait(self, item: Any) -> Any:
        return self.put(item, block=False)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def explore(
    build: Callable[[Callable[[Any], list[bool]]], Any],
    shape: Shape,
    context: Callable[[str], Any],
) -> TablesUsed:
    """Find the tables of the instance ``build(answer)`` makes (its tier: ``answer``).

    ValueError (one line) for a named table the instance lacks; anything else
    that goes wrong only turns the leak check off, with the reason.  Every call
    into the instance is made on a thread of its own, bounded: one that does not
    return turns the leak check off too (the run itself then reports that call).
    """
    runner = SchedulerThread(CALL_BOUND, name="asynclookup-tables")
    try:
        return runner.call(
            lambda: _explore_one(build, shape, context), "looking for its tables", list
        )
    except CallHung as hung:
        return TablesUsed(reason=(
            f"a call made while looking for its tables did not return within "
            f"{hung.seconds:.1f} s"
        ))
    finally:
        runner.close()


def _explore_one(
    build: Callable[[Callable[[Any], list[bool]]], Any],
    shape: Shape,
    context: Callable[[str], Any],
) -> TablesUsed:
    stub = _Stub()
    try:
        manager = build(stub.answer)
    except Exception as exc:
        return TablesUsed(reason=f"building one instance to find its tables raised {_one(exc)}",
                          build_error=_one(exc))
    try:
        return _explore(manager, shape, context, stub)
    finally:
        with contextlib.suppress(Exception):
            getattr(manager, shape.name("shutdown") or "shutdown")()


def _explore(manager: Any, shape: Shape, context: Callable[[str], Any], stub: _Stub) -> TablesUsed:
    named: list[Table] = []
    uncounted: str | None = None
    for role in ROLES:
        path = shape.table(role)
        if not path:
            continue
        try:
            value = resolve(manager, path)
            if role != "results":
                readable(value)
        except AttributeError:
            name = path.removesuffix("()")
            raise ValueError(
                f"--tables {role}={path}: {_class_name(manager)} has no attribute {name} "
                f"(it has {', '.join(_tables_of(manager)) or 'no tables'})"
            ) from None
        except TypeError as exc:
            raise ValueError(f"--tables {role}={path}: {exc}") from None
        except Exception as exc:  # a method named for a table raised
            raise ValueError(f"--tables {role}={path}: calling it raised {_one(exc)}") from None
        if role == "results" and not is_queue(value):
            uncounted = (f"`{path}` named, a {type(value).__name__}, not a queue (put and "
                         "get_nowait) whose puts the oracle can count")
            continue
        named.append(Table(role, path, named=True))
    said = {role for role, _ in shape.tables}
    changed = threading.Condition()
    counters: dict[str, _PutCounter] = {}
    for path, value in _attributes(manager):
        if "." not in path and is_queue(value):
            counter = _PutCounter(changed)
            undo = watch_puts(manager, path, counter.counted)
            if undo is not None:
                counter.undo = undo
                counters[path] = counter
    stub.counters = counters
    try:
        verdict = getattr(manager, shape.name("lookup") or "lookup")(KEY, context(REQUEST))
    except Exception as exc:
        return TablesUsed(tuple(t for t in named if t.role != "results"),
                          reason=f"lookup raised {_one(exc)} while its tables were looked for")
    found = _by_shape(manager, said)
    results = next((t for t in named if t.role == "results"), None)
    if "results" not in said:
        results = _results_queue(manager, shape, counters, changed, stub, context)  # flushes
    else:
        with contextlib.suppress(Exception):
            getattr(manager, shape.name("flush") or "flush")()
    found = [_emptied_at_flush(manager, t) for t in found]
    with contextlib.suppress(Exception):
        getattr(manager, shape.name("drain_results") or "drain_results")()
    found = [_kept_after_drain(manager, t) for t in found]
    tables = tuple(sorted(
        [t for t in named if t.role != "results"] + found, key=lambda t: ROLES.index(t.role)))
    for counter in counters.values():
        counter.undo()
    cleanup_error = _rest_of_life(manager, shape, context)
    reason = None
    if not tables:
        off = all(shape.table(role) is None for role in ROLES[:3])
        reason = "--tables none" if off else (
            "no attribute of the class holds the looked-up key after lookup(): "
            "name its tables with --tables probes=...,index=...,batch=..."
        )
    return TablesUsed(tables, results, reason, uncounted, verdict, cleanup_error)


def _rest_of_life(manager: Any, shape: Shape, context: Callable[[str], Any]) -> str | None:
    """Clean up the throwaway instance (drained already); what cleanup raised, if it did."""
    if shape.name("cleanup") is None:
        return None  # --method cleanup=none
    try:
        arg = context(REQUEST) if shape.passes_context else REQUEST
        getattr(manager, shape.name("cleanup") or "cleanup")(arg)
    except Exception as exc:
        return _one(exc)
    return None


def _by_shape(manager: Any, said: set[str]) -> list[Table]:
    """The tables of the roles not named, by what they hold after lookup(KEY, REQUEST)."""
    out: list[Table] = []
    seen: set[int] = set()
    for path, value in _attributes(manager):
        if id(value) in seen or not _collection(value) or _bounded(value):
            continue
        role = _role(value)
        if role is None or role in said:
            continue
        seen.add(id(value))
        out.append(Table(role, path, named=False))
    return out


def _bounded(value: object) -> bool:
    """A deque bounded by its ``maxlen``: it cannot grow without bound, so it is no leak
    even if it keeps keys and requests (a history of the last calls, kept for debugging),
    and the protocol's tables are never bounded so."""
    return isinstance(value, collections.deque) and value.maxlen is not None


def _role(value: Any) -> str | None:
    if isinstance(value, Mapping):
        keys = list(value.keys())
        if any(k == KEY for k in keys):
            return "probes"
        for k in keys:
            if (k == REQUEST or getattr(k, "req_id", None) == REQUEST) and _mentions(value[k]):
                return "index"
        return "batch" if any(_mentions(v) for v in value.values()) else None
    items = list(value)
    if items and all(isinstance(v, Mapping) for v in items):  # shards of one table
        for shard in items:
            role = _role(shard)
            if role in ("probes", "index"):
                return role
    return "batch" if any(_mentions(v) for v in items) else None


def _emptied_at_flush(manager: Any, table: Table) -> Table:
    """``table`` as found by shape, but an "index" that no longer mentions the key once the
    instance has flushed is the step's batch, grouped by request (an index holds until
    cleanup)."""
    if table.role != "index":
        return table
    with contextlib.suppress(Exception):
        if not _mentions(resolve(manager, table.path)):
            return Table("batch", table.path, named=False)
    return table


def _kept_after_drain(manager: Any, table: Table) -> Table:
    """``table`` as found by shape, but a "batch" that is no mapping and still holds the
    key after the flush, the worker's answer and a drain is no batch: a flush empties
    a batch and a drain applies what was in flight, while the probes and the request
    index hold the key until cleanup.  So such a list of keys alone is the probe
    table (in arrays: a sorted list of keys beside lists of their fields, or a slot
    array), and one whose entries holding the key name the request too is the index
    (a list of (request, key) pairs)."""
    if table.role != "batch" or table.named:
        return table
    with contextlib.suppress(Exception):
        value = resolve(manager, table.path)
        if isinstance(value, Mapping) or not _mentions(value):
            return table
        holding = [v for v in list(value) if _mentions(v, DEPTH - 1)]
        if holding and all(_is_key(v) for v in holding):
            return Table("probes", table.path, named=False)
        if any(_mentions(v, DEPTH - 1, REQUEST) for v in holding):
            return Table("index", table.path, named=False)
    return table


def _is_key(value: object) -> bool:
    return isinstance(value, bytes | bytearray | memoryview) and bytes(value) == KEY


def holds_anything(table: Any) -> bool:
    """Whether a table holds anything: a mapping, any key; another collection, any element
    that is neither None (a freed slot) nor a collection holding nothing (an empty shard)."""
    if isinstance(table, Mapping):
        return len(table) > 0
    return any(
        item is not None and not (_collection(item) and not holds_anything(item))
        for item in list(table)
    )


def probe_keys(table: Any) -> set[bytes]:
    """The keys a probes table holds: a mapping by key, a collection of such shards, or
    a list of keys (beside lists of their fields)."""
    if isinstance(table, Mapping):
        return {key for key in list(table) if isinstance(key, bytes)}
    items = list(table)
    shards = [s for s in items if isinstance(s, Mapping)]
    keys = {key for shard in shards for key in list(shard) if isinstance(key, bytes)}
    return keys | {item for item in items if isinstance(item, bytes)}


def _mentions(value: Any, depth: int = DEPTH, target: bytes | str = KEY) -> bool:
    """Whether ``value`` holds ``target`` (a key, or a request id), ``depth`` levels deep."""
    if isinstance(value, bytes | bytearray | memoryview | str):
        return (bytes(value) if not isinstance(value, str) else value) == target
    if depth == 0 or isinstance(value, int | float | bool) or value is None:
        return False
    deeper = depth - 1
    if isinstance(value, Mapping):
        return any(
            _mentions(k, deeper, target) or _mentions(v, deeper, target)
            for k, v in list(value.items())
        )
    if isinstance(value, Iterable) and isinstance(value, Sized):
        return any(_mentions(v, deeper, target) for v in list(value))
    fields = getattr(value, "__dict__", None)
    if isinstance(fields, dict):
        return any(_mentions(v, deeper, target) for v in list(fields.values()))
    slots = getattr(type(value), "__slots__", ())
    return any(_mentions(getattr(value, s, None), deeper, target) for s in slots)


def requests_named(table: Any, requests: Iterable[str]) -> frozenset[str]:
    """The request ids of ``requests`` that ``table`` (a probes table) still mentions."""
    return frozenset(r for r in requests if _mentions(table, DEPTH + 1, r))


def mentions_any(table: Any, keys: Iterable[bytes], requests: Iterable[str]) -> bool:
    """Whether ``table`` still mentions one of ``keys`` or of the request ids ``requests``."""
    return any(_mentions(table, DEPTH + 1, k) for k in keys) or bool(
        requests_named(table, requests)
    )


def _collection(value: object) -> bool:
    """A mutable collection a table could be (not a string, a tuple or a queue)."""
    if isinstance(value, str | bytes | bytearray | tuple | frozenset):
        return False
    return isinstance(value, Sized) and isinstance(value, Iterable)


def _attributes(manager: Any) -> list[tuple[str, Any]]:
    """The manager's attributes, and those of its plain attribute objects (one level)."""
    out: list[tuple[str, Any]] = []
    for name, value in list(vars(manager).items()):
        out.append((name, value))
        inner = getattr(value, "__dict__", None)
        if (
            isinstance(inner, dict) and not _collection(value) and not is_queue(value)
            and not callable(value) and not isinstance(value, threading.Thread | type)
            and type(value).__module__ not in ("threading", "queue", "logging")
        ):
            out.extend((f"{name}.{k}", v) for k, v in list(inner.items()))
    return out


def _tables_of(manager: Any) -> list[str]:
    return [path for path, value in _attributes(manager)
            if _collection(value) or isinstance(value, queue.Queue)]


def _results_queue(
    manager: Any, shape: Shape, counters: dict[str, _PutCounter],
    changed: threading.Condition, stub: _Stub, context: Callable[[str], Any],
) -> Table | None:
    """The queue the worker posts on: none was put on it before the first tier call (the
    flush's queue and a pool's hand-over queue were), and it is put on after that call,
    or, for a worker that posts a batch's results when it takes the next, after a
    second flush."""
    flush = getattr(manager, shape.name("flush") or "flush")
    try:
        flush()
    except Exception:
        return None
    if not counters or not stub.called.wait(TIER_WAIT):
        return None
    fresh = [p for p, c in counters.items() if not stub.puts_before.get(p, 0)]

    def posted() -> list[str]:
        return [p for p in fresh if counters[p].puts]

    with changed:
        changed.wait_for(posted, POST_WAIT)
    if not posted():
        try:
            getattr(manager, shape.name("lookup") or "lookup")(KEY + b"-2", context(REQUEST))
            flush()
        except Exception:
            return None
        with changed:
            changed.wait_for(posted, TIER_WAIT)
    found = posted()
    return Table("results", found[0], named=False) if len(found) == 1 else None


def _class_name(manager: Any) -> str:
    """The user's class's name (not that of the oracle's subclass routing its tier)."""
    cls = type(manager)
    if cls.__module__.startswith("asynclookup.") and len(cls.__mro__) > 1:
        return cls.__mro__[1].__name__
    return cls.__name__


def _one(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
