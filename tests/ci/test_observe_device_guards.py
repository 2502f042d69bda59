"""``ci observe`` on a CPU machine: the GPU tests that fail before any CUDA call or plain launch.

A tiny project is observed with a real pytest in a real ``ci observe`` (docs/depmaps.md,
"Observing an adopter's own command"): an autotuned Triton kernel (the autotuner benchmarks
on the device before any ``JITFunction.run``), a first-party op's ``assert x.is_cuda``, a
module that asks ``torch.cpu`` for a device property at collection, and a test whose tensors
come from the project's own ``torch.cuda.is_available()`` helper and then fail, or pass with
``device=infer_device()`` (device-adaptive, `ci.observe.adaptive`). Each must get ``devices`` and
`init --observed` must keep it manual; the controls (a plain failure, a torch-only test that asks
and drops the answer) must not. A second project pins the adaptive rule's edges: a conftest's
autouse teardown that asks after every test, and a test that only compares the answer, never count;
nor does a CPU ``torch.compile``, whose inductor asks CUDA for a cache key and catches the failure.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.ci.depmap_support import clean_env, write_project
from tests.ci.test_observe_command import DEVICE_FILES, REPO, _observe

AUTOTUNE = '@triton.autotune(configs=[triton.Config({"BLOCK": 4}), triton.Config({"BLOCK": 8})], key=["n"])'

DEVICE_HELPER = """\
import torch


def infer_device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def op(x):
    assert x.is_cuda
    return x
"""

FILES = {
    "pkg/__init__.py": "",
    "pkg/dev.py": DEVICE_HELPER,
    # the plain kernel of test_observe_command, autotuned over two configs (one would not benchmark)
    "tests/test_autotuned.py": DEVICE_FILES["tests/test_kernel.py"].replace("@triton.jit", AUTOTUNE + "\n@triton.jit")
                                                                   .replace("x, 4, BLOCK=4)", "x, 4)"),
    "tests/test_guard.py": "import torch\n\nfrom pkg.dev import op\n\n\ndef test_op():\n    op(torch.ones(2))\n",
    "tests/test_collect.py": "import torch\n\nBIG = getattr(torch, 'cpu').get_device_properties(0).total_memory > 1\n\n\n"
                             "def test_big():\n    assert BIG\n",
    "tests/test_asks.py": "import torch\n\nfrom pkg.dev import infer_device\n\ndevice = infer_device()\n\n\n"
                          "def test_sum():\n    assert torch.ones(2, device=device).sum().item() == 3\n",
    "tests/test_asks_passes.py": "import torch\n\nfrom pkg.dev import infer_device\n\n\n"
                                 "def test_sum():\n    assert torch.ones(2, device=infer_device()).sum().item() == 2\n",
    "tests/test_plain_failure.py": "import torch\n\n\ndef test_sum():\n    assert torch.ones(2).sum().item() == 3\n",
    "tests/test_cpu.py": "import torch\n\n\ndef test_cuda_absent_is_fine():\n    torch.cuda.is_available()\n"
                         "    assert torch.ones(3).sum().item() == 3\n",
}
GPU = {"tests/test_autotuned.py", "tests/test_guard.py", "tests/test_collect.py", "tests/test_asks.py",
       "tests/test_asks_passes.py"}
ADAPTIVE = "here: its GPU path needs a GPU runner"


def test_device_guards_autotuned_launches_and_failed_availability_queries_are_devices(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    if torch.cuda.is_available():
        pytest.skip("the evidence asserted is a CPU machine's")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the autotuner must look for a real driver
    root = tmp_path / "project"
    write_project(root, FILES)
    proc, facts = _observe(sys.executable, root, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "no:randomly", "--continue-on-collection-errors", "tests")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    tests = facts["tests"]
    evidence = {path: tests[path].get("device_evidence", []) for path in tests}
    assert {path for path, found in evidence.items() if found} == GPU, evidence
    assert tests["tests/test_autotuned.py"]["devices"] == ["triton"]
    assert evidence["tests/test_autotuned.py"][0].startswith(
        "triton autotune tests/test_autotuned.py:add_one failed: 0 active drivers"), evidence
    assert evidence["tests/test_guard.py"] == ["failed: AssertionError at assert x.is_cuda"]
    assert tests["tests/test_collect.py"]["outcome"] == "error"
    assert evidence["tests/test_collect.py"] == [
        "failed: AttributeError: module 'torch.cpu' has no attribute 'get_device_properties' "
        "at BIG = getattr(torch, 'cpu').get_device_properties(0).total_memory > 1"]
    assert evidence["tests/test_asks.py"] == [
        f"asks infer_device() at tests/test_asks.py:5 -> torch.cuda.is_available() False {ADAPTIVE}"]
    assert tests["tests/test_asks_passes.py"]["outcome"] == "passed"
    assert evidence["tests/test_asks_passes.py"] == [
        f"asks infer_device() at tests/test_asks_passes.py:7 -> torch.cuda.is_available() False {ADAPTIVE}"]

    (root / "registry.yaml").unlink()
    init = subprocess.run([sys.executable, "-m", "ci", "--root", str(root), "init", "--observed",
                           str(tmp_path / "facts.json")], env={**clean_env(), "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)
    assert init.returncode == 0, init.stdout + init.stderr
    assert {line.split(": ")[1] for line in init.stdout.splitlines() if line.startswith("observed gpu: ")} == GPU


ADAPTIVE_FILES = {
    "pkg/__init__.py": "",
    "pkg/dev.py": DEVICE_HELPER,
    # Liger-Kernel's test/conftest.py: an autouse teardown asks after every test
    "tests/conftest.py": "import pytest\nimport torch\n\n\n@pytest.fixture(autouse=True)\ndef clear_cache():\n"
                         "    yield\n    if torch.cuda.is_available():\n        torch.cuda.empty_cache()\n",
    "tests/test_module_device.py": "import torch\n\nfrom pkg.dev import infer_device\n\ndevice = infer_device()\n\n\n"
                                   "def test_sum():\n    assert torch.ones(2, device=device).sum().item() == 2\n",
    "tests/test_direct.py": "import torch\n\nDEVICE = 'cuda' if torch.cuda.is_available() else 'cpu'\n\n\n"
                            "def test_sum():\n    assert torch.ones(2, device=DEVICE).sum().item() == 2\n",
    "tests/test_compares.py": "import torch\n\nfrom pkg.dev import infer_device\n\n\ndef test_sum():\n"
                              "    if infer_device() == 'cpu':\n        assert torch.ones(2).sum().item() == 2\n",
    "tests/test_plain.py": "import torch\n\n\ndef test_sum():\n    assert torch.ones(2).sum().item() == 2\n",
    # inductor's cache key asks torch.cuda.current_device() and catches its failure on a CPU torch
    "tests/test_compiled.py": "import torch\n\n\ndef twice(x):\n    return x * 2 + 1\n\n\ndef test_compiled():\n"
                              "    assert torch.compile(twice)(torch.ones(2)).sum().item() == 6\n",
}


def test_a_test_that_chooses_its_device_by_asking_is_gpu_and_a_conftest_or_a_comparison_asking_is_not(
        tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("the evidence asserted is a CPU machine's")
    root = tmp_path / "project"
    write_project(root, ADAPTIVE_FILES)
    proc, facts = _observe(sys.executable, root, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "no:randomly", "tests")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tests = facts["tests"]
    assert {path: tests[path].get("outcome") for path in tests if path.startswith("tests/test_")} == dict.fromkeys(
        ["tests/test_module_device.py", "tests/test_direct.py", "tests/test_compares.py", "tests/test_plain.py",
         "tests/test_compiled.py"],
        "passed")
    evidence = {path: tests[path].get("device_evidence", []) for path in tests if tests[path].get("device_evidence")}
    assert evidence == {
        "tests/test_module_device.py": [
            f"asks infer_device() at tests/test_module_device.py:5 -> torch.cuda.is_available() False {ADAPTIVE}"],
        "tests/test_direct.py": [
            f"asks torch.cuda.is_available() at tests/test_direct.py:3 -> torch.cuda.is_available() False {ADAPTIVE}"],
    }

    (root / "registry.yaml").unlink()
    init = subprocess.run([sys.executable, "-m", "ci", "--root", str(root), "init", "--observed",
                           str(tmp_path / "facts.json")], env={**clean_env(), "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)
    assert init.returncode == 0, init.stdout + init.stderr
    gpu = sorted(line for line in init.stdout.splitlines() if line.startswith("observed gpu: "))
    assert [line.split(": ")[1] for line in gpu] == ["tests/test_direct.py", "tests/test_module_device.py"], init.stdout
    assert "asks infer_device() at tests/test_module_device.py:5" in gpu[1]
