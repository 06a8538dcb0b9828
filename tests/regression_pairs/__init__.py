"""Bug/fix pairs for ``--regression-out``: a user's module before and after the fix.

Each pair is one standalone module (standard library only, as in a user's own
repository) in two twins of the same module and class name: ``buggy/`` holds
it with one bug, ``fixed/`` with that bug fixed and nothing else changed.  A
maintainer generates the regression file from the buggy twin, commits it, fixes
the class, and the same file passes: tests/test_conformance_regression.py does exactly
that, in a fresh directory where this project cannot be imported.

The first four modules are written in different styles (a vLLM 0.34 copy with
plain objects; slots dataclasses, a generation counter and table names of its
own; an IntEnum phase in list records and an ``iter(get, None)`` worker loop;
frozen records replaced on every change, in tables on a plain bookkeeping
object).  The next four have vLLM 0.34's short-answer bug in a shape the oracle
drives only with options (``Pair.options``): calls under names of their own
(``--method``), a cleanup given the request context (``--cleanup-arg
context``), a pool of tier threads sized by the constructor (``--impl-arg``),
and no cleanup at all (``--method cleanup=none``).  The
twins are copies on purpose: a fixed file is what the maintainer has after the
fix, and ``diff buggy/M.py fixed/M.py`` shows only the bug and its docstring.
These are test data: the oracle's own code never imports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUGGY, FIXED = HERE / "buggy", HERE / "fixed"


@dataclass(frozen=True)
class Pair:
    """One bug and its fix: the module, its class, what the oracle must name, how to run it."""

    module: str
    cls: str
    number: int  # the property the regression file is named after and fails on
    faults: str = "all"  # the fuzz run's --faults
    options: tuple[str, ...] = ()  # the fuzz run's options that say the class's shape

    @property
    def impl(self) -> str:
        return f"{self.module}:{self.cls}"


PAIRS = (
    # zip() over keys and a short answer strands the keys left out (vLLM 0.34)
    Pair("prefix_lookup", "PrefixLookupManager", 6, "short"),
    # a result applied by key, not generation, delivers a superseded probe's verdict
    Pair("kv_probe", "KvProbeManager", 2),
    # mark_miss forces a verdict on a PENDING probe, which gets a second one later
    Pair("hit_cache", "HitCacheManager", 3),
    # cleanup leaves the request in the index: a leak the leak check names
    Pair("ledger", "LedgerManager", 4),
    # the short-answer bug (property 6) in four shapes
    Pair("renamed_probe", "RenamedProbeManager", 6, "short", (
        "--method", "batch_lookup=tier_lookup,lookup=query,flush=end_step,cleanup=release,"
        "drain_results=collect,shutdown=close,mark_miss=invalidate")),
    Pair("context_release", "ContextReleaseManager", 6, "short",
         ("--cleanup-arg", "context")),
    Pair("pool_probe", "PoolProbeManager", 6, "short",
         ("--impl-arg", "n_lookup_threads=3")),
    Pair("no_cleanup", "NoCleanupManager", 6, "short", ("--method", "cleanup=none")),
)
