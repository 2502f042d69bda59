"""Contract of recipe nvfp4 (`NVFP4KVQuantizeUtil`): E4M3 block scales, RNE codes, global scale.

Expected values are worked out by hand from the format or come from an independent oracle
(torch's own float8_e4m3fn cast for the E4M3 rounding). Torch backend; the Triton kernels are
held to these bytes in test_triton_kernels.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fp4kv.quant import NVFP4KVQuantizeUtil, NVFP4Tensor
from fp4kv.quant.e4m3 import e4m3_bits_from_f32, e4m3_bits_to_f32
from fp4kv.quant import nvfp4

from quant_testutil import above, below, codes_of

Q = NVFP4KVQuantizeUtil
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
ONE_E4M3 = 0x38  # exponent 7 (bias 7), mantissa 0


def row(values: list[float], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """One block as x [1, 16], zero padded."""
    return torch.tensor(values + [0.0] * (16 - len(values)), dtype=dtype).view(1, 16)




# ---------------------------------------------------------------------------------------------
# E4M3 rounding by bit operations == torch's float8_e4m3fn cast (round to nearest even)
# ---------------------------------------------------------------------------------------------

def test_e4m3_encoding_matches_torch_float8_cast_on_a_sweep_of_fp32_bit_patterns():
    bits = torch.arange(0, 0x43E00001, 331, dtype=torch.int32)  # every 331st fp32 in [0, 448]
    ties = torch.tensor([0.0, 448.0, 2 ** -10, 1.5 * 2 ** -9, 2 ** -6, 1.0625, 1.1875, 240.0, 464.0 - 16, 2 ** -7 * 1.0625])
    t = torch.cat([bits.view(torch.float32), ties])
    expected = t.to(torch.float8_e4m3fn).view(torch.uint8).to(torch.int32)
    assert torch.equal(e4m3_bits_from_f32(t), expected)


def test_block_scales_of_the_torch_path_match_torch_float8_cast_and_its_value():
    """`block_scales_e4m3` (the torch quantizer's vectorised block-scale rounding) against
    torch's cast, on the same sweep plus every subnormal midpoint and the top of the range."""
    bits = torch.arange(0, 0x43E00001, 331, dtype=torch.int32)
    midpoints = (torch.arange(0, 17, dtype=torch.float32) + 0.5) * 2.0 ** -9  # subnormal ties
    edges = torch.tensor([0.0, 448.0, 2 ** -6, 2 ** -6 - 2 ** -30, 2 ** -9, 2 ** -10, 2 ** -10 + 2 ** -40,
                          432.0, 440.0, 447.99, 1.0625, 1.1875])
    t = torch.cat([bits.view(torch.float32), midpoints, edges])
    cast = t.to(torch.float8_e4m3fn)
    got_bits, got_values = nvfp4.block_scales_e4m3(t)
    assert torch.equal(got_bits, cast.view(torch.uint8).to(torch.int32))
    assert torch.equal(got_values, cast.to(torch.float32))


def test_e4m3_decoding_matches_torch_for_all_256_patterns():
    every = torch.arange(256, dtype=torch.int32)
    expected = every.to(torch.uint8).view(torch.float8_e4m3fn).to(torch.float32)
    mine = e4m3_bits_to_f32(every)
    assert torch.equal(mine.isnan(), expected.isnan())
    assert torch.equal(mine.nan_to_num(0.0), expected.nan_to_num(0.0))


# ---------------------------------------------------------------------------------------------
# codes and block scales
# ---------------------------------------------------------------------------------------------

def test_every_code_encodes_its_own_value_with_block_scale_one():
    values = E2M1 + [-v for v in E2M1]
    q = Q.quantize(row(values), global_scale=1.0)
    assert q.block_scales.tolist() == [[ONE_E4M3]]  # amax 6 / (6 * 1) = 1.0
    assert codes_of(q.packed) == list(range(16))


@pytest.mark.parametrize("bound, low, high", [
    (0.25, 0, 1), (0.75, 1, 2), (1.25, 2, 3), (1.75, 3, 4), (2.5, 4, 5), (3.5, 5, 6), (5.0, 6, 7)])
def test_ties_round_to_the_even_code(bound, low, high):
    tie = low if low % 2 == 0 else high
    values = [6.0, below(bound), bound, above(bound), -bound]
    q = Q.quantize(row(values), global_scale=1.0)
    assert codes_of(q.packed)[:5] == [7, low, tie, high, 8 | tie]


def test_codes_saturate_at_6_when_the_block_scale_rounds_down():
    # 6.375 / 6 = 1.0625: the E4M3 tie between 1.0 and 1.125 goes to 1.0, so 6.375 / 1.0 > 6.
    q = Q.quantize(row([6.375, 1.0]), global_scale=1.0)
    assert q.block_scales.item() == ONE_E4M3
    assert codes_of(q.packed)[:2] == [7, 2]


def test_block_scale_saturates_at_448():
    q = Q.quantize(row([6.0, -3.0]), global_scale=0.001)  # 6 / 0.006 = 1000 > 448
    assert q.block_scales.item() == 0x7E  # 448
    assert codes_of(q.packed)[:2] == [7, 8 | 7]  # 6 / 0.448 = 13.4 and 3 / 0.448 = 6.7 saturate


def test_subnormal_block_scale():
    q = Q.quantize(row([6.0 * 2 ** -8]), global_scale=1.0)  # t = 2^-8 = 2 * 2^-9
    assert q.block_scales.item() == 0x02
    assert codes_of(q.packed)[0] == 7


@pytest.mark.parametrize("values", [[0.0] * 16, [-0.0, 0.0], [6.0 * 2 ** -12, -6.0 * 2 ** -13]])
def test_zero_or_underflowing_block_has_scale_0_and_codes_0(values):
    q = Q.quantize(row(values), global_scale=1.0)
    assert q.block_scales.item() == 0
    assert q.packed.abs().sum().item() == 0
    assert Q.dequantize(*q, dtype=torch.float32).abs().sum().item() == 0


def test_dequantize_is_e2m1_times_scale_times_global_rounded_once_to_fp32():
    packed = torch.tensor([[0x53] + [0] * 7], dtype=torch.uint8)  # codes 3 (1.5), 5 (3.0)
    scales = torch.tensor([[0x41]], dtype=torch.uint8)  # E4M3 exponent 8, mantissa 1: 2.25
    out = Q.dequantize(packed, scales, 0.1, dtype=torch.float32)
    g = float(np.float32(0.1))  # the global scale is an fp32 number; the products below are exact in fp64
    assert out[0, :2].tolist() == [float(np.float32(1.5 * 2.25 * g)), float(np.float32(3.0 * 2.25 * g))]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_block_with_nan_or_inf_gets_e4m3_nan_scale_and_dequantizes_to_nan(bad):
    x = torch.full((2, 16), 6.0)
    x[1, 3] = bad
    q = Q.quantize(x, global_scale=1.0)
    assert q.block_scales[:, 0].tolist() == [ONE_E4M3, 0x7F]
    assert q.packed[1].tolist() == [0] * 8
    out = Q.dequantize(*q, dtype=torch.bfloat16)
    assert out[1].isnan().all() and not out[0].isnan().any()


# ---------------------------------------------------------------------------------------------
# global scale
# ---------------------------------------------------------------------------------------------

def test_global_scale_is_the_dequantization_multiplier_amax_over_2688():
    x = torch.tensor([[1.0, -2688.0 * 3] + [0.0] * 14])
    assert Q.compute_global_scale(x) == 3.0
    q = Q.quantize(x)
    assert q.global_scale.dtype == torch.float32 and q.global_scale.dim() == 0
    assert q.global_scale.item() == 3.0
    assert q.block_scales.item() == 0x7E  # the tensor's amax block gets the top E4M3 scale, 448


def test_global_scale_of_an_all_zero_tensor_is_1():
    assert Q.compute_global_scale(torch.zeros(4, 16)) == 1.0


def test_global_scale_of_non_finite_input_is_a_value_error():
    with pytest.raises(ValueError, match="NaN or Inf"):
        Q.compute_global_scale(torch.tensor([[1.0, math.inf] + [0.0] * 14]))


@pytest.mark.parametrize("g", [0.0, -1.0, math.nan, math.inf, 1e-50, 1e38])
def test_bad_global_scale_values_are_value_errors(g):
    with pytest.raises(ValueError, match="global_scale"):
        Q.quantize(row([1.0]), global_scale=g)


@pytest.mark.parametrize("g", [torch.ones(2), torch.ones(1, dtype=torch.int32), "0.5"])
def test_bad_global_scale_types_are_value_errors(g):
    with pytest.raises(ValueError, match="global_scale"):
        Q.quantize(row([1.0]), global_scale=g)


def test_global_scale_as_tensor_equals_global_scale_as_float():
    x = torch.randn(8, 32, generator=torch.Generator().manual_seed(3))
    a = Q.quantize(x, 0.01)
    b = Q.quantize(x, torch.tensor([0.01], dtype=torch.float64))
    assert torch.equal(a.packed, b.packed) and torch.equal(a.block_scales, b.block_scales)


# ---------------------------------------------------------------------------------------------
# shapes, round trip, error
# ---------------------------------------------------------------------------------------------

def test_kv_shaped_input_keeps_its_leading_dims_and_unpacks_as_a_tuple():
    x = torch.randn(5, 4, 64, dtype=torch.bfloat16)
    result = Q.quantize(x)
    assert isinstance(result, NVFP4Tensor)
    packed, scales, g = result
    assert packed.shape == (5, 4, 32) and scales.shape == (5, 4, 4)
    flat = Q.quantize(x.view(20, 64), g)
    assert torch.equal(flat.packed.view(5, 4, 32), packed)
    assert Q.dequantize(packed, scales, g).shape == (5, 4, 64)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_values_on_the_grid_round_trip_exactly(dtype):
    gen = torch.Generator().manual_seed(2)
    codes = torch.randint(0, 16, (6, 4, 16), generator=gen)
    codes[..., 0] = 7
    s = torch.tensor([0.5, 1.0, 1.125, 2.0, 3.5, 8.0])[torch.randint(0, 6, (6, 4, 1), generator=gen)]
    x = (torch.tensor(E2M1 + [-v for v in E2M1])[codes] * s * 0.25).view(6, 64).to(dtype)
    q = Q.quantize(x, 0.25)
    assert torch.equal(Q.dequantize(*q, dtype=dtype), x)


def test_round_trip_mse_on_standard_normal_bf16_beats_mx_block16():
    x = torch.randn(2048, 128, generator=torch.Generator().manual_seed(0)).bfloat16()
    out = Q.dequantize(*Q.quantize(x), dtype=torch.float32)
    mse = ((out - x.float()) ** 2).mean().item()
    assert 0.006 < mse < 0.011  # mx_block16 (power-of-two scales) is about 0.0127


@pytest.mark.parametrize("x, words", [
    (torch.zeros(16), ["[M, K] or [B, H, D]", "(16,)"]),
    (torch.zeros(2, 2, 2, 16), ["(2, 2, 2, 16)"]),
    (torch.zeros(4, 24), ["divisible by 16", "(4, 24)"]),
    (torch.zeros(4, 16, dtype=torch.float64), ["torch.float64", "(4, 16)"]),
])
def test_quantize_rejects_bad_input_with_a_message_naming_shape_and_dtype(x, words):
    with pytest.raises(ValueError) as err:
        Q.quantize(x, 1.0)
    for word in words:
        assert word in str(err.value)


def test_dequantize_rejects_mismatched_shapes_dtypes_and_output_dtype():
    packed, scales, g = Q.quantize(torch.ones(4, 32))
    cases = [
        ((packed.to(torch.int16), scales, g, torch.bfloat16), ["packed", "torch.int16"]),
        ((packed, scales.float(), g, torch.bfloat16), ["block_scales", "torch.float32"]),
        ((packed, scales[:3], g, torch.bfloat16), ["(4, 16)", "(3, 2)", "(4, 2)"]),
        ((packed.view(4, 2, 8), scales, g, torch.bfloat16), ["(4, 2, 8)", "(4, 2)"]),
        ((packed, scales, g, torch.uint8), ["output dtype", "torch.uint8"]),
    ]
    for args, words in cases:
        with pytest.raises(ValueError) as err:
            Q.dequantize(*args)
        for word in words:
            assert word in str(err.value), str(err.value)


@pytest.mark.parametrize("amax", [2.0 ** -133, 1e-38, 3e-35])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_global_scale_of_tiny_input_is_clamped_to_the_smallest_normal_fp32(amax, dtype):
    x = row([amax, -amax / 2, amax / 3], dtype)
    g = Q.compute_global_scale(x)
    assert g == 2.0 ** -126  # amax / 2688 would be subnormal: clamped, never 0.0 nor subnormal
    q = Q.quantize(x)  # usable as is: no "must be positive" error
    assert q.global_scale.item() == 2.0 ** -126
    got = Q.dequantize(q.packed, q.block_scales, q.global_scale, torch.float32)
    assert float((got - x.float()).abs().max()) <= 0.25 * float(x.float().abs().max())


@pytest.mark.parametrize("amax", [1e-42, 2.0 ** -149])
def test_global_scale_of_input_below_the_format_is_clamped_and_encodes_zeros(amax):
    x = row([amax, -amax])
    assert Q.compute_global_scale(x) == 2.0 ** -126  # was 0.0: "must be positive" on quantize
    q = Q.quantize(x)
    assert q.block_scales.item() == 0 and q.packed.abs().sum().item() == 0


def test_global_scale_just_above_the_clamp_is_not_clamped():
    x = row([2688.0 * 2.0 ** -125])
    assert Q.compute_global_scale(x) == 2.0 ** -125
    assert Q.compute_global_scale(torch.zeros(4, 16)) == 1.0  # all zeros: unchanged


def test_negative_zero_keeps_code_8_in_nvfp4():
    # documented: unlike mx_block16 (SGLang's x < 0), nvfp4 keeps the sign bit of -0.0
    packed, scales, _ = Q.quantize(row([6.0, -0.0, 0.0]), global_scale=1.0)
    assert scales.item() == ONE_E4M3
    assert codes_of(packed)[:3] == [7, 8, 0]
