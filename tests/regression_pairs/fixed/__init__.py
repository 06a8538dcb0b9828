"""Fixed twins of the regression pairs: same module and class names as the buggy twins."""
