"""docs/fp4kv.md "Formats", claim by claim, against packages that are not this project: ml_dtypes'
float4_e2m1fn / float8_e4m3fn casts (numpy fp32 arithmetic around them: division correctly
rounded) for the OCP MXFP4 and E4M3 references, and torchao's CPU reference `nvfp4_quantize`.
Each test checks "the same" where the docs say so and "different" exactly where they say so."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from fp4kv import BlockFP4KVQuantizeUtil, NVFP4KVQuantizeUtil
from fp4kv.quant.e2m1 import unpack_nibbles

ml_dtypes = pytest.importorskip("ml_dtypes")
F4, E4M3 = ml_dtypes.float4_e2m1fn, ml_dtypes.float8_e4m3fn


def f4_codes(y: np.ndarray) -> np.ndarray:
    """ml_dtypes' E2M1 codes of fp32 ``y`` (round to nearest even, |y| <= 6)."""
    return y.astype(np.float32).astype(F4).view(np.uint8)


def f4_values(codes: np.ndarray) -> np.ndarray:
    return codes.astype(np.uint8).view(F4).astype(np.float32)


def mx_block16(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ours on fp32 ``[M, N]``: (codes ``[blocks, 16]`` uint8, scale exponents ``[blocks]``)."""
    packed, scales = BlockFP4KVQuantizeUtil.batched_quantize(torch.from_numpy(x)[None])
    return (unpack_nibbles(packed).numpy().astype(np.uint8).reshape(-1, 16),
            scales.numpy().astype(np.int32).reshape(-1) - 127)


def floor_exponents(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """OCP MX's shared exponent ``floor(log2(amax)) - 2`` (E2M1's emax), exactly from frexp; and
    whether amax's significand is above 1.5 (where the ceiling is one higher)."""
    significand, exponent = np.frexp(np.abs(blocks).max(axis=1))  # amax = significand * 2^exponent, [0.5, 1)
    return exponent - 3, 2 * significand > 1.5


def test_e2m1_code_values_are_ml_dtypes_float4_e2m1fn():
    codes = np.arange(16, dtype=np.uint8).reshape(1, 16)
    ours = BlockFP4KVQuantizeUtil.batched_dequantize(
        torch.from_numpy(codes[:, 0::2] | codes[:, 1::2] << 4)[None], torch.tensor([[127]], dtype=torch.uint8),
        dtype=torch.float32).numpy().reshape(-1)
    assert ours.tobytes() == f4_values(codes.reshape(-1)).tobytes()  # -0.0 at code 8 included


def test_mx_block16_scale_is_the_ceiling_and_differs_from_ocp_floor_where_the_significand_exceeds_1_5():
    x = np.random.default_rng(0).standard_normal((4096, 128)).astype(np.float32)
    codes, ours = mx_block16(x)
    blocks = x.reshape(-1, 16)
    floor, above = floor_exponents(blocks)
    assert (ours == floor + above).all()  # ceil(log2(amax / 6)): one above OCP's exactly there
    share = float(above.mean())
    assert 0.40 < share < 0.43, share  # the docs' "41 %" (41.6 % here, 32768 blocks of randn)
    # Codes: ml_dtypes' cast at our scale (no tie in random fp32 data; nothing above 6 to saturate).
    assert (codes == f4_codes(blocks / np.exp2(ours)[:, None])).all()
    # OCP MXFP4 (floor scale, saturate at 6, ties to even) dequantizes differently in those blocks.
    ocp = f4_codes(np.clip(blocks / np.exp2(floor)[:, None], -6, 6))
    differs = (f4_values(ocp) * np.exp2(floor)[:, None] != f4_values(codes) * np.exp2(ours)[:, None]).any(axis=1)
    assert not differs[~above].any() and differs[above].mean() > 0.95


def test_mx_block16_ties_go_away_from_zero_where_ml_dtypes_goes_to_even():
    mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=np.float32)  # every E2M1 midpoint
    block = np.concatenate([mids, -mids, [6.0, 0.0]]).astype(np.float32).reshape(1, 16)  # amax 6: scale 2^0
    codes, exponent = mx_block16(block * np.float32(2.0 ** -5))
    assert exponent.tolist() == [-5]
    away = np.sign(block) * np.array([0.5, 1, 1.5, 2, 3, 4, 6, 0.5, 1, 1.5, 2, 3, 4, 6, 6, 0])
    assert (f4_values(codes) == away).all()
    even = f4_values(f4_codes(block))
    assert ((even != away)[0, :14] == [1, 0, 1, 0, 1, 0, 1] * 2).all()  # to even: 0.25->0, 1.25->1, 2.5->2, 5->4


def test_mx_block16_exponent_stops_at_minus_33_where_ocp_goes_on():
    block = np.full((1, 16), 1e-12, dtype=np.float32)
    codes, ours = mx_block16(block)
    floor, _ = floor_exponents(block)
    assert ours.tolist() == [-33] and floor.tolist() == [-42]
    assert (f4_values(codes) == 0).all()  # 1e-12 / 2^-33 is below E2M1's 0.25 midpoint


# -- nvfp4 against torchao's CPU reference --------------------------------------------------------

def torchao_nvfp4(x: np.ndarray, g: float) -> tuple[np.ndarray, np.ndarray]:
    nvfp4_tensor = pytest.importorskip("torchao.prototype.mx_formats.nvfp4_tensor")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scales, packed = nvfp4_tensor.nvfp4_quantize(torch.from_numpy(x), 16, torch.tensor(g, dtype=torch.float32))
    return (unpack_nibbles(packed).numpy().astype(np.uint8).reshape(-1, 16),
            scales.view(torch.uint8).numpy().reshape(-1))


def ours_nvfp4(x: np.ndarray, g: float) -> tuple[np.ndarray, np.ndarray]:
    q = NVFP4KVQuantizeUtil.quantize(torch.from_numpy(x), torch.tensor(g, dtype=torch.float32))
    return unpack_nibbles(q.packed).numpy().astype(np.uint8).reshape(-1, 16), q.block_scales.numpy().reshape(-1)


def test_nvfp4_block_scales_go_subnormal_where_torchao_clamps_at_2_to_the_minus_6():
    g = np.float32(1.0 / 256)
    x = np.random.default_rng(1).standard_normal((512, 64)).astype(np.float32)
    x *= np.exp2(np.random.default_rng(2).integers(-16, 2, (512, 1))).astype(np.float32)  # many tiny rows
    ours_codes, ours = ours_nvfp4(x, float(g))
    ref_codes, ref = torchao_nvfp4(x, float(g))
    t = np.abs(x.reshape(-1, 16)).max(axis=1) / (g * np.float32(6))
    expected = np.minimum(t, 448).astype(E4M3).view(np.uint8)  # ml_dtypes: RNE, subnormals included
    assert (ours == expected).all()
    subnormal = t < 2.0 ** -6
    assert 0.2 < subnormal.mean() < 0.8 and (expected[subnormal] <= 8).all()  # just below 2^-6 rounds up to it
    assert (expected[subnormal] < 8).mean() > 0.9
    assert (ref[subnormal] == 8).all() and (ref[~subnormal] == ours[~subnormal]).all()
    assert (ours_codes[~subnormal] == ref_codes[~subnormal]).all()


def test_nvfp4_divides_exactly_where_torchao_multiplies_by_a_reciprocal():
    """A value whose quotient ``x / (s*g)`` and product ``x * ((1/g) / s)`` lie on opposite sides of
    an E2M1 rounding boundary: ours codes the quotient, torchao the product (both by ml_dtypes)."""
    g = np.float32(0.3)
    sg = np.float32(1.0) * g  # s = 1: the block's amax is 6 * g
    reciprocal = (np.float32(1) / g) / np.float32(1)
    found = None
    for boundary in (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0):
        below = above = np.float32(boundary) * sg
        for _ in range(4):  # the nearest fp32 values on both sides of the boundary's x
            below = np.nextafter(below, np.float32(0), dtype=np.float32)
            above = np.nextafter(above, np.float32(10), dtype=np.float32)
            x = below if f4_codes(np.array([below / sg]))[0] != f4_codes(np.array([below * reciprocal]))[0] else above
            if f4_codes(np.array([x / sg]))[0] != f4_codes(np.array([x * reciprocal]))[0]:
                found = x
                break
        if found is not None:
            break
    assert found is not None
    block = np.array([[found, 6 * g] + [0.0] * 14], dtype=np.float32)
    ours_codes, ours = ours_nvfp4(block, float(g))
    ref_codes, ref = torchao_nvfp4(block, float(g))
    assert ours.tolist() == ref.tolist() == [0x38]  # s = 1.0 in both
    assert ours_codes[0, 0] == f4_codes(np.array([found / sg]))[0]
    assert ref_codes[0, 0] == f4_codes(np.array([found * reciprocal]))[0] != ours_codes[0, 0]
