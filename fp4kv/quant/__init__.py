"""FP4 E2M1 KV-cache quantization: recipes ``mx_block16`` and ``nvfp4`` (torch reference + Triton).

`KVFP4QuantizeUtil` is the deprecated name of `BlockFP4KVQuantizeUtil`; it still resolves (with a
one-time DeprecationWarning) so that call sites written before the rename keep working.
"""

from __future__ import annotations

import warnings
from typing import Any

from fp4kv.quant.mx_block16 import BlockFP4KVQuantizeUtil
from fp4kv.quant.nvfp4 import NVFP4KVQuantizeUtil, NVFP4Tensor

__all__ = ["BlockFP4KVQuantizeUtil", "NVFP4KVQuantizeUtil", "NVFP4Tensor"]

_DEPRECATED_ALIASES = {"KVFP4QuantizeUtil": "BlockFP4KVQuantizeUtil"}
_warned: set[str] = set()


def __getattr__(name: str) -> Any:
    """PEP 562: resolve deprecated aliases, warning once per process per alias."""
    target = _DEPRECATED_ALIASES.get(name)
    if target is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _warned:
        _warned.add(name)
        warnings.warn(f"{name} is deprecated; use {target} (same class, renamed)", DeprecationWarning, stacklevel=2)
    return globals()[target]
