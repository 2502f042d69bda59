"""Codecs: how one K (or V, or MLA latent) tensor of shape ``[T, H, D]`` is stored as rows.

A codec is stateless. It says what buffers a pool must allocate (`storage_layout`), turns input
rows into stored rows (`encode`) and stored rows back into values (`decode`). Every codec works
row-wise (one row = one token), so decoding a subset of rows equals the same rows of decoding the
whole buffer, bit for bit; the pools and their tests rely on that.

The FP4 math lives in `fp4kv.quant`; this module only adapts it to the pool's row layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from fp4kv.mem_cache.kv_dtype import KVCacheFormat
from fp4kv.quant import BlockFP4KVQuantizeUtil, NVFP4KVQuantizeUtil

FP4_BLOCK = 16
INPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@dataclass(frozen=True)
class StorageLayout:
    """Per-row shapes (without the leading token axis) and dtypes of a stored tensor."""

    data_shape: tuple[int, ...]
    data_dtype: torch.dtype
    scale_shape: tuple[int, ...] | None  # None: no per-row scales
    has_global_scale: bool


@dataclass(frozen=True)
class EncodedRows:
    """Stored form of ``T`` rows: ``data [T, *data_shape]``, ``scales [T, *scale_shape]`` or None."""

    data: torch.Tensor
    scales: torch.Tensor | None


class KVCodec(Protocol):
    fmt: KVCacheFormat

    def storage_layout(self, heads: int, dim: int) -> StorageLayout: ...

    def encode(self, x: torch.Tensor, global_scale: torch.Tensor | None) -> EncodedRows: ...

    def decode(self, data: torch.Tensor, scales: torch.Tensor | None,
               global_scale: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor: ...


class PlainCodec:
    """bf16 / fp16 / fp8_e4m3 storage: a cast. For fp8, NaN and +-Inf are stored as NaN (E4M3
    has no Inf; torch's CPU cast would silently saturate +-Inf to +-448), so a non-finite input
    never reads back as a finite value; finite values beyond +-448 follow torch's cast."""

    def __init__(self, fmt: KVCacheFormat):
        if fmt.torch_dtype is None:
            raise ValueError(f"{fmt.value} is not a plain dtype")
        self.fmt = fmt
        self.dtype = fmt.torch_dtype

    def storage_layout(self, heads: int, dim: int) -> StorageLayout:
        return StorageLayout((heads, dim), self.dtype, None, False)

    def encode(self, x: torch.Tensor, global_scale: torch.Tensor | None) -> EncodedRows:
        if self.dtype is torch.float8_e4m3fn and x.dtype != self.dtype:
            infinite = x.isinf()  # NaN casts to NaN already; only +-Inf needs help
            if bool(infinite.any()):  # rare: copy only when there is one
                x = x.masked_fill(infinite, float("nan"))
        return EncodedRows(x.to(self.dtype), None)

    def decode(self, data: torch.Tensor, scales: torch.Tensor | None,
               global_scale: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
        if self.dtype is torch.float8_e4m3fn and data.device.type == "cpu":
            # torch's CPU fp8 cast runs ~3x slower than a 256-entry lookup (same bits).
            codes = data.contiguous().view(torch.uint8).reshape(-1).int()
            return _fp8_table(dtype).index_select(0, codes).view(data.shape)
        return data.to(dtype)


_FP8_TABLES: dict[torch.dtype, torch.Tensor] = {}


def _fp8_table(dtype: torch.dtype) -> torch.Tensor:
    """Value of every E4M3 byte 0..255 in ``dtype`` (CPU)."""
    if dtype not in _FP8_TABLES:
        codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
        _FP8_TABLES[dtype] = codes.view(torch.float8_e4m3fn).to(dtype)
    return _FP8_TABLES[dtype]


class MXBlock16Codec:
    """``fp4_e2m1`` / ``mx_block16``: data ``uint8 [H, D/2]``, scales ``uint8 [H*D/16]`` per row."""

    fmt = KVCacheFormat.MX_BLOCK16

    def storage_layout(self, heads: int, dim: int) -> StorageLayout:
        if dim % 2 or (heads * dim) % FP4_BLOCK:
            raise ValueError(f"fp4_e2m1 needs an even head_dim and heads*head_dim divisible by "
                             f"{FP4_BLOCK}; got heads={heads}, head_dim={dim}")
        return StorageLayout((heads, dim // 2), torch.uint8, (heads * dim // FP4_BLOCK,), False)

    def encode(self, x: torch.Tensor, global_scale: torch.Tensor | None) -> EncodedRows:
        packed, scales = BlockFP4KVQuantizeUtil.batched_quantize(x)
        return EncodedRows(packed, scales)

    def decode(self, data: torch.Tensor, scales: torch.Tensor | None,
               global_scale: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
        return BlockFP4KVQuantizeUtil.batched_dequantize(data, scales, dtype=dtype)


class NVFP4Codec:
    """``nvfp4``: data ``uint8 [H, D/2]``, E4M3 block scales ``uint8 [H, D/16]`` per row, plus one
    fp32 global scale per layer (the dequantization multiplier, about ``amax / (448 * 6)``)."""

    fmt = KVCacheFormat.NVFP4

    def storage_layout(self, heads: int, dim: int) -> StorageLayout:
        if dim % FP4_BLOCK:
            raise ValueError(f"nvfp4 needs head_dim divisible by {FP4_BLOCK}; got head_dim={dim}")
        return StorageLayout((heads, dim // 2), torch.uint8, (heads, dim // FP4_BLOCK), True)

    def encode(self, x: torch.Tensor, global_scale: torch.Tensor | None) -> EncodedRows:
        if global_scale is None:
            raise ValueError("nvfp4 encode needs a global scale")
        packed, block_scales, _ = NVFP4KVQuantizeUtil.quantize(x, global_scale=global_scale)
        return EncodedRows(packed, block_scales)

    def decode(self, data: torch.Tensor, scales: torch.Tensor | None,
               global_scale: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
        return NVFP4KVQuantizeUtil.dequantize(data, scales, global_scale, dtype)

    @staticmethod
    def compute_global_scale(x: torch.Tensor) -> torch.Tensor | None:
        """fp32 0-dim dequantization multiplier for ``x`` on its device, or None when ``x`` is all
        zeros (any scale encodes zeros identically, so none should be fixed from them)."""
        if not bool(x.ne(0).any()):
            return None
        value = NVFP4KVQuantizeUtil.compute_global_scale(x)
        return torch.tensor(value, dtype=torch.float32, device=x.device)


def make_codec(fmt: KVCacheFormat) -> KVCodec:
    """The codec for a parsed format."""
    if fmt is KVCacheFormat.MX_BLOCK16:
        return MXBlock16Codec()
    if fmt is KVCacheFormat.NVFP4:
        return NVFP4Codec()
    return PlainCodec(fmt)
