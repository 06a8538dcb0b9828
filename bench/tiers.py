"""Benchmark: the real tiers' batch_lookup against the bare loop it replaces.

Filesystem: ``FilesystemTier.batch_lookup`` of N keys (default 10,000, a
fraction ``--hits`` of them stored, default 0.5) against a bare ``os.stat``
loop over the same N block paths, computed in advance.  Redis:
``RedisTier.batch_lookup`` of N keys against a bare redis-py pipeline of
``EXISTS`` over the same Redis keys, on a redis-server this script starts
(persistence off) unless ``--redis-url`` is given.

Each side runs ``--repeat`` times, interleaved; the best time of each counts.
The ratio is the tier's throughput over the bare loop's (>= 1: the tier is
faster; the target is >= 0.8), by wall clock and by this process's CPU time
(steadier on a busy machine; for Redis it leaves out the server's share).

Usage (from the repository root)::

    .venv/bin/python bench/tiers.py [--keys 10000] [--repeat 9] [--hits 0.5]
                                    [--only filesystem|redis] [--redis-url URL]

The hit fraction matters for the filesystem: the bare loop pays an exception
per absent path, the tier pays a BLAKE2s hash per key (its paths are not given to
it).  This script measures; it asserts nothing and writes nothing outside a
temporary directory.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asynclookup.reference.fs_tier import FilesystemTier
from asynclookup.reference.redis_tier import RedisTier
from asynclookup.reference.tier import RequestContext

CTX = RequestContext("bench")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"bench/tiers.py: {message}\n")


Timing = tuple[float, float]  # best wall seconds, best CPU seconds


def best_of(repeat: int, *contestants: Callable[[], object]) -> list[Timing]:
    """The best wall and CPU time of each contestant over ``repeat`` interleaved rounds."""
    wall: list[list[float]] = [[] for _ in contestants]
    cpu: list[list[float]] = [[] for _ in contestants]
    for _ in range(repeat):
        for i, run in enumerate(contestants):
            started, started_cpu = time.perf_counter(), time.process_time()
            run()
            wall[i].append(time.perf_counter() - started)
            cpu[i].append(time.process_time() - started_cpu)
    return [(min(w), min(c)) for w, c in zip(wall, cpu, strict=True)]


def report(name: str, n: int, tier: Timing, bare: Timing, bare_name: str) -> None:
    """One result line: both wall times, the tier's throughput, and both ratios."""
    print(
        f"{name:<22} {n:>6} keys  tier {tier[0] * 1e3:7.1f} ms ({n / tier[0]:>9,.0f} keys/s)  "
        f"{bare_name} {bare[0] * 1e3:7.1f} ms  "
        f"ratio wall {bare[0] / tier[0]:4.2f} cpu {bare[1] / max(tier[1], 1e-9):4.2f}"
    )


def bench_filesystem(keys: list[bytes], hits: float, repeat: int) -> None:
    """FilesystemTier.batch_lookup vs a bare os.stat loop over precomputed paths."""
    with tempfile.TemporaryDirectory(prefix="bench-fs-") as root:
        tier = FilesystemTier(root, sync=False)
        stored = keys[: round(len(keys) * hits)]
        for key in stored:
            tier.store(key)
        paths = [tier.path_of(key) for key in keys]

        def bare() -> list[bool]:
            out = []
            for path in paths:
                try:
                    os.stat(path)
                except FileNotFoundError:
                    out.append(False)
                    continue
                out.append(True)
            return out

        assert bare() == tier.batch_lookup(keys, CTX)
        tier_t, bare_t = best_of(repeat, lambda: tier.batch_lookup(keys, CTX), bare)
        report(f"filesystem (hits {hits:.0%})", len(keys), tier_t, bare_t, "os.stat loop")


def bench_redis(keys: list[bytes], hits: float, repeat: int, url: str | None) -> None:
    """RedisTier.batch_lookup vs a bare redis-py pipeline of EXISTS over the same keys."""
    with tempfile.TemporaryDirectory(prefix="bench-redis-") as scratch:
        server: Any = None
        if url is None:
            from tests.redis_server import RedisServer  # a test helper; no pytest needed

            server = RedisServer(Path(scratch))
            server.start()
            url = server.url
        try:
            tier = RedisTier(url, prefix=b"bench:")
            client = tier.client
            names = [tier.redis_key(key) for key in keys]
            pipe = client.pipeline(transaction=False)
            for name in names[: round(len(names) * hits)]:
                pipe.set(name, b"")
            pipe.execute()

            def bare() -> list[Any]:
                p = client.pipeline(transaction=False)
                for name in names:
                    p.exists(name)
                result: list[Any] = p.execute()
                return result

            assert [n == 1 for n in bare()] == tier.batch_lookup(keys, CTX)
            tier_t, bare_t = best_of(repeat, lambda: tier.batch_lookup(keys, CTX), bare)
            report(f"redis (hits {hits:.0%})", len(keys), tier_t, bare_t, "EXISTS pipeline")
            client.delete(*names)
            tier.close()
        finally:
            if server is not None:
                server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(description="Tier batch_lookup vs the bare loop it replaces.")
    parser.add_argument("--keys", type=int, default=10_000, help="batch size (default 10000)")
    parser.add_argument("--repeat", type=int, default=9, help="rounds per side (default 9)")
    parser.add_argument("--hits", type=float, default=0.5,
                        help="fraction of the batch that is stored (default 0.5)")
    parser.add_argument("--only", choices=["filesystem", "redis"], help="run one tier only")
    parser.add_argument("--redis-url", help="use this server instead of starting one")
    args = parser.parse_args(argv)
    if args.keys < 1 or args.repeat < 1:
        parser.error("--keys and --repeat must be at least 1")
    if not 0.0 <= args.hits <= 1.0:
        parser.error(f"--hits must be between 0 and 1, got {args.hits}")
    keys = [os.urandom(16) for _ in range(args.keys)]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus; best of {args.repeat}")
    if args.only in (None, "filesystem"):
        bench_filesystem(keys, args.hits, args.repeat)
    if args.only in (None, "redis"):
        bench_redis(keys, args.hits, args.repeat, args.redis_url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
