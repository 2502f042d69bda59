"""Recipe ``mx_block16``: FP4 E2M1 codes with one power-of-two scale byte per 16 elements.

The format of SGLang's ``BlockFP4KVQuantizeUtil`` (see the shared README, "The FP4 formats"):

* input ``x: [B, M, N]`` bf16/fp16/fp32; blocks are 16 consecutive elements of the flattened
  ``M*N`` axis (``M*N % 16 == 0``; ``N`` even so that byte pairs stay inside a row);
* scale byte per block = ``e + 127`` with ``e = ceil(log2(amax / 6))``, ``amax`` clamped below at
  ``6 * 1e-10`` like SGLang, which makes ``e >= -33`` (an all-zero block stores 94);
* codes: nearest E2M1 value to ``x / 2^e``, ties away from zero, saturating at 6;
* output ``packed: uint8 [B, M, N/2]`` (element 2j low nibble) and ``scales: uint8 [B, M*N/16]``;
* dequantize: ``E2M1[code] * 2^(byte - 127)`` computed exactly in fp32, then cast.

Exactness. ``e`` is derived from the fp32 bits of ``amax`` (exponent and mantissa), not from a
floating-point ``log2``: ``amax <= 6 * 2^e`` holds exactly for the smallest such ``e``, so a block
whose amax is just above ``6 * 2^k`` gets ``e = k + 1``. SGLang computes ``log2`` eagerly in bf16,
whose rounding can put such a block (amax within a bf16 rounding step above ``6 * 2^k``) at
``e = k`` and saturate its largest element; on standard-normal data the two agree (the shared
README measured identical bytes). Codes from ``x / 2^e`` are exact because the division is by a
power of two. Decoding any bytes a peer wrote (any scale byte 0..254, any codes) is exact in fp32.

Non-finite input (this project's choice, where SGLang silently zeroes): a block holding NaN or
+-Inf stores scale byte 0xFF (the OCP microscaling NaN scale) with all codes 0, and dequantizes
to NaN for the whole block.

Sign of zero, byte for byte as SGLang: the sign bit of a code is set exactly when the input is
``< 0``, i.e. its sign bit is set AND its magnitude bits are nonzero (SGLang takes the sign from
``(x / 2^e) < 0``). So ``-0.0`` encodes as code 0 (like ``+0.0``), while a negative value that
rounds to zero encodes as code 8 (``-0``). (nvfp4 keeps the sign bit of ``-0.0``; see its module.)

Backends: ``torch`` (reference; the production path on CPU, integer bit arithmetic in cache-sized
chunks) and ``triton`` (one pass per direction: each program reads a tile of blocks once and
writes codes and scales once). Both produce identical bytes and identical dequantized bits.
"""

from __future__ import annotations  # also keeps `tl.constexpr` annotations as strings (Triton accepts them)

from typing import TYPE_CHECKING

import torch

from fp4kv.quant import _checks
from fp4kv.quant._chunks import chunk_ranges
from fp4kv.quant._jit import lazy_jit
from fp4kv.quant._int16_codes import TIES_AWAY_BIAS, lanes64, spread_per_block, ties_away_codes
from fp4kv.quant._workspace import Workspace, pack_code_pairs, quantize_blocks_in_chunks
from fp4kv.quant.e2m1 import (
    tl_block_tile,
    byte_pair_values_f32,
    tl_code_values_f32,
    tl_magnitude_codes_ties_away,
    tl_load_pair_bits,
    tl_store_f32_as,
)

BLOCK_SIZE = 16
SCALE_BIAS = 127
MIN_SCALE_BYTE = 94
"""Scale byte of an all-zero block: ``e = ceil(log2(1e-10)) = -33``."""
NAN_SCALE_BYTE = 0xFF
if TYPE_CHECKING:  # kernels see `tl` through the scope that `lazy_jit` builds
    import triton.language as tl


def scale_bytes_from_amax_bits(amax_bits: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """int32 bits of per-block fp32 ``amax >= 0`` -> int32 scale byte (94..253, or 255 if non-finite).

    With ``amax = 1.f * 2^(E-127)``: ``amax <= 6 * 2^e`` first holds at ``e = E - 129`` when the
    mantissa ``f <= 0.5`` and at ``e = E - 128`` otherwise; so ``byte = E - 2 (+1 if f > 0.5)``.
    ``out``: an int32 tensor of the same shape to write into (returned).
    """
    byte = torch.bitwise_right_shift(amax_bits, 23, out=out) if out is not None else amax_bits >> 23
    byte.sub_(2).add_((amax_bits & 0x7FFFFF) > 0x400000)
    byte.clamp_(min=MIN_SCALE_BYTE)
    return byte.masked_fill_(amax_bits >= 0x7F800000, NAN_SCALE_BYTE)


def scale_values_f32(scale_bytes: torch.Tensor) -> torch.Tensor:
    """Scale bytes (any integer dtype) -> fp32 ``2^(byte - 127)``; byte 0 is 2^-127; 0xFF is NaN."""
    b = scale_bytes.to(torch.int32)
    bits = torch.where(b == 0, 0x00400000, b << 23)
    bits = bits.masked_fill_(b == NAN_SCALE_BYTE, 0x7FC00000)
    return bits.view(torch.float32)


# ------------------------------------------------------------------------------------------------
# torch reference
# ------------------------------------------------------------------------------------------------

def _quantize_blocks_torch(blocks: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor,
                           work: Workspace | None = None) -> None:
    """blocks ``[n, 16]`` float -> writes packed ``[n, 8]`` uint8 and scales ``[n]`` uint8.

    Works on the bits, in int16 (see `fp4kv.quant._int16_codes`): ``top16`` is the bf16 bit
    pattern (for fp16/fp32, the fp32 bits ``>> 16``; ties away from zero make that truncation
    exact). The scale byte comes from the bits of each block's amax; adding the block's shift
    (its exponent in bf16's exponent field, with `TIES_AWAY_BIAS`) to the magnitudes gives
    `ties_away_codes` its input. Fix-ups only where a chunk needs them: blocks holding NaN/Inf
    get codes 0, and ``-0.0`` (not ``< 0``, so the peer gives it code 0) gets code 0. ``work``:
    scratch reused across chunks (one is made if None).
    """
    n = blocks.shape[0]
    work = work or Workspace(n, blocks.device)
    magnitude = work.get("magnitude16", n, torch.int16, BLOCK_SIZE)
    if blocks.dtype == torch.bfloat16:
        top = blocks.view(torch.int16)
        torch.bitwise_and(top, 0x7FFF, out=magnitude)
        # int16 order of magnitudes is float order, and bf16 -> fp32 is exact: this is the fp32
        # amax's top half, so the block's byte and shift are looked up by it (`_bf16_amax_tables`)
        amax = torch.amax(magnitude, dim=1, out=work.get("amax16", n, torch.int16))
        amax_index = work.get("amax32", n, torch.int32).copy_(amax)
        byte_table, shift_table = _bf16_amax_tables(blocks.device)
        torch.index_select(byte_table, 0, amax_index, out=scales)
        block_lanes = torch.index_select(shift_table, 0, amax_index, out=work.get("lanes64", n, torch.int64))
        negative_zero = _BF16_NEGATIVE_ZERO if int(top.min()) == _BF16_NEGATIVE_ZERO else None
        full = top
    else:
        full = (blocks if blocks.dtype == torch.float32
                else work.get("x32", n, torch.float32, BLOCK_SIZE).copy_(blocks)).view(torch.int32)
        wide = work.get("wide32", n, torch.int32, BLOCK_SIZE)
        amax_bits = torch.amax(torch.bitwise_and(full, 0x7FFFFFFF, out=wide), dim=1, out=work.get("amax32", n, torch.int32))
        byte = scale_bytes_from_amax_bits(amax_bits, out=work.get("byte32", n, torch.int32))
        scales.copy_(byte)
        block_lanes = _block_shift_lanes(byte)
        top = work.get("top16", n, torch.int16, BLOCK_SIZE).copy_(torch.bitwise_right_shift(full, 16, out=wide))
        torch.bitwise_and(top, 0x7FFF, out=magnitude)
        negative_zero = -(1 << 31) if int(full.min()) == -(1 << 31) else None  # -0.0: the smallest pattern
    spread = spread_per_block(block_lanes, work.get("spread16", n, torch.int16, BLOCK_SIZE))
    p = magnitude.add_(spread)
    codes = ties_away_codes(p, top, out=spread, scratch=work.get("scratch16", n, torch.int16, BLOCK_SIZE))
    if negative_zero is not None:
        codes.masked_fill_(full == negative_zero, 0)
    if int(scales.max()) == NAN_SCALE_BYTE:  # 0xFF is the largest byte: one reduction says if any
        codes.masked_fill_((scales == NAN_SCALE_BYTE)[:, None], 0)
    pack_code_pairs(codes, packed, work)


_BF16_NEGATIVE_ZERO = -32768  # 0x8000 as int16


def _bf16_amax_tables(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale bytes uint8 ``[32768]``, shifts int64 ``[32768]``) indexed by a block's amax as bf16
    magnitude bits: the byte is `scale_bytes_from_amax_bits` of those bits ``<< 16`` (exactly the
    fp32 amax); the shift is `_block_shift_lanes` of it (byte 255 included: its codes are
    zeroed)."""
    tables = _AMAX_TABLES.get(device)
    if tables is None:
        byte = scale_bytes_from_amax_bits(torch.arange(32768, dtype=torch.int32) << 16)
        tables = _AMAX_TABLES[device] = (byte.to(torch.uint8).to(device), _block_shift_lanes(byte).to(device))
    return tables


def _block_shift_lanes(scale_bytes: torch.Tensor) -> torch.Tensor:
    """int32 scale bytes ``[n]`` -> `lanes64` of ``-(((byte - 127) << 7) + TIES_AWAY_BIAS)``: what a
    block's magnitudes get added to make `ties_away_codes`' input."""
    return lanes64(-(((scale_bytes - SCALE_BIAS) << 7) + TIES_AWAY_BIAS))


_AMAX_TABLES: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}


def _dequantize_blocks_torch(packed: torch.Tensor, scales: torch.Tensor, out: torch.Tensor) -> None:
    """packed ``[n, 8]`` and scales ``[n]`` uint8 -> writes ``out [n, 16]`` (any float dtype)."""
    table = byte_pair_values_f32(packed.device)
    values = table.index_select(0, packed.reshape(-1).to(torch.int32)).view(torch.float32)
    values = values.view(-1, BLOCK_SIZE).mul_(scale_values_f32(scales)[:, None])
    out.copy_(values)


def quantize_torch(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference quantizer: ``x [B, M, N]`` -> ``(packed uint8 [B, M, N/2], scales uint8 [B, M*N/16])``."""
    b, m, n = x.shape
    packed, scales = quantize_blocks_in_chunks(x, _quantize_blocks_torch)
    return packed.view(b, m, n // 2), scales.view(b, m * n // BLOCK_SIZE)


def dequantize_torch(packed: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Reference dequantizer: ``packed [B, M, N/2]``, ``scales [B, M*N/16]`` -> ``[B, M, N]`` of ``dtype``."""
    b, m, half_n = packed.shape
    p = packed.reshape(-1, BLOCK_SIZE // 2)
    s = scales.reshape(-1)
    out = torch.empty((p.shape[0], BLOCK_SIZE), dtype=dtype, device=packed.device)
    for part in chunk_ranges(p.shape[0]):
        _dequantize_blocks_torch(p[part], s[part], out[part])
    return out.view(b, m, 2 * half_n)


# ------------------------------------------------------------------------------------------------
# Triton kernels
# ------------------------------------------------------------------------------------------------

@lazy_jit
def _mx_quantize_kernel(x_ptr, packed_ptr, scales_ptr, n_blocks,
                        IN_BF16: tl.constexpr, TILE: tl.constexpr):
    """One program quantizes TILE blocks of 16.

    x_ptr: flat input, ``n_blocks * 16`` elements: int16 bits when IN_BF16 (the interpreter cannot
    load bf16), else fp16/fp32 values. packed_ptr: uint8 ``[n_blocks, 8]``. scales_ptr: uint8
    ``[n_blocks]``. Even and odd elements are loaded as two ``[TILE, 8]`` tiles so that the pair
    making one byte lines up without a reshape.
    """
    rows, row_ok, pairs, mask = tl_block_tile(n_blocks, TILE)
    even_at = rows[:, None] * 16 + pairs[None, :] * 2
    ev_bits, od_bits = tl_load_pair_bits(x_ptr, even_at, mask, IN_BF16)
    ev_abs = ev_bits & 0x7FFFFFFF
    od_abs = od_bits & 0x7FFFFFFF
    amax = tl.maximum(tl.max(ev_abs, axis=1), tl.max(od_abs, axis=1))
    byte = (amax >> 23) - 2 + ((amax & 0x7FFFFF) > 0x400000).to(tl.int32)
    byte = tl.maximum(byte, 94)
    nonfinite = amax >= 0x7F800000
    byte = tl.where(nonfinite, 255, byte)
    shift = tl.where(nonfinite, 0, (byte - 127) << 23)[:, None]
    # sign only for inputs < 0: -0.0 (sign bit, zero magnitude) gets code 0, like the torch path
    ev_code = tl_magnitude_codes_ties_away(ev_abs - shift) | tl.where(ev_abs != 0, (ev_bits >> 28) & 8, 0)
    od_code = tl_magnitude_codes_ties_away(od_abs - shift) | tl.where(od_abs != 0, (od_bits >> 28) & 8, 0)
    packed = tl.where(nonfinite[:, None], 0, ev_code | (od_code << 4))
    tl.store(packed_ptr + rows[:, None] * 8 + pairs[None, :], packed.to(tl.uint8), mask=mask)
    tl.store(scales_ptr + rows, byte.to(tl.uint8), mask=row_ok)


@lazy_jit
def _mx_dequantize_kernel(packed_ptr, scales_ptr, out_ptr, n_blocks,
                          OUT_KIND: tl.constexpr, TILE: tl.constexpr):
    """One program dequantizes TILE blocks of 16.

    packed_ptr: uint8 ``[n_blocks, 8]``; scales_ptr: uint8 ``[n_blocks]``; out_ptr: flat
    ``n_blocks * 16`` elements, written as int16 bits for OUT_KIND 0 (bf16) and 1 (fp16), fp32
    for OUT_KIND 2 (see `tl_store_f32_as`; the interpreter cannot store bf16). Values are exact
    in fp32 (at most 2 significant bits times a power of two).
    """
    rows, row_ok, pairs, mask = tl_block_tile(n_blocks, TILE)
    p = tl.load(packed_ptr + rows[:, None] * 8 + pairs[None, :], mask=mask, other=0).to(tl.int32)
    byte = tl.load(scales_ptr + rows, mask=row_ok, other=127).to(tl.int32)
    scale_bits = tl.where(byte == 0, 0x00400000, byte << 23)
    scale = scale_bits.to(tl.float32, bitcast=True)[:, None]
    is_nan = (byte == 255)[:, None]
    ev = tl_code_values_f32(p & 15) * scale
    od = tl_code_values_f32(p >> 4) * scale
    ev = tl.where(is_nan, float("nan"), ev)
    od = tl.where(is_nan, float("nan"), od)
    even_at = rows[:, None] * 16 + pairs[None, :] * 2
    tl_store_f32_as(out_ptr + even_at, ev, mask, OUT_KIND)
    tl_store_f32_as(out_ptr + even_at + 1, od, mask, OUT_KIND)


_TILE = 64


def quantize_triton(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton quantizer, same contract and bytes as `quantize_torch`."""
    b, m, n = x.shape
    flat = x.contiguous().view(-1)
    n_blocks = flat.numel() // BLOCK_SIZE
    packed = torch.empty((b, m, n // 2), dtype=torch.uint8, device=x.device)
    scales = torch.empty((b, m * n // BLOCK_SIZE), dtype=torch.uint8, device=x.device)
    if n_blocks:
        is_bf16 = x.dtype == torch.bfloat16
        src = flat.view(torch.int16) if is_bf16 else flat
        grid = (triton_cdiv(n_blocks, _TILE),)
        _mx_quantize_kernel[grid](src, packed, scales, n_blocks, IN_BF16=is_bf16, TILE=_TILE)
    return packed, scales


def dequantize_triton(packed: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Triton dequantizer, same contract and bits as `dequantize_torch`."""
    b, m, half_n = packed.shape
    out = torch.empty((b, m, 2 * half_n), dtype=dtype, device=packed.device)
    n_blocks = out.numel() // BLOCK_SIZE
    if n_blocks:
        kind = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}[dtype]
        dst = out.view(torch.int16) if kind < 2 else out
        grid = (triton_cdiv(n_blocks, _TILE),)
        _mx_dequantize_kernel[grid](packed.contiguous(), scales.contiguous(), dst, n_blocks,
                                    OUT_KIND=kind, TILE=_TILE)
    return out


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ------------------------------------------------------------------------------------------------
# public API
# ------------------------------------------------------------------------------------------------

def _check_quantize_input(x: object) -> torch.Tensor:
    x = _checks.require_float_input("x", x, (3,), "[B, M, N]")
    _, m, n = x.shape
    if (m * n) % BLOCK_SIZE or n % 2:
        raise ValueError(f"mx_block16 needs M*N divisible by {BLOCK_SIZE} and N even (blocks of 16 along "
                         f"the flattened M*N axis, two codes per byte), got x {_checks.describe(x)}")
    return x


def _check_dequantize_input(packed: object, scales: object, dtype: object) -> tuple[torch.Tensor, torch.Tensor]:
    packed = _checks.require_uint8("packed", packed, (3,), "[B, M, N/2]")
    scales = _checks.require_uint8("scales", scales, (2,), "[B, M*N/16]")
    _checks.require_out_dtype(dtype)
    b, m, half_n = packed.shape
    if (2 * m * half_n) % BLOCK_SIZE or scales.shape != (b, 2 * m * half_n // BLOCK_SIZE):
        raise ValueError(f"packed {_checks.describe(packed)} needs scales of shape "
                         f"({b}, {2 * m * half_n // BLOCK_SIZE}) (one per 16 elements, M*N % 16 == 0), "
                         f"got scales {_checks.describe(scales)}")
    _checks.require_same_device(packed=packed, scales=scales)
    return packed, scales


class BlockFP4KVQuantizeUtil:
    """Recipe ``mx_block16`` for KV-cache tensors (see the module docstring for the exact format).

    ``backend``: ``"auto"`` (Triton on CUDA tensors, torch elsewhere), ``"torch"`` or ``"triton"``
    (on CPU tensors only under ``TRITON_INTERPRET=1``, which is for tests).
    """

    @staticmethod
    def batched_quantize(x: torch.Tensor, *, backend: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
        """``x [B, M, N]`` bf16/fp16/fp32 -> ``(packed uint8 [B, M, N/2], scales uint8 [B, M*N/16])``.

        Any strides are accepted (a non-contiguous input is copied). Raises ValueError for a wrong
        rank or dtype, ``M*N % 16 != 0`` or odd ``N``.
        """
        x = _check_quantize_input(x)
        if _checks.resolve_backend(backend, x.device) == "triton":
            return quantize_triton(x)
        return quantize_torch(x)

    @staticmethod
    def batched_dequantize(packed: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.bfloat16,
                           *, backend: str = "auto") -> torch.Tensor:
        """``packed uint8 [B, M, N/2]``, ``scales uint8 [B, M*N/16]`` -> ``[B, M, N]`` of ``dtype``.

        ``dtype`` is bf16, fp16 or fp32. Values are exact in fp32 and cast once (fp16 may overflow
        to inf or flush tiny values to zero; bf16 and fp32 are exact). Scale byte 0xFF gives NaN
        for its whole block.
        """
        packed, scales = _check_dequantize_input(packed, scales, dtype)
        if _checks.resolve_backend(backend, packed.device) == "triton":
            return dequantize_triton(packed, scales, dtype)
        return dequantize_torch(packed, scales, dtype)


FP4MXBlock16KVQuantizeUtil = BlockFP4KVQuantizeUtil
"""SGLang's current name for this class (there, `BlockFP4KVQuantizeUtil` is the alias); the same
class object under both names, neither deprecated."""
