"""Independent oracles for the quantization tests (not a test module; nothing here calls fp4kv).

Every value is computed in fp64, where the products and quotients involved are exact or rounded
innocuously (an fp64 quotient rounded again to fp32 is the correctly rounded fp32 quotient, as
53 >= 2 * 24 + 2), and rounded to the target format by:

* fp32: torch's fp64 -> fp32 cast (one IEEE round-to-nearest-even conversion);
* E4M3 (block scales): torch's own ``float8_e4m3fn`` cast;
* bf16 / fp16: a brute-force search for the nearest of all finite values of the format, ties to
  the even bit pattern, overflow past ``max + ulp/2`` to inf. (torch's fp64 -> bf16/fp16 casts
  go through fp32 and round twice, so they are no oracle for exact values off the fp32 grid.)
* E2M1 codes: the nearest of the eight grid values by distance, ties to the even index (nvfp4)
  or away from zero (mx_block16), anything above 6 to index 7.
"""

from __future__ import annotations

import math

import torch

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)
F64 = torch.float64

# ---------------------------------------------------------------------------------------------
# rounding to a float format
# ---------------------------------------------------------------------------------------------

_FORMATS = {  # dtype: (int view, first non-finite pattern, the power of two just past max)
    torch.bfloat16: (torch.int16, 0x7F80, 2.0 ** 128),
    torch.float16: (torch.int16, 0x7C00, 2.0 ** 16),
}
_GRIDS: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = {}


def _grid(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(values fp64, patterns int64) of every non-negative finite value of ``dtype``, ascending,
    plus the overflow point (value 2^(emax+1), pattern of +inf)."""
    if dtype not in _GRIDS:
        int_view, inf_pattern, past_max = _FORMATS[dtype]
        patterns = torch.arange(inf_pattern + 1, dtype=torch.int64)
        values = patterns[:-1].to(int_view).view(dtype).to(F64)
        _GRIDS[dtype] = torch.cat([values, torch.tensor([past_max], dtype=F64)]), patterns
    return _GRIDS[dtype]


def round_to(exact: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """fp64 values -> ``dtype`` (bf16, fp16, fp32), each rounded once to nearest, ties to even."""
    exact = exact.to(F64)
    if dtype == torch.float32:
        return exact.to(torch.float32)
    values, patterns = _grid(dtype)
    mag = exact.abs().reshape(-1)
    upper = torch.searchsorted(values, mag).clamp(1, len(values) - 1)  # first grid value >= mag
    lo_val, hi_val = values[upper - 1], values[upper]
    lo_pat, hi_pat = patterns[upper - 1], patterns[upper]
    d_lo, d_hi = mag - lo_val, hi_val - mag
    take_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi_pat % 2 == 0))
    pattern = torch.where(take_hi, hi_pat, lo_pat)
    pattern = torch.where(mag == 0, 0, pattern)
    pattern = torch.where(mag > values[-1], patterns[-1], pattern)
    pattern = pattern | (torch.signbit(exact.reshape(-1)).to(torch.int64) << 15)
    out = pattern.to(torch.int32).to(torch.int16).view(dtype).reshape(exact.shape)  # int32 first: wraps 0x8000+
    return torch.where(exact.isnan(), torch.tensor(math.nan, dtype=dtype), out)


def to_fp32(exact: torch.Tensor) -> torch.Tensor:
    """fp64 -> the nearest fp32 value, returned as fp64 (one rounding)."""
    return exact.to(torch.float32).to(F64)


def e4m3_value(scale_bytes: torch.Tensor) -> torch.Tensor:
    """E4M3 bytes -> fp64 values through torch's float8_e4m3fn view (0x7F/0xFF are NaN)."""
    return scale_bytes.to(torch.uint8).view(torch.float8_e4m3fn).to(F64)


def e4m3_round(t: torch.Tensor) -> torch.Tensor:
    """fp32-representable ``0 <= t <= 448`` (fp64 tensor) -> E4M3 bytes (int64) by torch's cast."""
    return t.to(torch.float32).to(torch.float8_e4m3fn).view(torch.uint8).to(torch.int64)


# ---------------------------------------------------------------------------------------------
# E2M1 codes and packing
# ---------------------------------------------------------------------------------------------

def e2m1_index(mag: torch.Tensor, ties: str) -> torch.Tensor:
    """Non-negative fp64 magnitudes -> nearest E2M1 index 0..7 by distance (values above 6 -> 7).
    ``ties``: "even" (to the even index) or "away" (to the larger magnitude)."""
    mag = mag.clamp(max=7.0)  # anything above 6 is nearest to 6 (and inf would tie with every value)
    dist = (mag.reshape(-1, 1) - E2M1[None, :]).abs()
    best = dist.min(dim=1, keepdim=True).values
    candidates = dist == best  # at most two neighbours
    index = torch.arange(8).expand_as(candidates)
    if ties == "away":
        chosen = torch.where(candidates, index, -1).amax(dim=1)
    else:
        even_first = torch.where(candidates, index % 2 * 8 + index, 99).amin(dim=1)
        chosen = even_first % 8
    return chosen.reshape(mag.shape)


def pack(codes: torch.Tensor) -> torch.Tensor:
    """int codes ``[..., 2k]`` -> uint8 ``[..., k]``: element 2j in the low nibble."""
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)


def unpack(packed: torch.Tensor) -> torch.Tensor:
    """uint8 ``[..., k]`` -> int64 codes ``[..., 2k]``."""
    p = packed.to(torch.int64)
    return torch.stack((p & 15, p >> 4), dim=-1).flatten(-2)


def code_values(codes: torch.Tensor) -> torch.Tensor:
    """int codes 0..15 -> signed fp64 E2M1 values (code 8 is -0.0)."""
    mag = E2M1[codes & 7]
    return torch.where((codes & 8) != 0, -mag, mag)


# ---------------------------------------------------------------------------------------------
# recipes
# ---------------------------------------------------------------------------------------------

def mx_quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x ``[B, M, N]`` -> (packed ``[B, M, N/2]``, scales ``[B, M*N/16]``) of recipe mx_block16:
    ``e`` the smallest integer with ``amax <= 6 * 2^e`` (at least -33, SGLang's 1e-10 clamp),
    codes nearest to ``x / 2^e`` with ties away from zero, sign code for ``x < 0``; a block with
    NaN/Inf: scale 0xFF, codes 0."""
    b, m, n = x.shape
    v = x.to(F64).reshape(-1, 16)
    bad = ~torch.isfinite(v).all(dim=1)
    amax = v.abs().nan_to_num(0.0, posinf=0.0).amax(dim=1)
    e = torch.floor(torch.log2(amax / 6)).clamp(-40, 200).to(torch.int64)  # a guess, fixed below
    for _ in range(3):
        e = torch.where(6 * torch.exp2(e.to(F64)) < amax, e + 1, e)
        e = torch.where(6 * torch.exp2((e - 1).to(F64)) >= amax, e - 1, e)
    e = e.clamp(min=-33)
    y = v / torch.exp2(e.to(F64))[:, None]
    codes = e2m1_index(y.abs(), "away") | torch.where(v < 0, 8, 0)
    codes = torch.where(bad[:, None], 0, codes)
    scales = torch.where(bad, 255, e + 127)
    return pack(codes).reshape(b, m, n // 2), scales.to(torch.uint8).reshape(b, m * n // 16)


def mx_dequantize(packed: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``E2M1[code] * 2^(byte - 127)`` (byte 0xFF: NaN), rounded once to ``dtype``."""
    codes = unpack(packed).reshape(-1, 16)
    byte = scales.reshape(-1).to(torch.int64)
    scale = torch.where(byte == 255, math.nan, torch.exp2((byte - 127).to(F64)))
    exact = code_values(codes) * scale[:, None]
    return round_to(exact, dtype).reshape(*packed.shape[:-1], 2 * packed.shape[-1])


def nvfp4_quantize(x: torch.Tensor, g: float) -> tuple[torch.Tensor, torch.Tensor]:
    """x ``[..., K]`` -> (packed, E4M3 scale bytes) of recipe nvfp4, following its documented fp32
    steps: ``t = fp32(amax / fp32(6 g))`` capped at 448, ``s = e4m3(t)``, ``y = fp32(x /
    fp32(s g))``, codes nearest-even, the sign bit of x kept (-0.0 is code 8); ``s == 0``: codes 0;
    a block with NaN/Inf: scale 0x7F, codes 0."""
    lead, k = x.shape[:-1], x.shape[-1]
    v = x.to(F64).reshape(-1, 16)
    g32 = to_fp32(torch.tensor(g, dtype=F64))
    bad = ~torch.isfinite(v).all(dim=1)
    amax = v.abs().nan_to_num(0.0, posinf=0.0).amax(dim=1)
    t = to_fp32(amax / to_fp32(6 * g32)).clamp(max=448.0)
    s_byte = e4m3_round(t)
    s = e4m3_value(s_byte)
    sg = to_fp32(s * g32)
    y = to_fp32(v / torch.where(s == 0, 1.0, sg)[:, None])
    codes = e2m1_index(y.abs(), "even") | torch.signbit(v).to(torch.int64) * 8
    codes = torch.where((bad | (s == 0))[:, None], 0, codes)
    scales = torch.where(bad, 0x7F, s_byte)
    return pack(codes).reshape(*lead, k // 2), scales.to(torch.uint8).reshape(*lead, k // 16)


def nvfp4_dequantize(packed: torch.Tensor, scales: torch.Tensor, g: float, dtype: torch.dtype) -> torch.Tensor:
    """``E2M1[code] * e4m3(byte) * fp32(g)``, exact in fp64, rounded once to ``dtype``."""
    codes = unpack(packed).reshape(-1, 16)
    g32 = to_fp32(torch.tensor(g, dtype=F64))
    exact = code_values(codes) * e4m3_value(scales.reshape(-1))[:, None] * g32
    return round_to(exact, dtype).reshape(*packed.shape[:-1], 2 * packed.shape[-1])


def same_bits(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """Elementwise: equal bits, or both NaN (payloads may differ). Bool tensor of the shape."""
    actual, expected = actual.cpu(), expected.cpu()
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, (actual.dtype, actual.shape, expected.dtype, expected.shape)
    int_type = {2: torch.int16, 4: torch.int32}[actual.element_size()]
    equal = actual.view(int_type) == expected.view(int_type)
    return equal | (actual.isnan() & expected.isnan())
