"""A user's lookup ledger: its tables on a plain bookkeeping object, frozen records
replaced on every change, a deque for the step's batch (fixed twin).

Fixed: cleanup takes the request out of the ledger's index too, so nothing
refers to a finished request any more.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Record:
    generation: int
    in_flight: bool = False
    verdict: bool | None = None
    askers: frozenset[str] = frozenset()


class Ledger:
    """The manager's bookkeeping: records by key, keys by request, the step's batch."""

    def __init__(self) -> None:
        self.records: dict[bytes, Record] = {}
        self.asked: dict[str, list[bytes]] = {}
        self.pending: deque[tuple[bytes, Any, int]] = deque()


class LedgerManager:
    """vLLM's scheduler calls; one worker thread serves the submitted batches."""

    def __init__(self, tier_type: str) -> None:
        self._ledger = Ledger()
        self._serial = 0
        self._inbox: queue.Queue[list[tuple[bytes, Any, int]] | None] = queue.Queue()
        self._outbox: queue.Queue[list[tuple[bytes, int, bool]]] = queue.Queue()
        self._worker = threading.Thread(target=self._serve, name=f"ledger-{tier_type}",
                                        daemon=True)
        self._worker.start()

    def batch_lookup(self, keys: list[bytes], req_context: Any) -> list[bool]:
        raise NotImplementedError("the deployment's tier")

    def lookup(self, key: bytes, req_context: Any) -> bool | None:
        self.drain_results()
        ledger, asker = self._ledger, req_context.req_id
        record = ledger.records.get(key)
        if record is None:
            record = Record(self._serial)
            self._serial += 1
            ledger.pending.append((key, req_context, record.generation))
        ledger.records[key] = replace(record, askers=record.askers | {asker})
        keys = ledger.asked.setdefault(asker, [])
        if key not in keys:
            keys.append(key)
        return record.verdict

    def flush(self) -> None:
        self.drain_results()
        ledger, submitted = self._ledger, []
        while ledger.pending:
            key, ctx, generation = ledger.pending.popleft()
            record = ledger.records.get(key)
            if record is not None and record.generation == generation:
                ledger.records[key] = replace(record, in_flight=True)
                submitted.append((key, ctx, generation))
        if submitted:
            self._inbox.put(submitted)

    def drain_results(self) -> None:
        ledger = self._ledger
        while True:
            try:
                posted = self._outbox.get_nowait()
            except queue.Empty:
                return
            for key, generation, verdict in posted:
                record = ledger.records.get(key)
                if record is None or record.generation != generation:
                    continue
                if record.askers:
                    ledger.records[key] = replace(record, in_flight=False, verdict=verdict)
                else:
                    del ledger.records[key]

    def cleanup(self, req_id: str) -> None:
        ledger = self._ledger
        for key in ledger.asked.pop(req_id, []):
            record = ledger.records.get(key)
            if record is None:
                continue
            record = replace(record, askers=record.askers - {req_id})
            if record.askers or record.in_flight:
                ledger.records[key] = record
            else:
                del ledger.records[key]

    def shutdown(self) -> None:
        self._inbox.put(None)
        self._worker.join(timeout=10)
        self.drain_results()

    def _serve(self) -> None:
        while True:
            batch = self._inbox.get()
            if batch is None:
                return
            groups: dict[str, list[tuple[bytes, Any, int]]] = {}
            for entry in batch:
                groups.setdefault(entry[1].req_id, []).append(entry)
            posted: list[tuple[bytes, int, bool]] = []
            for entries in groups.values():
                keys = [key for key, _, _ in entries]
                try:
                    answer = list(self.batch_lookup(keys, entries[0][1]))
                except Exception:
                    answer = []
                if len(answer) != len(keys) or any(type(v) is not bool for v in answer):
                    answer = [v is True for v in answer][: len(keys)]
                    answer += [False] * (len(keys) - len(answer))
                posted += [(key, gen, v) for (key, _, gen), v in zip(entries, answer,
                                                                    strict=True)]
            self._outbox.put(posted)
