"""The one cache-flush routine every harness timer calls before a cold-L2 measurement.

A KV pool is many times the size of L2, so a decode step reads its rows from DRAM. A timer
that loops over the same small inputs without flushing measures L2 instead and can rank
implementations backwards. One routine, sized from the device's own cache size, keeps "cold"
meaning the same thing in every timer (triton's do_bench uses a fixed 256 MiB regardless of
the device, which is both too much on small parts and a silent assumption on large ones).
"""

from __future__ import annotations

import functools
import glob
import re
import warnings
from collections.abc import Callable

import numpy as np
import torch

from kvbench.core.device import resolve_device

#: Multiple of the last-level cache the flush buffer covers: streaming twice the cache through
#: it evicts every line of a (pseudo-)LRU cache whatever its replacement details.
FLUSH_MULTIPLE = 2

#: CPU last-level cache size assumed when /sys does not say (no sysfs: macOS, containers with a
#: masked /sys). 64 MiB is larger than the L3 of one CCX/socket slice on common servers; it is
#: a fallback, used only when the machine cannot be asked.
CPU_LLC_FALLBACK_BYTES = 64 << 20

_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMG]?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _parse_cache_size(text: str) -> int | None:
    m = _SIZE_RE.match(text)
    if not m:
        return None
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def cpu_llc_bytes(sysfs_glob: str = "/sys/devices/system/cpu/cpu0/cache/index*/size") -> int:
    """Largest cache size listed for cpu0 in sysfs, else CPU_LLC_FALLBACK_BYTES."""
    sizes = []
    for path in glob.glob(sysfs_glob):
        try:
            with open(path, encoding="ascii") as f:
                size = _parse_cache_size(f.read())
        except OSError:
            continue
        if size:
            sizes.append(size)
    return max(sizes) if sizes else CPU_LLC_FALLBACK_BYTES


def flush_bytes(device: object = None) -> int:
    """Bytes l2_flush() streams through the cache of `device`: FLUSH_MULTIPLE x its last-level
    cache."""
    dev = resolve_device(device)
    if dev.type == "cuda":
        return _cuda_flush_bytes(dev.index)
    return FLUSH_MULTIPLE * cpu_llc_bytes()


#: L2 assumed for a CUDA device that reports none (larger than any current GPU's L2).
ASSUMED_L2_BYTES = 128 << 20


@functools.cache
def _cuda_flush_bytes(index: int) -> int:
    l2 = int(getattr(torch.cuda.get_device_properties(index), "L2_cache_size", 0) or 0)
    if l2 <= 0:
        # A device that reports no L2 size: flush a generous fixed amount rather than nothing,
        # and say so: every cold-L2 number of this device rests on the assumption.
        l2 = ASSUMED_L2_BYTES
        warnings.warn(
            f"CUDA device {index} reports no L2 size; the cold-L2 flush assumes "
            f"{l2 >> 20} MiB and streams {FLUSH_MULTIPLE * l2 >> 20} MiB per call",
            stacklevel=2,
        )
    return FLUSH_MULTIPLE * l2


@functools.cache
def _cuda_buffer(index: int) -> torch.Tensor:
    # int32 elements, zeroed once (the flush reads them; no NaN or denormal paths); size
    # rounded up.
    n = -(-_cuda_flush_bytes(index) // 4)
    return torch.zeros(n, dtype=torch.int32, device=torch.device("cuda", index))


@functools.cache
def _cuda_flush(index: int) -> Callable[[], None]:
    """The flush of CUDA device `index`, built once: a read of the whole buffer.

    Why a read and not a write (zero_(), as triton's do_bench does): a write flush leaves up to
    one L2 of dirty lines, whose write-back the timed kernel can pay; the read flush was never
    worse (docs/decisions.md, "Timer head start and read flush").
    """
    return read_flush(_cuda_buffer(index))


def read_flush(buf: torch.Tensor) -> Callable[[], None]:
    """A closure that reads all of 1-D int32 `buf` (a sum into a preallocated scalar).

    The sum accumulates in the buffer's own int32 (it is all zeros: nothing overflows), so the
    buffer is read once and only the scalar is written. An int64 sum would not be a pure read:
    torch casts an int32 input to the int64 of `out` before reducing (its reductions skip the
    cast only for half/bf16 into fp32), writing and re-reading a 2x temporary."""
    out = torch.zeros((), dtype=torch.int32, device=buf.device)

    def flush() -> None:
        torch.sum(buf, dim=0, out=out, dtype=torch.int32)  # torch 2.11: no full-reduction out=

    return flush


@functools.lru_cache(maxsize=1)
def _cpu_buffer() -> np.ndarray:
    return np.empty(flush_bytes("cpu") // 8, dtype=np.int64)


_cpu_counter = 0


def _flush_cpu() -> None:
    global _cpu_counter
    _cpu_counter += 1
    _cpu_buffer().fill(_cpu_counter)


def flusher(device: object = None) -> Callable[[], None]:
    """The flush of `device` as a zero-argument callable, resolved once.

    Timers call this once and the result inside their loops, so the per-iteration cost is the
    write itself and not device resolution. It is the same routine l2_flush() runs.
    """
    dev = resolve_device(device)
    if dev.type == "cuda":
        return _cuda_flush(dev.index)
    _cpu_buffer()  # allocate outside any timed loop
    return _flush_cpu


def l2_flush(device: object = None) -> None:
    """Evict the last-level cache of `device` by streaming a buffer >= 2x its size through it.

    CUDA: enqueues one read (reduction) kernel on the current stream and returns without
    synchronising, so timers can call it between CUDA events. The buffer is allocated once per
    device.
    CPU: writes a numpy buffer of 2x the LLC (a changing value each call, so no layer can
    skip the store as redundant).
    """
    flusher(device)()


def _clear_caches() -> None:
    """Drop the cached flush buffers (tests; or to return the memory after a benchmark run)."""
    _cuda_flush.cache_clear()
    _cuda_buffer.cache_clear()
    _cpu_buffer.cache_clear()


__all__ = ["FLUSH_MULTIPLE", "cpu_llc_bytes", "flush_bytes", "flusher", "l2_flush"]
