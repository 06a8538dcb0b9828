"""Writing a regression file: the module's text from the explored steps
(``asynclookup.conformance.regression.writer``'s second part).

``module_text`` renders each ``Step`` as a numbered comment (the call, what
the class did when the file was written, what the spec allows there and why)
and one ``run.<call>(...)`` line whose arguments are the allowances, then
fills ``TEMPLATE`` (docstring, imports, constants, the test) and appends the
harness (``_harness``).  Every value is written as a Python literal,
sets in a stable order, so the same counterexample always gives the same file.

It does not decide anything: ``_paths`` worked out the allowances.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from typing import Any

from asynclookup.conformance.regression._harness import harness
from asynclookup.conformance.regression._paths import ByPath, Explored, Step
from asynclookup.conformance.targets.adapter import Plan
from asynclookup.spec.properties import title_of

WIDTH = 96  # the generated file's line length
JUDGED = ("lookup", "await_verdict", "answer", "shutdown")  # the harness calls that take breaks=
INDENT = " " * 8  # a step inside ``with Run(...) as run:``


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
    rows = ", ".join(f"{literal(k)}: {literal(v)}" for k, v in values.items())
    return f"ByPath({{{rows}}})"


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
        if method in ("lookup", "await_verdict", "answer", "shutdown") else None,
        "owed": _by_path(step.owed, False) if method == "answer" else None,
        "wait": _by_path(step.wait, False) if method == "settle" else None,
        "empty": _by_path(step.empty, False),
        "unchecked": literal(step.unchecked) if step.unchecked else None,
        "branches": "True" if step.branches else None,
    }
    if method == "shutdown" and options["allowed"] is None:
        options["allowed"] = literal(frozenset({()}))
    return head + [f"{k}={v}" for k, v in options.items() if v is not None]


def _call_lines(method: str, parts: Sequence[str], breaks: str | None) -> list[str]:
    """``run.method(parts, breaks=...)`` on one line if it fits, else one argument a line
    (a long ``breaks`` split into adjacent string literals)."""
    every = [*parts, *([f"breaks={breaks!r}"] if breaks else [])]
    one = f"run.{method}({', '.join(every)})"
    if len(INDENT) + len(one) <= WIDTH:
        return [one]
    lines = [f"run.{method}("]
    joined = "    " + ", ".join(parts) + ","
    if parts and len(INDENT) + len(joined) <= WIDTH:
        lines.append(joined)
    else:
        lines += [f"    {part}," for part in parts]
    if breaks and len(INDENT) + len(f"    breaks={breaks!r},") > WIDTH:
        chunks = textwrap.wrap(breaks, WIDTH - len(INDENT) - 12, drop_whitespace=False)
        lines += ["    breaks=(", *(f"        {chunk!r}" for chunk in chunks), "    ),"]
    elif breaks:
        lines.append(f"    breaks={breaks!r},")
    return [*lines, ")"]


def _comment(text: str, lead: str = "# ", rest: str = "#   ") -> list[str]:
    width = WIDTH - len(INDENT)
    return textwrap.wrap(text, width, initial_indent=lead, subsequent_indent=rest)


def _step_lines(number: int, step: Step, cls: str, fails: str) -> list[str]:
    """One step: its title, what the class did, what the spec allows and why, the call."""
    call = step.call
    title, _, did = call.text.partition(" -> ")
    lines = [f"# Step {number}: {title}"]
    if did:
        shown = f"returned {did}" if call.method == "lookup" else {
            "done": "posted them", "not within the bound": "did not post them in time"
        }.get(did, did)
        lines += _comment(f"(When this file was written, {cls} {shown}.)", "#   ", "#   ")
    lines += [f"#   {note}" for note in call.notes]
    for sentence in step.why:
        lines += _comment(sentence, "#   ", "#   ")
    if any(step.empty.values()):
        lines += _comment("Nothing is live afterwards, so the class's tables must be empty "
                          "(property 4 for its request index, 5 for the others).",
                          "#   ", "#   ")
    if step.failing:
        lines += _comment(f"This is where {cls} broke {fails}.", "#   ", "#   ")
    breaks = "; or ".join(sorted(step.breaks)) or None
    if call.method not in JUDGED:  # a scheduler call: its leak check names its own rule
        breaks = None
    return lines + _call_lines(call.method, _arguments(step), breaks)


def test_name(cls: str, number: int | None) -> str:
    """The generated test's name: test_<class in snake case>_keeps_property_<n>."""
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", cls).lower()
    return f"test_{snake}_keeps_property_{number}" if number else f"test_{snake}_conforms"


def doc_safe(text: str) -> str:
    """``text`` as it can stand inside the module's raw triple-quoted docstring."""
    return text.replace('"""', "'''")


def module_text(explored: Explored, *, cls: str, module: str, fields: dict[str, Any]) -> str:
    """The whole regression module; ``fields``: the template's other values (title,
    detail, counterexample, command, number, tables, results)."""
    body: list[str] = []
    for number, step in enumerate(explored.steps, 1):
        if body:
            body.append("")
        body.extend(_step_lines(number, step, cls, fields["title"]))
    about = ABOUT.format(cls=cls)
    tables = "".join(f"    {path!r}: {title!r},\n" for path, title in fields["tables"].items())
    fields = dict(fields, tables=(
        "# each table the leak check reads, and what it breaks if it holds entries when\n"
        "# nothing is live\nTABLES: dict[str, str] = {\n" + tables + "}" if tables else
        "TABLES: dict[str, str] = {}  # no leak check: the class's tables were not found"))
    test_doc = f"{cls} keeps {fields['title']} on the calls that broke it."
    return TEMPLATE.format(
        cls=cls, module=module, test=test_name(cls, fields["number"]),
        about=textwrap.fill(about, 88),
        test_doc=textwrap.fill(test_doc, 88, subsequent_indent="    "),
        body="\n".join(f"{INDENT}{line}" if line else "" for line in body),
        dead=explored.dead_worker, progress=title_of(6), harness=harness(),
        **{k: v for k, v in fields.items() if k != "number"},
    )


ABOUT = (
    "This test makes the same calls on a subclass of {cls} whose batch_lookup answers "
    "from a script: each tier call of the worker is held until the test answers it, so "
    "the test decides when every tier call ends and the run is the same every time.  "
    "After each call it asserts what the protocol allows there, worked out from the "
    "protocol's specification when this file was written; the comment above each step "
    "says what that is and why.  It fails while {cls} breaks the property and passes once "
    "it is fixed.  It imports only {cls}, pytest and the standard library, and every wait "
    "is bounded: commit it with the class's own tests, unchanged."
)

TEMPLATE = '''r"""Regression test: {cls} breaks {title}.

{detail}

The run that shows it, shrunk to {n} calls, as the conformance oracle of the
async lookup protocol printed it:

{counterexample}

{about}

Regenerated by:

    {command}
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, NoReturn

import pytest

from {module} import {cls}

WAIT = 3.0  # seconds: the longest wait for a tier call or a post the protocol owes
UNOWED_WAIT = 0.5  # seconds to wait for a tier call the protocol does not owe
RESULTS = {results!r}  # the worker's result queue, counted to wait for posts
{tables}
DEAD_WORKER = {dead!r}  # what a dead worker breaks
PROGRESS = {progress!r}  # what a call that does not return breaks


def {test}() -> None:
    """{test_doc}"""
    with Run({cls}) as run:
{body}
{harness}'''
