"""verify(): the correctness gate's pass value and the content of its failure message."""

import math

import numpy as np
import pytest
import torch

from kvbench.harness import VerificationError, verify


def test_pass_returns_max_abs_diff():
    ref = torch.tensor([1.0, 2.0, 3.0])
    out = torch.tensor([1.0, 2.001, 3.0], dtype=torch.float16)  # fp16 vs fp32 ref: allowed
    d = verify("ok", out, ref, rtol=1e-2, atol=1e-3)
    assert d == pytest.approx(float((out.float() - ref).abs().max()))


def test_failure_message_names_everything():
    ref = torch.zeros(4, 8)
    out = ref.clone()
    out[1, 5] = 0.5
    out[2, 0] = 0.02
    with pytest.raises(VerificationError) as info:
        verify("paged_decode fp16", out, ref, rtol=0.01, atol=0.01)
    err = info.value
    msg = str(err)
    assert isinstance(err, AssertionError)
    assert "paged_decode fp16" in msg
    assert "2 of 32 elements mismatch" in msg
    assert "(1, 5)" in msg and "out=0.5" in msg and "ref=0.0" in msg
    assert "rtol=0.01" in msg and "atol=0.01" in msg
    assert err.index == (1, 5) and err.mismatched == 2 and err.total == 32
    assert err.max_abs_diff == pytest.approx(0.5)


def test_relative_tolerance_scales_with_the_reference():
    ref = torch.tensor([1000.0])
    verify("rel", ref * 1.001, ref, rtol=2e-3, atol=0.0)
    with pytest.raises(VerificationError):
        verify("rel", ref * 1.003, ref, rtol=2e-3, atol=0.0)


def test_nan_or_inf_in_out_where_ref_is_finite_fails():
    ref = torch.ones(3)
    for bad in (math.nan, math.inf):
        out = ref.clone()
        out[2] = bad
        with pytest.raises(VerificationError, match=r"worst at index \(2,\)"):
            verify("nan", out, ref, rtol=1.0, atol=1.0)


def test_non_finite_reference_must_be_matched_exactly():
    ref = torch.tensor([math.inf, math.nan, 1.0])
    verify("inf", ref.clone(), ref, rtol=0.0, atol=0.0)
    with pytest.raises(VerificationError):
        verify("inf", torch.tensor([-math.inf, math.nan, 1.0]), ref, rtol=1.0, atol=1.0)


def test_shape_and_dtype_mismatch_fail():
    with pytest.raises(VerificationError, match="shape mismatch"):
        verify("s", torch.zeros(2, 3), torch.zeros(3, 2), rtol=0, atol=0)
    with pytest.raises(VerificationError, match="dtype mismatch"):
        verify("d", torch.zeros(3, dtype=torch.uint8), torch.zeros(3), rtol=0, atol=0)
    with pytest.raises(VerificationError, match="dtype mismatch"):
        verify(
            "d", torch.zeros(3, dtype=torch.uint8), torch.zeros(3, dtype=torch.int8), rtol=0, atol=0
        )


def test_integer_bytes_compare_exactly():
    ref = torch.arange(256, dtype=torch.uint8)
    assert verify("bytes", ref.clone(), ref, rtol=0, atol=0) == 0.0
    out = ref.clone()
    out[200] ^= 1
    with pytest.raises(
        VerificationError, match=r"1 of 256 elements mismatch; worst at index \(200,\)"
    ):
        verify("bytes", out, ref, rtol=0, atol=0)


def test_numpy_inputs_and_empty_tensors():
    assert verify("np", np.ones(3), np.ones(3), rtol=0, atol=0) == 0.0
    assert verify("empty", torch.zeros(0, 4), torch.zeros(0, 4), rtol=0, atol=0) == 0.0


def test_scalar_tensor_mismatch_reports_empty_index():
    with pytest.raises(VerificationError) as info:
        verify("scalar", torch.tensor(1.0), torch.tensor(2.0), rtol=0, atol=0)
    assert info.value.index == ()


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"), reason="no fp8 dtype in this torch")
def test_fp8_must_be_widened_by_the_caller():
    x = torch.zeros(4).to(torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="widen fp8"):
        verify("fp8", x, torch.zeros(4), rtol=0, atol=0)
    verify("fp8", x.to(torch.float32), torch.zeros(4), rtol=0, atol=0)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"rtol": -1.0, "atol": 0.0}, "rtol"),
        ({"rtol": 0.0, "atol": math.nan}, "atol"),
    ],
)
def test_bad_tolerances_are_value_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        verify("t", torch.zeros(1), torch.zeros(1), **kwargs)


def test_bad_inputs_are_value_errors():
    with pytest.raises(ValueError, match="out must be"):
        verify("t", [1.0], torch.zeros(1), rtol=0, atol=0)
    with pytest.raises(ValueError, match="name"):
        verify("", torch.zeros(1), torch.zeros(1), rtol=0, atol=0)


@pytest.mark.parametrize(("dtype", "big"), [(torch.int64, 2**53), (torch.int64, 2**62),
                                            (torch.int64, -(2**63))])
def test_int64_is_compared_exactly_not_through_float64(dtype, big):
    """2**53 + 1 and 2**53 are the same float64: the compare must be in int64."""
    ref = torch.tensor([0, big, 7], dtype=dtype)
    assert verify("int64 equal", ref.clone(), ref, rtol=0, atol=0) == 0.0
    out = ref.clone()
    out[1] += 1
    with pytest.raises(VerificationError, match=r"1 of 3 elements mismatch; worst at index \(1,\)"
                       ) as info:
        verify("int64", out, ref, rtol=0, atol=0)
    assert info.value.out_value == big + 1 and info.value.ref_value == big
    assert info.value.max_abs_diff == 1.0


def test_bool_is_compared_exactly():
    ref = torch.tensor([[True, False], [False, True]])
    assert verify("mask", ref.clone(), ref, rtol=0, atol=0) == 0.0
    out = ref.clone()
    out[1, 0] = True
    with pytest.raises(VerificationError,
                       match=r"1 of 4 elements mismatch; worst at index \(1, 0\)"):
        verify("mask", out, ref, rtol=0, atol=0)


def test_integer_tolerances_must_be_zero():
    with pytest.raises(ValueError, match="compared exactly; rtol and atol must be 0"):
        verify("ints", torch.zeros(3, dtype=torch.int32), torch.zeros(3, dtype=torch.int32),
               rtol=0, atol=1)
