"""Token-to-KV memory pools (bf16 / fp16 / fp8 / FP4), slot allocators and host offload."""

from fp4kv.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from fp4kv.mem_cache.host_mirror import HostKVMirror
from fp4kv.mem_cache.hybrid_pool import HybridLinearKVPool, NotAFullAttentionLayerError
from fp4kv.mem_cache.kv_dtype import VALID_KV_CACHE_DTYPES, KVCacheFormat, parse_kv_cache_dtype
from fp4kv.mem_cache.mha_pool import MHATokenToKVPool
from fp4kv.mem_cache.mla_pool import MLATokenToKVPool
from fp4kv.mem_cache.token_store import RawBuffers, ScaleState

__all__ = [
    "HostKVMirror", "HybridLinearKVPool", "KVCacheFormat", "MHATokenToKVPool", "MLATokenToKVPool",
    "NotAFullAttentionLayerError", "PagedTokenToKVPoolAllocator", "RawBuffers", "ScaleState",
    "TokenToKVPoolAllocator", "VALID_KV_CACHE_DTYPES", "parse_kv_cache_dtype",
]
