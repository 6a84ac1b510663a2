"""The history layer: asv glue, the verdict engine (regressions, bisect) over asv's results,
and what kvbench keeps beside them (the sidecar)."""
