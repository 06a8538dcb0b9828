"""Buggy twins of the regression pairs: each module has one bug its fixed twin lacks."""
