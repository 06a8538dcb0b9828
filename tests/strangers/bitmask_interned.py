"""An async lookup manager written from docs/protocol.md alone, by an outsider.

Style ("bitmask_interned"): block keys are interned to small integers on first
sight (a dict key -> int and a list int -> key), and request ids to bit
positions. A probe's requesters are an int bitmask (bit i = request i), and the
probe table is parallel dicts keyed by the interned key int (generation, phase
code, verdict, requester mask) instead of probe objects. Freed bit positions and
key ints are recycled through free lists (min-heaps, so masks stay narrow) once
nothing refers to them: a key int is reference-counted by its probe state, its
batch entries and its submitted-but-unapplied entries; a bit is freed by the
request's cleanup, which clears it from every mask first. So memory stays flat
with ever-new request ids and keys. The worker is a plain ``threading.Thread``
draining a ``queue.Queue`` of batches; results come back on a
``collections.deque`` guarded by a ``threading.Lock``. No sleeps: the worker
blocks on the queue, shutdown joins with a bounded wait.

Decisions where docs/protocol.md leaves room ("What the spec decides where the
protocol leaves room"):

- item 1 (when a lookup drains): like the spec, ``lookup`` applies posted
  results exactly when a flush happened since the last drain.
- item 2 (order of request groups): groups are probed in the order their
  request first appears among the batch's submitted entries. Keys of a group
  keep their batch order. A group is one request id; its tier call carries the
  context of the group's first entry (the context that entry was batched with,
  even if that request has been cleaned up since: "Cleanup while the probe is
  in flight" and property 9).
- item 3 (what a failed tier call yields): a call that raises (also part-way
  through a lazy iterable) or answers with the wrong number of elements gives
  ``False`` to every key of the call; an answer of the right length gives each
  key its element if that is a ``bool`` and ``False`` otherwise. The answer is
  consumed inside the ``try`` and never beyond ``len(keys) + 1`` elements.
- item 4 (what shutdown drops): shutdown sets a stop event and puts a sentinel;
  the worker finishes the batch in hand and exits; batches it never took are
  dropped (their probes stay as they are, as in the spec), so is the step's
  batch; posted results are then applied. Later calls raise
  ``ManagerClosedError``; a second shutdown does nothing.
- item 5: ``mark_present`` on a probe whose verdict is already ``True`` does
  nothing; on a state with no requesters (an orphaned IN_FLIGHT probe) it
  deletes the state.
- The worker posts each request group's results as soon as that group is
  answered (protocol: "post" posts the answered results; oracle.md allows
  posting per group), and takes the next batch only after posting all of the
  one in hand.
- Request ids are reused freely: a request cleaned up and asking again is a new
  requester (it may get another bit).

Oracle: ``asynclookup fuzz --faults all --strict-efficiency --examples 300``,
seeds 0..4, found nothing on ``BitmaskInternedManager``; nothing was changed
after running it.
"""

from __future__ import annotations

import collections
import heapq
import queue
import threading
from collections.abc import Iterable
from typing import Protocol

PENDING = 0
IN_FLIGHT = 1
RESOLVED = 2


class ReqContext(Protocol):
    """What the manager needs of a request context: its request id."""

    @property
    def req_id(self) -> str: ...


class ManagerClosedError(RuntimeError):
    """A call after shutdown()."""


# A batch entry: (key int, generation, request id, request context).
Entry = tuple[int, int, str, ReqContext]
# A group handed to the worker: (context, [(key, key int, generation), ...]).
Group = tuple[ReqContext, list[tuple[bytes, int, int]]]
# A posted result: (key int, generation, verdict).
Result = tuple[int, int, bool]


class BitmaskInternedManager:
    """vLLM-shaped async lookup manager with interned keys and bitmask requesters."""

    def __init__(self, tier_type: str, shutdown_timeout: float = 60.0) -> None:
        self.tier_type = tier_type
        self._shutdown_timeout = shutdown_timeout
        # key interning
        self._key_ids: dict[bytes, int] = {}
        self._keys: list[bytes | None] = []
        self._free_kids: list[int] = []
        self._kref: dict[int, int] = {}
        # request interning
        self._req_bits: dict[str, int] = {}
        self._bit_owner: list[str | None] = []
        self._free_bits: list[int] = []
        # probe table: parallel dicts keyed by key int
        self._gen: dict[int, int] = {}
        self._phase: dict[int, int] = {}
        self._verdict: dict[int, bool | None] = {}
        self._mask: dict[int, int] = {}
        # request index: bit -> key ints it asked for
        self._req_keys: dict[int, set[int]] = {}
        # the step's batch
        self._batch: list[Entry] = []
        self._next_gen = 0
        self._drain_due = False
        self._closed = False
        # worker plumbing
        self._batches: queue.Queue[list[Group] | None] = queue.Queue()
        self._results: collections.deque[Result] = collections.deque()
        self._results_lock = threading.Lock()
        self._stop = threading.Event()
        self._worker = threading.Thread(
            target=self._run, name="bitmask-interned-worker", daemon=True
        )
        self._worker.start()

    # ------------------------------------------------------------------ tier
    def batch_lookup(self, keys: list[bytes], req_context: ReqContext) -> Iterable[object]:
        """The tier call; a subclass (or the oracle) provides it."""
        raise NotImplementedError("batch_lookup is the tier's; override it")

    # ------------------------------------------------------------ interning
    def _intern(self, key: bytes) -> int:
        kid = self._key_ids.get(key)
        if kid is not None:
            return kid
        if self._free_kids:
            kid = heapq.heappop(self._free_kids)
            self._keys[kid] = key
        else:
            kid = len(self._keys)
            self._keys.append(key)
        self._key_ids[key] = kid
        self._kref[kid] = 0
        return kid

    def _ref(self, kid: int) -> None:
        self._kref[kid] += 1

    def _unref(self, kid: int) -> None:
        left = self._kref[kid] - 1
        if left:
            self._kref[kid] = left
            return
        del self._kref[kid]
        key = self._keys[kid]
        assert key is not None
        del self._key_ids[key]
        self._keys[kid] = None
        heapq.heappush(self._free_kids, kid)

    def _bit_for(self, req_id: str) -> int:
        bit = self._req_bits.get(req_id)
        if bit is not None:
            return bit
        if self._free_bits:
            bit = heapq.heappop(self._free_bits)
            self._bit_owner[bit] = req_id
        else:
            bit = len(self._bit_owner)
            self._bit_owner.append(req_id)
        self._req_bits[req_id] = bit
        self._req_keys[bit] = set()
        return bit

    def _free_bit(self, req_id: str) -> int | None:
        bit = self._req_bits.pop(req_id, None)
        if bit is None:
            return None
        self._bit_owner[bit] = None
        heapq.heappush(self._free_bits, bit)
        return bit

    # --------------------------------------------------------- probe states
    def _new_generation(self) -> int:
        gen = self._next_gen
        self._next_gen += 1
        return gen

    def _create_state(self, kid: int) -> int:
        gen = self._new_generation()
        self._gen[kid] = gen
        self._phase[kid] = PENDING
        self._verdict[kid] = None
        self._mask[kid] = 0
        self._ref(kid)
        return gen

    def _delete_state(self, kid: int) -> None:
        del self._gen[kid]
        del self._phase[kid]
        del self._verdict[kid]
        del self._mask[kid]
        self._unref(kid)

    def _check_open(self) -> None:
        if self._closed:
            raise ManagerClosedError("the manager is shut down")

    # ------------------------------------------------------ scheduler calls
    def lookup(self, key: bytes, req_context: ReqContext) -> bool | None:
        self._check_open()
        if self._drain_due:
            self._drain()
        req_id = req_context.req_id
        bit = self._bit_for(req_id)
        kid = self._intern(key)
        if kid not in self._gen:
            gen = self._create_state(kid)
            self._batch.append((kid, gen, req_id, req_context))
            self._ref(kid)
        self._mask[kid] |= 1 << bit
        self._req_keys[bit].add(kid)
        return self._verdict[kid]

    def _is_live(self, kid: int, gen: int) -> bool:
        """Re-validation at flush: the key still has a state of this generation."""
        return self._gen.get(kid) == gen

    def flush(self) -> None:
        self._check_open()
        self._drain()
        batch, self._batch = self._batch, []
        groups: dict[str, Group] = {}
        for kid, gen, req_id, ctx in batch:
            if not self._is_live(kid, gen):
                self._unref(kid)
                continue
            if self._gen.get(kid) == gen:
                self._phase[kid] = IN_FLIGHT
            key = self._keys[kid]
            assert key is not None
            group = groups.get(req_id)
            if group is None:
                group = groups[req_id] = (ctx, [])
            group[1].append((key, kid, gen))
            # the batch entry's reference now stands for the submitted entry
        if groups:
            self._batches.put(list(groups.values()))
        self._drain_due = True

    def cleanup(self, req_id: str) -> None:
        self._check_open()
        bit = self._free_bit(req_id)
        if bit is None:
            return
        clear = ~(1 << bit)
        for kid in self._req_keys.pop(bit):
            mask = self._mask[kid] & clear
            self._mask[kid] = mask
            if not mask and self._phase[kid] != IN_FLIGHT:
                self._delete_state(kid)

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        self._check_open()
        for key in keys:
            kid = self._key_ids.get(key)
            if kid is not None and self._phase.get(kid) == RESOLVED:
                self._verdict[kid] = False

    def mark_present(self, keys: Iterable[bytes]) -> None:
        self._check_open()
        for key in keys:
            kid = self._key_ids.get(key)
            if kid is None or kid not in self._gen or self._verdict[kid] is True:
                continue
            if not self._mask[kid]:
                self._delete_state(kid)
                continue
            self._gen[kid] = self._new_generation()
            self._phase[kid] = RESOLVED
            self._verdict[kid] = True

    def drain_results(self) -> None:
        self._check_open()
        self._drain()

    def shutdown(self) -> None:
        if self._closed:
            return
        self._stop.set()
        self._batches.put(None)
        self._worker.join(self._shutdown_timeout)
        # batches the worker never took are dropped
        while True:
            try:
                self._batches.get_nowait()
            except queue.Empty:
                break
        for kid, _gen, _req_id, _ctx in self._batch:
            self._unref(kid)
        self._batch = []
        self._drain()
        self._closed = True

    # ------------------------------------------------------------- results
    def _drain(self) -> None:
        with self._results_lock:
            posted = list(self._results)
            self._results.clear()
        for kid, gen, verdict in posted:
            self._apply_result(kid, gen, verdict)
        self._drain_due = False

    def _apply_result(self, kid: int, gen: int, verdict: bool) -> None:
        if self._gen.get(kid) == gen and self._phase[kid] == IN_FLIGHT:
            if not self._mask[kid]:
                self._delete_state(kid)
            else:
                self._verdict[kid] = verdict
                self._phase[kid] = RESOLVED
        # drop the submitted entry's reference (stale or not)
        self._unref(kid)

    # --------------------------------------------------------------- worker
    def _run(self) -> None:
        while True:
            batch = self._batches.get()
            if batch is None or self._stop.is_set():
                return
            for group in batch:
                results = self._probe_group(group)
                with self._results_lock:
                    self._results.extend(results)

    def _probe_group(self, group: Group) -> list[Result]:
        ctx, entries = group
        keys = [key for key, _kid, _gen in entries]
        answers: list[object] = []
        failed = False
        try:
            for answer in self.batch_lookup(keys, ctx):
                answers.append(answer)
                if len(answers) > len(keys):
                    break
        except Exception:
            failed = True
        if failed or len(answers) != len(keys):
            return [(kid, gen, False) for _key, kid, gen in entries]
        return [
            (kid, gen, answer if isinstance(answer, bool) else False)
            for (_key, kid, gen), answer in zip(entries, answers, strict=True)
        ]


class FlushNoRevalidate(BitmaskInternedManager):
    """One bug: flush submits the whole batch without re-validating it (vLLM #55075).

    A cleaned-up or superseded entry still reaches the tier. docs/properties.md
    names it property 1 (no cleaned-up entry is submitted).
    """

    def _is_live(self, kid: int, gen: int) -> bool:
        return True


class AppliesResultsByKey(BitmaskInternedManager):
    """One bug: posted results are applied by key, ignoring their generation (vLLM #54872).

    A result of an old generation (e.g. computed before mark_present) overwrites
    the current probe's verdict. docs/properties.md names it property 2 (no
    cleaned-up entry is delivered), also 3.
    """

    def _apply_result(self, kid: int, gen: int, verdict: bool) -> None:
        if kid in self._gen:
            if not self._mask[kid]:
                self._delete_state(kid)
            else:
                self._verdict[kid] = verdict
                self._phase[kid] = RESOLVED
        self._unref(kid)


class ZipTruncates(BitmaskInternedManager):
    """One bug: the worker zip()s the keys with the tier's answer, unchecked.

    A short answer silently drops the unanswered keys: their probes stay
    IN_FLIGHT forever (a raising tier is still caught). docs/properties.md
    names it property 7 (survival: tier_answers_every_key); the oracle is said
    to show it first as a verdict that never comes, property 6 (progress).
    """

    def _probe_group(self, group: Group) -> list[Result]:
        ctx, entries = group
        keys = [key for key, _kid, _gen in entries]
        try:
            answers = list(self.batch_lookup(keys, ctx))
        except Exception:
            answers = [False] * len(keys)
        return [
            (kid, gen, answer if isinstance(answer, bool) else False)
            for (_key, kid, gen), answer in zip(entries, answers, strict=False)
        ]
