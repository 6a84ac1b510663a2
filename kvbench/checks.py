"""Correctness gates: run an implementation against kvbench.reference before any timing.

`check_<op>` returns max_abs_diff and raises harness.VerificationError on a mismatch; the
tolerances are the kernel module's `_RTOL` / `_ATOL`, shared with tests and benchmarks.
`selfcheck_<op>` builds a tiny problem so dispatch.golden can verify a registry row.
Every checked call runs in safe mode (``KVBENCH_CHECK=1``, docs/safety.md): index values are
validated on the device too, and a failure raises here instead of becoming a wrong number.
"""

from __future__ import annotations

import os

import torch

from kvbench.harness.proof import TimedProof, poison_
from kvbench.harness.verify import SYSTEMATIC_TOLERANCE, verify, verify_unbiased
from kvbench.kernels._validate import checked_calls

# ---- paged_decode (owned by the paged-decode work) -------------------------------------
#
# The kernel module (for _RTOL/_ATOL) is imported inside the functions, for the same reason
# as the kv_write section below: importing it decorates Triton kernels.

_DECODE_DTYPES = ("fp16", "bf16", "fp8")
_Q_DTYPE_NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16"}


def _poison_next_alloc(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> None:
    """Best effort: leave NaN in the block the kernel's ``torch.empty`` output will reuse.

    The caching allocator (and, for small sizes, malloc) hands the freed block straight back
    for a same-sized request, so an output element the kernel never writes reads NaN and
    fails verify instead of passing on stale-but-plausible memory.
    """
    junk = torch.full(shape, _poison_value(dtype), dtype=dtype, device=device)
    del junk


def _poison_value(dtype: torch.dtype) -> float | int:
    """NaN for float dtypes; 0xFF for bytes (the e4m3 NaN code kvbench.fixtures.quant never emits)."""
    return float("nan") if dtype.is_floating_point and dtype.itemsize > 1 else 0xFF


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


def check_paged_decode(fn, pool, q: torch.Tensor, *, sm_scale: float | None = None) -> float:
    """Run ``fn`` on the pool and compare with ``paged_decode_ref``; return max |out - ref|.

    Tolerances are the kernel module's for the pool's KV dtype, loosened to q's dtype's entry
    when that is looser (the kernel's arithmetic runs in q's dtype). NaN anywhere in the
    output (e.g. an element never written, see ``_poison_next_alloc``) fails verify. Then the
    systematic-error criterion (verify.verify_unbiased, decode_systematic_tolerance): a
    uniformly scaled or offset output fails even inside the elementwise tolerances.
    """
    from kvbench.reference import paged_decode_ref

    if q.dtype not in _Q_DTYPE_NAMES:
        raise ValueError(f"q has dtype {q.dtype}; accepted: torch.float16, torch.bfloat16")
    kv_name = pool.kv_dtype_name
    args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    kwargs = {"sm_scale": sm_scale, "k_scale": pool.k_scale, "v_scale": pool.v_scale}
    ref = paged_decode_ref(*args, **kwargs)
    _poison_next_alloc(tuple(q.shape), q.dtype, q.device)
    with checked_calls():
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
    from kvbench.kernels.paged_decode import _ATOL, _RTOL

    q_name = _Q_DTYPE_NAMES[q.dtype]
    label = getattr(fn, "__name__", fn)
    if not isinstance(out, torch.Tensor) or out.dtype != q.dtype:
        got = out.dtype if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"{label} returned {got}; expected {q.dtype}")
    rtol = max(_RTOL[kv_name], _RTOL[q_name])
    atol = max(_ATOL[kv_name], _ATOL[q_name])
    name = f"paged_decode[{label}, kv={kv_name}, q={q_name}]"
    verify(name, out, ref, rtol=rtol, atol=atol)
    return verify_unbiased(name, out, ref,
                           tol=decode_systematic_tolerance(kv_name, q_name, q.device))


class _RefCache:
    """The reference of a perturbed input, computed once per input content: the proofs of the
    selector rows measured on one input share it (the perturbation is the same every time)."""

    def __init__(self, compute) -> None:
        self._compute = compute
        self._key: list[torch.Tensor] | None = None
        self._value = None

    def get(self, *inputs: torch.Tensor):
        if self._key is None or not all(
            a.shape == b.shape and torch.equal(a, b) for a, b in zip(self._key, inputs)
        ):
            self._value = self._compute()
            self._key = [t.clone() for t in inputs]
        return self._value


def proof_paged_decode(fn, pool, q: torch.Tensor, *, sm_scale: float | None = None) -> TimedProof:
    """The TimedProof of a decode row timed on ``(q, pool)`` (harness/proof.py).

    Before the last timed call: the previous call's output is poisoned and q is negated in
    place (a different softmax for every head, same shapes and ranges); that call's output is
    then checked against the reference of -q with the same gate as check_paged_decode.
    restore() negates q back (exact). ``fn`` only names the row in messages."""
    from kvbench.reference import paged_decode_ref

    if q.dtype not in _Q_DTYPE_NAMES:
        raise ValueError(f"q has dtype {q.dtype}; accepted: torch.float16, torch.bfloat16")
    args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    kwargs = {"sm_scale": sm_scale, "k_scale": pool.k_scale, "v_scale": pool.v_scale}
    refs = _RefCache(lambda: paged_decode_ref(*args, **kwargs))

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


def selfcheck_paged_decode(fn, dtype: str, device, *, head_dim: int = 64,
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


def selfcheck_paged_decode_cluster(fn, dtype: str, device) -> float:
    """``selfcheck_paged_decode`` for cuda/cluster_decode: head_dim 128 (its only size), fp8
    on dim-major V pages (the only fp8 layout it reads)."""
    storage = "v_dim_major" if dtype == "fp8" else "combined"
    return selfcheck_paged_decode(fn, dtype, device, head_dim=128, storage=storage)


# ---- kv_write (owned by the kv_write / kv_gather_fp8 work) ------------------------------
#
# Kernel modules are imported inside the functions: importing one decorates its Triton
# kernels, which fixes compiled-vs-interpreted at that moment, and kvbench.checks is imported
# early (by dispatch) on machines where TRITON_INTERPRET is set later by the caller.

_KV_WRITE_DTYPES = ("fp16", "bf16", "fp8")
#: untouched cache rows compared before/after a write (plus every written slot's neighbours)
_UNTOUCHED_SAMPLE = 4096


def _bits(t: torch.Tensor) -> torch.Tensor:
    """An integer view of cache rows, so "unchanged" means the same bits (incl. NaN, -0)."""
    if t.dtype in (torch.float16, torch.bfloat16):
        return t.view(torch.int16)
    if t.dtype == torch.float8_e4m3fn:
        return t.view(torch.uint8)
    return t


#: Slot orders of make_write_inputs: scattered (the default) and in page order.
WRITE_ORDERS = ("scattered", "pages")


def make_write_inputs(
    pool, n: int, *, seed: int = 0, order: str = "scattered"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """New rows ``k``, ``v`` [n, Hkv, D] and ``n`` distinct slots of the pool.

    ``order="scattered"``: slots drawn without replacement from the pages the pool's
    (fragmented) block table hands to its sequences, in random order, so consecutive tokens
    land on unrelated pages. ``order="pages"``: the same pages' slots in order, sequence after
    sequence, page after page of its block table, as a prefill writes them (runs of page_size
    consecutive slots, on fragmented pages). Either way, when ``n`` exceeds those slots the
    rest of the pool is used too. Inputs are fp16 for an fp8 pool (the engine's activations;
    quantized on write with the pool's scales), else the pool's dtype. Seeded on the host
    generator: identical on every device.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be an int >= 0, got {n!r}")
    if order not in WRITE_ORDERS:
        raise ValueError(f"order={order!r} is not accepted; accepted: {WRITE_ORDERS}")
    ps = pool.page_size
    total = pool.num_pages * ps
    if n > total:
        raise ValueError(f"n={n} exceeds the pool's {total} slots")
    gen = torch.Generator().manual_seed(seed)
    pages = torch.cat(
        [pool.block_table[i, : -(-length // ps)].cpu().to(torch.int64)
         for i, length in enumerate(pool.seq_lens_list)]
    )
    if order == "scattered":
        pages = pages.unique()
    candidates = (pages[:, None] * ps + torch.arange(ps)[None, :]).reshape(-1)
    if n > candidates.numel():
        candidates = torch.arange(total)
    if order == "scattered":
        slots = candidates[torch.randperm(candidates.numel(), generator=gen)[:n]]
    else:
        slots = candidates[:n].clone()
    in_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8": torch.float16}[
        pool.kv_dtype_name
    ]
    shape = (n, pool.kv_heads, pool.head_dim)
    k = torch.randn(shape, generator=gen).to(in_dtype)
    v = torch.randn(shape, generator=gen).to(in_dtype)
    return k.to(pool.device), v.to(pool.device), slots.to(pool.device)


def check_kv_write(fn, pool, k: torch.Tensor, v: torch.Tensor, slot_mapping: torch.Tensor) -> float:
    """Run ``fn`` (a kv_write row) on ``pool`` and verify it; returns max_abs_diff (0.0).

    Written rows are read back through the destination index (page, offset) of each token
    through the pool's own K and V views: in the combined buffer a wrong stride lands K in the
    V half, which this catches and a sequential index would hide. A sample of untouched rows,
    including every written slot's neighbours, must keep its bits. Negative slots are skipped
    tokens; slots must be distinct and in range (checked here on the host).
    """
    from kvbench.kernels.kv_write import _ATOL, _RTOL
    from kvbench.reference import kv_write_ref

    dtype = pool.kv_dtype_name
    ps = pool.page_size
    total = pool.num_pages * ps
    slots = slot_mapping.tolist()
    written = [s for s in slots if s >= 0]
    if len(set(written)) != len(written) or any(s >= total for s in written):
        raise ValueError(f"slot_mapping must hold distinct slots < {total} (or negatives)")
    taken = set(written)
    near = {s + d for s in written for d in (-1, 1)} - taken
    rest = [s for s in range(total) if s not in taken and s not in near]
    if len(rest) > _UNTOUCHED_SAMPLE:
        gen = torch.Generator().manual_seed(0)
        rest = [rest[i] for i in torch.randperm(len(rest), generator=gen)[:_UNTOUCHED_SAMPLE]]
    untouched = torch.tensor(
        sorted(s for s in near | set(rest) if 0 <= s < total), dtype=torch.int64
    ).to(pool.device)
    kc, vc = pool.k_cache, pool.v_cache
    before = [_bits(c[untouched // ps, untouched % ps]).clone() for c in (kc, vc)]

    keep = torch.nonzero(slot_mapping >= 0).squeeze(1)
    dst = slot_mapping[keep]
    # Poison the destination rows first: an earlier row's write (or the first call of a
    # benchmark) may already have put the right values there, and a row that writes nothing
    # (e.g. into a temporary .contiguous() copy) would then read back correct.
    for cache in (kc, vc):
        _bits(cache)[dst // ps, dst % ps] = -1  # all-ones bits: NaN in fp16/bf16, 0xFF in e4m3

    scales = {"k_scale": pool.k_scale, "v_scale": pool.v_scale} if dtype == "fp8" else {}
    with checked_calls():
        fn(k, v, kc, vc, slot_mapping, **scales)

    ref_k, ref_v = kv_write_ref(k, v, slot_mapping, cache_dtype=dtype, **scales)
    diff = 0.0
    for name, cache, ref in (("K", kc, ref_k), ("V", vc, ref_v)):
        got = cache[dst // ps, dst % ps]
        want = ref[keep]
        if dtype == "fp8":
            got = got.view(torch.uint8)
        diff = max(diff, verify(f"kv_write {name} rows read back ({dtype})", got, want,
                                rtol=_RTOL[dtype], atol=_ATOL[dtype]))
    for name, cache, old in (("K", kc, before[0]), ("V", vc, before[1])):
        now = _bits(cache[untouched // ps, untouched % ps])
        verify(f"kv_write untouched {name} rows ({dtype})", now, old, rtol=0.0, atol=0.0)
    return diff


def _as_values(t: torch.Tensor) -> torch.Tensor:
    """Float values of cache rows for the error figures: fp8 bytes widened through e4m3."""
    if t.dtype == torch.uint8:
        return t.view(torch.float8_e4m3fn).to(torch.float32)
    if t.dtype == torch.float8_e4m3fn:
        return t.to(torch.float32)
    return t.to(torch.float32)


def proof_kv_write(fn, pool, k: torch.Tensor, v: torch.Tensor,
                   slot_mapping: torch.Tensor) -> TimedProof:
    """The TimedProof of a kv_write row timed on ``(k, v, pool, slot_mapping)``.

    Before the last timed call: the destination rows are poisoned (all-ones bits) and k, v are
    negated in place; that call's rows are then read back through the destination slots and
    compared bit-exact (the kernel module's tolerances) with the reference of -k, -v. A writer
    that skips rows it wrote before leaves poison; one that replays an earlier result leaves
    +k. restore() negates k and v back. ``fn`` only names the row in messages."""
    from kvbench.harness.verify import error_figures
    from kvbench.kernels.kv_write import _ATOL, _RTOL
    from kvbench.reference import kv_write_ref

    dtype = pool.kv_dtype_name
    ps = pool.page_size
    keep = torch.nonzero(slot_mapping >= 0).squeeze(1)
    dst = slot_mapping[keep]
    page, offset = dst // ps, dst % ps
    scales = {"k_scale": pool.k_scale, "v_scale": pool.v_scale} if dtype == "fp8" else {}
    refs = _RefCache(lambda: kv_write_ref(k, v, slot_mapping, cache_dtype=dtype, **scales))
    label = getattr(fn, "__name__", fn)

    def prepare(previous: object) -> None:
        del previous  # the output is the cache rows, poisoned here
        for cache in (pool.k_cache, pool.v_cache):
            _bits(cache)[page, offset] = -1
        k.neg_()
        v.neg_()

    def check(out: object):
        del out
        ref_k, ref_v = refs.get(k, v)
        got_all, want_all = [], []
        for name, cache, ref in (("K", pool.k_cache, ref_k), ("V", pool.v_cache, ref_v)):
            got, want = cache[page, offset], ref[keep]
            if dtype == "fp8":
                got = got.view(torch.uint8)
            verify(f"kv_write[{label}] timed call: {name} rows read back ({dtype})", got, want,
                   rtol=_RTOL[dtype], atol=_ATOL[dtype])
            got_all.append(_as_values(got).reshape(-1))
            want_all.append(_as_values(want).reshape(-1))
        return error_figures(torch.cat(got_all), torch.cat(want_all))

    def restore() -> None:
        k.neg_()
        v.neg_()

    return TimedProof(prepare, check, restore)


def selfcheck_kv_write(fn, dtype: str, device) -> float:
    """Tiny fragmented combined-buffer problem with two skipped tokens, for dispatch.golden."""
    from kvbench.fixtures.pool import paged_pool

    if dtype not in _KV_WRITE_DTYPES:
        raise ValueError(f"dtype={dtype!r} is not accepted; accepted: {_KV_WRITE_DTYPES}")
    pool = paged_pool(3, [40, 23, 57], kv_heads=2, head_dim=64, page_size=16, dtype=dtype,
                      layout="fragmented", storage="combined", min_l2_multiple=0,
                      device=device, seed=0)
    try:
        k, v, slots = make_write_inputs(pool, 24, seed=0)
        slots[3] = -1
        slots[17] = -1
        return check_kv_write(fn, pool, k, v, slots)
    finally:
        pool.free()


# ---- kv_gather_fp8 (owned by the kv_write / kv_gather_fp8 work) -------------------------


def check_kv_gather_fp8(
    fn, kv_cache: torch.Tensor, page_table_flat: torch.Tensor, extra_rows: int
) -> float:
    """Run ``fn`` (a kv_gather_fp8 row) and require bit-exact bytes; returns 0.0.

    Compared on uint8 views (fp8 values would hide -0 vs +0 and NaN payloads); the pad rows
    after the gathered ones are checked separately to be all zero bytes, with their own name
    in the error, since stale pad bytes are the cached-buffer variant's specific failure.
    """
    from kvbench.harness.verify import VerificationError
    from kvbench.kernels.kv_gather_fp8 import _ATOL, _RTOL
    from kvbench.reference import kv_gather_fp8_ref

    rows = int(page_table_flat.shape[0]) + extra_rows
    _poison_next_alloc((rows, 576), torch.uint8, kv_cache.device)  # stale bytes fail, not pass
    with checked_calls():
        out = fn(kv_cache, page_table_flat, extra_rows=extra_rows)
    if not isinstance(out, torch.Tensor) or out.dtype != torch.float8_e4m3fn:
        got = out.dtype if isinstance(out, torch.Tensor) else type(out).__name__
        raise VerificationError(f"kv_gather_fp8: output must be float8_e4m3fn, got {got}",
                                name="kv_gather_fp8")
    ref = kv_gather_fp8_ref(kv_cache, page_table_flat, extra_rows=extra_rows)
    got = out.view(torch.uint8)
    n = int(page_table_flat.shape[0])
    diff = verify("kv_gather_fp8 bytes", got, ref.view(torch.uint8),
                  rtol=_RTOL["fp8"], atol=_ATOL["fp8"])
    verify("kv_gather_fp8 pad rows (must be zero bytes)", got[n:],
           torch.zeros((extra_rows, got.shape[-1]), dtype=torch.uint8, device=got.device),
           rtol=0.0, atol=0.0)
    return diff


def proof_kv_gather_fp8(fn, kv_cache: torch.Tensor, page_table_flat: torch.Tensor,
                        extra_rows: int) -> TimedProof:
    """The TimedProof of a kv_gather_fp8 row timed on ``(kv_cache, page_table_flat)``.

    Before the last timed call: the previous call's output is poisoned (0xFF bytes: e4m3
    NaN) and the page table is reversed in place (the same rows in the opposite order);
    that call's output must then equal the reference of the reversed table bit for bit, pad
    rows zero. restore() reverses the table back. ``fn`` only names the row in messages."""
    from kvbench.harness.verify import VerificationError, error_figures
    from kvbench.reference import kv_gather_fp8_ref

    refs = _RefCache(lambda: kv_gather_fp8_ref(kv_cache, page_table_flat, extra_rows=extra_rows))
    label = getattr(fn, "__name__", fn)

    def reverse() -> None:
        page_table_flat.copy_(page_table_flat.flip(0))

    def prepare(previous: object) -> None:
        poison_(previous)
        reverse()

    def check(out: object):
        if not isinstance(out, torch.Tensor) or out.dtype != torch.float8_e4m3fn:
            got = out.dtype if isinstance(out, torch.Tensor) else type(out).__name__
            raise VerificationError(f"kv_gather_fp8[{label}] timed call: output must be "
                                    f"float8_e4m3fn, got {got}", name="kv_gather_fp8")
        ref = refs.get(page_table_flat)
        got = out.view(torch.uint8)
        n = int(page_table_flat.shape[0])
        verify(f"kv_gather_fp8[{label}] timed call: bytes", got, ref.view(torch.uint8),
               rtol=0.0, atol=0.0)
        return error_figures(_as_values(got[:n]), _as_values(ref.view(torch.uint8)[:n]))

    return TimedProof(prepare, check, reverse)


def selfcheck_kv_gather_fp8(fn, dtype: str = "fp8", device=None) -> float:
    """Tiny ragged problem, then a smaller one on the same row (cached-buffer shrink reuse)."""
    from kvbench.fixtures.gather_pool import build_gather_pool, build_page_table_flat

    if dtype != "fp8":
        raise ValueError(f"dtype={dtype!r} is not accepted; kv_gather_fp8 accepts 'fp8' only")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    # Tiny on purpose: the legacy row runs 5 programs per token, slow under the interpreter.
    pool_tokens = 256
    kv_cache = build_gather_pool(pool_tokens, device=device, seed=0)
    big = build_page_table_flat([21, 10], pool_tokens, seed=1, device=device)
    small = build_page_table_flat([4], pool_tokens, seed=2, device=device)
    diff = check_kv_gather_fp8(fn, kv_cache, big, 5)
    return max(diff, check_kv_gather_fp8(fn, kv_cache, small, 3))
