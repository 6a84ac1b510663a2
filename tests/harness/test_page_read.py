"""The bytes-only read bound of a decode case (harness/stream_read.page_read_fn, the table's
``bound:page_read`` row): it reads exactly the attended pages, in every storage and KV dtype.

CPU: the Triton kernel through the interpreter at small shapes; compiled on CUDA.
"""

import textwrap

import numpy as np
import pytest
import torch

from kvbench.fixtures.pool import STORAGES, paged_pool
from kvbench.harness.stream_read import page_read_fn, page_words
from kvbench.harness.verify import VerificationError
from kvbench.ops.paged_decode import check_page_read, page_read_work, paged_decode_work

DEV = "cuda" if torch.cuda.is_available() else "cpu"
SMALL = {"kv_heads": 2, "head_dim": 16, "page_size": 4, "min_l2_multiple": 0, "device": DEV}
#: 64-word fp16 pages (32-word fp8 pages) in chunks of 16: several items per page and per program.
CFG = {"CHUNK": 16, "num_warps": 1, "num_stages": 1, "programs_per_sm": 2}


def _pool(dtype: str, storage: str):
    # Ragged lengths, two of them mid-page: the partial last page is read whole.
    return paged_pool(3, [5, 12, 9], dtype=dtype, storage=storage, num_pages=40, **SMALL)


@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp8"])
def test_page_read_reads_exactly_the_attended_pages(dtype, storage):
    pool = _pool(dtype, storage)
    ids = pool.attended_page_ids()
    assert ids.tolist() == [p for row, n in zip(pool.block_table.tolist(), pool.seq_lens_list)
                            for p in row[: -(-n // 4)]]
    # 3 programs per SM: 12 programs over 32 / 64 items, an uneven grid-stride tail.
    for cfg in (CFG, {**CFG, "CHUNK": 64, "programs_per_sm": 1}, {**CFG, "programs_per_sm": 3}):
        read = page_read_fn(pool.k_cache, pool.v_cache, ids, 4, cfg)
        assert check_page_read(read, pool) == 0.0
    # The reference, independently of page_words: numpy XOR over the gathered cache pages,
    # each page's elements in memory order (dims by decreasing stride: v_dim_major's V view
    # is permuted, and pairing its fp16 elements in view order would make other words).
    def in_memory_order(c):
        return c.permute(0, *sorted(range(1, c.dim()), key=lambda d: -c.stride(d)))

    want = np.bitwise_xor.reduce(np.concatenate([
        in_memory_order(c)[ids.long()].contiguous().view(torch.uint8).cpu().numpy()
        .reshape(-1).view(np.int32)
        for c in (pool.k_cache, pool.v_cache)
    ]))
    got = np.bitwise_xor.reduce(
        page_read_fn(pool.k_cache, pool.v_cache, ids, 4, CFG)().cpu().numpy())
    assert got == want


def test_check_page_read_fails_a_read_of_the_wrong_pages():
    pool = _pool("fp16", "combined")
    ids = pool.attended_page_ids()
    wrong = page_read_fn(pool.k_cache, pool.v_cache, ids[:-1].contiguous(), 4, CFG)
    with pytest.raises(VerificationError, match="page_read"):
        check_page_read(wrong, pool)


def test_page_words_views_each_page_and_refuses_a_page_that_is_not_dense():
    pool = _pool("fp16", "head_major")
    words = page_words(pool.k_cache)
    assert words.shape == (40, 4 * 2 * 16 // 2) and words.dtype == torch.int32
    assert torch.equal(words[7].view(torch.float16).reshape(2, 4, 16),
                       pool.k_cache[7].transpose(0, 1))
    with pytest.raises(ValueError, match="dense block"):
        page_words(pool.k_cache[:, :, :, ::2])


def test_page_read_refuses_bad_ids_and_chunks():
    pool = _pool("fp16", "combined")
    ids = pool.attended_page_ids()
    for bad in (ids.long(), ids[:0], pool.block_table[:, 0], ids.reshape(1, -1)):
        with pytest.raises(ValueError, match="non-empty, contiguous 1-D int32"):
            page_read_fn(pool.k_cache, pool.v_cache, bad, 4, CFG)
    with pytest.raises(ValueError,
                       match=r"page_ids span \[.*, 40\]; the caches have pages \[0, 39\]"):
        page_read_fn(pool.k_cache, pool.v_cache,
                     torch.tensor([0, 40], dtype=torch.int32, device=DEV), 4, CFG)
    with pytest.raises(ValueError, match="CHUNK must be a power of two that divides the page's "
                                         "64 words; got CHUNK=24"):
        page_read_fn(pool.k_cache, pool.v_cache, ids, 4, {**CFG, "CHUNK": 24})


def test_page_read_work_counts_whole_pages_and_their_indices():
    work = page_read_work([5, 12, 9], kv_heads=2, head_dim=16, kv_dtype="fp16", page_size=4)
    pages = 2 + 3 + 3
    assert work.moved == pages * (2 * 4 * 2 * 16 * 2 + 4) and work.flops == 0
    decode = paged_decode_work([4096], q_heads=32, kv_heads=8, head_dim=128, kv_dtype="fp8")
    bound = page_read_work([4096], kv_heads=8, head_dim=128, kv_dtype="fp8")
    # Whole pages: the bound's bytes are the decode's minus q, out and seq_lens.
    assert decode.moved - bound.moved == 2 * 32 * 128 * 2 + 4
    with pytest.raises(ValueError, match="kv_dtype"):
        page_read_work([4], kv_heads=1, head_dim=4, kv_dtype="fp32")


@pytest.mark.gpu
def test_table_bound_row_is_checked_and_below_the_decode_it_bounds():
    """On the GPU every decode case of the table carries bound:page_read, checked first. A
    load-only read of the pages slower than the decode that reads them and does the math
    would mean its launch config is wrong (PAGE_READ_CONFIG; docs/decisions.md, "Bytes-only bound
    per decode case")."""
    from kvbench.measure.table import Table, bound_ratios, decode_case

    table = Table("paged_decode")
    decode_case(table, "b1_c4k", 1, 4096, rows=["triton/split_kv"], with_peers=False)
    assert not table.skipped, table.skipped
    # Like with like: the event-timed rows (a row near the event floor also has a CUPTI
    # kernel-time row beside it, with a note; the bound row has none).
    us = {r.impl: r.us for r in table.rows if not r.note}
    assert table.checks["bound:page_read @ b1_c4k fp16"] == 0.0
    assert us["bound:page_read"] < us["triton/split_kv"], us
    ratio = bound_ratios(table.rows)["b1_c4k fp16"]["triton/split_kv"]
    assert ratio == pytest.approx(us["triton/split_kv"] / us["bound:page_read"])


_COMPILE_READ_KERNELS = textwrap.dedent(
    """
    import re, subprocess, sys, tempfile
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from kvbench.harness import stream_read as sr

    target = GPUTarget("cuda", 90, 32)  # H200 = sm_90

    def compile_one(kern, sig, const, cfg, aligned):
        names = kern.arg_names
        sig = {**sig, **{k: "constexpr" for k in const}}
        attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
        src = ASTSource(fn=kern, signature=sig, constexprs=const, attrs=attrs)
        return triton.compile(src, target=target, options={
            "num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]})

    cfg = sr.PAGE_READ_CONFIG
    page = compile_one(
        sr._page_read_kernel,
        {"k_ptr": "*i32", "v_ptr": "*i32", "ids_ptr": "*i32", "out_ptr": "*i32", "n_items": "i32",
         "k_page_stride": "i32", "v_page_stride": "i32"},
        # fp16 decode geometry: 16 tokens x 8 heads x 128 dims = 8192 words per K page
        {"CHUNK": cfg["CHUNK"], "CHUNKS": 8192 // cfg["CHUNK"]}, cfg,
        # what a launch on the pool specializes: aligned pointers, page strides of 16384 words
        ("k_ptr", "v_ptr", "ids_ptr", "out_ptr", "k_page_stride", "v_page_stride"))
    stream = compile_one(
        sr._stream_read_kernel, {"x_ptr": "*i32", "out_ptr": "*i32", "n_words": "i32"},
        {"BLOCK": sr.CONFIG["BLOCK"]}, sr.CONFIG, ("x_ptr", "out_ptr", "n_words"))
    for name, k in (("page_read", page), ("stream_read", stream)):
        ptx = k.asm["ptx"]
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(k.asm["cubin"]); f.flush()
            usage = subprocess.run([sys.argv[1], "--dump-resource-usage", f.name],
                                   capture_output=True, text=True, check=True).stdout
        line = next(l for l in usage.splitlines() if "REG:" in l)
        vector = len(re.findall(r"ld\\.global(?:\\.\\w+)*\\.v4\\.b32", ptx))
        scalar = len(re.findall(r"ld\\.global(?:\\.\\w+)*\\.b32\\b", ptx)) - vector
        print(name, line.strip(), f"16-byte loads {vector}, 4-byte loads {scalar}")
        assert "STACK:0 " in line, f"{name} spills: {line}"
        # 16-byte loads for the data (a read made of narrower loads bounds nothing); the page
        # read's only 4-byte load is its page id.
        assert vector > 0, (name, vector)
        assert scalar <= (1 if name == "page_read" else 0), (name, scalar)
    print("ok")
    """
)


def test_read_kernels_compile_for_sm90_with_16_byte_loads(sm90_compile):
    """The read-bound and read-ceiling kernels compiled for sm_90: no spills, and the KV words
    leave memory as 16-byte vectors."""
    sm90_compile(_COMPILE_READ_KERNELS)
