"""What the launchers ask of the device: its SM count, with a nominal one for the interpreter.

Shared by the kernels whose grid depends on the machine (paged decode's split count, the KV
write's small-grid tile), so both see the same count and the CPU tests take the same paths.
"""

from __future__ import annotations

import functools

import torch

#: The interpreter has no SMs; a small nominal count makes the CPU tests exercise the
#: machine-dependent paths (decode splits, the KV write's shrunk tiles) at small shapes.
INTERPRETER_SM_COUNT = 4


@functools.lru_cache(maxsize=16)
def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of ``device`` (CUDA), else INTERPRETER_SM_COUNT."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return INTERPRETER_SM_COUNT
