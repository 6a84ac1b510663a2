"""Per-tensor fp8 e4m3 quantization of KV data (the real quantizer, not a cast).

Why it exists: an fp8 KV row must be measured and verified on bytes that a real quantizer
produced. Random bytes are wrong twice over: 0x7f / 0xff are NaN codes in e4m3fn (a kernel fed
them computes NaN attention that no tolerance can judge), and their value distribution has
nothing to do with quantized activations. A plain ``.to(float8)`` cast is wrong too: values
beyond +-448 saturate and small values lose their mantissa, so the scale must be chosen from
the data (seed 000: "fp8 through the real quantizer ... with caller-side scales, not a cast").

Format: e4m3fn bytes in a ``torch.uint8`` container plus one fp32 scale per tensor, so that
``x ~= bytes.view(torch.float8_e4m3fn).to(torch.float32) * scale``.
"""

from __future__ import annotations

import torch

FP8_DTYPE = torch.float8_e4m3fn
#: Largest finite e4m3fn magnitude; the scale maps the tensor's amax onto it.
FP8_MAX = float(torch.finfo(FP8_DTYPE).max)  # 448.0

_INPUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_OUTPUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# Quantize in slices of this many elements: the fp32 intermediate of a multi-GB pool would
# otherwise double the peak memory of building it.
_CHUNK_ELEMS = 1 << 26


def quantize_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x`` to e4m3fn bytes with one per-tensor scale.

    Returns ``(bytes_uint8, scale)``: ``bytes_uint8`` has ``x``'s shape (contiguous),
    ``scale`` is a 0-dim fp32 tensor on ``x``'s device equal to ``amax(|x|) / 448`` (1.0 when
    ``x`` is all zeros, so dequantization stays finite). Rounding is round-to-nearest-even of
    ``x / scale`` computed in fp32 and clamped to +-448, so the two NaN codes never appear.

    Raises ValueError for a non-floating dtype or non-finite values (e4m3fn has no infinity:
    an inf would become NaN bytes).
    """
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"x must be a torch.Tensor, got {type(x).__name__}")  # noqa: TRY004
    if x.dtype not in _INPUT_DTYPES:
        accepted = ", ".join(map(str, _INPUT_DTYPES))
        raise ValueError(f"x has dtype {x.dtype}; accepted: {accepted}")
    if x.numel() == 0:
        return torch.empty(x.shape, dtype=torch.uint8, device=x.device), torch.ones(
            (), dtype=torch.float32, device=x.device
        )
    amax = x.abs().amax().to(torch.float32)
    # One host sync: a quantizer is a fixture step (never timed) and a non-finite input must
    # be refused before it turns into NaN codes.
    if not bool(torch.isfinite(amax)):
        raise ValueError("x contains inf or NaN; e4m3fn has no infinity, refusing to quantize")
    scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    src = x.contiguous().reshape(-1)
    out = torch.empty(src.shape, dtype=torch.uint8, device=x.device)
    inv = 1.0 / scale
    for lo in range(0, src.numel(), _CHUNK_ELEMS):
        part = src[lo : lo + _CHUNK_ELEMS].to(torch.float32) * inv
        out[lo : lo + _CHUNK_ELEMS] = part.clamp_(-FP8_MAX, FP8_MAX).to(FP8_DTYPE).view(torch.uint8)
    return out.view(x.shape), scale


def dequantize_fp8(
    data: torch.Tensor, scale: torch.Tensor | float, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Widen e4m3fn bytes back to ``dtype``: ``data.view(float8_e4m3fn).to(fp32) * scale``.

    Used by references and tests; kernels apply the scale to scores / accumulators instead.
    """
    if not isinstance(data, torch.Tensor) or data.dtype not in (torch.uint8, FP8_DTYPE):
        got = data.dtype if isinstance(data, torch.Tensor) else type(data).__name__
        raise ValueError(f"data must be a uint8 (e4m3 bytes) or float8_e4m3fn tensor, got {got}")
    if dtype not in _OUTPUT_DTYPES:
        accepted = ", ".join(map(str, _OUTPUT_DTYPES))
        raise ValueError(f"dtype {dtype} is not accepted; accepted: {accepted}")
    if isinstance(scale, torch.Tensor):
        if scale.numel() != 1:
            raise ValueError(f"scale must have one element, got shape {tuple(scale.shape)}")
        scale = scale.to(device=data.device, dtype=torch.float32).reshape(())
    elif isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise ValueError(f"scale must be a float or a 1-element tensor, got {scale!r}")  # noqa: TRY004
    wide = data.view(FP8_DTYPE).to(torch.float32) * scale
    return wide.to(dtype)
