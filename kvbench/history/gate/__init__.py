"""The CI gate's fresh measurements: `kvbench compare BASE HEAD` (every series of two commits,
A/B in interleaved process runs) and the confirmation of `kvbench regressions --confirm`."""
