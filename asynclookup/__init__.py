"""asynclookup: the async lookup protocol, its reference implementation and its checkers.

One installed namespace, six parts; dependencies point down, never up:

- ``asynclookup.spec``: the protocol as a pure state machine (state, actions,
  properties, contracts, broken variants).  Standard library only.
- ``asynclookup.reference``: a threaded implementation with real tiers.  It
  imports nothing of the spec or the checkers: it is checked, not built on them.
- ``asynclookup.modelcheck``: the exhaustive bounded model checker of the spec.
- ``asynclookup.observe``: the refinement engine, the set of spec states that
  explain what was observed of an implementation.
- ``asynclookup.conformance``: the oracle that fuzzes a black-box
  implementation and judges every observation with that engine.
- ``asynclookup.trace``: the trace format and the offline trace checker, which
  judges recorded traces with the same engine.

``asynclookup.cli`` is the ``asynclookup`` command, a thin layer that registers
each checker's subcommand.  Every error a tool raises derives from
``asynclookup.errors.AsyncLookupError``.

This module imports nothing, so that ``import asynclookup.reference`` loads
the reference alone.
"""

__version__ = "0.2.0"
