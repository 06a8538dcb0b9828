"""A target's factory: the reference, a vLLM-shaped class, or a user's adapter.

``load_target`` is the one place that knows every kind of target
(``asynclookup.conformance.targets.target.FuzzTarget``), so that the adapters
(``asynclookup.conformance.targets.adapter``, ``asynclookup.conformance.targets.vllm``)
need not know each other; ``leak_tables`` says which tables a vLLM-shaped
target's leak check reads (for the report).
"""

from __future__ import annotations

from asynclookup.conformance.targets.adapter import (
    OracleTier,
    ReferenceAdapter,
    Target,
    TargetFactory,
    import_user_module,
)
from asynclookup.conformance.targets.tables import TablesUsed
from asynclookup.conformance.targets.target import FuzzTarget
from asynclookup.conformance.targets.vllm import impl_factory, tables_used


def load_target(target: FuzzTarget | str) -> TargetFactory:
    """The factory of ``target`` (its text, at the edges that have text: replay files).

    A ``target`` kind's attribute is a manager class (driven by ``ReferenceAdapter``)
    or a factory ``(tier, mode) -> Target``.  Raises ValueError naming what is wrong.
    """
    target = FuzzTarget.of(target)
    if target.is_impl:  # a vLLM-shaped class (--impl), with its shape
        return impl_factory(target)
    try:
        found = getattr(import_user_module(target.module), target.attribute)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load target {str(target)!r}: {exc}") from None
    if isinstance(found, type) and hasattr(found, "lookup") and hasattr(found, "flush"):
        manager_class = found

        def factory(tier: OracleTier, mode: str) -> Target:
            return ReferenceAdapter(manager_class, tier, mode)

        return factory
    if not callable(found):
        raise ValueError(f"target {str(target)!r} is neither a manager class nor a factory")
    made: TargetFactory = found
    return made


def leak_tables(target: FuzzTarget | str) -> TablesUsed | None:
    """The tables the leak check of a vLLM-shaped target reads, and how each was chosen
    (None: another kind of target, whose adapter's ``snapshot()`` says)."""
    target = FuzzTarget.of(target)
    return tables_used(target) if target.is_impl else None
