"""Load-only read kernels: the read ceiling, and the read bound of a paged decode case.

``stream_read_fn``: every byte of a contiguous buffer read once, nothing written (the read
ceiling ``calibrate()`` measures).
``page_read_fn``: every byte of a list of KV pages read once, the pages found through an index
as a paged decode finds them through its block table. It is the bytes-only bound of a decode
case at that case's size: the ceiling is measured on 2 GiB, where launch and ramp-up are
amortised; a 16 MiB decode (batch 1 x 4k) cannot read at that rate, and this row says what
reading its pages alone costs under the same timer.

Why not only ``torch.sum``: on the H200 a bf16 ``torch.sum`` of 2 GiB reads slower than decode
kernels read their KV in the same tables (docs/decisions.md), so %ceil of decode came out
above 100% and the "read ceiling" was a property of torch's reduction, not of the memory
system. This kernel does nothing but load: 16-byte vectors, a grid-stride loop
over ``programs`` persistent programs, an XOR fold in registers (integer, so no arithmetic can
be slower than the loads), one int32 written per program. ``calibrate()`` measures it beside
torch's reduction and keeps the faster of the two.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from kvbench.harness.verify import verify

#: Launch configuration: int32 words per program per iteration, warps, loop pipelining stages,
#: persistent programs per SM. From an H200 sweep: within 0.3% of the best point, and well
#: above a bf16 torch.sum (docs/decisions.md).
CONFIG = {"BLOCK": 4096, "num_warps": 8, "num_stages": 1, "programs_per_sm": 8}


@triton.jit
def _stream_read_kernel(x_ptr, out_ptr, n_words, BLOCK: tl.constexpr):
    """XOR of every int32 word this program visits: a grid-stride walk over the buffer."""
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    acc = tl.zeros([BLOCK], tl.int32)
    for start in range(pid * BLOCK, n_words, step):
        offs = start + tl.arange(0, BLOCK)
        acc ^= tl.load(x_ptr + offs, mask=offs < n_words, other=0)
    tl.store(out_ptr + pid, tl.xor_sum(acc, 0))


def xor_fold(words: torch.Tensor) -> torch.Tensor:
    """XOR of every element of an integer tensor, by halving in torch (1 element, same dtype):
    the reference the read kernels' XOR folds are checked against, independent of Triton."""
    x = words.reshape(-1)
    while x.numel() > 1:
        half = x.numel() // 2
        folded = x[:half] ^ x[half : 2 * half]
        if x.numel() % 2:
            folded[0] ^= x[-1]
        x = folded
    return x


def check_stream_read(read: Callable[[], torch.Tensor], x: torch.Tensor) -> float:
    """``read()`` (a ``stream_read_fn`` of ``x``) must have read every word of ``x`` once: the
    XOR of its outputs equals torch's XOR of ``x``. calibrate() runs it before timing the
    kernel, so a short read cannot inflate the read ceiling. Returns 0.0 or raises
    VerificationError."""
    return verify("stream_read", xor_fold(read()), xor_fold(x.view(torch.int32)), rtol=0, atol=0)


def stream_read_fn(
    x: torch.Tensor, sm_count: int, config: dict[str, int] | None = None
) -> Callable[[], torch.Tensor]:
    """A no-argument callable that reads all of ``x`` (a contiguous buffer of whole int32
    words) once per call with the streaming kernel; its output is a per-program XOR."""
    cfg = CONFIG if config is None else config
    if not x.is_contiguous() or x.numel() * x.element_size() % 4:
        raise ValueError(
            f"stream_read_fn needs a contiguous buffer of whole 4-byte words, got "
            f"{tuple(x.shape)} {x.dtype} (contiguous={x.is_contiguous()})"
        )
    words = x.view(torch.int32)
    n_words = words.numel()
    programs = max(1, min(sm_count * cfg["programs_per_sm"], triton.cdiv(n_words, cfg["BLOCK"])))
    out = torch.empty(programs, dtype=torch.int32, device=x.device)

    def read() -> torch.Tensor:
        _stream_read_kernel[(programs,)](
            words, out, n_words, BLOCK=cfg["BLOCK"],
            num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
        )
        return out

    return read


#: page_read_fn's launch configuration: int32 words per (page, chunk) item, warps, loop
#: stages, persistent programs per SM. From an H200 sweep over the decode cases
#: (docs/decisions.md): the best point differs per case, and this one is within about 1.4% of
#: each case's best, so the row is the bound to within that, not exactly. One stage: the loop
#: has no dot for the pipeliner to feed, and its sm_90 code is the same at 1, 2 and 3 stages
#: (triton 3.9).
PAGE_READ_CONFIG = {"CHUNK": 2048, "num_warps": 8, "num_stages": 1, "programs_per_sm": 32}


@triton.jit
def _page_read_kernel(
    k_ptr, v_ptr, ids_ptr, out_ptr, n_items, k_page_stride, v_page_stride,
    CHUNKS: tl.constexpr, CHUNK: tl.constexpr,
):
    """XOR of the K and V words of every (page, chunk) item this program visits (grid-stride);
    the page comes from ids_ptr, one dependent load per item, as a block-table lookup."""
    pid = tl.program_id(0)
    acc = tl.zeros([CHUNK], tl.int32)
    for item in range(pid, n_items, tl.num_programs(0)):
        page = tl.load(ids_ptr + item // CHUNKS).to(tl.int64)
        offs = (item % CHUNKS) * CHUNK + tl.arange(0, CHUNK)
        acc ^= tl.load(k_ptr + page * k_page_stride + offs)
        acc ^= tl.load(v_ptr + page * v_page_stride + offs)
    tl.store(out_ptr + pid, tl.xor_sum(acc, 0))


def page_words(cache: torch.Tensor) -> torch.Tensor:
    """``cache`` ([num_pages, ...], each page one dense block of memory in any dim order) as an
    int32 ``[num_pages, words_per_page]`` view of the same memory.

    Accepts every pool storage (combined, split, head_major, v_dim_major: the K or V half of a page
    is dense in all of them); raises ValueError for a page that is not one dense block or whose
    bytes are not whole 4-byte words.
    """
    inner = sorted((st, n) for st, n in zip(cache.stride()[1:], cache.shape[1:]) if n > 1)
    expect = 1
    for st, n in inner:
        if st != expect:
            raise ValueError(
                f"page_words needs each page of the cache to be one dense block; got shape "
                f"{tuple(cache.shape)} strides {cache.stride()}"
            )
        expect *= n
    elems, size = expect, cache.element_size()
    if (elems * size) % 4 or (cache.stride(0) * size) % 4 or (cache.storage_offset() * size) % 4:
        raise ValueError(
            f"page_words needs pages of whole 4-byte words at word-aligned offsets; got "
            f"{elems} x {size}-byte elements per page, page stride {cache.stride(0)}, "
            f"offset {cache.storage_offset()} elements"
        )
    flat = cache.as_strided((cache.shape[0], elems), (cache.stride(0), 1), cache.storage_offset())
    return flat.view(torch.int32)


def page_read_fn(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    page_ids: torch.Tensor,
    sm_count: int,
    config: dict[str, int] | None = None,
) -> Callable[[], torch.Tensor]:
    """A no-argument callable that reads the K and V pages named by ``page_ids`` (1-D,
    contiguous, int32, on the caches' device, each id < num_pages) once per call; its output
    is a per-program XOR of the words read.

    The chunk is the config's CHUNK words, or the whole page if the page is smaller; it must
    be a power of two that divides the page. Anything else is refused with a ValueError that
    names it (an id out of range would be a read out of bounds, so the ids are checked once,
    here, outside the timed call).
    """
    cfg = PAGE_READ_CONFIG if config is None else config
    k_words, v_words = page_words(k_cache), page_words(v_cache)
    if k_words.shape != v_words.shape:
        raise ValueError(
            f"K pages {tuple(k_words.shape)} and V pages {tuple(v_words.shape)} differ"
        )
    if (page_ids.dtype != torch.int32 or page_ids.dim() != 1 or page_ids.numel() == 0
            or not page_ids.is_contiguous() or page_ids.device != k_cache.device):
        raise ValueError(
            f"page_ids must be a non-empty, contiguous 1-D int32 tensor on {k_cache.device}; got "
            f"{tuple(page_ids.shape)} {page_ids.dtype} on {page_ids.device} "
            f"(contiguous={page_ids.is_contiguous()})"
        )
    low, high = (int(x) for x in torch.aminmax(page_ids))  # read once, here, not per call
    if low < 0 or high >= k_words.shape[0]:
        raise ValueError(
            f"page_ids span [{low}, {high}]; the caches have pages [0, {k_words.shape[0] - 1}]"
        )
    words_per_page = k_words.shape[1]
    chunk = min(cfg["CHUNK"], words_per_page)
    if words_per_page % chunk or chunk & (chunk - 1):
        raise ValueError(
            f"CHUNK must be a power of two that divides the page's {words_per_page} words; got "
            f"CHUNK={cfg['CHUNK']}"
        )
    chunks = words_per_page // chunk
    n_items = page_ids.numel() * chunks
    programs = max(1, min(sm_count * cfg["programs_per_sm"], n_items))
    out = torch.empty(programs, dtype=torch.int32, device=k_cache.device)

    def read() -> torch.Tensor:
        _page_read_kernel[(programs,)](
            k_words, v_words, page_ids, out, n_items, k_words.stride(0), v_words.stride(0),
            CHUNKS=chunks, CHUNK=chunk, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
        )
        return out

    return read
