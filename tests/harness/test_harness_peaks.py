"""Spec peaks: the DDR formula, the datasheet table, and no guesses on a CPU."""

import pytest
import torch

from kvbench.core.device import resolve_device
from kvbench.harness import device_peaks
from kvbench.harness.peaks import mem_gbps_from_clock, tensor_core_tflops


def test_h200_memory_peak_from_clock_and_bus():
    # 3201 MHz x 6016-bit x 2 (DDR) / 8 = 4814 GB/s.
    assert mem_gbps_from_clock(3_201_000, 6016) == pytest.approx(4814.3, abs=0.1)


def test_memory_formula_rejects_zero():
    with pytest.raises(ValueError, match="memory_clock_khz"):
        mem_gbps_from_clock(0, 6016)


@pytest.mark.parametrize(
    "name,tflops",
    [
        ("NVIDIA H200", 989.5),
        ("NVIDIA H200 NVL", 835.5),
        ("NVIDIA H100 80GB HBM3", 989.5),
        ("NVIDIA H100 PCIe", 756.5),
        ("NVIDIA H100 NVL", 835.5),
        ("NVIDIA H800", 989.5),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA A100-SXM4-40GB", 312.0),
        ("NVIDIA A100-PCIE-40GB", 312.0),
        ("NVIDIA A100 80GB PCIe", 312.0),
        ("NVIDIA A10", 125.0),
        ("NVIDIA L20", 119.5),
        ("NVIDIA L40S", 362.05),
        ("NVIDIA RTX 6000 Ada Generation", 364.2),
    ],
)
def test_tensor_core_table(name, tflops):
    assert tensor_core_tflops(name) == tflops


@pytest.mark.parametrize(
    "name", ["NVIDIA A10G", "NVIDIA L40", "NVIDIA GeForce RTX 4090", "NVIDIA B200", "Tesla T4"]
)
def test_unknown_device_has_no_tensor_core_peak(name):
    assert tensor_core_tflops(name) is None


def test_cpu_has_a_name_and_no_peaks():
    p = device_peaks("cpu")
    assert p.name and not p.is_cuda
    assert (p.mem_gbps, p.tc_tflops, p.l2_bytes, p.sm_count) == (None, None, None, None)
    assert device_peaks("cpu") is p  # cached


def test_resolve_device():
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="device"):
        resolve_device("lukewarm")
    with pytest.raises(ValueError, match="device"):
        resolve_device(1.5)
    if not torch.cuda.is_available():
        assert resolve_device(None) == torch.device("cpu")
        with pytest.raises(ValueError, match="CUDA"):
            resolve_device("cuda")
        with pytest.raises(ValueError, match="CUDA"):
            resolve_device(0)
