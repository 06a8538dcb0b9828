"""Name a target and get its factory: the reference, a vLLM-shaped class, or a user's adapter.

``load_target`` is the one place that knows every kind of target, so that the
adapters (``asynclookup.conformance.adapter``, ``asynclookup.conformance.vllm``)
need not know each other.
"""

from __future__ import annotations

from asynclookup.conformance.adapter import (
    OracleTier,
    ReferenceAdapter,
    Target,
    TargetFactory,
    import_user_module,
)
from asynclookup.conformance.vllm import impl_factory


def load_target(spec: str) -> TargetFactory:
    """The target named ``reference`` or ``module:attribute``.

    The attribute is a manager class (driven by ``ReferenceAdapter``) or a
    factory ``(tier, mode) -> Target``.  Raises ValueError naming what is wrong.
    """
    if spec == "reference":
        spec = "asynclookup.reference.manager:AsyncLookupManager"
    if spec.startswith("impl:"):  # a vLLM-shaped class (--impl)
        return impl_factory(spec.removeprefix("impl:"))
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
