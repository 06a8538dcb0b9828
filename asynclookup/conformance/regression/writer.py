"""Regression tests in the implementation's own words: a counterexample as a pytest module
that needs neither asynclookup nor Hypothesis.

``regression_file(error)`` turns the shrunk ``ConformanceError`` of a vLLM-shaped
class (``--impl MODULE:CLASS``, threaded, the oracle's own memory tier) into a
pytest module that imports only that class, pytest and the standard library.
The module subclasses the class so that ``batch_lookup`` answers from a script:
each tier call of the worker is held on a ``threading.Event`` until the test
answers it with the plan the oracle used (an exception, too few or too many
values, a non-bool, a lazy iterable that raises, ...).  It makes the shrunk
calls in order and, after each, asserts what the spec allows there: the
verdicts a lookup may return, the tier calls the worker may make, that the
worker posts what it owes, stays alive, and that the class's tables are
empty when nothing is live.  A comment above each call says what the spec
allows there and why.  Every wait is bounded.

Three parts, each readable alone:

- ``_paths``: what the spec allows.  The calls are replayed on
  ``asynclookup.observe.engine.Checker``s, one per *path*, and every
  outcome the spec allows at a step (each verdict, each tier call) forks the
  path.  A step whose allowance depends on the outcome of an earlier one says
  so (``ByPath`` in the file), so a conforming class passes whatever allowed
  outcomes it takes, and the step that failed fails on the buggy class.
- ``_text``: the module's text (steps, comments, the template).
- ``_harness``: the scripted tier and the checks, as text; the
  tier's answers are the oracle's own code, copied in (not written twice).

What it does not do: judge anything at run time (the written file has no
spec), drive adapters or the reference (``unsupported`` names why), write
classes that need ``--method``, ``--cleanup-arg`` or ``--verdicts`` (the file
would have to carry the mapping; ``--tables`` is fine), or read more of the
class than the oracle does (its results queue, to count posted results, and
its tables for the leak check, as ``conformance.targets.tables`` found or the user
named them; a class whose results are on no queue is refused when the file
would have to wait for a post).
"""

from __future__ import annotations

import textwrap
from typing import Any

from asynclookup.conformance.driver import ConformanceError
from asynclookup.conformance.regression._paths import RegressionError, explore
from asynclookup.conformance.regression._text import doc_safe, module_text
from asynclookup.conformance.targets.shape import split_spec
from asynclookup.conformance.targets.vllm import PREFIX, tables_used

__all__ = ["RegressionError", "regression_file", "unsupported"]


def unsupported(config: dict[str, Any]) -> str | None:
    """Why a run with ``config`` cannot have a regression file (None: it can)."""
    target = str(config.get("target", "reference"))
    if not target.startswith(PREFIX):
        return (f"--regression-out needs --impl MODULE:CLASS (a vLLM-shaped class); "
                f"{target!r} is not one (use --replay-out)")
    if config.get("tier", "memory") != "memory":
        return (f"--regression-out needs --tier memory (the file is its own tier), "
                f"not {config['tier']}")
    try:
        _, shape = split_spec(target[len(PREFIX):])
    except ValueError as exc:
        return str(exc)
    if shape.methods or shape.cleanup_arg or shape.verdicts:
        return ("--regression-out does not yet write classes of another shape (--method, "
                "--cleanup-arg, --verdicts); --tables is fine")
    return None


def regression_file(error: ConformanceError, command: str | None = None) -> str:
    """The pytest module reproducing ``error`` in the class's own words (see the module doc).

    ``command``: how to regenerate it, shown in its docstring.  Raises RegressionError
    when the run's target cannot have one (``unsupported``) or forks too many ways.
    """
    problem = unsupported(error.config)
    if problem is not None:
        raise RegressionError(problem)
    spec = str(error.config["target"])[len(PREFIX):]
    module, _, cls = split_spec(spec)[0].partition(":")
    used = tables_used(spec)
    explored = explore(error)  # a settle only waits; with no results queue, it does not
    shown = []
    for n, call in enumerate(error.calls, 1):
        shown.append(f"    {n}. {call.text}")
        shown.extend(f"           {note}" for note in call.notes)
    if command is None:  # the options of the target name, as the CLI spells them
        head, *options = spec.split(";")
        flags = "".join(f" --{key} {value}" for key, _, value in
                        (option.partition("=") for option in options))
        faults = error.config.get("faults", "all")
        command = f"asynclookup fuzz --impl {head}{flags} --faults {faults} --regression-out FILE"
    tables = {t.path: explored.leaks[t.role] for t in used.tables} if used.leak_check else {}
    return module_text(explored, cls=cls, module=module, fields={
        "title": error.violation.title, "number": error.violation.number,
        "detail": doc_safe(textwrap.fill(_sentence(error.violation.detail), 88)),
        "n": len(error.calls),
        "counterexample": doc_safe("\n".join(shown)),
        "command": doc_safe(" \\\n        ".join(
            textwrap.wrap(command, 84, break_long_words=False, break_on_hyphens=False))),
        "tables": tables,
        "results": used.results.path if used.results is not None else None,
    })


def _sentence(text: str) -> str:
    """``text`` with a capital first letter and a full stop."""
    text = text.strip()
    return text[:1].upper() + text[1:] + ("" if text.endswith((".", "!", "?")) else ".")
