"""The theoretical work formulas, against numbers worked out by hand."""

import pytest

from kvbench.ops.kv_gather_fp8 import kv_gather_fp8_work
from kvbench.ops.kv_write import kv_write_work
from kvbench.ops.paged_decode import paged_decode_work


def test_paged_decode_work_llama3_b64_8k():
    # 64 seqs x 8192 tokens x 8 kv heads x 128 dim x 2 (K, V) x 2 bytes = 2 GiB of KV.
    work = paged_decode_work([8192] * 64, q_heads=32, kv_heads=8, head_dim=128, kv_dtype="fp16")
    kv = 64 * 8192 * 8 * 128 * 2 * 2
    q_out = 2 * 64 * 32 * 128 * 2
    table = 4 * 64 * (8192 // 16) + 4 * 64
    assert work.moved == kv + q_out + table
    assert work.flops == 4 * 32 * 128 * 64 * 8192


def test_paged_decode_work_fp8_halves_kv_and_counts_partial_pages():
    fp16 = paged_decode_work([17, 1], q_heads=8, kv_heads=2, head_dim=64, kv_dtype="fp16")
    fp8 = paged_decode_work([17, 1], q_heads=8, kv_heads=2, head_dim=64, kv_dtype="fp8")
    kv16 = 18 * 2 * 64 * 2 * 2
    assert fp16.moved - fp8.moved == kv16 / 2
    # 17 tokens need 2 pages, 1 token 1 page: 3 table entries + 2 seq_lens, int32.
    assert fp16.moved == kv16 + 2 * 2 * 8 * 64 * 2 + 4 * 3 + 4 * 2


def test_kv_write_work_reads_inputs_once_writes_cache_once():
    n, heads, dim = 16384, 8, 128
    assert kv_write_work(n, kv_heads=heads, head_dim=dim, in_bytes=2, cache_dtype="fp16").moved == (
        2 * n * heads * dim * 4 + 8 * n
    )
    fp8 = kv_write_work(64, kv_heads=8, head_dim=128, in_bytes=2, cache_dtype="fp8").moved
    assert fp8 == 2 * 64 * 8 * 128 * 3 + 8 * 64


def test_gather_work_is_the_seed_payload():
    assert kv_gather_fp8_work(65536, 2048).moved == 65536 * 660 + (65536 + 2048) * 576
    assert kv_gather_fp8_work(0, 0).moved == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda: paged_decode_work([1], q_heads=1, kv_heads=1, head_dim=8, kv_dtype="fp32"),
        lambda: kv_write_work(1, kv_heads=1, head_dim=8, in_bytes=2, cache_dtype="int8"),
        lambda: kv_gather_fp8_work(1, -1),
    ],
)
def test_bad_input_names_what_is_accepted(call):
    with pytest.raises(ValueError, match="accepted|>= 0"):
        call()
