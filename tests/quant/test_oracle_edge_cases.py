"""Hand-derived edge cases through the torch path AND the Triton kernels, against the oracle.

Each case is one block of 16 picked for a rounding rule: E2M1 decision bounds and the values
either side, exponent edges of the block scale, E4M3 ties in the normal and subnormal range
(``x = 7.125, g = 1``: t = 1.1875 lies halfway between E4M3 1.125 and 1.25), saturation, -0.0,
NaN/Inf blocks, and for the dequantization bf16 ties. Expected bytes and values come from
fp_oracle.py (fp64 arithmetic, torch's float8_e4m3fn / fp32 casts, brute-force nearest), never
from the other backend. On CPU the kernels run under Triton's interpreter, on a GPU tier compiled
on CUDA; each recipe's cases go through one launch per input dtype and global scale.
"""

from __future__ import annotations

import math

import pytest
import torch

import fp_oracle as oracle
from fp4kv.quant import BlockFP4KVQuantizeUtil, NVFP4KVQuantizeUtil

from quant_testutil import above, below

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy in the interpreter: inf/NaN on purpose

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
BACKENDS = ["torch", "triton"]
IN_DTYPES = [torch.float32, torch.bfloat16, torch.float16]
OUT_DTYPES = [torch.bfloat16, torch.float16, torch.float32]
BOUNDS = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
E4M3_SUB = 2.0 ** -9  # E4M3 subnormal step


def bounds_block(scale: float) -> list[float]:
    """Block max 6 * scale (fixes the block scale), then each decision bound and its neighbours."""
    values = [6.0 * scale]
    for b in BOUNDS[:5]:  # 5 bounds x 3 values = 15 more: one block
        values += [below(b * scale), b * scale, above(b * scale)]
    return values


def signed_bounds_block(scale: float) -> list[float]:
    values = [-6.0 * scale]
    for b in BOUNDS[4:]:
        values += [-below(b * scale), -b * scale, -above(b * scale)]
    return values + [-0.0, 0.0, -1e-30 * scale, 5.5 * scale, -5.5 * scale, 4.5 * scale]


MX_CASES: dict[str, list[float]] = {
    "bounds": bounds_block(1.0),
    "signed_bounds": signed_bounds_block(1.0),
    "bounds_2^-20": bounds_block(2.0 ** -20),
    "bounds_2^7": bounds_block(2.0 ** 7),
    "amax_6": [6.0, 1.0],
    "amax_above_6": [above(6.0), 1.0],          # e = 1
    "amax_below_6": [below(6.0), 3.0],
    "amax_3x2^k": [3.0 * 2.0 ** -3, 0.1],       # mantissa exactly 0.5: 6 * 2^-4
    "amax_above_3x2^k": [above(3.0 * 2.0 ** -3)],
    "amax_6x2^-30": [6.0 * 2.0 ** -30, above(6.0 * 2.0 ** -31)],
    "amax_above_6x2^40": [above(6.0 * 2.0 ** 40)],
    "near_fp32_max": [3.0e38, -1.0e38],
    "tiny_clamped_at_1e-10": [1e-12, -1e-13],
    "at_the_clamp": [6e-10, 3e-10],
    "subnormal_fp32": [2.0 ** -149, -(2.0 ** -140)],
    "all_zero": [0.0],
    "negative_zeros": [-0.0] * 16,
    "nan": [1.0, math.nan],
    "inf": [math.inf, 2.0],
    "minus_inf": [1.0, -math.inf],
}

NV_CASES: dict[float, dict[str, list[float]]] = {
    1.0: {
        "bounds": bounds_block(1.0),
        "signed_bounds": signed_bounds_block(1.0),
        "e4m3_tie_normal_to_even_up": [7.125, 1.0, -3.0],             # t 1.1875 -> 1.25
        "e4m3_tie_normal_to_even_down": [6.375, 5.0, 0.5],            # t 1.0625 -> 1.0; 6.375/1 saturates
        "e4m3_tie_at_binade_top": [6.0 * 248.0, 100.0],               # t 248 -> 256
        "e4m3_tie_subnormal_to_even_up": [6.0 * 3.5 * E4M3_SUB, 0.01],   # t 3.5 * 2^-9 -> 4 * 2^-9
        "e4m3_tie_subnormal_to_even_down": [6.0 * 2.5 * E4M3_SUB, 0.01],  # -> 2 * 2^-9
        "e4m3_tie_subnormal_up_to_normal": [6.0 * 7.5 * E4M3_SUB],       # -> 2^-6, the smallest normal
        "e4m3_tie_half_the_smallest": [6.0 * 0.5 * E4M3_SUB, 1e-4],      # t 2^-10 -> 0: empty block
        "e4m3_just_above_half_the_smallest": [above(6.0 * 0.5 * E4M3_SUB)],
        "e4m3_smallest_normal_edge": [6.0 * 2.0 ** -6, below(6.0 * 2.0 ** -6)],
        "e4m3_max_448": [6.0 * 448.0, 1.0],
        "e4m3_saturated_above_448": [6.0 * 500.0, -6.0 * 480.0, 100.0],   # s = 448
        "codes_saturate_far_above_448": [6.0 * 1000.0, -6.0 * 2000.0, 6.0 * 448.0 * 7 / 6],  # y 13.4, -26.8, 7
        "block_scale_rounds_down_codes_saturate": [6.2, 6.1, -6.2],
        "negative_zero_keeps_sign": [6.0, -0.0, 0.0, -1e-9],
        "all_negative_zero_block": [-0.0] * 16,
        "nan": [1.0, math.nan],
        "inf": [math.inf, 2.0],
        "minus_inf": [1.0, -math.inf],
    },
    0.1: {
        "bounds_g0.1": bounds_block(0.1),
        "signed_bounds_g0.1": signed_bounds_block(0.1),
        "amax_2688g": [2688 * 0.1, 0.3],
    },
    2.0 ** -100: {
        "tiny_g_bounds": bounds_block(2.0 ** -100),
        "tiny_g_subnormal_scale": [6.0 * 3.5 * E4M3_SUB * 2.0 ** -100],
    },
}


def blocks(cases: dict[str, list[float]], dtype: torch.dtype) -> tuple[list[str], torch.Tensor]:
    """Case names and their blocks ``[n, 16]`` (zero padded) in ``dtype``."""
    rows = [values + [0.0] * (16 - len(values)) for values in cases.values()]
    assert all(len(r) == 16 for r in rows)
    return list(cases), torch.tensor(rows, dtype=torch.float64).to(dtype)


def failing_cases(names: list[str], ok_per_block: torch.Tensor) -> list[str]:
    return [name for name, ok in zip(names, ok_per_block.tolist()) if not ok]


def device_for(backend: str) -> str:
    return DEVICE if backend == "triton" else "cpu"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("in_dtype", IN_DTYPES)
def test_mx_block16_edge_cases_match_the_oracle(in_dtype, backend):
    names, x = blocks(MX_CASES, in_dtype)
    x = x.view(1, len(names), 16)
    packed, scales = BlockFP4KVQuantizeUtil.batched_quantize(x.to(device_for(backend)), backend=backend)
    want_packed, want_scales = oracle.mx_quantize(x)
    ok = (packed.cpu() == want_packed)[0].all(dim=1) & (scales.cpu() == want_scales)[0]
    assert failing_cases(names, ok) == [], f"quantize, input {in_dtype}"
    for out_dtype in OUT_DTYPES:
        out = BlockFP4KVQuantizeUtil.batched_dequantize(packed, scales, out_dtype, backend=backend)
        same = oracle.same_bits(out, oracle.mx_dequantize(want_packed, want_scales, out_dtype))
        assert failing_cases(names, same[0].all(dim=1)) == [], f"dequantize to {out_dtype}, input {in_dtype}"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("in_dtype", IN_DTYPES)
@pytest.mark.parametrize("g", list(NV_CASES))
def test_nvfp4_edge_cases_match_the_oracle(g, in_dtype, backend):
    names, x = blocks(NV_CASES[g], in_dtype)
    q = NVFP4KVQuantizeUtil.quantize(x.to(device_for(backend)), g, backend=backend)
    want_packed, want_scales = oracle.nvfp4_quantize(x, g)
    ok = (q.packed.cpu() == want_packed).all(dim=1) & (q.block_scales.cpu() == want_scales)[:, 0]
    assert failing_cases(names, ok) == [], f"quantize, input {in_dtype}, g={g}"
    for out_dtype in OUT_DTYPES:
        out = NVFP4KVQuantizeUtil.dequantize(*q, dtype=out_dtype, backend=backend)
        same = oracle.same_bits(out, oracle.nvfp4_dequantize(want_packed, want_scales, g, out_dtype))
        assert failing_cases(names, same.all(dim=1)) == [], f"dequantize to {out_dtype}, input {in_dtype}, g={g}"


def test_the_e4m3_tie_cases_are_ties_and_go_to_even():
    # Hand-derived, without the oracle: what the quantize cases above must produce at g = 1.
    cases = NV_CASES[1.0]
    expected = {  # case: E4M3 byte of the block scale
        "e4m3_tie_normal_to_even_up": 0x3A,          # 1.25 = 2^0 * 1.010b (1.125 = 0x39 is odd)
        "e4m3_tie_normal_to_even_down": 0x38,        # 1.0 (1.125 = 0x39 is odd)
        "e4m3_tie_at_binade_top": 0x78,              # 256 = 2^8 * 1.000b (240 = 0x77 is odd)
        "e4m3_tie_subnormal_to_even_up": 0x04,       # 4 * 2^-9 (3 * 2^-9 = 0x03 is odd)
        "e4m3_tie_subnormal_to_even_down": 0x02,     # 2 * 2^-9
        "e4m3_tie_subnormal_up_to_normal": 0x08,     # 2^-6
        "e4m3_tie_half_the_smallest": 0x00,
        "e4m3_max_448": 0x7E,
        "e4m3_saturated_above_448": 0x7E,
    }
    names, x = blocks({k: cases[k] for k in expected}, torch.float32)
    for backend in BACKENDS:
        q = NVFP4KVQuantizeUtil.quantize(x.to(device_for(backend)), 1.0, backend=backend)
        assert dict(zip(names, q.block_scales[:, 0].tolist())) == expected, backend


def test_bf16_output_ties_go_to_even_in_both_backends():
    # code 2 (1.0) * scale 1.0 * g lands exactly halfway between two bf16 values.
    packed = torch.tensor([[0x22] + [0] * 7] * 2, dtype=torch.uint8)  # elements 0 and 1: code 2
    scales = torch.tensor([[0x38]] * 2, dtype=torch.uint8)             # E4M3 1.0
    for g, want in [(1 + 2.0 ** -8, 1.0), (1 + 3 * 2.0 ** -8, 1.015625), (1 + 5 * 2.0 ** -8, 1.015625)]:
        for backend in BACKENDS:
            device = device_for(backend)
            out = NVFP4KVQuantizeUtil.dequantize(packed.to(device), scales.to(device), g, torch.bfloat16, backend=backend)
            assert out[:, :2].flatten().tolist() == [want] * 4, (g, backend)
