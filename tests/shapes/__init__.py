"""Classes shaped near vLLM's manager: renamed calls, context cleanup, verdicts, pools, tables."""
