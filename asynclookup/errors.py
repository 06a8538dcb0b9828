"""The exceptions of asynclookup's tools, under one root: ``AsyncLookupError``.

Each tool raises its own subclass, defined beside the code that raises it and
re-exported here so that a user imports them from one place; where callers
expect a builtin (``ValueError`` for bad input, ``RuntimeError``,
``AssertionError`` for a failed check), it is a second base.  The root itself
lives in ``asynclookup.spec.errors`` (the bottom of the dependency order); the
reference implementation keeps its own builtin-based errors.
tests/test_layout.py checks that every exception class of the package is
under the root.
"""

from asynclookup._cli import UsageError
from asynclookup.conformance.counterexample import ConformanceError
from asynclookup.conformance.regression._paths import RegressionError
from asynclookup.conformance.targets.adapter import TierFault
from asynclookup.conformance.targets.vllm import AdapterClosedError, IUTRaised
from asynclookup.observe.interface import OracleLimitError
from asynclookup.spec.errors import AsyncLookupError, ProtocolError
from asynclookup.trace.check import CheckLimitError
from asynclookup.trace.format import TraceFormatError
from asynclookup.trace.split import PartError

__all__ = [
    "AdapterClosedError",
    "AsyncLookupError",
    "CheckLimitError",
    "ConformanceError",
    "IUTRaised",
    "OracleLimitError",
    "PartError",
    "ProtocolError",
    "RegressionError",
    "TierFault",
    "TraceFormatError",
    "UsageError",
]


def __getattr__(name: str) -> type[AdapterClosedError]:
    """``ManagerClosedError``, this module's older name for ``AdapterClosedError``, still
    imports (with a DeprecationWarning): the reference's own error of that name is
    ``asynclookup.reference.ManagerClosedError`` (docs/glossary.md)."""
    if name == "ManagerClosedError":
        import warnings

        warnings.warn(
            "asynclookup.errors.ManagerClosedError is now AdapterClosedError (the oracle "
            "adapter's error); the reference's is asynclookup.reference.ManagerClosedError",
            DeprecationWarning, stacklevel=2,
        )
        return AdapterClosedError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
