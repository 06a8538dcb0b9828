"""What ``asynclookup fuzz`` drives, as one frozen value: ``FuzzTarget``.

A run fuzzes one of three kinds of target: the reference (``reference``), a
manager class or adapter factory by path (``--target MODULE:ATTR``), or a
vLLM-shaped class (``--impl MODULE:CLASS``) with the ``Shape`` its options
say (method names, what cleanup takes, its verdicts' vocabulary, its tables,
its constructor's arguments, a drain before each lookup).  The machine, the
driver, the shrinker and the campaign's worker processes (which get it
pickled) hold this value; only the command line, replay files and the
regression writer turn it into text and back, with ``str(target)`` (the one
format) and ``FuzzTarget.parse`` (the one parse), so that

    FuzzTarget.parse(str(target)) == target

for every target (tests/test_conformance_target.py pins it).  The text is
``reference``, ``MODULE:ATTR``, or ``impl:MODULE:CLASS`` followed by the
shape's options (``;method=mark_miss=invalidate;args=n_lookup_threads=1``).

It loads nothing: ``asynclookup.conformance.targets.load`` turns a target
into the factory the driver builds adapters with.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from asynclookup.conformance.targets.shape import Shape, make_shape, parse_options

PREFIX = "impl:"  # a vLLM-shaped class's text starts so
REFERENCE_PATH = ("asynclookup.reference.manager", "AsyncLookupManager")
KINDS = ("reference", "target", "impl")
_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


@dataclass(frozen=True)
class FuzzTarget:
    """One target: its kind, the module and attribute it is loaded from, its shape.

    ``kind``: ``reference``, ``target`` (a manager class or a factory ``(tier,
    mode) -> Target``) or ``impl`` (a vLLM-shaped class, driven threaded).
    ``shape`` is only ever non-default for ``impl``.
    """

    kind: str = "reference"
    module: str = REFERENCE_PATH[0]
    attribute: str = REFERENCE_PATH[1]
    shape: Shape = field(default_factory=Shape)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"a target's kind is one of {', '.join(KINDS)}, not {self.kind!r}")
        if self.kind != "impl" and self.shape != Shape():
            raise ValueError("only an --impl target has a shape")

    # -- building one ------------------------------------------------------------

    @classmethod
    def impl(
        cls,
        path: str,
        *,
        methods: str | Sequence[str] | Mapping[str, str] = (),
        cleanup_arg: str | None = None,
        verdicts: str | None = None,
        tables: str | Sequence[str] | Mapping[str, str] = (),
        args: str | Sequence[str] | Mapping[str, Any] = (),
        drain_before_lookup: bool = False,
    ) -> FuzzTarget:
        """The vLLM-shaped class at ``path`` (``MODULE:CLASS``, or a target's text after
        ``impl:``, whose options the keyword arguments given here override), with the
        options as the CLI and ``conformance_test_case`` take them; ValueError (one line)
        names a bad one."""
        base = cls.parse(path if path.startswith(PREFIX) else PREFIX + path)
        extra = make_shape(methods=methods, cleanup_arg=cleanup_arg, verdicts=verdicts,
                           tables=tables, args=args, drain_before_lookup=drain_before_lookup)
        old = base.shape
        shape = Shape(
            methods=extra.methods or old.methods,
            cleanup_arg=extra.cleanup_arg or old.cleanup_arg,
            verdicts=extra.verdicts or old.verdicts,
            tables=extra.tables or old.tables,
            args=extra.args or old.args,
            drain_before_lookup=extra.drain_before_lookup or old.drain_before_lookup,
        )
        return cls("impl", base.module, base.attribute, shape)

    @classmethod
    def of(cls, value: FuzzTarget | str) -> FuzzTarget:
        """``value`` itself, or the target its text names (at the edges that take text:
        replay files, the Python API's ``"MODULE:CLASS"``)."""
        return value if isinstance(value, FuzzTarget) else cls.parse(value)

    # -- the one parse, the one format ----------------------------------------------

    @classmethod
    def parse(cls, text: str) -> FuzzTarget:
        """The target ``text`` names (what ``str()`` wrote, or what ``--target`` takes);
        ValueError (one line) saying what is wrong."""
        if text == "reference":
            return cls()
        if text.startswith(PREFIX):
            head, shape = parse_options(text.removeprefix(PREFIX))
            module, attribute = _split_path(head, "--impl must be MODULE:CLASS")
            return cls("impl", module, attribute, shape)
        module, attribute = _split_path(
            text, "--target must be 'reference' or MODULE:ATTRIBUTE")
        return cls("target", module, attribute)

    def __str__(self) -> str:
        if self.kind == "reference":
            return "reference"
        head = f"{self.module}:{self.attribute}"
        return PREFIX + head + self.shape.suffix() if self.kind == "impl" else head

    # -- what the rest of the oracle asks -------------------------------------------

    @property
    def path(self) -> str:
        """``MODULE:ATTRIBUTE``, without the options."""
        return f"{self.module}:{self.attribute}"

    @property
    def is_impl(self) -> bool:
        """A vLLM-shaped class (``--impl``): driven threaded, by ``targets.vllm``."""
        return self.kind == "impl"

    @property
    def methods(self) -> tuple[tuple[str, str], ...]:
        return self.shape.methods

    @property
    def cleanup_arg(self) -> str | None:
        return self.shape.cleanup_arg

    @property
    def verdicts(self) -> str | None:
        return self.shape.verdicts

    @property
    def tables(self) -> tuple[tuple[str, str], ...]:
        return self.shape.tables

    @property
    def args(self) -> tuple[tuple[str, str], ...]:
        return self.shape.args

    @property
    def drain_before_lookup(self) -> bool:
        return self.shape.drain_before_lookup

    def impl_text(self) -> str:
        """``MODULE:CLASS;options``: the text after ``impl:`` (what the functions of
        ``targets.vllm`` that take text took before this value existed)."""
        return str(self).removeprefix(PREFIX)


REFERENCE = FuzzTarget()


def _split_path(text: str, want: str) -> tuple[str, str]:
    module, colon, attribute = text.partition(":")
    if not colon or not _PATH.match(module) or not _PATH.match(attribute):
        raise ValueError(f"{want}, got {text!r}")
    return module, attribute
