"""Public entry points: derive the problem from the actual inputs, dispatch, run the row.

Each op reads its dtype name, layout tags, shape bucket and device from the tensors it was
given, never from what the caller claims, so a missing tag shows up in explain() instead of a
different row running silently. The per-call cost is what every decode step pays, so the hot
path reads only tensor metadata (.dtype, .dim(), .shape, .is_contiguous(), .device): no
.item(), no device sync. The context bucket comes from block_table.shape[1] * page_size (the
capacity of the table), not from seq_lens values, which live on the device. A cached decision
is building the same key dispatch() stores and one dict lookup; docs/allocator.md has the
measured overhead (tests/test_ops.py holds it under 2 µs).

Layout tags derived here (kvbench.dispatch.registry documents them):
    kv:paged       paged_decode / kv_write: 4-D caches (+ a 2-D block table for decode);
                   kv_gather_fp8: a 3-D token-row cache and a 1-D flat page table
    kv:strided     a cache is a non-contiguous view (e.g. K/V halves of one per-layer buffer)
    kv:fp8-scaled  a k_scale or v_scale was passed
    kv:v-dim-major paged_decode: the V cache is not token-major (its last stride is not 1:
                   dim-major pages, the pool's storage="v_dim_major"; the kernels check it)

Safety (docs/safety.md). Every op reads its tensors with the strides they have, or refuses a
layout it cannot read with a ValueError naming the argument. Index and scale values are
checked on the host for CPU tensors. On CUDA the fast path checks no value (a bad block
table, slot or page id is an out-of-bounds access); with ``KVBENCH_CHECK=1`` (safe mode) the
values are checked on the device without a host sync, out-of-range indices are neutralised
before the launch, and the ValueError comes from the next op call that finds the verdict
ready or from ``raise_pending()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from kvbench.dispatch.core import DECISIONS as _DECISIONS
from kvbench.dispatch.core import Selection, dispatch, selector_source
from kvbench.dispatch.registry import (
    FP8_SCALED,
    OPS,
    PAGED,
    STRIDED,
    V_DIM_MAJOR,
    bucket,
    decode_bucket,
    gather_bucket,
    write_bucket,
)

#: Cache dtype -> dtype name. fp8 caches are e4m3 bytes in a uint8 container (or viewed as
#: float8_e4m3fn), with caller-side fp32 scales.
DTYPE_NAMES: dict[torch.dtype, str] = {
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.uint8: "fp8",
    torch.float8_e4m3fn: "fp8",
}

#: (paged, strided, scaled, V dim-major) -> the frozen tag set, built once so a call
#: allocates none.
_TAGS: dict[tuple[bool, bool, bool, bool], frozenset[str]] = {
    (p, s, f, d): frozenset(
        t for t, on in ((PAGED, p), (STRIDED, s), (FP8_SCALED, f), (V_DIM_MAJOR, d)) if on
    )
    for p in (False, True)
    for s in (False, True)
    for f in (False, True)
    for d in (False, True)
}

_LAST: dict[str, Selection] = {}
_ENV = selector_source("paged_decode")[0]  # the raw environment mapping (see dispatch.core)


def raise_pending() -> None:
    """Wait for the safe-mode checks of earlier calls and raise the ValueError of any that
    failed (KVBENCH_CHECK=1 on CUDA; a no-op otherwise)."""
    # Imported here: importing kvbench.ops must not import kernel code (tests/test_dispatch).
    from kvbench.kernels._validate import raise_pending as wait_and_raise

    wait_and_raise(wait=True)


def last_selection(op: str) -> Selection | None:
    """The Selection the last call of `op` ran (None before the first call).

    Benchmarks assert `last_selection(op).spec.name == _IMPL` so a table never names one row
    while dispatch ran another.
    """
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; known ops: {', '.join(OPS)}")
    return _LAST.get(op)


def _bad_input(names: dict[str, Any], accepted_dtypes: bool = True) -> ValueError:
    """The ValueError for inputs the fast path could not even read (slow path only)."""
    for name, value in names.items():
        if not isinstance(value, torch.Tensor):
            return ValueError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    for name, value in names.items():
        if "cache" in name and value.dtype not in DTYPE_NAMES:
            accepted = ", ".join(str(d) for d in DTYPE_NAMES)
            return ValueError(f"{name} has dtype {value.dtype}; accepted: {accepted}")
    shapes = ", ".join(f"{k}{tuple(v.shape)}" for k, v in names.items())
    return ValueError(f"inputs do not describe a problem this op can read: {shapes}")


# ---- problem description (shared by the hot path, tune and benchmarks) ---------------------


@dataclass(frozen=True)
class Problem:
    """What an op call asks for, read from its inputs: dispatch(**problem.dispatch_args())."""

    op: str
    dtype: str
    tags: frozenset[str]
    shape: dict[str, int]
    device: torch.device

    @property
    def bucket(self) -> str:
        return bucket(self.op, self.shape)

    def dispatch(self) -> Selection:
        return dispatch(
            self.op, dtype=self.dtype, tags=self.tags, shape=self.shape, device=self.device
        )


# ---- paged_decode ---------------------------------------------------------------------------

_PD_ENV_KEY = selector_source("paged_decode")[1]
_KW_ENV_KEY = selector_source("kv_write")[1]
_KG_ENV_KEY = selector_source("kv_gather_fp8")[1]


def _decode_features(q, ks, batch: int, context: int, paged: bool) -> tuple:
    """core.decision_features of the problem describe_paged_decode builds: (batch,
    max_context, q_heads, kv_heads, head_dim, page_size), None where the problem has no such
    key."""
    q_heads = q.shape[1] if isinstance(q, torch.Tensor) and q.dim() == 3 else None
    if paged:
        return (batch, context, q_heads, ks[2], ks[3], ks[1])
    return (batch, context, q_heads, None, None, None)


def _decode_key(q, k_cache, v_cache, block_table, scaled: bool) -> tuple:
    """The decision-cache key of a paged_decode call, from tensor metadata only (no sync).

    Same layout as the key dispatch() stores: (op, dtype, tags, bucket, device, raw selector,
    features).
    """
    try:
        ks = k_cache.shape
        bs = block_table.shape
        paged = len(ks) == 4 and len(bs) == 2
        strided = not (k_cache.is_contiguous() and v_cache.is_contiguous())
        context = bs[1] * ks[1] if paged else 0
        return (
            "paged_decode",
            DTYPE_NAMES[k_cache.dtype],
            _TAGS[paged, strided, scaled, paged and v_cache.stride(-1) != 1],
            decode_bucket(bs[0], context),
            k_cache.device,
            _ENV.get(_PD_ENV_KEY),
            _decode_features(q, ks, bs[0], context, paged),
        )
    except (AttributeError, KeyError, IndexError, TypeError):
        names = {"q": q, "k_cache": k_cache, "v_cache": v_cache, "block_table": block_table}
        raise _bad_input(names) from None


def describe_paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    *,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> Problem:
    """The dispatch problem kvbench.ops.paged_decode derives from these inputs."""
    scaled = k_scale is not None or v_scale is not None
    _, dtype, tags, _, device, *_ = _decode_key(q, k_cache, v_cache, block_table, scaled)
    bs = block_table.shape
    shape: dict[str, int] = {"batch": bs[0], "max_context": 0}
    if PAGED in tags:
        shape.update(
            max_context=bs[1] * k_cache.shape[1],
            page_size=k_cache.shape[1],
            kv_heads=k_cache.shape[2],
            head_dim=k_cache.shape[3],
        )
    if isinstance(q, torch.Tensor) and q.dim() == 3:
        shape["q_heads"] = q.shape[1]
    return Problem("paged_decode", dtype, tags, shape, device)


def paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    sm_scale: float | None = None,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """One decode step of paged attention: q [B, Hq, D] over caches [pages, page, Hkv, D].

    block_table [B, max_pages] int32, seq_lens [B] int32; fp8 caches (e4m3 bytes as uint8 or
    float8_e4m3fn) need k_scale / v_scale (finite fp32 scales > 0). Only the block-table
    entries seq_lens reaches are read. Returns out [B, Hq, D] in q's dtype.
    """
    scaled = k_scale is not None or v_scale is not None
    # _decode_key inlined: this is the per-decode-step cost (<= 2 µs, tests/test_ops.py).
    try:
        ks = k_cache.shape
        bs = block_table.shape
        paged = len(ks) == 4 and len(bs) == 2
        strided = not (k_cache.is_contiguous() and v_cache.is_contiguous())
        context = bs[1] * ks[1] if paged else 0
        key = (
            "paged_decode",
            DTYPE_NAMES[k_cache.dtype],
            _TAGS[paged, strided, scaled, paged and v_cache.stride(-1) != 1],
            decode_bucket(bs[0], context),
            k_cache.device,
            _ENV.get(_PD_ENV_KEY),
            _decode_features(q, ks, bs[0], context, paged),
        )
    except (AttributeError, KeyError, IndexError, TypeError):
        key = _decode_key(q, k_cache, v_cache, block_table, scaled)  # raises the named error
    sel = _DECISIONS.get(key)
    if sel is None:
        sel = describe_paged_decode(
            q, k_cache, v_cache, block_table, k_scale=k_scale, v_scale=v_scale
        ).dispatch()
    _LAST["paged_decode"] = sel
    return sel.target(
        q,
        k_cache,
        v_cache,
        block_table,
        seq_lens,
        sm_scale=sm_scale,
        k_scale=k_scale,
        v_scale=v_scale,
    )


# ---- kv_write --------------------------------------------------------------------------------


def _write_key(k, k_cache, v_cache, scaled: bool) -> tuple:
    """The decision-cache key of a kv_write call, from tensor metadata only."""
    try:
        paged = len(k_cache.shape) == 4 and len(v_cache.shape) == 4
        return (
            "kv_write",
            DTYPE_NAMES[k_cache.dtype],
            _TAGS[paged, not (k_cache.is_contiguous() and v_cache.is_contiguous()), scaled, False],
            write_bucket(k.shape[0]),
            k_cache.device,
            _ENV.get(_KW_ENV_KEY),
            (),  # no exact features in kv_write's decisions (core.DECISION_KEYS)
        )
    except (AttributeError, KeyError, IndexError, TypeError):
        raise _bad_input({"k": k, "k_cache": k_cache, "v_cache": v_cache}) from None


def describe_kv_write(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    *,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> Problem:
    """The dispatch problem kvbench.ops.kv_write derives from these inputs."""
    scaled = k_scale is not None or v_scale is not None
    _, dtype, tags, _, device, *_ = _write_key(k, k_cache, v_cache, scaled)
    return Problem("kv_write", dtype, tags, {"n": k.shape[0]}, device)


def kv_write(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    *,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> None:
    """Scatter new rows k, v [N, Hkv, D] into the caches at slot_mapping [N] (int64), in place.

    slot = page * page_size + offset; a negative slot skips its token; slot_mapping may be any
    strided view. fp8 caches quantize on write with the caller-side scales (finite, > 0). The
    K and V caches must not share memory.
    """
    scaled = k_scale is not None or v_scale is not None
    sel = _DECISIONS.get(_write_key(k, k_cache, v_cache, scaled))
    if sel is None:
        sel = describe_kv_write(k, v, k_cache, v_cache, k_scale=k_scale, v_scale=v_scale).dispatch()
    _LAST["kv_write"] = sel
    sel.target(k, v, k_cache, v_cache, slot_mapping, k_scale=k_scale, v_scale=v_scale)


# ---- kv_gather_fp8 ---------------------------------------------------------------------------


def _gather_key(kv_cache, page_table_flat) -> tuple:
    """The decision-cache key of a kv_gather_fp8 call, from tensor metadata only."""
    try:
        pts = page_table_flat.shape
        paged = len(kv_cache.shape) == 3 and len(pts) == 1
        return (
            "kv_gather_fp8",
            DTYPE_NAMES[kv_cache.dtype],
            _TAGS[paged, not kv_cache.is_contiguous(), False, False],
            gather_bucket(pts[0]),
            kv_cache.device,
            _ENV.get(_KG_ENV_KEY),
            (),  # no exact features in kv_gather_fp8's decisions (core.DECISION_KEYS)
        )
    except (AttributeError, KeyError, IndexError, TypeError):
        raise _bad_input({"kv_cache": kv_cache, "page_table_flat": page_table_flat}) from None


def describe_kv_gather_fp8(kv_cache: torch.Tensor, page_table_flat: torch.Tensor) -> Problem:
    """The dispatch problem kvbench.ops.kv_gather_fp8 derives from these inputs."""
    _, dtype, tags, _, device, *_ = _gather_key(kv_cache, page_table_flat)
    return Problem("kv_gather_fp8", dtype, tags, {"kv_len": page_table_flat.shape[0]}, device)


def kv_gather_fp8(
    kv_cache: torch.Tensor,
    page_table_flat: torch.Tensor,
    *,
    extra_rows: int,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Gather fp8 KV rows (656-byte cache rows -> 576 fp8 outputs) plus extra_rows zero pad rows.

    kv_cache [pool_tokens, 1, 656] (uint8 / float8_e4m3fn), page_table_flat [kv_len] int32.
    Returns [kv_len + extra_rows, 576] float8_e4m3fn (into `out` when given). The
    triton/cached row returns a view of a persistent buffer that its next call overwrites.
    """
    sel = _DECISIONS.get(_gather_key(kv_cache, page_table_flat))
    if sel is None:
        sel = describe_kv_gather_fp8(kv_cache, page_table_flat).dispatch()
    _LAST["kv_gather_fp8"] = sel
    return sel.target(kv_cache, page_table_flat, extra_rows=extra_rows, out=out)
