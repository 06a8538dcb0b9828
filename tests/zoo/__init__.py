"""The mutant zoo: vLLM-shaped lookup managers, one correct and many broken.

Each class has the shape of vLLM's ``AsyncLookupManager``: constructed with a
``tier_type`` string, an abstract ``batch_lookup(keys, req_context)`` run on the
class's own worker thread, and ``lookup / flush / cleanup / drain_results /
mark_miss / mark_present / shutdown``.  The oracle must kill every mutant and
pass the correct class.  Written here from docs/protocol.md, not copied.
"""
