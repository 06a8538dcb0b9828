"""asynclookup.reference: a threaded implementation of the async lookup protocol.

It does not import ``spec``: it is checked against the spec, not built on it.
Start at ``AsyncLookupManager``; docs/reference.md explains the threading model.
"""

from asynclookup.reference.errors import ManagerClosedError
from asynclookup.reference.events import Event, EventRecorder, Observer
from asynclookup.reference.manager import AsyncLookupManager, Phase, ProbeView, Snapshot
from asynclookup.reference.tier import InMemoryTier, RequestContext, Tier
from asynclookup.reference.worker import Worker, WorkerHealth, ask_tier

__all__ = [
    "AsyncLookupManager",
    "Event",
    "EventRecorder",
    "InMemoryTier",
    "ManagerClosedError",
    "Observer",
    "Phase",
    "ProbeView",
    "RequestContext",
    "Snapshot",
    "Tier",
    "Worker",
    "WorkerHealth",
    "ask_tier",
]
