"""A dispatcher and a pool of three raw threads, fork-join per batch; ``TypedDict`` records.

Style: dict records and explicit latches.  Each probe is a ``TypedDict`` record
(``gen``, ``phase``, ``verdict``, ``who``) mutated in place; batch entries are frozen,
slotted dataclasses.  Workers are hand-made: a dispatcher thread takes one batch at a
time, splits it into one ``_Job`` per request, puts the jobs on a shared ``queue.Queue``
read by three pool threads, and blocks on a countdown ``_Latch`` (a ``threading.Condition``)
until every job of the batch is posted before it takes the next batch.  Each pool thread
posts its group's results as one list on a ``queue.SimpleQueue`` right after the tier
answers, then counts the latch down.  Draining follows the spec's rule.  Answers are
handled laxly, per element.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypedDict


class RequestContext(Protocol):
    @property
    def req_id(self) -> str: ...


class Record(TypedDict):
    gen: int
    phase: str
    verdict: bool | None
    who: set[str]


@dataclass(frozen=True, slots=True)
class Item:
    key: bytes
    context: RequestContext
    gen: int


class _Latch:
    def __init__(self, count: int) -> None:
        self._count = count
        self._cv = threading.Condition()

    def count_down(self) -> None:
        with self._cv:
            self._count -= 1
            if self._count <= 0:
                self._cv.notify_all()

    def wait(self) -> None:
        with self._cv:
            self._cv.wait_for(lambda: self._count <= 0)


@dataclass(frozen=True)
class _Job:
    context: RequestContext
    items: list[Item]
    latch: _Latch


class ThreeThreadPoolManager:
    threads = 3
    join_timeout = 10.0

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        self._records: dict[bytes, Record] = {}
        self._by_request: dict[str, set[bytes]] = {}
        self._pending: list[Item] = []
        self._gen = 0
        self._due = False
        self._down = False
        self._batches: queue.Queue[list[Item] | None] = queue.Queue()
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._posted: queue.SimpleQueue[list[tuple[bytes, int, bool]]] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._dispatcher = threading.Thread(target=self._dispatch, name="dispatch", daemon=True)
        self._pool = [
            threading.Thread(target=self._pool_main, name=f"pool-{i}", daemon=True)
            for i in range(self.threads)
        ]
        for thread in (self._dispatcher, *self._pool):
            thread.start()

    def batch_lookup(self, keys: list[bytes], req_context: RequestContext) -> Iterable[bool]:
        raise NotImplementedError(self.tier_type)

    # ------------------------------------------------------------ scheduler

    def _fresh_gen(self) -> int:
        self._gen += 1
        return self._gen

    def lookup(self, key: bytes, req_context: RequestContext) -> bool | None:
        if self._due:
            self._apply_posted()
        rec = self._records.get(key)
        if rec is None:
            rec = {"gen": self._fresh_gen(), "phase": "PENDING", "verdict": None, "who": set()}
            self._records[key] = rec
            self._pending.append(Item(key, req_context, rec["gen"]))
        rec["who"].add(req_context.req_id)
        self._by_request.setdefault(req_context.req_id, set()).add(key)
        return rec["verdict"] if rec["phase"] == "RESOLVED" else None

    def flush(self) -> None:
        self._apply_posted()
        items, self._pending = self._pending, []
        live: list[Item] = []
        for item in items:
            rec = self._records.get(item.key)
            if rec is not None and rec["gen"] == item.gen:
                rec["phase"] = "IN_FLIGHT"
                live.append(item)
        self._due = True
        if live:
            self._batches.put(live)

    def cleanup(self, req_id: str) -> None:
        for key in self._by_request.pop(req_id, set()):
            rec = self._records.get(key)
            if rec is not None and self._release(rec, req_id):
                del self._records[key]

    def _release(self, rec: Record, req_id: str) -> bool:
        """Removes the requester; says whether the record should go."""
        rec["who"].discard(req_id)
        return not rec["who"] and rec["phase"] != "IN_FLIGHT"

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            rec = self._records.get(key)
            if rec is not None and rec["phase"] == "RESOLVED":
                rec["verdict"] = False

    def mark_present(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            rec = self._records.get(key)
            if rec is None or rec["verdict"] is True:
                continue
            if rec["who"]:
                self._records[key] = {
                    "gen": self._fresh_gen(),
                    "phase": "RESOLVED",
                    "verdict": True,
                    "who": rec["who"],
                }
            else:
                del self._records[key]

    def drain_results(self) -> None:
        self._apply_posted()

    def shutdown(self) -> None:
        if self._down:
            return
        self._down = True
        self._stopping.set()
        self._batches.put(None)
        self._dispatcher.join(self.join_timeout)
        for _ in self._pool:
            self._jobs.put(None)
        for thread in self._pool:
            thread.join(self.join_timeout)
        self._apply_posted()
        self._pending = []

    def _apply_posted(self) -> None:
        self._due = False
        while True:
            try:
                posted = self._posted.get_nowait()
            except queue.Empty:
                return
            for key, gen, verdict in posted:
                rec = self._records.get(key)
                if rec is None or rec["gen"] != gen:
                    continue
                if rec["who"]:
                    rec["phase"], rec["verdict"] = "RESOLVED", verdict
                else:
                    del self._records[key]

    # ------------------------------------------------------------ dispatcher and pool

    def _dispatch(self) -> None:
        while (batch := self._batches.get()) is not None:
            if self._stopping.is_set():
                return
            groups = self._split(batch)
            latch = _Latch(len(groups))
            for context, items in groups:
                self._jobs.put(_Job(context, items, latch))
            latch.wait()

    def _split(self, batch: Sequence[Item]) -> list[tuple[RequestContext, list[Item]]]:
        groups: dict[str, list[Item]] = {}
        for item in batch:
            groups.setdefault(item.context.req_id, []).append(item)
        return [(items[0].context, items) for items in groups.values()]

    def _pool_main(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                verdicts = self._ask([item.key for item in job.items], job.context)
                self._posted.put(
                    [(i.key, i.gen, v) for i, v in zip(job.items, verdicts, strict=True)]
                )
            finally:
                job.latch.count_down()

    def _ask(self, keys: list[bytes], context: RequestContext) -> list[bool]:
        answered: list[bool] = []
        try:
            source: Iterable[object] = self.batch_lookup(list(keys), context)
            for value in source:
                if len(answered) >= len(keys):
                    break
                answered.append(value if type(value) is bool else False)
        except Exception:
            pass
        answered.extend([False] * (len(keys) - len(answered)))
        return answered


# ------------------------------------------------------------------ one-bug copies


class ReleasesOnlyLastRequester(ThreeThreadPoolManager):
    """BUG (property 4): cleanup removes the request only from probes it was alone on; on a
    shared probe the cleaned-up request stays a requester."""

    def _release(self, rec: Record, req_id: str) -> bool:
        if rec["who"] == {req_id}:
            rec["who"].clear()
        return not rec["who"] and rec["phase"] != "IN_FLIGHT"


class OneCallPerBatch(ThreeThreadPoolManager):
    """BUG (property 9): the whole batch goes to the tier in one call, with its first context."""

    def _split(self, batch: Sequence[Item]) -> list[tuple[RequestContext, list[Item]]]:
        return [(batch[0].context, list(batch))]
