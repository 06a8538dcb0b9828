"""The recorders: reference traces on every tier conform; the vLLM wrapper records what happened."""

from __future__ import annotations

import io
import json
import random
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from asynclookup.reference.events import Event, EventRecorder
from asynclookup.reference.faulty import Faults, FaultyTier
from asynclookup.reference.fs_tier import FilesystemTier
from asynclookup.reference.tier import InMemoryTier, RequestContext, Tier
from asynclookup.reference.trace import (
    TraceWriter,
    VllmRecorder,
    _reference_answer,
    record_trace,
    record_vllm,
)
from asynclookup.trace.check import Outcome, check_lines
from tests.redis_server import RedisServer
from tests.zoo.vllm_shaped import VllmShapedManager

KEYS = [bytes([c]) for c in b"abcdefghijkl"]
REQUESTS = ["r1", "r2", "r3"]
ALL_FAULTS = Faults(
    latency=(0.0, 0.0005), raise_rate=0.1, short_rate=0.1, long_rate=0.05,
    non_bool_rate=0.1, lazy_raise_rate=0.1,
)


class Progress:
    """An observer that lets the scheduler wait (bounded) until the worker caught up."""

    def __init__(self) -> None:
        self.submitted = self.taken = self.finished = self.posted = 0
        self.changed = threading.Condition()

    def __call__(self, event: Event) -> None:
        with self.changed:
            if event.kind == "flush" and event.fields["submitted"]:
                self.submitted += 1
            self.taken += event.kind == "take_batch"
            self.finished += event.kind == "tier_call_finished"
            self.posted += event.kind == "post"
            self.changed.notify_all()

    def wait(self) -> None:
        """Until every submitted batch is taken and every finished call posted, or 2 s."""
        with self.changed:
            self.changed.wait_for(
                lambda: self.taken == self.submitted and self.posted == self.finished, 2.0
            )


def workload(
    manager: Any, tier: Tier, seed: int, steps: int = 120, progress: Progress | None = None
) -> None:
    """Random scheduler steps (seeded), with the tier's contents changing between them.

    With ``progress``, every few steps the scheduler lets the worker catch up, so
    that the trace holds many tier calls interleaved with scheduler calls.
    """
    rng = random.Random(seed)
    for _ in range(steps):
        if progress is not None and rng.random() < 0.6:
            progress.wait()
        for _ in range(rng.randint(0, 4)):
            manager.lookup(rng.choice(KEYS), RequestContext(rng.choice(REQUESTS)))
        roll = rng.random()
        if roll < 0.4:
            manager.cleanup(rng.choice(REQUESTS))
        elif roll < 0.45:
            manager.mark_miss([rng.choice(KEYS)])
        elif roll < 0.5:
            manager.mark_present([rng.choice(KEYS)])
        elif roll < 0.6:
            manager.drain_results()
        if rng.random() < 0.2:
            tier.store(rng.choice(KEYS))
        if rng.random() < 0.2:
            tier.delete(rng.choice(KEYS))
        manager.flush()


def checked(path: Path) -> Outcome:
    with path.open("rb") as f:
        return check_lines(f)


@pytest.fixture(params=["memory", "filesystem", "redis", "faulty"])
def tier(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tier]:
    """Each tier the reference ships, and a faulty one with every fault kind."""
    if request.param == "memory":
        yield InMemoryTier()
    elif request.param == "filesystem":
        (tmp_path / "blocks").mkdir()
        yield FilesystemTier(tmp_path / "blocks", sync=False)
    elif request.param == "redis":
        from asynclookup.reference.redis_tier import RedisTier

        server: RedisServer = request.getfixturevalue("redis_server")
        yield RedisTier(server.url, prefix=f"trace:{uuid.uuid4().hex}:")
    else:
        faulty = FaultyTier(InMemoryTier(), ALL_FAULTS, seed=7)
        yield faulty
        faulty.release()


def test_reference_trace_under_threads_conforms_on_each_tier(tier: Tier, tmp_path: Path) -> None:
    """A trace of the threaded reference on this tier is accepted by check-trace."""
    path = tmp_path / "ref.jsonl"
    progress = Progress()
    with record_trace(path, tier, observer=progress) as manager:
        workload(manager, tier, seed=1, progress=progress)
    outcome = checked(path)
    assert outcome.result == "conforming", (outcome.found, outcome.error)
    assert outcome.counts["tier_call_finished"] > 10


def test_reference_stepped_trace_conforms_with_worker_steps(tmp_path: Path) -> None:
    """A stepped-mode reference trace records take_batch and post, and conforms."""
    path = tmp_path / "ref.jsonl"
    tier = FaultyTier(InMemoryTier(), ALL_FAULTS, seed=3)
    with record_trace(path, tier, mode="stepped") as manager:
        for seed in range(20):
            workload(manager, tier, seed=seed, steps=5)
            manager.worker.run_pending()
    outcome = checked(path)
    assert outcome.result == "conforming", (outcome.found, outcome.error)
    assert outcome.header is not None and outcome.header.worker_steps
    assert outcome.counts["take_batch"] > 0 and outcome.counts["post"] > 0


def test_record_trace_shares_events_with_another_observer(tmp_path: Path) -> None:
    """record_trace's extra observer sees every event the trace holds."""
    seen = EventRecorder()
    path = tmp_path / "ref.jsonl"
    with record_trace(path, InMemoryTier(), mode="stepped", observer=seen) as manager:
        manager.lookup(b"k", RequestContext("r"))
        manager.flush()
    body = path.read_text().splitlines()[1:]
    assert [json.loads(line)["event"] for line in body] == seen.kinds()


def test_trace_writer_numbers_lines_in_file_order_across_threads() -> None:
    """Events written concurrently by several threads get seq numbers in file order."""
    out = io.StringIO()
    writer = TraceWriter(out, recorder="t", worker_steps=False)
    go = threading.Barrier(4)

    def burst() -> None:
        go.wait()
        for _ in range(300):
            writer.write("drain")

    threads = [threading.Thread(target=burst) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seqs = [json.loads(line)["seq"] for line in out.getvalue().splitlines()[1:]]
    assert seqs == list(range(1200))


def test_reference_non_bool_failure_keeps_its_positions() -> None:
    """The reference's non-bool failure text becomes items with strings at the bad positions."""
    text = "returned non-bool values (int) at positions 1"
    assert _reference_answer([True, False, True], text) == {
        "failure": {"kind": "non_bool", "error": text, "items": [True, "non-bool", True]}
    }


# -- the vLLM-shaped recorder ---------------------------------------------------------


class TierBacked(VllmShapedManager):
    """The correct vLLM-shaped class, asking a reference tier."""

    def __init__(self, tier: Tier) -> None:
        self.tier = tier
        super().__init__(getattr(tier, "name", "tier"))

    def batch_lookup(self, keys: list[bytes], req_context: Any) -> Any:
        return self.tier.batch_lookup(keys, req_context)


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()[1:]]


def test_vllm_trace_of_the_correct_class_under_threads_conforms(tmp_path: Path) -> None:
    """The correct vLLM-shaped class on a slow, faulty tier records a conforming trace."""
    tier = FaultyTier(InMemoryTier(), ALL_FAULTS, seed=11)
    manager = TierBacked(tier)
    path = tmp_path / "vllm.jsonl"
    with record_vllm(manager, path, tables=("_lookup_state", "_req_keys")):
        workload(manager, tier, seed=2)
        tier.release()
        manager.shutdown()
    outcome = checked(path)
    assert outcome.result == "conforming", (outcome.found, outcome.error)


def test_vllm_tier_calls_carry_the_worker_thread_name(tmp_path: Path) -> None:
    """Tier-call lines name the manager's worker thread; scheduler lines the caller's."""
    manager = TierBacked(InMemoryTier())
    path = tmp_path / "vllm.jsonl"
    with record_vllm(manager, path):
        manager.lookup(b"k", RequestContext("r"))
        manager.flush()
        manager.shutdown()
    threads = {row["event"]: row["thread"] for row in lines_of(path)}
    assert threads["tier_call_started"] == threads["tier_call_finished"] == "lookup-memory"
    assert threads["flush"] == threads["lookup_called"] == threading.current_thread().name


def test_vllm_nested_calls_are_not_recorded(tmp_path: Path) -> None:
    """The drain_results that lookup and flush call internally leaves no line of its own."""
    manager = TierBacked(InMemoryTier())
    path = tmp_path / "vllm.jsonl"
    with record_vllm(manager, path):
        manager.flush()
        manager.lookup(b"k", RequestContext("r"))
        manager.shutdown()
    assert [row["event"] for row in lines_of(path)] == [
        "flush", "lookup_called", "lookup_returned", "shutdown",
    ]


def test_vllm_recorder_close_restores_the_methods(tmp_path: Path) -> None:
    """After close, the instance's methods are its class's again."""
    manager = TierBacked(InMemoryTier())
    recorder = VllmRecorder(manager, tmp_path / "vllm.jsonl")
    assert "lookup" in vars(manager)
    recorder.close()
    assert not {"lookup", "flush", "batch_lookup", "shutdown"} & set(vars(manager))
    manager.shutdown()


class Answering(VllmShapedManager):
    """A vLLM-shaped class whose tier answer is set per test."""

    answer: Any = None

    def batch_lookup(self, keys: list[bytes], req_context: Any) -> Any:
        answer = self.answer
        if isinstance(answer, Exception):
            raise answer
        return answer() if callable(answer) else answer


def recorded_answer(tmp_path: Path, answer: Any) -> dict[str, Any]:
    """The tier_call_finished line recorded for one call answered with ``answer``."""
    manager = Answering("t")
    manager.answer = answer
    path = tmp_path / "vllm.jsonl"
    with record_vllm(manager, path):
        manager.lookup(b"k1", RequestContext("r"))
        manager.lookup(b"k2", RequestContext("r"))
        manager.flush()
        manager.shutdown()
    (row,) = [r for r in lines_of(path) if r["event"] == "tier_call_finished"]
    return {k: v for k, v in row.items() if k in ("answers", "failure")}


def test_vllm_proper_answer_is_recorded_as_answers(tmp_path: Path) -> None:
    """A list of one bool per key is recorded as answers."""
    assert recorded_answer(tmp_path, [True, False]) == {"answers": [True, False]}


def test_vllm_short_answer_is_recorded_with_its_items(tmp_path: Path) -> None:
    """Too few values are recorded as a failure of kind short, with the values given."""
    assert recorded_answer(tmp_path, [True]) == {"failure": {"kind": "short", "items": [True]}}


def test_vllm_non_bool_answer_is_recorded_as_strings(tmp_path: Path) -> None:
    """A non-bool value is recorded as its printable form."""
    got = recorded_answer(tmp_path, [1, False])
    assert got == {"failure": {"kind": "non_bool", "items": ["1", False]}}


def test_vllm_raising_tier_is_recorded_with_its_error(tmp_path: Path) -> None:
    """A tier that raises is recorded as a failure of kind raised with the exception text."""
    got = recorded_answer(tmp_path, OSError("down"))
    assert got == {"failure": {"kind": "raised", "error": "OSError: down", "items": []}}


def test_vllm_lazy_answer_is_recorded_when_consumed(tmp_path: Path) -> None:
    """A generator answer is recorded with the items the worker pulled from it."""
    got = recorded_answer(tmp_path, lambda: (v for v in (False, True)))
    assert got == {"answers": [False, True]}


def test_trace_writer_escapes_names_and_values() -> None:
    """Thread names and requests with quotes, newlines and non-ASCII stay one valid JSON line."""
    out = io.StringIO()
    writer = TraceWriter(out, recorder="t", worker_steps=False)
    done = threading.Event()

    def emit() -> None:
        writer.write("cleanup", request='r"1\n\u00e9')
        done.set()

    threading.Thread(target=emit, name='w"\norker').start()
    assert done.wait(5.0)
    (line,) = out.getvalue().splitlines()[1:]
    assert json.loads(line) == {
        "seq": 0, "event": "cleanup", "thread": 'w"\norker', "request": 'r"1\n\u00e9',
    }
