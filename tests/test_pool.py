"""kvbench.fixtures.pool: the paged KV fixture has the properties its docstring claims."""

import itertools

import pytest
import torch

from kvbench.fixtures import pool as pool_mod
from kvbench.fixtures.pool import paged_pool

SMALL = {"kv_heads": 2, "head_dim": 16, "page_size": 4, "min_l2_multiple": 0, "device": "cpu"}


def _used_pages(p) -> list[list[int]]:
    table = p.block_table.tolist()
    return [row[: -(-n // p.page_size)] for row, n in zip(table, p.seq_lens_list, strict=True)]


def test_fragmented_pages_are_disjoint_in_range_and_scattered():
    p = paged_pool(8, 40, num_pages=400, **SMALL)
    rows = _used_pages(p)
    flat = [pg for row in rows for pg in row]
    assert len(flat) == 8 * 10 and len(set(flat)) == len(flat), "pages shared between sequences"
    assert all(0 <= pg < p.num_pages for pg in flat)
    steps = sum(b - a == 1 for row in rows for a, b in itertools.pairwise(row))
    assert steps < 10, f"{steps} of 72 page steps are consecutive: not fragmented"
    assert max(flat) > p.num_pages // 2, "pages should spread over the whole pool"


def test_fragmented_table_is_seeded():
    a = paged_pool(4, 33, seed=3, **SMALL).block_table
    b = paged_pool(4, 33, seed=3, **SMALL).block_table
    c = paged_pool(4, 33, seed=4, **SMALL).block_table
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_contiguous_layout_is_consecutive():
    p = paged_pool(3, [5, 12, 1], layout="contiguous", num_pages=50, **SMALL)
    rows = _used_pages(p)
    assert rows == [[0, 1], [2, 3, 4], [5]]


def test_unused_entries_are_page_zero_and_shapes():
    p = paged_pool(3, [1, 9, 4], num_pages=20, **SMALL)
    assert p.block_table.dtype == torch.int32 and p.block_table.shape == (3, 3)
    assert p.seq_lens.dtype == torch.int32 and p.seq_lens.tolist() == [1, 9, 4]
    assert p.block_table[0, 1:].tolist() == [0, 0] and p.block_table[2, 1:].tolist() == [0, 0]
    assert p.k_cache.shape == (20, 4, 2, 16) and p.num_seqs == 3


def test_combined_storage_is_one_buffer_with_strided_views():
    p = paged_pool(2, 8, num_pages=10, **SMALL)
    assert p.storage == "combined" and p.buffer.shape == (10, 2, 4, 2, 16)
    assert p.k_cache.untyped_storage().data_ptr() == p.v_cache.untyped_storage().data_ptr()
    row = 4 * 2 * 16
    assert p.k_cache.stride() == (2 * row, 2 * 16, 16, 1) == p.v_cache.stride()
    assert p.v_cache.data_ptr() - p.k_cache.data_ptr() == row * p.k_cache.element_size()
    assert not p.k_cache.is_contiguous()
    p.buffer[3, 1, 2, 1, 5] = 7.0  # V half of page 3
    assert float(p.v_cache[3, 2, 1, 5]) == 7.0 and float(p.k_cache[3, 2, 1, 5]) != 7.0


def test_head_major_storage_puts_one_page_of_one_head_together():
    p = paged_pool(2, 8, storage="head_major", num_pages=10, **SMALL)
    assert p.buffer.shape == (10, 2, 2, 4, 16)  # [pages, K/V, kv_heads, page_size, head_dim]
    assert p.k_cache.shape == (10, 4, 2, 16) == p.v_cache.shape
    assert p.k_cache.stride() == (2 * 2 * 4 * 16, 16, 4 * 16, 1)
    p.buffer[3, 1, 1, 2, 5] = 7.0  # V, page 3, head 1, slot 2
    assert float(p.v_cache[3, 2, 1, 5]) == 7.0 and float(p.k_cache[3, 2, 1, 5]) != 7.0


def test_v_dim_major_storage_keeps_k_token_major_and_lays_v_pages_out_by_dim():
    p = paged_pool(2, 8, storage="v_dim_major", num_pages=10, **SMALL)
    half = 4 * 2 * 16  # page_size x kv_heads x head_dim
    assert p.buffer.shape == (10, 2, half)
    assert p.k_cache.shape == (10, 4, 2, 16) == p.v_cache.shape
    assert p.k_cache.stride() == (2 * half, 2 * 16, 16, 1)  # as in combined storage
    assert p.v_cache.stride() == (2 * half, 1, 16 * 4, 4)  # [kv_heads, head_dim, page_size]
    p.buffer[3, 1, 1 * 16 * 4 + 5 * 4 + 2] = 7.0  # V, page 3, head 1, dim 5, slot 2
    assert float(p.v_cache[3, 2, 1, 5]) == 7.0 and float(p.k_cache[3, 2, 1, 5]) != 7.0


def test_split_storage_is_two_contiguous_tensors():
    p = paged_pool(2, 8, storage="split", num_pages=10, **SMALL)
    assert p.buffer is None
    assert p.k_cache.is_contiguous() and p.v_cache.is_contiguous()
    assert p.k_cache.untyped_storage().data_ptr() != p.v_cache.untyped_storage().data_ptr()


@pytest.mark.parametrize(
    ("dtype", "name", "storage_dtype"),
    [
        (torch.float16, "fp16", torch.float16),
        ("bf16", "bf16", torch.bfloat16),
        (torch.bfloat16, "bf16", torch.bfloat16),
        ("fp8", "fp8", torch.uint8),
        (torch.float8_e4m3fn, "fp8", torch.uint8),
    ],
)
def test_dtypes_and_random_fill(dtype, name, storage_dtype):
    p = paged_pool(2, 30, dtype=dtype, num_pages=32, **SMALL)
    assert p.kv_dtype_name == name and p.k_cache.dtype == storage_dtype
    if name == "fp8":
        assert p.k_scale.dtype == torch.float32 and p.k_scale.dim() == 0
        assert p.v_scale.dtype == torch.float32
        for cache in (p.k_cache, p.v_cache):
            assert ((cache & 0x7F) != 0x7F).all(), "NaN code in an fp8 pool"
        k = p.k_cache.view(torch.float8_e4m3fn).float() * p.k_scale
        assert float(p.k_cache.view(torch.float8_e4m3fn).float().abs().max()) == 448.0
    else:
        assert p.k_scale is None and p.v_scale is None
        k = p.k_cache.float()
    assert 0.8 < float(k.std()) < 1.2, "K should hold standard-normal data"
    assert not torch.equal(p.k_cache, p.v_cache)
    assert p.nbytes == 32 * 2 * 4 * 2 * 16 * (1 if name == "fp8" else 2)
    assert p.bytes_per_token == 2 * 2 * 16 * (1 if name == "fp8" else 2)
    assert p.attended_bytes == 60 * p.bytes_per_token


def test_capacity_defaults_to_what_sequences_need_on_cpu():
    p = paged_pool(3, [1, 9, 4], **SMALL)
    assert p.num_pages == 1 + 3 + 1


def test_capacity_floor_from_l2(monkeypatch):
    monkeypatch.setattr(pool_mod, "_l2_bytes", lambda dev, mult: 1 << 20)  # a 1 MiB "L2"
    kw = {**SMALL, "min_l2_multiple": 2}
    page_bytes = 2 * 4 * 2 * 16 * 2
    p = paged_pool(2, 8, **kw)
    assert p.num_pages == (2 << 20) // page_bytes and p.nbytes >= 2 << 20
    with pytest.raises(ValueError, match="lower min_l2_multiple explicitly"):
        paged_pool(2, 8, num_pages=100, **kw)
    big = paged_pool(2, 8, num_pages=5000, **kw)
    assert big.num_pages == 5000
    # Sequences alone bigger than the floor: the pool is that big.
    huge = paged_pool(1, 4 * 9000, **kw)
    assert huge.num_pages == 9000


def test_cpu_requires_explicit_zero_l2_multiple():
    with pytest.raises(ValueError, match="min_l2_multiple=0"):
        paged_pool(1, 4, device="cpu")


def test_num_pages_below_need_is_rejected():
    with pytest.raises(ValueError, match="need 5 pages"):
        paged_pool(3, [1, 9, 4], num_pages=4, **SMALL)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"layout": "random"}, "layout='random' is not accepted; accepted: .*fragmented"),
        ({"storage": "packed"}, "storage='packed' is not accepted; accepted: .*combined"),
        ({"dtype": torch.float32}, "dtype=torch.float32 is not accepted; accepted: .*fp8"),
        ({"dtype": "int8"}, "dtype='int8' is not accepted"),
        ({"min_l2_multiple": -1}, "min_l2_multiple must be a finite number >= 0"),
        ({"kv_heads": 0}, "kv_heads must be an int >= 1"),
        ({"page_size": 2.0}, "page_size must be an int >= 1"),
        ({"num_pages": 0}, "num_pages must be an int >= 1"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        paged_pool(2, 8, **{**SMALL, **kwargs})


@pytest.mark.parametrize(
    ("num_seqs", "seq_len", "match"),
    [
        (0, 4, "num_seqs must be an int >= 1"),
        (2, [4], "seq_len has 1 entries but num_seqs=2"),
        (2, [4, 0], "seq_len entries must be ints >= 1"),
        (1, "4", "seq_len must be an int or a sequence"),
    ],
)
def test_bad_sequences(num_seqs, seq_len, match):
    with pytest.raises(ValueError, match=match):
        paged_pool(num_seqs, seq_len, **SMALL)


def test_fill_is_seeded():
    a = paged_pool(2, 8, seed=5, **SMALL)
    b = paged_pool(2, 8, seed=5, **SMALL)
    c = paged_pool(2, 8, seed=6, **SMALL)
    assert torch.equal(a.buffer, b.buffer) and not torch.equal(a.buffer, c.buffer)


def test_free_drops_tensors():
    p = paged_pool(2, 8, dtype="fp8", **SMALL)
    p.free()
    assert p.k_cache is None and p.v_cache is None and p.buffer is None
    assert p.block_table is None and p.seq_lens is None and p.k_scale is None


@pytest.mark.gpu
def test_gpu_pool_is_at_least_8x_l2_and_builds_fast():
    import time

    dev = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    paged_pool(2, 64, device=dev).free()  # warm the generator / allocator
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    p = paged_pool(8, 4096, device=dev)
    torch.cuda.synchronize()
    took = time.perf_counter() - t0
    assert p.nbytes >= 8 * l2
    assert took < 1.0, f"a {p.nbytes / 2**20:.0f} MiB pool took {took:.2f} s to build"
    assert p.k_cache.is_cuda and p.block_table.is_cuda and p.seq_lens.is_cuda
    p.free()
    q = paged_pool(4, 1024, dtype="fp8", device=dev)
    assert q.nbytes >= 8 * l2 and q.k_scale.is_cuda
    assert ((q.k_cache & 0x7F) != 0x7F).all()
    q.free()


def test_derive_seed_streams_are_distinct_and_stable():
    seeds = {pool_mod.derive_seed(s, t) for s in range(4) for t in range(4)}
    assert len(seeds) == 16
    assert pool_mod.derive_seed(7, 2) == pool_mod.derive_seed(7, 2)
    assert all(0 <= s < 2**63 for s in seeds)
    with pytest.raises(ValueError, match="seed must be an int >= 0"):
        paged_pool(1, 4, seed=-1, **SMALL)


@pytest.mark.parametrize("device", ["foo", 1.5])
def test_a_bad_device_is_named(device):
    with pytest.raises(ValueError, match="device must be None, 'cpu', 'cuda'"):
        paged_pool(1, 16, **{**SMALL, "device": device})
