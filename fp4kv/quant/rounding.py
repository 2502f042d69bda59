"""One rounding of an exact value to the output dtype (bf16, fp16 or fp32), in torch and in Triton.

nvfp4 dequantizes ``E2M1[code] * s * g``. ``E2M1[code] * s`` is exact in fp32 (at most 6
significant bits), and its product with the fp32 ``g`` is exact in fp64 (at most 30 bits, far
from fp64's range limits). Rounding that exact fp64 value once gives the correctly rounded
result; rounding ``s * g`` first, or the fp32 product again to bf16, would round twice.

* fp32 output: the fp64 -> fp32 conversion (round to nearest even) is the one rounding.
* bf16 / fp16 output: torch converts fp64 to 16-bit floats *through* fp32 (two roundings: an
  fp32 result that lands exactly on a 16-bit midpoint then ties to even although the exact value
  was off the midpoint). So the fp32 intermediate is made round-to-odd instead: when the fp32
  result is inexact and its last mantissa bit is 0, it moves one ulp toward the exact value.
  Round-to-odd at 24 bits followed by one round-to-nearest-even at <= 22 bits equals a single
  round-to-nearest-even of the exact value (Boldo & Melquiond, "Emulation of FMA and correctly
  rounded sums: proved algorithms using rounding to odd", IEEE TC 2008). NaN stays NaN.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from fp4kv.quant._jit import lazy_jit

if TYPE_CHECKING:  # kernels see `tl` through the scope that `lazy_jit` builds
    import triton.language as tl


def round_exact_f64_to(exact: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """fp64 ``exact`` (holding a value that must be rounded once) -> ``dtype``, correctly rounded
    (round to nearest, ties to even; overflow to +-inf; NaN to NaN). ``dtype``: bf16, fp16 or fp32."""
    hi = exact.to(torch.float32)
    if dtype == torch.float32:
        return hi
    residual = exact - hi.to(torch.float64)  # exact: both lie within one fp32 ulp of each other
    bits = hi.view(torch.int32)
    away = (residual > 0) == (exact > 0)  # |exact| > |hi|: the odd neighbour is one step up in magnitude
    step = away.to(torch.int32).mul_(2).sub_(1)
    nudge = (residual != 0) & (exact == exact) & ((bits & 1) == 0)
    return (bits + nudge * step).view(torch.float32).to(dtype)


@lazy_jit
def tl_round_exact_f64_to_f32(exact, OUT_KIND: tl.constexpr):
    """fp64 ``exact`` -> fp32 for a store of OUT_KIND (see `tl_store_f32_as`): 2 (fp32) rounds to
    nearest even; 0 and 1 (bf16, fp16) round to odd, for the store's RNE; the same formula as
    `round_exact_f64_to`."""
    hi = exact.to(tl.float32)
    if OUT_KIND != 2:
        residual = exact - hi.to(tl.float64)
        bits = hi.to(tl.int32, bitcast=True)
        step = tl.where((residual > 0) == (exact > 0), 1, -1)
        nudge = (residual != 0) & (exact == exact) & ((bits & 1) == 0)
        hi = tl.where(nudge, bits + step, bits).to(tl.float32, bitcast=True)
    return hi
