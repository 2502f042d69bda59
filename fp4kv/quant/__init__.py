"""FP4 E2M1 KV-cache quantization: recipes ``mx_block16`` and ``nvfp4`` (torch reference + Triton).

`BlockFP4KVQuantizeUtil` and `FP4MXBlock16KVQuantizeUtil` (SGLang's current spelling) are one
class. `KVFP4QuantizeUtil` is its deprecated old name; it still resolves (with a one-time
DeprecationWarning) so that call sites written before the rename keep working.
"""

from __future__ import annotations

import warnings
from typing import Any

from fp4kv.quant.mx_block16 import BlockFP4KVQuantizeUtil, FP4MXBlock16KVQuantizeUtil
from fp4kv.quant.nvfp4 import NVFP4KVQuantizeUtil, NVFP4Tensor

__all__ = ["BlockFP4KVQuantizeUtil", "FP4MXBlock16KVQuantizeUtil", "NVFP4KVQuantizeUtil", "NVFP4Tensor"]

_DEPRECATED_ALIASES = {"KVFP4QuantizeUtil": "BlockFP4KVQuantizeUtil"}
_warned: set[str] = set()


def resolve_deprecated_alias(name: str, *, stacklevel: int) -> Any:
    """The object a deprecated alias stands for, warning once per process per alias.

    ``stacklevel`` counts from this function, so each module's ``__getattr__`` passes the depth
    that lands the warning on the caller's line. Raises AttributeError for any other name.
    """
    target = _DEPRECATED_ALIASES.get(name)
    if target is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _warned:
        _warned.add(name)
        warnings.warn(f"{name} is deprecated; use {target} (same class, renamed)", DeprecationWarning,
                      stacklevel=stacklevel)
    return globals()[target]


def __getattr__(name: str) -> Any:
    """PEP 562: resolve deprecated aliases (see `resolve_deprecated_alias`)."""
    if name in _DEPRECATED_ALIASES:
        return resolve_deprecated_alias(name, stacklevel=3)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
