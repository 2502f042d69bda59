"""`ci init` never makes a GPU test active on its cpu tier, tallies why, and points a tree that
registers suites in-source (``register_*_ci``) at `ci import-suites` with the command to run.

Each fixture file is hand-written to one side of a rule of `ci.adopt.gpu_tests`; the expected
verdicts are written out here, not derived from the reader."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ci.__main__ import main as ci_main
from ci.adopt.starter import UNREGISTERED_REASON
from ci.registry import Status, load_registry
from sglang_like import write

CONSOLE_SCRIPT = Path(sys.executable).with_name("fp4kv-ci")
BODY = "\n\ndef test_ok():\n    assert True\n"

GPU = {  # file -> the evidence init must name
    "tests/test_reg_cuda.py": ("register_cuda_ci(est_time=10, suite='stage-b-test-1-gpu-small')\n", "registers with register_cuda_ci at tests/test_reg_cuda.py:1"),
    "tests/test_reg_amd.py": ("x = 1\nregister_amd_ci(5, 'stage-a-amd')\n", "registers with register_amd_ci at tests/test_reg_amd.py:2"),
    "tests/test_sync.py": ("import torch\n\n\ndef test_s():\n    torch.cuda.synchronize()\n", "uses CUDA: torch.cuda.synchronize at tests/test_sync.py:5"),
    "tests/test_method.py": ("def test_m(x):\n    x.cuda()\n", "uses CUDA: .cuda() at tests/test_method.py:2"),
    "tests/test_device.py": ("import torch\nT = torch.zeros(2, device='cuda:1')\n", "uses CUDA: a 'cuda:1' device argument at tests/test_device.py:2"),
    "tests/test_to.py": ("def f(t):\n    return t.to('cuda')\n", "uses CUDA: a 'cuda' device argument at tests/test_to.py:2"),
    "tests/test_cupy.py": ("import cupy.linalg\n", "uses CUDA: import cupy.linalg at tests/test_cupy.py:1"),
    "tests/test_numba.py": ("from numba import cuda\n", "uses CUDA: import numba.cuda at tests/test_numba.py:1"),
}
CPU = {  # each one step short of a rule
    "tests/test_plain.py": "",
    "tests/test_guard.py": "import torch\nimport unittest\n\n\n@unittest.skipIf(not torch.cuda.is_available(), 'no GPU')\n"
                           "def test_g():\n    assert torch.cuda.device_count() >= 0\n",
    "tests/test_reg_both.py": "register_cuda_ci(10, 'gpu-suite')\nregister_cpu_ci(5, 'cpu-suite')\n",  # a cpu registration wins
    "tests/test_reg_cpu.py": "register_cpu_ci(est_time=5, suite='base-a-test-cpu')\n",
    "tests/test_compare.py": "def test_c(device='cpu'):\n    assert device != 'cuda'\n",  # a comparison, not an argument
    "tests/test_cuda_x.py": "def f(t):\n    return t.to('cuda:x')\n",          # not cuda:N
    "tests/test_cudaq.py": "import cudaq\nfrom numba import jit\n",                # not cuda., not numba.cuda
    "tests/test_nested.py": "def f():\n    register_cuda_ci(10, 'gpu-suite')\n",    # not module level
    "tests/test_other_torch.py": "import torch\nx = torch.backends.cuda.matmul\n",  # torch.backends.cuda is not torch.cuda
    "tests/test_relative.py": "from .cuda import helpers\n",                        # the project's own ./cuda.py
    "tests/test_broken.py": "def f(:\n    x.cuda()\n",                              # does not parse: lint's to report
}


REGISTERED_CPU = ("tests/test_reg_both.py", "tests/test_reg_cpu.py")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    files = {path: source + BODY for path, (source, _) in GPU.items()}
    files.update({path: source + BODY for path, source in CPU.items()})
    files["tests/test_broken.py"] = CPU["tests/test_broken.py"]
    write(tmp_path, files)
    return tmp_path


def test_gpu_tests_are_manual_with_the_evidence_and_tallied(repo: Path, capsys) -> None:
    assert ci_main(["--root", str(repo), "init"]) == 0
    out = capsys.readouterr().out
    tests = load_registry(repo / "registry.yaml").tests
    for path, (_, why) in GPU.items():
        entry = tests[path]
        assert entry.status is Status.MANUAL and entry.tiers == ("cpu",), path
        assert entry.reason == f"a GPU test ({why}); give it a GPU tier, the cpu tier cannot run it"
    # this tree registers suites in-source: a file with a cpu registration runs on cpu; one that
    # registers nothing is parked (its CI runs only registered files), and not called a GPU test
    for path in CPU:
        entry = tests[path]
        if path in REGISTERED_CPU:
            assert entry.status is Status.ACTIVE, path
        else:
            assert (entry.status, entry.reason) == (Status.MANUAL, UNREGISTERED_REASON), path
    assert out.startswith(f"wrote {repo / 'registry.yaml'}: 19 test file(s) on tier cpu, 8 of them GPU tests "
                          f"kept manual, 9 unregistered kept manual; test roots tests,")
    assert ("unregistered: 9 test file(s) are manual: they call no register_*_ci while 4 file(s) do, and this "
            "repository's CI runs only registered files (e.g. tests/") in out
    assert ("gpu: 8 test file(s) are manual, not run on the cpu tier: 2 register a GPU backend in-source "
            "(register_amd_ci 1, register_cuda_ci 1); 6 use CUDA (e.g. ") in out
    # in-source registrations: the files, their suites, and the command that places them
    assert ("import: 4 test file(s) register suites in-source (register_*_ci(...)), 5 suite(s): base-a-test-cpu (1), "
            "cpu-suite (1), gpu-suite (1), stage-a-amd (1), stage-b-test-1-gpu-small (1). Their suites") in out
    assert out.endswith(f"  python -m ci --root {repo} import-suites --tier-map 'SUITE=TIER' ... "
                        f"--output {repo / 'registry.yaml'} --force\n")


def test_the_command_init_names_runs(repo: Path, tmp_path_factory) -> None:
    init = subprocess.run([str(CONSOLE_SCRIPT), "--root", str(repo), "init"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path_factory.mktemp("elsewhere"))
    assert init.returncode == 0, init.stderr
    command = init.stdout.splitlines()[-1].split()
    assert command[:2] == ["fp4kv-ci", "--root"]
    assert command[3:7] == ["import-suites", "--tier-map", "'SUITE=TIER'", "..."]
    # the placeholder filled in with a tier the starter defines
    command = [str(CONSOLE_SCRIPT), *command[1:5], "stage-*=cpu", *command[7:]]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "summary: registrations read from tests/**/*.py (test root)" in result.stdout


def test_without_registrations_only_the_cuda_rule_decides(tmp_path: Path, capsys) -> None:
    """No file registers a suite: nothing is parked for being unregistered; each CPU case one step
    short of the CUDA rule stays active, each CUDA use is manual."""
    cuda = {p: src for p, (src, _) in GPU.items() if "register_" not in src}
    plain = {p: src for p, src in CPU.items() if "register_" not in src and p != "tests/test_broken.py"}
    write(tmp_path, {p: src + BODY for p, src in {**cuda, **plain}.items()})
    assert ci_main(["--root", str(tmp_path), "init"]) == 0
    out = capsys.readouterr().out
    tests = load_registry(tmp_path / "registry.yaml").tests
    assert {p for p, e in tests.items() if e.status is Status.ACTIVE} == set(plain)
    assert {p for p, e in tests.items() if e.status is Status.MANUAL} == set(cuda)
    assert "unregistered" not in out and "import:" not in out


def test_a_tree_without_gpu_tests_or_registrations_prints_neither(tmp_path: Path, capsys) -> None:
    write(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n"})
    assert ci_main(["--root", str(tmp_path), "init"]) == 0
    out = capsys.readouterr().out
    assert out == (f"wrote {tmp_path / 'registry.yaml'}: 1 test file(s) on tier cpu; test roots tests, patterns "
                   f"test_*.py, first-party (discovered by lint)\n")


def test_after_init_lint_is_clean(repo: Path, tmp_path_factory) -> None:
    (repo / "tests/test_broken.py").unlink()
    (repo / "tests/test_relative.py").unlink()  # its ./cuda.py is not there
    assert ci_main(["--root", str(repo), "init"]) == 0
    lint = subprocess.run([str(CONSOLE_SCRIPT), "--root", str(repo), "lint"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path_factory.mktemp("elsewhere"))
    assert (lint.returncode, lint.stdout) == (0, ""), lint.stdout + lint.stderr


def test_a_test_root_without_registrations_keeps_its_files(tmp_path: Path, capsys) -> None:
    """Parking is per test root: ``tests/`` registers suites, ``gateway/tests/`` (its own workflow)
    registers nothing, so only ``tests/``'s unregistered file is parked."""
    write(tmp_path, {
        "pytest.ini": "[pytest]\ntestpaths = tests gateway/tests\n",
        "tests/test_reg.py": "register_cpu_ci(5, 'base-a-test-cpu')\n" + BODY,
        "tests/test_parked.py": BODY,
        "gateway/tests/test_router.py": BODY,
    })
    assert ci_main(["--root", str(tmp_path), "init"]) == 0
    out = capsys.readouterr().out
    tests = load_registry(tmp_path / "registry.yaml").tests
    assert {p: e.status for p, e in tests.items()} == {
        "tests/test_reg.py": Status.ACTIVE, "tests/test_parked.py": Status.MANUAL,
        "gateway/tests/test_router.py": Status.ACTIVE}, out
    assert "unregistered: 1 test file(s) are manual" in out
