"""Name a target and get its factory: the reference, a vLLM-shaped class, or a user's adapter.

``load_target`` is the one place that knows every kind of target, so that the
adapters (``asynclookup.conformance.targets.adapter``, ``asynclookup.conformance.targets.vllm``)
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
from asynclookup.conformance.targets.vllm import PREFIX, impl_factory, tables_used


def load_target(spec: str) -> TargetFactory:
    """The target named ``reference`` or ``module:attribute``.

    The attribute is a manager class (driven by ``ReferenceAdapter``) or a
    factory ``(tier, mode) -> Target``.  Raises ValueError naming what is wrong.
    """
    if spec == "reference":
        spec = "asynclookup.reference.manager:AsyncLookupManager"
    if spec.startswith(PREFIX):  # a vLLM-shaped class (--impl), with its options
        return impl_factory(spec.removeprefix(PREFIX))
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"--target must be 'reference' or MODULE:ATTRIBUTE, got {spec!r}")
    try:
        found = getattr(import_user_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load target {spec!r}: {exc}") from None
    if isinstance(found, type) and hasattr(found, "lookup") and hasattr(found, "flush"):
        manager_class = found

        def factory(tier: OracleTier, mode: str) -> Target:
            return ReferenceAdapter(manager_class, tier, mode)

        return factory
    if not callable(found):
        raise ValueError(f"target {spec!r} is neither a manager class nor a factory")
    made: TargetFactory = found
    return made


def leak_tables(spec: str) -> TablesUsed | None:
    """The tables the leak check of a vLLM-shaped target reads, and how each was chosen
    (None: another kind of target, whose adapter's ``snapshot()`` says)."""
    if not spec.startswith(PREFIX):
        return None
    return tables_used(spec.removeprefix(PREFIX))
