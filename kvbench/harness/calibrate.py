"""Measured bandwidth ceilings: what a streaming kernel can actually reach on this device.

The spec peak (clock x bus) is never reached (an H200 copies at under 90% of it), so a decode
kernel's share of the spec peak understates how close it is to what the memory system
delivers, and that second number is the one that says whether there is anything left to win.
calibrate() measures three streams with the same cold-L2 timer the benchmarks use:

- copy  dst.copy_(src):   bytes = read + write  (the ceiling of a scatter/gather)
- read  the faster of torch.sum(x) and, on CUDA, kvbench's streaming read kernel
        (harness/stream_read.py): bytes = read (the ceiling of decode attention). On the
        H200 torch's bf16 sum reads slower than decode kernels do, which put decode's %ceil
        above 100%; the streaming kernel reads faster than both (docs/decisions.md).
- write dst.fill_(1):     bytes = written

and caches the result as JSON in the cache root (kvbench.core.paths: KVBENCH_CACHE_DIR, else
platformdirs.user_cache_dir("kvbench")), keyed by device name, so report() can print %ceil
without re-measuring.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from pathlib import Path

import torch

from kvbench.core.device import resolve_device
from kvbench.core.jsonfile import check_writable, move_aside, write_json_atomic
from kvbench.core.paths import CacheRootError, cache_root, ceilings_file
from kvbench.harness.peaks import device_peaks
from kvbench.harness.timers import bench

CUDA_SIZE_BYTES = 2 << 30  # 2 GiB: >30x the H200's 60 MiB L2, long enough to amortise launch
CPU_SIZE_BYTES = 256 << 20
MIN_SIZE_BYTES = 64 << 10


@dataclass(frozen=True)
class Ceilings:
    """Measured streaming bandwidth of one device in 1e9 B/s, with when and with what."""

    device_name: str
    copy_gbps: float
    read_gbps: float
    write_gbps: float
    measured_at: str
    torch: str
    triton: str


def cache_dir() -> Path:
    """kvbench's cache root (kvbench.core.paths.cache_root: KVBENCH_CACHE_DIR, else the user
    cache directory; private). Kept here for the callers that import it from this module."""
    return cache_root()


def _cache_file(*, create: bool = True) -> Path:
    return ceilings_file(create=create)


def _read_all(*, for_write: bool = False) -> dict:
    """Every device's stored ceilings ({} when none). `for_write`: the caller will replace the
    file, so one that is unreadable and cannot be moved aside raises instead of being lost."""
    try:
        path = _cache_file(create=for_write)
    except CacheRootError as exc:
        if for_write:
            raise
        # Reading must not fail a report: an unusable cache root holds nothing to trust.
        warnings.warn(f"ignoring cached ceilings: {exc}", stacklevel=3)
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"a JSON object was expected, got {type(data).__name__}")  # noqa: TRY004
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        # A broken cache must not stop a benchmark: warn, and behave as if nothing was cached.
        # It is moved aside, not left to be overwritten by the next calibrate: the entries of
        # other devices in it may still be recoverable by hand.
        aside = _move_aside(path)
        if aside is None and for_write:
            raise RuntimeError(f"ceilings cache {path} is unreadable ({exc}) and could not be "
                               "moved aside; move or fix it by hand, then calibrate again") from exc
        warnings.warn(f"ignoring unreadable ceilings cache {path}: {exc}"
                      + (f"; moved to {aside}" if aside else ""), stacklevel=3)
        return {}
    return data


def _move_aside(path: Path) -> Path | None:
    """Rename an unreadable cache file to <name>.corrupt-<UTC time>; None if that fails too."""
    try:
        return move_aside(path)
    except OSError:
        return None


def _write_all(data: dict) -> Path:
    path = _cache_file()
    # Write-then-rename: two processes calibrating at once never leave a torn file.
    return write_json_atomic(path, data, indent=2, sort_keys=True)


def _device_memory(dev: torch.device) -> int | None:
    """Bytes of memory on `dev` (the GPU's, or the host's physical RAM); None if unknown."""
    import os

    if dev.type == "cuda":
        return int(torch.cuda.get_device_properties(dev).total_memory)
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def _check_fits(dev: torch.device, size_bytes: int) -> None:
    """ValueError when the two buffers _measure allocates cannot fit in the device's memory:
    said in one line before the allocation, not as the allocator's error after it."""
    memory = _device_memory(dev)
    if memory is not None and 2 * size_bytes > memory:
        raise ValueError(f"size {size_bytes} bytes needs two buffers ({2 * size_bytes} bytes), "
                         f"more than the {memory} bytes of memory on {dev}; pick a smaller size")


def _check_store() -> None:
    """CacheRootError when the ceilings file could not be written (unusable cache root,
    read-only folder)."""
    path = _cache_file()
    try:
        check_writable(path)
    except ValueError as exc:
        raise CacheRootError(f"cannot store the measured ceilings: {exc}") from None


def load_ceilings(device_name: str) -> Ceilings | None:
    """The cached Ceilings of `device_name` (as in DevicePeaks.name), or None if never measured."""
    if not isinstance(device_name, str) or not device_name:
        raise ValueError(f"device_name must be a non-empty string, got {device_name!r}")
    entry = _read_all().get(device_name)
    if not isinstance(entry, dict):
        return None
    names = {f.name for f in fields(Ceilings)}
    if set(entry) != names:
        warnings.warn(
            f"ignoring cached ceilings for {device_name!r}: "
            f"keys {sorted(entry)} != {sorted(names)}",
            stacklevel=2,
        )
        return None
    bad = {k: v for k, v in entry.items() if not _valid_value(k, v)}
    if bad:
        warnings.warn(
            f"ignoring cached ceilings for {device_name!r} in {_cache_file(create=False)}: {bad} "
            "(the *_gbps fields must be positive finite numbers, the others strings); "
            "re-run `kvbench calibrate`",
            stacklevel=2,
        )
        return None
    return Ceilings(**entry)


def _valid_value(name: str, value: object) -> bool:
    """A cached field as Ceilings needs it: GB/s a positive finite number, the rest strings."""
    if name.endswith("_gbps"):
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value) and value > 0)
    return isinstance(value, str)


def _measure(dev: torch.device, size_bytes: int) -> tuple[float, float, float]:
    """Median µs of (copy, read, write) of `size_bytes` buffers on `dev`, cold L2."""
    src = torch.empty(size_bytes, dtype=torch.uint8, device=dev).random_(0, 256)
    dst = torch.empty_like(src)
    copy_us = bench(lambda: dst.copy_(src), device=dev).median_us
    write_us = bench(lambda: dst.fill_(1), device=dev).median_us
    # The read: a reduction of a 16-bit tensor on CUDA (bf16 sum runs at the read roofline).
    # On a CPU bf16 arithmetic is emulated and compute-bound, so fp32 is summed instead.
    # dst holds bytes 0x01 after the fill: as bf16/fp32 those are small normal numbers (no NaN,
    # no denormals, which would slow a CPU sum down for reasons other than bandwidth).
    read_dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    dst.fill_(1)
    x = dst.view(read_dtype)
    reads = [lambda: torch.sum(x)]
    if dev.type == "cuda":  # (the interpreter would take minutes over 256 MiB on a CPU)
        # Imported here: Triton costs ~0.4 s to import, which nothing else in kvbench.harness
        # needs (kvbench env, the CPU calibrate and the allocator report never load it).
        from kvbench.harness.stream_read import check_stream_read, stream_read_fn

        stream = stream_read_fn(src, device_peaks(dev).sm_count)
        check_stream_read(stream, src)  # a short read would inflate the ceiling: check first
        reads.append(stream)
    read_us = min(bench(read, device=dev).median_us for read in reads)
    return copy_us, read_us, write_us


def calibrate(
    device: object = None, *, size_bytes: int | None = None, store: bool = True
) -> Ceilings:
    """Measure copy/read/write ceilings of `device` with bench() (cold L2) and cache them.

    size_bytes: bytes per buffer (default 2 GiB on CUDA, 256 MiB on CPU; tests pass less).
    store=False measures without touching the cache file.
    """
    if size_bytes is None:
        pass
    elif (
        isinstance(size_bytes, bool)
        or not isinstance(size_bytes, int)
        or size_bytes < MIN_SIZE_BYTES
    ):
        raise ValueError(
            f"size_bytes must be None or an int >= {MIN_SIZE_BYTES}, got {size_bytes!r}"
        )
    if store:
        _check_store()  # before the measurement, not after it
    dev = resolve_device(device)
    if size_bytes is None:
        size_bytes = CUDA_SIZE_BYTES if dev.type == "cuda" else CPU_SIZE_BYTES
    size_bytes -= size_bytes % 4  # whole elements of the 2- and 4-byte dtypes used below
    _check_fits(dev, size_bytes)

    copy_us, read_us, write_us = _measure(dev, size_bytes)
    if dev.type == "cuda":
        torch.cuda.empty_cache()  # the buffers died with _measure; give the memory back

    # Imported here: meta imports this module (load_ceilings) at its top.
    from kvbench.core.versions import triton_version

    ceilings = Ceilings(
        device_name=device_peaks(dev).name,
        copy_gbps=2 * size_bytes / copy_us / 1e3,
        read_gbps=size_bytes / read_us / 1e3,
        write_gbps=size_bytes / write_us / 1e3,
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        torch=str(torch.__version__),
        triton=triton_version() or "not installed",
    )
    if store:
        data = _read_all(for_write=True)
        data[ceilings.device_name] = asdict(ceilings)
        _write_all(data)
    return ceilings
