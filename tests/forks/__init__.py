"""Forks: twins of public vLLM forks' async lookup managers, each with the bug it shipped.

``tests.forks.vllm_fork`` holds a correct manager in the shape of vLLM 0.34's
``async_lookup.py`` (its tables, its phase asserts, its enqueue-once assert, one
worker thread posting per request group) and one-bug copies of it, each the
change a public fork made.  Written here, in this project's words: no fork's
code is copied.  The oracle once named each bug by another property than its
own (issue 21, item 4); ``tests/test_conformance_forks.py`` pins the names.

- ``CORRECT``: the base, which conforms to docs/protocol.md.
- ``BUGGY``: each one-bug copy mapped to the property of docs/properties.md that
  names its bug (the property the oracle must report, on every seed).
- ``STRICT``: the copies whose property is 8, an efficiency property: killed only
  with ``--strict-efficiency`` (otherwise a warning).
"""

from __future__ import annotations

_P = "tests.forks.vllm_fork:"

CORRECT: tuple[str, ...] = (_P + "ForkManager",)

BUGGY: dict[str, int] = {
    # mark_miss forces the verdict of an in-flight probe: the probe's own result then
    # trips the enqueue-once assert in drain_results (docs/oracle.md's table: 3)
    _P + "MarkMissBeforeEnqueueOnce": 3,
    # cleanup cancels the queued probes of the request's keys, another request's share
    # too, so that request's next lookup probes the key again (a redundant probe: 8)
    _P + "CleanupCancelsSharedProbe": 8,
    # four pool threads; the next batch is taken before the last one's groups are posted
    _P + "PoolTakesNextBatchEarly": 6,
}

STRICT: frozenset[str] = frozenset({_P + "CleanupCancelsSharedProbe"})
