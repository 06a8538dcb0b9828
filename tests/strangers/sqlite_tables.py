"""A vLLM-shaped async lookup manager whose tables live in an in-memory SQLite database.

Written from docs/protocol.md alone (plus docs/properties.md for the bug names and the
"Walkthrough" / "Shapes near vLLM's" sections of docs/oracle.md for the class shape).

Style: the scheduler's tables are SQL tables of one in-memory SQLite database
(``sqlite3.connect(":memory:", check_same_thread=False)``) guarded by one
``threading.Lock``: ``probes`` (key BLOB PRIMARY KEY, generation, phase, verdict),
``requesters`` (key, request_id), ``batch`` (the step's entries) and a one-row
``counter`` whose integer column hands out generations.  They are changed with SQL
statements only.  The worker is one ``threading.Thread`` that takes submitted batches
from a ``queue.Queue`` and posts each batch's results, as one list of
``(key, generation, verdict)``, into a ``collections.deque`` guarded by the same lock.
The only Python-side table is ``_entry_contexts`` (batch row id -> request context),
because a context object cannot be stored in SQLite; flush empties it.

Decisions where the protocol leaves room (docs/protocol.md, "What the spec decides where
the protocol leaves room"):

1. Item 1 (when a lookup drains): a lookup applies posted results exactly when a flush
   happened since the last drain (``_drain_due``), as the spec does.
2. Item 2 (order of request groups): groups are probed in the order of their first entry
   in the batch; the whole batch's results are posted together, as one list, after the
   last group ("post each group's results ... or the batch's together").
3. Item 3 (what a failed tier call yields): any failure of a call (it raises, the answer
   is not iterable, raises part-way, has the wrong length, or holds a non-bool) gives
   ``False`` to every key of that call, as the spec's ``ProbeGroup(None)``.  The answer
   is consumed inside the try, at most ``len(keys) + 1`` elements, so an endless lazy
   answer cannot hang the worker.
4. Item 4 (what shutdown drops): shutdown lets the worker finish the batch in hand, drops
   the queued batches it never took and the step's batch, joins the worker (a bounded
   join), applies posted results.  Idempotent; any other call afterwards raises
   ``RuntimeError``.  Probe rows are left as they are (nothing may be called afterwards).
5. Item 5 (mark_present on a probe already True): does nothing; on a key with no
   requesters it deletes the state; on a key with no state it does nothing.
6. A batch entry is submitted when its key's probe has the entry's generation and is
   PENDING (the same generation is always PENDING while its entry is in the batch).
   Results are applied when the key's probe has the result's generation.
7. Requests are grouped by ``req_context.req_id``; a group's tier call carries the
   context of the group's first entry (the context its probe was batched with).
8. Generations start at 0 and grow by one per new probe or per ``mark_present`` renewal.

The oracle's leak check cannot see SQL tables (they are no Python attribute holding the
key); this module does not try to help it.
"""

from __future__ import annotations

import collections
import itertools
import queue
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from typing import Protocol

PENDING = "PENDING"
IN_FLIGHT = "IN_FLIGHT"
RESOLVED = "RESOLVED"

Result = tuple[bytes, int, bool]


class ReqContext(Protocol):
    """What the manager needs of a request context: its request id."""

    @property
    def req_id(self) -> str: ...


# One submitted entry: key, request id, generation, the context it was batched with.
Submitted = tuple[bytes, str, int, ReqContext]

_SCHEMA = """
CREATE TABLE probes (
    key BLOB PRIMARY KEY,
    generation INTEGER NOT NULL,
    phase TEXT NOT NULL,
    verdict INTEGER
);
CREATE TABLE requesters (
    key BLOB NOT NULL,
    request_id TEXT NOT NULL,
    PRIMARY KEY (key, request_id)
);
CREATE TABLE batch (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    key BLOB NOT NULL,
    request_id TEXT NOT NULL,
    generation INTEGER NOT NULL
);
CREATE TABLE counter (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    value INTEGER NOT NULL
);
INSERT INTO counter (id, value) VALUES (0, 0);
"""


def _as_verdict(value: object) -> bool | None:
    if value is None:
        return None
    return bool(value)


class SqliteTablesManager:
    """Conforms to docs/protocol.md; tables in SQLite, one worker thread."""

    # Batch entries still live at flush: the key's probe has the entry's generation.
    _SUBMIT_SQL = (
        "SELECT b.seq, b.key, b.request_id, b.generation FROM batch AS b "
        "JOIN probes AS p ON p.key = b.key "
        "WHERE p.generation = b.generation AND p.phase = 'PENDING' "
        "ORDER BY b.seq"
    )
    _JOIN_TIMEOUT_S = 60.0

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        self._lock = threading.Lock()
        self._db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        self._db.executescript(_SCHEMA)
        self._entry_contexts: dict[int, ReqContext] = {}
        self._drain_due = False
        self._closed = False
        self._submitted: queue.Queue[list[Submitted] | None] = queue.Queue()
        self._posted: collections.deque[list[Result]] = collections.deque()
        self._stop = threading.Event()
        self._worker = threading.Thread(
            target=self._worker_loop, name="sqlite-lookup-worker", daemon=True
        )
        self._worker.start()

    # ---------------------------------------------------------------- the tier
    def batch_lookup(self, keys: list[bytes], req_context: ReqContext) -> Iterable[bool]:
        """The tier call; a real deployment (or the oracle) overrides it."""
        raise NotImplementedError(f"no tier for {self.tier_type!r}")

    # ------------------------------------------------------- scheduler thread
    def lookup(self, key: bytes, req_context: ReqContext) -> bool | None:
        request_id = req_context.req_id
        with self._lock:
            self._check_open()
            if self._drain_due:
                self._apply_posted()
                self._drain_due = False
            row = self._db.execute(
                "SELECT phase, verdict FROM probes WHERE key = ?", (key,)
            ).fetchone()
            if row is None:
                generation = self._next_generation()
                self._db.execute(
                    "INSERT INTO probes (key, generation, phase, verdict) VALUES (?, ?, ?, NULL)",
                    (key, generation, PENDING),
                )
                cursor = self._db.execute(
                    "INSERT INTO batch (key, request_id, generation) VALUES (?, ?, ?)",
                    (key, request_id, generation),
                )
                seq = cursor.lastrowid
                assert seq is not None
                self._entry_contexts[seq] = req_context
                phase, verdict = PENDING, None
            else:
                phase, verdict = row
            self._db.execute(
                "INSERT OR IGNORE INTO requesters (key, request_id) VALUES (?, ?)",
                (key, request_id),
            )
            return _as_verdict(verdict) if phase == RESOLVED else None

    def flush(self) -> None:
        with self._lock:
            self._check_open()
            self._apply_posted()
            self._drain_due = True
            rows = self._db.execute(self._SUBMIT_SQL).fetchall()
            items: list[Submitted] = []
            for seq, key, request_id, generation in rows:
                items.append((key, request_id, generation, self._entry_contexts[seq]))
                self._db.execute(
                    "UPDATE probes SET phase = ? WHERE key = ? AND generation = ?",
                    (IN_FLIGHT, key, generation),
                )
            self._db.execute("DELETE FROM batch")
            self._entry_contexts.clear()
            if items:
                self._submitted.put(items)

    def cleanup(self, req_id: str) -> None:
        with self._lock:
            self._check_open()
            keys = [
                k
                for (k,) in self._db.execute(
                    "SELECT key FROM requesters WHERE request_id = ?", (req_id,)
                ).fetchall()
            ]
            self._db.execute("DELETE FROM requesters WHERE request_id = ?", (req_id,))
            for key in keys:
                self._db.execute(
                    "DELETE FROM probes WHERE key = ? AND phase != ? "
                    "AND NOT EXISTS (SELECT 1 FROM requesters AS r WHERE r.key = probes.key)",
                    (key, IN_FLIGHT),
                )

    def mark_miss(self, keys: Sequence[bytes]) -> None:
        with self._lock:
            self._check_open()
            for key in keys:
                self._db.execute(
                    "UPDATE probes SET verdict = 0 WHERE key = ? AND phase = ?",
                    (key, RESOLVED),
                )

    def mark_present(self, keys: Sequence[bytes]) -> None:
        with self._lock:
            self._check_open()
            for key in keys:
                row = self._db.execute(
                    "SELECT phase, verdict FROM probes WHERE key = ?", (key,)
                ).fetchone()
                if row is None:
                    continue
                phase, verdict = row
                if phase == RESOLVED and verdict == 1:
                    continue
                if self._has_requesters(key):
                    self._db.execute(
                        "UPDATE probes SET generation = ?, phase = ?, verdict = 1 WHERE key = ?",
                        (self._next_generation(), RESOLVED, key),
                    )
                else:
                    self._db.execute("DELETE FROM probes WHERE key = ?", (key,))

    def drain_results(self) -> None:
        with self._lock:
            self._check_open()
            self._apply_posted()
            self._drain_due = False

    def shutdown(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._stop.set()
        self._submitted.put(None)
        self._worker.join(timeout=self._JOIN_TIMEOUT_S)
        with self._lock:
            self._apply_posted()
            self._drain_due = False
            self._db.execute("DELETE FROM batch")
            self._entry_contexts.clear()
        while True:
            try:
                self._submitted.get_nowait()
            except queue.Empty:
                break

    # ------------------------------------------------ scheduler-side helpers
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the lookup manager was shut down")

    def _next_generation(self) -> int:
        (generation,) = self._db.execute("SELECT value FROM counter WHERE id = 0").fetchone()
        self._db.execute("UPDATE counter SET value = value + 1 WHERE id = 0")
        return int(generation)

    def _has_requesters(self, key: bytes) -> bool:
        row = self._db.execute(
            "SELECT 1 FROM requesters WHERE key = ? LIMIT 1", (key,)
        ).fetchone()
        return row is not None

    def _apply_posted(self) -> None:
        """Apply every posted result (caller holds the lock)."""
        while self._posted:
            for key, generation, verdict in self._posted.popleft():
                self._apply_one(key, generation, verdict)

    def _apply_one(self, key: bytes, generation: int, verdict: bool) -> None:
        row = self._db.execute(
            "SELECT generation FROM probes WHERE key = ?", (key,)
        ).fetchone()
        if row is None or row[0] != generation:
            return  # stale: the probe was deleted or superseded
        if self._has_requesters(key):
            self._db.execute(
                "UPDATE probes SET phase = ?, verdict = ? WHERE key = ? AND generation = ?",
                (RESOLVED, 1 if verdict else 0, key, generation),
            )
        else:
            self._db.execute(
                "DELETE FROM probes WHERE key = ? AND generation = ?", (key, generation)
            )

    # ---------------------------------------------------------- worker thread
    def _worker_loop(self) -> None:
        while True:
            items = self._submitted.get()
            if items is None or self._stop.is_set():
                return  # batches never taken are dropped
            results = self._probe_batch(items)
            with self._lock:
                self._posted.append(results)

    def _probe_batch(self, items: list[Submitted]) -> list[Result]:
        groups: dict[str, list[Submitted]] = {}
        for item in items:
            groups.setdefault(item[1], []).append(item)
        results: list[Result] = []
        for group in groups.values():
            keys = [key for key, _, _, _ in group]
            verdicts = self._answer_group(keys, group[0][3])
            for (key, _, generation, _), verdict in zip(group, verdicts, strict=False):
                results.append((key, generation, verdict))
        return results

    def _answer_group(self, keys: list[bytes], ctx: ReqContext) -> list[bool]:
        """One tier call; always one bool per key (False for a failed call)."""
        try:
            answer = list(itertools.islice(iter(self.batch_lookup(list(keys), ctx)), len(keys) + 1))
        except Exception:
            return [False] * len(keys)
        if len(answer) != len(keys) or not all(type(v) is bool for v in answer):
            return [False] * len(keys)
        return [bool(v) for v in answer]


class FlushSubmitsStale(SqliteTablesManager):
    """Bug: flush submits every batch entry, without re-validating it (the seed, #55075).

    An entry whose probe was cleaned up or superseded by ``mark_present`` still reaches
    the tier.  Property 1 (no cleaned-up entry is submitted).
    """

    _SUBMIT_SQL = "SELECT seq, key, request_id, generation FROM batch ORDER BY seq"


class AppliesByKey(SqliteTablesManager):
    """Bug: results are applied by key, without the generation check (#54872).

    A late result of an old generation overwrites the probe of the key's current
    generation, e.g. the ``True`` of ``mark_present``.  Property 2 (no cleaned-up entry
    is delivered).
    """

    def _apply_one(self, key: bytes, generation: int, verdict: bool) -> None:
        row = self._db.execute("SELECT 1 FROM probes WHERE key = ?", (key,)).fetchone()
        if row is None:
            return
        if self._has_requesters(key):
            self._db.execute(
                "UPDATE probes SET phase = ?, verdict = ? WHERE key = ?",
                (RESOLVED, 1 if verdict else 0, key),
            )
        else:
            self._db.execute("DELETE FROM probes WHERE key = ?", (key,))


class ZipTruncates(SqliteTablesManager):
    """Bug: the tier's answer is zipped with the keys, so a short answer drops keys.

    The keys the tier did not answer get no result and stay IN_FLIGHT forever.
    Property 7 (survival: every key of a tier call gets exactly one result); a black box
    may see it first as property 6 (progress: the verdict never shows).
    """

    def _answer_group(self, keys: list[bytes], ctx: ReqContext) -> list[bool]:
        try:
            return [
                v is True
                for _, v in zip(keys, self.batch_lookup(list(keys), ctx), strict=False)
            ]
        except Exception:
            return [False] * len(keys)
