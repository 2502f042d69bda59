"""fp4kv: FP4 E2M1 KV-cache quantization (`fp4kv.quant`) and token-to-KV memory pools (`fp4kv.mem_cache`)."""

from __future__ import annotations

from typing import Any

from fp4kv.quant import BlockFP4KVQuantizeUtil, NVFP4KVQuantizeUtil, NVFP4Tensor

__all__ = ["BlockFP4KVQuantizeUtil", "NVFP4KVQuantizeUtil", "NVFP4Tensor"]
# (memory-pool exports go here)

_DEPRECATED_ALIASES = {"KVFP4QuantizeUtil": "BlockFP4KVQuantizeUtil"}


def __getattr__(name: str) -> Any:
    """PEP 562: deprecated aliases resolve through `fp4kv.quant`, which warns once per process."""
    if name in _DEPRECATED_ALIASES:
        from fp4kv import quant

        return getattr(quant, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
