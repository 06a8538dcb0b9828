"""The exceptions of asynclookup's tools, under one root: ``AsyncLookupError``.

Each tool raises its own subclass, defined beside the code that raises it and
re-exported here so that a user imports them from one place.  The root itself
lives in ``asynclookup.spec.errors`` (the bottom of the dependency order); the
reference implementation keeps its own builtin-based errors.
"""

from asynclookup._args import UsageError
from asynclookup.conformance.driver import ConformanceError
from asynclookup.conformance.targets.adapter import TierFault
from asynclookup.observe.interface import OracleLimitError
from asynclookup.spec.errors import AsyncLookupError, ProtocolError
from asynclookup.trace.check import CheckLimitError
from asynclookup.trace.format import TraceFormatError

__all__ = [
    "AsyncLookupError",
    "CheckLimitError",
    "ConformanceError",
    "OracleLimitError",
    "ProtocolError",
    "TierFault",
    "TraceFormatError",
    "UsageError",
]
