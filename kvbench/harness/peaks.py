"""Spec peaks of the device a measurement ran on: the denominators of every %bw and %tc.

A percentage of peak is only as good as its peak, so nothing here is guessed:

- Memory bandwidth comes from the device itself: memory clock (kHz) x bus width (bits) x 2
  (double data rate) / 8 bits per byte. torch exposes both fields on current versions; when a
  version does not, nvidia-ml-py (optional) is asked; otherwise the peak is None and reports
  print "-" instead of a percentage.
- Tensor-core peak has no device query, so it comes from a table of vendor datasheet numbers
  keyed on the CUDA device name. A device that is not in the table gets None (add the row
  rather than guess).
- On a CPU every peak is None: kvbench's CPU runs check correctness and host-side costs, and a
  CPU "% of a GPU peak" would be a number that means nothing.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from dataclasses import dataclass

import torch

from kvbench.core.device import cpu_name, resolve_device

# Dense (no 2:4 sparsity) fp16/bf16 tensor-core peak with fp32 accumulate, in 1e12 FLOP/s.
# Source: the vendor datasheets, which print the sparse figure with an asterisk; the dense
# figure is half of it. Keys are regexes matched (fullmatch, case-insensitive) against
# torch.cuda.get_device_properties(dev).name, first match wins, so the specific variants
# (NVL, PCIe) come before the generic SXM names.
#   H200 SXM / NVL:   NVIDIA H200 Tensor Core GPU datasheet (2024): BF16/FP16 1,979* / 1,671*
#   H100 SXM / PCIe / NVL: NVIDIA H100 Tensor Core GPU datasheet (2023-2024):
#                     1,979* (SXM) / 1,513* (PCIe) / 1,671* (NVL, 94 GB)
#   H800 SXM / PCIe:  NVIDIA H800 datasheet: same tensor rates as H100 SXM / PCIe
#   A100 (SXM4 40/80 GB, PCIe 40/80 GB): NVIDIA A100 datasheet: BF16/FP16 312 (624*)
#   A10:              NVIDIA A10 datasheet: BF16/FP16 125 (250*)
#   L20:              NVIDIA L20 datasheet: FP16/BF16 119.5 (239*)
#   L40S:             NVIDIA L40S datasheet: BF16/FP16 362.05 (733*)
#   RTX 6000 Ada:     NVIDIA Ada GPU architecture whitepaper, RTX 6000 Ada column:
#                     FP16 tensor with FP32 accumulate 364.2 (728.5*)
_TENSOR_CORE_TFLOPS: tuple[tuple[str, float], ...] = (
    (r"NVIDIA H200 NVL", 835.5),
    (r"NVIDIA H200( SXM.*)?", 989.5),
    (r"NVIDIA H100 NVL", 835.5),
    (r"NVIDIA H100 PCIe", 756.5),
    (r"NVIDIA H100( SXM\S*)?( \d+GB)?( HBM3)?", 989.5),
    (r"NVIDIA H800 PCIe", 756.5),
    (r"NVIDIA H800( SXM\S*)?", 989.5),
    (r"NVIDIA A100-SXM4-(40|80)GB", 312.0),
    (r"NVIDIA A100-PCIE-(40|80)GB|NVIDIA A100 80GB PCIe", 312.0),
    (r"NVIDIA A10", 125.0),
    (r"NVIDIA L20", 119.5),
    (r"NVIDIA L40S", 362.05),
    (r"NVIDIA RTX 6000 Ada Generation", 364.2),
)


@dataclass(frozen=True)
class DevicePeaks:
    """Spec peaks of one device; None wherever the number is not known for certain.

    Units: mem_gbps in 1e9 B/s, tc_tflops in 1e12 FLOP/s (dense fp16/bf16), l2_bytes in bytes.
    """

    name: str
    mem_gbps: float | None
    tc_tflops: float | None
    l2_bytes: int | None
    sm_count: int | None
    is_cuda: bool



def tensor_core_tflops(name: str) -> float | None:
    """Dense fp16/bf16 tensor-core peak of a CUDA device name from the datasheet table, or None."""
    for pattern, tflops in _TENSOR_CORE_TFLOPS:
        if re.fullmatch(pattern, name.strip(), flags=re.IGNORECASE):
            return tflops
    return None


def mem_gbps_from_clock(memory_clock_khz: float, bus_width_bits: float) -> float:
    """Theoretical DRAM bandwidth in 1e9 B/s: clock (kHz) x bus (bits) x 2 (DDR) / 8.

    H200: 3,201,000 kHz x 6016 bits -> 4814 GB/s.
    """
    if memory_clock_khz <= 0 or bus_width_bits <= 0:
        raise ValueError(
            "memory_clock_khz and bus_width_bits must be positive, got "
            f"{memory_clock_khz!r} and {bus_width_bits!r}"
        )
    return memory_clock_khz * 1e3 * bus_width_bits * 2 / 8 / 1e9



def _nvml_memory_clock_and_bus(index: int, props: object) -> tuple[float, float] | None:
    """(memory clock kHz, bus width bits) from nvidia-ml-py, or None when it cannot tell.

    Only used where torch's device properties lack the two fields. The NVML handle is found by
    UUID so that CUDA_VISIBLE_DEVICES renumbering cannot pick another GPU's numbers; by index
    only when no renumbering is in effect.
    """
    try:
        import pynvml  # nvidia-ml-py; optional
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        uuid = str(getattr(props, "uuid", "") or "")
        handle = None
        for candidate in (uuid, f"GPU-{uuid}") if uuid else ():
            with contextlib.suppress(pynvml.NVMLError):
                handle = pynvml.nvmlDeviceGetHandleByUUID(candidate)
            if handle is not None:
                break
        if handle is None and not os.environ.get("CUDA_VISIBLE_DEVICES"):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        if handle is None:
            return None
        clock_mhz = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM)
        bus_bits = pynvml.nvmlDeviceGetMemoryBusWidth(handle)
    except pynvml.NVMLError:
        return None  # unknown, never a guess
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
    if clock_mhz <= 0 or bus_bits <= 0:
        return None
    return float(clock_mhz) * 1e3, float(bus_bits)


@functools.cache
def _cuda_peaks(index: int) -> DevicePeaks:
    props = torch.cuda.get_device_properties(index)
    clock_khz = getattr(props, "memory_clock_rate", None)
    bus_bits = getattr(props, "memory_bus_width", None)
    mem_gbps = None
    if clock_khz and bus_bits:
        mem_gbps = mem_gbps_from_clock(clock_khz, bus_bits)
    else:
        nvml = _nvml_memory_clock_and_bus(index, props)
        if nvml is not None:
            mem_gbps = mem_gbps_from_clock(*nvml)
    l2 = int(getattr(props, "L2_cache_size", 0) or 0)
    return DevicePeaks(
        name=props.name,
        mem_gbps=mem_gbps,
        tc_tflops=tensor_core_tflops(props.name),
        l2_bytes=l2 or None,
        sm_count=int(props.multi_processor_count),
        is_cuda=True,
    )


@functools.cache
def _cpu_peaks() -> DevicePeaks:
    return DevicePeaks(
        name=cpu_name(),
        mem_gbps=None,
        tc_tflops=None,
        l2_bytes=None,
        sm_count=None,
        is_cuda=False,
    )


def device_peaks(device: object = None) -> DevicePeaks:
    """Spec peaks of `device` (None: the current CUDA device, else the CPU); cached per device."""
    dev = resolve_device(device)
    if dev.type == "cuda":
        return _cuda_peaks(dev.index)
    return _cpu_peaks()
