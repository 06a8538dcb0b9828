"""A throwaway redis-server for tests and benchmarks: start, kill -9, restart, stop.

``RedisServer`` runs the ``redis-server`` binary on a free loopback port with its
working directory in a given temporary directory and persistence off
(``--save '' --appendonly no``), so nothing outlives the test.  ``start`` waits,
with a bound, until the server logs that it is ready and answers PING on a raw
socket; a reader thread drains the server's log into a queue, so the wait is a
``queue.get`` with a deadline, never a sleep.  ``kill`` sends SIGKILL (a crash,
not a shutdown) and ``restart`` starts a new server on the same port: an empty
one, since nothing was persisted.

This module does not import pytest or redis-py: the pytest fixtures live in
``tests/conftest.py``, and ``bench/tiers.py`` uses this module directly.
"""

from __future__ import annotations

import contextlib
import queue
import shutil
import socket
import subprocess
import threading
import time
from collections import deque
from pathlib import Path
from types import TracebackType

READY_LINE = "Ready to accept connections"


class RedisServerError(RuntimeError):
    """The server could not be started or did not answer in time."""


def redis_server_binary() -> str | None:
    """The path of ``redis-server`` on PATH, or None."""
    return shutil.which("redis-server")


def free_port() -> int:
    """A loopback TCP port that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def ping(port: int, timeout: float = 1.0) -> bool:
    """Whether a server on ``port`` answers PING with PONG within ``timeout``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One redis-server process on 127.0.0.1, in ``directory``, without persistence."""

    def __init__(self, directory: Path, binary: str | None = None) -> None:
        found = binary or redis_server_binary()
        if found is None:
            raise RedisServerError("redis-server is not on PATH")
        self.binary = found
        self.directory = Path(directory)
        self.port: int | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._log: deque[str] = deque(maxlen=50)

    @property
    def url(self) -> str:
        """The ``redis://`` URL of the server."""
        if self.port is None:
            raise RedisServerError("the server was never started")
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 10.0) -> None:
        """Start on a free port (the last one, after ``kill``); wait until it answers."""
        if self.running:
            raise RedisServerError(f"redis-server already runs on port {self.port}")
        fixed = self.port is not None
        attempts = 1 if fixed else 5
        for _ in range(attempts):
            port = self.port if self.port is not None else free_port()
            if self._launch(port, timeout):
                self.port = port
                return
            self._reap()
        tail = " | ".join(self._log)
        raise RedisServerError(f"redis-server did not start on 127.0.0.1 ({tail})")

    def _launch(self, port: int, timeout: float) -> bool:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._proc = subprocess.Popen(
            [
                self.binary, "--port", str(port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", str(self.directory),
                "--daemonize", "no", "--logfile", "",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(
            target=self._drain, args=(self._proc, lines), name=f"redis-log-{port}", daemon=True
        ).start()
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return False
            if line is None:
                return False  # the server exited (port taken, bad option, ...)
            if READY_LINE in line:
                return ping(port, timeout=max(0.1, deadline - time.monotonic()))

    def _drain(self, proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
        """Keep reading the server's log so its pipe never fills; None marks the end."""
        assert proc.stdout is not None
        with proc.stdout:
            for line in proc.stdout:
                self._log.append(line.rstrip())
                lines.put(line)
        lines.put(None)

    def kill(self) -> None:
        """SIGKILL the server and reap it: a crash, no shutdown handshake."""
        if self._proc is not None:
            self._proc.kill()
        self._reap()

    def restart(self, timeout: float = 10.0) -> None:
        """Start a fresh (empty) server on the same port as before."""
        if self.running:
            self.kill()
        self.start(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after ``timeout``) and reap it."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._reap()

    def _reap(self) -> None:
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(10.0)
            self._proc = None  # its log reader closes the pipe at end of file

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"RedisServer(port={self.port}, running={self.running})"
