"""Writing a regression file: the test module's text from the explored steps
(``asynclookup.conformance.regression.writer``'s second part).

``module_text`` renders each ``Step`` as one comment line (its number and what
the spec allows there, and why) and one ``run.<call>(...)`` whose arguments are
the allowances, under a docstring (the property, the oracle's counterexample,
the command that regenerates the file) and a ``SHAPE`` saying how the class is
built and called.  The checks themselves are the harness's
(``regression.harness``, written beside the file).  Every value is a Python
literal, sets in a stable order, and every line fits in 88 columns (a
maintainer's ruff at its default), so the same counterexample always gives the
same file.

It does not decide anything: ``_paths`` worked out the allowances.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from asynclookup.conformance.regression._paths import ByPath, Explored, Step
from asynclookup.conformance.targets.adapter import Plan

WIDTH = 88  # the generated file's line length: ruff's and black's default
JUDGED = ("lookup", "await_verdict", "answer", "shutdown")  # the calls that take breaks=
INDENT = " " * 8  # a step inside ``with Run(SHAPE) as run:``
HELPER = "asynclookup_regression"  # the harness module written beside the file


@dataclass(frozen=True)
class Head:
    """What the file says above its test: the class, how it is built, the docstring's
    parts (each already wrapped)."""

    module: str
    cls: str
    shape: list[str]  # the Shape(...) arguments after the class, as source
    imports: list[tuple[str, str]]  # (module, name) besides the class: --verdicts
    title: str
    number: int | None
    calls: int  # the counterexample's calls (the closing shutdown aside)
    detail: str
    counterexample: str
    command: str


def literal(value: Any) -> str:
    """A Python literal, sets in a stable order."""
    if isinstance(value, set | frozenset):
        if not value:
            return "set()" if isinstance(value, set) else "frozenset()"
        items = ", ".join(sorted((literal(v) for v in value), key=lambda s: (len(s), s)))
        return "{" + items + "}" if isinstance(value, set) else "frozenset({" + items + "})"
    if isinstance(value, tuple):
        inner = ", ".join(literal(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if isinstance(value, Plan):
        parts = [repr(value.kind)]
        if value.bits:
            parts.append(f"bits={value.bits!r}")
        if value.size:
            parts.append(f"size={value.size!r}")
        return f"Plan({', '.join(parts)})"
    return repr(value)


def _by_path(values: ByPath, default: Any) -> str | None:
    """One literal when every path agrees (None when that is ``default``), else a ByPath."""
    distinct = {literal(v) for v in values.values()}
    if len(distinct) <= 1:
        shown = distinct.pop() if distinct else literal(default)
        return None if shown == literal(default) else shown
    rows = [f"{literal(k)}: {literal(v)}" for k, v in values.items()]
    one = f"ByPath({{{', '.join(rows)}}})"
    if len(one) <= WIDTH - len(INDENT) - 16:
        return one
    return "ByPath({\n" + "".join(f"{row},\n" for row in rows) + "})"  # a row a line


def _arguments(step: Step) -> list[str]:
    """The arguments of the step's ``run`` call: the call's own, then the allowances."""
    call, args = step.call, step.call.args
    method = call.method
    head: list[str] = []
    if method in ("lookup", "await_verdict"):
        head = [literal(args[0]), literal(args[1])]
    elif method == "cleanup":
        head = [literal(args[0])]
    elif method in ("mark_miss", "mark_present"):
        head = [literal(list(args[0]))]
    elif method == "answer":
        head = [literal(args[0] if args else Plan())]
    elif method == "shutdown":
        head = [literal(list(args[0]) if args and args[0] else [])]
    options = {
        "allowed": _by_path(step.allowed, None)
        if method in ("lookup", "await_verdict", "answer", "shutdown")
        else _by_path(step.allowed, frozenset()) if method == "settle" else None,
        "asks": literal(step.asks) if method == "answer" and step.asks else None,
        "owed": _by_path(step.owed, False) if method == "answer" else None,
        "wait": _by_path(step.wait, False) if method == "settle" else None,
        "empty": _by_path(step.empty, False),
        "unchecked": literal(step.unchecked) if step.unchecked else None,
        "branches": "True" if step.branches else None,
    }
    if method == "shutdown" and options["allowed"] is None:
        options["allowed"] = literal(frozenset({()}))
    return head + [f"{k}={v}" for k, v in options.items() if v is not None]


def call_lines(method: str, parts: Sequence[str], indent: str = INDENT) -> list[str]:
    """``run.method(parts)`` on one line if it fits, else the arguments on lines of
    their own, packed as many to a line as fit."""
    one = f"run.{method}({', '.join(parts)})"
    if len(indent) + len(one) <= WIDTH and "\n" not in one:
        return [one]
    lines, line = [f"run.{method}("], "   "
    for part in parts:
        if "\n" in part:  # a ByPath of a row a line: the rows one level further in
            first, *rows, last = part.split("\n")
            lines += [line] if line.strip() else []
            lines += [f"    {first}", *(f"        {row}" for row in rows), f"    {last},"]
            line = "   "
            continue
        if len(indent) + len(line) + 1 + len(part) + 1 > WIDTH and line.strip():
            lines.append(line)
            line = "   "
        line += f" {part},"
    return [*lines, *([line] if line.strip() else []), ")"]


def _comment(text: str, width: int = WIDTH - len(INDENT)) -> list[str]:
    return textwrap.wrap(text, width, initial_indent="# ", subsequent_indent="#   ",
                         break_long_words=False, break_on_hyphens=False)


def _step_lines(number: int, step: Step, cls: str, fails: str) -> list[str]:
    """One step: its number and one line of why (wrapped if long), then the call."""
    lines = _comment(f"{number}. {step.why}")
    if any(step.empty.values()):
        lines += _comment("   then nothing is live: the tables must be empty")
    if step.failing:
        lines += _comment(f"   {cls} broke {fails} here")
    parts = _arguments(step)
    breaks = sorted(int(re.findall(r"\d+", b)[0]) for b in step.breaks)
    if step.call.method in JUDGED and breaks:
        parts.append(f"breaks={breaks[0]}")
    return lines + call_lines(step.call.method, parts)


def test_name(cls: str, number: int | None) -> str:
    """The generated test's name: test_<class in snake case>_keeps_property_<n>."""
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", cls).lower()
    return f"test_{snake}_keeps_property_{number}" if number else f"test_{snake}_conforms"


def doc_safe(text: str) -> str:
    """``text`` as it can stand inside the module's raw triple-quoted docstring."""
    return text.replace('"""', "'''")


def module_text(explored: Explored, head: Head) -> str:
    """The whole regression test module."""
    body: list[str] = []
    for number, step in enumerate(explored.steps, 1):
        body.extend(_step_lines(number, step, head.cls, head.title))
    used = {"Run", "Shape"} | {name for name in ("ByPath", "Plan")
                               if any(f"{name}(" in line for line in body)}
    names = ", ".join(sorted(used))
    imports = {head.module: [head.cls]}
    for module, name in head.imports:
        imports.setdefault(module, []).append(name)
    shape = ",\n".join(f"    {part}" for part in [head.cls, *head.shape])
    test_doc = textwrap.fill(f"{head.cls} keeps {head.title} on the calls that broke it.",
                             WIDTH - 7, initial_indent="    ", subsequent_indent="    ")
    about = textwrap.fill(ABOUT.format(cls=head.cls, helper=HELPER), WIDTH)
    return "\n".join([
        *textwrap.wrap(f'r"""Regression test: {head.cls} breaks {head.title}.', WIDTH,
                       break_long_words=False), "",
        head.detail, "",
        *textwrap.wrap(f"The run that shows it, shrunk to {head.calls} calls, as the "
                       "conformance oracle of asynclookup printed it:", WIDTH), "",
        head.counterexample, "", about, "", "Regenerated by:", "",
        f"    {head.command}", '"""', "",
        "from __future__ import annotations", "",
        *sorted(f"from {m} import {', '.join(sorted(set(n)))}" for m, n in imports.items()),
        "",
        "try:  # the harness asynclookup writes beside this file, shared by its tests",
        f"    from .{HELPER} import {names}",
        "except ImportError:  # this directory is no package",
        f"    from {HELPER} import {names}", "",
        "# How the test builds and calls the class, and what it reads of it: the tables",
        "# the oracle's leak check read (what an entry left in each breaks) and the",
        "# queue its worker posts to.",
        f"SHAPE = Shape(\n{shape},\n)", "", "",
        f"def {test_name(head.cls, head.number)}() -> None:",
        f'    """{test_doc.strip()}"""' if "\n" not in test_doc else
        f'    """{test_doc.strip()}\n    """',
        "    with Run(SHAPE) as run:",
        *(f"{INDENT}{line}" for line in body), "",
    ])


ABOUT = (
    "The test makes these calls again with the tier scripted ({helper}.py, written "
    "beside this file) and checks after each one what the protocol allows there; the "
    "comment above each call says why.  It fails while {cls} breaks the property and "
    "passes once it is fixed; it imports only {cls}, the standard library and pytest."
)
