"""The engine-facing entry points: the layer above dispatch.

    paged_decode(q, k_cache, v_cache, block_table, seq_lens, *, sm_scale, k_scale, v_scale,
                 window, softcap)
    kv_write(k, v, k_cache, v_cache, slot_mapping, *, k_scale, v_scale)
    kv_gather_fp8(kv_cache, page_table_flat, *, extra_rows, out)
    KVCacheManager(num_rows, *, device, impl)
    last_selection(op), raise_pending()

They are also kvbench.paged_decode, kvbench.kv_write, ... (kvbench/__init__.py loads them on
first use). Each call reads its problem key from tensor metadata only (the op oracle's
<op>_fields: no .item(), no device sync, since an engine pays it every decode step), looks
the decision up in dispatch's cache (one tuple build and one dict lookup), and on a miss
describes the problem in full and asks dispatch.core.select. The Selection a call ran is
kept per op (last_selection), so a benchmark can assert that the row it names is the row
that ran.

Everything else about an op (its problem, reference, check, proof, cases) is its oracle in
kvbench.ops.<op>, below dispatch.
"""

from __future__ import annotations

import numpy as np
import torch

from kvbench.core.device import resolve_device
from kvbench.dispatch import core
from kvbench.dispatch.core import DispatchError, Selection, cached_selection, select
from kvbench.kernels.common import options_used
from kvbench.kernels.kv_alloc import Backend
from kvbench.ops import kv_gather_fp8 as gather_op
from kvbench.ops import kv_write as write_op
from kvbench.ops import paged_decode as decode_op
from kvbench.ops.common import Problem, rank_mismatches
from kvbench.ops.keys import OPS, PAGED
from kvbench.ops.kv_gather_fp8 import describe_kv_gather_fp8, gather_fields
from kvbench.ops.kv_write import describe_kv_write, write_fields
from kvbench.ops.paged_decode import decode_fields, describe_paged_decode

__all__ = [
    "LAST",
    "KVCacheManager",
    "kv_gather_fp8",
    "kv_write",
    "last_selection",
    "paged_decode",
    "raise_pending",
]

#: op -> the Selection its last call ran (written by every entry-point call).
LAST: dict[str, Selection] = {}


def last_selection(op: str) -> Selection | None:
    """The Selection the last call of `op` ran (None before the first call).

    Benchmarks assert `last_selection(op).spec.name == _IMPL` so a table never names one row
    while dispatch ran another.
    """
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; known ops: {', '.join(OPS)}")
    return LAST.get(op)


def raise_pending() -> None:
    """Wait for the safe-mode validation of earlier calls and raise the ValueError of any
    that failed (KVBENCH_CHECK=1 on CUDA; a no-op otherwise)."""
    # Imported here: importing kvbench.api must not import kernel code (tests/test_dispatch).
    from kvbench.kernels._validate import raise_pending as wait_and_raise

    wait_and_raise(wait=True)


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
    window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """One decode step of paged attention: q [B, Hq, D] over caches [pages, page, Hkv, D].

    block_table [B, max_pages] int32, seq_lens [B] int32; fp8 caches (e4m3 bytes as uint8 or
    float8_e4m3fn) need k_scale / v_scale (finite fp32 scales > 0: scalars, or [Hkv] tensors
    per kv head). Only the block-table entries seq_lens reaches are read. `window`: attend to
    the last `window` tokens of each sequence; `softcap`: scores become
    softcap * tanh(score / softcap) before the softmax. Auto selects among the rows that
    implement the options asked for. Returns out [B, Hq, D] in q's dtype.
    """
    scaled = k_scale is not None or v_scale is not None
    asked = scaled or window is not None or softcap is not None
    options = options_used(window, softcap, k_scale) if asked else ()
    sel = cached_selection("paged_decode", *decode_fields(q, k_cache, v_cache, block_table,
                                                          scaled, options))
    if sel is None:
        sel = _select(describe_paged_decode(q, k_cache, v_cache, block_table, k_scale=k_scale,
                                            v_scale=v_scale, window=window, softcap=softcap),
                      {"k_cache": k_cache, "v_cache": v_cache, "block_table": block_table},
                      decode_op.PAGED_FORMS)
    LAST["paged_decode"] = sel
    extra = {} if window is None and softcap is None else {"window": window,
                                                            "softcap": softcap}
    return sel.target(q, k_cache, v_cache, block_table, seq_lens, sm_scale=sm_scale,
                      k_scale=k_scale, v_scale=v_scale, **extra)


def _select(problem: Problem, args: dict, forms: dict[str, str]) -> Selection:
    """select(problem); where no row serves a call that is not paged because an argument has
    the wrong rank, the error names that argument and the form a paged call passes (the
    registry's "layout tag missing: kv:paged" alone points at the layout, not the mistake)."""
    try:
        return select(problem)
    except DispatchError as exc:
        why = rank_mismatches(args, forms) if PAGED not in problem.tags else ""
        if not why:
            raise
        raise DispatchError(f"{problem.op}: {why}", exc.explain) from None


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
    sel = cached_selection("kv_write", *write_fields(k, k_cache, v_cache, scaled))
    if sel is None:
        sel = _select(describe_kv_write(k, v, k_cache, v_cache, k_scale=k_scale, v_scale=v_scale),
                      {"k_cache": k_cache, "v_cache": v_cache}, write_op.PAGED_FORMS)
    LAST["kv_write"] = sel
    sel.target(k, v, k_cache, v_cache, slot_mapping, k_scale=k_scale, v_scale=v_scale)


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
    sel = cached_selection("kv_gather_fp8", *gather_fields(kv_cache, page_table_flat))
    if sel is None:
        sel = _select(describe_kv_gather_fp8(kv_cache, page_table_flat),
                      {"kv_cache": kv_cache, "page_table_flat": page_table_flat},
                      gather_op.PAGED_FORMS)
    LAST["kv_gather_fp8"] = sel
    return sel.target(kv_cache, page_table_flat, extra_rows=extra_rows, out=out)


class KVCacheManager:
    """Hands out KV cache rows on `device`; the implementation comes from the registry.

    impl=None follows KVBENCH_KV_ALLOC through dispatch("kv_alloc"): auto, or a forced row,
    which runs its check first (kvbench.dispatch). An explicit impl (a spec name) picks that
    row directly, as constructing the class would, without a golden check.
    alloc(n) -> int64 tensor of n distinct rows that were free (read-only: host/freelist may
    return a view of its row table); free(rows); free_all(); num_free; state. Errors raise
    AllocError (a ValueError) and leave the state unchanged.
    """

    def __init__(self, num_rows: int, *, device: torch.device | str, impl: str | None = None):
        dev = resolve_device(device)
        self.selection = None
        if impl is None:
            self.selection = core.dispatch("kv_alloc", dtype="int64", device=dev)
            self.impl = self.selection.spec.name
            cls = self.selection.target
        else:
            spec = core.active_registry().get("kv_alloc", impl)  # ValueError lists the names
            self.impl = spec.name
            cls = spec.load()
        self._backend: Backend = cls(num_rows, dev)
        self.num_rows = self._backend.num_rows
        self.device = self._backend.device  # CUDA with its index: the device rows report
        # Bound methods of the backend: the manager adds no call layer to the timed path.
        self.alloc = self._backend.alloc
        self.free = self._backend.free
        self.free_all = self._backend.free_all

    @property
    def num_free(self) -> int:
        return self._backend.num_free

    @property
    def state(self) -> str:
        return self._backend.state

    def free_rows(self) -> np.ndarray:
        """Sorted free rows on the host (diagnostic: the legacy backend synchronizes)."""
        return self._backend.free_rows()

    def __repr__(self) -> str:
        return (
            f"KVCacheManager(num_rows={self.num_rows}, device={self.device}, impl={self.impl!r}, "
            f"num_free={self.num_free})"
        )
