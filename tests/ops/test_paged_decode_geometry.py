"""Paged decode at the geometries engines serve: head dims 64-256 (padded Triton tiles), page
sizes 1-256, any integer GQA ratio, and the shape gates that route auto around a row.

CPU: the Triton rows through the interpreter at small shapes (conftest sets TRITON_INTERPRET),
every output through the op's gate (check_paged_decode: the dtype's elementwise tolerances,
then the systematic-error criterion against the fp64 reference). GPU (`pytest -m gpu`): the
same head dims at full size against torch SDPA in fp32 on the gathered K/V.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
import torch
import triton
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbench.api import last_selection, paged_decode
from kvbench.dispatch.registry import REGISTRY
from kvbench.fixtures.pool import paged_pool
from kvbench.kernels import paged_decode as pd
from kvbench.ops.paged_decode import ATOL, RTOL, check_paged_decode, make_decode_query

SINGLE, SPLIT, SDPA = (pd.paged_decode_single_pass, pd.paged_decode_split_kv,
                       pd.paged_decode_gather_sdpa)
SPLIT2 = functools.partial(SPLIT, num_splits=2)
SPLIT2.__name__ = "paged_decode_split_kv[2 splits]"
ROWS = (SINGLE, SPLIT2, SDPA)
#: Head dims engines compile decode kernels for (vLLM's paged kernels); 80, 96, 112 and 192
#: are not powers of two: the Triton rows pad their tiles.
ENGINE_HEAD_DIMS = (64, 80, 96, 112, 128, 192, 256)
#: The tile length these tests run the Triton rows with (CONFIG's BLOCK_N, shortened: the
#: interpreter's time grows with the tile, and the d masking does not depend on it).
BLOCK_N = 32
#: Two full tiles (the unmasked paths: dim-major V whole-page loads) plus a tail, and a
#: sequence shorter than a page.
LENS = [2 * BLOCK_N + 5, 7]


@pytest.fixture
def short_tiles(monkeypatch):
    for key in ("single_pass", "single_pass_fp8", "split_kv", "split_kv_fp8"):
        monkeypatch.setitem(pd.CONFIG, key, {**pd.CONFIG[key], "BLOCK_N": BLOCK_N})


def _poisoned_lanes(pool, q: torch.Tensor) -> tuple[SimpleNamespace, torch.Tensor]:
    """The pool's K, V and q as views of buffers 16 lanes wider than the next power of two of
    head_dim, every lane past head_dim NaN (the e4m3 NaN code 0x7F for fp8 bytes): a padded
    tile lane that is loaded without its mask, or stored, makes the output NaN or wrong."""
    d = pool.head_dim
    wide = triton.next_power_of_2(d) + 16
    nan = 0x7F if pool.kv_dtype_name == "fp8" else float("nan")
    pages, page, heads, _ = pool.k_cache.shape
    k = torch.full((pages, page, heads, wide), nan, dtype=pool.k_cache.dtype)
    k[..., :d] = pool.k_cache
    if pool.v_cache.stride(-1) == 1:
        v = torch.full((pages, page, heads, wide), nan, dtype=pool.v_cache.dtype)
        v[..., :d] = pool.v_cache
        v = v[..., :d]
    else:  # dim-major pages [heads, wide, page]: rows past head_dim are the poisoned ones
        v = torch.full((pages, heads, wide, page), nan, dtype=pool.v_cache.dtype)
        v[:, :, :d] = pool.v_cache.permute(0, 2, 3, 1)
        v = v[:, :, :d].permute(0, 3, 1, 2)
    qw = torch.full((*q.shape[:2], wide), float("nan"), dtype=q.dtype)
    qw[..., :d] = q
    view = SimpleNamespace(k_cache=k[..., :d], v_cache=v, block_table=pool.block_table,
                           seq_lens=pool.seq_lens, k_scale=pool.k_scale, v_scale=pool.v_scale,
                           kv_dtype_name=pool.kv_dtype_name)
    return view, qw[..., :d]


#: Per head dim, the caches it is checked with: fp8 on its own path at every head dim (token-
#: major and dim-major V alternate), a 16-bit dtype beside it, bf16 at half of them.
_DTYPES = {
    64: (("fp16", "combined"), ("fp8", "v_dim_major")),
    80: (("fp16", "v_dim_major"), ("fp8", "combined")),
    96: (("bf16", "combined"), ("fp8", "v_dim_major")),
    112: (("fp16", "combined"), ("fp8", "v_dim_major")),
    128: (("bf16", "v_dim_major"), ("fp8", "combined")),
    192: (("bf16", "combined"), ("fp8", "v_dim_major")),
    256: (("fp16", "v_dim_major"), ("fp8", "combined")),
}


@pytest.mark.parametrize("head_dim", ENGINE_HEAD_DIMS)
def test_engine_head_dims_every_row(device, short_tiles, head_dim):
    """Every row at every engine head dim, 16-bit and fp8 caches, GQA 3 (3 q heads on 1 kv
    head), lanes past head_dim poisoned in q, K and V."""
    for dtype, storage in _DTYPES[head_dim]:
        pool = paged_pool(2, LENS, kv_heads=1, head_dim=head_dim, page_size=16, dtype=dtype,
                          storage=storage, min_l2_multiple=0, device=device, seed=head_dim)
        q = make_decode_query(pool, 3, seed=1)
        if device == "cpu":
            pool, q = _poisoned_lanes(pool, q)
        for fn in ROWS:
            assert check_paged_decode(fn, pool, q) >= 0.0


def test_padded_tile_check_catches_a_truncated_head(device):
    """The gate that the head-dim tests rely on fails a row that drops the last lanes (what a
    tile of the previous power of two would compute)."""
    pool = paged_pool(1, 20, kv_heads=1, head_dim=80, page_size=16, min_l2_multiple=0,
                      device=device, seed=0)
    q = make_decode_query(pool, 2, seed=1)

    def truncated(q, k, v, bt, sl, **kw):
        out = torch.zeros_like(q)
        out[..., :64] = SDPA(q[..., :64].contiguous(), k[..., :64], v[..., :64], bt, sl,
                             sm_scale=80**-0.5, **kw)
        return out

    with pytest.raises(Exception, match="paged_decode"):
        check_paged_decode(truncated, pool, q)


@pytest.mark.parametrize("head_dim", [1, 8, 48, 576])
def test_torch_row_serves_any_head_dim(device, head_dim):
    pool = paged_pool(2, [9, 20], kv_heads=1, head_dim=head_dim, page_size=8, min_l2_multiple=0,
                      device=device, seed=0)
    assert check_paged_decode(SDPA, pool, make_decode_query(pool, 2, seed=1)) >= 0.0


@pytest.mark.parametrize(("fn", "head_dim", "match"), [
    (SINGLE, 8, r"head_dim must be in \[16, 256\] for the triton decode rows, got 8"),
    (SPLIT, 320, r"head_dim must be in \[16, 256\] for the triton decode rows, got 320"),
    (SDPA, 1040, r"head_dim must be in \[1, 1024\] for the torch decode rows, got 1040"),
])
def test_head_dim_refusals_name_the_rows_range(fn, head_dim, match):
    pool = paged_pool(1, 4, kv_heads=1, head_dim=head_dim, page_size=4, min_l2_multiple=0,
                      device="cpu", seed=0)
    q = make_decode_query(pool, 1)
    with pytest.raises(ValueError, match=match):
        fn(q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)


def test_shape_gates_route_auto_around_rows_by_head_dim():
    """Each row's gate refuses what its validation refuses; auto picks a row that serves."""
    gates = {s.name: s.shape_gate for s in REGISTRY.specs("paged_decode")}
    shape = {"batch": 1, "max_context": 64, "q_heads": 8, "kv_heads": 2, "page_size": 16}
    for name in ("triton/single_pass", "triton/split_kv"):
        assert gates[name]({**shape, "head_dim": 96}) is None
        assert "[16, 256]" in gates[name]({**shape, "head_dim": 8})
    assert "needs head_dim 128" in gates["cuda/cluster_decode"]({**shape, "head_dim": 96})
    assert gates["cuda/cluster_decode"]({**shape, "head_dim": 128}) is None
    assert gates["torch/gather_sdpa"]({**shape, "head_dim": 8}) is None
    assert "[1, 1024]" in gates["torch/gather_sdpa"]({**shape, "head_dim": 2048})
    pool = paged_pool(1, 12, kv_heads=1, head_dim=8, page_size=4, min_l2_multiple=0,
                      device="cpu", seed=0)
    q = make_decode_query(pool, 2)
    out = paged_decode(q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    assert last_selection("paged_decode").spec.name == "torch/gather_sdpa"
    assert torch.isfinite(out).all()


# ---- page sizes and GQA ratios -----------------------------------------------------------

#: vLLM's block sizes: every power of two from 1 to 256.
PAGE_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@pytest.mark.parametrize("page_size", PAGE_SIZES)
def test_page_sizes_every_row(device, short_tiles, page_size):
    """Every row at every page size, with a GQA ratio that is not a power of two (7: Qwen2.5's
    28 q / 4 kv heads) and a partial last page."""
    dtype, storage = [("fp16", "combined"), ("fp8", "v_dim_major"), ("bf16", "split")][
        PAGE_SIZES.index(page_size) % 3]
    pool = paged_pool(2, [45, 3], kv_heads=1, head_dim=16, page_size=page_size, dtype=dtype,
                      storage=storage, min_l2_multiple=0, device=device, seed=page_size)
    q = make_decode_query(pool, 7, seed=2)
    for fn in ROWS:
        assert check_paged_decode(fn, pool, q) >= 0.0


# Interpreted Triton is slow: few examples, no deadline, derandomized (a failure reproduces).
_SETTINGS = settings(max_examples=6, deadline=None, derandomize=True, database=None,
                     suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(head_dim=st.integers(16, 256), page_size=st.sampled_from(PAGE_SIZES),
       group=st.integers(1, 9), kv_heads=st.integers(1, 2),
       lens=st.lists(st.integers(1, 40), min_size=1, max_size=2),
       dtype=st.sampled_from(["fp16", "bf16", "fp8"]), fn=st.sampled_from(ROWS))
def test_geometry_property(head_dim, page_size, group, kv_heads, lens, dtype, fn):
    """Any head dim the Triton rows serve, any vLLM page size, any integer GQA ratio: every
    row passes the op's gate against the fp64 reference."""
    storage = "v_dim_major" if dtype == "fp8" else "combined"
    pool = paged_pool(len(lens), lens, kv_heads=kv_heads, head_dim=head_dim,
                      page_size=page_size, dtype=dtype, storage=storage, min_l2_multiple=0,
                      device="cpu", seed=head_dim)
    q = make_decode_query(pool, group * kv_heads, seed=3)
    assert check_paged_decode(fn, pool, q) >= 0.0


# ---- GPU: full size against torch SDPA in fp32 on the gathered K/V -------------------------


def _sdpa_fp32(pool, q: torch.Tensor) -> torch.Tensor:
    """Decode by torch SDPA in fp32 on K/V gathered through the block table (fp8 bytes widened
    and scaled): an oracle independent of the rows and of the fp64 reference's loop."""
    outs = []
    for b, n in enumerate(pool.seq_lens.tolist()):
        pages = pool.block_table[b, : -(-n // pool.page_size)].long()

        def rows(cache, scale, pages=pages, n=n):
            x = cache[pages].reshape(-1, pool.kv_heads, pool.head_dim)[:n]
            if pool.kv_dtype_name == "fp8":
                return x.view(torch.float8_e4m3fn).float() * scale.float().reshape(-1, 1)
            return x.float()

        k, v = rows(pool.k_cache, pool.k_scale), rows(pool.v_cache, pool.v_scale)
        o = torch.nn.functional.scaled_dot_product_attention(
            q[b].float()[:, None], k.transpose(0, 1), v.transpose(0, 1),
            enable_gqa=q.shape[1] != pool.kv_heads)
        outs.append(o[:, 0])
    return torch.stack(outs)


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", ENGINE_HEAD_DIMS)
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp8"])
@pytest.mark.parametrize("storage", ["combined", "v_dim_major"])
def test_gpu_head_dims_against_sdpa(head_dim, dtype, storage):
    """Every head dim at decode size (8 sequences, ragged up to 8k, 32 q / 8 kv heads) through
    every row that serves it (auto included), against fp32 SDPA on gathered K/V."""
    lens = [8192, 4097, 1, 300, 2048, 777, 16, 5000]
    pool = paged_pool(8, lens, kv_heads=8, head_dim=head_dim, page_size=16, dtype=dtype,
                      storage=storage, device="cuda", seed=0)
    try:
        q = make_decode_query(pool, 32, seed=1)
        want = _sdpa_fp32(pool, q)
        q_name = "bf16" if q.dtype == torch.bfloat16 else "fp16"
        rtol = max(RTOL[pool.kv_dtype_name], RTOL[q_name])
        atol = max(ATOL[pool.kv_dtype_name], ATOL[q_name])
        for fn in (SINGLE, SPLIT, SDPA, paged_decode):
            check_paged_decode(fn, pool, q)
            out = fn(q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens,
                     k_scale=pool.k_scale, v_scale=pool.v_scale)
            torch.testing.assert_close(out.float(), want, rtol=rtol, atol=atol)
    finally:
        pool.free()


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", PAGE_SIZES)
def test_gpu_page_sizes_and_gqa_against_sdpa(page_size):
    """Every vLLM page size with Qwen2.5-7B's geometry (28 q / 4 kv heads, GQA 7)."""
    pool = paged_pool(4, [4096, 33, 1000, 2049], kv_heads=4, head_dim=128, page_size=page_size,
                      dtype="fp16", device="cuda", seed=0)
    try:
        q = make_decode_query(pool, 28, seed=1)
        want = _sdpa_fp32(pool, q)
        for fn in (SINGLE, SPLIT, SDPA, paged_decode):
            check_paged_decode(fn, pool, q)
            out = fn(q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
            torch.testing.assert_close(out.float(), want, rtol=RTOL["fp16"], atol=ATOL["fp16"])
    finally:
        pool.free()
