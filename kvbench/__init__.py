"""kvbench: per-commit performance history for the KV-cache kernels of an LLM engine.

The engine-facing entry points are attributes of this package, loaded on first use so that
`import kvbench` (the asv plugin, the CLI's help) stays light:

    kvbench.paged_decode, kvbench.kv_write, kvbench.kv_gather_fp8, kvbench.KVCacheManager,
    kvbench.last_selection, kvbench.raise_pending

Each lives in kvbench.api, the layer above dispatch; docs/architecture.md has the module map
and the units at each boundary.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: Public name -> the module that defines it.
_ENTRY_POINTS = {
    "paged_decode": "kvbench.api",
    "kv_write": "kvbench.api",
    "kv_gather_fp8": "kvbench.api",
    "KVCacheManager": "kvbench.api",
    "last_selection": "kvbench.api",
    "raise_pending": "kvbench.api",
}

__all__ = [
    "KVCacheManager",
    "__version__",
    "kv_gather_fp8",
    "kv_write",
    "last_selection",
    "paged_decode",
    "raise_pending",
]


def __getattr__(name: str) -> Any:
    """Load an entry point on first access and keep it as a plain attribute afterwards."""
    module = _ENTRY_POINTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kvbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
