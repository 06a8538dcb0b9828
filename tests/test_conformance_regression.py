"""Regression files (``fuzz --regression-out``): they run where asynclookup is not importable,
fail on the buggy class and pass, unchanged, on its fix, whatever the class's shape.

The outside world is a fresh venv (``venv``, as tests/test_wheel.py builds one)
whose site-packages holds only pytest and what pytest needs, linked from this
environment; the user's module is the only thing on its PYTHONPATH.  Each pair
of tests/regression_pairs is judged by the real CLI (a subprocess with the buggy
twin's directory on its path and the pair's shape options, as a maintainer runs
it), and the two files it writes (the test and the shared harness beside it) are
run there on the buggy twin, then on the fixed twin of the same module name.

Cost: the eight CLI runs go four at a time in one fixture (about 60 s wall on a
loaded 2-core machine, most of it the oracle's bounded waits for posts that never
come); each outside pytest run takes about 0.5 s, a failing short-answer one 6 s
(its settle's and its re-asks' WAIT).
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import itertools
import os
import re
import shutil
import subprocess
import sys
import threading
import venv
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from asynclookup import cli
from asynclookup.conformance.counterexample import ConformanceError
from asynclookup.conformance.regression import harness
from asynclookup.conformance.regression.writer import (
    _command,
    _shape_arguments,
    harness_text,
    regression_file,
    unsupported,
    write_regression,
)
from asynclookup.conformance.replay import replay
from asynclookup.conformance.targets import adapter
from asynclookup.conformance.targets.adapter import Plan
from asynclookup.conformance.targets.shape import split_spec
from asynclookup.conformance.targets.tables import TablesUsed
from asynclookup.conformance.targets.vllm import PREFIX
from tests.doc_examples import ExampleError, run_file
from tests.regression_pairs import BUGGY, FIXED, PAIRS, Pair

# one xdist worker runs this module, and its fixtures are session-scoped: built once
# (a module fixture is torn down whenever another module's test runs between)
pytestmark = pytest.mark.xdist_group("conformance_regression")

ROOT = Path(__file__).resolve().parent.parent
CLI = Path(sys.executable).parent / "asynclookup"
RUFF = Path(sys.executable).parent / "ruff"
HELPER = "asynclookup_regression.py"
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
SHORT_PAIRS = [p for p in PAIRS if p.faults == "short"]  # vLLM 0.34's bug, every shape


# -- the outside world ----------------------------------------------------------------


def _with_requirements(name: str) -> list[importlib.metadata.Distribution]:
    """The installed distribution ``name`` and every one it needs here, recursively."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = [name]
    while todo:
        dist = importlib.metadata.distribution(todo.pop())
        if dist.metadata["Name"].lower() in found:
            continue
        found[dist.metadata["Name"].lower()] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(found.values())


@pytest.fixture(scope="session")  # built once: see pytestmark
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a fresh venv that has pytest and nothing of this project."""
    base = tmp_path_factory.mktemp("outside") / "venv"
    venv.create(base, with_pip=False)
    (site,) = (base / "lib").glob("python*/site-packages")
    for dist in _with_requirements("pytest"):
        for top in {f.parts[0] for f in dist.files or ()} - {"..", "__pycache__"}:
            if not (site / top).exists():
                (site / top).symlink_to(str(dist.locate_file(top)))
    return base / "bin" / "python"


def run_outside(
    python: Path, work: Path, user: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """Run ``python args`` in ``work`` with only ``user`` on its PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PYTHONPATH"] = str(user)
    return subprocess.run([str(python), *args], cwd=work, env=env, capture_output=True,
                          text=True, timeout=120)


def pytest_outside(python: Path, work: Path, user: Path) -> subprocess.CompletedProcess[str]:
    return run_outside(python, work, user, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                       "test_regression.py")


def place(work: Path, text: str) -> Path:
    """``text`` as work/test_regression.py with the harness beside it; the user's dir."""
    (work / "test_regression.py").write_text(text, encoding="utf-8")
    (work / HELPER).write_text(harness_text(), encoding="utf-8")
    user = work / "user"
    user.mkdir(exist_ok=True)
    return user


def test_the_outside_python_has_pytest_and_nothing_of_this_project(
    outside: Path, tmp_path: Path
) -> None:
    """There, pytest imports; asynclookup, Hypothesis and this checkout's tests do not."""
    assert run_outside(outside, tmp_path, tmp_path, "-c", "import pytest").returncode == 0
    for name in ("asynclookup", "hypothesis", "tests"):
        done = run_outside(outside, tmp_path, tmp_path, "-c", f"import {name}")
        assert done.returncode == 1 and "ModuleNotFoundError" in done.stderr, name


# -- eight pairs, through the real CLI ------------------------------------------------


@pytest.fixture(scope="session")  # built once: see pytestmark
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Module name -> the regression file the CLI wrote for its buggy twin (four at a
    time), each in a directory of its own beside its harness, which must be the one
    ``harness_text`` gives."""
    env = dict(os.environ, PYTHONPATH=str(BUGGY))  # the user's module, as on their path

    outs = {p.module: tmp_path_factory.mktemp(p.module) for p in PAIRS}  # not threadsafe

    def fuzz(pair: Pair) -> str:
        out = outs[pair.module]
        done = subprocess.run(
            [str(CLI), "fuzz", "--impl", pair.impl, *pair.options, "--faults", pair.faults,
             "--seed", "1", "--quiet", "--regression-out", str(out / "test_regression.py")],
            cwd=out, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            timeout=300,
        )
        assert done.returncode == 1, done.stdout
        assert (out / HELPER).read_text(encoding="utf-8") == harness_text()
        return (out / "test_regression.py").read_text(encoding="utf-8")

    with ThreadPoolExecutor(4) as pool:
        return dict(zip((p.module for p in PAIRS), pool.map(fuzz, PAIRS), strict=True))


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: p.module)
def test_the_file_fails_on_the_buggy_twin_and_passes_on_the_fixed_one(
    pair: Pair, generated: dict[str, str], outside: Path, tmp_path: Path
) -> None:
    """Outside this project the CLI's file fails on the bug, at its step, naming its
    property and the section of docs/properties.md; with the fixed twin under the same
    module name it passes unchanged."""
    user = place(tmp_path, generated[pair.module])
    shutil.copy(BUGGY / f"{pair.module}.py", user)
    failed = pytest_outside(outside, tmp_path, user)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert f"step {_breaking_step(generated[pair.module])}, " in failed.stdout, failed.stdout
    assert f"That breaks property {pair.number} (" in failed.stdout, failed.stdout
    assert f"docs/properties.md#{pair.number}-" in failed.stdout, failed.stdout
    shutil.copy(FIXED / f"{pair.module}.py", user)
    passed = pytest_outside(outside, tmp_path, user)
    assert passed.returncode == 0, passed.stdout + passed.stderr


@pytest.mark.parametrize("pair", SHORT_PAIRS, ids=lambda p: p.module)
def test_a_short_answer_failure_names_the_key_and_what_the_tier_answered(
    pair: Pair, generated: dict[str, str], outside: Path, tmp_path: Path
) -> None:
    """The short-answer bug's message says, in the class's names, which key never got a
    verdict and what the tier answered for it (too few values: [])."""
    user = place(tmp_path, generated[pair.module])
    shutil.copy(BUGGY / f"{pair.module}.py", user)
    failed = pytest_outside(outside, tmp_path, user).stdout
    assert "never got a verdict: the tier was asked [b'k" in failed, failed
    assert "and answered []" in failed, failed
    lookup = dict(o.split("=") for o in ",".join(pair.options[1::2]).split(",")
                  if "=" in o).get("lookup", "lookup")
    assert f"step {_breaking_step(generated[pair.module])}, {lookup}(b'k" in failed, failed


def _breaking_step(text: str) -> int:
    """The number of the step whose comment says the class broke the property."""
    lines = text.splitlines()
    marked = next(i for i, line in enumerate(lines) if " broke property " in line
                  and line.strip().startswith("#") and line.strip().endswith(" here"))
    numbered = [line.strip() for line in lines[:marked]
                if line.strip().startswith("# ") and line.strip()[2:3].isdigit()]
    return int(numbered[-1][2:].split(".")[0])


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: p.module)
def test_the_file_reads_as_the_calls_each_with_one_line_of_why(
    pair: Pair, generated: dict[str, str]
) -> None:
    """The test's body is the calls, each under a numbered comment saying what is allowed;
    asynclookup appears only in the docstring (the command that regenerates the file),
    which names the file without a directory; ruff at 88 columns is clean; a file of at
    most six calls is at most 100 lines."""
    text = generated[pair.module]
    test = text[text.index("\ndef test_"):]
    assert f"keeps_property_{pair.number}()" in test
    assert "# 1. " in test and "run.lookup(" in test and "the protocol allows" in test
    assert f"{pair.cls} broke property {pair.number} " in test
    module_doc = ast.get_docstring(ast.parse(text)) or ""
    assert "import asynclookup\n" not in text and "from asynclookup." not in text
    command = " ".join(module_doc.replace("\\\n", " ").split())
    assert f"asynclookup fuzz --impl {pair.impl} " in command, command
    for name, value in zip(pair.options[::2], pair.options[1::2], strict=True):
        for item in value.split(","):  # --method a=b,c=d is written --method a=b --method c=d
            assert f"{name} {item}" in command.replace("'", ""), command
    assert command.endswith("--regression-out test_regression.py"), command
    assert "/tmp" not in text and str(ROOT) not in text
    steps = sum(line.strip().startswith("# ") and line.strip()[2:3].isdigit()
                for line in test.splitlines())
    if steps <= 7:  # six calls and the closing shutdown
        assert len(text.splitlines()) <= 100, len(text.splitlines())
    done = subprocess.run([str(RUFF), "check", "--isolated", "--line-length", "88",
                           "--select", "E,F,W,B,UP", "--stdin-filename", "test_regression.py",
                           "-"], input=text, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout


def test_the_written_files_are_clean_under_ruff_at_88_columns(tmp_path: Path) -> None:
    """A maintainer's linter at its default line length has nothing to say about the
    test or its harness: pyflakes, pycodestyle, bugbear, pyupgrade, and ruff's own
    default rules (which take in more with each release)."""
    written = write_regression(zip_error(), tmp_path / "test_regression.py")
    assert [p.name for p in written] == ["test_regression.py", HELPER]
    for rules in (["--select", "E,F,W,B,UP"], []):
        done = subprocess.run([str(RUFF), "check", "--isolated", "--line-length", "88",
                               *rules, *map(str, written)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout


def test_the_harness_is_written_once_and_rewritten_only_when_it_changed(
    tmp_path: Path
) -> None:
    """A second regression file in the same directory leaves the harness alone; a stale
    harness there is rewritten."""
    error = zip_error()
    assert len(write_regression(error, tmp_path / "test_one.py")) == 2
    assert [p.name for p in write_regression(error, tmp_path / "test_two.py")] == [
        "test_two.py"]
    (tmp_path / HELPER).write_text("# an older harness\n", encoding="utf-8")
    assert len(write_regression(error, tmp_path / "test_three.py")) == 2
    assert (tmp_path / HELPER).read_text(encoding="utf-8") == harness_text()


def test_a_step_the_spec_lets_go_two_ways_passes_on_the_fix_either_way(
    outside: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lookup made before the worker's post may answer None or the verdict: the file
    marks it branches=True, and still fails on the buggy twin and passes on the fixed one."""
    monkeypatch.syspath_prepend(str(BUGGY))
    monkeypatch.delitem(sys.modules, "kv_probe", raising=False)
    config = {"target": PREFIX + "kv_probe:KvProbeManager", "mode": "threaded",
              "tier": "memory", "faults": "all"}
    steps = [("lookup", (b"k0", "A")), ("flush", ()), ("answer", (Plan("proper"),)),
             ("lookup", (b"k0", "A")), ("settle", ()), ("mark_present", ([b"k0"],)),
             ("lookup", (b"k0", "B"))]
    for _ in range(5):  # step 4 sees the post or not: the violation needs it not to
        error = replay(config, steps, 0.5)
        if error is not None:
            break
    monkeypatch.delitem(sys.modules, "kv_probe", raising=False)
    assert error is not None and error.violation.number == 2
    text = regression_file(error)
    assert "branches=True" in text
    user = place(tmp_path, text)
    shutil.copy(BUGGY / "kv_probe.py", user)
    failed = pytest_outside(outside, tmp_path, user)
    assert failed.returncode == 1 and "step 7, " in failed.stdout, failed.stdout
    shutil.copy(FIXED / "kv_probe.py", user)
    passed = pytest_outside(outside, tmp_path, user)
    assert passed.returncode == 0, passed.stdout + passed.stderr


def test_a_pools_file_answers_the_tier_call_the_recorded_run_answered(
    outside: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two groups of one batch reach a pool's tier at once; the file answers each by the
    request and keys the recorded run answered (``asks=``), so the short answer goes to
    the same group on every run: it fails on the buggy pool three times of three, at
    the same step, and passes on the fixed one."""
    monkeypatch.syspath_prepend(str(BUGGY))
    monkeypatch.delitem(sys.modules, "pool_probe", raising=False)
    config = {"target": PREFIX + "pool_probe:PoolProbeManager;args=n_lookup_threads=3",
              "mode": "threaded", "tier": "memory", "faults": "short"}
    steps = [("lookup", (b"k0", "A")), ("lookup", (b"k1", "B")), ("flush", ()),
             ("answer", (Plan("proper"),)), ("answer", (Plan("short"),)), ("settle", ()),
             ("lookup", (b"k0", "A")), ("lookup", (b"k1", "B")),
             ("await_verdict", (b"k1", "B"))]
    for _ in range(10):  # the pool's first call to arrive must be A's, to get "proper"
        error = replay(config, steps, 0.5)
        if error is not None:
            break
    monkeypatch.delitem(sys.modules, "pool_probe", raising=False)
    assert error is not None and error.violation.number == 6
    text = regression_file(error)
    asked = [line.split("asks=")[1].split("),")[0] for line in text.splitlines()
             if "asks=" in line]
    assert len(asked) == 2 and asked[0] != asked[1], asked
    user = place(tmp_path, text)
    shutil.copy(BUGGY / "pool_probe.py", user)
    for _ in range(3):
        failed = pytest_outside(outside, tmp_path, user)
        assert failed.returncode == 1 and "step 9, " in failed.stdout, failed.stdout
    shutil.copy(FIXED / "pool_probe.py", user)
    passed = pytest_outside(outside, tmp_path, user)
    assert passed.returncode == 0, passed.stdout + passed.stderr


SHAPED = [  # (target, its correct sibling, calls that break it, the property)
    ("tests.shapes.verdicts:EnumVerdictsUnvalidated;verdicts=tests.shapes.verdicts:to_bool",
     "EnumVerdicts", [("lookup", (b"k0", "A")), ("mark_present", ([b"k0"],)),
                      ("flush", ()), ("shutdown", ())], 1),
    ("tests.shapes.drained:NeedsDrainAppliesByKey;drain-before-lookup", "NeedsDrain",
     [("lookup", (b"k0", "A")), ("flush", ()), ("answer", (Plan("proper"),)),
      ("settle", ()), ("cleanup", ("A",)), ("lookup", (b"k0", "B"))], 2),
]


@pytest.mark.parametrize(("target", "sibling", "steps", "number"), SHAPED,
                         ids=["verdicts", "drain-before-lookup"])
def test_a_file_maps_verdicts_and_drains_before_lookups_as_its_shape_says(
    target: str, sibling: str, steps: list[tuple[str, tuple[object, ...]]], number: int,
    tmp_path: Path,
) -> None:
    """A class that answers in its own vocabulary (--verdicts) or needs a drain before
    each lookup (--drain-before-lookup): its file fails on the bug, naming the property,
    and passes with the class swapped for its correct sibling."""
    config = {"target": PREFIX + target, "mode": "threaded", "tier": "memory",
              "faults": "all"}
    error = replay(config, steps, 0.5)
    assert error is not None and error.violation.number == number, error
    text = regression_file(error)
    buggy = target.split(":")[1].split(";")[0]
    for cls, code in ((buggy, 1), (sibling, 0)):
        place(tmp_path, text.replace(buggy, cls))
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "test_regression.py"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == code, done.stdout + done.stderr
        assert code == 0 or f"That breaks property {number} (" in done.stdout, done.stdout


# -- the file's contents ----------------------------------------------------------------


def zip_error(wait: float = 0.5) -> ConformanceError:
    """The zoo's zip-truncation kill (a known 6-call counterexample: the stranded key's
    verdict never shows, however often it is asked for)."""
    config = {"target": ZIP, "mode": "threaded", "tier": "memory", "faults": "all"}
    steps = [("lookup", (b"k0", "A")), ("flush", ()), ("answer", (Plan("short"),)),
             ("settle", ()), ("lookup", (b"k0", "A")), ("await_verdict", (b"k0", "A"))]
    error = replay(config, steps, wait)
    assert error is not None and error.violation.number == 6
    return error


def test_the_files_import_only_the_class_pytest_and_the_standard_library() -> None:
    """The test imports the user's class and its harness; the harness only the standard
    library (the oracle's code it needs is written in)."""
    for text, allowed in ((regression_file(zip_error()), {"tests", "asynclookup_regression"}),
                          (harness_text(), set())):
        tree = ast.parse(text)
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                    for a in n.names}
        imported |= {n.module.split(".")[0] for n in ast.walk(tree)
                     if isinstance(n, ast.ImportFrom) and n.module}
        assert imported - set(sys.stdlib_module_names) == allowed


def test_the_zoo_zip_file_fails_there_and_passes_with_the_short_answer_padded(
    outside: Path, tmp_path: Path
) -> None:
    """The zoo's 0.34-shaped zip mutant: its file fails outside this project, naming
    property 6, and passes once the short answer is padded with False."""
    user = place(tmp_path, regression_file(zip_error()))
    zoo = user / "tests" / "zoo"
    zoo.mkdir(parents=True)
    (user / "tests" / "__init__.py").write_text('"""A user\'s tests."""\n')
    for name in ("__init__.py", "vllm_shaped.py", "mutants.py"):
        shutil.copy(ROOT / "tests" / "zoo" / name, zoo / name)
    failed = pytest_outside(outside, tmp_path, user)
    assert failed.returncode == 1 and "property 6 (progress)" in failed.stdout, failed.stdout
    (zoo / "mutants.py").write_text(PADDED)
    passed = pytest_outside(outside, tmp_path, user)
    assert passed.returncode == 0, passed.stdout + passed.stderr


def test_the_written_harness_answers_as_the_oracle_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The written harness's tier answers (the oracle's source, written in) give, for
    every plan kind, size, bits and number of keys, what the oracle's tier gives."""
    (tmp_path / HELPER).write_text(harness_text(), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "asynclookup_regression", raising=False)
    written = importlib.import_module("asynclookup_regression")
    monkeypatch.delitem(sys.modules, "asynclookup_regression")
    assert written.Plan is not Plan  # its own copy, not this package's
    for kind, size, n in itertools.product(adapter.PLAN_KINDS, range(3), range(4)):
        for bits in ((), (True,), (True, False, True)):
            expected = harness.memory_answer(Plan(kind, bits, size), n)
            got = written.memory_answer(written.Plan(kind, bits, size), n)
            assert (got.items, got.raises, got.lazy, got.slow) == (
                expected.items, expected.raises, expected.lazy, expected.slow)


def test_every_property_link_is_a_section_of_docs_properties() -> None:
    """The anchor a failure message links for each property is a heading of
    docs/properties.md."""
    page = (ROOT / "docs" / "properties.md").read_text(encoding="utf-8")
    headings = {re.sub(r"[^\w\- ]", "", line[3:].strip().lower()).replace(" ", "-")
                for line in page.splitlines() if line.startswith("## ")}
    assert {anchor for _, anchor in harness.TITLES.values()} <= headings


def test_every_shape_can_have_a_regression_file_but_adapters_cannot() -> None:
    """Only vLLM-shaped classes (--impl) on the memory tier get a regression file; every
    shape option is accepted (the file's SHAPE carries it)."""
    assert unsupported({"target": "reference"}) is not None
    assert unsupported({"target": ZIP, "tier": "fs"}) is not None
    for options in (";method=mark_miss=invalidate", ";cleanup-arg=context",
                    ";verdicts=tests.shapes.verdicts:to_bool", ";tables=probes=_x",
                    ";args=n_lookup_threads=1", ";drain-before-lookup", ""):
        assert unsupported({"target": ZIP + options, "tier": "memory"}) is None, options


def test_a_file_carries_the_shape_it_was_written_for() -> None:
    """Constructor arguments, method names, the cleanup's argument, a verdicts function
    and a drain before each lookup all reach the file's SHAPE, and the command that
    regenerates it spells them as the CLI takes them."""
    head, shape = split_spec("m:C;method=mark_miss=invalidate,mark_present=none;cleanup-arg="
                             "context;verdicts=v.mod:to_bool;args=n_lookup_threads=2;"
                             "drain-before-lookup")
    parts, imports = _shape_arguments(shape, TablesUsed(), {})
    assert parts == ["kwargs={'n_lookup_threads': 2}", "methods={'mark_miss': 'invalidate'}",
                     "cleanup_context=True", "verdicts=to_bool", "drain_before_lookup=True"]
    assert imports == [("v.mod", "to_bool")]
    command = _command(head, shape, "short", "asynclookup fuzz --impl m:C --seed 3 "
                       "--regression-out /somewhere/t.py", "t.py")
    assert command == (
        "asynclookup fuzz --impl m:C --method mark_miss=invalidate --method mark_present=none "
        "--cleanup-arg context --verdicts v.mod:to_bool --impl-arg n_lookup_threads=2 "
        "--drain-before-lookup --faults short --seed 3 --regression-out t.py"), command


def test_a_run_without_a_violation_writes_no_file_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fixed twin passes a short fuzz: exit 0, no file, one line on stderr saying so."""
    monkeypatch.syspath_prepend(str(FIXED))
    monkeypatch.delitem(sys.modules, "hit_cache", raising=False)
    out = tmp_path / "test_regression.py"
    code = cli.main(["fuzz", "--impl", "hit_cache:HitCacheManager", "--examples", "5",
                     "--seed", "1", "--quiet", "--regression-out", str(out)])
    monkeypatch.delitem(sys.modules, "hit_cache", raising=False)
    assert code == 0 and not out.exists() and not (tmp_path / HELPER).exists()
    assert "--regression-out: no violation" in capsys.readouterr().err


def test_a_class_whose_results_are_on_no_queue_gets_a_file_that_re_asks() -> None:
    """A counterexample whose verdict never shows is written for a class whose results are
    on no queue: the file re-asks drain_results() and the lookup, bounded, as the oracle
    did; it never needs to count what the worker posts."""
    config = {"target": ZIP, "mode": "threaded", "tier": "memory", "faults": "all"}
    steps = [("lookup", (b"k0", "A")), ("lookup", (b"k1", "A")), ("flush", ()),
             ("answer", (Plan("short", (), 1),)), ("settle", ()), ("lookup", (b"k1", "A")),
             ("await_verdict", (b"k1", "A"))]
    error = replay(config, steps, 0.5)
    assert error is not None and error.violation.number == 6, error
    error.config = dict(config, target=PREFIX + "tests.outside.condition_style:ConditionManager")
    text = regression_file(error)
    assert "run.await_verdict(b'k1', 'A', allowed={False}, breaks=6)" in text
    assert "results=" not in text


def test_a_docs_pytest_line_must_give_the_exit_code_it_shows(tmp_path: Path) -> None:
    """The docs runner's ``pytest FILE`` lines (the regression section's) fail when the file
    exits otherwise than the line says."""
    doc = tmp_path / "planted.md"
    doc.write_text("```python file=test_planted.py\ndef test_ok():\n    pass\n```\n\n"
                   "```sh\npytest -q test_planted.py   # exit 1\n```\n", encoding="utf-8")
    with pytest.raises(ExampleError, match=r"`pytest -q test_planted\.py` exited 0, expected 1"):
        run_file(doc, tmp_path / "work")


class _ProbesOnce:
    """A class whose worker makes one tier call, at the first flush, and no other."""

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        self._worker: threading.Thread | None = None

    def batch_lookup(self, keys: list[bytes], req_context: object) -> list[bool]:
        raise NotImplementedError(self.tier_type)

    def lookup(self, key: bytes, req_context: object) -> None:
        return None

    def flush(self) -> None:
        if self._worker is None:
            context = harness.Context("A")
            self._worker = threading.Thread(
                target=lambda: self.batch_lookup([b"k0"], context), daemon=True)
            self._worker.start()

    def drain_results(self) -> None:
        pass

    def shutdown(self) -> None:
        if self._worker is not None:
            self._worker.join(harness.CALL_WAIT)


def test_an_owed_tier_call_that_never_comes_says_what_the_tier_was_asked() -> None:
    """A tier call the protocol owes that never comes: the message names the call owed
    as the class would make it, and what the tier was asked about its keys so far."""
    run = harness.Run(harness.Shape(_ProbesOnce))
    owed = {("A", (b"k0",))}
    run.lookup(b"k0", "A", (None,))
    run.flush()
    run.answer(Plan("short"), owed, owed=True)
    with pytest.raises(AssertionError) as failed:
        run.answer(Plan(), owed, owed=True, breaks=6)
    run.__exit__()
    assert str(failed.value) == (
        "step 4, the worker's tier call: no tier call came within 3.0 s, yet the "
        "protocol owes one ([b'k0'] for 'A')\n"
        "b'k0' never got a verdict: the tier was asked [b'k0'] for 'A' at step 3 "
        "and answered []\n"
        "That breaks property 6 (progress): docs/properties.md#6-progress"
    )
