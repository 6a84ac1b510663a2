"""Theoretical work of each op: the bytes and FLOPs an ideal kernel cannot avoid.

Scored against the operation, not the implementation (seed 000, Workflow 4): every input is
read once from global memory, every output written once, no redundant FLOPs. A kernel's own
split-KV partial buffers, a legacy gather's pre-zeroing pass, or a fallback's gathered copy
are the implementation's business and never enter these formulas, so a row that does extra
traffic shows a lower GB/s instead of a flattering one.

One module for all ops so the table, the asv suite and `kvbench tune` score a case the same
way.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvbench.harness.work import Work

#: Bytes per element of each KV dtype name.
KV_BYTES: dict[str, int] = {"fp16": 2, "bf16": 2, "fp8": 1}

#: seed-001 gather geometry: a 656-byte cache row (512 fp8 nope + 4 fp32 group scales +
#: 64 bf16 rope) becomes a 576-byte fp8 output row.
GATHER_ROW_IN_BYTES = 656
GATHER_ROW_OUT_BYTES = 576


def _pages(seq_lens: Sequence[int], page_size: int) -> int:
    """Pages the sequences occupy: ceil(length / page_size) each (a partial last page counts)."""
    return sum(-(-int(n) // page_size) for n in seq_lens)


def paged_decode_work(
    seq_lens: Sequence[int],
    *,
    q_heads: int,
    kv_heads: int,
    head_dim: int,
    kv_dtype: str,
    q_bytes: int = 2,
    page_size: int = 16,
) -> Work:
    """One decode step: each sequence's K and V rows read once, q read once, out written once.

    FLOPs: QK^T and PV are each 2 * Hq * L * D per sequence (a multiply-add counts as two).
    The block table is read once per page (int32); fp8 scales are two scalars and ignored.
    """
    if kv_dtype not in KV_BYTES:
        raise ValueError(f"kv_dtype {kv_dtype!r}: accepted {sorted(KV_BYTES)}")
    tokens = sum(int(n) for n in seq_lens)
    pages = _pages(seq_lens, page_size)
    batch = len(seq_lens)
    kv = 2 * tokens * kv_heads * head_dim * KV_BYTES[kv_dtype]
    q_and_out = 2 * batch * q_heads * head_dim * q_bytes
    table = 4 * pages + 4 * batch  # block-table entries actually used + seq_lens
    flops = 4.0 * q_heads * head_dim * tokens
    return Work(flops=flops, moved=float(kv + q_and_out + table))


def page_read_work(
    seq_lens: Sequence[int], *, kv_heads: int, head_dim: int, kv_dtype: str, page_size: int = 16
) -> Work:
    """The read bound of a decode case (``bound:page_read``): every attended page's K and V
    read whole (a partial last page too) and one int32 page index per page; no q, no output,
    no FLOPs. Equal to the decode's KV and block-table bytes when every length is a multiple
    of page_size."""
    if kv_dtype not in KV_BYTES:
        raise ValueError(f"kv_dtype {kv_dtype!r}: accepted {sorted(KV_BYTES)}")
    pages = _pages(seq_lens, page_size)
    return Work(moved=float(pages * (2 * page_size * kv_heads * head_dim * KV_BYTES[kv_dtype] + 4)))


def kv_write_work(n_tokens: int, *, kv_heads: int, head_dim: int, in_bytes: int, cache_dtype: str) -> Work:
    """Scatter N new K and V rows: read them once (input dtype), write them once (cache dtype).

    The int64 slot mapping is read once. fp8 quantization's scales are two scalars.
    """
    if cache_dtype not in KV_BYTES:
        raise ValueError(f"cache_dtype {cache_dtype!r}: accepted {sorted(KV_BYTES)}")
    elems = 2 * n_tokens * kv_heads * head_dim
    return Work(moved=float(elems * in_bytes + elems * KV_BYTES[cache_dtype] + 8 * n_tokens))


def kv_gather_fp8_work(kv_len: int, extra_rows: int) -> Work:
    """seed-001 payload: 656-byte rows + int32 page-table entries read, 576-byte rows written.

    The pad rows are written (zeros) but never read; a legacy variant's full-buffer zero fill
    is extra traffic of that implementation and is not counted.
    """
    if kv_len < 0 or extra_rows < 0:
        raise ValueError(f"kv_len={kv_len}, extra_rows={extra_rows}: both must be >= 0")
    read = kv_len * (GATHER_ROW_IN_BYTES + 4)
    written = (kv_len + extra_rows) * GATHER_ROW_OUT_BYTES
    return Work(moved=float(read + written))
