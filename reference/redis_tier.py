"""RedisTier: blocks as Redis string values under a key prefix, probed in one round trip.

Layout: the block of key ``k`` is the Redis key ``prefix + k`` (Redis keys are
binary-safe, so every byte value works; nothing is hashed).  ``store`` is one
``SET``, ``delete`` one ``DEL``, ``contains`` one ``EXISTS``.  ``batch_lookup``
sends one ``EXISTS`` per key in a non-transactional pipeline: the whole batch is
one round trip, and each answer is the key's state at the instant the server ran
its command.  An empty batch sends nothing.

Failure behaviour: a refused or lost connection, or a reply slower than
``socket_timeout``, raises redis-py's ``ConnectionError`` / ``TimeoutError`` from
the call (the manager's worker turns that into misses for the group).  By
default nothing is retried inside a call, so a dead server costs one failed
connect per call rather than a backoff; the connection pool drops the broken
connection, and the next call connects afresh, so probes answer again as soon
as the server is back.

redis-py is an optional dependency (the ``redis`` extra): it is imported when a
``RedisTier`` is built, never when ``reference`` is imported.

This module does not start or manage a server, and sets no expiry on blocks.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from asynclookup.reference.tier import RequestContext

DEFAULT_URL = "redis://127.0.0.1:6379/0"
DEFAULT_PREFIX = b"asynclookup:block:"


def _redis() -> Any:
    """The redis-py package, or an ImportError that says how to install it."""
    try:
        return importlib.import_module("redis")
    except ImportError as exc:
        raise ImportError(
            "RedisTier needs redis-py: pip install 'asynclookup[redis]' (or 'redis>=5')"
        ) from exc


class RedisTier:
    """Blocks stored in Redis under ``prefix``; one pipeline round trip per batch."""

    name = "redis"

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        prefix: bytes | str = DEFAULT_PREFIX,
        socket_timeout: float = 1.0,
        connect_timeout: float = 1.0,
        retries: int = 0,
    ) -> None:
        """Talk to the server at ``url`` (``redis://``, ``rediss://`` or ``unix://``).

        ``socket_timeout``: seconds a command may wait for its reply.
        ``connect_timeout``: seconds a connection attempt may take.
        ``retries``: extra attempts of a call on a connection error or timeout
        (no backoff).  Nothing connects until the first call.
        """
        if socket_timeout <= 0 or connect_timeout <= 0:
            raise ValueError(
                f"RedisTier: timeouts must be > 0, got socket_timeout={socket_timeout} "
                f"and connect_timeout={connect_timeout}"
            )
        if retries < 0:
            raise ValueError(f"RedisTier: retries must be >= 0, got {retries}")
        redis = _redis()
        retry_module = importlib.import_module("redis.retry")
        backoff_module = importlib.import_module("redis.backoff")
        self.prefix = prefix.encode() if isinstance(prefix, str) else bytes(prefix)
        self.url = url
        # The redis-py client: thread-safe, pooled; public for administration.
        self.client: Any = redis.Redis.from_url(
            url,
            socket_timeout=socket_timeout,
            socket_connect_timeout=connect_timeout,
            retry=retry_module.Retry(backoff_module.NoBackoff(), retries),
            decode_responses=False,
        )

    def redis_key(self, key: bytes) -> bytes:
        """The Redis key that holds ``key``'s block."""
        return self.prefix + key

    def batch_lookup(
        self, keys: Sequence[bytes], request_context: RequestContext
    ) -> list[bool]:
        """One verdict per key, in order, from one pipelined round trip."""
        if not keys:
            return []
        prefix = self.prefix
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.exists(prefix + key)
        return [n == 1 for n in pipe.execute()]

    def store(self, key: bytes, value: bytes = b"") -> None:
        """``SET`` the block; Redis applies it atomically."""
        self.client.set(self.prefix + key, value)

    def delete(self, key: bytes) -> None:
        """``DEL`` the block; an absent block is not an error."""
        self.client.delete(self.prefix + key)

    def contains(self, key: bytes) -> bool:
        """Whether the block exists now."""
        return bool(self.client.exists(self.prefix + key))

    def load(self, key: bytes) -> bytes | None:
        """The block, or None when it is absent."""
        value: bytes | None = self.client.get(self.prefix + key)
        return value

    def close(self) -> None:
        """Close the pooled connections; a later call opens new ones."""
        self.client.close()

    def __repr__(self) -> str:
        return f"RedisTier({self.url!r}, prefix={self.prefix!r})"
