"""Generate the parts of docs/ that the code can write, and check they are current.

A generated block in a markdown file sits between two HTML comments::

    <!-- BEGIN GENERATED: counterexample flush-no-revalidate -->
    ...
    <!-- END GENERATED -->

Both markers start a line (a marker quoted inside a sentence is not one).
The name after ``BEGIN GENERATED:`` says what the block holds:

- ``counterexample VARIANT``: the model checker's shortest counterexample for a
  broken variant of the spec (``asynclookup.spec.variants``), with the command that
  reproduces it;
- ``predicates N``: the predicates of ``asynclookup.spec.properties`` that state
  property N of docs/properties.md, with their docstrings;
- ``variants``: the table of every broken variant and what the checker finds;
- ``sequence SCENARIO`` and ``probe-states``: Mermaid diagrams drawn from runs
  of the spec (``docgen.diagrams``);
- ``files DIR``: a table of the files of DIR (a folder of the repository) with
  the first line of each module's docstring, or each page's title;
- ``oracle-seed``: the oracle's report of the seed bug, replayed in stepped
  mode on ``tests/mutants_reference.py``.

``python -m docgen`` rewrites every block of docs/*.md and README.md;
``--check`` rewrites nothing and exits 1 naming each stale block (the test
suite runs it, so committed docs cannot drift from the code); ``--show NAME``
prints one block.  Exit 2, with one line, for an unknown block name, a marker
without its end, or a missing file.

What it does not do: write prose, or touch anything outside the markers.
"""

from __future__ import annotations

import argparse
import ast
import functools
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

from asynclookup.modelcheck import report as _report
from asynclookup.modelcheck.search import Bounds, CheckResult, Violation, check
from asynclookup.spec.properties import ALWAYS
from asynclookup.spec.variants import VARIANTS, Variant
from docgen.diagrams import SCENARIOS, probe_states, sequence

ROOT = Path(__file__).resolve().parent.parent
BEGIN = "<!-- BEGIN GENERATED:"
BLOCK = re.compile(
    r"^<!-- BEGIN GENERATED: (?P<name>[^\n]*?) -->\n(?P<body>.*?)^<!-- END GENERATED -->",
    re.DOTALL | re.MULTILINE,
)
BEGIN_LINE = re.compile(r"^<!-- BEGIN GENERATED:", re.MULTILINE)

# Bounds of each counterexample search: the CLI defaults (one key, two requests)
# unless the bug needs two keys in one batch.
DEFAULT_BOUNDS = Bounds()
COUNTEREXAMPLE_BOUNDS: Mapping[str, Bounds] = {
    "tier-short-answer": Bounds(keys=2, requests=1),
    "wrong-request-context": Bounds(keys=2, requests=2),
}


class DocgenError(Exception):
    """A document names a block that cannot be generated, or is malformed."""


# -- what the blocks hold ------------------------------------------------------------


def all_variants() -> dict[str, Variant]:
    """Every broken variant, shipped bugs first (the order of ``VARIANTS``)."""
    return dict(VARIANTS)


def variant_bounds(name: str) -> Bounds:
    """The bounds of ``name``'s counterexample search."""
    return COUNTEREXAMPLE_BOUNDS.get(name, DEFAULT_BOUNDS)


def command(name: str) -> str:
    """The shell command that reproduces ``name``'s counterexample."""
    bounds = variant_bounds(name)
    flags = "".join(
        f" --{flag} {getattr(bounds, flag)}"
        for flag in ("keys", "requests")
        if getattr(bounds, flag) != getattr(DEFAULT_BOUNDS, flag)
    )
    return f"asynclookup model-check --variant {name}{flags}"


@functools.cache
def search(name: str) -> CheckResult:
    """The model checker's search of variant ``name`` (cached: it is deterministic)."""
    variants = all_variants()
    if name not in variants:
        raise DocgenError(f"unknown variant {name!r} (known: {', '.join(variants)})")
    return check(variant_bounds(name), variants[name].table)


def counterexample(name: str) -> Violation:
    """The shortest counterexample for variant ``name``; it must have one."""
    violation = search(name).violation
    if violation is None:
        raise DocgenError(f"variant {name!r} breaks no property within its bounds")
    return violation


def _counterexample_block(name: str) -> str:
    lines = ["```sh", f"{command(name)}   # exit 1: a violation", "```", "", "```text"]
    lines += _report.violation_lines(counterexample(name))
    lines.append("```")
    return "\n".join(lines)


def _predicates_block(number: int) -> str:
    props = [p for p in ALWAYS if p.number == number]
    if not props:
        raise DocgenError(f"no predicate of asynclookup.spec.properties states property {number}")
    lines = []
    for prop in props:
        fn = prop.state or prop.step
        kind = "state invariant" if prop.state is not None else "step property"
        doc = " ".join((getattr(fn, "__doc__", "") or "").split())
        lines.append(f"- `{prop.name}` ({kind}, `spec/properties.py`): {doc}")
    if number == 6:
        lines.append(
            "- `progress_quiescence_reachable` (checked by `asynclookup/modelcheck/_bfs.py` "
            "once its "
            "search reaches the fixpoint): from every reachable state a quiescent state is "
            "reachable without `shutdown`."
        )
    return "\n".join(lines)


def _variants_block() -> str:
    lines = [
        "| variant | the bug | the properties it breaks | the checker reports first "
        "| steps |",
        "|---|---|---|---|---|",
    ]
    for name, variant in all_variants().items():
        v = counterexample(name)
        where = "shipped" if variant.shipped else "ours"
        reported = f"{v.number} `{v.predicate}`" if v.number else f"`{v.predicate}`"
        breaks = ", ".join(map(str, variant.breaks))
        lines.append(
            f"| `{name}` ({where}) | {variant.bug} | {breaks} | {reported} | {len(v.trace)} |"
        )
    return "\n".join(lines)


def _summary(path: Path) -> str:
    if path.suffix == ".py":
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        return doc.strip().splitlines()[0] if doc.strip() else ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return ""


def _files_block(folder: str) -> str:
    """The files of ``folder`` with what each holds (module docstring or page title)."""
    where = ROOT / folder
    if not where.is_dir() or ROOT not in where.resolve().parents:
        raise DocgenError(f"not a folder of the repository: {folder!r}")
    paths = sorted(
        p for p in where.iterdir() if p.is_file() and p.suffix in (".py", ".md")
    )
    lines = ["| file | what it holds |", "|---|---|"]
    for path in paths:
        summary = _summary(path).replace("|", "\\|")
        if path.name == "__init__.py" and not summary:
            continue
        lines.append(f"| `{folder}/{path.name}` | {summary} |")
    return "\n".join(lines)


# The seed bug as oracle calls, replayed (stepped, so deterministic) on the
# reference with flush's re-validation taken out.
ORACLE_TARGET = "tests.mutants_reference:FlushWithoutRevalidation"
ORACLE_CALLS: tuple[tuple[str, tuple[object, ...]], ...] = (
    ("lookup", (b"k0", "A")), ("cleanup", ("A",)), ("flush", ()),
    ("take_batch", ()), ("probe_group", ()),
)


def _oracle_block() -> str:
    """What ``asynclookup fuzz`` prints for the seed bug, from a deterministic replay."""
    from asynclookup.conformance.counterexample import format_counterexample
    from asynclookup.conformance.replay import replay

    error = replay({"target": ORACLE_TARGET, "mode": "stepped"}, ORACLE_CALLS)
    if error is None:
        raise DocgenError(f"the oracle finds nothing wrong with {ORACLE_TARGET}")
    header = f"VIOLATION ({error.violation.kind}), {len(error.calls)} calls:"
    body = format_counterexample(error.violation, error.calls)
    return f"```text\n{header}\n{body}\n```"


def _mermaid(source: str) -> str:
    return f"```mermaid\n{source}\n```"


@functools.cache
def render(name: str) -> str:
    """The content of the generated block called ``name``."""
    kind, _, arg = name.strip().partition(" ")
    if kind == "counterexample" and arg:
        return _counterexample_block(arg)
    if kind == "predicates" and arg.isdigit():
        return _predicates_block(int(arg))
    if kind == "variants" and not arg:
        return _variants_block()
    if kind == "sequence" and arg in SCENARIOS:
        return _mermaid(sequence(arg))
    if kind == "probe-states" and not arg:
        return _mermaid(probe_states())
    if kind == "files" and arg:
        return _files_block(arg)
    if kind == "oracle-seed" and not arg:
        return _oracle_block()
    raise DocgenError(f"unknown generated block {name!r}")


# -- the markers ---------------------------------------------------------------------


def blocks(text: str) -> list[tuple[str, str]]:
    """(name, body) of every generated block of ``text``; malformed markers raise."""
    found = [(m["name"], m["body"]) for m in BLOCK.finditer(text)]
    if len(BEGIN_LINE.findall(text)) != len(found):
        raise DocgenError("a BEGIN GENERATED marker has no END GENERATED after it")
    return found


def _body(name: str) -> str:
    return render(name) + "\n"


def regenerate(text: str) -> str:
    """``text`` with every generated block rewritten from the code."""
    blocks(text)  # reject malformed markers before rewriting anything
    return BLOCK.sub(
        lambda m: f"{BEGIN} {m['name']} -->\n{_body(m['name'])}<!-- END GENERATED -->", text
    )


def stale(text: str) -> list[str]:
    """The names of the generated blocks of ``text`` that differ from the code."""
    return [name for name, body in blocks(text) if body != _body(name)]


def doc_files(root: Path = ROOT) -> list[Path]:
    """The files whose blocks are generated: docs/*.md and README.md."""
    return [*sorted((root / "docs").glob("*.md")), root / "README.md"]


# -- command line ----------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise DocgenError(f"{self.prog}: {message}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m docgen", description=__doc__.splitlines()[0])
    p.add_argument(
        "files", nargs="*", type=Path, help="markdown files (default: docs/*.md, README.md)"
    )
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if a block is stale")
    p.add_argument("--show", metavar="NAME", help="print the block called NAME and exit")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Regenerate (or ``--check``) the generated blocks; returns the exit code."""
    try:
        args = _parser().parse_args(argv)
        if args.show is not None:
            print(render(args.show))
            return 0
        files = args.files or doc_files()
        texts = {}
        for path in files:
            if not path.is_file():
                raise DocgenError(f"no such file: {path}")
            texts[path] = path.read_text(encoding="utf-8")
            try:
                blocks(texts[path])
            except DocgenError as exc:
                raise DocgenError(f"{path}: {exc}") from None
        return _check(texts) if args.check else _write(texts)
    except DocgenError as exc:
        print(f"docgen: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help prints and exits 0
        return exc.code if isinstance(exc.code, int) else 2


def _check(texts: Mapping[Path, str]) -> int:
    bad = [(path, name) for path, text in texts.items() for name in stale(text)]
    for path, name in bad:
        print(f"stale: {path}: generated block {name!r}")
    if bad:
        print("run `python -m docgen` and commit the result")
        return 1
    count = sum(len(blocks(t)) for t in texts.values())
    print(f"docgen: {count} generated blocks in {len(texts)} files are current")
    return 0


def _write(texts: Mapping[Path, str]) -> int:
    for path, text in texts.items():
        new = regenerate(text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            print(f"rewrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
