"""Test setup for fp4kv.quant: Triton's CPU interpreter where there is no GPU.

TRITON_INTERPRET must be set before a kernel is decorated; `fp4kv.quant` decorates lazily on first
use (see fp4kv/quant/_jit.py), so setting it here works even if another test imported fp4kv
first. With CUDA present the variable is left alone and the same tests run compiled kernels.
Hypothesis settings live in the test files (a profile loaded here would change other areas' tests).
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
