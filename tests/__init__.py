"""The asynclookup test suite."""
