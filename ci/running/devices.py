"""What a machine's accelerators are, and whether a registry `Tier` can run on them.

A tier is satisfied when at least ``tier.gpu_count`` devices each fit everything the tier names:
its ``backend`` (a ROCm GPU never counts for a CUDA tier, nor the reverse), the exact ``arch``
(cuda: the compute capability, ``sm_100`` -> 10.0; rocm: the gfx target, ``gfx942``; xpu, npu and
tpu expose no architecture name, so their arch label is not compared), the ``device_name`` pattern
(searched case-insensitively in the device name: H100 and H200 are both sm_90, only the name and
memory tell them apart), ``min_memory_gib`` (total memory, GiB = 2**30 bytes) and every feature
(CUDA only: ``fp8`` from compute capability 8.9, ``fp4`` from 10.0, ``nvlink`` an active link).

Nothing here looks at the machine: `ci.running.hardware` and `ci.running.accelerators` probe it.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from ci.registry import FEATURES, Tier, sm_capability


def capability_features(capability: tuple[int, int]) -> frozenset[str]:
    """The features a compute capability implies (fp8 from 8.9, fp4 from 10.0)."""
    return frozenset(f for f, oldest in FEATURES.items() if oldest is not None and capability >= oldest)


@dataclass(frozen=True)
class Device:
    """One accelerator: its CUDA compute capability (None on other backends), name (``""``
    unknown), total memory in GiB (None unknown), the features found on it, its ``backend`` and
    ``arch`` (``sm_90`` from the capability; a ROCm ``gfx942``; ``""`` where the runtime names none)."""

    capability: tuple[int, int] | None
    name: str = ""
    memory_gib: float | None = None
    features: frozenset[str] = frozenset()
    backend: str = "cuda"
    arch: str = ""

    def __post_init__(self) -> None:
        if self.capability is not None and not self.arch:
            object.__setattr__(self, "arch", f"sm_{self.capability[0]}{self.capability[1]}")

    def describe(self) -> str:
        """``NVIDIA H100 80GB HBM3 (sm_90, 79.6 GiB, fp8)``, unnamed ``sm_100 (fp4, fp8)``; other
        backends say theirs: ``AMD Instinct MI300X (rocm, gfx942, 191.5 GiB)``."""
        details = [] if self.backend == "cuda" else [self.backend]
        if self.name and self.arch:
            details.append(self.arch)
        if self.memory_gib is not None:
            details.append(f"{self.memory_gib:.1f} GiB")
        details += sorted(self.features)
        head = self.name or self.arch or f"unnamed {self.backend} device"
        return f"{head} ({', '.join(details)})" if details else head

    def gaps(self, tier: Tier) -> list[str]:
        """What this device lacks for ``tier``, in words; empty when it fits."""
        if self.backend != tier.backend:
            return [f"a {self.backend} device, not {tier.backend}"]
        out: list[str] = []
        if tier.backend == "cuda" and self.capability != sm_capability(tier.arch):
            out.append(f"{self.arch} is not {tier.arch}")
        elif tier.backend == "rocm" and self.arch != tier.arch:
            out.append(f"{self.arch or 'an unknown gfx target'} is not {tier.arch}")
        if tier.device_name is not None and not re.search(tier.device_name, self.name, re.IGNORECASE):
            out.append(f"name {self.name or '(unknown)'!r} does not match {tier.device_name!r}")
        if tier.min_memory_gib is not None and (self.memory_gib is None or self.memory_gib < tier.min_memory_gib):
            have = "unknown memory" if self.memory_gib is None else f"{self.memory_gib:.1f} GiB"
            out.append(f"{have} < {tier.min_memory_gib:g} GiB")
        out += [f"no {f}" for f in tier.features if f not in self.features]
        return out


@dataclass(frozen=True)
class Hardware:
    """The local accelerators and where that knowledge came from (``source``: what was asked,
    and why nothing was found where nothing was)."""

    devices: tuple[Device, ...] = ()
    source: str = "probe"

    @property
    def capabilities(self) -> tuple[tuple[int, int], ...]:
        return tuple(d.capability for d in self.devices if d.capability is not None)

    def count(self, capability: tuple[int, int]) -> int:
        """How many devices have exactly this compute capability."""
        return sum(1 for d in self.devices if d.capability == capability)

    def kinds(self) -> list[tuple[Device, int]]:
        """Each distinct device with how many of it, by backend, arch, name and memory."""
        counts = Counter(self.devices)
        return [(d, counts[d]) for d in sorted(counts, key=lambda d: (d.backend, d.capability or (0, 0), d.arch,
                                                                       d.name, d.memory_gib or 0.0))]

    def describe(self) -> str:
        """``none`` or e.g. ``1x sm_90 (fp8), 4x NVIDIA B200 (sm_100, 178.4 GiB, fp4, fp8)``."""
        return ", ".join(f"{n}x {d.describe()}" for d, n in self.kinds()) or "none"


def requirement(tier: Tier) -> str:
    """What one device of ``tier`` must be: ``sm_90, name matching 'H200', >= 130 GiB (fp8)``;
    a tier of another backend than cuda says which (``rocm gfx942``, ``npu``)."""
    if tier.backend == "cuda":
        parts = [tier.arch]
    else:
        parts = [f"{tier.backend} {tier.arch}" if tier.backend == "rocm" else tier.backend]
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
    not match 'H200', 79.1 GiB < 130 GiB``. Kinds of device are separated by ``;``. With no device
    at all, what was asked says why: ``this machine has none (torch: CUDA not available)``.
    """
    if not tier.needs_gpu:
        return None
    fitting = sum(1 for d in hardware.devices if not d.gaps(tier))
    if fitting >= tier.gpu_count:
        return None
    unit = "GPU" if tier.backend in ("cuda", "rocm", "xpu") else "device"
    units = unit if tier.gpu_count == 1 else unit + "s"
    found = "; ".join(f"{n}x {d.describe()}" + (f": {', '.join(d.gaps(tier))}" if d.gaps(tier) else "")
                      for d, n in hardware.kinds()) or f"none ({hardware.source})"
    return f"tier {tier.name} needs {tier.gpu_count} {units} with {requirement(tier)}; this machine has {found}"


__all__ = ["Device", "Hardware", "capability_features", "missing", "requirement"]
