"""asynclookup.conformance.regression: a counterexample as a pytest module of its own.

``writer.write_regression`` is the entry point: it writes the test and, beside it,
the harness every regression file of that directory shares.  ``_paths`` works out
what the spec allows at each call, ``_text`` writes the test module, and
``harness`` is the module written beside it (with the oracle's answer code put in).
"""
