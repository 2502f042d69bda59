"""Triton kernels of recipe ``nvfp4`` (one pass per direction), the same arithmetic as the torch
reference in `fp4kv.quant.nvfp4` and the same bytes and bits (see that module's docstring).

Launchers take contiguous-or-not tensors of any leading shape and a fp32 0-dim global scale on
the same device; CPU tensors run only under ``TRITON_INTERPRET=1`` (tests).
"""

from __future__ import annotations  # also keeps `tl.constexpr` annotations as strings (Triton accepts them)

from typing import TYPE_CHECKING

import torch

from fp4kv.quant._jit import lazy_jit
from fp4kv.quant.e2m1 import (
    tl_block_tile,
    tl_code_values_f32,
    tl_load_pair_bits,
    tl_magnitude_codes_rne,
    tl_store_f32_as,
)
from fp4kv.quant.e4m3 import tl_e4m3_bits_from_f32, tl_e4m3_bits_to_f32
from fp4kv.quant.rounding import tl_round_exact_f64_to_f32

if TYPE_CHECKING:  # kernels see `tl` through the scope that `lazy_jit` builds
    import triton.language as tl

BLOCK_SIZE = 16
TILE = 64
OUT_KINDS = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}
"""The kernels' OUT_KIND for each output dtype (see `tl_store_f32_as`)."""


@lazy_jit
def _nvfp4_quantize_kernel(x_ptr, g_ptr, packed_ptr, scales_ptr, n_blocks,
                           IN_BF16: tl.constexpr, TILE: tl.constexpr):
    """One program quantizes TILE blocks of 16.

    x_ptr: flat ``n_blocks * 16`` elements (int16 bits when IN_BF16, else fp16/fp32); g_ptr: one
    fp32 (the dequantization global scale); packed_ptr: uint8 ``[n_blocks, 8]``; scales_ptr:
    uint8 ``[n_blocks]`` E4M3 bits.
    """
    rows, row_ok, pairs, mask = tl_block_tile(n_blocks, TILE)
    even_at = rows[:, None] * 16 + pairs[None, :] * 2
    ev_bits, od_bits = tl_load_pair_bits(x_ptr, even_at, mask, IN_BF16)
    g = tl.load(g_ptr)
    ev_abs = ev_bits & 0x7FFFFFFF
    od_abs = od_bits & 0x7FFFFFFF
    amax = tl.maximum(tl.max(ev_abs, axis=1), tl.max(od_abs, axis=1))
    nonfinite = amax >= 0x7F800000
    amax_f = tl.where(nonfinite, 0, amax).to(tl.float32, bitcast=True)
    t = tl.minimum(tl.math.div_rn(amax_f, g * 6.0), 448.0)
    s_bits = tl_e4m3_bits_from_f32(t)
    empty = s_bits == 0
    sg = tl.where(empty, 1.0, tl_e4m3_bits_to_f32(s_bits) * g)[:, None]
    ev_y = tl.math.div_rn(ev_abs.to(tl.float32, bitcast=True), sg).to(tl.int32, bitcast=True)
    od_y = tl.math.div_rn(od_abs.to(tl.float32, bitcast=True), sg).to(tl.int32, bitcast=True)
    ev_code = tl_magnitude_codes_rne(ev_y) | ((ev_bits >> 28) & 8)
    od_code = tl_magnitude_codes_rne(od_y) | ((od_bits >> 28) & 8)
    packed = tl.where((empty | nonfinite)[:, None], 0, ev_code | (od_code << 4))
    tl.store(packed_ptr + rows[:, None] * 8 + pairs[None, :], packed.to(tl.uint8), mask=mask)
    tl.store(scales_ptr + rows, tl.where(nonfinite, 0x7F, s_bits).to(tl.uint8), mask=row_ok)


@lazy_jit
def _nvfp4_dequantize_kernel(packed_ptr, scales_ptr, g_ptr, out_ptr, n_blocks,
                             OUT_KIND: tl.constexpr, TILE: tl.constexpr):
    """One program dequantizes TILE blocks of 16: ``E2M1[code] * s * g`` rounded once.

    ``E2M1[code] * s`` is exact in fp32; its product with g is exact in fp64 and rounded once
    (`tl_round_exact_f64_to_f32`: to fp32 by RNE, or round-to-odd before a 16-bit RNE store).
    packed_ptr: uint8 ``[n_blocks, 8]``; scales_ptr: uint8 ``[n_blocks]``; g_ptr: one fp32;
    out_ptr: flat ``n_blocks * 16``, int16 bits for OUT_KIND 0 (bf16) and 1 (fp16), fp32 for 2.
    """
    rows, row_ok, pairs, mask = tl_block_tile(n_blocks, TILE)
    p = tl.load(packed_ptr + rows[:, None] * 8 + pairs[None, :], mask=mask, other=0).to(tl.int32)
    s_bits = tl.load(scales_ptr + rows, mask=row_ok, other=0).to(tl.int32)
    s = tl_e4m3_bits_to_f32(s_bits)[:, None]
    g = tl.load(g_ptr).to(tl.float64)
    ev = tl_round_exact_f64_to_f32((tl_code_values_f32(p & 15) * s).to(tl.float64) * g, OUT_KIND)
    od = tl_round_exact_f64_to_f32((tl_code_values_f32(p >> 4) * s).to(tl.float64) * g, OUT_KIND)
    even_at = rows[:, None] * 16 + pairs[None, :] * 2
    tl_store_f32_as(out_ptr + even_at, ev, mask, OUT_KIND)
    tl_store_f32_as(out_ptr + even_at + 1, od, mask, OUT_KIND)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def quantize_triton(x: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x [..., K]`` (K % 16 == 0), g fp32 0-dim -> (packed uint8 ``[..., K/2]``, scales uint8 ``[..., K/16]``)."""
    flat = x.contiguous().view(-1)
    n_blocks = flat.numel() // BLOCK_SIZE
    lead, k = x.shape[:-1], x.shape[-1]
    packed = torch.empty((*lead, k // 2), dtype=torch.uint8, device=x.device)
    scales = torch.empty((*lead, k // BLOCK_SIZE), dtype=torch.uint8, device=x.device)
    if n_blocks:
        is_bf16 = x.dtype == torch.bfloat16
        src = flat.view(torch.int16) if is_bf16 else flat
        _nvfp4_quantize_kernel[(_cdiv(n_blocks, TILE),)](src, g.reshape(1), packed, scales, n_blocks,
                                                          IN_BF16=is_bf16, TILE=TILE)
    return packed, scales


def dequantize_triton(packed: torch.Tensor, scales: torch.Tensor, g: torch.Tensor,
                      dtype: torch.dtype) -> torch.Tensor:
    """packed ``[..., K/2]``, scales ``[..., K/16]``, g fp32 0-dim -> ``[..., K]`` of ``dtype``."""
    out = torch.empty((*packed.shape[:-1], 2 * packed.shape[-1]), dtype=dtype, device=packed.device)
    n_blocks = out.numel() // BLOCK_SIZE
    if n_blocks:
        kind = OUT_KINDS[dtype]
        dst = out.view(torch.int16) if kind < 2 else out
        _nvfp4_dequantize_kernel[(_cdiv(n_blocks, TILE),)](packed.contiguous(), scales.contiguous(),
                                                            g.reshape(1), dst, n_blocks,
                                                            OUT_KIND=kind, TILE=TILE)
    return out
