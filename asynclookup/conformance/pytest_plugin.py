"""The conformance oracle as a pytest plugin, installed as a ``pytest11`` entry point.

Installing asynclookup registers it (the entry point is named by this module, so
``-p asynclookup.conformance.pytest_plugin`` finds it rather than loading it a
second time); a maintainer then has two ways in, next to
``asynclookup.conformance.testcase.conformance_test_case``:

- from the command line, with no test file of their own::

      pytest --asynclookup-impl=mypkg.lookup:Manager [--asynclookup-method CALL=NAME ...]

  adds one test item, ``asynclookup[mypkg.lookup:Manager]``, that fuzzes
  the class as ``asynclookup fuzz --impl`` does (the shape options are fuzz's,
  prefixed ``--asynclookup-``) and fails with the shrunk counterexample;

- in their suite, the fixture ``asynclookup_fuzz``, a function that fuzzes one
  class and raises the counterexample (an AssertionError)::

      def test_manager_conforms(asynclookup_fuzz):
          asynclookup_fuzz("mypkg.lookup:Manager", impl_args={"n_lookup_threads": 1})

  ``--asynclookup-examples``, ``--asynclookup-seed``, ``--asynclookup-faults`` and
  ``--asynclookup-strict-efficiency`` are its defaults too, so CI can run longer.

Bad options are a usage error (pytest exits 4, one line saying which).  The
plugin loads in every pytest session of an environment asynclookup is
installed in, so it imports nothing heavy until it runs: Hypothesis and the
oracle load only when a conformance test does.  It writes what a fuzz run
writes: nothing but Hypothesis's cache (docs/oracle.md, "What a run writes").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from asynclookup.conformance.machine import Stats
    from asynclookup.conformance.targets.target import FuzzTarget

PREFIX = "--asynclookup-"
DEFAULT_EXAMPLES = 100
# fuzz's shape options, as a misfit's hint names them (the longest first: --impl-arg)
_FLAGS = re.compile(
    r"--(impl-arg|impl|method|cleanup-arg|verdicts|tables|drain-before-lookup)\b")


def pytest_addoption(parser: pytest.Parser) -> None:
    """The plugin's options, in a group of their own (``pytest --help``)."""
    group = parser.getgroup("asynclookup", "the asynclookup conformance oracle")
    group.addoption(f"{PREFIX}impl", metavar="MODULE:CLASS",
                    help="fuzz this vLLM-shaped class as one test item (asynclookup fuzz --impl)")
    group.addoption(f"{PREFIX}method", action="append", default=[], metavar="CALL=NAME",
                    help="as fuzz --method: the class's name for a protocol call (NAME none: "
                    "it has none); repeatable")
    group.addoption(f"{PREFIX}cleanup-arg", choices=("id", "context"),
                    help="as fuzz --cleanup-arg: what cleanup takes")
    group.addoption(f"{PREFIX}verdicts", metavar="MODULE:FUNC",
                    help="as fuzz --verdicts: maps lookup's answers to True/False/None")
    group.addoption(f"{PREFIX}tables", metavar="ROLE=ATTR,...",
                    help="as fuzz --tables: the class's tables")
    group.addoption(f"{PREFIX}impl-arg", action="append", default=[], metavar="NAME=VALUE",
                    help="as fuzz --impl-arg: a constructor keyword argument, VALUE a Python "
                    "literal; repeatable")
    group.addoption(f"{PREFIX}drain-before-lookup", action="store_true",
                    help="as fuzz --drain-before-lookup")
    group.addoption(f"{PREFIX}faults", default="all", metavar="KINDS",
                    help="as fuzz --faults (default all)")
    group.addoption(f"{PREFIX}examples", type=int, default=DEFAULT_EXAMPLES, metavar="N",
                    help=f"Hypothesis examples per run (default {DEFAULT_EXAMPLES})")
    group.addoption(f"{PREFIX}seed", type=int, default=None, metavar="S",
                    help="seed Hypothesis (reproducible runs)")
    group.addoption(f"{PREFIX}strict-efficiency", action="store_true",
                    help="property 8 (no redundant probe) fails the run instead of warning")


def pytest_configure(config: pytest.Config) -> None:
    """Check the options now, so that a bad one is one usage line, not a failed test."""
    config.addinivalue_line(
        "markers", "asynclookup: a test that fuzzes an implementation with the oracle")
    if config.getoption(f"{PREFIX}examples") < 1:
        raise pytest.UsageError(f"asynclookup: {PREFIX}examples: want a positive number")
    impl = config.getoption(f"{PREFIX}impl")
    try:
        _faults(config.getoption(f"{PREFIX}faults"))
        if impl is not None:
            from asynclookup.conformance.targets.vllm import load_impl

            load_impl(_command_line_target(config))  # a misfit: one line saying what fits
    except ValueError as exc:  # its hints name fuzz's options: say them as pytest's
        said = _FLAGS.sub(PREFIX + r"\1", str(exc))
        raise pytest.UsageError(f"asynclookup: {said}") from None
    if impl is None:
        given = [name for name in ("method", "impl-arg") if config.getoption(PREFIX + name)]
        given += [name for name in ("cleanup-arg", "verdicts", "tables", "drain-before-lookup")
                  if config.getoption(PREFIX + name)]
        if given:
            raise pytest.UsageError(
                f"asynclookup: {PREFIX}{given[0]} is an option of {PREFIX}impl")


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """With ``--asynclookup-impl``, add its test item after the suite's own."""
    impl = config.getoption(f"{PREFIX}impl")
    if impl is not None:
        items.append(ConformanceItem.from_parent(
            session, name=f"asynclookup[{impl}]", target=_command_line_target(config)))


class ConformanceItem(pytest.Item):
    """One fuzz run of the ``--asynclookup-impl`` class; fails with its counterexample."""

    def __init__(self, *, target: FuzzTarget, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.add_marker("asynclookup")

    def runtest(self) -> None:
        stats = _fuzz(self.config, self.target)
        self.user_properties.append(("asynclookup", f"{stats.examples} examples, "
                                     f"{stats.steps} steps, no violation"))

    def repr_failure(  # type: ignore[override]
        self, excinfo: pytest.ExceptionInfo[BaseException]
    ) -> str:
        """The counterexample as the CLI prints it, without pytest's traceback."""
        from asynclookup.conformance.counterexample import ConformanceError

        if isinstance(excinfo.value, ConformanceError):
            return f"{self.target}: VIOLATION\n{excinfo.value}"
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[str, int | None, str]:
        return "asynclookup", None, f"asynclookup fuzz --impl {self.target.impl_text()}"


@pytest.fixture
def asynclookup_fuzz(pytestconfig: pytest.Config) -> Callable[..., Stats]:
    """A function fuzzing one vLLM-shaped class: ``asynclookup_fuzz("mod:Class", **options)``.

    The options are ``conformance_test_case``'s (``methods``, ``cleanup_arg``,
    ``verdicts``, ``tables``, ``impl_args``, ``drain_before_lookup``, ``faults``,
    ``examples``, ``steps``, ``seed``, ``strict_efficiency``, ``shrink``); those not
    given come from the ``--asynclookup-*`` options.  It returns the run's stats, or
    raises the shrunk counterexample (an AssertionError).
    """

    def fuzz(
        impl: str | type[Any] | FuzzTarget,
        *,
        methods: str | Sequence[str] | Mapping[str, str] = (),
        cleanup_arg: str | None = None,
        verdicts: str | None = None,
        tables: str | Sequence[str] | Mapping[str, str] = (),
        impl_args: Mapping[str, Any] | Sequence[str] = (),
        drain_before_lookup: bool = False,
        **run: Any,
    ) -> Stats:
        from asynclookup.conformance.testcase import impl_target

        target = impl_target(
            impl, methods=methods, cleanup_arg=cleanup_arg, verdicts=verdicts, tables=tables,
            impl_args=impl_args, drain_before_lookup=drain_before_lookup,
        )
        return _fuzz(pytestconfig, target, **run)

    return fuzz


# -- plumbing ---------------------------------------------------------------------------


def _command_line_target(config: pytest.Config) -> FuzzTarget:
    from asynclookup.conformance.targets.target import FuzzTarget

    option = config.getoption
    return FuzzTarget.impl(
        option(f"{PREFIX}impl"), methods=option(f"{PREFIX}method"),
        cleanup_arg=option(f"{PREFIX}cleanup-arg"), verdicts=option(f"{PREFIX}verdicts"),
        tables=option(f"{PREFIX}tables") or (), args=option(f"{PREFIX}impl-arg"),
        drain_before_lookup=option(f"{PREFIX}drain-before-lookup"),
    )


def _faults(text: str) -> str:
    from asynclookup.conformance.targets.adapter import faults_text

    try:
        return faults_text(text)
    except ValueError as exc:
        raise ValueError(f"{PREFIX}faults: {exc}") from None


def _fuzz(config: pytest.Config, target: FuzzTarget, **run: Any) -> Stats:
    """Fuzz ``target`` with the command line's run options, ``run`` overriding them."""
    from asynclookup.conformance.testcase import check_conformance

    option = config.getoption
    settings: dict[str, Any] = {
        "faults": _faults(option(f"{PREFIX}faults")),
        "examples": option(f"{PREFIX}examples"),
        "seed": option(f"{PREFIX}seed"),
        "strict_efficiency": option(f"{PREFIX}strict-efficiency"),
    }
    return check_conformance(target, **(settings | run))
