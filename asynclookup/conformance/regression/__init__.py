"""asynclookup.conformance.regression: a counterexample as a pytest module of its own.

``writer.regression_file`` is the entry point; ``_paths`` works out what the
spec allows at each call, ``_text`` writes the module and ``_harness`` is the
scripted tier and checks every written module carries.
"""
