"""Trace recorders: write what a lookup manager does as a JSON Lines trace (format version 1).

Two recorders share one writer:

- ``TraceWriter`` numbers events, stamps each with the emitting thread's name
  and writes one compact JSON object per line through a buffered file, under a
  lock, so that file order is ``seq`` order.  Its ``observer`` method is an
  observer for ``AsyncLookupManager``; ``record_trace`` wraps the two into a
  context manager::

      with record_trace("run.trace.jsonl", InMemoryTier()) as manager:
          manager.lookup(b"k", RequestContext("r1"))
          manager.flush()

- ``VllmRecorder`` records any vLLM-shaped manager (``lookup``, ``flush``,
  ``cleanup``, ``mark_miss``, ``mark_present``, ``drain_results``, ``shutdown``
  and a ``batch_lookup`` that its own worker thread calls) by wrapping one
  instance's methods.  It cannot see the worker's queue, so its traces have
  ``"worker_steps": false`` and the checker infers the hidden steps.  To make
  the file order a valid interleaving it holds one lock across each scheduler
  call and across the writing of each tier-call line (docs/trace-format.md,
  "Ordering"); a worker that dies of an uncaught exception is recorded as
  ``worker_died`` through ``threading.excepthook``.

The line format itself is documented in docs/trace-format.md and checked by
``asynclookup.trace.format``; this module does not import ``spec`` and judges nothing.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from json.encoder import encode_basestring_ascii as _quote
from typing import IO, Any

from asynclookup.reference.events import Event, Observer
from asynclookup.reference.manager import AsyncLookupManager
from asynclookup.reference.tier import InMemoryTier, Tier

FORMAT = "asynclookup-trace"
VERSION = 1
CLOSED = "closed"  # the error text that means "the manager is shut down"
BUFFER_BYTES = 1 << 16

_encode = json.JSONEncoder(separators=(",", ":")).encode
_LITERALS: dict[object, str] = {None: "null", True: "true", False: "false"}


def _event_line(seq: int, kind: str, thread: str, fields: dict[str, object]) -> str:
    """One event as compact JSON, without building a dict for the encoder (4x faster).

    ``kind`` and the field names are identifiers of the format: no escaping needed.
    """
    parts = ['{"seq":', str(seq), ',"event":"', kind, '","thread":', _quote(thread)]
    for name, value in fields.items():
        parts += (',"', name, '":')
        if value is None or type(value) is bool:
            parts.append(_LITERALS[value])
        elif type(value) is str:
            parts.append(_quote(value))
        elif type(value) is int:
            parts.append(str(value))
        else:
            parts.append(_encode(value))
    parts.append("}\n")
    return "".join(parts)


def _json_ready(value: object) -> object:
    """Bytes as hex strings, tuples as lists, all the way down; the rest as is."""
    if type(value) is bytes:
        return value.hex()
    if isinstance(value, tuple | list):
        return [_json_ready(v) for v in value]
    return value


class TraceWriter:
    """Writes a trace: the header line, then one numbered event per ``write``; thread-safe."""

    def __init__(
        self,
        out: str | os.PathLike[str] | IO[str],
        *,
        recorder: str,
        worker_steps: bool,
        meta: dict[str, Any] | None = None,
    ) -> None:
        if isinstance(out, str | os.PathLike):
            self._file: IO[str] = open(  # noqa: SIM115  (closed by close())
                out, "w", encoding="utf-8", newline="\n", buffering=BUFFER_BYTES
            )
            self._owns = True
        else:
            self._file, self._owns = out, False
        self._lock = threading.Lock()
        self._seq = 0
        self.closed = False
        header: dict[str, Any] = {
            "format": FORMAT, "version": VERSION, "recorder": recorder,
            "worker_steps": worker_steps,
        }
        if meta:
            header["meta"] = meta
        self._file.write(_encode(header) + "\n")

    def write(self, kind: str, **fields: object) -> None:
        """Write one event of ``kind`` from the calling thread; fields are JSON-ready."""
        thread = threading.current_thread().name
        with self._lock:
            if self.closed:
                return  # a late event from a thread that outlived the recording
            self._file.write(_event_line(self._seq, kind, thread, fields))
            self._seq += 1

    @property
    def events_written(self) -> int:
        """How many events have been written so far."""
        return self._seq

    def observer(self, event: Event) -> None:
        """An ``AsyncLookupManager`` observer: one line per reference event."""
        fields = event.fields
        if event.kind == "tier_call_finished":
            self.write(
                event.kind, keys=_json_ready(fields["keys"]), request=fields["request"],
                **_reference_answer(fields["verdicts"], fields["failure"]),  # type: ignore[arg-type]
            )
        else:
            self.write(event.kind, **{k: _json_ready(v) for k, v in fields.items()})

    def flush(self) -> None:
        """Push buffered lines to the operating system."""
        with self._lock:
            if not self.closed:
                self._file.flush()

    def close(self) -> None:
        """Flush and close (a file the writer opened); later events are dropped."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._file.flush()
            if self._owns:
                self._file.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_POSITIONS = re.compile(r"at positions ([0-9, ]+)")


def _reference_answer(verdicts: Sequence[bool], failure: str | None) -> dict[str, object]:
    """The reference's sanitised verdicts and failure text as ``answers`` / ``failure``.

    The reference reports what went wrong but not the raw values, so ``items``
    is given only for non-bool answers (the bad positions shown as a string).
    """
    if failure is None:
        return {"answers": list(verdicts)}
    if failure.startswith("raised"):
        return {"failure": {"kind": "raised", "error": failure}}
    if "non-bool" in failure and (found := _POSITIONS.search(failure)):
        bad = {int(p) for p in found.group(1).replace(" ", "").split(",") if p}
        items = ["non-bool" if i in bad else v for i, v in enumerate(verdicts)]
        return {"failure": {"kind": "non_bool", "error": failure, "items": items}}
    kind = "long" if "more than" in failure else "short"
    return {"failure": {"kind": kind, "error": failure}}


@contextmanager
def record_trace(
    out: str | os.PathLike[str] | IO[str],
    tier: Tier | None = None,
    *,
    mode: str = "threaded",
    observer: Observer | None = None,
    meta: dict[str, Any] | None = None,
) -> Iterator[AsyncLookupManager]:
    """An ``AsyncLookupManager`` whose every event goes to the trace ``out``.

    ``observer``: another observer that sees the same events (after the trace).
    On exit the manager is shut down (its ``shutdown`` is the last event) and
    the file closed.
    """
    with TraceWriter(
        out, recorder="asynclookup reference (observer)", worker_steps=True, meta=meta
    ) as writer:
        hook: Observer = writer.observer
        if observer is not None:
            def hook(event: Event, _other: Observer = observer) -> None:
                writer.observer(event)
                _other(event)
        manager = AsyncLookupManager(
            InMemoryTier() if tier is None else tier,
            mode="stepped" if mode == "stepped" else "threaded",
            observer=hook,
        )
        try:
            yield manager
        finally:
            manager.shutdown()


# -- the vLLM-shaped recorder ------------------------------------------------------

SCHEDULER_METHODS = {  # method name -> the trace event it writes
    "flush": "flush",
    "cleanup": "cleanup",
    "mark_miss": "mark_miss",
    "mark_present": "mark_present",
    "drain_results": "drain",
}


def _error_text(exc: BaseException, closed: tuple[type[BaseException], ...]) -> str:
    return CLOSED if closed and isinstance(exc, closed) else f"{type(exc).__name__}: {exc}"


def _item(value: object) -> object:
    return value if type(value) is bool else repr(value)


def _answer_fields(items: list[object], n: int) -> dict[str, object]:
    """What a tier answered (fully consumed, not raising) as ``answers`` or ``failure``."""
    if len(items) == n and all(type(v) is bool for v in items):
        return {"answers": items}
    kind = "short" if len(items) < n else "long" if len(items) > n else "non_bool"
    return {"failure": {"kind": kind, "items": [_item(v) for v in items]}}


class VllmRecorder:
    """Records one vLLM-shaped manager instance by wrapping its methods; ``close`` undoes it.

    ``closed_errors``: exception types that mean "called after shutdown" (written
    as the error ``"closed"``).  ``tables``: the names of the instance's probe
    table and request index (vLLM's are ``("_lookup_state", "_req_keys")``);
    when given, a ``tables`` event with their keys follows every scheduler call,
    so the checker can see leaks.  Wrap the instance right after construction,
    before its first call.
    """

    def __init__(
        self,
        manager: Any,
        out: str | os.PathLike[str] | IO[str],
        *,
        closed_errors: tuple[type[BaseException], ...] = (),
        tables: tuple[str, str] | None = None,
        meta: dict[str, Any] | None = None,
    ) -> None:
        self.manager = manager
        self._tables = tables
        self.writer = TraceWriter(
            out, recorder=f"asynclookup VllmRecorder ({type(manager).__qualname__})",
            worker_steps=False, meta=meta,
        )
        self._closed_errors = closed_errors
        self._lock = threading.RLock()  # one order for scheduler calls and tier-call lines
        self._local = threading.local()  # .depth: recorded calls on this thread's stack
        self._workers: set[threading.Thread] = set()  # threads that called batch_lookup
        self._died: set[threading.Thread] = set()
        self._wrapped: list[str] = []
        for name, kind in SCHEDULER_METHODS.items():
            self._install(name, self._scheduler_call(name, kind))
        self._install("lookup", self._lookup(manager.lookup))
        self._install("shutdown", self._shutdown(manager.shutdown))
        self._install("batch_lookup", self._batch_lookup(manager.batch_lookup))
        self._previous_hook = threading.excepthook
        threading.excepthook = self._excepthook

    def _install(self, name: str, wrapper: Callable[..., Any]) -> None:
        setattr(self.manager, name, wrapper)
        self._wrapped.append(name)

    def close(self) -> None:
        """Restore the instance's methods and the excepthook; close the trace."""
        for name in self._wrapped:
            self.manager.__dict__.pop(name, None)
        self._wrapped.clear()
        if threading.excepthook == self._excepthook:
            threading.excepthook = self._previous_hook
        self.writer.close()

    def __enter__(self) -> VllmRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- scheduler calls --------------------------------------------------------

    def _enter(self) -> bool:
        """Count this call on the thread's stack; True when it is the outermost one."""
        depth: int = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        return depth == 0

    def _leave(self) -> None:
        self._local.depth -= 1

    def _scheduler_call(self, name: str, kind: str) -> Callable[..., Any]:
        original = getattr(self.manager, name)
        takes_keys = kind in ("mark_miss", "mark_present")

        def call(*args: Any, **kwargs: Any) -> Any:
            if getattr(self._local, "depth", 0):
                return original(*args, **kwargs)  # inside another recorded call
            fields: dict[str, object] = {}
            if takes_keys:
                keys = list(args[0] if args else kwargs.pop("keys"))
                args = (keys, *args[1:])
                fields["keys"] = [bytes(k).hex() for k in keys]
            elif kind == "cleanup":
                fields["request"] = str(args[0] if args else next(iter(kwargs.values())))
            with self._lock:
                self._enter()
                try:
                    result = original(*args, **kwargs)
                except BaseException as exc:
                    self.writer.write(kind, **fields, error=_error_text(exc, self._closed_errors))
                    raise
                finally:
                    self._leave()
                self.writer.write(kind, **fields)
                self._write_tables()
            return result

        return call

    def _write_tables(self) -> None:
        """The keys of the probe table and the requests of the index, if asked for."""
        if self._tables is not None:
            probes, index = (getattr(self.manager, name) for name in self._tables)
            self.writer.write(
                "tables", keys=sorted(bytes(k).hex() for k in probes),
                requests=sorted(str(r) for r in index),
            )

    def _lookup(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def lookup(key: bytes, req_context: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(self._local, "depth", 0):
                return original(key, req_context, *args, **kwargs)
            fields = {"key": bytes(key).hex(), "request": str(req_context.req_id)}
            with self._lock:
                self.writer.write("lookup_called", **fields)
                self._enter()
                try:
                    verdict = original(key, req_context, *args, **kwargs)
                except BaseException as exc:
                    error = _error_text(exc, self._closed_errors)
                    self.writer.write("lookup_returned", **fields, verdict=None, error=error)
                    raise
                finally:
                    self._leave()
                if verdict is None or type(verdict) is bool:
                    self.writer.write("lookup_returned", **fields, verdict=verdict)
                else:
                    error = f"returned {verdict!r}, not True, False or None"
                    self.writer.write("lookup_returned", **fields, verdict=None, error=error)
                self._write_tables()
            return verdict

        return lookup

    def _shutdown(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def shutdown(*args: Any, **kwargs: Any) -> Any:
            if getattr(self._local, "depth", 0):
                return original(*args, **kwargs)
            self._record_dead_workers()
            # Not under the lock: shutdown joins the worker, which may need the
            # lock to write its last tier-call lines.
            self._enter()
            try:
                result = original(*args, **kwargs)
            except BaseException as exc:
                self.writer.write("shutdown", error=_error_text(exc, self._closed_errors))
                raise
            finally:
                self._leave()
            with self._lock:
                self.writer.write("shutdown")
            return result

        return shutdown

    # -- the worker side ------------------------------------------------------------

    def _batch_lookup(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def batch_lookup(keys: Any, req_context: Any) -> Any:
            if not isinstance(keys, Sequence):
                keys = list(keys)
            n = len(keys)
            fields: dict[str, object] = {
                "keys": [bytes(k).hex() for k in keys], "request": str(req_context.req_id),
            }
            with self._lock:
                self._workers.add(threading.current_thread())
                self.writer.write("tier_call_started", **fields)
            try:
                answer = original(keys, req_context)
            except BaseException as exc:
                self._finished(fields, {"failure": {
                    "kind": "raised", "error": f"{type(exc).__name__}: {exc}", "items": [],
                }})
                raise
            if isinstance(answer, list | tuple):
                self._finished(fields, _answer_fields(list(answer), n))
                return answer
            return self._watch(answer, fields, n)

        return batch_lookup

    def _watch(self, answer: Any, fields: dict[str, object], n: int) -> Iterator[object]:
        """Yield a lazy answer's items as the worker pulls them; write the line when it ends."""
        items: list[object] = []
        done = False
        try:
            for item in answer:
                items.append(item)
                yield item
            done = True
        except GeneratorExit:
            done = True  # the worker stopped pulling: record what it saw
            raise
        except BaseException as exc:
            self._finished(fields, {"failure": {
                "kind": "raised", "error": f"{type(exc).__name__}: {exc}",
                "items": [_item(v) for v in items],
            }})
            raise
        finally:
            if done:
                self._finished(fields, _answer_fields(items, n))

    def _finished(self, fields: dict[str, object], answer: dict[str, object]) -> None:
        with self._lock:
            self.writer.write("tier_call_finished", **fields, **answer)

    def _excepthook(self, args: threading.ExceptHookArgs) -> None:
        thread = args.thread
        if thread is not None and thread in self._workers:
            with self._lock:
                self._died.add(thread)
                self.writer.write(
                    "worker_died", reason=f"{args.exc_type.__name__}: {args.exc_value}"
                )
        self._previous_hook(args)

    def _record_dead_workers(self) -> None:
        with self._lock:
            for thread in self._workers - self._died:
                if not thread.is_alive():
                    self._died.add(thread)
                    self.writer.write(
                        "worker_died", reason=f"thread {thread.name!r} ended before shutdown"
                    )


@contextmanager
def record_vllm(
    manager: Any,
    out: str | os.PathLike[str] | IO[str],
    *,
    closed_errors: tuple[type[BaseException], ...] = (),
    tables: tuple[str, str] | None = None,
    meta: dict[str, Any] | None = None,
) -> Iterator[VllmRecorder]:
    """Record ``manager`` (a vLLM-shaped instance) into the trace ``out`` until the block ends."""
    recorder = VllmRecorder(
        manager, out, closed_errors=closed_errors, tables=tables, meta=meta
    )
    try:
        yield recorder
    finally:
        recorder.close()
