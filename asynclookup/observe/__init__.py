"""asynclookup.observe: the refinement engine, which spec states explain what was seen.

- ``observations``: what a checker sees of an implementation, as data;
- ``engine``: the set of spec states consistent with every observation so far;
- ``classify``: the property (docs/properties.md) an unexplained observation breaks;
- ``fast``: the same set of states stored per key, for long traces.

It imports the standard library and ``asynclookup.spec`` only: it drives
nothing and reads no file.  The oracle (``asynclookup.conformance``) and the
trace checker (``asynclookup.trace``) both judge with it.
"""
