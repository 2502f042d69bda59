"""The peer's mx_block16 math (SGLang), restated for the race in `bench.quant` and the tests that
pin where it differs from `fp4kv`.

Read from SGLang's ``FP4MXBlock16KVQuantizeUtil`` (alias ``BlockFP4KVQuantizeUtil``) in
``python/sglang/srt/layers/quantization/kvfp4_tensor.py`` (nokiaMS/sglang at commit 30cb848d4)
and written again here from its rule, not copied. There both functions are decorated with
``torch.compile``; `quantize` and `dequantize` below are the eager functions, and the race
compiles them itself (`compiled`), so eager and compiled time are both measured. Rule, as the
peer computes it:

* Quantize ``x [B, M, N]`` in blocks of 16 consecutive elements of the flattened ``M*N`` axis.
  Every step runs in the *input's dtype* (eagerly, each op's result is rounded to bf16/fp16):
  ``amax`` = max of ``|x|`` over the block; ``ratio = amax / 6``; ``ratio`` clamped below at the
  Python float ``1e-10`` (0 in fp16, where it underflows); ``e = ceil(log2(ratio))``; scale byte
  = ``e + 127`` converted to uint8 (for ``e = -inf`` or NaN that conversion is whatever the
  platform's float-to-int conversion gives).
* Scaled value ``y = x / 2^e`` (``exp2(e)``, input dtype). Sign code 8 where ``y < 0``; magnitude
  code = how many of the decision bounds ``0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0`` (an fp32
  tensor, so the comparison runs in fp32) are ``<= |y|``: ties go up, values above 6 saturate,
  NaN compares false everywhere (code 0).
* Packed byte = even element's code + (odd element's code << 4).
* Dequantize: split the nibbles, magnitude value from ``0, 0.5, 1, 1.5, 2, 3, 4, 6`` (fp32),
  negated where bit 3 is set, times ``exp2(byte - 127)`` in fp32, then cast to the output dtype.

Consequences the tests pin (``docs/fp4kv-peer.md``): a block holding NaN or Inf comes out as
zeros (NaN: every comparison false; Inf: ``x / inf`` is 0 or NaN); rounding of ``amax / 6`` and
of ``log2`` in the input dtype can give ``e = k`` for an amax just above ``6 * 2^k`` (the block
max then saturates); in fp16 a block whose ``amax / 6`` underflows to 0 gets ``e = -inf``.
"""

from __future__ import annotations

from typing import Callable

import torch

BLOCK = 16
DECISION_BOUNDS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
FLOOR = 1e-10  # the peer's lower clamp of amax / 6 (a Python float, cast to the input dtype)


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x [B, M, N]`` -> (packed uint8 ``[B, M, N/2]``, scale bytes uint8 ``[B, M*N/16]``), the
    peer's way: each step in ``x``'s dtype, eagerly rounded after every op (see the module)."""
    b, m, n = x.shape
    blocks = x.reshape(b, m * n // BLOCK, BLOCK)
    amax = blocks.abs().amax(dim=-1, keepdim=True)
    exponent = (amax / 6.0).clamp(min=FLOOR).log2().ceil()
    scale_bytes = (exponent + 127).squeeze(-1).to(torch.uint8)
    y = blocks / exponent.exp2()
    bounds = torch.tensor(DECISION_BOUNDS, dtype=torch.float32, device=x.device)
    magnitude = (y.abs().unsqueeze(-1) >= bounds).sum(dim=-1).to(torch.uint8)
    codes = (magnitude + (y < 0).to(torch.uint8) * 8).reshape(b, m, n)
    return codes[..., 0::2] + (codes[..., 1::2] << 4), scale_bytes


def dequantize(packed: torch.Tensor, scale_bytes: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """packed ``[B, M, N/2]``, scale bytes ``[B, M*N/16]`` -> ``[B, M, N]`` of ``dtype``, the peer's
    way: values in fp32, times ``2^(byte - 127)`` in fp32, one cast at the end."""
    b, m, half = packed.shape
    codes = torch.stack((packed & 0x0F, packed >> 4), dim=-1).reshape(b, m, 2 * half)
    values = torch.tensor(MAGNITUDES, dtype=torch.float32, device=packed.device)[(codes & 7).long()]
    values = torch.where((codes & 8) != 0, -values, values)
    scale = (scale_bytes.float() - 127).exp2().unsqueeze(-1)
    return (values.reshape(b, m * 2 * half // BLOCK, BLOCK) * scale).reshape(b, m, 2 * half).to(dtype)


def compiled() -> tuple[Callable[..., tuple[torch.Tensor, torch.Tensor]], Callable[..., torch.Tensor]]:
    """(quantize, dequantize) under ``torch.compile`` (default options, as the peer decorates
    them). Each compiles on its first call for a new shape/dtype; time that call separately."""
    return torch.compile(quantize), torch.compile(dequantize)
