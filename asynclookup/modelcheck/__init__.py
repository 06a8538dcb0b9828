"""asynclookup.modelcheck: the exhaustive bounded model checker of the spec.

Breadth-first search over every interleaving of the spec's actions within
bounds (``search``: the entry point; ``bounds``: what a search is asked and
what it reports; ``_bfs``: the search itself), canonical state encodings
(``_canon``), memoised action evaluation (``_memo``), counterexample replay
(``_counterexample``) and the report in words (``report``).  It imports the standard library and
``asynclookup.spec`` only.
"""

from asynclookup.modelcheck.search import Bounds, CheckResult, check

__all__ = ["Bounds", "CheckResult", "check"]
