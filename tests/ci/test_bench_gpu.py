"""``python -m bench gpu`` (bench/gpu.py) without a GPU: the ``--interpret`` path end to end, a
planted difference in the torch reference found and named, the one-line exit 2 without CUDA, and
part a's counting of skips on a small registry whose GPU tier `ci run` runs for real (the fake
machine of CI_HARDWARE_OVERRIDE passes the hardware check, as in test_run.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from bench._gpu_tiers import fitting_tiers, run_tier
from ci.registry import load_registry
from test_bench_quick import ROOT, Table, read_tables
from test_run import FAST_CHILD, GPU_REGISTRY, PAIR, POOLS, make_repo

HEADERS = ("check", "detail", "passed", "failed", "skipped", "GB/s", "of copy", "goal", "verdict")
KERNELS = ("mx_block16 quantize", "mx_block16 dequantize", "nvfp4 quantize", "nvfp4 dequantize")
# cases per kernel under --interpret: 3 input dtypes (nvfp4 x 2 global scales); 3 output dtypes
# (nvfp4 x 3 global scales)
CASES = {"mx_block16 quantize": "3", "mx_block16 dequantize": "3", "nvfp4 quantize": "6", "nvfp4 dequantize": "9"}


def run_python(*args: str) -> subprocess.CompletedProcess[str]:
    # A worker that collected tests/quant has TRITON_INTERPRET=1 (its conftest sets it); the
    # command decides that itself (--interpret), so the child starts without it.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)


def the_table(out: str) -> Table:
    (table,) = read_tables(out)
    assert table.header == HEADERS
    return table


def test_interpret_runs_the_kernel_checks_on_the_cpu_and_prints_one_table() -> None:
    result = run_python("-m", "bench", "gpu", "--interpret")
    why = f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr[-3000:]}"
    assert result.returncode == 0, why
    table = the_table(result.stdout)
    assert table.row("GPU tiers")["verdict"] == "skipped", why
    assert "--interpret" in table.row("GPU tiers")["detail"]
    for kernel in KERNELS:
        exact = table.row(f"exact {kernel}")
        assert (exact["passed"], exact["failed"], exact["verdict"]) == (CASES[kernel], "0", "ok"), why
        blocks = int(exact["detail"].removesuffix(" blocks").replace(",", ""))
        assert blocks > 20 * int(CASES[kernel]) and blocks % 64, why  # more than one program, odd counts
        speed = table.row(f"speed {kernel}")
        assert float(speed["of copy"].rstrip("x")) > 0 and float(speed["GB/s"]) > 0, why
        assert speed["goal"] == ">= 0.8x" and speed["verdict"] in ("met", "below goal (reported)"), why
    header = result.stdout.splitlines()[1]
    assert header.startswith(f"torch {torch.__version__}, triton ") and "TRITON_INTERPRET=1" in header, why
    assert "Traceback" not in result.stderr and "RuntimeWarning" not in result.stderr, why


# The torch reference of nvfp4 quantize, wrong in one bit of one block past the first program of
# 64 blocks: the command must fail that kernel's row alone, and say which block differs.
PLANTED = textwrap.dedent("""\
    import sys
    import fp4kv.quant.nvfp4 as nvfp4
    from bench.gpu import main

    real = nvfp4.quantize_torch

    def wrong(x, g):
        packed, scales = real(x, g)
        packed.view(-1)[8 * 200] ^= 1
        return packed, scales

    nvfp4.quantize_torch = wrong
    sys.exit(main(["--interpret"]))
    """)


def test_a_planted_mismatch_fails_the_run_and_names_the_kernel() -> None:
    result = run_python("-c", PLANTED)
    why = f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr[-3000:]}"
    assert result.returncode == 1, why
    table = the_table(result.stdout)
    bad = table.row("exact nvfp4 quantize")
    assert (bad["passed"], bad["failed"], bad["verdict"]) == ("0", "6", "FAIL"), why
    assert all(table.row(f"exact {k}")["verdict"] == "ok" for k in KERNELS if k != "nvfp4 quantize"), why
    assert "part b: nvfp4 quantize MISMATCH: torch.bfloat16 input, g one: 1 of 533 blocks differ; " \
           "first: edge block 200: kernel [" in result.stdout, why


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_without_cuda_it_exits_2_with_one_line() -> None:
    result = run_python("-m", "bench", "gpu")
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("python -m bench gpu: no CUDA device: torch ")
    assert result.stderr.count("\n") == 1 and "--interpret" in result.stderr
    bad = run_python("-m", "bench", "gpu", "--registry=/nonexistent/registry.yaml")
    assert (bad.returncode, bad.stderr) == (2, "python -m bench gpu: no registry file /nonexistent/registry.yaml; "
                                               "give --registry=PATH\n")


def test_part_a_fails_a_gpu_tier_on_any_skip_outside_may_skip_files(tmp_path, monkeypatch) -> None:
    """`ci run` passes a GPU tier where some tests ran and others skipped; the check does not,
    unless every skipping file is marked ``may_skip: true``."""
    for key, value in FAST_CHILD.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    repo = make_repo(tmp_path / "repo")
    registry = repo / "registry.yaml"
    registry.write_text(GPU_REGISTRY)
    (repo / "tests" / "test_pools.py").write_text(POOLS)  # 3 tests, all skipped
    (repo / "tests" / "test_pair.py").write_text(PAIR)  # 1 test, skipped

    monkeypatch.setenv("CI_HARDWARE_OVERRIDE", "none")
    assert fitting_tiers(load_registry(registry))[0] == []
    monkeypatch.setenv("CI_HARDWARE_OVERRIDE", "sm_90")
    assert fitting_tiers(load_registry(registry)) == (["gpu_h100"], {})

    row = run_tier(registry, repo, "gpu_h100")
    assert (row.passed, row.failed, row.skipped, row.excused) == (3, 0, 4, 0), row
    assert row.problem == "4 skipped outside may_skip files (tests/test_pair.py, tests/test_pools.py)", row
    assert not row.ok and row.log_tail

    registry.write_text(GPU_REGISTRY.replace("status: active}\n  tests/test_pair", "status: active, may_skip: true}\n"
                                                                                   "  tests/test_pair"))
    row = run_tier(registry, repo, "gpu_h100")
    assert (row.skipped, row.excused, row.problem) == (4, 3, "1 skipped outside may_skip files (tests/test_pair.py)")

    registry.write_text(GPU_REGISTRY.replace("status: active}", "status: active, may_skip: true}"))
    row = run_tier(registry, repo, "gpu_h100")
    assert (row.passed, row.skipped, row.excused, row.ok, row.log_tail) == (3, 4, 4, True, ""), row
