"""asynclookup.trace: the trace format and the offline trace checker.

- ``format``: the JSON Lines format, its one table of events (each named by
  the spec action it records), the streaming parser;
- ``schema``: the JSON Schema derived from that table (``trace.schema.json``);
- ``check``: a trace streamed through the refinement engine
  (``asynclookup.observe``);
- ``split``: a long trace checked in chunks, in several processes or under a
  job runner, with the judgement of one pass;
- ``report``: ``asynclookup check-trace`` and its shrunk excerpt.

It imports the standard library, ``asynclookup.spec`` and
``asynclookup.observe``, never ``asynclookup.conformance``.  The recorders that write traces belong
to the implementation (``asynclookup.reference.trace``), not here.
"""
