"""Edge-case inputs of the FP4 formats, shared by the quantization tests and `bench.gpu`'s kernel
checks (tests sit above bench, so they import these from here; bench may not import tests).

Quantize inputs: every bf16 bit pattern alone in its block (the scale of every possible amax:
subnormals, +-0, the largest finite values, +-Inf, every NaN payload), and after anchors that fix
the block's scale (every pattern against every decision bound, saturation, underflow).
Dequantize inputs: global scales that separate rounding once from rounding twice.
"""

from __future__ import annotations

import torch

ANCHORS = [6.0, 3.0, 6.0 * 2.0 ** -20, 3.0 * 2.0 ** 40, 6.0 * 2.0 ** -126, 6e-10, 1e-12, -6.0 * 2.0 ** 7]
"""Block maxima that fix the scale; each is also tried at the next bf16 pattern above it."""


def every_bf16_pattern() -> torch.Tensor:
    return torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)


def alone_blocks() -> torch.Tensor:
    blocks = torch.zeros(65536, 16, dtype=torch.bfloat16)
    blocks[:, 5] = every_bf16_pattern()
    return blocks


def anchored_blocks() -> torch.Tensor:
    patterns = every_bf16_pattern()
    patterns = torch.cat([patterns, torch.zeros(15 - len(patterns) % 15, dtype=torch.bfloat16)]).view(-1, 15)
    rows = []
    for anchor in ANCHORS:
        a = torch.tensor([anchor], dtype=torch.bfloat16)
        for value in (a, (a.view(torch.int16) + 1).view(torch.bfloat16)):
            rows.append(torch.cat([value.expand(len(patterns), 1), patterns], dim=1))
    return torch.cat(rows)


def double_rounding_g(kept_bits: int, above: bool) -> float:
    """An fp32 g in [1, 2) such that ``3 * g`` (26 significant bits, exact in fp64) rounds to fp32
    exactly onto a midpoint of a format with ``kept_bits`` significant bits (bf16: 8, fp16: 11),
    while the exact value lies above (``above``) or below that midpoint, on the side that ties to
    even does not choose: fp32 first, then the 16-bit format, is 1 ulp off there.

    Built from ``P = 3 * G`` (G = g * 2^23, a 24-bit integer): the top ``kept_bits`` bits of P,
    then ``1000..0`` plus low bits ``01``/``10`` (above; fp32 drops them to the midpoint) or
    ``0111..1`` with low bits ``11``/``10`` (below; fp32 rounds up to the midpoint); the top part
    even for above, odd for below, so that ties-to-even goes the wrong way.
    """
    shift = 26 - kept_bits  # bits of P below the kept ones
    half = 1 << (shift - 1)
    tails = (half | 1, half | 2) if above else (half - 1, half - 2)
    for top in range(1 << (kept_bits - 1), 3 << (kept_bits - 2)):  # keeps P in [2^25, 3 * 2^24)
        if (top % 2 == 0) != above:
            continue
        for tail in tails:
            p = (top << shift) | tail
            if p % 3 == 0:
                return (p // 3) * 2.0 ** -23
    raise AssertionError("no such g")  # pragma: no cover


ISSUE_G = 0.0011160714784637094  # issue 15: scale byte 5, code 3 -> 1.634870386624243e-05 in fp32
"""The global scale of issue 15's worked example (not a power of two)."""

GLOBAL_SCALES = {
    "one": 1.0,
    "power_of_two": 2.0 ** -20,
    "0.1": 0.1,
    "3": 3.0,
    "issue_15": ISSUE_G,
    "bf16_tie_to_even_down": 1 + 2.0 ** -8,   # code 1.0 * scale 1.0 lands exactly on a bf16 tie
    "bf16_tie_to_even_up": 1 + 3 * 2.0 ** -8,
    "fp16_tie_to_even_down": 1 + 2.0 ** -11,
    "fp16_tie_to_even_up": 1 + 3 * 2.0 ** -11,
    "bf16_twice_is_low": double_rounding_g(8, above=True),
    "bf16_twice_is_high": double_rounding_g(8, above=False),
    "fp16_twice_is_low": double_rounding_g(11, above=True),
    "fp16_twice_is_high": double_rounding_g(11, above=False),
    "tiny_subnormal_outputs": 2.0 ** -140 * 1.75,
    "near_max": 1.2345e35,  # 2688 * g stays finite in fp32
}
