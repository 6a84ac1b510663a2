"""Paged decode attention: every kernel x dtype path against the fp32 reference.

CPU: the Triton kernels run through the interpreter at tiny shapes (conftest sets
TRITON_INTERPRET). GPU (`pytest -m gpu` on the H200): the same checks at decode geometry
(32 q / 8 kv heads, head_dim 128, contexts 4k-32k, pools >= 8x L2).
"""

import functools
import itertools
import textwrap

import pytest
import torch

from kvbench.fixtures.pool import paged_pool
from kvbench.harness.verify import VerificationError
from kvbench.kernels import paged_decode as pd
from kvbench.ops import paged_decode as pd_op
from kvbench.ops.paged_decode import (
    check_paged_decode,
    golden_check_paged_decode,
    make_decode_query,
    paged_decode_ref,
)

SINGLE, SPLIT, SDPA = (
    pd.paged_decode_single_pass,
    pd.paged_decode_split_kv,
    pd.paged_decode_gather_sdpa,
)
TRITON = [SINGLE, SPLIT]
ALL = [SINGLE, SPLIT, SDPA]
_ids = {SINGLE: "single_pass", SPLIT: "split_kv", SDPA: "gather_sdpa"}


def _name(fn):
    return _ids[fn]


def _pool(device, num_seqs, seq_len, **kw):
    args = {"kv_heads": 2, "head_dim": 32, "page_size": 16, "min_l2_multiple": 0, "seed": 0}
    args.update(kw)
    return paged_pool(num_seqs, seq_len, device=device, **args)


def _run(fn, pool, q_heads, *, q_dtype=None, **kw):
    q = make_decode_query(pool, q_heads, seed=1, dtype=q_dtype)
    return check_paged_decode(fn, pool, q, **kw)


# ---- every Triton kernel x dtype x layout x storage (reduced cross product) --------------

_MATRIX = [
    ("fp16", "fragmented", "combined"),
    ("fp16", "contiguous", "split"),
    ("bf16", "fragmented", "split"),
    ("bf16", "contiguous", "combined"),
    ("fp8", "fragmented", "combined"),
    ("fp8", "contiguous", "split"),
    ("fp16", "fragmented", "head_major"),
    ("fp8", "fragmented", "head_major"),
    ("fp16", "fragmented", "v_dim_major"),
    ("bf16", "contiguous", "v_dim_major"),
    ("fp8", "fragmented", "v_dim_major"),
]


@pytest.mark.parametrize("fn", TRITON, ids=_name)
@pytest.mark.parametrize(("dtype", "layout", "storage"), _MATRIX)
def test_kernel_matrix(device, fn, dtype, layout, storage):
    pool = _pool(device, 3, [23, 80, 5], dtype=dtype, layout=layout, storage=storage, num_pages=40)
    diff = _run(fn, pool, 4)
    assert diff >= 0.0


@pytest.mark.parametrize("fn", ALL, ids=_name)
@pytest.mark.parametrize("storage", ["combined", "v_dim_major"])
@pytest.mark.parametrize("dtype", ["fp16", "fp8"])
def test_whole_tiles_and_tail_with_stale_nan_past_seq_len(device, fn, storage, dtype):
    """Sequences of whole BLOCK_N tiles, whole tiles plus a tail, and a tail alone; every slot
    no sequence attends holds NaN (fp16) / the e4m3 NaN code 0x7F (fp8), as unwritten rows may
    in an engine, including the rest of each last page and all of page 0, which a masked
    block-table load returns for tokens past seq_len. The dim-major path loads its tail tile
    whole and must zero those rows, not only give them p = 0 (0 x NaN = NaN)."""
    block_n = pd.CONFIG["single_pass"]["BLOCK_N"]
    lens = [2 * block_n, 2 * block_n + 19, 7]
    pool = _pool(device, 3, lens, dtype=dtype, storage=storage, num_pages=60)
    used = pool.attended_page_ids()
    spare = next(p for p in range(1, pool.num_pages) if p not in set(used.tolist()))
    for cache in (pool.k_cache, pool.v_cache):  # move page 0's tokens to a spare page
        cache[spare] = cache[0]
    pool.block_table[pool.block_table == 0] = spare
    attended = torch.zeros(pool.num_pages, pool.page_size, dtype=torch.bool, device=device)
    for seq, n in enumerate(lens):
        for t in range(n):
            attended[pool.block_table[seq, t // pool.page_size], t % pool.page_size] = True
    assert not attended[0].any()
    poison = 0x7F if dtype == "fp8" else float("nan")
    for cache in (pool.k_cache, pool.v_cache):
        cache[~attended] = poison
    assert _run(fn, pool, 4) >= 0.0


@pytest.mark.parametrize("fn", TRITON, ids=_name)
@pytest.mark.parametrize("storage", ["combined", "v_dim_major"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp8"])
def test_block_table_loaded_a_tile_ahead(device, monkeypatch, fn, storage, dtype):
    """CONFIG "bt_ahead" (entries of the next tile carried through the loop) in every kernel:
    whole tiles, a tail, a sequence shorter than one tile, and (split_kv) 3 forced splits: one
    tile each, and splits with nothing to read."""
    for key in ("single_pass", "single_pass_fp8", "split_kv", "split_kv_fp8"):
        monkeypatch.setitem(pd.CONFIG, key, {**pd.CONFIG[key], "bt_ahead": True})
    block_n = pd.CONFIG["single_pass"]["BLOCK_N"]
    lens = [2 * block_n, 2 * block_n + 19, 7]
    pool = _pool(device, 3, lens, dtype=dtype, storage=storage, num_pages=60)
    run = functools.partial(fn, num_splits=3) if fn is SPLIT else fn
    assert _run(run, pool, 4) >= 0.0


@pytest.mark.parametrize("fn", TRITON, ids=_name)
@pytest.mark.parametrize("bt_ahead", [False, True])
@pytest.mark.parametrize(("dtype", "page_size"), [("fp16", 16), ("bf16", 32), ("fp8", 16),
                                                  ("fp8", 8), ("fp16", 256)])
def test_v_page_rows(device, monkeypatch, fn, bt_ahead, dtype, page_size):
    """Dim-major V pages shorter than a tile (each page of a whole tile loaded as one
    contiguous row, then reordered to [tokens, d]), with and without "bt_ahead": whole tiles,
    a tail (the masked path, page-sized pieces), a sequence shorter than one tile, 3 forced
    splits; stale poison in every slot no sequence attends. Page 256 is longer than a tile:
    the whole-page load does not apply there and must not break it."""
    for key in ("single_pass", "single_pass_fp8", "split_kv", "split_kv_fp8"):
        monkeypatch.setitem(pd.CONFIG, key, {**pd.CONFIG[key], "bt_ahead": bt_ahead})
    block_n = pd.CONFIG["single_pass"]["BLOCK_N"]
    lens = [2 * block_n, 2 * block_n + 19, 7]
    pool = _pool(device, 3, lens, dtype=dtype, storage="v_dim_major", page_size=page_size,
                 num_pages=-(-900 // page_size))
    used = torch.zeros(pool.num_pages, pool.page_size, dtype=torch.bool, device=device)
    for seq, n in enumerate(lens):
        for t in range(n):
            used[pool.block_table[seq, t // pool.page_size], t % pool.page_size] = True
    for cache in (pool.k_cache, pool.v_cache):
        cache[~used] = 0x7F if dtype == "fp8" else float("nan")
    run = functools.partial(fn, num_splits=3) if fn is SPLIT else fn
    assert _run(run, pool, 4) >= 0.0


@pytest.mark.parametrize("fn", TRITON, ids=_name)
@pytest.mark.parametrize("page_size", [8, 256])
def test_v_dim_major_other_page_sizes(device, fn, page_size):
    """Runs of adjacent slots shorter than a tile (page 8) and longer than one (page 256)."""
    pool = _pool(device, 2, [300, 45], dtype="fp16", storage="v_dim_major",
                 page_size=page_size, num_pages=-(-700 // page_size))
    assert _run(fn, pool, 4) >= 0.0


def test_v_cache_layout_neither_token_nor_dim_major_is_refused():
    pool = _pool("cpu", 1, 20)
    q = make_decode_query(pool, 4)
    n, p, h, d = pool.v_cache.shape
    mixed = torch.zeros((n, p, d, h), dtype=pool.v_cache.dtype).permute(0, 1, 3, 2)
    odd = torch.zeros(n * (p * h * d + 1), dtype=pool.v_cache.dtype).as_strided(
        (n, p, h, d), (p * h * d + 1, 1, d * p, p))
    for v in (mixed, odd):
        with pytest.raises(ValueError, match="v_cache must be token-major .* or dim-major"):
            SINGLE(q, pool.k_cache, v, pool.block_table, pool.seq_lens)


@pytest.mark.parametrize("fn", ALL, ids=_name)
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp8"])
def test_golden_check_every_row(device, fn, dtype):
    assert golden_check_paged_decode(fn, dtype, device) >= 0.0


def test_fp8_with_bf16_query(device):
    pool = _pool(device, 2, [40, 9], dtype="fp8")
    for fn in ALL:
        _run(fn, pool, 8, q_dtype=torch.bfloat16)


# ---- fp8 dequant (bitcast to e4m3, float convert) -----------------------------------------

_FINITE_CODES = torch.tensor([c for c in range(256) if c not in (0x7F, 0xFF)], dtype=torch.uint8)
_Q_DT = {"fp16": torch.float16, "bf16": torch.bfloat16}


def _code_caches(device, head_dim, num_pages):
    """K/V pages whose rows cycle through all 254 finite codes (slot t, lane d: code t + d)."""
    n = num_pages * 16
    idx = (torch.arange(n)[:, None] + torch.arange(head_dim)[None, :]) % 254
    cache = _FINITE_CODES[idx].reshape(num_pages, 16, 1, head_dim).to(device)
    return cache, cache.flip(0).contiguous()


@pytest.mark.parametrize("fn", TRITON, ids=_name)
@pytest.mark.parametrize("q_name", ["fp16", "bf16"])
def test_fp8_one_token_output_is_exact_v_row(device, fn, q_name):
    """q = 0 and one token: softmax weight 1, so the output is the widened V row, bit-exact.

    Two sequences read the first two lanes' worth of codes (2 x 128 >= 254) from their page's
    slot 0: every finite code passes through the kernel's V path and the scale folding.
    """
    k_cache, v_cache = _code_caches(device, 128, 2)
    v_cache[0, 0, 0] = _FINITE_CODES[:128].to(device)
    v_cache[1, 0, 0] = _FINITE_CODES[-128:].to(device)
    q = torch.zeros((2, 1, 128), dtype=_Q_DT[q_name], device=device)
    bt = torch.tensor([[0], [1]], dtype=torch.int32, device=device)
    lens = torch.ones(2, dtype=torch.int32, device=device)
    kw = {"k_scale": 1.0, "v_scale": 1.0}
    if fn is SPLIT:
        kw["num_splits"] = 2  # the second split is empty: the combine must weigh it 0
    out = fn(q, k_cache, v_cache, bt, lens, **kw)
    want = v_cache[:, 0, 0, :].view(torch.float8_e4m3fn).to(q.dtype)
    # Exact values; the sign of zero is not kept (acc starts at +0, and +0 + -0 = +0).
    assert torch.equal(out[:, 0].float(), want.float())
    assert set(v_cache[:, 0, 0, :].flatten().tolist()) == set(_FINITE_CODES.tolist())


@pytest.mark.parametrize("fn", TRITON, ids=_name)
@pytest.mark.parametrize("q_name", ["fp16", "bf16"])
def test_fp8_every_code_in_k_and_v(device, fn, q_name):
    """All 254 codes at every lane position in K and V, random q, against the fp64 reference."""
    k_cache, v_cache = _code_caches(device, 32, 16)  # 256 slots: each lane sees every code
    gen = torch.Generator().manual_seed(3)
    q = torch.randn((2, 4, 32), generator=gen).to(device=device, dtype=_Q_DT[q_name])
    bt = torch.stack([torch.arange(16), torch.arange(16).flip(0)]).to(device, torch.int32)
    lens = torch.tensor([256, 200], dtype=torch.int32, device=device)
    # Small k_scale: scores of a few units (448 x 0.004 = 1.8 per element at most).
    ks = torch.tensor(0.004, device=device)
    vs = torch.tensor(0.01, device=device)
    args = (q, k_cache, v_cache, bt, lens)
    out = fn(*args, k_scale=ks, v_scale=vs)
    ref = paged_decode_ref(*args, k_scale=ks, v_scale=vs)
    rtol = max(pd_op.RTOL["fp8"], pd_op.RTOL[q_name])
    atol = max(pd_op.ATOL["fp8"], pd_op.ATOL[q_name])
    torch.testing.assert_close(out.float(), ref.float(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("fn", TRITON, ids=_name)
@pytest.mark.parametrize("q_name", ["fp16", "bf16"])
def test_fp8_on_fragmented_pools(device, fn, q_name):
    """fp8 caches x q dtypes x kernels on a fragmented quantized pool."""
    pool = _pool(device, 3, [70, 9, 130], dtype="fp8", layout="fragmented", num_pages=40)
    _run(fn, pool, 8, q_dtype=_Q_DT[q_name])
    if fn is SPLIT:  # forced multi-split: the split epilogue with the folded v_scale
        q = make_decode_query(pool, 8, seed=2, dtype=_Q_DT[q_name])
        check_paged_decode(functools.partial(SPLIT, num_splits=3), pool, q)


# ---- decode edge cases ------------------------------------------------------------------


@pytest.mark.parametrize("fn", ALL, ids=_name)
@pytest.mark.parametrize(
    ("num_seqs", "lens", "kv_heads", "q_heads"),
    [
        (1, 1, 2, 4),  # batch 1, one token
        (1, 37, 2, 2),  # partial last page, Hq == Hkv
        (4, [5, 64, 100, 1], 1, 8),  # ragged, MQA, Hq = 8 x Hkv
        (2, [16, 48], 2, 16),  # exact page multiples, Hq = 8 x Hkv
    ],
)
def test_edge_shapes(device, fn, num_seqs, lens, kv_heads, q_heads):
    _run(fn, _pool(device, num_seqs, lens, kv_heads=kv_heads), q_heads)


@pytest.mark.parametrize("fn", TRITON, ids=_name)
@pytest.mark.parametrize(("page_size", "head_dim"), [(1, 16), (8, 64), (64, 128)])
def test_page_sizes_and_head_dims(device, fn, page_size, head_dim):
    pool = _pool(device, 2, [70, 3], page_size=page_size, head_dim=head_dim)
    _run(fn, pool, 4)


def test_launch_config_of_wide_tiles():
    """Tiles wider than the swept 128 lanes halve BLOCK_N per doubling (the swept tile bytes)
    and then take WIDE_TILE_CONFIG's measured entry; 128-lane tiles (head_dim 96 padded
    included) launch CONFIG as it is."""
    for split in (False, True):
        for fp8 in (False, True):
            key = ("split_kv" if split else "single_pass") + ("_fp8" if fp8 else "")
            assert pd.launch_config(split, fp8, 128) == pd.CONFIG[key]
            wide = pd.launch_config(split, fp8, 256)
            assert wide["BLOCK_N"] == max(16, int(pd.CONFIG[key]["BLOCK_N"]) // 2)
            expected_stages = pd.WIDE_TILE_CONFIG.get(key, {}).get(
                "num_stages", pd.CONFIG[key]["num_stages"])
            assert wide["num_stages"] == expected_stages
            assert wide["num_warps"] == pd.CONFIG[key]["num_warps"]
    assert pd.launch_config(False, False, 256)["num_stages"] == 3
    assert pd.launch_config(False, True, 256)["num_stages"] == pd.CONFIG["single_pass_fp8"][
        "num_stages"]


@pytest.mark.parametrize("fn", TRITON, ids=_name)
def test_block_n_smaller_than_page(device, fn, monkeypatch):
    """The token loop must not assume BLOCK_N >= page_size (a sweep may pick BLOCK_N=16)."""
    for key in ("single_pass", "split_kv"):
        monkeypatch.setitem(pd.CONFIG, key, {**pd.CONFIG[key], "BLOCK_N": 16})
    _run(fn, _pool(device, 2, [70, 33], page_size=32), 4)


@pytest.mark.parametrize("fn", ALL, ids=_name)
def test_zero_length_sequence_gives_zeros(device, fn):
    pool = _pool(device, 3, [20, 5, 9])
    pool.seq_lens[1] = 0
    pool.seq_lens_list[1] = 0
    q = make_decode_query(pool, 4)
    check_paged_decode(fn, pool, q)
    out = fn(q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    assert (out[1] == 0).all()


@pytest.mark.parametrize("fn", ALL, ids=_name)
def test_custom_sm_scale(device, fn):
    _run(fn, _pool(device, 2, [30, 7]), 4, sm_scale=0.5)


@pytest.mark.parametrize("fn", ALL, ids=_name)
def test_fp8_python_float_scales(device, fn):
    pool = _pool(device, 2, [30, 7], dtype="fp8")
    q = make_decode_query(pool, 4)
    ks, vs = float(pool.k_scale), float(pool.v_scale)
    args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    out = fn(*args, k_scale=ks, v_scale=vs)
    ref = paged_decode_ref(*args, k_scale=pool.k_scale, v_scale=pool.v_scale)
    torch.testing.assert_close(out.float(), ref.float(), rtol=pd_op.RTOL["fp8"],
                               atol=pd_op.ATOL["fp8"])


@pytest.mark.parametrize("fn", ALL, ids=_name)
def test_strided_query(device, fn):
    pool = _pool(device, 3, [12, 40, 2])
    wide = make_decode_query(pool, 4).repeat(1, 1, 2)  # [B, Hq, 2D]
    q = wide[..., : pool.head_dim]  # stride(1) == 2D, stride(-1) == 1
    qt = make_decode_query(pool, 4).transpose(0, 1).contiguous().transpose(0, 1)
    for query in (q, qt):
        assert not query.is_contiguous()
        check_paged_decode(fn, pool, query)


# ---- split-KV -------------------------------------------------------------------------------


@pytest.mark.parametrize("num_splits", [1, 2, 3, 9])
def test_split_kv_forced_split_counts(device, num_splits):
    """More splits than pages leaves empty splits; the combine must give them zero weight."""
    pool = _pool(device, 3, [1, 200, 40], kv_heads=2, num_pages=40)  # 1, 13 and 3 pages
    q = make_decode_query(pool, 8)
    args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    out = SPLIT(*args, num_splits=num_splits)
    ref = paged_decode_ref(*args)
    torch.testing.assert_close(
        out.float(), ref.float(), rtol=pd_op.RTOL["fp16"], atol=pd_op.ATOL["fp16"]
    )


def test_split_kv_default_splits_on_interpreter(device):
    if device != "cpu":
        pytest.skip("the nominal interpreter SM count only applies on CPU")
    pool = _pool(device, 1, 512, kv_heads=2)
    assert (
        pd.choose_num_splits(
            1, 2, pool.block_table.shape[1] * 16, pd._sm_count(torch.device("cpu")), 16
        )
        > 1
    )
    _run(SPLIT, pool, 4)


def test_split_kv_fp8_many_splits(device):
    pool = _pool(device, 2, [200, 90], dtype="fp8", storage="split")
    q = make_decode_query(pool, 4)
    args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    kw = {"k_scale": pool.k_scale, "v_scale": pool.v_scale}
    out = SPLIT(*args, num_splits=5, **kw)
    torch.testing.assert_close(
        out.float(),
        paged_decode_ref(*args, **kw).float(),
        rtol=pd_op.RTOL["fp8"],
        atol=pd_op.ATOL["fp8"],
    )


def test_choose_num_splits_policy():
    # Big batch already fills 132 SMs: no split.
    assert pd.choose_num_splits(64, 8, 8192, 132, 16) == 1
    assert pd.choose_num_splits(17, 8, 8192, 132, 16) == 1
    # Batch 1 long context: ~2 waves of programs.
    s = pd.choose_num_splits(1, 8, 32768, 132, 16)
    assert s * 8 >= 2 * 132 and s == 33
    # Bounded by length: no split shorter than MIN_TOKENS_PER_SPLIT.
    assert pd.choose_num_splits(1, 8, 4096, 132, 16) == 4096 // 128
    assert pd.choose_num_splits(1, 8, 100, 132, 16) == 1
    # Page bigger than the minimum: splits are whole pages.
    assert pd.choose_num_splits(1, 8, 4096, 132, 256) == 16
    # Capped.
    assert pd.choose_num_splits(1, 1, 10**7, 132, 16) == int(pd.SPLIT_POLICY["MAX_SPLITS"])
    # Non-increasing in batch.
    counts = [pd.choose_num_splits(b, 8, 16384, 132, 16) for b in range(1, 40)]
    assert all(a >= b for a, b in itertools.pairwise(counts))


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0, 8, 10, 132, 16), "batch must be an int >= 1"),
        ((1, 8, 10, 0, 16), "sm_count must be an int >= 1"),
        ((1, 8, 10.0, 132, 16), "max_seq_len must be an int >= 1"),
    ],
)
def test_choose_num_splits_bad_args(args, match):
    with pytest.raises(ValueError, match=match):
        pd.choose_num_splits(*args)


# ---- the correctness gate itself detects bugs ----------------------------------------------


@pytest.mark.parametrize("dtype", ["fp16", "fp8"])
def test_query_is_independent_of_pool_data(device, dtype):
    """Same seed for pool and query must not reproduce cached keys (it once did: 12 sigma)."""
    from kvbench.fixtures.quant import dequantize_fp8

    for seed in range(3):
        pool = _pool(device, 2, 256, head_dim=64, dtype=dtype, seed=seed)
        q = make_decode_query(pool, 2, seed=seed).float()  # Hq == Hkv
        k = pool.k_cache
        k = dequantize_fp8(k, pool.k_scale) if dtype == "fp8" else k.float()
        scores = torch.einsum("bhd,phd->bhp", q, k.reshape(-1, 2, 64)) / 8.0
        assert float(scores.abs().max()) < 6.5, "query correlates with cached keys"


def test_check_detects_wrong_head_mapping(device):
    pool = _pool(device, 2, [30, 20])

    def wrong_gqa(q, k, v, bt, sl, **kw):  # query head i -> kv head i % Hkv (wrong)
        hq, hkv = q.shape[1], k.shape[2]
        perm = torch.arange(hq).reshape(hkv, hq // hkv).t().reshape(-1)
        return paged_decode_ref(q[:, perm], k, v, bt, sl, **kw)[:, perm.argsort()]

    with pytest.raises(VerificationError):
        _run(wrong_gqa, pool, 8)


def test_check_detects_unwritten_output(device):
    pool = _pool(device, 4, [30, 20, 9, 1])

    def half_written(q, k, v, bt, sl, **kw):
        out = torch.empty_like(q)
        out[:2] = paged_decode_ref(q[:2], k, v, bt[:2], sl[:2], **kw)
        return out

    with pytest.raises(VerificationError):
        _run(half_written, pool, 4)


def test_check_detects_k_and_v_swapped(device):
    pool = _pool(device, 2, [30, 20])

    def swapped(q, k, v, bt, sl, **kw):
        return SINGLE(q, v, k, bt, sl, **kw)

    with pytest.raises(VerificationError):
        _run(swapped, pool, 4)


# ---- bad input ------------------------------------------------------------------------------


def _inputs(device, dtype="fp16"):
    pool = _pool(device, 2, [20, 7], dtype=dtype)
    q = make_decode_query(pool, 4)
    return pool, q


@pytest.mark.parametrize("fn", ALL, ids=_name)
@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda a: a.update(q=a["q"].float()), "q has dtype torch.float32; accepted"),
        (lambda a: a.update(q=a["q"][0]), r"q must be 3-D \[batch, q_heads, head_dim\]"),
        (lambda a: a.update(k_cache=a["k_cache"].to(torch.bfloat16)), "k_cache has dtype"),
        (lambda a: a.update(v_cache=a["v_cache"][:, :8]), "v_cache must have shape"),
        (
            lambda a: a.update(q=a["q"][:, :3]),
            r"q heads \(3\) must be a multiple of kv heads \(2\)",
        ),
        (
            lambda a: a.update(block_table=a["block_table"].long()),
            "block_table has dtype torch.int64",
        ),
        (lambda a: a.update(block_table=a["block_table"][:1]), "block_table must have shape"),
        (lambda a: a.update(seq_lens=a["seq_lens"].long()), "seq_lens has dtype torch.int64"),
        (lambda a: a.update(seq_lens=a["seq_lens"][:1]), "seq_lens must have shape"),
        (lambda a: a.update(sm_scale=-1.0), "sm_scale must be None or a finite float > 0"),
        (lambda a: a.update(k_scale=1.0), "k_scale is only accepted with fp8"),
        (lambda a: a.update(q=a["q"].to("meta")), "all inputs must be on one device"),
        (
            lambda a: a.update(seq_lens=a["seq_lens"] + 1000),
            r"seq_lens must lie in \[0, block_table.shape\[1\] \* page_size",
        ),
        (
            lambda a: a["block_table"].__setitem__((0, 0), 10**6),
            "block_table entries used by seq_lens must lie in",
        ),
    ],
)
def test_bad_input_raises(device, fn, mutate, match):
    pool, q = _inputs(device)
    if device != "cpu" and "lie in" in match:
        pytest.skip("value checks need a host sync: on CUDA they are opt-in")
    a = {
        "q": q,
        "k_cache": pool.k_cache,
        "v_cache": pool.v_cache,
        "block_table": pool.block_table.clone(),
        "seq_lens": pool.seq_lens,
    }
    kw = {}
    mutate(a)
    for key in ("sm_scale", "k_scale", "v_scale"):
        if key in a:
            kw[key] = a.pop(key)
    with pytest.raises(ValueError, match=match):
        fn(a["q"], a["k_cache"], a["v_cache"], a["block_table"], a["seq_lens"], **kw)


def test_bad_head_dim_and_fp8_scales(device):
    pool = _pool(device, 1, 8, head_dim=272)
    q = make_decode_query(pool, 2)
    with pytest.raises(ValueError, match=r"head_dim must be in \[16, 256\] for the triton"):
        SINGLE(q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    pool, q = _inputs(device, "fp8")
    args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    with pytest.raises(ValueError, match="k_scale must be a python float or a 1-element"):
        SINGLE(*args)
    with pytest.raises(ValueError, match="v_scale must be a 1-element float32 tensor"):
        SINGLE(*args, k_scale=pool.k_scale, v_scale=pool.v_scale.double())
    with pytest.raises(ValueError, match="both be tensors or both be python floats"):
        SINGLE(*args, k_scale=pool.k_scale, v_scale=1.0)


def test_split_bad_num_splits(device):
    pool, q = _inputs(device)
    for bad in (0, 2.0, True, 10**5):
        with pytest.raises(ValueError, match=r"num_splits must be None or an int in \[1, 4096\]"):
            SPLIT(q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens, num_splits=bad)


def test_triton_rows_refuse_cpu_without_interpreter(monkeypatch):
    pool, q = _inputs("cpu")
    monkeypatch.setattr(pd, "_INTERPRET", False)
    with pytest.raises(ValueError, match="Triton kernels need a CUDA device"):
        SINGLE(q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    # The torch row runs anywhere.
    SDPA(q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)


# ---- compiled path (no GPU needed): the interpreter skips type checks, layouts and spills ----

_COMPILE_SCRIPT = textwrap.dedent(
    """
    import collections, os, re, subprocess, sys, tempfile
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from kvbench.kernels import paged_decode as pd

    target = GPUTarget("cuda", 90, 32)  # H200 = sm_90
    cuobjdump = sys.argv[1]
    kern = pd._decode_kernel
    names = kern.arg_names
    aligned = {"stride_qb", "stride_qh", "stride_kp", "stride_ks", "stride_kh",
               "stride_vp", "stride_vs", "stride_vh", "stride_vd"}

    def compile_one(qdt, kvdt, split, v_dim_major=False, head_dim=128):
        fp8 = kvdt == "u8"
        cfg = pd.launch_config(split, fp8, triton.next_power_of_2(head_dim))
        part = "*fp32" if split else f"*{qdt}"
        sig = {n: "i32" for n in names}
        sig.update({"q_ptr": f"*{qdt}", "k_ptr": f"*{kvdt}", "v_ptr": f"*{kvdt}",
                    "bt_ptr": "*i32", "seq_lens_ptr": "*i32", "out_ptr": f"*{qdt}",
                    "part_o_ptr": part, "part_lse_ptr": part, "k_scale": "*fp32",
                    "v_scale": "*fp32", "qk_scale": "fp32", "cap_out": "fp32",
                    "stride_kp": "i64"})
        const = {"GROUP": 4, "GROUP_PAD": 16, "HEAD_DIM": head_dim,
                 "BLOCK_D": triton.next_power_of_2(head_dim), "PAGE_SIZE": 16,
                 "BLOCK_N": cfg["BLOCK_N"], "FP8": fp8, "SCALE_PTR": True, "SPLIT": split,
                 "DOT_F32": False, "PDL": split, "V_DMAJOR": v_dim_major,
                 "BT_AHEAD": cfg["bt_ahead"], "V_PAGE_ROWS": v_dim_major,  # page 16 < BLOCK_N
                 "WINDOW": False, "SOFTCAP": False}  # the options off: the kernels engines run
        # A launch specializes a stride of 1 as a constant: V's last dim, or its slots.
        const["stride_vs" if v_dim_major else "stride_vd"] = 1
        for k in const:
            sig[k] = "constexpr"
        # What a real launch specializes: 16-byte aligned pointers and strides.
        attrs = {(names.index(n),): [["tt.divisibility", 16]]
                 for n in names if sig[n].startswith("*") or n in aligned}
        src = ASTSource(fn=kern, signature=sig, constexprs=const, attrs=attrs)
        opts = {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}
        if "maxnreg" in cfg:
            opts["maxnreg"] = cfg["maxnreg"]
        return triton.compile(src, target=target, options=opts), cfg.get("maxnreg")

    # fp16 single pass; fp8 bytes with fp16 q (single pass) and bf16 q (split epilogue).
    # Float-convert counts: PTX cvt with a float type (not the integer/address cvts) and SASS
    # F2F / F2FP (conversion-unit instructions). Then V dim-major pages (storage
    # "v_dim_major"): fp16, and fp8 with fp16 and bf16 q. Last, padded tiles (head_dim 96 in
    # a 128-lane tile): fp16 split, fp8 dim-major single pass.
    cases = [("fp16", "fp16", False, False, 128), ("fp16", "u8", False, False, 128),
             ("bf16", "u8", True, False, 128), ("fp16", "fp16", False, True, 128),
             ("fp16", "u8", False, True, 128), ("bf16", "u8", True, True, 128),
             ("fp16", "fp16", True, False, 96), ("fp16", "u8", False, True, 96),
             ("fp16", "fp16", False, False, 256), ("fp16", "fp16", True, False, 256),
             ("bf16", "u8", True, False, 192), ("fp16", "u8", False, True, 256)]
    for qdt, kvdt, split, vdm, head_dim in cases:
        k, cap = compile_one(qdt, kvdt, split, vdm, head_dim)
        ptx = k.asm["ptx"]
        assert "cp.async" in ptx or "cp.async.bulk" in ptx, "KV loads not async"
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(k.asm["cubin"]); f.flush()
            usage = subprocess.run([cuobjdump, "--dump-resource-usage", f.name],
                                   capture_output=True, text=True, check=True).stdout
            sass = subprocess.run([cuobjdump, "-sass", f.name],
                                  capture_output=True, text=True, check=True).stdout
        line = next(l for l in usage.splitlines() if "REG:" in l)
        fcvt = collections.Counter(re.findall(r"\\bcvt\\.[\\w.]*(?:e4m3|f16|bf16|f32)[\\w.]*", ptx))
        ops = collections.Counter(re.findall(r"^\\s+/\\*[0-9a-f]{4}\\*/\\s+"
                                             r"(?:@!?U?P\\w+\\s+)?([A-Z0-9]+)",
                                             sass, re.M))
        print(f"{qdt} kv={kvdt} split={split} v_dim_major={vdm} d={head_dim} {line.strip()} "
              f"shared {k.metadata.shared}")
        # At least two programs per SM (an sm_90 SM has 228 KiB, 1 KiB of it reserved per
        # program): a wider tile at the swept BLOCK_N would leave one (pd.SWEPT_BLOCK_D).
        assert k.metadata.shared <= (228 * 1024) // 2 - 1024, k.metadata.shared
        print(f"  ptx float cvt: {dict(fcvt)}")
        # How dot operands leave shared memory: ldmatrix (16-bit tiles, .trans for V) versus
        # scalar byte loads (ld.shared.b8: fp8 V gathered into the mma B-operand layout).
        smem = collections.Counter(re.findall(r"\\b(ldmatrix[\\w.]*|ld\\.shared\\.b8)\\b", ptx))
        print(f"  ptx smem operand loads: {dict(smem)}")
        print("  sass: " + " ".join(f"{op}={ops[op]}" for op in
              ("F2F", "F2FP", "PRMT", "LOP3", "IMAD", "SHF", "HMMA"))
              + f" total={sum(ops.values())}")
        if vdm:
            # The point of dim-major V: vector cp.async of whole pages, no byte reads of V.
            assert "ld.shared.b8" not in ptx and "ld.global.b8" not in ptx, dict(smem)
        if cap is None:
            assert "STACK:0 " in line, f"register spills: {line}"
        else:  # a capped config trades spills for occupancy (CONFIG comment): hold the cap
            assert int(re.search(r"REG:(\\d+)", line).group(1)) <= cap, line
        widen = sum(n for c, n in fcvt.items() if "e4m3" in c or c.startswith("cvt.bf16.f16"))
        if kvdt == "u8":
            # fp8 bytes are widened by float converts (else this count measures nothing).
            assert widen > 0, dict(fcvt)
    rsig = {"part_o_ptr": "*fp32", "part_lse_ptr": "*fp32", "out_ptr": "*fp16",
            "num_splits": "i32", "HEAD_DIM": "constexpr", "BLOCK_D": "constexpr",
            "SPLIT_BLOCK": "constexpr", "PDL": "constexpr"}
    for head_dim in (128, 96):
        rconst = {"HEAD_DIM": head_dim, "BLOCK_D": triton.next_power_of_2(head_dim),
                  "SPLIT_BLOCK": pd.CONFIG["reduce"]["SPLIT_BLOCK"], "PDL": True}
        triton.compile(ASTSource(fn=pd._reduce_kernel, signature=rsig, constexprs=rconst),
                       target=target, options={"num_warps": pd.CONFIG["reduce"]["num_warps"]})
    print("ok")
    """
)


def test_kernels_compile_for_sm90_without_spills(sm90_compile):
    """Registers and per-path conversion counts of every decode path compiled for sm_90.

    By this machine's triton, not necessarily the device's: an older triton there was seen
    to give the fp16 single-pass kernel about 40% more registers than it compiles to here with
    triton 3.9 (docs/decisions.md, "fp8 dim-major V pages"), so occupancy read off these figures is
    a hint, and the device's profile is the measurement."""
    sm90_compile(_COMPILE_SCRIPT)


# ---- GPU: decode geometry ---------------------------------------------------------------------

_GPU = {"kv_heads": 8, "head_dim": 128, "page_size": 16}


@pytest.mark.gpu
@pytest.mark.parametrize("fn", ALL, ids=_name)
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp8"])
@pytest.mark.parametrize(("batch", "context"), [(16, 4096), (8, 8192)])
def test_gpu_full_size(fn, dtype, batch, context):
    pool = paged_pool(batch, context, dtype=dtype, device="cuda", **_GPU)
    try:
        q = make_decode_query(pool, 32)
        check_paged_decode(fn, pool, q)
    finally:
        pool.free()


@pytest.mark.gpu
@pytest.mark.parametrize("fn", TRITON, ids=_name)
@pytest.mark.parametrize("dtype", ["fp16", "fp8"])
def test_gpu_batch64_8k(fn, dtype):
    pool = paged_pool(64, 8192, dtype=dtype, device="cuda", **_GPU)
    try:
        check_paged_decode(fn, pool, make_decode_query(pool, 32))
    finally:
        pool.free()


@pytest.mark.gpu
@pytest.mark.parametrize("fn", ALL, ids=_name)
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp8"])
def test_gpu_batch1_long_context(fn, dtype):
    pool = paged_pool(1, 32768, dtype=dtype, device="cuda", **_GPU)
    try:
        check_paged_decode(fn, pool, make_decode_query(pool, 32))
    finally:
        pool.free()


@pytest.mark.gpu
@pytest.mark.parametrize("fn", ALL, ids=_name)
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp8"])
def test_gpu_ragged_and_small_geometry(fn, dtype):
    lens = [1, 15, 16, 17, 1000, 4097, 8191, 300]
    pool = paged_pool(8, lens, dtype=dtype, device="cuda", **_GPU)
    try:
        check_paged_decode(fn, pool, make_decode_query(pool, 32))
    finally:
        pool.free()
    # MQA, 64-dim heads, Hq == Hkv: the geometries where the combined buffer's stride matters.
    for kv, hq in ((1, 8), (4, 4)):
        pool = paged_pool(
            4, [2048, 33, 700, 1], kv_heads=kv, head_dim=64, dtype=dtype, device="cuda"
        )
        try:
            check_paged_decode(fn, pool, make_decode_query(pool, hq))
        finally:
            pool.free()


@pytest.mark.gpu
def test_gpu_split_policy_on_this_device():
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert pd.choose_num_splits(64, 8, 8192, sms, 16) == 1
    assert pd.choose_num_splits(1, 8, 32768, sms, 16) * 8 >= 2 * sms
    pool = paged_pool(1, 32768, device="cuda", **_GPU)
    q = make_decode_query(pool, 32)
    args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    forced = SPLIT(*args, num_splits=pd.choose_num_splits(1, 8, 32768, sms, 16))
    torch.testing.assert_close(SPLIT(*args), forced, rtol=0, atol=0)
    pool.free()
