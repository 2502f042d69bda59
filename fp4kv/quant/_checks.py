"""Argument validation shared by both recipes: every failure is a ValueError naming shapes and dtypes."""

from __future__ import annotations

from typing import Literal

import torch

from fp4kv.quant._jit import interpret_mode

Backend = Literal["auto", "torch", "triton"]
BACKENDS: tuple[str, ...] = ("auto", "torch", "triton")

FLOAT_DTYPES: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float16, torch.float32)
"""Accepted input dtypes and dequantization output dtypes."""


def describe(t: torch.Tensor) -> str:
    """``shape (2, 3) dtype torch.uint8 on cpu``-style description for error messages."""
    return f"shape {tuple(t.shape)} dtype {t.dtype} on {t.device}"


def require_tensor(name: str, t: object) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return t


def require_float_input(name: str, t: object, ranks: tuple[int, ...], layout: str) -> torch.Tensor:
    """``t`` is a bf16/fp16/fp32 tensor whose rank is one of ``ranks`` (``layout`` names the dims)."""
    t = require_tensor(name, t)
    if t.dim() not in ranks:
        raise ValueError(f"{name} must be {layout}, got {describe(t)}")
    if t.dtype not in FLOAT_DTYPES:
        raise ValueError(f"{name} must have dtype bfloat16, float16 or float32, got {describe(t)}")
    return t


def require_uint8(name: str, t: object, ranks: tuple[int, ...], layout: str) -> torch.Tensor:
    t = require_tensor(name, t)
    if t.dim() not in ranks or t.dtype != torch.uint8:
        raise ValueError(f"{name} must be a uint8 tensor {layout}, got {describe(t)}")
    return t


def require_out_dtype(dtype: object) -> torch.dtype:
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"output dtype must be torch.bfloat16, torch.float16 or torch.float32, got {dtype!r}")
    return dtype  # type: ignore[return-value]


def require_same_device(**tensors: torch.Tensor) -> None:
    devices = {t.device for t in tensors.values()}
    if len(devices) > 1:
        listing = ", ".join(f"{k}: {describe(v)}" for k, v in tensors.items())
        raise ValueError(f"tensors must be on one device, got {listing}")


def resolve_backend(backend: str, device: torch.device) -> Literal["torch", "triton"]:
    """``auto`` -> Triton on CUDA, torch elsewhere. ``triton`` on a CPU tensor needs TRITON_INTERPRET=1."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
    if backend == "auto":
        return "triton" if device.type == "cuda" else "torch"
    if backend == "triton" and device.type != "cuda" and not interpret_mode():
        raise ValueError(f"backend='triton' needs a CUDA tensor, or TRITON_INTERPRET=1 for the CPU "
                         f"interpreter (tests only); got a tensor on {device}")
    return backend  # type: ignore[return-value]
