"""The one exception root of asynclookup, and the spec's own error.

``AsyncLookupError`` is the root of every error the package's tools raise
(the model checker, the oracle, the trace checker, the command line), so a
user can catch them all at once.  It lives here, at the bottom of the
dependency order, because everything else imports the spec and the spec
imports nothing of theirs.  The reference implementation raises builtin
types and ``ManagerClosedError`` of its own: it imports nothing of this package.
"""


class AsyncLookupError(Exception):
    """The root of every asynclookup error."""


class ProtocolError(AsyncLookupError):
    """An action was applied to a state in which it is not enabled."""
