"""KV write (scatter): put N new K/V rows into the paged cache at their slots.

Op: ``kv_write(k, v, k_cache, v_cache, slot_mapping, *, k_scale=None, v_scale=None) -> None``

- ``k``, ``v``: [N, Hkv, D] fp16/bf16 new rows (strided views are fine; last dim stride 1).
- ``k_cache``, ``v_cache``: [num_pages, page_size, Hkv, D], usually the two strided halves of
  one combined per-layer buffer [num_pages, 2, page_size, Hkv, D] (kvbench.fixtures.pool). The
  kernels take the views' strides and never ``.contiguous()`` a cache: that copy would write into a
  temporary and lose the update (and, timed, it would measure a copy instead of the kernel).
  ``k_cache`` is token-major (stride 1 in head_dim); ``v_cache`` token-major or dim-major
  (stride 1 in page_size: the pool's ``v_dim_major`` storage, which the fp8 decode reads with
  vector loads, docs/decisions.md). A dim-major V tile is stored with a warp's
  threads along tokens, so consecutive slots of one page are written side by side.
- ``slot_mapping``: int64 [N]; token i goes to ``page = slot // page_size``,
  ``offset = slot % page_size``. A **negative slot means "skip this token"**: engines pad a
  batch to a captured size (CUDA graphs) and mark the padding with -1 (vLLM's convention).
  Any stride is read as given. Slots must be distinct and < num_pages * page_size. The
  range is validated on the host for CPU tensors, and on CUDA on the device in safe mode
  (``KVBENCH_CHECK=1``, docs/safety.md: an out-of-range slot becomes a skip and the call's
  ValueError is raised later, without a host sync); the fast path on CUDA validates no value.
  Distinctness is not validated.
- ``k_cache`` and ``v_cache`` must not share memory with each other or themselves (validated
  from their strides on every call).
- fp8 caches (uint8 containers of e4m3fn bytes, or float8_e4m3fn tensors) quantize on write
  with the caller's per-tensor fp32 scales: ``byte = e4m3_rne(clamp(fp32(x) / scale, +-448))``.
  The quotient is the IEEE fp32 quotient (``tl.math.div_rn`` in Triton, because Triton's ``/``
  is an approximate division on the GPU), rounded to nearest-even and saturated, which is what
  ``(x.float() / scale).clamp(-448, 448).to(torch.float8_e4m3fn)`` computes. Python-float
  scales are rounded to fp32 first. fp16/bf16 caches are exact copies and take no scales.

Rows: ``kv_write_triton`` (one Triton kernel for prefill and decode shapes) and
``kv_write_torch`` (index_copy_ / index_put_, any device). Both are bit-exact to
``kvbench.ops.kv_write.kv_write_ref``: tolerances are zero for every dtype
(kvbench.ops.kv_write.RTOL/ATOL).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kvbench.core.dtypes import FP8_CONTAINERS, FROM_TORCH
from kvbench.kernels._device import sm_count as _sm_count
from kvbench.kernels._fp8 import FP8_MAX, bf16_bits_to_f32, encode_e4m3, is_interpreted
from kvbench.kernels._validate import (
    DeviceValidation,
    device_validation,
    v_cache_dim_major,
    validate_cache_views,
    validate_dtype,
    validate_index_range,
    validate_last_dim_contiguous,
    validate_ndim,
    validate_same_device,
    validate_scale,
    validate_scale_value,
    validate_shape,
    values_validated,
)

# Exact copies for fp16/bf16; fp8 bytes equal torch's RNE quantization of the same input
# (the soft encoder makes this hold under the interpreter too, see kernels/_fp8.py).
_IN_DTYPES = (torch.float16, torch.bfloat16)
_CACHE_DTYPES = tuple(FROM_TORCH)

# Elements one program moves per tensor (K or V). 4096 fp16 elements = 8 KiB in and out per
# tensor: large enough to amortize the slot loads, small enough that a 16k-token prefill at
# 8x128 still launches thousands of programs.
_TILE_ELEMS = 4096
_HEAD_TILE_ELEMS = 1024
_NUM_WARPS = 4
# Decode shapes (N <= 64) would get only N / 4 programs from the tile above, each thread
# running a serial chain of 64 fp8 quantizations (an IEEE division each); spreading the
# same work over one program per SM cut the fp8 decode write's device time by about a third
# (docs/decisions.md). So a small grid shrinks its tile (tokens first, then heads)
# until it has one program per SM, and a small tile runs on fewer warps (one warp per 256
# elements, 8 fp16 = one 16-byte vector per thread) instead of leaving threads idle.
_ELEMS_PER_WARP = 32 * 8


def _scale_tensor(name: str, scale: object, device: torch.device,
                  validation: DeviceValidation | None) -> torch.Tensor:
    """Validate a caller-side scale and return it as a 1-element fp32 tensor on ``device``.

    A python float costs a host->device copy per call; production callers pass tensors.
    """
    validate_scale(name, scale, device)
    validate_scale_value(name, scale, validation)
    if isinstance(scale, torch.Tensor):
        return scale.reshape(1)
    return torch.tensor([float(scale)], dtype=torch.float32, device=device)  # type: ignore[arg-type]


def _validate(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale):
    """Host validation shared by both rows.

    Returns (is_fp8, k_scale_t, v_scale_t, v_dim_major, slots): ``slots`` is slot_mapping, or
    in safe mode on CUDA a copy whose out-of-range slots are skips (kernels/_validate.py).
    """
    validate_ndim("k", k, 3, "[N, kv_heads, head_dim]")
    validate_ndim("v", v, 3, "[N, kv_heads, head_dim]")
    validate_dtype("k", k, _IN_DTYPES)
    validate_dtype("v", v, _IN_DTYPES)
    if v.shape != k.shape or v.dtype != k.dtype:
        raise ValueError(
            f"v must match k in shape and dtype: k {tuple(k.shape)} {k.dtype}, "
            f"v {tuple(v.shape)} {v.dtype}"
        )
    validate_ndim("k_cache", k_cache, 4, "[num_pages, page_size, kv_heads, head_dim]")
    validate_dtype("k_cache", k_cache, _CACHE_DTYPES)
    validate_shape("v_cache", v_cache, tuple(k_cache.shape))
    if v_cache.dtype != k_cache.dtype:
        raise ValueError(f"v_cache dtype {v_cache.dtype} must equal k_cache dtype {k_cache.dtype}")
    n, heads, dim = k.shape
    if (k_cache.shape[2], k_cache.shape[3]) != (heads, dim):
        raise ValueError(
            f"k has kv_heads={heads}, head_dim={dim} but k_cache holds "
            f"kv_heads={k_cache.shape[2]}, head_dim={k_cache.shape[3]}"
        )
    validate_dtype("slot_mapping", slot_mapping, (torch.int64,))
    validate_shape("slot_mapping", slot_mapping, (n,))
    for name, t in (("k", k), ("v", v), ("k_cache", k_cache)):
        validate_last_dim_contiguous(name, t)
    v_dim_major = v_cache_dim_major(v_cache)  # token- or dim-major; else raises naming both
    if k_cache.numel() and k_cache.data_ptr() == v_cache.data_ptr():
        raise ValueError("k_cache and v_cache are the same memory; pass the K and V views")
    validate_cache_views(k_cache, v_cache)
    device = validate_same_device(
        k=k, v=v, k_cache=k_cache, v_cache=v_cache, slot_mapping=slot_mapping
    )
    pages, page_size = k_cache.shape[0], k_cache.shape[1]
    what = f"slot = page * page_size + offset, {pages} pages of {page_size}"
    validation = device_validation(device)
    if values_validated(device):
        validate_index_range("slot_mapping values", slot_mapping, pages * page_size,
                             skip_negative=True, what=what)
    elif validation is not None:
        slot_mapping = validation.bounds("slot_mapping values", slot_mapping, 0, pages * page_size,
                                         what=what, replacement=-1, skip_negative=True)
    is_fp8 = k_cache.dtype in FP8_CONTAINERS
    if not is_fp8:
        if k.dtype != k_cache.dtype:
            raise ValueError(
                f"k dtype {k.dtype} must equal the {k_cache.dtype} cache dtype (an fp16/bf16 "
                "write is an exact copy; only fp8 caches convert)"
            )
        if k_scale is not None or v_scale is not None:
            raise ValueError("k_scale/v_scale apply to fp8 caches only; pass None for "
                             f"a {k_cache.dtype} cache")
        if validation is not None:
            validation.submit()
        return False, None, None, v_dim_major, slot_mapping
    if k_scale is None or v_scale is None:
        raise ValueError("fp8 caches need k_scale and v_scale (python floats or 1-element "
                         "float32 tensors on the cache's device)")
    ks = _scale_tensor("k_scale", k_scale, device, validation)
    vs = _scale_tensor("v_scale", v_scale, device, validation)
    if validation is not None:
        validation.submit()
    return True, ks, vs, v_dim_major, slot_mapping


@triton.jit
def _kv_write_kernel(
    k_ptr, v_ptr, kc_ptr, vc_ptr, slot_ptr, ks_ptr, vs_ptr,
    n_tokens, num_heads, head_dim, s_slot,
    s_kt, s_kh, s_vt, s_vh,
    s_kcp, s_kco, s_kch, s_vcp, s_vco, s_vch, s_vcd,
    PAGE_SIZE: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
    FP8: tl.constexpr, SOFT_FP8: tl.constexpr, IN_BF16: tl.constexpr, V_DMAJOR: tl.constexpr,
):
    """One program copies a [BLOCK_T tokens, BLOCK_H heads, D] tile of K and of V.

    The innermost axis is contiguous in the sources and in K's destination (stride 1 is
    validated on the host and specialized by Triton), so those vectorize to 16-byte accesses;
    V's destination takes its head_dim stride ``s_vcd`` (1, specialized the same way, for
    token-major V; page_size for a dim-major V page).
    Destination offsets are computed from the slot with the cache views' own strides: in the
    combined buffer the page stride covers both halves, which is what puts K and V apart.
    V_DMAJOR: V is stored as a [heads, D, tokens] tile whose destinations are built in that
    order, so the compiler runs a warp's threads along tokens: the consecutive slots of a
    prefill land side by side in a dim-major page (one 32-byte segment per 16 slots) instead
    of one element per 32 bytes.
    """
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    d = tl.arange(0, BLOCK_D)
    t_ok = t < n_tokens
    slot = tl.load(slot_ptr + t.to(tl.int64) * s_slot, mask=t_ok, other=-1)
    row_ok = t_ok & (slot >= 0)
    page = slot // PAGE_SIZE
    off = slot % PAGE_SIZE
    mask = row_ok[:, None, None] & (h < num_heads)[None, :, None] & (d < head_dim)[None, None, :]
    t64 = t.to(tl.int64)[:, None, None]
    h3 = h[None, :, None]
    d3 = d[None, None, :]
    src_k = t64 * s_kt + h3 * s_kh + d3
    src_v = t64 * s_vt + h3 * s_vh + d3
    dst_k = page[:, None, None] * s_kcp + off[:, None, None] * s_kco + h3 * s_kch + d3
    if V_DMAJOR:
        dst_v = (page[None, None, :] * s_vcp + off[None, None, :] * s_vco
                 + h[:, None, None] * s_vch + d[None, :, None] * s_vcd)
        mask_v = tl.permute(mask, (1, 2, 0))
    else:
        dst_v = page[:, None, None] * s_vcp + off[:, None, None] * s_vco + h3 * s_vch + d3 * s_vcd
        mask_v = mask
    kx = tl.load(k_ptr + src_k, mask=mask, other=0.0)
    vx = tl.load(v_ptr + src_v, mask=mask, other=0.0)
    if FP8:
        ks = tl.load(ks_ptr)
        vs = tl.load(vs_ptr)
        if IN_BF16:
            # bit shift, exact for bf16 subnormals too (the interpreter's cast flushes them)
            kf = bf16_bits_to_f32(kx)
            vf = bf16_bits_to_f32(vx)
        else:
            kf = kx.to(tl.float32)
            vf = vx.to(tl.float32)
        kq = tl.math.div_rn(kf, tl.zeros_like(kf) + ks)
        vq = tl.math.div_rn(vf, tl.zeros_like(vf) + vs)
        tl.store(kc_ptr + dst_k, encode_e4m3(kq, SOFT_FP8), mask=mask)
        v_out = encode_e4m3(vq, SOFT_FP8)
    else:
        tl.store(kc_ptr + dst_k, kx, mask=mask)
        v_out = vx
    if V_DMAJOR:
        v_out = tl.permute(v_out, (1, 2, 0))
        _store_v_dim_major(vc_ptr, v_out, dst_v, mask_v, slot, row_ok, h, d, num_heads, head_dim,
                           s_vcp, s_vco, s_vch, s_vcd, PAGE_SIZE, BLOCK_T)
    else:
        tl.store(vc_ptr + dst_v, v_out, mask=mask_v)


@triton.jit
def _store_v_dim_major(vc_ptr, v_out, dst_v, mask_v, slot, row_ok, h, d, num_heads, head_dim,
                       s_vcp, s_vco, s_vch, s_vcd, PAGE_SIZE: tl.constexpr, BLOCK_T: tl.constexpr):
    """Store a [heads, D, tokens] V tile into dim-major pages.

    When the tile's tokens are one run of slots in order, starting at a multiple of BLOCK_T
    inside a page (a prefill writing a sequence's pages: checked here, per tile), the
    destinations are rebuilt from an arange, which the compiler knows to be contiguous, and
    each (head, dim) row of the page is written in 16-byte vectors. Any other tile (scattered
    decode slots, skipped tokens, a run across pages) goes through ``dst_v`` element by
    element, a warp's threads along tokens.
    """
    lane = tl.arange(0, BLOCK_T)
    base = tl.sum(tl.where(lane == 0, slot, 0), axis=0)
    in_order = tl.sum(((slot == base + lane) & row_ok).to(tl.int32), axis=0) == BLOCK_T
    if BLOCK_T <= PAGE_SIZE and in_order and base % BLOCK_T == 0:
        start = tl.multiple_of(base % PAGE_SIZE, BLOCK_T)  # true: checked just above
        run = ((base // PAGE_SIZE) * s_vcp + (start + lane)[None, None, :] * s_vco
               + h[:, None, None] * s_vch + d[None, :, None] * s_vcd)
        keep = (h < num_heads)[:, None, None] & (d < head_dim)[None, :, None]
        tl.store(vc_ptr + run, v_out, mask=keep & (lane >= 0)[None, None, :])
    else:
        tl.store(vc_ptr + dst_v, v_out, mask=mask_v)


def _tiles(
    n: int, heads: int, dim: int, min_programs: int, min_tokens: int = 1
) -> tuple[int, int, int, int]:
    """(BLOCK_T, BLOCK_H, BLOCK_D, num_warps): the bandwidth tile, shrunk for small grids.

    ``min_tokens``: tokens the tile should hold before heads (a dim-major V page's slots, so
    one store covers a page's worth of consecutive slots); the grid shrink still applies.
    """
    block_d = triton.next_power_of_2(dim)
    block_h = min(triton.next_power_of_2(heads), max(1, _HEAD_TILE_ELEMS // block_d))
    if min_tokens > 1:
        block_h = min(block_h,
                      max(1, _TILE_ELEMS // (block_d * triton.next_power_of_2(min_tokens))))
    block_t = max(1, min(triton.next_power_of_2(max(n, 1)), _TILE_ELEMS // (block_h * block_d)))

    def programs() -> int:
        return triton.cdiv(n, block_t) * triton.cdiv(heads, block_h)

    while programs() < min_programs and block_t > 1:
        block_t //= 2
    while programs() < min_programs and block_h > 1:
        block_h //= 2
    elems = block_t * block_h * block_d
    num_warps = max(1, min(_NUM_WARPS, elems // _ELEMS_PER_WARP))
    return block_t, block_h, block_d, num_warps


def _launch_triton(k, v, k_cache, v_cache, slot_mapping, ks, vs, is_fp8, soft_fp8: bool,
                   v_dim_major: bool = False):
    n, heads, dim = k.shape
    if n == 0:
        return
    block_t, block_h, block_d, num_warps = _tiles(
        n, heads, dim, _sm_count(k.device), min_tokens=k_cache.shape[1] if v_dim_major else 1
    )
    if is_fp8:
        # store bytes through uint8 views: the kernel writes codes, never fp8 arithmetic
        kc, vc = k_cache.view(torch.uint8), v_cache.view(torch.uint8)
    else:
        kc, vc = k_cache, v_cache
        ks = vs = slot_mapping  # unused pointer arguments when FP8 is False
    grid = (triton.cdiv(n, block_t), triton.cdiv(heads, block_h))
    _kv_write_kernel[grid](
        k, v, kc, vc, slot_mapping, ks, vs,
        n, heads, dim, slot_mapping.stride(0),
        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        kc.stride(0), kc.stride(1), kc.stride(2),
        vc.stride(0), vc.stride(1), vc.stride(2), vc.stride(3),
        PAGE_SIZE=k_cache.shape[1],
        BLOCK_T=block_t, BLOCK_H=block_h, BLOCK_D=block_d,
        FP8=is_fp8, SOFT_FP8=soft_fp8, IN_BF16=k.dtype == torch.bfloat16,
        V_DMAJOR=v_dim_major,
        num_warps=num_warps,
    )


def kv_write_triton(k, v, k_cache, v_cache, slot_mapping, *, k_scale=None, v_scale=None) -> None:
    """Scatter with one Triton kernel (prefill and decode shapes, fp16/bf16/fp8, strided caches).

    Grid: (token blocks, head blocks). Under the Triton interpreter fp8 codes come from the
    integer RNE encoder (kernels/_fp8.py) because the interpreter's own cast is wrong.
    """
    is_fp8, ks, vs, v_dim_major, slot_mapping = _validate(k, v, k_cache, v_cache, slot_mapping,
                                                          k_scale, v_scale)
    _launch_triton(k, v, k_cache, v_cache, slot_mapping, ks, vs, is_fp8,
                   soft_fp8=is_interpreted(_kv_write_kernel), v_dim_major=v_dim_major)


def _quantize_torch(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """fp8 bytes of ``x / scale`` in torch: fp32 IEEE quotient, saturate, RNE cast."""
    q = (x.to(torch.float32) / scale).clamp_(-FP8_MAX, FP8_MAX)
    return q.to(torch.float8_e4m3fn).view(torch.uint8)


def _flat_rows(cache: torch.Tensor) -> torch.Tensor | None:
    """[num_pages * page_size, H, D] view of a cache when its pages are back to back, else None.

    True for split storage; false for a half of the combined buffer, whose page stride spans
    both halves (then the caller indexes (page, offset) pairs instead).
    """
    pages, page_size, heads, dim = cache.shape
    if cache.stride(0) != page_size * cache.stride(1):
        return None
    return cache.view(pages * page_size, heads, dim)


def kv_write_torch(k, v, k_cache, v_cache, slot_mapping, *, k_scale=None, v_scale=None) -> None:
    """Scatter with torch indexing (any device): the engine's fallback row.

    Where the cache rows are back to back (split storage) it is ``index_copy_`` on a flattened
    [slots, H, D] view; on a combined-buffer half it is ``index_put_`` on (page, offset)
    pairs, because no view flattens pages whose stride spans the K and V halves. Dropping the
    negative (padding) slots uses ``nonzero``, which waits for the device once per call; the
    Triton row masks them in-kernel instead.
    """
    is_fp8, ks, vs, _, slot_mapping = _validate(k, v, k_cache, v_cache, slot_mapping, k_scale,
                                                 v_scale)
    keep = torch.nonzero(slot_mapping >= 0).squeeze(1)
    if keep.numel() == 0:
        return
    slots = slot_mapping.index_select(0, keep)
    rows_k, rows_v = k.index_select(0, keep), v.index_select(0, keep)
    if is_fp8:
        rows_k, rows_v = _quantize_torch(rows_k, ks), _quantize_torch(rows_v, vs)
        k_cache, v_cache = k_cache.view(torch.uint8), v_cache.view(torch.uint8)
    page_size = k_cache.shape[1]
    for cache, rows in ((k_cache, rows_k), (v_cache, rows_v)):
        flat = _flat_rows(cache)
        if flat is not None:
            flat.index_copy_(0, slots, rows)
        else:
            cache.index_put_((slots // page_size, slots % page_size), rows)
