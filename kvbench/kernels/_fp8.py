"""fp32 -> e4m3fn encoding inside Triton kernels, bit-exact to torch on every backend.

Why a hand-written encoder exists at all: the fp8 rows of kv_write and kv_gather_fp8 are
verified byte for byte against torch (``.to(torch.float8_e4m3fn)``: round to nearest, ties to
even, saturating). On the GPU Triton's ``x.to(tl.float8e4nv, fp_downcast_rounding="rtne")``
lowers to ``cvt.rn.satfinite.e4m3x2.f32``, which is exactly that, and the kernels use it. The
Triton *interpreter* (``TRITON_INTERPRET=1``, the CPU test path) does not: its
``_convert_float`` (triton 3.9, runtime/interpreter.py) rounds ties away from zero instead of
to even and ORs the mantissa carry into the exponent field, so a carry into an odd exponent
is lost, e.g. -1.9707 -> -1.0 (torch: -2.0), 7.80 -> 4.0 (torch: 8.0), and nearly one test
value in five differs. Rather than weaken a bit-exact check, interpreted kernels use
:func:`e4m3_rne_code` below: RNE on the fp32 bits with integer ops, plus one fp32 add of an
exact product for subnormals (so an FMA contraction cannot change it), identical on both
backends. The GPU tests run the kernels in both modes and require equal bytes, so the soft
path is also proven against the hardware path.

Decoding needs less care: the interpreter widens all 254 finite e4m3 codes exactly (checked
exhaustively; only the two NaN codes differ, which the quantizer never produces). Its
bf16 -> fp32 cast mangles bf16 subnormals (254 of 65,536 bit patterns), so bf16 is widened by
shifting its 16 bits into the top of an fp32, which is exact everywhere and what the GPU does.
"""

from __future__ import annotations

import triton
import triton.language as tl

#: Largest finite e4m3fn magnitude. Values are clamped to it before encoding (saturation),
#: which is what cvt.rn.satfinite and torch's cast both do for finite inputs.
FP8_MAX = 448.0
FP8_MAX_C: tl.constexpr = tl.constexpr(FP8_MAX)


def is_interpreted(kernel: object) -> bool:
    """True when ``kernel`` was decorated under TRITON_INTERPRET=1 (runs through numpy).

    Checked on the kernel object rather than the environment because Triton decides at
    decoration time; a variable set later does not change how an existing kernel runs.
    """
    return type(kernel).__name__ == "InterpretedFunction"


@triton.jit
def e4m3_rne_code(y):
    """Encode fp32 ``y`` (finite, already clamped to +-448) as the e4m3fn code in an int32.

    Normal results (|y| >= 2^-6): add the RNE bias below the 3 kept mantissa bits and rebias
    the exponent from 127 to 7, on the integer bits; a carry out of the mantissa correctly
    bumps the exponent. Subnormal results (|y| < 2^-6): the code is |y| * 2^9 rounded to an
    integer, ties to even. |y| * 512 is exact, so adding 2^23 performs exactly that rounding
    (fp32 add, RNE) and leaves the integer in the low mantissa bits; because the product is
    exact, an FMA contraction of the two steps cannot change the result.
    """
    bits = y.to(tl.int32, bitcast=True)
    sign = (bits >> 24) & 0x80
    mag = bits & 0x7FFFFFFF
    normal = (mag + (0x7FFFF - (120 << 23)) + ((mag >> 20) & 1)) >> 20
    scaled = mag.to(tl.float32, bitcast=True) * 512.0 + 8388608.0
    sub = scaled.to(tl.int32, bitcast=True) - 0x4B000000
    code = tl.where(mag >= 0x3C800000, normal, sub)
    return code | sign


@triton.jit
def encode_e4m3(y, SOFT_FP8: tl.constexpr):
    """fp32 -> e4m3fn bytes (uint8): clamp to +-448, then RNE (hardware cvt or soft encoder)."""
    y = tl.minimum(tl.maximum(y, -FP8_MAX_C), FP8_MAX_C)
    if SOFT_FP8:
        out = e4m3_rne_code(y).to(tl.uint8)
    else:
        out = y.to(tl.float8e4nv, fp_downcast_rounding="rtne").to(tl.uint8, bitcast=True)
    return out


@triton.jit
def bf16_bits_to_f32(raw):
    """Widen bf16 values (loaded as bf16 or int16) to fp32 by shifting their bits: exact."""
    bits = raw.to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
    return (bits << 16).to(tl.float32, bitcast=True)

