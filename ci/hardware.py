"""What GPUs this machine has, and whether a registry `Tier` can run here.

A tier is satisfied when the machine has at least ``tier.gpu_count`` CUDA devices whose compute
capability is exactly the tier's ``arch`` (``sm_100`` -> 10.0); the ``cpu`` tier is always
satisfied. torch is imported lazily, only when a GPU tier is actually checked, so linting and
CPU-only test runs never pay for it; no torch or no CUDA means "no GPUs".

For tests only: the environment variable ``CI_HARDWARE_OVERRIDE`` replaces the probe with a fake
machine, e.g. ``sm_100x4`` (four B200-class GPUs), ``sm_90,sm_100x2`` or ``none``.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass

from ci.registry import Tier, sm_capability

OVERRIDE_ENV = "CI_HARDWARE_OVERRIDE"


@dataclass(frozen=True)
class Hardware:
    """The local accelerators: one ``(major, minor)`` compute capability per CUDA device."""

    capabilities: tuple[tuple[int, int], ...] = ()
    source: str = "probe"

    def count(self, capability: tuple[int, int]) -> int:
        """How many devices have exactly this compute capability."""
        return sum(1 for c in self.capabilities if c == capability)

    def describe(self) -> str:
        """``none`` or e.g. ``1x sm_90, 4x sm_100``."""
        if not self.capabilities:
            return "none"
        counts = Counter(self.capabilities)
        return ", ".join(f"{n}x sm_{major}{minor}" for (major, minor), n in sorted(counts.items()))


def parse_override(text: str) -> Hardware:
    """Parse a fake machine: comma-separated ``sm_<cc>[x<count>]`` items, or ``none``/``cpu``/empty.

    Raises ValueError naming the bad item.
    """
    caps: list[tuple[int, int]] = []
    for item in (part.strip() for part in text.split(",")):
        if item.lower() in ("", "none", "cpu"):
            continue
        arch, sep, count_text = item.partition("x")
        try:
            capability = sm_capability(arch)
            count = int(count_text) if sep else 1
        except ValueError:
            raise ValueError(
                f"{OVERRIDE_ENV}: bad item {item!r}; expected 'sm_<major><minor>[x<count>]' "
                f"such as 'sm_100x4', or 'none'") from None
        if count < 1:
            raise ValueError(f"{OVERRIDE_ENV}: bad item {item!r}; the count must be >= 1")
        caps += [capability] * count
    return Hardware(tuple(caps), source=f"{OVERRIDE_ENV}={text}")


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
    caps = tuple(tuple(torch.cuda.get_device_capability(i)) for i in range(torch.cuda.device_count()))
    return Hardware(caps, source="torch.cuda")  # type: ignore[arg-type]


def missing(tier: Tier, hardware: Hardware) -> str | None:
    """None when ``tier`` can run on ``hardware``; otherwise a sentence saying what is missing.

    Example: ``tier gpu_b200 needs 1 GPU with sm_100 (fp8, fp4); this machine has none``.
    """
    if not tier.needs_gpu:
        return None
    if hardware.count(sm_capability(tier.arch)) >= tier.gpu_count:
        return None
    gpus = "GPU" if tier.gpu_count == 1 else "GPUs"
    features = f" ({', '.join(tier.features)})" if tier.features else ""
    return (f"tier {tier.name} needs {tier.gpu_count} {gpus} with {tier.arch}{features}; "
            f"this machine has {hardware.describe()}")


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


__all__ = ["OVERRIDE_ENV", "Hardware", "LazyHardware", "missing", "parse_override", "probe"]
