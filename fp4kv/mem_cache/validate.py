"""Argument checks shared by the pools and the host mirror. They run before any buffer is written,
so a rejected call leaves every buffer bit-identical. Range checks read the index tensor's min/max
(a host sync on CUDA)."""

from __future__ import annotations

import torch

from fp4kv.mem_cache.codec import INPUT_DTYPES

PADDING_SLOT = 0


def resolve_device(device: torch.device | str) -> torch.device:
    """``"cuda"`` -> ``cuda:<current>``, so that it compares equal to the devices of tensors on it."""
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def check_loc(loc: object, rows: int, device: torch.device, *, name: str = "loc",
              reject_duplicates: bool = False, padding_slot: int | None = PADDING_SLOT) -> torch.Tensor:
    """Validate token slot indices: an int64 1-D tensor on ``device`` with values in ``[0, rows)``.

    With ``reject_duplicates``, a slot may appear at most once, except ``padding_slot`` (slot 0 of
    the pools: padded tokens of a CUDA-graph batch all write there; its content is garbage by
    definition). Pass ``padding_slot=None`` to allow no repeats at all.
    Raises ValueError (type, dtype, shape, device, duplicates) or IndexError (range).
    """
    if not isinstance(loc, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of int64, got {type(loc).__name__}")
    if loc.dtype != torch.int64:
        raise ValueError(f"{name} must have dtype torch.int64, got {loc.dtype}")
    if loc.dim() != 1:
        raise ValueError(f"{name} must be 1-D [T], got shape {tuple(loc.shape)}")
    if loc.device != device:
        raise ValueError(f"{name} is on {loc.device}, the buffers are on {device}")
    if loc.numel() == 0:
        return loc
    lo, hi = int(loc.min()), int(loc.max())
    if lo < 0 or hi >= rows:
        bad = loc[(loc < 0) | (loc >= rows)]
        raise IndexError(f"{name} out of range [0, {rows}): {bad[:8].tolist()}"
                         f"{' ...' if bad.numel() > 8 else ''}")
    if reject_duplicates:
        real = loc if padding_slot is None else loc[loc != padding_slot]
        uniq, counts = torch.unique(real, return_counts=True)
        if uniq.numel() != real.numel():
            dups = uniq[counts > 1]
            raise ValueError(f"{name} holds duplicate slots {dups[:8].tolist()}: which write wins "
                             f"would be undefined (only a padding slot may repeat)")
    return loc


def check_rows(x: object, name: str, tokens: int, heads: int, dim: int,
               device: torch.device, extra_dtypes: tuple[torch.dtype, ...] = ()) -> torch.Tensor:
    """Validate a ``[tokens, heads, dim]`` floating tensor on ``device``; ValueError otherwise."""
    want = f"[{tokens}, {heads}, {dim}]"
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor {want}, got {type(x).__name__}")
    if tuple(x.shape) != (tokens, heads, dim):
        raise ValueError(f"{name} has shape {tuple(x.shape)} ({x.dtype}); expected {want}")
    allowed = INPUT_DTYPES + extra_dtypes
    if x.dtype not in allowed:
        raise ValueError(f"{name} has dtype {x.dtype} (shape {tuple(x.shape)}); expected one of "
                         f"{', '.join(str(d) for d in allowed)}")
    if x.device != device:
        raise ValueError(f"{name} is on {x.device}, the pool is on {device}")
    return x
