"""Memoised evaluation of pure functions of spec States, keyed by the fields they read.

The model checker applies the spec's own action functions and property
predicates to millions of states that differ in only a few fields: a worker
action does not look at the scheduler's tables, most step properties look only
at the action.  So each function is run once on a *tracked* copy of its input,
a ``State`` subclass that records which fields are read, and its result is
reused for every later input that agrees with it on those fields.

Why that is sound: the function is pure and deterministic, so a later input
that agrees on every field the first run read makes the very same run, read
for read.  A run may read different fields on different inputs (``lookup``
reads ``posted`` only when ``drain_due``); each distinct read set is a
*pattern*, and an input is looked up under every pattern seen so far.  A
successor state built with ``_replace`` keeps track of which of its fields are
unchanged copies of the input's: those are rebuilt from the later input, and a
read of such a copy counts as a read of the input's field.  Reading the state
as a whole (iterating it, indexing it, comparing or hashing it) counts as
reading every field.

What it does not do: look inside field values (a field is the unit of
dependence), or notice a function that reaches the fields behind the tuple's
back (``tuple.__getitem__(state, 0)``).  ``memoised=False`` in the checker
turns all of this off, and the tests check that both give the same search.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any, Generic, TypeVar

from asynclookup.modelcheck._visited import kernel
from asynclookup.spec.core import State

FIELDS: tuple[str, ...] = State._fields
FIELD_INDEX: dict[str, int] = {name: i for i, name in enumerate(FIELDS)}
COPIED_ALL: tuple[int, ...] = tuple(range(len(FIELDS)))
COMPUTED = -1  # origin of a field that the function computed

R = TypeVar("R")


class Tracked(State):
    """A State that records, in a log shared with the states derived from it,
    which fields of the original input were read.  Built only by ``track``."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Tracked:
        # ``type(state)(...)`` builds a plain State: all its fields are computed.
        return State(*args, **kwargs)  # type: ignore[return-value]

    @classmethod
    def _make(cls, iterable: Any) -> State:  # type: ignore[override]
        return State._make(iterable)

    def _replace(self, /, **changes: Any) -> Tracked:
        values = list(tuple.__iter__(self))
        origin = list(self.__dict__.get("_origin", (COMPUTED,) * len(FIELDS)))
        for name, value in changes.items():
            if name not in FIELD_INDEX:
                raise ValueError(f"Got unexpected field names: {[name]!r}")
            values[FIELD_INDEX[name]] = value
            origin[FIELD_INDEX[name]] = COMPUTED
        return _tracked(values, self.__dict__.get("_log", set()), tuple(origin))


def _tracked(values: Any, log: set[int], origin: tuple[int, ...]) -> Tracked:
    new = tuple.__new__(Tracked, values)
    new.__dict__["_log"] = log
    new.__dict__["_origin"] = origin
    return new


def _read_all(state: Tracked) -> None:
    origin = state.__dict__.get("_origin")
    if origin is not None:
        state.__dict__["_log"].update(o for o in origin if o != COMPUTED)


def _field_reader(i: int) -> property:
    def read(self: Tracked) -> Any:
        origin = self.__dict__.get("_origin")
        if origin is not None and origin[i] != COMPUTED:
            self.__dict__["_log"].add(origin[i])
        return tuple.__getitem__(self, i)

    return property(read)


def _whole_reader(name: str) -> Callable[..., Any]:
    base = getattr(State, name)

    def method(self: Tracked, *args: Any, **kwargs: Any) -> Any:
        _read_all(self)
        return base(self, *args, **kwargs)

    method.__name__ = name
    return method


for _i, _name in enumerate(FIELDS):
    setattr(Tracked, _name, _field_reader(_i))
for _name in (
    "__iter__", "__getitem__", "__len__", "__contains__", "__eq__", "__ne__", "__lt__",
    "__le__", "__gt__", "__ge__", "__hash__", "__add__", "__mul__", "__rmul__", "__repr__",
    "__reduce__", "__reduce_ex__", "__getnewargs__", "count", "index", "_asdict",
):
    if _name not in FIELD_INDEX:  # State's field ``index`` shadows tuple.index
        setattr(Tracked, _name, _whole_reader(_name))


def track(state: State) -> tuple[Tracked, set[int]]:
    """A tracked copy of ``state`` and the log its reads (field indices) go to."""
    log: set[int] = set()
    return _tracked(tuple.__iter__(state), log, COPIED_ALL), log


def tracked_call(fn: Callable[[State], R], state: State) -> tuple[tuple[int, ...], R]:
    """``fn(state)`` run on a tracked copy: the fields it read (sorted) and its result,
    which any state that agrees with ``state`` on those fields also gives."""
    tracked, log = track(state)
    result = fn(tracked)
    return tuple(sorted(log)), result


def changed_fields(result: State, source: State | None = None) -> tuple[tuple[int, Any], ...]:
    """The fields of a function's result state that are not copies of its input.

    A plain State (not derived from the tracked input) is computed throughout,
    but for the fields that are the very objects of ``source``'s, when the
    input was a plain ``source`` (a direct call: nothing is memoised, so
    nothing rests on which fields were read).
    """
    values = tuple.__iter__(result)
    origin = result.__dict__.get("_origin") if isinstance(result, Tracked) else None
    if origin is not None:
        return tuple((i, v) for i, (o, v) in enumerate(zip(origin, values, strict=True)) if o != i)
    if source is None or isinstance(source, Tracked):
        return tuple(enumerate(values))
    before = tuple.__iter__(source)
    return tuple((i, v) for i, (v, w) in enumerate(zip(values, before, strict=True)) if v is not w)


class Memo(Generic[R]):
    """Results of one pure function of a State, keyed by the ids of the fields it read.

    ``fn`` receives a tracked state and must return plain data (no Tracked
    values); ``ids`` identifies the input, one id per field, equal ids meaning
    equal values.  A function whose results are seldom reused (it reads
    nearly every field) is soon called directly, without tracking, unless
    ``always``: the search memoises every action family so, since an action's
    outcome (apply, step properties, interning) costs far more than a lookup,
    and its first calls, on a cold memo, say little of its later hit rate.  The
    lookup is ``memo_find`` (compiled in ``asynclookup.modelcheck._cvisited``
    when built, else the loop below, which does the same).  At most ``LIMIT``
    results are kept (the first ones): past that a miss is computed directly,
    so that a function with many distinct inputs (flush) does not grow
    without bound.
    """

    __slots__ = ("_decided", "_fn", "_patterns", "direct", "hits", "misses", "stored")

    TRIAL = 4096  # calls before deciding whether memoising pays
    WORTH = 0.5  # the hit rate below which it does not
    LIMIT = 50_000  # results kept: past it, a miss is computed directly and not kept

    def __init__(self, fn: Callable[[State], R], always: bool = False) -> None:
        self._fn = fn
        # (getter of the read fields' ids, their results, the read field indices)
        self._patterns: list[tuple[Callable[[tuple[int, ...]], Any], dict[Any, R],
                                   tuple[int, ...]]] = []
        self.direct = False
        self._decided = always  # ``always``: memoise whatever the hit rate
        self.hits = 0
        self.misses = 0
        self.stored = 0

    def __call__(self, ids: tuple[int, ...], build: Callable[[], State]) -> R:
        """``fn`` of the state with field ids ``ids``; ``build`` makes it on a miss."""
        if self.direct:
            return self._fn(build())
        result = _memo_find(self._patterns, ids, _MISS)
        if result is not _MISS:
            self.hits += 1
            return result  # type: ignore[no-any-return]
        return self._miss(ids, build)

    def _miss(self, ids: tuple[int, ...], build: Callable[[], State]) -> R:
        self.misses += 1
        if self.hits + self.misses >= self.TRIAL and not self._decided and self.decide():
            return self._fn(build())
        if self.stored >= self.LIMIT:  # full: the memory is worth more than this result
            return self._fn(build())
        self.stored += 1
        reads, result = tracked_call(self._fn, build())
        known = [p for p in self._patterns if p[2] == reads]
        if known:
            getter, table, _ = known[0]
        else:
            getter = itemgetter(*reads) if reads else _constant
            table = {}
            self._patterns.append((getter, table, reads))
        table[getter(ids)] = result
        return result

    def decide(self) -> bool:
        """Decide, on the hit rate so far, whether memoising pays; True if it does not
        (the function is called directly from now on)."""
        self._decided = True
        if self.hits < self.WORTH * (self.hits + self.misses):
            self.direct = True
            self._patterns.clear()
        return self.direct

    def compute(self, ids: tuple[int, ...], build: Callable[[], State]) -> R:
        """``fn`` of the state after a lookup missed: a call, and memoised if memoising."""
        return self._fn(build()) if self.direct else self._miss(ids, build)

    @property
    def store(self) -> list[tuple[Callable[[tuple[int, ...]], Any], dict[Any, R], tuple[int, ...]]]:
        """The live list of (getter of the read fields' ids, their results, the read
        field indices) that lookups go through (``memo_find``), most used first."""
        return self._patterns

    @property
    def patterns(self) -> list[tuple[int, ...]]:
        """The distinct read sets seen so far (field indices)."""
        return [reads for _, _, reads in self._patterns]


class MemoGroup:
    """Several memos of one input looked up at once (one compiled call when built).

    ``group(ids, build)`` is ``[memo(ids, build) for memo in memos]``, the
    missing ones computed in order.  For its first ``Memo.TRIAL`` calls each
    memo is called as itself; then every memo decides whether memoising pays
    (``Memo.decide``), and from then on a hit of the group lookup no longer
    counts in ``Memo.hits``.
    """

    __slots__ = ("_calls", "_lists", "_ready", "memos")

    def __init__(self, memos: list[Memo[Any]]) -> None:
        self.memos = memos
        self._lists = [m._patterns for m in memos]  # the same lists: they change in place
        self._ready = False
        self._calls = 0

    def _warm(self) -> None:
        self._calls += 1
        if self._calls >= Memo.TRIAL:
            for memo in self.memos:
                if not memo._decided:
                    memo.decide()
            self._ready = True

    def __call__(self, ids: tuple[int, ...], build: Callable[[], State]) -> list[Any]:
        if not self._ready:
            self._warm()
            return [m(ids, build) for m in self.memos]
        results: list[Any] = _memo_each(self._lists, ids, _MISS)
        if _MISS in results:
            for k, result in enumerate(results):
                if result is _MISS:
                    results[k] = self.memos[k].compute(ids, build)
        return results

    @property
    def ready(self) -> bool:
        """Whether every memo has decided whether memoising pays (``Memo.direct``)."""
        return self._ready

    def lookup(self, ids: tuple[int, ...]) -> list[Any]:
        """Each memo's stored result for ``ids``, or ``MISS`` (every one, until the
        memos have decided): the caller calls the memos that missed, as it needs them."""
        if not self._ready:
            self._warm()
            return [MISS] * len(self.memos)
        return _memo_each(self._lists, ids, MISS)


def memo_find(patterns: list[Any], ids: tuple[int, ...], missing: Any) -> Any:
    """The first result for ``ids`` in ``patterns`` ((getter, table, ...) each,
    looked up under ``getter(ids)``), moving the pattern that has it one place
    up so that the most used come first; ``missing`` if none has it."""
    for n, pattern in enumerate(patterns):
        result = pattern[1].get(pattern[0](ids), _MISS)
        if result is not _MISS:
            if n:
                patterns[n - 1], patterns[n] = pattern, patterns[n - 1]
            return result
    return missing


def memo_each(pattern_lists: list[list[Any]], ids: tuple[int, ...], missing: Any) -> list[Any]:
    """``memo_find`` for each list of patterns."""
    return [memo_find(patterns, ids, missing) for patterns in pattern_lists]


_MISS: Any = object()
MISS: Any = _MISS  # what a lookup gives for an input it has no result for
_memo_find = kernel.memo_find if kernel is not None else memo_find
_memo_each = kernel.memo_each if kernel is not None else memo_each


def _constant(ids: tuple[int, ...]) -> tuple[()]:
    return ()
