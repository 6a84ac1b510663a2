"""kvbench's asv suite: thin classes over kvbench's public API (see benchmarks/_common.py).

asv runs this suite from the working tree against every measured commit, so it may use only
the stable public API (docs/architecture.md) and skips what an old commit lacks.
"""
