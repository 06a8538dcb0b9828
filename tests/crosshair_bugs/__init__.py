"""Broken spec actions that CrossHair must refute: the non-vacuity half of the contracts.

``broken.py`` generates them from ``asynclookup.spec.variants``: one module per
broken action, holding a function with the spec action's name, signature and
docstring (contract lines included, word for word) that runs the variant's
table entry, so the bug is written once.  ``tests/test_spec_crosshair.py``
writes the modules to a temporary directory and asks CrossHair, through
``refute.py``, for a counterexample to the contract line that states the
broken rule.  ``small_scope.py`` and ``plugin.py`` make
CrossHair build small, spec-shaped States for every CrossHair run of the suite.
Nothing here is imported by the spec, the reference or the model checker.
"""
