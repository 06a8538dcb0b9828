"""Broken spec actions that CrossHair must refute: the non-vacuity half of the contracts.

Each module holds one action of ``spec.core`` with one protocol rule removed and
the real action's docstring, contract lines included, copied verbatim (a test
pins that they match).  ``tests/test_crosshair.py`` runs ``crosshair check`` on
each module on its own and asserts that a counterexample is reported.  These
modules are never imported by the spec, the reference or the model checker.
"""
