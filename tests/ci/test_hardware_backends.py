"""`ci run --tier T` checks the hardware of T's backend through that backend's runtime: ROCm
(torch.version.hip, gcnArchName), XPU (torch.xpu), NPU (torch_npu), TPU (jax, else torch_xla).

The runtimes here are real modules: small stand-ins for ``torch``, ``torch_npu``, ``jax`` and
``torch_xla`` written under ``tmp_path`` and put first on the child process's ``PYTHONPATH``, each
describing the machine named by ``FAKE_MACHINE`` (JSON). Nothing in ``ci`` is patched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ci.tree_testutil import BACKEND_TIERS_BLOCK, CPU_TIER_BLOCK, write

ROOT = Path(__file__).resolve().parents[2]
GIB = 2**30

FAKE_TORCH = '''
import json, os, types
_machine = json.loads(os.environ["FAKE_MACHINE"])
version = types.SimpleNamespace(hip=_machine.get("hip"), cuda=None if _machine.get("hip") else "12.4")


class _Api:
    """torch.cuda's shape: is_available, device_count, get_device_name, get_device_properties."""

    def __init__(self, devices):
        self._props = [types.SimpleNamespace(**d) for d in devices]

    def is_available(self):
        return bool(self._props)

    def device_count(self):
        return len(self._props)

    def get_device_name(self, i):
        return self._props[i].name

    def get_device_properties(self, i):
        return self._props[i]


cuda = _Api(_machine.get("cuda", []))  # on a ROCm build ("hip" set) these are the AMD GPUs
if "xpu" in _machine:
    xpu = _Api(_machine["xpu"])
'''

FAKE_TORCH_NPU = '''
import json, os
import torch
torch.npu = torch._Api(json.loads(os.environ["FAKE_MACHINE"])["npu"])
'''

FAKE_JAX = '''
import json, os, types
_tpus = json.loads(os.environ["FAKE_MACHINE"])["tpu"]


def devices(platform=None):
    if platform == "tpu" and not _tpus:
        raise RuntimeError("Unknown backend: 'tpu' requested, but no platforms that are instances of tpu are present.")
    return [types.SimpleNamespace(device_kind=d["kind"], memory_stats=lambda d=d: {"bytes_limit": d["bytes"]})
            for d in _tpus]
'''

FAKE_XLA_RUNTIME = '''
import json, os
_machine = json.loads(os.environ["FAKE_MACHINE"])


def device_type():
    return "TPU" if _machine["xla_tpus"] else "CPU"


def global_runtime_device_count():
    return _machine["xla_tpus"]
'''

REGISTRY = "version: 1\ntiers:\n" + CPU_TIER_BLOCK + BACKEND_TIERS_BLOCK + """\
tests:
  tests/test_one.py:
    tiers: [cpu, h100, mi300, pvc, ascend, v5e]
    est_time: 1
    timeout: 120
    owner: o
    status: active
"""

H100 = {"name": "NVIDIA H100 80GB HBM3", "major": 9, "minor": 0, "total_memory": 80 * GIB, "uuid": "1"}
MI300X = {"name": "AMD Instinct MI300X", "major": 9, "minor": 4, "total_memory": 192 * GIB,
          "gcnArchName": "gfx942:sramecc+:xnack-"}
MI250 = {"name": "AMD Instinct MI250X", "major": 9, "minor": 0, "total_memory": 64 * GIB,
         "gcnArchName": "gfx90a:sramecc+:xnack-"}
MAX1550 = {"name": "Intel(R) Data Center GPU Max 1550", "total_memory": 128 * GIB}
ARC = {"name": "Intel(R) Arc(TM) A770 Graphics", "total_memory": 16 * GIB}
ASCEND = {"name": "Ascend910B2", "total_memory": 64 * GIB}
V5E = {"kind": "TPU v5 lite", "bytes": 16 * GIB}


@pytest.fixture
def machine(tmp_path):
    """Run ``ci run --tier T`` in a child process on a machine described by a JSON dict, with the
    given stand-in runtimes installed; returns (exit status, stderr)."""
    repo = tmp_path / "repo"
    write(repo, {"registry.yaml": REGISTRY, "tests/test_one.py": "def test_one():\n    pass\n"})
    runtimes = {"torch": FAKE_TORCH, "torch_npu": FAKE_TORCH_NPU, "jax": FAKE_JAX,
                "torch_xla": "", "torch_xla/runtime": FAKE_XLA_RUNTIME}

    def run(tier: str, description: dict, installed: tuple[str, ...] = ("torch",)) -> tuple[int, str]:
        site = tmp_path / f"site-{len(list(tmp_path.glob('site-*')))}"
        write(site, {f"{name}/__init__.py": runtimes[name] for name in installed})
        if "torch" not in installed:  # hide the venv's real torch too: a module that cannot be imported
            write(site, {"torch/__init__.py": "raise ImportError('no torch on this machine')\n"})
        env = {k: v for k, v in os.environ.items() if k not in ("CI_HARDWARE_OVERRIDE", "PYTHONPATH")}
        env.update(PYTHONPATH=f"{site}{os.pathsep}{ROOT}", FAKE_MACHINE=json.dumps(description))
        result = subprocess.run([sys.executable, "-m", "ci", "--root", str(repo), "run", "--tier", tier,
                                 "--workers", "0"], cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=120, check=False)
        assert "Traceback" not in result.stderr, result.stderr
        return result.returncode, result.stderr

    return run


REFUSED = "ci run: refusing to run --tier {} here: "


@pytest.mark.parametrize("tier, description, installed, found", [
    ("mi300", {"cuda": [H100]}, ("torch",),
     "tier mi300 needs 1 GPU with rocm gfx942, name matching 'MI300X', >= 180 GiB; this machine has "
     "1x NVIDIA H100 80GB HBM3 (sm_90, 80.0 GiB, fp8): a cuda device, not rocm"),
    ("h100", {"hip": "6.2", "cuda": [MI300X]}, ("torch",),
     "tier h100 needs 1 GPU with sm_90; this machine has 1x AMD Instinct MI300X (rocm, gfx942, 192.0 GiB): "
     "a rocm device, not cuda"),
    ("mi300", {"hip": "6.2", "cuda": [MI250]}, ("torch",),
     "tier mi300 needs 1 GPU with rocm gfx942, name matching 'MI300X', >= 180 GiB; this machine has "
     "1x AMD Instinct MI250X (rocm, gfx90a, 64.0 GiB): gfx90a is not gfx942, name 'AMD Instinct MI250X' does "
     "not match 'MI300X', 64.0 GiB < 180 GiB"),
    ("pvc", {"xpu": [ARC]}, ("torch",),
     "tier pvc needs 1 GPU with xpu, name matching 'Max 1550'; this machine has "
     "1x Intel(R) Arc(TM) A770 Graphics (xpu, 16.0 GiB): name 'Intel(R) Arc(TM) A770 Graphics' does not match "
     "'Max 1550'"),
    ("ascend", {"npu": [ASCEND]}, ("torch", "torch_npu"),
     "tier ascend needs 2 devices with npu, name matching '910B'; this machine has "
     "1x Ascend910B2 (npu, 64.0 GiB)"),
    ("ascend", {"cuda": [H100]}, ("torch",),
     "tier ascend needs 2 devices with npu, name matching '910B'; this machine has "
     "1x NVIDIA H100 80GB HBM3 (sm_90, 80.0 GiB, fp8): a cuda device, not npu"),
    ("h100", {"npu": [ASCEND, ASCEND]}, ("torch", "torch_npu"),
     "tier h100 needs 1 GPU with sm_90; this machine has 2x Ascend910B2 (npu, 64.0 GiB): a npu device, not cuda"),
    ("v5e", {"tpu": []}, ("torch", "jax"),
     "tier v5e needs 4 devices with tpu, name matching 'v5 lite'; this machine has none (jax: no TPU "
     "(Unknown backend: 'tpu' requested, but no platforms that are instances of tpu are present.))"),
    ("v5e", {}, ("torch",),
     "tier v5e needs 4 devices with tpu, name matching 'v5 lite'; this machine has none (tpu: neither jax nor "
     "torch_xla is importable, so TPUs cannot be checked here)"),
    ("v5e", {"xla_tpus": 4}, ("torch", "torch_xla", "torch_xla/runtime"),
     "this machine has 4x unnamed tpu device (tpu): name '(unknown)' does not match 'v5 lite'"),
    ("h100", {}, (),
     "tier h100 needs 1 GPU with sm_90; this machine has none (torch not installed)"),
])
def test_a_runner_of_another_backend_or_identity_exits_3_saying_what_it_found(machine, tier, description,
                                                                              installed, found):
    status, err = machine(tier, description, installed)
    assert status == 3, err
    [line] = [line for line in err.splitlines() if line.startswith(REFUSED.format(tier))]
    assert line.startswith(REFUSED.format(tier)) and line.endswith(found), line


@pytest.mark.parametrize("tier, description, installed", [
    ("mi300", {"hip": "6.2", "cuda": [MI300X]}, ("torch",)),
    ("pvc", {"xpu": [MAX1550]}, ("torch",)),
    ("ascend", {"npu": [ASCEND, ASCEND]}, ("torch", "torch_npu")),
    ("v5e", {"tpu": [V5E] * 4}, ("torch", "jax")),
])
def test_a_runner_that_fits_runs_the_tier(machine, tier, description, installed):
    status, err = machine(tier, description, installed)
    assert status == 0, err


def test_the_override_describes_other_backends_too():
    from ci.registry import Tier
    from ci.running.hardware import parse_override
    from ci.running.devices import missing

    mi300 = Tier("mi300", "d", ("l",), 8, "gfx942", device_name="MI300X", min_memory_gib=180)
    eight = parse_override("gfx942x8:name=AMD Instinct MI300X:mem=192")
    assert [(d.backend, d.arch, d.capability) for d in eight.devices] == [("rocm", "gfx942", None)] * 8
    assert missing(mi300, eight) is None
    assert missing(mi300, parse_override("gfx942x7:name=AMD Instinct MI300X:mem=192")).startswith(
        "tier mi300 needs 8 GPUs with rocm gfx942")
    npus = parse_override("npux2:name=Ascend910B2")
    assert [(d.backend, d.arch) for d in npus.devices] == [("npu", "")] * 2
    assert missing(Tier("a", "d", ("l",), 2, "ascend910b", backend="npu"), npus) is None
    assert missing(Tier("a", "d", ("l",), 1, "sm_90"), npus).endswith("2x Ascend910B2 (npu): a npu device, not cuda")
    for bad in ("gfx", "xpux0", "mlx", "npu2"):
        with pytest.raises(ValueError, match="CI_HARDWARE_OVERRIDE"):
            parse_override(bad)
