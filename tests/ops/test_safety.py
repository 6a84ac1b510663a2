"""Safety of the public ops: strides honoured or refused, values validated, memory untouched.

One test per defect found by review (each failed on the code before its fix), plus the
safe mode (KVBENCH_CHECK=1) on a GPU, where the fast path validates no index value. CPU runs go
through the Triton interpreter at small shapes; `-m gpu` runs the same ops compiled.
"""

from __future__ import annotations

import pytest
import torch

from kvbench.api import kv_write, paged_decode
from kvbench.fixtures.gather_pool import build_gather_pool, build_page_table_flat
from kvbench.fixtures.pool import paged_pool
from kvbench.kernels import kv_gather_fp8 as kg
from kvbench.kernels import kv_write as kw
from kvbench.kernels import paged_decode as pd
from kvbench.kernels._validate import SAFE_MODE_VAR, raise_pending, safe_mode, validate_no_overlap
from kvbench.ops.kv_write import make_write_inputs
from kvbench.ops.paged_decode import make_decode_query, paged_decode_ref

WRITE_ROWS = {"triton": kw.kv_write_triton, "torch": kw.kv_write_torch}
DECODE_ROWS = {"single_pass": pd.paged_decode_single_pass, "split_kv": pd.paged_decode_split_kv,
               "gather_sdpa": pd.paged_decode_gather_sdpa}


def _cache(device, pages=8, page_size=16, heads=2, dim=16, dtype=torch.float16):
    shape = (pages, page_size, heads, dim)
    return torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype,
                                                                        device=device)


def _written_slots(cache: torch.Tensor) -> list[int]:
    return (cache.flatten(0, 1).abs().sum((1, 2)) > 0).nonzero().flatten().tolist()


# ---- strides of index tensors -------------------------------------------------------------


@pytest.mark.parametrize("row", sorted(WRITE_ROWS))
@pytest.mark.parametrize("filler", [50, 10**7], ids=["in_range", "far_out"])
def test_kv_write_reads_a_strided_slot_mapping(row, filler, device):
    """slot_mapping[::2] of [0, F, 1, F+1, ...] writes slots 0-3. The Triton row read the
    contiguous values (slots 0, 1, 50, 51; with F = 10**7 an out-of-bounds write) while the
    host range validation read the strided ones."""
    k = torch.randn(4, 2, 16, dtype=torch.float16, device=device)
    v = torch.randn(4, 2, 16, dtype=torch.float16, device=device)
    kc, vc = _cache(device)
    full = torch.tensor([0, filler, 1, filler + 1, 2, filler + 2, 3, filler + 3], device=device)
    slots = full[::2]
    assert slots.stride(0) == 2
    WRITE_ROWS[row](k, v, kc, vc, slots)
    assert _written_slots(kc) == [0, 1, 2, 3]
    assert _written_slots(vc) == [0, 1, 2, 3]
    assert torch.equal(kc.flatten(0, 1)[:4], k) and torch.equal(vc.flatten(0, 1)[:4], v)


def test_kv_write_through_ops_reads_a_strided_slot_mapping(device):
    """The reviewer's repro, through the public op and the row `auto` picks."""
    k = torch.randn(4, 2, 16, dtype=torch.float16, device=device)
    v = torch.randn(4, 2, 16, dtype=torch.float16, device=device)
    kc, vc = _cache(device)
    kv_write(k, v, kc, vc, torch.tensor([0, 50, 1, 51, 2, 52, 3, 53], device=device)[::2])
    assert _written_slots(kc) == [0, 1, 2, 3]


# ---- the torch decode row reads only the entries seq_lens reaches --------------------------


def test_gather_sdpa_ignores_padding_entries_of_the_block_table(device):
    """A padding entry past a sequence's pages may hold anything (10**6 raised IndexError in
    the torch row, which indexed every entry)."""
    pool = paged_pool(2, 40, kv_heads=2, head_dim=16, page_size=16, min_l2_multiple=0,
                      device=device, seed=0)
    q = make_decode_query(pool, 4, seed=1)
    table = torch.cat([pool.block_table,
                       torch.full((2, 2), 10**6, dtype=torch.int32, device=device)], dim=1)
    out = pd.paged_decode_gather_sdpa(q, pool.k_cache, pool.v_cache, table, pool.seq_lens)
    ref = paged_decode_ref(q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    torch.testing.assert_close(out.double(), ref.double(), rtol=2e-3, atol=2e-3)


# ---- fp8 scales ------------------------------------------------------------------------------

BAD_SCALES = [0.0, -1.0, float("nan"), float("inf")]


@pytest.mark.parametrize("bad", BAD_SCALES, ids=["zero", "negative", "nan", "inf"])
@pytest.mark.parametrize("as_tensor", [False, True], ids=["float", "tensor"])
@pytest.mark.parametrize("row", sorted(DECODE_ROWS))
def test_decode_refuses_a_bad_fp8_scale(row, bad, as_tensor):
    """0, negative, NaN or inf scales were accepted (a NaN scale gave NaN outputs)."""
    pool = paged_pool(2, 20, kv_heads=2, head_dim=16, page_size=16, dtype="fp8",
                      min_l2_multiple=0, device="cpu", seed=0)
    q = make_decode_query(pool, 4, seed=1)
    scale = torch.tensor([bad], dtype=torch.float32) if as_tensor else bad
    with pytest.raises(ValueError, match="k_scale must be a finite scale > 0"):
        DECODE_ROWS[row](q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens,
                         k_scale=scale, v_scale=pool.v_scale)


@pytest.mark.parametrize("bad", BAD_SCALES, ids=["zero", "negative", "nan", "inf"])
@pytest.mark.parametrize("row", sorted(WRITE_ROWS))
def test_kv_write_refuses_a_bad_fp8_scale_tensor(row, bad):
    pool = paged_pool(2, 20, kv_heads=2, head_dim=16, page_size=16, dtype="fp8",
                      min_l2_multiple=0, device="cpu", seed=0)
    k, v, slots = make_write_inputs(pool, 4, seed=0)
    with pytest.raises(ValueError, match="v_scale must be a finite scale > 0"):
        WRITE_ROWS[row](k, v, pool.k_cache, pool.v_cache, slots, k_scale=pool.k_scale,
                        v_scale=torch.tensor([bad], dtype=torch.float32))


# ---- K and V views that share memory --------------------------------------------------------


@pytest.mark.parametrize("row", sorted(WRITE_ROWS))
def test_kv_write_refuses_k_and_v_views_shifted_by_a_page(row, device):
    """K = pages [0, P), V = pages [1, P + 1) of one buffer: a write to V's page i lands in
    K's page i + 1. Only identical pointers were refused."""
    buf = torch.zeros(9, 16, 2, 16, dtype=torch.float16, device=device)
    k, v, slots = make_write_inputs(
        paged_pool(1, 16, kv_heads=2, head_dim=16, page_size=16, min_l2_multiple=0,
                   device=device, seed=0), 4, seed=0)
    with pytest.raises(ValueError, match="k_cache and v_cache share memory"):
        WRITE_ROWS[row](k, v, buf[:-1], buf[1:], slots)


@pytest.mark.parametrize("row", sorted(WRITE_ROWS))
def test_kv_write_refuses_a_cache_that_overlaps_itself(row, device):
    k = torch.randn(2, 2, 16, dtype=torch.float16, device=device)
    v = torch.randn(2, 2, 16, dtype=torch.float16, device=device)
    page = torch.zeros(1, 16, 2, 16, dtype=torch.float16, device=device)
    _, vc = _cache(device, pages=4)
    with pytest.raises(ValueError, match="k_cache overlaps itself"):
        WRITE_ROWS[row](k, v, page.expand(4, -1, -1, -1), vc, torch.tensor([0, 17], device=device))


@pytest.mark.parametrize("storage", ["combined", "split", "head_major", "v_dim_major"])
def test_every_pool_storage_passes_the_overlap_validation(storage):
    pool = paged_pool(2, 40, kv_heads=2, head_dim=16, page_size=16, storage=storage,
                      min_l2_multiple=0, device="cpu", seed=0)
    validate_no_overlap("k_cache", pool.k_cache, "v_cache", pool.v_cache)


def test_overlap_validation_against_brute_force():
    """The O(1) page-distance test agrees with comparing byte sets, for interleaved and
    shifted views of one buffer."""
    buf = torch.zeros(6 * 2 * 4 * 2, dtype=torch.float16)

    def byte_set(t):
        idx = torch.arange(buf.numel()).view(buf.shape)
        view = idx.as_strided(t.shape, t.stride(), t.storage_offset())
        return set(view.flatten().tolist())

    for sa, sb, off_b, pages in [(16, 16, 8, 5), (16, 16, 16, 5), (16, 16, 4, 5), (8, 8, 8, 5),
                                 (16, 16, 0, 5), (16, 16, 24, 4), (16, 16, 12, 5)]:
        a = buf.as_strided((pages, 4, 2), (sa, 2, 1), 0)
        b = buf.as_strided((pages, 4, 2), (sb, 2, 1), off_b)
        expect = bool(byte_set(a) & byte_set(b))
        try:
            validate_no_overlap("a", a, "b", b)
            got = False
        except ValueError:
            got = True
        assert got == expect, (sa, sb, off_b, pages)


# ---- fp8 containers the docstrings promise ----------------------------------------------------


@pytest.mark.parametrize("row", sorted(DECODE_ROWS))
def test_decode_accepts_float8_e4m3fn_caches(row, device):
    """The op's docstring promised float8_e4m3fn caches; every row refused them."""
    pool = paged_pool(2, 40, kv_heads=2, head_dim=16, page_size=16, dtype="fp8",
                      min_l2_multiple=0, device=device, seed=0)
    q = make_decode_query(pool, 4, seed=1)
    fn = DECODE_ROWS[row]
    args = (pool.block_table, pool.seq_lens)
    kwargs = {"k_scale": pool.k_scale, "v_scale": pool.v_scale}
    as_bytes = fn(q, pool.k_cache, pool.v_cache, *args, **kwargs)
    as_fp8 = fn(q, pool.k_cache.view(torch.float8_e4m3fn), pool.v_cache.view(torch.float8_e4m3fn),
                *args, **kwargs)
    assert torch.equal(as_bytes, as_fp8)


def test_ops_decode_accepts_float8_e4m3fn_caches(device):
    pool = paged_pool(2, 40, kv_heads=2, head_dim=16, page_size=16, dtype="fp8",
                      min_l2_multiple=0, device=device, seed=0)
    q = make_decode_query(pool, 4, seed=1)
    out = paged_decode(q, pool.k_cache.view(torch.float8_e4m3fn),
                           pool.v_cache.view(torch.float8_e4m3fn), pool.block_table,
                           pool.seq_lens, k_scale=pool.k_scale, v_scale=pool.v_scale)
    ref = paged_decode_ref(q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens,
                           k_scale=pool.k_scale, v_scale=pool.v_scale)
    torch.testing.assert_close(out.double(), ref.double(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("row", ["legacy", "vectorized", "cached", "torch"])
def test_gather_accepts_a_uint8_cache(row, device):
    """The op's docstring promised uint8 caches; every row refused them."""
    fn = {"legacy": kg.gather_fp8_legacy, "vectorized": kg.gather_fp8_vectorized,
          "cached": kg.gather_fp8_cached, "torch": kg.gather_fp8_torch}[row]
    cache = build_gather_pool(256, device=device, seed=0)
    pt = build_page_table_flat([20, 9], 256, device=device)
    want = fn(cache, pt, extra_rows=3).view(torch.uint8).clone()
    got = fn(cache.view(torch.uint8), pt, extra_rows=3).view(torch.uint8)
    assert torch.equal(got, want)


# ---- the safe mode's own contract -----------------------------------------------------------


def test_safe_mode_variable_is_validated(monkeypatch):
    monkeypatch.setenv(SAFE_MODE_VAR, "yes")
    with pytest.raises(ValueError, match=r"KVBENCH_CHECK='yes' is not accepted; accepted: 0 or 1"):
        safe_mode()
    monkeypatch.setenv(SAFE_MODE_VAR, "1")
    assert safe_mode()
    monkeypatch.delenv(SAFE_MODE_VAR)
    assert not safe_mode()


# ---- GPU: safe mode stops out-of-range indices before they touch memory ----------------------


@pytest.mark.gpu
@pytest.mark.parametrize("row", sorted(WRITE_ROWS))
def test_gpu_safe_mode_stops_an_out_of_range_slot(row, monkeypatch):
    monkeypatch.setenv(SAFE_MODE_VAR, "1")
    buf = torch.zeros(3, 16, 2, 16, dtype=torch.float16, device="cuda")
    kc, vc = buf[0:1], buf[2:3]  # page 1 of buf is the guard between them
    k = torch.randn(3, 2, 16, dtype=torch.float16, device="cuda")
    v = torch.randn(3, 2, 16, dtype=torch.float16, device="cuda")
    slots = torch.tensor([0, 16, 3], device="cuda")  # slot 16 is page 1: past a 1-page cache
    WRITE_ROWS[row](k, v, kc, vc, slots)
    with pytest.raises(ValueError, match=r"slot_mapping values must lie in \[0, 16\)"):
        raise_pending()
    assert not buf[1].any(), "the out-of-range slot reached the guard page"
    assert torch.equal(kc[0, 0], k[0]) and torch.equal(kc[0, 3], k[2])  # valid rows written
    WRITE_ROWS[row](k[:1], v[:1], kc, vc, slots[:1])
    raise_pending()  # a valid call afterwards raises nothing


@pytest.mark.gpu
@pytest.mark.parametrize("row", sorted(DECODE_ROWS) + ["cluster"])
@pytest.mark.parametrize("bad", ["block_table", "seq_lens"])
def test_gpu_safe_mode_stops_a_bad_block_table_or_length(row, bad, monkeypatch):
    if row == "cluster":
        from kvbench.kernels.paged_decode_cluster import paged_decode_cluster, unavailable_reason

        if unavailable_reason(torch.device("cuda")):
            pytest.skip(unavailable_reason(torch.device("cuda")))
        fn = paged_decode_cluster
        pool = paged_pool(2, 300, kv_heads=2, head_dim=128, page_size=16, min_l2_multiple=0,
                          device="cuda", seed=0)
        q = make_decode_query(pool, 8, seed=1)
    else:
        fn = DECODE_ROWS[row]
        pool = paged_pool(2, 40, kv_heads=2, head_dim=16, page_size=16, min_l2_multiple=0,
                          device="cuda", seed=0)
        q = make_decode_query(pool, 4, seed=1)
    monkeypatch.setenv(SAFE_MODE_VAR, "1")
    table, lens = pool.block_table.clone(), pool.seq_lens.clone()
    if bad == "block_table":
        table[1, 0] = pool.k_cache.shape[0] + 10**6
        match = r"block_table entries used by seq_lens must lie in \[0, "
    else:
        lens[1] = table.shape[1] * pool.page_size + 1
        match = r"seq_lens must lie in \[0, "
    out = fn(q, pool.k_cache, pool.v_cache, table, lens)
    with pytest.raises(ValueError, match=match):
        raise_pending()
    assert out[1].isnan().all(), "the caught sequence's output is poisoned"
    ref = paged_decode_ref(q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    torch.testing.assert_close(out[0].double(), ref[0].double(), rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("row", ["legacy", "vectorized", "cached", "torch"])
def test_gpu_safe_mode_stops_a_bad_page_id(row, monkeypatch):
    fn = {"legacy": kg.gather_fp8_legacy, "vectorized": kg.gather_fp8_vectorized,
          "cached": kg.gather_fp8_cached, "torch": kg.gather_fp8_torch}[row]
    monkeypatch.setenv(SAFE_MODE_VAR, "1")
    cache = build_gather_pool(256, device="cuda", seed=0)
    pt = build_page_table_flat([20], 256, device="cuda")
    pt[5] = 10**8
    out = fn(cache, pt, extra_rows=2)
    with pytest.raises(ValueError, match=r"page_table_flat values must lie in \[0, 256\)"):
        raise_pending()
    assert (out.view(torch.uint8)[5] == 0x7F).all()


@pytest.mark.gpu
def test_gpu_safe_mode_flags_a_nan_scale_tensor(monkeypatch):
    monkeypatch.setenv(SAFE_MODE_VAR, "1")
    pool = paged_pool(2, 40, kv_heads=2, head_dim=16, page_size=16, dtype="fp8",
                      min_l2_multiple=0, device="cuda", seed=0)
    q = make_decode_query(pool, 4, seed=1)
    nan = torch.tensor([float("nan")], device="cuda")
    pd.paged_decode_split_kv(q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens,
                             k_scale=pool.k_scale, v_scale=nan)
    with pytest.raises(ValueError, match="v_scale must be a finite scale > 0"):
        raise_pending()


@pytest.mark.gpu
def test_gpu_fast_path_queues_no_validation(monkeypatch):
    """Safe mode off: no verdict is queued (nothing to wait for, no extra device work)."""
    from kvbench.kernels import _validate

    monkeypatch.delenv(SAFE_MODE_VAR, raising=False)
    pool = paged_pool(2, 40, kv_heads=2, head_dim=16, page_size=16, min_l2_multiple=0,
                      device="cuda", seed=0)
    q = make_decode_query(pool, 4, seed=1)
    k, v, slots = make_write_inputs(pool, 4, seed=0)
    pd.paged_decode_split_kv(q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    kw.kv_write_triton(k, v, pool.k_cache, pool.v_cache, slots)
    assert _validate._PENDING == []
