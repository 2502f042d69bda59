"""Helpers shared by the tests under tests/mem_cache (not a test file)."""

from __future__ import annotations

import torch

from fp4kv.mem_cache import KVCacheFormat, MHATokenToKVPool, parse_kv_cache_dtype
from fp4kv.mem_cache.token_store import TokenKVStore
from fp4kv.quant import BlockFP4KVQuantizeUtil, NVFP4KVQuantizeUtil

ALL_DTYPES = ["bf16", "fp16", "fp8_e4m3", "fp4_e2m1", "nvfp4"]
FP4_DTYPES = ["fp4_e2m1", "nvfp4"]


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of a tensor, for bit-exact comparisons of any dtype (fp8 included)."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(bits(a), bits(b))


def snapshot(pool: TokenKVStore) -> list[torch.Tensor]:
    """Clones of every raw buffer of every layer (data, scales, global scales)."""
    out = []
    for layer_id in range(pool.start_layer, pool.end_layer):
        for name in pool.streams:
            raw = pool._raw(layer_id, name)
            out += [t.clone() for t in (raw.data, raw.scales, raw.global_scale) if t is not None]
    return out


def snapshots_equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(same_bits(x, y) for x, y in zip(a, b))


def reference(dtype: object, x: torch.Tensor, global_scale: torch.Tensor | None = None,
              out_dtype: torch.dtype = torch.bfloat16):
    """What a pool of ``dtype`` must store for ``x [T, H, D]``: (data, scales|None, decoded)."""
    fmt = parse_kv_cache_dtype(dtype)
    if fmt is KVCacheFormat.MX_BLOCK16:
        packed, scales = BlockFP4KVQuantizeUtil.batched_quantize(x)
        return packed, scales, BlockFP4KVQuantizeUtil.batched_dequantize(packed, scales, dtype=out_dtype)
    if fmt is KVCacheFormat.NVFP4:
        assert global_scale is not None
        packed, block_scales, _ = NVFP4KVQuantizeUtil.quantize(x, global_scale=global_scale)
        return packed, block_scales, NVFP4KVQuantizeUtil.dequantize(packed, block_scales, global_scale, out_dtype)
    stored = x.to(fmt.torch_dtype)
    return stored, None, stored.to(out_dtype)


def make_mha(dtype: object = "bf16", size: int = 64, page_size: int = 1, head_num: int = 2,
             head_dim: int = 32, layer_num: int = 2, device: str = "cpu", **kw) -> MHATokenToKVPool:
    return MHATokenToKVPool(size=size, page_size=page_size, dtype=dtype, head_num=head_num,
                            head_dim=head_dim, layer_num=layer_num, device=device, **kw)


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)
