"""The one meaning of a device argument, and the facts about a device that name and size things.

Every layer takes ``device=None`` and resolves it here, so a harness timer, a fixture, the
allocator and dispatch all agree on what ``None``, ``"cuda"`` or ``0`` mean; tensors report
``cuda:N``, and ``torch.device("cuda") != torch.device("cuda:0")``, so the index is always made
explicit. The device name is the key of perf tables and calibrations; the L2 size sizes the
pools that must not fit in it.
"""

from __future__ import annotations

import functools
import platform

import torch

ACCEPTED = "None, 'cpu', 'cuda', 'cuda:N', an int CUDA index or a torch.device"


def resolve_device(device: object = None) -> torch.device:
    """Normalise a device argument to torch.device("cpu") or torch.device("cuda", index).

    None means the current CUDA device when CUDA is available, else the CPU; an int is a CUDA
    index. ValueError names what was wrong: a type or name that is not a device, a device type
    other than CPU/CUDA, CUDA asked for on a machine without it, an index out of range.
    """
    if device is None:
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
    if isinstance(device, torch.device) and device.type == "cpu":
        return device
    if isinstance(device, bool) or not isinstance(device, (str, int, torch.device)):
        raise ValueError(f"device must be {ACCEPTED}, got {device!r}")  # noqa: TRY004
    if isinstance(device, int):
        # torch.device(int) means "the current accelerator", an error on a CPU-only build;
        # kvbench's meaning of an int is always a CUDA index.
        device = f"cuda:{device}"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be {ACCEPTED}, got {device!r}") from None
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type != "cuda":
        raise ValueError(f"device must be a CPU or CUDA device, got {device!r} ({dev.type})")
    if not torch.cuda.is_available():
        raise ValueError(f"device {device!r} needs CUDA, which is not available on this machine")
    index = torch.cuda.current_device() if dev.index is None else dev.index
    if not 0 <= index < torch.cuda.device_count():
        raise ValueError(
            f"device {device!r}: CUDA index {index} is out of range "
            f"(this machine has {torch.cuda.device_count()} CUDA devices)"
        )
    return torch.device("cuda", index)


@functools.cache
def cpu_name() -> str:
    """The CPU model name (from /proc/cpuinfo on Linux, else platform)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


@functools.cache
def _cuda_name(index: int) -> str:
    return torch.cuda.get_device_properties(index).name


def device_name(device: object = None) -> str:
    """The device's model name: the key of perf tables, calibrations and asv machine names."""
    dev = resolve_device(device)
    return _cuda_name(dev.index) if dev.type == "cuda" else cpu_name()


def sm_count(device: object = None) -> int | None:
    """Streaming multiprocessors of a CUDA device; None on a CPU."""
    dev = resolve_device(device)
    if dev.type != "cuda":
        return None
    return int(torch.cuda.get_device_properties(dev.index).multi_processor_count)


def l2_bytes(device: object = None) -> int | None:
    """L2 cache size of a CUDA device in bytes; None on a CPU (no figure to size against)."""
    dev = resolve_device(device)
    if dev.type != "cuda":
        return None
    return int(torch.cuda.get_device_properties(dev.index).L2_cache_size) or None
