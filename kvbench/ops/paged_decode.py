"""paged_decode: one decode step of paged attention, q [B, Hq, D] over paged K/V caches.

The op's oracle: everything kvbench knows about the op except its kernels
(kvbench/kernels/paged_decode.py, paged_decode_cluster.py), its registry rows and its
engine-facing entry point (kvbench.api.paged_decode):

- the problem: `describe_paged_decode`, and `decode_fields` (the same key from tensor
  metadata only, no sync: what the entry point looks its cached decision up with);
- the gate: `RTOL` / `ATOL`, `check_paged_decode` (elementwise, then the systematic-error
  criterion), `proof_paged_decode` (the last timed call verified on a negated q),
  `golden_check_paged_decode*` (the tiny problems dispatch verifies rows with), and the
  load-only read's check (`check_page_read`, the bound:page_read row);
- the theoretical cost (`paged_decode_work`, `page_read_work`) and the fp64 reference
  (`paged_decode_ref`, which shares no code with the kernels);
- the measured geometry (`Q_HEADS`, `KV_HEADS`, `HEAD_DIM`, `PAGE_SIZE`), the case fixture
  (`decode_pool`) and inputs (`decode_inputs`), the same at a named model geometry
  (`geometry_pool`, `geometry_inputs`; the table is kvbench.ops.decode_geometry), the
  report's ceiling and the tune cases.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from kvbench.core.device import resolve_device
from kvbench.core.dtypes import BYTES, FROM_TORCH
from kvbench.harness.proof import TimedProof, poison_
from kvbench.harness.verify import SYSTEMATIC_TOLERANCE, verify, verify_unbiased
from kvbench.harness.work import Work
from kvbench.kernels._validate import validated_calls
from kvbench.kernels.common import options_used
from kvbench.ops.common import OpInputs, Problem, RefCache, bad_input, poison_next_alloc
from kvbench.ops.decode_geometry import Geometry
from kvbench.ops.keys import PAGED, TAGS, decode_bucket


def _decode_features(q, ks, batch: int, context: int, paged: bool,
                     options: tuple[str, ...]) -> tuple:
    """dispatch.core.decision_features of the problem describe_paged_decode builds: (batch,
    max_context, q_heads, kv_heads, head_dim, page_size, options), None where the problem has
    no such key."""
    q_heads = q.shape[1] if isinstance(q, torch.Tensor) and q.dim() == 3 else None
    if paged:
        return (batch, context, q_heads, ks[2], ks[3], ks[1], options)
    return (batch, context, q_heads, None, None, None, options)


#: The ranks that make a call paged (its kv:paged tag), for the error of a call that is not.
PAGED_FORMS = {"k_cache": "[pages, page_size, kv_heads, head_dim]",
               "v_cache": "[pages, page_size, kv_heads, head_dim]",
               "block_table": "[batch, max_pages]"}


def decode_fields(q, k_cache, v_cache, block_table, scaled: bool,
                  options: tuple[str, ...] = ()) -> tuple:
    """(dtype, tags, bucket, device, features) of a paged_decode call, from tensor metadata
    only (no sync): the arguments of dispatch.core.cached_selection after the op name.
    `options`: the decode options the call asks for (kernels.common.options_used)."""
    try:
        ks = k_cache.shape
        bs = block_table.shape
        paged = len(ks) == 4 and len(bs) == 2
        strided = not (k_cache.is_contiguous() and v_cache.is_contiguous())
        context = bs[1] * ks[1] if paged else 0
        return (
            FROM_TORCH[k_cache.dtype],
            TAGS[paged, strided, scaled, paged and v_cache.stride(-1) != 1],
            decode_bucket(bs[0], context),
            k_cache.device,
            _decode_features(q, ks, bs[0], context, paged, options),
        )
    except (AttributeError, KeyError, IndexError, TypeError):
        names = {"q": q, "k_cache": k_cache, "v_cache": v_cache, "block_table": block_table}
        raise bad_input(names) from None


def describe_paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    *,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    window: int | None = None,
    softcap: float | None = None,
) -> Problem:
    """The dispatch problem of a paged_decode call on these inputs (kvbench.api.paged_decode);
    its shape's "options" names the decode options asked for, which a row's shape gate may
    refuse (auto then routes around it)."""
    scaled = k_scale is not None or v_scale is not None
    options = options_used(window, softcap, k_scale)
    dtype, tags, _, device, _ = decode_fields(q, k_cache, v_cache, block_table, scaled, options)
    bs = block_table.shape
    shape: dict[str, object] = {"batch": bs[0], "max_context": 0, "options": options}
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


#: The gate's elementwise tolerances, |out - ref| <= atol + rtol * |ref| against the fp64
#: reference rounded to q's dtype. Keyed by the KV dtype name; a check with bf16 q takes the
#: looser of its KV entry and the "bf16" entry, because the kernels round probabilities and
#: output to q's dtype. rtol is ~2-4 output ulps; atol is the worst error measured over seeds,
#: ragged lengths and score spreads with margin (docs/decisions.md, "decode tolerances"). fp8
#: compares against the same bytes widened by torch, so its entry is about arithmetic, not fp8
#: rounding: it is looser than fp16 for the torch row, which scales each widened byte in q's
#: dtype (one rounding per element that the Triton rows avoid by folding the scales).
RTOL = {"fp16": 5e-3, "bf16": 2e-2, "fp8": 1e-2}
ATOL = {"fp16": 5e-4, "bf16": 8e-3, "fp8": 2e-3}


_DECODE_DTYPES = ("fp16", "bf16", "fp8")


_Q_DTYPE_NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16"}


def make_decode_query(
    pool, q_heads: int, *, seed: int = 0, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """A seeded random decode query ``[num_seqs, q_heads, head_dim]`` on the pool's device.

    ``dtype`` defaults to the pool's dtype (fp16 for an fp8 pool: the engine's activations).
    """
    if isinstance(q_heads, bool) or not isinstance(q_heads, int) or q_heads < 1:
        raise ValueError(f"q_heads must be an int >= 1, got {q_heads!r}")
    if q_heads % pool.kv_heads:
        raise ValueError(
            f"q_heads ({q_heads}) must be a multiple of pool.kv_heads ({pool.kv_heads})"
        )
    if dtype is None:
        dtype = torch.bfloat16 if pool.kv_dtype_name == "bf16" else torch.float16
    if dtype not in _Q_DTYPE_NAMES:
        raise ValueError(f"dtype {dtype} is not accepted; accepted: torch.float16, torch.bfloat16")
    from kvbench.fixtures.pool import STREAM_QUERY, derive_seed

    # A stream of its own: with the pool's seed it would reproduce the cached keys.
    gen = torch.Generator(device=pool.device).manual_seed(derive_seed(seed, STREAM_QUERY))
    shape = (pool.num_seqs, q_heads, pool.head_dim)
    return torch.randn(shape, generator=gen, device=pool.device, dtype=torch.float32).to(dtype)


def _option_kwargs(window: int | None, softcap: float | None) -> dict[str, Any]:
    """The decode options to pass: only those set, so a row without options is called as
    before."""
    return {k: v for k, v in (("window", window), ("softcap", softcap)) if v is not None}


def check_paged_decode(fn, pool, q: torch.Tensor, *, sm_scale: float | None = None,
                       window: int | None = None, softcap: float | None = None) -> float:
    """Run ``fn`` on the pool and compare with ``paged_decode_ref``; return max |out - ref|.

    ``window`` / ``softcap``: the decode options, passed to ``fn`` and the reference.

    Tolerances are the kernel module's for the pool's KV dtype, loosened to q's dtype's entry
    when that is looser (the kernel's arithmetic runs in q's dtype). NaN anywhere in the
    output (e.g. an element never written, see ``poison_next_alloc``) fails verify. Then the
    systematic-error criterion (verify.verify_unbiased, decode_systematic_tolerance): a
    uniformly scaled or offset output fails even inside the elementwise tolerances.
    """

    if q.dtype not in _Q_DTYPE_NAMES:
        raise ValueError(f"q has dtype {q.dtype}; accepted: torch.float16, torch.bfloat16")
    kv_name = pool.kv_dtype_name
    args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    kwargs = {"sm_scale": sm_scale, "k_scale": pool.k_scale, "v_scale": pool.v_scale,
              **_option_kwargs(window, softcap)}
    ref = paged_decode_ref(*args, **kwargs)
    poison_next_alloc(tuple(q.shape), q.dtype, q.device)
    with validated_calls():
        out = fn(*args, **kwargs)
    return _verify_decode_output(fn, out, ref, q, kv_name).max_abs


#: The systematic-error tolerance of bf16 outputs computed by the Triton interpreter: it
#: converts fp32 to bf16 by truncation toward zero, not to nearest even as the GPU does (every
#: |bf16(x)| <= |x|; tests/test_proof.py keeps that fact checked), so a Triton bf16 decode
#: under TRITON_INTERPRET=1 carries a negative scale of up to ~u that the same kernel on a GPU
#: does not (2 x 2^-8: docs/harness.md, "Proof with every number").
INTERPRETER_BF16_SYSTEMATIC_TOLERANCE = 2.0**-7


def decode_systematic_tolerance(kv_name: str, q_name: str, device: torch.device) -> float:
    """The systematic-error tolerance of a decode output (verify.SYSTEMATIC_TOLERANCE).

    The output is in q's dtype and the reference reads the same KV values (fp8 bytes widened
    with the same scales), so q's dtype decides; fp8 KV adds no rounding of its own. On a CPU
    under the Triton interpreter, bf16 gets INTERPRETER_BF16_SYSTEMATIC_TOLERANCE."""
    del kv_name  # the KV dtype's rounding is the reference's too (see above)
    tol = SYSTEMATIC_TOLERANCE[q_name]
    if q_name == "bf16" and device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1":
        tol = INTERPRETER_BF16_SYSTEMATIC_TOLERANCE
    return tol


def _verify_decode_output(fn, out, ref: torch.Tensor, q: torch.Tensor, kv_name: str):
    """The decode gate on one output: dtype, the kernel's elementwise tolerances (verify),
    then the systematic-error criterion (verify_unbiased). Returns the error figures."""

    q_name = _Q_DTYPE_NAMES[q.dtype]
    label = getattr(fn, "__name__", fn)
    if not isinstance(out, torch.Tensor) or out.dtype != q.dtype:
        got = out.dtype if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"{label} returned {got}; expected {q.dtype}")
    rtol = max(RTOL[kv_name], RTOL[q_name])
    atol = max(ATOL[kv_name], ATOL[q_name])
    name = f"paged_decode[{label}, kv={kv_name}, q={q_name}]"
    verify(name, out, ref, rtol=rtol, atol=atol)
    return verify_unbiased(name, out, ref,
                           tol=decode_systematic_tolerance(kv_name, q_name, q.device))


def proof_paged_decode(fn, pool, q: torch.Tensor, *, sm_scale: float | None = None,
                       window: int | None = None, softcap: float | None = None) -> TimedProof:
    """The TimedProof of a decode row timed on ``(q, pool)`` (harness/proof.py).

    Before the last timed call: the previous call's output is poisoned and q is negated in
    place (a different softmax for every head, same shapes and ranges); that call's output is
    then checked against the reference of -q with the same gate as check_paged_decode.
    restore() negates q back (exact). ``fn`` only names the row in messages."""

    if q.dtype not in _Q_DTYPE_NAMES:
        raise ValueError(f"q has dtype {q.dtype}; accepted: torch.float16, torch.bfloat16")
    args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    kwargs = {"sm_scale": sm_scale, "k_scale": pool.k_scale, "v_scale": pool.v_scale,
              **_option_kwargs(window, softcap)}
    refs = RefCache(lambda: paged_decode_ref(*args, **kwargs))

    def prepare(previous: object) -> None:
        poison_(previous)
        q.neg_()

    def check(out: object):
        return _verify_decode_output(fn, out, refs.get(q), q, pool.kv_dtype_name)

    return TimedProof(prepare, check, lambda: q.neg_())


def page_read_xor(pool) -> torch.Tensor:
    """The XOR of every K and V word of the pool's attended pages, gathered by torch (the
    reference of ``check_page_read``; a sweep computes it once per pool)."""
    from kvbench.harness.stream_read import page_words, xor_fold

    ids = pool.attended_page_ids().long()
    return xor_fold(page_words(pool.k_cache)[ids]) ^ xor_fold(page_words(pool.v_cache)[ids])


def check_page_read(fn, pool, want: torch.Tensor | None = None) -> float:
    """``fn()`` (a ``page_read_fn``) must have read exactly the words of the attended pages:
    the XOR of its per-program outputs equals ``page_read_xor(pool)`` (or ``want``). XOR cannot
    see a page read an even number of extra times; a page missed or a wrong page changes it
    (short of a 2^-32 collision). Returns 0.0 or raises VerificationError."""
    from kvbench.harness.stream_read import xor_fold

    want = page_read_xor(pool) if want is None else want
    got = xor_fold(fn())
    return verify(f"page_read[kv={pool.kv_dtype_name}, {pool.storage}]", got, want, rtol=0, atol=0)


def golden_check_paged_decode(fn, dtype: str, device, *, head_dim: int = 64,
                           storage: str = "combined") -> float:
    """Tiny ragged problem (lens 1, 17, 40; page 16; 2 kv / 8 q heads; D ``head_dim``, 64
    unless a row needs another) through ``fn``.

    Covers a one-token sequence, a partial last page, several pages and GQA in one call;
    fp8 runs through the real quantizer with fp16 q.
    """
    from kvbench.fixtures.pool import paged_pool

    if dtype not in _DECODE_DTYPES:
        raise ValueError(f"dtype={dtype!r} is not accepted; accepted: {_DECODE_DTYPES}")
    pool = paged_pool(
        3,
        [1, 17, 40],
        kv_heads=2,
        head_dim=head_dim,
        page_size=16,
        dtype=dtype,
        storage=storage,
        min_l2_multiple=0,
        device=device,
        seed=0,
    )
    try:
        q = make_decode_query(pool, 8, seed=1)
        return check_paged_decode(fn, pool, q)
    finally:
        pool.free()


def golden_check_paged_decode_cluster(fn, dtype: str, device) -> float:
    """``golden_check_paged_decode`` for cuda/cluster_decode: head_dim 128 (its only size), fp8
    on dim-major V pages (the only fp8 layout it reads)."""
    storage = "v_dim_major" if dtype == "fp8" else "combined"
    return golden_check_paged_decode(fn, dtype, device, head_dim=128, storage=storage)


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
    window: int | None = None,
) -> Work:
    """One decode step: each sequence's K and V rows read once, q read once, out written once.

    FLOPs: QK^T and PV are each 2 * Hq * L * D per sequence (a multiply-add counts as two).
    The block table is read once per page (int32); fp8 scales are two scalars and ignored.
    ``window``: only the last ``window`` tokens of a sequence are attended, so L is
    min(length, window) and the pages are those the window touches: the bytes the op needs
    (a row that reads whole tiles from before the window, or gathers everything, moves more).
    """
    if kv_dtype not in BYTES:
        raise ValueError(f"kv_dtype {kv_dtype!r}: accepted {sorted(BYTES)}")
    if window is None:
        tokens = sum(int(n) for n in seq_lens)
        pages = _pages(seq_lens, page_size)
    else:
        tokens = sum(min(int(n), window) for n in seq_lens)
        pages = sum(-(-int(n) // page_size) - max(0, int(n) - window) // page_size
                    for n in seq_lens)
    batch = len(seq_lens)
    kv = 2 * tokens * kv_heads * head_dim * BYTES[kv_dtype]
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
    if kv_dtype not in BYTES:
        raise ValueError(f"kv_dtype {kv_dtype!r}: accepted {sorted(BYTES)}")
    pages = _pages(seq_lens, page_size)
    return Work(moved=float(pages * (2 * page_size * kv_heads * head_dim * BYTES[kv_dtype] + 4)))


def paged_decode_ref(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    sm_scale: float | None = None,
    k_scale: torch.Tensor | float | None = None,
    v_scale: torch.Tensor | float | None = None,
    window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """Decode attention in fp64, one sequence at a time, with plain matmul + softmax.

    Options: ``window`` attends to the last ``window`` tokens of each sequence only;
    ``softcap`` replaces each score s (sm_scale included) by softcap * tanh(s / softcap);
    fp8 scales may be per kv head (``[Hkv]`` tensors).

    fp64 rather than fp32 so that a process-wide TF32 setting
    (``torch.backends.cuda.matmul.allow_tf32``) can never loosen the reference.

    Pages are looked up through ``block_table`` on the host (``tolist``): slow and obviously
    right. uint8 caches are e4m3 bytes widened by torch and multiplied by their scale, so an
    fp8 kernel is compared against the same bytes, not against an fp16 pool. Query head ``i``
    attends with kv head ``i // (Hq // Hkv)``; a length-0 sequence gives zeros.
    """
    batch, q_heads, head_dim = q.shape
    page_size, kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = q_heads // kv_heads
    scale = 1.0 / head_dim**0.5 if sm_scale is None else float(sm_scale)

    def widen(rows: torch.Tensor, s: torch.Tensor | float | None) -> torch.Tensor:
        if rows.dtype == torch.uint8:
            if s is None:
                raise ValueError("uint8 (fp8) caches need k_scale and v_scale")
            # a tensor: one scale, or one per kv head ([Hkv] against rows [n, Hkv, D])
            s = s.double().to(rows.device).reshape(-1, 1) if isinstance(s, torch.Tensor) \
                else float(s)
            return rows.view(torch.float8_e4m3fn).to(torch.float64) * s
        return rows.to(torch.float64)

    out = torch.zeros((batch, q_heads, head_dim), dtype=torch.float64, device=q.device)
    lens = seq_lens.tolist()
    table = block_table.tolist()
    for b, n in enumerate(lens):
        if n == 0:
            continue
        pages = torch.tensor(table[b][: -(-n // page_size)], dtype=torch.long, device=q.device)
        k = widen(k_cache[pages].reshape(-1, kv_heads, head_dim)[:n], k_scale)  # [n, Hkv, D]
        v = widen(v_cache[pages].reshape(-1, kv_heads, head_dim)[:n], v_scale)
        qb = q[b].to(torch.float64).reshape(kv_heads, group, head_dim)  # [Hkv, G, D]
        scores = torch.matmul(qb, k.permute(1, 2, 0)) * scale  # [Hkv, G, n]
        if softcap is not None:
            scores = softcap * torch.tanh(scores / softcap)
        # A window drops the tokens before it (never read: they may hold anything).
        first = 0 if window is None else max(0, n - window)
        probs = torch.softmax(scores[..., first:], dim=-1)
        out[b] = torch.matmul(probs, v[first:].permute(1, 0, 2)).reshape(q_heads, head_dim)
    return out.to(q.dtype)


# ---- geometry and inputs -----------------------------------------------------------------------

#: The decode geometry every measured case uses: Llama-3 / Qwen3 (32 query heads, 8 KV heads,
#: head_dim 128, 16-token pages).
Q_HEADS, KV_HEADS, HEAD_DIM, PAGE_SIZE = 32, 8, 128, 16


def decode_pool(batch: int, context: int, dtype: str, device: torch.device | str, *,
                layout: str = "fragmented", storage: str = "combined",
                min_l2_multiple: float | None = None, kv_heads: int = KV_HEADS,
                head_dim: int = HEAD_DIM, page_size: int = PAGE_SIZE, seed: int = 0):
    """The fragmented paged pool of a decode case: >= 8x L2 on a GPU (cold reads), no size
    floor on a CPU."""
    from kvbench.fixtures.pool import paged_pool

    dev = resolve_device(device)
    mult = (8 if dev.type == "cuda" else 0) if min_l2_multiple is None else min_l2_multiple
    return paged_pool(batch, context, kv_heads=kv_heads, head_dim=head_dim, page_size=page_size,
                      dtype=dtype, layout=layout, storage=storage, min_l2_multiple=mult,
                      device=dev, seed=seed)


def decode_inputs(pool, q_heads: int = Q_HEADS, *, seed: int = 0, window: int | None = None,
                  softcap: float | None = None) -> OpInputs:
    """A decode step over `pool` with a seeded query: the inputs of every paged_decode row.
    ``window`` / ``softcap``: decode options the rows are called with (part of the problem,
    so dispatch routes around a row that does not implement them), checked and proved
    against the reference that applies them; the Work counts the window's tokens only."""
    q = make_decode_query(pool, q_heads, seed=seed)
    args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    options = _option_kwargs(window, softcap)
    kwargs = {"k_scale": pool.k_scale, "v_scale": pool.v_scale, **options}
    work = paged_decode_work(
        pool.seq_lens_list, q_heads=q_heads, kv_heads=pool.kv_heads, head_dim=pool.head_dim,
        kv_dtype=pool.kv_dtype_name, q_bytes=q.element_size(), page_size=pool.page_size,
        window=window,
    )
    return OpInputs(
        describe_paged_decode(*args[:4], **kwargs), args, kwargs, work,
        check=lambda fn: check_paged_decode(fn, pool, q, **options),
        proof=lambda fn: proof_paged_decode(fn, pool, q, **options),
        extra={"pool": pool, "q": q, "options": options},
    )


def geometry_pool(geometry: Geometry, batch: int, context: int, dtype: str,
                  device: torch.device | str, **kw: Any):
    """decode_pool at a model geometry (kvbench.ops.decode_geometry): its KV heads, head_dim
    and page size; `kw` as decode_pool's (layout, storage, min_l2_multiple, seed)."""
    return decode_pool(batch, context, dtype, device, kv_heads=geometry.kv_heads,
                       head_dim=geometry.head_dim, page_size=geometry.page_size, **kw)


def geometry_inputs(geometry: Geometry, pool, *, seed: int = 0) -> OpInputs:
    """decode_inputs on a geometry_pool: the geometry's query heads and decode options."""
    return decode_inputs(pool, geometry.q_heads, seed=seed, **geometry.options)


# ---- what the reports and `kvbench tune` measure ---------------------------------------------

#: The measured ceiling this op's %ceil divides by (harness.report.CEILING_KINDS): decode
#: streams its KV in and writes a few KiB, so it is a read.
CEILING = "read"


def _tune_params(batch: int, seq_len: int, **kw: int) -> tuple[str, dict[str, int]]:
    params = {"batch": batch, "seq_len": seq_len, "kv_heads": KV_HEADS, "q_heads": Q_HEADS,
              "head_dim": HEAD_DIM, "page_size": PAGE_SIZE, **kw}
    return f"batch={batch},seq_len={seq_len}", params


#: `kvbench tune` cases on a GPU, one per shape bucket: (label, tune_inputs params).
TUNE_CASES = tuple(_tune_params(b, c) for b in (1, 8, 32, 64) for c in (1024, 4096, 8192, 32768))
#: On a CPU: small cases, so tune runs end to end on a developer machine (the interpreter's
#: numbers rank nothing on a GPU: the table carries the CPU's name).
TUNE_CASES_CPU = (
    _tune_params(1, 64, kv_heads=2, q_heads=4, head_dim=32),
    _tune_params(2, 1040, kv_heads=1, q_heads=2, head_dim=16, page_size=64),
)


def tune_inputs(params: dict[str, int], dtype: str, storage: str, device) -> tuple[OpInputs, Any]:
    """A tune case's inputs on the project pool (>= 8x L2 on a GPU) and what frees them."""
    pool = decode_pool(params["batch"], params["seq_len"], dtype, device, storage=storage,
                       kv_heads=params["kv_heads"], head_dim=params["head_dim"],
                       page_size=params["page_size"])
    return decode_inputs(pool, params["q_heads"]), pool.free
