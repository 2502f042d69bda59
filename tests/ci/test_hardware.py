"""ci.running.hardware: a tier's hardware identity (arch, device name, memory, features) is checked in full,
and `ci run --tier T` on a runner that does not match fails with exit 3 saying what it found."""

from __future__ import annotations

import os
import sys
import textwrap

import pytest

from ci.__main__ import main as ci_main
from ci.running.hardware import (
    OVERRIDE_ENV, Device, Hardware, capability_features, missing, parse_nvlink_status, parse_override, probe,
)
from ci.registry import Tier

H100 = "sm_90:name=NVIDIA H100 80GB HBM3:mem=79.6"
H200 = "sm_90:name=NVIDIA H200:mem=139.8"
B200 = "sm_100:name=NVIDIA B200:mem=178.4"


def tier(name: str, count: int, arch: str, features: tuple[str, ...] = (), device_name: str | None = None,
         memory: float | None = None) -> Tier:
    return Tier(name, "d", ("l",), count, arch, features, device_name, memory)


GPU_H100 = tier("gpu_h100", 1, "sm_90", ("fp8",), "H100", 75)
GPU_H200 = tier("gpu_h200", 1, "sm_90", ("fp8",), "H200", 130)
GPU_B200_X4 = tier("gpu_b200_x4", 4, "sm_100", ("fp8", "fp4", "nvlink"), "B200", 160)


def test_h100_and_h200_share_sm_90_but_not_their_identity():
    h100, h200 = parse_override(H100), parse_override(H200)
    assert h100.capabilities == h200.capabilities == ((9, 0),)
    assert missing(GPU_H100, h100) is None and missing(GPU_H200, h200) is None
    assert missing(GPU_H200, h100) == (
        "tier gpu_h200 needs 1 GPU with sm_90, name matching 'H200', >= 130 GiB (fp8); this machine has "
        "1x NVIDIA H100 80GB HBM3 (sm_90, 79.6 GiB, fp8): name 'NVIDIA H100 80GB HBM3' does not match 'H200', "
        "79.6 GiB < 130 GiB")
    assert missing(GPU_H100, h200) == (
        "tier gpu_h100 needs 1 GPU with sm_90, name matching 'H100', >= 75 GiB (fp8); this machine has "
        "1x NVIDIA H200 (sm_90, 139.8 GiB, fp8): name 'NVIDIA H200' does not match 'H100'")


@pytest.mark.parametrize("machine, gap", [
    ("sm_90:name=NVIDIA H200", "unknown memory < 130 GiB"),                       # memory must be known
    ("sm_90:mem=139.8", "name '(unknown)' does not match 'H200'"),               # so must the name
    ("sm_90:name=NVIDIA H200:mem=129.9", "129.9 GiB < 130 GiB"),                 # a cut-down part
    ("sm_90:name=NVIDIA H200:mem=139.8:features=", "no fp8"),                    # fp8 disabled/absent
    ("sm_100:name=NVIDIA H200:mem=139.8", "sm_100 is not sm_90"),                # exact arch
])
def test_every_part_of_the_identity_is_checked(machine, gap):
    assert missing(GPU_H200, parse_override(machine)).endswith(gap)


def test_name_pattern_is_a_case_insensitive_search():
    b = tier("gpu_b", 1, "sm_100", device_name="b200|gb200")
    assert missing(b, parse_override("sm_100:name=NVIDIA GB200")) is None
    assert missing(b, parse_override("sm_100:name=NVIDIA B300")) is not None


def test_features_are_checked_not_just_printed():
    assert capability_features((9, 0)) == {"fp8"} and capability_features((8, 0)) == frozenset()
    assert capability_features((8, 9)) == {"fp8"} and capability_features((10, 0)) == {"fp8", "fp4"}
    four = "sm_100x4:name=NVIDIA B200:mem=178.4"
    # Four B200 that are not NVLinked do not make the x4 tier.
    assert missing(GPU_B200_X4, parse_override(four)).endswith("4x NVIDIA B200 (sm_100, 178.4 GiB, fp4, fp8): no nvlink")
    assert missing(GPU_B200_X4, parse_override(four + ":features=fp8+fp4+nvlink")) is None
    three = parse_override("sm_100x3:name=NVIDIA B200:mem=178.4:features=fp8+fp4+nvlink")
    assert "needs 4 GPUs" in missing(GPU_B200_X4, three) and "3x NVIDIA B200" in missing(GPU_B200_X4, three)


def test_tiers_without_identity_keep_the_plain_rule():
    plain = tier("gpu_b200", 1, "sm_100", ("fp8", "fp4"))
    assert missing(plain, parse_override("sm_100")) is None
    assert missing(plain, parse_override("none")) == (
        "tier gpu_b200 needs 1 GPU with sm_100 (fp8, fp4); this machine has none (CI_HARDWARE_OVERRIDE=none)")
    assert missing(tier("cpu", 0, "cpu"), parse_override("none")) is None
    assert missing(tier("gpu_h100", 1, "sm_90"), parse_override("sm_100")) == (
        "tier gpu_h100 needs 1 GPU with sm_90; this machine has 1x sm_100 (fp4, fp8): sm_100 is not sm_90")


def test_parse_override_and_describe():
    hw = parse_override("sm_90, sm_100x4")
    assert hw.capabilities == ((9, 0),) + ((10, 0),) * 4
    assert hw.count((10, 0)) == 4 and hw.count((9, 0)) == 1 and hw.count((8, 0)) == 0
    assert hw.describe() == "1x sm_90 (fp8), 4x sm_100 (fp4, fp8)"
    assert parse_override("none").describe() == "none" and parse_override("").devices == ()
    two = parse_override("sm_90x2:name=NVIDIA H100 80GB HBM3:mem=79.6")
    assert two.devices == (Device((9, 0), "NVIDIA H100 80GB HBM3", 79.6, frozenset({"fp8"})),) * 2
    for bad in ("h100", "sm_100x0", "sm_100xx", "sm_1", "sm_90:gpu=H100", "sm_90:mem=lots", "sm_90:features=fp16",
                "sm_90:name", "sm_90:mem=79.6x2"):  # the count goes right after the arch
        with pytest.raises(ValueError, match="CI_HARDWARE_OVERRIDE"):
            parse_override(bad)


NVIDIA_SMI_NVLINK = """\
GPU 0: NVIDIA B200 (UUID: GPU-0f2c1a9e-5b7d-4c3e-9a1b-2d3e4f5a6b7c)
\t Link 0: 50 GB/s
\t Link 1: 50 GB/s
GPU 1: NVIDIA B200 (UUID: GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d)
\t Link 0: <inactive>
\t Link 1: <inactive>
GPU 2: NVIDIA B200 (UUID: GPU-AAAAAAAA-0000-1111-2222-333333333333)
\t Link 0: 26.562 GB/s
GPU 3: NVIDIA H100 PCIe (UUID: GPU-ffffffff-0000-1111-2222-333333333333)
"""


def test_nvlink_status_parsing():
    assert parse_nvlink_status(NVIDIA_SMI_NVLINK) == {
        "gpu-0f2c1a9e-5b7d-4c3e-9a1b-2d3e4f5a6b7c", "gpu-aaaaaaaa-0000-1111-2222-333333333333"}
    assert parse_nvlink_status("") == set()
    assert parse_nvlink_status("\t Link 0: 50 GB/s\n") == set()  # a link line before any GPU counts for none


def test_probe_uses_the_override_or_torch(monkeypatch):
    monkeypatch.setenv(OVERRIDE_ENV, "sm_90x2")
    assert probe().capabilities == ((9, 0), (9, 0))
    monkeypatch.delenv(OVERRIDE_ENV)
    torch = pytest.importorskip("torch")  # a third-party dependency, not first-party code
    found = probe()
    expected = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert len(found.devices) == expected
    for i, device in enumerate(found.devices):  # only on a GPU machine: the real identity
        props = torch.cuda.get_device_properties(i)
        assert device.name == props.name and device.capability == (props.major, props.minor)
        assert device.memory_gib == pytest.approx(props.total_memory / 2**30)


def test_hardware_is_hashable_and_grouped():
    hw = Hardware((Device((9, 0), "X"), Device((9, 0), "X"), Device((10, 0))))
    assert hw.kinds() == [(Device((9, 0), "X"), 2), (Device((10, 0)), 1)]


MISLABELLED = textwrap.dedent("""\
    version: 1
    tiers:
      cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
      gpu_h200:
        description: one H200
        runner_labels: [gpu-h200]
        gpu_count: 1
        arch: sm_90
        device_name: H200
        min_memory_gib: 130
        features: [fp8]
    tests:
      tests/test_one.py: {tiers: [cpu, gpu_h200], est_time: 1, timeout: 120, owner: t, status: active}
    """)


def test_ci_run_on_a_mislabelled_runner_exits_3_saying_what_it_found(tmp_path, monkeypatch, capfd):
    (tmp_path / "tests").mkdir()
    (tmp_path / "registry.yaml").write_text(MISLABELLED)
    (tmp_path / "tests" / "test_one.py").write_text("def test_one():\n    pass\n")
    monkeypatch.chdir(tmp_path.parent)  # an unrelated working directory: --root says where
    monkeypatch.setenv(OVERRIDE_ENV, H100)  # an H100 behind the gpu-h200 label
    assert ci_main(["--root", str(tmp_path), "run", "--tier", "gpu_h200", "--workers", "0"]) == 3
    err = capfd.readouterr().err
    assert ("refusing to run --tier gpu_h200 here: tier gpu_h200 needs 1 GPU with sm_90, name matching 'H200', "
            ">= 130 GiB (fp8); this machine has 1x NVIDIA H100 80GB HBM3 (sm_90, 79.6 GiB, fp8)") in err
    assert not (tmp_path / ".ci-reports").exists()  # no pytest was started


# -- probe() against a fake torch and a fake nvidia-smi; the count rule -----------------------------

GPU_H100_X2 = tier("gpu_h100_x2", 2, "sm_90", ("fp8",), "H100", 75)


def test_a_two_gpu_tier_needs_two_fitting_gpus_not_two_gpus():
    fits = Device((9, 0), "NVIDIA H100 80GB HBM3", 79.6, frozenset({"fp8"}))
    small = Device((9, 0), "NVIDIA H100 PCIe", 40.0, frozenset({"fp8"}))  # the right name, too little memory
    assert missing(GPU_H100_X2, Hardware((fits, fits))) is None
    gap = missing(GPU_H100_X2, Hardware((fits, small)))
    assert gap == ("tier gpu_h100_x2 needs 2 GPUs with sm_90, name matching 'H100', >= 75 GiB (fp8); this machine "
                   "has 1x NVIDIA H100 80GB HBM3 (sm_90, 79.6 GiB, fp8); "
                   "1x NVIDIA H100 PCIe (sm_90, 40.0 GiB, fp8): 40.0 GiB < 75 GiB")


def fake_torch(devices: list[tuple[str, int, int, int, str]]):
    """A stand-in for ``torch`` with CUDA devices (name, major, minor, total bytes, uuid)."""
    import types

    props = [types.SimpleNamespace(name=n, major=a, minor=b, total_memory=m, uuid=u) for n, a, b, m, u in devices]
    cuda = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: len(props),
                                 get_device_properties=lambda i: props[i])
    return types.SimpleNamespace(cuda=cuda)


def fake_nvidia_smi(tmp_path, monkeypatch, output: str) -> None:
    """A real executable named nvidia-smi first on PATH, printing ``output`` for ``nvlink --status``."""
    (tmp_path / "out.txt").write_text(output)
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n[ \"$1 $2\" = 'nvlink --status' ] && exec cat {tmp_path / 'out.txt'}\nexit 9\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ.get('PATH', '')}")


LINKED_PAIR = """\
GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-11111111-0000-1111-2222-333333333333)
\t Link 0: 26.562 GB/s
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-22222222-0000-1111-2222-333333333333)
\t Link 0: 26.562 GB/s
"""


def test_probe_reports_memory_in_gib_and_nvlink_for_exactly_two_linked_gpus(tmp_path, monkeypatch):
    monkeypatch.delenv(OVERRIDE_ENV, raising=False)
    fake_nvidia_smi(tmp_path, monkeypatch, LINKED_PAIR)
    monkeypatch.setitem(sys.modules, "torch", fake_torch([
        ("NVIDIA H100 80GB HBM3", 9, 0, 80 * 2**30, "11111111-0000-1111-2222-333333333333"),
        ("NVIDIA H100 80GB HBM3", 9, 0, 80 * 2**30, "GPU-22222222-0000-1111-2222-333333333333"),
    ]))
    found = probe()
    assert [d.memory_gib for d in found.devices] == [80.0, 80.0]  # GiB: 2**30 bytes, not 10**9
    assert [d.features for d in found.devices] == [frozenset({"fp8", "nvlink"})] * 2
    assert found.source == "torch.cuda; nvlink: nvidia-smi"
    assert missing(tier("nvl", 2, "sm_90", ("fp8", "nvlink"), "H100", 80), found) is None


def test_probe_asks_nvidia_smi_only_with_two_or_more_gpus(tmp_path, monkeypatch):
    monkeypatch.delenv(OVERRIDE_ENV, raising=False)
    fake_nvidia_smi(tmp_path, monkeypatch, LINKED_PAIR)
    monkeypatch.setitem(sys.modules, "torch", fake_torch([
        ("NVIDIA H100 80GB HBM3", 9, 0, 80 * 2**30, "11111111-0000-1111-2222-333333333333")]))
    found = probe()
    assert found.devices[0].features == frozenset({"fp8"}) and found.source == "torch.cuda; nvlink: one GPU"
