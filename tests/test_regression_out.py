"""Regression files (conformance.regression): they run where asynclookup is not importable,
fail on the buggy class and pass on its fix."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

from asynclookup.conformance.adapter import Plan
from asynclookup.conformance.regression import regression_file, unsupported
from asynclookup.conformance.replay import replay

ROOT = Path(__file__).resolve().parent.parent
ZIP = "impl:tests.zoo.mutants:ZipTruncatesShortAnswers"
PADDED = '''"""The zoo's mutants module, with ZipTruncatesShortAnswers fixed."""
from typing import Any

from tests.zoo.vllm_shaped import VllmShapedManager


class ZipTruncatesShortAnswers(VllmShapedManager):
    """Fixed: a short answer is padded with False."""

    def _probe(self, keys: list[bytes], ctx: Any) -> list[bool]:
        try:
            got = [v is True for v in self.batch_lookup(keys, ctx)][: len(keys)]
        except Exception:
            return [False] * len(keys)
        return got + [False] * (len(keys) - len(got))
'''


def zip_file() -> str:
    """The regression file of the zip-truncation kill (a known 4-call counterexample)."""
    config = {"target": ZIP, "mode": "threaded", "tier": "memory", "faults": "all"}
    steps = [("lookup", (b"k0", "A")), ("flush", ()), ("answer", (Plan("short"),)),
             ("settle", ())]
    error = replay(config, steps, 0.5)
    assert error is not None and error.violation.number == 6
    return regression_file(error)


def run_outside(
    tmp: Path, text: str, mutants: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``text`` under pytest in ``tmp`` with copies of the zoo and asynclookup blocked."""
    zoo = tmp / "tests" / "zoo"
    zoo.mkdir(parents=True)
    (tmp / "tests" / "__init__.py").write_text('"""A user\'s tests."""\n')
    for name in ("__init__.py", "vllm_shaped.py", "mutants.py"):
        shutil.copy(ROOT / "tests" / "zoo" / name, zoo / name)
    if mutants is not None:
        (zoo / "mutants.py").write_text(mutants)
    (tmp / "conftest.py").write_text('import sys\nsys.modules["asynclookup"] = None\n')
    (tmp / "test_regression.py").write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_regression.py"],
        cwd=tmp, capture_output=True, text=True, timeout=120,
    )


def test_the_file_imports_only_the_class_pytest_and_the_standard_library() -> None:
    """The generated module imports the user's class, pytest and stdlib modules, nothing else."""
    tree = ast.parse(zip_file())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module}
    assert imported - set(sys.stdlib_module_names) == {"pytest", "tests"}


def test_the_zip_file_fails_on_the_buggy_class_outside_this_project(tmp_path: Path) -> None:
    """Where asynclookup cannot be imported, the file fails on the zip-truncating class at
    the settle, naming property 6."""
    done = run_outside(tmp_path, zip_file())
    assert done.returncode == 1, done.stdout + done.stderr
    assert "step 4" in done.stdout and "property 6 (progress)" in done.stdout


def test_the_zip_file_passes_on_the_class_with_the_short_answer_padded(tmp_path: Path) -> None:
    """The same file passes once the short answer is padded with False."""
    done = run_outside(tmp_path, zip_file(), PADDED)
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_adapter_target_cannot_have_a_regression_file() -> None:
    """Only vLLM-shaped classes (--impl) on the memory tier get a regression file."""
    assert unsupported({"target": "reference"}) is not None
    assert unsupported({"target": ZIP, "tier": "fs"}) is not None
    assert unsupported({"target": ZIP, "tier": "memory"}) is None
