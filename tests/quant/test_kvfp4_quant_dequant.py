"""Contract of recipe mx_block16 (`BlockFP4KVQuantizeUtil`; its other names: test_public_names.py).

Expected values are computed by hand from the format (shared README, "The FP4 formats"), not by
running the implementation. Runs on the torch backend (the CPU production path); the Triton
kernels are held to these same bytes in test_triton_kernels.py.
"""

from __future__ import annotations

import math

import pytest
import torch

from fp4kv.quant import BlockFP4KVQuantizeUtil
from fp4kv.quant.e2m1 import magnitude_codes_ties_away

from quant_testutil import above, below, codes_of

Q = BlockFP4KVQuantizeUtil
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def one_block(values: list[float], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A single block of 16 as x [1, 1, 16], padded with zeros."""
    return torch.tensor(values + [0.0] * (16 - len(values)), dtype=dtype).view(1, 1, 16)




# ---------------------------------------------------------------------------------------------
# codes, bounds, packing
# ---------------------------------------------------------------------------------------------

def test_every_code_0_to_15_encodes_its_own_value_at_scale_one():
    # code 8 is -0: a negative value that rounds to zero (-0.1); -0.0 itself encodes as code 0
    values = E2M1 + [-0.1] + [-v for v in E2M1[1:]]
    packed, scales = Q.batched_quantize(one_block(values))
    assert scales.tolist() == [[127]]  # amax 6 -> e = 0
    assert codes_of(packed) == list(range(16))
    assert packed.flatten().tolist() == [0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE]


def test_pair_1_then_6_packs_to_0x72_low_nibble_first():
    packed, _ = Q.batched_quantize(one_block([1.0, 6.0]))
    assert packed[0, 0, 0].item() == 0x72


@pytest.mark.parametrize("bound, lower_code", [(0.25, 0), (0.75, 1), (1.25, 2), (1.75, 3), (2.5, 4), (3.5, 5), (5.0, 6)])
def test_decision_bounds_ties_go_away_from_zero(bound, lower_code):
    # 6.0 fixes the block scale at 2^0, so the values are quantized as given.
    values = [6.0, below(bound), bound, above(bound), -below(bound), -bound, -above(bound)]
    packed, scales = Q.batched_quantize(one_block(values))
    assert scales.item() == 127
    up = lower_code + 1
    assert codes_of(packed)[:7] == [7, lower_code, up, up, 8 | lower_code, 8 | up, 8 | up]


def test_codes_saturate_at_6_for_values_beyond_the_grid():
    bits = torch.tensor([6.0, 7.0, 100.0, math.inf], dtype=torch.float32).view(torch.int32)
    assert magnitude_codes_ties_away(bits).tolist() == [7, 7, 7, 7]


def test_negative_zero_is_code_0_and_tiny_negatives_keep_the_sign_code_8():
    # SGLang's sign is (x / 2^e) < 0: -0.0 is not negative (code 0), -0.1 rounds to -0 (code 8).
    packed, _ = Q.batched_quantize(one_block([6.0, -0.0, -0.1, 0.1]))
    assert codes_of(packed)[:4] == [7, 0, 8, 0]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_sign_of_zero_matches_the_peer_in_every_dtype_and_backend(dtype, backend):
    tiny = {torch.bfloat16: 2.0 ** -133, torch.float16: 2.0 ** -24, torch.float32: 2.0 ** -149}[dtype]
    device = "cuda" if backend == "triton" and torch.cuda.is_available() else "cpu"
    x = one_block([6.0, -0.0, 0.0, -0.1, -tiny, tiny, -6.0, -0.0], dtype).to(device)  # -tiny: subnormal
    packed, scales = Q.batched_quantize(x, backend=backend)
    assert scales.item() == 127
    assert codes_of(packed)[:8] == [7, 0, 0, 8, 8, 0, 15, 0]
    # an all -0.0 block is all code 0, like an all +0.0 block
    zeros = torch.full((1, 1, 16), -0.0, dtype=dtype, device=device)
    packed, scales = Q.batched_quantize(zeros, backend=backend)
    assert packed.abs().sum().item() == 0 and scales.item() == 94


# ---------------------------------------------------------------------------------------------
# scale bytes
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("amax, byte", [
    (6.0, 127),                  # e = 0
    (3.0, 126),                  # 3/6 = 2^-1
    (1.0, 125),                  # 1/6 -> ceil(log2) = -2
    (6.0 * 2 ** 10, 137),
    (6.0 * 2 ** -20, 107),
    (3.0e38, 253),               # fp32 near max: e = 126
    (6e-10, 94),                 # amax/6 = 1e-10 -> e = -33
    (1e-12, 94),                 # clamped at 1e-10
])
def test_scale_byte_is_ceil_log2_of_amax_over_6_plus_127(amax, byte):
    _, scales = Q.batched_quantize(one_block([amax, -amax / 2]))
    assert scales.item() == byte


def test_all_zero_block_stores_94_and_dequantizes_to_zeros():
    x = torch.zeros(2, 4, 8)
    packed, scales = Q.batched_quantize(x)
    assert scales.tolist() == [[94, 94], [94, 94]]
    assert packed.abs().sum().item() == 0
    assert torch.equal(Q.batched_dequantize(packed, scales, torch.float32), x)


@pytest.mark.parametrize("k", [-30, -3, 0, 1, 7, 40])
def test_exponent_is_exact_just_above_6_times_power_of_two(k):
    edge = 6.0 * 2.0 ** k
    _, at = Q.batched_quantize(one_block([edge]))
    _, over = Q.batched_quantize(one_block([above(edge)]))
    assert at.item() == 127 + k
    assert over.item() == 127 + k + 1  # a float log2 of amax/6 would round to k here


def test_exponent_is_exact_for_bf16_input_just_above_6_times_power_of_two():
    # bf16 6.03125 = next bf16 after 6: an eager bf16 log2 gives e = 0 (the peer's result) and
    # saturates; the exact rule needs e = 1.
    x = one_block([6.03125], torch.bfloat16)
    _, scales = Q.batched_quantize(x)
    assert scales.item() == 128


# ---------------------------------------------------------------------------------------------
# non-finite input
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_block_with_nan_or_inf_gets_scale_0xff_and_dequantizes_to_nan(bad, dtype):
    x = torch.ones(1, 2, 16, dtype=dtype)
    x[0, 1, 5] = bad
    packed, scales = Q.batched_quantize(x)
    assert scales.tolist() == [[127 - 2, 0xFF]]  # block 0 is all ones: e = -2
    assert packed[0, 1].tolist() == [0] * 8
    out = Q.batched_dequantize(packed, scales, dtype)
    assert torch.equal(out[0, 0], x[0, 0])
    assert out[0, 1].isnan().all()


def test_peer_written_scale_bytes_decode_exactly():
    packed = torch.tensor([[[0x21, 0x76, 0xFE, 0, 0, 0, 0, 0]]], dtype=torch.uint8)  # 0.5, 1, 4, 6, -4, -6
    for byte in (0, 1, 94, 127, 200, 253):
        scales = torch.tensor([[byte]], dtype=torch.uint8)
        out = Q.batched_dequantize(packed, scales, torch.float32)
        exact = [math.ldexp(v, byte - 127) for v in (0.5, 1.0, 4.0, 6.0, -4.0, -6.0)]
        expected = torch.tensor(exact, dtype=torch.float64).float()  # overflows to inf at byte 253
        assert torch.equal(out[0, 0, :6], expected), byte


# ---------------------------------------------------------------------------------------------
# round trip and error
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_values_on_the_grid_round_trip_exactly(dtype):
    gen = torch.Generator().manual_seed(1)
    b, m, n = 3, 4, 32
    codes = torch.randint(0, 16, (b, m * n // 16, 16), generator=gen)
    codes[..., 0] = 7  # each block's amax is 6 * 2^k, so its scale is 2^k
    values = torch.tensor(E2M1 + [-v for v in E2M1])[codes]
    k = torch.randint(-12, 12, (b, m * n // 16, 1), generator=gen)  # fp16-representable range
    x = (values * torch.exp2(k.float())).view(b, m, n).to(dtype)
    packed, scales = Q.batched_quantize(x)
    assert scales.view(b, -1).tolist() == (k.view(b, -1) + 127).tolist()
    out = Q.batched_dequantize(packed, scales, dtype)
    assert out.dtype == dtype and out.shape == x.shape
    assert torch.equal(out, x)


def test_output_dtype_is_honoured_and_strided_input_is_accepted():
    x = torch.randn(2, 16, 8).transpose(1, 2)  # [2, 8, 16], not contiguous
    packed, scales = Q.batched_quantize(x)
    expected = Q.batched_quantize(x.contiguous())
    assert torch.equal(packed, expected[0]) and torch.equal(scales, expected[1])
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        assert Q.batched_dequantize(packed, scales, dtype).dtype == dtype


def test_round_trip_mse_on_standard_normal_bf16_matches_the_reference_0_0127():
    x = torch.randn(256, 8, 128, generator=torch.Generator().manual_seed(0)).bfloat16()
    out = Q.batched_dequantize(*Q.batched_quantize(x), dtype=torch.float32)
    mse = ((out - x.float()) ** 2).mean().item()
    assert abs(mse - 0.0127) < 0.0004


# ---------------------------------------------------------------------------------------------
# validation: every ValueError names the offending shape and dtype
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("x, words", [
    (torch.zeros(4, 16), ["[B, M, N]", "(4, 16)", "torch.float32"]),
    (torch.zeros(1, 4, 16, dtype=torch.float64), ["dtype", "(1, 4, 16)", "torch.float64"]),
    (torch.zeros(1, 4, 16, dtype=torch.int32), ["dtype", "torch.int32"]),
    (torch.zeros(1, 3, 5), ["M*N", "(1, 3, 5)"]),
    (torch.zeros(1, 16, 1), ["N even", "(1, 16, 1)"]),
])
def test_quantize_rejects_bad_input_with_a_message_naming_shape_and_dtype(x, words):
    with pytest.raises(ValueError) as err:
        Q.batched_quantize(x)
    for word in words:
        assert word in str(err.value)


def test_quantize_rejects_non_tensors():
    with pytest.raises(ValueError, match="torch.Tensor"):
        Q.batched_quantize([[1.0] * 16])


def test_dequantize_rejects_mismatched_shapes_dtypes_and_output_dtype():
    packed, scales = Q.batched_quantize(torch.ones(2, 4, 16))
    cases = [
        ((packed.to(torch.int8), scales, torch.bfloat16), ["packed", "torch.int8", "(2, 4, 8)"]),
        ((packed, scales.to(torch.int32), torch.bfloat16), ["scales", "torch.int32", "(2, 4)"]),
        ((packed[0], scales, torch.bfloat16), ["packed", "(4, 8)"]),
        ((packed, scales[:, :3], torch.bfloat16), ["(2, 4, 8)", "(2, 3)", "(2, 4)"]),
        ((packed, scales, torch.int8), ["output dtype", "torch.int8"]),
        ((packed, scales, torch.float64), ["output dtype", "torch.float64"]),
    ]
    for args, words in cases:
        with pytest.raises(ValueError) as err:
            Q.batched_dequantize(*args)
        for word in words:
            assert word in str(err.value), (args[2], str(err.value))


def test_unknown_backend_and_triton_on_cpu_without_interpreter_are_value_errors(monkeypatch):
    x = torch.ones(1, 1, 16)
    with pytest.raises(ValueError, match="'cuda-fast'"):
        Q.batched_quantize(x, backend="cuda-fast")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="TRITON_INTERPRET"):
        Q.batched_quantize(x, backend="triton")
