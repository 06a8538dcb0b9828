"""Shared pytest fixtures.

Redis: ``redis_server`` is one server for the session (tests isolate themselves
with their own key prefixes); ``fresh_redis_server`` is a server of one test's
own, for tests that kill and restart it.  Both need the ``redis-server`` binary
and redis-py.  When either is missing the test is skipped with one line, unless
``CI=true``: then it fails, because CI must run the Redis tests.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.redis_server import RedisServer, redis_server_binary


def require_redis() -> None:
    """Skip (locally) or fail (under CI=true) when redis-server or redis-py is missing."""
    missing = []
    if redis_server_binary() is None:
        missing.append("redis-server is not on PATH")
    if importlib.util.find_spec("redis") is None:
        missing.append("redis-py is not installed (pip install 'asynclookup[redis]')")
    if not missing:
        return
    reason = "; ".join(missing)
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}: CI=true requires the Redis tests to run", pytrace=False)
    pytest.skip(f"Redis tests skipped: {reason}")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server on a free loopback port for the whole session, persistence off."""
    require_redis()
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
def fresh_redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own, free to be killed and restarted."""
    require_redis()
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def outside(tmp_path: Path) -> Iterator[Path]:
    """A directory outside the project, importable for the test's duration."""
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))


def write_module(where: Path, name: str, source: str) -> str:
    """Write ``source`` as module ``name`` in ``where`` (an ``outside`` directory), forget
    any module of that name imported before, and return the name."""
    (where / f"{name}.py").write_text(source)
    sys.modules.pop(name, None)
    return name
