"""asynclookup.conformance: the oracle that judges a black-box implementation.

- ``observations``: what the oracle sees of an implementation, as data;
- ``engine``: which spec states explain every observation so far;
- ``classify``: the PROTOCOL.md property an unexplained observation breaks;
- ``adapter`` and ``vllm``: how an implementation is driven (the adapter
  protocol, the oracle's tier, the reference's and vLLM-shaped classes' adapters);
- ``driver``, ``machine``, ``replay``: one call at a time, Hypothesis's
  stateful search, replaying and shrinking counterexamples;
- ``testcase``: a ``unittest.TestCase`` for a user's CI; ``cli``: ``asynclookup fuzz``.

It imports the standard library, Hypothesis, ``asynclookup.spec`` and, for the
reference adapter and the oracle's real tiers, ``asynclookup.reference``.
"""

from asynclookup.conformance.testcase import conformance_test_case

__all__ = ["conformance_test_case"]
