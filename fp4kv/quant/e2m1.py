"""FP4 E2M1 code helpers shared by both recipes: rounding onto the grid, nibble packing, decoding.

E2M1 code = sign bit 3 | magnitude index 0..7 for ``0, 0.5, 1, 1.5, 2, 3, 4, 6``; code 8 is -0.
Two codes per byte: element ``2j`` in the low nibble, ``2j+1`` in the high nibble.

Everything works on the *bits* of non-negative fp32 values held in int32 (``a_bits``): for
non-negative floats integer order equals float order, and every decision bound of the grid
(0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0) has at most two mantissa bits, so comparisons and the
"add half an ulp, shift" rounding below are exact. The torch functions and the Triton helpers
(``tl_*``, used inside kernels) implement the same integer formulas, which is why the two
backends agree bit for bit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from fp4kv.quant._jit import lazy_jit

if TYPE_CHECKING:  # kernels see `tl` through the scope that `lazy_jit` builds
    import triton.language as tl

E2M1_VALUES: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
"""Magnitude of codes 0..7; codes 8..15 are the negatives (code 8 is -0.0)."""

E2M1_MAX = 6.0
DECISION_BOUNDS: tuple[float, ...] = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
"""Midpoints between neighbouring magnitudes: bound ``i`` separates codes ``i`` and ``i + 1``."""

# fp32 bit patterns used by the integer formulas.
BITS_0_25 = 0x3E800000
BITS_0_75 = 0x3F400000
BITS_1_0 = 0x3F800000
_HALF_ULP_1BIT = 0x00200000  # half of one unit in the last place of a 1-mantissa-bit value
_CODE_BIAS = 0xFE  # (bits of 1.0) >> 22; 1.0 is code 2
SIGN_BIT = 8


def magnitude_codes_ties_away(a_bits: torch.Tensor) -> torch.Tensor:
    """E2M1 magnitude index (0..7, dtype of ``a_bits``) of non-negative floats given by their bits.

    ``a_bits`` holds fp32 bits in int32, or the top halves of fp32 bits (that is, bf16 bits) in
    int16; every decision bound lies on the bf16 grid, so both give the same answer. Round to
    nearest, ties away from zero, saturating at 6 (index 7). Below 1.0 the grid step is 0.5 (two
    comparisons); from 1.0 on it has one mantissa bit, so adding half an ulp and shifting rounds
    ties upward. Negative integers (bits of underflowed values) give 0.
    """
    q = _drop(a_bits)
    sign_shift = 31 - q
    # (a - bound) >> sign_shift is -1 below the bound and 0 from it on (arithmetic shift; no
    # overflow for the ranges that occur), cheaper in torch than a comparison and a cast.
    mag = (a_bits + (_HALF_ULP_1BIT >> q)) >> (22 - q)
    mag = mag.clamp_(_CODE_BIAS, _CODE_BIAS + 5)
    mag += (a_bits - (BITS_0_25 >> q)) >> sign_shift
    mag += (a_bits - (BITS_0_75 >> q)) >> sign_shift
    return mag.sub_(_CODE_BIAS - 2)


def magnitude_codes_rne(a_bits: torch.Tensor) -> torch.Tensor:
    """E2M1 magnitude index (int32, 0..7) of non-negative fp32 bits, round to nearest EVEN, saturating.

    Ties go to the even index: 0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2.0, 2.5 -> 2.0,
    3.5 -> 4.0, 5.0 -> 4.0. Values above 6 (and the bits of +inf) give index 7. int32 only: ties to
    even need the bits below the bf16 grid.
    """
    low = (a_bits > BITS_0_25).to(torch.int32)
    low += a_bits >= BITS_0_75
    odd = (a_bits >> 22) & 1
    high = (a_bits + (_HALF_ULP_1BIT - 1) + odd) >> 22
    return low.add_(high.clamp_(_CODE_BIAS, _CODE_BIAS + 5)).sub_(_CODE_BIAS)


def _drop(bits: torch.Tensor) -> int:
    """How many low bits of the fp32 pattern ``bits`` lacks: 16 for int16 (bf16 bits), 0 for int32."""
    if bits.dtype == torch.int16:
        return 16
    if bits.dtype == torch.int32:
        return 0
    raise ValueError(f"expected int16 (bf16 bits) or int32 (fp32 bits), got dtype {bits.dtype}")


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """uint8 ``[..., k]`` -> int32 codes ``[..., 2k]`` (low nibble first)."""
    p = packed.to(torch.int32)
    return torch.stack((p & 0xF, p >> 4), dim=-1).flatten(-2)


def code_values_f32(codes: torch.Tensor) -> torch.Tensor:
    """int32 codes 0..15 -> their fp32 E2M1 values (code 8 gives -0.0), computed from bits.

    Magnitude index m >= 2 is ``(1 + (m & 1) / 2) * 2^((m >> 1) - 1)``; m = 1 is 0.5; m = 0 is 0.
    """
    mag = codes & 7
    normal = (((mag >> 1) + 126) << 23) | ((mag & 1) << 22)
    bits = torch.where(mag >= 2, normal, (mag == 1).to(torch.int32) * 0x3F000000)
    return (bits | ((codes & SIGN_BIT) << 28)).view(torch.float32)


def byte_pair_values_f32(device: torch.device) -> torch.Tensor:
    """int64 ``[256]``: for each packed byte, the fp32 values of its two codes (low nibble in the low half).

    ``table.index_select(0, bytes).view(float32)`` decodes packed bytes with one gather.
    """
    table = _PAIR_TABLES.get(device)
    if table is None:
        codes = unpack_nibbles(torch.arange(256, dtype=torch.uint8))
        table = code_values_f32(codes).view(torch.int64).reshape(256).to(device)
        _PAIR_TABLES[device] = table
    return table


_PAIR_TABLES: dict[torch.device, torch.Tensor] = {}


def bf16_code_table(device: torch.device, ties: str = "away") -> torch.Tensor:
    """uint8 ``[65536]``: the full E2M1 code (sign | magnitude) of every bf16 bit pattern.

    ``ties="away"`` uses `magnitude_codes_ties_away`, ``ties="even"`` `magnitude_codes_rne`; the
    table is built from those formulas, so a lookup gives exactly the formula's answer for any
    value on the bf16 grid. One gather replaces about ten elementwise passes. For an fp32 value,
    index with its top 16 bits (ties away: every bound is on the bf16 grid and ties go up, so
    truncation is safe) or with its top 16 bits OR-ed with "any low bit set" (ties to even: that
    sticky bit keeps a value just above a bound above it, and never lands on a bound, whose low
    mantissa bits are all zero).
    """
    key = (device, ties)
    table = _CODE_TABLES.get(key)
    if table is None:
        rounding = {"away": magnitude_codes_ties_away, "even": magnitude_codes_rne}[ties]
        patterns = torch.arange(65536, dtype=torch.int32)
        codes = rounding((patterns << 16) & 0x7FFFFFFF) | ((patterns >> 12) & SIGN_BIT)
        table = codes.to(torch.uint8).to(device)
        _CODE_TABLES[key] = table
    return table


_CODE_TABLES: dict[tuple[torch.device, str], torch.Tensor] = {}


# ------------------------------------------------------------------------------------------------
# Triton device helpers (same formulas as above; call them from kernels only).
# ------------------------------------------------------------------------------------------------

@lazy_jit
def tl_magnitude_codes_ties_away(a_bits):
    """int32 bits of non-negative fp32 -> int32 magnitude index, ties away from zero, saturating."""
    low = (a_bits >= 0x3E800000).to(tl.int32) + (a_bits >= 0x3F400000).to(tl.int32)
    high = ((a_bits + 0x00200000) >> 22) - 0xFE
    return low + tl.minimum(tl.maximum(high, 0), 5)


@lazy_jit
def tl_magnitude_codes_rne(a_bits):
    """int32 bits of non-negative fp32 -> int32 magnitude index, ties to even, saturating."""
    low = (a_bits > 0x3E800000).to(tl.int32) + (a_bits >= 0x3F400000).to(tl.int32)
    odd = (a_bits >> 22) & 1
    high = ((a_bits + 0x001FFFFF + odd) >> 22) - 0xFE
    return low + tl.minimum(tl.maximum(high, 0), 5)


@lazy_jit
def tl_code_values_f32(codes):
    """int32 codes 0..15 -> fp32 E2M1 values (code 8 gives -0.0)."""
    mag = codes & 7
    normal = (((mag >> 1) + 126) << 23) | ((mag & 1) << 22)
    bits = tl.where(mag >= 2, normal, tl.where(mag == 1, 0x3F000000, 0))
    bits = bits | ((codes & 8) << 28)
    return bits.to(tl.float32, bitcast=True)


@lazy_jit
def tl_block_tile(n_blocks, TILE: tl.constexpr):
    """This program's TILE block rows (int64, so offsets never overflow), which of them exist, the
    8 byte lanes of a block, and the ``[TILE, 8]`` mask: ``rows, row_ok, lanes, mask``."""
    rows = tl.program_id(0).to(tl.int64) * TILE + tl.arange(0, TILE)
    row_ok = rows < n_blocks
    return rows, row_ok, tl.arange(0, 8), row_ok[:, None]


@lazy_jit
def tl_load_pair_bits(x_ptr, even_at, mask, IN_BF16: tl.constexpr):
    """Load the even and odd elements at ``even_at`` / ``even_at + 1`` as int32 fp32 bits.

    IN_BF16: ``x_ptr`` holds bf16 as int16 bits (the interpreter cannot load bf16), widened
    exactly by a 16-bit shift; otherwise fp16/fp32 values, upcast to fp32. Masked lanes are 0.
    """
    if IN_BF16:
        ev_bits = tl.load(x_ptr + even_at, mask=mask, other=0).to(tl.int32) << 16
        od_bits = tl.load(x_ptr + even_at + 1, mask=mask, other=0).to(tl.int32) << 16
    else:
        ev_bits = tl.load(x_ptr + even_at, mask=mask, other=0.0).to(tl.float32).to(tl.int32, bitcast=True)
        od_bits = tl.load(x_ptr + even_at + 1, mask=mask, other=0.0).to(tl.float32).to(tl.int32, bitcast=True)
    return ev_bits, od_bits


@lazy_jit
def tl_store_f32_as(ptr, v, mask, OUT_KIND: tl.constexpr):
    """Store fp32 ``v`` as OUT_KIND 0: bf16 bits (RNE, NaN -> 0x7FC0) into int16; 1: fp16 bits
    (NaN -> 0x7E00) into int16; 2: fp32."""
    if OUT_KIND == 2:
        tl.store(ptr, v, mask=mask)
    elif OUT_KIND == 0:
        b = v.to(tl.int32, bitcast=True)
        r = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
        tl.store(ptr, tl.where(v != v, 0x7FC0, r).to(tl.int16), mask=mask)
    else:
        h = v.to(tl.float16).to(tl.int16, bitcast=True).to(tl.int32)
        tl.store(ptr, tl.where(v != v, 0x7E00, h).to(tl.int16), mask=mask)
