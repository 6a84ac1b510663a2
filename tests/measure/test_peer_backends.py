"""Peers run the backend they are named for: flex_attention compiled for every case of a
table (never dynamo's eager fallback), SDPA held to cuDNN's kernel.

Dynamo counts recompiles of one code object across every ``torch.compile`` wrapper of it; past
its limit it silently runs the function uncompiled. The CPU tests drive that limit with the
"eager" backend (no C++ toolchain, seconds on a CPU) and ask dynamo to raise where it would
fall back, so a table longer than the limit cannot time the fallback.
"""

from __future__ import annotations

import pytest
import torch

from kvbench.measure.peers import compile_for_one_case, decode_peers


def _score(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return (q @ k.transpose(-1, -2)).softmax(-1)


def _cases(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.randn(2, 4, 1, 8), torch.randn(2, 4, 16 + 8 * i, 8)) for i in range(n)]


@pytest.fixture
def raise_on_fallback():
    import torch._dynamo

    torch._dynamo.reset()
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        yield torch._dynamo.config.recompile_limit
    torch._dynamo.reset()


def test_a_case_per_compile_runs_past_the_recompile_limit(raise_on_fallback):
    for q, k in _cases(raise_on_fallback + 4):
        out = compile_for_one_case(_score, backend="eager")(q, k)
        torch.testing.assert_close(out, _score(q, k))


def test_one_shared_compile_would_fall_back(raise_on_fallback):
    """The control: without the reset the same cases reach dynamo's fallback, so the test
    above measures the helper, not a limit it never reaches."""
    with pytest.raises(Exception, match="(?i)recompile"):
        for q, k in _cases(raise_on_fallback + 4):
            torch.compile(_score, backend="eager", dynamic=False)(q, k)


@pytest.mark.gpu
def test_flex_peer_matches_sdpa_past_the_recompile_limit(raise_on_fallback):
    """More decode cases than dynamo's limit, each with its own flex peer: every one runs
    compiled (dynamo raises otherwise) and agrees with the SDPA peer on the same copy."""
    from kvbench.ops.decode_geometry import GEOMETRIES
    from kvbench.ops.paged_decode import geometry_inputs, geometry_pool

    geometry = GEOMETRIES["llama3-8b"]
    device = torch.device("cuda")
    for batch in range(1, raise_on_fallback + 4):
        pool = geometry_pool(geometry, batch, 256 + 64 * batch, "fp16", device)
        inputs = geometry_inputs(geometry, pool)
        peers = decode_peers(pool, inputs.extra["q"], **inputs.extra["options"])
        flex, sdpa = peers["peer:torch/flex_attention"](), peers["peer:torch/sdpa_contiguous"]()
        torch.testing.assert_close(flex, sdpa, atol=2e-3, rtol=2e-3)


@pytest.mark.gpu
def test_cudnn_peer_runs_cudnn_and_matches_sdpa():
    """The cuDNN peer runs (SDPA raises when a forced backend cannot serve the shape, and
    the peer would then carry that reason and raise it) and agrees with SDPA's own choice."""
    from kvbench.ops.decode_geometry import GEOMETRIES
    from kvbench.ops.paged_decode import geometry_inputs, geometry_pool

    pool = geometry_pool(GEOMETRIES["llama3-8b"], 4, 1024, "fp16", torch.device("cuda"))
    inputs = geometry_inputs(GEOMETRIES["llama3-8b"], pool)
    peers = decode_peers(pool, inputs.extra["q"])
    torch.testing.assert_close(peers["peer:torch/sdpa_cudnn"](),
                               peers["peer:torch/sdpa_contiguous"](), atol=2e-3, rtol=2e-3)
