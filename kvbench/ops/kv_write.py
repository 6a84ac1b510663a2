"""kv_write: scatter new K/V rows [N, Hkv, D] into the paged caches at slot_mapping (fp8:
quantized on write with the caller's scales).

The op's oracle (its entry point is kvbench.api.kv_write): `describe_kv_write` and
`write_fields` (the same key from tensor metadata only); the gate (exact for every dtype:
`RTOL` / `ATOL` are zero) `check_kv_write`, which also checks that no other slot changed;
`proof_kv_write`, `golden_check_kv_write`; the inputs (`make_write_inputs`: scattered or
page-order slots; `write_inputs`), `kv_write_work`, the reference `kv_write_ref`, the report's
ceiling and the tune cases. Kernels: kvbench/kernels/kv_write.py.
"""

from __future__ import annotations

import torch

from kvbench.core.dtypes import BYTES, FROM_TORCH
from kvbench.harness.proof import TimedProof
from kvbench.harness.verify import verify
from kvbench.harness.work import Work
from kvbench.kernels._validate import validated_calls
from kvbench.ops.common import (
    OpInputs,
    Problem,
    RefCache,
    as_values,
    bad_input,
    e4m3_encode_ref,
    scale_f64,
)
from kvbench.ops.keys import TAGS, write_bucket

#: The ranks that make a call paged (its kv:paged tag), for the error of a call that is not.
PAGED_FORMS = {"k_cache": "[pages, page_size, kv_heads, head_dim]",
               "v_cache": "[pages, page_size, kv_heads, head_dim]"}


def write_fields(k, k_cache, v_cache, scaled: bool) -> tuple:
    """(dtype, tags, bucket, device) of a kv_write call, from tensor metadata only: the
    arguments of dispatch.core.cached_selection after the op name."""
    try:
        paged = len(k_cache.shape) == 4 and len(v_cache.shape) == 4
        return (
            FROM_TORCH[k_cache.dtype],
            TAGS[paged, not (k_cache.is_contiguous() and v_cache.is_contiguous()), scaled, False],
            write_bucket(k.shape[0]),
            k_cache.device,
        )
    except (AttributeError, KeyError, IndexError, TypeError):
        raise bad_input({"k": k, "k_cache": k_cache, "v_cache": v_cache}) from None


def describe_kv_write(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                      v_cache: torch.Tensor, *, k_scale: torch.Tensor | None = None,
                      v_scale: torch.Tensor | None = None) -> Problem:
    """The dispatch problem of a kv_write call on these inputs (kvbench.api.kv_write)."""
    scaled = k_scale is not None or v_scale is not None
    dtype, tags, _, device = write_fields(k, k_cache, v_cache, scaled)
    return Problem("kv_write", dtype, tags, {"n": k.shape[0]}, device)


#: The gate's elementwise tolerances per dtype name (verify: |out - ref| <= atol + rtol|ref|).
RTOL: dict[str, float] = {"fp16": 0.0, "bf16": 0.0, "fp8": 0.0}
ATOL: dict[str, float] = {"fp16": 0.0, "bf16": 0.0, "fp8": 0.0}


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
    tokens; slots must be distinct and in range (validated here on the host).
    """

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
    with validated_calls():
        fn(k, v, kc, vc, slot_mapping, **scales)

    ref_k, ref_v = kv_write_ref(k, v, slot_mapping, cache_dtype=dtype, **scales)
    diff = 0.0
    for name, cache, ref in (("K", kc, ref_k), ("V", vc, ref_v)):
        got = cache[dst // ps, dst % ps]
        want = ref[keep]
        if dtype == "fp8":
            got = got.view(torch.uint8)
        diff = max(diff, verify(f"kv_write {name} rows read back ({dtype})", got, want,
                                rtol=RTOL[dtype], atol=ATOL[dtype]))
    for name, cache, old in (("K", kc, before[0]), ("V", vc, before[1])):
        now = _bits(cache[untouched // ps, untouched % ps])
        verify(f"kv_write untouched {name} rows ({dtype})", now, old, rtol=0.0, atol=0.0)
    return diff



def proof_kv_write(fn, pool, k: torch.Tensor, v: torch.Tensor,
                   slot_mapping: torch.Tensor) -> TimedProof:
    """The TimedProof of a kv_write row timed on ``(k, v, pool, slot_mapping)``.

    Before the last timed call: the destination rows are poisoned (all-ones bits) and k, v are
    negated in place; that call's rows are then read back through the destination slots and
    compared bit-exact (the kernel module's tolerances) with the reference of -k, -v. A writer
    that skips rows it wrote before leaves poison; one that replays an earlier result leaves
    +k. restore() negates k and v back. ``fn`` only names the row in messages."""
    from kvbench.harness.verify import error_figures

    dtype = pool.kv_dtype_name
    ps = pool.page_size
    keep = torch.nonzero(slot_mapping >= 0).squeeze(1)
    dst = slot_mapping[keep]
    page, offset = dst // ps, dst % ps
    scales = {"k_scale": pool.k_scale, "v_scale": pool.v_scale} if dtype == "fp8" else {}
    refs = RefCache(lambda: kv_write_ref(k, v, slot_mapping, cache_dtype=dtype, **scales))
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
                   rtol=RTOL[dtype], atol=ATOL[dtype])
            got_all.append(as_values(got).reshape(-1))
            want_all.append(as_values(want).reshape(-1))
        return error_figures(torch.cat(got_all), torch.cat(want_all))

    def restore() -> None:
        k.neg_()
        v.neg_()

    return TimedProof(prepare, check, restore)


def golden_check_kv_write(fn, dtype: str, device) -> float:
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


def kv_write_work(n_tokens: int, *, kv_heads: int, head_dim: int, in_bytes: int,
                  cache_dtype: str) -> Work:
    """Scatter N new K and V rows: read them once (input dtype), write them once (cache dtype).

    The int64 slot mapping is read once. fp8 quantization's scales are two scalars.
    """
    if cache_dtype not in BYTES:
        raise ValueError(f"cache_dtype {cache_dtype!r}: accepted {sorted(BYTES)}")
    elems = 2 * n_tokens * kv_heads * head_dim
    return Work(moved=float(elems * in_bytes + elems * BYTES[cache_dtype] + 8 * n_tokens))


def kv_write_ref(
    k: torch.Tensor,
    v: torch.Tensor,
    slot_mapping: torch.Tensor,
    *,
    cache_dtype: str,
    k_scale: torch.Tensor | float | None = None,
    v_scale: torch.Tensor | float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Expected cache contents of the rows a scatter writes: ``(k_rows, v_rows)``, [N, H, D].

    Row ``i`` is what must sit at ``slot_mapping[i]`` after the write; rows whose slot is
    negative (skipped padding) are returned too and must be ignored by the caller.
    ``cache_dtype`` "fp16"/"bf16": an exact copy in the input dtype. "fp8": uint8 e4m3 codes of
    ``fp32(x) / fp32(scale)`` (correctly rounded fp32 quotient), saturated, ties to even.
    """
    if slot_mapping.shape != k.shape[:1]:
        raise ValueError(
            f"slot_mapping must have shape ({k.shape[0]},), got {tuple(slot_mapping.shape)}"
        )
    if cache_dtype in ("fp16", "bf16"):
        want = torch.float16 if cache_dtype == "fp16" else torch.bfloat16
        if k.dtype != want or v.dtype != want:
            raise ValueError(f"cache_dtype={cache_dtype!r} needs {want} k and v, got {k.dtype}")
        return k.clone(), v.clone()
    if cache_dtype != "fp8":
        raise ValueError(f"cache_dtype={cache_dtype!r} is not accepted; accepted: fp16, bf16, fp8")
    if k_scale is None or v_scale is None:
        raise ValueError("cache_dtype='fp8' needs k_scale and v_scale")
    rows = []
    for x, scale in ((k, k_scale), (v, v_scale)):
        quotient = (x.to(torch.float64) / scale_f64(scale, x.device)).to(torch.float32)
        rows.append(e4m3_encode_ref(quotient))
    return rows[0], rows[1]


# ---- inputs --------------------------------------------------------------------------------


def write_inputs(pool, n: int, *, seed: int = 0, order: str = "scattered") -> OpInputs:
    """`n` new K/V rows and their slots in `pool` (make_write_inputs): the inputs of every
    kv_write row."""
    k, v, slots = make_write_inputs(pool, n, seed=seed, order=order)
    args = (k, v, pool.k_cache, pool.v_cache, slots)
    kwargs = {"k_scale": pool.k_scale, "v_scale": pool.v_scale}
    work = kv_write_work(n, kv_heads=pool.kv_heads, head_dim=pool.head_dim,
                         in_bytes=k.element_size(), cache_dtype=pool.kv_dtype_name)
    return OpInputs(
        describe_kv_write(*args[:4], **kwargs), args, kwargs, work,
        check=lambda fn: check_kv_write(fn, pool, k, v, slots),
        proof=lambda fn: proof_kv_write(fn, pool, k, v, slots),
        extra={"pool": pool},
    )


# ---- what the reports and `kvbench tune` measure ---------------------------------------------

#: The measured ceiling this op's %ceil divides by: a scatter of rows it read is a copy.
CEILING = "copy"


def _tune_params(n: int, **kw: int) -> tuple[str, dict[str, int]]:
    params = {"n": n, "num_seqs": 8, "seq_len": 2048, "kv_heads": 8, "head_dim": 128,
              "page_size": 16, **kw}
    return f"n={n}", params


#: `kvbench tune` cases on a GPU, one per shape bucket: (label, tune_inputs params).
TUNE_CASES = (_tune_params(32), _tune_params(8192))
#: On a CPU: small cases, so tune runs end to end on a developer machine.
TUNE_CASES_CPU = (
    _tune_params(8, num_seqs=2, seq_len=64, kv_heads=2, head_dim=32),
    _tune_params(96, num_seqs=2, seq_len=64, kv_heads=2, head_dim=32),
)


def tune_inputs(params: dict[str, int], dtype: str, storage: str, device):
    """A tune case's inputs on the project pool (>= 8x L2 on a GPU) and what frees them."""
    from kvbench.ops.paged_decode import decode_pool

    pool = decode_pool(params["num_seqs"], params["seq_len"], dtype, device, storage=storage,
                       kv_heads=params["kv_heads"], head_dim=params["head_dim"],
                       page_size=params["page_size"])
    return write_inputs(pool, params["n"]), pool.free
