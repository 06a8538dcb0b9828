"""asynclookup.reference: a threaded implementation of the async lookup protocol.

It does not import ``spec``: it is checked against the spec, not built on it.
"""

from reference.tier import InMemoryTier, RequestContext, Tier

__all__ = ["InMemoryTier", "RequestContext", "Tier"]
