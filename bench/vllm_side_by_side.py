"""Benchmark: the reference manager beside vLLM 0.34's own ``async_lookup.py``, in one process.

Where vLLM's code comes from: at bench time, ``pip download --no-deps
vllm==0.34.0`` into a temporary directory (or ``--wheel PATH``, a wheel already
downloaded), and only ``vllm/v1/kv_offload/tiering/async_lookup.py`` is read out
of it with ``zipfile`` (found by name, not by a hard-coded path) and written
into another temporary directory.  Nothing of vLLM is kept in this repository
or after the run.  The module imports two other vLLM modules; this script
writes minimal stand-ins for them next to it, in that temporary directory:

- ``vllm.logger.init_logger``: ``logging.getLogger``;
- ``vllm.v1.kv_offload.base``: ``OffloadKey = NewType("OffloadKey", bytes)``,
  as vLLM defines it, and ``ReqContext``, a plain ``@dataclass`` with a
  ``req_id: str`` field (vLLM's is a plain dataclass too, with more fields that
  ``async_lookup.py`` never reads; the real module imports torch and numpy).

What is compared, like with like:

- vLLM's ``AsyncLookupManager`` is an ABC whose subclass supplies
  ``batch_lookup``; it always runs its own worker thread.  So the reference
  runs in ``mode="threaded"`` with no observer (its production shape), and both
  get the same in-memory tier: the vLLM subclass's ``batch_lookup`` calls an
  ``InMemoryTier`` (a dict behind a lock), the one the reference is given.
- **resolved lookup** (ns/op): ``lookup(key, request)`` of a key already
  RESOLVED for that request, the call a scheduler repeats every step for every
  waiting block; one key, and 1,000 keys round robin.  Both managers get there
  the same way: lookup, ``mark_present``, ``flush`` (no worker call).  The
  loop's own cost is included in both (the empty loop is printed apart, and
  so is the call of a method that does nothing: the part of either figure
  that no Python ``lookup`` can avoid).
- **step** (us/step): ``drain_results()``, 1,000 lookups of new keys (8
  requests of 125 keys), ``flush()``.  Between steps, untimed: the step's
  requests are cleaned up (the tables stay the same size) and the scheduler
  sleeps ``--window-ms`` (the model-execution window, when an engine's worker
  thread does its tier calls).  The row "back to back" has no window: the
  worker competes with the timed code for the GIL.

Each figure is the CPU time of the calling thread (``time.thread_time_ns``: the
worker threads' CPU is not in it), median of ``--runs`` runs with its range;
the runs alternate between the two implementations so that a change in the
machine's load falls on both, and each starts from a collected heap
(``gc.collect()``, untimed) so that one side's garbage is not collected in the
other's run.  The ratio is reference / vLLM (0.5: the
reference costs half as much).  Usage (from the repository root)::

    .venv/bin/python bench/vllm_side_by_side.py [--ops 1000000] [--steps 200]
        [--runs 7] [--window-ms 2] [--version 0.34.0] [--wheel PATH]

This script measures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Collection, Iterable, Sequence
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn, Protocol

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asynclookup.reference import AsyncLookupManager, InMemoryTier, RequestContext

MODULE_NAME = "async_lookup.py"  # the file looked for inside the wheel
STEP_KEYS, STEP_REQUESTS = 1000, 8

# The stand-ins for the vLLM modules that async_lookup.py imports (see the docstring).
STAND_INS: dict[str, str] = {
    "vllm/__init__.py": '"""Stand-in package written by bench/vllm_side_by_side.py."""\n',
    "vllm/logger.py": (
        '"""Stand-in for vllm.logger (bench/vllm_side_by_side.py)."""\n'
        "from logging import getLogger as init_logger\n\n"
        '__all__ = ["init_logger"]\n'
    ),
    "vllm/v1/__init__.py": "",
    "vllm/v1/kv_offload/__init__.py": "",
    "vllm/v1/kv_offload/base.py": (
        '"""Stand-in for vllm.v1.kv_offload.base (bench/vllm_side_by_side.py)."""\n'
        "from dataclasses import dataclass\n"
        "from typing import NewType\n\n"
        'OffloadKey = NewType("OffloadKey", bytes)\n\n\n'
        "@dataclass\n"
        "class ReqContext:\n"
        "    req_id: str\n"
    ),
}


class Manager(Protocol):
    """What this script calls on either manager."""

    def lookup(self, key: bytes, request: Any, /) -> bool | None: ...
    def flush(self) -> None: ...
    def drain_results(self) -> None: ...
    def cleanup(self, request_id: str, /) -> None: ...
    def mark_present(self, keys: Collection[bytes], /) -> None: ...
    def shutdown(self) -> None: ...


class Contestant:
    """One implementation: how to make a manager and a request context."""

    def __init__(
        self, name: str, manager: Callable[[], Manager], context: Callable[[str], object]
    ) -> None:
        self.name = name
        self.manager = manager
        self.context = context


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"bench/vllm_side_by_side.py: {message}\n")


# -- getting vLLM's module -------------------------------------------------------------


def download_wheel(version: str, into: Path) -> Path:
    """``pip download --no-deps vllm==VERSION`` into ``into``; the wheel's path."""
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--quiet", f"vllm=={version}", "-d", str(into),
    ]
    print(f"$ {' '.join(command[2:])}", file=sys.stderr)
    if subprocess.run(command).returncode != 0:
        raise SystemExit(
            f"bench/vllm_side_by_side.py: pip could not download vllm=={version} "
            "(another --version, or --wheel PATH?)"
        )
    wheels = sorted(into.glob("vllm-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"bench/vllm_side_by_side.py: expected one vllm wheel, got {wheels}")
    return wheels[0]


def extract_module(wheel: Path, into: Path) -> tuple[Path, str]:
    """Write only vLLM's ``async_lookup.py`` and the stand-ins into ``into``.

    Returns the module's path and its path inside the wheel.
    """
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.rsplit("/", 1)[-1] == MODULE_NAME]
        if len(names) != 1:
            raise SystemExit(
                f"bench/vllm_side_by_side.py: {wheel.name} has {len(names)} files named "
                f"{MODULE_NAME}: {names}"
            )
        source = archive.read(names[0])
    module = into / MODULE_NAME
    module.write_bytes(source)
    for relative, text in STAND_INS.items():
        path = into / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return module, names[0]


def import_module(path: Path) -> ModuleType:
    """Import vLLM's module from ``path``, its imports served by the stand-ins beside it."""
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location("vllm_async_lookup", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up here
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


def vllm_contestant(module: ModuleType) -> Contestant:
    """vLLM's manager, subclassed as vLLM's tiers do, over an ``InMemoryTier``."""

    def init(self: Any) -> None:
        self.tier = InMemoryTier()  # before the base class starts the worker thread
        module.AsyncLookupManager.__init__(self, "memory")

    def batch_lookup(self: Any, keys: list[bytes], req_context: Any) -> Iterable[bool]:
        tier: InMemoryTier = self.tier
        return tier.batch_lookup(keys, req_context)

    cls = type(
        "InMemoryAsyncLookupManager",
        (module.AsyncLookupManager,),
        {"__init__": init, "batch_lookup": batch_lookup},
    )

    def make() -> Manager:
        manager: Manager = cls()
        return manager

    return Contestant("vLLM", make, module.ReqContext)


def reference_contestant() -> Contestant:
    def make() -> Manager:
        return AsyncLookupManager(InMemoryTier(), mode="threaded")

    return Contestant("reference", make, RequestContext)


# -- the two figures -------------------------------------------------------------------


def time_lookups(who: Contestant, keys: Sequence[bytes], ops: int) -> float:
    """CPU ns per ``lookup`` of a RESOLVED key, over ``ops`` calls cycling through ``keys``."""
    manager = who.manager()
    request = who.context("bench")
    for key in keys:
        manager.lookup(key, request)
    manager.mark_present(keys)
    manager.flush()  # drops the superseded batch entries: the worker gets nothing
    if not all(manager.lookup(key, request) is True for key in keys):
        raise SystemExit(f"bench/vllm_side_by_side.py: {who.name}: keys not resolved")
    lookup = manager.lookup
    sequence = list(keys) * max(1, ops // len(keys))
    cpu = time.thread_time_ns()
    for key in sequence:
        lookup(key, request)
    cpu = time.thread_time_ns() - cpu
    manager.shutdown()
    return cpu / len(sequence)


def time_empty_loop(ops: int) -> float:
    """CPU ns per iteration of the same loop with no call in it."""
    sequence = [b"block"] * ops
    cpu = time.thread_time_ns()
    for _key in sequence:
        pass
    return (time.thread_time_ns() - cpu) / len(sequence)


class _Nothing:
    """A lookup that does nothing: what any Python ``lookup`` method pays to be called."""

    def lookup(self, key: bytes, request: object) -> bool | None:
        return None


def time_call_floor(ops: int) -> float:
    """CPU ns per call of ``_Nothing.lookup`` in the loop of ``time_lookups``."""
    lookup, request = _Nothing().lookup, RequestContext("bench")
    sequence = [b"block-resolved"] * ops
    cpu = time.thread_time_ns()
    for key in sequence:
        lookup(key, request)
    return (time.thread_time_ns() - cpu) / len(sequence)


def time_steps(who: Contestant, steps: int, window_ms: float) -> float:
    """CPU us per step: drain, 1,000 new-key lookups over 8 requests, flush."""
    manager = who.manager()
    per_request = STEP_KEYS // STEP_REQUESTS
    total = 0
    for step in range(steps):
        requests = [who.context(f"s{step}-r{i}") for i in range(STEP_REQUESTS)]
        pairs = [
            (f"s{step}-k{i}".encode(), requests[i // per_request]) for i in range(STEP_KEYS)
        ]
        lookup = manager.lookup
        cpu = time.thread_time_ns()
        manager.drain_results()  # the last step's results, as a scheduler step starts
        for key, request in pairs:
            lookup(key, request)
        manager.flush()
        total += time.thread_time_ns() - cpu
        for i in range(STEP_REQUESTS):  # untimed: keep the tables the same size
            manager.cleanup(f"s{step}-r{i}")
        if window_ms:
            time.sleep(window_ms / 1000)  # simulated forward pass, not synchronisation
    manager.shutdown()
    return total / steps / 1000


# -- reporting -------------------------------------------------------------------------


def row(figure: str, unit: str, ours: list[float], theirs: list[float]) -> str:
    """One markdown row: both medians with their ranges, and the ratio of the medians."""

    def cell(values: list[float]) -> str:
        return (
            f"{statistics.median(values):,.0f} {unit} "
            f"({min(values):,.0f} to {max(values):,.0f})"
        )

    ratio = statistics.median(ours) / statistics.median(theirs)
    return f"| {figure} | {cell(ours)} | {cell(theirs)} | **{ratio:.2f}×** |"


def alternate(
    runs: int, contestants: Sequence[Contestant], measure: Callable[[Contestant], float]
) -> list[list[float]]:
    """``runs`` measurements of each contestant, taking turns run by run.

    Each run starts from a collected heap, so that the garbage one contestant
    left does not fall into the other's run.
    """
    results: list[list[float]] = [[] for _ in contestants]
    for _ in range(runs):
        for i, who in enumerate(contestants):
            gc.collect()
            results[i].append(measure(who))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--ops", type=int, default=1_000_000, help="lookups per run")
    parser.add_argument("--steps", type=int, default=200, help="steps per run")
    parser.add_argument("--runs", type=int, default=7, help="runs per figure (median)")
    parser.add_argument(
        "--window-ms", type=float, default=2.0,
        help="simulated forward pass between steps (default 2 ms)",
    )
    parser.add_argument("--version", default="0.34.0", help="vLLM release (default 0.34.0)")
    parser.add_argument("--wheel", type=Path, help="a vLLM wheel already downloaded")
    args = parser.parse_args(argv)
    for name in ("ops", "steps", "runs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if not args.window_ms > 0:
        parser.error(f"--window-ms must be positive, got {args.window_ms}")
    runs: int = args.runs

    with tempfile.TemporaryDirectory(prefix="vllm-side-by-side-") as tmp:
        wheel: Path = args.wheel or download_wheel(args.version, Path(tmp) / "wheel")
        module_dir = Path(tmp) / "module"
        module_dir.mkdir()
        path, inside = extract_module(wheel, module_dir)
        vllm = vllm_contestant(import_module(path))
    both = (reference_contestant(), vllm)

    print(f"python {sys.version.split()[0]}; vLLM: {wheel.name}, {inside}")
    print(f"CPU time of the calling thread, median of {runs} runs (min to max)\n")
    release = wheel.name.split("-")[1]  # vllm-0.34.0-cp38-abi3-....whl
    print(f"| figure | reference | vLLM {release} | reference / vLLM |")
    print("|---|---|---|---|")
    for label, measure in (
        ("empty loop (included below)", time_empty_loop),
        ("call of a lookup method that returns None", time_call_floor),
    ):
        median = statistics.median([measure(args.ops) for _ in range(runs)])
        print(f"| {label} | {median:,.0f} ns/op | {median:,.0f} ns/op | |")
    for label, keys in (
        ("1 key", [b"block-resolved"]),
        ("1,000 keys round robin", [f"block-{i}".encode() for i in range(1000)]),
    ):
        a, b = alternate(runs, both, partial(time_lookups, keys=keys, ops=args.ops))
        print(row(f"resolved lookup, {label}", "ns/op", a, b))
    for label, window in (
        (f"{args.window_ms:g} ms model window", args.window_ms), ("back to back", 0.0)
    ):
        a, b = alternate(runs, both, partial(time_steps, steps=args.steps, window_ms=window))
        print(row(f"step of 1,000 new keys, {label}", "us/step", a, b))
    return 0


if __name__ == "__main__":
    sys.exit(main())
