"""The sidecar finds the compiled kernel a launch hook names (benchmarks/runner/sidecar.py).

A launch hook reports only the CUfunction handle; the sidecar maps it back to the compiled
kernel through the JIT caches of the Triton kernels in kvbench's modules. A scan that takes a
JITFunction's own `.fn` (the Python function it wraps) skips every plain @triton.jit kernel
and leaves bare handles ({'function': ...}) in the sidecar. CPU: the scan is
checked on a real JITFunction whose cache holds a stand-in compiled kernel."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
triton = pytest.importorskip("triton")

from benchmarks.runner import sidecar as _sidecar


class _Compiled:
    """What the scan reads of a CompiledKernel."""

    def __init__(self, handle: int) -> None:
        self.function = handle
        self.name = "_fake_kernel"
        self.n_regs, self.n_spills = 96, 0
        self.metadata = {"shared": 16384, "num_warps": 4, "num_stages": 3, "maxnreg": None}

    def _init_handles(self) -> None:
        """Loaded already."""


class _Future:
    """An asynchronously compiled kernel, as a JIT cache may hold one."""

    def __init__(self, kernel: _Compiled) -> None:
        self._kernel = kernel

    def result(self) -> _Compiled:
        return self._kernel


def _fake_kernel(x):
    pass


def _other_kernel(x):
    pass


@pytest.fixture
def fake_module(monkeypatch):
    # JITFunction directly: under TRITON_INTERPRET=1 (the CPU suite) triton.jit would return
    # the interpreter's wrapper instead, which has no JIT cache to scan.
    from triton.runtime.jit import JITFunction

    fake, other = JITFunction(_fake_kernel), JITFunction(_other_kernel)
    fake.device_caches = {0: ({"k1": _Compiled(1234)}, {}, None, None, None)}
    other.device_caches = {0: ({"k2": _Future(_Compiled(5678))}, {}, None, None, None)}
    wrapper = types.SimpleNamespace(fn=other)  # an autotuner-like wrapper
    module = types.ModuleType("kvbench._fake_kernels")
    module.fake, module.wrapped = fake, wrapper
    monkeypatch.setitem(sys.modules, "kvbench._fake_kernels", module)
    return module


def test_a_plain_jit_kernel_and_a_wrapped_one_are_found_by_their_handle(fake_module):
    found = _sidecar._compiled_kernels()
    assert {1234, 5678} <= set(found)
    described = _sidecar._describe(found[1234])
    assert described == {"name": "_fake_kernel", "registers": 96, "spills": 0,
                         "shared_bytes": 16384, "num_warps": 4, "num_stages": 3, "maxnreg": None}


@pytest.fixture
def cuda_faked(monkeypatch):
    """A CPU process that the sidecar takes for a CUDA one (no kernel is launched here)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def test_cuda_launches_are_recorded_once_per_kernel_and_the_hook_removed(cuda_faked):
    from kvbench.kernels import cuda_build

    a = {"name": "cluster_decode_kernel<fp16, group=4>", "registers": 168, "local_bytes": 0,
         "shared_bytes": 99328, "num_warps": 8, "sass_arch": "sm_90"}
    b = {**a, "name": "cluster_decode_kernel<bf16, group=4>"}

    def call():
        for entry in (a, a, b):
            for hook in cuda_build.LAUNCH_HOOKS:
                hook(lambda entry=entry: entry)

    before = list(cuda_build.LAUNCH_HOOKS)
    assert _sidecar.kernel_resources(call) == [a, b]
    assert cuda_build.LAUNCH_HOOKS == before


def test_a_failing_description_is_recorded_not_raised(cuda_faked):
    from kvbench.kernels import cuda_build

    def broken():
        raise RuntimeError("cudaFuncGetAttributes failed")

    def call():
        for hook in cuda_build.LAUNCH_HOOKS:
            hook(broken)

    got = _sidecar.kernel_resources(call)
    assert got == "n/a: RuntimeError: cudaFuncGetAttributes failed"


def test_a_kvbench_without_cuda_launch_hooks_records_no_cuda_kernel(cuda_faked, monkeypatch):
    """An older commit's kvbench (no LAUNCH_HOOKS) is measured by the same suite."""
    from kvbench.kernels import cuda_build

    monkeypatch.delattr(cuda_build, "LAUNCH_HOOKS")
    assert _sidecar.kernel_resources(lambda: None) == []


def test_no_cuda_no_resources():
    import torch

    if torch.cuda.is_available():
        pytest.skip("the CPU answer; a CUDA process records resources")
    assert _sidecar.kernel_resources(lambda: None) == _sidecar.NA
