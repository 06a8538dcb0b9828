"""The oracle as a pytest plugin: ``pytest --asynclookup-impl=...`` and ``asynclookup_fuzz``.

Each test runs a real pytest in a new process, in an empty directory, with the
plugin named by ``-p`` (a venv installed before the ``pytest11`` entry point
existed lacks it; where it is installed, ``-p`` finds that entry point, named
by the module; tests/test_wheel.py runs the plugin from the installed wheel by
its entry point alone) and this checkout on PYTHONPATH for the shape classes
of tests/shapes/.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = "asynclookup.conformance.pytest_plugin"
SIZED = "tests.shapes.sized:SizedPool"
ONE_THREAD = "--asynclookup-impl-arg=n_lookup_threads=1"


def pytest_in(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``pytest -p PLUGIN args`` in ``where``, a new process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST"))}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", PLUGIN, "-p", "no:cacheprovider", "-q", *args],
        cwd=where, env=env, capture_output=True, text=True, timeout=300,
    )


def test_the_command_line_fuzzes_a_correct_class_to_one_passing_item(tmp_path: Path) -> None:
    """From an empty directory, --asynclookup-impl with the class's shape options is one
    test item, and a correct class passes it."""
    done = pytest_in(tmp_path, f"--asynclookup-impl={SIZED}", ONE_THREAD,
                     "--asynclookup-examples=20", "--asynclookup-seed=1")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout


def test_the_command_line_fails_on_a_planted_bug_with_the_counterexample(
    tmp_path: Path,
) -> None:
    """The item fails on the twin with the bug, showing the shrunk numbered calls and the
    property, not a traceback of the oracle."""
    done = pytest_in(tmp_path, "--asynclookup-impl=tests.shapes.sized:SizedPoolZipTruncates",
                     ONE_THREAD, "--asynclookup-examples=150", "--asynclookup-seed=2")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert "VIOLATION" in done.stdout and "property 6 (progress)" in done.stdout
    assert "  1. lookup(" in done.stdout and "Traceback" not in done.stdout


def test_a_misfit_is_a_usage_error_naming_the_plugins_option(tmp_path: Path) -> None:
    """A class that does not fit is pytest's usage error (exit 4), one line whose hint
    names the plugin's option, not fuzz's."""
    done = pytest_in(tmp_path, f"--asynclookup-impl={SIZED}")
    assert done.returncode == 4
    said = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(said) == 1, done.stderr
    assert "give --asynclookup-impl-arg n_lookup_threads=VALUE" in said[0]


def test_shape_options_without_the_class_are_a_usage_error(tmp_path: Path) -> None:
    """--asynclookup-drain-before-lookup alone says it belongs to --asynclookup-impl."""
    done = pytest_in(tmp_path, "--asynclookup-drain-before-lookup")
    assert done.returncode == 4
    assert "--asynclookup-drain-before-lookup is an option of --asynclookup-impl" in done.stderr


def test_the_fixture_fuzzes_classes_of_the_suite(tmp_path: Path) -> None:
    """In a suite, asynclookup_fuzz passes the correct class and fails the buggy one with
    its counterexample; the command line's run options are its defaults."""
    (tmp_path / "test_mine.py").write_text(
        "def test_drained_conforms(asynclookup_fuzz):\n"
        "    asynclookup_fuzz('tests.shapes.drained:NeedsDrain', drain_before_lookup=True)\n"
        "\n\n"
        "def test_buggy_twin_conforms(asynclookup_fuzz):\n"
        "    asynclookup_fuzz('tests.shapes.drained:NeedsDrainAppliesByKey',\n"
        "                     drain_before_lookup=True, examples=150, seed=0)\n"
    )
    done = pytest_in(tmp_path, "--asynclookup-examples=20", "--asynclookup-seed=1")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 failed, 1 passed" in done.stdout
    assert "test_buggy_twin_conforms" in done.stdout and "property 2" in done.stdout
