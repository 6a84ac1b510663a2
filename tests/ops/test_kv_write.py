"""kv_write rows (Triton scatter, torch index_copy_) against the op's reference
(kvbench.ops.kv_write.kv_write_ref), bit for bit.

CPU: the Triton kernel runs through the interpreter at small shapes. GPU (`-m gpu`): the
prefill and decode shapes (16k tokens, 64 tokens) on a full-size pool, plus proof that
the hardware fp8 cast and the soft encoder used under the interpreter agree with torch.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from kvbench.fixtures.pool import paged_pool
from kvbench.harness.verify import VerificationError
from kvbench.kernels import kv_write as kw
from kvbench.kernels._fp8 import encode_e4m3
from kvbench.ops.common import e4m3_encode_ref
from kvbench.ops.kv_write import (
    check_kv_write,
    golden_check_kv_write,
    kv_write_ref,
    make_write_inputs,
)

IMPLS = {"triton": kw.kv_write_triton, "torch": kw.kv_write_torch}
DTYPES = ("fp16", "bf16", "fp8")


def _small_pool(device, dtype="fp16", storage="combined", **kw_args):
    args = {"kv_heads": 4, "head_dim": 64, "page_size": 16, "dtype": dtype,
            "layout": "fragmented", "storage": storage, "min_l2_multiple": 0,
            "device": device, "seed": 3}
    args.update(kw_args)
    return paged_pool(4, [50, 70, 33, 90], **args)


def _snapshot(pool) -> list[torch.Tensor]:
    caches = (pool.k_cache, pool.v_cache) if pool.buffer is None else (pool.buffer,)
    return [c.view(torch.uint8).clone() if c.dtype == torch.uint8 else c.view(torch.int16).clone()
            for c in caches]


# ---- correctness on the fragmented pool -------------------------------------------------


@pytest.mark.parametrize("n", [130, 1, 5, 8], ids=lambda n: f"n{n}")
@pytest.mark.parametrize("storage", ["combined", "split", "v_dim_major"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_write_matches_reference(impl, dtype, storage, n, device):
    """prefill-like (130 tokens) and decode-like (1..8) writes, some tokens skipped."""
    pool = _small_pool(device, dtype, storage)
    k, v, slots = make_write_inputs(pool, n, seed=n)
    if n > 2:
        slots[::3] = -1  # padded batch entries: must be skipped
    assert check_kv_write(IMPLS[impl], pool, k, v, slots) == 0.0


@pytest.mark.parametrize("storage", ["combined", "v_dim_major"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_write_in_page_order(impl, dtype, storage, device):
    """Slots in page order, as a prefill writes (a dim-major V tile that is one aligned run
    takes the vector store), then the same with one skipped token in a run and with the run
    shifted 3 slots into its page (those tiles take the element-wise store)."""
    pool = _small_pool(device, dtype, storage)
    k, v, slots = make_write_inputs(pool, 130, seed=5, order="pages")
    assert check_kv_write(IMPLS[impl], pool, k, v, slots) == 0.0
    skipped = slots.clone()
    skipped[20] = -1
    assert check_kv_write(IMPLS[impl], pool, k, v, skipped) == 0.0
    k, v, slots = make_write_inputs(pool, 133, seed=6, order="pages")
    assert check_kv_write(IMPLS[impl], pool, k[3:], v[3:], slots[3:]) == 0.0


def test_make_write_inputs_page_order_follows_the_block_table(device):
    pool = _small_pool(device, "fp16")
    _, _, slots = make_write_inputs(pool, 40, order="pages")
    first = pool.block_table[0, :3].cpu().to(torch.int64)
    want = (first[:, None] * 16 + torch.arange(16)[None, :]).reshape(-1)[:40]
    assert slots.cpu().tolist() == want.tolist()
    with pytest.raises(ValueError, match="order='sorted' is not accepted"):
        make_write_inputs(pool, 4, order="sorted")


@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_strided_inputs(impl, device):
    """k/v as column slices of a fused projection output (token stride > H*D)."""
    pool = _small_pool(device, "bf16")
    _, _, slots = make_write_inputs(pool, 40, seed=1)
    heads, dim = pool.kv_heads, pool.head_dim
    qkv = torch.randn(40, 3 * heads * dim, device=device).to(torch.bfloat16)
    k = qkv[:, heads * dim : 2 * heads * dim].view(40, heads, dim)
    v = qkv[:, 2 * heads * dim :].view(40, heads, dim)
    assert not k.is_contiguous()
    assert check_kv_write(IMPLS[impl], pool, k, v, slots) == 0.0


@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_all_skipped_and_empty_leave_pool_untouched(impl, device):
    pool = _small_pool(device, "fp8")
    k, v, slots = make_write_inputs(pool, 12, seed=2)
    before = _snapshot(pool)
    IMPLS[impl](k, v, pool.k_cache, pool.v_cache, torch.full_like(slots, -1),
                k_scale=pool.k_scale, v_scale=pool.v_scale)
    IMPLS[impl](k[:0], v[:0], pool.k_cache, pool.v_cache, slots[:0],
                k_scale=pool.k_scale, v_scale=pool.v_scale)
    for old, new in zip(before, _snapshot(pool), strict=True):
        assert torch.equal(old, new)


@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_fp8_saturates_and_accepts_float_scales(impl, device):
    """A scale far too small drives most quotients past 448: bytes must saturate to 0x7e/0xfe."""
    pool = _small_pool(device, "fp8")
    pool.k_scale, pool.v_scale = 1e-3, 0.0123  # python floats: rounded to fp32 by both sides
    k, v, slots = make_write_inputs(pool, 64, seed=4)
    assert check_kv_write(IMPLS[impl], pool, k, v, slots) == 0.0
    written = pool.k_cache[slots // 16, slots % 16].view(torch.uint8)
    assert int(((written & 0x7F) == 0x7E).sum()) > written.numel() // 2


@pytest.mark.parametrize("subnormal", [False, True], ids=["normal", "subnormal"])
@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_fp8_from_bf16_inputs(impl, subnormal, device):
    """bf16 activations into an fp8 cache (the bf16 bit-shift widening path)."""
    if subnormal and device != "cpu":
        pytest.skip("bf16 subnormals guard the interpreter's widening; unrealistic on GPU")
    pool = _small_pool(device, "fp8")
    k, v, slots = make_write_inputs(pool, 40, seed=12)
    k, v = k.to(torch.bfloat16), v.to(torch.bfloat16)
    if subnormal:
        # tiny inputs and scale: mostly bf16 subnormals that still land in the e4m3 range
        pool.k_scale = 2.0**-126
        k = (k.float() * 2.0**-128).to(torch.bfloat16)
        assert int((k.float().abs() < 2.0**-126).sum()) > k.numel() // 2
    assert check_kv_write(IMPLS[impl], pool, k, v, slots) == 0.0


def test_fp8_reference_is_torch_quantization(device):
    """The kernel tolerance is 0 because the reference equals torch's own quantization."""
    pool = _small_pool(device, "fp8")
    k, v, slots = make_write_inputs(pool, 50, seed=5)
    ref_k, _ = kv_write_ref(k, v, slots, cache_dtype="fp8", k_scale=pool.k_scale,
                            v_scale=pool.v_scale)
    torch_k = (k.float() / pool.k_scale).clamp(-448, 448).to(torch.float8_e4m3fn)
    assert torch.equal(ref_k, torch_k.view(torch.uint8))


# ---- the checks must be able to fail ----------------------------------------------------


def _half_page_stride(fn):
    """A kv_write with the classic combined-buffer bug: page stride of one half, not both."""

    def buggy(k, v, k_cache, v_cache, slot_mapping, **scales):
        def wrong(c):
            _, ps, h, d = c.shape
            return c.as_strided(c.shape, (ps * h * d, h * d, d, 1))
        fn(k, v, wrong(k_cache), wrong(v_cache), slot_mapping, **scales)

    return buggy


@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_stride_bug_lands_k_in_v_half_and_is_refused(impl, device):
    """The bug's K view reaches into the V half (its page 1 is V's page 0): the op refuses
    the overlapping views before writing, so the pool is untouched."""
    pool = _small_pool(device, "fp16", "combined")
    k, v, slots = make_write_inputs(pool, 60, seed=6)
    before = _snapshot(pool)
    with pytest.raises(ValueError, match="k_cache and v_cache share memory"):
        _half_page_stride(IMPLS[impl])(k, v, pool.k_cache, pool.v_cache, slots)
    assert all(torch.equal(a, b) for a, b in zip(before, _snapshot(pool), strict=True))


def test_stride_bug_is_refused_where_verification_would_miss_it(device):
    """On page 0 the buggy strides coincide with the right ones, so a write to the first
    slots would pass verification; the overlap check refuses it whatever the slots."""
    pool = _small_pool(device, "fp16", "combined")
    slots = torch.arange(6, device=device)
    k, v, _ = make_write_inputs(pool, 6, seed=7)
    with pytest.raises(ValueError, match="share memory"):
        _half_page_stride(kw.kv_write_triton)(k, v, pool.k_cache, pool.v_cache, slots)


def test_swapped_k_and_v_is_caught(device):
    pool = _small_pool(device, "bf16")
    k, v, slots = make_write_inputs(pool, 20, seed=8)

    def swapped(k, v, k_cache, v_cache, slot_mapping, **scales):
        kw.kv_write_triton(k, v, v_cache, k_cache, slot_mapping, **scales)

    with pytest.raises(VerificationError, match="rows read back"):
        check_kv_write(swapped, pool, k, v, slots)


def test_stray_write_to_untouched_row_is_caught(device):
    pool = _small_pool(device, "fp16")
    k, v, slots = make_write_inputs(pool, 20, seed=9)

    def stray(k, v, k_cache, v_cache, slot_mapping, **scales):
        kw.kv_write_torch(k, v, k_cache, v_cache, slot_mapping, **scales)
        s = int(slot_mapping[0]) + 1  # the neighbour of a written slot
        if s not in slot_mapping.tolist() and s < k_cache.shape[0] * 16:
            k_cache[s // 16, s % 16] += 1

    with pytest.raises(VerificationError, match="untouched"):
        check_kv_write(stray, pool, k, v, slots)


@pytest.mark.parametrize("dtype", DTYPES)
def test_golden_check(dtype, device):
    assert golden_check_kv_write(kw.kv_write_triton, dtype, torch.device(device)) == 0.0
    assert golden_check_kv_write(kw.kv_write_torch, dtype, torch.device(device)) == 0.0
    with pytest.raises(ValueError, match="dtype"):
        golden_check_kv_write(kw.kv_write_torch, "int8", torch.device(device))


# ---- fp8 encoding: soft encoder vs torch vs the reference's table search ---------------


@triton.jit
def _encode_kernel(x_ptr, o_ptr, n, BLOCK: tl.constexpr, SOFT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, encode_e4m3(tl.load(x_ptr + offs, mask=m), SOFT), mask=m)


def _hard_fp32_values(device) -> torch.Tensor:
    """Every e4m3 value and midpoint, their fp32 neighbours, saturation and subnormal edges."""
    codes = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    finite = codes[torch.isfinite(codes)].unique()
    mids = (finite[1:] + finite[:-1]) / 2  # exact in fp32: the ties
    base = torch.cat([finite, mids])
    up = torch.nextafter(base, torch.full_like(base, 1e30))
    down = torch.nextafter(base, torch.full_like(base, -1e30))
    gen = torch.Generator().manual_seed(0)
    rand = torch.cat([torch.randn(20000, generator=gen) * s for s in (4.0, 0.05, 1e-3)])
    extra = torch.tensor([448.0, 464.0, 463.99, 1e30, -1e30, 1e-40, -1e-40, 0.0, -0.0, 2.0**-10,
                          -(2.0**-10), 2.0**-6, 2.0**-7 * 1.9375])
    return torch.cat([base, up, down, rand, extra]).float().to(device)


def _encode(x: torch.Tensor, soft: bool) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=torch.uint8, device=x.device)
    _encode_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024, SOFT=soft)
    return out


def test_soft_encoder_and_reference_match_torch_cast(device):
    x = _hard_fp32_values(device)
    torch_bytes = x.clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8)
    assert torch.equal(e4m3_encode_ref(x), torch_bytes)
    assert torch.equal(_encode(x, soft=True), torch_bytes)


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp8"])
def test_check_fails_a_row_that_writes_nothing_even_after_a_correct_write(dtype, device):
    """The benchmarks check every selector on one pool: the rows an earlier row wrote must
    not let a later no-op row pass."""
    pool = _small_pool(device, dtype)
    k, v, slots = make_write_inputs(pool, 20, seed=3)
    check_kv_write(kw.kv_write_torch, pool, k, v, slots)  # the right rows are now in place

    def writes_nothing(*args, **kwargs):
        return None

    with pytest.raises(VerificationError):
        check_kv_write(writes_nothing, pool, k, v, slots)


# ---- bad input: ValueError naming the argument ------------------------------------------


@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_bad_input(impl, device):
    fn = IMPLS[impl]
    pool = _small_pool(device, "fp16")
    kc, vc = pool.k_cache, pool.v_cache
    k, v, slots = make_write_inputs(pool, 8, seed=0)
    strided = torch.zeros(kc.shape[:3] + (2 * kc.shape[3],), dtype=kc.dtype,
                          device=device)[..., ::2]
    cases = [
        ((k, v, kc, vc, slots.to(torch.int32)), {}, "slot_mapping"),
        ((k, v, kc, vc, slots[:5]), {}, "slot_mapping"),
        ((k, v, kc, vc, slots[:, None]), {}, "slot_mapping"),
        ((k.float(), v.float(), kc, vc, slots), {}, "k has dtype"),
        ((k, v[:, :1], kc, vc, slots), {}, "v must match k"),
        ((k.bfloat16(), v.bfloat16(), kc, vc, slots), {}, "cache dtype"),
        ((k[:, :1], v[:, :1], kc, vc, slots), {}, "kv_heads"),
        ((k[0], v[0], kc, vc, slots), {}, "k must be 3-D"),
        ((k, v, kc[0], vc, slots), {}, "k_cache must be 4-D"),
        ((k, v, kc, kc, slots), {}, "same memory"),
        ((k, v, kc, vc.transpose(2, 3), slots), {}, "v_cache must have shape"),
        ((k, v, strided, vc, slots), {}, "k_cache must have stride 1"),
        ((k, v, kc, strided, slots), {}, "v_cache must be token-major .* or dim-major"),
        ((k, v, kc, vc, slots.to("meta")), {}, "slot_mapping is on meta"),
        ((k, v, kc, vc, slots), {"k_scale": 1.0, "v_scale": 1.0}, "fp8 caches only"),
    ]
    for args, kwargs, match in cases:
        with pytest.raises(ValueError, match=match):
            fn(*args, **kwargs)
    fp8 = _small_pool(device, "fp8")
    with pytest.raises(ValueError, match="k_scale and v_scale"):
        fn(k, v, fp8.k_cache, fp8.v_cache, slots)
    with pytest.raises(ValueError, match="k_scale"):
        fn(k, v, fp8.k_cache, fp8.v_cache, slots, k_scale=torch.ones(2), v_scale=fp8.v_scale)
    with pytest.raises(ValueError, match="v_scale"):
        fn(k, v, fp8.k_cache, fp8.v_cache, slots, k_scale=fp8.k_scale, v_scale=-1.0)


@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_out_of_range_slots_are_refused_by_name(impl, device, monkeypatch):
    """An out-of-range slot is a write out of bounds (a segfault through the interpreter, an
    illegal address on a GPU): refused on the host, naming the argument and the range.
    Negative slots stay "skip this token"."""
    from kvbench.kernels._validate import raise_pending

    monkeypatch.setenv("KVBENCH_CHECK", "1")  # a GPU run checks on the device
    fn = IMPLS[impl]
    pool = _small_pool(device, "fp16")
    k, v, slots = make_write_inputs(pool, 8, seed=0)
    capacity = pool.k_cache.shape[0] * pool.k_cache.shape[1]
    for bad in (slots + capacity, slots.clone().fill_(capacity)):
        with pytest.raises(ValueError, match=rf"slot_mapping values must lie in \[0, {capacity}\) "
                                             r"\(slot = page \* page_size \+ offset"
                                             r".*or be negative"):
            fn(k, v, pool.k_cache, pool.v_cache, bad)
            raise_pending()
    skipped = slots.clone()
    skipped[::2] = -1
    fn(k, v, pool.k_cache, pool.v_cache, skipped)  # accepted


# ---- GPU: full sizes -----------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("n", [16384, 64, 1], ids=lambda n: f"n{n}")
@pytest.mark.parametrize("storage", ["combined", "split", "v_dim_major"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_gpu_full_size(impl, dtype, storage, n):
    """Llama-3/Qwen3 geometry: 8 KV heads x 128, page 16, pool >= 8x L2, fragmented."""
    pool = paged_pool(32, 1024, dtype=dtype, storage=storage, device="cuda")
    try:
        k, v, slots = make_write_inputs(pool, n, seed=n)
        if n >= 64:
            slots[::17] = -1
        assert check_kv_write(IMPLS[impl], pool, k, v, slots) == 0.0
    finally:
        pool.free()


@pytest.mark.gpu
def test_gpu_hardware_cast_equals_soft_encoder_and_torch():
    x = _hard_fp32_values("cuda")
    torch_bytes = x.clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8)
    assert torch.equal(_encode(x, soft=False), torch_bytes)
    assert torch.equal(_encode(x, soft=True), torch_bytes)
    assert torch.equal(e4m3_encode_ref(x), torch_bytes)


@pytest.mark.gpu
@pytest.mark.parametrize("in_dtype", [torch.float16, torch.bfloat16])
def test_gpu_fp8_write_soft_and_hard_paths_agree(in_dtype):
    pool = paged_pool(8, 512, dtype="fp8", device="cuda", min_l2_multiple=0)
    k, v, slots = make_write_inputs(pool, 4096, seed=11)
    k, v = k.to(in_dtype), v.to(in_dtype)
    results = []
    for soft in (False, True):
        pool.k_cache.zero_()
        pool.v_cache.zero_()
        kw._launch_triton(k, v, pool.k_cache, pool.v_cache, slots,
                          pool.k_scale.reshape(1), pool.v_scale.reshape(1), True, soft_fp8=soft)
        results.append((pool.k_cache.clone(), pool.v_cache.clone()))
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1], results[1][1])
    ref_k, _ = kv_write_ref(k, v, slots, cache_dtype="fp8", k_scale=pool.k_scale,
                            v_scale=pool.v_scale)
    assert torch.equal(results[0][0][slots // 16, slots % 16], ref_k)
    pool.free()


def test_small_grids_shrink_the_tile_to_one_program_per_sm():
    """Decode-size writes get >= one program per SM (tokens split first, then heads), on fewer
    warps for small tiles; prefill keeps the 4096-element bandwidth tile on 4 warps."""
    from kvbench.kernels.kv_write import _tiles

    assert _tiles(16384, 8, 128, 132) == (4, 8, 128, 4)  # 4096 programs already
    assert _tiles(64, 8, 128, 132) == (1, 2, 128, 1)  # 64 x 4 = 256 programs >= 132
    assert _tiles(1, 8, 128, 132) == (1, 1, 128, 1)  # as small as it gets: 8 programs
    assert _tiles(64, 8, 128, 4) == (4, 8, 128, 4)  # 16 programs cover 4 SMs
    assert _tiles(3, 2, 64, 64) == (1, 1, 64, 1)
