"""Paged decode attention: Triton single-pass, Triton split-KV (+reduce), torch gather + SDPA.

One decode step: each sequence ``b`` has one query token ``q[b]`` of ``Hq`` heads that attends
to its ``seq_lens[b]`` cached tokens, found page by page through ``block_table[b]``.

Design (why it looks like this):

* GQA-aware: one program owns one (sequence, kv head) and all ``Hq // Hkv`` query heads that
  share it, as a ``[GROUP_PAD, D]`` tile (padded to 16 rows, the smallest ``tl.dot`` M) against
  ``[BLOCK_N, D]`` K/V tiles. Every KV byte is read from memory once per (sequence, kv head);
  decode is bandwidth-bound, so the padded MMA rows cost nothing that matters.
* ``BLOCK_N`` tokens per iteration regardless of the page size (several pages per iteration at
  page 16): one block-table entry is looked up per token row, which keeps any power-of-two page
  size correct and puts tens of KiB in flight per iteration.
* Online softmax in fp32 in the log2 domain (``exp2``); fp8 bytes are widened to q's dtype
  (a bitcast and a float convert), with ``k_scale`` folded into the score scale and
  ``v_scale`` into the output, never multiplied per element.
* Split-KV (flash-decode) for small batches: grid (B, Hkv, splits), each split a contiguous
  token range; partial outputs and log-sum-exps go to an fp32 scratch and a second kernel
  combines them. ``choose_num_splits`` returns 1 when B x Hkv already fills the machine, and
  then the split row launches the single-pass kernel: short contexts pay no split cost.
* Caches may be strided views (the pool's combined K/V buffer): strides are kernel arguments,
  a cache is never ``.contiguous()``-ed. Page offsets are computed in int64 (pools > 2 GiB).

Host validation runs before every launch and raises ValueError naming the argument. Value
validation (seq_lens range, the block-table entries seq_lens reaches, fp8 scales finite and > 0)
runs on the host for CPU tensors and, on CUDA, on the device in safe mode (``KVBENCH_CHECK=1``,
docs/safety.md: no host sync; out-of-range values are replaced by in-range ones, the
sequences they feed get NaN outputs, and a later call or ``raise_pending()`` raises). The fast
path on CUDA reads no value: a host read in the launcher would stall the launch queue inside
every timed region. Accepted inputs:
q fp16/bf16 ``[B, Hq, D]``; caches ``[num_pages, page_size, Hkv, D]`` of q's dtype, or fp8
e4m3 bytes (uint8 or float8_e4m3fn) with ``k_scale``/``v_scale``, K token-major (D contiguous), V
token-major or dim-major (page_size contiguous: ``_validate.v_cache_dim_major``); D in [16, 256] for
the Triton rows (tiles padded to a power of two, see _attend_tile), in [1, 1024] for the torch row
(common.HEAD_DIMS);
page_size a power of two; block_table int32 ``[B, >= ceil(max(seq_lens) / page_size)]``; seq_lens
int32 ``[B]`` with values >= 0 (a length-0 sequence gets a zero output, as padded batch slots do in
an engine).
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from kvbench.kernels import _validate as V
from kvbench.kernels._device import sm_count as _sm_count
from kvbench.kernels._fp8 import bf16_bits_to_f32
from kvbench.kernels.common import LOG2E, DecodeProblem, decode_row, used_entries

# Launch configuration per kernel and cache kind, chosen by a sweep on the target GPU (why:
# docs/decisions.md, "Launch config and split policy"). BLOCK_N is the KV tokens per loop
# iteration (>= 16 for tl.dot); "bt_ahead" loads each tile's block-table entries one
# iteration ahead (_attend_range), which lets the split kernels, whose few programs per SM
# must keep their own tiles in flight, double-buffer K/V with 3 stages; the single-pass
# kernels, at several programs per SM, gain nothing from it. "maxnreg" caps registers per
# thread: the fp8 single-pass kernel holds twice the resident programs under the cap and is
# faster for it despite some spills; the other entries were slower under every cap tried.
# "reduce": SPLIT_BLOCK split partials per combine iteration, enough to combine the auto split
# count of a batch-1 problem in one or two dependent rounds.
CONFIG: dict[str, dict[str, int | bool]] = {
    "single_pass": {"BLOCK_N": 128, "num_warps": 4, "num_stages": 2, "bt_ahead": False},
    "single_pass_fp8": {"BLOCK_N": 128, "num_warps": 4, "num_stages": 2, "bt_ahead": False,
                        "maxnreg": 128},
    "split_kv": {"BLOCK_N": 64, "num_warps": 4, "num_stages": 3, "bt_ahead": True},
    "split_kv_fp8": {"BLOCK_N": 128, "num_warps": 4, "num_stages": 3, "bt_ahead": True},
    "reduce": {"SPLIT_BLOCK": 32, "num_warps": 4},
}
#: The K/V tile width (BLOCK_D, head_dim padded to a power of two) CONFIG was swept at. A
#: wider tile keeps that sweep's tile bytes: BLOCK_N shrinks by the same factor
#: (launch_config), so the shared-memory ring of the pipelined K/V loads stays the size the
#: sweep chose, two to three programs per SM, where a 256-lane tile at the swept BLOCK_N
#: needs most of an SM's shared memory for one program.
SWEPT_BLOCK_D = 128
#: What a sweep at 256 lanes (head_dim 192 and 256) chose over the scaled CONFIG entry: the
#: 16-bit single-pass kernel at half the BLOCK_N pipelines its K/V loads one stage deeper for
#: about the same shared memory. Entries absent here (fp8, split) keep the scaled entry.
WIDE_TILE_CONFIG: dict[str, dict[str, int | bool]] = {
    "single_pass": {"num_stages": 3},
}


def launch_config(split: bool, fp8: bool, block_d: int) -> dict[str, int | bool]:
    """The CONFIG entry of the decode kernel a launch runs; for tiles wider than
    SWEPT_BLOCK_D, BLOCK_N scaled (never below 16, tl.dot's smallest K) and then
    WIDE_TILE_CONFIG's entry applied."""
    key = ("split_kv" if split else "single_pass") + ("_fp8" if fp8 else "")
    cfg = dict(CONFIG[key])
    if block_d > SWEPT_BLOCK_D:
        cfg["BLOCK_N"] = max(16, int(cfg["BLOCK_N"]) * SWEPT_BLOCK_D // block_d)
        cfg.update(WIDE_TILE_CONFIG.get(key, {}))
    return cfg


# Split policy (see choose_num_splits). Programs already >= FILL_WAVES x SMs: no split.
# Otherwise aim for TARGET_WAVES x SMs programs, each split >= MIN_TOKENS_PER_SPLIT tokens.
SPLIT_POLICY: dict[str, float] = {
    "FILL_WAVES": 1.0,
    "TARGET_WAVES": 2.0,
    "MIN_TOKENS_PER_SPLIT": 128,
    "MAX_SPLITS": 256,
}
# Triton 3.9's interpreter multiplies bf16 dot operands as their raw uint16 bit patterns
# (interpreter.create_dot; a 16x16 product came out 2.7e10 off), so under the interpreter only,
# bf16 operands are widened to fp32 (after the same bf16 rounding of p) before tl.dot. The
# compiled GPU path dots bf16 directly; the `gpu` tests cover it.

# fp8 e4m3 bytes become dot operands of q's dtype by a bitcast to tl.float8e4nv and a float
# convert (one packed cvt per two elements on sm_90), with k_scale folded into the score scale
# and v_scale into the output. The conversion is not what limits fp8 decode: an integer-only
# widening and a word-wise inline-asm widening were measured and neither was consistently
# faster (docs/decisions.md).

# The reduce kernel is launched with programmatic dependent launch on sm_90+ (_pdl_supported):
# the split kernel allows it at its start (griddepcontrol.launch_dependents), so the reduce's
# CTAs are launched while the split kernel runs and wait on griddepcontrol.wait, which returns
# once the split kernel has completed and its partials are visible. That hides the launch gap
# between the two kernels, which matters at small batch, where a call is a chain of latencies.


# ----------------------------------------------------------------------------- Triton kernels


@triton.jit
def _widen_e4m3(x, q):
    """e4m3 bytes (uint8) -> q's dtype, exactly (bitcast to float8e4nv, then convert)."""
    return x.to(tl.float8e4nv, bitcast=True).to(q.dtype)


@triton.jit
def _to_f32(x):
    """Interpreter-only dot operand widening (DOT_F32): bf16 by shifting its bits, because
    the interpreter's bf16 -> fp32 cast mangles bf16 subnormals (see kernels/_fp8.py)."""
    if x.dtype == tl.bfloat16:
        out = bf16_bits_to_f32(x)
    else:
        out = x.to(tl.float32)
    return out


@triton.jit
def _attend_tile(
    q,
    m_i,
    l_i,
    acc,
    start,
    hi,
    bt_row,
    k_head,
    v_head,
    scale,
    win_lo,
    cap_out,
    stride_kp,
    stride_ks,
    stride_vp,
    stride_vs,
    stride_vd,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    FP8: tl.constexpr,
    DOT_F32: tl.constexpr,
    V_DMAJOR: tl.constexpr,
    MASKED: tl.constexpr,
    V_PAGE_ROWS: tl.constexpr,
    WINDOW: tl.constexpr,
    SOFTCAP: tl.constexpr,
    page_in=None,
):
    """Online-softmax update of (m_i, l_i, acc) by tokens [start, start + BLOCK_N).

    MASKED: the tile ends past ``hi`` (the tail); unmasked tiles load whole rows, which is
    what lets a dim-major V tile load 16 bytes per access. V_PAGE_ROWS: V is dim-major with
    pages shorter than a tile, stored [HEAD_DIM][PAGE_SIZE] per (page, head): an unmasked
    tile loads each page as one contiguous row. ``page_in``: the tile's page per token (0 past
    ``hi``), loaded one tile ahead by ``_attend_range``; None: load it here.

    BLOCK_D: the tile's d extent, HEAD_DIM rounded up to a power of two (tl.arange and tl.dot
    need one). When it exceeds HEAD_DIM every K/V load is masked along d (other=0: padded
    lanes add 0 to the scores and give 0 output columns); when it equals HEAD_DIM no d mask is
    emitted (``PAD_D`` is a compile-time constant), so a power-of-two head dim compiles to the
    same kernel as before padding existed.
    """
    PAD_D: tl.constexpr = BLOCK_D != HEAD_DIM
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    tok = start + offs_n
    slot = tok % PAGE_SIZE
    if MASKED and WINDOW:
        mask_n = (tok < hi) & (tok >= win_lo)
    elif MASKED:
        mask_n = tok < hi
    if page_in is not None:
        page = page_in
    elif MASKED:
        page = tl.load(bt_row + tok // PAGE_SIZE, mask=mask_n, other=0).to(tl.int64)
    else:
        page = tl.load(bt_row + tok // PAGE_SIZE).to(tl.int64)
    k_ptrs = k_head + (page * stride_kp + slot * stride_ks)[:, None] + offs_d[None, :]
    if MASKED and PAD_D:
        k = tl.load(k_ptrs, mask=mask_n[:, None] & (offs_d < HEAD_DIM)[None, :], other=0)
    elif MASKED:
        k = tl.load(k_ptrs, mask=mask_n[:, None], other=0)
    elif PAD_D:
        k = tl.load(k_ptrs, mask=(offs_d < HEAD_DIM)[None, :], other=0)
    else:
        k = tl.load(k_ptrs)
    if FP8:
        k = _widen_e4m3(k, q)
    if DOT_F32:
        scores = tl.dot(q.to(tl.float32), tl.trans(_to_f32(k))) * scale
    else:
        scores = tl.dot(q, tl.trans(k)) * scale
    if SOFTCAP:
        # cap * tanh(x / cap) in the log2 domain: ``scale`` carries 2 * log2(e) / cap, so
        # exp2(scores) = e^(2x / cap) and tanh = 1 - 2 / (e^(2x / cap) + 1), which saturates to
        # +-1 (no inf / inf); ``cap_out`` = cap * log2(e). Below |x / cap| = 1/4 that
        # difference cancels (its error is fp32's epsilon over x / cap, multiplied back by the
        # cap), so there tanh is its Taylor series to the 7th power, whose first left-out term
        # is below fp32's epsilon at 1/4.
        y = scores * (0.5 / 1.4426950408889634)  # x / cap
        y2 = y * y
        series = y * (1.0 + y2 * (-1.0 / 3.0 + y2 * (2.0 / 15.0 + y2 * (-17.0 / 315.0))))
        closed = 1.0 - 2.0 / (tl.exp2(scores) + 1.0)
        scores = tl.where(tl.abs(y) < 0.25, series, closed) * cap_out
    if MASKED:
        scores = tl.where(mask_n[None, :], scores, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(scores, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(scores - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    if V_PAGE_ROWS and not MASKED:
        # A dim-major page of one head is [HEAD_DIM][PAGE_SIZE] contiguous (stride_vd ==
        # PAGE_SIZE, validated on the host): each page loads as one contiguous row, so a warp's
        # loads cover whole 128-byte lines (one L2 tag lookup each) instead of PAGE_SIZE-byte
        # pieces of BLOCK_N / PAGE_SIZE pages; the reorder to [tokens, d] is a register
        # relabelling (sm_90 TTGIR: the shared-memory tile is read straight into the dot
        # operand's layout). Page-sized pieces cost one L2 tag lookup each and held fp8 at
        # the L2's tag rate (docs/decisions.md). Padded d rows (PAD_D) lie past the page's
        # HEAD_DIM * PAGE_SIZE elements: masked off, zero.
        PAGES: tl.constexpr = BLOCK_N // PAGE_SIZE
        page_p = tl.max(tl.reshape(page, (PAGES, PAGE_SIZE)), 1)  # equal over a page's slots
        offs_f = tl.arange(0, BLOCK_D * PAGE_SIZE)
        v_ptrs = v_head + (page_p * stride_vp)[:, None] + offs_f[None, :]
        if PAD_D:
            v = tl.load(v_ptrs, mask=(offs_f < HEAD_DIM * PAGE_SIZE)[None, :], other=0)
        else:
            v = tl.load(v_ptrs)
        v = tl.reshape(v, (PAGES, BLOCK_D, PAGE_SIZE))
        v = tl.reshape(tl.permute(v, (0, 2, 1)), (BLOCK_N, BLOCK_D))
    else:
        if V_DMAJOR:
            # Slots of one page are adjacent: tell the compiler (it cannot see through the
            # block-table load) so the tile is loaded PAGE_SIZE tokens per vector.
            v_off = page * stride_vp + slot
            RUN: tl.constexpr = PAGE_SIZE if PAGE_SIZE < BLOCK_N else BLOCK_N  # noqa: FURB136
            v_off = tl.max_contiguous(tl.multiple_of(v_off, RUN), RUN)
            v_ptrs = v_head + v_off[:, None] + offs_d[None, :] * stride_vd
        else:
            v_ptrs = v_head + (page * stride_vp + slot * stride_vs)[:, None] + offs_d[None, :]
        if MASKED and V_DMAJOR:
            # Past ``hi`` the page loaded above is page 0 (the masked table load's ``other``):
            # a valid page, so the whole tile loads as vectors; the rows past ``hi`` are then
            # zeroed (a stale NaN there would survive p = 0).
            if PAD_D:
                v = tl.load(v_ptrs, mask=(offs_d < HEAD_DIM)[None, :], other=0)
            else:
                v = tl.load(v_ptrs)
            v = tl.where(mask_n[:, None], v, 0)
        elif MASKED and PAD_D:
            v = tl.load(v_ptrs, mask=mask_n[:, None] & (offs_d < HEAD_DIM)[None, :], other=0)
        elif MASKED:
            v = tl.load(v_ptrs, mask=mask_n[:, None], other=0)
        elif PAD_D:
            v = tl.load(v_ptrs, mask=(offs_d < HEAD_DIM)[None, :], other=0)
        else:
            v = tl.load(v_ptrs)
    if FP8:
        v = _widen_e4m3(v, q)
    if DOT_F32:
        pv = tl.dot(_to_f32(p.to(q.dtype)), _to_f32(v))
    else:
        pv = tl.dot(p.to(q.dtype), v)
    acc = acc * alpha[:, None] + pv
    return m_new, l_i, acc


@triton.jit
def _attend_range(
    q,
    m_i,
    l_i,
    acc,
    lo,
    end,
    hi,
    bt_row,
    k_head,
    v_head,
    scale,
    win_lo,
    cap_out,
    stride_kp,
    stride_ks,
    stride_vp,
    stride_vs,
    stride_vd,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    FP8: tl.constexpr,
    DOT_F32: tl.constexpr,
    V_DMAJOR: tl.constexpr,
    MASKED: tl.constexpr,
    BT_AHEAD: tl.constexpr,
    V_PAGE_ROWS: tl.constexpr,
    WINDOW: tl.constexpr,
    SOFTCAP: tl.constexpr,
):
    """``_attend_tile`` over the tiles starting at lo, lo + BLOCK_N, ... below ``end``.

    BT_AHEAD: each tile's block-table entries are loaded one iteration ahead and carried into
    the next, so the K/V loads no longer depend on a load of their own iteration; only then
    does Triton's software pipeliner give the K/V tiles more than one shared-memory buffer
    (num_stages - 1 of them; with the entries loaded in the iteration, K and V stay
    single-buffered at any num_stages: sm_90 TTGIR, triton 3.9).
    """
    if BT_AHEAD:
        offs_n = tl.arange(0, BLOCK_N)
        tok = lo + offs_n
        page_next = tl.load(bt_row + tok // PAGE_SIZE, mask=tok < hi, other=0).to(tl.int64)
        for start in range(lo, end, BLOCK_N):
            page = page_next
            tok = start + BLOCK_N + offs_n
            page_next = tl.load(bt_row + tok // PAGE_SIZE, mask=tok < hi, other=0).to(tl.int64)
            m_i, l_i, acc = _attend_tile(
                q, m_i, l_i, acc, start, hi, bt_row, k_head, v_head, scale, win_lo, cap_out,
                stride_kp, stride_ks, stride_vp, stride_vs, stride_vd,
                HEAD_DIM, BLOCK_D, PAGE_SIZE, BLOCK_N, FP8, DOT_F32, V_DMAJOR, MASKED,
                V_PAGE_ROWS, WINDOW, SOFTCAP, page,
            )
    else:
        for start in range(lo, end, BLOCK_N):
            m_i, l_i, acc = _attend_tile(
                q, m_i, l_i, acc, start, hi, bt_row, k_head, v_head, scale, win_lo, cap_out,
                stride_kp, stride_ks, stride_vp, stride_vs, stride_vd,
                HEAD_DIM, BLOCK_D, PAGE_SIZE, BLOCK_N, FP8, DOT_F32, V_DMAJOR, MASKED,
                V_PAGE_ROWS, WINDOW, SOFTCAP,
            )
    return m_i, l_i, acc


@triton.jit
def _decode_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    bt_ptr,
    seq_lens_ptr,
    out_ptr,
    part_o_ptr,
    part_lse_ptr,
    k_scale,
    v_scale,
    scale_stride,
    qk_scale,
    window,
    cap_out,
    stride_qb,
    stride_qh,
    stride_kp,
    stride_ks,
    stride_kh,
    stride_vp,
    stride_vs,
    stride_vh,
    stride_vd,
    stride_btb,
    max_pages,
    num_heads_q,
    num_splits,
    GROUP: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    FP8: tl.constexpr,
    SCALE_PTR: tl.constexpr,
    SPLIT: tl.constexpr,
    DOT_F32: tl.constexpr,
    PDL: tl.constexpr,
    V_DMAJOR: tl.constexpr,
    BT_AHEAD: tl.constexpr,
    V_PAGE_ROWS: tl.constexpr,
    WINDOW: tl.constexpr,
    SOFTCAP: tl.constexpr,
):
    """One program: sequence b, kv head h, split s (s == 0 when not SPLIT).

    WINDOW: attend to the last ``window`` tokens only. The walk starts at the window's first
    token rounded down to a BLOCK_N multiple (tile starts stay aligned, which the dim-major
    V path's contiguity hint needs) and every tile is masked below the window, so a token
    before it is never weighed, and its V row is zeroed (stale NaN there would survive p = 0).
    SOFTCAP: scores become cap * tanh(score / cap) before the softmax (Gemma-2)."""
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()  # the reduce may become resident now
    b = tl.program_id(0)
    h = tl.program_id(1)
    s = tl.program_id(2)
    # Table capacity bounds the walk: a seq_len beyond it (invalid input, validated on the host
    # where the values are visible) must not read past the block-table row.
    seq_len = tl.minimum(tl.load(seq_lens_ptr + b), max_pages * PAGE_SIZE)
    if WINDOW:
        win_lo = tl.maximum(seq_len - window, 0)
        first = win_lo // BLOCK_N * BLOCK_N
    else:
        win_lo = 0
        first = 0
    if SPLIT:
        chunk = tl.cdiv(tl.cdiv(seq_len - first, num_splits), BLOCK_N) * BLOCK_N
        lo = first + s * chunk
        hi = tl.minimum(lo + chunk, seq_len)
    else:
        lo = first
        hi = seq_len

    offs_g = tl.arange(0, GROUP_PAD)
    offs_d = tl.arange(0, BLOCK_D)
    mask_g = offs_g < GROUP
    # [GROUP_PAD, BLOCK_D]: the group's real heads, and their real d lanes when the tile is
    # padded (BLOCK_D > HEAD_DIM; a compile-time choice, see _attend_tile).
    if BLOCK_D != HEAD_DIM:
        mask_gd = mask_g[:, None] & (offs_d < HEAD_DIM)[None, :]
    else:
        mask_gd = mask_g[:, None]
    heads = h * GROUP + offs_g
    q = tl.load(
        q_ptr + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
        mask=mask_gd,
        other=0.0,
    )
    scale = qk_scale
    if FP8:
        if SCALE_PTR:
            # scale_stride: 0 for one scale per tensor, 1 for one per kv head ([Hkv])
            ks = tl.load(k_scale + h * scale_stride)
            vs = tl.load(v_scale + h * scale_stride)
        else:
            ks = k_scale
            vs = v_scale
        scale = scale * ks

    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, BLOCK_D], tl.float32)
    bt_row = bt_ptr + b.to(tl.int64) * stride_btb
    k_head = k_ptr + h * stride_kh
    v_head = v_ptr + h * stride_vh
    if V_DMAJOR and not WINDOW:
        # Whole tiles without masks, then the partial tail tile (if any) with them: a
        # dim-major V tile is contiguous along tokens, and a per-token mask would cut its loads
        # to single elements (no vectors, no cp.async) in every iteration instead of one.
        full_end = lo + (hi - lo) // BLOCK_N * BLOCK_N
        m_i, l_i, acc = _attend_range(
            q, m_i, l_i, acc, lo, full_end, hi, bt_row, k_head, v_head, scale, win_lo, cap_out,
            stride_kp, stride_ks, stride_vp, stride_vs, stride_vd,
            HEAD_DIM, BLOCK_D, PAGE_SIZE, BLOCK_N, FP8, DOT_F32, True, False, BT_AHEAD,
            V_PAGE_ROWS, False, SOFTCAP,
        )
        if full_end < hi:
            m_i, l_i, acc = _attend_tile(
                q, m_i, l_i, acc, full_end, hi, bt_row, k_head, v_head, scale, win_lo, cap_out,
                stride_kp, stride_ks, stride_vp, stride_vs, stride_vd,
                HEAD_DIM, BLOCK_D, PAGE_SIZE, BLOCK_N, FP8, DOT_F32, True, True,
                V_PAGE_ROWS, False, SOFTCAP,
            )
    else:
        # Token-major V: every tile masked (one loop: the peeled form costs the fp8 kernel
        # registers and spills under its cap, and masks along d-contiguous rows cost nothing).
        # With a window, dim-major V takes this loop too (tiles masked below the window).
        m_i, l_i, acc = _attend_range(
            q, m_i, l_i, acc, lo, hi, hi, bt_row, k_head, v_head, scale, win_lo, cap_out,
            stride_kp, stride_ks, stride_vp, stride_vs, stride_vd,
            HEAD_DIM, BLOCK_D, PAGE_SIZE, BLOCK_N, FP8, DOT_F32, V_DMAJOR, True, BT_AHEAD,
            False, WINDOW, SOFTCAP,
        )

    has = l_i > 0.0
    o = acc / tl.where(has, l_i, 1.0)[:, None]
    if FP8:
        o = o * vs
    row = b * num_heads_q + heads
    if SPLIT:
        part = row * num_splits + s
        tl.store(part_o_ptr + part[:, None] * HEAD_DIM + offs_d[None, :], o, mask=mask_gd)
        lse = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
        tl.store(part_lse_ptr + part, lse, mask=mask_g)
    else:
        tl.store(
            out_ptr + row[:, None] * HEAD_DIM + offs_d[None, :],
            o.to(out_ptr.dtype.element_ty),
            mask=mask_gd,
        )


@triton.jit
def _reduce_kernel(
    part_o_ptr,
    part_lse_ptr,
    out_ptr,
    num_splits,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    SPLIT_BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):
    """One program per (sequence, q head): combine the splits' (o, lse) by online softmax."""
    if PDL:
        tl.extra.cuda.gdc_wait()  # the split kernel's partials are complete and visible
    row = tl.program_id(0)
    offs_d = tl.arange(0, BLOCK_D)
    offs_s = tl.arange(0, SPLIT_BLOCK)
    base = row * num_splits
    m = tl.full([1], float("-inf"), tl.float32)
    den = tl.zeros([1], tl.float32)
    acc = tl.zeros([BLOCK_D], tl.float32)
    for s0 in range(0, num_splits, SPLIT_BLOCK):
        sp = s0 + offs_s
        mask_s = sp < num_splits
        lse = tl.load(part_lse_ptr + base + sp, mask=mask_s, other=float("-inf"))
        m_new = tl.maximum(m, tl.max(lse, 0))
        # All-empty so far (m_new == -inf): keep the exponents finite; weights are then 0.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m - m_safe)
        w = tl.exp2(lse - m_safe)
        if BLOCK_D != HEAD_DIM:  # padded lanes (compile-time, as in _attend_tile)
            mask_o = mask_s[:, None] & (offs_d < HEAD_DIM)[None, :]
        else:
            mask_o = mask_s[:, None]
        o = tl.load(part_o_ptr + (base + sp)[:, None] * HEAD_DIM + offs_d[None, :], mask=mask_o,
                    other=0.0)
        acc = acc * alpha + tl.sum(w[:, None] * o, 0)
        den = den * alpha + tl.sum(w, 0)
        m = m_new
    res = acc / tl.where(den > 0.0, den, 1.0)
    if BLOCK_D != HEAD_DIM:
        tl.store(out_ptr + row * HEAD_DIM + offs_d, res.to(out_ptr.dtype.element_ty),
                 mask=offs_d < HEAD_DIM)
    else:
        tl.store(out_ptr + row * HEAD_DIM + offs_d, res.to(out_ptr.dtype.element_ty))


# Triton fixes compiled-vs-interpreted when a kernel is decorated (TRITON_INTERPRET at import
# time), so ask the kernel object rather than the environment, which may have changed since.
_INTERPRET = type(_decode_kernel).__name__ == "InterpretedFunction"


# ----------------------------------------------------------------------------- host side


def choose_num_splits(
    batch: int, kv_heads: int, max_seq_len: int, sm_count: int, page_size: int
) -> int:
    """Number of KV splits for the split-KV kernel, from the problem shape alone.

    1 when ``batch * kv_heads`` programs already fill ``FILL_WAVES`` x ``sm_count`` (short
    contexts / big batches pay no split cost); otherwise enough splits for ``TARGET_WAVES`` x
    ``sm_count`` programs, but no split shorter than ``MIN_TOKENS_PER_SPLIT`` tokens (rounded
    up to whole pages) and never more than ``MAX_SPLITS``.
    """
    for name, value in (
        ("batch", batch),
        ("kv_heads", kv_heads),
        ("max_seq_len", max_seq_len),
        ("sm_count", sm_count),
        ("page_size", page_size),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    programs = batch * kv_heads
    if programs >= SPLIT_POLICY["FILL_WAVES"] * sm_count:
        return 1
    wanted = math.ceil(SPLIT_POLICY["TARGET_WAVES"] * sm_count / programs)
    min_tokens = max(
        page_size, math.ceil(SPLIT_POLICY["MIN_TOKENS_PER_SPLIT"] / page_size) * page_size
    )
    by_length = max(1, max_seq_len // min_tokens)
    return int(max(1, min(wanted, by_length, SPLIT_POLICY["MAX_SPLITS"])))


@functools.cache
def _pdl_supported(device: torch.device) -> bool:
    """Programmatic dependent launch (griddepcontrol) needs sm_90+; not under the interpreter."""
    if _INTERPRET or device.type != "cuda":
        return False
    return torch.cuda.get_device_capability(device) >= (9, 0)


def _register_cap(cfg: dict[str, int]) -> dict[str, int]:
    """Launch kwargs for a CONFIG entry's optional register cap (none under the interpreter,
    which has no registers to cap)."""
    if "maxnreg" not in cfg or _INTERPRET:
        return {}
    return {"maxnreg": cfg["maxnreg"]}


def _launch(
    p: DecodeProblem,
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    num_splits: int,
) -> torch.Tensor:
    out = torch.empty((p.batch, p.q_heads, p.head_dim), dtype=q.dtype, device=q.device)
    if p.batch == 0:
        return out
    if p.fp8:  # e4m3 bytes as uint8: the kernels widen the codes themselves
        k_cache, v_cache = k_cache.view(torch.uint8), v_cache.view(torch.uint8)
    split = num_splits > 1
    block_d = triton.next_power_of_2(p.head_dim)
    cfg = launch_config(split, p.fp8, block_d)
    group = p.q_heads // p.kv_heads
    scale_ptr = isinstance(p.k_scale, torch.Tensor)
    pdl = split and _pdl_supported(q.device)
    qk_scale = p.sm_scale * LOG2E
    cap_out = 0.0
    if p.softcap is not None:  # see _attend_tile: exp2 of the scaled score is e^(2x / cap)
        qk_scale = p.sm_scale * 2.0 * LOG2E / p.softcap
        cap_out = p.softcap * LOG2E
    if scale_ptr != isinstance(p.v_scale, torch.Tensor):
        raise ValueError("k_scale and v_scale must both be tensors or both be python floats")
    if split:
        part_o = torch.empty(
            (p.batch, p.q_heads, num_splits, p.head_dim), dtype=torch.float32, device=q.device
        )
        part_lse = torch.empty(
            (p.batch, p.q_heads, num_splits), dtype=torch.float32, device=q.device
        )
    else:
        part_o = part_lse = out  # unused by the kernel when SPLIT is False
    _decode_kernel[(p.batch, p.kv_heads, num_splits)](
        q,
        k_cache,
        v_cache,
        block_table,
        seq_lens,
        out,
        part_o,
        part_lse,
        p.k_scale,
        p.v_scale,
        1 if scale_ptr and p.k_scale.numel() > 1 else 0,
        qk_scale,
        p.window or 0,
        cap_out,
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        v_cache.stride(3),
        block_table.stride(0),
        p.max_pages,
        p.q_heads,
        num_splits,
        GROUP=group,
        GROUP_PAD=max(16, triton.next_power_of_2(group)),
        HEAD_DIM=p.head_dim,
        BLOCK_D=block_d,
        PAGE_SIZE=p.page_size,
        BLOCK_N=cfg["BLOCK_N"],
        FP8=p.fp8,
        SCALE_PTR=scale_ptr,
        SPLIT=split,
        DOT_F32=_INTERPRET and q.dtype == torch.bfloat16,
        PDL=pdl,
        V_DMAJOR=p.v_dim_major,
        BT_AHEAD=cfg["bt_ahead"],
        V_PAGE_ROWS=p.v_dim_major and v_cache.stride(3) == p.page_size
        and p.page_size < cfg["BLOCK_N"],
        WINDOW=p.window is not None,
        SOFTCAP=p.softcap is not None,
        num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"],
        **_register_cap(cfg),
    )
    if split:
        rcfg = CONFIG["reduce"]
        _reduce_kernel[(p.batch * p.q_heads,)](
            part_o,
            part_lse,
            out,
            num_splits,
            HEAD_DIM=p.head_dim,
            BLOCK_D=triton.next_power_of_2(p.head_dim),
            SPLIT_BLOCK=rcfg["SPLIT_BLOCK"],
            PDL=pdl,
            num_warps=rcfg["num_warps"],
            **({"launch_pdl": True} if pdl else {}),
        )
    return out


@decode_row(triton_kernel=True, interpreted=lambda: _INTERPRET)
def paged_decode_single_pass(
    p: DecodeProblem, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor
) -> torch.Tensor:
    """Triton decode, one program per (sequence, kv head) over the whole context."""
    return p.finish(_launch(p, q, k_cache, v_cache, p.block_table, p.seq_lens, 1))


@decode_row(triton_kernel=True, interpreted=lambda: _INTERPRET)
def paged_decode_split_kv(
    p: DecodeProblem, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, *,
    num_splits: int | None = None,
) -> torch.Tensor:
    """Triton flash-decode: KV split across programs, then a combine kernel.

    ``num_splits=None`` picks ``choose_num_splits`` from the shape, using the block table's
    width x page_size as the context bound (the host never reads seq_lens: no device sync).
    With one split this launches the single-pass kernel (no scratch, no reduce).
    """
    V.validate_optional_int_range("num_splits", num_splits, 1, 4096)
    if num_splits is None:
        if p.batch == 0 or p.max_pages == 0:
            num_splits = 1
        else:
            num_splits = choose_num_splits(
                p.batch, p.kv_heads, p.max_pages * p.page_size, _sm_count(q.device), p.page_size
            )
    return p.finish(_launch(p, q, k_cache, v_cache, p.block_table, p.seq_lens, num_splits))


@decode_row(triton_kernel=False, head_dims="torch")
def paged_decode_gather_sdpa(
    p: DecodeProblem, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor
) -> torch.Tensor:
    """Torch production fallback: gather pages into padded ``[B, Hkv, L, D]``, masked SDPA.

    L is the block table's width x page_size (no host read of seq_lens); fp8 bytes are widened
    with ``view(float8_e4m3fn).to(q.dtype) * scale``. Runs on any device.
    """
    if p.batch == 0 or p.max_pages == 0:
        return torch.zeros((p.batch, p.q_heads, p.head_dim), dtype=q.dtype, device=q.device)
    seq_lens = p.seq_lens
    # Only the entries seq_lens reaches are read: padding entries may hold anything.
    used = used_entries(p.block_table, seq_lens, p.page_size)
    idx = torch.where(used, p.block_table, torch.zeros_like(p.block_table)).long()
    length = p.max_pages * p.page_size
    pos = torch.arange(length, device=q.device)[None, :]
    keep = pos < seq_lens[:, None].long()
    if p.window is not None:
        keep &= pos >= seq_lens[:, None].long() - p.window
    # The tokens not attended (past seq_len: the rest of the last page and page 0, where idx
    # sends padding entries; before the window) may hold anything, NaN included, as unwritten
    # rows do in an engine: zeroed in the gathered copy, not only masked (a masked NaN V row
    # still makes 0 x NaN = NaN, and SDPA adds its -inf mask to a NaN score). In place, on
    # the copy the gather made, in the cache's own dtype (e4m3 byte 0 is +0.0).
    drop = ~keep.view(p.batch, p.max_pages, p.page_size, 1, 1)

    def gather(cache: torch.Tensor, scale: torch.Tensor | float) -> torch.Tensor:
        if p.fp8:  # the bytes (masked_fill has no float8 kernel on every device)
            cache = cache.view(torch.uint8)
        pages = cache[idx].masked_fill_(drop, 0)  # [B, max_pages, page, Hkv, D]
        if p.fp8:
            # A 1-element fp32 tensor as a 0-dim one: it scales in fp32 without promoting the
            # pages to fp32 (SDPA needs q, k and v in one dtype). Per kv head scales ([Hkv]):
            # each head's bytes widened and scaled in fp32, rounded once to q's dtype.
            if isinstance(scale, torch.Tensor) and scale.numel() > 1:
                pages = (pages.view(torch.float8_e4m3fn).float() * scale[:, None]).to(q.dtype)
            else:
                if isinstance(scale, torch.Tensor):
                    scale = scale.reshape(())
                pages = pages.view(torch.float8_e4m3fn).to(q.dtype) * scale
        return pages.reshape(p.batch, length, p.kv_heads, p.head_dim).transpose(1, 2)

    k = gather(k_cache, p.k_scale)
    v = gather(v_cache, p.v_scale)
    if p.softcap is None:
        out = F.scaled_dot_product_attention(
            q.unsqueeze(2),
            k,
            v,
            attn_mask=keep[:, None, None, :],
            scale=p.sm_scale,
            enable_gqa=p.q_heads != p.kv_heads,
        ).squeeze(2)
    else:
        # SDPA has no soft-cap: the scores in fp32, capped, masked, softmax, then P @ V.
        group = p.q_heads // p.kv_heads
        qg = q.float().reshape(p.batch, p.kv_heads, group, p.head_dim)
        scores = torch.matmul(qg, k.float().transpose(-1, -2)) * p.sm_scale  # [B, Hkv, G, L]
        scores = p.softcap * torch.tanh(scores / p.softcap)
        scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # all masked: 0, zeroed below
        out = torch.matmul(probs, v.float()).reshape(p.batch, p.q_heads, p.head_dim).to(q.dtype)
    # A fully masked row (seq_len 0) is NaN in SDPA; the op's contract is a zero output.
    return p.finish(torch.where(
        (seq_lens > 0)[:, None, None], out, torch.zeros((), dtype=out.dtype, device=out.device)
    ))
