"""The package's layout: one namespace, dependencies that point one way, no import circles."""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "asynclookup"

# What each part of the package may import besides the standard library and itself.
ALLOWED: dict[str, tuple[str, ...]] = {
    "asynclookup.spec": (),
    "asynclookup.reference": ("redis",),
    "asynclookup.modelcheck": ("asynclookup.spec", "asynclookup._cli"),
    "asynclookup.observe": ("asynclookup.spec",),
    "asynclookup.conformance": (
        "asynclookup.spec", "asynclookup.observe", "asynclookup.reference", "asynclookup._cli",
        "hypothesis", "redis",
    ),
    # orjson, msgspec: the optional ``fast`` extra (check-trace --parser orjson/msgspec)
    "asynclookup.trace": (
        "asynclookup.spec", "asynclookup.observe", "asynclookup._cli", "orjson", "msgspec",
    ),
    "asynclookup._cli": ("asynclookup.spec",),
    "asynclookup.examples": (),  # example classes for a first run: standard library only
}
# One module besides: the pytest plugin (a pytest11 entry point) imports pytest, which
# only a pytest session loads it in; nothing else of the package may.
MODULE_EXTRA: dict[str, tuple[str, ...]] = {
    "asynclookup.conformance.pytest_plugin": ("pytest",),
}
TOOLS_ABOVE = (
    "asynclookup.modelcheck", "asynclookup.observe", "asynclookup.conformance", "asynclookup.trace",
)


def _modules(root: Path = PACKAGE, package: str = "asynclookup") -> Iterator[tuple[str, Path]]:
    """Every module of the package, by dotted name, following the spec/ and reference/ links."""
    for path in sorted(root.iterdir()):
        if path.is_dir() and (path / "__init__.py").exists():
            yield from _modules(path, f"{package}.{path.name}")
        elif path.suffix == ".py":
            yield (package if path.stem == "__init__" else f"{package}.{path.stem}"), path


MODULES = dict(_modules())


def _imports(name: str, path: Path) -> set[str]:
    """The modules ``name`` imports anywhere in its file, function bodies included."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
    found.discard("__future__")
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _part(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _is_stdlib(module: str) -> bool:
    return module.split(".")[0] in sys.stdlib_module_names


def test_every_part_is_a_package_of_the_namespace() -> None:
    """spec, reference and each checker import as asynclookup subpackages."""
    for part in ALLOWED:
        assert part in MODULES, f"{part} is missing"


def test_no_import_circle() -> None:
    """No module of the package reaches itself through imports, function-level ones included."""
    inside = {m: {i for i in GRAPH[m] if i in MODULES} for m in GRAPH}
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(inside[module]):
            if state.get(target) == 1:
                cycle = [*path[path.index(target):], target]
                pytest.fail("import circle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(inside):
        if module not in state:
            visit(module, [module])


@pytest.mark.parametrize("part", sorted(ALLOWED))
def test_each_part_imports_only_what_it_may(part: str) -> None:
    """The protocol imports only the standard library; nothing imports what sits above it."""
    for module, imported in sorted(GRAPH.items()):
        if _part(module) != part:
            continue
        for target in sorted(imported):
            allowed = (part, *ALLOWED[part], *MODULE_EXTRA.get(module, ()))
            ok = _is_stdlib(target) or any(
                target == a or target.startswith(a + ".") for a in allowed
            )
            assert ok, f"{module} imports {target}; {part} may import only {allowed}"


def test_no_module_imports_tests_or_the_dev_tools() -> None:
    """No installed module imports tests/, bench/ or docgen/ (they are not installed)."""
    for module, imported in GRAPH.items():
        bad = {t for t in imported if t.split(".")[0] in {"tests", "bench", "docgen"}}
        assert not bad, f"{module} imports {sorted(bad)}"


def test_no_tool_imports_the_examples() -> None:
    """asynclookup.examples is for users to point the oracle at: no other module imports it."""
    for module, imported in GRAPH.items():
        if _part(module) != "asynclookup.examples":
            assert not {t for t in imported if _part(t) == "asynclookup.examples"}, module


def test_no_module_imports_the_generic_top_level_names() -> None:
    """Nothing imports a top-level ``spec`` or ``reference``: those names are not installed."""
    offenders = []
    folders = [PACKAGE, ROOT / "tests", ROOT / "docgen", ROOT / "bench"]
    for path in [p for folder in folders for p in folder.rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [a.name for a in node.names] if isinstance(node, ast.Import)
                else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            offenders += [f"{path}: {n}" for n in names if n.split(".")[0] in {"spec", "reference"}]
    assert not offenders, offenders


def test_checkers_never_import_each_others_internals_upward() -> None:
    """The model checker imports no other checker; the spec imports no checker."""
    for module, imported in GRAPH.items():
        if _part(module) == "asynclookup.modelcheck":
            assert not {t for t in imported if _part(t) in TOOLS_ABOVE[1:]}, module


def test_the_trace_checker_judges_with_the_engine_not_the_oracle() -> None:
    """trace/ imports observe/ and the spec, never conformance/: the engine is not the oracle's."""
    parts = {_part(t) for m, got in GRAPH.items() if _part(m) == "asynclookup.trace" for t in got}
    assert "asynclookup.observe" in parts
    assert "asynclookup.conformance" not in parts


def test_the_engine_imports_only_the_spec() -> None:
    """observe/ imports the spec and the standard library only: it drives nothing."""
    for module, imported in GRAPH.items():
        if _part(module) == "asynclookup.observe":
            parts = {_part(t) for t in imported if not _is_stdlib(t)}
            assert parts <= {"asynclookup.observe", "asynclookup.spec"}, (module, parts)


def test_no_engine_twin_outside_observe() -> None:
    """Only asynclookup.observe defines an engine (a class with ``observe`` and ``resume``)."""
    twins = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
                if {"observe", "resume"} <= methods and _part(module) != "asynclookup.observe":
                    twins.append(f"{module}.{node.name}")
    assert not twins, twins


def _defined_classes() -> Iterator[tuple[str, type]]:
    """Every class each module of the package (reference/ aside) defines, imported."""
    for module in sorted(MODULES):
        if _part(module) == "asynclookup.reference":
            continue
        loaded = importlib.import_module(module)
        for value in vars(loaded).values():
            if isinstance(value, type) and value.__module__ == module:
                yield module, value


def test_every_exception_is_under_the_root() -> None:
    """Every exception a tool defines derives from AsyncLookupError: one ``except`` catches all.

    (A BaseException that is not an Exception is a signal, not an error: the
    campaign's stop is a KeyboardInterrupt so that Hypothesis lets it through.)
    """
    from asynclookup.spec.errors import AsyncLookupError

    outside = [f"{m}.{c.__name__}" for m, c in _defined_classes()
               if issubclass(c, Exception) and not issubclass(c, AsyncLookupError)]
    assert not outside, outside


def test_one_exit_code_table() -> None:
    """Only asynclookup._cli defines exit codes (names EXIT_*); every command uses that table."""
    owners = set()
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = node.targets if isinstance(node, ast.Assign) else []
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            if any(name.startswith("EXIT_") for name in names):
                owners.add(module)
    assert owners == {"asynclookup._cli"}, owners


def _bare_exit_codes(source: str) -> list[str]:
    """Exit codes written as integer literals: ``return N`` in a function annotated
    ``-> int``, ``sys.exit(N)``, ``exit(N)`` or ``SystemExit(N)``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.returns is not None and (
            ast.unparse(node.returns) == "int"
        ):
            found += [
                f"line {r.lineno}: {ast.unparse(r)}" for r in ast.walk(node)
                if isinstance(r, ast.Return) and isinstance(r.value, ast.Constant)
                and type(r.value.value) is int
            ]
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in {
            "sys.exit", "exit", "SystemExit"
        } and any(isinstance(a, ast.Constant) and type(a.value) is int for a in node.args):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_every_command_exits_through_the_table() -> None:
    """No command module writes an exit code as a number: every one is an EXIT_* name."""
    commands = [m for m in MODULES if m == "asynclookup.cli" or m.endswith(".cli")]
    assert {"asynclookup.cli", "asynclookup.modelcheck.cli", "asynclookup.trace.cli"} <= set(
        commands
    )
    bare = {m: _bare_exit_codes(MODULES[m].read_text()) for m in commands}
    assert {m: found for m, found in bare.items() if found} == {}


def test_bare_exit_codes_are_found_in_a_planted_command() -> None:
    """The exit-code check reports a literal return, sys.exit and SystemExit, not a table name."""
    planted = (
        "import sys\n"
        "def run(args) -> int:\n"
        "    if args:\n"
        "        return 2\n"
        "    return EXIT_HOLDS\n"
        "def main() -> None:\n"
        "    sys.exit(1)\n"
        "def stop() -> None:\n"
        "    raise SystemExit(3)\n"
    )
    assert _bare_exit_codes(planted) == [
        "line 4: return 2", "line 7: sys.exit(1)", "line 9: SystemExit(3)"
    ]


def _nested_exceptions(source: str) -> list[str]:
    """The classes of ``source`` nested in a function or a class whose bases read as
    exceptions (a name ending in Error, Exception, Interrupt or Exit)."""
    tree = ast.parse(source)
    top = {id(node) for node in tree.body}
    nested = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and id(node) not in top:
            bases = [ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases]
            if any(b.endswith(("Error", "Exception", "Interrupt", "Exit")) for b in bases):
                nested.append(node.name)
    return nested


def test_no_exception_class_is_defined_inside_a_function_or_class() -> None:
    """Every exception class is a module's own (so the root check above imports and sees it):
    none is nested in a function or a class, where no import reaches it."""
    nested = {
        module: _nested_exceptions(path.read_text()) for module, path in MODULES.items()
        if _part(module) != "asynclookup.reference"
    }
    assert {m: found for m, found in nested.items() if found} == {}


def test_nested_exceptions_are_found_in_a_planted_module() -> None:
    """The nesting check reports an exception class inside a function, not a module's own."""
    planted = (
        "class Top(ValueError): ...\n"
        "def parse() -> None:\n"
        "    class _BadArgument(ValueError): ...\n"
        "class Machine:\n"
        "    class Helper: ...\n"
    )
    assert _nested_exceptions(planted) == ["_BadArgument"]
