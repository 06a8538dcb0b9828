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


def changed_fields(result: State) -> tuple[tuple[int, Any], ...]:
    """The fields of a function's result state that are not copies of its input.

    A plain State (not derived from the tracked input) is computed throughout.
    """
    values = tuple.__iter__(result)
    origin = result.__dict__.get("_origin") if isinstance(result, Tracked) else None
    if origin is None:
        return tuple(enumerate(values))
    return tuple((i, v) for i, (o, v) in enumerate(zip(origin, values, strict=True)) if o != i)


class Memo(Generic[R]):
    """Results of one pure function of a State, keyed by the ids of the fields it read.

    ``fn`` receives a tracked state and must return plain data (no Tracked
    values); ``ids`` identifies the input, one id per field, equal ids meaning
    equal values.  A function whose results are seldom reused (it reads
    nearly every field) is soon called directly, without tracking.
    """

    __slots__ = ("_decided", "_fn", "_patterns", "_reads", "direct", "hits", "misses")

    TRIAL = 4096  # calls before deciding whether memoising pays
    WORTH = 0.5  # the hit rate below which it does not

    def __init__(self, fn: Callable[[State], R]) -> None:
        self._fn = fn
        self._patterns: list[tuple[Callable[[tuple[int, ...]], Any], dict[Any, R]]] = []
        self._reads: list[tuple[int, ...]] = []
        self.direct = False
        self._decided = False
        self.hits = 0
        self.misses = 0

    def __call__(self, ids: tuple[int, ...], build: Callable[[], State]) -> R:
        """``fn`` of the state with field ids ``ids``; ``build`` makes it on a miss."""
        if self.direct:
            return self._fn(build())
        patterns = self._patterns
        for n, (getter, table) in enumerate(patterns):
            result = table.get(getter(ids), _MISS)
            if result is not _MISS:
                self.hits += 1
                if n:  # move the pattern one place up: the most used come first
                    patterns[n - 1], patterns[n] = patterns[n], patterns[n - 1]
                    reads = self._reads
                    reads[n - 1], reads[n] = reads[n], reads[n - 1]
                return result  # type: ignore[no-any-return]
        return self._miss(ids, build)

    def _miss(self, ids: tuple[int, ...], build: Callable[[], State]) -> R:
        self.misses += 1
        calls = self.hits + self.misses
        if calls >= self.TRIAL and not self._decided:
            self._decided = True
            if self.hits < self.WORTH * calls:
                self.direct = True
                self._patterns.clear()
                return self._fn(build())
        tracked, log = track(build())
        result = self._fn(tracked)
        reads = tuple(sorted(log))
        if reads in self._reads:
            getter, table = self._patterns[self._reads.index(reads)]
        else:
            getter = itemgetter(*reads) if reads else _constant
            table = {}
            self._reads.append(reads)
            self._patterns.append((getter, table))
        table[getter(ids)] = result
        return result

    @property
    def patterns(self) -> list[tuple[int, ...]]:
        """The distinct read sets seen so far (field indices)."""
        return list(self._reads)


_MISS: Any = object()


def _constant(ids: tuple[int, ...]) -> tuple[()]:
    return ()
