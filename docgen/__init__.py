"""docgen: a development tool that writes the generated blocks of docs/; not installed.

``python -m docgen`` rewrites them, ``python -m docgen --check`` fails on a
stale one.  It may import anything in the repository, tests/ included.
"""
