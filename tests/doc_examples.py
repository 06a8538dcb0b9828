"""Run the code examples of the markdown docs, so that no example can go stale.

The rules (docs/index.md, "Examples are tested", says them to writers):

- A block whose info string names a file (```` ```python file=my_lookup.py ````)
  is written to that file in the working directory instead of being run, so
  that later examples can import it (``--impl my_lookup:MyManager``); the
  module is forgotten when the file is done.
- A ```` ```python ```` block runs.  All the python blocks of one file share one
  namespace and run in file order, so a walkthrough can build on its earlier
  blocks; each file starts from a fresh namespace, with a fresh temporary
  directory as its working directory.  A block whose first line starts with
  ``>>>`` is a doctest: the output shown must be the output printed.
- A ```` ```sh ```` block (or ``console``, ``shell``, ``bash``) runs its lines that
  start with ``asynclookup`` (after an optional ``$``) in-process through
  ``asynclookup.cli.main``, and its ``python -m docgen --show`` / ``--check``
  lines through ``docgen.generate.main``.  A trailing ``# exit N`` comment gives
  the exit code the line must return (0 otherwise).  A ``pytest ...`` line runs
  ``python -m pytest -p no:cacheprovider ...`` in a subprocess in the working
  directory, with the runner's ``sys.path`` as its PYTHONPATH (so the example's
  files and this checkout import as they would for ``python`` run there) and
  the oracle's pytest plugin loaded, for the regression files an example writes
  and the plugin's examples.  Other lines (``make``, ``pip``,
  ``.venv/bin/python ...``) are not run.
- Any other block (```` ```text ````, ```` ```json ````, ```` ```mermaid ````, a bare
  fence) is not run.  Signatures and pseudo-code go in ```` ```text ````.

What it does not do: compare the printed output of a shell line (generated
blocks are checked by ``docgen.generate --check`` instead), or run anything but
the project's own commands.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import os
import re
import shlex
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>```+)(?P<info>[^`\n]*)$")
SHELL = frozenset({"sh", "shell", "console", "bash"})
EXIT = re.compile(r"#\s*exits?\s+(?P<code>\d+)")


class ExampleError(AssertionError):
    """A documented example failed; the message names the file and line."""


@dataclass(frozen=True)
class Block:
    """One fenced block: where it starts (the fence line), its info word, its text."""

    path: Path
    line: int
    lang: str
    text: str
    file: str | None = None  # ``file=NAME`` in the info string: written there, not run

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a markdown file, in order."""
    found: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        fence, start = m["fence"], i
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][len(m["indent"]):])
            i += 1
        if i == len(lines):
            raise ExampleError(f"{path}:{start + 1}: code fence is never closed")
        words = m["info"].split()
        lang = (words or [""])[0].lower()
        named = [w.removeprefix("file=") for w in words[1:] if w.startswith("file=")]
        if named and ("/" in named[0] or not named[0]):
            raise ExampleError(f"{path}:{start + 1}: file= needs a plain file name")
        text = "\n".join(body) + "\n"
        found.append(Block(path, start + 1, lang, text, named[0] if named else None))
        i += 1
    return found


def runnable(block: Block) -> bool:
    """Whether the runner executes (or writes) ``block`` at all."""
    if block.file is not None or block.lang == "python":
        return True
    return block.lang in SHELL and bool(list(commands(block)))


# -- python --------------------------------------------------------------------------


def run_python(block: Block, namespace: dict[str, object]) -> None:
    """Run one python block in ``namespace``; raise ExampleError naming its line."""
    if block.text.lstrip().startswith(">>>"):
        _run_doctest(block, namespace)
        return
    source = "\n" * block.line + block.text  # tracebacks show the markdown line numbers
    try:
        exec(compile(source, str(block.path), "exec"), namespace)
    except Exception as exc:
        tail = "".join(traceback.format_exception(exc)[-6:])
        raise ExampleError(f"{block.where}: python example failed:\n{tail}") from None


def _run_doctest(block: Block, namespace: dict[str, object]) -> None:
    parser = doctest.DocTestParser()
    test = parser.get_doctest(block.text, namespace, block.where, str(block.path), block.line)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    runner = doctest.DocTestRunner(optionflags=flags)
    report = io.StringIO()
    result = runner.run(test, out=report.write, clear_globs=False)
    namespace.update(test.globs)
    if result.failed:
        raise ExampleError(f"{block.where}: doctest example failed:\n{report.getvalue()}")


# -- shell ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One shell line the runner executes: its words and the exit code it must give."""

    line: int
    argv: tuple[str, ...]
    expected: int


def commands(block: Block) -> Iterator[Command]:
    """The lines of a shell block that the runner executes."""
    for n, raw in enumerate(block.text.splitlines(), block.line + 1):
        text = raw.strip().removeprefix("$ ").strip()
        exit_note = EXIT.search(text)
        words = shlex.split(text, comments=True)
        is_cli = words[:1] in (["asynclookup"], ["pytest"])
        is_docgen = words[:3] == ["python", "-m", "docgen.generate"] and bool(
            {"--show", "--check"} & set(words)
        )
        if is_cli or is_docgen:
            yield Command(n, tuple(words), int(exit_note["code"]) if exit_note else 0)


def _entry_point(argv: Sequence[str]) -> tuple[Callable[[Sequence[str]], int], list[str]]:
    if argv[0] == "asynclookup":
        from asynclookup import cli

        return cli.main, list(argv[1:])
    from docgen import generate as docgen

    return docgen.main, list(argv[3:])


def _pytest(argv: Sequence[str]) -> tuple[int, str]:
    """Run a ``pytest`` line in a subprocess (the exit code and what it printed), with the
    oracle's pytest plugin as its entry point loads it once installed (a checkout's venv
    may predate the entry point; -p finds it by the same name where it is installed)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p",
                           "asynclookup.conformance.pytest_plugin", *argv[1:]],
                          env=env, capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout + done.stderr


def run_shell(block: Block) -> None:
    """Run the executable lines of one shell block; raise ExampleError on a wrong exit."""
    for command in commands(block):
        if command.argv[0] == "pytest":
            code, printed = _pytest(command.argv)
            if code != command.expected:
                raise ExampleError(
                    f"{block.path}:{command.line}: `{' '.join(command.argv)}` exited {code}, "
                    f"expected {command.expected}:\n{printed[-3000:]}"
                )
            continue
        main, args = _entry_point(command.argv)
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                code = main(args)
        except BaseException as exc:  # a traceback is itself a broken example
            code = -1
            out.write("".join(traceback.format_exception(exc)[-6:]))
        if code != command.expected:
            shown = " ".join(command.argv)
            raise ExampleError(
                f"{block.path}:{command.line}: `{shown}` exited {code}, "
                f"expected {command.expected}:\n{out.getvalue()[-3000:]}"
            )


# -- a whole file --------------------------------------------------------------------


def run_file(path: Path, workdir: Path, skip: Callable[[Block], bool] | None = None) -> int:
    """Run every runnable block of ``path`` in order, except those ``skip`` names;
    returns how many ran."""
    path = path.resolve()
    namespace: dict[str, object] = {"__name__": f"docs_example_{path.stem}"}
    ran = 0
    previous = Path.cwd()
    saved_path = list(sys.path)
    written: list[str] = []
    workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(workdir)
    sys.path.insert(0, str(workdir.resolve()))  # as `python` run there would have it
    try:
        for block in blocks(path):
            if skip is not None and skip(block):
                continue
            if block.file is not None:
                (workdir / block.file).write_text(block.text, encoding="utf-8")
                written.append(Path(block.file).stem)
                sys.modules.pop(written[-1], None)
            elif block.lang == "python":
                run_python(block, namespace)
            elif block.lang in SHELL:
                run_shell(block)
            else:
                continue
            ran += runnable(block)
    finally:
        os.chdir(previous)
        sys.path[:] = saved_path
        for name in written:
            sys.modules.pop(name, None)
    return ran
