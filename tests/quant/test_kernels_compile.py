"""Every Triton kernel compiles for the GPU tiers' architectures, here, without a GPU.

The interpreter (used by the other kernel tests on CPU) runs the kernels' Python through numpy;
it never sees Triton's compiler. So each specialization the launchers use (input dtype, output
kind) is compiled ahead of time (kernel_ptx.py, in a process without TRITON_INTERPRET) for
sm_90 (gpu_h100, gpu_h200) and sm_100 (gpu_b200) down to PTX and cubin, and the PTX is checked
for what exactness relies on: nvfp4 quantize divides with ``div.rn.f32`` (never an approximate
``div.approx``/``div.full``/``rcp.approx``); nvfp4 dequantize to bf16/fp16 rounds its exact fp64
product with ``cvt.rn.f32.f64`` before the round-to-odd step; nothing flushes subnormals
(``.ftz``: E4M3 subnormal block scales and tiny outputs must survive); no fp32 multiply-add is
fused (an ``fma.rn.f32`` would round differently from the torch path).

Seen in this PTX and accepted: for fp32 output LLVM folds ``fp32(fp64(a) * fp64(b))`` into one
``mul.f32`` (an identity: the fp64 product of two fp32 values is exact, so both round once), and
fusion turns ``exact - fp64(hi)`` into an ``fma.rn.f64`` of the same exact product (also exact).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ARCHS = {"sm_90": 90, "sm_100": 100}  # the `arch` of the GPU tiers registered for the kernel tests
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@pytest.fixture(scope="module")
def builds() -> list[dict[str, object]]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    done = subprocess.run([sys.executable, str(HERE / "kernel_ptx.py"), *map(str, ARCHS.values())],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_every_specialization_compiles_for_every_gpu_tier_arch(builds):
    labels = {b["label"] for b in builds}
    assert len(labels) == 12  # 2 recipes x (3 input dtypes + 3 output dtypes)
    assert {(b["label"], b["arch"]) for b in builds} == {(label, a) for label in labels for a in ARCHS.values()}
    failed = [f"{b['label']} sm_{b['arch']}: {b['error']}" for b in builds if b["error"]]
    assert failed == []
    assert all(b["cubin_bytes"] > 0 for b in builds)


def test_compiled_arithmetic_is_exact(builds):
    for b in builds:
        ops, where = set(b["ptx_ops"]), f"{b['label']} on sm_{b['arch']}"
        assert not any(".ftz" in op for op in ops), f"{where} flushes subnormals: {sorted(ops)}"
        assert not any(op.startswith(("div.approx", "div.full", "rcp.approx")) for op in ops), f"{where}: {sorted(ops)}"
        assert "fma.rn.f32" not in ops, f"{where} fuses an fp32 multiply-add"
        if str(b["label"]).startswith("nvfp4_quantize"):
            assert "div.rn.f32" in ops, where
        if b["label"] in ("nvfp4_dequantize[bf16]", "nvfp4_dequantize[fp16]"):
            assert "cvt.rn.f32.f64" in ops, where
