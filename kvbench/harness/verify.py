"""Correctness gate run before any timing: out vs an independent reference, named tolerances.

A fast wrong kernel is a bug, not a result, so every benchmark and every registry row goes
through verify() first. The failure message carries everything needed to start debugging
without re-running: how many elements are off, where the worst one is, both values there,
and the tolerances that were applied.

Floating tensors are compared in fp32 (fp64 if either side is fp64); a kernel's fp16/bf16
output is checked against the fp32 reference directly. fp8 tensors are refused: the caller
widens the bytes it means (`x.view(torch.float8_e4m3fn).to(torch.float32)`), which keeps the
kernel's dequant separate from fp8 rounding. Integer and bool tensors (byte views, indices)
must have the same dtype on both sides and are compared exactly, element by element in that
dtype (never through a float: int64 values above 2**53 would round together), so their
tolerances must be 0.
"""

from __future__ import annotations

import math

import numpy as np
import torch

_FP8_DTYPES = tuple(
    getattr(torch, name)
    for name in (
        "float8_e4m3fn",
        "float8_e4m3fnuz",
        "float8_e5m2",
        "float8_e5m2fnuz",
        "float8_e8m0fnu",
    )
    if hasattr(torch, name)
)


class VerificationError(AssertionError):
    """`out` does not match `ref` within the tolerances; attributes hold the details."""

    def __init__(
        self,
        message: str,
        *,
        name: str,
        mismatched: int = 0,
        total: int = 0,
        index: tuple[int, ...] | None = None,
        out_value: float | None = None,
        ref_value: float | None = None,
        max_abs_diff: float | None = None,
        rtol: float = 0.0,
        atol: float = 0.0,
    ) -> None:
        super().__init__(message)
        self.name = name
        self.mismatched = mismatched
        self.total = total
        self.index = index
        self.out_value = out_value
        self.ref_value = ref_value
        self.max_abs_diff = max_abs_diff
        self.rtol = rtol
        self.atol = atol


def _tolerance(name: str, value: object) -> float:
    ok = not isinstance(value, bool) and isinstance(value, (int, float))
    if not ok or not math.isfinite(float(value)) or float(value) < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _as_tensor(argument: str, value: object) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        tensor = value
    elif isinstance(value, np.ndarray):
        tensor = torch.from_numpy(value)
    else:
        got = type(value).__name__
        raise ValueError(f"{argument} must be a torch.Tensor or numpy array, got {got}")  # noqa: TRY004
    if tensor.dtype in _FP8_DTYPES:
        raise ValueError(
            f"{argument} has dtype {tensor.dtype}: widen fp8 to float32 before verify "
            "(x.to(torch.float32)), so the compare is of values, not of fp8 rounding"
        )
    if tensor.is_complex():
        raise ValueError(
            f"{argument} has complex dtype {tensor.dtype}; verify compares real tensors"
        )
    return tensor.detach()


def _kind(t: torch.Tensor) -> str:
    return "float" if t.is_floating_point() else "integer"


def _verify_exact(name: str, out: torch.Tensor, ref: torch.Tensor) -> float:
    """Integer/bool compare in the tensors' own dtype: 0.0, or VerificationError naming the
    mismatch with the largest |out - ref| (computed in Python ints, exact at any width)."""
    ref = ref.to(device=out.device)
    bad = out != ref
    mismatched = int(bad.sum())
    if mismatched == 0:
        return 0.0
    positions = bad.nonzero().tolist()
    out_values, ref_values = out[bad].tolist(), ref[bad].tolist()
    diffs = [abs(int(a) - int(b)) for a, b in zip(out_values, ref_values, strict=True)]
    k = max(range(len(diffs)), key=diffs.__getitem__)
    index = tuple(positions[k])
    raise VerificationError(
        f"{name}: {mismatched} of {out.numel()} elements mismatch; worst at index {index}: "
        f"out={out_values[k]!r} ref={ref_values[k]!r} |out-ref|={diffs[k]} "
        f"(exact compare of {out.dtype})",
        name=name,
        mismatched=mismatched,
        total=out.numel(),
        index=index,
        out_value=out_values[k],
        ref_value=ref_values[k],
        max_abs_diff=float(diffs[k]),
    )


def verify(name: str, out: object, ref: object, *, rtol: float, atol: float) -> float:
    """Check |out - ref| <= atol + rtol * |ref| everywhere; return max |out - ref|.

    Raises VerificationError on a shape or dtype mismatch, on NaN/Inf in `out` where `ref` is
    finite (non-finite `ref` entries must be matched exactly), or on any element out of
    tolerance. Raises ValueError for bad arguments (fp8 or complex tensors, negative tolerances).
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    rtol = _tolerance("rtol", rtol)
    atol = _tolerance("atol", atol)
    out_t = _as_tensor("out", out)
    ref_t = _as_tensor("ref", ref)
    tol_text = f"rtol={rtol:g}, atol={atol:g}"

    if tuple(out_t.shape) != tuple(ref_t.shape):
        raise VerificationError(
            f"{name}: shape mismatch: out {tuple(out_t.shape)} vs ref {tuple(ref_t.shape)}",
            name=name,
            rtol=rtol,
            atol=atol,
        )
    if _kind(out_t) != _kind(ref_t) or (_kind(out_t) == "integer" and out_t.dtype != ref_t.dtype):
        raise VerificationError(
            f"{name}: dtype mismatch: out {out_t.dtype} vs ref {ref_t.dtype} "
            "(floating dtypes may differ and are compared in fp32; integer dtypes must match)",
            name=name,
            rtol=rtol,
            atol=atol,
        )
    if _kind(out_t) == "integer" and (rtol or atol):
        raise ValueError(
            f"{name}: {out_t.dtype} tensors are compared exactly; rtol and atol must be 0, got "
            f"{tol_text}"
        )
    total = out_t.numel()
    if total == 0:
        return 0.0
    if _kind(out_t) == "integer":
        return _verify_exact(name, out_t, ref_t)

    wide = torch.float64 if torch.float64 in (out_t.dtype, ref_t.dtype) else torch.float32
    o = out_t.to(dtype=wide)
    r = ref_t.to(device=o.device, dtype=wide)

    diff = (o - r).abs()
    ref_finite = torch.isfinite(r)
    # Non-finite reference entries must be reproduced exactly (NaN where NaN, same-sign Inf).
    nonfinite_ok = torch.where(torch.isnan(r), torch.isnan(o), o == r)
    within = diff <= atol + rtol * r.abs()
    good = torch.where(ref_finite, within & torch.isfinite(o), nonfinite_ok)
    # Compared only where both are finite; a non-finite mismatch counts as an infinite diff.
    finite_diff = torch.where(ref_finite & torch.isfinite(o), diff, torch.zeros_like(diff))
    max_abs_diff = float(finite_diff.max())

    bad = ~good
    mismatched = int(bad.sum())
    if mismatched == 0:
        return max_abs_diff

    score = torch.where(
        bad,
        torch.where(torch.isnan(diff), torch.full_like(diff, math.inf), diff),
        torch.full_like(diff, -1.0),
    )
    flat = int(torch.argmax(score.reshape(-1)))
    index = tuple(int(i) for i in np.unravel_index(flat, tuple(out_t.shape)))
    out_value = float(o.reshape(-1)[flat])
    ref_value = float(r.reshape(-1)[flat])
    worst = abs(out_value - ref_value) if math.isfinite(out_value - ref_value) else math.inf
    allowed = atol + rtol * abs(ref_value)
    raise VerificationError(
        f"{name}: {mismatched} of {total} elements mismatch; worst at index {index}: "
        f"out={out_value!r} ref={ref_value!r} |out-ref|={worst:.6g} > allowed {allowed:.6g} "
        f"({tol_text}); max |out-ref| over finite elements {max_abs_diff:.6g}",
        name=name,
        mismatched=mismatched,
        total=total,
        index=index,
        out_value=out_value,
        ref_value=ref_value,
        max_abs_diff=worst,
        rtol=rtol,
        atol=atol,
    )


# ---- systematic error: a uniform scale or an offset, which elementwise tolerances miss ------
#
# An elementwise rtol is sized for the worst single element, so an output scaled by 1.01 (every
# element off by 1%) passes a 2e-2 rtol. Rounding differences are not like that: each element's
# error has its own sign, so over a tensor they cancel. Two figures measure what does not
# cancel: the least-squares scale of out on ref, s = <out, ref> / <ref, ref>, and the mean signed
# error relative to ref's magnitude, mean(out - ref) / mean|ref| (an offset, which the scale of a
# zero-mean output does not see).

#: Largest |s - 1| and |mean signed error| / mean|ref| accepted, per output dtype name: half the
#: unit roundoff u of the dtype (fp16: u = 2^-11, bf16: u = 2^-8; fp32 kept for completeness).
#: Why half of u: rounding to nearest leaves each element within u of its exact value with a
#: sign of its own, so over N elements the two figures move by about u / sqrt(N) (under 1/30 of
#: u at the 1536 elements of the smallest kvbench check); only if EVERY element rounded the same
#: way would they reach u. u / 2 is far above what rounding does to a tensor and below a
#: uniform scale of 1.005 at bf16 (1.28 u). fp8 (e4m3) is listed for outputs stored as fp8
#: values: the kernels that write them are compared bit-exact, and a decode over fp8 KV writes
#: its output in q's dtype, whose entry applies (checks.check_paged_decode).
SYSTEMATIC_TOLERANCE: dict[str, float] = {
    "fp32": 2.0**-25,
    "fp16": 2.0**-12,
    "bf16": 2.0**-9,
    "fp8": 2.0**-5,
}


class SystematicError:
    """Error figures of one compare: the elementwise worst case and the systematic part.

    max_abs: max |out - ref|. max_rel: max |out - ref| / max |ref| (the worst error relative to
    the tensor's own scale: elementwise |out - ref| / |ref| is dominated by ref's near-zero
    entries). scale: least-squares <out, ref> / <ref, ref> (None when ref is all zero). bias:
    mean(out - ref) / mean |ref| (None when ref is all zero). Plain floats, JSON-ready through
    as_dict().
    """

    __slots__ = ("bias", "max_abs", "max_rel", "n", "scale")

    def __init__(self, *, max_abs: float, max_rel: float, scale: float | None,
                 bias: float | None, n: int) -> None:
        self.max_abs = max_abs
        self.max_rel = max_rel
        self.scale = scale
        self.bias = bias
        self.n = n

    def as_dict(self) -> dict[str, float | int | None]:
        return {"max_abs": self.max_abs, "max_rel": self.max_rel, "scale": self.scale,
                "bias": self.bias, "n": self.n}

    def __repr__(self) -> str:
        return f"SystematicError({self.as_dict()})"


def error_figures(out: object, ref: object) -> SystematicError:
    """The error figures of float `out` against `ref` (same shape), computed in fp64.

    Non-finite entries of either side are left out (verify() rejects them separately).
    Raises ValueError for non-float tensors or a shape mismatch.
    """
    out_t = _as_tensor("out", out)
    ref_t = _as_tensor("ref", ref)
    if tuple(out_t.shape) != tuple(ref_t.shape):
        raise ValueError(f"shape mismatch: out {tuple(out_t.shape)} vs ref {tuple(ref_t.shape)}")
    if not (out_t.is_floating_point() and ref_t.is_floating_point()):
        raise ValueError(
            f"error_figures compares float tensors, got {out_t.dtype} and {ref_t.dtype}"
        )
    o = out_t.to(torch.float64).reshape(-1)
    r = ref_t.to(device=o.device, dtype=torch.float64).reshape(-1)
    keep = torch.isfinite(o) & torch.isfinite(r)
    o, r = o[keep], r[keep]
    n = int(o.numel())
    if n == 0:
        return SystematicError(max_abs=0.0, max_rel=0.0, scale=None, bias=None, n=0)
    diff = o - r
    max_abs = float(diff.abs().max())
    ref_peak = float(r.abs().max())
    ref_energy = float((r * r).sum())
    ref_mean_abs = float(r.abs().mean())
    return SystematicError(
        max_abs=max_abs,
        max_rel=max_abs / ref_peak if ref_peak > 0 else (0.0 if max_abs == 0 else math.inf),
        scale=float((o * r).sum()) / ref_energy if ref_energy > 0 else None,
        bias=float(diff.mean()) / ref_mean_abs if ref_mean_abs > 0 else None,
        n=n,
    )


def verify_unbiased(name: str, out: object, ref: object, *, tol: float) -> SystematicError:
    """The systematic-error criterion: |scale - 1| <= tol and |bias| <= tol, else
    VerificationError naming both figures. Returns the figures (to record beside the number).

    `tol` comes from SYSTEMATIC_TOLERANCE (the output dtype's entry); run it after verify(),
    which owns the elementwise tolerances and the NaN/Inf rules.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    tol = _tolerance("tol", tol)
    figures = error_figures(out, ref)
    bad = []
    if figures.scale is not None and abs(figures.scale - 1.0) > tol:
        bad.append(f"least-squares scale {figures.scale:.6f} (|s-1| {abs(figures.scale - 1):.3g})")
    if figures.bias is not None and abs(figures.bias) > tol:
        bad.append(f"mean signed error {figures.bias:+.3g} of mean |ref|")
    if bad:
        raise VerificationError(
            f"{name}: systematic error beyond rounding: {'; '.join(bad)} > {tol:.3g} "
            f"(SYSTEMATIC_TOLERANCE, over {figures.n} elements; max |out-ref| "
            f"{figures.max_abs:.6g})",
            name=name,
            total=figures.n,
            max_abs_diff=figures.max_abs,
        )
    return figures
