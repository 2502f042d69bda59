"""Parse a KV-cache dtype the way a ``--kv-cache-dtype`` flag names it.

`parse_kv_cache_dtype` is the one place that maps user spellings to a `KVCacheFormat`; every pool
calls it, so the accepted names and the error message are the same everywhere.
"""

from __future__ import annotations

import enum

import torch


class KVCacheFormat(str, enum.Enum):
    """How a pool stores K/V. The value is the canonical ``--kv-cache-dtype`` spelling."""

    BF16 = "bf16"
    FP16 = "fp16"
    FP8_E4M3 = "fp8_e4m3"
    MX_BLOCK16 = "fp4_e2m1"  # E2M1 codes + one UE8M0 scale per 16 values (SGLang's format)
    NVFP4 = "nvfp4"          # E2M1 codes + E4M3 block scales + one fp32 global scale per layer

    @property
    def is_fp4(self) -> bool:
        return self in (KVCacheFormat.MX_BLOCK16, KVCacheFormat.NVFP4)

    @property
    def torch_dtype(self) -> torch.dtype | None:
        """The storage dtype of a plain (unquantized) format; None for the FP4 formats."""
        return _PLAIN_TORCH.get(self)


_PLAIN_TORCH = {
    KVCacheFormat.BF16: torch.bfloat16,
    KVCacheFormat.FP16: torch.float16,
    KVCacheFormat.FP8_E4M3: torch.float8_e4m3fn,
}

_ALIASES: dict[object, KVCacheFormat] = {
    torch.bfloat16: KVCacheFormat.BF16,
    torch.float16: KVCacheFormat.FP16,
    torch.float8_e4m3fn: KVCacheFormat.FP8_E4M3,
    "bf16": KVCacheFormat.BF16,
    "fp16": KVCacheFormat.FP16,
    "fp8_e4m3": KVCacheFormat.FP8_E4M3,
    "fp4_e2m1": KVCacheFormat.MX_BLOCK16,
    "mx_block16": KVCacheFormat.MX_BLOCK16,
    "nvfp4": KVCacheFormat.NVFP4,
}

VALID_KV_CACHE_DTYPES: tuple[str, ...] = (
    "bf16", "fp16", "fp8_e4m3", "fp4_e2m1", "mx_block16", "nvfp4",
    "torch.bfloat16", "torch.float16", "torch.float8_e4m3fn",
)


def parse_kv_cache_dtype(dtype: object) -> KVCacheFormat:
    """Map ``torch.bfloat16``/``"bf16"``/``"fp4_e2m1"``/... to a `KVCacheFormat`.

    Raises ValueError naming the bad value and listing every accepted one.
    """
    if isinstance(dtype, KVCacheFormat):
        return dtype
    try:
        fmt = _ALIASES.get(dtype)  # type: ignore[arg-type]
    except TypeError:  # unhashable
        fmt = None
    if fmt is None:
        raise ValueError(
            f"unknown KV cache dtype {dtype!r}; valid: {', '.join(VALID_KV_CACHE_DTYPES)}")
    return fmt
