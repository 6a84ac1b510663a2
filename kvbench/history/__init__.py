"""kvbench.history: asv glue and what kvbench reads beside asv results (the sidecar)."""
