"""The built wheel, installed into an empty venv outside the checkout, is the whole tool.

This is what a user of an engine gets from ``pip install``: one namespace,
``asynclookup``, with its subpackages; no top-level ``spec`` or ``reference``;
the README's taste runs, the README's command lines run from an empty directory
(the example classes they name ship in ``asynclookup.examples``), the
``asynclookup`` script fuzzes a vLLM-shaped class of the user's own from the
user's directory, and so does ``pytest --asynclookup-impl=...`` (the plugin's
``pytest11`` entry point, with pytest installed beside the wheel).  Without a
C compiler the wheel builds all the same, says it will use the pure-Python
kernel, and that kernel runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# one xdist worker runs this module, and its fixtures are session-scoped: built once
# (a module fixture is torn down whenever another module's test runs between)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("wheel")]


def _run(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _clean_copy(source: Path) -> Path:
    """The checkout without its build products, to build a wheel from.

    Building from the checkout itself writes into its build/ directory; two xdist
    workers doing that at once collide ("File exists: build/bdist...").
    """
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "build", "*.egg-info", "*.so", "__pycache__", ".*_cache", ".hypothesis",
    ))
    return source


@pytest.fixture(scope="session")  # built once: see pytestmark
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(the wheel, the venv's python, a working directory outside the checkout)."""
    base = tmp_path_factory.mktemp("wheel")
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(base),
         str(_clean_copy(base / "source"))],
        cwd=base,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = base.glob("asynclookup-*.whl")
    venv.create(base / "venv", with_pip=True)
    python = base / "venv" / "bin" / "python"
    done = _run([str(python), "-m", "pip", "install", "-q", str(wheel)], cwd=base)
    assert done.returncode == 0, done.stderr[-2000:]
    work = base / "user"
    work.mkdir()
    return wheel, python, work


def test_wheel_holds_one_namespace(installed: tuple[Path, Path, Path]) -> None:
    """Every file of the wheel is under asynclookup/ (or its metadata), spec and reference too."""
    wheel, _, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"asynclookup"}
    for sub in ("spec", "reference", "modelcheck", "conformance", "trace", "examples"):
        assert f"asynclookup/{sub}/__init__.py" in names, sub
    assert "asynclookup/trace/trace.schema.json" in names
    assert not any(n.startswith(("docgen/", "tests/", "bench/")) for n in names)


def test_generic_names_do_not_import(installed: tuple[Path, Path, Path]) -> None:
    """From the installed wheel, ``import spec`` and ``import reference`` fail."""
    _, python, work = installed
    for name in ("spec", "reference"):
        out = _run([str(python), "-c", f"import {name}"], cwd=work)
        assert out.returncode != 0 and "ModuleNotFoundError" in out.stderr, name


def test_readme_taste_runs_from_the_wheel(installed: tuple[Path, Path, Path]) -> None:
    """The README's two python examples run against the installed package."""
    _, python, work = installed
    readme = (ROOT / "README.md").read_text()
    taste = readme[readme.index("## A taste"):]
    blocks = re.findall(r"```python\n(.*?)```", taste, re.DOTALL)[:2]
    assert len(blocks) == 2
    script = work / "taste.py"
    script.write_text("\n".join(blocks))
    out = _run([str(python), str(script)], cwd=work)
    assert out.returncode == 0, out.stderr[-2000:]


def _readme_command_lines() -> list[tuple[list[str], int]]:
    """Each ``asynclookup`` line of the README's sh blocks: its words and its exit code."""
    readme = (ROOT / "README.md").read_text()
    found = []
    for block in re.findall(r"```sh\n(.*?)```", readme, re.DOTALL):
        for line in block.splitlines():
            if line.startswith("asynclookup "):
                command, _, note = line.partition("#")
                code = re.match(r"\s*exit (\d+)", note)
                found.append((command.split(), int(code[1]) if code else 0))
    return found


def test_readme_commands_run_from_an_empty_directory(
    installed: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """Every ``asynclookup`` line of the README runs from an empty directory with only the
    wheel installed, and exits with the code the README shows (the pip user's first contact)."""
    _, python, _ = installed
    lines = _readme_command_lines()
    assert any("asynclookup.examples.seed_bug:BuggyManager" in words for words, _ in lines)
    empty = tmp_path / "empty"
    empty.mkdir()
    for words, code in lines:
        out = _run([str(python.parent / words[0]), *words[1:]], cwd=empty)
        assert out.returncode == code, (words, out.stdout[-2000:] + out.stderr[-2000:])


def test_a_build_without_a_c_compiler_says_so_and_works(tmp_path: Path) -> None:
    """With no C compiler the wheel still builds, its build output says the pure-Python
    kernel will be used, and the installed model checker runs on that kernel."""
    source = _clean_copy(tmp_path / "source")  # the checkout's build/ holds a built kernel
    env = {**os.environ, "CC": str(tmp_path / "no-such-cc")}
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(tmp_path),
         str(source)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    said = [line for line in (built.stdout + built.stderr).splitlines()
            if "asynclookup: " in line and "pure-Python kernel" in line]
    assert len(said) == 1, built.stdout[-3000:]
    (wheel,) = tmp_path.glob("asynclookup-*.whl")
    assert not any(n.endswith(".so") for n in zipfile.ZipFile(wheel).namelist())
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    done = _run([str(python), "-m", "pip", "install", "-q", str(wheel)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    checked = _run([str(python.parent / "asynclookup"), "model-check", "--keys", "1",
                    "--requests", "1"], cwd=tmp_path)
    assert checked.returncode == 0 and "pure-python kernel" in checked.stdout, checked.stdout


def test_impl_fuzz_runs_from_the_wheel(installed: tuple[Path, Path, Path]) -> None:
    """``asynclookup fuzz --impl`` judges a user's class in the user's directory: a correct
    class passes, the seed bug exits 1 with a numbered counterexample."""
    _, python, work = installed
    shutil.copy(ROOT / "tests" / "zoo" / "vllm_shaped.py", work / "my_manager.py")
    (work / "my_broken.py").write_text(
        "from my_manager import VllmShapedManager\n\n\n"
        "class NoRevalidation(VllmShapedManager):\n"
        "    def _revalidate(self, batch):\n"
        "        return [e for e in batch if e[0] in self._lookup_state]\n"
    )
    script = python.parent / "asynclookup"
    good = _run([str(script), "fuzz", "--impl", "my_manager:VllmShapedManager",
                 "--examples", "10", "--seed", "1"], cwd=work)
    assert good.returncode == 0, good.stdout[-2000:] + good.stderr[-2000:]
    bad = _run([str(script), "fuzz", "--impl", "my_broken:NoRevalidation",
                "--examples", "200", "--seed", "1"], cwd=work)
    assert bad.returncode == 1, bad.stdout[-2000:] + bad.stderr[-2000:]
    assert "VIOLATION (safety)" in bad.stdout and "  1. " in bad.stdout


def test_the_pytest_plugin_runs_from_the_wheel(
    installed: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """With pytest installed beside the wheel, ``pytest --asynclookup-impl=...`` in an empty
    directory finds the plugin by its entry point alone: the fixed example passes, the
    seed bug fails with its counterexample."""
    _, python, _ = installed
    done = _run([str(python), "-m", "pip", "install", "-q", "pytest"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    empty = tmp_path / "empty"
    empty.mkdir()
    pytest = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    example = "--asynclookup-impl=asynclookup.examples.seed_bug:"
    good = _run([*pytest, f"{example}FixedManager", "--asynclookup-examples=20",
                 "--asynclookup-seed=1"], cwd=empty)
    assert good.returncode == 0, good.stdout[-2000:] + good.stderr[-2000:]
    assert "1 passed" in good.stdout
    bad = _run([*pytest, f"{example}BuggyManager", "--asynclookup-seed=1",
                "--asynclookup-examples=200"], cwd=empty)
    assert bad.returncode == 1, bad.stdout[-2000:] + bad.stderr[-2000:]
    assert "property 1" in bad.stdout and "  1. lookup(" in bad.stdout
