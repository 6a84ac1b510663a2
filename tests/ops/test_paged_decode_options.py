"""Decode options: sliding window, logit soft-cap, fp8 scales per kv head, in the Triton rows,
the torch row and the fp64 reference; bad values refused by name; a row without an option
refuses it instead of ignoring it. CPU through the interpreter at small shapes."""

from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kvbench.fixtures.pool import paged_pool
from kvbench.kernels import paged_decode as pd
from kvbench.kernels import paged_decode_cluster as pdc
from kvbench.ops.paged_decode import check_paged_decode, make_decode_query, paged_decode_ref

SPLIT3 = functools.partial(pd.paged_decode_split_kv, num_splits=3)
SPLIT3.__name__ = "paged_decode_split_kv[3 splits]"
ROWS = (pd.paged_decode_single_pass, SPLIT3, pd.paged_decode_gather_sdpa)


@pytest.fixture
def short_tiles(monkeypatch):
    """BLOCK_N 32: several tiles per sequence at interpreter-sized lengths."""
    for key in ("single_pass", "single_pass_fp8", "split_kv", "split_kv_fp8"):
        monkeypatch.setitem(pd.CONFIG, key, {**pd.CONFIG[key], "BLOCK_N": 32})


def _pool(device, dtype, storage, lens=(75, 9)):
    return paged_pool(len(lens), list(lens), kv_heads=2, head_dim=32, page_size=8, dtype=dtype,
                      storage=storage, min_l2_multiple=0, device=device, seed=0)


@pytest.mark.parametrize(("dtype", "storage", "options"), [
    ("fp16", "combined", {"window": 40}),  # window start inside a tile, past a page start
    ("fp8", "v_dim_major", {"window": 1}),
    ("bf16", "v_dim_major", {"window": 100}),  # longer than every sequence: all tokens
    ("fp16", "v_dim_major", {"softcap": 2.0}),  # a cap the scores reach: tanh far from linear
    ("fp8", "combined", {"softcap": 30.0, "window": 33}),
])
def test_options_every_row(device, short_tiles, dtype, storage, options):
    pool = _pool(device, dtype, storage)
    q = make_decode_query(pool, 4, seed=1)
    if "softcap" in options:
        q = q * 4  # larger scores, so the cap bends them
    for fn in ROWS:
        assert check_paged_decode(fn, pool, q, **options) >= 0.0


@pytest.mark.parametrize("softcap", [1e3, 1e5, 1e7])
def test_a_cap_far_above_the_scores_is_exact(device, short_tiles, softcap):
    """A cap far above the scores leaves them almost unchanged; the Triton rows computed
    tanh(x / cap) as 1 - 2 / (e^(2x / cap) + 1), which cancels there, and their error (fp32's
    epsilon times the cap) failed the gate from a cap of 1e5."""
    pool = _pool(device, "fp16", "combined")
    q = make_decode_query(pool, 4, seed=1) * 4
    for fn in ROWS:
        assert check_paged_decode(fn, pool, q, softcap=softcap) >= 0.0


def test_window_never_weighs_tokens_before_it(device, short_tiles):
    """Every K/V slot before each sequence's window holds NaN: a token weighed, or a V row not
    zeroed, makes the output NaN."""
    pool = _pool(device, "fp16", "v_dim_major")
    window = 20
    for b, n in enumerate(pool.seq_lens_list):
        for t in range(max(0, n - window)):
            page, slot = int(pool.block_table[b, t // 8]), t % 8
            for cache in (pool.k_cache, pool.v_cache):
                cache[page, slot] = float("nan")
    q = make_decode_query(pool, 4, seed=1)
    for fn in ROWS:
        assert check_paged_decode(fn, pool, q, window=window) >= 0.0


def test_options_change_the_output(device):
    """The checks compare against a reference that applies the options: a row ignoring one
    would fail them (the outputs differ well beyond the tolerances)."""
    pool = _pool(device, "fp16", "combined")
    q = make_decode_query(pool, 4, seed=1) * 4
    args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    plain = pd.paged_decode_gather_sdpa(*args).float()
    for kw in ({"window": 10}, {"softcap": 1.0}):
        assert (pd.paged_decode_gather_sdpa(*args, **kw).float() - plain).abs().max() > 0.05


def test_fp8_scales_per_kv_head(device, short_tiles):
    pool = _pool(device, "fp8", "v_dim_major")
    pool.k_scale = torch.tensor([0.5, 2.0], device=device) * pool.k_scale
    pool.v_scale = torch.tensor([3.0, 0.25], device=device) * pool.v_scale
    q = make_decode_query(pool, 4, seed=1)
    for fn in ROWS:
        assert check_paged_decode(fn, pool, q) >= 0.0


# ---- properties: any option values against the fp64 reference --------------------------------

#: Interpreted Triton is slow: few examples, no deadline, derandomized (a failure reproduces).
#: short_tiles is the same for every example (function_scoped_fixture is safe here).
_INTERPRETED = settings(max_examples=12, deadline=None, derandomize=True, database=None,
                        suppress_health_check=[HealthCheck.too_slow,
                                               HealthCheck.function_scoped_fixture])
#: The reference alone is fast: more examples.
_REFERENCE = settings(max_examples=30, deadline=None, derandomize=True, database=None)

_LENS = st.lists(st.integers(1, 70), min_size=1, max_size=2)
#: None, or a window shorter than a page, inside a tile, or longer than every sequence.
_WINDOWS = st.none() | st.integers(1, 80)
#: None, or a cap the unit-variance scores reach (small caps) or barely (large ones).
_SOFTCAPS = st.none() | st.floats(0.5, 64.0)


@_INTERPRETED
@given(lens=_LENS, window=_WINDOWS, softcap=_SOFTCAPS, gain=st.sampled_from([1.0, 6.0]),
       kv_heads=st.integers(1, 2), group=st.integers(1, 4), head_dim=st.sampled_from([32, 40]),
       page_size=st.sampled_from([1, 8, 16, 64]), dtype=st.sampled_from(["fp16", "bf16"]),
       storage=st.sampled_from(["combined", "v_dim_major"]), fn=st.sampled_from(ROWS))
def test_window_and_softcap_property(short_tiles, lens, window, softcap, gain, kv_heads, group,
                                     head_dim, page_size, dtype, storage, fn):
    """Any window and soft-cap, at any page size, GQA ratio and V layout, through every row
    that implements them: the op's gate against the fp64 reference. `gain` scales q so the
    cap bends the scores (6: scores of a few units) or not. At least 64 output elements: the
    gate's systematic-error criterion reads a few same-signed one-ulp roundings of a tiny
    output (16 elements) as a scale error, whatever the row."""
    assume(len(lens) * kv_heads * group * head_dim >= 64)
    pool = paged_pool(len(lens), lens, kv_heads=kv_heads, head_dim=head_dim,
                      page_size=page_size, dtype=dtype, storage=storage, min_l2_multiple=0,
                      device="cpu", seed=page_size)
    q = make_decode_query(pool, kv_heads * group, seed=2) * gain
    assert check_paged_decode(fn, pool, q, window=window, softcap=softcap) >= 0.0


@_INTERPRETED
@given(lens=_LENS, window=_WINDOWS, softcap=_SOFTCAPS,
       k_gains=st.lists(st.floats(0.125, 8.0), min_size=2, max_size=2),
       v_gains=st.lists(st.floats(0.125, 8.0), min_size=2, max_size=2),
       storage=st.sampled_from(["combined", "v_dim_major"]), fn=st.sampled_from(ROWS))
def test_fp8_per_head_scales_property(short_tiles, lens, window, softcap, k_gains, v_gains,
                                      storage, fn):
    """fp8 caches with a K and a V scale per kv head (any ratio between the heads), with or
    without the other options: the op's gate against the reference of the same bytes."""
    pool = paged_pool(len(lens), lens, kv_heads=2, head_dim=32, page_size=8, dtype="fp8",
                      storage=storage, min_l2_multiple=0, device="cpu", seed=1)
    pool.k_scale = torch.tensor(k_gains, dtype=torch.float32) * pool.k_scale
    pool.v_scale = torch.tensor(v_gains, dtype=torch.float32) * pool.v_scale
    q = make_decode_query(pool, 6, seed=2)
    assert check_paged_decode(fn, pool, q, window=window, softcap=softcap) >= 0.0


def _ref(pool, q, **kw):
    return paged_decode_ref(q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens,
                            k_scale=pool.k_scale, v_scale=pool.v_scale, **kw)


@_REFERENCE
@given(lens=_LENS, window=st.integers(1, 80), group=st.integers(1, 3))
def test_reference_window_is_the_last_window_tokens(lens, window, group):
    """The reference's window, read independently: with one-token pages, dropping a
    sequence's tokens before the window is dropping its first block-table entries; the
    windowed reference equals the reference of that cut table."""
    pool = paged_pool(len(lens), lens, kv_heads=1, head_dim=16, page_size=1,
                      min_l2_multiple=0, device="cpu", seed=window)
    q = make_decode_query(pool, group, seed=3) * 4
    table = pool.block_table.clone()
    cut_lens = []
    for b, n in enumerate(lens):
        first = max(0, n - window)
        table[b, : n - first] = pool.block_table[b, first:n]
        cut_lens.append(n - first)
    cut = paged_decode_ref(q, pool.k_cache, pool.v_cache, table,
                           torch.tensor(cut_lens, dtype=torch.int32))
    torch.testing.assert_close(_ref(pool, q, window=window), cut, rtol=0, atol=0)


@_REFERENCE
@given(scale=st.floats(0.01, 4.0), softcap=_SOFTCAPS)
def test_reference_per_head_scales_equal_the_scalar_when_equal(scale, softcap):
    """A [kv_heads] scale tensor whose entries are all s gives the reference of the scalar s;
    entries that differ give another output (the heads are scaled apart)."""
    pool = paged_pool(2, [30, 9], kv_heads=2, head_dim=16, page_size=8, dtype="fp8",
                      min_l2_multiple=0, device="cpu", seed=0)
    q = make_decode_query(pool, 4, seed=1)
    s = torch.tensor(scale, dtype=torch.float32)
    pool.k_scale = pool.v_scale = s
    scalar = _ref(pool, q, softcap=softcap)
    pool.k_scale = pool.v_scale = s.repeat(2)
    torch.testing.assert_close(_ref(pool, q, softcap=softcap), scalar, rtol=0, atol=0)
    pool.v_scale = torch.stack([s, 2 * s])
    apart = _ref(pool, q, softcap=softcap)
    assert torch.equal(apart[:, :2], scalar[:, :2]) and not torch.equal(apart[:, 2:],
                                                                        scalar[:, 2:])


@pytest.mark.parametrize(("kw", "match"), [
    ({"window": 0}, r"window must be None or an int >= 1"),
    ({"window": 2.5}, r"window must be None or an int >= 1"),
    ({"softcap": 0.0}, r"softcap must be None or a finite float > 0"),
    ({"softcap": float("nan")}, r"softcap must be None or a finite float > 0"),
    ({"window": 2**64}, r"window must be None or an int >= 1 and <= 2147483647"),
    ({"k_scale": torch.ones(3), "v_scale": torch.ones(3)},
     r"k_scale must be a 1-element float32 tensor or a contiguous \[kv_heads=2\]"),
    # one scale per tensor beside one per head: the kernels read both with one stride
    ({"k_scale": torch.ones(1), "v_scale": torch.ones(2)},
     r"k_scale and v_scale must have the same shape: .* got k_scale \(1,\) and v_scale \(2,\)"),
    ({"k_scale": torch.ones(2), "v_scale": torch.ones(1)},
     r"k_scale and v_scale must have the same shape"),
])
def test_bad_option_values_are_refused_by_name(kw, match):
    pool = _pool("cpu", "fp8" if "k_scale" in kw else "fp16", "combined")
    q = make_decode_query(pool, 4)
    kw = {"k_scale": pool.k_scale, "v_scale": pool.v_scale, **kw} if pool.k_scale is not None \
        else kw
    for fn in ROWS:
        with pytest.raises(ValueError, match=match):
            fn(q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens, **kw)


@pytest.mark.parametrize("kw", [{"window": 8}, {"softcap": 5.0}])
def test_cluster_row_refuses_options_it_does_not_implement(kw):
    pool = paged_pool(1, 20, kv_heads=1, head_dim=128, page_size=16, min_l2_multiple=0,
                      device="cpu", seed=0)
    q = make_decode_query(pool, 2)
    with pytest.raises(ValueError, match=f"does not implement {next(iter(kw))}"):
        pdc.paged_decode_cluster(q, pool.k_cache, pool.v_cache, pool.block_table,
                                 pool.seq_lens, **kw)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp8"])
@pytest.mark.parametrize("options", [{"window": 4096}, {"softcap": 50.0},
                                     {"softcap": 30.0, "window": 1000}])
def test_gpu_options_full_size(dtype, options):
    """Gemma-2-like geometry (head_dim 256, 16 q / 8 kv heads), ragged contexts to 8k."""
    pool = paged_pool(8, [8192, 4097, 1, 300, 2048, 777, 16, 5000], kv_heads=8, head_dim=256,
                      page_size=16, dtype=dtype, storage="combined", device="cuda", seed=0)
    try:
        q = make_decode_query(pool, 16, seed=1)
        for fn in (pd.paged_decode_single_pass, pd.paged_decode_split_kv,
                   pd.paged_decode_gather_sdpa):
            check_paged_decode(fn, pool, q, **options)
    finally:
        pool.free()


@pytest.mark.gpu
@pytest.mark.parametrize("options", [{}, {"window": 1000}, {"softcap": 30.0}])
def test_gpu_auto_serves_options_with_a_row_that_implements_them(options):
    """At the cluster row's own geometry (head_dim 128, 4 q heads per kv head, fp16), auto
    with an option selects a row that implements it and matches the reference; without one it
    may take any row."""
    from kvbench.api import last_selection, paged_decode

    pool = paged_pool(4, [4096, 1000, 17, 2048], kv_heads=8, head_dim=128, page_size=16,
                      dtype="fp16", storage="combined", device="cuda", seed=0)
    try:
        q = make_decode_query(pool, 32, seed=1)
        check_paged_decode(paged_decode, pool, q, **options)
        if options:
            assert last_selection("paged_decode").spec.name != "cuda/cluster_decode"
    finally:
        pool.free()
