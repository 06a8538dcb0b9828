"""The tier contract, run against every tier: in-memory, filesystem, Redis.

store, contains, delete and batch_lookup agree with each other and with a plain
set; batches of 0, 1 and 10,000 keys; duplicate keys; keys of every byte value;
a block that a probe reports present is complete (no torn reads).  The Redis
tier runs against a real redis-server started by the suite (see conftest.py).

Tier-specific behaviour (layout, configuration, isolation) follows the contract.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from asynclookup.reference.fs_tier import FilesystemTier
from asynclookup.reference.redis_tier import RedisTier
from asynclookup.reference.tier import InMemoryTier, RequestContext, Tier
from tests.redis_server import RedisServer

CTX = RequestContext("contract")
TIERS = ["memory", "filesystem", "redis"]


@pytest.fixture(params=TIERS)
def tier(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tier]:
    """Each tier, empty."""
    kind: str = request.param
    if kind == "memory":
        yield InMemoryTier()
    elif kind == "filesystem":
        root = tmp_path / "blocks"
        root.mkdir()
        yield FilesystemTier(root, sync=False)
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        redis_tier = RedisTier(server.url, prefix=f"contract:{uuid.uuid4().hex}:")
        yield redis_tier
        redis_tier.close()


def load(tier: Tier) -> Callable[[bytes], bytes | None]:
    """The tier's block reader: ``load`` where the tier has one."""
    reader = getattr(tier, "load", None)
    if reader is not None:
        return reader  # type: ignore[no-any-return]
    assert isinstance(tier, InMemoryTier)
    memory: Any = tier  # InMemoryTier has no load(): read its dict under its lock

    def read(key: bytes) -> bytes | None:
        with memory._lock:
            value: bytes | None = memory._blocks.get(key)
            return value

    return read


def ask(tier: Tier, keys: list[bytes]) -> list[bool]:
    """The tier's batch answer, materialised."""
    return list(tier.batch_lookup(keys, CTX))


# -- the contract ----------------------------------------------------------------


def test_fresh_key_is_absent(tier: Tier) -> None:
    """A key never stored is absent to contains and to batch_lookup."""
    assert not tier.contains(b"never")
    assert ask(tier, [b"never"]) == [False]


def test_store_makes_key_present(tier: Tier) -> None:
    """After store, contains and batch_lookup report the key present."""
    tier.store(b"k", b"block")
    assert tier.contains(b"k")
    assert ask(tier, [b"k"]) == [True]


def test_delete_makes_key_absent(tier: Tier) -> None:
    """After delete, contains and batch_lookup report the key absent."""
    tier.store(b"k")
    tier.delete(b"k")
    assert not tier.contains(b"k")
    assert ask(tier, [b"k"]) == [False]


def test_delete_of_an_absent_key_is_not_an_error(tier: Tier) -> None:
    """Deleting a key that was never stored does nothing and raises nothing."""
    tier.delete(b"absent")
    assert not tier.contains(b"absent")


def test_store_over_a_present_key_replaces_its_block(tier: Tier) -> None:
    """Storing a present key again keeps it present with the new block."""
    tier.store(b"k", b"old")
    tier.store(b"k", b"new")
    assert ask(tier, [b"k"]) == [True]
    assert load(tier)(b"k") == b"new"


def test_empty_batch_gets_an_empty_answer(tier: Tier) -> None:
    """A batch of 0 keys is answered with no verdicts."""
    assert ask(tier, []) == []


def test_batch_answers_are_bools(tier: Tier) -> None:
    """Every answer of batch_lookup is a bool, present or not."""
    tier.store(b"yes")
    assert [type(v) for v in ask(tier, [b"yes", b"no"])] == [bool, bool]


def test_ten_thousand_key_batch_matches_the_stored_set(tier: Tier) -> None:
    """A batch of 10,000 keys answers, in order, exactly the keys that were stored."""
    keys = [f"block-{i}".encode() for i in range(10_000)]
    stored = set(keys[::3])
    for key in stored:
        tier.store(key)
    assert ask(tier, keys) == [key in stored for key in keys]


def test_duplicate_keys_in_one_batch_get_one_answer_each(tier: Tier) -> None:
    """A key repeated in a batch is answered at every position, identically."""
    tier.store(b"p")
    keys = [b"p", b"q", b"p", b"p", b"q"]
    assert ask(tier, keys) == [True, False, True, True, False]


def test_keys_of_every_byte_value_are_distinct_blocks(tier: Tier) -> None:
    """Binary keys (every byte value, the empty key, path-like bytes) are kept apart."""
    keys = [bytes([b]) for b in range(256)]
    keys += [b"", bytes(range(256)), b"\x00" * 7, b"../up", b"a/b", b"\xff\xfe", b"A", b"a"]
    stored = set(keys[::2])
    for key in stored:
        tier.store(key, key)
    assert ask(tier, keys) == [key in stored for key in keys]
    assert [tier.contains(key) for key in keys] == [key in stored for key in keys]
    assert all(load(tier)(key) == key for key in stored)


def test_operations_agree_with_a_set(tier: Tier) -> None:
    """A random run of store/delete/contains/batch_lookup agrees with a plain set."""
    rng = random.Random(7)
    universe = [bytes([i]) * (i % 4 + 1) for i in range(12)]
    model: set[bytes] = set()
    for _ in range(300):
        op = rng.choice(["store", "delete", "contains", "batch"])
        key = rng.choice(universe)
        if op == "store":
            tier.store(key)
            model.add(key)
        elif op == "delete":
            tier.delete(key)
            model.discard(key)
        elif op == "contains":
            assert tier.contains(key) == (key in model)
        else:
            batch = rng.choices(universe, k=rng.randint(0, 20))
            assert ask(tier, batch) == [k in model for k in batch]


def first_sight(tier: Tier, key: bytes, done: threading.Event, timeout: float = 10.0) -> bytes:
    """Probe ``key`` until it is present, then return its block as loaded right away.

    Gives up (empty bytes) once ``done`` is set and the key is still absent, or
    after ``timeout`` seconds of probing.
    """
    reader = load(tier)
    stop = threading.Event()
    timer = threading.Timer(timeout, stop.set)
    timer.start()
    try:
        while not stop.is_set():
            finished = done.is_set()
            if ask(tier, [key])[0]:
                return reader(key) or b""
            if finished:
                return b""
        return b""
    finally:
        timer.cancel()


def test_concurrent_store_and_probe_never_see_a_torn_block(tier: Tier) -> None:
    """A block a probe reports present is already complete, while a writer stores it."""
    blocks = {f"big-{i}".encode(): bytes([i]) * 300_000 for i in range(8)}
    seen: dict[bytes, bytes] = {}
    done = threading.Event()

    def probe_all() -> None:
        for key in blocks:
            seen[key] = first_sight(tier, key, done)

    prober = threading.Thread(target=probe_all)
    prober.start()
    for key, value in blocks.items():
        tier.store(key, value)
    done.set()
    prober.join(30)
    assert not prober.is_alive()
    assert seen == blocks


class InPlaceFilesystemTier(FilesystemTier):
    """A planted bug: stores write the block file in place, in two halves."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, sync=False)
        self.half_written = threading.Event()
        self.may_finish = threading.Event()

    def store(self, key: bytes, value: bytes = b"") -> None:
        path = Path(self.path_of(key))
        path.parent.mkdir(exist_ok=True)
        with open(path, "wb") as f:
            f.write(value[: len(value) // 2])
            f.flush()
            self.half_written.set()
            self.may_finish.wait(10)
            f.write(value[len(value) // 2 :])


def test_torn_read_check_catches_an_in_place_store(tmp_path: Path) -> None:
    """The first-sight check reports a torn block when a store is not atomic."""
    tier = InPlaceFilesystemTier(tmp_path)
    writer = threading.Thread(target=tier.store, args=(b"k", b"x" * 1000))
    writer.start()
    try:
        assert tier.half_written.wait(10)
        assert first_sight(tier, b"k", threading.Event()) == b"x" * 500
    finally:
        tier.may_finish.set()
        writer.join(10)


# -- filesystem specifics -----------------------------------------------------------


def test_filesystem_layout_is_shard_then_rest_of_the_digest(tmp_path: Path) -> None:
    """A block lives at <root>/<digest[:2]>/<digest[2:]> with the key's SHA-256 hex digest."""
    tier = FilesystemTier(tmp_path, sync=False)
    tier.store(b"k", b"block")
    digest = FilesystemTier.digest(b"k")
    assert (tmp_path / digest[:2] / digest[2:]).read_bytes() == b"block"
    assert tier.path_of(b"k") == str(tmp_path / digest[:2] / digest[2:])


def test_filesystem_store_leaves_no_temporary_file(tmp_path: Path) -> None:
    """A finished store, synced or not, leaves only the block file in its shard."""
    tier = FilesystemTier(tmp_path)  # sync=True: the fsync path
    tier.store(b"k", b"block")
    assert [p.name for p in Path(tier.path_of(b"k")).parent.iterdir()] == [
        Path(tier.path_of(b"k")).name
    ]


def test_filesystem_leftover_temporary_files_are_not_blocks(tmp_path: Path) -> None:
    """A temporary file left by a crashed store is never reported as a block."""
    tier = FilesystemTier(tmp_path, sync=False)
    digest = FilesystemTier.digest(b"k")
    (tmp_path / digest[:2]).mkdir()
    (tmp_path / digest[:2] / ".tmp-crashed").write_bytes(b"half")
    assert ask(tier, [b"k"]) == [False]


# -- redis specifics --------------------------------------------------------------


def test_redis_prefixes_keep_tiers_apart(redis_server: RedisServer) -> None:
    """Two Redis tiers with different prefixes on one server do not see each other's blocks."""
    left = RedisTier(redis_server.url, prefix=f"left:{uuid.uuid4().hex}:")
    right = RedisTier(redis_server.url, prefix=f"right:{uuid.uuid4().hex}:")
    left.store(b"k")
    assert ask(left, [b"k"]) == [True]
    assert ask(right, [b"k"]) == [False]


def test_redis_block_is_stored_under_prefix_plus_key(redis_server: RedisServer) -> None:
    """The block of key k is the Redis string value at prefix + k, binary-safe."""
    tier = RedisTier(redis_server.url, prefix="p:")
    tier.store(b"\x00\xff", b"block")
    assert tier.redis_key(b"\x00\xff") == b"p:\x00\xff"
    assert tier.client.get(b"p:\x00\xff") == b"block"
    tier.delete(b"\x00\xff")


def test_redis_batch_is_one_pipeline_round_trip(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """batch_lookup of 100 keys sends one non-transactional pipeline and nothing else."""
    tier = RedisTier(redis_server.url, prefix=f"rt:{uuid.uuid4().hex}:")
    executions: list[int] = []
    real_pipeline = tier.client.pipeline

    def counting_pipeline(transaction: bool = True) -> Any:
        assert transaction is False
        pipe = real_pipeline(transaction=transaction)
        real_execute = pipe.execute

        def execute() -> Any:
            executions.append(len(pipe.command_stack))
            return real_execute()

        pipe.execute = execute
        return pipe

    monkeypatch.setattr(tier.client, "pipeline", counting_pipeline)
    monkeypatch.setattr(tier.client, "execute_command", None)  # any direct command fails
    assert ask(tier, [b"k%d" % i for i in range(100)]) == [False] * 100
    assert executions == [100]


@pytest.mark.usefixtures("redis_server")
def test_redis_empty_batch_sends_nothing() -> None:
    """An empty batch is answered without talking to the server (here: a dead port)."""
    tier = RedisTier("redis://127.0.0.1:1/0", connect_timeout=0.2)
    assert ask(tier, []) == []


def test_redis_rejects_nonpositive_timeouts() -> None:
    """A zero or negative timeout is a ValueError at construction, naming the argument."""
    with pytest.raises(ValueError, match="socket_timeout=0"):
        RedisTier(socket_timeout=0)


def test_reference_imports_without_redis_py() -> None:
    """Without redis-py, ``import reference`` works and RedisTier says what to install."""
    script = (
        "import sys; sys.modules['redis'] = None\n"
        "import asynclookup.reference, asynclookup.reference.redis_tier\n"
        "import asynclookup.reference.fs_tier, asynclookup.reference.faulty\n"
        "try:\n"
        "    asynclookup.reference.redis_tier.RedisTier()\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
        cwd=Path(__file__).resolve().parents[1], check=True,
    )
    assert "pip install 'asynclookup[redis]'" in out.stdout
