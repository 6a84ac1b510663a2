"""Paged decode whose KV splits combine through a thread-block cluster (CUDA, sm_90).

The kernel is ``kvbench/kernels/cuda/cluster_decode.cu`` (its header says why it exists and
how one CTA works); this module validates the inputs, picks the split count (= the cluster
size) and launches it through ctypes on torch's current stream. The library is built with nvcc
on first use (``kvbench.kernels.cuda_build``).

Accepted inputs, beyond paged_decode's (``common.validate_decode_inputs`` runs first, same
messages): CUDA
tensors on an sm_90+ device; head_dim 128; q heads per kv head 1, 2, 4 or 8; fp16 / bf16
caches with K and V token-major (d contiguous), or fp8 e4m3 bytes with fp16 q, K token-major
and V dim-major pages (``paged_pool(storage="v_dim_major")``; page_size >= 16, so 16 tokens of
a d row are one 16-byte copy); cache rows 16-byte aligned (cp.async copies 16 bytes); q's
head rows 4-byte aligned (q is loaded as pairs).
"""

from __future__ import annotations

import ctypes
import functools
import math

import torch

from kvbench.core.dtypes import FROM_TORCH
from kvbench.kernels import cuda_build
from kvbench.kernels._device import sm_count
from kvbench.kernels._validate import validate_optional_int_range
from kvbench.kernels.common import HEAD_DIMS, LOG2E, DecodeProblem, decode_row

LIBRARY = "cluster_decode"
#: The only head dim its templates are compiled for (common.HEAD_DIMS holds the rule).
HEAD_DIM = HEAD_DIMS["cuda/cluster_decode"][0]
GROUPS = (1, 2, 4, 8)
#: sm_90's non-portable cluster limit (the kernel allows it on itself).
MAX_SPLITS = 16
#: A split shorter than this is not worth a CTA: its fixed chain (block table, copy, combine)
#: would dominate.
MIN_TOKENS_PER_SPLIT = 64
#: Tokens per pipeline stage of one CTA (cluster_decode.cu's TILE_N: 8 warps x 16).
TILE_N = 128
_DTYPE_CODE = {torch.float16: 0, torch.bfloat16: 1}
_FP8_CODE = 2  # e4m3 KV bytes with fp16 q


class DecodeArgs(ctypes.Structure):
    """Mirror of ``struct DecodeArgs`` in cluster_decode.cu (checked against its sizeof)."""

    _fields_ = [
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("block_table", ctypes.c_void_p),
        ("seq_lens", ctypes.c_void_p),
        ("out", ctypes.c_void_p),
        ("k_scale_ptr", ctypes.c_void_p),
        ("v_scale_ptr", ctypes.c_void_p),
        *[(n, ctypes.c_int64) for n in (
            "q_stride_b", "q_stride_h",
            "k_stride_page", "k_stride_slot", "k_stride_head",
            "v_stride_page", "v_stride_slot", "v_stride_head", "v_stride_d",
            "bt_stride", "out_stride_b", "out_stride_h",
        )],
        *[(n, ctypes.c_int32) for n in (
            "batch", "q_heads", "kv_heads", "page_shift", "splits")],
        *[(n, ctypes.c_float) for n in ("qk_scale_log2", "k_scale", "v_scale")],
    ]


@functools.cache
def _library() -> ctypes.CDLL:
    return configure_library(cuda_build.load(LIBRARY))


def configure_library(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Declare the C interface's argument types on a loaded build of cluster_decode.cu and
    check its DecodeArgs and the constants this module mirrors against this module's: a
    build from a source edited on one side only is refused by name, not launched."""
    lib.kvb_cluster_decode.argtypes = [ctypes.POINTER(DecodeArgs), ctypes.c_int, ctypes.c_void_p]
    lib.kvb_max_active_clusters.argtypes = [
        ctypes.POINTER(DecodeArgs), ctypes.c_int, ctypes.POINTER(ctypes.c_int)
    ]
    lib.kvb_kernel_attributes.argtypes = [
        ctypes.POINTER(DecodeArgs), ctypes.c_int, ctypes.POINTER(ctypes.c_int)
    ]
    lib.kvb_error_string.restype = ctypes.c_char_p
    if lib.kvb_args_size() != ctypes.sizeof(DecodeArgs):
        raise RuntimeError(
            f"{LIBRARY}: DecodeArgs is {lib.kvb_args_size()} bytes in CUDA, "
            f"{ctypes.sizeof(DecodeArgs)} in Python: the two definitions disagree"
        )
    lib.kvb_constant.argtypes = [ctypes.c_char_p]
    mirrored = {"HEAD_DIM": HEAD_DIM, "TILE_N": TILE_N, "MAX_SPLITS": MAX_SPLITS,
                "MAX_GROUP": max(GROUPS), "ATTRIBUTE_COUNT": ATTRIBUTE_COUNT}
    built = {name: lib.kvb_constant(name.encode()) for name in mirrored}
    differ = {name: (built[name], value) for name, value in mirrored.items()
              if built[name] != value}
    if differ:
        raise RuntimeError(f"{LIBRARY}: constants differ between the CUDA source and Python "
                           f"(name: (CUDA, Python)): {differ}")
    return lib


def _check(code: int, what: str) -> None:
    if code != 0:
        msg = _library().kvb_error_string(code).decode()
        raise RuntimeError(f"{LIBRARY}: {what} failed: {msg} (cudaError {code})")


@functools.lru_cache(maxsize=16)
def unavailable_reason(device: torch.device) -> str | None:
    """None when the kernel can run on ``device``, else why not (the registry row's check;
    cached: the launcher asks on every call, and the answer needs a PATH search)."""
    return cuda_build.unavailable_reason(device)


@functools.lru_cache(maxsize=64)
def max_active_clusters(device: torch.device, kv_dtype: torch.dtype, group: int,
                        splits: int) -> int:
    """Clusters of ``splits`` CTAs that the device holds at once (CUDA's occupancy query), for
    a cache of ``kv_dtype`` (torch.uint8: fp8 bytes)."""
    args = DecodeArgs(q_heads=group, kv_heads=1, batch=1, splits=splits)
    n = ctypes.c_int(0)
    code = _FP8_CODE if kv_dtype == torch.uint8 else _DTYPE_CODE[kv_dtype]
    with torch.cuda.device(device):
        _check(_library().kvb_max_active_clusters(ctypes.byref(args), code, ctypes.byref(n)),
               "cudaOccupancyMaxActiveClusters")
    return n.value


#: How many ints kvb_kernel_attributes writes (cluster_decode.cu's kAttributeCount).
ATTRIBUTE_COUNT = 6
#: A dtype code's name in a kernel record: the KV dtype, fp8 with its encoding.
_CODE_NAMES = {**{code: FROM_TORCH[dtype] for dtype, code in _DTYPE_CODE.items()},
               _FP8_CODE: "fp8_e4m3"}


def kernel_resources(device: torch.device, code: int, group: int) -> dict:
    """The compiled cluster_decode_kernel instantiation that a launch for KV dtype `code` and
    `group` q heads per kv head runs, as the CUDA runtime describes it (cudaFuncGetAttributes):
    registers per thread, local memory bytes per thread (register spills and local arrays),
    shared memory per block (static + the dynamic ring), warps per block, SASS architecture.
    The keys are those the sidecar records for a compiled Triton kernel where they mean the
    same. A fresh dict each call (the caller may keep or change it)."""
    return dict(_kernel_attributes(device, code, group))


@functools.lru_cache(maxsize=64)
def _kernel_attributes(device: torch.device, code: int, group: int) -> dict:
    """kernel_resources, cached: a compiled kernel's attributes do not change."""
    args = DecodeArgs(q_heads=group, kv_heads=1, batch=1, splits=1)
    out = (ctypes.c_int * ATTRIBUTE_COUNT)()
    with torch.cuda.device(device):
        _check(_library().kvb_kernel_attributes(ctypes.byref(args), code, out),
               "cudaFuncGetAttributes")
    registers, local_bytes, static_shared, dynamic_shared, threads, arch = out
    return {
        "name": f"cluster_decode_kernel<{_CODE_NAMES[code]}, group={group}>",
        "registers": registers,
        "local_bytes": local_bytes,
        "shared_bytes": static_shared + dynamic_shared,
        "num_warps": threads // 32,
        "sass_arch": f"sm_{arch}",
    }


#: fp8 V^T copies move 16 tokens of one d row at once, so an fp8 page holds at least 16.
MIN_FP8_PAGE_SIZE = 16


def shape_unsupported(head_dim: int, q_heads: int, kv_heads: int, *, fp8: bool = False,
                      page_size: int | None = None) -> str | None:
    """None when the kernel's templates cover this geometry, else what it needs (the
    registry's shape gate and the launcher's validation: one rule for both)."""
    if head_dim != HEAD_DIM:
        return f"needs head_dim {HEAD_DIM}, got {head_dim}"
    if q_heads % kv_heads or q_heads // kv_heads not in GROUPS:
        return f"needs q_heads / kv_heads in {GROUPS}, got {q_heads} / {kv_heads}"
    if fp8 and page_size is not None and page_size < MIN_FP8_PAGE_SIZE:
        return (f"needs page_size >= {MIN_FP8_PAGE_SIZE} for fp8 (16 tokens of a d row are one "
                f"copy), got {page_size}")
    return None


def choose_cluster_splits(programs: int, max_context: int, sms: int, fits) -> int:
    """The split count (<= MAX_SPLITS) with the fewest tiles per CTA, all CTAs in one wave.

    ``programs`` = batch x kv heads; ``fits(splits)`` = clusters of that size the device holds
    at once. A split count qualifies when programs x splits CTAs fit the SMs (one CTA per SM:
    the ring takes 192 KiB of shared memory), all clusters are resident together, and each
    split keeps >= MIN_TOKENS_PER_SPLIT tokens. Among those, the fewest TILE_N-token tiles per
    split (the chain each CTA runs: a partial tail tile costs about a whole one, so 3 tiles
    and a tail is no faster than 4 whole tiles), then the fewest CTAs. Any size, not only
    powers of two (how many clusters fit is not monotone in their size). 1 when none
    qualifies.
    """
    best, best_tiles = 1, math.ceil(max_context / TILE_N)
    for splits in range(2, MAX_SPLITS + 1):
        if (programs * splits > sms or max_context < splits * MIN_TOKENS_PER_SPLIT
                or programs > fits(splits)):
            continue
        tiles = math.ceil(math.ceil(max_context / splits) / TILE_N)
        if tiles < best_tiles:
            best, best_tiles = splits, tiles
    return best


@functools.lru_cache(maxsize=1024)
def auto_splits(device: torch.device, kv_dtype: torch.dtype, group: int, programs: int,
                max_context: int) -> int:
    """choose_cluster_splits with this device's SM count and cluster occupancy (the launcher's
    choice when num_splits is None). Cached: the launcher asks on every call, the search over
    15 split counts costs several microseconds of host time where a cache hit costs well
    under one, and a decode loop repeats few (programs, context) pairs."""
    return choose_cluster_splits(
        programs, max_context, sm_count(device),
        lambda s: max_active_clusters(device, kv_dtype, group, s),
    )


def _validate_cluster_inputs(q, k_cache, v_cache, p) -> None:
    """What this kernel accepts beyond paged_decode's contract (shape and dtype first, so a
    CPU caller learns them too, then the device, then the rows' alignment)."""
    reason = shape_unsupported(p.head_dim, p.q_heads, p.kv_heads, fp8=p.fp8,
                               page_size=p.page_size)
    if reason:
        raise ValueError(f"cuda/cluster_decode {reason}")
    if p.fp8:
        if q.dtype != torch.float16:
            raise ValueError(f"cuda/cluster_decode reads fp8 caches with fp16 q, got {q.dtype}")
        if not p.v_dim_major:
            raise ValueError("cuda/cluster_decode reads fp8 V from dim-major pages "
                             "(paged_pool(storage='v_dim_major')); token-major fp8 V: use "
                             "triton/split_kv")
    elif p.v_dim_major:
        raise ValueError("cuda/cluster_decode needs a token-major v_cache (d contiguous) for "
                         "fp16 / bf16; dim-major V pages: use triton/split_kv")
    reason = unavailable_reason(q.device)
    if reason:
        raise ValueError(f"cuda/cluster_decode {reason}")
    if q.data_ptr() % 4 or q.stride(0) % 2 or q.stride(1) % 2:
        raise ValueError(f"q: head rows must be 4-byte aligned (data_ptr % 4 == 0, batch and head "
                         f"strides even), got strides {tuple(q.stride())}")
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        elems = 16 // cache.element_size()  # elements per 16 bytes
        strides = [s for i, s in enumerate(cache.stride()) if s != 1 or i == 0]
        if cache.data_ptr() % 16 or any(s % elems for s in strides):
            raise ValueError(f"{name}: rows must be 16-byte aligned (data_ptr % 16 == 0, every "
                             f"stride but the contiguous one a multiple of {elems} elements), "
                             f"got strides {tuple(cache.stride())}")


# The contract's head-dim rule is the Triton rows' (the order of its messages stays the
# contract's); shape_unsupported then refuses every head dim but HEAD_DIM.
@decode_row(triton_kernel=False, options=())
def paged_decode_cluster(
    p: DecodeProblem, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, *,
    num_splits: int | None = None,
) -> torch.Tensor:
    """CUDA flash-decode, one launch: the splits of a (sequence, kv head) are one cluster.

    ``num_splits=None`` picks ``choose_cluster_splits`` from the shape (the block table's width
    x page_size as the context bound: the host never reads seq_lens).
    """
    _validate_cluster_inputs(q, k_cache, v_cache, p)
    validate_optional_int_range("num_splits", num_splits, 1, MAX_SPLITS)
    out = torch.empty((p.batch, p.q_heads, p.head_dim), dtype=q.dtype, device=q.device)
    if p.batch == 0:
        return out
    if num_splits is None:
        num_splits = auto_splits(q.device, torch.uint8 if p.fp8 else k_cache.dtype,
                                 p.q_heads // p.kv_heads,
                                 p.batch * p.kv_heads, p.max_pages * p.page_size)
    scale_ptrs = [s.data_ptr() if isinstance(s, torch.Tensor) else None
                  for s in (p.k_scale, p.v_scale)]
    scale_vals = [1.0 if isinstance(s, torch.Tensor) else float(s) for s in (p.k_scale, p.v_scale)]
    args = DecodeArgs(
        q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), p.block_table.data_ptr(),
        p.seq_lens.data_ptr(), out.data_ptr(), *scale_ptrs,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), v_cache.stride(3),
        p.block_table.stride(0), out.stride(0), out.stride(1),
        p.batch, p.q_heads, p.kv_heads, int(math.log2(p.page_size)), num_splits,
        p.sm_scale * LOG2E, *scale_vals,
    )
    stream = torch.cuda.current_stream(q.device).cuda_stream
    code = _FP8_CODE if p.fp8 else _DTYPE_CODE[q.dtype]
    with torch.cuda.device(q.device):
        _check(_library().kvb_cluster_decode(ctypes.byref(args), code, stream), "launch")
    if cuda_build.LAUNCH_HOOKS:
        describe = functools.partial(kernel_resources, q.device, code, p.q_heads // p.kv_heads)
        for hook in cuda_build.LAUNCH_HOOKS:
            hook(describe)
    return p.finish(out)
