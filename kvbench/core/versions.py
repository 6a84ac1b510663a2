"""The versions of the software a measurement depends on besides kvbench itself."""

from __future__ import annotations


def triton_version() -> str | None:
    """triton.__version__, or None where triton is not installed (metadata, calibrate and the
    perf tables' staleness check read it from here)."""
    try:
        import triton
    except ImportError:
        return None
    return str(triton.__version__)
