"""How a vLLM-shaped class may differ from vLLM's manager, and whether a class fits.

Public copies of vLLM's lookup manager differ in small ways: a method has
another name (``invalidate`` for ``mark_miss``), ``cleanup`` takes the request
context instead of its id (or there is no ``cleanup``), ``lookup`` answers in a
vocabulary of its own (an enum, ints), the tables have other names, the
constructor takes more than the tier's name (a pool size), the scheduler must
drain before each lookup.  A ``Shape`` says how one class differs; the command
line builds it from ``--method``, ``--cleanup-arg``, ``--verdicts``,
``--tables``, ``--impl-arg`` and ``--drain-before-lookup``.  ``Shape.suffix``
and ``parse_options`` are its one text form, the options after ``MODULE:CLASS``
in a target's text (``asynclookup.conformance.targets.target.FuzzTarget``).

``fit_problem`` says what keeps a class from fitting, and which option would
fit it (the CLI's one-line exit 2).  It reads the class only; what needs an
instance (its tables, its first verdict) is ``asynclookup.conformance.targets.tables``.
It drives nothing: ``asynclookup.conformance.targets.vllm`` does.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from asynclookup.conformance.targets.adapter import import_user_module

REQUIRED = ("batch_lookup", "lookup", "flush", "cleanup", "drain_results", "shutdown")
OPTIONAL = ("mark_miss", "mark_present")
METHODS = REQUIRED + OPTIONAL
MAY_LACK = ("cleanup", *OPTIONAL)  # calls ``--method CALL=none`` may say a class has not
OPTION_KEYS = ("method", "cleanup-arg", "verdicts", "tables", "args", "drain-before-lookup")
ROLES = ("probes", "index", "batch", "results")  # results: the queue the worker posts to
NONE = "none"  # "this class has no such method / table"
CLEANUP_ARGS = ("id", "context")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_CALLED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\(\)$")  # a method

# Names public copies of the manager use for the protocol's calls: a class that
# lacks a call but has one of these is told which --method would fit it.
SYNONYMS: dict[str, tuple[str, ...]] = {
    "batch_lookup": ("tier_lookup", "probe_batch", "lookup_batch", "batch_exists", "query_tier"),
    "lookup": ("query", "probe", "check", "lookup_key", "exists", "contains"),
    "flush": ("end_step", "submit", "submit_batch", "flush_batch", "dispatch", "commit"),
    "cleanup": ("release", "finish", "request_finished", "remove_request", "free", "forget",
                "cancel", "cleanup_request"),
    "drain_results": ("drain", "poll", "poll_results", "collect", "apply_results",
                      "process_results"),
    "shutdown": ("close", "stop", "terminate"),
    "mark_miss": ("invalidate", "mark_missing", "mark_absent", "mark_failed", "on_load_failed"),
    "mark_present": ("mark_stored", "mark_exists", "on_store", "on_stored", "record_store"),
}


@dataclass(frozen=True)
class Shape:
    """How a class differs from vLLM's manager.

    ``methods``: protocol name -> the class's name (``none``: it has no such
    call; only for mark_miss / mark_present).  ``cleanup_arg``: what cleanup
    takes, ``id`` or ``context`` (None: not said, the id).  ``verdicts``:
    ``MODULE:FUNC`` mapping lookup's answers to True / False / None.
    ``tables``: role -> attribute path (``none``: no such table); roles not
    named are found by shape.  ``args``: the constructor's keyword arguments
    after the tier's name, each as the ``repr`` of a Python literal (evaluated
    afresh for every instance: ``constructor_kwargs``).  ``drain_before_lookup``:
    the adapter calls ``drain_results()`` before each ``lookup()``, as a
    scheduler that must do so does.
    """

    methods: tuple[tuple[str, str], ...] = ()
    cleanup_arg: str | None = None
    verdicts: str | None = None
    tables: tuple[tuple[str, str], ...] = ()
    args: tuple[tuple[str, str], ...] = ()
    drain_before_lookup: bool = False

    def name(self, method: str) -> str | None:
        """The class's name for the protocol's ``method`` (None: it has none)."""
        named = dict(self.methods).get(method, method)
        return None if named == NONE else named

    def table(self, role: str) -> str | None:
        """The attribute path named for ``role``: '' not named, None named ``none``."""
        named = dict(self.tables).get(role, "")
        return None if named == NONE else named

    @property
    def passes_context(self) -> bool:
        """Whether cleanup is given the request context (else its id)."""
        return self.cleanup_arg == "context"

    def constructor_kwargs(self) -> dict[str, Any]:
        """The constructor's keyword arguments, fresh objects for each instance."""
        return {name: ast.literal_eval(text) for name, text in self.args}

    def suffix(self) -> str:
        """The options as they follow ``MODULE:CLASS`` in a target's text (the one
        format; ``parse_options`` is the one parse)."""
        parts = []
        if self.methods:
            parts.append("method=" + ",".join(f"{k}={v}" for k, v in self.methods))
        if self.cleanup_arg is not None:
            parts.append(f"cleanup-arg={self.cleanup_arg}")
        if self.verdicts is not None:
            parts.append(f"verdicts={self.verdicts}")
        if self.tables:
            parts.append("tables=" + ",".join(f"{k}={v}" for k, v in self.tables))
        if self.args:
            parts.append("args=" + ",".join(f"{k}={v}" for k, v in self.args))
        if self.drain_before_lookup:
            parts.append("drain-before-lookup")
        return "".join(f";{p}" for p in parts)


def parse_methods(items: str | Sequence[str] | Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """``mark_miss=invalidate`` pairs (comma lists, repeatable); ValueError names a bad one."""
    pairs = _pairs(items, "--method")
    seen: dict[str, str] = {}
    for method, name in pairs:
        if method not in METHODS:
            raise ValueError(f"--method: {method!r} is not a protocol call (want one of "
                             f"{', '.join(METHODS)})")
        if name == NONE and method not in MAY_LACK:
            raise ValueError(f"--method: {method} is required, it cannot be {NONE} (only "
                             f"{', '.join(MAY_LACK)} can)")
        if not _NAME.match(name):
            raise ValueError(f"--method: {name!r} is not a method name")
        if seen.get(method, name) != name:
            raise ValueError(f"--method: {method} named twice ({seen[method]}, {name})")
        seen[method] = name
    taken = [n for n in seen.values() if n != NONE]
    twice = sorted({n for n in taken if taken.count(n) > 1})
    if twice:
        raise ValueError(f"--method: {twice[0]} is given for two protocol calls")
    return tuple(sorted(seen.items(), key=lambda kv: METHODS.index(kv[0])))


def parse_tables(items: str | Sequence[str] | Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """``probes=_states,index=_by_request,...`` or ``none``; ValueError names a bad item."""
    if items == NONE or items == [NONE] or items == (NONE,):
        return tuple((role, NONE) for role in ROLES if role != "results")
    seen: dict[str, str] = {}
    for role, path in _pairs(items, "--tables"):
        if role not in ROLES:
            raise ValueError(f"--tables: {role!r} is not a table (want {', '.join(ROLES)}, "
                             f"or none)")
        if not (_PATH.match(path) or (role != "results" and _CALLED.match(path))):
            raise ValueError(
                f"--tables: {path!r} is not an attribute name"
                + ("" if role == "results" else " or a method call (name())")
            )
        if seen.get(role, path) != path:
            raise ValueError(f"--tables: {role} named twice ({seen[role]}, {path})")
        seen[role] = path
    return tuple(sorted(seen.items(), key=lambda kv: ROLES.index(kv[0])))


def parse_args(items: str | Sequence[str] | Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """``n_lookup_threads=1`` pairs, each value a Python literal (``--impl-arg``, repeatable,
    or a mapping of values); ValueError (one line) names a bad one."""
    if isinstance(items, Mapping):
        pairs = [(str(k), repr(v)) for k, v in items.items()]
    else:
        words = [items] if isinstance(items, str) else list(items)
        pairs = [_pair(w, "--impl-arg") for text in words for w in split_outside(text, ",")]
    seen: dict[str, str] = {}
    for name, text in pairs:
        if not _NAME.match(name) or name == "tier_type":
            raise ValueError(f"--impl-arg: {name!r} is not a keyword argument the oracle can "
                             f"pass (the tier's name is its own)")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise ValueError(f"--impl-arg {name}={text}: {text} is not a Python literal (a "
                             f"string is quoted: {name}={text!r})") from None
        try:
            ast.literal_eval(repr(value))
        except (ValueError, SyntaxError):  # nan, inf: a value a replay could not rebuild
            raise ValueError(f"--impl-arg {name}={text}: {value!r} has no literal form "
                             f"a replay could rebuild") from None
        if name in seen:
            raise ValueError(f"--impl-arg: {name} given twice")
        seen[name] = repr(value)
    return tuple(sorted(seen.items()))


def split_outside(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` where it is not inside quotes or brackets (a literal's
    commas and semicolons stay in the literal)."""
    parts, start, depth, quote, i = [], 0, 0, "", 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts


def _pair(word: str, flag: str) -> tuple[str, str]:
    left, eq, right = word.strip().partition("=")
    if not eq or not left.strip() or not right.strip():
        raise ValueError(f"{flag}: {word.strip()!r} is not NAME=VALUE")
    return left.strip(), right.strip()


def _pairs(
    items: str | Sequence[str] | Mapping[str, str], flag: str
) -> list[tuple[str, str]]:
    if isinstance(items, Mapping):
        return [(str(k), str(v)) for k, v in items.items()]
    words = [items] if isinstance(items, str) else list(items)
    pairs = []
    for word in (w.strip() for text in words for w in text.split(",")):
        left, eq, right = word.partition("=")
        if not eq or not left.strip() or not right.strip():
            raise ValueError(f"{flag}: {word!r} is not NAME=VALUE")
        pairs.append((left.strip(), right.strip()))
    return pairs


def make_shape(
    *,
    methods: str | Sequence[str] | Mapping[str, str] = (),
    cleanup_arg: str | None = None,
    verdicts: str | None = None,
    tables: str | Sequence[str] | Mapping[str, str] = (),
    args: str | Sequence[str] | Mapping[str, Any] = (),
    drain_before_lookup: bool = False,
) -> Shape:
    """A ``Shape`` from the options as the CLI or ``conformance_test_case`` take them."""
    if cleanup_arg is not None and cleanup_arg not in CLEANUP_ARGS:
        raise ValueError(f"--cleanup-arg: want id or context, got {cleanup_arg!r}")
    if verdicts is not None:
        module, _, func = verdicts.partition(":")
        if not module or not func or ";" in verdicts:
            raise ValueError(f"--verdicts: want MODULE:FUNC, got {verdicts!r}")
    named = parse_methods(methods) if methods else ()
    if cleanup_arg is not None and dict(named).get("cleanup") == NONE:
        raise ValueError("--cleanup-arg: the class has no cleanup (--method cleanup=none)")
    return Shape(
        methods=named,
        cleanup_arg=cleanup_arg,
        verdicts=verdicts,
        tables=parse_tables(tables) if tables else (),
        args=parse_args(args) if args else (),
        drain_before_lookup=drain_before_lookup,
    )


def parse_options(spec: str) -> tuple[str, Shape]:
    """``MODULE:CLASS`` and the shape of a target's text (what ``Shape.suffix`` wrote):
    the one parse of the options, which ``FuzzTarget.parse`` calls."""
    head, *options = split_outside(spec, ";")
    found: dict[str, str] = {}
    for option in options:
        key, eq, value = option.partition("=")
        if key not in OPTION_KEYS or (eq == "") != (key == "drain-before-lookup"):
            raise ValueError(f"--impl {spec}: unknown option {option!r}")
        if key in found:
            raise ValueError(f"--impl {spec}: option {key} given twice")
        found[key] = value
    shape = make_shape(
        methods=found.get("method", ()), cleanup_arg=found.get("cleanup-arg"),
        verdicts=found.get("verdicts"), tables=found.get("tables", ()),
        args=found.get("args", ()), drain_before_lookup="drain-before-lookup" in found,
    )
    return head, shape


def split_spec(spec: str) -> tuple[str, Shape]:
    """``parse_options``, by its former name (``conformance.regression`` calls it)."""
    return parse_options(spec)


def load_verdicts(shape: Shape) -> Callable[[Any], Any] | None:
    """The ``--verdicts`` function; ValueError (one line) if it cannot be had."""
    if shape.verdicts is None:
        return None
    module_name, _, attribute = shape.verdicts.partition(":")
    try:
        module = import_user_module(module_name)
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"--verdicts {shape.verdicts}: cannot import {module_name}: "
                         f"{reason}") from None
    found = getattr(module, attribute, None)
    if not callable(found):
        raise ValueError(f"--verdicts {shape.verdicts}: {module_name} has no function "
                         f"{attribute}")
    mapper: Callable[[Any], Any] = found
    return mapper


# -- does a class fit? -------------------------------------------------------------


def fit_problem(cls: object, shape: Shape = Shape()) -> str | None:
    """What keeps ``cls`` from being driven with ``shape`` (None: it fits), with the
    option that would fit it when one can be guessed."""
    if not isinstance(cls, type):
        return f"{cls!r} is not a class"
    said = dict(shape.methods)
    missing: list[str] = []
    for method in METHODS:
        name = shape.name(method)
        if name is None or callable(getattr(cls, name, None)):
            continue
        if method in OPTIONAL and method not in said and not _candidates(cls, shape, method):
            continue  # no such call, and nothing that looks like one: never generated
        missing.append(method)
    if missing:
        return _missing(cls, shape, missing)
    names = [n for m in METHODS if (n := shape.name(m)) is not None]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        calls = [m for m in METHODS if shape.name(m) == twice]
        both = " and ".join(calls)
        return f"{cls.__name__}.{twice} would be both {both}: name each with --method"
    try:
        inspect.signature(cls).bind("oracle", **shape.constructor_kwargs())
    except TypeError as exc:
        return _constructor_problem(cls, shape, exc)
    except ValueError:
        pass  # no signature to read: try it when the oracle builds one
    return _cleanup_problem(cls, shape)


def _missing(cls: type, shape: Shape, missing: list[str]) -> str:
    said = dict(shape.methods)
    names = [shape.name(m) or m for m in missing]
    text = f"{cls.__name__} has no method {', '.join(names)}"
    renamed = [m for m in missing if m in said]
    if renamed:
        text += f" (named by --method {','.join(f'{m}={said[m]}' for m in renamed)})"
    fits = [(m, c[0]) for m in missing if (c := _candidates(cls, shape, m))]
    if fits:
        has = ", ".join(name for _, name in fits)
        whole = {**said, **dict(fits)}  # the names already given too: one option to paste
        pairs = ",".join(f"{m}={whole[m]}" for m in METHODS if m in whole)
        text += f"; it has {has}: try --method {pairs}"
    optional = [m for m in missing if m in MAY_LACK and m not in said]
    if optional:
        text += f" (or --method {','.join(f'{m}={NONE}' for m in optional)} if it has no such call)"
    return text


def _constructor_problem(cls: type, shape: Shape, exc: TypeError) -> str:
    """Why ``cls("oracle", **args)`` cannot be called, and the ``--impl-arg`` that would do."""
    said = ", ".join(f"{k}={v}" for k, v in shape.args)
    given = f"the tier's name and {said}" if said else "one argument (tier_type: str)"
    text = f"{cls.__name__} cannot be constructed with {given}: {exc}"
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return text
    wanted = [p.name for p in list(params)[1:] if p.default is inspect.Parameter.empty
              and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
              and p.name not in dict(shape.args)]
    if wanted:
        text += f": give {' '.join(f'--impl-arg {n}=VALUE' for n in wanted)}"
    return text


def _candidates(cls: type, shape: Shape, method: str) -> list[str]:
    """The class's methods that may be ``method`` under another name, likeliest first."""
    taken = {shape.name(m) for m in METHODS if m != method}
    own = [
        name for name in dir(cls)
        if not name.startswith("__") and name not in taken and name not in METHODS
        and callable(getattr(cls, name, None)) and not isinstance(getattr(cls, name), type)
    ]
    known = [name for name in SYNONYMS.get(method, ()) if name in own]
    if known or method in OPTIONAL:
        return known  # an optional call is only suggested under a name public copies use
    public = [name for name in own if not name.startswith("_")]
    return difflib.get_close_matches(method, public, n=1, cutoff=0.6)


def _cleanup_problem(cls: type, shape: Shape) -> str | None:
    """A cleanup whose parameter is named like a context, when --cleanup-arg is not said."""
    name = shape.name("cleanup")
    if shape.cleanup_arg is not None or name is None:
        return None
    try:
        params = list(inspect.signature(getattr(cls, name)).parameters.values())
    except (TypeError, ValueError):
        return None
    params = [p for p in params if p.name != "self"]
    if params and ("context" in params[0].name or "ctx" in params[0].name):
        return (
            f"{cls.__name__}.{name}({params[0].name}) looks like it takes the request context: "
            f"try --cleanup-arg context (or --cleanup-arg id if it takes the request id)"
        )
    return None
