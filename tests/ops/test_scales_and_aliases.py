"""fp8 scales every decode row takes alike, the host check's int64 page count, and an
output buffer that is part of the cache it gathers from."""

from __future__ import annotations

import pytest
import torch

from kvbench.fixtures.gather_pool import OUT_DIM, build_gather_pool, build_page_table_flat
from kvbench.fixtures.pool import paged_pool
from kvbench.kernels import kv_gather_fp8 as kg
from kvbench.kernels import paged_decode as pd
from kvbench.kernels import paged_decode_cluster as pdc
from kvbench.kernels.common import validate_decode_values
from kvbench.ops.paged_decode import make_decode_query

DECODE_ROWS = {
    "single_pass": pd.paged_decode_single_pass,
    "split_kv": pd.paged_decode_split_kv,
    "gather_sdpa": pd.paged_decode_gather_sdpa,
    "cluster": pdc.paged_decode_cluster,
}


def _fp8_inputs(device):
    pool = paged_pool(2, [23, 40], device=device, kv_heads=2, head_dim=32, page_size=16,
                      min_l2_multiple=0, seed=0, dtype="fp8", num_pages=8)
    q = make_decode_query(pool, 4, seed=1, dtype=torch.bfloat16)
    return pool, (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)


def test_gather_sdpa_takes_one_element_fp32_scales(device):
    """The documented scale form ([1] float32) gives what the 0-dim form gives."""
    pool, args = _fp8_inputs(device)
    want = pd.paged_decode_gather_sdpa(*args, k_scale=pool.k_scale, v_scale=pool.v_scale)
    got = pd.paged_decode_gather_sdpa(*args, k_scale=pool.k_scale.reshape(1),
                                      v_scale=pool.v_scale.reshape(1))
    assert got.dtype == want.dtype and torch.equal(got, want)


@pytest.mark.parametrize("row", sorted(DECODE_ROWS))
def test_a_float_and_a_tensor_scale_are_one_error_in_every_row(row, device):
    pool, args = _fp8_inputs(device)
    with pytest.raises(ValueError, match="both be tensors or both be python floats"):
        DECODE_ROWS[row](*args, k_scale=float(pool.k_scale), v_scale=pool.v_scale)


@pytest.mark.parametrize("bad", [1e38, float("inf"), float("nan"), 0.0, -1.0])
@pytest.mark.parametrize("row", sorted(DECODE_ROWS))
def test_a_scale_that_makes_nan_is_refused_in_every_row(row, bad, device):
    pool, args = _fp8_inputs(device)
    for scales in ({"k_scale": bad, "v_scale": 1.0}, {"k_scale": 1.0, "v_scale": bad}):
        with pytest.raises(ValueError, match="finite scale > 0"):
            DECODE_ROWS[row](*args, **scales)
    if device == "cpu":
        with pytest.raises(ValueError, match="finite scale > 0"):
            DECODE_ROWS[row](*args, k_scale=torch.tensor(bad), v_scale=pool.v_scale)


def test_the_host_check_does_not_wrap_a_length_near_2_31():
    """seq_len 2**31 - 1 reaches every entry of a 2048-entry table of 2**20-token pages; in
    int32 its page count wrapped negative and no entry was checked against the 1-page pool."""
    block_table = torch.full((1, 2048), 7, dtype=torch.int32)
    seq_lens = torch.tensor([2**31 - 1], dtype=torch.int32)
    with pytest.raises(ValueError, match="block_table entries used by seq_lens"):
        validate_decode_values(block_table, seq_lens, 2**20, 1)


@pytest.mark.parametrize("variant", ["legacy", "vectorized", "cached", "torch"])
def test_kv_gather_refuses_an_out_that_is_part_of_the_cache(variant, device):
    kv = build_gather_pool(64, device=device, seed=0)
    pt = build_page_table_flat([12], 64, seed=4, device=device)
    total = 12 + 2
    alias = kv.view(torch.uint8).reshape(-1)[: total * OUT_DIM].view(total, OUT_DIM)
    fn = getattr(kg, f"gather_fp8_{variant}")
    with pytest.raises(ValueError, match="out and kv_cache share memory"):
        fn(kv, pt, extra_rows=2, out=alias.view(torch.float8_e4m3fn))
