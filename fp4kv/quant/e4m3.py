"""FP8 E4M3 (``float8_e4m3fn``) block scales by integer bit operations, in torch and in Triton.

E4M3: sign bit 7, exponent bits 6..3 (bias 7), mantissa bits 2..0; no infinities; 0x7F and 0xFF
are NaN; the largest finite value is 448 (0x7E); subnormals are ``m * 2^-9`` for m = 1..7. Both
directions are exact integer formulas, so torch and Triton agree bit for bit; the tests hold them
to torch's own ``float8_e4m3fn`` casts.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from fp4kv.quant._jit import lazy_jit

if TYPE_CHECKING:  # kernels see `tl` through the scope that `lazy_jit` builds
    import triton.language as tl

E4M3_MAX = 448.0
E4M3_NAN = 0x7F
_SMALLEST_NORMAL_BITS = 0x3C800000  # fp32 bits of 2^-6


def e4m3_bits_from_f32(t: torch.Tensor) -> torch.Tensor:
    """fp32 ``0 <= t <= 448`` -> int32 E4M3 bits (sign 0), round to nearest even.

    Normal range (t >= 2^-6): keep 3 mantissa bits with RNE on the fp32 bits and rebias the
    exponent (127 -> 7). Below: the subnormal ``m * 2^-9`` with ``m`` = RNE of the significand
    shifted right; rounding up to ``m = 8`` lands exactly on the smallest normal's bits.
    """
    ti = t.view(torch.int32)
    normal = ((ti + 0x7FFFF + ((ti >> 20) & 1)) >> 20) - ((127 - 7) << 3)
    shift = (141 - (ti >> 23)).clamp_(1, 30)
    full = (ti & 0x7FFFFF) | 0x800000
    sub = (full + (1 << (shift - 1)) - 1 + ((full >> shift) & 1)) >> shift
    return torch.where(ti >= _SMALLEST_NORMAL_BITS, normal, sub)


def e4m3_bits_to_f32(bits: torch.Tensor) -> torch.Tensor:
    """E4M3 bits (any integer dtype, 0..255) -> fp32 values; 0x7F and 0xFF are NaN."""
    b = bits.to(torch.int32)
    exp = (b >> 3) & 0xF
    man = b & 7
    normal = (((exp + 120) << 23) | (man << 20)).view(torch.float32)
    value = torch.where(exp > 0, normal, man.to(torch.float32) * 2.0 ** -9)
    value = torch.where((b & 0x80) != 0, -value, value)
    return value.masked_fill_((b & 0x7F) == E4M3_NAN, math.nan)


@lazy_jit
def tl_e4m3_bits_from_f32(t):
    """fp32 ``0 <= t <= 448`` -> int32 E4M3 bits, RNE (same integer formula as the torch version)."""
    ti = t.to(tl.int32, bitcast=True)
    normal = ((ti + 0x7FFFF + ((ti >> 20) & 1)) >> 20) - 960
    shift = tl.minimum(tl.maximum(141 - (ti >> 23), 1), 30)
    full = (ti & 0x7FFFFF) | 0x800000
    sub = (full + (1 << (shift - 1)) - 1 + ((full >> shift) & 1)) >> shift
    return tl.where(ti >= 0x3C800000, normal, sub)


@lazy_jit
def tl_e4m3_bits_to_f32(b):
    """int32 E4M3 bits 0..255 -> fp32 (0x7F/0xFF -> NaN)."""
    exp = (b >> 3) & 0xF
    man = b & 7
    normal = (((exp + 120) << 23) | (man << 20)).to(tl.float32, bitcast=True)
    value = tl.where(exp > 0, normal, man.to(tl.float32) * 0.001953125)
    value = tl.where((b & 0x80) != 0, -value, value)
    return tl.where((b & 0x7F) == 0x7F, float("nan"), value)
