"""The fp8 paged KV pool of the sparse-prefill gather (seed 001), and its page table.

A fixture module of its own (like kvbench.pool) rather than part of the kernel module, so that
checks, tests and benchmarks build inputs without importing kernel code, and the kernels stay
free of fixture code.

Row format (656 bytes, one row per cached token, viewed as float8_e4m3fn [pool, 1, 656]):
  bytes   0..511  512 e4m3 "nope" values in 4 groups of 128
  bytes 512..527  4 fp32 dequant scales, one per group
  bytes 528..655  64 bf16 "rope" values
The three byte ranges start 16-byte aligned (0, 512, 528), which is what lets a kernel use
16-byte accesses on every part of a row.

Contents are realistic, not random bytes: nope bytes come from the real quantizer
(kvbench.quant.quantize_fp8 of a normal sample, so they cover the whole e4m3 range and never
hold the NaN codes 0x7f/0xff), group scales are positive and small (1e-3 .. 0.051, as in the
seed), rope is bf16 of a normal sample. Dequantized nope * scale then spans the e4m3
subnormal and normal ranges, so the gather's rounding is exercised everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvbench.harness.peaks import resolve_device
from kvbench.quant import quantize_fp8

ROW_BYTES = 656
NOPE = 512
GROUPS = 4
GROUP = 128
ROPE = 64
SCALE_OFFSET = 512
ROPE_OFFSET = 528
OUT_DIM = 576
PAGE_SIZE = 64
#: topk landing-pad rows of the DSA prefill path (seed 001)
TOPK_PAD_ROWS = 2048


def _int_arg(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def gather_pool_tokens(kv_len: int, device: torch.device | str, *, min_l2_multiple: int = 8) -> int:
    """Pool size in tokens for a gather of kv_len rows: >= 2 x kv_len (seed 001) and, on a GPU,
    >= min_l2_multiple x L2 as for the decode fixture (seed 001's 86 MB pool is barely above
    an H200's 60 MiB L2), rounded up to whole 64-token pages."""
    tokens = 2 * _int_arg("kv_len", kv_len, 0)
    dev = resolve_device(device)
    if dev.type == "cuda" and min_l2_multiple > 0:
        l2 = torch.cuda.get_device_properties(dev).L2_cache_size
        tokens = max(tokens, -(-min_l2_multiple * l2 // ROW_BYTES))
    return max(PAGE_SIZE, -(-tokens // PAGE_SIZE) * PAGE_SIZE)


def build_gather_pool(
    pool_tokens: int, *, device: torch.device | str, seed: int = 0
) -> torch.Tensor:
    """A [pool_tokens, 1, 656] float8_e4m3fn paged cache with realistic row contents.

    Built on the host generator (deterministic across devices) in slices, then moved; the
    131072-token pool of seed 001 is 86 MB.
    """
    _int_arg("pool_tokens", pool_tokens, 1)
    device = resolve_device(device)  # before building: a bad device is named, not a late crash
    gen = torch.Generator().manual_seed(seed)
    sample = torch.randn(pool_tokens, NOPE, generator=gen) * 2.0
    nope, _ = quantize_fp8(sample)
    del sample
    scales = torch.rand(pool_tokens, GROUPS, generator=gen) * 0.05 + 1e-3
    rope = torch.randn(pool_tokens, ROPE, generator=gen).to(torch.bfloat16)
    raw = torch.empty(pool_tokens, ROW_BYTES, dtype=torch.uint8)
    raw[:, :NOPE] = nope
    raw[:, SCALE_OFFSET:ROPE_OFFSET] = scales.to(torch.float32).view(torch.uint8)
    raw[:, ROPE_OFFSET:] = rope.view(torch.uint8)
    return raw.to(device).view(torch.float8_e4m3fn).view(pool_tokens, 1, ROW_BYTES)


def build_page_table_flat(
    kv_lens: Sequence[int],
    pool_tokens: int,
    *,
    page_size: int = PAGE_SIZE,
    seed: int = 1,
    device: torch.device | str,
) -> torch.Tensor:
    """int32 token rows for requests of ``kv_lens`` tokens, concatenated (seed 001 layout).

    Each request takes random distinct ``page_size``-token pages of the pool (tokens
    contiguous inside a page, pages in random order), truncated to its length.
    """
    _int_arg("pool_tokens", pool_tokens, 1)
    _int_arg("page_size", page_size, 1)
    if isinstance(kv_lens, (str, bytes)) or not isinstance(kv_lens, Sequence):
        # ValueError, not TypeError: the project's one exception type for bad input
        raise ValueError(f"kv_lens must be a sequence of ints >= 0, got {kv_lens!r}")  # noqa: TRY004
    pool_pages = pool_tokens // page_size
    gen = torch.Generator().manual_seed(seed)
    parts = [torch.empty(0, dtype=torch.int64)]
    for kv_len in kv_lens:
        _int_arg("kv_lens entry", kv_len, 0)
        pages_needed = -(-kv_len // page_size)
        if pages_needed > pool_pages:
            raise ValueError(
                f"kv_len {kv_len} needs {pages_needed} pages of {page_size} tokens; the pool "
                f"has {pool_pages} ({pool_tokens} tokens)"
            )
        pages = torch.randperm(pool_pages, generator=gen)[:pages_needed]
        rows = pages[:, None] * page_size + torch.arange(page_size)[None, :]
        parts.append(rows.reshape(-1)[:kv_len])
    return torch.cat(parts).to(torch.int32).to(device)
