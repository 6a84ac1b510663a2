"""Torch references for every op, computed in fp32 (or bit-exact byte math for fp8 gather).

They share no code with kvbench.kernels: a bug copied into both would pass every check.
Each reference takes the op's public signature and returns a fresh tensor.
"""

from __future__ import annotations

import torch

# ---- paged_decode (owned by the paged-decode work) -------------------------------------


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
) -> torch.Tensor:
    """Decode attention in fp64, one sequence at a time, with plain matmul + softmax.

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
            s = s.double().to(rows.device) if isinstance(s, torch.Tensor) else float(s)
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
        probs = torch.softmax(scores, dim=-1)
        out[b] = torch.matmul(probs, v.permute(1, 0, 2)).reshape(q_heads, head_dim)
    return out.to(q.dtype)


# ---- kv_write (owned by the kv_write / kv_gather_fp8 work) ------------------------------
#
# fp8 here never goes through torch's float8 cast or the kernels' encoders: e4m3fn values are
# enumerated from the format's definition and the nearest one is chosen by search, ties to
# the even code. Quotients and products are formed in fp64 and rounded once to fp32; for one
# division or multiplication of fp32 operands that equals the correctly rounded fp32 result
# (fp64 has more than 2*24+2 bits, so the double rounding is innocuous).

_E4M3_MAX = 448.0


def _e4m3_magnitudes(device: torch.device) -> torch.Tensor:
    """float64 values of the 127 non-negative finite e4m3fn codes 0x00..0x7e, ascending.

    Code = eeee_mmm with bias 7: exponent field 0 is subnormal (m * 2^-9), else
    2^(e-7) * (1 + m/8). 0x7f is NaN and is excluded.
    """
    values = []
    for code in range(0x7F):
        e, m = code >> 3, code & 7
        values.append(m * 2.0**-9 if e == 0 else 2.0 ** (e - 7) * (1.0 + m / 8.0))
    return torch.tensor(values, dtype=torch.float64, device=device)


def _e4m3_encode_ref(y: torch.Tensor) -> torch.Tensor:
    """fp32 values -> e4m3fn bytes (uint8): saturate to +-448, nearest value, ties to even.

    Inputs are finite (the quantizer and the fixtures never produce NaN/inf).
    """
    table = _e4m3_magnitudes(y.device)
    mag = y.to(torch.float64).abs().clamp(max=_E4M3_MAX)
    hi = torch.searchsorted(table, mag).clamp(max=table.numel() - 1)
    lo = (hi - 1).clamp(min=0)
    below = mag - table[lo]
    above = table[hi] - mag
    take_hi = (above < below) | ((above == below) & (hi % 2 == 0))
    code = torch.where(take_hi, hi, lo)
    sign = torch.signbit(y).to(torch.int64) * 0x80
    return (code | sign).to(torch.uint8)


def _e4m3_decode_ref(codes: torch.Tensor) -> torch.Tensor:
    """e4m3fn bytes -> float64 values by table lookup (NaN codes -> NaN)."""
    mags = torch.cat(
        [_e4m3_magnitudes(codes.device), torch.tensor([float("nan")], device=codes.device,
                                                      dtype=torch.float64)]
    )
    c = codes.to(torch.int64)
    value = mags[c & 0x7F]
    return torch.where(c >= 0x80, -value, value)


def _scale_f64(scale: torch.Tensor | float, device: torch.device) -> torch.Tensor:
    """A caller-side scale as the fp64 image of its fp32 value (python floats round to fp32)."""
    if isinstance(scale, torch.Tensor):
        return scale.reshape(()).to(device=device, dtype=torch.float32).to(torch.float64)
    return torch.tensor(float(scale), dtype=torch.float32, device=device).to(torch.float64)


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
        raise ValueError(f"slot_mapping must have shape ({k.shape[0]},), got {tuple(slot_mapping.shape)}")
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
        quotient = (x.to(torch.float64) / _scale_f64(scale, x.device)).to(torch.float32)
        rows.append(_e4m3_encode_ref(quotient))
    return rows[0], rows[1]


# ---- kv_gather_fp8 (owned by the kv_write / kv_gather_fp8 work) -------------------------


def kv_gather_fp8_ref(
    kv_cache: torch.Tensor, page_table_flat: torch.Tensor, *, extra_rows: int
) -> torch.Tensor:
    """Gather + dequant/requant of seed 001 in byte/float64 math: [L + extra_rows, 576] fp8.

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
        nope = _e4m3_decode_ref(rows[:, :512]).reshape(n, 4, 128)
        scales = rows[:, 512:528].contiguous().view(torch.float32).to(torch.float64)  # [n, 4]
        product = (nope * scales[:, :, None]).to(torch.float32).reshape(n, 512)
        rope = rows[:, 528:].contiguous().view(torch.bfloat16).to(torch.float64).to(torch.float32)
        out[:n, :512] = _e4m3_encode_ref(product)
        out[:n, 512:] = _e4m3_encode_ref(rope)
    return out.view(torch.float8_e4m3fn)
