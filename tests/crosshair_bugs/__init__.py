"""Broken spec actions that CrossHair must refute: the non-vacuity half of the contracts.

Each bug module holds one action of ``asynclookup.spec.core`` with one protocol rule
removed and the real action's docstring, contract lines included, copied
verbatim (a test pins that they match).  ``tests/test_spec_crosshair.py`` asks
CrossHair, through ``refute.py``, for a counterexample to the contract line
that states the broken rule.  ``small_scope.py`` and ``plugin.py`` make
CrossHair build small, spec-shaped States for every CrossHair run of the suite.
Nothing here is imported by the spec, the reference or the model checker.
"""
