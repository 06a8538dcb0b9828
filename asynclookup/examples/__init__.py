"""asynclookup.examples: small lookup managers to point the oracle at, shipped in the package.

``seed_bug`` holds a vLLM-shaped manager with the project's seed bug and its
fixed twin, so that ``pip install asynclookup`` is enough to see the oracle
find a bug (README.md, "Check your implementation").  Example code: standard
library only, and nothing else in the package imports it.
"""
