"""kv_gather_fp8: gather fp8 KV rows through a flat page table (656-byte cache rows -> 576-byte
fp8 rows) plus zeroed landing-pad rows.

The op's oracle (its entry point is kvbench.api.kv_gather_fp8): `describe_kv_gather_fp8` and
`gather_fields` (the same key from tensor metadata only); the bit-exact gate
`check_kv_gather_fp8`, `proof_kv_gather_fp8`, `golden_check_kv_gather_fp8`; `gather_inputs`,
`kv_gather_fp8_work` (payload bytes only: a row's extra pre-zeroing shows as lower GB/s), the
byte-math reference `kv_gather_fp8_ref`, the report's ceiling and the tune cases. Kernels:
kvbench/kernels/kv_gather_fp8.py; fixture: kvbench/fixtures/gather_pool.py.
"""

from __future__ import annotations

import torch

from kvbench.core.device import resolve_device
from kvbench.core.dtypes import FROM_TORCH
from kvbench.harness.proof import TimedProof, poison_
from kvbench.harness.verify import verify
from kvbench.harness.work import Work
from kvbench.kernels._validate import validated_calls
from kvbench.ops.common import (
    OpInputs,
    Problem,
    RefCache,
    as_values,
    bad_input,
    e4m3_decode_ref,
    e4m3_encode_ref,
    poison_next_alloc,
)
from kvbench.ops.keys import TAGS, gather_bucket

#: The ranks that make a call paged (its kv:paged tag), for the error of a call that is not.
PAGED_FORMS = {"kv_cache": "[pool_tokens, 1, row_bytes]", "page_table_flat": "[kv_len]"}


def gather_fields(kv_cache, page_table_flat) -> tuple:
    """(dtype, tags, bucket, device) of a kv_gather_fp8 call, from tensor metadata only: the
    arguments of dispatch.core.cached_selection after the op name."""
    try:
        pts = page_table_flat.shape
        paged = len(kv_cache.shape) == 3 and len(pts) == 1
        return (
            FROM_TORCH[kv_cache.dtype],
            TAGS[paged, not kv_cache.is_contiguous(), False, False],
            gather_bucket(pts[0]),
            kv_cache.device,
        )
    except (AttributeError, KeyError, IndexError, TypeError):
        raise bad_input({"kv_cache": kv_cache, "page_table_flat": page_table_flat}) from None


def describe_kv_gather_fp8(kv_cache: torch.Tensor, page_table_flat: torch.Tensor) -> Problem:
    """The dispatch problem of a kv_gather_fp8 call on these inputs (kvbench.api.kv_gather_fp8)."""
    dtype, tags, _, device = gather_fields(kv_cache, page_table_flat)
    return Problem("kv_gather_fp8", dtype, tags, {"kv_len": page_table_flat.shape[0]}, device)


#: The gate's elementwise tolerances per dtype name (verify: |out - ref| <= atol + rtol|ref|).
RTOL: dict[str, float] = {"fp8": 0.0}
ATOL: dict[str, float] = {"fp8": 0.0}


def check_kv_gather_fp8(
    fn, kv_cache: torch.Tensor, page_table_flat: torch.Tensor, extra_rows: int
) -> float:
    """Run ``fn`` (a kv_gather_fp8 row) and require bit-exact bytes; returns 0.0.

    Compared on uint8 views (fp8 values would hide -0 vs +0 and NaN payloads); the pad rows
    after the gathered ones are checked separately to be all zero bytes, with their own name
    in the error, since stale pad bytes are the cached-buffer variant's specific failure.
    """
    from kvbench.harness.verify import VerificationError

    rows = int(page_table_flat.shape[0]) + extra_rows
    poison_next_alloc((rows, 576), torch.uint8, kv_cache.device)  # stale bytes fail, not pass
    with validated_calls():
        out = fn(kv_cache, page_table_flat, extra_rows=extra_rows)
    if not isinstance(out, torch.Tensor) or out.dtype != torch.float8_e4m3fn:
        got = out.dtype if isinstance(out, torch.Tensor) else type(out).__name__
        raise VerificationError(f"kv_gather_fp8: output must be float8_e4m3fn, got {got}",
                                name="kv_gather_fp8")
    ref = kv_gather_fp8_ref(kv_cache, page_table_flat, extra_rows=extra_rows)
    got = out.view(torch.uint8)
    n = int(page_table_flat.shape[0])
    diff = verify("kv_gather_fp8 bytes", got, ref.view(torch.uint8),
                  rtol=RTOL["fp8"], atol=ATOL["fp8"])
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

    refs = RefCache(lambda: kv_gather_fp8_ref(kv_cache, page_table_flat, extra_rows=extra_rows))
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
        return error_figures(as_values(got[:n]), as_values(ref.view(torch.uint8)[:n]))

    return TimedProof(prepare, check, reverse)


def golden_check_kv_gather_fp8(fn, dtype: str = "fp8", device=None) -> float:
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


#: The fp8 gather spec's row geometry: a 656-byte cache row (512 fp8 nope + 4 fp32 group scales +
#: 64 bf16 rope) becomes a 576-byte fp8 output row.
GATHER_ROW_IN_BYTES = 656


GATHER_ROW_OUT_BYTES = 576


def kv_gather_fp8_work(kv_len: int, extra_rows: int) -> Work:
    """The gather's payload: 656-byte rows + int32 page-table entries read, 576-byte rows written.

    The pad rows are written (zeros) but never read; a legacy variant's full-buffer zero fill
    is extra traffic of that implementation and is not counted.
    """
    if kv_len < 0 or extra_rows < 0:
        raise ValueError(f"kv_len={kv_len}, extra_rows={extra_rows}: both must be >= 0")
    read = kv_len * (GATHER_ROW_IN_BYTES + 4)
    written = (kv_len + extra_rows) * GATHER_ROW_OUT_BYTES
    return Work(moved=float(read + written))


def kv_gather_fp8_ref(
    kv_cache: torch.Tensor, page_table_flat: torch.Tensor, *, extra_rows: int
) -> torch.Tensor:
    """The fp8 gather spec's gather + dequant/requant in byte/float64 math:
    [L + extra_rows, 576] fp8.

    Row i (token t = page_table_flat[i]) of a 656-byte cache row: 512 nope codes, 4 fp32 group
    scales at bytes 512..527, 64 bf16 rope values at bytes 528..655. Output: nope value times
    its group scale (fp64 product rounded once to fp32 = the fp32 product), then rope widened
    exactly, each encoded to e4m3 (saturate, nearest, ties to even); then ``extra_rows`` rows
    of zero bytes. Slow and obviously right; used for checks, never timed.
    """
    if isinstance(extra_rows, bool) or not isinstance(extra_rows, int) or extra_rows < 0:
        raise ValueError(f"extra_rows must be an int >= 0, got {extra_rows!r}")
    raw = kv_cache.view(torch.uint8).reshape(-1, 656)
    n = int(page_table_flat.shape[0])
    out = torch.zeros((n + extra_rows, 576), dtype=torch.uint8, device=raw.device)
    if n:
        rows = raw[page_table_flat.to(device=raw.device, dtype=torch.int64)]
        nope = e4m3_decode_ref(rows[:, :512]).reshape(n, 4, 128)
        scales = rows[:, 512:528].contiguous().view(torch.float32).to(torch.float64)  # [n, 4]
        product = (nope * scales[:, :, None]).to(torch.float32).reshape(n, 512)
        rope = rows[:, 528:].contiguous().view(torch.bfloat16).to(torch.float64).to(torch.float32)
        out[:n, :512] = e4m3_encode_ref(product)
        out[:n, 512:] = e4m3_encode_ref(rope)
    return out.view(torch.float8_e4m3fn)


# ---- inputs --------------------------------------------------------------------------------


def gather_inputs(kv_cache: torch.Tensor, page_table_flat: torch.Tensor,
                  extra_rows: int) -> OpInputs:
    """A gather of `page_table_flat`'s rows of `kv_cache` plus `extra_rows` pad rows: the
    inputs of every kv_gather_fp8 row."""
    args = (kv_cache, page_table_flat)
    kwargs = {"extra_rows": extra_rows}
    return OpInputs(
        describe_kv_gather_fp8(kv_cache, page_table_flat), args, kwargs,
        kv_gather_fp8_work(page_table_flat.shape[0], extra_rows),
        check=lambda fn: check_kv_gather_fp8(fn, kv_cache, page_table_flat, extra_rows),
        proof=lambda fn: proof_kv_gather_fp8(fn, kv_cache, page_table_flat, extra_rows),
    )


# ---- what the reports and `kvbench tune` measure ---------------------------------------------

#: The measured ceiling this op's %ceil divides by: reads and writes of equal size, a copy.
CEILING = "copy"


def _tune_params(kv_len: int, **kw: int) -> tuple[str, dict[str, int]]:
    return f"kv_len={kv_len}", {"kv_len": kv_len, "pool_tokens": 131072, "extra_rows": 2048, **kw}


#: `kvbench tune` cases on a GPU, one per shape bucket: (label, tune_inputs params).
TUNE_CASES = (_tune_params(8192), _tune_params(32768), _tune_params(65536))
#: On a CPU: a small case, so tune runs end to end on a developer machine.
TUNE_CASES_CPU = (_tune_params(100, pool_tokens=1024, extra_rows=16),)


def tune_inputs(params: dict[str, int], dtype: str, storage: str, device):
    """A tune case's inputs: the gather pool (the case's pool_tokens on a CPU, the suite's
    >= 8x L2 on a GPU) and its flat page table; nothing to free by hand."""
    from kvbench.fixtures.gather_pool import (
        build_gather_pool,
        build_page_table_flat,
        gather_pool_tokens,
    )

    dev = resolve_device(device)
    tokens = (params["pool_tokens"] if dev.type != "cuda"
              else gather_pool_tokens(params["kv_len"], dev))
    kv_cache = build_gather_pool(tokens, device=dev)
    table = build_page_table_flat([params["kv_len"]], tokens, device=dev)
    return gather_inputs(kv_cache, table, params["extra_rows"]), lambda: None
