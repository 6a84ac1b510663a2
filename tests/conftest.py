"""Test configuration shared by the CPU suite and the GPU (`-m gpu`) suite.

Triton decides between compiled and interpreted kernels when a kernel is decorated, so
TRITON_INTERPRET must be set before anything imports kvbench.kernels. On a machine without
CUDA the Triton kernels run through the interpreter on CPU tensors at small shapes.
"""

import os

import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest


@pytest.fixture
def device() -> str:
    """The device the kernels under test run on: cuda when present, else cpu (interpreter)."""
    return "cuda" if HAS_CUDA else "cpu"


def pytest_collection_modifyitems(config, items):
    """GPU-marked tests on a machine without CUDA fail loudly instead of passing silently."""
    if HAS_CUDA:
        return
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason="needs CUDA: run `pytest -m gpu` on the device"))
