"""Classes shaped near vLLM's manager: renamed calls, context cleanup, own verdicts, pools, own tables."""
