"""fp4kv: FP4 E2M1 KV-cache quantization (`fp4kv.quant`) and token-to-KV memory pools (`fp4kv.mem_cache`)."""

from __future__ import annotations

from typing import Any

from fp4kv.mem_cache import (
    VALID_KV_CACHE_DTYPES,
    HostKVMirror,
    HybridLinearKVPool,
    KVCacheFormat,
    MHATokenToKVPool,
    MLATokenToKVPool,
    NotAFullAttentionLayerError,
    PagedTokenToKVPoolAllocator,
    TokenToKVPoolAllocator,
    parse_kv_cache_dtype,
)
from fp4kv.quant import (
    BlockFP4KVQuantizeUtil,
    FP4MXBlock16KVQuantizeUtil,
    NVFP4KVQuantizeUtil,
    NVFP4Tensor,
    resolve_deprecated_alias,
)

__all__ = [
    "BlockFP4KVQuantizeUtil", "FP4MXBlock16KVQuantizeUtil", "NVFP4KVQuantizeUtil", "NVFP4Tensor",
    "MHATokenToKVPool", "MLATokenToKVPool", "HybridLinearKVPool", "NotAFullAttentionLayerError",
    "TokenToKVPoolAllocator", "PagedTokenToKVPoolAllocator", "HostKVMirror",
    "KVCacheFormat", "parse_kv_cache_dtype", "VALID_KV_CACHE_DTYPES",
]

_DEPRECATED_ALIASES = {"KVFP4QuantizeUtil": "BlockFP4KVQuantizeUtil"}


def __getattr__(name: str) -> Any:
    """PEP 562: deprecated aliases resolve through `fp4kv.quant`, which warns once per process."""
    if name in _DEPRECATED_ALIASES:
        return resolve_deprecated_alias(name, stacklevel=3)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
