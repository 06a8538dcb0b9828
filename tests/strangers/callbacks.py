"""Callbacks: a separate prober object calls back into the manager with each group's results.

Style: composition and parallel dicts.  The worker is its own class, ``_Prober``, which
knows nothing of the manager: it is built with an ``ask`` function (the tier call) and a
``deliver`` callback, and owns its thread and its ``queue.Queue`` of batches.  The manager
keeps one dict per attribute of a probe (``_gen``, ``_phase``, ``_verdict``, ``_who``)
instead of a record; a probe exists while its key is in ``_gen``.  The ``deliver`` callback,
run on the prober's thread, only appends ``(key, generation, verdict)`` results to a list
under a ``threading.Lock``; the scheduler applies them when it drains (per the spec's
rule).  Tier faults are handled strictly: any fault gives ``False`` to every key of the call.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable, Iterable
from typing import Protocol


class RequestContext(Protocol):
    @property
    def req_id(self) -> str: ...


Job = tuple[bytes, RequestContext, int]
Result = tuple[bytes, int, bool]


class _Prober:
    """The worker: takes one batch at a time, one tier call per request, one callback per call."""

    def __init__(
        self,
        ask: Callable[[list[bytes], RequestContext], Iterable[object]],
        deliver: Callable[[list[Result]], None],
    ) -> None:
        self._ask = ask
        self._deliver = deliver
        self._jobs: queue.Queue[list[Job] | None] = queue.Queue()
        self._quit = threading.Event()
        self.thread = threading.Thread(target=self._main, name="callback-prober", daemon=True)
        self.thread.start()

    def submit(self, jobs: list[Job]) -> None:
        self._jobs.put(jobs)

    def stop(self, timeout: float) -> None:
        self._quit.set()
        self._jobs.put(None)
        self.thread.join(timeout)

    def _main(self) -> None:
        for jobs in iter(self._jobs.get, None):
            if self._quit.is_set():
                return
            requests: dict[str, list[Job]] = {}
            for job in jobs:
                requests.setdefault(job[1].req_id, []).append(job)
            for group in requests.values():
                keys = [key for key, _, _ in group]
                verdicts = self._verdicts(keys, group[0][1])
                self._deliver([(k, g, v) for (k, _, g), v in zip(group, verdicts, strict=True)])

    def _verdicts(self, keys: list[bytes], context: RequestContext) -> list[bool]:
        try:
            answer = list(itertools.islice(self._ask(list(keys), context), len(keys) + 1))
        except Exception:
            return [False] * len(keys)
        if len(answer) != len(keys):
            return [False] * len(keys)
        if not all(value is True or value is False for value in answer):
            return [False] * len(keys)
        return [value is True for value in answer]


class CallbackManager:
    join_timeout = 10.0

    def __init__(self, tier_type: str) -> None:
        self.tier_type = tier_type
        self._gen: dict[bytes, int] = {}
        self._phase: dict[bytes, str] = {}
        self._verdict: dict[bytes, bool] = {}
        self._who: dict[bytes, set[str]] = {}
        self._asked: dict[str, set[bytes]] = {}
        self._step: list[Job] = []
        self._tick = itertools.count(100)
        self._flushed = False
        self._stopped = False
        self._mail: list[Result] = []
        self._mail_lock = threading.Lock()
        # late-bound, so that a subclass's (or a test's) batch_lookup is the one called
        self._prober = _Prober(lambda keys, ctx: self.batch_lookup(keys, ctx), self._on_results)

    def batch_lookup(self, keys: list[bytes], req_context: RequestContext) -> Iterable[bool]:
        raise NotImplementedError(self.tier_type)

    def _on_results(self, results: list[Result]) -> None:
        """The callback: runs on the prober's thread; touches only the mailbox."""
        with self._mail_lock:
            self._mail.extend(results)

    # ------------------------------------------------------------ probe table helpers

    def _create(self, key: bytes, generation: int, phase: str) -> None:
        self._gen[key] = generation
        self._phase[key] = phase
        self._verdict.pop(key, None)
        self._who.setdefault(key, set())

    def _forget(self, key: bytes) -> None:
        for table in (self._gen, self._phase, self._verdict, self._who):
            table.pop(key, None)

    def _current(self, key: bytes, generation: int) -> bool:
        return self._gen.get(key) == generation

    # ------------------------------------------------------------ scheduler

    def lookup(self, key: bytes, req_context: RequestContext) -> bool | None:
        if self._flushed:
            self._apply_mail()
        rid = req_context.req_id
        if key not in self._gen:
            self._create(key, next(self._tick), "P")
            self._step.append((key, req_context, self._gen[key]))
        self._who[key].add(rid)
        self._asked.setdefault(rid, set()).add(key)
        return self._verdict.get(key) if self._phase[key] == "R" else None

    def flush(self) -> None:
        self._apply_mail()
        self._flushed = True
        submit = [job for job in self._step if self._gen.get(job[0]) == job[2]]
        self._step = []
        for key, _, _ in submit:
            self._phase[key] = "F"
        if submit:
            self._prober.submit(submit)

    def cleanup(self, req_id: str) -> None:
        for key in self._asked.pop(req_id, set()):
            if key not in self._gen:
                continue
            self._who[key].discard(req_id)
            if not self._who[key] and self._cleanup_may_forget(key):
                self._forget(key)

    def _cleanup_may_forget(self, key: bytes) -> bool:
        return self._phase[key] != "F"

    def mark_miss(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            if self._phase.get(key) == "R":
                self._verdict[key] = False

    def mark_present(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            if key not in self._gen or self._verdict.get(key) is True:
                continue
            if not self._who[key]:
                self._forget(key)
                continue
            self._create(key, next(self._tick), "R")
            self._verdict[key] = True

    def drain_results(self) -> None:
        self._apply_mail()

    def shutdown(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._prober.stop(self.join_timeout)
        self._apply_mail()
        self._step = []

    def _apply_mail(self) -> None:
        self._flushed = False
        with self._mail_lock:
            mail, self._mail = self._mail, []
        for key, generation, verdict in mail:
            if not self._current(key, generation):
                continue
            if self._who[key]:
                self._phase[key] = "R"
                self._verdict[key] = verdict
            else:
                self._forget(key)


# ------------------------------------------------------------------ one-bug copies


class CallbackIgnoresGeneration(CallbackManager):
    """BUG (property 2): a delivered result is current whenever its key has any probe."""

    def _current(self, key: bytes, generation: int) -> bool:
        return key in self._gen


class CallbackCleanupForgetsInFlight(CallbackManager):
    """BUG (property 8): cleanup forgets an orphaned IN_FLIGHT probe, so the key is re-probed."""

    def _cleanup_may_forget(self, key: bytes) -> bool:
        return True
