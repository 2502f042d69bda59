"""What GPUs this machine has, and whether a registry `Tier` can run here.

A tier is satisfied when at least ``tier.gpu_count`` CUDA devices each fit everything the tier
names: the exact compute capability (``arch``: ``sm_100`` -> 10.0), the ``device_name`` pattern
(searched case-insensitively in the device name: H100 and H200 are both sm_90, only the name and
memory tell them apart), ``min_memory_gib`` (total memory, GiB = 2**30 bytes) and every feature:

* ``fp8``: compute capability 8.9 or newer; ``fp4``: 10.0 or newer;
* ``nvlink``: the device has at least one active NVLink link (``nvidia-smi nvlink --status``,
  asked only on machines with two or more GPUs; without nvidia-smi no device counts as linked).

The ``cpu`` tier is always satisfied. torch is imported lazily, only when a GPU tier is actually
checked, so linting and CPU-only test runs never pay for it; no torch or no CUDA means no GPUs.

For tests only: the environment variable ``CI_HARDWARE_OVERRIDE`` replaces the probe with a fake
machine: comma-separated items ``sm_<cc>[x<count>][:name=<device name>][:mem=<GiB>]
[:features=<f1+f2>]``, or ``none``. Example: ``sm_90x2:name=NVIDIA H100 80GB HBM3:mem=79.6`` (two
H100s). Without ``features=`` a fake device has its capability's features (fp8/fp4) and no
nvlink; without ``name=`` or ``mem=`` it has none, so it fits no tier that asks for them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass

from ci.registry import FEATURES, Tier, sm_capability

OVERRIDE_ENV = "CI_HARDWARE_OVERRIDE"


def capability_features(capability: tuple[int, int]) -> frozenset[str]:
    """The features a compute capability implies (fp8 from 8.9, fp4 from 10.0)."""
    return frozenset(f for f, oldest in FEATURES.items() if oldest is not None and capability >= oldest)


@dataclass(frozen=True)
class Device:
    """One CUDA device: compute capability, name (``""`` unknown), total memory in GiB (None
    unknown) and the features found on it."""

    capability: tuple[int, int]
    name: str = ""
    memory_gib: float | None = None
    features: frozenset[str] = frozenset()

    def describe(self) -> str:
        """``NVIDIA H100 80GB HBM3 (sm_90, 79.6 GiB, fp8)`` or, unnamed, ``sm_100 (fp4, fp8)``."""
        arch = f"sm_{self.capability[0]}{self.capability[1]}"
        details = [arch] if self.name else []
        if self.memory_gib is not None:
            details.append(f"{self.memory_gib:.1f} GiB")
        details += sorted(self.features)
        head = self.name or arch
        return f"{head} ({', '.join(details)})" if details else head

    def gaps(self, tier: Tier) -> list[str]:
        """What this device lacks for ``tier``, in words; empty when it fits."""
        out: list[str] = []
        if self.capability != sm_capability(tier.arch):
            out.append(f"sm_{self.capability[0]}{self.capability[1]} is not {tier.arch}")
        if tier.device_name is not None and not re.search(tier.device_name, self.name, re.IGNORECASE):
            out.append(f"name {self.name or '(unknown)'!r} does not match {tier.device_name!r}")
        if tier.min_memory_gib is not None and (self.memory_gib is None or self.memory_gib < tier.min_memory_gib):
            have = "unknown memory" if self.memory_gib is None else f"{self.memory_gib:.1f} GiB"
            out.append(f"{have} < {tier.min_memory_gib:g} GiB")
        out += [f"no {f}" for f in tier.features if f not in self.features]
        return out


@dataclass(frozen=True)
class Hardware:
    """The local accelerators and where that knowledge came from."""

    devices: tuple[Device, ...] = ()
    source: str = "probe"

    @property
    def capabilities(self) -> tuple[tuple[int, int], ...]:
        return tuple(d.capability for d in self.devices)

    def count(self, capability: tuple[int, int]) -> int:
        """How many devices have exactly this compute capability."""
        return sum(1 for d in self.devices if d.capability == capability)

    def kinds(self) -> list[tuple[Device, int]]:
        """Each distinct device with how many of it, by capability, name and memory."""
        counts = Counter(self.devices)
        return [(d, counts[d]) for d in sorted(counts, key=lambda d: (d.capability, d.name, d.memory_gib or 0.0))]

    def describe(self) -> str:
        """``none`` or e.g. ``1x sm_90 (fp8), 4x NVIDIA B200 (sm_100, 178.4 GiB, fp4, fp8)``."""
        return ", ".join(f"{n}x {d.describe()}" for d, n in self.kinds()) or "none"


def parse_override(text: str) -> Hardware:
    """Parse a fake machine (see the module docstring). Raises ValueError naming the bad item."""
    devices: list[Device] = []
    for item in (part.strip() for part in text.split(",")):
        if item.lower() in ("", "none", "cpu"):
            continue
        head, *attributes = item.split(":")
        arch, sep, count_text = head.strip().partition("x")
        try:
            capability = sm_capability(arch)
            count = int(count_text) if sep else 1
        except ValueError:
            raise ValueError(
                f"{OVERRIDE_ENV}: bad item {item!r}; expected 'sm_<major><minor>[x<count>]' such as 'sm_100x4', "
                f"optionally followed by ':name=...', ':mem=<GiB>', ':features=fp8+nvlink', or 'none'") from None
        if count < 1:
            raise ValueError(f"{OVERRIDE_ENV}: bad item {item!r}; the count must be >= 1")
        fields = {"name": "", "mem": None, "features": None}
        for attribute in attributes:
            key, eq, value = attribute.partition("=")
            if not eq or key not in fields:
                raise ValueError(f"{OVERRIDE_ENV}: bad attribute {attribute!r} in {item!r}; "
                                 f"expected name=..., mem=<GiB> or features=<a+b>")
            fields[key] = value
        features = (capability_features(capability) if fields["features"] is None
                    else frozenset(f for f in fields["features"].split("+") if f))
        unknown = sorted(features - FEATURES.keys())
        if unknown:
            raise ValueError(f"{OVERRIDE_ENV}: unknown feature(s) {', '.join(unknown)} in {item!r}")
        try:
            memory = None if fields["mem"] is None else float(fields["mem"])
        except ValueError:
            raise ValueError(f"{OVERRIDE_ENV}: mem must be a number of GiB in {item!r}") from None
        devices += [Device(capability, fields["name"], memory, features)] * count
    return Hardware(tuple(devices), source=f"{OVERRIDE_ENV}={text}")


_NVLINK_GPU = re.compile(r"^GPU (\d+): .*\(UUID: (GPU-[0-9A-Fa-f-]+)\)\s*$")
_NVLINK_UP = re.compile(r"^\s+Link \d+: [0-9.]+ [GMK]?B/s\s*$")


def parse_nvlink_status(text: str) -> set[str]:
    """UUIDs (lower case, ``gpu-...``) of the GPUs with at least one active link, from the output
    of ``nvidia-smi nvlink --status``: per GPU a ``GPU 0: NAME (UUID: GPU-...)`` line, then one
    ``Link N: 26.562 GB/s`` line per active link (``Link N: <inactive>`` otherwise)."""
    linked: set[str] = set()
    current: str | None = None
    for line in text.splitlines():
        header = _NVLINK_GPU.match(line)
        if header:
            current = header.group(2).lower()
        elif current is not None and _NVLINK_UP.match(line):
            linked.add(current)
    return linked


def _nvlinked_uuids() -> tuple[set[str], str]:
    """(linked GPU UUIDs, a note for `Hardware.source`) from nvidia-smi; empty when unavailable."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return set(), "nvlink: nvidia-smi not found"
    try:
        result = subprocess.run([exe, "nvlink", "--status"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return set(), f"nvlink: nvidia-smi failed ({exc})"
    if result.returncode != 0:
        return set(), f"nvlink: nvidia-smi exited {result.returncode}"
    return parse_nvlink_status(result.stdout), "nvlink: nvidia-smi"


def probe() -> Hardware:
    """The local machine: `CI_HARDWARE_OVERRIDE` if set, else torch's view of CUDA devices."""
    override = os.environ.get(OVERRIDE_ENV)
    if override is not None:
        return parse_override(override)
    try:
        import torch  # lazy: only GPU tiers need it
    except ImportError:
        return Hardware((), source="torch not installed")
    if not torch.cuda.is_available():
        return Hardware((), source="torch: CUDA not available")
    count = torch.cuda.device_count()
    linked, note = _nvlinked_uuids() if count >= 2 else (set(), "nvlink: one GPU")
    devices = []
    for i in range(count):
        props = torch.cuda.get_device_properties(i)
        capability = (props.major, props.minor)
        uuid = getattr(props, "uuid", None)
        features = capability_features(capability)
        if uuid is not None and f"gpu-{str(uuid).lower().removeprefix('gpu-')}" in linked:
            features |= {"nvlink"}
        devices.append(Device(capability, props.name, props.total_memory / 2**30, features))
    return Hardware(tuple(devices), source=f"torch.cuda; {note}")


def requirement(tier: Tier) -> str:
    """What one GPU of ``tier`` must be: ``sm_90, name matching 'H200', >= 130 GiB (fp8)``."""
    parts = [tier.arch]
    if tier.device_name is not None:
        parts.append(f"name matching {tier.device_name!r}")
    if tier.min_memory_gib is not None:
        parts.append(f">= {tier.min_memory_gib:g} GiB")
    features = f" ({', '.join(tier.features)})" if tier.features else ""
    return ", ".join(parts) + features


def missing(tier: Tier, hardware: Hardware) -> str | None:
    """None when ``tier`` can run on ``hardware``; otherwise a sentence saying what it needs, what
    this machine has and, per kind of device here, why it does not count.

    Example: ``tier gpu_h200 needs 1 GPU with sm_90, name matching 'H200', >= 130 GiB (fp8); this
    machine has 1x NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB, fp8): name 'NVIDIA H100 80GB HBM3' does
    not match 'H200', 79.1 GiB < 130 GiB``. Kinds of device are separated by ``;``.
    """
    if not tier.needs_gpu:
        return None
    fitting = sum(1 for d in hardware.devices if not d.gaps(tier))
    if fitting >= tier.gpu_count:
        return None
    gpus = "GPU" if tier.gpu_count == 1 else "GPUs"
    found = "; ".join(f"{n}x {d.describe()}" + (f": {', '.join(d.gaps(tier))}" if d.gaps(tier) else "")
                      for d, n in hardware.kinds()) or "none"
    return f"tier {tier.name} needs {tier.gpu_count} {gpus} with {requirement(tier)}; this machine has {found}"


class LazyHardware:
    """Probes once, on first use (so a run with only CPU tiers never imports torch)."""

    def __init__(self) -> None:
        self._hardware: Hardware | None = None

    def get(self) -> Hardware:
        if self._hardware is None:
            self._hardware = probe()
        return self._hardware

    def missing(self, tier: Tier) -> str | None:
        """Like `missing`, probing only if ``tier`` needs a GPU."""
        return None if not tier.needs_gpu else missing(tier, self.get())


__all__ = ["OVERRIDE_ENV", "Device", "Hardware", "LazyHardware", "capability_features", "missing",
           "parse_nvlink_status", "parse_override", "probe", "requirement"]
