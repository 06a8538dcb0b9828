"""Faults: FaultyTier's injections, and real tiers failing under a running manager.

FaultyTier: its plans are a pure function of seed and call index, each fault
kind does what it says, hangs are bounded, and ``CallRecord.expected`` agrees
with the reference worker's own policy.  Real tiers: a filesystem root that
does not exist, is not a directory or becomes unreadable; a shard path that is
a file; files deleted while probes run; a redis-server killed (while a probe is
in flight) and restarted.  In every case the tier raises or answers, the
manager turns failures into misses, the worker stays alive, and the next probes
after recovery answer correctly.

Root ignores file permissions, so the unreadable-root tests, when run as root
(as CI does), also drop the effective uid to ``nobody`` while the probe runs.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import shutil
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import pytest

from asynclookup.reference import AsyncLookupManager, RequestContext, Tier
from asynclookup.reference.faulty import KINDS, Faults, FaultyTier, InjectedFault
from asynclookup.reference.fs_tier import FilesystemTier
from asynclookup.reference.redis_tier import RedisTier
from asynclookup.reference.tier import InMemoryTier
from asynclookup.reference.worker import ask_tier
from tests.event_checks import Watcher
from tests.redis_server import RedisServer

CTX = RequestContext("faults")
KEYS = [b"k%d" % i for i in range(6)]
NOBODY = 65534
WAIT = 10.0


def memory_with(present: Iterable[bytes]) -> InMemoryTier:
    """An in-memory tier holding ``present``."""
    tier = InMemoryTier()
    for key in present:
        tier.store(key)
    return tier


def only(kind: str, **extra: float) -> Faults:
    """Faults that inject ``kind`` on every call."""
    rates = {} if kind == "none" else {f"{kind}_rate": 1.0}
    return Faults(**{**rates, "hang_seconds": 0.001, **extra})


# -- FaultyTier ------------------------------------------------------------------------


def test_plans_are_a_function_of_seed_and_index() -> None:
    """Two wrappers with the same seed plan the same faults; another seed plans others."""
    faults = Faults(latency=(0.0, 0.01), raise_rate=0.3, short_rate=0.3)
    one = FaultyTier(InMemoryTier(), faults, seed=1)
    same = FaultyTier(InMemoryTier(), faults, seed=1)
    other = FaultyTier(InMemoryTier(), faults, seed=2)
    plans = [one.plan_for(i) for i in range(200)]
    assert plans == [same.plan_for(i) for i in range(200)]
    assert plans != [other.plan_for(i) for i in range(200)]


def test_rates_that_sum_above_one_are_rejected() -> None:
    """Fault rates are exclusive per call, so rates summing above 1 are a ValueError."""
    with pytest.raises(ValueError, match="sum to at most 1"):
        Faults(raise_rate=0.6, short_rate=0.6)


def test_latency_can_be_fixed_a_range_or_a_distribution() -> None:
    """A plan's latency is the fixed number, a draw from the range, or the function's draw."""
    tier = InMemoryTier()
    assert FaultyTier(tier, Faults(latency=0.002)).plan_for(0).latency == 0.002
    ranged = FaultyTier(tier, Faults(latency=(0.001, 0.003)))
    assert all(0.001 <= ranged.plan_for(i).latency <= 0.003 for i in range(50))
    drawn = FaultyTier(tier, Faults(latency=lambda rng: rng.expovariate(1000.0)), seed=4)
    assert len({drawn.plan_for(i).latency for i in range(50)}) == 50


def test_raise_fault_raises_without_asking_the_inner_tier() -> None:
    """A raise plan raises InjectedFault and records that the inner tier was not asked."""
    faulty = FaultyTier(memory_with([b"a"]), only("raise"))
    with pytest.raises(InjectedFault):
        faulty.batch_lookup([b"a"], CTX)
    assert faulty.calls[0].inner is None


def test_short_fault_drops_answers() -> None:
    """A short plan returns fewer answers than keys."""
    faulty = FaultyTier(memory_with([b"a"]), only("short"))
    assert len(list(faulty.batch_lookup(KEYS, CTX))) < len(KEYS)


def test_long_fault_adds_answers() -> None:
    """A long plan returns more answers than keys."""
    faulty = FaultyTier(memory_with([b"a"]), only("long"))
    assert len(list(faulty.batch_lookup(KEYS, CTX))) > len(KEYS)


def test_non_bool_fault_replaces_the_recorded_positions() -> None:
    """A non_bool plan puts non-bools exactly at the positions its record names."""
    faulty = FaultyTier(memory_with([b"k1"]), only("non_bool"))
    answer = list(faulty.batch_lookup(KEYS, CTX))
    bad = faulty.calls[0].bad_positions
    assert bad and [i for i, v in enumerate(answer) if type(v) is not bool] == list(bad)


def test_lazy_raise_fault_yields_some_answers_then_raises() -> None:
    """A lazy_raise plan returns an iterator that yields its head, then raises."""
    faulty = FaultyTier(memory_with([b"k0"]), only("lazy_raise"))
    answer = iter(faulty.batch_lookup(KEYS, CTX))
    head = faulty.calls[0].plan.detail
    assert [next(answer) for _ in range(min(head, len(KEYS)))] == [True] + [False] * (
        min(head, len(KEYS)) - 1
    )
    with pytest.raises(InjectedFault):
        next(answer)


def test_hang_is_bounded_and_then_answers() -> None:
    """A hang plan blocks for hang_seconds at most, then gives the inner answer."""
    faulty = FaultyTier(memory_with([b"k0"]), only("hang", hang_seconds=0.01))
    assert list(faulty.batch_lookup(KEYS[:2], CTX)) == [True, False]


def test_release_ends_a_long_hang_at_once() -> None:
    """release() ends a 60-second hang: the hanging call returns well within the bound."""
    faulty = FaultyTier(InMemoryTier(), only("hang", hang_seconds=60.0))
    caller = threading.Thread(target=faulty.batch_lookup, args=([b"a"], CTX))
    caller.start()
    faulty.release()
    caller.join(WAIT)
    assert not caller.is_alive()


def test_store_delete_contains_pass_through() -> None:
    """Only batch_lookup misbehaves: store, delete and contains reach the inner tier."""
    inner = InMemoryTier()
    faulty = FaultyTier(inner, only("raise"))
    faulty.store(b"a")
    assert inner.contains(b"a") and faulty.contains(b"a")
    faulty.delete(b"a")
    assert not inner.contains(b"a")


@pytest.mark.parametrize("kind", KINDS)
def test_expected_verdicts_agree_with_the_worker_policy(kind: str) -> None:
    """CallRecord.expected() is what the reference worker's ask_tier derives from the call."""
    faulty = FaultyTier(memory_with([b"k0", b"k3"]), only(kind), seed=9)
    answer = ask_tier(faulty, KEYS, CTX)
    assert tuple(answer.verdicts) == faulty.calls[0].expected()
    assert (answer.failure is None) == (kind in ("none", "hang"))


@pytest.mark.parametrize("kind", KINDS)
def test_manager_turns_each_fault_into_the_policy_verdicts(kind: str) -> None:
    """Through a stepped manager, each fault kind yields the policy's verdicts; the worker lives."""
    faulty = FaultyTier(memory_with([b"k0", b"k3"]), only(kind), seed=9)
    manager = AsyncLookupManager(faulty, mode="stepped")
    for key in KEYS:
        manager.lookup(key, CTX)
    manager.flush()
    assert manager.worker.take_batch() and manager.worker.probe_group() and manager.worker.post()
    manager.drain_results()
    assert tuple(manager.lookup(key, CTX) for key in KEYS) == faulty.calls[0].expected()
    assert manager.health().alive
    manager.shutdown()


# -- helpers for real tiers under a threaded manager ---------------------------------------


class GatedTier:
    """Wraps a tier; each probe announces itself, then waits for ``go`` before asking."""

    def __init__(self, inner: Tier) -> None:
        self.inner = inner
        self.name = f"gated({inner.name})"
        self.entered = threading.Event()
        self.go = threading.Event()

    def batch_lookup(self, keys: Sequence[bytes], request_context: RequestContext) -> list[bool]:
        self.entered.set()
        self.go.wait(WAIT)
        return list(self.inner.batch_lookup(keys, request_context))

    def store(self, key: bytes, value: bytes = b"") -> None:
        self.inner.store(key, value)

    def delete(self, key: bytes) -> None:
        self.inner.delete(key)

    def contains(self, key: bytes) -> bool:
        return self.inner.contains(key)


def ask_round(
    manager: AsyncLookupManager, watcher: Watcher, keys: Sequence[bytes], request: str
) -> list[bool | None]:
    """One step's lookups for a fresh request, then the verdicts once the worker posted."""
    context = RequestContext(request)
    for key in keys:
        manager.lookup(key, context)
    manager.flush()
    assert watcher.wait_until_posted(WAIT)
    manager.drain_results()
    verdicts = [manager.lookup(key, context) for key in keys]
    manager.cleanup(request)
    return verdicts


@contextlib.contextmanager
def unreadable(path: Path) -> Iterator[None]:
    """Make ``path`` unreadable to this process (as root: to nobody, our effective uid)."""
    mode = path.stat().st_mode
    path.chmod(0)
    as_root = os.geteuid() == 0
    if as_root:
        os.seteuid(NOBODY)
    try:
        yield
    finally:
        if as_root:
            os.seteuid(0)
        path.chmod(mode)


# -- filesystem ------------------------------------------------------------------------


def test_filesystem_root_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    """A missing root fails construction with FileNotFoundError naming the path."""
    with pytest.raises(FileNotFoundError, match="does not exist"):
        FilesystemTier(tmp_path / "missing")


def test_filesystem_root_that_is_a_file_is_an_error(tmp_path: Path) -> None:
    """A root that is a regular file fails construction with NotADirectoryError."""
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(NotADirectoryError, match="is not a directory"):
        FilesystemTier(tmp_path / "file")


def test_filesystem_probe_raises_while_the_root_is_unreadable(tmp_path: Path) -> None:
    """While the root is unreadable a probe raises PermissionError; afterwards it answers."""
    tier = FilesystemTier(tmp_path, sync=False)
    tier.store(b"k0")
    with unreadable(tmp_path), pytest.raises(PermissionError):
        tier.batch_lookup(KEYS, CTX)
    assert tier.batch_lookup(KEYS[:2], CTX) == [True, False]


def test_filesystem_probe_raises_when_the_root_vanishes(tmp_path: Path) -> None:
    """A root removed after construction makes probes raise rather than answer absent."""
    root = tmp_path / "root"
    root.mkdir()
    tier = FilesystemTier(root, sync=False)
    root.rename(tmp_path / "elsewhere")
    with pytest.raises(FileNotFoundError):
        tier.batch_lookup([b"k"], CTX)


def test_filesystem_shard_that_is_a_file_raises(tmp_path: Path) -> None:
    """A shard path that is a regular file is an I/O error, not a miss: the probe raises."""
    tier = FilesystemTier(tmp_path, sync=False)
    (tmp_path / FilesystemTier.digest(b"k")[:2]).write_bytes(b"")
    with pytest.raises(NotADirectoryError):
        tier.batch_lookup([b"k"], CTX)


def test_manager_misses_while_the_root_is_unreadable_then_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Probes during an unreadable root become misses with a warning; later ones answer True."""
    tier = FilesystemTier(tmp_path, sync=False)
    tier.store(b"k0")
    watcher = Watcher()
    with AsyncLookupManager(tier, observer=watcher) as manager:
        with unreadable(tmp_path), caplog.at_level(logging.WARNING):
            assert ask_round(manager, watcher, [b"k0"], "during") == [False]
        assert "PermissionError" in caplog.text
        assert manager.health().alive
        assert ask_round(manager, watcher, [b"k0"], "after") == [True]


def test_files_deleted_while_probes_run_give_answers_not_errors(tmp_path: Path) -> None:
    """Probes racing the deletion of files and shards answer bools; a key once gone stays gone."""
    tier = FilesystemTier(tmp_path, sync=False)
    keys = [b"d%d" % i for i in range(3000)]
    for key in keys:
        tier.store(key)
    started, done = threading.Event(), threading.Event()

    def delete_everything() -> None:
        started.wait(WAIT)
        for i, shard in enumerate(sorted(tmp_path.iterdir())):
            if i % 2:
                shutil.rmtree(shard)  # the shard directory itself goes
            else:
                for block in shard.iterdir():
                    block.unlink()  # only the files go
        done.set()

    deleter = threading.Thread(target=delete_everything)
    deleter.start()
    gone: set[bytes] = set()
    rounds = 0
    while not done.is_set() or rounds == 0:
        started.set()
        answers = tier.batch_lookup(keys, CTX)
        assert all(type(a) is bool for a in answers)
        assert not any(a for key, a in zip(keys, answers, strict=True) if key in gone)
        gone.update(key for key, a in zip(keys, answers, strict=True) if not a)
        rounds += 1
    deleter.join(WAIT)
    assert tier.batch_lookup(keys, CTX) == [False] * len(keys)


def test_manager_probe_in_flight_while_its_files_are_deleted(tmp_path: Path) -> None:
    """Files deleted while their probe is in flight yield misses, and the worker lives on."""
    fs = FilesystemTier(tmp_path, sync=False)
    for key in KEYS:
        fs.store(key)
    gated, watcher = GatedTier(fs), Watcher()
    with AsyncLookupManager(gated, observer=watcher) as manager:
        context = RequestContext("r")
        for key in KEYS:
            manager.lookup(key, context)
        manager.flush()
        assert gated.entered.wait(WAIT)
        for shard in tmp_path.iterdir():
            shutil.rmtree(shard)
        gated.go.set()
        assert watcher.wait_until_posted(WAIT)
        manager.drain_results()
        assert [manager.lookup(key, context) for key in KEYS] == [False] * len(KEYS)
        assert manager.health().alive


# -- redis -----------------------------------------------------------------------------


def redis_connection_error() -> type[Exception]:
    """redis-py's ConnectionError (imported late: redis-py is optional)."""
    error: type[Exception] = importlib.import_module("redis.exceptions").ConnectionError
    return error


def test_redis_probe_raises_while_down_and_reconnects_after_restart(
    fresh_redis_server: RedisServer,
) -> None:
    """A killed server makes batch_lookup raise; after a restart the same tier answers again."""
    tier = RedisTier(fresh_redis_server.url)
    tier.store(b"a")
    assert tier.batch_lookup([b"a"], CTX) == [True]
    fresh_redis_server.kill()
    with pytest.raises(redis_connection_error()):
        tier.batch_lookup([b"a"], CTX)
    fresh_redis_server.restart()
    assert tier.batch_lookup([b"a"], CTX) == [False]  # persistence is off: the block is gone
    tier.store(b"a")
    assert tier.batch_lookup([b"a", b"b"], CTX) == [True, False]


def test_manager_survives_redis_killed_mid_probe_and_recovers(
    fresh_redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A server killed while a probe is in flight gives misses; after restart, probes answer."""
    redis_tier = RedisTier(fresh_redis_server.url)
    redis_tier.store(b"a")
    gated, watcher = GatedTier(redis_tier), Watcher()
    with AsyncLookupManager(gated, observer=watcher) as manager:
        context = RequestContext("r1")
        manager.lookup(b"a", context)
        manager.flush()
        assert gated.entered.wait(WAIT)
        fresh_redis_server.kill()
        with caplog.at_level(logging.WARNING):
            gated.go.set()
            assert watcher.wait_until_posted(WAIT)
        manager.drain_results()
        assert manager.lookup(b"a", context) is False
        assert "ConnectionError" in caplog.text
        manager.cleanup("r1")
        assert ask_round(manager, watcher, [b"a", b"b"], "r2") == [False, False]  # still down
        assert manager.health().alive
        fresh_redis_server.restart()
        redis_tier.store(b"a")
        assert ask_round(manager, watcher, [b"a", b"b"], "r3") == [True, False]
