"""An actor with tagged-tuple messages; the scheduler's tables live in a separate ``_Book``.

Style: message passing and separation of concerns.  The worker is an actor: it receives
``("probe", entries)`` and ``("stop",)`` messages on a ``queue.Queue`` and replies with
``("answered", results)`` messages on a ``queue.SimpleQueue``, one per request group; both
sides dispatch on messages with ``match``.  The manager itself holds no table: every
protocol rule lives in a ``_Book`` object (built from the class attribute ``book_type``),
whose probe lines keep their requesters as an ordered ``list``.  Draining follows the
spec's rule.  Tier faults are handled strictly: any fault gives ``False`` to every key of
the call.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol


class RequestContext(Protocol):
    @property
    def req_id(self) -> str: ...


@dataclass
class _Line:
    gen: int
    phase: str  # "P" pending, "F" in flight, "R" resolved
    verdict: bool | None = None
    who: list[str] = field(default_factory=list)


Entry = tuple[bytes, RequestContext, int]
Result = tuple[bytes, int, bool]
ToActor = tuple[str, list[Entry]] | tuple[str]
FromActor = tuple[str, list[Result]]


class _Book:
    """The scheduler thread's tables, and every rule that reads or writes them."""

    def __init__(self) -> None:
        self.lines: dict[bytes, _Line] = {}
        self.index: dict[str, list[bytes]] = {}
        self.batch: list[Entry] = []
        self._gens = itertools.count()

    def ask(self, key: bytes, context: RequestContext) -> bool | None:
        line = self.lines.get(key)
        if line is None:
            line = self.lines[key] = _Line(next(self._gens), "P")
            self.batch.append((key, context, line.gen))
        rid = context.req_id
        if rid not in line.who:
            line.who.append(rid)
        keys = self.index.setdefault(rid, [])
        if key not in keys:
            keys.append(key)
        return line.verdict if line.phase == "R" else None

    def take_batch(self) -> list[Entry]:
        batch, self.batch = self.batch, []
        live = [e for e in batch if (line := self.lines.get(e[0])) is not None and line.gen == e[2]]
        for key, _, _ in live:
            self.lines[key].phase = "F"
        return live

    def keys_of(self, req_id: str) -> list[bytes]:
        return self.index.pop(req_id, [])

    def forget(self, req_id: str) -> None:
        for key in self.keys_of(req_id):
            line = self.lines.get(key)
            if line is None or req_id not in line.who:
                continue
            line.who.remove(req_id)
            if not line.who and line.phase != "F":
                del self.lines[key]

    def miss(self, key: bytes) -> None:
        line = self.lines.get(key)
        if line is not None and line.phase == "R":
            line.verdict = False

    def present(self, key: bytes) -> None:
        line = self.lines.get(key)
        if line is None or line.verdict is True:
            return
        if line.who:
            self.lines[key] = _Line(next(self._gens), "R", True, line.who)
        else:
            del self.lines[key]

    def settle(self, key: bytes, gen: int, verdict: bool) -> None:
        line = self.lines.get(key)
        if line is None or line.gen != gen:
            return
        if line.who:
            line.phase, line.verdict = "R", verdict
        else:
            del self.lines[key]


class ActorManager:
    join_timeout = 10.0
    book_type: type[_Book] = _Book

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        self._book = self.book_type()
        self._drain_due = False
        self._stopped = False
        self._mailbox: queue.Queue[ToActor] = queue.Queue()
        self._replies: queue.SimpleQueue[FromActor] = queue.SimpleQueue()
        self._stop_requested = threading.Event()
        self._actor = threading.Thread(target=self._actor_main, name="lookup-actor", daemon=True)
        self._actor.start()

    def batch_lookup(self, keys: list[bytes], req_context: RequestContext) -> Iterable[bool]:
        raise NotImplementedError(self.tier_type)

    # ------------------------------------------------------------ scheduler

    def lookup(self, key: bytes, req_context: RequestContext) -> bool | None:
        if self._drain_due:
            self._read_replies()
        return self._book.ask(key, req_context)

    def flush(self) -> None:
        self._read_replies()
        live = self._book.take_batch()
        self._drain_due = True
        if live:
            self._mailbox.put(("probe", live))

    def cleanup(self, req_id: str) -> None:
        self._book.forget(req_id)

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            self._book.miss(key)

    def mark_present(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            self._book.present(key)

    def drain_results(self) -> None:
        self._read_replies()

    def shutdown(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._stop_requested.set()
        self._mailbox.put(("stop",))
        self._actor.join(self.join_timeout)
        self._read_replies()
        self._book.batch = []

    def _read_replies(self) -> None:
        self._drain_due = False
        while True:
            try:
                message = self._replies.get_nowait()
            except queue.Empty:
                return
            match message:
                case ("answered", results):
                    for key, gen, verdict in results:
                        self._book.settle(key, gen, verdict)
                case _:
                    raise AssertionError(f"unexpected reply {message!r}")

    # ------------------------------------------------------------ actor

    def _actor_main(self) -> None:
        while True:
            message = self._mailbox.get()
            if self._stop_requested.is_set():
                return  # "stop", or a batch never taken before shutdown
            match message:
                case ("probe", entries):
                    self._handle(entries)
                case ("stop",):
                    return
                case _:
                    pass

    def _handle(self, entries: list[Entry]) -> None:
        groups: dict[str, list[Entry]] = {}
        for entry in entries:
            groups.setdefault(entry[1].req_id, []).append(entry)
        for group in groups.values():
            verdicts = self._answers([k for k, _, _ in group], group[0][1])
            self._replies.put(
                ("answered", [(k, g, v) for (k, _, g), v in zip(group, verdicts, strict=False)])
            )

    def _answers(self, keys: list[bytes], context: RequestContext) -> list[bool]:
        try:
            got: list[object] = list(
                itertools.islice(self.batch_lookup(list(keys), context), len(keys) + 1)
            )
        except Exception:
            got = []
        if len(got) == len(keys) and all(isinstance(v, bool) for v in got):
            return [v is True for v in got]
        return [False] * len(keys)


# ------------------------------------------------------------------ one-bug copies


class _BatchIndexedBook(_Book):
    """Finds a request's keys from the step's batch instead of the index, so a key the
    request only joined keeps it as a requester."""

    def keys_of(self, req_id: str) -> list[bytes]:
        self.index.pop(req_id, None)
        return [key for key, context, _ in self.batch if context.req_id == req_id]


class ActorCleanupMissesJoinedKeys(ActorManager):
    """BUG (property 4): cleanup looks up the request's keys in the batch, not the index; a
    cleaned-up request that joined another's probe stays its requester."""

    book_type = _BatchIndexedBook


class ActorZipsAnswers(ActorManager):
    """BUG (property 6): zip() over keys and a short answer; the missing keys are never posted."""

    def _answers(self, keys: list[bytes], context: RequestContext) -> list[bool]:
        try:
            return [
                v is True
                for _, v in zip(keys, self.batch_lookup(list(keys), context), strict=False)
            ]
        except Exception:
            return [False] * len(keys)
