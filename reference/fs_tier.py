"""FilesystemTier: one file per block under a root directory, probed in batches.

Layout: the block of key ``k`` is the file ``<root>/<h[:2]>/<h[2:]>`` where
``h`` is the BLAKE2s-256 hex digest of ``k``: 256 shard directories, created on the
first store into them and never removed by the tier.  A store writes a
temporary file (``.tmp-*``) in the shard directory, optionally fsyncs it, then
renames it over the block's name, so a probe that sees the name sees a complete
block: temporary names never look like block names.

``batch_lookup`` opens the root once, then asks one ``faccessat(F_OK)`` per
distinct key, relative to the root's descriptor and as the effective user (like
``open``): no path walk from ``/``, no exception and no stat structure per
absent key.  ``faccessat`` cannot say *why*
a name is absent, so the first miss in each shard is confirmed with one
``stat``: ENOENT is a real miss, any other error (permission, a shard path that
is not a directory, I/O) is raised, and the manager's worker turns it into
misses.  A root that vanished raises too.

Every answer is the state of its file at some instant during the call: a rename
or an unlink is atomic, and each name is checked once.

Listing shards (``scandir``) instead was measured and rejected: listing one
entry costs about as much as checking one name, so a listing only pays when a
batch names more keys than the shard holds, and its cost grows with the tier
rather than with the batch (docs/tiers.md).

This module does not decide what a failed probe means (the worker does), does
not evict, and does not remove empty shard directories.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Sequence

from asynclookup.reference.tier import RequestContext

_TMP_PREFIX = ".tmp-"  # never a hex digit: a temporary file never looks like a block
# A descriptor only to resolve names against (O_PATH where the OS has it).
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_PATH", 0)


def _confirm_absent(name: str, dir_fd: int) -> None:
    """Raise unless ``name`` is absent for the plain reason (ENOENT) or present now."""
    with contextlib.suppress(FileNotFoundError):
        os.stat(name, dir_fd=dir_fd)


class FilesystemTier:
    """Blocks as files under ``root``, one per key, in 256 shard directories."""

    name = "filesystem"

    def __init__(self, root: str | os.PathLike[str], *, sync: bool = True) -> None:
        """Use ``root`` (an existing directory) as the tier.

        ``sync``: fsync each stored file and its shard directory (durability
        across a crash; atomicity holds either way).
        """
        path = os.path.abspath(os.fspath(root))
        if not os.path.exists(path):
            raise FileNotFoundError(f"FilesystemTier: root {path!r} does not exist")
        if not os.path.isdir(path):
            raise NotADirectoryError(f"FilesystemTier: root {path!r} is not a directory")
        self.root = path
        self.sync = sync

    # -- layout --------------------------------------------------------------

    @staticmethod
    def digest(key: bytes) -> str:
        """The hex digest that names ``key``'s block."""
        return hashlib.blake2s(key).hexdigest()

    def path_of(self, key: bytes) -> str:
        """The path of ``key``'s block file (which may not exist)."""
        h = hashlib.blake2s(key).hexdigest()
        return f"{self.root}/{h[:2]}/{h[2:]}"

    # -- the probe ---------------------------------------------------------------

    def batch_lookup(
        self, keys: Sequence[bytes], request_context: RequestContext
    ) -> list[bool]:
        """One verdict per key, in order; each distinct key is checked once."""
        blake2s, access, exists = hashlib.blake2s, os.access, os.F_OK
        root_fd = os.open(self.root, _DIR_FLAGS)
        try:
            digests = {key: blake2s(key).hexdigest() for key in keys}  # also drops duplicates
            answers = {
                key: access(f"{h[:2]}/{h[2:]}", exists, dir_fd=root_fd, effective_ids=True)
                for key, h in digests.items()
            }
            confirmed: set[str] = set()  # shards whose misses are known to be real
            for key, present in answers.items():
                shard = digests[key][:2]
                if not present and shard not in confirmed:
                    _confirm_absent(f"{shard}/{digests[key][2:]}", root_fd)
                    confirmed.add(shard)
        finally:
            os.close(root_fd)
        return [answers[key] for key in keys]

    # -- setting the tier up -----------------------------------------------------

    def store(self, key: bytes, value: bytes = b"") -> None:
        """Write ``key``'s block atomically: temporary file, (fsync,) rename."""
        path = self.path_of(key)
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(value)
                if self.sync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        if self.sync:
            dir_fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    def delete(self, key: bytes) -> None:
        """Remove ``key``'s block; an absent block is not an error."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path_of(key))

    def contains(self, key: bytes) -> bool:
        """Whether ``key``'s block exists now."""
        try:
            os.stat(self.path_of(key))
        except FileNotFoundError:
            return False
        return True

    def load(self, key: bytes) -> bytes | None:
        """``key``'s block, or None when it is absent."""
        try:
            with open(self.path_of(key), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def __repr__(self) -> str:
        return f"FilesystemTier({self.root!r}, sync={self.sync})"
