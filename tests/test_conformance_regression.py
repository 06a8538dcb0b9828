"""Regression files (``fuzz --regression-out``): they run where asynclookup is not importable,
fail on the buggy class and pass, unchanged, on its fix.

The outside world is a fresh venv (``venv``, as tests/test_wheel.py builds one)
whose site-packages holds only pytest and what pytest needs, linked from this
environment; the user's module is the only thing on its PYTHONPATH.  Each pair
of tests/regression_pairs is judged by the real CLI (a subprocess with the buggy
twin's directory on its path, as a maintainer runs it), and the file it writes
is run there on the buggy twin, then on the fixed twin of the same module name.

Cost: the four CLI runs go at once in one fixture (about 24 s wall, most of it
the zip bug's bounded waits for a post that never comes; about 6 s CPU); each
outside pytest run takes about 0.5 s, a failing zip one 3 s (its WAIT).  The
whole module: about 50 s wall, 16 s CPU, on a loaded 2-core machine.
"""

from __future__ import annotations

import ast
import importlib.metadata
import itertools
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from asynclookup import cli
from asynclookup.conformance.regression._harness import oracle_code
from asynclookup.conformance.regression._paths import memory_answer
from asynclookup.conformance.regression.writer import regression_file, unsupported
from asynclookup.conformance.replay import replay
from asynclookup.conformance.targets import adapter
from asynclookup.conformance.targets.adapter import Plan
from asynclookup.conformance.targets.vllm import PREFIX, impl_spec
from tests.doc_examples import ExampleError, run_file
from tests.regression_pairs import BUGGY, FIXED, PAIRS, Pair

ROOT = Path(__file__).resolve().parent.parent
CLI = Path(sys.executable).parent / "asynclookup"
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


@pytest.fixture(scope="module")
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


def test_the_outside_python_has_pytest_and_nothing_of_this_project(
    outside: Path, tmp_path: Path
) -> None:
    """There, pytest imports; asynclookup, Hypothesis and this checkout's tests do not."""
    assert run_outside(outside, tmp_path, tmp_path, "-c", "import pytest").returncode == 0
    for name in ("asynclookup", "hypothesis", "tests"):
        done = run_outside(outside, tmp_path, tmp_path, "-c", f"import {name}")
        assert done.returncode == 1 and "ModuleNotFoundError" in done.stderr, name


# -- four pairs, through the real CLI -------------------------------------------------


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Module name -> the regression file the CLI wrote for its buggy twin (all at once)."""
    out = tmp_path_factory.mktemp("generated")
    env = dict(os.environ, PYTHONPATH=str(BUGGY))  # the user's module, as on their path
    runs = {
        pair.module: subprocess.Popen(
            [str(CLI), "fuzz", "--impl", pair.impl, "--faults", pair.faults, "--seed", "1",
             "--quiet", "--regression-out", str(out / f"{pair.module}.py")],
            cwd=out, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for pair in PAIRS
    }
    texts = {}
    for module, run in runs.items():
        printed, _ = run.communicate(timeout=300)
        assert run.returncode == 1, printed
        texts[module] = (out / f"{module}.py").read_text(encoding="utf-8")
    return texts


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: p.module)
def test_the_file_fails_on_the_buggy_twin_and_passes_on_the_fixed_one(
    pair: Pair, generated: dict[str, str], outside: Path, tmp_path: Path
) -> None:
    """Outside this project the CLI's file fails on the bug, at its step, naming its
    property; with the fixed twin under the same module name it passes unchanged."""
    user = tmp_path / "user"
    user.mkdir()
    (tmp_path / "test_regression.py").write_text(generated[pair.module], encoding="utf-8")
    shutil.copy(BUGGY / f"{pair.module}.py", user)
    failed = pytest_outside(outside, tmp_path, user)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert f"step {_breaking_step(generated[pair.module])}, " in failed.stdout, failed.stdout
    assert f"that breaks property {pair.number} " in failed.stdout, failed.stdout
    shutil.copy(FIXED / f"{pair.module}.py", user)
    passed = pytest_outside(outside, tmp_path, user)
    assert passed.returncode == 0, passed.stdout + passed.stderr


def _breaking_step(text: str) -> int:
    """The number of the counterexample's last step (the closing shutdown aside)."""
    steps = [line.strip() for line in text.splitlines() if line.strip().startswith("# Step ")]
    return max(int(line.split()[2].rstrip(":")) for line in steps
               if "as every run ends" not in line)


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: p.module)
def test_the_file_reads_as_named_steps_with_what_the_spec_allows(
    pair: Pair, generated: dict[str, str]
) -> None:
    """Each step has a title and a comment saying what is allowed; the failing step says so;
    asynclookup appears only in the docstring's command that regenerates the file."""
    text = generated[pair.module]
    test = text[text.index("\ndef test_"):text.index("# -- the harness")]
    assert f"def test_{pair.module.split('_')[0]}" in test
    assert f"keeps_property_{pair.number}()" in test
    assert "# Step 1: " in test and "run.lookup(" in test and "protocol allows" in test
    assert f"This is where {pair.cls} broke property {pair.number} " in test
    module_doc = ast.get_docstring(ast.parse(text)) or ""
    assert text.count("asynclookup") == module_doc.count("asynclookup") == 1
    command = " ".join(module_doc.replace("\\\n", " ").split())
    assert f"asynclookup fuzz --impl {pair.impl} --faults {pair.faults} --seed 1" in command


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
    user = tmp_path / "user"
    user.mkdir()
    (tmp_path / "test_regression.py").write_text(text, encoding="utf-8")
    shutil.copy(BUGGY / "kv_probe.py", user)
    failed = pytest_outside(outside, tmp_path, user)
    assert failed.returncode == 1 and "step 7, " in failed.stdout, failed.stdout
    shutil.copy(FIXED / "kv_probe.py", user)
    passed = pytest_outside(outside, tmp_path, user)
    assert passed.returncode == 0, passed.stdout + passed.stderr


# -- the file's contents ----------------------------------------------------------------


def zip_file(wait: float = 0.5) -> str:
    """The regression file of the zoo's zip-truncation kill (a known 6-call counterexample:
    the stranded key's verdict never shows, however often it is asked for)."""
    config = {"target": ZIP, "mode": "threaded", "tier": "memory", "faults": "all"}
    steps = [("lookup", (b"k0", "A")), ("flush", ()), ("answer", (Plan("short"),)),
             ("settle", ()), ("lookup", (b"k0", "A")), ("await_verdict", (b"k0", "A"))]
    error = replay(config, steps, wait)
    assert error is not None and error.violation.number == 6
    return regression_file(error)


def test_the_file_imports_only_the_class_pytest_and_the_standard_library() -> None:
    """The generated module imports the user's class, pytest and stdlib modules, nothing else."""
    tree = ast.parse(zip_file())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module}
    assert imported - set(sys.stdlib_module_names) == {"pytest", "tests"}


def test_the_file_is_clean_under_ruff(tmp_path: Path) -> None:
    """A maintainer's linter has nothing to say about the file (pyflakes, pycodestyle,
    bugbear, pyupgrade; lines of at most 100)."""
    path = tmp_path / "test_regression.py"
    path.write_text(zip_file(), encoding="utf-8")
    done = subprocess.run([str(Path(sys.executable).parent / "ruff"), "check", "--isolated",
                           "--line-length", "100", "--select", "E,F,W,B,UP", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout


def test_the_zoo_zip_file_fails_there_and_passes_with_the_short_answer_padded(
    outside: Path, tmp_path: Path
) -> None:
    """The zoo's 0.34-shaped zip mutant: its file fails outside this project, naming
    property 6, and passes once the short answer is padded with False."""
    user = tmp_path / "user"
    zoo = user / "tests" / "zoo"
    zoo.mkdir(parents=True)
    (user / "tests" / "__init__.py").write_text('"""A user\'s tests."""\n')
    for name in ("__init__.py", "vllm_shaped.py", "mutants.py"):
        shutil.copy(ROOT / "tests" / "zoo" / name, zoo / name)
    (tmp_path / "test_regression.py").write_text(zip_file())
    failed = pytest_outside(outside, tmp_path, user)
    assert failed.returncode == 1 and "property 6 (progress)" in failed.stdout, failed.stdout
    (zoo / "mutants.py").write_text(PADDED)
    passed = pytest_outside(outside, tmp_path, user)
    assert passed.returncode == 0, passed.stdout + passed.stderr


def test_the_scripted_tier_answers_as_the_oracle_does() -> None:
    """The harness's tier answers (copied from the oracle's source) give, for every plan
    kind, size, bits and number of keys, what the oracle's tier gives."""
    space: dict[str, object] = {}
    head = "from __future__ import annotations\nimport threading\nfrom collections.abc " \
           "import Iterator, Sequence\nfrom dataclasses import dataclass\n"
    exec(compile(head + oracle_code(), "harness", "exec"), space)
    for kind, size, n in itertools.product(adapter.PLAN_KINDS, range(3), range(4)):
        for bits in ((), (True,), (True, False, True)):
            ours = Plan(kind, bits, size)
            theirs = space["Plan"](kind, bits, size)  # type: ignore[operator]
            expected = memory_answer(ours, n)
            got = space["memory_answer"](theirs, n)  # type: ignore[operator]
            assert (got.values, got.raises, got.lazy, got.slow) == (
                expected.values, expected.raises, expected.lazy, expected.slow)


def test_an_adapter_target_cannot_have_a_regression_file() -> None:
    """Only vLLM-shaped classes (--impl) on the memory tier get a regression file."""
    assert unsupported({"target": "reference"}) is not None
    assert unsupported({"target": ZIP, "tier": "fs"}) is not None
    assert unsupported({"target": ZIP, "tier": "memory"}) is None


def test_a_class_of_another_shape_is_refused_but_named_tables_are_not() -> None:
    """--method, --cleanup-arg and --verdicts would need the mapping in the file: refused;
    --tables only changes which attributes the file reads: accepted."""
    mutant = ZIP.removeprefix(PREFIX)
    renamed = PREFIX + impl_spec(mutant, cleanup_arg="id")
    assert "--cleanup-arg" in (unsupported({"target": renamed, "tier": "memory"}) or "")
    named = PREFIX + impl_spec(mutant, tables="probes=_lookup_state")
    assert unsupported({"target": named, "tier": "memory"}) is None


def test_the_cli_refuses_another_shape_before_fuzzing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """fuzz --regression-out with --cleanup-arg exits 2 with one line, and writes nothing."""
    out = tmp_path / "test_regression.py"
    code = cli.main(["fuzz", "--impl", ZIP.removeprefix(PREFIX), "--cleanup-arg", "id",
                     "--regression-out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--cleanup-arg" in err[0]
    assert not out.exists()


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
    assert code == 0 and not out.exists()
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
    assert "run.await_verdict(\n            b'k1', 'A', allowed={False}," in text


def test_a_docs_pytest_line_must_give_the_exit_code_it_shows(tmp_path: Path) -> None:
    """The docs runner's ``pytest FILE`` lines (the regression section's) fail when the file
    exits otherwise than the line says."""
    doc = tmp_path / "planted.md"
    doc.write_text("```python file=test_planted.py\ndef test_ok():\n    pass\n```\n\n"
                   "```sh\npytest -q test_planted.py   # exit 1\n```\n", encoding="utf-8")
    with pytest.raises(ExampleError, match=r"`pytest -q test_planted\.py` exited 0, expected 1"):
        run_file(doc, tmp_path / "work")
