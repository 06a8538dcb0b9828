"""asynclookup.conformance: the oracle that judges a black-box implementation.

- ``targets/``: how an implementation is driven (the adapter protocol, the
  oracle's tier and fault plans, the reference's and vLLM-shaped classes'
  adapters, loading a target by name, the real tier behind the oracle's);
- ``driver``, ``machine``, ``replay``: one call at a time, Hypothesis's
  stateful search, replaying and shrinking counterexamples;
- ``counterexample``: the numbered calls of a finding, ``ConformanceError``
  and how they read;
- ``regression/``: a counterexample written as a standalone pytest module;
- ``campaign``: many workers, one example database;
- ``testcase``: a ``unittest.TestCase`` for a user's CI; ``cli``: ``asynclookup fuzz``.

It judges with ``asynclookup.observe`` (the refinement engine) and imports the
standard library, Hypothesis, ``asynclookup.spec`` and, for the reference
adapter and the oracle's real tiers, ``asynclookup.reference``.

``conformance_test_case`` is imported on first use (PEP 562), so that importing
a part of the package does not load Hypothesis.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from asynclookup.conformance.testcase import conformance_test_case

__all__ = ["conformance_test_case"]


def __getattr__(name: str) -> Any:
    if name == "conformance_test_case":
        from asynclookup.conformance.testcase import conformance_test_case

        return conformance_test_case
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
