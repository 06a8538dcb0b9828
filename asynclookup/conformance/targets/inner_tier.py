"""The real tier behind the oracle's tier (``--tier fs|redis``): made by its name, cleaned up.

``OracleTier`` (``asynclookup.conformance.targets.adapter``) takes its proper
verdicts from the plan's bits, or from an ``inner`` tier of the reference
(``asynclookup.reference.fs_tier``, ``asynclookup.reference.redis_tier``) that the
oracle fills itself.  ``make_inner_tier`` makes that tier from its name;
``dispose_inner_tier`` removes what it left behind once the run is over.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from typing import Any


def make_inner_tier(tier: str, url: str | None = None) -> Any:
    """A real tier for ``--tier fs|redis`` (None for ``memory``: the oracle's bits)."""
    if tier == "memory":
        return None
    if tier == "fs":
        from asynclookup.reference.fs_tier import FilesystemTier

        root = tempfile.mkdtemp(prefix="asynclookup-fuzz-")
        return FilesystemTier(root, sync=False)
    if tier == "redis":
        from asynclookup.reference.redis_tier import DEFAULT_URL, RedisTier

        prefix = f"asynclookup:fuzz:{os.getpid()}:".encode()
        return RedisTier(url or DEFAULT_URL, prefix=prefix)
    raise ValueError(f"unknown tier {tier!r}")


def dispose_inner_tier(inner: Any, keys: Sequence[bytes] = ()) -> None:
    """Remove what a real tier left behind: the fs root, or ``keys`` from redis."""
    if inner is None:
        return
    root = getattr(inner, "root", None)
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)
        return
    for key in keys:
        inner.delete(key)
    close = getattr(inner, "close", None)
    if close is not None:
        close()
