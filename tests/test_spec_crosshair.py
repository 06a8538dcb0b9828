"""CrossHair: the spec's PEP 316 contracts hold, and they refute broken actions.

Two halves, after CrossHair's own ``examples/PEP316`` and ``bugs_detected``:

- ``crosshair check`` over every function of ``spec/`` that has a contract
  reports no counterexample, every contract line is analysed (none is skipped
  for an unsatisfiable precondition), and the command's output is parsed by a
  harness that is itself shown to report a planted bug;
- ``tests/crosshair_bugs/broken.py``: each broken action, a module generated
  at test time from a variant of ``asynclookup.spec.variants`` that carries the
  spec action's contract word for word, is refuted on the contract line that
  states the rule it breaks, and the same line is not refuted on the spec's
  action.

Both run over the small-scope States of ``tests/crosshair_bugs/small_scope.py``
(two keys, two requests).  The timeouts are CPU seconds per contract line; the
CrossHair processes run two at a time, started together when the first test
of this module asks for them.  "No counterexample found" is not a proof: see
docs/spec.md for what the timeouts buy.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import inspect
import os
import pkgutil
import random
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple, cast

import pytest
from crosshair import SymbolicFactory

import asynclookup.spec
import asynclookup.spec.core
from asynclookup.spec.core import (
    TRANSITIONS,
    WORKER_ACTIONS,
    Action,
    Cleanup,
    Drain,
    Flush,
    Lookup,
    MarkMiss,
    MarkPresent,
    Post,
    ProbeGroup,
    Shutdown,
    State,
    TakeBatch,
    enabled,
    well_formed,
)
from asynclookup.spec.variants import VARIANTS
from tests.crosshair_bugs import broken, small_scope

# one xdist worker runs this module, and its fixtures are session-scoped: built once
# (a module fixture is torn down whenever another module's test runs between)
pytestmark = pytest.mark.xdist_group("spec_crosshair")

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = "tests/crosshair_bugs/plugin.py"

# CPU seconds per contract line.  The scheduler actions meet their
# preconditions within a few paths; the worker actions need a State whose
# pipeline holds the right thing, which takes CrossHair ~15 paths of ~60 ms.
SCHEDULER_TIMEOUT = 1.5
WORKER_TIMEOUT = 5.0
# A broken action is refuted in one to three seconds; this is only a bound.
REFUTE_TIMEOUT = 30.0
# The spec action must survive its line for this long.
CONTROL_TIMEOUT = 2.0
PROCESS_TIMEOUT = 600.0  # wall seconds: a hung CrossHair fails the test
# What CrossHair --report_all says of a contract line it analysed without refuting.
ANALYSED = ("Not confirmed.", "Confirmed over all paths.")


class Bug(NamedTuple):
    """A generated broken action (tests/crosshair_bugs/broken.py) and the contract
    line that refutes it; ``module`` is the module's name in its directory."""

    module: str
    function: str
    expression: str


BUGS: Mapping[str, Bug] = {
    name: Bug(name, planted.function, planted.expression)
    for name, planted in broken.PLANTED.items()
}


@pytest.fixture(scope="session")  # built once: see pytestmark
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory the broken actions are generated into, once per module."""
    directory = tmp_path_factory.mktemp("crosshair_bugs")
    broken.write(directory)
    return directory


def contract_lines(fn: Callable[..., object]) -> list[str]:
    """The PEP 316 lines (``pre:``, ``post:``, ``inv:``) of ``fn``'s docstring."""
    lines = (line.strip() for line in (fn.__doc__ or "").splitlines())
    return [line for line in lines if line.startswith(("pre:", "post:", "post[", "inv:"))]


def contracted_functions() -> dict[str, int]:
    """Every function of a module of spec/ with a contract: qualified name -> post lines."""
    found: dict[str, int] = {}
    for info in pkgutil.iter_modules(asynclookup.spec.__path__, "asynclookup.spec."):
        module = importlib.import_module(info.name)
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if fn.__module__ == module.__name__ and contract_lines(fn):
                posts = [line for line in contract_lines(fn) if line.startswith("post")]
                found[f"{module.__name__}.{name}"] = len(posts)
    return found


def worker_function_names() -> set[str]:
    """The qualified names of the worker actions' functions."""
    return {f"asynclookup.spec.core.{TRANSITIONS[kind].apply.__name__}" for kind in WORKER_ACTIONS}


def _run(args: list[str], planted: Path | None = None) -> subprocess.CompletedProcess[str]:
    path = str(ROOT) if planted is None else os.pathsep.join([str(ROOT), str(planted)])
    env = {**os.environ, "PYTHONPATH": path, "PYTHONHASHSEED": "0"}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=PROCESS_TIMEOUT, check=False,
    )


def crosshair_check(targets: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``crosshair check`` of ``targets`` over small-scope States, every line reported."""
    return _run([
        "-m", "crosshair", "check", *targets, f"--per_condition_timeout={timeout}",
        "--analysis_kind=PEP316", "--report_all", "--extra_plugin", PLUGIN,
    ])


def refute(
    module: str, function: str, expression: str, timeout: float, planted: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``tests/crosshair_bugs/refute.py`` on one contract line of one function;
    ``planted`` is the directory of the generated modules, put on the path."""
    return _run([
        "-m", "tests.crosshair_bugs.refute", module, function, expression,
        f"--timeout={timeout}",
    ], planted)


def jobs(planted: Path) -> dict[str, Callable[[], subprocess.CompletedProcess[str]]]:
    """Every CrossHair run of this module, longest first; the broken actions are
    the modules generated into ``planted``."""
    functions = contracted_functions()
    workers = sorted(worker_function_names())
    scheduler = sorted(set(functions) - set(workers))
    seed = str(planted / "flush_without_revalidation.py")
    runs: dict[str, Callable[[], subprocess.CompletedProcess[str]]] = {
        "scheduler": lambda: crosshair_check(scheduler, SCHEDULER_TIMEOUT),
        "worker": lambda: crosshair_check(workers, WORKER_TIMEOUT),
        "planted": lambda: crosshair_check([seed], 1.0),
    }
    for name, bug in BUGS.items():
        runs[f"refute {name}"] = functools.partial(
            refute, bug.module, bug.function, bug.expression, REFUTE_TIMEOUT, planted
        )
        runs[f"control {name}"] = functools.partial(
            refute, "asynclookup.spec.core", bug.function, bug.expression, CONTROL_TIMEOUT
        )
    return runs


def runs_of(test: str, params: Mapping[str, object]) -> list[str]:
    """The runs that test function ``test`` (with these parameters) waits for."""
    name = str(params.get("name", ""))
    return {
        "test_scheduler_contracts_hold": ["scheduler"],
        "test_worker_contracts_hold": ["worker"],
        "test_check_harness_reports_a_planted_bug": ["planted"],
        "test_crosshair_refutes_broken_action": [f"refute {name}"],
        "test_spec_action_survives_the_same_line": [f"control {name}"],
    }.get(test, [])


@pytest.fixture(scope="session")  # built once: see pytestmark
def runs(
    request: pytest.FixtureRequest, planted: Path
) -> Iterator[dict[str, Future[subprocess.CompletedProcess[str]]]]:
    """The runs the selected tests need, two processes at a time (one per core),
    all started when the first test asks, so that they overlap."""
    module = sys.modules[__name__]
    needed: set[str] = set()
    for item in request.session.items:
        if isinstance(item, pytest.Function) and item.module is module:
            callspec = getattr(item, "callspec", None)
            needed.update(runs_of(item.originalname, callspec.params if callspec else {}))
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield {name: pool.submit(job) for name, job in jobs(planted).items() if name in needed}


def finished(
    runs: Mapping[str, Future[subprocess.CompletedProcess[str]]], name: str
) -> subprocess.CompletedProcess[str]:
    """Wait for run ``name``."""
    return runs[name].result(timeout=PROCESS_TIMEOUT * 3)


def report(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr[-3000:]}"


def assert_contracts_hold(result: subprocess.CompletedProcess[str], posts: int) -> None:
    """No counterexample, and every post line analysed on paths that met the preconditions."""
    lines = result.stdout.splitlines()
    assert result.returncode == 0, report(result)
    assert not [line for line in lines if ": error:" in line], report(result)
    assert not [line for line in lines if "Unable to meet precondition" in line], report(result)
    analysed = [line for line in lines if line.endswith(ANALYSED)]
    assert len(analysed) == posts, report(result)


# -- the spec's contracts hold ----------------------------------------------------


@pytest.mark.slow
def test_scheduler_contracts_hold(
    runs: Mapping[str, Future[subprocess.CompletedProcess[str]]],
) -> None:
    """CrossHair finds no counterexample to any contract line outside the worker actions."""
    functions = contracted_functions()
    posts = sum(n for name, n in functions.items() if name not in worker_function_names())
    assert_contracts_hold(finished(runs, "scheduler"), posts)


@pytest.mark.slow
def test_worker_contracts_hold(
    runs: Mapping[str, Future[subprocess.CompletedProcess[str]]],
) -> None:
    """CrossHair finds no counterexample to any contract line of take_batch, probe_group, post."""
    functions = contracted_functions()
    posts = sum(functions[name] for name in worker_function_names())
    assert_contracts_hold(finished(runs, "worker"), posts)


@pytest.mark.slow
def test_check_harness_reports_a_planted_bug(
    runs: Mapping[str, Future[subprocess.CompletedProcess[str]]], planted: Path
) -> None:
    """The same crosshair check command reports the seed bug on its contract line."""
    result = finished(runs, "planted")
    bug = BUGS["flush_without_revalidation"]
    line = _line_of(planted, bug)
    assert result.returncode == 1, report(result)
    assert f"flush_without_revalidation.py:{line}: error: false when calling flush(" in (
        result.stdout
    ), report(result)


def test_every_action_states_the_invariants() -> None:
    """Each action needs well_formed and its enabling predicate, and promises well_formed."""
    for transition in TRANSITIONS.values():
        lines = contract_lines(transition.apply)
        assert "pre: well_formed(state)" in lines, transition.apply.__name__
        assert f"pre: {transition.enabled.__name__}(state, action)" in lines
        assert "post: well_formed(__return__[0])" in lines, transition.apply.__name__


def test_contract_check_covers_every_action() -> None:
    """The check's targets include every action function of the transition table."""
    functions = contracted_functions()
    for transition in TRANSITIONS.values():
        assert f"asynclookup.spec.core.{transition.apply.__name__}" in functions


def unresolved_names(fn: Callable[..., object]) -> set[str]:
    """The names a contract line of ``fn`` reads that CrossHair could not resolve: not
    a parameter, ``__return__``, a comprehension variable, a builtin, or a global of
    ``fn``'s module (CrossHair evaluates the lines in those globals)."""
    known = {*inspect.signature(fn).parameters, "__return__", "__old__"}
    missing: set[str] = set()
    for line in contract_lines(fn):
        tree = ast.parse(line.split(":", 1)[1].strip(), mode="eval")
        names = [n for n in ast.walk(tree) if isinstance(n, ast.Name)]
        bound = {n.id for n in names if isinstance(n.ctx, ast.Store)}
        missing |= {
            n.id for n in names
            if n.id not in known | bound and n.id not in fn.__globals__
            and not hasattr(builtins, n.id)
        }
    return missing


def test_contract_names_resolve_in_their_module(planted: Path) -> None:
    """Every name a contract line of spec/ or of a broken action reads is defined where
    CrossHair looks for it, so no line fails on a missing import instead of its rule."""
    functions = [
        getattr(importlib.import_module(name.rsplit(".", 1)[0]), name.rsplit(".", 1)[1])
        for name in contracted_functions()
    ]
    functions += [
        getattr(broken.load(planted / f"{b.module}.py"), b.function) for b in BUGS.values()
    ]
    assert {f.__qualname__: unresolved_names(f) for f in functions if unresolved_names(f)} == {}


def test_unresolved_names_reports_a_missing_import() -> None:
    """The name check reports a contract helper that the function's module lacks."""

    def planted(state: State) -> State:
        """post: well_formed(__return__) and not_imported(state)
        post: all(k == k for k, _ in __return__.probes)
        """
        return state

    assert unresolved_names(planted) == {"not_imported"}


def sample_states(count: int) -> list[State]:
    """States from the small-scope factory, its symbolic choices made by a seeded coin."""
    coin = random.Random(0)

    def choice(typ: object, name: str = "") -> bool:
        return coin.random() < 0.5

    factory = cast(SymbolicFactory, choice)
    return [small_scope.state(factory) for _ in range(count)]


def test_small_scope_states_are_mostly_well_formed() -> None:
    """Most small-scope States meet the contracts' precondition, so few paths are wasted."""
    states = sample_states(2000)
    assert sum(map(well_formed, states)) > 0.6 * len(states)


def test_small_scope_states_enable_every_action() -> None:
    """Every action kind is enabled in some well-formed small-scope State."""
    examples: tuple[Action, ...] = (
        Lookup(b"a", "r"), Flush(), Cleanup("r"), MarkMiss((b"a",)), MarkPresent((b"a",)),
        Drain(), Shutdown(), TakeBatch(), Post(),
        *(ProbeGroup(answers) for answers in small_scope.ANSWERS),
    )
    states = [s for s in sample_states(2000) if well_formed(s)]
    kinds = {type(a) for s in states for a in examples if enabled(s, a)}
    assert kinds == set(TRANSITIONS)


# -- broken actions are refuted ---------------------------------------------------


def _line_of(planted: Path, bug: Bug) -> int:
    """The line number of ``post: expression`` in the generated bug module."""
    path = planted / f"{bug.module}.py"
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        if text.strip() == f"post: {bug.expression}":
            return number
    raise AssertionError(f"{path} has no line 'post: {bug.expression}'")


@pytest.mark.parametrize("name", sorted(BUGS))
def test_bug_carries_the_spec_contract(planted: Path, name: str) -> None:
    """The broken action's docstring, contract included, is the spec action's, word for word."""
    bug = BUGS[name]
    action = getattr(broken.load(planted / f"{name}.py"), bug.function)
    assert action.__doc__ == getattr(asynclookup.spec.core, bug.function).__doc__
    assert f"post: {bug.expression}" in contract_lines(action)


@pytest.mark.parametrize("name", sorted(BUGS))
def test_bug_runs_the_variant(planted: Path, name: str) -> None:
    """The broken action is its variant's table entry, not a copy of it: the bug is
    written once, in spec/variants.py, and differs from the spec's action."""
    module = broken.load(planted / f"{name}.py")
    entry = broken.PLANTED[name]
    assert module._BROKEN is VARIANTS[entry.variant].table[entry.action].apply
    assert module._BROKEN is not TRANSITIONS[entry.action].apply


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BUGS))
def test_crosshair_refutes_broken_action(
    runs: Mapping[str, Future[subprocess.CompletedProcess[str]]], planted: Path, name: str
) -> None:
    """CrossHair reports a counterexample to the line stating the rule the action breaks."""
    bug = BUGS[name]
    result = finished(runs, f"refute {name}")
    assert result.returncode == 1, report(result)
    expected = f"{name}.py:{_line_of(planted, bug)}: error: false when calling {bug.function}("
    assert expected in result.stdout, report(result)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BUGS))
def test_spec_action_survives_the_same_line(
    runs: Mapping[str, Future[subprocess.CompletedProcess[str]]], name: str
) -> None:
    """The same contract line is not refuted on the spec's own action."""
    result = finished(runs, f"control {name}")
    assert result.returncode == 0, report(result)
    assert "no counterexample" in result.stdout, report(result)


def test_refute_rejects_an_unknown_line() -> None:
    """The refute runner exits 2 with one line when the function has no such contract line."""
    result = refute("asynclookup.spec.core", "flush", "True", 1.0)
    assert result.returncode == 2, report(result)
    assert result.stderr.strip().count("\n") == 0
    assert "has no line 'post: True'" in result.stderr
