"""The reference's public exceptions.

Misuse of the manager is reported with builtin types where Python already has
the right one (``TypeError`` for a key that is not bytes, ``ValueError`` for a
negative timeout).  The one error of its own is ``ManagerClosedError``: any call
after ``shutdown()``.  Tier failures are never raised: the worker turns them
into misses and logs a warning (see ``asynclookup.reference.worker``).
"""

from __future__ import annotations


class ManagerClosedError(RuntimeError):
    """A manager method was called after ``shutdown()``: the manager is closed."""

    def __init__(self, action: str) -> None:
        super().__init__(
            f"AsyncLookupManager is closed: {action}() was called after shutdown()"
        )
        self.action = action
