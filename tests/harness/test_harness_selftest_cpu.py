"""gpu_selftest on a machine without CUDA: a clear refusal, not a traceback."""

import pytest
import torch

from kvbench.harness import gpu_selftest


@pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU path is tests/test_harness_gpu.py")
def test_main_refuses_without_cuda(capsys):
    assert gpu_selftest.main([]) == 2
    assert "needs a CUDA device" in capsys.readouterr().err
