"""Helpers shared by the quantization contract tests (not a test module)."""

from __future__ import annotations

import math

import torch


def codes_of(packed: torch.Tensor) -> list[int]:
    """Unpack by hand, in element order: the low nibble of each byte is the even element."""
    out = []
    for byte in packed.flatten().tolist():
        out += [byte & 0xF, byte >> 4]
    return out


def below(v: float) -> float:
    """The fp32 just below ``v``."""
    return torch.nextafter(torch.tensor(v), torch.tensor(-math.inf)).item()


def above(v: float) -> float:
    """The fp32 just above ``v``."""
    return torch.nextafter(torch.tensor(v), torch.tensor(math.inf)).item()
