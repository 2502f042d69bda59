"""mx_block16's E2M1 codes by int16 arithmetic, for its chunked CPU torch quantizer.

Why arithmetic and not a table: torch's 1-D ``index_select`` (a gather from a code table) runs
on one thread, so on a 2-core CPU it was a third of a quantize chunk, while int16 elementwise
ops are vectorised and split across cores (profile in docs/fp4kv-peer.md). Every step here is a
full-size int16 op with ``out=`` or in place, so a chunk's temporaries stay a few hundred KB.

Keys are bf16 bit patterns held as signed int16 (sign in bit 15), or the top halves of fp32
bits: every decision bound of the E2M1 grid lies on the bf16 grid, and rounding ties away from
zero only needs the kept bits, so truncating fp32 to its top half is exact. `ties_away_codes`
takes the magnitudes plus, per block, the shift of its power-of-two scale. (nvfp4 keeps its
table lookup: its round-to-nearest-even in int16 took 15 ops and was no faster; see
docs/fp4kv-peer.md, third round.)

A step function ``[v >= t]`` is one ``clamp(v, t - 1, t)`` (it is ``t - 1 + [v >= t]``) and the
constants are folded; no comparison makes a bool tensor (those are not vectorised in torch).
"""

from __future__ import annotations

import torch

from fp4kv.quant.e2m1 import SIGN_BIT

ONES64 = 0x0001000100010001
"""Multiplying a 16-bit value by this repeats it in the four 16-bit lanes of an int64."""

TIES_AWAY_BIAS = 0x3EE0
"""`ties_away_codes` takes ``p = bits(|x| / 2^e) - TIES_AWAY_BIAS``: then ``p >> 6`` is the code
from 1.0 up (plus the 2 that 0.875..1.25 round to) and the two bounds below 1.0 sit at ``+-0x60``."""

def lanes64(values: torch.Tensor) -> torch.Tensor:
    """Integer per-block values (any int dtype, taken mod 2^16) -> int64 holding each in four lanes."""
    return (values.to(torch.int64) & 0xFFFF) * ONES64


def spread_per_block(block_lanes: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """`lanes64` values ``[n]`` -> ``out`` int16 ``[n, 16]``, each block's value in its 16 lanes.

    One contiguous int64 copy: a broadcast of a per-block int16 value into ``[n, 16]`` is not
    vectorised in torch and costs about four times as much.
    """
    n = out.shape[0]
    out.view(torch.int64).view(n, 4).copy_(block_lanes[:, None].expand(n, 4))
    return out


def ties_away_codes(p: torch.Tensor, top: torch.Tensor, out: torch.Tensor, scratch: torch.Tensor) -> torch.Tensor:
    """Full E2M1 codes (sign | magnitude), round to nearest with ties away from zero.

    ``p``: int16 ``[n, 16]``, ``bits(|x| / 2^e) - TIES_AWAY_BIAS`` with ``|x| / 2^e <= 6`` (a finite
    block's scale guarantees it, so no saturation is needed); values far below the grid give 0.
    ``top``: the elements' int16 keys, for the sign: code 8 is set wherever the sign bit is (the
    caller fixes ``-0.0`` if its rule says so). ``out``/``scratch``: int16 ``[n, 16]``; ``out`` is
    returned. Range: ``p`` from -32768 to ``0x40C0 - TIES_AWAY_BIAS``.

    Magnitude = ``max(p >> 6, 2) + ([p >= -0x60] - 1) + ([p >= 0x60] - 1)``: the first term steps
    at 1.25, 1.75, 2.5, 3.5 and 5 (0x40 apart in bf16 bits), the others at 0.25 and 0.75; the two
    clamps below are those brackets plus -0x60 and +0x60, which cancel.
    """
    code = torch.bitwise_right_shift(p, 6, out=out).clamp_(min=2)
    code += torch.clamp(p, -0x61, -0x60, out=scratch)  # -0x60 + ([p >= -0x60] - 1)
    code += torch.clamp(p, 0x5F, 0x60, out=scratch)  # 0x60 + ([p >= 0x60] - 1)
    return code.bitwise_or_(torch.bitwise_right_shift(top, 12, out=scratch).bitwise_and_(SIGN_BIT))

