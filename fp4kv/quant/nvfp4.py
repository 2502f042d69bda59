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
* dequantize: ``E2M1[code] * s * g``, rounded once to the output dtype.

Exact arithmetic (what both backends compute, so their bytes agree bit for bit), all in fp32
with IEEE round-to-nearest-even: ``g6 = g * 6``; ``t = amax / g6`` (correctly rounded
division); ``s = e4m3_rne(min(t, 448))`` by integer bit operations (normal and subnormal E4M3);
``sg = float(s) * g``; ``y = x / sg`` (correctly rounded division; Triton uses
``tl.math.div_rn``, never the approximate ``/``); codes from the bits of ``y`` (sign | RNE
magnitude; the sign of zero is kept, code 8, except in blocks whose ``s`` is 0: ``-0.0``
encodes as code 8 here, unlike mx_block16, which follows SGLang's ``x < 0`` and gives it code 0;
both decode to a zero). flashinfer's CUDA kernel uses approximate reciprocals, so its bytes can
differ from these in rare rounding corner cases.

Dequantize rounds once: ``E2M1[code] * s`` is exact in fp32, its product with g exact in fp64,
and that exact value is rounded to the output dtype once, to nearest even (see
`fp4kv.quant.rounding`). Rounding ``s * g`` to fp32 first, as this module once did, leaves many
elements 1 ulp off when g is not a power of two (13 % of ``randn(4096, 8, 128)`` with its
computed g; issue 15 saw 14-50 %).

Non-finite input: a block holding NaN or +-Inf stores the E4M3 NaN pattern 0x7F as its scale
and codes 0; it dequantizes to NaN for the whole block. `compute_global_scale` raises
ValueError on non-finite input instead (no meaningful scale exists).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from fp4kv.quant import _checks
from fp4kv.quant._chunks import chunk_ranges
from fp4kv.quant._workspace import Workspace, pack_code_pairs, quantize_blocks_in_chunks
from fp4kv.quant.e2m1 import bf16_code_table, code_values_f32
from fp4kv.quant.e4m3 import E4M3_MAX, E4M3_NAN, e4m3_bits_to_f32
from fp4kv.quant.nvfp4_triton import dequantize_triton, quantize_triton
from fp4kv.quant.rounding import round_exact_f64_to

BLOCK_SIZE = 16
E2M1_MAX = 6.0
GLOBAL_SCALE_DIVISOR = E4M3_MAX * E2M1_MAX  # 2688: amax / 2688 is the dequantization global scale
_F32_MAX = torch.finfo(torch.float32).max
MIN_GLOBAL_SCALE = 2.0 ** -126
_E4M3_SMALLEST_NORMAL_BITS = 0x3C800000  # fp32 bits of 2^-6  # smallest normal fp32: the floor of `compute_global_scale`


class NVFP4Tensor(NamedTuple):
    """Quantized tensor. ``packed``: uint8 ``[..., K/2]``; ``block_scales``: uint8 ``[..., K/16]``
    (raw E4M3 bits); ``global_scale``: fp32 0-dim tensor, the dequantization multiplier g."""

    packed: torch.Tensor
    block_scales: torch.Tensor
    global_scale: torch.Tensor


# ------------------------------------------------------------------------------------------------
# torch reference
# ------------------------------------------------------------------------------------------------

def block_scales_e4m3(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 ``0 <= t <= 448`` -> (int32 E4M3 bits, their fp32 values), round to nearest even.

    The same results as `fp4kv.quant.e4m3.e4m3_bits_from_f32` and `e4m3_bits_to_f32` (a test
    holds them to torch's own ``float8_e4m3fn`` cast), in plain vectorised ops only (those use
    per-element shift counts, which torch runs one element at a time): the normal range keeps 3 mantissa bits of the fp32 bits with RNE; below
    2^-6 the subnormal count ``m = t * 2^9`` (exact) is rounded by `torch.round`, which ties to
    even, and ``m = 8`` is the smallest normal's bits.
    """
    ti = t.view(torch.int32)
    rounded = (ti + 0x7FFFF + ((ti >> 20) & 1)) & -0x100000
    count = (t * 512.0).round_()
    normal = ti >= _E4M3_SMALLEST_NORMAL_BITS
    bits = torch.where(normal, (rounded >> 20) - ((127 - 7) << 3), count.to(torch.int32))
    return bits, torch.where(normal, rounded.view(torch.float32), count.mul_(2.0 ** -9))


def block_scales_and_divisors(amax_bits: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int32 fp32 bits of block amaxes (``>= 0``) -> (uint8 block scale bytes, fp32 divisors ``s * g``).

    The scale byte is ``e4m3(amax / (6 * g))`` saturated at 448, or ``E4M3_NAN`` for a non-finite
    amax. The divisor of a block whose codes must be zeroed (scale 0, or NaN) is 1.0, so that the
    division stays finite; the caller zeroes those codes.
    """
    nonfinite = amax_bits >= 0x7F800000
    t = (amax_bits.masked_fill(nonfinite, 0).view(torch.float32) / (g * E2M1_MAX)).clamp_(max=E4M3_MAX)
    s_bits, s = block_scales_e4m3(t)
    sg = s.mul_(g).masked_fill_((s_bits == 0) | nonfinite, 1.0)
    return s_bits.masked_fill_(nonfinite, E4M3_NAN).to(torch.uint8), sg


BF16_TABLE_MIN_BLOCKS = 32768
"""From this many blocks on, bf16 input gets its scales and divisors from tables over every
possible bf16 amax (`bf16_amax_tables`, 32768 entries: built once per call, so not worth it below)."""


def bf16_amax_tables(g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`block_scales_and_divisors` of every bf16 magnitude pattern 0..0x7FFF (as fp32 bits ``<< 16``,
    exactly the fp32 amax), for global scale ``g``: lookups by a block's int16 amax."""
    patterns = torch.arange(32768, dtype=torch.int32, device=g.device) << 16
    return block_scales_and_divisors(patterns, g)


def _quantize_blocks_torch(blocks: torch.Tensor, g: torch.Tensor, packed: torch.Tensor,
                           scales: torch.Tensor, work: Workspace | None = None,
                           tables: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
    """blocks ``[n, 16]`` float, g fp32 0-dim -> writes packed ``[n, 8]`` and block scales ``[n]``.

    ``y = x / (s * g)`` in fp32 (signed, so -0.0 and negatives that round to zero get code 8),
    then its code is looked up from its top 16 bits with a sticky bit OR-ed into the lowest
    (``(y | ((y & 0xFFFF) + 0xFFFF)) >> 16``: the addition carries into bit 16 exactly when a low
    bit is set) in a table built from `magnitude_codes_rne` (see `bf16_code_table`). The lookup
    runs on one thread; a 15-op int16 rounding that runs on all of them was measured against it
    and lost (as fast with two threads, slower with one: docs/fp4kv-peer.md, third round). Blocks
    with scale 0 or NaN get codes 0 (0 and 0x7F are the smallest and largest scale bytes, so one
    `aminmax` of the chunk's scales says whether any is there). bf16 blocks take their amax on
    int16 magnitudes (integer order is float order, and the widening to fp32 is exact) and, given
    ``tables`` (`bf16_amax_tables`), their scales and divisors by lookup. Full-size temporaries
    live in ``work`` (one is made if None).
    """
    n = blocks.shape[0]
    work = work or Workspace(n, blocks.device)
    index = work.get("index32", n, torch.int32, BLOCK_SIZE)
    if blocks.dtype == torch.bfloat16:
        magnitude = torch.bitwise_and(blocks.view(torch.int16), 0x7FFF,
                                      out=work.get("magnitude16", n, torch.int16, BLOCK_SIZE))
        amax16 = torch.amax(magnitude, dim=1, out=work.get("amax16", n, torch.int16))
        if tables is not None:
            amax_index = work.get("amax64", n, torch.int64).copy_(amax16)
            torch.index_select(tables[0], 0, amax_index, out=scales)
            sg = torch.index_select(tables[1], 0, amax_index, out=work.get("divisor", n, torch.float32))
        else:
            s_bits, sg = block_scales_and_divisors(amax16.to(torch.int32) << 16, g)
            scales.copy_(s_bits)
    else:
        x = blocks if blocks.dtype == torch.float32 else work.get("x32", n, torch.float32, BLOCK_SIZE).copy_(blocks)
        amax = torch.amax(torch.bitwise_and(x.view(torch.int32), 0x7FFFFFFF, out=index), dim=1,
                          out=work.get("amax32", n, torch.int32))
        s_bits, sg = block_scales_and_divisors(amax, g)
        scales.copy_(s_bits)
    if blocks.dtype == torch.bfloat16:
        x = work.get("x32", n, torch.float32, BLOCK_SIZE).copy_(blocks)
    y_bits = torch.div(x, sg[:, None], out=index.view(torch.float32)).view(torch.int32)
    key = torch.bitwise_and(y_bits, 0xFFFF, out=work.get("key32", n, torch.int32, BLOCK_SIZE))
    key.add_(0xFFFF).bitwise_or_(y_bits).bitwise_right_shift_(16).bitwise_and_(0xFFFF)
    codes = work.get("codes", n, torch.uint8, BLOCK_SIZE)
    torch.index_select(bf16_code_table(blocks.device, "even"), 0, key.view(-1), out=codes.view(-1))
    low, high = torch.aminmax(scales)
    if int(low) == 0 or int(high) == E4M3_NAN:
        codes.masked_fill_(((scales == 0) | (scales == E4M3_NAN))[:, None], 0)
    pack_code_pairs(codes, packed, work)


def dequantize_pair_table(g: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """int32 (bf16/fp16) or int64 (fp32) ``[65536]``: entry ``(scale_byte << 8) | packed_byte`` holds
    the bits of that byte's two outputs, the low nibble's in the low half (little-endian order).

    Each output is ``E2M1[code] * e4m3(scale_byte) * g`` rounded once to ``dtype``
    (`round_exact_f64_to`); NaN scale bytes give NaN. 4096 values are computed per call, so the
    cost does not depend on the input's size.
    """
    scale = e4m3_bits_to_f32(torch.arange(256, dtype=torch.int32, device=g.device))
    code = code_values_f32(torch.arange(16, dtype=torch.int32, device=g.device))
    exact = (scale[:, None] * code[None, :]).to(torch.float64) * g.to(torch.float64)  # both products exact
    values = round_exact_f64_to(exact, dtype)  # [scale byte, code]
    width = 8 * values.element_size()
    bits = values.view(torch.int16 if width == 16 else torch.int32)
    bits = bits.to(torch.int32 if width == 16 else torch.int64) & ((1 << width) - 1)
    return ((bits[:, :, None] << width) | bits[:, None, :]).reshape(-1)  # [scale, high code, low code]


def _dequantize_blocks_torch(packed: torch.Tensor, scales: torch.Tensor, table: torch.Tensor,
                             out_pairs: torch.Tensor) -> None:
    """packed ``[n, 8]``, scales ``[n]`` -> ``out_pairs [n, 8]`` (the output's bits, two values per
    entry), one gather from `dequantize_pair_table`."""
    index = (scales.to(torch.int32) << 8)[:, None] | packed
    torch.index_select(table, 0, index.view(-1), out=out_pairs.view(-1))


def quantize_torch(x: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference quantizer: ``x [..., K]``, g fp32 0-dim -> (packed ``[..., K/2]``, scales ``[..., K/16]``)."""
    n_blocks = x.numel() // BLOCK_SIZE
    tables = bf16_amax_tables(g) if x.dtype == torch.bfloat16 and n_blocks >= BF16_TABLE_MIN_BLOCKS else None
    packed, scales = quantize_blocks_in_chunks(
        x, lambda blocks, packed_rows, scale_rows, work: _quantize_blocks_torch(blocks, g, packed_rows, scale_rows,
                                                                               work, tables))
    lead = x.shape[:-1]
    k = x.shape[-1]
    return packed.view(*lead, k // 2), scales.view(*lead, k // BLOCK_SIZE)


def dequantize_torch(packed: torch.Tensor, scales: torch.Tensor, g: torch.Tensor,
                     dtype: torch.dtype) -> torch.Tensor:
    """Reference dequantizer: packed ``[..., K/2]``, scales ``[..., K/16]`` -> ``[..., K]`` of ``dtype``.

    One gather per chunk from `dequantize_pair_table`, written straight into the output.
    """
    p = packed.reshape(-1, BLOCK_SIZE // 2)
    s = scales.reshape(-1)
    out = torch.empty((p.shape[0], BLOCK_SIZE), dtype=dtype, device=packed.device)
    table = dequantize_pair_table(g, dtype)
    out_pairs = out.view(table.dtype)  # [n, 8]: one entry per packed byte
    for part in chunk_ranges(p.shape[0]):
        _dequantize_blocks_torch(p[part], s[part], table, out_pairs[part])
    return out.view(*packed.shape[:-1], 2 * packed.shape[-1])


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
        low, high = torch.aminmax(x)  # no |x| temporary: the input may be most of memory
        amax = torch.maximum(-low, high).to(torch.float32)
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
