"""kvbench: per-commit performance history for the KV-cache kernels of an LLM engine.

See docs/architecture.md for the module map and the units at each boundary.
"""

__version__ = "0.1.0"
