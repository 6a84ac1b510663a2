"""What the op oracle shares, and the one correctness vocabulary of kvbench.

The op oracle is kvbench.ops: per op, everything kvbench knows about the op except its
kernels and its engine-facing entry point (kvbench.api): the problem description and its
keys (kvbench.ops.keys), the tolerances, the theoretical Work, the torch reference, the check,
the proof, the golden check, the case inputs and the tune cases. It imports nothing above
kernels / harness / fixtures / core, so dispatch imports it directly.

Correctness vocabulary (one meaning each, in kernels, harness, ops and dispatch alike):

    validate   a kernel's input validation: shapes, dtypes, strides and, in safe mode
               (KVBENCH_CHECK=1), index and scale values; a failure is a ValueError naming
               the argument (kvbench/kernels/_validate.py). It says nothing about an output.
    verify     compare an output with a reference within named tolerances: the primitive
               (kvbench.harness.verify: verify, verify_unbiased, VerificationError). A row
               is "verified" when its golden check verified its output.
    check      an op's gate at one case: run the row on the case's inputs and verify the
               output against the op's reference (check_<op>, OpInputs.check, the pipeline's
               check step); returns max |out - ref|. A row that fails it gets no number.
    proof      the check of a timed call itself: the input is perturbed before the last timed
               call and that call's output is verified against the perturbed input's
               reference (kvbench.harness.proof.TimedProof, proof_<op>), so a row that skips
               or memoizes work under timing fails.
    golden     dispatch's record that a row passed its check for a (dtype, device kind)
               (GoldenRecord, kvbench.dispatch.golden). golden_check_<op> is the check on
               tiny fixed inputs dispatch runs the first time it considers a row;
               record_golden installs the outcome of a full-size check instead.
    selftest   the harness's test of itself on a GPU: its timers against measurements they
               do not make (python -m kvbench.harness.gpu_selftest). Not about kernel output.

This module: `Problem` (what an op call asks for, read from its inputs); `bad_input`;
`OpInputs` (one problem's inputs, ready for any row of its op: what kvbench.measure needs);
the proofs' helpers (`poison_next_alloc`, `RefCache`, `as_values`) and the fp64 e4m3
arithmetic of the references (`e4m3_encode_ref`, `e4m3_decode_ref`, `scale_f64`).

The describe_<op> functions and the <op>_fields functions the entry points use read only
tensor metadata (.dtype, .dim(), .shape, .is_contiguous(), .device): no .item(), no device
sync, because the entry points call them on every decode step. The context bucket comes from
block_table.shape[1] * page_size (the table's capacity), not from seq_lens values, which live
on the device.

Safety (docs/safety.md): every op reads its tensors with the strides they have or refuses a
layout it cannot read with a ValueError naming the argument; index and scale values are
validated on the host for CPU tensors; on CUDA the fast path validates no value, and
``KVBENCH_CHECK=1`` validates them on the device without a host sync.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from kvbench.core.dtypes import FROM_TORCH
from kvbench.ops.keys import TAGS, bucket

__all__ = [
    "TAGS",
    "OpInputs",
    "Problem",
    "RefCache",
    "as_values",
    "bad_input",
    "e4m3_decode_ref",
    "e4m3_encode_ref",
    "poison_next_alloc",
    "poison_value",
    "scale_f64",
]


def bad_input(names: dict[str, Any], accepted_dtypes: bool = True) -> ValueError:
    """The ValueError for inputs the fast path could not even read (slow path only)."""
    for name, value in names.items():
        if not isinstance(value, torch.Tensor):
            return ValueError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    for name, value in names.items():
        if "cache" in name and value.dtype not in FROM_TORCH:
            accepted = ", ".join(str(d) for d in FROM_TORCH)
            return ValueError(f"{name} has dtype {value.dtype}; accepted: {accepted}")
    shapes = ", ".join(f"{k}{tuple(v.shape)}" for k, v in names.items())
    return ValueError(f"inputs do not describe a problem this op can read: {shapes}")


def rank_mismatches(args: dict[str, Any], forms: dict[str, str]) -> str:
    """'; '-joined "NAME is K-D; a paged call passes FORM" for each tensor of `args` whose
    rank is not that of its form in `forms` (e.g. {"k_cache": "[pages, page_size, kv_heads,
    head_dim]"}); "" when every rank matches. Why a call's layout tags lack kv:paged, for the
    error of a call no row serves."""
    wrong = []
    for name, form in forms.items():
        value = args.get(name)
        rank = form.count(",") + 1
        if isinstance(value, torch.Tensor) and value.dim() != rank:
            wrong.append(f"{name} is {value.dim()}-D {tuple(value.shape)}; a paged call passes "
                         f"{rank}-D {form}")
    return "; ".join(wrong)


@dataclass(frozen=True)
class Problem:
    """What an op call asks for, read from its inputs; kvbench.dispatch.core.select(problem)
    picks the row that serves it."""

    op: str
    dtype: str
    tags: frozenset[str]
    shape: dict[str, int]
    device: torch.device

    @property
    def bucket(self) -> str:
        return bucket(self.op, self.shape)


def poison_next_alloc(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> None:
    """Best effort: leave NaN in the block the kernel's ``torch.empty`` output will reuse.

    The caching allocator (and, for small sizes, malloc) hands the freed block straight back
    for a same-sized request, so an output element the kernel never writes reads NaN and
    fails verify instead of passing on stale-but-plausible memory.
    """
    junk = torch.full(shape, poison_value(dtype), dtype=dtype, device=device)
    del junk


def poison_value(dtype: torch.dtype) -> float | int:
    """NaN for float dtypes; 0xFF for bytes (the e4m3 NaN code kvbench.fixtures.quant never
    emits)."""
    return float("nan") if dtype.is_floating_point and dtype.itemsize > 1 else 0xFF


class RefCache:
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


#: The largest finite e4m3 magnitude.
_E4M3_MAX = 448.0


def e4m3_magnitudes(device: torch.device) -> torch.Tensor:
    """float64 values of the 127 non-negative finite e4m3fn codes 0x00..0x7e, ascending.

    Code = eeee_mmm with bias 7: exponent field 0 is subnormal (m * 2^-9), else
    2^(e-7) * (1 + m/8). 0x7f is NaN and is excluded.
    """
    values = []
    for code in range(0x7F):
        e, m = code >> 3, code & 7
        values.append(m * 2.0**-9 if e == 0 else 2.0 ** (e - 7) * (1.0 + m / 8.0))
    return torch.tensor(values, dtype=torch.float64, device=device)


def e4m3_encode_ref(y: torch.Tensor) -> torch.Tensor:
    """fp32 values -> e4m3fn bytes (uint8): saturate to +-448, nearest value, ties to even.

    Inputs are finite (the quantizer and the fixtures never produce NaN/inf).
    """
    table = e4m3_magnitudes(y.device)
    mag = y.to(torch.float64).abs().clamp(max=_E4M3_MAX)
    hi = torch.searchsorted(table, mag).clamp(max=table.numel() - 1)
    lo = (hi - 1).clamp(min=0)
    below = mag - table[lo]
    above = table[hi] - mag
    take_hi = (above < below) | ((above == below) & (hi % 2 == 0))
    code = torch.where(take_hi, hi, lo)
    sign = torch.signbit(y).to(torch.int64) * 0x80
    return (code | sign).to(torch.uint8)


def e4m3_decode_ref(codes: torch.Tensor) -> torch.Tensor:
    """e4m3fn bytes -> float64 values by table lookup (NaN codes -> NaN)."""
    mags = torch.cat(
        [e4m3_magnitudes(codes.device), torch.tensor([float("nan")], device=codes.device,
                                                      dtype=torch.float64)]
    )
    c = codes.to(torch.int64)
    value = mags[c & 0x7F]
    return torch.where(c >= 0x80, -value, value)


def scale_f64(scale: torch.Tensor | float, device: torch.device) -> torch.Tensor:
    """A caller-side scale as the fp64 image of its fp32 value (python floats round to fp32)."""
    if isinstance(scale, torch.Tensor):
        return scale.reshape(()).to(device=device, dtype=torch.float32).to(torch.float64)
    return torch.tensor(float(scale), dtype=torch.float32, device=device).to(torch.float64)


def as_values(t: torch.Tensor) -> torch.Tensor:
    """Float values of cache rows for the error figures: fp8 bytes widened through e4m3."""
    if t.dtype == torch.uint8:
        return t.view(torch.float8_e4m3fn).to(torch.float32)
    if t.dtype == torch.float8_e4m3fn:
        return t.to(torch.float32)
    return t.to(torch.float32)


# ---- what the measuring pipeline needs from an op ---------------------------------------------


@dataclass
class OpInputs:
    """One problem's inputs, ready for any registry row of its op: what kvbench.measure needs.

    An op module builds it (``<op>_inputs``) from a fixture; the pipeline then selects a row
    (kvbench.dispatch.core.select(problem) under the op's selector), gates it (``check``),
    and times it on ``timed_calls(row)`` with ``proof(row)`` verifying the last timed call.
    ``host``: the row costs host time (the allocator), timed by the host timer per call and ranked
    by the worst.
    """

    problem: Problem
    args: tuple
    kwargs: dict[str, Any]
    #: The theoretical cost (harness.Work) a GB/s is scored against; Work() (nothing moved)
    #: for a host-side op.
    work: Any
    #: row callable -> max |out - ref|; raises VerificationError on a wrong output.
    check: Callable[[Callable[..., Any]], float]
    #: row callable -> the TimedProof of its last timed call, or None for an op without one.
    proof: Callable[[Callable[..., Any]], Any] | None = None
    host: bool = False
    #: (row callable, row name) -> [(timed call, reset before each sample or None)]; default:
    #: the row on args/kwargs, once.
    calls: Callable[[Callable[..., Any], str], list[tuple[Callable[[], Any], Any]]] | None = None
    #: Tensors a caller may need beside the row's (the pool, q: table peers).
    extra: dict[str, Any] = field(default_factory=dict)

    def timed_calls(self, fn: Callable[..., Any],
                    row: str = "") -> list[tuple[Callable[[], Any], Any]]:
        if self.calls is not None:
            return self.calls(fn, row)
        args, kwargs = self.args, self.kwargs
        return [(lambda: fn(*args, **kwargs), None)]
