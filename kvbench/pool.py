"""The paged KV pool fixture: decode inputs built the way an engine holds them.

Attention decode reads state that ``torch.randn(B, H, L, D)`` does not reproduce, so every
paged-decode benchmark and test builds its KV through ``paged_pool``. Each property below
exists for a measured reason. The figures are the specification's A10 numbers (seed 000,
8 KV heads, head_dim 128, fp16); they are the most likely thing to be stale on the H200 and
are to be re-measured there (an ablation row per property) before anyone relies on them:

* Fragmented block table (``layout="fragmented"``): sequence pages are disjoint slices of one
  random permutation of the pool, as an allocator hands them out after churn. A10: worth 2-4%
  against consecutive pages (a 2 KiB page row gathers at near streaming speed), which bounds
  what paging can hide. ``layout="contiguous"`` is the ablation row that measures that bound.
* Combined per-layer buffer (``storage="combined"``): K and V are strided views into one
  ``[num_pages, 2, page_size, kv_heads, head_dim]`` tensor, as the engine's attention module
  passes them. A10: the split allocation (``storage="split"``) never won (equal at 3 of 4
  shapes, 8% slower at one); both rows stay as a guard for small geometries (MQA, 64-dim heads)
  where a page row approaches one cache line and the stride could matter.
* ``storage="head_major"`` is an ablation of the engine's token-major page layout, not an
  engine layout kvbench tests kernels in: one ``[num_pages, 2, kv_heads, page_size, head_dim]``
  buffer (FlashInfer calls it HND), K and V still passed as ``[num_pages, page_size, kv_heads,
  head_dim]`` strided views, so one (page, kv head) is a contiguous page_size x head_dim block
  instead of page_size rows one token apart. It tests whether a kernel is limited by the
  access pattern of token-major rows (128 B per row at fp8, head_dim 128) rather than by
  its own code.
* ``storage="v_dim_major"``: the combined buffer with each V page half stored dim-major,
  ``[kv_heads, head_dim, page_size]`` (vLLM's original value-cache layout), K as in combined.
  V is still passed as a ``[num_pages, page_size, kv_heads, head_dim]`` strided view (stride 1
  along page_size). Why it exists: the P @ V product runs along tokens, so a token-major fp8
  V tile reaches the MMA through byte-wise shared-memory reads; dim-major pages make the
  token axis contiguous (docs/perf-notes.md, experiment 16).
* Capacity >= ``min_l2_multiple`` x L2 (default 8): not because a smaller pool would be served
  from L2 (the timer flushes L2 and decode reads each row once) but so the attended working set
  is large enough for the kernel to be bandwidth-bound rather than launch-bound. A10: capacity
  beyond that is worth ~2%.
* fp8 through the real quantizer (``kvbench.quant.quantize_fp8``): e4m3 bytes in a uint8
  container with per-tensor caller-side fp32 scales, never random bytes or a cast.

Unused block-table entries hold page 0, a valid index: a kernel that reads past ``seq_lens``
then computes a wrong answer that the reference check catches, instead of faulting the device
(which would also take down every later case in the process).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from kvbench.harness.peaks import resolve_device
from kvbench.quant import quantize_fp8

# Reasons for each property: module docstring (A10 figures, to re-measure on the H200).
LAYOUTS = ("fragmented", "contiguous")  # fragmented: 2-4% on A10; contiguous: its ablation row
# combined: the engine's layout; split: small-geometry guard; head_major: access-pattern ablation
# v_dim_major: V pages dim-major (P @ V reads tokens contiguously; see docstring)
STORAGES = ("combined", "split", "head_major", "v_dim_major")
_DTYPES: dict[object, str] = {
    torch.float16: "fp16",
    "fp16": "fp16",
    torch.bfloat16: "bf16",
    "bf16": "bf16",
    torch.float8_e4m3fn: "fp8",
    "fp8": "fp8",
}
_STORAGE_DTYPE = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8": torch.uint8}
#: The KV dtype names paged_pool builds (fp8: e4m3 bytes stored as uint8).
KV_DTYPES = tuple(_STORAGE_DTYPE)
# Stream tags for derive_seed: one independent random stream per purpose.
STREAM_TABLE, STREAM_KV, STREAM_QUERY = 1, 2, 3


def derive_seed(seed: int, stream: int) -> int:
    """An independent 63-bit seed for one purpose (``STREAM_*``) of a user-facing ``seed``.

    Why: torch generators seeded alike produce the same numbers, so a query drawn with seed 0
    equalled the first cached key of a pool filled with seed 0 (a 12-sigma score that turns
    the softmax into a spike). numpy's SeedSequence hashes (seed, stream) into unrelated
    states, stable across processes and platforms.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    state = np.random.SeedSequence([seed, stream]).generate_state(1, dtype=np.uint64)[0]
    return int(state >> np.uint64(1))


@dataclass
class KVPool:
    """One layer's paged KV cache plus the decode batch that attends to it.

    ``k_cache`` / ``v_cache``: ``[num_pages, page_size, kv_heads, head_dim]`` (fp16 / bf16, or
    uint8 e4m3 bytes for fp8 with ``k_scale`` / ``v_scale`` fp32 0-dim tensors).
    ``block_table``: ``[num_seqs, max_pages]`` int32; ``seq_lens``: ``[num_seqs]`` int32.
    ``nbytes``: bytes of K+V storage (the whole pool, not the attended part).
    ``buffer``: the one allocation K and V are views of, laid out as ``storage`` says
    (combined: ``[num_pages, 2, page_size, kv_heads, head_dim]``; head_major: ``[num_pages,
    2, kv_heads, page_size, head_dim]``; v_dim_major: ``[num_pages, 2, page_size x kv_heads x
    head_dim]``, the V half ``[kv_heads, head_dim, page_size]``); None for split storage.
    """

    k_cache: torch.Tensor | None
    v_cache: torch.Tensor | None
    block_table: torch.Tensor | None
    seq_lens: torch.Tensor | None
    k_scale: torch.Tensor | None
    v_scale: torch.Tensor | None
    nbytes: int
    kv_dtype_name: str
    device: torch.device
    layout: str
    storage: str
    page_size: int
    num_pages: int
    kv_heads: int
    head_dim: int
    seq_lens_list: list[int]
    buffer: torch.Tensor | None = field(default=None, repr=False)

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens_list)

    @property
    def bytes_per_token(self) -> int:
        """K+V bytes of one token across all KV heads (element size x 2 x heads x dim)."""
        elem = 1 if self.kv_dtype_name == "fp8" else 2
        return 2 * self.kv_heads * self.head_dim * elem

    @property
    def attended_bytes(self) -> int:
        """K+V bytes a decode step must read once: sum(seq_lens) x bytes_per_token."""
        return sum(self.seq_lens_list) * self.bytes_per_token

    def attended_page_ids(self) -> torch.Tensor:
        """The pages a decode step reads (``attended_pages`` of this pool's table)."""
        if self.block_table is None:
            raise ValueError("attended_page_ids: this pool was freed")
        return attended_pages(self.block_table, self.seq_lens, self.page_size)

    def free(self) -> None:
        """Drop every tensor and return cached blocks to the device.

        Between benchmark cases: otherwise the next case runs on top of a fragmented caching
        allocator and measures that too (seed 000). The caller must drop its own references
        (e.g. a query built from this pool) for the memory to actually be released.
        """
        self.k_cache = self.v_cache = self.buffer = None
        self.block_table = self.seq_lens = None
        self.k_scale = self.v_scale = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def attended_pages(block_table: torch.Tensor, seq_lens: torch.Tensor, page_size: int) -> torch.Tensor:
    """Sequence b's pages ``block_table[b, :ceil(seq_lens[b] / page_size)]``, concatenated in
    sequence order (int32, contiguous, on the table's device): the pages a decode step reads.
    A boolean mask over the row-major table keeps each sequence's pages together and in order.
    Raises ValueError when a length needs more pages than the table has columns."""
    pages = (seq_lens.to(torch.int64) + page_size - 1) // page_size
    max_pages = block_table.shape[1]
    if int(pages.max()) > max_pages:
        raise ValueError(
            f"seq_lens need up to {int(pages.max())} pages but block_table has {max_pages}"
        )
    cols = torch.arange(max_pages, device=block_table.device)
    return block_table[cols[None, :] < pages[:, None]].to(torch.int32).contiguous()


def _dtype_name(dtype: object) -> str:
    try:
        return _DTYPES[dtype]
    except (KeyError, TypeError):
        accepted = "torch.float16, torch.bfloat16, torch.float8_e4m3fn, 'fp16', 'bf16', 'fp8'"
        raise ValueError(f"dtype={dtype!r} is not accepted; accepted: {accepted}") from None


def _seq_lens(num_seqs: int, seq_len: int | Sequence[int]) -> list[int]:
    if isinstance(num_seqs, bool) or not isinstance(num_seqs, int) or num_seqs < 1:
        raise ValueError(f"num_seqs must be an int >= 1, got {num_seqs!r}")
    if isinstance(seq_len, int) and not isinstance(seq_len, bool):
        lens = [seq_len] * num_seqs
    elif isinstance(seq_len, Sequence) and not isinstance(seq_len, str):
        lens = list(seq_len)
        if len(lens) != num_seqs:
            raise ValueError(f"seq_len has {len(lens)} entries but num_seqs={num_seqs}")
    else:
        raise ValueError(f"seq_len must be an int or a sequence of ints, got {seq_len!r}")  # noqa: TRY004
    for n in lens:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"seq_len entries must be ints >= 1, got {n!r}")
    return lens


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return value


def _l2_bytes(device: torch.device, min_l2_multiple: float) -> int:
    """L2 size of ``device``; CPU has no L2 figure, so only ``min_l2_multiple == 0`` passes."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).L2_cache_size)
    if min_l2_multiple != 0:
        raise ValueError(
            f"device {device} has no L2 figure to size the pool against; pass "
            f"min_l2_multiple=0 explicitly for a {device.type} pool (got {min_l2_multiple})"
        )
    return 0


def _build_block_table(
    pages_per_seq: list[int], num_pages: int, layout: str, seed: int
) -> torch.Tensor:
    """Host-built int32 table (tens of thousands of entries: microseconds on the CPU)."""
    needed = sum(pages_per_seq)
    if layout == "fragmented":
        gen = torch.Generator().manual_seed(derive_seed(seed, STREAM_TABLE))
        ids = torch.randperm(num_pages, generator=gen, dtype=torch.int64)[:needed]
    else:
        ids = torch.arange(needed, dtype=torch.int64)
    counts = torch.tensor(pages_per_seq, dtype=torch.int64)
    width = int(counts.max())
    used = torch.arange(width)[None, :] < counts[:, None]
    table = torch.zeros((len(pages_per_seq), width), dtype=torch.int32)
    table[used] = ids.to(torch.int32)  # row-major fill: sequence i gets slice i of ids
    return table


def paged_pool(
    num_seqs: int,
    seq_len: int | Sequence[int],
    *,
    kv_heads: int = 8,
    head_dim: int = 128,
    page_size: int = 16,
    dtype: torch.dtype | str = torch.float16,
    layout: str = "fragmented",
    storage: str = "combined",
    min_l2_multiple: float = 8,
    device: torch.device | str | None = None,
    seed: int = 0,
    num_pages: int | None = None,
) -> KVPool:
    """Build a paged KV pool holding ``num_seqs`` sequences of ``seq_len`` tokens each.

    ``seq_len`` is an int, or one int per sequence for a ragged batch. Capacity is the larger
    of what the sequences need and ``min_l2_multiple`` x L2 bytes; an explicit ``num_pages``
    below either raises ValueError (lower ``min_l2_multiple`` explicitly to accept a small
    pool). K/V hold seeded random normal data built directly on ``device`` (default: the
    current CUDA device, else CPU, where ``min_l2_multiple=0`` is required).
    """
    lens = _seq_lens(num_seqs, seq_len)
    derive_seed(seed, 0)  # validates seed before any work
    _positive_int("kv_heads", kv_heads)
    _positive_int("head_dim", head_dim)
    _positive_int("page_size", page_size)
    name = _dtype_name(dtype)
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r} is not accepted; accepted: {LAYOUTS}")
    if storage not in STORAGES:
        raise ValueError(f"storage={storage!r} is not accepted; accepted: {STORAGES}")
    if (
        isinstance(min_l2_multiple, bool)
        or not isinstance(min_l2_multiple, (int, float))
        or not math.isfinite(min_l2_multiple)
        or min_l2_multiple < 0
    ):
        raise ValueError(f"min_l2_multiple must be a finite number >= 0, got {min_l2_multiple!r}")
    dev = resolve_device(device)  # the harness's: ValueError naming what is accepted
    l2 = _l2_bytes(dev, min_l2_multiple)

    elem = 1 if name == "fp8" else 2
    page_bytes = 2 * page_size * kv_heads * head_dim * elem  # K and V halves of one page
    pages_per_seq = [math.ceil(n / page_size) for n in lens]
    need_pages = sum(pages_per_seq)
    # >= 8x L2 (default) keeps the kernel bandwidth-bound, not launch-bound (A10; see docstring)
    floor_bytes = math.ceil(min_l2_multiple * l2)
    floor_pages = math.ceil(floor_bytes / page_bytes)
    if num_pages is None:
        num_pages = max(need_pages, floor_pages)
    else:
        _positive_int("num_pages", num_pages)
        if num_pages < need_pages:
            raise ValueError(
                f"num_pages={num_pages} cannot hold the sequences: they need {need_pages} pages "
                f"({need_pages * page_bytes} bytes)"
            )
        if num_pages * page_bytes < floor_bytes:
            raise ValueError(
                f"num_pages={num_pages} gives {num_pages * page_bytes} bytes, below "
                f"min_l2_multiple={min_l2_multiple} x L2 ({l2} bytes) = {floor_bytes} bytes "
                f"({floor_pages} pages); lower min_l2_multiple explicitly to accept a smaller pool"
            )

    table = _build_block_table(pages_per_seq, num_pages, layout, seed).to(dev)
    seq_lens_t = torch.tensor(lens, dtype=torch.int32, device=dev)
    k, v, buf, k_scale, v_scale = _fill_kv(
        name, num_pages, page_size, kv_heads, head_dim, storage, dev, seed
    )
    return KVPool(
        k_cache=k,
        v_cache=v,
        block_table=table,
        seq_lens=seq_lens_t,
        k_scale=k_scale,
        v_scale=v_scale,
        nbytes=num_pages * page_bytes,
        kv_dtype_name=name,
        device=dev,
        layout=layout,
        storage=storage,
        page_size=page_size,
        num_pages=num_pages,
        kv_heads=kv_heads,
        head_dim=head_dim,
        seq_lens_list=lens,
        buffer=buf,
    )


def _fill_kv(
    name: str,
    num_pages: int,
    page_size: int,
    kv_heads: int,
    head_dim: int,
    storage: str,
    dev: torch.device,
    seed: int,
) -> tuple[
    torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None
]:
    """Allocate K/V storage on ``dev`` and fill it from a seeded device generator."""
    page_shape = (num_pages, page_size, kv_heads, head_dim)
    store_dtype = _STORAGE_DTYPE[name]
    if storage == "combined":
        buf = torch.empty(
            (num_pages, 2, page_size, kv_heads, head_dim), dtype=store_dtype, device=dev
        )
        k, v = buf[:, 0], buf[:, 1]
    elif storage == "v_dim_major":
        half = page_size * kv_heads * head_dim
        buf = torch.empty((num_pages, 2, half), dtype=store_dtype, device=dev)
        k = buf[:, 0].view(page_shape)
        v = buf[:, 1].view(num_pages, kv_heads, head_dim, page_size).permute(0, 3, 1, 2)
    elif storage == "head_major":
        buf = torch.empty(
            (num_pages, 2, kv_heads, page_size, head_dim), dtype=store_dtype, device=dev
        )
        k, v = buf[:, 0].transpose(1, 2), buf[:, 1].transpose(1, 2)
    else:
        buf = None
        k = torch.empty(page_shape, dtype=store_dtype, device=dev)
        v = torch.empty(page_shape, dtype=store_dtype, device=dev)
    gen = torch.Generator(device=dev).manual_seed(derive_seed(seed, STREAM_KV))
    if name != "fp8":
        k.normal_(generator=gen)
        v.normal_(generator=gen)
        return k, v, buf, None, None
    scales = []
    for dst in (k, v):
        # fp16 source, one half at a time, so the peak is ~1.5x the fp8 pool, not 3x.
        src = torch.empty(page_shape, dtype=torch.float16, device=dev).normal_(generator=gen)
        data, scale = quantize_fp8(src)
        del src
        dst.copy_(data)
        scales.append(scale)
    return k, v, buf, scales[0], scales[1]
