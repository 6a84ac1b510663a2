"""fp8 KV gather with dequant/requant for sparse prefill (DSA): three Triton rows + torch.

Op: ``kv_gather_fp8(kv_cache, page_table_flat, *, extra_rows, out=None) -> [L + extra_rows, 576]``

- ``kv_cache``: [pool_tokens, 1, 656] float8_e4m3fn (or the same bytes as uint8), contiguous;
  each 656-byte row holds 512
  e4m3 "nope" bytes, 4 fp32 group scales (one per 128 nope values) and 64 bf16 "rope" values
  (kvbench.fixtures.gather_pool documents the layout and builds realistic pools).
- ``page_table_flat``: int32 [L] contiguous, pool rows to gather, in output order. Values must
  lie in [0, pool_tokens); validated on the host for CPU tensors, and on CUDA on the device in
  safe mode (``KVBENCH_CHECK=1``, docs/safety.md: an out-of-range id reads row 0, its output
  row is poisoned with NaN codes and a later call or ``raise_pending()`` raises); the fast path
  on CUDA validates no value.
- ``extra_rows`` >= 0: zero "landing pad" rows appended after the L gathered rows.

Exact definition (what every row computes, bit for bit). For gathered row i, token t:
  out[i, 128*g + j] = E(fp32(nope[t, 128*g + j]) (x) scale[t, g])   for g < 4, j < 128
  out[i, 512 + j]   = E(fp32(rope[t, j]))                           for j < 64
  out[L + p, :]     = 0x00 bytes                                    for p < extra_rows
where (x) is the IEEE fp32 product (round to nearest even), fp32() widening is exact, and E
saturates to +-448 then rounds to the nearest e4m3fn value, ties to even. This is the gather's
dequant (fp8 times group scale) then requant with the identity scale 1.0: dividing by 1.0 is
exact, so the requant is E alone. The legacy and vectorized kernels must agree ``torch.equal``
on uint8 views, so this one definition serves all of them; here every row is checked the same way
against kvbench.ops.kv_gather_fp8.kv_gather_fp8_ref (plain byte/float math, no shared code).

Rows:
- ``gather_fp8_legacy``: fresh ``torch.zeros`` destination, then one program per (token,
  slice): four 128-value nope slices and the 64-value rope slice, 4 warps (about one byte per
  thread: the baseline the vectorized kernel replaced).
- ``gather_fp8_vectorized``: ``torch.empty`` destination, TOKENS_PER_PROG rows per program,
  pad rows zero-filled inside the same kernel (masked loads read nothing for them), whole
  512-byte nope blocks per row so each thread moves contiguous 16-byte vectors.
- ``gather_fp8_cached``: the vectorized kernel writing into a persistent grow-only buffer (one
  per device, ``clear_gather_cache()`` frees it); returns a view ``[:total]`` that the next
  call overwrites. The kernel writes every row including the pads, so bytes left by an
  earlier, larger call can never show through.
- ``gather_fp8_torch``: index_select + torch float math, any device.
With ``out=`` every row writes into ``out`` and returns it (legacy zero-fills it first).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kvbench.kernels._fp8 import FP8_MAX, bf16_bits_to_f32, encode_e4m3, is_interpreted
from kvbench.kernels._validate import (
    device_validation,
    validate_contiguous,
    validate_dtype,
    validate_index_range,
    validate_ndim,
    validate_no_overlap,
    validate_same_device,
    validate_shape,
    values_validated,
)

ROW_BYTES = 656
OUT_DIM = 576
_NOPE, _GROUP, _ROPE = 512, 128, 64
_SCALE_F32 = 512 // 4  # scale index of group 0 in a row viewed as 164 fp32
_ROPE_BF16 = 528 // 2  # rope index in a row viewed as 328 bf16
#: rows per program of the vectorized kernel
TOKENS_PER_PROG = 8
# 8 rows x 512 nope bytes over 128 threads: 32 contiguous bytes (two 16 B vectors) each.
_VEC_NUM_WARPS = 4
_LEGACY_NUM_WARPS = 4

_BUFFERS: dict[torch.device, torch.Tensor] = {}


#: An e4m3 NaN code: safe mode writes it over the output rows of out-of-range page ids.
_POISON_CODE = 0x7F


def _validate(kv_cache, page_table_flat, extra_rows, out):
    """Host validation for every row; returns (total output rows, page table to launch with,
    the [L] bool rows to poison or None): in safe mode on CUDA the table is a copy whose
    out-of-range ids read row 0."""
    validate_dtype("kv_cache", kv_cache, (torch.float8_e4m3fn, torch.uint8))
    validate_shape("kv_cache", kv_cache, (None, 1, ROW_BYTES))
    validate_contiguous("kv_cache", kv_cache)
    if kv_cache.data_ptr() % 16:
        raise ValueError("kv_cache must start 16-byte aligned (rows are read as fp32/bf16 too)")
    validate_dtype("page_table_flat", page_table_flat, (torch.int32,))
    validate_ndim("page_table_flat", page_table_flat, 1, "[num_tokens] int32 pool rows")
    if not page_table_flat.is_contiguous():
        raise ValueError("page_table_flat must be contiguous")
    if isinstance(extra_rows, bool) or not isinstance(extra_rows, int) or extra_rows < 0:
        raise ValueError(f"extra_rows must be an int >= 0, got {extra_rows!r}")
    device = validate_same_device(kv_cache=kv_cache, page_table_flat=page_table_flat, out=out)
    what = f"rows of the {kv_cache.shape[0]}-row kv_cache"
    validation = device_validation(device)
    poison = None
    if values_validated(device):
        validate_index_range("page_table_flat values", page_table_flat, kv_cache.shape[0],
                             what=what)
    elif validation is not None:
        validated = validation.bounds("page_table_flat values", page_table_flat, 0,
                                      kv_cache.shape[0], what=what, replacement=0)
        poison = validated != page_table_flat
        page_table_flat = validated
        validation.submit()
    total = page_table_flat.shape[0] + extra_rows
    if out is not None:
        validate_dtype("out", out, (torch.float8_e4m3fn,))
        validate_shape("out", out, (total, OUT_DIM))
        validate_contiguous("out", out)
        validate_no_overlap("out", out, "kv_cache", kv_cache,
                            "pass an out buffer that is not part of the cache")
    return total, page_table_flat, poison


def _finish(out: torch.Tensor, poison: torch.Tensor | None) -> torch.Tensor:
    """The output as returned: NaN codes on the rows whose page id safe mode caught."""
    if poison is not None and poison.numel():
        rows = out.view(torch.uint8)[: poison.shape[0]]
        rows.masked_fill_(poison[:, None], _POISON_CODE)
    return out


def _views(kv_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The same rows as bytes, fp32 (scales) and bf16 (rope): typed pointers, no copies."""
    flat = kv_cache.view(torch.uint8).reshape(-1)
    return flat, flat.view(torch.float32), flat.view(torch.bfloat16)


@triton.jit
def _gather_legacy_kernel(kv_u8, kv_f32, kv_bf16, pt_ptr, out_ptr, SOFT_FP8: tl.constexpr):
    """Program (token i, slice s): s < 4 is nope group s (128 values), s == 4 is rope (64)."""
    i = tl.program_id(0)
    s = tl.program_id(1)
    tok = tl.load(pt_ptr + i).to(tl.int64)
    dst = out_ptr + i.to(tl.int64) * 576
    if s < 4:
        c = tl.arange(0, 128)
        b = tl.load(kv_u8 + tok * 656 + s * 128 + c)
        sc = tl.load(kv_f32 + tok * 164 + 128 + s)
        y = b.to(tl.float8e4nv, bitcast=True).to(tl.float32) * sc
        tl.store(dst + s * 128 + c, encode_e4m3(y, SOFT_FP8))
    else:
        # Names distinct from the other branch: triton 3.6 rejects a name bound in both arms
        # of an `if` with different types ([128] vs [64]), which 3.9 accepts.
        c_rope = tl.arange(0, 64)
        rope = tl.load(kv_bf16 + tok * 328 + 264 + c_rope)
        tl.store(dst + 512 + c_rope, encode_e4m3(bf16_bits_to_f32(rope), SOFT_FP8))


@triton.jit
def _gather_vec_kernel(
    kv_u8, kv_f32, kv_bf16, pt_ptr, out_ptr, kv_len, total,
    TPP: tl.constexpr, SOFT_FP8: tl.constexpr,
):
    """TPP output rows per program; a row's 512 nope bytes as one [4 groups, 128] tile.

    Every part of a row starts 16-byte aligned and the row strides (656, 576 bytes) are
    multiples of 16, which Triton's alignment analysis sees, so accesses are 16-byte vectors.
    Rows in [kv_len, total) are pads: their loads are masked off and return zeros, so the
    same arithmetic writes 0x00 bytes (0 * 0 = +0 encodes as 0x00); no separate fill pass.
    """
    r = tl.program_id(0) * TPP + tl.arange(0, TPP)
    real = r < kv_len
    live = r < total
    tok = tl.load(pt_ptr + r, mask=real, other=0).to(tl.int64)
    dst = r.to(tl.int64) * 576
    g = tl.arange(0, 4)
    col = g[:, None] * 128 + tl.arange(0, 128)[None, :]  # [4, 128] nope byte offsets
    m3 = real[:, None, None]
    b = tl.load(kv_u8 + tok[:, None, None] * 656 + col[None, :, :], mask=m3, other=0)
    sc = tl.load(kv_f32 + tok[:, None] * 164 + 128 + g[None, :], mask=real[:, None], other=0.0)
    y = b.to(tl.float8e4nv, bitcast=True).to(tl.float32) * sc[:, :, None]
    tl.store(out_ptr + dst[:, None, None] + col[None, :, :], encode_e4m3(y, SOFT_FP8),
             mask=live[:, None, None])
    cr = tl.arange(0, 64)[None, :]
    rope = tl.load(kv_bf16 + tok[:, None] * 328 + 264 + cr, mask=real[:, None], other=0.0)
    tl.store(out_ptr + dst[:, None] + 512 + cr, encode_e4m3(bf16_bits_to_f32(rope), SOFT_FP8),
             mask=live[:, None])


def _launch_legacy(kv_cache, page_table_flat, out, soft_fp8: bool) -> None:
    n = page_table_flat.shape[0]
    if n == 0:
        return
    u8, f32, bf16 = _views(kv_cache)
    _gather_legacy_kernel[(n, 5)](
        u8, f32, bf16, page_table_flat, out.view(torch.uint8),
        SOFT_FP8=soft_fp8, num_warps=_LEGACY_NUM_WARPS,
    )


def _launch_vectorized(kv_cache, page_table_flat, out, soft_fp8: bool) -> None:
    total = out.shape[0]
    if total == 0:
        return
    u8, f32, bf16 = _views(kv_cache)
    _gather_vec_kernel[(triton.cdiv(total, TOKENS_PER_PROG),)](
        u8, f32, bf16, page_table_flat, out.view(torch.uint8),
        page_table_flat.shape[0], total,
        TPP=TOKENS_PER_PROG, SOFT_FP8=soft_fp8, num_warps=_VEC_NUM_WARPS,
    )


def gather_fp8_legacy(kv_cache, page_table_flat, *, extra_rows, out=None) -> torch.Tensor:
    """Baseline: zero the whole destination, then one program per (token, slice)."""
    total, page_table_flat, poison = _validate(kv_cache, page_table_flat, extra_rows, out)
    if out is None:
        out = torch.zeros((total, OUT_DIM), dtype=torch.float8_e4m3fn, device=kv_cache.device)
    else:
        out.view(torch.uint8).zero_()
    _launch_legacy(kv_cache, page_table_flat, out, is_interpreted(_gather_legacy_kernel))
    return _finish(out, poison)


def gather_fp8_vectorized(kv_cache, page_table_flat, *, extra_rows, out=None) -> torch.Tensor:
    """No pre-zeroing: ``torch.empty`` destination, pads zero-filled in the gather kernel."""
    total, page_table_flat, poison = _validate(kv_cache, page_table_flat, extra_rows, out)
    if out is None:
        out = torch.empty((total, OUT_DIM), dtype=torch.float8_e4m3fn, device=kv_cache.device)
    _launch_vectorized(kv_cache, page_table_flat, out, is_interpreted(_gather_vec_kernel))
    return _finish(out, poison)


def gather_fp8_cached(kv_cache, page_table_flat, *, extra_rows, out=None) -> torch.Tensor:
    """Vectorized kernel into a persistent grow-only buffer (the engine's production path).

    Returns ``buffer[:total]``, a view that the next call on the same device overwrites:
    callers consume it before gathering again, as the engine does. The buffer only grows
    (to the largest total seen); ``clear_gather_cache()`` releases it.
    """
    total, page_table_flat, poison = _validate(kv_cache, page_table_flat, extra_rows, out)
    if out is None:
        dev = kv_cache.device
        buf = _BUFFERS.get(dev)
        if buf is None or buf.shape[0] < total:
            buf = torch.empty((total, OUT_DIM), dtype=torch.float8_e4m3fn, device=dev)
            _BUFFERS[dev] = buf
        out = buf[:total]
    _launch_vectorized(kv_cache, page_table_flat, out, is_interpreted(_gather_vec_kernel))
    return _finish(out, poison)


def clear_gather_cache() -> None:
    """Release the persistent destination buffers of ``gather_fp8_cached`` (all devices)."""
    _BUFFERS.clear()


def gather_fp8_torch(kv_cache, page_table_flat, *, extra_rows, out=None) -> torch.Tensor:
    """Torch row (any device): index_select the rows, dequant in fp32, cast with saturation."""
    total, page_table_flat, poison = _validate(kv_cache, page_table_flat, extra_rows, out)
    n = page_table_flat.shape[0]
    if out is None:
        out = torch.empty((total, OUT_DIM), dtype=torch.float8_e4m3fn, device=kv_cache.device)
    dst = out.view(torch.uint8)
    dst[n:].zero_()
    if n == 0:
        return out
    rows = kv_cache.view(torch.uint8).reshape(-1, ROW_BYTES).index_select(
        0, page_table_flat.to(torch.int64)
    )
    nope = rows[:, :_NOPE].view(torch.float8_e4m3fn).to(torch.float32).view(n, 4, _GROUP)
    scales = rows[:, _NOPE : _NOPE + 16].contiguous().view(torch.float32)
    deq = (nope * scales[:, :, None]).clamp_(-FP8_MAX, FP8_MAX).view(n, _NOPE)
    dst[:n, :_NOPE] = deq.to(torch.float8_e4m3fn).view(torch.uint8)
    rope = rows[:, _NOPE + 16 :].contiguous().view(torch.bfloat16).to(torch.float32)
    dst[:n, _NOPE:] = rope.clamp_(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).view(torch.uint8)
    return _finish(out, poison)
