"""asynclookup.conformance.targets: what the oracle drives, and its side of the black box.

- ``adapter``: the protocol a target follows (``Target``), the oracle's tier and
  its fault plans, and the reference's adapter;
- ``vllm``: the adapter of any vLLM-shaped lookup manager class, with
  ``shape`` (how such a class may differ from vLLM's), ``tables`` (finding its
  tables) and ``threads`` (watching its threads);
- ``load``: a target's name turned into its factory;
- ``inner_tier``: the real tier (``--tier fs|redis``) behind the oracle's tier.

It does not judge: ``asynclookup.observe`` does, from what the run loop in
``asynclookup.conformance`` observes through a target.
"""
