"""kvbench.fixtures.quant: the per-tensor e4m3 quantizer every fp8 row is built from.

The round-to-nearest check compares against a brute-force search over all finite e4m3 values
(not against torch's cast, which is what the quantizer itself uses).
"""

import pytest
import torch

from kvbench.fixtures import quant
from kvbench.fixtures.quant import FP8_MAX, dequantize_fp8, quantize_fp8


def _finite_e4m3_values() -> torch.Tensor:
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    codes = codes[(codes & 0x7F) != 0x7F]  # drop the two NaN codes
    return codes.view(torch.float8_e4m3fn).to(torch.float64).unique()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_round_trip_is_nearest_representable(dtype):
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(4096, generator=gen) * 3).to(dtype)
    data, scale = quantize_fp8(x)
    assert data.dtype == torch.uint8 and data.shape == x.shape
    assert scale.dtype == torch.float32 and scale.dim() == 0
    assert float(scale) == pytest.approx(float(x.float().abs().max()) / FP8_MAX, rel=1e-6)

    grid = _finite_e4m3_values()
    target = x.double() / float(scale)
    nearest = grid[(target[:, None] - grid[None, :]).abs().argmin(dim=1)]
    got = data.view(torch.float8_e4m3fn).to(torch.float64)
    # Ties (exactly half-way) may legitimately go either way in a brute-force argmin.
    gap = (target[:, None] - grid[None, :]).abs().sort(dim=1).values
    tie = (gap[:, 1] - gap[:, 0]).abs() < 1e-9
    assert torch.equal(got[~tie], nearest[~tie])


def test_amax_maps_to_448_and_no_nan_codes():
    x = torch.tensor([-1e4, 1e4, 3.0, -0.0, 1e-9, 5000.0], dtype=torch.float32)
    data, scale = quantize_fp8(x)
    assert ((data & 0x7F) != 0x7F).all(), "NaN code produced"
    wide = dequantize_fp8(data, scale)
    assert torch.isfinite(wide).all()
    assert float(wide.abs().max()) == pytest.approx(1e4, rel=1e-6)
    assert float(data.view(torch.float8_e4m3fn).float().abs().max()) == FP8_MAX


def test_all_zero_input_gets_unit_scale():
    data, scale = quantize_fp8(torch.zeros(8, dtype=torch.float16))
    assert float(scale) == 1.0
    assert (data == 0).all()


def test_empty_input():
    data, scale = quantize_fp8(torch.empty(0, 4, dtype=torch.float16))
    assert data.shape == (0, 4) and float(scale) == 1.0


def test_chunked_matches_single_pass(monkeypatch):
    x = torch.randn(1000, dtype=torch.float16, generator=torch.Generator().manual_seed(1))
    whole, s1 = quantize_fp8(x)
    monkeypatch.setattr(quant, "_CHUNK_ELEMS", 7)
    chunked, s2 = quantize_fp8(x)
    assert torch.equal(whole, chunked) and torch.equal(s1, s2)


def test_non_contiguous_input_keeps_shape():
    x = torch.randn(6, 8).t()
    data, scale = quantize_fp8(x)
    assert data.shape == (8, 6)
    assert torch.allclose(dequantize_fp8(data, scale), x, rtol=0.07, atol=float(scale))


@pytest.mark.parametrize("bad", [torch.tensor([1.0, float("inf")]), torch.tensor([float("nan")])])
def test_non_finite_input_rejected(bad):
    with pytest.raises(ValueError, match="inf or NaN"):
        quantize_fp8(bad)


def test_bad_arguments():
    with pytest.raises(ValueError, match="x has dtype torch.int32"):
        quantize_fp8(torch.ones(3, dtype=torch.int32))
    with pytest.raises(ValueError, match="torch.Tensor"):
        quantize_fp8([1.0, 2.0])
    with pytest.raises(ValueError, match="data must be a uint8"):
        dequantize_fp8(torch.ones(3), 1.0)
    with pytest.raises(ValueError, match="dtype torch.int8 is not accepted"):
        dequantize_fp8(torch.zeros(3, dtype=torch.uint8), 1.0, torch.int8)
    with pytest.raises(ValueError, match="scale must have one element"):
        dequantize_fp8(torch.zeros(3, dtype=torch.uint8), torch.ones(2))


def test_dequantize_accepts_python_float_and_dtype():
    data, scale = quantize_fp8(torch.tensor([1.0, -2.0, 4.0]))
    a = dequantize_fp8(data, float(scale), torch.float16)
    b = dequantize_fp8(data, scale, torch.float16)
    assert a.dtype == torch.float16 and torch.equal(a, b)
