"""Recipe ``nvfp4``: FP4 E2M1 codes, one FP8 E4M3 scale per 16 elements, one fp32 global scale.

NVIDIA's NVFP4 as the flashinfer KV-cache kernels store it (shared README, "The FP4 formats"):

* input rows ``x: [M, K]`` (a KV tensor ``[B, H, D]`` is treated as ``[B*H, D]``; outputs keep the
  leading dims), bf16/fp16/fp32, ``K % 16 == 0``; blocks of 16 along K;
* ``global_scale`` g is the DEQUANTIZATION multiplier (KV-cache convention, about
  ``amax_tensor / (448 * 6)``), one positive finite fp32 number per tensor;
* block scale ``s = e4m3(amax_block / (6 * g))``, round to nearest even, saturating at 448;
  stored as the raw E4M3 bits (``uint8 [M, K/16]``, linear layout);
* codes: round-to-nearest-even of ``x / (s * g)`` on the E2M1 grid, saturating at 6; a block
  whose ``s`` is 0 (all zeros, or so small against g that s underflows) has all codes 0;
* dequantize: ``E2M1[code] * (s * g)``.

Exact arithmetic (what both backends compute, so their bytes agree bit for bit), all in fp32
with IEEE round-to-nearest-even: ``g6 = g * 6``; ``t = amax / g6`` (correctly rounded
division); ``s = e4m3_rne(min(t, 448))`` by integer bit operations (normal and subnormal E4M3);
``sg = float(s) * g``; ``y = x / sg`` (correctly rounded division; Triton uses
``tl.math.div_rn``, never the approximate ``/``); codes from the bits of ``y`` (sign | RNE
magnitude; the sign of zero is kept, code 8, except in blocks whose ``s`` is 0: ``-0.0``
encodes as code 8 here, unlike mx_block16, which follows SGLang's ``x < 0`` and gives it code 0;
both decode to a zero). Dequantize:
``(E2M1[code] * sg)`` in fp32, then one cast to the output dtype (RNE). flashinfer's CUDA kernel
uses approximate reciprocals, so its bytes can differ from these in rare rounding corner cases.

Non-finite input: a block holding NaN or +-Inf stores the E4M3 NaN pattern 0x7F as its scale
and codes 0; it dequantizes to NaN for the whole block. `compute_global_scale` raises
ValueError on non-finite input instead (no meaningful scale exists).
"""

from __future__ import annotations  # also keeps `tl.constexpr` annotations as strings (Triton accepts them)

import math
from typing import TYPE_CHECKING, NamedTuple

import torch

from fp4kv.quant import _checks
from fp4kv.quant._jit import lazy_jit
from fp4kv.quant.e2m1 import (
    bf16_code_table,
    byte_pair_values_f32,
    tl_code_values_f32,
    tl_magnitude_codes_rne,
    tl_load_pair_bits,
    tl_store_f32_as,
)

if TYPE_CHECKING:  # kernels see `tl` through the scope that `lazy_jit` builds
    import triton.language as tl

BLOCK_SIZE = 16
E4M3_MAX = 448.0
E2M1_MAX = 6.0
E4M3_NAN = 0x7F
GLOBAL_SCALE_DIVISOR = E4M3_MAX * E2M1_MAX  # 2688: amax / 2688 is the dequantization global scale
_CHUNK_BLOCKS = 32768  # torch path: 512 Ki elements per step bounds the temporaries (measured best of 8-32 Ki)
_F32_MAX = torch.finfo(torch.float32).max
MIN_GLOBAL_SCALE = 2.0 ** -126  # smallest normal fp32: the floor of `compute_global_scale`


class NVFP4Tensor(NamedTuple):
    """Quantized tensor. ``packed``: uint8 ``[..., K/2]``; ``block_scales``: uint8 ``[..., K/16]``
    (raw E4M3 bits); ``global_scale``: fp32 0-dim tensor, the dequantization multiplier g."""

    packed: torch.Tensor
    block_scales: torch.Tensor
    global_scale: torch.Tensor


# ------------------------------------------------------------------------------------------------
# E4M3 by integer bit operations
# ------------------------------------------------------------------------------------------------

def e4m3_bits_from_f32(t: torch.Tensor) -> torch.Tensor:
    """fp32 ``0 <= t <= 448`` -> int32 E4M3 bits (sign 0), round to nearest even.

    Normal range (t >= 2^-6): keep 3 mantissa bits with RNE on the fp32 bits and rebias the
    exponent (127 -> 7). Below: the subnormal ``m * 2^-9`` with ``m`` = RNE of the significand
    shifted right; rounding up to ``m = 8`` lands exactly on the smallest normal's bits.
    """
    ti = t.view(torch.int32)
    normal = ((ti + 0x7FFFF + ((ti >> 20) & 1)) >> 20) - ((127 - 7) << 3)
    shift = (141 - (ti >> 23)).clamp_(1, 30)
    full = (ti & 0x7FFFFF) | 0x800000
    sub = (full + (1 << (shift - 1)) - 1 + ((full >> shift) & 1)) >> shift
    return torch.where(ti >= 0x3C800000, normal, sub)


def e4m3_bits_to_f32(bits: torch.Tensor) -> torch.Tensor:
    """E4M3 bits (any integer dtype, 0..255) -> fp32 values; 0x7F and 0xFF are NaN."""
    b = bits.to(torch.int32)
    exp = (b >> 3) & 0xF
    man = b & 7
    normal = (((exp + 120) << 23) | (man << 20)).view(torch.float32)
    value = torch.where(exp > 0, normal, man.to(torch.float32) * 2.0 ** -9)
    value = torch.where((b & 0x80) != 0, -value, value)
    return value.masked_fill_((b & 0x7F) == E4M3_NAN, math.nan)


# ------------------------------------------------------------------------------------------------
# torch reference
# ------------------------------------------------------------------------------------------------

def _quantize_blocks_torch(blocks: torch.Tensor, g: torch.Tensor, packed: torch.Tensor,
                           scales: torch.Tensor) -> None:
    """blocks ``[n, 16]`` float, g fp32 0-dim -> writes packed ``[n, 8]`` and block scales ``[n]``.

    ``y = x / (s * g)`` in fp32 (signed, so -0.0 and negatives that round to zero get code 8),
    then its code is looked up from its top 16 bits plus a sticky bit in a table built from
    `magnitude_codes_rne` (see `bf16_code_table`).
    """
    x = blocks.to(torch.float32)
    amax = (x.view(torch.int32) & 0x7FFFFFFF).amax(dim=1)
    nonfinite = amax >= 0x7F800000
    t = (amax.masked_fill(nonfinite, 0).view(torch.float32) / (g * E2M1_MAX)).clamp_(max=E4M3_MAX)
    s_bits = e4m3_bits_from_f32(t)
    empty = s_bits == 0
    sg = (e4m3_bits_to_f32(s_bits) * g).masked_fill_(empty, 1.0)  # codes of empty blocks are zeroed
    y_bits = (x / sg[:, None]).view(torch.int32)
    index = (y_bits >> 16) & 0xFFFF
    index |= (y_bits & 0xFFFF) != 0
    codes = bf16_code_table(blocks.device, "even").index_select(0, index.view(-1)).view(-1, BLOCK_SIZE)
    dead = empty | nonfinite
    if bool(dead.any()):
        codes.masked_fill_(dead[:, None], 0)
    pairs = codes.view(torch.int16)  # little-endian: the even element is the low byte
    packed.copy_((pairs | (pairs >> 4)) & 0xFF)
    scales.copy_(s_bits.masked_fill_(nonfinite, E4M3_NAN))


def _dequantize_blocks_torch(packed: torch.Tensor, scales: torch.Tensor, g: torch.Tensor,
                             out: torch.Tensor) -> None:
    table = byte_pair_values_f32(packed.device)
    values = table.index_select(0, packed.reshape(-1).to(torch.int32)).view(torch.float32)
    sg = e4m3_bits_to_f32(scales) * g
    out.copy_(values.view(-1, BLOCK_SIZE).mul_(sg[:, None]))


def quantize_torch(x: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference quantizer: ``x [..., K]``, g fp32 0-dim -> (packed ``[..., K/2]``, scales ``[..., K/16]``)."""
    blocks = x.reshape(-1, BLOCK_SIZE)
    packed = torch.empty((blocks.shape[0], BLOCK_SIZE // 2), dtype=torch.uint8, device=x.device)
    scales = torch.empty((blocks.shape[0],), dtype=torch.uint8, device=x.device)
    for start in range(0, blocks.shape[0], _CHUNK_BLOCKS):
        stop = start + _CHUNK_BLOCKS
        _quantize_blocks_torch(blocks[start:stop], g, packed[start:stop], scales[start:stop])
    lead = x.shape[:-1]
    k = x.shape[-1]
    return packed.view(*lead, k // 2), scales.view(*lead, k // BLOCK_SIZE)


def dequantize_torch(packed: torch.Tensor, scales: torch.Tensor, g: torch.Tensor,
                     dtype: torch.dtype) -> torch.Tensor:
    """Reference dequantizer: packed ``[..., K/2]``, scales ``[..., K/16]`` -> ``[..., K]`` of ``dtype``."""
    p = packed.reshape(-1, BLOCK_SIZE // 2)
    s = scales.reshape(-1)
    out = torch.empty((p.shape[0], BLOCK_SIZE), dtype=dtype, device=packed.device)
    for start in range(0, p.shape[0], _CHUNK_BLOCKS):
        stop = start + _CHUNK_BLOCKS
        _dequantize_blocks_torch(p[start:stop], s[start:stop], g, out[start:stop])
    return out.view(*packed.shape[:-1], 2 * packed.shape[-1])


# ------------------------------------------------------------------------------------------------
# Triton kernels
# ------------------------------------------------------------------------------------------------

@lazy_jit
def tl_e4m3_bits_from_f32(t):
    """fp32 ``0 <= t <= 448`` -> int32 E4M3 bits, RNE (same integer formula as the torch version)."""
    ti = t.to(tl.int32, bitcast=True)
    normal = ((ti + 0x7FFFF + ((ti >> 20) & 1)) >> 20) - 960
    shift = tl.minimum(tl.maximum(141 - (ti >> 23), 1), 30)
    full = (ti & 0x7FFFFF) | 0x800000
    sub = (full + (1 << (shift - 1)) - 1 + ((full >> shift) & 1)) >> shift
    return tl.where(ti >= 0x3C800000, normal, sub)


@lazy_jit
def tl_e4m3_bits_to_f32(b):
    """int32 E4M3 bits 0..255 -> fp32 (0x7F/0xFF -> NaN)."""
    exp = (b >> 3) & 0xF
    man = b & 7
    normal = (((exp + 120) << 23) | (man << 20)).to(tl.float32, bitcast=True)
    value = tl.where(exp > 0, normal, man.to(tl.float32) * 0.001953125)
    value = tl.where((b & 0x80) != 0, -value, value)
    return tl.where((b & 0x7F) == 0x7F, float("nan"), value)


@lazy_jit
def _nvfp4_quantize_kernel(x_ptr, g_ptr, packed_ptr, scales_ptr, n_blocks,
                           IN_BF16: tl.constexpr, TILE: tl.constexpr):
    """One program quantizes TILE blocks of 16.

    x_ptr: flat ``n_blocks * 16`` elements (int16 bits when IN_BF16, else fp16/fp32); g_ptr: one
    fp32 (the dequantization global scale); packed_ptr: uint8 ``[n_blocks, 8]``; scales_ptr:
    uint8 ``[n_blocks]`` E4M3 bits.
    """
    rows = tl.program_id(0).to(tl.int64) * TILE + tl.arange(0, TILE)
    row_ok = rows < n_blocks
    pairs = tl.arange(0, 8)
    even_at = rows[:, None] * 16 + pairs[None, :] * 2
    mask = row_ok[:, None]
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
    """One program dequantizes TILE blocks of 16: ``E2M1[code] * (e4m3(scale) * g)`` in fp32.

    packed_ptr: uint8 ``[n_blocks, 8]``; scales_ptr: uint8 ``[n_blocks]``; g_ptr: one fp32;
    out_ptr: flat ``n_blocks * 16``, int16 bits for OUT_KIND 0 (bf16, RNE on the bits) and 1
    (fp16), fp32 for OUT_KIND 2.
    """
    rows = tl.program_id(0).to(tl.int64) * TILE + tl.arange(0, TILE)
    row_ok = rows < n_blocks
    pairs = tl.arange(0, 8)
    mask = row_ok[:, None]
    p = tl.load(packed_ptr + rows[:, None] * 8 + pairs[None, :], mask=mask, other=0).to(tl.int32)
    s_bits = tl.load(scales_ptr + rows, mask=row_ok, other=0).to(tl.int32)
    g = tl.load(g_ptr)
    sg = (tl_e4m3_bits_to_f32(s_bits) * g)[:, None]
    ev = tl_code_values_f32(p & 15) * sg
    od = tl_code_values_f32(p >> 4) * sg
    even_at = rows[:, None] * 16 + pairs[None, :] * 2
    tl_store_f32_as(out_ptr + even_at, ev, mask, OUT_KIND)
    tl_store_f32_as(out_ptr + even_at + 1, od, mask, OUT_KIND)


_TILE = 64


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def quantize_triton(x: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton quantizer, same contract and bytes as `quantize_torch`."""
    flat = x.contiguous().view(-1)
    n_blocks = flat.numel() // BLOCK_SIZE
    lead, k = x.shape[:-1], x.shape[-1]
    packed = torch.empty((*lead, k // 2), dtype=torch.uint8, device=x.device)
    scales = torch.empty((*lead, k // BLOCK_SIZE), dtype=torch.uint8, device=x.device)
    if n_blocks:
        is_bf16 = x.dtype == torch.bfloat16
        src = flat.view(torch.int16) if is_bf16 else flat
        _nvfp4_quantize_kernel[(_cdiv(n_blocks, _TILE),)](src, g.reshape(1), packed, scales, n_blocks,
                                                           IN_BF16=is_bf16, TILE=_TILE)
    return packed, scales


def dequantize_triton(packed: torch.Tensor, scales: torch.Tensor, g: torch.Tensor,
                      dtype: torch.dtype) -> torch.Tensor:
    """Triton dequantizer, same contract and bits as `dequantize_torch` (NaN bit patterns aside)."""
    out = torch.empty((*packed.shape[:-1], 2 * packed.shape[-1]), dtype=dtype, device=packed.device)
    n_blocks = out.numel() // BLOCK_SIZE
    if n_blocks:
        kind = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}[dtype]
        dst = out.view(torch.int16) if kind < 2 else out
        _nvfp4_dequantize_kernel[(_cdiv(n_blocks, _TILE),)](packed.contiguous(), scales.contiguous(),
                                                             g.reshape(1), dst, n_blocks,
                                                             OUT_KIND=kind, TILE=_TILE)
    return out


# ------------------------------------------------------------------------------------------------
# public API
# ------------------------------------------------------------------------------------------------

def is_valid_global_scale(value: float) -> bool:
    """Whether the fp32 number ``value`` is a usable global scale: positive and with
    ``2688 * value`` (the largest magnitude the format then represents) finite in fp32. False for
    NaN and Inf. ``value`` must already be rounded to fp32 (as a Python float)."""
    return value > 0.0 and value * GLOBAL_SCALE_DIVISOR <= _F32_MAX


def _global_scale_tensor(global_scale: object, device: torch.device) -> torch.Tensor:
    """float or one-element floating tensor -> fp32 0-dim tensor on ``device`` (validated where possible)."""
    if isinstance(global_scale, torch.Tensor):
        if global_scale.numel() != 1 or not global_scale.is_floating_point():
            raise ValueError(f"global_scale must be a one-element floating tensor, got {_checks.describe(global_scale)}")
        g = global_scale.reshape(()).to(device=device, dtype=torch.float32)
        if global_scale.device.type != "cpu":
            return g  # checking its value would synchronise with the device; see the class docstring
        value = float(g)
    elif isinstance(global_scale, (int, float)) and not isinstance(global_scale, bool):
        g = torch.tensor(float(global_scale), dtype=torch.float32, device=device)
        value = float(torch.tensor(float(global_scale), dtype=torch.float32))
    else:
        raise ValueError(f"global_scale must be a float, a one-element tensor or None, got {type(global_scale).__name__}")
    if not is_valid_global_scale(value):
        raise ValueError(f"global_scale must be a positive finite fp32 number with 2688 * global_scale finite, "
                         f"got {global_scale!r} (as fp32: {value!r})")
    return g


def _check_rows(name: str, x: object) -> torch.Tensor:
    x = _checks.require_float_input(name, x, (2, 3), "[M, K] or [B, H, D]")
    if x.shape[-1] % BLOCK_SIZE:
        raise ValueError(f"nvfp4 needs the last dim divisible by {BLOCK_SIZE}, got {name} {_checks.describe(x)}")
    return x


class NVFP4KVQuantizeUtil:
    """Recipe ``nvfp4`` for KV-cache tensors (see the module docstring for the exact arithmetic).

    ``global_scale`` is always the DEQUANTIZATION multiplier g (``x ~= E2M1 * s * g``), i.e. about
    ``amax / 2688``, not NVIDIA's GEMM-side ``2688 / amax``. Python floats and CPU tensors are
    checked (positive, finite); a CUDA tensor is used as is, to avoid a device synchronisation.
    ``backend``: ``"auto"`` (Triton on CUDA tensors, torch elsewhere), ``"torch"`` or ``"triton"``.
    """

    @staticmethod
    def compute_global_scale(x: torch.Tensor) -> float:
        """Dequantization global scale ``fp32(amax(|x|)) / 2688`` (fp32 division), as a Python float.

        The result is clamped below at ``MIN_GLOBAL_SCALE`` = 2^-126, the smallest normal fp32:
        for a tiny amax (below about 3.2e-35) the division would give a subnormal or 0.0, which is
        no usable scale (0.0 is rejected; subnormals may be flushed to zero on GPUs). With the
        clamp such data still quantizes: magnitudes down to about 2^-136 (E4M3 subnormal block
        scales times g) keep nonzero codes, smaller ones encode as zeros. An all-zero tensor
        gives 1.0 (every block then has scale 0 and codes 0, whatever g is).
        Raises ValueError if ``x`` holds NaN or Inf, or is not a float tensor.
        """
        x = _checks.require_tensor("x", x)
        if x.dtype not in _checks.FLOAT_DTYPES:
            raise ValueError(f"x must have dtype bfloat16, float16 or float32, got {_checks.describe(x)}")
        if x.numel() == 0:
            return 1.0
        amax = x.abs().amax().to(torch.float32)
        if not bool(torch.isfinite(amax)):
            raise ValueError(f"compute_global_scale: x holds NaN or Inf, no global scale exists ({_checks.describe(x)})")
        if float(amax) == 0.0:
            return 1.0
        return max(float((amax / GLOBAL_SCALE_DIVISOR).cpu()), MIN_GLOBAL_SCALE)

    @staticmethod
    def quantize(x: torch.Tensor, global_scale: float | torch.Tensor | None = None, *,
                 backend: str = "auto") -> NVFP4Tensor:
        """``x [M, K]`` or ``[B, H, D]`` bf16/fp16/fp32 -> `NVFP4Tensor` (also a 3-tuple).

        ``packed: uint8 [..., K/2]``, ``block_scales: uint8 [..., K/16]`` (E4M3 bits),
        ``global_scale``: fp32 0-dim tensor. ``global_scale=None`` computes
        `compute_global_scale(x)`. Values beyond ``448 * 6 * g`` saturate (that is the format).
        """
        x = _check_rows("x", x)
        if global_scale is None:
            global_scale = NVFP4KVQuantizeUtil.compute_global_scale(x)
        g = _global_scale_tensor(global_scale, x.device)
        if _checks.resolve_backend(backend, x.device) == "triton":
            packed, scales = quantize_triton(x, g)
        else:
            packed, scales = quantize_torch(x, g)
        return NVFP4Tensor(packed, scales, g)

    @staticmethod
    def dequantize(packed: torch.Tensor, block_scales: torch.Tensor, global_scale: float | torch.Tensor,
                   dtype: torch.dtype = torch.bfloat16, *, backend: str = "auto") -> torch.Tensor:
        """``packed uint8 [..., K/2]``, ``block_scales uint8 [..., K/16]``, g -> ``[..., K]`` of ``dtype``.

        Leading dims of packed and block_scales must match (rank 2 or 3). Scale byte 0x7F/0xFF
        (E4M3 NaN) gives NaN for its whole block.
        """
        packed = _checks.require_uint8("packed", packed, (2, 3), "[M, K/2] or [B, H, D/2]")
        block_scales = _checks.require_uint8("block_scales", block_scales, (2, 3), "[M, K/16] or [B, H, D/16]")
        _checks.require_out_dtype(dtype)
        k = 2 * packed.shape[-1]
        if k % BLOCK_SIZE or block_scales.shape != (*packed.shape[:-1], k // BLOCK_SIZE):
            raise ValueError(f"packed {_checks.describe(packed)} needs block_scales of shape "
                             f"{(*packed.shape[:-1], k // BLOCK_SIZE)} (one per 16 elements, K % 16 == 0), "
                             f"got block_scales {_checks.describe(block_scales)}")
        _checks.require_same_device(packed=packed, block_scales=block_scales)
        g = _global_scale_tensor(global_scale, packed.device)
        if _checks.resolve_backend(backend, packed.device) == "triton":
            return dequantize_triton(packed, block_scales, g, dtype)
        return dequantize_torch(packed, block_scales, g, dtype)
