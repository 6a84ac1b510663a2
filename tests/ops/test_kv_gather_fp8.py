"""kv_gather_fp8 rows (legacy / vectorized / cached Triton, torch) bit-exact to the reference.

CPU: Triton through the interpreter, small pools (the legacy kernel runs 5 programs per token,
so its cases stay under ~100 tokens). GPU (`-m gpu`): DSA prefill's scenarios (kv_len 8k/32k/64k
+ 2048 pad rows on a 131072-token pool), its edge cases and its shrink-reuse case, plus the
hardware fp8 cast against the soft encoder.
"""

from __future__ import annotations

import pytest
import torch

from kvbench.fixtures.gather_pool import (
    OUT_DIM,
    ROW_BYTES,
    TOPK_PAD_ROWS,
    build_gather_pool,
    build_page_table_flat,
)
from kvbench.harness.verify import VerificationError
from kvbench.kernels import kv_gather_fp8 as kg
from kvbench.ops.kv_gather_fp8 import (
    check_kv_gather_fp8,
    golden_check_kv_gather_fp8,
    kv_gather_fp8_ref,
)

VARIANTS = {
    "legacy": kg.gather_fp8_legacy,
    "vectorized": kg.gather_fp8_vectorized,
    "cached": kg.gather_fp8_cached,
    "torch": kg.gather_fp8_torch,
}
POOL_TOKENS = 640


@pytest.fixture(autouse=True)
def _fresh_cache():
    kg.clear_gather_cache()
    yield
    kg.clear_gather_cache()


@pytest.fixture(scope="module")
def pool_cpu():
    return build_gather_pool(POOL_TOKENS, device="cpu", seed=0)


def _pool(pool_cpu, device):
    return pool_cpu if device == "cpu" else pool_cpu.to(device)


# ---- correctness ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kv_lens", "extra_rows"),
    [([19], 7), ([24], 0), ([0], 5), ([0], 0), ([5, 9], 9), ([3], 1)],
    ids=["ragged_tail", "extra0", "empty", "empty_no_pad", "two_requests", "tiny"],
)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_bit_exact(variant, kv_lens, extra_rows, pool_cpu, device):
    kv = _pool(pool_cpu, device)
    pt = build_page_table_flat(kv_lens, POOL_TOKENS, seed=sum(kv_lens), device=device)
    # shape, dtype, every byte and the zero pad rows are all part of the check
    assert check_kv_gather_fp8(VARIANTS[variant], kv, pt, extra_rows) == 0.0


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_saturates_like_the_definition(variant, device):
    """Group scales and rope values large enough that results exceed 448 must saturate."""
    raw = build_gather_pool(128, device="cpu", seed=5).view(torch.uint8).reshape(128, ROW_BYTES)
    scales = raw[:, 512:528].clone().view(torch.float32)
    scales[::2] = 4.0  # nope up to 448 * 4
    raw[:, 512:528] = scales.view(torch.uint8)
    rope = raw[:, 528:].clone().view(torch.bfloat16)
    rope[::3, :8] = 1000.0
    raw[:, 528:] = rope.view(torch.uint8)
    kv = raw.view(torch.float8_e4m3fn).view(128, 1, ROW_BYTES).to(device)
    pt = build_page_table_flat([20], 128, seed=3, device=device)
    want = kv_gather_fp8_ref(kv, pt, extra_rows=4).view(torch.uint8)
    assert int(((want & 0x7F) == 0x7E).sum()) > 100  # the case really saturates
    assert check_kv_gather_fp8(VARIANTS[variant], kv, pt, 4) == 0.0


def test_shrink_reuse_never_leaks_stale_bytes(pool_cpu, device):
    """Big call, then the buffer is poisoned, then a smaller call: pads must still be zero."""
    kv = _pool(pool_cpu, device)
    big = build_page_table_flat([120], POOL_TOKENS, seed=11, device=device)
    small = build_page_table_flat([21], POOL_TOKENS, seed=13, device=device)
    first = kg.gather_fp8_cached(kv, big, extra_rows=40)
    first.view(torch.uint8).fill_(0x55)  # stale, non-zero bytes everywhere in the buffer
    assert check_kv_gather_fp8(kg.gather_fp8_cached, kv, small, 30) == 0.0
    second = kg.gather_fp8_cached(kv, small, extra_rows=30)
    assert second.data_ptr() == first.data_ptr()  # the same grow-only buffer was reused
    assert int(second.view(torch.uint8)[21:].max()) == 0
    grown = kg.gather_fp8_cached(kv, big, extra_rows=41)  # one row more: the buffer grows
    assert grown.shape[0] == 161
    assert check_kv_gather_fp8(kg.gather_fp8_cached, kv, big, 41) == 0.0


def test_clear_gather_cache_releases_the_buffer(pool_cpu, device):
    kv = _pool(pool_cpu, device)
    pt = build_page_table_flat([10], POOL_TOKENS, device=device)
    kg.gather_fp8_cached(kv, pt, extra_rows=2)
    assert kg._BUFFERS
    kg.clear_gather_cache()
    assert not kg._BUFFERS


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_out_argument_is_written_and_returned(variant, pool_cpu, device):
    kv = _pool(pool_cpu, device)
    pt = build_page_table_flat([12], POOL_TOKENS, seed=4, device=device)
    out = torch.full((12 + 6, OUT_DIM), 0x55, dtype=torch.uint8, device=device)
    out = out.view(torch.float8_e4m3fn)  # garbage that every row must overwrite
    returned = []

    def with_out(*args, **kwargs):
        returned.append(VARIANTS[variant](*args, **kwargs, out=out))
        return returned[-1]

    assert check_kv_gather_fp8(with_out, kv, pt, 6) == 0.0
    assert returned[0] is out


def test_a_kernel_leaving_stale_pads_is_caught(pool_cpu, device):
    """The check must fail for the bug the fused zero-fill prevents."""
    kv = _pool(pool_cpu, device)
    pt = build_page_table_flat([16], POOL_TOKENS, device=device)

    def stale_pads(kv_cache, page_table_flat, *, extra_rows, out=None):
        res = kg.gather_fp8_torch(kv_cache, page_table_flat, extra_rows=extra_rows)
        res.view(torch.uint8)[page_table_flat.shape[0]:, 5] = 1
        return res

    with pytest.raises(VerificationError, match="kv_gather_fp8"):
        check_kv_gather_fp8(stale_pads, kv, pt, 3)


def test_a_rounding_difference_is_caught(pool_cpu, device):
    kv = _pool(pool_cpu, device)
    pt = build_page_table_flat([16], POOL_TOKENS, device=device)

    def truncating(kv_cache, page_table_flat, *, extra_rows, out=None):
        res = kg.gather_fp8_torch(kv_cache, page_table_flat, extra_rows=extra_rows)
        res.view(torch.uint8)[3, 100] ^= 1  # one mantissa LSB off by one
        return res

    with pytest.raises(VerificationError, match="1 of"):
        check_kv_gather_fp8(truncating, kv, pt, 2)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_golden_check(variant, device):
    assert golden_check_kv_gather_fp8(VARIANTS[variant], "fp8", torch.device(device)) == 0.0


def test_golden_check_refuses_other_dtypes(device):
    with pytest.raises(ValueError, match="fp8"):
        golden_check_kv_gather_fp8(kg.gather_fp8_torch, "fp16", torch.device(device))


# ---- fixture ---------------------------------------------------------------------------------


def test_gather_pool_contents(pool_cpu):
    raw = pool_cpu.view(torch.uint8).reshape(POOL_TOKENS, ROW_BYTES)
    assert pool_cpu.shape == (POOL_TOKENS, 1, ROW_BYTES)
    assert pool_cpu.dtype == torch.float8_e4m3fn
    nope = raw[:, :512]
    assert not bool(((nope & 0x7F) == 0x7F).any())  # no NaN codes (real quantizer)
    assert int((nope & 0x7F).max()) == 0x7E  # the quantizer maps amax onto 448
    scales = raw[:, 512:528].contiguous().view(torch.float32)
    assert float(scales.min()) >= 1e-3 and float(scales.max()) <= 0.051
    rope = raw[:, 528:].contiguous().view(torch.bfloat16)
    assert bool(torch.isfinite(rope.float()).all()) and float(rope.float().std()) > 0.5
    assert torch.equal(build_gather_pool(POOL_TOKENS, device="cpu", seed=0).view(torch.uint8),
                       pool_cpu.view(torch.uint8))


def test_large_pool_repeats_its_generated_rows_deterministically(monkeypatch):
    from kvbench.fixtures import gather_pool

    monkeypatch.setattr(gather_pool, "UNIQUE_ROWS", 256)
    small = build_gather_pool(256, device="cpu", seed=3).view(torch.uint8).reshape(256, ROW_BYTES)
    big = build_gather_pool(1000, device="cpu", seed=3).view(torch.uint8).reshape(1000, ROW_BYTES)
    assert torch.equal(big[:256], small)  # the generated rows are a smaller pool's rows
    # every later row is one of them, and not all the same one
    matches = (big[256:, None, :] == small[None, :, :]).all(-1)
    assert bool(matches.any(-1).all()) and int(matches.float().argmax(-1).unique().numel()) > 100
    again = build_gather_pool(1000, device="cpu", seed=3).view(torch.uint8).reshape(1000, ROW_BYTES)
    assert torch.equal(big, again)


def test_page_table_layout():
    pt = build_page_table_flat([130, 64, 5], 1024, seed=2, device="cpu")
    assert pt.dtype == torch.int32 and pt.shape == (199,)
    for lo, n in ((0, 130), (130, 64), (194, 5)):
        rows = pt[lo : lo + n].to(torch.int64)
        pages = rows // 64
        assert bool(((rows % 64) == torch.arange(n) % 64).all())  # contiguous inside pages
        first_of_page = pages[:: 64]
        assert first_of_page.unique().numel() == first_of_page.numel()  # distinct pages
    pages = pt.to(torch.int64) // 64
    # no page serves two requests (one randperm per request let 7 of 32 requests share pages)
    per_request = [set(pages[lo : lo + n].tolist()) for lo, n in ((0, 130), (130, 64), (194, 5))]
    assert sum(map(len, per_request)) == len(set().union(*per_request)) == 3 + 1 + 1
    many = build_page_table_flat([64] * 32, 4096, seed=1, device="cpu").to(torch.int64) // 64
    assert many.unique().numel() == 32
    # a request's pages do not depend on the requests after it
    assert torch.equal(build_page_table_flat([130], 1024, seed=2, device="cpu"), pt[:130])
    with pytest.raises(ValueError, match="kv_len"):
        build_page_table_flat([2000], 1024, device="cpu")
    with pytest.raises(ValueError, match=r"need 17 pages of 64 tokens in all; the pool has 16"):
        build_page_table_flat([512, 512, 1], 1024, device="cpu")
    with pytest.raises(ValueError, match="kv_lens"):
        build_page_table_flat([-1], 1024, device="cpu")
    with pytest.raises(ValueError, match="pool_tokens"):
        build_gather_pool(0, device="cpu")


# ---- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_bad_input(variant, pool_cpu, device):
    fn = VARIANTS[variant]
    kv = _pool(pool_cpu, device)
    pt = build_page_table_flat([8], POOL_TOKENS, device=device)
    f8 = torch.float8_e4m3fn
    cases = [
        ((kv.view(torch.float16), pt), {"extra_rows": 0}, "kv_cache has dtype"),
        ((kv[:, :, :655], pt), {"extra_rows": 0}, "kv_cache must have shape"),
        ((kv.view(POOL_TOKENS, ROW_BYTES), pt), {"extra_rows": 0}, "kv_cache must be 3-D"),
        ((kv[::2], pt), {"extra_rows": 0}, "kv_cache must be contiguous"),
        ((kv, pt.long()), {"extra_rows": 0}, "page_table_flat has dtype"),
        ((kv, pt[None]), {"extra_rows": 0}, "page_table_flat must be 1-D"),
        ((kv, pt[::2]), {"extra_rows": 0}, "page_table_flat must be contiguous"),
        ((kv, pt), {"extra_rows": -1}, "extra_rows"),
        ((kv, pt), {"extra_rows": 2.0}, "extra_rows"),
        ((kv, pt), {"extra_rows": True}, "extra_rows"),
        ((kv, pt.to("meta")), {"extra_rows": 0}, "page_table_flat is on meta"),
        ((kv, pt), {"extra_rows": 1, "out": torch.empty(8, OUT_DIM, dtype=f8, device=device)},
         "out must have shape"),
        ((kv, pt), {"extra_rows": 0, "out": torch.empty(8, OUT_DIM, device=device)},
         "out has dtype"),
        ((kv, pt), {"extra_rows": 0,
                    "out": torch.empty(OUT_DIM, 8, dtype=f8, device=device).t()},
         "out must be contiguous"),
    ]
    for args, kwargs, match in cases:
        with pytest.raises(ValueError, match=match):
            fn(*args, **kwargs)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_out_of_range_rows_are_refused_by_name(variant, pool_cpu, device, monkeypatch):
    """A row index outside the pool is a read out of bounds: refused on the host for CPU
    tensors, on the device in safe mode on a GPU (raised by raise_pending)."""
    from kvbench.kernels._validate import raise_pending

    monkeypatch.setenv("KVBENCH_CHECK", "1")  # a GPU run checks on the device
    kv = _pool(pool_cpu, device)
    pt = build_page_table_flat([8], POOL_TOKENS, device=device)
    for bad in (pt + POOL_TOKENS, pt - POOL_TOKENS):
        with pytest.raises(ValueError, match=r"page_table_flat values must lie in "
                                             rf"\[0, {POOL_TOKENS}\) "
                                             rf"\(rows of the {POOL_TOKENS}-row kv_cache\); got"):
            VARIANTS[variant](kv, bad, extra_rows=0)
            raise_pending()


# ---- GPU: DSA prefill sizes --------------------------------------------------------------

_GPU_POOL = 131072  # 2x the largest kv_len, ~86 MB (above a 60 MiB L2)


@pytest.fixture(scope="module")
def gpu_pool():
    return build_gather_pool(_GPU_POOL, device="cuda", seed=0)


@pytest.mark.gpu
@pytest.mark.parametrize("kv_len", [8192, 32768, 65536])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_gpu_seed_scenarios(variant, kv_len, gpu_pool):
    pt = build_page_table_flat([kv_len], _GPU_POOL, seed=kv_len, device="cuda")
    assert check_kv_gather_fp8(VARIANTS[variant], gpu_pool, pt, TOPK_PAD_ROWS) == 0.0


@pytest.mark.gpu
@pytest.mark.parametrize(("kv_len", "extra"), [(1234, TOPK_PAD_ROWS), (8192, 0),
                                               (0, TOPK_PAD_ROWS), (63, 17)])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_gpu_seed_edge_cases(variant, kv_len, extra, gpu_pool):
    pt = build_page_table_flat([kv_len], _GPU_POOL, seed=7, device="cuda")
    assert check_kv_gather_fp8(VARIANTS[variant], gpu_pool, pt, extra) == 0.0


@pytest.mark.gpu
def test_gpu_shrink_reuse_65536_to_4096(gpu_pool):
    big = build_page_table_flat([65536], _GPU_POOL, seed=11, device="cuda")
    small = build_page_table_flat([4096], _GPU_POOL, seed=13, device="cuda")
    kg.gather_fp8_cached(gpu_pool, big, extra_rows=TOPK_PAD_ROWS).view(torch.uint8).fill_(0xA5)
    assert check_kv_gather_fp8(kg.gather_fp8_cached, gpu_pool, small, TOPK_PAD_ROWS) == 0.0


@pytest.mark.gpu
def test_gpu_hardware_cast_equals_soft_encoder(gpu_pool):
    """Both kernels, compiled, in hardware-cvt and soft-encoder modes: identical bytes."""
    pt = build_page_table_flat([32768, 777], _GPU_POOL, seed=5, device="cuda")
    total = pt.shape[0] + TOPK_PAD_ROWS
    outs = []
    for launch in (kg._launch_vectorized, kg._launch_legacy):
        for soft in (False, True):
            out = torch.zeros((total, OUT_DIM), dtype=torch.float8_e4m3fn, device="cuda")
            launch(gpu_pool, pt, out, soft)
            outs.append(out.view(torch.uint8))
    for other in outs[1:]:
        assert torch.equal(outs[0], other)
