"""An asyncio event loop on a background thread is the worker; tables are plain dicts of tuples.

Style: rows, not objects.  The probe table maps a key to an immutable tuple ``(generation,
phase, verdict, requesters)`` that is replaced, never mutated; phases are short strings;
the request index maps a request id to a ``frozenset`` of keys; attributes are public.
``flush`` hands each batch to the loop with ``asyncio.run_coroutine_threadsafe``; the
coroutine serialises batches with an ``asyncio.Lock`` (FIFO), runs the tier call of each
request group on the loop's default executor (never on the scheduler thread), and appends
the ``(key, generation, verdict)`` results to a plain list that the scheduler swaps out
under a ``threading.Lock``.  Draining follows the spec: ``flush``, ``drain_results``,
``shutdown``, and the first ``lookup`` after a flush.  Non-bool answers are handled
laxly: a bad element becomes ``False``, the proper bools of the same call are kept, and
keys the tier did not answer get ``False``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Iterable
from typing import Protocol


class RequestContext(Protocol):
    @property
    def req_id(self) -> str: ...


PENDING, IN_FLIGHT, RESOLVED = "pending", "in-flight", "resolved"

Row = tuple[int, str, bool | None, frozenset[str]]
BatchEntry = tuple[bytes, RequestContext, int]
Result = tuple[bytes, int, bool]
Group = tuple[RequestContext, list[bytes], list[int]]


class EventLoopManager:
    join_timeout = 10.0
    drains_in_lookup = True

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        self.rows: dict[bytes, Row] = {}
        self.index: dict[str, frozenset[bytes]] = {}
        self.batch: list[BatchEntry] = []
        self.next_generation = 0
        self.drain_due = False
        self.closed = False
        self._results: list[Result] = []
        self._results_lock = threading.Lock()
        self._stopping = threading.Event()
        self._submitted: list[concurrent.futures.Future[None]] = []
        self._one_batch_at_a_time = asyncio.Lock()
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(
            target=self._loop.run_forever, name="asyncio-lookup-loop", daemon=True
        )
        self._loop_thread.start()

    def batch_lookup(self, keys: list[bytes], req_context: RequestContext) -> Iterable[bool]:
        raise NotImplementedError(f"no tier wired for {self.tier_type!r}")

    # ------------------------------------------------------------ scheduler side

    def _generation(self) -> int:
        generation = self.next_generation
        self.next_generation += 1
        return generation

    def lookup(self, key: bytes, req_context: RequestContext) -> bool | None:
        if self.drain_due and self.drains_in_lookup:
            self._apply_results()
        rid = req_context.req_id
        row = self.rows.get(key)
        if row is None:
            row = (self._generation(), PENDING, None, frozenset())
            self.batch.append((key, req_context, row[0]))
        generation, phase, verdict, requesters = row
        self.rows[key] = (generation, phase, verdict, requesters | {rid})
        self.index[rid] = self.index.get(rid, frozenset()) | {key}
        return verdict if phase == RESOLVED else None

    def flush(self) -> None:
        self._apply_results()
        batch, self.batch = self.batch, []
        live = [entry for entry in batch if self._live(entry)]
        self.drain_due = True
        if not live:
            return
        for key, _, _ in live:
            generation, _, verdict, requesters = self.rows[key]
            self.rows[key] = (generation, IN_FLIGHT, verdict, requesters)
        future = asyncio.run_coroutine_threadsafe(self._probe_batch(live), self._loop)
        self._submitted = [f for f in self._submitted if not f.done()]
        self._submitted.append(future)

    def _live(self, entry: BatchEntry) -> bool:
        row = self.rows.get(entry[0])
        return row is not None and row[0] == entry[2]

    def cleanup(self, req_id: str) -> None:
        for key in self.index.pop(req_id, frozenset()):
            row = self.rows.get(key)
            if row is None:
                continue
            generation, phase, verdict, requesters = row
            requesters = requesters - {req_id}
            if not requesters and phase != IN_FLIGHT:
                del self.rows[key]
            else:
                self.rows[key] = (generation, phase, verdict, requesters)

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            row = self.rows.get(key)
            if row is not None and row[1] == RESOLVED:
                self.rows[key] = (row[0], RESOLVED, False, row[3])

    def mark_present(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            row = self.rows.get(key)
            if row is None or row[2] is True:
                continue
            if row[3]:
                self.rows[key] = (self._generation(), RESOLVED, True, row[3])
            else:
                del self.rows[key]

    def drain_results(self) -> None:
        self._apply_results()

    def shutdown(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._stopping.set()
        # The batch in hand finishes; the coroutines still waiting for the lock see
        # _stopping and return at once (their batches were never taken).
        concurrent.futures.wait(self._submitted, timeout=self.join_timeout)
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(
                self._loop.shutdown_default_executor(), self._loop
            ).result(self.join_timeout)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop_thread.join(self.join_timeout)
        if not self._loop_thread.is_alive():
            self._loop.close()
        self._apply_results()
        self.batch.clear()

    def _take_results(self) -> list[Result]:
        with self._results_lock:
            taken, self._results = self._results, []
        return taken

    def _apply_results(self) -> None:
        self.drain_due = False
        for key, generation, verdict in self._take_results():
            row = self.rows.get(key)
            if row is None or not self._result_is_current(row, generation):
                continue
            if row[3]:
                self.rows[key] = (row[0], RESOLVED, verdict, row[3])
            else:
                del self.rows[key]

    def _result_is_current(self, row: Row, generation: int) -> bool:
        return row[0] == generation

    # ------------------------------------------------------------ event-loop side

    async def _probe_batch(self, batch: list[BatchEntry]) -> None:
        async with self._one_batch_at_a_time:
            if self._stopping.is_set():
                return
            loop = asyncio.get_running_loop()
            for context, keys, generations in self._groups(batch):
                try:
                    verdicts = await loop.run_in_executor(None, self._ask, keys, context)
                except Exception:
                    verdicts = [False] * len(keys)
                with self._results_lock:
                    self._results.extend(zip(keys, generations, verdicts, strict=True))

    def _groups(self, batch: list[BatchEntry]) -> list[Group]:
        grouped: dict[str, list[BatchEntry]] = {}
        for entry in batch:
            grouped.setdefault(entry[1].req_id, []).append(entry)
        return [
            (self._context_of(entries, batch), [e[0] for e in entries], [e[2] for e in entries])
            for entries in grouped.values()
        ]

    def _context_of(self, group: list[BatchEntry], batch: list[BatchEntry]) -> RequestContext:
        return group[0][1]

    def _ask(self, keys: list[bytes], context: RequestContext) -> list[bool]:
        """Runs on an executor thread: one tier call, lax about what comes back."""
        verdicts: list[bool] = []
        try:
            raw: Iterable[object] = self.batch_lookup(list(keys), context)
            for answer in raw:
                if len(verdicts) == len(keys):
                    break
                verdicts.append(answer if isinstance(answer, bool) else False)
        except Exception:
            pass
        return verdicts + [False] * (len(keys) - len(verdicts))


# ------------------------------------------------------------------ one-bug copies


class AppliesResultsByKey(EventLoopManager):
    """BUG (property 2): a result is applied to whatever row its key has now."""

    def _result_is_current(self, row: Row, generation: int) -> bool:
        return True


class LastRequestContext(EventLoopManager):
    """BUG (property 9): each group is asked with the context of the batch's last request,
    as a late-bound loop variable would."""

    def _context_of(self, group: list[BatchEntry], batch: list[BatchEntry]) -> RequestContext:
        return batch[-1][1]


class LoopNeverDrainsInLookup(EventLoopManager):
    """BUG (property 6): lookup never applies results, so the first lookup after a flush
    leaves posted results unapplied."""

    drains_in_lookup = False
